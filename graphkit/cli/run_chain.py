"""run-chain OUTDIR [--input NAME=FILE] [--shape …] [--json]: run a split's fragments in order through ONNX
Runtime, each fed by the graph inputs and the earlier fragments' outputs, and compare the final outputs
with a run of the whole model when it is at hand. Exit 1 when an output differs beyond the tolerance."""

from __future__ import annotations

import argparse

import numpy as np

from graphkit._chain import ChainResult, run_chain
from graphkit._feeds import npz_path, save_arrays
from graphkit._run import tensor_stats
from graphkit._split import MANIFEST, load_split
from graphkit.cli import _common, _render
from graphkit.cli._args import number
from graphkit.cli._custom import custom_op_reads, runtime_kwargs
from graphkit.cli._feeds import (
    add_feed_options,
    add_runtime_options,
    feed_args,
    ms,
    provider_options,
    show_notes,
    tolerance,
)
from graphkit.cli._render import human_bytes
from graphkit.cli.run import render_feeds, render_stats


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run-chain", help="run a split's fragments in order and compare with the whole model",
                       description=__doc__)
    p.add_argument("outdir", help="the split folder (or its manifest.json)")
    add_feed_options(p)
    add_runtime_options(p)
    p.add_argument("--source", metavar="MODEL", help="the whole model to compare with (default: the manifest's)")
    p.add_argument("--no-compare", dest="compare", action="store_false", help="do not run the whole model")
    p.add_argument("--rtol", type=number(lo=0.0), default=1e-4, help="relative tolerance (default 1e-4)")
    p.add_argument("--atol", type=number(lo=0.0), default=1e-5, help="absolute tolerance (default 1e-5)")
    p.add_argument("--save", metavar="OUT.npz", help="save the chain's outputs to an .npz")
    p.add_argument("--overwrite", action="store_true", help=argparse.SUPPRESS)  # (--save never replaces an input)
    p.add_argument("--json", action="store_true", help="print JSON")
    _render.add_progress_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    chain = load_split(args.outdir)
    reference, why = (None, "comparison turned off (--no-compare)")
    if args.compare and args.source:
        reference, why = _common.load(args.source), f"compared with {args.source}"
    elif args.compare:
        reference, why = chain.find_source()
    parsed = feed_args(args, [p.name for p in chain.inputs], "the chain",
                       {p.name: np.dtype(p.dtype) for p in chain.inputs}, shapes_of=[p.shape for p in chain.inputs])
    plan = _common.plan(args, reference, *(f.model for f in chain), reads=[
        (chain.folder / MANIFEST if chain.folder is not None else None, "the split manifest"),
        *((path, "a feed file") for path in parsed.files), *custom_op_reads(args)])
    if args.save:
        plan.write(npz_path(args.save), "the saved values")
    plan.check()
    show_notes(parsed)
    result = run_chain(
        chain, parsed.feeds, reference=reference, feed_options=parsed.options(),
        tolerance=tolerance(args.atol, args.rtol), provider=args.provider, opt_level=args.opt_level,
        threads=args.threads, provider_options=provider_options(args.provider_options), **runtime_kwargs(args),
        progress=_render.progress("run-chain", enabled=args.progress, unit="fragments"),
    )
    _render.progress_done()
    if args.save:
        save_arrays(args.save, result.outputs, plan=plan)
    if args.json:
        data = result.to_dict()
        data["comparison"] = why
        _render.json_out(data)
    else:
        render(result, args.seed, why)
    return 0 if result.passed else 1


def render(result: ChainResult, seed: int, why: str) -> None:
    """Feeds, per-fragment times and sizes, outputs, and the comparison with the whole model."""
    _render.text(f"provider {result.provider}   opt-level {result.opt_level}")
    _render.text("inputs")
    render_feeds(result.feeds, seed)
    _render.text("fragments")
    frows = [(f"#{f.index}", f.name, str(f.nodes), ms(f.load_seconds), ms(f.run_seconds), human_bytes(f.peak_output_bytes),
             human_bytes(f.live_bytes)) for f in result.fragments]
    _render.table(frows, ["#", "fragment", "nodes", "load", "run", "peak output", "held after"], indent=2)
    chain_run = sum(f.run_seconds for f in result.fragments)
    line = f"chain    load {ms(result.chain_seconds - chain_run)}, run {ms(chain_run)}"
    if result.whole_run_seconds is not None and result.whole_load_seconds is not None:
        line += f"   whole model: load {ms(result.whole_load_seconds)}, run {ms(result.whole_run_seconds)}"
    _render.text(line)
    _render.text("outputs")
    render_stats([tensor_stats(n, v) for n, v in result.outputs.items()])
    if not result.compared:
        _render.text(f"not compared: {why}")
        return
    _render.text(f"comparison ({why}; rtol {result.tolerance.rtol:g}, atol {result.tolerance.atol:g})")
    rows: list[tuple[str, ...]] = []
    for d in result.diffs:
        verdict = "exact" if d.exact else "ok" if d.passed else "MISMATCH"
        rows.append((d.name, verdict, "-" if d.max_abs is None else f"{d.max_abs:.3g}",
                     "-" if d.max_rel is None else f"{d.max_rel:.3g}", d.note))
    header = ["output", "result", "max abs diff", "max rel diff"]
    if any(row[-1] for row in rows):
        header.append("note")
    else:
        rows = [row[:-1] for row in rows]
    _render.table(rows, header, indent=2)
    if result.passed:
        _render.text("OK: the chain matches the whole model" + (" exactly" if result.exact else " within tolerance"))
    else:
        _render.text("MISMATCH: the chain's outputs differ from the whole model's")
