"""infer-shapes IN OUT: write the model with a type for every intermediate tensor (bodies too).

Dims stay symbolic (a dim derived from 'batch' stays 'batch'; an unknown one gets a fresh name);
declared types that inference contradicts are replaced and listed; what no source could type is
listed by node. Weights are never read.
"""

from __future__ import annotations

import argparse

from graphkit._infer import infer_shapes_with_report
from graphkit.cli import _common, _render


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("infer-shapes", help="type every intermediate tensor (value_info)", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input", help="the .onnx file to type")
    p.add_argument("output", help="where to write the typed model")
    p.add_argument("--no-observe", dest="observe", action="store_false",
                   help="never run ONNX Runtime to observe the rank of a tensor inference leaves unranked")
    p.add_argument("--json", action="store_true", help="print the counts and lists as JSON")
    _common.add_output_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    model = _common.load(args.input)
    plan = _common.plan(args, model, output=args.output)
    plan.check()
    report = infer_shapes_with_report(model, observe=args.observe, check=args.check)
    saved = _common.write_model(report.model, args.output, args, plan, validated=True)
    if args.json:
        _render.json_out({"output": str(saved.path), **report.to_dict()})
        return 0
    _render.text(f"wrote {args.output}: {report.typed} tensors typed, {len(report.untyped)} untyped, "
                 f"{len(report.replaced)} declared types replaced")
    if report.replaced:
        _render.text("replaced (the model's declared type contradicted inference):")
        replaced = _render.capped(report.replaced, LIMIT)
        _render.table([(r.tensor, r.kind, r.graph, f"{r.before} -> {r.after}") for r in replaced], indent=2)
        _render.more(len(replaced), len(report.replaced), "--json lists them", indent=2)
    if report.untyped:
        _render.text("untyped:")
        untyped = _render.capped(report.untyped, LIMIT)
        _render.table([(u.tensor, f"{u.node} ({u.op_type})", u.graph, u.reason) for u in untyped], indent=2)
        _render.more(len(untyped), len(report.untyped), "--json lists them", indent=2)
    return 0


#: Tensors listed per list before "… N more (--json lists them)".
LIMIT = 40
