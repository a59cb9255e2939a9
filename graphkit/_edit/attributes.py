"""Edits of node attributes: set_attribute and remove_attribute, with typed conversion of values."""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import onnx
from onnx import helper, numpy_helper

from graphkit import _check_args as argcheck
from graphkit._build import dtype_to_onnx
from graphkit._edit._common import _A, _find_node, _finish, _noop_returns_input, _schema
from graphkit._graph import node_label
from graphkit._model import Model
from graphkit.errors import (
    EditError,
    NameNotFoundError,
    UsageError,
    not_found,
)


@_noop_returns_input
def set_attribute(model: Model, /, node: str, attribute: str, value: Any, *, check: bool = True) -> Model:
    """Set (add or replace) one attribute of a node, with a typed value.

    Args:
        model: The model to edit (not modified).
        node: The node's name (or ``#<index>``).
        attribute: The attribute's name.
        value: int, float, str, a list of those, or a numpy array (a tensor attribute). The value is
            converted to the type the op's schema (or the existing attribute) declares: ``3`` for a
            FLOAT attribute becomes 3.0; ``2.5`` for an INT attribute is refused.
        check: Validate the result.

    Raises:
        NodeNotFoundError: No such node.
        NameNotFoundError: The op's schema has no attribute of that name.
        EditError: The value does not fit the attribute's type.
    """
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    argcheck.name(node, "node", what="node name")
    name = argcheck.name(attribute, "attribute", what="attribute name")
    argcheck.boolean(check, "check")
    proto = model.copy().lazy_proto
    found = _find_node(model, proto, node)
    target = found.node
    expected = _expected_attr_type(model, proto, target, name)
    attr = _make_attribute(name, value, expected, node_label(target))
    kept = [a for a in target.attribute if a.name != name]
    position = next((i for i, a in enumerate(target.attribute) if a.name == name), len(kept))
    kept.insert(position, attr)
    del target.attribute[:]
    target.attribute.extend(kept)
    return _finish(model, proto, check=check, what=f"set_attribute {node}.{name}", retype=True)


@_noop_returns_input
def remove_attribute(model: Model, /, node: str, attribute: str, *, check: bool = True) -> Model:
    """Remove one attribute of a node.

    Raises:
        NodeNotFoundError: No such node.
        NameNotFoundError: The node has no attribute of that name.
        EditError: The op's schema requires the attribute.
    """
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    argcheck.name(node, "node", what="node name")
    name = argcheck.name(attribute, "attribute", what="attribute name")
    argcheck.boolean(check, "check")
    proto = model.copy().lazy_proto
    target = _find_node(model, proto, node).node
    names = [a.name for a in target.attribute]
    if name not in names:
        raise not_found(NameNotFoundError, "attribute", name, names, where=node_label(target))
    schema = _schema(proto, target.op_type, target.domain)
    if schema is not None and name in schema.attributes and schema.attributes[name].required:
        raise EditError(f"attribute {name!r} of {node_label(target)} is required by {target.op_type}",
                        hint="set another value with set_attribute instead",
                        cli_hint="set another value with --set-attr instead")
    kept = [a for a in target.attribute if a.name != name]
    del target.attribute[:]
    target.attribute.extend(kept)
    return _finish(model, proto, check=check, what=f"remove_attribute {node}.{name}", retype=True)


def _expected_attr_type(model: Model, proto: onnx.ModelProto, node: onnx.NodeProto, name: str) -> int | None:
    for attr in node.attribute:
        if attr.name == name:
            return cast(int, attr.type)
    schema = _schema(proto, node.op_type, node.domain)
    if schema is None:
        return None
    if name not in schema.attributes:
        raise not_found(NameNotFoundError, f"attribute of {node.op_type}", name, list(schema.attributes),
                        where=node_label(node))
    return cast(int, schema.attributes[name].type)


#: INT attributes that hold an ONNX data type: a dtype name ("float16") is accepted for them.
DTYPE_ATTRIBUTES = frozenset({"to", "dtype", "output_dtype"})


def _make_attribute(name: str, value: Any, expected: int | None, label: str) -> onnx.AttributeProto:
    """Build an attribute of the expected type, converting safely, or raise EditError."""
    if isinstance(value, onnx.TensorProto):
        value = numpy_helper.to_array(value)
    if expected == _A.INT and name in DTYPE_ATTRIBUTES and isinstance(value, str):
        try:
            value = dtype_to_onnx(value)
        except UsageError as err:
            raise EditError(f"attribute {name!r} of {label} is a data type; {value!r} is none",
                            hint="give a dtype name such as float16, float32, int64 or bool") from err
    if expected is None:
        if isinstance(value, (list, tuple)) and not value:
            raise EditError(f"cannot tell the type of the empty list for attribute {name!r} of {label}",
                            hint="give at least one element, or set the attribute on an op with a known schema")
        try:
            if isinstance(value, np.ndarray):
                return helper.make_attribute(name, numpy_helper.from_array(value))
            return helper.make_attribute(name, value)
        except (TypeError, ValueError) as err:
            raise EditError(f"cannot make attribute {name!r} of {label} from {value!r}: {err}",
                            hint="use an int, float, string, a list of one of these, or a tensor") from err
    try:
        converted = _convert_attr(value, expected)
        return helper.make_attribute(name, converted, attr_type=expected)
    except (TypeError, ValueError) as err:  # (a value of the right kind may still not fit: an int beyond int64)
        want = _A.AttributeType.Name(expected)
        raise EditError(f"attribute {name!r} of {label} is {want}; {value!r} does not fit ({err})",
                        hint=_attr_hint(expected)) from err


def _attr_hint(expected: int) -> str:
    hints: dict[int, str] = {
        _A.INT: "give an integer, e.g. 1",
        _A.FLOAT: "give a number, e.g. 0.5",
        _A.STRING: "give a string",
        _A.INTS: "give a list of integers, e.g. [1, 1]",
        _A.FLOATS: "give a list of numbers, e.g. [1.0, 2.0]",
        _A.STRINGS: "give a list of strings",
        _A.TENSOR: 'give a tensor: a numpy array, or in a recipe {"value": [...], "dtype": "float32"} or {"npy": "file.npy"}',
    }
    return hints.get(expected, "this attribute type cannot be set by graphkit; use to_graphsurgeon")


def _to_int(v: Any) -> int:
    if isinstance(v, (bool, int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)) and float(v).is_integer():
        return int(v)
    raise ValueError(f"{v!r} is not an integer")


def _to_float(v: Any) -> float:
    if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool):
        return float(v)
    raise ValueError(f"{v!r} is not a number")


def _to_str(v: Any) -> str | bytes:
    if isinstance(v, (str, bytes)):
        return v
    raise ValueError(f"{v!r} is not a string")


def _convert_attr(value: Any, expected: int) -> Any:
    scalar: dict[int, Any] = {_A.INT: _to_int, _A.FLOAT: _to_float, _A.STRING: _to_str}
    listed: dict[int, Any] = {_A.INTS: _to_int, _A.FLOATS: _to_float, _A.STRINGS: _to_str}
    if expected in scalar:
        if isinstance(value, (list, tuple, np.ndarray)):
            raise ValueError("a list was given where one value is expected")
        return scalar[expected](value)
    if expected in listed:
        items = value.tolist() if isinstance(value, np.ndarray) else value
        if not isinstance(items, (list, tuple)):
            raise ValueError("one value was given where a list is expected")
        return [listed[expected](v) for v in items]
    if expected == _A.TENSOR:
        if not isinstance(value, np.ndarray):
            raise ValueError("a tensor attribute needs an array with a dtype")
        return numpy_helper.from_array(value)
    raise ValueError("unsupported attribute type")


def _schema_attr_type(proto: onnx.ModelProto, op_type: str, domain: str, name: str) -> int | None:
    schema = _schema(proto, op_type, domain)
    if schema is None or name not in schema.attributes:
        return None
    return cast(int, schema.attributes[name].type)
