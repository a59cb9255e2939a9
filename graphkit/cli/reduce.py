"""reduce MODEL OUTDIR [--fails-on load|run|compare] [feed options]: the smallest subgraph that fails the same way.

When ONNX Runtime refuses to load a model, fails while running it, or (--fails-on compare) runs it to
values that leave tolerance against the reference side (ONNX Runtime without optimizations, onnx's
ReferenceEvaluator with --backend reference, or a second model given with --candidate), finds the smallest subgraph that
still fails the same way (same kind of failure, same operator) by bisection over cuts, and writes it
to OUTDIR with its inputs: model.onnx, inputs.npz, expected.npz (comparisons) and README.txt with the
command that reproduces the failure. The model may be one that onnx.checker or 'check' rejects.
"""

from __future__ import annotations

import argparse

from graphkit._backends import BACKENDS
from graphkit._options import DEFAULT_ATOL, DEFAULT_RTOL, Tolerance
from graphkit._reduce import FAILS_ON, Reduction, reduce, save_repro
from graphkit._run import input_specs
from graphkit.cli import _common, _render
from graphkit.cli._args import number
from graphkit.cli._custom import custom_op_reads, runtime_kwargs
from graphkit.cli._feeds import (
    add_feed_options,
    add_runtime_options,
    feed_args,
    provider_options,
    show_notes,
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("reduce", help="the smallest subgraph that fails the same way, with its inputs",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="the .onnx file (the reference model when a second one is given)")
    p.add_argument("outdir", help="the folder to write the repro into")
    p.add_argument("--candidate", dest="other", metavar="MODEL",
                   help="--fails-on compare: a second model, compared against the first (the reference)")
    p.add_argument("--fails-on", choices=list(FAILS_ON), default="run",
                   help="what the repro must keep doing: load (ONNX Runtime refuses it), run (it fails while "
                        "running; the default) or compare (its values leave tolerance)")
    add_feed_options(p)
    add_runtime_options(p, opt_level=False)
    p.add_argument("--backend", choices=sorted(BACKENDS),
                   help="compare: the reference side's backend (default: ort-noopt for one model, ort for two)")
    p.add_argument("--candidate-backend", choices=sorted(BACKENDS), default="ort",
                   help="compare: the candidate side's backend (default: ort)")
    p.add_argument("--atol", type=number(lo=0), default=DEFAULT_ATOL, help=f"compare: absolute tolerance (default {DEFAULT_ATOL:g})")
    p.add_argument("--rtol", type=number(lo=0), default=DEFAULT_RTOL, help=f"compare: relative tolerance (default {DEFAULT_RTOL:g})")
    p.add_argument("--overwrite", action="store_true", help="replace OUTDIR if it is not empty")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    _render.add_progress_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    model = _common.load(args.model)
    other = _common.load(args.other) if args.other else None
    specs = input_specs(model)
    parsed = feed_args(args, [s.name for s in specs], model.name, shapes_of=[s.shape for s in specs])
    plan = _common.plan(args, model, other, reads=[*((p, "a feed file") for p in parsed.files), *custom_op_reads(args)])
    plan.write_folder(args.outdir, "the repro folder")
    plan.check()
    show_notes(parsed)
    result = reduce(model, other, fails_on=args.fails_on, feeds=parsed.feeds, feed_options=parsed.options(),
                    backend=args.backend, candidate_backend=args.candidate_backend,
                    tolerance=Tolerance(args.atol, args.rtol), provider=args.provider,
                    provider_options=provider_options(args.provider_options),
                    progress=_render.progress("reduce", enabled=args.progress, unit="runs"), **runtime_kwargs(args))
    _render.progress_done()
    save_repro(result, args.outdir, overwrite=args.overwrite)
    if args.json:
        _render.json_out({**result.to_dict(), "outdir": args.outdir})
    else:
        render_reduction(result, args.outdir)
    return 0


def render_reduction(result: Reduction, outdir: str) -> None:
    """The repro in a few lines: what fails, what is kept, how many runs, the command."""
    failure = result.failure
    _render.text(f"{failure.kind} failure in {failure.op_type} node {failure.node!r}: {failure.message}")
    _render.text(f"kept {len(result.nodes)} of {result.source_nodes} nodes: {', '.join(result.nodes)}")
    _render.text(f"runs {result.runs} (a linear scan: {result.linear_runs})")
    command = " ".join(part.replace("{dir}", outdir) for part in result.command)
    _render.text(f"wrote {outdir}: reproduce with python -m graphkit {command}")
