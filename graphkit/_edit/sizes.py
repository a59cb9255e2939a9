"""Sizes that a Tile, Expand or ConstantOfShape hard-codes, computed from a Shape instead: the part of
``graphkit._edit.dynamic`` for constants that do not read the dynamic dim.

A Tile, Expand or ConstantOfShape makes a dim from a constant alone (an exporter's ``cls`` token
tiled to the batch, a padding or a mask of the batch's size). When a tensor with that fixed size
meets the dynamic dim (a Concat, an Add) and the size is traced back, through ops that keep it
along the same axis, to such a node, the entry of its constant becomes ``Gather(Shape(ref), [r])``
for a graph input ``ref`` that carries the dim at axis ``r``:

- ConstantOfShape: the shape's entry at that axis.
- Tile: the repeat at that axis, where the tiled input's dim there is 1 (so the output's dim is the
  repeat itself).
- Expand: the shape's entry aligned with that axis, where the expanded input's dim there is 1 (or
  absent).

The new shape is ``Concat(before, Gather(Shape(ref), [r]), after)`` of int64 pieces, so the model
computes the size at run time at any batch; where no such node is found the caller refuses.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import onnx
from onnx import helper, numpy_helper

from graphkit._build import add_initializers
from graphkit._edit._common import _fresh
from graphkit._graph import node_label, node_reads

__all__ = ["rewrite_source"]

#: Ops whose output has, along every axis, the size their same-rank (broadcast-aligned) inputs have.
_SAME_SIZE = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Mod", "Where", "Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual",
    "And", "Or", "Xor", "Max", "Min", "Sum", "Mean", "Cast", "CastLike", "Identity", "Relu", "Neg", "Abs", "Sigmoid",
    "Tanh", "Exp", "Log", "Sqrt", "Erf", "Not", "Dropout", "Softmax", "LayerNormalization", "Clip",
})


#: A constant's value by name (None when the name is no constant of the graph).
ValueOf = Callable[[str], "np.ndarray | None"]


def rewrite_source(graph: onnx.GraphProto, proto: onnx.ModelProto, types: Mapping[str, onnx.TypeProto],
                   value_of: ValueOf, tensor: str, axis: int, size: int, dim: str) -> str:
    """Make the size ``size`` of ``tensor`` at ``axis`` the dynamic ``dim``, rewriting the Tile, Expand
    or ConstantOfShape upstream that hard-codes it (see the module docstring). Returns a note, or ""
    when no such node is found."""
    ref = _reference(proto.graph, dim)
    if ref is None:
        return ""
    types = dict(types)  # (with the initializers' types, which inference does not list)
    for t in graph.initializer:
        types.setdefault(t.name, helper.make_tensor_type_proto(t.data_type, list(t.dims)))
    producers = {o: n for n in graph.node for o in n.output if o}
    seen: set[str] = set()
    while tensor not in seen:
        seen.add(tensor)
        node = producers.get(tensor)
        if node is None or node.domain not in ("", "ai.onnx"):
            return ""
        found = _hard_coded(node, types, value_of, axis, size)
        if found is not None:
            position, entry = found
            return _replace_entry(graph, node, position, entry, value_of, ref,
                                  ir_version=proto.ir_version, top=graph is proto.graph)
        step = _same_size_input(node, types, axis, size)
        if step is None:
            return ""
        tensor, axis = step
    return ""


def _dims(tp: onnx.TypeProto | None) -> list[int | str] | None:
    if tp is None or tp.WhichOneof("value") != "tensor_type" or not tp.tensor_type.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else d.dim_param for d in tp.tensor_type.shape.dim]


def _reference(top: onnx.GraphProto, dim: str) -> tuple[str, int] | None:
    """A main-graph input carrying ``dim`` and the axis where it does."""
    for value in top.input:
        for r, d in enumerate(_dims(value.type) or []):
            if d == dim:
                return value.name, r
    return None


def _hard_coded(node: onnx.NodeProto, types: Mapping[str, onnx.TypeProto], value: ValueOf, axis: int,
                size: int) -> tuple[int, int] | None:
    """(input position of the constant, entry in it) where ``node`` makes its output's ``axis`` of
    ``size`` from that constant alone, or None."""
    if node.op_type == "ConstantOfShape" and node.input:
        shape = value(node.input[0])
        if shape is not None and shape.ndim == 1 and axis < len(shape) and int(shape[axis]) == size:
            return 0, axis
        return None
    if node.op_type not in ("Tile", "Expand") or len(node.input) < 2:
        return None
    operand = value(node.input[1])
    data = _dims(types.get(node.input[0]))
    out = _dims(types.get(node.output[0]))
    if operand is None or operand.ndim != 1 or data is None or out is None:
        return None
    at = axis - (len(out) - len(data))  # (the data's axis aligned with the output's; Expand may add axes)
    entry = axis - (len(out) - len(operand))
    if not 0 <= entry < len(operand) or int(operand[entry]) != size:
        return None
    if at >= 0 and data[at] != 1:
        return None
    return 1, entry


def _same_size_input(node: onnx.NodeProto, types: Mapping[str, onnx.TypeProto], axis: int,
                     size: int) -> tuple[str, int] | None:
    """(input, its axis) that gives ``node``'s output its ``size`` at ``axis``, for a size-keeping op."""
    if node.op_type not in _SAME_SIZE:
        return None
    out = _dims(types.get(node.output[0]))
    if out is None:
        return None
    for name in node.input:
        dims = _dims(types.get(name)) if name else None
        if dims is None:
            continue
        at = axis - (len(out) - len(dims))
        if 0 <= at < len(dims) and dims[at] == size:
            return name, at
    return None


def _replace_entry(graph: onnx.GraphProto, node: onnx.NodeProto, position: int, entry: int, value_of: ValueOf,
                   ref: tuple[str, int], *, ir_version: int, top: bool) -> str:
    """``node``'s input ``position`` becomes ``Concat(before, Gather(Shape(ref), [r]), after)``."""
    found = value_of(node.input[position])
    assert found is not None  # (_hard_coded read it)
    old = found.astype(np.int64)
    taken = {t.name for t in graph.initializer} | {o for n in graph.node for o in n.output} | \
        {v.name for v in (*graph.input, *graph.output)}
    stem = f"{node.output[0]}/dynamic_shape"
    shape, gathered, indices, computed = (_fresh(f"{stem}/{s}", taken) for s in ("Shape", "Gather", "indices", "Concat"))
    added = [numpy_helper.from_array(np.array([ref[1]], np.int64), indices)]
    pieces = []
    for part, values in (("before", old[:entry]), ("dim", None), ("after", old[entry + 1:])):
        if values is None:
            pieces.append(gathered)
        elif len(values):
            name = _fresh(f"{stem}/{part}", taken)
            added.append(numpy_helper.from_array(values, name))
            pieces.append(name)
    made = [helper.make_node("Shape", [ref[0]], [shape], name=shape),
            helper.make_node("Gather", [shape, indices], [gathered], name=gathered, axis=0)]
    if len(pieces) > 1:
        made.append(helper.make_node("Concat", pieces, [computed], name=computed, axis=0))
    else:
        computed = gathered
    add_initializers(graph, added, ir_version=ir_version, top=top)
    at = list(graph.node).index(node)
    for offset, new in enumerate(made):
        graph.node.insert(at + offset, new)
    was = node.input[position]
    node.input[position] = computed
    _drop_if_unread(graph, was)
    return (f"{node_label(node)}: {'shape' if node.op_type != 'Tile' else 'repeats'} {old.tolist()} -> "
            f"entry {entry} from Shape({ref[0]!r})[{ref[1]}] (was {was!r})")


def _drop_if_unread(graph: onnx.GraphProto, name: str) -> None:
    """Remove the initializer (or Constant node) ``name`` when nothing reads it any more."""
    if name in {v.name for v in (*graph.input, *graph.output)} or any(name in node_reads(n) for n in graph.node):
        return
    kept = [t for t in graph.initializer if t.name != name]
    if len(kept) != len(graph.initializer):
        del graph.initializer[:]
        graph.initializer.extend(kept)
        return
    nodes = [n for n in graph.node if not (n.op_type == "Constant" and list(n.output) == [name])]
    if len(nodes) != len(graph.node):
        del graph.node[:]
        graph.node.extend(nodes)
