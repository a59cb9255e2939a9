"""markers IN OUT [--domain my --op Debug --attr name]: marker nodes → Identity nodes with exposed outputs.

Prints the marker-name → tensor-name map. ``compare`` accepts the marker names directly.
"""

from __future__ import annotations

import argparse

from graphkit._compare import markers
from graphkit.cli import _common, _render


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("markers", help="turn marker nodes into Identity nodes and expose their outputs",
                       description=__doc__)
    p.add_argument("model", help="the .onnx file with marker nodes")
    p.add_argument("output", help="where to write the model with Identity nodes")
    p.add_argument("--domain", default="my", help="the markers' domain (default my)")
    p.add_argument("--op", default="Debug", help="the markers' op type (default Debug)")
    p.add_argument("--attr", default="name", help="the attribute holding each marker's name (default name)")
    p.add_argument("--no-expose", dest="expose", action="store_false",
                   help="keep the graph outputs as they are (only replace the markers)")
    p.add_argument("--json", action="store_true", help="print the map as JSON")
    _common.add_output_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    model = _common.load(args.model)
    plan = _common.plan(args, model, output=args.output)
    plan.check()
    result = markers(model, domain=args.domain, op=args.op, attr=args.attr, expose=args.expose)
    saved = _common.write_model(result.model, args.output, args, plan)
    if args.json:
        _render.json_out({"output": str(saved.path), **result.to_dict()})
        return 0
    _render.table(list(result.markers.items()), ["marker", "tensor"])
    _render.text(f"wrote {saved.path}: {len(result.markers)} markers as Identity nodes"
                 + (", outputs exposed" if args.expose else ""))
    return 0
