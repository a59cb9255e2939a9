"""expose IN OUT --tensors T1 [T2 ...] | --all | --op-types Conv Add: add tensors as graph outputs.

The tensors become extra graph outputs, typed (value_info, shape inference, or one run in ONNX
Runtime; or ``NAME:DTYPE:[DIMS]``); nothing else changes. Tensors inside If/Loop/Scan bodies cannot
be graph outputs in ONNX.
"""

from __future__ import annotations

import argparse

from graphkit._extract import expose_with_report
from graphkit.cli import _common, _render
from graphkit.cli.extract import split_specs

#: New outputs listed before "… N more".
LIMIT = 40


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("expose", help="add intermediate tensors as graph outputs", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input", help="the source .onnx file")
    p.add_argument("output", help="where to write the model with the new outputs")
    p.add_argument("--tensors", nargs="+", metavar="TENSOR", default=[],
                   help="tensors to expose (NAME or NAME:DTYPE:[DIMS])")
    p.add_argument("--all", dest="all_tensors", action="store_true", help="expose every node output")
    p.add_argument("--op-types", nargs="+", metavar="OP", default=[],
                   help="expose the outputs of every node of these op types")
    p.add_argument("--no-observe", dest="observe", action="store_false",
                   help="never run ONNX Runtime to observe the types of the tensors")
    p.add_argument("--json", action="store_true", help="print what was added as JSON")
    _common.add_output_options(p)
    _common.add_noop_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    model = _common.load(args.input)
    plan = _common.plan(args, model, output=args.output)
    plan.check()
    tensors, types = split_specs(model, args.tensors)
    report = expose_with_report(model, tensors or [], op_types=args.op_types, all_tensors=args.all_tensors,
                                check=args.check, types=types, observe=args.observe)
    if not report.added:
        _common.refuse_noop(args, "nothing to expose: every tensor asked for is a graph output already",
                            "name intermediate tensors")
    saved = _common.write_model(report.model, args.output, args, plan, validated=True)
    for name in report.already_outputs:
        _render.warn(f"{name!r} is a graph output already; left as it is")
    for note in report.notes:
        _render.warn(note)
    if args.json:
        _render.json_out({"output": str(saved.path), **report.to_dict()})
        return 0
    _render.text(f"wrote {args.output}: {len(report.added)} new output(s), "
                 f"{len(report.model.lazy_proto.graph.output)} in all")
    shown = _render.capped(report.added, LIMIT)
    _render.table([(s.name, s.dtype, s.shape_text()) for s in shown], indent=2)
    _render.more(len(shown), len(report.added), "--json lists them", indent=2)
    return 0
