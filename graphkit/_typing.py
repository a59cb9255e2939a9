"""The one typing engine: the dtype and shape of named tensors of a model's main graph.

``tensor_types`` answers "the types of these tensors" for every verb (extract and expose, split's
boundaries, edit's re-inference, compare's captured values), from the cheapest source that can
tell, in this order:

1. what the model declares: value_info, graph inputs and outputs, initializers;
2. exact propagation in Python for elementwise chains (``graphkit._propagate``);
3. ONNX shape inference with data propagation, on a ``weightless`` copy of as little of the graph
   as is needed;
4. where ONNX leaves a dim unknown, ONNX Runtime's symbolic shape inference (when the installed
   onnxruntime has it and sympy is there), which sizes dims as expressions of the input dims;
5. last, one observed run in ONNX Runtime on generated inputs, for dtype and rank only.

Dynamic dims stay symbolic: a dim is fixed only when inference proves its size. A dim no step can
size is given a fresh name (``unk_1``), never a size seen in one run: a stage that divides a
dynamic dim by 8 gives the same size at inputs of 1 and 2, yet a different one at 16. Sequence,
map and optional values are types like any other.

Weights are never read: the copies given to inference hold only what it may read.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, field

import numpy as np
import onnx

from graphkit import _ort
from graphkit import _propagate as propagate
from graphkit._graph import GraphIndex, node_reads, subgraphs
from graphkit._io import read_external_bytes, tensor_nbytes
from graphkit._model import Model, is_borrowed, is_external
from graphkit.errors import GraphkitError

__all__ = [
    "tensor_dims",
    "DimNamer", "Source", "Typing", "function_holder", "has_dtype", "has_shape", "is_anonymous", "symbolic_types", "tensor_types",
    "type_dims", "value_info_of", "weightless",
]

log = logging.getLogger(__name__)

#: Where a type came from: given by the caller, declared by the model, inferred (propagation, ONNX
#: or ONNX Runtime's symbolic inference), or observed in one ONNX Runtime run.
SOURCES = ("user", "model", "inference", "runtime")


class Source(GraphIndex):
    """A model's main-graph index as the typing engine reads it: the index, the model (opsets,
    functions, weights' folder) and whether the exact-propagation fast path may be tried.

    Verbs that index the model anyway build one (or a subclass) and pass it, so typing reuses
    their producers and reads instead of indexing again.
    """

    def __init__(self, model: Model, *, fast: bool = True) -> None:
        super().__init__(model.lazy_proto.graph)
        self.model = model
        #: Whether the fast paths (exact propagation; extract's backward-scan cut) may be tried.
        self.fast = fast


@dataclass(frozen=True)
class Typing:
    """The types ``tensor_types`` found.

    Attributes:
        types: Name → TypeProto, for every name it could type (shared: copy before changing one).
        source: Name → where its type came from (one of ``SOURCES``).
        runtime_error: Why the observed run failed, when one was needed and failed.
    """

    types: dict[str, onnx.TypeProto]
    source: dict[str, str] = field(default_factory=dict)
    runtime_error: str = ""


def tensor_types(
    model: Model | Source,
    names: Sequence[str],
    *,
    given: Mapping[str, onnx.TypeProto] | None = None,
    inputs: Sequence[str] = (),
    region: Sequence[int] | None = None,
    declared: bool = True,
    observe: bool = True,
    runtime: _ort.Settings | None = None,
    symbolic: bool = True,
) -> Typing:
    """The types of ``names`` (tensors of the main graph), each from the first source that tells.

    Args:
        model: The model, or its ``Source`` index (reused, with its fast-path setting).
        names: The tensors to type.
        given: Types fixed by the caller (a user's); they also type what is inferred from them.
        inputs: Tensors that act as inputs (a cut's): once typed, inference of the other names
            starts from them instead of from what computes them.
        region: The node indices that compute the other names from ``inputs`` (a cut), if known.
        declared: Use the types the model declares (value_info, inputs, outputs); False infers
            afresh (after an edit that made them stale). Initializers' types are always used.
        observe: When inference leaves a name untyped or unranked, run the model once in ONNX
            Runtime to observe its dtype and rank.
        runtime: The session settings of that run (custom-op libraries, Python operators).
        symbolic: Ask ONNX Runtime's symbolic shape inference where ONNX's leaves a dim unknown
            (False: those dims stay named, and sympy is never imported: +34 MB on light_squeezenet).

    Returns:
        The types found; a name no source can type is absent. Unknown dims are named, never sized.
    """
    g = model if isinstance(model, Source) else Source(model)
    names = list(dict.fromkeys(names))
    types: dict[str, onnx.TypeProto] = {}
    source: dict[str, str] = {}
    for name, tp in (given or {}).items():
        if name in names:
            types[name], source[name] = tp, "user"
    for name, tp in _known_types(g, [n for n in names if n not in types], declared=declared).items():
        types[name], source[name] = tp, "model"
    wanted_inputs = set(inputs)
    first = [n for n in names if n in wanted_inputs]
    rest = [n for n in names if n not in wanted_inputs]
    for group, cut in ((first, None), (rest, region)):
        pending = [n for n in group if n not in types or not has_shape(types[n])]
        if not pending:
            continue
        stops = {n: types[n] for n in inputs if n in types and n not in pending}
        found = _infer_somehow(g, pending, stops, cut, inputs, value_info=declared)
        for name, tp in found.items():
            if name not in types or has_shape(tp):
                types[name], source[name] = tp, "inference"
        vague = [n for n in pending if n not in types or not _fully_shaped(types[n])]
        if vague and symbolic:
            for name, tp in _symbolic_types(g, vague, stops, cut, inputs, value_info=declared).items():
                if name not in types or _better(tp, types[name]):
                    types[name], source[name] = tp, "inference"
    pending = [n for n in names if n not in types or not has_shape(types[n])]
    error = ""
    if pending and observe:
        observed, error = _observed_types(g.model, pending, runtime)
        for name, tp in observed.items():
            if name not in types or not has_shape(types[name]):
                types[name], source[name] = tp, "runtime"
    _name_unknown_dims(g, types, [n for n in names if source.get(n) in ("inference", "runtime")])
    return Typing(types, source, error)


def has_dtype(tp: onnx.TypeProto) -> bool:
    """Whether ``tp`` is a type at all (a tensor type needs an element type)."""
    kind = tp.WhichOneof("value")
    if kind == "tensor_type":
        return tp.tensor_type.elem_type != 0
    return kind is not None


def has_shape(tp: onnx.TypeProto) -> bool:
    """Whether ``tp`` is ranked (tensor types) or a type at all (sequences, maps, optionals)."""
    if tp.WhichOneof("value") == "tensor_type":
        return tp.tensor_type.HasField("shape")
    return tp.WhichOneof("value") is not None


def value_info_of(name: str, tp: onnx.TypeProto, template: onnx.ValueInfoProto | None = None) -> onnx.ValueInfoProto:
    """A ValueInfoProto of ``name`` with type ``tp`` (and ``template``'s doc string and metadata)."""
    value = onnx.ValueInfoProto()
    if template is not None:
        value.CopyFrom(template)
    value.name = name
    value.type.CopyFrom(tp)
    return value


def _known_types(g: Source, names: Iterable[str], *, declared: bool) -> dict[str, onnx.TypeProto]:
    """Types the model states: graph inputs, outputs and value_info (with ``declared``), initializers."""
    wanted = set(names)
    found: dict[str, onnx.TypeProto] = {}
    for values in (g.graph.value_info, g.graph.output, g.graph.input) if declared else ():
        for v in values:
            if v.name in wanted and has_dtype(v.type):
                found[v.name] = v.type
    for name in wanted:
        if name in g.dense and name not in found:
            t = g.dense[name]
            found[name] = onnx.helper.make_tensor_type_proto(t.data_type, list(t.dims))
        elif name in g.sparse and name not in found:
            s = g.sparse[name]
            found[name] = onnx.helper.make_tensor_type_proto(s.values.data_type, list(s.dims))
    return found


#: Initializers up to this size may keep their values in the graph that shape inference sees
#: (shape arguments such as Reshape's); larger ones are given to it without data, never read.
INFER_VALUE_LIMIT = 4096

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


def _value_readers(g: Source, nodes: Sequence[onnx.NodeProto]) -> set[str]:
    """Names whose values shape inference may read even when they are float: inputs of
    ``_FLOAT_VALUE_OPS``, of nodes of other domains (functions, custom ops) and of nodes with bodies."""
    found: set[str] = set()
    for node in nodes:
        bodies = node.attribute and subgraphs(node)
        if bodies or node.op_type in _FLOAT_VALUE_OPS or node.domain not in ("", "ai.onnx"):
            found.update(node_reads(node))
    return found


def _inferred_types(
    g: Source,
    names: Sequence[str],
    nodes: Sequence[onnx.NodeProto],
    stops: Mapping[str, onnx.TypeProto],
    initializers: Iterable[onnx.TensorProto],
    *,
    value_info: bool = True,
) -> dict[str, onnx.TypeProto]:
    """Run ONNX shape inference on ``nodes`` (a ``weightless`` copy) and return the types of ``names``."""
    return _run_inference(weightless(g, nodes, stops, initializers, value_info=value_info), names)


def weightless(
    g: Source,
    nodes: Sequence[onnx.NodeProto] | None = None,
    stops: Mapping[str, onnx.TypeProto] | None = None,
    initializers: Iterable[onnx.TensorProto] | None = None,
    *,
    value_info: bool = True,
) -> onnx.ModelProto:
    """A copy of the model for shape inference, without its weights: the one such helper.

    It holds ``nodes`` (default: every node of the main graph), the graph inputs, the already
    typed ``stops`` as further typed inputs, the ``initializers`` they read (default: all) and,
    with ``value_info``, the model's value_info; no graph outputs (inference then types every node
    output in value_info). Initializers keep their values only where shape inference may read them
    (small ones, not float unless an op reads a float value); the others are passed without data
    (their type is what inference uses, and their data is never copied), which halves what it
    parses. Weights on disk are never read, and the source is not changed.
    """
    nodes = g.nodes if nodes is None else nodes
    source = g.model.lazy_proto
    proto = onnx.ModelProto()
    proto.ir_version = source.ir_version
    proto.opset_import.extend(source.opset_import)
    proto.functions.extend(source.functions)
    graph = proto.graph  # (built in place: copying 10^4 nodes twice costs as much as inferring a few)
    graph.name = g.graph.name or "graph"
    graph.node.extend(nodes)
    graph.input.extend(g.graph.input)
    declared = set(g.inputs)
    # Before IR version 4 every initializer had to be listed as a graph input too: there the listing
    # says nothing about overriding, and the value (a ConstantOfShape's shape, say) is kept for
    # inference, which sizes what depends on it. From version 4 on, a listed initializer is a default
    # the user may override: only its declared type is proven, so its value is left out.
    hidden = set(declared) if source.ir_version >= 4 else set()
    for name, tp in (stops or {}).items():
        if name not in declared:
            graph.input.append(value_info_of(name, tp))
            declared.add(name)
            hidden.add(name)
    readers = _value_readers(g, nodes)
    for tensor in (g.graph.initializer if initializers is None else initializers):
        if tensor.name in hidden:
            continue
        if _value_read(tensor, readers):
            value = _read_in(g.model, tensor) if is_external(tensor) else tensor
            if value is not None:
                graph.initializer.append(value)
            elif tensor.name not in declared:  # (data unreadable: a typed input, what its value sizes stays unknown)
                graph.input.append(onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type, list(tensor.dims)))
        else:  # (the type alone, never a copy of the data: a 100 MB weight a pass made is not copied to be cleared)
            graph.initializer.add(name=tensor.name, data_type=tensor.data_type, dims=tensor.dims)
    for sparse in g.graph.sparse_initializer:
        if sparse.values.name not in declared:
            graph.input.append(
                onnx.helper.make_tensor_value_info(sparse.values.name, sparse.values.data_type, list(sparse.dims))
            )
    if value_info:
        graph.value_info.extend(g.graph.value_info)
    return proto


_DATA_FIELDS = ("float_data", "int32_data", "int64_data", "double_data", "uint64_data", "string_data")


def _value_read(tensor: onnx.TensorProto, value_readers: set[str]) -> bool:
    """Whether shape inference may read the value of the initializer ``tensor`` (else it gets its type only).

    An external one counts by the bytes of its data (a Reshape target written externally, as exporters
    that write every initializer so do, is read from disk like the inline one is kept); a borrowed one
    is a large weight left in the model file.
    """
    if is_external(tensor):
        size = -1 if is_borrowed(tensor) else tensor_nbytes(tensor)
    else:
        size = tensor.ByteSize()
    if not 0 <= size <= INFER_VALUE_LIMIT:
        return False
    return tensor.data_type not in _FLOAT_TYPES or tensor.name in value_readers


def _read_in(model: Model, tensor: onnx.TensorProto) -> onnx.TensorProto | None:
    """An inline copy of the small external ``tensor``, or None when its data cannot be read (the verb
    that needs the value says why)."""
    try:
        data = read_external_bytes(model, tensor)
    except GraphkitError as err:
        log.info("shape inference goes without the value of %r: %s", tensor.name, err)
        return None
    inline = onnx.TensorProto(name=tensor.name, data_type=tensor.data_type, dims=tensor.dims)
    inline.raw_data = data
    return inline


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


def function_holder(model: onnx.ModelProto, func: onnx.FunctionProto, graph: onnx.GraphProto) -> onnx.ModelProto:
    """A model whose graph is ``graph`` (a local function's body, its inputs typed as one call gives
    them), with the model's and the function's opset imports and the model's functions, so that
    ``infer_proto`` can type the body as that call runs it."""
    holder = onnx.ModelProto(ir_version=model.ir_version)
    imports = {o.domain: o.version for o in model.opset_import}
    imports.update({o.domain: o.version for o in func.opset_import})
    holder.opset_import.extend(onnx.helper.make_opsetid(d, v) for d, v in imports.items())
    holder.functions.extend(model.functions)
    holder.graph.CopyFrom(graph)
    return holder


def infer_proto(proto: onnx.ModelProto, *, strict: bool = False, data_prop: bool = True) -> onnx.ModelProto:
    """ONNX shape inference on ``proto`` (a ``weightless`` copy, or one without weights): graphkit's one
    call of it (ruff's banned-api rule keeps it so), for the typing engine and for the verbs that
    check a model against its own shapes.

    ``strict`` checks input types and raises on the first contradiction (``InferenceError`` or
    ``ValidationError``, which the caller turns into an error naming the node); otherwise inference
    types what it can and leaves the rest.
    """
    return onnx.shape_inference.infer_shapes(  # noqa: TID251 (the one call)
        proto, check_type=strict, strict_mode=strict, data_prop=data_prop
    )


def _infer(proto: onnx.ModelProto, names: Sequence[str], *, data_prop: bool) -> dict[str, onnx.TypeProto]:
    try:
        inferred = infer_proto(proto, data_prop=data_prop)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError, RuntimeError, ValueError) as err:
        log.info("shape inference failed (%s); trying other ways to type the boundary", err)
        return {}
    wanted = set(names)
    found: dict[str, onnx.TypeProto] = {}
    infos = inferred.graph.value_info
    for k in range(len(infos) - 1, -1, -1):  # (from the end: the wanted names are usually produced last)
        value = infos[k]
        if value.name in wanted and value.name not in found and has_dtype(value.type):
            found[value.name] = value.type
            if len(found) == len(wanted):
                break
    return found


def _infer_somehow(
    g: Source,
    names: Sequence[str],
    stops: Mapping[str, onnx.TypeProto],
    cut_nodes: Sequence[int] | None,
    cut_inputs: Sequence[str],
    *,
    value_info: bool = True,
) -> dict[str, onnx.TypeProto]:
    """Infer the types of ``names`` on as little of the graph as is cheap to find.

    First, when the fast paths are on, exact Python propagation (``_propagated_types``); then ONNX
    shape inference. Outputs of a cut whose inputs are all typed: the cut's own nodes. Otherwise
    the prefix of the node list up to the last producer (C-level copies; enough when the nodes are
    sorted), and when that is not enough, the exact upstream region.
    """
    if g.fast and value_info:
        found = _propagated_types(g, names, stops, cut_nodes if cut_nodes is not None and all(
            n in stops for n in cut_inputs) else None)
        if found is not None:
            return found
    nodes, inits, prefix = _region(g, names, stops, cut_nodes, cut_inputs)
    found = _inferred_types(g, names, nodes, stops, inits, value_info=value_info)
    missing = [n for n in names if n not in found]
    if missing and prefix:
        region = g.upstream(missing, set(stops))
        nodes = [g.nodes[i] for i in sorted({g.producer[n] for n in region if n in g.producer and n not in stops})]
        found |= _inferred_types(g, missing, nodes, stops, g.initializers_in(region), value_info=value_info)
    return found


def _region(
    g: Source,
    names: Sequence[str],
    stops: Mapping[str, onnx.TypeProto],
    cut_nodes: Sequence[int] | None,
    cut_inputs: Sequence[str],
) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto], bool]:
    """The nodes and initializers inference runs on, and whether they are the node list's prefix.

    Outputs of a cut whose inputs are all typed: the cut's own nodes. Otherwise the nodes up to the
    last producer, with only the initializers they read: inference costs about as much per
    initializer as per node, so the ones downstream would double its time.
    """
    if cut_nodes is not None and all(n in stops for n in cut_inputs):
        reads = {r for i in cut_nodes for r in g.reads(i)}
        return [g.nodes[i] for i in cut_nodes], g.initializers_in(reads), False
    last = max((g.producer[n] for n in names if n in g.producer), default=-1)
    return g.nodes[: last + 1], g.initializers_in(g.prefix_reads(last + 1)), True


def _propagated_types(
    g: Source, names: Sequence[str], stops: Mapping[str, onnx.TypeProto], region: Sequence[int] | None
) -> dict[str, onnx.TypeProto] | None:
    """The types of ``names`` by exact Python propagation (graphkit._propagate), or None.

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


def _outside_type(
    name: str,
    stops: Mapping[str, onnx.TypeProto],
    inits: Mapping[str, onnx.TensorProto],
    graph_inputs: Set[str],
    g: Source,
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
    g: Source,
    region: Sequence[int],
    stops: Mapping[str, onnx.TypeProto],
    typer: propagate.Typer,
    types: dict[str, propagate.FastType],
) -> list[_Step] | None:
    """The cut's nodes as propagation steps, with the types of what they read from outside the cut
    added to ``types``; None if a node or an outside type is beyond what propagation types."""
    steps: list[_Step] = []
    produced: set[str] = set()
    inits, graph_inputs = g.dense, g.input_set
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
    g: Source,
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
    inits, graph_inputs = g.dense, g.input_set
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




# --------------------------------------------------------------------- ONNX Runtime's symbolic inference


#: ONNX Runtime's symbolic inference costs tens of milliseconds per node in Python (sympy): measured
#: 38 s CPU for light_densenet121's 900 nodes against 0.09 s for the whole split without it. Past this
#: many nodes it is skipped, and the dims it would have sized keep fresh names (never a guess).
SYMBOLIC_MAX_NODES = 200


def _symbolic_types(
    g: Source,
    names: Sequence[str],
    stops: Mapping[str, onnx.TypeProto],
    cut_nodes: Sequence[int] | None,
    cut_inputs: Sequence[str],
    *,
    value_info: bool,
) -> dict[str, onnx.TypeProto]:
    """The types ONNX Runtime's symbolic shape inference gives ``names`` ({} when it is unavailable
    or fails), on the same weightless region ONNX inference saw."""
    nodes, inits, _ = _region(g, names, stops, cut_nodes, cut_inputs)
    if len(nodes) > SYMBOLIC_MAX_NODES:
        log.info("skipping ONNX Runtime's symbolic inference on %d nodes (more than %d); "
                 "the dims it would size stay named", len(nodes), SYMBOLIC_MAX_NODES)
        return {}
    proto = weightless(g, nodes, stops, inits, value_info=value_info)
    # It reads initializer values where a shape depends on them; the ones whose data was left out
    # are graph inputs to it instead (typed, so it knows their shapes without reading anything).
    _data_free_to_inputs(proto.graph)
    # (it types only the nodes the graph outputs need: the wanted names are its outputs)
    proto.graph.output.extend(onnx.ValueInfoProto(name=n) for n in names)
    inferred = _ort.symbolic_shapes(proto)
    if inferred is None:
        return {}
    wanted = set(names)
    return {v.name: v.type for v in [*inferred.graph.value_info, *inferred.graph.output]
            if v.name in wanted and has_dtype(v.type)}


def symbolic_types(model: Model | Source, names: Sequence[str]) -> dict[str, onnx.TypeProto]:
    """The types ONNX Runtime's symbolic shape inference gives the main-graph tensors ``names``,
    with the model's declared types set aside ({} when it is unavailable, fails, or would run on
    more than ``SYMBOLIC_MAX_NODES`` nodes). Dims it cannot size stay anonymous."""
    g = model if isinstance(model, Source) else Source(model)
    return _symbolic_types(g, list(names), {}, None, (), value_info=False)


def _data_free_to_inputs(graph: onnx.GraphProto) -> None:
    kept: list[onnx.TensorProto] = []
    moved: list[onnx.TensorProto] = []
    for tensor in graph.initializer:
        has_data = tensor.HasField("raw_data") or any(len(getattr(tensor, f)) for f in _DATA_FIELDS[:6])
        (kept if has_data or not tensor.dims or 0 in tensor.dims else moved).append(tensor)
    if not moved:
        return
    del graph.initializer[:]
    graph.initializer.extend(kept)
    listed = {v.name for v in graph.input}
    graph.input.extend(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                       for t in moved if t.name not in listed)


def _known_dims(tp: onnx.TypeProto) -> int:
    """How many dims of a tensor type are sized or named (not anonymous); -1 when unranked."""
    if tp.WhichOneof("value") != "tensor_type" or not tp.tensor_type.HasField("shape"):
        return -1
    return sum(1 for d in tp.tensor_type.shape.dim
               if d.HasField("dim_value") or (d.dim_param and not d.dim_param.startswith("unk__")))


def _better(new: onnx.TypeProto, old: onnx.TypeProto) -> bool:
    """Whether ``new`` tells more than ``old`` about the same tensor (same kind and dtype)."""
    if new.WhichOneof("value") != old.WhichOneof("value"):
        return False
    if new.WhichOneof("value") == "tensor_type" and new.tensor_type.elem_type != old.tensor_type.elem_type:
        return False
    return _known_dims(new) > _known_dims(old)


# ------------------------------------------------------------------------------- one observed run


def _observed_types(model: Model, names: Sequence[str],
                    runtime: _ort.Settings | None = None) -> tuple[dict[str, onnx.TypeProto], str]:
    """Run the model once in ONNX Runtime with ``names`` exposed, and read their dtype and rank.

    Only the kind, element type and rank are taken from the values; every dim is left unknown
    (then named), since one run at one input size proves no size. Returns ({}, why) when ONNX
    Runtime cannot run the model (custom ops, inputs it cannot generate).
    """
    feeds, why = _probe_feeds(model)
    if feeds is None:
        return {}, why
    proto = onnx.ModelProto()
    proto.CopyFrom(model.lazy_proto)
    present = {o.name for o in proto.graph.output}
    for name in names:
        if name not in present:
            proto.graph.output.append(onnx.ValueInfoProto(name=name))
    log.info("running %s once to observe the types of %s", model.name, ", ".join(names))
    try:
        sess = (runtime or _ort.Settings()).session(model.derive(proto), opt_level="disable")
        values = _ort.run_session(sess, names, feeds, model.name)
    except GraphkitError as err:
        log.info("ONNX Runtime cannot run %s to observe types: %s", model.name, err)
        return {}, err.message
    found: dict[str, onnx.TypeProto] = {}
    for name, value in zip(names, values):
        tp = _type_of_value(value)
        if tp is not None:
            found[name] = tp
    return found, ""


def _type_of_value(value: object) -> onnx.TypeProto | None:
    """The type of a value ONNX Runtime returned (array, list = sequence, dict = map), dims unknown;
    None when it does not tell (an empty sequence or map, an absent optional)."""
    if isinstance(value, np.ndarray):
        elem: int
        try:
            elem = int(onnx.helper.np_dtype_to_tensor_dtype(value.dtype))
        except (KeyError, TypeError, ValueError):
            elem = onnx.TensorProto.STRING if value.dtype.kind in "OUS" else 0
        return onnx.helper.make_tensor_type_proto(elem, [None] * value.ndim) if elem else None
    if isinstance(value, list):
        inner = _type_of_value(value[0]) if value else None
        return onnx.helper.make_sequence_type_proto(inner) if inner is not None else None
    if isinstance(value, dict) and value:
        key, item = next(iter(value.items()))
        key_type, item_type = _type_of_value(np.asarray(key)), _type_of_value(np.asarray(item))
        if key_type is None or item_type is None:
            return None
        return onnx.helper.make_map_type_proto(key_type.tensor_type.elem_type, item_type)
    return None


#: The observed run generates no input larger than this (a declared dim may be absurd in a hostile file).
_PROBE_MAX_BYTES = 1 << 30


def _probe_feeds(model: Model) -> tuple[dict[str, np.ndarray] | None, str]:
    """Seeded inputs for the observed run: fixed dims as declared, dynamic ones 1 (one size for
    each dim name). (None, why) when an input is not a tensor numpy can hold, or its declared shape
    is negative or too large to generate (then nothing is observed).
    User-facing runs generate their inputs with ``graphkit.run``; this probe only needs types."""
    initializers = {t.name for t in model.lazy_proto.graph.initializer}
    rng = np.random.default_rng(0)
    feeds: dict[str, np.ndarray] = {}
    for value in model.lazy_proto.graph.input:
        if value.name in initializers:
            continue
        if value.type.WhichOneof("value") != "tensor_type":
            return None, f"input '{value.name}' is not a tensor to generate"
        tensor = value.type.tensor_type
        try:
            dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type))
        except (KeyError, TypeError, ValueError):
            return None, f"input '{value.name}' has an element type numpy cannot hold"
        shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in tensor.shape.dim)
        # (the dims other than 0 count too: numpy refuses [0, 2**62] although it holds nothing)
        if any(d < 0 for d in shape) or math.prod(d for d in shape if d) * dtype.itemsize > _PROBE_MAX_BYTES:
            return None, f"input '{value.name}' declares shape {list(shape)}, which cannot be generated"
        if dtype.kind == "f":
            feeds[value.name] = rng.uniform(-1, 1, shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[value.name] = rng.random(shape) < 0.5
        elif dtype.kind in "iu":
            feeds[value.name] = np.zeros(shape, dtype)
        elif dtype.kind in "OUS":
            feeds[value.name] = np.full(shape, "a", dtype=object)
        else:
            feeds[value.name] = np.zeros(shape, dtype)
    return feeds, ""


# ---------------------------------------------------------------------------------- unknown dims


def _name_unknown_dims(g: Source, types: dict[str, onnx.TypeProto], names: Sequence[str]) -> None:
    """Give every anonymous dim (no size, no name, or inference's ``unk__N``) of ``names`` a fresh
    name no dim of the model uses, so it stays symbolic and two such dims are never taken as equal."""
    namer: DimNamer | None = None
    for name in names:
        tp = types.get(name)
        if tp is None or not _has_anonymous_dim(tp):
            continue
        if namer is None:
            namer = DimNamer(_dim_names(g.graph))
        tp = _copy(tp)
        namer.name_dims(_dims(tp), {})
        types[name] = tp


def is_anonymous(dim: onnx.TensorShapeProto.Dimension) -> bool:
    """Whether a dim says nothing: no size, and no name or only inference's placeholder ``unk__N``."""
    return not dim.HasField("dim_value") and (not dim.dim_param or dim.dim_param.startswith("unk__"))


class DimNamer:
    """Fresh dim names (``unk_1``, ``unk_2``, …) that none of ``taken`` uses, given out in order."""

    def __init__(self, taken: set[str]) -> None:
        self.taken = taken
        self.count = 0

    def __call__(self) -> str:
        self.count += 1
        while f"unk_{self.count}" in self.taken:
            self.count += 1
        return f"unk_{self.count}"

    def name_dims(self, dims: Iterable[onnx.TensorShapeProto.Dimension], renamed: dict[str, str]) -> None:
        """Name every anonymous dim of ``dims``; one placeholder ``unk__N`` (a dim inference knows
        to be the same wherever it appears) gets one fresh name, recorded in ``renamed``."""
        for dim in dims:
            if not is_anonymous(dim):
                continue
            if dim.dim_param in renamed:
                dim.dim_param = renamed[dim.dim_param]
                continue
            fresh = self()
            if dim.dim_param:
                renamed[dim.dim_param] = fresh
            dim.dim_param = fresh


def tensor_dims(tp: onnx.TypeProto | None) -> list[int | str] | None:
    """The dims of a tensor type: a size, or the dim's name ("?" for an unnamed unknown one); None when
    the type is no tensor or has no shape."""
    if tp is None or tp.WhichOneof("value") != "tensor_type" or not tp.tensor_type.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in tp.tensor_type.shape.dim]


def type_dims(tp: onnx.TypeProto) -> list[onnx.TensorShapeProto.Dimension]:
    """The dims of a tensor type, or of the tensors inside a sequence, optional or map value."""
    return _dims(tp)


def _dims(tp: onnx.TypeProto) -> list[onnx.TensorShapeProto.Dimension]:
    """The dims of a tensor type, or of the tensors inside a sequence, optional or map value."""
    kind = tp.WhichOneof("value")
    if kind == "tensor_type":
        return list(tp.tensor_type.shape.dim) if tp.tensor_type.HasField("shape") else []
    if kind == "sequence_type":
        return _dims(tp.sequence_type.elem_type)
    if kind == "optional_type":
        return _dims(tp.optional_type.elem_type)
    if kind == "map_type":
        return _dims(tp.map_type.value_type)
    return []


def _has_anonymous_dim(tp: onnx.TypeProto) -> bool:
    return any(is_anonymous(d) for d in _dims(tp))


def _copy(tp: onnx.TypeProto) -> onnx.TypeProto:
    copy = onnx.TypeProto()
    copy.CopyFrom(tp)
    return copy


def _dim_names(graph: onnx.GraphProto) -> set[str]:
    """Every dim name the main graph's declared types use."""
    names: set[str] = set()
    for values in (graph.input, graph.output, graph.value_info):
        for value in values:
            names.update(d.dim_param for d in _dims(value.type) if d.dim_param)
    return names
