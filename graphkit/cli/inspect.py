"""inspect MODEL [--nodes | --tensors | --stats] [--op TYPE] [--name GLOB] [--shape/--dim] [--json]:
inputs, outputs, opsets, op types, weights, subgraphs; every node and tensor with its type; parameters
and multiply-accumulates — no weights read."""

from __future__ import annotations

import argparse

from graphkit._listing import Listing, list_nodes
from graphkit._model import Model
from graphkit._numbers import parse_int
from graphkit._summary import summarize
from graphkit.cli import _common, _render
from graphkit.errors import UsageError

_NUMBER_HINT = "e.g. --dim batch=1 --shape input=1x3x224x224"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("inspect", help="describe a model's structure; list nodes, tensors, MACs",
                       description=__doc__)
    p.add_argument("model", help="the .onnx file")
    p.add_argument("--json", action="store_true", help="print JSON")
    show = p.add_mutually_exclusive_group()
    show.add_argument("--nodes", action="store_true",
                      help="every main-graph node: position (#N), name, op, inputs and outputs with dtype and shape")
    show.add_argument("--tensors", action="store_true",
                      help="every tensor: dtype, shape, kind (input, initializer, constant, ...), producer")
    show.add_argument("--stats", action="store_true",
                      help="parameters and multiply-accumulates per node, per op type and in total")
    p.add_argument("--op", action="append", default=[], metavar="TYPE",
                   help="only nodes of this op type (repeatable; with --nodes/--tensors/--stats)")
    p.add_argument("--name", action="append", default=[], metavar="GLOB",
                   help="only nodes and tensors whose name matches, e.g. '/layer.3/*' (repeatable)")
    p.add_argument("--shape", action="append", default=[], metavar="[NAME=]DIMS",
                   help="fix an input's shape before typing, e.g. input=1x3x224x224")
    p.add_argument("--dim", action="append", default=[], metavar="DIM=N",
                   help="fix a named dynamic dim everywhere, e.g. seq=128")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    model = _common.load(args.model)
    if args.nodes or args.tensors or args.stats:
        listing = list_nodes(model, op=args.op, name=args.name, shapes=_shapes(args, model), dims=_dims(args))
        if args.name and not listing.nodes and not listing.tensors:
            _render.note(f"--name {' '.join(repr(g) for g in args.name)} matches no node or tensor of {model.name}"
                         f"{' of the op types given' if args.op else ''} (a glob matches the whole name: "
                         "'*Conv*' for names holding Conv)")
        if args.json:
            _render.json_out(_json(listing, args))
        elif args.nodes:
            _nodes(listing)
        elif args.tensors:
            _tensors(listing)
        else:
            _stats(listing)
        return 0
    if args.op or args.name or args.shape or args.dim:
        raise UsageError("--op, --name, --shape and --dim select what --nodes, --tensors or --stats show",
                         hint="add --nodes, --tensors or --stats")
    s = summarize(model)
    if args.json:
        _render.json_out(s.to_dict())
        return 0
    _render.text(f"model      {s.path}")
    _render.text(f"graph      {s.graph_name!r}   ir_version {s.ir_version}   "
                 + "opsets " + ", ".join(f"{d}={v}" for d, v in s.opsets.items()))
    if s.producer:
        _render.text(f"producer   {s.producer} {s.producer_version}".rstrip())
    _render.text("inputs")
    _render.table([(t.name, t.dtype, t.shape_text()) for t in s.inputs], indent=2)
    _render.text("outputs")
    _render.table([(t.name, t.dtype, t.shape_text()) for t in s.outputs], indent=2)
    bodies = f" ({s.subgraph_node_count} in subgraph bodies)" if s.subgraph_node_count else ""
    _render.text(f"nodes      {s.node_count}{bodies}: " + ", ".join(f"{op}×{n}" for op, n in s.op_types.items()))
    constants = (f", {s.constant_count} Constant nodes, {_render.human_bytes(s.constant_bytes)}"
                 if s.constant_count else "")
    _render.text(f"weights    {s.initializer_count} initializers, {_render.human_bytes(s.initializer_bytes)}"
                 + constants
                 + (f" ({_render.human_bytes(s.external_bytes)} external in {', '.join(s.external_files)})" if s.external_files else ""))
    for label, values in (("subgraphs", s.subgraphs), ("custom", s.custom_domains), ("functions", s.functions)):
        if values:
            _render.text(f"{label:<10} " + ", ".join(values))
    for key, value in s.metadata.items():
        _render.text(f"metadata   {key} = {value}")
    _render.text("names      python -m graphkit inspect MODEL --nodes (or --tensors, --stats)")
    return 0


def _shapes(args: argparse.Namespace, model: Model) -> dict[str, tuple[int, ...]]:
    from graphkit._feeds import parse_shape  # (only --shape needs it: plain inspect stays light)

    shapes: dict[str, tuple[int, ...]] = {}
    inputs = [v.name for v in model.lazy_proto.graph.input]
    for text in args.shape:
        name, dims = parse_shape(text)
        if name is None:
            if len(inputs) != 1:
                raise UsageError(f"--shape {text!r} names no input and the model has {len(inputs)}",
                                 hint=f"write --shape NAME={text}, NAME one of: {', '.join(inputs[:5])}")
            name = inputs[0]
        shapes[name] = dims
    return shapes


def _dims(args: argparse.Namespace) -> dict[str, int]:
    from graphkit._feeds import parse_named

    dims: dict[str, int] = {}
    for text in args.dim:
        name, value = parse_named(text, "--dim")
        if name is None:
            raise UsageError(f"--dim {text!r}: expected DIM=N", hint=_NUMBER_HINT)
        dims[name] = parse_int(value, what=f"--dim {text!r}", hint=_NUMBER_HINT)
    return dims


def _json(listing: Listing, args: argparse.Namespace) -> dict[str, object]:
    data = listing.to_dict()
    if args.nodes:
        data.pop("by_op")
    elif args.tensors:
        data.pop("nodes")
        data.pop("by_op")
    else:
        data.pop("tensors")
    return data


def _nodes(listing: Listing) -> None:
    tensors = {t.name: t for t in listing.tensors}

    def typed(names: list[str]) -> str:
        return ", ".join(f"{n} {tensors[n].type_text()}" if n in tensors else (n or "''") for n in names)

    _render.table([(f"#{n.index}", n.name or "(no name)", n.op_type, typed(n.inputs), typed(n.outputs))
                   for n in listing.nodes], header=("#", "name", "op", "inputs", "outputs"))
    _render.text(f"{len(listing.nodes)} nodes" + _scope(listing))


def _tensors(listing: Listing) -> None:
    _render.table([(t.name, t.type_text(), t.kind, t.producer or "", t.consumers) for t in listing.tensors],
                  header=("name", "type", "kind", "producer", "readers"))
    _render.text(f"{len(listing.tensors)} tensors" + _scope(listing))


def _stats(listing: Listing) -> None:
    _render.table([(f"#{n.index}", n.name or "(no name)", n.op_type, _count(n.params),
                    "?" if n.macs is None else _count(n.macs), n.kind + (f" (unknown {', '.join(n.unknown)})" if n.unknown else ""))
                   for n in listing.nodes], header=("#", "name", "op", "params", "MACs", "counted as"))
    _render.text("")
    _render.table([(s.op_type, s.count, _count(s.params), _count(s.macs), s.unknown or "")
                   for s in listing.by_op], header=("op", "nodes", "params", "MACs", "unknown"))
    _render.text("")
    _render.text(f"total      {_count(listing.params)} parameters, {_count(listing.macs)} MACs "
                 f"({listing.macs:,}) over {len(listing.nodes)} nodes" + _scope(listing))
    if listing.dims:
        _render.text("dims       " + ", ".join(f"{k}={v}" for k, v in listing.dims.items()))
    if listing.unknown:
        _render.text(f"unknown    {len(listing.unknown)} nodes not counted (a dim no inference sizes): "
                     + ", ".join(listing.unknown[:5]) + (" …" if len(listing.unknown) > 5 else ""))
        _render.text("hint       fix the dims with --shape NAME=DIMS or --dim NAME=N")


def _scope(listing: Listing) -> str:
    parts = []
    if listing.filtered:
        parts.append("selected by --op/--name")
    if listing.subgraph_nodes:
        parts.append(f"{listing.subgraph_nodes} more inside subgraph bodies, not listed")
    return f" ({'; '.join(parts)})" if parts else ""


def _count(n: int) -> str:
    """1.23 G / 25.6 M / 4.1 k style, for a reader; exact values are in --json."""
    for unit, size in (("T", 10**12), ("G", 10**9), ("M", 10**6), ("k", 10**3)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return str(n)
