"""extract and expose: cut a submodel out of a model, or add intermediate tensors as graph outputs.

``extract`` keeps exactly the nodes needed to compute the requested outputs from the requested
inputs, in their original order, with the initializers, outer-scope tensors of If/Loop/Scan bodies,
value_info and local functions they use. It checks the cut first: if an output cannot be computed
from the inputs, nothing is built and the error names the output, the node and the tensor where the
cut leaks. New graph inputs and outputs are typed from value_info, else by inference (exact Python
propagation through elementwise chains, else ONNX shape inference on the graph only, no weight
read), else by running the source model once in ONNX Runtime, else from the user. The cut and the
propagation have fast paths that decline whatever they cannot do exactly; the general paths then
run, and they also redo any extraction that fails after a fast path, for the same diagnosis.
Weights are never read: the result refers to them where they lie (``Model.base_dir``), so saving it
streams only the weights it keeps.
"""

from __future__ import annotations

import importlib
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import onnx

from graphkit import _check_args as argcheck
from graphkit import propagate
from graphkit._numbers import parse_int
from graphkit._options import FeedOptions
from graphkit.build import dtype_to_onnx
from graphkit.errors import (
    ArgumentTypeError,
    GraphkitError,
    NameNotFoundError,
    OpenCutError,
    TensorNotFoundError,
    UsageError,
    did_you_mean,
    not_found,
)
from graphkit.graph import node_label, paused_gc, subgraph_outer_reads, subgraphs, toposort_proto
from graphkit.io import tensor_nbytes
from graphkit.model import Model, iter_graphs
from graphkit.validate import check_or_raise, require_sound

if TYPE_CHECKING:
    from graphkit.summary import TensorSig

__all__ = [
    "Exposure",
    "Extraction",
    "TensorType",
    "expose",
    "expose_with_report",
    "extract",
    "extract_with_report",
    "parse_tensor_spec",
]

log = logging.getLogger(__name__)

Dim = int | str | None


# ------------------------------------------------------------------------------------------ results


@dataclass(frozen=True)
class TensorType:
    """A tensor type given by the user: dtype name and shape (ints, dim names, or None for unknown).

    Attributes:
        dtype: A numpy-style dtype name ("float32", "int64") or an ONNX type name ("FLOAT16").
        shape: The dims, or None when the rank is unknown.
    """

    dtype: str
    shape: tuple[Dim, ...] | None = None

    def __post_init__(self) -> None:
        argcheck.name(self.dtype, "dtype", what="dtype name")
        if self.shape is not None:
            items = self.shape
            if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Iterable):
                raise ArgumentTypeError(f"shape= must be a list of dims (int, name or None), not "
                                        f"{argcheck.describe(items)}", hint="e.g. shape=('batch', 3, 224, 224)")
            dims = tuple(d if d is None or isinstance(d, str) else argcheck.integer(d, "shape", minimum=0, maximum=argcheck.INT64_MAX)
                         for d in items)
            object.__setattr__(self, "shape", dims)

    def type_proto(self) -> onnx.TypeProto:
        """The ONNX TypeProto of this type."""
        shape = None if self.shape is None else list(self.shape)
        return onnx.helper.make_tensor_type_proto(dtype_to_onnx(self.dtype), shape)


@dataclass(frozen=True)
class Extraction:
    """What ``extract_with_report`` kept.

    Attributes:
        model: The extracted model (weights still where the source keeps them).
        nodes: How many nodes of the main graph it holds.
        inputs: Its graph inputs, typed.
        outputs: Its graph outputs, typed.
        unused_inputs: Requested inputs that no kept node reads (kept as inputs all the same).
        initializers: How many initializers it keeps (main graph).
        weight_bytes: Bytes of the weights it keeps (main graph initializers).
        functions: The local functions it keeps, as ``domain::name``.
        typed_by: For each new input and output, where its type came from: "model" (value_info,
            graph inputs/outputs or initializers), "inference", "runtime", "user".
        notes: Things the user should know (unknown shapes, reordered nodes).
    """

    model: Model = field(repr=False)
    nodes: int
    inputs: tuple[TensorSig, ...]
    outputs: tuple[TensorSig, ...]
    unused_inputs: tuple[str, ...]
    initializers: int
    weight_bytes: int
    functions: tuple[str, ...] = ()
    typed_by: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the model itself left out)."""
        return {
            "nodes": self.nodes,
            "inputs": [_sig_dict(s) for s in self.inputs],
            "outputs": [_sig_dict(s) for s in self.outputs],
            "unused_inputs": list(self.unused_inputs),
            "initializers": self.initializers,
            "weight_bytes": self.weight_bytes,
            "functions": list(self.functions),
            "typed_by": dict(self.typed_by),
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class Exposure:
    """What ``expose_with_report`` added.

    Attributes:
        model: The model with the new graph outputs.
        added: The new graph outputs, typed, in the order added.
        already_outputs: Requested tensors that were graph outputs already (left as they were).
        typed_by: For each added output, where its type came from (see ``Extraction.typed_by``).
        notes: Things the user should know (unknown shapes).
    """

    model: Model = field(repr=False)
    added: tuple[TensorSig, ...]
    already_outputs: tuple[str, ...] = ()
    typed_by: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the model itself left out)."""
        return {
            "added": [_sig_dict(s) for s in self.added],
            "already_outputs": list(self.already_outputs),
            "outputs": len(self.model.lazy_proto.graph.output),
            "typed_by": dict(self.typed_by),
            "notes": list(self.notes),
        }


def _sig_dict(sig: TensorSig) -> dict[str, Any]:
    return {"name": sig.name, "dtype": sig.dtype, "shape": sig.shape}


# ------------------------------------------------------------------------------------- user specs

_SPEC = re.compile(r"^(?P<name>.+?):(?P<dtype>[A-Za-z][A-Za-z0-9_]*)(?::(?P<shape>\[.*\]))?$")


def parse_tensor_spec(text: str, known: Iterable[str] = ()) -> tuple[str, TensorType | None]:
    """Split ``name``, ``name:dtype`` or ``name:dtype:[d0,d1,...]`` into a name and an optional type.

    Names may contain colons (``input:0``): the text is a plain name when it is one of ``known`` or
    when what follows the last colons is not a dtype. Dims are ints, names (dynamic) or ``?``.

    Raises:
        UsageError: The dims cannot be parsed.
    """
    if text in (known if isinstance(known, (set, frozenset)) else set(known)):
        return text, None
    match = _SPEC.match(text)
    if not match or not _is_dtype(match.group("dtype")):
        return text, None
    shape_text = match.group("shape")
    shape = _parse_dims(shape_text, text) if shape_text is not None else None
    return match.group("name"), TensorType(match.group("dtype"), shape)


def _is_dtype(name: str) -> bool:
    try:
        dtype_to_onnx(name)
    except UsageError:
        return False
    return not name.isdigit()


def _parse_dims(text: str, spec: str) -> tuple[Dim, ...]:
    inner = text.strip()[1:-1].strip()
    if not inner:
        return ()
    dims: list[Dim] = []
    for part in (p.strip() for p in inner.split(",")):
        if re.fullmatch(r"[0-9]+", part):  # (ASCII: \d would take other scripts' digits)
            dims.append(parse_int(part, what=f"the dims of {spec!r}", hint="write the shape like [1,3,224,224]"))
        elif part in ("?", "-1", ""):
            dims.append(None)
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]*", part):
            dims.append(part)
        else:
            raise UsageError(
                f"cannot read the dims of {spec!r}: {part!r} is not a size, a dim name or '?'",
                hint="write the shape like [1,3,224,224] or [batch,3,?,?]",
            )
    return tuple(dims)


def _normalize_types(types: Mapping[str, Any] | None) -> dict[str, TensorType]:
    found: dict[str, TensorType] = {}
    for name, value in (types or {}).items():
        if isinstance(value, TensorType):
            found[name] = value
        elif isinstance(value, str):
            found[name] = TensorType(value)
        else:
            dtype, shape = value
            found[name] = TensorType(str(dtype), None if shape is None else tuple(shape))
        dtype_to_onnx(found[name].dtype)  # raises UsageError on an unknown dtype
    return found


# ------------------------------------------------------------------------------------ graph facts


class _Graph:
    """What extraction needs to know about the main graph, computed once and cheaply."""

    def __init__(self, model: Model, *, fast: bool = True) -> None:
        self.model = model
        self.graph = model.lazy_proto.graph
        #: Whether the fast paths (backward-scan cut, type propagation) may be tried.
        self.fast = fast
        self.nodes: list[onnx.NodeProto] = list(self.graph.node)  # (a list indexes faster than the proto's)
        self.sparse: dict[str, onnx.SparseTensorProto] = {s.values.name: s for s in self.graph.sparse_initializer}
        self.inputs: list[str] = [v.name for v in self.graph.input]
        self.input_set = set(self.inputs)
        self.outputs: list[str] = [v.name for v in self.graph.output]
        self.output_set = set(self.outputs)
        self._reads: dict[int, list[str]] = {}
        self._outs: dict[int, list[str]] = {}
        #: Producers of names found by the fast cut (a subset of ``producer``, built without it).
        self.located: dict[str, int] = {}

    @cached_property
    def producer(self) -> dict[str, int]:
        """The index of the node producing each name (one pass over every node: built on demand)."""
        return _producers(self.nodes)

    @cached_property
    def initializers(self) -> dict[str, onnx.TensorProto]:
        return {t.name: t for t in self.graph.initializer}

    def producer_of(self, name: str) -> int | None:
        found = self.located.get(name)
        return found if found is not None else self.producer.get(name)

    def outputs_of(self, i: int) -> list[str]:
        """The non-empty output names of node ``i``."""
        found = self._outs.get(i)
        if found is None:
            found = self._outs[i] = [o for o in self.nodes[i].output[:] if o]
        return found

    def reads(self, i: int) -> list[str]:
        """Every tensor node ``i`` reads: its inputs and its bodies' outer-scope reads."""
        found = self._reads.get(i)
        if found is None:
            node = self.nodes[i]
            found = node.input[:]
            if "" in found:
                found = [n for n in found if n]
            if node.attribute:
                for sub in subgraphs(node):
                    found.extend(sorted(subgraph_outer_reads(sub) - set(found)))
            self._reads[i] = found
        return found

    def defines(self, name: str) -> bool:
        return name in self.producer or name in self.initializers or name in self.sparse or name in self.input_set

    def kind(self, name: str) -> str:
        """"node output", "graph input", "initializer"."""
        if name in self.input_set and name not in self.initializers:
            return "graph input"
        if name in self.initializers or name in self.sparse:
            return "initializer"
        return "node output"

    def all_names(self) -> list[str]:
        names: dict[str, None] = dict.fromkeys(self.inputs)
        names.update(dict.fromkeys(self.initializers))
        names.update(dict.fromkeys(self.producer))
        return list(names)

    def producer_label(self, name: str) -> str:
        i = self.producer.get(name)
        return node_label(self.nodes[i], i) if i is not None else self.kind(name)


def _producers(nodes: list[onnx.NodeProto]) -> dict[str, int]:
    """The index of the node producing each name; the first producer wins (two make a model invalid)."""
    outputs = [node.output for node in nodes]
    if all(len(o) == 1 for o in outputs):  # (the usual case: one C-level zip, no inner loop)
        names = [o[0] for o in outputs]
        found = dict(zip(reversed(names), range(len(names) - 1, -1, -1)))
    else:
        found = {o: i for i, outs in zip(range(len(outputs) - 1, -1, -1), reversed(outputs)) for o in outs}
    found.pop("", None)
    return found


def _inside_subgraph(g: _Graph, name: str) -> tuple[str, list[str]] | None:
    """If only a body defines ``name``: the main-graph node holding that body, and that node's outputs."""
    for i, node in enumerate(g.nodes):
        if not len(node.attribute):
            continue
        for sub in subgraphs(node):
            for graph, _ in iter_graphs(sub):
                if any(name in n.output for n in graph.node) or any(v.name == name for v in graph.input):
                    return node_label(node, i), [o for o in node.output if o]
    return None


def _check_names(g: _Graph, names: Sequence[str], flag: str) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise UsageError(f"{name!r} is given twice in {flag}", hint=f"list each tensor once in {flag}")
        seen.add(name)
        if g.defines(name):
            continue
        body = _inside_subgraph(g, name)
        if body is not None:
            raise TensorNotFoundError(
                f"{name!r} ({flag}) is a tensor inside a body of {body[0]} in {g.model.name}; "
                "a submodel can only be cut at tensors of the main graph",
                hint=f"cut at the inputs or outputs of {body[0]} instead",
            )
        err = not_found(TensorNotFoundError, f"tensor ({flag})", name, g.all_names(), where=g.model.name)
        raise err


# ---------------------------------------------------------------------------------------- the cut


@dataclass
class _Cut:
    nodes: list[int]
    initializers: set[str]
    used_inputs: set[str]
    missing: list[str]  # graph inputs (or undefined names) the outputs need but are not given
    ordered: bool = False  # known to be in execution order (found by the backward scan)


#: Nodes the backward scan reads at a time.
_SCAN_CHUNK = 2048


def _scan_cut(g: _Graph, inputs: Sequence[str], outputs: Sequence[str]) -> _Cut | None:
    """The cut found in one backward pass over the node list, or None to leave it to ``_cut``.

    In a sorted graph (the usual case) every tensor is produced before it is read, so walking the
    node list backwards and keeping each node that produces a needed tensor finds the cut without
    first indexing every node's outputs. The pass stops as soon as nothing is needed any more and
    every given input is located, so it costs the nodes from the end of the list down to the cut's
    first node (or the first given input's producer), reading only the outputs of the nodes it
    passes. It gives up, and ``_cut`` runs with its full index, errors and handling of unsorted
    graphs, when a kept node reads a tensor that a later node produces (unsorted), when a needed
    tensor or a given input is found nowhere (an open cut, an unknown name, a subgraph tensor), or
    when a needed tensor is a graph input that is not given, or when a node it passes makes a
    tensor a kept node already makes. (Two definitions of one name make a model invalid, and
    ``check`` says so; where this pass cannot see the second one, it keeps the definition nearest
    before the reader, ``_cut`` the first: an initializer before a node output, the first node.)
    """
    given = set(inputs)
    inits, sparse, graph_inputs = g.initializers, g.sparse, g.input_set
    pending: set[str] = set()
    resolved: set[str] = set()
    used: set[str] = set()
    kept_inits: set[str] = set()
    kept: list[int] = []
    locate = {n for n in given if n not in graph_inputs and n not in inits and n not in sparse}
    for name in outputs:
        if name in given:
            used.add(name)
        elif name in inits or name in sparse:
            kept_inits.add(name)
        elif name in graph_inputs:
            return None
        else:
            pending.add(name)
    nodes, located = g.nodes, g.located
    plain: dict[str, bool] = {}
    hi = len(nodes)
    while pending or locate:
        if hi == 0:
            return None
        # A chunk at a time, its fields read by comprehensions (far cheaper per node than
        # statements), its inputs only once one of its nodes is kept.
        lo = max(0, hi - _SCAN_CHUNK)
        chunk = nodes[lo:hi]
        chunk_outs = [n.output[:] for n in chunk]
        chunk_ins: list[list[str]] | None = None
        chunk_ops: list[str] = []
        chunk_domains: list[str] = []
        for k in range(hi - lo - 1, -1, -1):
            outs = chunk_outs[k]
            if resolved and not resolved.isdisjoint(outs):
                return None  # a second producer of a kept tensor: an invalid graph, left to _cut
            if pending.isdisjoint(outs) and (not locate or locate.isdisjoint(outs)):
                continue
            i = lo + k
            if "" in outs:
                outs = [o for o in outs if o]
            if locate and not locate.isdisjoint(outs):
                for o in outs:
                    if o in locate:
                        located[o] = i
                        locate.discard(o)
                if pending.isdisjoint(outs):
                    continue
            pending.difference_update(outs)
            resolved.update(outs)
            kept.append(i)
            if chunk_ins is None:
                chunk_ins = [n.input[:] for n in chunk]
                chunk_ops = [n.op_type for n in chunk]
                chunk_domains = [n.domain for n in chunk]
            op = chunk_ops[k]
            flat = plain.get(op)
            if flat is None:
                flat = plain[op] = _without_bodies(op)
            if flat and not chunk_domains[k]:
                reads = chunk_ins[k]
                if "" in reads:
                    reads = [r for r in reads if r]
            else:
                reads = g.reads(i)
            for r in reads:
                if r in given:
                    used.add(r)
                elif r in resolved:
                    return None  # read before it is produced: unsorted (or a cycle)
                elif r in inits or r in sparse:
                    kept_inits.add(r)
                elif r in graph_inputs:
                    return None
                else:
                    pending.add(r)
            if not pending and not locate:
                break
        hi = lo
    kept.reverse()
    return _Cut(kept, kept_inits, used, [], ordered=True)


def _cut(g: _Graph, inputs: Sequence[str], outputs: Sequence[str]) -> _Cut:
    """Walk back from the outputs, stopping at the inputs; collect nodes, weights and leaks."""
    given = set(inputs)
    needed: set[int] = set()
    initializers: set[str] = set()
    used: set[str] = set()
    missing: list[str] = []
    seen: set[str] = set()
    stack = list(reversed(outputs))
    producer, known, sparse, reads = g.producer, g.initializers, g.sparse, g.reads  # (locals: a hot loop)
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in given:
            used.add(name)
            continue
        i = producer.get(name)
        if i is not None:
            if i not in needed:
                needed.add(i)
                stack.extend(reversed(reads(i)))
        elif name in known or name in sparse:
            initializers.add(name)
        else:
            missing.append(name)
    return _Cut(sorted(needed), initializers, used, missing)


#: The standard ops with graph attributes (bodies), in every opset up to the installed onnx's (a
#: test compares this with onnx's schemas).
BODY_OPS = frozenset({"If", "Loop", "Scan", "SequenceMap"})


def _without_bodies(op: str) -> bool:
    """Whether a standard-domain node of op type ``op`` cannot hold a body: a known standard op
    other than ``BODY_OPS`` (an unknown op type might carry graph attributes)."""
    return op not in BODY_OPS and onnx.defs.has(op)


def _ancestors(g: _Graph, start: Iterable[str], stop: set[str]) -> set[str]:
    """Every tensor ``start`` depends on (themselves included), not walking past ``stop``."""
    found: set[str] = set()
    stack = list(start)
    while stack:
        name = stack.pop()
        if name in found:
            continue
        found.add(name)
        if name in stop:
            continue
        i = g.producer.get(name)
        if i is not None:
            stack.extend(g.reads(i))
    return found


def _computable(g: _Graph, name: str, given: set[str]) -> bool:
    return not _cut(g, sorted(given), [name]).missing


def _open_cut_error(g: _Graph, inputs: Sequence[str], outputs: Sequence[str], cut: _Cut) -> OpenCutError:
    """Explain which output cannot be computed, through which node, from which tensor."""
    given = set(inputs)
    sources = set(cut.missing)
    for output in outputs:
        if _computable(g, output, given):
            continue
        found = _find_leak(g, output, given, sources)
        if found is None:  # the output itself is an ungiven graph input
            return OpenCutError(
                f"cannot compute {output!r}: it is graph input {output!r} of {g.model.name}, not among the inputs",
                hint=f"add {output!r} to --inputs",
            )
        reader, tensor = found
        origin = sorted(_ancestors(g, [tensor], given) & sources)
        origin_text = ", ".join(repr(s) for s in origin[:3])
        if tensor in sources:
            what = f"a {g.kind(tensor)}" if g.defines(tensor) else "a name nothing defines"
            fact = f"{what} that is not among the inputs"
            if not (_ancestors(g, [output], given) & given):
                fact += " (none of the given inputs lies upstream of it)"
        else:
            fact = f"which is neither given nor computable from the inputs (it needs {origin_text})"
        others = [o for o in outputs if o != output and not _computable(g, o, given)]
        more = f" ({len(others)} more output(s) cannot be computed either)" if others else ""
        message = f"cannot compute {output!r}: {node_label(g.nodes[reader], reader)} reads {tensor!r}, {fact}{more}"
        return OpenCutError(message, hint=_leak_hint(g, tensor, given, sources))
    return OpenCutError("the outputs cannot be computed from the inputs", hint="check --inputs")


def _find_leak(g: _Graph, output: str, given: set[str], sources: set[str]) -> tuple[int, str] | None:
    """The node where the cut leaks on the way to ``output``, and the tensor it reads.

    Walking back from the output along tensors that cannot be computed, the leak is the first node
    that also reads something fed by the given inputs (where the cut lets data in from outside);
    without such a node, it is the node that reads the ungiven source itself.
    """
    region = _ancestors(g, [output], given)
    ok = _closure(g, region, {n for n in region if n in given or n in g.initializers or n in g.sparse})
    fed = _closure(g, region, {n for n in region if n in given}, any_read=True)
    name = output
    last: tuple[int, str] | None = None
    visited: set[str] = set()
    while name in g.producer and name not in visited:
        visited.add(name)
        i = g.producer[name]
        reads = g.reads(i)
        bad = [r for r in reads if r not in ok]
        if not bad:
            break
        last = (i, bad[0])
        if any(r in fed and r in ok for r in reads):
            return last
        name = bad[0]
    return last


def _closure(g: _Graph, region: set[str], start: set[str], *, any_read: bool = False) -> set[str]:
    """Grow ``start`` by node outputs whose reads are all (or, with ``any_read``, any) in it."""
    found = set(start)
    order = sorted({g.producer[n] for n in region if n in g.producer})
    changed = True
    while changed:
        changed = False
        for i in order:
            outs = [o for o in g.nodes[i].output if o and o not in found]
            if not outs:
                continue
            reads = g.reads(i)
            hit = any(r in found for r in reads) if any_read else all(r in found for r in reads)
            if hit:
                found.update(outs)
                changed = True
    return found


def _leak_hint(g: _Graph, tensor: str, given: set[str], sources: set[str]) -> str:
    """Suggest what to add to --inputs: the leaking tensor, or where its branch leaves the given ones."""
    first = f"add {tensor!r} to --inputs"
    upstream_of_given = _ancestors(g, given, set()) - given
    candidates = [c for c in _bfs_upstream(g, tensor, given, limit=200) if c != tensor and c in upstream_of_given]
    for candidate in candidates[:20]:
        if _computable(g, tensor, given | {candidate}):
            return f"{first}, or add {candidate!r}, from which it can be computed"
    return first


def _bfs_upstream(g: _Graph, start: str, stop: set[str], *, limit: int) -> list[str]:
    order: list[str] = []
    queue = [start]
    seen = {start}
    while queue and len(order) < limit:
        name = queue.pop(0)
        order.append(name)
        i = g.producer.get(name)
        if i is None or name in stop:
            continue
        for r in g.reads(i):
            if r not in seen:
                seen.add(r)
                queue.append(r)
    return order


# ---------------------------------------------------------------------------------------- typing


def _has_dtype(tp: onnx.TypeProto) -> bool:
    kind = tp.WhichOneof("value")
    if kind == "tensor_type":
        return tp.tensor_type.elem_type != 0
    return kind is not None


def _has_shape(tp: onnx.TypeProto) -> bool:
    if tp.WhichOneof("value") == "tensor_type":
        return tp.tensor_type.HasField("shape")
    return tp.WhichOneof("value") is not None


def _known_types(g: _Graph, names: Iterable[str]) -> dict[str, onnx.TypeProto]:
    """Types the model states: graph inputs and outputs, value_info, initializers."""
    wanted = set(names)
    found: dict[str, onnx.TypeProto] = {}
    for values in (g.graph.value_info, g.graph.output, g.graph.input):
        for v in values:
            if v.name in wanted and _has_dtype(v.type):
                found[v.name] = v.type
    for name in wanted:
        if name in g.initializers and name not in found:
            t = g.initializers[name]
            found[name] = onnx.helper.make_tensor_type_proto(t.data_type, list(t.dims))
        elif name in g.sparse and name not in found:
            s = g.sparse[name]
            found[name] = onnx.helper.make_tensor_type_proto(s.values.data_type, list(s.dims))
    return found


#: Initializers up to this size may keep their values in the graph that shape inference sees
#: (shape arguments such as Reshape's); larger ones are given to it without data, never read.
_INFER_VALUE_LIMIT = 4096

#: Element types whose values ONNX shape inference reads only at the inputs of ``_FLOAT_VALUE_OPS``
#: (everywhere else a float tensor's type is all it uses): their data is left out elsewhere.
_FLOAT_TYPES = frozenset(
    getattr(onnx.TensorProto, n)
    for n in ("FLOAT", "DOUBLE", "FLOAT16", "BFLOAT16", "COMPLEX64", "COMPLEX128", "FLOAT8E4M3FN",
              "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "FLOAT4E2M1", "FLOAT8E8M0")
    if hasattr(onnx.TensorProto, n)
)

#: Standard ops whose shape inference reads the value of an input that may be a float tensor
#: (scales, range bounds, depth, pad value).
_FLOAT_VALUE_OPS = frozenset({"Resize", "Upsample", "Range", "OneHot", "Pad", "ConstantOfShape"})


def _value_readers(g: _Graph, nodes: Sequence[onnx.NodeProto]) -> set[str]:
    """Names whose values shape inference may read even when they are float: inputs of
    ``_FLOAT_VALUE_OPS``, of nodes of other domains (functions, custom ops) and of nodes with bodies."""
    found: set[str] = set()
    for node in nodes:
        bodies = subgraphs(node) if node.attribute else []
        if bodies or node.op_type in _FLOAT_VALUE_OPS or node.domain not in ("", "ai.onnx"):
            found.update(node.input)
            for sub in bodies:
                found |= subgraph_outer_reads(sub)
    return found


def _inferred_types(
    g: _Graph,
    names: Sequence[str],
    nodes: Sequence[onnx.NodeProto],
    stops: Mapping[str, onnx.TypeProto],
    initializers: Iterable[onnx.TensorProto],
) -> dict[str, onnx.TypeProto]:
    """Run ONNX shape inference on ``nodes`` (a weightless copy) and return the types of ``names``.

    The graph inputs and the already typed ``stops`` are typed inputs. Initializers keep their
    values only where shape inference may read them (small ones, not float unless an op reads a
    float value); the others are passed without data (their type is what inference uses), which
    halves what it parses. Weights on disk are never read.
    """
    proto = onnx.ModelProto()
    proto.ir_version = g.model.lazy_proto.ir_version
    proto.opset_import.extend(g.model.lazy_proto.opset_import)
    proto.functions.extend(g.model.lazy_proto.functions)
    graph = proto.graph  # (built in place: copying 10^4 nodes twice costs as much as inferring a few)
    graph.name = g.graph.name or "graph"
    graph.node.extend(nodes)
    graph.input.extend(g.graph.input)
    declared = set(g.inputs)
    for name, tp in stops.items():
        if name not in declared:
            graph.input.append(_value_info(name, tp))
            declared.add(name)
    graph.initializer.extend(t for t in initializers if t.name not in declared)
    _strip_values(graph.initializer, _value_readers(g, nodes))
    for sparse in g.graph.sparse_initializer:
        if sparse.values.name not in declared:
            graph.input.append(
                onnx.helper.make_tensor_value_info(sparse.values.name, sparse.values.data_type, list(sparse.dims))
            )
    graph.value_info.extend(g.graph.value_info)
    return _run_inference(proto, names)


def _strip_values(tensors: Iterable[onnx.TensorProto], value_readers: set[str]) -> None:
    """Drop the data of the (copied) initializers whose values shape inference does not read."""
    external, floats, limit = onnx.TensorProto.EXTERNAL, _FLOAT_TYPES, _INFER_VALUE_LIMIT
    for tensor in tensors:
        if tensor.data_location == external:
            pass
        elif tensor.data_type in floats:
            if tensor.name in value_readers and tensor.ByteSize() <= limit:
                continue
        elif tensor.ByteSize() <= limit:
            continue
        if tensor.HasField("raw_data"):  # (the usual case: one field to clear)
            tensor.ClearField("raw_data")
        else:
            for field_name in _DATA_FIELDS:
                tensor.ClearField(field_name)


_DATA_FIELDS = ("float_data", "int32_data", "int64_data", "double_data", "uint64_data", "string_data",
                "external_data", "data_location")


def _observed_types(model: Model, names: Sequence[str]) -> dict[str, onnx.TypeProto]:
    """Run the source model once in ONNX Runtime with the tensors exposed, and read their types.

    Dims that change when the model's dynamic input dims change are left dynamic. Returns {} when
    ONNX Runtime cannot run the model (custom ops, inputs it cannot generate).
    """
    rt = importlib.import_module("graphkit.run")  # onnxruntime is imported only when needed

    proto = onnx.ModelProto()
    proto.CopyFrom(model.lazy_proto)
    present = {o.name for o in proto.graph.output}
    for name in names:
        if name not in present:
            proto.graph.output.append(onnx.ValueInfoProto(name=name))
    exposed = model.derive(proto)
    dynamic = _dynamic_input_shapes(model)
    try:
        first = rt.run(exposed, outputs=list(names), feed_options=FeedOptions(seed=0))
        second = rt.run(exposed, outputs=list(names), feed_options=FeedOptions(seed=0, shapes=dynamic)) if dynamic else first
    except GraphkitError as err:
        log.info("ONNX Runtime cannot run %s to observe types: %s", model.name, err)
        return {}
    found: dict[str, onnx.TypeProto] = {}
    for name in names:
        a, b = first[name], second[name]
        try:
            elem = onnx.helper.np_dtype_to_tensor_dtype(a.dtype)
        except (KeyError, TypeError, ValueError):
            continue
        dims: list[Dim] = list(a.shape)
        if a.ndim == b.ndim:
            dims = [d if d == e else None for d, e in zip(a.shape, b.shape)]
        found[name] = onnx.helper.make_tensor_type_proto(elem, dims)
    return found


def _dynamic_input_shapes(model: Model) -> dict[str, list[int]]:
    from graphkit.summary import shape_of

    initializers = {t.name for t in model.lazy_proto.graph.initializer}
    shapes: dict[str, list[int]] = {}
    for value in model.lazy_proto.graph.input:
        if value.name in initializers:
            continue
        shape = shape_of(value)
        if shape and any(not isinstance(d, int) or d <= 0 for d in shape):
            shapes[value.name] = [d if isinstance(d, int) and d > 0 else 2 for d in shape]
    return shapes


@dataclass
class _Typing:
    types: dict[str, onnx.TypeProto]
    source: dict[str, str]
    notes: list[str]


def _names_read(g: _Graph, stop: int) -> set[str]:
    """Every name the first ``stop`` nodes read (their bodies' outer-scope reads included)."""
    nodes = g.nodes[:stop]
    read = {name for node in nodes for name in node.input}
    if any(node.attribute for node in nodes):
        for i, node in enumerate(nodes):
            if node.attribute:
                read.update(g.reads(i))
    return read


def _run_inference(proto: onnx.ModelProto, names: Sequence[str]) -> dict[str, onnx.TypeProto]:
    """Infer the types of ``names``: without data propagation first (a fifth cheaper), and again with
    it when that leaves a type without a full shape (data propagation can only refine those)."""
    found = _infer(proto, names, data_prop=False)
    if len(found) == len(set(names)) and all(_fully_shaped(tp) for tp in found.values()):
        return found
    return _infer(proto, names, data_prop=True)


def _fully_shaped(tp: onnx.TypeProto) -> bool:
    """Whether ``tp`` is a tensor type with a shape whose every dim is a size or a declared name."""
    if tp.WhichOneof("value") != "tensor_type" or not tp.tensor_type.HasField("shape"):
        return False
    return all(
        d.HasField("dim_value") or (d.HasField("dim_param") and not d.dim_param.startswith("unk__"))
        for d in tp.tensor_type.shape.dim
    )


def _infer(proto: onnx.ModelProto, names: Sequence[str], *, data_prop: bool) -> dict[str, onnx.TypeProto]:
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, check_type=False, strict_mode=False, data_prop=data_prop)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError, RuntimeError, ValueError) as err:
        log.info("shape inference failed (%s); trying other ways to type the boundary", err)
        return {}
    wanted = set(names)
    found: dict[str, onnx.TypeProto] = {}
    infos = inferred.graph.value_info
    for k in range(len(infos) - 1, -1, -1):  # (from the end: the wanted names are usually produced last)
        value = infos[k]
        if value.name in wanted and value.name not in found and _has_dtype(value.type):
            found[value.name] = value.type
            if len(found) == len(wanted):
                break
    return found


def _infer_somehow(
    g: _Graph,
    names: Sequence[str],
    stops: Mapping[str, onnx.TypeProto],
    cut_nodes: Sequence[int] | None,
    cut_inputs: Sequence[str],
) -> dict[str, onnx.TypeProto]:
    """Infer the types of ``names`` on as little of the graph as is cheap to find.

    First, when the fast paths are on, exact Python propagation (``_propagated_types``); then ONNX
    shape inference. Outputs of a cut whose inputs are all typed: the cut's own nodes. Otherwise
    the prefix of the node list up to the last producer (C-level copies; enough when the nodes are
    sorted), and when that is not enough, the exact upstream region.
    """
    if g.fast:
        found = _propagated_types(g, names, stops, cut_nodes if cut_nodes is not None and all(
            n in stops for n in cut_inputs) else None)
        if found is not None:
            return found
    if cut_nodes is not None and all(n in stops for n in cut_inputs):
        reads = {r for i in cut_nodes for r in g.reads(i)}
        inits = _kept_initializers(g, reads)
        return _inferred_types(g, names, [g.nodes[i] for i in cut_nodes], stops, inits)
    # The nodes up to the last producer, with only the initializers they read: inference costs
    # about as much per initializer as per node, so the ones downstream would double its time.
    last = max((g.producer[n] for n in names if n in g.producer), default=-1)
    prefix_inits = _kept_initializers(g, _names_read(g, last + 1))
    found = _inferred_types(g, names, g.nodes[: last + 1], stops, prefix_inits)
    missing = [n for n in names if n not in found]
    if missing:
        region = _ancestors(g, missing, set(stops))
        nodes = sorted({g.producer[n] for n in region if n in g.producer and n not in stops})
        inits = _kept_initializers(g, region)
        found |= _inferred_types(g, missing, [g.nodes[i] for i in nodes], stops, inits)
    return found


def _propagated_types(
    g: _Graph, names: Sequence[str], stops: Mapping[str, onnx.TypeProto], region: Sequence[int] | None
) -> dict[str, onnx.TypeProto] | None:
    """The types of ``names`` by exact Python propagation (graphkit.propagate), or None.

    ``region`` is the cut's nodes when its inputs are all typed (they are typed in order);
    otherwise every node up to the last producer of ``names`` is typed in one forward pass
    (``_forward_types``). None (then ONNX shape inference runs) when the model declares value_info
    or sparse initializers (inference merges or reads them), when a node is outside what
    propagation types exactly, or when the nodes are not in execution order.
    """
    if len(g.graph.value_info) or len(g.graph.sparse_initializer):
        return None
    opset = next((o.version for o in g.model.lazy_proto.opset_import if o.domain in ("", "ai.onnx")), 0)
    typer = propagate.Typer(opset)
    types: dict[str, propagate.FastType] = {}
    if region is None:
        if not _forward_types(g, names, stops, typer, types):
            return None
    else:
        steps = _region_steps(g, region, stops, typer, types)
        if steps is None or not typer.run(steps, types):
            return None
    found: dict[str, onnx.TypeProto] = {}
    protos: dict[propagate.FastType, onnx.TypeProto] = {}  # (shared: callers copy, never change them)
    for name in names:
        t = types.get(name)
        if t is None:
            return None
        tp = protos.get(t)
        if tp is None:
            tp = protos[t] = propagate.to_type_proto(t)
        found[name] = tp
    return found


def propagated_types(model: Model, names: Sequence[str]) -> dict[str, onnx.TypeProto]:
    """The types of the node outputs ``names`` by exact propagation (``graphkit.propagate``), or {}
    when the model does not suit it (an op it does not type, value_info to merge, unsorted nodes):
    then ONNX shape inference is the caller's way. Used by split for its boundary tensors."""
    with paused_gc():
        return _propagated_types(_Graph(model), names, {}, None) or {}


def _outside_type(
    name: str,
    stops: Mapping[str, onnx.TypeProto],
    inits: Mapping[str, onnx.TensorProto],
    graph_inputs: set[str],
    g: _Graph,
) -> propagate.FastType | None:
    """The type of a tensor read from outside the propagated nodes: a stop, a graph input, a weight."""
    if name in stops:
        return propagate.type_of(stops[name])
    if name in graph_inputs:
        if name in inits:
            return None  # an overridable initializer: its type is the input's; left to ONNX
        return propagate.type_of(next(v.type for v in g.graph.input if v.name == name))
    tensor = inits.get(name)
    if tensor is None or not tensor.data_type:
        return None
    return tensor.data_type, tuple(tensor.dims[:])


_Step = tuple[onnx.NodeProto, str, list[str], str]


def _region_steps(
    g: _Graph,
    region: Sequence[int],
    stops: Mapping[str, onnx.TypeProto],
    typer: propagate.Typer,
    types: dict[str, propagate.FastType],
) -> list[_Step] | None:
    """The cut's nodes as propagation steps, with the types of what they read from outside the cut
    added to ``types``; None if a node or an outside type is beyond what propagation types."""
    steps: list[_Step] = []
    produced: set[str] = set()
    inits, graph_inputs = g.initializers, g.input_set
    for i in region:
        node = g.nodes[i]
        op = node.op_type
        outs = g.outputs_of(i)
        if len(outs) != 1 or not typer.supports(op, node.domain):
            return None
        reads = g.reads(i)
        for r in reads:
            if r not in produced and r not in types:
                t = _outside_type(r, stops, inits, graph_inputs, g)
                if t is None:
                    return None
                types[r] = t
        produced.add(outs[0])
        steps.append((node, op, reads, outs[0]))
    return steps


def _forward_types(
    g: _Graph,
    names: Sequence[str],
    stops: Mapping[str, onnx.TypeProto],
    typer: propagate.Typer,
    types: dict[str, propagate.FastType],
) -> bool:
    """Type every node up to the last producer of ``names``, in node-list order, into ``types``.

    One forward pass: each node is typed from its inputs' types (by an earlier node, or as a stop,
    a graph input or an initializer). In a sorted graph this gives each tensor the type its
    ancestors determine, exactly as a walk over its ancestors alone would (a node's type depends on
    nothing else). Cheaper than first finding the ancestors: each node is read once, and only its
    op, inputs and outputs. Returns whether every name in ``names`` was typed; False at once at
    the first node propagation cannot type (an op it does not know, an input read before it is
    made), so a model it does not suit (convolutions, matmuls) costs a few nodes before ONNX shape
    inference takes over, not a pass over the graph.
    """
    starts = [g.producer_of(n) for n in names]
    if any(p is None for p in starts):
        return False
    last = max(p for p in starts if p is not None)
    for name, tp in stops.items():
        t = propagate.type_of(tp)
        if t is not None:
            types[name] = t
    inits, graph_inputs = g.initializers, g.input_set
    outside = set(stops) | graph_inputs
    nodes = g.nodes
    supported: dict[str, bool] = {}
    get, output = types.get, typer.output
    for i in range(last + 1):
        node = nodes[i]
        op = node.op_type
        ok = supported.get(op)
        if ok is None:
            ok = supported[op] = typer.supports(op, "")
        if not ok or node.domain:
            return False  # (an op propagation does not type: most likely upstream, so stop at once)
        ins = []
        for r in node.input[:]:
            t = get(r)
            if t is None:
                tensor = inits.get(r)
                if tensor is not None and r not in outside and tensor.data_type:
                    t = types[r] = (tensor.data_type, tuple(tensor.dims[:]))
                elif r in outside or tensor is not None:
                    t = _outside_type(r, stops, inits, graph_inputs, g)
                    if t is None:
                        return False
                    types[r] = t
                else:
                    return False  # made later (unsorted), or nowhere
            ins.append(t)
        outs = node.output[:]
        if len(outs) != 1:
            return False
        out = output(node, op, tuple(ins))
        if out is None:
            return False
        if outs[0] not in stops:
            types[outs[0]] = out
    return all(n in types for n in names)


def _type_boundary(
    g: _Graph,
    inputs: Sequence[str],
    outputs: Sequence[str],
    user: Mapping[str, TensorType],
    *,
    observe: bool,
    output_flag: str = "--outputs",
    cut_nodes: Sequence[int] | None = None,
) -> _Typing:
    """Type every boundary tensor, or raise naming the one that needs a type from the user.

    Order: the user's types, then the model's (value_info, graph inputs/outputs, initializers), then
    shape inference, then one run in ONNX Runtime. Inference of the outputs starts from the typed
    inputs, so a type the user gives for an input also types what is computed from it.
    """
    names = list(dict.fromkeys([*inputs, *outputs]))
    types: dict[str, onnx.TypeProto] = {}
    source: dict[str, str] = {}
    for name in names:
        if name in user:
            types[name], source[name] = user[name].type_proto(), "user"
    for name, tp in _known_types(g, [n for n in names if n not in types]).items():
        types[name], source[name] = tp, "model"
    for group in (inputs, outputs):
        pending = [n for n in group if n not in types or not _has_shape(types[n])]
        if not pending:
            continue
        stops = {n: types[n] for n in inputs if n in types and n not in pending}
        for name, tp in _infer_somehow(g, pending, stops, cut_nodes if group is outputs else None, inputs).items():
            if name not in types or _has_shape(tp):
                types[name], source[name] = tp, "inference"
    pending = [n for n in names if n not in types or not _has_shape(types[n])]
    if pending and observe:
        for name, tp in _observed_types(g.model, pending).items():
            types[name], source[name] = tp, "runtime"
    notes: list[str] = []
    for name in names:
        if name not in types:
            raise _needs_type(g, name, "--inputs" if name in inputs else output_flag, observe=observe)
        if not _has_shape(types[name]):
            notes.append(f"the shape of {name!r} is unknown (its dtype is known); it is left unranked")
    return _Typing(types, source, notes)


def _needs_type(g: _Graph, name: str, flag: str, *, observe: bool) -> UsageError:
    why = "shape inference cannot type it" + (" and ONNX Runtime cannot run the model" if observe else "")
    return UsageError(
        f"cannot tell the dtype of {name!r} ({flag}), which {g.producer_label(name)} produces: {why}",
        hint=f"give its type, e.g. {flag} '{name}:float32:[1,3,224,224]' (dims may be names or ?)",
    )


def _value_info(name: str, tp: onnx.TypeProto, template: onnx.ValueInfoProto | None = None) -> onnx.ValueInfoProto:
    value = onnx.ValueInfoProto()
    if template is not None:
        value.CopyFrom(template)
    value.name = name
    value.type.CopyFrom(tp)
    return value


# ---------------------------------------------------------------------------------------- extract


def _check_cut_args(model: Model, check: bool, types: Mapping[str, Any] | None, observe: bool,
                    **names: Sequence[str] | None) -> None:
    """The prologue of extract's and expose's public functions: every argument of the right type.

    ``names`` are the name lists by keyword; extract's may be None (its defaults), expose's may not.
    """
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    for keyword, value in names.items():
        if keyword in ("inputs", "outputs"):
            argcheck.optional(argcheck.names, value, keyword, what="tensor name")
        else:
            argcheck.names(value, keyword, what="tensor name" if keyword == "tensors" else "op type")
    argcheck.boolean(check, "check")
    argcheck.boolean(observe, "observe")
    argcheck.optional(argcheck.mapping, types, "types", key=lambda k, kw: argcheck.name(k, kw, what="tensor name"),
                      item=_type_value)


def _type_value(value: Any, keyword: str) -> Any:
    if isinstance(value, (TensorType, str)):
        return value
    if isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)) and len(value) == 2:
        return TensorType(value[0], value[1])
    raise ArgumentTypeError(f"{keyword}= must be a TensorType, a dtype name or a (dtype, shape) pair, not "
                            f"{argcheck.describe(value)}", hint="e.g. types={'x': ('float32', [1, 3, 224, 224])}")


def extract(
    model: Model,
    /,
    inputs: Sequence[str] | None = None,
    outputs: Sequence[str] | None = None,
    *,
    check: bool = True,
    types: Mapping[str, Any] | None = None,
    observe: bool = True,
) -> Model:
    """The submodel that computes ``outputs`` from ``inputs``.

    See ``extract_with_report`` for the arguments; this returns only the model.
    """
    _check_cut_args(model, check, types, observe, inputs=inputs, outputs=outputs)
    return _extract(model, inputs, outputs, check=check, types=types, observe=observe).model


def extract_with_report(
    model: Model,
    /,
    inputs: Sequence[str] | None = None,
    outputs: Sequence[str] | None = None,
    *,
    check: bool = True,
    types: Mapping[str, Any] | None = None,
    observe: bool = True,
) -> Extraction:
    """Extract the submodel that computes ``outputs`` from ``inputs``, and say what it kept.

    Any tensor of the main graph may be an input (graph input, intermediate, initializer) or an
    output (graph output, intermediate). The result holds exactly the nodes needed, in their
    original order, with the initializers and outer-scope tensors their If/Loop/Scan bodies read,
    the value_info of kept tensors and the local functions still used; ir_version, opsets,
    producer, doc strings and metadata are kept. Requested inputs that are not needed stay inputs
    and are reported as unused. Weights are not read.

    Args:
        model: The source model (not modified).
        inputs: The tensors that become the graph inputs (default: the model's graph inputs,
            keeping only those needed).
        outputs: The tensors that become the graph outputs (default: the model's graph outputs).
        check: Validate the result (onnx.checker and graphkit's checks) before returning it.
            onnx.checker's full check (strict shape inference) runs when a boundary type was
            stated (by the user, ONNX Runtime, or the source's value_info of an intermediate);
            when every boundary type was inferred from the kept nodes themselves or declared by
            the source for its own inputs and outputs, its plain check runs (strict inference
            would re-derive the source's own types from unchanged copies of its nodes).
        types: Types for boundary tensors, by name: a ``TensorType``, a dtype name, or a
            ``(dtype, shape)`` pair. They take precedence over what is inferred.
        observe: When value_info and shape inference cannot type a boundary tensor, run the source
            model once in ONNX Runtime on generated inputs to observe it.

    Raises:
        TensorNotFoundError: A name is not a tensor of the main graph (with "did you mean").
        OpenCutError: An output cannot be computed from the inputs; names the output, the node
            and the tensor where the cut leaks, and what to add to the inputs.
        UsageError: A name is given twice, or a boundary tensor's type cannot be found.
        InvalidModelError: ``check`` is set and the result fails validation.
    """
    from graphkit.summary import TensorSig  # (only the report needs it)

    _check_cut_args(model, check, types, observe, inputs=inputs, outputs=outputs)
    done = _extract(model, inputs, outputs, check=check, types=types, observe=observe)
    g, cut, proto = done.graph, done.cut, done.model.lazy_proto
    kept = [g.initializers[n] for n in cut.initializers if n in g.initializers]
    return Extraction(
        model=done.model,
        nodes=len(proto.graph.node),
        inputs=tuple(TensorSig.of(v) for v in proto.graph.input),
        outputs=tuple(TensorSig.of(v) for v in proto.graph.output),
        unused_inputs=tuple(n for n in done.inputs if n not in cut.used_inputs),
        initializers=len(proto.graph.initializer),
        weight_bytes=sum(max(tensor_nbytes(t), 0) for t in kept),
        functions=tuple(f"{f.domain}::{f.name}" for f in proto.functions),
        typed_by={n: done.typing.source.get(n, "model") for n in dict.fromkeys(done.inputs + done.outputs)},
        notes=done.notes,
    )


@dataclass
class _Done:
    """An extraction before its report: what ``extract`` returns and ``extract_with_report`` tells."""

    model: Model
    graph: _Graph
    cut: _Cut
    typing: _Typing
    inputs: list[str]
    outputs: list[str]
    notes: tuple[str, ...]


@paused_gc()
def _extract(
    model: Model,
    inputs: Sequence[str] | None,
    outputs: Sequence[str] | None,
    *,
    check: bool,
    types: Mapping[str, Any] | None,
    observe: bool,
    fast: bool = True,
) -> _Done:
    """Extract (see ``extract_with_report``), leaving the report's figures uncomputed.

    With ``fast``, the fast paths are tried first; if anything after them fails (typing, the
    result's check), the extraction is done again without them, so a broken source gets the
    general paths' diagnosis (they may name a cause the fast paths did not look for, e.g. a body
    on an op type that has none). The garbage collector is held off meanwhile (``paused_gc``).
    """
    g = _Graph(model, fast=fast)
    user_types = _normalize_types(types)
    default_inputs = inputs is None
    wanted_in = list(inputs) if inputs is not None else [n for n in g.inputs if n not in g.initializers]
    wanted_out = list(outputs) if outputs is not None else list(g.outputs)
    if not wanted_out:
        raise UsageError("no outputs to extract", hint="give the tensors to compute with --outputs")
    for name in user_types:
        if name not in wanted_in and name not in wanted_out:
            raise UsageError(f"a type is given for {name!r}, which is neither an input nor an output",
                             hint="give types only for tensors listed in --inputs or --outputs")
    distinct = len(set(wanted_in)) == len(wanted_in) and len(set(wanted_out)) == len(wanted_out)
    cut = _scan_cut(g, wanted_in, wanted_out) if distinct and fast else None
    if cut is None:  # (something only the full walk handles or explains)
        g.fast = False
        _check_names(g, wanted_in, "--inputs")
        _check_names(g, wanted_out, "--outputs")
        cut = _cut(g, wanted_in, wanted_out)
        if cut.missing:
            raise _open_cut_error(g, wanted_in, wanted_out, cut)
    if default_inputs:
        wanted_in = [n for n in wanted_in if n in cut.used_inputs]
    try:
        typing = _type_boundary(g, wanted_in, wanted_out, user_types, observe=observe, cut_nodes=cut.nodes)
        proto, reordered = _build_extracted(g, cut, wanted_in, wanted_out, typing.types)
        result = model.derive(proto)
        if check:
            strict = _needs_strict_check(g, typing, wanted_in + wanted_out)
            check_or_raise(result, what="the extracted model", full_check=strict)
    except GraphkitError:
        if not g.fast:  # (no fast path was used: nothing to redo)
            raise
        return _extract(model, inputs, outputs, check=check, types=types, observe=observe, fast=False)
    notes = list(typing.notes)
    if reordered:
        notes.append("the source's nodes were not in execution order; the kept nodes were sorted")
    return _Done(result, g, cut, typing, wanted_in, wanted_out, tuple(notes))


def _needs_strict_check(g: _Graph, typing: _Typing, boundary: Sequence[str]) -> bool:
    """Whether the result needs onnx.checker's strict shape inference, not only its plain check.

    The result's nodes are unchanged copies of the source's. When every boundary type is one that
    shape inference derived from those very nodes, or one the source itself declares for its own
    graph inputs, outputs and initializers, strict inference on the result would re-derive exactly
    the source's types: it cannot find a conflict that extraction made. It is needed when a boundary
    type was stated instead: given by the user, observed in ONNX Runtime, or taken from the value_info
    the source declares for an intermediate tensor (which may be stale); a conflict there would make
    the result fail in ONNX Runtime, so the full check must find it first.
    """
    for name in boundary:
        how = typing.source.get(name, "model")
        if how in ("user", "runtime"):
            return True
        declared_io = name in g.input_set or name in g.output_set or name in g.initializers or name in g.sparse
        if how == "model" and not declared_io:
            return True
    return False


def _build_extracted(
    g: _Graph, cut: _Cut, inputs: Sequence[str], outputs: Sequence[str], types: Mapping[str, onnx.TypeProto]
) -> tuple[onnx.ModelProto, bool]:
    """The new ModelProto: only the kept parts are copied (weights stay references)."""
    source = g.model.lazy_proto
    proto = onnx.ModelProto()
    for name in ("ir_version", "producer_name", "producer_version", "domain", "model_version", "doc_string"):
        if source.HasField(name):
            setattr(proto, name, getattr(source, name))
    proto.opset_import.extend(source.opset_import)
    proto.metadata_props.extend(source.metadata_props)
    graph = proto.graph
    src = g.graph
    graph.name = src.name
    if src.doc_string:
        graph.doc_string = src.doc_string
    if hasattr(src, "metadata_props"):
        graph.metadata_props.extend(src.metadata_props)
    graph.node.extend([g.nodes[i] for i in cut.nodes])
    graph.initializer.extend(_kept_initializers(g, cut.initializers))
    graph.sparse_initializer.extend(s for s in src.sparse_initializer if s.values.name in cut.initializers)
    originals_in = {v.name: v for v in src.input}
    originals_out = {v.name: v for v in src.output}
    for name in inputs:
        graph.input.append(_value_info(name, types[name], originals_in.get(name)))
    given = set(inputs)
    for name in g.inputs:  # overridable defaults (and IR < 4 initializers) stay inputs
        if name in cut.initializers and name not in given:
            graph.input.append(originals_in[name])
    if source.ir_version < 4:
        listed = {v.name for v in graph.input}
        for tensor in graph.initializer:
            if tensor.name not in listed:
                graph.input.append(onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type, list(tensor.dims)))
    for name in outputs:
        graph.output.append(_value_info(name, types[name], originals_out.get(name) or originals_in.get(name)))
    if len(src.value_info) or len(src.quantization_annotation):
        boundary = given | set(outputs)
        kept_tensors = {o for i in cut.nodes for o in g.nodes[i].output if o} | cut.initializers
        graph.value_info.extend(v for v in src.value_info if v.name in kept_tensors and v.name not in boundary)
        graph.quantization_annotation.extend(
            q for q in src.quantization_annotation if q.tensor_name in kept_tensors or q.tensor_name in boundary
        )
    proto.functions.extend(_used_functions(source, graph))
    reordered = not cut.ordered and not _in_order(g, cut.nodes)
    if reordered:
        toposort_proto(proto)
    return proto, reordered


def _kept_initializers(g: _Graph, names: set[str]) -> list[onnx.TensorProto]:
    """The main graph's initializers named in ``names``, in source order."""
    if len(g.initializers) != len(g.graph.initializer):  # (duplicate names: keep every copy, as the source has)
        return [t for t in g.graph.initializer if t.name in names]
    return [t for name, t in g.initializers.items() if name in names]


def _used_functions(source: onnx.ModelProto, graph: onnx.GraphProto) -> list[onnx.FunctionProto]:
    """The local functions that the graph's nodes call, directly, from bodies, or from other functions."""
    if not source.functions:
        return []
    table = {(f.domain, f.name, getattr(f, "overload", "")): f for f in source.functions}
    used: set[tuple[str, str, str]] = set()
    stack: list[onnx.NodeProto] = [n for sub, _ in iter_graphs(graph) for n in sub.node]
    while stack:
        node = stack.pop()
        key = (node.domain, node.op_type, getattr(node, "overload", ""))
        if key in table and key not in used:
            used.add(key)
            func = table[key]
            stack.extend(func.node)
            for inner in func.node:
                for sub in subgraphs(inner):
                    stack.extend(n for s, _ in iter_graphs(sub) for n in s.node)
        for sub in subgraphs(node):
            stack.extend(sub.node)
    return [f for f in source.functions if (f.domain, f.name, getattr(f, "overload", "")) in used]


def _in_order(g: _Graph, nodes: Sequence[int]) -> bool:
    """Whether the kept nodes, in source order, read only what an earlier kept node (or no node) makes."""
    kept = set(nodes)
    producer, reads = g.producer, g.reads
    for i in nodes:
        for name in reads(i):
            p = producer.get(name)
            if p is not None and p >= i and p in kept:
                return False
    return True


# ----------------------------------------------------------------------------------------- expose


def expose(
    model: Model,
    /,
    tensors: Sequence[str] = (),
    *,
    op_types: Sequence[str] = (),
    all_tensors: bool = False,
    check: bool = True,
    types: Mapping[str, Any] | None = None,
    observe: bool = True,
) -> Model:
    """The model with intermediate tensors added as graph outputs; see ``expose_with_report``."""
    return expose_with_report(
        model, tensors, op_types=op_types, all_tensors=all_tensors, check=check, types=types, observe=observe
    ).model


def expose_with_report(
    model: Model,
    /,
    tensors: Sequence[str] = (),
    *,
    op_types: Sequence[str] = (),
    all_tensors: bool = False,
    check: bool = True,
    types: Mapping[str, Any] | None = None,
    observe: bool = True,
) -> Exposure:
    """Add tensors of the main graph as graph outputs, typed, touching nothing else.

    Args:
        model: The source model (not modified).
        tensors: Names of the tensors to expose.
        op_types: Also expose every output of the main graph's nodes of these op types.
        all_tensors: Expose every node output of the main graph.
        check: Validate the result before returning it.
        types: Types for the exposed tensors, by name (see ``extract_with_report``).
        observe: Let ONNX Runtime observe types that shape inference cannot tell.

    Raises:
        TensorNotFoundError: A name is not a tensor of the main graph, or lives inside a subgraph
            body (ONNX graphs cannot output those).
        NameNotFoundError: An op type that no node of the main graph has.
        UsageError: Nothing to expose, or a type cannot be found.
        InvalidModelError: ``check`` is set and the result fails validation.
    """
    from graphkit.summary import TensorSig

    _check_cut_args(model, check, types, observe, tensors=tensors, op_types=op_types)
    argcheck.boolean(all_tensors, "all_tensors")
    with paused_gc():
        if not check:
            require_sound(model)
        try:
            result, typing, already, new = _expose(model, tensors, op_types, all_tensors, types, observe, check)
        except GraphkitError:
            # The source's own problem, named, comes before what it caused. (When the result passes
            # its check, the source passed graphkit's structural checks too: they are the same graph
            # but for the added outputs. So a sound source costs no separate pass.)
            if check:
                require_sound(model)
            raise
    proto = result.lazy_proto
    g_outputs = len(proto.graph.output) - len(new)
    return Exposure(
        model=result,
        added=tuple(TensorSig.of(v) for v in proto.graph.output[g_outputs:]),
        already_outputs=already,
        typed_by={n: typing.source.get(n, "model") for n in new},
        notes=tuple(typing.notes),
    )


def _expose(
    model: Model,
    tensors: Sequence[str],
    op_types: Sequence[str],
    all_tensors: bool,
    types: Mapping[str, Any] | None,
    observe: bool,
    check: bool,
) -> tuple[Model, _Typing, tuple[str, ...], list[str]]:
    """The exposed model, its typing, the names already outputs, and the names added."""
    g = _Graph(model)
    names = _select(g, tensors, op_types, all_tensors)
    present = set(g.outputs)
    already = tuple(n for n in names if n in present)
    new = [n for n in names if n not in present]
    typing = _type_boundary(g, [], new, _normalize_types(types), observe=observe, output_flag="--tensors")
    proto = onnx.ModelProto()
    proto.CopyFrom(model.lazy_proto)
    templates = {v.name: v for v in model.lazy_proto.graph.value_info}
    for name in new:
        proto.graph.output.append(_value_info(name, typing.types[name], templates.get(name)))
    result = model.derive(proto)
    if check:
        # As for extract: strict inference only finds a conflict that a stated type could bring.
        strict = _needs_strict_check(g, typing, new)
        check_or_raise(result, what="the model with exposed tensors", full_check=strict)
    return result, typing, already, new


def _select(g: _Graph, tensors: Sequence[str], op_types: Sequence[str], all_tensors: bool) -> list[str]:
    _check_tensor_names(g, tensors)
    chosen: dict[str, None] = dict.fromkeys(tensors)
    present_ops = {n.op_type for n in g.nodes}
    for op in op_types:
        if op not in present_ops:
            raise not_found(NameNotFoundError, "node of op type", op, sorted(present_ops), where=g.model.name)
    wanted_ops = set(op_types)
    for node in g.nodes:
        if all_tensors or node.op_type in wanted_ops:
            chosen.update(dict.fromkeys(o for o in node.output if o))
    if not chosen:
        raise UsageError("nothing to expose", hint="name tensors with --tensors, or use --all or --op-types")
    return list(chosen)


def _check_tensor_names(g: _Graph, names: Sequence[str]) -> None:
    for name in names:
        if g.defines(name):
            continue
        body = _inside_subgraph(g, name)
        if body is not None:
            holder, outs = body
            raise TensorNotFoundError(
                f"{name!r} is a tensor inside a body of {holder} in {g.model.name}: ONNX graphs cannot "
                "output tensors of If/Loop/Scan bodies",
                hint=f"expose the outputs of {holder} instead ({', '.join(repr(o) for o in outs)})",
            )
        suggestion = did_you_mean(name, g.all_names())
        raise TensorNotFoundError(
            f"no tensor named {name!r} in {g.model.name}",
            hint=suggestion or "run 'python -m graphkit inspect' to list the names",
        )
