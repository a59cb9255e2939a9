"""Edits of declared shapes (set_dims) and the shape refresh other edits share."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from graphkit import _check_args as argcheck
from graphkit._edit._common import Dim, _declared_shape, _finish, _noop_returns_input
from graphkit._graph import node_label
from graphkit._io import tensor_nbytes, tensor_value
from graphkit._model import Model, iter_graphs
from graphkit.errors import (
    ArgumentTypeError,
    EditError,
    TensorNotFoundError,
    not_found,
)

log = logging.getLogger(__name__)


#: Ops whose constant operand is a shape or size: (op_type, input index).
SHAPE_OPERANDS = {"Reshape": (1,), "Expand": (1,), "ConstantOfShape": (0,), "Tile": (1,), "Resize": (3,),
                  "Upsample": (1,)}


#: Initializers at most this large stay in the copy used for shape inference (Reshape targets, scales).
_INFER_KEEP_BYTES = 4096


def _check_dim(value: Any, keyword: str) -> Dim:
    if value is None or isinstance(value, str):
        return value
    return argcheck.integer(value, keyword, minimum=0, maximum=argcheck.INT64_MAX)


def _check_dims(dims: Any) -> dict[int, Dim] | list[Dim]:
    """set_dims' ``dims``: ``{axis: dim}`` or a full shape, each dim an int, a name or None."""
    if isinstance(dims, Mapping):
        return argcheck.mapping(dims, "dims", key=lambda k, kw: argcheck.integer(k, "dims axis", minimum=-argcheck.INT64_MAX, maximum=argcheck.INT64_MAX), item=_check_dim)
    if isinstance(dims, (str, bytes)) or not isinstance(dims, Sequence):
        raise ArgumentTypeError(f"dims= must be {{axis: dim}} or a list of dims, not {argcheck.describe(dims)}",
                                hint="e.g. dims={0: 'batch'} or dims=['batch', 3, 224, 224]")
    return [_check_dim(d, f"dims[{i}]") for i, d in enumerate(dims)]


@_noop_returns_input
def set_dims(model: Model, /, tensor: str, dims: Mapping[int, Dim] | Sequence[Dim], *, check: bool = True) -> Model:
    """Make dims of a graph input or output dynamic (a name, or None) or fixed (an int).

    Intermediate shape information (value_info) and the shapes of the other outputs are refreshed by
    shape inference on a copy without the large weights (weights stay on disk). A warning is logged for
    each constant shape operand (Reshape/Expand/ConstantOfShape/Tile/Resize) that contains an old size.

    Args:
        model: The model to edit (not modified).
        tensor: A graph input or output name.
        dims: ``{axis: dim}`` for some axes (negative axes count from the end), or a full shape.
        check: Validate the result.

    Raises:
        TensorNotFoundError: No graph input or output has that name.
        EditError: An axis is out of range, a dim is negative, or a sequence has the wrong rank.
    """
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    argcheck.name(tensor, "tensor", what="tensor name")
    dims = _check_dims(dims)
    argcheck.boolean(check, "check")
    proto = model.copy().lazy_proto
    info = _io_value(model, proto, tensor)
    old = _declared_shape(info)
    wanted = _wanted_dims(tensor, old, dims)
    shape = info.type.tensor_type.shape
    if old is None:
        shape.SetInParent()
    while len(shape.dim) < len(wanted):
        shape.dim.add()
    changed: list[tuple[int, Dim, Dim]] = []
    for axis, dim in wanted.items():
        before = old[axis] if old is not None and axis < len(old) else None
        if before != dim:
            changed.append((axis, before, dim))
        _set_dim(shape.dim[axis], dim)
    is_output = tensor in {o.name for o in proto.graph.output}
    _warn_hardcoded(model, proto, tensor, changed)
    return _finish(model, proto, check=check, what=f"set_dims {tensor}", retype=True,
                   keep={tensor} if is_output else ())


def _io_value(model: Model, proto: onnx.ModelProto, name: str) -> onnx.ValueInfoProto:
    inits = {t.name for t in proto.graph.initializer}
    values = [i for i in proto.graph.input if i.name not in inits] + list(proto.graph.output)
    for value in values:
        if value.name == name:
            return value
    raise not_found(TensorNotFoundError, "graph input or output", name, [v.name for v in values], where=model.name)


def _wanted_dims(tensor: str, old: list[Dim] | None, dims: Mapping[int, Dim] | Sequence[Dim]) -> dict[int, Dim]:
    if isinstance(dims, Mapping):
        rank = len(old) if old is not None else None
        wanted: dict[int, Dim] = {}
        for key, dim in dims.items():
            axis = int(key)
            if rank is None:
                raise EditError(f"{tensor!r} has no known rank, so axis {axis} means nothing",
                                hint="give its full shape as a list instead")
            if not -rank <= axis < rank:
                raise EditError(f"{tensor!r} has rank {rank}; there is no axis {axis}",
                                hint=f"use an axis from 0 to {rank - 1}")
            wanted[axis % rank] = dim
    else:
        if old is not None and len(dims) != len(old):
            raise EditError(f"{tensor!r} has rank {len(old)}; {len(dims)} dims were given",
                            hint="give one dim per axis, or a mapping {axis: dim}")
        wanted = dict(enumerate(dims))
    for axis, dim in wanted.items():
        valid = dim is None or (isinstance(dim, str) and bool(dim)) or (isinstance(dim, int) and dim >= 0)
        if isinstance(dim, bool) or not valid:
            raise EditError(f"dim {axis} of {tensor!r}: {dim!r} is not a size, a name or None",
                            hint="use an int >= 0 (fixed), a name such as 'batch' (dynamic) or None (unknown)")
    return wanted


def _set_dim(dim: onnx.TensorShapeProto.Dimension, value: Dim) -> None:
    dim.Clear()
    if isinstance(value, int):
        dim.dim_value = value
    elif isinstance(value, str):
        dim.dim_param = value


def _warn_hardcoded(model: Model, proto: onnx.ModelProto, tensor: str, changed: list[tuple[int, Dim, Dim]]) -> None:
    old_sizes = {before: axis for axis, before, _ in changed if isinstance(before, int)}
    if not old_sizes:
        return
    for graph, where in iter_graphs(proto.graph):
        for i, node in enumerate(graph.node):
            for pos in SHAPE_OPERANDS.get(node.op_type, ()):
                if pos >= len(node.input) or not node.input[pos]:
                    continue
                value = _small_constant(model, graph, node.input[pos])
                if value is None:
                    continue
                hits = sorted({int(v) for v in value.ravel().tolist() if int(v) in old_sizes})
                for size in hits:
                    log.warning(
                        "%s in %s reads constant %r = %s, which hard-codes %d, the old size of %r dim %d; "
                        "it may fail or compute the wrong thing for other sizes (use 0 or -1 in a Reshape target, "
                        "or compute the shape with Shape)",
                        node_label(node, i), where, node.input[pos], value.tolist(), size, tensor, old_sizes[size])


def _small_constant(model: Model, graph: onnx.GraphProto, name: str) -> np.ndarray | None:
    for tensor in graph.initializer:
        if tensor.name == name and tensor_nbytes(tensor) <= _INFER_KEEP_BYTES:
            return tensor_value(model, tensor)
    for node in graph.node:
        if node.op_type == "Constant" and node.output and node.output[0] == name:
            for attr in node.attribute:
                if attr.name == "value":
                    return numpy_helper.to_array(attr.t)
                if attr.name == "value_ints":
                    return np.asarray(list(attr.ints))
    return None
