"""simplify IN OUT: the same computation in fewer nodes (constant and shape folding, dead code, ...).

Passes, in rounds until none changes anything: Constant nodes to initializers, Identity and
Dropout (inference) removed, Shape/Size of static dims folded, constant folding through ONNX
Runtime (values up to --max-bytes), identical constants merged, dead nodes and unused
initializers, inputs, functions and opsets removed; in If/Loop/Scan bodies too. External weights
stay on disk. The result is standard ONNX; --target onnxruntime also fuses attention, GELU and
Add + LayerNormalization into ONNX Runtime's contrib operators (the result then runs in ONNX
Runtime only). Prints the op counts before and after. Unless --no-verify, the result and the input
run on the same seeded inputs and a result whose outputs differ beyond tolerance is not written
(exit 1, with the first divergence).
"""

from __future__ import annotations

import argparse
from typing import Any

from graphkit._compare import Comparison, compare
from graphkit._model import Model
from graphkit._options import DEFAULT_ATOL, DEFAULT_RTOL, Tolerance
from graphkit._run import input_specs, make_feeds
from graphkit._run import run as run_model
from graphkit._simplify import (
    DEFAULT_MAX_BYTES,
    ORT_PASSES,
    PASSES,
    TARGETS,
    Simplification,
    simplify_with_report,
)
from graphkit.cli import _common, _render
from graphkit.cli._args import number, whole
from graphkit.cli._feeds import add_feed_options, feed_args, inputs_hint, show_notes
from graphkit.errors import GraphkitError, RuntimeFailure


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("simplify", help="fold constants and shapes, remove what computes nothing",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="the .onnx file to simplify")
    p.add_argument("output", help="where to write the simplified model")
    p.add_argument("--json", action="store_true", help="print the counts (and the verification) as JSON")
    p.add_argument("--no-verify", dest="verify", action="store_false",
                   help="write without running the result against the input")
    p.add_argument("--max-bytes", type=whole(), default=DEFAULT_MAX_BYTES, metavar="N",
                   help=f"largest folded value stored, in bytes (default {DEFAULT_MAX_BYTES})")
    p.add_argument("--target", choices=TARGETS, default="onnx",
                   help="what the result may use: standard ONNX (onnx, the default: it runs wherever the input "
                        "did) or ONNX Runtime's contrib operators too (onnxruntime: attention, GELU and "
                        "Add + LayerNormalization fused; the result runs in ONNX Runtime only)")
    p.add_argument("--skip", action="append", default=[], choices=PASSES + ORT_PASSES, metavar="PASS",
                   help="leave out a pass (repeatable): " + ", ".join(PASSES) + "; with --target onnxruntime also "
                        + ", ".join(ORT_PASSES))
    p.add_argument("--atol", type=number(lo=0), default=DEFAULT_ATOL, help=f"verification's absolute tolerance (default {DEFAULT_ATOL:g})")
    p.add_argument("--rtol", type=number(lo=0), default=DEFAULT_RTOL, help=f"verification's relative tolerance (default {DEFAULT_RTOL:g})")
    add_feed_options(p)
    _render.add_progress_option(p)
    _common.add_output_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    model = _common.load(args.model)
    specs = input_specs(model)
    parsed = feed_args(args, [spec.name for spec in specs], model.name,
                       shapes_of=[spec.shape for spec in specs]) if args.verify else None
    plan = _common.plan(args, model, output=args.output,
                        reads=[(path, "a feed file") for path in (parsed.files if parsed else ())])
    plan.check()
    if parsed is not None:
        show_notes(parsed)
    report = simplify_with_report(model, max_bytes=args.max_bytes, check=args.check,
                                  passes=[p for p in PASSES + ORT_PASSES if p not in args.skip
                                          and (args.target == "onnxruntime" or p in PASSES)], target=args.target,
                                  progress=_render.progress("simplify", enabled=args.progress, unit="passes"))
    _render.progress_done()
    verified = None
    if parsed is not None and report.model is not model:
        verified = _verify(model, report.model, parsed.feeds, parsed.options(), Tolerance(args.atol, args.rtol),
                           progress=args.progress)
    if verified is not None and not verified.passed:
        _show(args, report, verified, written=False)
        return 1
    _common.write_model(report.model, args.output, args, plan, validated=report.model is not model)
    _show(args, report, verified, written=True)
    return 0


def _verify(model: Model, result: Model, feeds: Any, options: Any, tolerance: Tolerance,
            *, progress: bool | None) -> Comparison:
    """The outputs of ``result`` against ``model``'s on the same inputs; when they differ, every tensor
    both still have, so that the first divergence names a node."""
    outputs = [o.name for o in result.lazy_proto.graph.output]
    try:
        first = compare(model, result, feeds=feeds, feed_options=options, tolerance=tolerance, tensors=outputs,
                        progress=_render.progress("simplify: verify", enabled=progress))
    except GraphkitError as err:
        _render.progress_done()
        raise _unverified(model, result, feeds, options, err) from err
    _render.progress_done()
    if first.passed:
        return first
    found = compare(model, result, feeds=feeds, feed_options=options, tolerance=tolerance,
                    progress=_render.progress("simplify: first divergence", enabled=progress))
    _render.progress_done()
    return found


def _unverified(model: Model, result: Model, feeds: Any, options: Any, err: GraphkitError) -> GraphkitError:
    """The error of a check that could not run, saying whose fault it is: inputs the input model
    cannot take (generated ones may not suit it), or a result that fails where the input runs."""
    unchecked = "or write the result unchecked (--no-verify)"
    if not isinstance(err, RuntimeFailure):  # (inputs that cannot be made: a dtype numpy lacks, a shape unknown)
        return type(err)(f"simplify cannot check the result: {err.message}", hint=err.hint,
                         cli_hint=f"{err.cli_hint or err.hint}; {unchecked}")
    inputs = make_feeds(model, feeds, feed_options=options)
    for side in (model, result):
        try:
            run_model(side, inputs)
        except RuntimeFailure as failure:
            if side is model:
                return RuntimeFailure(f"simplify cannot check the result: the input model fails on the check's "
                                      f"inputs: {failure.message}", hint=failure.hint,
                                      cli_hint=inputs_hint(failure.cli_hint, unchecked))
            return RuntimeFailure(f"the simplified model fails in ONNX Runtime where the input model runs: "
                                  f"{failure.message}; nothing written",
                                  hint="leave passes out (--skip PASS) to find the one that breaks it, and report it")
    return RuntimeFailure(f"simplify cannot check the result: {err.message}", hint=err.hint,
                          cli_hint=f"{err.cli_hint or err.hint}; {unchecked}")


def _show(args: argparse.Namespace, report: Simplification, verified: Comparison | None, *, written: bool) -> None:
    if args.json:
        data = report.to_dict()
        data["output"] = args.output if written else None
        data["target"] = args.target
        data["verified"] = None if verified is None else verified.passed
        if verified is not None and verified.first_divergence is not None:
            data["first_divergence"] = verified.first_divergence.to_dict()
        _render.json_out(data)
        return
    ops = sorted(set(report.before) | set(report.after))
    rows = [[op, report.before.get(op, 0), report.after.get(op, 0)] for op in ops]
    rows.append(["total", report.nodes_before, report.nodes_after])
    _render.table(rows, ["op", "input", "simplified"])
    done = ", ".join(f"{name} {count}" for name, count in report.changes.items() if count)
    _render.text(f"passes ({report.rounds} round{'s' if report.rounds != 1 else ''}): {done or 'nothing to simplify'}")
    if verified is None:
        _render.text("not verified (--no-verify)" if not args.verify else "unchanged: nothing to verify")
    elif verified.passed:
        _render.text(f"verified: {len(verified.tensors)} output(s) within tolerance on seeded inputs")
    else:
        failed = verified.failed
        div = verified.first_divergence
        where = (f"first divergence: node {div.node!r} ({div.op_type}) -> {div.tensor!r}, max abs error {div.max_abs:.3g}"
                 if div is not None else f"{failed[0].label}: max abs error {failed[0].max_abs:.3g}")
        _render.warn(f"not written: the simplified model's outputs differ from the input's ({len(failed)} tensor(s) "
                     f"out of tolerance); {where}")
    if written:
        _render.text(f"wrote {args.output}")
