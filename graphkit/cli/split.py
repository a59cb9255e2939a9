"""split IN OUTDIR (--at T1 T2 … | --parts N): cut a model into fragments that partition its nodes, in
execution order, and write them with a manifest (manifest.json: order, each fragment's inputs with
where each comes from, outputs, node count, weight bytes). Check the result with run-chain."""

from __future__ import annotations

import argparse

from graphkit._split import MANIFEST, Split, split, write_split
from graphkit.cli import _common, _render
from graphkit.cli._args import whole
from graphkit.cli._custom import add_custom_op_options, custom_op_reads, runtime_kwargs
from graphkit.cli._render import human_bytes


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("split", help="split a model into fragments (with a manifest)", description=__doc__)
    p.add_argument("model", help="the .onnx file")
    p.add_argument("outdir", help="the folder to write the fragments and manifest.json into")
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--at", nargs="+", metavar="TENSOR",
                     help="cut tensors in execution order: fragment k computes what tensor k needs")
    how.add_argument("--parts", type=whole(lo=1, hi=2**31 - 1), metavar="N", help="cut into N balanced fragments")
    p.add_argument("--balance", choices=["nodes", "weights"], default="nodes",
                   help="with --parts: balance node counts (default) or weight bytes")
    p.add_argument("--json", action="store_true", help="print the manifest as JSON")
    add_custom_op_options(p)
    _render.add_progress_option(p)
    _common.add_output_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    model = _common.load(args.model)
    plan = _common.plan(args, model, reads=custom_op_reads(args))
    plan.write_folder(args.outdir, "the fragments folder")
    plan.check()
    result = split(model, at=args.at, parts=args.parts, balance=args.balance, check=args.check,
                   progress=_render.progress("split", enabled=args.progress, unit="fragments"), **runtime_kwargs(args))
    _render.progress_done()
    written = write_split(result, args.outdir, overwrite=args.overwrite, external=args.external,
                          progress=_render.progress("write", enabled=args.progress, unit="fragments"))
    _render.progress_done()
    if args.json:
        _render.json_out(written.to_dict())
        return 0
    render(written)
    _render.text(f"wrote {len(written)} fragments and {MANIFEST} to {args.outdir}")
    _render.text(f"check them: python -m graphkit run-chain {args.outdir}")
    return 0


def render(result: Split) -> None:
    """A table of fragments: file, nodes, weights, inputs (with origin) and outputs."""
    rows = []
    for f in result:
        ins = ", ".join(f"{p.name} <- {'input' if p.source is None else f'#{p.source}'}" for p in f.inputs)
        outs = ", ".join(p.name + (" (graph output)" if p.graph_output else "") for p in f.outputs)
        rows.append((f"#{f.index}", f.file or "-", f.nodes, human_bytes(f.weight_bytes), ins, outs))
    _render.table(rows, ["#", "file", "nodes", "weights", "inputs <- from", "outputs"])
