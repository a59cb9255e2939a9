"""run MODEL [--input NAME=FILE] [--shape NAME=1x3x20x20] [--seed N] [--save out.npz] [--json]: run a model
through ONNX Runtime. Inputs not given are generated from the signature (seeded); every output is
shown with its dtype, shape and statistics."""

from __future__ import annotations

import argparse

from graphkit._compare import NonFinite, check_finite
from graphkit._feeds import npz_path, save_arrays
from graphkit._run import FeedNote, TensorStats, input_specs, run_detailed
from graphkit.cli import _common, _render
from graphkit.cli._custom import custom_op_reads, runtime_kwargs
from graphkit.cli._feeds import (
    add_feed_options,
    add_runtime_options,
    feed_args,
    ms,
    provider_options,
)
from graphkit.cli._render import human_bytes


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run a model through ONNX Runtime", description=__doc__)
    p.add_argument("model", help="the .onnx file")
    add_feed_options(p)
    add_runtime_options(p)
    p.add_argument("--output", action="append", default=None, metavar="NAME",
                   help="return this tensor (a graph output, or an intermediate tensor to expose); repeatable")
    p.add_argument("--save", metavar="OUT.npz",
                   help="save the inputs fed and the outputs to an .npz, keyed by name (a complete reference for compare)")
    p.add_argument("--overwrite", action="store_true", help=argparse.SUPPRESS)  # (--save never replaces an input)
    p.add_argument("--check-finite", action="store_true",
                   help="also find the first node (in execution order) producing NaN or Inf from finite inputs; "
                        "exit 1 when there is one")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    model = _common.load(args.model)
    specs = input_specs(model)
    parsed = feed_args(args, [s.name for s in specs], model.name, {s.name: s.dtype for s in specs},
                       shapes_of=[s.shape for s in specs])
    plan = _common.plan(args, model, reads=[*((path, "a feed file") for path in parsed.files), *custom_op_reads(args)])
    if args.save:
        plan.write(npz_path(args.save), "the saved values")
    plan.check()
    result = run_detailed(
        model, parsed.feeds, outputs=args.output, feed_options=parsed.options(), provider=args.provider,
        opt_level=args.opt_level, threads=args.threads, provider_options=provider_options(args.provider_options),
        **runtime_kwargs(args),
    )
    if args.save:
        save_arrays(args.save, {**result.inputs, **result.outputs}, plan=plan)
    finite = None
    if args.check_finite:
        finite = check_finite(model, result.inputs, backend="ort-noopt" if args.opt_level == "disable" else "ort",
                              provider=args.provider, provider_options=provider_options(args.provider_options),
                              **runtime_kwargs(args))
    code = 0 if finite is None or finite.passed else 1
    if args.json:
        data = result.to_dict()
        data["saved"] = args.save
        if finite is not None:
            data["first_nonfinite"] = None if finite.first_nonfinite is None else finite.first_nonfinite.to_dict()
            data["finite_notes"] = list(finite.notes)
        data["notes"] = list(parsed.notes)
        _render.json_out(data)
        return code
    _render.text(f"model    {result.model}   provider {result.provider}   opt-level {result.opt_level}")
    _render.text("inputs")
    render_feeds(result.feeds, args.seed)
    for note in parsed.notes:
        _render.text(f"  note: {note}")
    _render.text("outputs")
    render_stats(result.stats())
    _render.text(f"time     load {ms(result.load_seconds)}, run {ms(result.run_seconds)}")
    if args.save:
        _render.text(f"saved    {args.save}")
    if finite is not None:
        render_finite(finite.first_nonfinite, finite.notes, finite.checked)
    return code


def render_finite(first: NonFinite | None, notes: tuple[str, ...], checked: int) -> None:
    """The first node producing NaN/Inf from finite inputs, with its inputs' ranges (or that none does)."""
    for note in notes:
        _render.warn(note)
    if first is None:
        _render.text(f"finite   no node produces NaN or Inf from finite inputs ({checked} tensors checked)")
        return
    what = ", ".join(f"{n} {k}" for k, n in (("NaN", first.nan), ("Inf", first.inf)) if n)
    _render.text(f"NON-FINITE: node {first.node!r} ({first.op_type}) produces {what} in {first.tensor!r} "
                 "from finite inputs")
    rows = [(r.name, r.kind, "-" if r.min is None else f"{r.min:.6g}", "-" if r.max is None else f"{r.max:.6g}")
            for r in first.inputs]
    _render.table(rows, ["input", "kind", "min", "max"], indent=2)


def render_feeds(notes: tuple[FeedNote, ...], seed: int) -> None:
    """One line per input: dtype, shape, and how its value was made (with the dims chosen)."""
    rows = []
    for note in notes:
        if note.source == "given":
            how = "given"
        elif note.low is not None and note.low == note.high:
            how = f"fixed value {note.low:g} (--value)"
        else:
            how = f"generated (seed {seed}, range {note.low:g}..{note.high:g})"
            if note.chosen_dims:
                how += "; " + ", ".join(f"{k}={v}" for k, v in note.chosen_dims.items())
        rows.append((note.name, note.dtype, str(list(note.shape)), how))
    _render.table(rows, indent=2)


def render_stats(stats: list[TensorStats]) -> None:
    """A table of output statistics."""
    def num(v: float | None) -> str:
        return "-" if v is None else f"{v:.6g}"

    rows: list[tuple[str, ...]] = []
    for s in stats:
        extra = ", ".join(f"{n} {k}" for k, n in (("nan", s.nan), ("inf", s.inf)) if n)
        rows.append((s.name, s.dtype, str(list(s.shape)), num(s.min), num(s.max), num(s.mean), num(s.std),
                     human_bytes(s.nbytes), extra))
    header = ["name", "dtype", "shape", "min", "max", "mean", "std", "size"]
    if any(row[-1] for row in rows):
        header.append("non-finite")
    else:
        rows = [row[:-1] for row in rows]
    _render.table(rows, header, indent=2, optional=("std", "size", "mean"))
