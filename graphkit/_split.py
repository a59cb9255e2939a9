"""Split a model into fragments that partition its nodes, write them with a manifest, read them back.

A fragment is a run of nodes in execution order, made a model of its own: its inputs are the tensors
it reads that it does not compute (graph inputs, or outputs of earlier fragments — also ones that
skip over a fragment), its outputs the tensors it computes that later fragments or the graph's
outputs need. Nodes with If/Loop/Scan bodies stay whole; the outer tensors their bodies read count
as the node's reads. Weights go with the fragments that read them (a shared weight goes into each).

Cuts given by name (``at``) are "everything still needed to compute this tensor": fragment *k*
holds the nodes that tensor *k* depends on and no earlier fragment holds; the last fragment holds
the rest. ``parts=N`` picks N-1 cut points itself, balancing node counts (or weight bytes) and
preferring points where a single tensor crosses.

Structure only: no weight is read here (types of boundary tensors come from value_info or shape
inference; only if both fail is the model run once to observe them).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from graphkit import _check_args as argcheck
from graphkit import _io as io
from graphkit import _progress, _write
from graphkit._custom_ops import CustomOp
from graphkit._files import check_regular, exists, is_dir, read_data
from graphkit._graph import GraphIndex, node_label, paused_gc
from graphkit._model import Model, iter_graphs, iter_tensors
from graphkit._options import Balance
from graphkit._ort import Settings
from graphkit._progress import Progress
from graphkit._submodel import submodel
from graphkit._summary import TensorSig, dtype_name
from graphkit._typing import Source, tensor_types, value_info_of
from graphkit._validate import check_or_raise, require_sound
from graphkit.errors import (
    CorruptModelError,
    InvalidModelError,
    ModelNotFoundError,
    TensorNotFoundError,
    UsageError,
    WriteError,
    not_found,
)

__all__ = ["MANIFEST", "Fragment", "Port", "Split", "load_split", "split", "write_split"]

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
FORMAT = "graphkit.split"
VERSION = 1
BALANCES = ("nodes", "weights")
#: How far (as a share of one part) a cut may move from its balanced position to find fewer crossing tensors.
_WINDOW = 0.25


# ------------------------------------------------------------------------------------------ results


@dataclass(frozen=True)
class Port:
    """A tensor crossing a fragment boundary (or a graph input/output).

    Attributes:
        name: The tensor.
        dtype: Its dtype name ("float32").
        shape: Its dims: ints, names, or None when unknown; None when the rank is unknown.
        source: For inputs, the index of the fragment computing it (None: a graph input).
            For outputs, the fragment itself.
        to: For outputs, the later fragments reading it.
        graph_output: For outputs, whether it is an output of the whole model.
    """

    name: str
    dtype: str
    shape: list[int | str | None] | None
    source: int | None = None
    to: tuple[int, ...] = ()
    graph_output: bool = False

    def input_dict(self) -> dict[str, Any]:
        """The manifest entry of an input."""
        origin: str | int = "graph input" if self.source is None else self.source
        return {"name": self.name, "dtype": self.dtype, "shape": self.shape, "from": origin}

    def output_dict(self) -> dict[str, Any]:
        """The manifest entry of an output."""
        return {"name": self.name, "dtype": self.dtype, "shape": self.shape, "to": list(self.to),
                "graph_output": self.graph_output}

    def shape_text(self) -> str:
        """``[1, 3, 'batch', ?]`` style."""
        return TensorSig(self.name, self.dtype, self.shape).shape_text()


@dataclass(frozen=True)
class Fragment:
    """One fragment: a model and where its inputs come from.

    Attributes:
        index: Position in execution order.
        model: The fragment as a model (reads its weights where the source does, until written).
        nodes: Its node count.
        weight_bytes: Bytes of the weights it holds.
        inputs: Its inputs, each with the fragment it comes from.
        outputs: Its outputs, each with the fragments that read it.
        first_node: Label of its first node.
        last_node: Label of its last node.
        file: Its file name in the split folder, once written or loaded.
        data_file: The file holding its external weights, if any.
        sha256: The sha256 of ``file``.
        size: The size of ``file`` in bytes (its checksum is computed only when the size matches).
    """

    index: int
    model: Model
    nodes: int
    weight_bytes: int
    inputs: tuple[Port, ...]
    outputs: tuple[Port, ...]
    first_node: str
    last_node: str
    file: str | None = None
    data_file: str | None = None
    sha256: str | None = None
    size: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """The manifest entry (file fields only once written)."""
        files = ({"file": self.file, "data": self.data_file, "sha256": self.sha256, "size": self.size}
                 if self.file else {})
        return {
            "index": self.index,
            **files,
            "nodes": self.nodes,
            "weight_bytes": self.weight_bytes,
            "first_node": self.first_node,
            "last_node": self.last_node,
            "inputs": [p.input_dict() for p in self.inputs],
            "outputs": [p.output_dict() for p in self.outputs],
        }


@dataclass(frozen=True)
class Split:
    """Fragments in execution order, with the whole model's signature and where it came from.

    Iterating, ``len`` and indexing go over the fragments.

    Attributes:
        fragments: The fragments, in order.
        inputs: The whole model's graph inputs.
        outputs: The whole model's graph outputs (``source`` = the fragment computing each).
        cuts: For each boundary, the tensors crossing it.
        method: How the cuts were chosen ({"at": [...]} or {"parts": N, "balance": ...}).
        source: The whole model, when split in this process.
        source_path: The source model's file, if known.
        source_sha256: The source model file's sha256, if known.
        folder: The split folder, once written or loaded.
        source_size: The source model file's size in bytes, if known.
    """

    fragments: tuple[Fragment, ...]
    inputs: tuple[Port, ...]
    outputs: tuple[Port, ...]
    cuts: tuple[tuple[str, ...], ...]
    method: dict[str, Any]
    source: Model | None = field(default=None, repr=False)
    source_path: Path | None = None
    source_sha256: str | None = None
    folder: Path | None = None
    source_size: int | None = None

    def __len__(self) -> int:
        return len(self.fragments)

    def __iter__(self) -> Iterator[Fragment]:
        return iter(self.fragments)

    def __getitem__(self, i: int) -> Fragment:
        return self.fragments[i]

    def find_source(self) -> tuple[Model | None, str]:
        """The whole model if it is at hand and unchanged, and a sentence saying which or why not."""
        if self.source is not None:
            return self.source, f"compared with {self.source.name}"
        if self.source_path is None:
            return None, "no source model recorded"
        if not _is_file(self.source_path):
            return None, f"source model {self.source_path} is not at hand"
        size = self.source_path.stat().st_size
        if self.source_size is not None and size != self.source_size:
            return None, f"source model {self.source_path} changed since the split (size differs)"
        if self.source_sha256 and (self.source_size is not None or size <= _MAX_ONNX_BYTES) \
                and _sha256(self.source_path) != self.source_sha256:
            return None, f"source model {self.source_path} changed since the split (sha256 differs)"
        return io.load(self.source_path), f"compared with {self.source_path}"

    def source_model(self) -> Model | None:
        """The whole model if it is at hand and unchanged, else None."""
        model, why = self.find_source()
        if model is None:
            log.info("not comparing with the whole model: %s", why)
        return model

    def to_dict(self) -> dict[str, Any]:
        """The manifest: format, source, inputs, outputs, fragments in order, cuts."""
        fragments = [f.to_dict() for f in self.fragments]
        source: dict[str, Any] = {"path": str(self.source_path) if self.source_path else None,
                                  "sha256": self.source_sha256, "size": self.source_size}
        if self.folder is not None and self.source_path is not None:
            with contextlib.suppress(ValueError):
                source["relative_path"] = os.path.relpath(self.source_path, self.folder)
        return {
            "format": FORMAT,
            "version": VERSION,
            "source": source,
            "method": self.method,
            "inputs": [{"name": p.name, "dtype": p.dtype, "shape": p.shape} for p in self.inputs],
            "outputs": [{"name": p.name, "dtype": p.dtype, "shape": p.shape, "from": _origin(p.source)}
                        for p in self.outputs],
            "cuts": [list(c) for c in self.cuts],
            "fragments": fragments,
        }


def _origin(source: int | None) -> str | int:
    return "graph input" if source is None else source


# ------------------------------------------------------------------------------------------- split


@paused_gc()
def split(
    model: Model,
    /,
    at: Sequence[str] | None = None,
    *,
    parts: int | None = None,
    balance: Balance = "nodes",
    check: bool = True,
    custom_ops: Sequence[str | os.PathLike[str]] = (),
    python_ops: Sequence[CustomOp | str | os.PathLike[str]] = (),
    progress: Progress | None = None,
) -> Split:
    """Split a model into fragments that partition its nodes, in execution order.

    Args:
        model: The model (not modified; weights are not read).
        at: Cut tensors, in execution order: fragment k computes everything tensor k needs that no
            earlier fragment computes; the last fragment computes the rest.
        parts: Instead of ``at``: the number of fragments, cut at balanced points.
        balance: With ``parts``: balance "nodes" (node count) or "weights" (weight bytes).
        check: Validate every fragment (onnx.checker and structural checks).
        custom_ops: Custom-operator libraries a run needs when typing a boundary takes one.
        python_ops: Python implementations of custom operators, for that run.
        progress: Called with (fragments built, fragments) after each fragment.

    Returns:
        A Split; its fragments read their weights from the source's folder until written.

    Raises:
        UsageError: Neither or both of ``at`` and ``parts``; a cut that is a graph input or computes
            nothing new; nothing left after the last cut; more parts than nodes.
        TensorNotFoundError: A cut names no tensor of the main graph.
        CycleError: The graph has a cycle.
        InvalidModelError: A fragment fails validation, or a boundary tensor's type cannot be told.
    """
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    argcheck.optional(argcheck.names, at, "at", what="tensor name")
    argcheck.optional(argcheck.integer, parts, "parts", minimum=1)
    argcheck.choice(balance, "balance", ("nodes", "weights"))
    argcheck.boolean(check, "check")
    _progress.check(progress)
    if (at is None) == (parts is None):
        raise UsageError("give either cut tensors or a number of parts",
                         hint="e.g. at=['/convs1/convs1.2/Conv_output_0'], or parts=3",
                         cli_hint="e.g. --at /convs1/convs1.2/Conv_output_0, or --parts 3")
    require_sound(model)
    index = Source(model)
    order = index.topological_order()
    if not order:
        raise UsageError(f"{model.name} has no nodes to split", hint="nothing to do")
    if at is not None:
        groups = _groups_at(model, index, order, list(at))
        method: dict[str, Any] = {"at": list(at)}
    else:
        assert parts is not None
        groups = _groups_parts(model, index, order, parts, balance)
        method = {"parts": parts, "balance": balance}
    runtime = Settings.for_custom_ops(custom_ops, python_ops)
    return _build(model, index, groups, method, check=check, runtime=runtime, progress=progress)


def _groups_at(model: Model, index: GraphIndex, order: list[int], cuts: list[str]) -> list[list[int]]:
    rank = {node: pos for pos, node in enumerate(order)}
    deps = index.dependencies()
    seen: set[str] = set()
    taken: dict[int, int] = {}
    groups: list[list[int]] = []
    for k, name in enumerate(cuts):
        _check_cut(model, index, name, seen)
        seen.add(name)
        needed = _ancestors(index.producer[name], deps) - set(taken)
        if not needed:
            earlier = cuts[taken[index.producer[name]]]
            raise UsageError(
                f"cut {name!r} computes nothing new: the fragment cut at {earlier!r} already computes it",
                hint="list the cuts in execution order, each after the one before",
            )
        groups.append(sorted(needed, key=rank.__getitem__))
        taken.update(dict.fromkeys(needed, k))
    rest = [n for n in order if n not in taken]
    if not rest:
        raise UsageError(
            f"nothing is left after the last cut {cuts[-1]!r}: it already needs every node of {model.name}",
            hint="remove the last cut (its fragment already computes the outputs)",
        )
    groups.append(rest)
    return groups


def _check_cut(model: Model, index: GraphIndex, name: str, seen: set[str]) -> None:
    if name in seen:
        raise UsageError(f"cut {name!r} is given twice", hint="give each cut once")
    if name in index.producer:
        return
    if name in set(index.inputs) or name in index.initializers:
        kind = "graph input" if name in set(index.inputs) else "initializer"
        raise UsageError(f"cannot cut at {name!r}: it is a {kind} of {model.name}, so no node computes it",
                         hint="cut at a tensor a node computes (gk.list_nodes(model) lists them with their producers)",
                         cli_hint="cut at a tensor a node computes ('python -m graphkit inspect MODEL --tensors' lists "
                                  "them with their producers)")
    holder = index.body_owner(name)
    if holder is not None:
        owner = node_label(index.nodes[holder], holder)
        raise UsageError(
            f"cannot cut at {name!r}: it lives inside the body of {owner}, which runs as one node",
            hint="cut at that node's output instead",
        )
    raise not_found(TensorNotFoundError, "tensor", name, index.producer, where=model.name)


def _ancestors(start: int, deps: Sequence[Sequence[int]]) -> set[int]:
    found = {start}
    stack = [start]
    while stack:
        for dep in deps[stack.pop()]:
            if dep not in found:
                found.add(dep)
                stack.append(dep)
    return found


# ------------------------------------------------------------------------------- balanced cut points


def _groups_parts(model: Model, index: GraphIndex, order: list[int], parts: int, balance: str) -> list[list[int]]:
    if balance not in BALANCES:
        raise UsageError(f"unknown balance {balance!r}", hint="use 'nodes' or 'weights'")
    if parts < 1:
        raise UsageError(f"cannot split into {parts} parts", hint="give parts=1 or more", cli_hint="give --parts 1 or more")
    if parts > len(order):
        raise UsageError(f"cannot split {model.name} into {parts} parts: it has only {len(order)} nodes",
                         hint=f"give parts={len(order)} or fewer", cli_hint=f"give --parts {len(order)} or fewer")
    seq = _compact_order(index, order)
    weights = _node_weights(model, index, seq, balance)
    crossing = _crossing_counts(index, seq)
    bounds = _choose_bounds(weights, crossing, parts)
    groups, start = [], 0
    for end in [*bounds, len(seq) - 1]:
        groups.append(seq[start : end + 1])
        start = end + 1
    rank = {node: pos for pos, node in enumerate(order)}
    return [sorted(g, key=rank.__getitem__) for g in groups]


def _compact_order(index: GraphIndex, order: list[int]) -> list[int]:
    """An execution order that computes each node just before it is first needed (depth-first from
    the outputs), so constants and weight-producing nodes sit next to their readers."""
    deps = [list(dict.fromkeys(index.producer[n] for n in reads if n in index.producer)) for reads in index.node_reads]
    roots = [index.producer[o] for o in index.outputs if o in index.producer]
    rank = {node: pos for pos, node in enumerate(order)}
    roots += sorted((n for n in order), key=rank.__getitem__)
    visited: set[int] = set()
    seq: list[int] = []
    for root in roots:
        if root in visited:
            continue
        visited.add(root)
        stack: list[tuple[int, Iterator[int]]] = [(root, iter(deps[root]))]
        while stack:
            node, pending = stack[-1]
            child = next((d for d in pending if d not in visited), None)
            if child is None:
                stack.pop()
                seq.append(node)
            else:
                visited.add(child)
                stack.append((child, iter(deps[child])))
    return seq


def _node_weights(model: Model, index: GraphIndex, seq: list[int], balance: str) -> list[float]:
    if balance == "nodes":
        return [1.0] * len(seq)
    counted: set[str] = set()
    weights: list[float] = []
    for node_id in seq:
        total = 0
        node = model.lazy_proto.graph.node[node_id]
        for name in index.node_reads[node_id]:
            if name in index.initializers and name not in counted:
                counted.add(name)
                total += max(io.tensor_nbytes(index.initializers[name]), 0)
        holder = onnx.GraphProto()
        holder.node.append(node)
        for sub, _ in iter_graphs(holder):
            total += sum(max(io.tensor_nbytes(t), 0) for t in sub.initializer)
        total += sum(max(io.tensor_nbytes(a.t), 0) for a in node.attribute if a.type == onnx.AttributeProto.TENSOR)
        weights.append(float(total))
    if sum(weights) == 0:
        log.info("the model has no weights: balancing by node count")
        return [1.0] * len(seq)
    # every node costs a little, so weightless stretches still spread out
    floor = sum(weights) / len(weights) * 1e-3
    return [w + floor for w in weights]


def _crossing_counts(index: GraphIndex, seq: list[int]) -> list[int]:
    """For each boundary after position p, how many computed tensors cross it."""
    pos = {node: p for p, node in enumerate(seq)}
    delta = [0] * (len(seq) + 1)
    for name, producer in index.producer.items():
        readers = [pos[c] for c in index.consumers.get(name, ())]
        if not readers:
            continue
        first, last = pos[producer], max(readers)
        if last > first:
            delta[first] += 1
            delta[last] -= 1
    counts, running = [], 0
    for p in range(len(seq) - 1):
        running += delta[p]
        counts.append(running)
    return counts


def _choose_bounds(weights: list[float], crossing: list[int], parts: int) -> list[int]:
    """Positions p (cut after node p), one per boundary: near the balanced point, fewest crossings."""
    total = sum(weights)
    cumulative, running = [], 0.0
    for w in weights:
        running += w
        cumulative.append(running)
    n = len(weights)
    bounds: list[int] = []
    for k in range(1, parts):
        target = total * k / parts
        low = (bounds[-1] + 1) if bounds else 0
        high = n - 1 - (parts - k)  # leave one node for each later part
        candidates = range(low, high + 1)
        window = [p for p in candidates if abs(cumulative[p] - target) <= _WINDOW * total / parts]
        pool = window or list(candidates)
        best = min(pool, key=lambda p: (crossing[p] if window else 0, abs(cumulative[p] - target), p))
        bounds.append(best)
    return bounds


# ------------------------------------------------------------------------------------- fragments


def _build(model: Model, index: Source, groups: list[list[int]], method: dict[str, Any], *, check: bool,
           runtime: Settings | None = None, progress: Progress | None = None) -> Split:
    where = {node: i for i, group in enumerate(groups) for node in group}
    outputs_set = set(index.outputs)
    plans = []
    for i, group in enumerate(groups):
        ins, inits, outs = _boundary(model, index, group, i, where, outputs_set)
        plans.append((ins, inits, outs))
    boundary_names = {n for ins, _, outs in plans for n in [*ins, *outs]} | set(index.inputs) | outputs_set
    types, stated = _types(model, index, boundary_names, runtime)
    fragments = []
    for i, (group, (ins, inits, outs)) in enumerate(zip(groups, plans)):
        proto = _fragment_proto(model, index, group, i, len(groups), ins, inits, outs, types)
        fragment_model = Model(proto, model.base_dir, None)
        if check:
            # As for extract: the fragment's nodes are unchanged copies, so strict shape inference
            # can only find a conflict in a type that was stated, not derived from those nodes.
            full = not stated.isdisjoint(ins) or not stated.isdisjoint(outs)
            check_or_raise(fragment_model, what=f"fragment {i} of {model.name}", full_check=full)
        fragments.append(_fragment(i, fragment_model, group, index, ins, outs, types, where))
        _progress.report(progress, i + 1, len(groups))
    inputs = tuple(_port(types, n) for n in index.inputs if n not in index.initializers)
    graph_outputs = tuple(
        Port(n, *_sig(types, n), source=where.get(index.producer[n]) if n in index.producer else None)
        for n in index.outputs
    )
    cuts = tuple(tuple(n for n in plans[i][2] if any(where[c] > i for c in index.consumers.get(n, ())))
                 for i in range(len(groups) - 1))
    source_path = model.path.resolve() if model.path is not None else None
    is_file = source_path is not None and source_path.is_file()
    sha = _sha256(source_path) if source_path is not None and is_file else None
    size = source_path.stat().st_size if source_path is not None and is_file else None
    return Split(tuple(fragments), inputs, graph_outputs, cuts, method, model, source_path, sha, None, size)


def _boundary(
    model: Model, index: GraphIndex, group: list[int], i: int, where: dict[int, int], outputs: set[str]
) -> tuple[list[str], list[str], list[str]]:
    """A fragment's inputs, the initializers it copies, and its outputs."""
    produced = {o for n in group for o in model.lazy_proto.graph.node[n].output if o}
    reads: dict[str, None] = {}
    for n in group:
        reads.update(dict.fromkeys(index.node_reads[n]))
    inits = [r for r in reads if r in index.initializers and r not in produced]
    ins = []
    graph_inputs = set(index.inputs)
    for name in reads:
        if name in produced or name in index.initializers:
            continue
        if name not in graph_inputs and name not in index.producer:
            raise InvalidModelError(
                f"{model.name}: {name!r} is read but no node, graph input or initializer defines it",
                hint="run 'python -m graphkit check' on the model",
            )
        ins.append(name)
    outs = []
    for n in group:
        for name in model.lazy_proto.graph.node[n].output:
            if not name:
                continue
            later = any(where[c] != i for c in index.consumers.get(name, ()))
            if name in outputs or later:
                outs.append(name)
    return ins, inits, outs


def _types(model: Model, index: Source, names: set[str],
           runtime: Settings | None = None) -> tuple[dict[str, onnx.ValueInfoProto], set[str]]:
    """A typed ValueInfoProto for every boundary tensor (the typing engine, ``graphkit._typing``), and
    the names whose type was stated rather than derived from the nodes: declared in value_info (but
    for the graph's own inputs and outputs) or observed in a run."""
    found = tensor_types(index, sorted(names), runtime=runtime)
    untyped = sorted(n for n in names if n not in found.types)
    if untyped:
        why = f"running the model failed ({found.runtime_error})" if found.runtime_error else "it has no tensor value"
        raise InvalidModelError(
            f"cannot tell the dtype of {', '.join(repr(n) for n in untyped)} in {model.name}: no value_info, "
            f"shape inference does not know, and {why}",
            hint="cut elsewhere, or add value_info for these tensors (python -m graphkit edit)",
        )
    declared = index.input_set | index.output_set
    stated = {n for n, how in found.source.items()
              if how == "runtime" or (how == "model" and n not in declared and n not in index.initializers)}
    return {n: value_info_of(n, tp) for n, tp in found.types.items()}, stated


def _sig(types: dict[str, onnx.ValueInfoProto], name: str) -> tuple[str, list[int | str | None] | None]:
    if name not in types:
        return "unknown", None
    sig = TensorSig.of(types[name])
    return sig.dtype, sig.shape


def _port(types: dict[str, onnx.ValueInfoProto], name: str, **extra: Any) -> Port:
    return Port(name, *_sig(types, name), **extra)


def _fragment_proto(
    model: Model, index: GraphIndex, group: list[int], i: int, count: int, ins: list[str], inits: list[str],
    outs: list[str], types: dict[str, onnx.ValueInfoProto],
) -> onnx.ModelProto:
    """Fragment ``i`` as a model (the sub-model builder, ``graphkit._submodel``): its graph is named
    ``<graph>_part<i>`` and its metadata says which fragment of which model it is."""
    return submodel(
        model.lazy_proto, index, group,
        inputs=[_typed(types, name, model) for name in ins],
        outputs=[_typed(types, name, model) for name in outs],
        initializers=set(inits),
        graph_name=f"{model.lazy_proto.graph.name or 'graph'}_part{i}",
        metadata={"graphkit.split": f"fragment {i} of {count} of {model.name}"},
    )


def _typed(types: dict[str, onnx.ValueInfoProto], name: str, model: Model) -> onnx.ValueInfoProto:
    if name not in types:
        raise InvalidModelError(f"cannot tell the type of {name!r} in {model.name}",
                                hint="add value_info for it, or cut elsewhere")
    value = onnx.ValueInfoProto()
    value.CopyFrom(types[name])
    value.name = name
    return value


def _fragment(
    i: int, model: Model, group: list[int], index: GraphIndex, ins: list[str], outs: list[str],
    types: dict[str, onnx.ValueInfoProto], where: dict[int, int],
) -> Fragment:
    src_nodes = index.graph.node
    inputs = tuple(_port(types, n, source=where[index.producer[n]] if n in index.producer else None) for n in ins)
    outputs = tuple(
        _port(types, n, to=tuple(sorted({where[c] for c in index.consumers.get(n, ()) if where[c] != i})),
              graph_output=n in set(index.outputs))
        for n in outs
    )
    weight = sum(max(io.tensor_nbytes(t), 0) for t, _ in iter_tensors(model.lazy_proto))
    return Fragment(i, model, len(group), weight, inputs, outputs, node_label(src_nodes[group[0]], group[0]),
                    node_label(src_nodes[group[-1]], group[-1]))


# -------------------------------------------------------------------------------- write and load


def write_split(
    result: Split,
    outdir: str | os.PathLike[str],
    *,
    overwrite: bool = False,
    external: bool | None = None,
    progress: Progress | None = None,
) -> Split:
    """Write the fragments (``part_00.onnx`` …) and ``manifest.json`` into ``outdir``, all or nothing.

    Every file is written into a temporary folder beside ``outdir``, which then takes its place.
    Each fragment's weights are streamed from where they lie; a fragment of a model with external
    data gets its own ``part_NN.data`` holding only its weights.

    Args:
        result: The split to write.
        outdir: The folder to create (or, with ``overwrite``, replace).
        overwrite: Replace an existing non-empty folder.
        external: True/False to force external/inline weights; None to follow the source.
        progress: Called with (fragments written, fragments) after each fragment.

    Returns:
        The split as written (fragments read from the folder, ``folder`` set).

    Raises:
        UsageError: ``outdir`` is not empty (without ``overwrite``), or holds the source model.
        WriteError: The folder cannot be written.
    """
    argcheck.instance(result, "result", Split, "a Split (from graphkit.split)")
    argcheck.path(outdir, "outdir")
    argcheck.boolean(overwrite, "overwrite")
    argcheck.optional(argcheck.boolean, external, "external")
    _progress.check(progress)
    folder = Path(outdir)
    plan = io.WritePlan(overwrite=overwrite, cli=False)
    plan.read(result.source_path, "the source model", model=True)
    for f in result:
        plan.read_model(f.model, "the source model")
    plan.write_folder(folder, "the fragments folder")
    plan.check()
    _check_outdir(folder, overwrite)
    _write.remove_stale_temps(folder.parent, [folder.name])
    tmp = folder.parent / _write.temp_name(folder.name, _write.name_limit(folder.parent))
    try:
        tmp.mkdir()
        written = _write_into(result, tmp, folder, external, progress)
        _write.replace_folder(tmp, folder)
    except OSError as err:
        shutil.rmtree(tmp, ignore_errors=True)
        raise WriteError(f"cannot write {folder}: {err.strerror or err}", hint="check the folder and free space") from err
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return _relocate(written, folder)


def _check_outdir(folder: Path, overwrite: bool) -> None:
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"cannot write fragments into {folder}: it is a file", hint="give a folder path")
    if folder.is_dir() and any(folder.iterdir()) and not overwrite:
        raise UsageError(f"{folder} exists and is not empty",
                         hint="choose a new folder, or pass overwrite=True",
                         cli_hint="choose a new folder, or pass --overwrite to replace it")


def _write_into(result: Split, tmp: Path, final: Path, external: bool | None,
                progress: Progress | None = None) -> Split:
    width = max(2, len(str(len(result) - 1)))
    fragments = []
    for f in result:
        file = f"part_{f.index:0{width}d}.onnx"
        saved = io.save(f.model, tmp / file, external=external)
        data = tmp / f"part_{f.index:0{width}d}.data"
        fragments.append(Fragment(f.index, saved, f.nodes, f.weight_bytes, f.inputs, f.outputs, f.first_node,
                                  f.last_node, file, data.name if data.exists() else None, _sha256(tmp / file),
                                  (tmp / file).stat().st_size))
        _progress.report(progress, len(fragments), len(result))
    written = Split(tuple(fragments), result.inputs, result.outputs, result.cuts, result.method, result.source,
                    result.source_path, result.source_sha256, final.resolve(), result.source_size)
    (tmp / MANIFEST).write_text(json.dumps(written.to_dict(), indent=2) + "\n")
    _write.fsync_path(tmp / MANIFEST)
    _write.fsync_dir(tmp)
    return written


def _relocate(written: Split, folder: Path) -> Split:
    """The same split, its fragment models pointing into ``folder`` (the temporary folder is gone)."""
    fragments = tuple(
        Fragment(f.index, Model(f.model.lazy_proto, folder.resolve(), folder / f.file if f.file else None), f.nodes,
                 f.weight_bytes, f.inputs, f.outputs, f.first_node, f.last_node, f.file, f.data_file, f.sha256,
                 f.size)
        for f in written
    )
    return Split(fragments, written.inputs, written.outputs, written.cuts, written.method, written.source,
                 written.source_path, written.source_sha256, folder.resolve(), written.source_size)


def load_split(path: str | os.PathLike[str]) -> Split:
    """Read a split folder (or its manifest.json), checking every fragment file against the manifest.

    The manifest is checked field by field before anything is loaded; fragment files must lie inside
    the split folder (symlinks resolved), and a file's checksum is computed only when its size is the
    one the manifest records.

    Raises:
        ModelNotFoundError: No manifest, or a fragment file is missing.
        CorruptModelError: The manifest is unreadable or malformed, names a file outside the folder,
            or a fragment differs from what it records.
    """
    argcheck.path(path, "path")
    given = Path(path)
    manifest_path = given / MANIFEST if is_dir(given) else given
    folder = manifest_path.parent
    if not exists(manifest_path):
        raise ModelNotFoundError(f"no split manifest at {manifest_path}",
                                 hint="give the folder written by 'python -m graphkit split'")
    data = read_data(manifest_path, what="split manifest", yaml=False, error=CorruptModelError)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise CorruptModelError(f"{manifest_path} is not a graphkit split manifest",
                                hint="give the folder written by 'python -m graphkit split'")
    if data.get("version") != VERSION:
        raise CorruptModelError(f"{manifest_path} has manifest version {_short(data.get('version'))}, not {VERSION}",
                                hint="split the model again with this graphkit")
    _check_manifest(data, manifest_path)
    return _from_manifest(data, folder, manifest_path)


def _from_manifest(data: dict[str, Any], folder: Path, manifest_path: Path) -> Split:
    fragments = []
    root = folder.resolve()
    for i, entry in enumerate(data["fragments"]):
        file = _inside(root, entry["file"], manifest_path, f"fragment {i}")
        if entry.get("data") is not None:
            _inside(root, entry["data"], manifest_path, f"fragment {i}'s data file")
        if not exists(file):
            raise ModelNotFoundError(f"fragment {i} file {file} listed in {manifest_path} is missing",
                                     hint="copy the whole split folder, or split the model again")
        _check_file(file, entry.get("sha256"), entry.get("size"), f"fragment {i} file {file}")
        model = io.load(file)
        inputs = tuple(_port_from(p, input_=True) for p in entry["inputs"])
        outputs = tuple(_port_from(p, input_=False) for p in entry["outputs"])
        _check_signature(model, inputs, outputs, file)
        fragments.append(Fragment(i, model, entry["nodes"], entry["weight_bytes"], inputs, outputs,
                                  entry.get("first_node", ""), entry.get("last_node", ""), entry["file"],
                                  entry.get("data"), entry.get("sha256"), entry.get("size")))
    source = data.get("source") or {}
    source_path = _source_path(source, folder)
    return Split(
        tuple(fragments),
        tuple(Port(p["name"], p["dtype"], p["shape"]) for p in data["inputs"]),
        tuple(Port(p["name"], p["dtype"], p["shape"], source=_source_index(p["from"])) for p in data["outputs"]),
        tuple(tuple(c) for c in data.get("cuts", [])),
        dict(data.get("method", {})),
        None,
        source_path,
        source.get("sha256"),
        folder.resolve(),
        source.get("size"),
    )


def _inside(root: Path, name: str, manifest_path: Path, what: str) -> Path:
    """``root / name``, resolved through symlinks, refused unless it lies inside ``root`` (as external data)."""
    if len(name) > _MAX_PATH or any(len(part.encode("utf-8", "surrogateescape")) > _MAX_NAME for part in name.split("/")):
        raise CorruptModelError(f"{manifest_path}: {what} is a name of {len(name)} characters, longer than a file "
                                "name can be", hint="split the model again")
    if os.path.isabs(name) or "\0" in name:
        raise CorruptModelError(f"{manifest_path}: {what} is {name!r}, not a file name inside the split folder",
                                hint="a split manifest names its files relative to its folder; split the model again")
    try:
        resolved = (root / name).resolve()
    except (OSError, RuntimeError) as err:  # RuntimeError: a symlink loop
        raise CorruptModelError(f"{manifest_path}: cannot resolve {what} {name!r}: {err}",
                                hint="split the model again") from err
    if root not in resolved.parents:
        raise CorruptModelError(f"{manifest_path}: {what} {name!r} lies outside the split folder {root}",
                                hint="a split's fragments must lie inside its folder; split the model again")
    return resolved


def _check_file(file: Path, sha256: str | None, size: int | None, what: str) -> None:
    """Compare a file with its recorded size, then (only if the size matches) its recorded checksum."""
    info = check_regular(file, what="split fragment", max_bytes=None, error=CorruptModelError)
    if size is not None and info.st_size != size:
        raise CorruptModelError(f"{what} has {info.st_size} bytes, the manifest records {size}",
                                hint="the file changed after the split; split the model again")
    if size is None and info.st_size > _MAX_ONNX_BYTES:
        raise CorruptModelError(f"{what} has {info.st_size} bytes, more than an .onnx file can hold",
                                hint="the file changed after the split; split the model again")
    if sha256 and _sha256(file) != sha256:
        raise CorruptModelError(f"{what} differs from the one the manifest records (sha256)",
                                hint="the file changed after the split; split the model again")


#: Longest path and path component a file system takes (Linux's PATH_MAX and NAME_MAX).
_MAX_PATH, _MAX_NAME = 4096, 255
#: A protobuf (so an .onnx file) cannot be larger; a bigger "fragment" is not one, and is not hashed.
_MAX_ONNX_BYTES = 2**31 - 1


# ------------------------------------------------------------------------------------ manifest form


class _Manifest:
    """Checks a manifest's fields against their types, naming the first wrong one."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, where: str, expected: str, value: Any) -> CorruptModelError:
        return CorruptModelError(f"{self.path}: {where} must be {expected}, not {_short(value)}",
                                 hint="the manifest was edited or damaged; split the model again")

    def field(self, entry: dict[str, Any], key: str, where: str, *, optional: bool = False) -> Any:
        if key not in entry:
            if optional:
                return None
            raise CorruptModelError(f"{self.path}: {where} has no {key!r}", hint="split the model again")
        return entry[key]

    def text(self, entry: dict[str, Any], key: str, where: str, *, optional: bool = False) -> None:
        value = self.field(entry, key, where, optional=optional)
        if not (isinstance(value, str) or (optional and value is None)):
            raise self.fail(f"{where} {key!r}", "a string" + (" or null" if optional else ""), value)

    def count(self, entry: dict[str, Any], key: str, where: str, *, optional: bool = False,
              below: int | None = None) -> None:
        value = self.field(entry, key, where, optional=optional)
        if optional and value is None:
            return
        top = _MAX_INT if below is None else below - 1
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= top:
            raise self.fail(f"{where} {key!r}", f"a whole number from 0 to {top}", value)

    def obj(self, value: Any, where: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(where, "an object", value)
        return value

    def items(self, value: Any, where: str) -> list[Any]:
        if not isinstance(value, list):
            raise self.fail(where, "a list", value)
        return value

    def port(self, value: Any, where: str, *, feeds: bool = False) -> dict[str, Any]:
        entry = self.obj(value, where)
        self.text(entry, "name", where)
        dtype = self.field(entry, "dtype", where)
        if not isinstance(dtype, str) or not _type_name_ok(dtype):
            raise self.fail(f"{where} 'dtype'", "an ONNX dtype name such as 'float32' or 'sequence(float32)'", dtype)
        if feeds and dtype in _dtype_names():
            try:
                np.dtype(dtype)
            except TypeError as err:
                raise CorruptModelError(f"{self.path}: {where} has dtype {dtype!r}, which cannot be fed",
                                        hint="split the model again") from err
        shape = self.field(entry, "shape", where)
        if shape is not None:
            for dim in self.items(shape, f"{where} 'shape'"):
                if not (dim is None or isinstance(dim, str)
                        or (isinstance(dim, int) and not isinstance(dim, bool) and 0 <= dim <= _MAX_INT)):
                    raise self.fail(f"{where} 'shape'", "a list of sizes, dim names or nulls", shape)
        return entry

    def origin(self, entry: dict[str, Any], where: str, before: int) -> None:
        value = self.field(entry, "from", where)
        if value in ("graph input", None):
            return
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < before:
            expected = f"'graph input' or a fragment index below {before}" if before else "'graph input'"
            raise self.fail(f"{where} 'from'", expected, value)


def _check_manifest(data: dict[str, Any], path: Path) -> None:
    """Refuse a manifest whose fields have the wrong type, before any file is opened."""
    m = _Manifest(path)
    source = m.field(data, "source", "the manifest", optional=True)
    if source is not None:
        m.obj(source, "'source'")
        for key in ("path", "sha256", "relative_path"):
            m.text(source, key, "'source'", optional=True)
        m.count(source, "size", "'source'", optional=True)
    m.obj(m.field(data, "method", "the manifest", optional=True) or {}, "'method'")
    fragments = m.items(m.field(data, "fragments", "the manifest"), "'fragments'")
    if not fragments:
        raise CorruptModelError(f"{path} lists no fragments", hint="split the model again")
    total = len(fragments)
    for k, value in enumerate(m.items(m.field(data, "inputs", "the manifest"), "'inputs'")):
        m.port(value, f"input {k}", feeds=True)
    for k, value in enumerate(m.items(m.field(data, "outputs", "the manifest"), "'outputs'")):
        m.origin(m.port(value, f"output {k}"), f"output {k}", total)
    for k, cut in enumerate(m.items(m.field(data, "cuts", "the manifest", optional=True) or [], "'cuts'")):
        if not isinstance(cut, list) or not all(isinstance(t, str) for t in cut):
            raise m.fail(f"cut {k}", "a list of tensor names", cut)
    for i, value in enumerate(fragments):
        where = f"fragment {i}"
        entry = m.obj(value, where)
        m.count(entry, "index", where)
        if entry["index"] != i:
            raise CorruptModelError(f"{path}: fragment {i} is recorded as index {entry['index']}",
                                    hint="split the model again")
        m.text(entry, "file", where)
        for key in ("data", "sha256", "first_node", "last_node"):
            m.text(entry, key, where, optional=True)
        for key in ("nodes", "weight_bytes"):
            m.count(entry, key, where)
        m.count(entry, "size", where, optional=True)
        for k, port in enumerate(m.items(m.field(entry, "inputs", where), f"{where} 'inputs'")):
            m.origin(m.port(port, f"{where} input {k}", feeds=True), f"{where} input {k}", i)
        for k, port in enumerate(m.items(m.field(entry, "outputs", where), f"{where} 'outputs'")):
            out = m.port(port, f"{where} output {k}")
            to = m.field(out, "to", f"{where} output {k}", optional=True) or []
            if not isinstance(to, list) or not all(
                    isinstance(t, int) and not isinstance(t, bool) and i < t < total for t in to):
                raise m.fail(f"{where} output {k} 'to'", f"a list of later fragment indices (below {total})", to)
            if not isinstance(out.get("graph_output", False), bool):
                raise m.fail(f"{where} output {k} 'graph_output'", "true or false", out["graph_output"])


_MAX_INT = 2**63 - 1


def _type_name_ok(text: str) -> bool:
    """Whether ``text`` is a type as summary.type_name writes it: a dtype name, or sequence(…),
    optional(…), sparse(…) of one, or map(KEY,…) (a sequence crossing a cut: the wheel's sequence models)."""
    for kind in ("sequence(", "optional(", "sparse("):
        if text.startswith(kind) and text.endswith(")"):
            return _type_name_ok(text[len(kind):-1])
    if text.startswith("map(") and text.endswith(")") and "," in text:
        key, value = text[4:-1].split(",", 1)
        return key in _dtype_names() and _type_name_ok(value)
    return text in _dtype_names()


def _dtype_names() -> set[str]:
    """The dtype names a manifest may record (as summary.dtype_name writes them)."""
    return {"unknown", *(dtype_name(t) for t in onnx.TensorProto.DataType.values() if t)}


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _port_from(entry: dict[str, Any], *, input_: bool) -> Port:
    if input_:
        return Port(entry["name"], entry["dtype"], entry["shape"], source=_source_index(entry["from"]))
    return Port(entry["name"], entry["dtype"], entry["shape"], to=tuple(entry.get("to") or ()),
                graph_output=bool(entry.get("graph_output", False)))


def _source_index(value: Any) -> int | None:
    return None if value == "graph input" or value is None else int(value)


def _check_signature(model: Model, inputs: Sequence[Port], outputs: Sequence[Port], file: Path) -> None:
    real_inputs = [v.name for v in model.lazy_proto.graph.input if v.name not in {t.name for t in model.lazy_proto.graph.initializer}]
    real_outputs = [v.name for v in model.lazy_proto.graph.output]
    if real_inputs != [p.name for p in inputs] or real_outputs != [p.name for p in outputs]:
        raise CorruptModelError(
            f"{file} does not match its manifest entry: it has inputs {real_inputs} and outputs {real_outputs}, "
            f"the manifest records {[p.name for p in inputs]} and {[p.name for p in outputs]}",
            hint="the file changed after the split; split the model again",
        )


def _source_path(source: dict[str, Any], folder: Path) -> Path | None:
    relative = source.get("relative_path")
    if relative:
        try:
            candidate = (folder / relative).resolve()
        except (OSError, RuntimeError, ValueError):  # (a name too long, a symlink loop, a NUL byte)
            candidate = None
        if candidate is not None and _is_file(candidate):
            return candidate
    absolute = source.get("path")
    return Path(absolute) if absolute else None


def _is_file(path: Path) -> bool:
    """Whether ``path`` is a regular file; False also when it cannot be asked (a manifest's recorded
    source is optional, so a name too long for the file system means "not at hand")."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
