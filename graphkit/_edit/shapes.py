"""Edits of declared shapes (set_dims) and the shape refresh other edits share."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import onnx

from graphkit import _check_args as argcheck
from graphkit._edit._common import Dim, _declared_shape, _finish, _noop_returns_input, _refuse_function_tensor
from graphkit._edit.dynamic import make_dims_run
from graphkit._model import Model
from graphkit.errors import (
    ArgumentTypeError,
    EditError,
    TensorNotFoundError,
    not_found,
)

log = logging.getLogger(__name__)

#: Axes beyond this are typos (no tensor has this many dims).
_MAX_RANK = 1 << 16


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

    Intermediate shape information (value_info, Loop bodies included) and the shapes of the other
    outputs are refreshed by shape inference on a copy without the weights (weights stay on disk).
    When a fixed dim becomes a named one, the Reshape, Expand and Slice constants that hard-code its
    old size are rewritten where the rewrite is exact (``graphkit._edit.dynamic``), so the model runs
    at every size; where none is exact the edit is refused, naming the node and the constant.

    Args:
        model: The model to edit (not modified).
        tensor: A graph input or output name.
        dims: ``{axis: dim}`` for some axes (negative axes count from the end), or a full shape.
        check: Validate the result.

    Raises:
        TensorNotFoundError: No graph input or output has that name.
        EditError: An axis is out of range, a dim is negative, a sequence has the wrong rank, or a
            constant hard-codes the old size of a dim made dynamic and cannot be rewritten exactly.
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
    what = f"set_dims {tensor}"
    dynamic = {dim: before for _, before, dim in changed if isinstance(before, int) and isinstance(dim, str)}
    _run_at_every_size(model, proto, dynamic, what)
    forget = {before for _, before, dim in changed if isinstance(before, int) and not isinstance(dim, int)}
    return _finish(model, proto, check=check, what=what, retype=True, keep={tensor} if is_output else (),
                   forget=forget)


def _run_at_every_size(model: Model, proto: onnx.ModelProto, changes: Mapping[str, int], what: str) -> None:
    """Rewrite the constants that hard-code the old sizes of dims made dynamic (new name → old size)."""
    if changes:
        for note in make_dims_run(model, proto, changes, what=what):
            log.info("%s: %s", what, note)


@_noop_returns_input
def replace_dim(model: Model, /, dim: int | str, new: int | str, *, axis: int | None = None,
                check: bool = True) -> Model:
    """Replace a dim on every graph input and output that carries it: fix a named dim
    (``replace_dim(m, "batch", 1)``), name a fixed one (``replace_dim(m, 1, "batch", axis=0)``), or
    rename one. Otherwise as ``set_dims``.

    Args:
        model: The model to edit (not modified).
        dim: The dim to replace: a name, or a size.
        new: What it becomes: a name (dynamic) or a size (fixed).
        axis: Only at this axis (negative counts from the end). Needed when ``dim`` is a size that a
            tensor carries at several axes ([1, 1000, 1, 1]): which one is meant cannot be guessed.
        check: Validate the result.

    Raises:
        TensorNotFoundError: No graph input or output carries ``dim``.
        EditError: A tensor carries the size ``dim`` at several axes and no ``axis`` is given; or as
            ``set_dims``.
    """
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    for value, keyword in ((dim, "dim"), (new, "new")):
        if isinstance(value, str):
            argcheck.name(value, keyword, what="dim name")
        else:
            argcheck.integer(value, keyword, minimum=0, maximum=argcheck.INT64_MAX)
    if axis is not None:
        argcheck.integer(axis, "axis", minimum=-_MAX_RANK, maximum=_MAX_RANK - 1)
    argcheck.boolean(check, "check")
    proto = model.copy().lazy_proto
    inits = {t.name for t in proto.graph.initializer}
    values = [v for v in proto.graph.input if v.name not in inits] + list(proto.graph.output)
    hits: list[tuple[onnx.ValueInfoProto, onnx.TensorShapeProto.Dimension]] = []
    for value in values:
        dims = list(value.type.tensor_type.shape.dim) if value.type.tensor_type.HasField("shape") else []
        at = [i for i, d in enumerate(dims)
              if (d.dim_param == dim if isinstance(dim, str) else d.HasField("dim_value") and d.dim_value == dim)
              and (axis is None or i == axis % len(dims))]
        if len(at) > 1 and isinstance(dim, int):
            raise EditError(f"{value.name!r} has size {dim} at axes {at}; which of them is meant cannot be guessed",
                            hint=f"give the axis (replace_dim(model, {dim}, {new!r}, axis=AXIS)) or use "
                                 f"set_dims(model, {value.name!r}, {{AXIS: {new!r}}})",
                            cli_hint=f"give the axis (--dynamic-dim {dim}@AXIS={new}) or use "
                                     f"--dynamic {value.name}:AXIS={new}")
        hits.extend((value, dims[i]) for i in at)
    if not hits:
        raise not_found(TensorNotFoundError, "graph input or output dim", str(dim),
                        sorted({d.dim_param for v in values for d in v.type.tensor_type.shape.dim if d.dim_param}),
                        where=model.name)
    for _, d in hits:
        _set_dim(d, new)
    what = f"replace_dim {dim} -> {new}"
    _run_at_every_size(model, proto, {new: dim} if isinstance(dim, int) and isinstance(new, str) else {}, what)
    keep = {v.name for v, _ in hits if v.name in {o.name for o in proto.graph.output}}
    return _finish(model, proto, check=check, what=what, retype=True, keep=keep,
                   forget={dim} if isinstance(dim, int) and isinstance(new, str) else ())


def _io_value(model: Model, proto: onnx.ModelProto, name: str) -> onnx.ValueInfoProto:
    inits = {t.name for t in proto.graph.initializer}
    values = [i for i in proto.graph.input if i.name not in inits] + list(proto.graph.output)
    for value in values:
        if value.name == name:
            return value
    _refuse_function_tensor(model, proto, name, "set_dims")
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
