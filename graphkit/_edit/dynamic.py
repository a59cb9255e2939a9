"""Dynamic dims that run: the shape constants that hard-code a dim's old size are rewritten where the
rewrite is exact, and an edit is refused, naming the node and the constant, where it is not.

A dim made dynamic (``batch`` where the model said 1) is followed through the graph by inference;
every Reshape, Expand or Slice whose data input carries it at some axis is looked at:

- Reshape: a target entry equal to the old size at the axis the input carries the dim becomes ``0``
  (copy the input's dim; only with ``allowzero`` off). A dim the target has no place for is absorbed
  by a ``-1`` if there is one; otherwise no exact rewrite exists (the edit is refused).
- Expand: a shape entry equal to the old size, aligned with the carried axis, becomes ``1``
  (broadcasting keeps the input's dim).
- Slice over the carried axis from 0 to the old size (the whole axis, step 1): the end becomes open.

Tile repeats, ConstantOfShape shapes and the Expand of a constant do not read the carried dim: where
a size they hard-code meets the dynamic dim (a Concat, an Add), that entry is computed from the
Shape of a graph input carrying the dim (``graphkit._edit.sizes``); where the size comes from
elsewhere the edit is refused, naming the node where they meet and the constant upstream. Loop-carried values whose body declared the old
size are redeclared with the new name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx
from onnx import numpy_helper

from graphkit._build import add_initializers
from graphkit._edit._common import _fresh
from graphkit._edit.sizes import rewrite_source
from graphkit._graph import node_label, node_reads
from graphkit._infer import describe_type, infer_shapes_with_report
from graphkit._model import Model, iter_graphs
from graphkit.errors import EditError, InvalidModelError

__all__ = ["make_dims_run"]

_OPEN_END = 2**63 - 1

#: Ops whose inputs must agree dim by dim (after broadcasting, for the elementwise ones).
_BROADCASTING = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Mod", "Where", "Equal", "Greater", "Less",
                           "GreaterOrEqual", "LessOrEqual", "And", "Or", "Xor", "Max", "Min", "Sum", "Mean",
                           "PRelu", "BitShift"})

_HINT = ("keep the dim fixed, or compute the shape from the input's Shape in the exporter "
         "(torch.onnx.export with dynamic_axes / dynamic_shapes)")


def make_dims_run(model: Model, proto: onnx.ModelProto, changes: Mapping[str, int], *, what: str) -> list[str]:
    """Rewrite, in ``proto`` (whose graph inputs/outputs already carry the new dims), the constants
    that hard-code the old sizes of ``changes`` (new dim name → old size). Returns what was rewritten.

    Raises:
        EditError: A constant hard-codes an old size and no exact rewrite exists (names node and constant).
    """
    notes: list[str] = []
    for _ in range(_MAX_ROUNDS):  # a rewrite lets inference carry the dim further: until none is left
        types = _typed_graphs(model, proto, what)
        found = _rewrite_round(proto, types, changes) or _rewrite_meeting(proto, types, changes)
        if not found:
            _refuse_meetings(proto, types, changes, what)
            return notes
        notes.extend(found)
    raise EditError(f"{what}: the dims {sorted(changes)} still reach new shape constants after "
                    f"{_MAX_ROUNDS} rounds of rewriting", hint=_HINT)


#: Rounds of rewriting: each lets inference follow the dim past the constants the last one rewrote.
_MAX_ROUNDS = 16


def _rewrite_round(proto: onnx.ModelProto, types: list[dict[str, onnx.TypeProto]],
                   changes: Mapping[str, int]) -> list[str]:
    notes: list[str] = []
    for at, ((graph, where), typed) in enumerate(zip(iter_graphs(proto.graph), types)):
        constants = _Constants(graph, proto.ir_version, top=at == 0)
        for index, node in enumerate(list(graph.node)):
            rule = _RULES.get(node.op_type)
            if rule is not None:
                note = rule(node, index, typed, constants, changes, where)
                if note:
                    notes.append(note)
            if node.op_type == "Loop":
                notes.extend(_loop_carried(node, typed, changes))
    return notes


def _typed_graphs(model: Model, proto: onnx.ModelProto, what: str) -> list[dict[str, onnx.TypeProto]]:
    """The inferred type of every tensor, per graph (in ``iter_graphs`` order). The main graph's outputs
    are typed from scratch: their declared sizes are the old ones, which the edit re-derives after."""
    declared = [onnx.ValueInfoProto() for _ in proto.graph.output]
    for saved, value in zip(declared, proto.graph.output):
        saved.CopyFrom(value)
        if value.type.tensor_type.HasField("shape"):
            for dim in value.type.tensor_type.shape.dim:
                dim.Clear()
    try:
        typed = infer_shapes_with_report(model.derive(proto), observe=False, check=False).model
    except InvalidModelError as err:
        raise EditError(f"{what}: {err.message}", hint=_HINT) from err
    finally:
        for saved, value in zip(declared, proto.graph.output):
            value.CopyFrom(saved)
    return [{v.name: v.type for v in [*g.input, *g.value_info, *g.output]} for g, _ in iter_graphs(typed.lazy_proto.graph)]


class _Constants:
    """The constant values of one graph (initializers that are not inputs, Constant nodes' values)
    and how many nodes read each, so a shared constant is copied before it is changed."""

    def __init__(self, graph: onnx.GraphProto, ir_version: int, *, top: bool) -> None:
        self.graph = graph
        self.ir_version, self.top = ir_version, top
        # before IR 4 every initializer is listed as an input too, and is a constant all the same
        inputs = {v.name for v in graph.input} if ir_version >= 4 else set()
        self.initializers = {t.name: t for t in graph.initializer if t.name not in inputs}
        self.nodes = {n.output[0]: n for n in graph.node if n.op_type == "Constant" and n.output}
        self.readers: dict[str, int] = {}
        for node in graph.node:
            for name in node_reads(node):
                self.readers[name] = self.readers.get(name, 0) + 1

    def value(self, name: str) -> np.ndarray | None:
        tensor = self.initializers.get(name)
        if tensor is not None and not tensor.external_data:
            return numpy_helper.to_array(tensor)
        node = self.nodes.get(name)
        if node is not None:
            for attr in node.attribute:
                if attr.name == "value":
                    return numpy_helper.to_array(attr.t)
                if attr.name == "value_ints":
                    return np.asarray(list(attr.ints), np.int64)
        return None

    def replace(self, node: onnx.NodeProto, position: int, value: np.ndarray) -> str:
        """Give ``node``'s input ``position`` the new value: in place when only it reads the constant,
        else as a new initializer. Returns the name the node reads now."""
        name = node.input[position]
        if self.readers.get(name, 0) > 1 or name in {o.name for o in self.graph.output}:
            taken = {t.name for t in self.graph.initializer} | {o for n in self.graph.node for o in n.output}
            fresh = _fresh(f"{name}_dynamic", taken)
            add_initializers(self.graph, [numpy_helper.from_array(value, fresh)], ir_version=self.ir_version,
                             top=self.top)
            self.readers[name] -= 1
            node.input[position] = fresh
            return fresh
        tensor = self.initializers.get(name)
        if tensor is not None:
            tensor.CopyFrom(numpy_helper.from_array(value.astype(numpy_helper.to_array(tensor).dtype), name))
        else:
            constant = self.nodes[name]
            del constant.attribute[:]
            constant.attribute.append(onnx.helper.make_attribute("value", numpy_helper.from_array(value)))
        return name


def _carried(tp: onnx.TypeProto | None, changes: Mapping[str, int]) -> dict[int, str]:
    """Axis → new dim name, for the axes of a tensor type that carry a changed dim."""
    if tp is None or tp.WhichOneof("value") != "tensor_type" or not tp.tensor_type.HasField("shape"):
        return {}
    return {i: d.dim_param for i, d in enumerate(tp.tensor_type.shape.dim) if d.dim_param in changes}


def _reshape(node: onnx.NodeProto, index: int, types: dict[str, onnx.TypeProto], constants: _Constants,
             changes: Mapping[str, int], where: str) -> str:
    carried = _carried(types.get(node.input[0]), changes)
    target = constants.value(node.input[1]) if len(node.input) > 1 else None
    if not carried or target is None or target.ndim != 1:
        return ""
    allowzero = any(a.name == "allowzero" and a.i for a in node.attribute)
    new = target.astype(np.int64).copy()
    covered = set()
    for axis, name in carried.items():
        if axis < len(new) and new[axis] == changes[name] and not allowzero:
            new[axis] = 0
        if axis < len(new) and new[axis] == 0 and not allowzero:
            covered.add(axis)
    missing = [axis for axis in carried if axis not in covered]
    if missing and -1 not in new.tolist():
        axis = missing[0]
        raise EditError(
            f"{node_label(node, index)} in {where} reads constant {node.input[1]!r} = {target.tolist()}, which "
            f"hard-codes the old size {changes[carried[axis]]} of dim {axis} of {node.input[0]!r} (now "
            f"{carried[axis]!r}), and no exact rewrite exists (its target has no place for that dim)", hint=_HINT)
    if np.array_equal(new, target):
        return ""
    constants.replace(node, 1, new)
    return f"{node_label(node, index)}: target {target.tolist()} -> {new.tolist()}"


def _expand(node: onnx.NodeProto, index: int, types: dict[str, onnx.TypeProto], constants: _Constants,
            changes: Mapping[str, int], where: str) -> str:
    data = types.get(node.input[0])
    carried = _carried(data, changes)
    shape = constants.value(node.input[1]) if len(node.input) > 1 else None
    if not carried or shape is None or shape.ndim != 1 or data is None:
        return ""
    rank = len(data.tensor_type.shape.dim)
    new = shape.astype(np.int64).copy()
    for axis, name in carried.items():
        at = len(new) - rank + axis
        if 0 <= at < len(new) and new[at] == changes[name]:
            new[at] = 1
    if np.array_equal(new, shape):
        return ""
    constants.replace(node, 1, new)
    return f"{node_label(node, index)}: shape {shape.tolist()} -> {new.tolist()}"


def _slice(node: onnx.NodeProto, index: int, types: dict[str, onnx.TypeProto], constants: _Constants,
           changes: Mapping[str, int], where: str) -> str:
    data = types.get(node.input[0])
    carried = _carried(data, changes)
    if not carried or data is None or len(node.input) < 3:
        return ""
    rank = len(data.tensor_type.shape.dim)
    starts, ends = constants.value(node.input[1]), constants.value(node.input[2])
    axes = constants.value(node.input[3]) if len(node.input) > 3 and node.input[3] else None
    steps = constants.value(node.input[4]) if len(node.input) > 4 and node.input[4] else None
    if starts is None or ends is None or (len(node.input) > 3 and node.input[3] and axes is None):
        return ""
    axes = np.arange(len(starts)) if axes is None else axes
    new = ends.astype(np.int64).copy()
    for i, axis in enumerate(int(a) % rank for a in axes.tolist()):
        name = carried.get(axis)
        step = 1 if steps is None else int(steps[i])
        if name is not None and int(starts[i]) == 0 and step == 1 and int(new[i]) == changes[name]:
            new[i] = _OPEN_END  # the whole axis, whatever its size
    if np.array_equal(new, ends):
        return ""
    constants.replace(node, 2, new)
    return f"{node_label(node, index)}: ends {ends.tolist()} -> open"


_RULES = {"Reshape": _reshape, "Expand": _expand, "Slice": _slice}


def _loop_carried(node: onnx.NodeProto, types: dict[str, onnx.TypeProto], changes: Mapping[str, int]) -> list[str]:
    """Redeclare a Loop body's carried inputs (and outputs) that declared the old size of a dim the
    initial value now carries (ONNX inference leaves a carried value's declared shape as it is)."""
    body = next((a.g for a in node.attribute if a.name == "body"), None)
    if body is None:
        return []
    notes = []
    for k, outer in enumerate(node.input[2:]):
        carried = _carried(types.get(outer), changes)
        for value in (body.input[2 + k] if 2 + k < len(body.input) else None,
                      body.output[1 + k] if 1 + k < len(body.output) else None):
            if value is None or not value.type.tensor_type.HasField("shape"):
                continue
            dims = value.type.tensor_type.shape.dim
            for axis, name in carried.items():
                if axis < len(dims) and dims[axis].HasField("dim_value") and dims[axis].dim_value == changes[name]:
                    dims[axis].Clear()
                    dims[axis].dim_param = name
                    notes.append(f"Loop body of {node_label(node)}: {value.name!r} dim {axis} -> {name!r}")
    return notes


def _rewrite_meeting(proto: onnx.ModelProto, types: list[dict[str, onnx.TypeProto]],
                     changes: Mapping[str, int]) -> list[str]:
    """Compute from a Shape the first size, hard-coded by a Tile/Expand/ConstantOfShape upstream, that
    meets the dynamic dim (one per round: the types change with it)."""
    for at, ((graph, _), typed) in enumerate(zip(iter_graphs(proto.graph), types)):
        constants = _Constants(graph, proto.ir_version, top=at == 0)
        for node in list(graph.node):
            clash = _meeting(node, typed, changes)
            if clash is None:
                continue
            fixed, _, name = clash
            for tensor, axis in fixed:
                note = rewrite_source(graph, proto, typed, constants.value, tensor, axis, changes[name], name)
                if note:
                    return [note]
    return []


def _refuse_meetings(proto: onnx.ModelProto, types: list[dict[str, onnx.TypeProto]], changes: Mapping[str, int],
                     what: str) -> None:
    """Refuse where a tensor with an old size fixed by a constant upstream meets one carrying the new
    dim, dim for dim (the message names the node and that constant)."""
    for (graph, where), typed in zip(iter_graphs(proto.graph), types):
        for index, node in enumerate(graph.node):
            clash = _meeting(node, typed, changes)
            if clash is None:
                continue
            fixed, other, name = clash[0][0][0], clash[1], clash[2]
            source = _hardcoding_constant(graph, fixed, changes[name], proto.ir_version)
            if not source:
                continue  # a size another graph input fixes: making that dynamic too is the user's next step
            origin = f"; the size comes from {source}"
            raise EditError(
                f"{what}: {node_label(node, index)} in {where} combines {fixed!r} {describe_type(typed[fixed])} "
                f"with {other!r} {describe_type(typed[other])}: a size fixed to {changes[name]}, the old size of "
                f"{name!r}, meets the dynamic dim{origin}", hint=_HINT)


def _meeting(node: onnx.NodeProto, types: dict[str, onnx.TypeProto], changes: Mapping[str, int]
             ) -> tuple[list[tuple[str, int]], str, str] | None:
    """(the tensors with the old size and their axis where they have it, a tensor with the new dim, the
    dim's name) where ``node`` makes them meet."""
    concat = node.op_type == "Concat"
    if not concat and node.op_type not in _BROADCASTING:
        return None
    axis = next((a.i for a in node.attribute if a.name == "axis"), 0) if concat else None
    shapes = {n: types[n].tensor_type.shape.dim for n in node.input
              if n in types and types[n].WhichOneof("value") == "tensor_type" and types[n].tensor_type.HasField("shape")}
    rank = max((len(d) for d in shapes.values()), default=0)
    for name, size in changes.items():
        if not concat and size == 1:
            continue  # a fixed 1 broadcasts: it may be meant
        for i in range(rank):
            if concat and axis is not None and i == axis % rank:
                continue
            named, fixed = [], []
            for tensor, dims in shapes.items():
                dim = _aligned(dims, i, rank)
                if dim is None:
                    continue
                if dim.dim_param == name:
                    named.append(tensor)
                elif dim.HasField("dim_value") and dim.dim_value == size:
                    fixed.append((tensor, i - (rank - len(dims))))
            if named and fixed:
                return fixed, named[0], name
    return None


def _aligned(dims: Sequence[onnx.TensorShapeProto.Dimension], axis: int, rank: int
             ) -> onnx.TensorShapeProto.Dimension | None:
    at = axis - (rank - len(dims))
    return dims[at] if 0 <= at < len(dims) else None


def _hardcoding_constant(graph: onnx.GraphProto, tensor: str, size: int, ir_version: int) -> str:
    """The nearest node upstream of ``tensor`` that reads a constant holding ``size`` (its label and
    the constant), or ""."""
    producers = {o: n for n in graph.node for o in n.output if o}
    constants = _Constants(graph, ir_version, top=False)  # (only read)
    seen, frontier = set(), [tensor]
    while frontier:
        name = frontier.pop(0)
        node = producers.get(name)
        if node is None or name in seen:
            continue
        seen.add(name)
        for position, read in enumerate(node.input):
            value = constants.value(read) if read else None
            if value is not None and value.dtype.kind in "iu" and size in value.ravel().tolist():
                return f"{node_label(node)} reading constant {read!r} = {value.tolist()} (input {position})"
        frontier.extend(r for r in node.input if r)
    return ""
