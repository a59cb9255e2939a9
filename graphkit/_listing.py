"""``inspect --nodes/--tensors/--stats``: every node and tensor with its type, parameters and MACs.

Types come from the typing engine (``graphkit._typing``) without running the model; ``shapes=`` and
``dims=`` (``--shape``/``--dim``) fix dynamic dims first, so the counts of a transformer can be taken
at a chosen sequence length. No weight is read: parameters are counted from initializers' dims.

How multiply-accumulates (MACs) are counted, per node:

- Conv: output elements × input channels per group × kernel elements;
- ConvTranspose: input elements × output channels per group × kernel elements;
- MatMul (and MatMulInteger, QLinearMatMul): output elements × the reduced dim; a MatMul of two
  computed tensors (attention's Q·Kᵀ and scores·V) is counted the same way and marked ``attention``;
- Gemm: M × N × K;
- ops that only move or reshape data (``DATA_OPS``): 0;
- every other op: one per output element ("elementwise"; reductions and pooling count their outputs).

Parameters are the elements of the weights a node reads: initializers, Constant values and tensors
that ConstantOfShape makes from a constant shape (onnx's "light" test models hold their weights so),
of floating-point or 8-bit (quantized) types; int32/int64/bool tensors are shapes and indices, not
parameters. A bias is a parameter but not counted as a MAC (as in papers' figures).
A node whose count needs a dim no source sizes gets ``macs=None`` and names the dims it needed; the
totals then say how many nodes are unknown instead of guessing.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import onnx

from graphkit import _check_args as argcheck
from graphkit._graph import subgraphs
from graphkit._model import Model
from graphkit._summary import dtype_name, type_name
from graphkit._typing import Source, tensor_types, weightless
from graphkit.errors import NameNotFoundError, UsageError, did_you_mean, not_found

__all__ = ["DATA_OPS", "Listing", "NodeInfo", "OpStats", "TensorInfo", "list_nodes"]

#: Ops that move, select or reshape data without arithmetic: no MACs.
DATA_OPS = frozenset({
    "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Shape", "Size", "Constant", "Transpose",
    "Concat", "Split", "Slice", "Gather", "GatherElements", "GatherND", "Expand", "Tile", "Pad",
    "DepthToSpace", "SpaceToDepth", "Cast", "CastLike", "ConstantOfShape", "Range", "NonZero",
    "Dropout", "Optional", "OptionalGetElement", "OptionalHasElement", "SequenceAt", "SequenceConstruct",
    "SequenceEmpty", "SequenceInsert", "SequenceErase", "SequenceLength", "SplitToSequence",
    "ConcatFromSequence", "ScatterElements", "ScatterND", "Scatter", "Compress", "EyeLike", "Trilu",
})

_MATMULS = frozenset({"MatMul", "MatMulInteger", "QLinearMatMul", "FusedMatMul"})
_Dim = int | str | None


@dataclass(frozen=True)
class TensorInfo:
    """A tensor of the main graph.

    Attributes:
        name: The tensor's name.
        dtype: ``float32``, ``string``, ``sequence(float32)``, ``map(int64,float32)``…, or ``unknown``.
        shape: Dims (ints, names, None for unknown), or None when the rank is unknown.
        kind: ``input``, ``output``, ``initializer``, ``constant`` (a Constant node's) or ``intermediate``.
        producer: The name (or ``#index``) of the node that computes it, if any.
        consumers: How many main-graph nodes read it.
    """

    name: str
    dtype: str
    shape: list[_Dim] | None
    kind: str
    producer: str | None
    consumers: int

    def type_text(self) -> str:
        """``float32[1, 3, 'batch', ?]`` style."""
        if self.shape is None:
            return self.dtype if self.dtype != "unknown" or self.kind == "" else "unknown"
        return f"{self.dtype}[" + ", ".join("?" if d is None else str(d) for d in self.shape) + "]"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)


@dataclass(frozen=True)
class NodeInfo:
    """A node of the main graph with its counts.

    Attributes:
        index: Its position in the main graph (``#index`` names it where names are not unique).
        name: Its name ("" when it has none).
        op_type: ``Conv``, or ``domain::Op`` outside the standard domains.
        inputs: The names it reads ("" for an omitted optional input).
        outputs: The names it writes.
        params: Elements of the initializers and Constant values it reads.
        macs: Multiply-accumulates at the given sizes; None when a dim it needs is unknown.
        kind: How the MACs were counted: ``conv``, ``matmul``, ``attention``, ``gemm``, ``data``,
            ``elementwise`` or ``subgraph`` (a node with bodies: not counted).
        unknown: The dims (names, ``?``) that left ``macs`` unknown.
    """

    index: int
    name: str
    op_type: str
    inputs: list[str]
    outputs: list[str]
    params: int
    macs: int | None
    kind: str
    unknown: list[str]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)


@dataclass(frozen=True)
class OpStats:
    """Totals for one op type: nodes, parameters, MACs (of the nodes that could be counted)."""

    op_type: str
    count: int
    params: int
    macs: int
    unknown: int

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)


@dataclass(frozen=True)
class Listing:
    """What ``inspect --nodes/--tensors/--stats`` shows.

    Attributes:
        path: The model's file (or name).
        nodes: The selected main-graph nodes, in graph order.
        tensors: The selected tensors, in order of first appearance.
        by_op: Totals per op type, most MACs first.
        params: Parameters: elements of the distinct initializers and Constant values the selected
            nodes read (a weight shared by two nodes counts once).
        macs: MACs of the selected nodes that could be counted.
        unknown: Names of the nodes whose MACs are unknown (a dim no source sizes).
        dims: The named dims fixed by ``shapes``/``dims``.
        subgraph_nodes: Nodes inside If/Loop/Scan bodies (listed under their owner, not counted).
        filtered: Whether ``op``/``name`` selected part of the graph.
    """

    path: str
    nodes: list[NodeInfo]
    tensors: list[TensorInfo]
    by_op: list[OpStats]
    params: int
    macs: int
    unknown: list[str]
    dims: dict[str, int]
    subgraph_nodes: int
    filtered: bool

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)


def list_nodes(
    model: Model,
    /,
    *,
    op: Sequence[str] = (),
    name: Sequence[str] = (),
    shapes: Mapping[str, Sequence[int]] | None = None,
    dims: Mapping[str, int] | None = None,
) -> Listing:
    """Every main-graph node and tensor with dtype and shape, and parameters and MACs per node.

    Args:
        model: The model (no weight is read).
        op: Keep only nodes of these op types (``Conv``, ``com.microsoft::Attention``); empty: all.
        name: Keep only nodes and tensors whose name matches one of these globs (``/layer.3/*``).
        shapes: Input name → shape, fixing its dims (a named dim so fixed is fixed everywhere).
        dims: Named dim → size, everywhere it appears (``{"batch": 1, "seq": 128}``).

    Returns:
        The listing; MACs that need a dim no source sizes are None and named in ``unknown``.

    Raises:
        UsageError: An unknown input in ``shapes``, a shape of the wrong rank, or one that
            contradicts a fixed dim.
        NameNotFoundError: An ``op`` that no main-graph node has.
    """
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    ops = argcheck.names(op, "op", what="op type")
    globs = argcheck.names(name, "name", what="name pattern")
    given_shapes = argcheck.mapping(shapes, "shapes", key=argcheck.name, item=argcheck.shape) \
        if shapes is not None else {}
    given_dims = argcheck.mapping(dims, "dims", key=argcheck.name,
                                  item=lambda v, k: argcheck.integer(v, k, minimum=0)) if dims is not None else {}
    _check_ops(model, ops)
    typed, fixed = _sized(model, given_shapes, given_dims)
    g = Source(typed)
    names = [n for n in dict.fromkeys(
        [*g.inputs, *(t for node in g.nodes for t in (*node.input, *node.output)), *g.outputs]) if n]
    types = tensor_types(g, names, observe=False).types
    constants = _constant_values(g)
    tensors_by_name = _tensors(g, names, types, constants)
    infos = [_node_info(g, i, node, tensors_by_name) for i, node in enumerate(g.nodes)]
    selected = [info for info in infos if _selected(info, ops, globs)]
    filtered = bool(ops or globs)
    if filtered:
        read = {t for info in selected for t in (*info.inputs, *info.outputs)}
        tensors = [t for t in tensors_by_name.values()
                   if t.name in read and (not globs or _matches(t.name, globs))]
    else:
        tensors = list(tensors_by_name.values())
    weights = {t: _elements(tensors_by_name[t]) for info in selected for t in info.inputs
               if _is_weight(tensors_by_name.get(t))}
    return Listing(
        path=model.name,
        nodes=selected,
        tensors=tensors,
        by_op=_by_op(selected),
        params=sum(weights.values()),
        macs=sum(info.macs or 0 for info in selected),
        unknown=[info.name or f"#{info.index}" for info in selected if info.macs is None and info.kind != "subgraph"],
        dims=fixed,
        subgraph_nodes=sum(_body_nodes(node) for node in g.nodes),
        filtered=filtered,
    )


def _check_ops(model: Model, ops: Sequence[str]) -> None:
    """Refuse an op type no node has: a typo would otherwise list nothing without a word."""
    present = {n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}::{n.op_type}"
               for n in model.lazy_proto.graph.node}
    known = present | {op.rpartition("::")[2] for op in present}
    for op in ops:
        if op not in known:
            raise not_found(NameNotFoundError, "node of op type", op, sorted(present), where=model.name)


def _selected(info: NodeInfo, ops: Sequence[str], globs: Sequence[str]) -> bool:
    if ops and info.op_type not in ops and info.op_type.rpartition("::")[2] not in ops:
        return False
    return not globs or _matches(info.name, globs)


def _matches(text: str, globs: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(text, pattern) for pattern in globs)


def _sized(model: Model, shapes: Mapping[str, tuple[int, ...]],
           dims: Mapping[str, int]) -> tuple[Model, dict[str, int]]:
    """The model to type (a weightless copy with the given dims fixed, when some are given) and the
    named dims so fixed."""
    if not shapes and not dims:
        return model, {}
    g = Source(model)
    declared = {v.name: v for v in g.graph.input}
    fixed = dict(dims)
    for input_name, shape in shapes.items():
        value = declared.get(input_name)
        if value is None or input_name in g.initializers:
            inputs = [n for n in g.inputs if n not in g.initializers]
            raise UsageError(f"a shape is given for {input_name!r}, but {model.name} has no graph input of that name",
                             hint=did_you_mean(input_name, inputs) or f"its inputs: {', '.join(inputs)}")
        old = value.type.tensor_type.shape.dim
        if value.type.tensor_type.HasField("shape") and len(old) != len(shape):
            example = [d.dim_value or 1 for d in old]
            raise UsageError(f"the shape given for input {input_name!r} has {len(shape)} dims; the input has {len(old)}",
                             hint=f"give {len(old)} dims, e.g. shapes={{{input_name!r}: {example}}}",
                             cli_hint=f"give {len(old)} dims, e.g. --shape {input_name}="
                                      + "x".join(str(d) for d in example))
        for i, (dim, size) in enumerate(zip(old, shape)):
            if dim.HasField("dim_value") and dim.dim_value != size:
                raise UsageError(f"the shape given for input {input_name!r}: dim {i} is fixed to {dim.dim_value}, "
                                 f"not {size}",
                                 hint=f"keep dim {i} at {dim.dim_value}")
            if dim.HasField("dim_param"):
                fixed.setdefault(dim.dim_param, size)
    proto = weightless(g)
    proto.graph.output.extend(g.graph.output)
    for value in (*proto.graph.input, *proto.graph.output, *proto.graph.value_info):
        if not value.type.HasField("tensor_type"):
            continue
        tensor_type = value.type.tensor_type
        if value.name in shapes:
            tensor_type.shape.Clear()
            for size in shapes[value.name]:
                tensor_type.shape.dim.add().dim_value = size
            continue
        for dim in tensor_type.shape.dim:
            if dim.HasField("dim_param") and dim.dim_param in fixed:
                dim.dim_value = fixed[dim.dim_param]
    return Model(proto, model.base_dir, model.path), fixed


def _constant_values(g: Source) -> dict[str, onnx.TensorProto | None]:
    """Weights held by nodes: Constant outputs → their tensor (dims and dtype; not read), and
    ConstantOfShape outputs of a constant shape → None (typed by inference)."""
    found: dict[str, onnx.TensorProto | None] = {}
    for node in g.nodes:
        if node.domain not in ("", "ai.onnx") or not node.output:
            continue
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value" and attr.HasField("t"):
                    found[node.output[0]] = attr.t
        elif node.op_type == "ConstantOfShape" and node.input and (
                node.input[0] in g.initializers or node.input[0] in found):
            found[node.output[0]] = None
    return found


#: Element types of weights (parameters); int32/int64/bool tensors are shapes and indices.
_WEIGHT_TYPES = frozenset({"float32", "float16", "float64", "bfloat16", "int8", "uint8", "int4", "uint4",
                           "float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz"})


def _is_weight(info: TensorInfo | None) -> bool:
    return info is not None and info.kind in ("initializer", "constant") and info.dtype in _WEIGHT_TYPES


def _tensors(g: Source, names: Sequence[str], types: Mapping[str, onnx.TypeProto],
             constants: Mapping[str, onnx.TensorProto | None]) -> dict[str, TensorInfo]:
    consumers = g.consumers
    producer = g.producer
    inputs, outputs, inits = g.input_set, g.output_set, g.initializers
    result: dict[str, TensorInfo] = {}
    for name in names:
        shape: list[_Dim] | None
        if name in inits:
            tensor = inits[name]
            dtype, shape = dtype_name(tensor.data_type), [int(d) for d in tensor.dims]
            kind = "initializer"
        else:
            dtype, shape = type_text_parts(types.get(name))
            kind = ("constant" if name in constants else "output" if name in outputs
                    else "input" if name in inputs else "intermediate")
            held = constants.get(name)
            if held is not None:
                dtype, shape = dtype_name(held.data_type), [int(d) for d in held.dims]
        index = producer.get(name)
        owner = None if index is None else (g.nodes[index].name or f"#{index}")
        result[name] = TensorInfo(name, dtype, shape, kind, owner, len(consumers.get(name, ())))
    return result


def type_text_parts(tp: onnx.TypeProto | None) -> tuple[str, list[_Dim] | None]:
    """(type name, dims) of a type: dims only for a ranked tensor (see ``_summary.type_name``)."""
    name = type_name(tp)
    if tp is None or tp.WhichOneof("value") != "tensor_type" or not tp.tensor_type.HasField("shape"):
        return name, None
    dims: list[_Dim] = [int(d.dim_value) if d.HasField("dim_value") else (d.dim_param or None)
                        for d in tp.tensor_type.shape.dim]
    return name, dims


def _elements(info: TensorInfo) -> int:
    sizes = _ints(info.shape)
    return 0 if sizes is None else math.prod(sizes)


def _body_nodes(node: onnx.NodeProto) -> int:
    total = 0
    for body in subgraphs(node):
        total += len(body.node) + sum(_body_nodes(n) for n in body.node)
    return total


def _node_info(g: Source, index: int, node: onnx.NodeProto, tensors: Mapping[str, TensorInfo]) -> NodeInfo:
    domain = node.domain or ""
    op_type = node.op_type if domain in ("", "ai.onnx") else f"{domain}::{node.op_type}"
    weights = {t for t in node.input if _is_weight(tensors.get(t))}
    params = sum(_elements(tensors[t]) for t in weights)
    kind, macs, unknown = _macs(node, domain, tensors, weights)
    return NodeInfo(index, node.name, op_type, list(node.input), list(node.output), params, macs, kind, unknown)


def _shape(tensors: Mapping[str, TensorInfo], name: str) -> list[_Dim] | None:
    info = tensors.get(name)
    return None if info is None else info.shape


def _unknown(*shapes: list[_Dim] | None) -> list[str]:
    """The dims that keep these shapes from being counted ("?" for an unknown rank or dim)."""
    missing: list[str] = []
    for shape in shapes:
        if shape is None:
            missing.append("?rank")
            continue
        missing.extend("?" if d is None else str(d) for d in shape if not isinstance(d, int))
    return list(dict.fromkeys(missing))


def _ints(shape: list[_Dim] | None) -> list[int] | None:
    """The dims as ints, or None when the rank or a dim is unknown."""
    if shape is None or not all(isinstance(d, int) for d in shape):
        return None
    return [int(d) for d in shape]  # type: ignore[arg-type]


def _macs(node: onnx.NodeProto, domain: str, tensors: Mapping[str, TensorInfo],
          weights: set[str]) -> tuple[str, int | None, list[str]]:
    """(kind, MACs or None, the unknown dims) for one node."""
    if subgraphs(node):
        return "subgraph", None, []
    op = node.op_type if domain in ("", "ai.onnx", "com.microsoft") else ""
    first = node.output[0] if node.output else ""
    out = _shape(tensors, first) if first else None

    def operand(i: int) -> list[_Dim] | None:
        return _shape(tensors, node.input[i]) if len(node.input) > i and node.input[i] else None

    if op in ("Conv", "ConvInteger", "QLinearConv", "ConvTranspose"):
        w = operand(3 if op == "QLinearConv" else 1)
        # Conv: each output element sums C/group × kernel products; ConvTranspose: each input
        # element scatters into M/group × kernel outputs. Either way w[1:] holds those factors.
        counted = operand(0) if op == "ConvTranspose" else out
        sizes, kernel = _ints(counted), _ints(w)
        if sizes is None or kernel is None or len(kernel) < 2:
            return "conv", None, _unknown(counted, w) or ["?rank"]
        return "conv", math.prod(sizes) * math.prod(kernel[1:]), []
    if op in _MATMULS:
        b_index = 3 if op == "QLinearMatMul" else 1
        names = node.input[0], node.input[b_index] if len(node.input) > b_index else ""
        kind = "matmul" if names[0] in weights or names[1] in weights else "attention"
        a, sizes = _ints(operand(0)), _ints(out)
        if a is None or sizes is None or not a:
            return kind, None, _unknown(out, operand(0)) or ["?rank"]
        return kind, math.prod(sizes) * a[-1], []
    if op == "Gemm":
        a, sizes = _ints(operand(0)), _ints(out)
        if a is None or sizes is None or len(a) != 2:
            return "gemm", None, _unknown(out, operand(0)) or ["?rank"]
        trans_a = any(attr.name == "transA" and attr.i for attr in node.attribute)
        return "gemm", math.prod(sizes) * (a[0] if trans_a else a[1]), []
    if node.op_type in DATA_OPS and domain in ("", "ai.onnx"):
        return "data", 0, []
    total = 0
    for name in node.output:
        if not name:
            continue
        sizes = _ints(_shape(tensors, name))
        if sizes is None:
            return "elementwise", None, _unknown(_shape(tensors, name)) or ["?rank"]
        total += math.prod(sizes)
    return "elementwise", total, []


def _by_op(nodes: Sequence[NodeInfo]) -> list[OpStats]:
    table: dict[str, list[int]] = {}
    for info in nodes:
        row = table.setdefault(info.op_type, [0, 0, 0, 0])
        row[0] += 1
        row[1] += info.params
        row[2] += info.macs or 0
        row[3] += info.macs is None and info.kind != "subgraph"
    stats = [OpStats(op, *row) for op, row in table.items()]
    return sorted(stats, key=lambda s: (-s.macs, -s.params, s.op_type))
