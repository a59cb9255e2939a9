"""toposort IN OUT: write the model with its nodes in a valid execution order (stable)."""

from __future__ import annotations

import argparse

from graphkit._validate import toposort
from graphkit.cli import _common, _render


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("toposort", help="sort nodes topologically", description=__doc__)
    p.add_argument("input", help="the .onnx file to sort")
    p.add_argument("output", help="where to write the sorted model")
    p.add_argument("--json", action="store_true", help="print what moved as JSON")
    _common.add_output_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    model = _common.load(args.input)
    plan = _common.plan(args, model, output=args.output)
    plan.check()
    before = [n.SerializeToString() for n in model.lazy_proto.graph.node]
    result = toposort(model)
    after = [n.SerializeToString() for n in result.lazy_proto.graph.node]
    moved = sum(1 for a, b in zip(before, after) if a != b)
    _common.write_model(result, args.output, args, plan)
    if args.json:
        _render.json_out({"output": args.output, "nodes": len(after), "moved": moved})
    else:
        _render.text(f"wrote {args.output}: {len(after)} nodes, "
                     + (f"{moved} moved" if moved else "already in order (unchanged)"))
    return 0
