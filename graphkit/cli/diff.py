"""diff A.onnx B.onnx [--atol --rtol] [--json]: what changed between two models. Exit 0 same, 1 different.

Nodes are matched by name, then by structure; weights are compared one pair at a time.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from graphkit._diff import diff
from graphkit.cli import _common, _render
from graphkit.cli._args import number
from graphkit.cli._feeds import tolerance

_MARK = {"added": "+", "removed": "-", "changed": "~"}
#: ``--only`` kinds → the ``Change.what`` values they select.
KINDS = {"nodes": {"node", "function"}, "weights": {"initializer"}, "shapes": {"input", "output", "value_info"},
         "metadata": {"model", "opset", "metadata"}}
#: Changes listed before "… N more (--all)".
LIMIT = 40


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("diff", help="structural diff of two models (nodes, weights, inputs/outputs, opsets)",
                       description=__doc__)
    p.add_argument("a", help="the first (old) .onnx file")
    p.add_argument("b", help="the second (new) .onnx file")
    p.add_argument("--atol", type=number(lo=0.0), default=0.0, help="absolute tolerance for weight values (default 0)")
    p.add_argument("--rtol", type=number(lo=0.0), default=0.0, help="relative tolerance for weight values (default 0)")
    p.add_argument("--only", choices=sorted(KINDS), action="append", default=[],
                   help="only changes of this kind (repeatable): nodes, weights, shapes or metadata")
    p.add_argument("--all", dest="show_all", action="store_true", help="list every change, however many")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    result = diff(_common.load(args.a), _common.load(args.b), tolerance=tolerance(args.atol, args.rtol))
    if args.only:
        wanted = set().union(*(KINDS[k] for k in args.only))
        result = replace(result, changes=tuple(c for c in result.changes if c.what in wanted))
    if args.json:
        _render.json_out(result.to_dict())
        return 0 if result.identical else 1
    _render.text(f"--- {result.a}")
    _render.text(f"+++ {result.b}")
    shown = _render.capped(result.changes, LIMIT, show_all=args.show_all)
    for c in shown:
        where = f"  (in {c.graph})" if c.graph != "main graph" else ""
        detail = f": {c.detail}" if c.detail else ""
        _render.text(f"{_MARK[c.kind]} {c.what} {c.name!r}{detail}{where}")
    _render.more(len(shown), len(result.changes))
    if result.identical:
        _render.text(f"identical ({result.matched_by_name} nodes matched by name)")
        return 0
    counts = ", ".join(f"{n} {k}" for k, n in result.counts().items())
    _render.text(f"{len(result.changes)} differences: {counts}; nodes matched {result.matched_by_name} by name, "
                 f"{result.matched_by_structure} by structure")
    return 1
