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

import logging
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import onnx

from graphkit import _check_args as argcheck
from graphkit._build import dtype_to_onnx
from graphkit._custom_ops import CustomOp
from graphkit._graph import node_label, paused_gc, toposort_proto
from graphkit._io import tensor_nbytes
from graphkit._model import Model
from graphkit._numbers import parse_int
from graphkit._ort import Settings
from graphkit._submodel import submodel
from graphkit._typing import Source, has_shape, tensor_types, value_info_of
from graphkit._validate import check_or_raise, require_sound
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

if TYPE_CHECKING:
    from graphkit._summary import TensorSig

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


class _Graph(Source):
    """The source's graph index, with what extraction adds: the model and whether the fast paths may run."""

    def kind(self, name: str) -> str:
        """"node output", "graph input", "initializer"."""
        if name in self.input_set and name not in self.initializers:
            return "graph input"
        if name in self.initializers:
            return "initializer"
        return "node output"

    def producer_label(self, name: str) -> str:
        i = self.producer.get(name)
        return node_label(self.nodes[i], i) if i is not None else self.kind(name)


def _inside_subgraph(g: _Graph, name: str) -> tuple[str, list[str]] | None:
    """If only a body defines ``name``: the main-graph node holding that body, and that node's outputs."""
    i = g.body_owner(name)
    if i is None:
        return None
    return node_label(g.nodes[i], i), g.outputs_of(i)


def _check_names(g: _Graph, names: Sequence[str], flag: str) -> None:
    """``flag``: the keyword that lists ``names`` (its flag is ``--`` before it)."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise UsageError(f"{name!r} is given twice in {flag}", hint=f"list each tensor once in {flag}",
                             cli_hint=f"list each tensor once in --{flag}")
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
        raise not_found(TensorNotFoundError, f"tensor (in {flag})", name, g.tensor_names, where=g.model.name)


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
                hint=f"add {output!r} to inputs", cli_hint=f"add {output!r} to --inputs",
            )
        reader, tensor = found
        origin = sorted(g.upstream([tensor], given) & sources)
        origin_text = ", ".join(repr(s) for s in origin[:3])
        if tensor in sources:
            what = f"a {g.kind(tensor)}" if g.defines(tensor) else "a name nothing defines"
            fact = f"{what} that is not among the inputs"
            if not (g.upstream([output], given) & given):
                fact += " (none of the given inputs lies upstream of it)"
        else:
            fact = f"which is neither given nor computable from the inputs (it needs {origin_text})"
        others = [o for o in outputs if o != output and not _computable(g, o, given)]
        more = f" ({len(others)} more output(s) cannot be computed either)" if others else ""
        message = f"cannot compute {output!r}: {node_label(g.nodes[reader], reader)} reads {tensor!r}, {fact}{more}"
        hint = _leak_hint(g, tensor, given, sources, "\0")  # (the same search for both wordings)
        return OpenCutError(message, hint=hint.replace("\0", "inputs"), cli_hint=hint.replace("\0", "--inputs"))
    return OpenCutError("the outputs cannot be computed from the inputs", hint="check the inputs", cli_hint="check --inputs")


def _find_leak(g: _Graph, output: str, given: set[str], sources: set[str]) -> tuple[int, str] | None:
    """The node where the cut leaks on the way to ``output``, and the tensor it reads.

    Walking back from the output along tensors that cannot be computed, the leak is the first node
    that also reads something fed by the given inputs (where the cut lets data in from outside);
    without such a node, it is the node that reads the ungiven source itself.
    """
    region = g.upstream([output], given)
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


def _leak_hint(g: _Graph, tensor: str, given: set[str], sources: set[str], inputs: str) -> str:
    """Suggest what to add to the inputs (``inputs``: the keyword or the flag that holds them): the
    leaking tensor, or where its branch leaves the given ones."""
    first = f"add {tensor!r} to {inputs}"
    upstream_of_given = g.upstream(given, set()) - given
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


@dataclass
class _Typing:
    types: dict[str, onnx.TypeProto]
    source: dict[str, str]
    notes: list[str]


def _type_boundary(
    g: _Graph,
    inputs: Sequence[str],
    outputs: Sequence[str],
    user: Mapping[str, TensorType],
    *,
    observe: bool,
    output_flag: str = "outputs",
    cut_nodes: Sequence[int] | None = None,
    runtime: Settings | None = None,
) -> _Typing:
    """Type every boundary tensor (the typing engine, ``graphkit._typing``), or raise naming the one
    that needs a type from the user. Inference of the outputs starts from the typed inputs, so a
    type the user gives for an input also types what is computed from it."""
    names = list(dict.fromkeys([*inputs, *outputs]))
    given = {name: t.type_proto() for name, t in user.items()}
    found = tensor_types(g, names, given=given, inputs=inputs, region=cut_nodes, observe=observe, runtime=runtime)
    notes: list[str] = []
    for name in names:
        if name not in found.types:
            raise _needs_type(g, name, "inputs" if name in inputs else output_flag, observe=observe)
        if not has_shape(found.types[name]):
            notes.append(f"the shape of {name!r} is unknown (its dtype is known); it is left unranked")
    return _Typing(found.types, found.source, notes)


def _needs_type(g: _Graph, name: str, where: str, *, observe: bool) -> UsageError:
    """``where``: the keyword that lists ``name`` (its flag is ``--`` before it)."""
    why = "shape inference cannot type it" + (" and ONNX Runtime cannot run the model" if observe else "")
    return UsageError(
        f"cannot tell the dtype of {name!r} (in {where}), which {g.producer_label(name)} produces: {why}",
        hint=f"give its type, e.g. types={{{name!r}: ('float32', [1, 3, 224, 224])}} (dims may be names or None)",
        cli_hint=f"give its type, e.g. --{where} '{name}:float32:[1,3,224,224]' (dims may be names or ?)",
    )


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
    custom_ops: Sequence[str | os.PathLike[str]] = (),
    python_ops: Sequence[CustomOp | str | os.PathLike[str]] = (),
) -> Model:
    """The submodel that computes ``outputs`` from ``inputs``.

    See ``extract_with_report`` for the arguments; this returns only the model.
    """
    _check_cut_args(model, check, types, observe, inputs=inputs, outputs=outputs)
    runtime = Settings.for_custom_ops(custom_ops, python_ops)
    return _extract(model, inputs, outputs, check=check, types=types, observe=observe, runtime=runtime).model


def extract_with_report(
    model: Model,
    /,
    inputs: Sequence[str] | None = None,
    outputs: Sequence[str] | None = None,
    *,
    check: bool = True,
    types: Mapping[str, Any] | None = None,
    observe: bool = True,
    custom_ops: Sequence[str | os.PathLike[str]] = (),
    python_ops: Sequence[CustomOp | str | os.PathLike[str]] = (),
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
        custom_ops: Custom-operator libraries that run needs (``.so`` paths).
        python_ops: Python implementations of custom operators that run needs (``graphkit.custom_op``
            functions or paths of files declaring them).

    Raises:
        TensorNotFoundError: A name is not a tensor of the main graph (with "did you mean").
        OpenCutError: An output cannot be computed from the inputs; names the output, the node
            and the tensor where the cut leaks, and what to add to the inputs.
        UsageError: A name is given twice, or a boundary tensor's type cannot be found.
        InvalidModelError: ``check`` is set and the result fails validation.
    """
    from graphkit._summary import TensorSig  # (only the report needs it)

    _check_cut_args(model, check, types, observe, inputs=inputs, outputs=outputs)
    runtime = Settings.for_custom_ops(custom_ops, python_ops)
    done = _extract(model, inputs, outputs, check=check, types=types, observe=observe, runtime=runtime)
    g, cut, proto = done.graph, done.cut, done.model.lazy_proto
    kept = [g.dense[n] for n in cut.initializers if n in g.dense]
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
    runtime: Settings | None = None,
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
        raise UsageError("no outputs to extract", hint="give the tensors to compute as outputs=",
                         cli_hint="give the tensors to compute with --outputs")
    for name in user_types:
        if name not in wanted_in and name not in wanted_out:
            raise UsageError(f"a type is given for {name!r}, which is neither an input nor an output",
                             hint="give types only for tensors listed in inputs= or outputs=",
                             cli_hint="give types only for tensors listed in --inputs or --outputs")
    distinct = len(set(wanted_in)) == len(wanted_in) and len(set(wanted_out)) == len(wanted_out)
    cut = _scan_cut(g, wanted_in, wanted_out) if distinct and fast else None
    if cut is None:  # (something only the full walk handles or explains)
        g.fast = False
        _check_names(g, wanted_in, "inputs")
        _check_names(g, wanted_out, "outputs")
        cut = _cut(g, wanted_in, wanted_out)
        if cut.missing:
            raise _open_cut_error(g, wanted_in, wanted_out, cut)
    if default_inputs:
        wanted_in = [n for n in wanted_in if n in cut.used_inputs]
    try:
        typing = _type_boundary(g, wanted_in, wanted_out, user_types, observe=observe, cut_nodes=cut.nodes,
                                runtime=runtime)
        proto, reordered = _build_extracted(g, cut, wanted_in, wanted_out, typing.types)
        result = model.derive(proto)
        if check:
            strict = _needs_strict_check(g, typing, wanted_in + wanted_out)
            check_or_raise(result, what="the extracted model", full_check=strict)
    except GraphkitError:
        if not g.fast:  # (no fast path was used: nothing to redo)
            raise
        return _extract(model, inputs, outputs, check=check, types=types, observe=observe, fast=False,
                        runtime=runtime)
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
    """The new ModelProto (the sub-model builder, ``graphkit._submodel``): only the kept parts are
    copied (weights stay references)."""
    src = g.graph
    originals_in = {v.name: v for v in src.input}
    originals_out = {v.name: v for v in src.output}
    ins = [value_info_of(name, types[name], originals_in.get(name)) for name in inputs]
    outs = [value_info_of(name, types[name], originals_out.get(name) or originals_in.get(name)) for name in outputs]
    proto = submodel(g.model.lazy_proto, g, cut.nodes, inputs=ins, outputs=outs, initializers=cut.initializers)
    reordered = not cut.ordered and not _in_order(g, cut.nodes)
    if reordered:
        toposort_proto(proto)
    return proto, reordered


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
    from graphkit._summary import TensorSig

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
    typing = _type_boundary(g, [], new, _normalize_types(types), observe=observe, output_flag="tensors")
    proto = onnx.ModelProto()
    proto.CopyFrom(model.lazy_proto)
    templates = {v.name: v for v in model.lazy_proto.graph.value_info}
    for name in new:
        proto.graph.output.append(value_info_of(name, typing.types[name], templates.get(name)))
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
        raise UsageError("nothing to expose", hint="name tensors, or give op_types= or all_tensors=True",
                         cli_hint="name tensors with --tensors, or use --all or --op-types")
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
        suggestion = did_you_mean(name, g.tensor_names)
        raise TensorNotFoundError(
            f"no tensor named {name!r} in {g.model.name}",
            hint=suggestion or "gk.list_nodes(model) lists the tensor names",
            cli_hint=suggestion or "'python -m graphkit inspect MODEL --tensors' lists the tensor names",
        )
