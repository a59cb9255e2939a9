"""inspect MODEL [--json]: inputs, outputs, opsets, op types, weights, subgraphs — no weights read."""

from __future__ import annotations

import argparse

from graphkit._summary import summarize
from graphkit.cli import _common, _render


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("inspect", help="describe a model's structure", description=__doc__)
    p.add_argument("model", help="the .onnx file")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)




def run(args: argparse.Namespace) -> int:
    s = summarize(_common.load(args.model))
    if args.json:
        _render.json_out(s.to_dict())
        return 0
    _render.text(f"model      {s.path}")
    _render.text(f"graph      {s.graph_name!r}   ir_version {s.ir_version}   "
                 + "opsets " + ", ".join(f"{d}={v}" for d, v in s.opsets.items()))
    if s.producer:
        _render.text(f"producer   {s.producer} {s.producer_version}".rstrip())
    _render.text("inputs")
    _render.table([(t.name, t.dtype, t.shape_text()) for t in s.inputs], indent=2)
    _render.text("outputs")
    _render.table([(t.name, t.dtype, t.shape_text()) for t in s.outputs], indent=2)
    _render.text(f"nodes      {s.node_count}: " + ", ".join(f"{op}×{n}" for op, n in s.op_types.items()))
    _render.text(f"weights    {s.initializer_count} initializers, {_render.human_bytes(s.initializer_bytes)}"
                 + (f" ({_render.human_bytes(s.external_bytes)} external in {', '.join(s.external_files)})" if s.external_files else ""))
    for label, values in (("subgraphs", s.subgraphs), ("custom", s.custom_domains), ("functions", s.functions)):
        if values:
            _render.text(f"{label:<10} " + ", ".join(values))
    for key, value in s.metadata.items():
        _render.text(f"metadata   {key} = {value}")
    return 0
