"""convert IN OUT --float16 [--keep-io-types] [--keep-op OP ...] [--keep-node NAME ...]: change a model's precision.

``--float16`` turns float32 weights and computation into float16. Inputs that must stay float32
(Resize's scales, shapes, indices and what computes them), operators without a float16 kernel in
ONNX Runtime's CPU provider and the nodes or operators you name stay float32, with Casts only where
the two precisions meet. ``--keep-io-types`` keeps float32 graph inputs and outputs float32. Weights
outside float16's range are clamped and listed.
"""

from __future__ import annotations

import argparse

from graphkit._convert import Float16Conversion, to_float16_with_report
from graphkit.cli import _common, _render
from graphkit.errors import UsageError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("convert", help="convert a model to float16", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input", help="the .onnx file to convert")
    p.add_argument("output", help="where to write the converted model")
    p.add_argument("--float16", action="store_true", help="convert float32 weights and computation to float16")
    p.add_argument("--keep-io-types", action="store_true",
                   help="keep float32 graph inputs and outputs float32 (Casts inside the model)")
    p.add_argument("--keep-op", nargs="+", default=[], metavar="OP", help="operators that stay float32")
    p.add_argument("--keep-node", nargs="+", default=[], metavar="NAME", help="nodes that stay float32")
    p.add_argument("--json", action="store_true", help="print what was converted as JSON")
    _common.add_output_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not args.float16:
        raise UsageError("convert needs a conversion: --float16",
                         hint="e.g. graphkit convert in.onnx out.onnx --float16 --keep-io-types")
    model = _common.load(args.input)
    plan = _common.plan(args, model, output=args.output)
    plan.check()
    report = to_float16_with_report(model, keep_io_types=args.keep_io_types, keep_op=args.keep_op,
                                    keep_node=args.keep_node)
    saved = _common.write_model(report.model, args.output, args, plan)
    if args.json:
        _render.json_out({"output": str(saved.path), **report.to_dict()})
        return 0
    _show_float16(report, args.output)
    return 0


def _show_float16(report: Float16Conversion, output: str) -> None:
    _render.text(f"wrote {output}: {report.converted} nodes in float16, {len(report.kept)} kept float32, "
                 f"{report.casts} Cast(s) inserted, {report.weights} weight(s) converted")
    if report.kept:
        _render.table([(k.node, k.op_type, k.reason) for k in report.kept], ["kept float32", "op", "why"], indent=2)
    for c in report.clamped:
        parts = []
        if c.over:
            parts.append(f"{c.over} value(s) beyond ±65504 (largest {c.max_abs:.3g})")
        if c.under:
            parts.append(f"{c.under} non-zero value(s) below 2**-24 set to ±2**-24")
        _render.warn(f"weight {c.tensor!r} ({c.graph}) clamped into float16's range: " + ", ".join(parts))
