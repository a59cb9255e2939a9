"""merge A B OUT [--connect A_OUT=B_IN …]: join two models, outputs of A feeding inputs of B, or side by side.

Without --connect both models run side by side (an ensemble, two heads): graph inputs of the same
name and type are shared (--share-inputs, the default) or kept apart (--no-share-inputs), and the
outputs of both are the merged model's. Names of both models can be prefixed (--prefixes a/ b/) to
avoid clashes; subgraphs and node names are prefixed too, a shared input keeps its name. Opset
imports are reconciled (or the error names the operators that differ) and the higher ir_version
kept. External weights of both stay on disk and are written into one data file.
"""

from __future__ import annotations

import argparse

from graphkit._edit import merge
from graphkit.cli import _common, _render
from graphkit.errors import UsageError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("merge", help="join two models (outputs of one feed inputs of the other, or side by side)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("first", help="the model whose outputs feed the second")
    p.add_argument("second", help="the model fed by the first")
    p.add_argument("output", help="where to write the merged model")
    p.add_argument("--connect", metavar="A_OUT=B_IN", action="append", default=[],
                   help="connect output A_OUT of the first model to input B_IN of the second (repeatable); "
                        "without it the models run side by side")
    p.add_argument("--share-inputs", action=argparse.BooleanOptionalAction, default=True,
                   help="side by side, feed inputs of the same name and type from one input (default; "
                        "--no-share-inputs keeps them apart, with --prefixes)")
    p.add_argument("--prefixes", nargs=2, metavar=("A_PREFIX", "B_PREFIX"),
                   help="prefix every name of each model (e.g. a/ b/)")
    p.add_argument("--outputs", nargs="+", metavar="NAME", help="the merged model's outputs (prefixed names)")
    p.add_argument("--json", action="store_true", help="print a JSON summary")
    _common.add_output_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    connect: dict[str, str] = {}
    for item in args.connect:
        left, sep, right = item.partition("=")
        if not sep or not left or not right:
            raise UsageError(f"--connect {item!r}: expected A_OUT=B_IN", hint="e.g. --connect y=x")
        connect[left] = right
    first, second = _common.load(args.first), _common.load(args.second)
    plan = _common.plan(args, first, second, output=args.output)
    plan.check()
    result = merge(first, second, connect, prefixes=tuple(args.prefixes) if args.prefixes else None,
                   outputs=args.outputs, share_inputs=args.share_inputs, check=False)
    _common.write_model(result, args.output, args, plan)
    report = {"output": args.output, "nodes": len(result.lazy_proto.graph.node),
              "inputs": [i.name for i in result.lazy_proto.graph.input if i.name not in {t.name for t in result.lazy_proto.graph.initializer}],
              "outputs": [o.name for o in result.lazy_proto.graph.output], "connected": connect,
              "opsets": {o.domain or "ai.onnx": o.version for o in result.lazy_proto.opset_import},
              "ir_version": result.lazy_proto.ir_version}
    if args.json:
        _render.json_out(report)
    else:
        _render.text(f"wrote {args.output}: {report['nodes']} nodes; inputs {', '.join(report['inputs'])}; "
                     f"outputs {', '.join(report['outputs'])}")
    return 0
