"""Edits of values: initializers and Constant outputs, and turning them into graph inputs and back."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from graphkit import _check_args as argcheck
from graphkit._build import add_initializers
from graphkit._edit._addressing import _function_tensor
from graphkit._edit._common import (
    _A,
    Dim,
    _check_new_tensor_name,
    _declared_shape,
    _drop_value_info,
    _find_scope,
    _finish,
    _initializer,
    _main_input,
    _noop_returns_input,
    _refuse_function_tensor,
    _rename_scope,
)
from graphkit._graph import node_label
from graphkit._model import Model
from graphkit.errors import (
    EditError,
    TensorNotFoundError,
    not_found,
)


@_noop_returns_input
def set_initializer(model: Model, /, tensor: str, value: Any, *, allow_reshape: bool = False,
                    check: bool = True) -> Model:
    """Replace the value of an initializer (or of a Constant node's output).

    Args:
        model: The model to edit (not modified).
        tensor: The initializer's (or Constant output's) name.
        value: A numpy array, or a number/list (converted to the current dtype).
        allow_reshape: Accept a value whose shape differs from the current one.

    Output shapes and value_info are refreshed, since the value may set sizes (Resize scales).
        check: Validate the result.

    Raises:
        TensorNotFoundError: No initializer or Constant output has that name.
        EditError: The dtype differs, or the shape differs without ``allow_reshape``.
    """
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    name = argcheck.name(tensor, "tensor", what="tensor name")
    argcheck.boolean(allow_reshape, "allow_reshape")
    argcheck.boolean(check, "check")
    proto = model.copy().lazy_proto
    inside = _function_tensor(proto, name)  # a Constant inside a local function: FUNCTION/TENSOR
    graph = inside.graph if inside is not None else _find_scope(model, proto, name, what="set_initializer")[0]
    current = _constant_tensor(model, graph, name.partition("/")[2] if inside is not None else name)
    array = _as_value(value, current, f"initializer {name!r}", allow_reshape=allow_reshape)
    new = numpy_helper.from_array(array, current.name)
    current.Clear()
    current.CopyFrom(new)
    if inside is not None:
        inside.write_back()
    return _finish(model, proto, check=check, what=f"set_initializer {name}", retype=True)


def _constant_tensor(model: Model, graph: onnx.GraphProto, name: str) -> onnx.TensorProto:
    for tensor in graph.initializer:
        if tensor.name == name:
            return tensor
    for node in graph.node:
        if node.op_type == "Constant" and node.output and node.output[0] == name:
            for attr in node.attribute:
                if attr.name == "value" and attr.type == _A.TENSOR:
                    return attr.t
            raise EditError(f"{node_label(node)} holds {name!r} in a non-tensor attribute",
                            hint="turn it into a graph input (constant_to_input) and freeze that instead",
                            cli_hint="turn it into a graph input (--input-from-constant) and --freeze that instead")
    candidates = [t.name for t in graph.initializer]
    candidates += [n.output[0] for n in graph.node if n.op_type == "Constant" and n.output]
    raise not_found(TensorNotFoundError, "initializer or Constant output", name, candidates, where=model.name)


def _as_value(value: Any, current: onnx.TensorProto, what: str, *, allow_reshape: bool) -> np.ndarray:
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(current.data_type))
    shape = tuple(int(d) for d in current.dims)
    return _coerce(value, dtype, [*shape], what, allow_reshape=allow_reshape)


def _coerce(value: Any, dtype: np.dtype, shape: Sequence[Dim] | None, what: str, *,
            allow_reshape: bool = False) -> np.ndarray:
    """Check (or, for plain numbers and lists, convert) a value against a dtype and shape."""
    if isinstance(value, (np.ndarray, np.generic)):
        array = np.asarray(value)
        if array.dtype != dtype:
            raise EditError(f"{what} is {dtype.name}; the new value is {array.dtype.name}",
                            hint=f"convert the value to {dtype.name} (value.astype('{dtype.name}'))",
                            cli_hint=f"give a value of dtype {dtype.name} (a .npy file saved from an array of that "
                                     "dtype)")
    else:
        try:
            with np.errstate(over="raise"):  # (a number beyond the dtype would silently become inf)
                array = np.asarray(value, dtype=dtype)
        except (FloatingPointError, OverflowError) as err:
            limit = np.finfo(dtype).max if dtype.kind in "fc" else np.iinfo(dtype).max if dtype.kind in "iu" else None
            within = f" (at most {limit:.4g} in magnitude)" if limit is not None else ""
            raise EditError(f"{what} is {dtype.name}; {value!r} is beyond its range{within}",
                            hint=f"give values {dtype.name} can hold{within}") from err
        except (TypeError, ValueError) as err:
            raise EditError(f"{what} is {dtype.name}; cannot convert {value!r} to it",
                            hint=f"give {dtype.name} values") from err
        if array.dtype.kind in "iu" and not np.array_equal(array, np.asarray(value)):
            raise EditError(f"{what} is {dtype.name}; {value!r} has fractions", hint="give whole numbers")
    if shape is not None and not allow_reshape and not _shape_fits(array.shape, shape):
        shown = "[" + ", ".join("?" if d is None or isinstance(d, str) else str(d) for d in shape) + "]"
        raise EditError(f"{what} has shape {shown}; the new value has shape {list(array.shape)}",
                        hint="give a value of the same shape, or allow reshaping (allow_reshape=True)",
                        cli_hint="give a value of the same shape, or allow reshaping (--allow-reshape after "
                                 "--set-initializer)")
    return array


def _shape_fits(actual: Sequence[int], declared: Sequence[Dim]) -> bool:
    if len(actual) != len(declared):
        return False
    return all(not isinstance(d, int) or d == a for a, d in zip(actual, declared))


@_noop_returns_input
def initializer_to_input(model: Model, /, tensor: str, input_name: str | None = None, *, check: bool = True) -> Model:
    """Turn an initializer into a graph input of the same dtype and shape (optionally renamed).

    Shapes computed from the value (a Resize's scales, a Reshape's target) are refreshed.

    Raises:
        TensorNotFoundError: No main-graph initializer has that name (a Constant output: see
            ``constant_to_input``).
        EditError: ``input_name`` is already used.
    """
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    name = argcheck.name(tensor, "tensor", what="tensor name")
    argcheck.optional(argcheck.name, input_name, "input_name", what="input name", empty=True)
    argcheck.boolean(check, "check")
    proto = model.copy().lazy_proto
    if name not in {t.name for t in proto.graph.initializer}:
        _hint_constant(model, proto, name, "initializer_to_input", "constant_to_input")
    tensor = _initializer(model, proto, name, what="initializer_to_input")
    final = input_name or name
    if input_name and input_name != name:
        _check_new_tensor_name(proto, input_name)
    info = helper.make_tensor_value_info(final, tensor.data_type, [int(d) for d in tensor.dims])
    kept = [t for t in proto.graph.initializer if t.name != name]
    del proto.graph.initializer[:]
    proto.graph.initializer.extend(kept)
    listed = [i for i in proto.graph.input if i.name != name]
    del proto.graph.input[:]
    proto.graph.input.extend([*listed, info] if final == name else listed)
    if final != name:
        _rename_scope(proto.graph, {name: final})
        proto.graph.input.append(info)
    return _finish(model, proto, check=check, what=f"initializer_to_input {name}", retype=True)


def _hint_constant(model: Model, proto: onnx.ModelProto, name: str, verb: str, other: str) -> None:
    constants = [n.output[0] for n in proto.graph.node if n.op_type == "Constant" and n.output]
    initializers = [t.name for t in proto.graph.initializer]
    if verb == "initializer_to_input" and name in constants:
        raise EditError(f"{name!r} is the output of a Constant node, not an initializer",
                        hint=f"use {other}", cli_hint="use --input-from-constant")
    if verb == "constant_to_input" and name in initializers:
        raise EditError(f"{name!r} is an initializer, not a Constant node's output",
                        hint=f"use {other}", cli_hint="use --input-from-initializer")


@_noop_returns_input
def constant_to_input(model: Model, /, tensor: str, input_name: str | None = None, *, check: bool = True) -> Model:
    """Turn a Constant node's output into a graph input of the same dtype and shape, removing the node.

    ``tensor`` is the Constant's output tensor or the Constant node's name. Shapes that depended on the
    value are refreshed (e.g. a Resize's output size once its scales are an input).

    Raises:
        TensorNotFoundError: No main-graph Constant node has that output or name.
        EditError: ``input_name`` is already used.
    """
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    name = argcheck.name(tensor, "tensor", what="tensor or node name")
    argcheck.optional(argcheck.name, input_name, "input_name", what="input name", empty=True)
    argcheck.boolean(check, "check")
    proto = model.copy().lazy_proto
    graph = proto.graph
    constants = {n.output[0]: i for i, n in enumerate(graph.node) if n.op_type == "Constant" and n.output}
    by_node = {graph.node[i].name: out for out, i in constants.items() if graph.node[i].name}
    tensor_name = by_node.get(name, name)
    if tensor_name not in constants:
        _hint_constant(model, proto, name, "constant_to_input", "initializer_to_input")
        _refuse_function_tensor(model, proto, name, "constant_to_input")
        raise not_found(TensorNotFoundError, "Constant output", name, [*constants, *by_node], where=model.name)
    node = graph.node[constants[tensor_name]]
    elem, dims = _constant_signature(node)
    final = input_name or tensor_name
    if final != tensor_name:
        _check_new_tensor_name(proto, final)
    del graph.node[constants[tensor_name]]
    _drop_value_info(graph, {tensor_name})
    graph.input.append(helper.make_tensor_value_info(tensor_name, elem, dims))
    if final != tensor_name:
        _rename_scope(graph, {tensor_name: final})
    return _finish(model, proto, check=check, what=f"constant_to_input {name}", retype=True)


def _constant_signature(node: onnx.NodeProto) -> tuple[int, list[int]]:
    attr = node.attribute[0] if node.attribute else None
    if attr is None:
        raise EditError(f"{node_label(node)} has no value", hint="the Constant node is malformed")
    kinds: dict[str, tuple[int, list[int]]] = {
        "value_float": (onnx.TensorProto.FLOAT, []),
        "value_int": (onnx.TensorProto.INT64, []),
        "value_string": (onnx.TensorProto.STRING, []),
        "value_floats": (onnx.TensorProto.FLOAT, [len(attr.floats)]),
        "value_ints": (onnx.TensorProto.INT64, [len(attr.ints)]),
        "value_strings": (onnx.TensorProto.STRING, [len(attr.strings)]),
    }
    if attr.name == "value":
        return int(attr.t.data_type), [int(d) for d in attr.t.dims]
    if attr.name == "sparse_value":
        return int(attr.sparse_tensor.values.data_type), [int(d) for d in attr.sparse_tensor.dims]
    return kinds[attr.name]


@_noop_returns_input
def input_to_initializer(model: Model, /, tensor: str, value: Any, *, check: bool = True) -> Model:
    """Freeze a graph input: it becomes an initializer holding ``value``.

    Raises:
        TensorNotFoundError: No graph input has that name.
        EditError: The value's dtype or shape does not fit the input's declaration.
    """
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    name = argcheck.name(tensor, "tensor", what="input name")
    argcheck.boolean(check, "check")
    proto = model.copy().lazy_proto
    info = _main_input(model, proto, name, what="input_to_initializer")
    elem = info.type.tensor_type.elem_type
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(elem)) if elem else None
    declared = _declared_shape(info)
    what = f"graph input {name!r}"
    array = _coerce(value, dtype, declared, what) if dtype is not None else np.asarray(value)
    kept = [i for i in proto.graph.input if i.name != name]
    del proto.graph.input[:]
    proto.graph.input.extend(kept)
    add_initializers(proto.graph, [numpy_helper.from_array(array, name)], ir_version=proto.ir_version, top=True)
    return _finish(model, proto, check=check, what=f"input_to_initializer {name}", retype=True)
