"""convert IN OUT --float16 [--keep-io-types] [--keep-op OP ...] [--keep-node NAME ...] | --opset N: change a model's precision or opset.

``--float16`` turns float32 weights and computation into float16. Inputs that must stay float32
(Resize's scales, shapes, indices and what computes them), operators ONNX Runtime's CPU provider
refuses in float16 and the nodes or operators you name stay float32, with Casts only where the two
precisions meet. ``--keep-io-types`` keeps float32 graph inputs and outputs float32. Weights outside
float16's range are clamped and listed.

``--auto-mixed`` keeps float32 the fewest nodes needed for the outputs to stay within --atol/--rtol
of the float32 model's on seeded (or given) inputs: one walk over the float32 model, fragment by
fragment, gives its outputs and every node's own float16 error (each node again on the float32 values
of its inputs), nodes that overflow on their own stay float32, and a search over the nodes ranked by
their own error finds the fewest that bring the outputs back. Every run goes fragment by fragment, so
memory follows the fragment budget (--fragment-mb), not the model; a model within it runs each trial
in one session, as yours will. It prints which nodes stay float32 and why (their
own error), the work in passes (whole-model inferences) and ONNX Runtime session runs, and writes the
list as a recipe (--save-recipe, default OUT with .recipe.yaml) that ``edit IN OUT --recipe`` replays.

``--opset N`` converts to ai.onnx opset N, up or down: ONNX's version converter where it has
adapters, graphkit's own rewrites for the operators whose arguments moved between attributes and
inputs (Reduce*, Squeeze, Unsqueeze, Split, Clip, Pad), Resize 10/11, Softmax/LogSoftmax/Hardmax
across 13, and down from the forms the converter cannot convert down (Reshape, BatchNormalization,
Dropout, MaxPool, AveragePool), in bodies and local functions too. An operator the target lacks that
ONNX defines as a function (LayerNormalization, Gelu, Mish, HardSwish ...) becomes that function's
nodes; a model older than opset 7 is checked on onnx's ReferenceEvaluator. Every node that cannot be
converted is named with the reason; the result's outputs must equal the input's on seeded inputs,
or nothing is written.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from graphkit._backends import execute
from graphkit._compare import DEFAULT_FRAGMENT_BYTES, Backend, compare
from graphkit._convert import Float16Conversion, to_float16_with_report
from graphkit._mixed import MIXED_TOLERANCE, MixedPrecision, auto_mixed_precision
from graphkit._model import Model
from graphkit._opset import convert_opset_with_report
from graphkit._options import FeedOptions, Tolerance
from graphkit._ort import MIN_OPSET
from graphkit._recipe import Step, dump_recipe
from graphkit._run import input_specs, make_feeds
from graphkit.cli import _common, _render
from graphkit.cli._args import number, whole
from graphkit.cli._feeds import add_feed_options, feed_args, inputs_hint, show_notes, tolerance
from graphkit.errors import GraphkitError, RuntimeFailure, UsageError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("convert", help="convert a model to float16 or another opset", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", metavar="IN", help="the .onnx file to convert")
    p.add_argument("output", help="where to write the converted model")
    p.add_argument("--float16", action="store_true", help="convert float32 weights and computation to float16")
    p.add_argument("--opset", type=whole(lo=1, hi=onnx.defs.onnx_opset_version), metavar="N",
                   help="convert to ai.onnx opset N (up or down); the result's outputs are checked against the input's")
    p.add_argument("--keep-io-types", action="store_true",
                   help="keep float32 graph inputs and outputs float32 (Casts inside the model)")
    p.add_argument("--keep-op", nargs="+", default=[], metavar="OP", help="operators that stay float32")
    p.add_argument("--keep-node", nargs="+", default=[], metavar="NAME", help="nodes that stay float32")
    mixed = p.add_argument_group("mixed precision (--auto-mixed)")
    mixed.add_argument("--auto-mixed", action="store_true",
                       help="keep float32 the fewest nodes that keep the outputs within --atol/--rtol")
    mixed.add_argument("--atol", type=number(lo=0), default=MIXED_TOLERANCE.atol,
                       help=f"absolute tolerance of the outputs (default {MIXED_TOLERANCE.atol:g})")
    mixed.add_argument("--rtol", type=number(lo=0), default=MIXED_TOLERANCE.rtol,
                       help=f"relative tolerance of the outputs (default {MIXED_TOLERANCE.rtol:g})")
    mixed.add_argument("--fragment-mb", type=number(lo=0, hi=2.0**40, lo_open=True),
                       default=DEFAULT_FRAGMENT_BYTES / 2**20,
                       help="at most about how many MiB of weights and values each session of the search holds "
                            f"(default {DEFAULT_FRAGMENT_BYTES / 2**20:g}); a model within it runs each trial in one "
                            "session, as yours will")
    mixed.add_argument("--save-recipe", metavar="FILE",
                       help="where to write the kept nodes as a recipe (default: OUT with .recipe.yaml)")
    add_feed_options(p)
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="show the weights converted (--float16) or the search's runs (--auto-mixed) on stderr "
                        "(default: when stderr is a terminal)")
    p.add_argument("--json", action="store_true", help="print what was converted as JSON")
    _common.add_output_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.opset is not None and args.float16:
        raise UsageError("convert does one conversion at a time: --float16 or --opset",
                         hint="convert the opset first, then convert the result to float16")
    if args.opset is not None:
        return _run_opset(args)
    if not args.float16:
        raise UsageError("convert needs a conversion: --float16 or --opset N",
                         hint="e.g. graphkit convert in.onnx out.onnx --float16 --keep-io-types")
    if args.auto_mixed:
        return _run_mixed(args)
    model = _common.load(args.model)
    plan = _common.plan(args, model, output=args.output)
    plan.check()
    report = to_float16_with_report(model, keep_io_types=args.keep_io_types, keep_op=args.keep_op,
                                    keep_node=args.keep_node,
                                    progress=_render.progress("convert", enabled=args.progress, unit="weights"))
    _render.progress_done()
    saved = _common.write_model(report.model, args.output, args, plan)
    if args.json:
        _render.json_out({"output": str(saved.path), **report.to_dict()})
        return 0
    _show_float16(report, args.output)
    return 0


def _show_float16(report: Float16Conversion, output: str, *, header: bool = True) -> None:
    if header:
        _render.text(f"wrote {output}: {report.converted} nodes in float16, {len(report.kept)} kept float32, "
                     f"{report.casts} Cast(s) inserted, {report.weights} weight(s) converted")
    kept = [k for k in report.kept if header or not k.reason.startswith("auto-mixed")]
    if kept:
        listed = _render.capped(kept, LIMIT)
        _render.table([(k.node, k.op_type, k.reason) for k in listed],
                      ["kept float32" if header else "also float32", "op", "why"], indent=2)
        _render.more(len(listed), len(kept), "--json lists them", indent=2)
    for c in _render.capped(report.clamped, LIMIT):
        parts = []
        if c.over:
            parts.append(f"{c.over} value(s) beyond ±65504 (largest {c.max_abs:.3g})")
        if c.under:
            parts.append(f"{c.under} non-zero value(s) below 2**-24 set to ±2**-24")
        _render.warn(f"weight {c.tensor!r} ({c.graph}) clamped into float16's range: " + ", ".join(parts))
    if len(report.clamped) > LIMIT:
        _render.warn(f"… {len(report.clamped) - LIMIT} more weights clamped (--json lists them)")


def _run_mixed(args: argparse.Namespace) -> int:
    tol = tolerance(args.atol, args.rtol)
    model = _common.load(args.model)
    specs = input_specs(model)
    parsed = feed_args(args, [spec.name for spec in specs], model.name, shapes_of=[spec.shape for spec in specs])
    plan = _common.plan(args, model, output=args.output, reads=[(path, "a feed file") for path in parsed.files])
    if not args.save_recipe and not Path(args.output).name:
        raise UsageError(f"convert: the output {args.output!r} names no file, so no recipe name can be made from it",
                         hint="give an output file such as out.onnx, or the recipe's file with --save-recipe")
    recipe = args.save_recipe or str(Path(args.output).with_suffix(".recipe.yaml"))
    plan.write(recipe, "the recipe")
    plan.check()
    show_notes(parsed)
    result = auto_mixed_precision(model, tolerance=tol, feeds=parsed.feeds, feed_options=parsed.options(),
                                  keep_io_types=args.keep_io_types, keep_op=args.keep_op, keep_node=args.keep_node,
                                  progress=_render.progress("convert", enabled=args.progress, unit="runs"),
                                  fragment_bytes=max(1, int(args.fragment_mb * 2**20)))
    _render.progress_done()
    step = Step("to_float16", {"keep_io_types": args.keep_io_types, "keep_op": list(args.keep_op),
                               "keep_node": [*args.keep_node, *result.keep_node()]})
    with plan.output(recipe, "the recipe") as tmp:
        tmp.write_text(dump_recipe([step], recipe), encoding="utf-8")
    saved = _common.write_model(result.model, args.output, args, plan)
    if args.json:
        _render.json_out({"output": str(saved.path), "recipe": recipe, **result.to_dict()})
        return 0 if result.passed else 1
    _show_mixed(result, args.output, recipe)
    return 0 if result.passed else 1


def _show_mixed(result: MixedPrecision, output: str, recipe: str) -> None:
    tol = result.tolerance
    verdict = "within" if result.passed else "NOT within"
    _render.text(f"wrote {output} and {recipe}: {len(result.kept)} of {result.candidates} node(s) kept float32 "
                 f"by the search, outputs {verdict} atol {tol.atol:g} / rtol {tol.rtol:g}, "
                 f"{result.passes:g} model pass(es) ({result.trials} trial(s) after a walk measuring "
                 f"{result.measured} node(s)' own float16 error), in {result.runs} ONNX Runtime session run(s) "
                 f"({result.fragment_runs} for the walk, {result.trial_runs} for the trials)")
    if result.kept:
        listed = _render.capped(result.kept, LIMIT)
        _render.table([(k.node, k.op_type, k.reason + _figure(k)) for k in listed],
                      ["kept float32", "op", "why"], indent=2)
        _render.more(len(listed), len(result.kept), "--json lists them", indent=2)
    _render.table([(name, f"{err:.3g}") for name, err in result.output_errors.items()], ["output", "max abs error"],
                  indent=2)
    _show_float16(result.conversion, output, header=False)


def _figure(node: object) -> str:
    local = getattr(node, "local_max_abs", None)
    relative = getattr(node, "local_relative", None)
    out = getattr(node, "output_max_abs", None)
    parts = []
    if local is not None:
        parts.append(f"its own error {local:.3g}" + (f", {relative:.2g} relative (RMS)" if relative is not None
                                                      and math.isfinite(relative) and math.isfinite(local) else ""))
    if out is not None:
        parts.append(f"output error {out:.3g} when it is float16")
    return f" ({'; '.join(parts)})" if parts else ""


def _run_opset(args: argparse.Namespace) -> int:
    model = _common.load(args.model)
    specs = input_specs(model)
    parsed = feed_args(args, [spec.name for spec in specs], model.name, shapes_of=[spec.shape for spec in specs])
    plan = _common.plan(args, model, output=args.output, reads=[(path, "a feed file") for path in parsed.files])
    plan.check()
    show_notes(parsed)
    report = convert_opset_with_report(model, args.opset)  # (checked: never an artifact the checker rejects)
    worst = _same_outputs(model, report.model, report.target, parsed.feeds, parsed.options())
    saved = _common.write_model(report.model, args.output, args, plan, validated=True)
    if args.json:
        _render.json_out({"output": str(saved.path), "max_abs_error": worst, **report.to_dict()})
        return 0
    _render.text(f"wrote {args.output}: ai.onnx opset {report.source} -> {report.target}, "
                 f"{len(report.rewritten)} node(s) rewritten by graphkit"
                 + (", the rest by ONNX's version converter" if report.converter else "")
                 + ("; outputs equal to the input's" if worst == 0
                    else f"; outputs within tolerance of the input's (max abs difference {worst:.3g})"))
    for label in report.rewritten:
        _render.text(f"  {label}")
    return 0


def _same_outputs(model: Model, converted: Model, target: int, feeds: dict[str, Any], options: FeedOptions) -> float:
    """Compare the outputs of both on the same seeded inputs, fragment by fragment (compare's walk:
    memory follows its fragment budget, not the weights); refuse a conversion that changes one.

    A side whose ai.onnx opset is older than ONNX Runtime's oldest runs on onnx's ReferenceEvaluator
    (converting such a model up is how it comes to run in ONNX Runtime at all)."""
    outputs = [o.name for o in converted.lazy_proto.graph.output]
    for side, what in ((model, "the input model"), (converted, f"the model converted to opset {target}")):
        opset = _opset(side)
        if opset < MIN_OPSET:
            _render.note(f"{what} has ai.onnx opset {opset}, older than ONNX Runtime runs ({MIN_OPSET}): "
                         "it runs on onnx's ReferenceEvaluator")
    try:
        found = compare(model, converted, backend=_backend(model), candidate_backend=_backend(converted), feeds=feeds,
                        feed_options=options, tolerance=_OPSET_TOLERANCE, tensors=outputs,
                        tolerances={o.name: _HALF_TOLERANCE for o in converted.lazy_proto.graph.output
                                    if o.type.tensor_type.elem_type in _HALF})
    except GraphkitError as err:  # (whole runs say whose run fails, or check where the walk cannot)
        return _whole_check(model, converted, target, feeds, options, err)
    if found.failed:
        bad = found.failed[0]
        raise RuntimeFailure(f"the model converted to opset {target} computes output {bad.name!r} differently "
                             f"(max abs difference {bad.max_abs:.3g}){_first_node(model, converted, feeds, options)}; "
                             "nothing written", hint="choose another version, and report it")
    return max((float(t.max_abs) for t in found.tensors if t.max_abs == t.max_abs), default=0.0)


def _first_node(model: Model, converted: Model, feeds: dict[str, Any], options: FeedOptions) -> str:
    """", first at node N (Op), tensor T": where the converted model's values first differ (nothing is
    written, so the user cannot compare the two models)."""
    try:
        first = compare(model, converted, backend=_backend(model), candidate_backend=_backend(converted), feeds=feeds,
                        feed_options=options, tolerance=_OPSET_TOLERANCE).first_divergence
    except GraphkitError:
        return ""
    return f", first at node {first.node!r} ({first.op_type}), tensor {first.tensor!r}" if first is not None else ""


#: How close a converted model's outputs must be to the input's; a half-precision output within about
#: one unit in its last place (an expanded function's float16 Attention differed by 4.9e-4 at 1.0).
_OPSET_TOLERANCE = Tolerance(atol=1e-5, rtol=1e-4)
_HALF_TOLERANCE = Tolerance(atol=1e-3, rtol=1e-3)
_HALF = (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)


def _opset(model: Model) -> int:
    return next((o.version for o in model.lazy_proto.opset_import if o.domain in ("", "ai.onnx")), MIN_OPSET)


def _backend(model: Model) -> Backend:
    return "reference" if _opset(model) < MIN_OPSET else "ort"


def _whole_check(model: Model, converted: Model, target: int, feeds: dict[str, Any], options: FeedOptions,
                 err: GraphkitError) -> float:
    """The check by whole runs, where compare's walk failed: it says whose run fails (the input model's
    on the inputs the check made, which may not suit it, or the converted model's where the input
    runs), and where both run (a Scan whose body reads constants the walk's pieces take as inputs),
    compares their outputs. Returns the largest difference."""
    if not isinstance(err, RuntimeFailure):  # (inputs that cannot be made: a dtype numpy lacks, a shape unknown)
        raise type(err)(f"convert cannot check the result: {err.message}", hint=err.hint, cli_hint=err.cli_hint) from err
    inputs = make_feeds(model, feeds, feed_options=options)
    values = []
    for side in (model, converted):
        try:
            values.append(execute(side, inputs, [o.name for o in side.lazy_proto.graph.output], _backend(side),
                                  side.name))
        except RuntimeFailure as failure:
            if side is model:
                raise RuntimeFailure(f"convert cannot check the result: the input model fails on the check's "
                                     f"inputs: {failure.message}", hint=failure.hint,
                                     cli_hint=inputs_hint(failure.cli_hint)) from failure
            raise RuntimeFailure(f"the model converted to opset {target} fails where the input model runs: "
                                 f"{failure.message}; nothing written",
                                 hint="choose another version, and report it") from failure
    worst = 0.0
    for name, want in values[0].items():
        difference = _difference(want, values[1][name])
        if difference is None:
            continue
        if isinstance(difference, str):
            raise RuntimeFailure(f"the model converted to opset {target} computes output {name!r} differently "
                                 f"({difference}); nothing written",
                                 hint="choose another version, and report it")
        worst = max(worst, difference)
    return worst


def _difference(want: Any, got: Any) -> float | str | None:
    """The largest difference of two output values within the tolerance, what differs beyond it, or
    None where there is no number to tell (strings, equal)."""
    if isinstance(want, (list, tuple)) or isinstance(got, (list, tuple)):  # (a sequence output)
        if not isinstance(want, (list, tuple)) or not isinstance(got, (list, tuple)) or len(want) != len(got):
            return "a sequence of another length"
        found = [_difference(a, b) for a, b in zip(want, got)]
        return next((d for d in found if isinstance(d, str)), max((d for d in found if d is not None), default=None))
    want, got = np.asarray(want), np.asarray(got)
    if got.shape != want.shape:
        return f"shape {list(got.shape)} instead of {list(want.shape)}"
    if want.dtype.kind not in "fcbiu" or got.dtype.kind not in "fcbiu":  # (strings, objects)
        return None if np.array_equal(want, got) else "other values"
    tolerance = _HALF_TOLERANCE if want.dtype == np.float16 else _OPSET_TOLERANCE
    if not np.allclose(got, want, atol=tolerance.atol, rtol=tolerance.rtol, equal_nan=True):
        return f"max abs difference {float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))):.3g}"
    return float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)), initial=0.0))


#: Nodes (and clamped weights) listed before "… N more (--json lists them)".
LIMIT = 40
