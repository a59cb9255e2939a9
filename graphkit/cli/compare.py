"""compare A.onnx [B.onnx] [--backend …] [--reference ref.npz]: per-tensor errors and the first divergence.

With one model and no reference, the model runs on ONNX Runtime with all optimizations (the candidate)
against ONNX Runtime without optimizations (the reference; ``--backend reference`` uses onnx's
ReferenceEvaluator, with spec-faithful kernels where onnx 1.23's deviate: BatchNormalization
opsets 7-13, LRN, Softmax/LogSoftmax/Hardmax before opset 13). With two models, the first is the reference. With ``--reference``, the model runs
against values in an .npz keyed by tensor or marker name. Exit 0 when every tensor is within
tolerance, 1 when one is not.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from typing import Any

from graphkit._compare import (
    BACKENDS,
    DEFAULT_FRAGMENT_BYTES,
    Comparison,
    TensorDiff,
    compare,
    load_mapping,
)
from graphkit._numbers import parse_float
from graphkit._options import DEFAULT_ATOL, DEFAULT_RTOL, Tolerance
from graphkit._reduce import reduce, save_repro
from graphkit._report import plotly_modules, view_command
from graphkit._run import input_specs
from graphkit.cli import _common, _render
from graphkit.cli._args import number, whole
from graphkit.cli._custom import custom_op_reads, runtime_kwargs
from graphkit.cli._feeds import (
    add_feed_options,
    add_runtime_options,
    feed_args,
    provider_options,
    show_notes,
)
from graphkit.cli.reduce import render_reduction
from graphkit.cli.run import render_feeds, render_finite
from graphkit.errors import UsageError

#: Above this many tensors, the table shows failures, markers and outputs only (``--all`` shows all).
_TABLE_LIMIT = 40


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="compare every tensor on two backends, two models or reference values",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="the .onnx file (the reference when a second model is given)")
    p.add_argument("other", nargs="?", help="a second .onnx file to compare against the first")
    p.add_argument("--backend", choices=sorted(BACKENDS),
                   help="the reference side's backend (default: ort-noopt for one model, ort for two)")
    p.add_argument("--candidate-backend", choices=sorted(BACKENDS), default="ort",
                   help="the candidate side's backend (default: ort, all optimizations)")
    p.add_argument("--reference", metavar="NPZ", help="reference values keyed by tensor or marker name")
    add_feed_options(p)
    add_runtime_options(p, opt_level=False)
    p.add_argument("--reference-provider", metavar="NAME",
                   help="the reference side's execution provider (default: --provider)")
    p.add_argument("--candidate-provider", metavar="NAME",
                   help="the candidate side's execution provider (default: --provider)")
    p.add_argument("--atol", action="append", default=[], metavar="[NAME=]FLOAT",
                   help=f"absolute tolerance, globally or per tensor/marker/glob (default {DEFAULT_ATOL:g})")
    p.add_argument("--rtol", action="append", default=[], metavar="[NAME=]FLOAT",
                   help=f"relative tolerance, globally or per tensor/marker/glob (default {DEFAULT_RTOL:g})")
    p.add_argument("--map", dest="mapping", metavar="JSON",
                   help='names that differ between the two models: {"name_in_A": "name_in_B"}')
    p.add_argument("--tensor", dest="tensors", action="append", metavar="NAME",
                   help="compare only this tensor, marker or glob pattern (repeatable)")
    p.add_argument("--constants", action="store_true",
                   help="also compare tensors computed from weights alone (ConstantOfShape, folded shapes)")
    p.add_argument("--marker-domain", default="my", help="the marker nodes' domain (default my)")
    p.add_argument("--marker-op", default="Debug", help="the marker nodes' op type (default Debug)")
    p.add_argument("--marker-attr", default="name", help="the attribute holding a marker's name (default name)")
    p.add_argument("--fragment-mb", type=number(lo=0, hi=2.0**40, lo_open=True), default=DEFAULT_FRAGMENT_BYTES / 2**20,
                   help="at most about how many MiB of tensors each fragment run exposes (bounds memory; "
                        "a small model's fragments expose a quarter of its weights and activations)")
    p.add_argument("--local-checks", type=whole(hi=2**31 - 1), default=64,
                   help="re-run at most this many failing nodes on reference inputs (local vs inherited)")
    p.add_argument("--all", dest="show_all", action="store_true", help="list every tensor, however many")
    _render.add_progress_option(p)
    p.add_argument("--check-finite", action="store_true",
                   help="also find the first candidate node producing NaN or Inf from finite inputs (exit 1 if any)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--save-report", metavar="JSON", help="also write the JSON report to this file")
    p.add_argument("--save-repro", metavar="DIR",
                   help="write the smallest subgraph around the first divergence that still diverges, with the "
                        "reference side's inputs and outputs and the command that reproduces it, into DIR")
    p.add_argument("--overwrite", action="store_true", help="let --save-repro replace a folder that is not empty")
    p.add_argument("--html", metavar="REPORT.html",
                   help="also write a self-contained HTML report (plots, sortable table; needs graphkit[report])")
    p.set_defaults(func=run)


def _tolerances(args: argparse.Namespace) -> tuple[float, float, dict[str, Tolerance]]:
    atol, per_atol = _parse_tol(args.atol, "--atol", DEFAULT_ATOL)
    rtol, per_rtol = _parse_tol(args.rtol, "--rtol", DEFAULT_RTOL)
    names = list(dict.fromkeys([*per_atol, *per_rtol]))
    return atol, rtol, {n: Tolerance(per_atol.get(n, atol), per_rtol.get(n, rtol)) for n in names}


def _parse_tol(items: Sequence[str], flag: str, default: float) -> tuple[float, dict[str, float]]:
    value, per = default, {}
    for item in items:
        name, sep, text = item.rpartition("=")
        number = parse_float(text, what=f"{flag} {item!r}", lo=0.0, hint=f"write {flag} 1e-5 or {flag} NAME=1e-3")
        if sep:
            per[name] = number
        else:
            value = number
    return value, per


def run(args: argparse.Namespace) -> int:
    atol, rtol, per_tensor = _tolerances(args)
    if args.fragment_mb <= 0:
        raise UsageError(f"--fragment-mb {args.fragment_mb:g} must be positive", hint="e.g. --fragment-mb 256")
    model = _common.load(args.model)
    other = _common.load(args.other) if args.other else None
    specs = input_specs(model)
    shapes_of = [s.shape for s in (*specs, *(input_specs(other) if other is not None else ()))]
    parsed = feed_args(args, [s.name for s in specs], model.name, {s.name: s.dtype for s in specs},
                       shapes_of=shapes_of)
    if args.mapping and other is None:
        raise UsageError("--map needs two models", hint="compare A.onnx B.onnx --map mapping.json")
    plan = _common.plan(args, model, other, reads=[
        (args.reference, "the reference values"), (args.mapping, "the --map file"),
        *((path, "a feed file") for path in parsed.files), *custom_op_reads(args)])
    if args.save_report:
        plan.write(args.save_report, "the report")
    if args.save_repro:
        if args.reference:
            raise UsageError("--save-repro needs a reference side to run, not --reference values",
                             hint="compare two models, or one model on two backends, with --save-repro")
        plan.write_folder(args.save_repro, "the repro folder")
    if args.html:
        plotly_modules()  # (a missing extra is an error before the comparison runs, not after)
        plan.write(args.html, "the HTML report")
    plan.check()
    show_notes(parsed)
    result = compare(
        model, other, reference=args.reference, backend=args.backend, candidate_backend=args.candidate_backend,
        feeds=parsed.feeds, feed_options=parsed.options(), tolerance=Tolerance(atol, rtol), tolerances=per_tensor,
        mapping=load_mapping(args.mapping) if args.mapping else None, tensors=args.tensors,
        constants=args.constants, marker_spec=(args.marker_domain, args.marker_op, args.marker_attr),
        fragment_bytes=int(args.fragment_mb * 2**20), local_checks=args.local_checks,
        progress=_render.progress("compare", enabled=args.progress), provider=args.provider,
        reference_provider=args.reference_provider, candidate_provider=args.candidate_provider,
        provider_options=provider_options(args.provider_options), check_finite=args.check_finite,
        **runtime_kwargs(args),
    )
    _render.progress_done()
    data = result.to_dict()
    data["notes"] = [*parsed.notes, *data["notes"]]
    candidate = other if other is not None else model
    if args.html:
        with plan.output(args.html) as tmp:
            tmp.write_text(result.to_html(candidate), encoding="utf-8")
    if args.save_report:
        with plan.output(args.save_report) as tmp:
            tmp.write_text(json.dumps(data, indent=2) + "\n")
    if args.json:
        _render.json_out(data)
    else:
        _print(result, show_all=args.show_all, seed=args.seed)
        command = view_command(result, args.other or args.model)
        if command:
            _render.text(f"  see it in Netron: {command}")
        if args.html:
            _render.text(f"report: {args.html}")
    if args.check_finite and not args.json:
        render_finite(result.first_nonfinite, (), len(result.tensors))
    if args.save_repro:
        _save_repro(args, result, model, other, parsed.feeds, parsed.options(), Tolerance(atol, rtol))
    return 0 if result.passed and result.first_nonfinite is None else 1


def _num(value: float) -> str:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf"
    return f"{value:.2e}" if value else "0"


def _row(t: TensorDiff) -> list[Any]:
    status = "ok" if t.passed else "FAIL" + (f" {t.origin}" if t.origin else "")
    shape = "x".join(str(d) for d in t.shape) or "scalar"
    return [t.label, t.op_type, t.dtype, shape, t.nonfinite or _num(t.max_abs), _num(t.max_rel), _num(t.mean_abs), _num(t.mse),
            f"{t.cosine:.6f}" if math.isfinite(t.cosine) else "nan", f"{100 * t.out_of_tolerance:.1f}%",
            _num(t.needed_atol), _num(t.needed_rtol), status]


_HEADER = ["tensor", "op", "dtype", "shape", "max_abs", "max_rel", "mean_abs", "MSE", "cosine", "out",
           "min_atol", "min_rtol", "status"]


#: Columns left out first when the table is too wide for the terminal.
_OPTIONAL = ("MSE", "min_rtol", "min_atol", "mean_abs", "max_rel", "shape", "cosine", "out")


def _print(result: Comparison, *, show_all: bool, seed: int = 0) -> None:
    _render.text(f"reference  {result.reference}")
    _render.text(f"candidate  {result.candidate}")
    if result.feeds:
        _render.text("inputs")
        render_feeds(result.feeds, seed)
    tensors = list(result.tensors)
    shown = tensors
    if len(tensors) > _TABLE_LIMIT and not show_all:
        shown = [t for t in tensors if not t.passed or t.marker]
        _render.text(f"({len(tensors) - len(shown)} passing tensors not listed; --all lists them)")
    listed = _render.capped(shown, _TABLE_LIMIT, show_all=show_all)
    _render.table([_row(t) for t in listed], _HEADER, optional=_OPTIONAL)
    _render.more(len(listed), len(shown))
    for t in tensors:
        if t.reason:
            _render.text(f"  {t.label}: {t.reason}")
        elif t.nan[0] or t.inf[0]:
            _render.text(f"  {t.label}: {t.nan[0]} NaN and {t.inf[0]} Inf on both sides")
    for note in result.notes:
        _render.warn(note)
    _print_matching(result, show_all=show_all)
    failed = result.failed
    tol = result.tolerance
    if result.passed:
        fused = f" ({len(result.fused)} fused or renamed)" if result.fused else ""
        _render.text(f"PASSED: {len(tensors)} tensors within atol {tol.atol:g}, rtol {tol.rtol:g}{fused}")
        return
    local = sum(1 for t in failed if t.origin == "local")
    inherited = sum(1 for t in failed if t.origin == "inherited")
    _render.text(f"FAILED: {len(failed)} of {len(tensors)} tensors out of tolerance "
                 f"({local} local, {inherited} inherited)")
    div = result.first_divergence
    if div is None:
        return
    marker = f" [marker {div.marker}]" if div.marker else ""
    error = f"NaN/Inf differ: {div.nonfinite}" if div.nonfinite else f"max abs error {_num(div.max_abs)}"
    _render.text(f"first divergence: node {div.node!r} ({div.op_type}) -> {div.tensor!r}{marker}, {error}")
    _render.text(f"  inputs: {', '.join(repr(i) for i in div.inputs if i)}")
    if len(div.fragment) > 1:
        _render.text(f"  re-ran the fragment {', '.join(repr(n) for n in div.fragment)} on the reference inputs")
    rerun = div.local_nonfinite or f"max abs {_num(div.local_max_abs or 0.0)}"
    if div.local is True:
        _render.text(f"  local: re-run on the reference side's inputs it still diverges "
                     f"({rerun}); this node is where the numbers go wrong")
    elif div.local is False:
        _render.text(f"  inherited: re-run on the reference side's inputs it agrees "
                     f"(max abs {_num(div.local_max_abs or 0.0)}); the error comes from its inputs")
    else:
        _render.text("  local check not run (no reference values for its inputs nearby)")
    if div.culprit:
        _render.text(f"culprit: {div.culprit!r}: {div.culprit_reason}")


def _names(names: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(repr(n) for n in names[:limit])
    return shown + (", …" if len(names) > limit else "")


_SHOWN_FUSIONS = 10  # groups fused by ONNX Runtime listed in the summary (--all lists them all)


def _print_matching(result: Comparison, *, show_all: bool = False) -> None:
    """How many tensors matched, what did not on each side, what was fused, and the outputs' verdict."""
    line = f"matched {len(result.tensors)} tensors"
    sides = [(result.unmatched, "the reference's"), (result.unmatched_candidate, "the candidate's")]
    parts = [f"{len(names)} of {side}" + (f" ({_names(names)})" if names else "") for names, side in sides]
    _render.text(f"{line}; unmatched: {parts[0]}, {parts[1]}")
    if result.renamed:
        shown = ", ".join(f"{a!r} -> {b!r}" for a, b in result.renamed[:3]) + (", …" if len(result.renamed) > 3 else "")
        _render.text(f"renamed: {len(result.renamed)} tensors that no name matched, paired by producer operator "
                     f"and execution order ({shown}); compared as pairs")
    renamed = {t.name for t in result.fused}
    runtime = [f for f in result.fusions if f.group]
    listed = _render.capped(runtime, _SHOWN_FUSIONS, show_all=show_all)
    for fusion in listed:
        _render.text(f"fused by ONNX Runtime: {fusion.tensor!r} ({fusion.op_type} {fusion.node!r}) from "
                     f"{_names(fusion.group)}; not compared: {_names(fusion.absorbed)}")
    _render.more(len(listed), len(runtime))
    for fusion in result.fusions:
        if fusion.group:
            continue
        what = "fused or renamed value" if fusion.tensor in renamed else "fused"
        absorbed = f", absorbing the reference's {_names(fusion.absorbed)}" if fusion.absorbed else ""
        _render.text(f"{what}: {fusion.tensor!r} ({fusion.op_type} {fusion.node!r}){absorbed}")
    verdict = result.outputs_passed
    if verdict is not None:
        outputs = [t for t in result.tensors if t.name in result.outputs]
        ok = sum(1 for t in outputs if t.passed)
        word = "within tolerance" if verdict else "OUT OF TOLERANCE"
        _render.text(f"graph outputs: {word} ({ok} of {len(outputs)} pass)")


def _save_repro(args: argparse.Namespace, result: Comparison, model: Any, other: Any, feeds: Any,
                options: Any, tolerance: Tolerance) -> None:
    """--save-repro: the smallest subgraph around the first divergence that still diverges."""
    div = result.first_divergence
    if div is None:
        _render.warn(f"nothing written to {args.save_repro}: no tensor left tolerance")
        return
    repro = reduce(model, other, fails_on="compare", feeds=feeds, feed_options=options, backend=args.backend,
                   candidate_backend=args.candidate_backend, tolerance=tolerance, provider=args.provider,
                   reference_provider=args.reference_provider, candidate_provider=args.candidate_provider,
                   provider_options=provider_options(args.provider_options), **runtime_kwargs(args),
                   divergence=(div.tensor, result.tensor(div.tensor).reference_name))
    save_repro(repro, args.save_repro, overwrite=args.overwrite)
    if not args.json:
        render_reduction(repro, args.save_repro)
