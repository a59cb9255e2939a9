"""Edit verbs: pure functions that take a Model and return a new, checked one.

The only importer of onnx_graphsurgeon in graphkit (``to_graphsurgeon`` / ``from_graphsurgeon``).

Every edit copies the model, checks everything it needs (unknown names get a did-you-mean hint), then
changes the copy and validates the result with onnx.checker and graphkit's structural checks. The input
Model is never changed. An edit that would change nothing returns the input Model itself (``result is
model`` tells), logging why; the undecorated function (``edit_fn.__wrapped__``) raises ``NoChangeError``
instead, which is how the CLI refuses no-op edits unless ``--allow-noop``.

Names are the public currency: nodes are named by their name (or ``#<index>`` for a main-graph node
without a unique name), tensors by their name. Renames and rewiring respect scopes: a tensor read
from an If/Loop/Scan body is renamed there too, unless the body defines the same name itself.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ParamSpec, cast

import numpy as np
import onnx
from onnx import helper, numpy_helper

from graphkit import _check_args as argcheck
from graphkit import _ort
from graphkit._graph import GraphIndex, graph_tensor_names, node_label, node_reads, subgraphs
from graphkit._io import tensor_nbytes, tensor_value
from graphkit._model import Model, is_external, iter_graphs, iter_tensors
from graphkit._submodel import finish
from graphkit._typing import tensor_types
from graphkit._validate import check_or_raise
from graphkit.errors import (
    ArgumentTypeError,
    EditError,
    NameNotFoundError,
    NoChangeError,
    NodeNotFoundError,
    TensorNotFoundError,
    not_found,
)

__all__ = [
    "bypass_node",
    "cleanup",
    "constant_to_input",
    "fold_constants",
    "from_graphsurgeon",
    "initializer_to_input",
    "input_to_initializer",
    "insert_node",
    "merge",
    "remove_attribute",
    "remove_node",
    "rename_node",
    "rename_tensor",
    "replace_op",
    "set_attribute",
    "set_dims",
    "set_initializer",
    "set_op_type",
    "set_opset",
    "to_graphsurgeon",
]

log = logging.getLogger(__name__)

Dim = int | str | None
STANDARD_DOMAINS = {"", "ai.onnx", "ai.onnx.ml", "ai.onnx.training", "ai.onnx.preview.training"}
#: Ops whose constant operand is a shape or size: (op_type, input index).
SHAPE_OPERANDS = {"Reshape": (1,), "Expand": (1,), "ConstantOfShape": (0,), "Tile": (1,), "Resize": (3,),
                  "Upsample": (1,)}
#: Ops never folded: their outputs are not a function of their inputs.
NONDETERMINISTIC = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial",
                    "Bernoulli"}
#: Initializers at most this large stay in the copy used for shape inference (Reshape targets, scales).
_INFER_KEEP_BYTES = 4096


# ------------------------------------------------------------------------------------- lookups


@dataclass(frozen=True)
class _Found:
    """A node located in some graph of a model."""

    graph: onnx.GraphProto
    index: int
    where: str

    @property
    def node(self) -> onnx.NodeProto:
        return self.graph.node[self.index]


def _all_node_names(proto: onnx.ModelProto) -> list[str]:
    return [n.name for g, _ in iter_graphs(proto.graph) for n in g.node if n.name]


def _find_node(model: Model, proto: onnx.ModelProto, name: str) -> _Found:
    """Locate a node by name in any graph, or ``#<i>`` for the main graph's i-th node.

    Raises:
        NodeNotFoundError: No node has that name (with did-you-mean).
        EditError: Several nodes share the name.
    """
    hits = [_Found(g, i, where) for g, where in iter_graphs(proto.graph) for i, n in enumerate(g.node)
            if n.name == name]
    if not hits and name.startswith("#") and name[1:].isdigit():
        index = int(name[1:])
        if index < len(proto.graph.node):
            return _Found(proto.graph, index, "main graph")
        raise EditError(f"{model.name} has {len(proto.graph.node)} nodes; there is no node #{index}",
                        hint=f"use #0 to #{len(proto.graph.node) - 1}, or a node name")
    if not hits:
        raise not_found(NodeNotFoundError, "node", name, _all_node_names(proto), where=model.name)
    if len(hits) > 1:
        places = ", ".join(sorted({h.where for h in hits}))
        raise EditError(f"{len(hits)} nodes are named {name!r} in {model.name} ({places})",
                        hint="name a main-graph node by its position instead, e.g. '#3' (see 'graphkit inspect')")
    return hits[0]


def _find_scope(model: Model, proto: onnx.ModelProto, tensor: str) -> tuple[onnx.GraphProto, str]:
    """The graph that defines ``tensor`` (the main graph first).

    Raises:
        TensorNotFoundError: No graph defines it (with did-you-mean).
        EditError: Several subgraphs define it and the main graph does not.
    """
    if tensor in GraphIndex(proto.graph).defined:
        return proto.graph, "main graph"
    hits = [(g, where) for g, where in iter_graphs(proto.graph) if tensor in GraphIndex(g).defined]
    if not hits:
        raise not_found(TensorNotFoundError, "tensor", tensor, sorted(graph_tensor_names(proto.graph)), where=model.name)
    if len(hits) > 1:
        raise EditError(f"tensor {tensor!r} is defined in {len(hits)} subgraphs of {model.name}: "
                        + "; ".join(w for _, w in hits), hint="these are different tensors; edit the model with "
                        "to_graphsurgeon for a body-specific change")
    return hits[0]


def _main_input(model: Model, proto: onnx.ModelProto, name: str) -> onnx.ValueInfoProto:
    inits = {t.name for t in proto.graph.initializer}
    inputs = [i for i in proto.graph.input if i.name not in inits]
    for value in inputs:
        if value.name == name:
            return value
    raise not_found(TensorNotFoundError, "graph input", name, [i.name for i in inputs], where=model.name)


def _initializer(model: Model, graph: onnx.GraphProto, name: str) -> onnx.TensorProto:
    for tensor in graph.initializer:
        if tensor.name == name:
            return tensor
    raise not_found(TensorNotFoundError, "initializer", name, [t.name for t in graph.initializer], where=model.name)


def _split_op(op: str) -> tuple[str, str]:
    """``'my::Debug'`` → ("my", "Debug"); ``'Relu'`` → ("", "Relu")."""
    if "::" in op:
        domain, _, name = op.rpartition("::")
        return _norm_domain(domain), name
    return "", op


def _norm_domain(domain: str | None) -> str:
    return "" if domain in (None, "ai.onnx") else str(domain)


def _opset_version(proto: onnx.ModelProto, domain: str) -> int | None:
    for entry in proto.opset_import:
        if _norm_domain(entry.domain) == _norm_domain(domain):
            return int(entry.version)
    return None


def _schema(proto: onnx.ModelProto, op_type: str, domain: str) -> onnx.defs.OpSchema | None:
    """The op's schema at the model's opset, or None for custom domains and unknown ops."""
    version = _opset_version(proto, domain)
    if _norm_domain(domain) not in STANDARD_DOMAINS or version is None:
        return None
    try:
        return onnx.defs.get_schema(op_type, version, _norm_domain(domain))
    except onnx.defs.SchemaError:
        return None


def _elem_type(graph: onnx.GraphProto, name: str) -> int:
    """The element type of a tensor if the graph records it, else 0."""
    for tensor in graph.initializer:
        if tensor.name == name:
            return int(tensor.data_type)
    for value in [*graph.input, *graph.output, *graph.value_info]:
        if value.name == name and value.type.HasField("tensor_type"):
            return int(value.type.tensor_type.elem_type)
    for node in graph.node:
        if node.op_type == "Constant" and node.output and node.output[0] == name:
            for attr in node.attribute:
                if attr.name == "value":
                    return int(attr.t.data_type)
    return 0


def _dtype_name(elem: int) -> str:
    return onnx.helper.tensor_dtype_to_np_dtype(elem).name if elem else "unknown"


# ------------------------------------------------------------------------------ no-op edits

_P = ParamSpec("_P")


def _noop_returns_input(edit: Callable[_P, Model]) -> Callable[_P, Model]:
    """The public edit: where ``edit`` raises NoChangeError, return the input model itself (and log why).

    The raising function stays reachable as ``__wrapped__`` for callers that refuse no-ops (the CLI).
    """

    @functools.wraps(edit)
    def public(*args: _P.args, **kwargs: _P.kwargs) -> Model:
        try:
            return edit(*args, **kwargs)
        except NoChangeError as err:
            log.info("%s: returning the model unchanged (%s)", err.message, err.hint)
            model = args[0] if args else kwargs.get("model", kwargs.get("a"))
            assert isinstance(model, Model)  # every edit takes the model first
            return model

    return public


# ------------------------------------------------------------------------------ argument checks


def _tensor_key(value: Any, keyword: str) -> str:
    return argcheck.name(value, keyword, what="tensor name")


def _attribute_key(value: Any, keyword: str) -> str:
    return argcheck.name(value, keyword, what="attribute name")


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


def _check_node_inputs(inputs: Any) -> None:
    """insert_node's ``inputs``: tensor names or arrays (new initializers)."""
    if isinstance(inputs, (str, bytes, Mapping)) or not isinstance(inputs, Sequence):
        raise ArgumentTypeError(f"inputs= must be a list of tensor names or arrays, not {argcheck.describe(inputs)}",
                                hint="e.g. inputs=['scale'] or inputs=[numpy.array([2.0], 'float32')]")
    for i, item in enumerate(inputs):
        if not isinstance(item, (str, np.ndarray)):
            raise ArgumentTypeError(f"inputs[{i}]= must be a tensor name or a numpy array, not "
                                    f"{argcheck.describe(item)}", hint="wrap numbers in numpy.array(..., dtype)")


def _check_prefixes(prefixes: Any) -> tuple[str, str]:
    if isinstance(prefixes, (str, bytes, Mapping)) or not isinstance(prefixes, Sequence) or len(prefixes) != 2:
        raise ArgumentTypeError(f"prefixes= must be a pair of str, not {argcheck.describe(prefixes)}",
                                hint="e.g. prefixes=('a/', 'b/')")
    first = argcheck.name(prefixes[0], "prefixes[0]", what="prefix", empty=True)
    return first, argcheck.name(prefixes[1], "prefixes[1]", what="prefix", empty=True)


# ------------------------------------------------------------------------------ finishing an edit


def _finish(before: Model, proto: onnx.ModelProto, *, check: bool, what: str, base_dir: Path | None = None) -> Model:
    """Wrap the edited proto; refuse a no-op; validate.

    Raises:
        NoChangeError: The edit changed nothing.
        InvalidModelError: The result fails validation.
    """
    if proto.SerializeToString(deterministic=True) == before.lazy_proto.SerializeToString(deterministic=True):
        raise NoChangeError(f"{what} changes nothing in {before.name}",
                            hint="drop this edit, or pass --allow-noop to accept edits that change nothing")
    result = Model(proto, base_dir if base_dir is not None else before.base_dir, None)
    if check:
        check_or_raise(result, what=f"the model after {what}")
    return result


# ------------------------------------------------------------------------------ scope-aware renames


def _rename_scope(graph: onnx.GraphProto, mapping: Mapping[str, str], *, defs: bool = True,
                  outputs: bool = True, skip: onnx.NodeProto | None = None) -> None:
    """Rename tensors in ``graph`` and, unless shadowed, in its nested subgraphs.

    Args:
        graph: The scope whose names change.
        mapping: Old name → new name.
        defs: Also rename definitions (inputs, initializers, node outputs, value_info); False rewires reads only.
        outputs: Also rename the graph's outputs (reads of this scope).
        skip: A node whose inputs stay as they are (a node just inserted to read the old name).
    """
    if not mapping:
        return
    for node in graph.node:
        if node is not skip:
            _rename_list(node.input, mapping)
        if defs:
            _rename_list(node.output, mapping)
        if node is skip:
            continue
        for sub in subgraphs(node):
            shadowed = GraphIndex(sub).defined
            inner = {k: v for k, v in mapping.items() if k not in shadowed}
            _rename_scope(sub, inner, defs=False, outputs=True)
            for value in sub.value_info:  # types recorded for outer tensors
                if value.name in inner:
                    value.name = inner[value.name]
    if outputs:
        for value in graph.output:
            if value.name in mapping:
                value.name = mapping[value.name]
    if defs:
        for value in [*graph.input, *graph.value_info]:
            if value.name in mapping:
                value.name = mapping[value.name]
        for tensor in graph.initializer:
            if tensor.name in mapping:
                tensor.name = mapping[tensor.name]
        for sparse in graph.sparse_initializer:
            if sparse.values.name in mapping:
                sparse.values.name = mapping[sparse.values.name]


def _rename_list(names: Any, mapping: Mapping[str, str]) -> None:
    for i, name in enumerate(names):
        if name in mapping:
            names[i] = mapping[name]


def _readers(graph: onnx.GraphProto, name: str) -> list[str]:
    """Labels of the nodes (and graph outputs) of ``graph`` that read ``name``."""
    index = GraphIndex(graph)
    found = [node_label(graph.node[i], i) for i in index.consumers.get(name, [])]
    if name in index.outputs:
        found.append("a graph output")
    return found


# ------------------------------------------------------------------------------------- attributes


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
    return _finish(model, proto, check=check, what=f"set_attribute {node}.{name}")


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
                        hint="set another value with set_attribute instead")
    kept = [a for a in target.attribute if a.name != name]
    del target.attribute[:]
    target.attribute.extend(kept)
    return _finish(model, proto, check=check, what=f"remove_attribute {node}.{name}")


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


_A = onnx.AttributeProto


def _make_attribute(name: str, value: Any, expected: int | None, label: str) -> onnx.AttributeProto:
    """Build an attribute of the expected type, converting safely, or raise EditError."""
    if isinstance(value, onnx.TensorProto):
        value = numpy_helper.to_array(value)
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


@_noop_returns_input
def set_op_type(model: Model, /, node: str, op_type: str, domain: str | None = None, *,
                check: bool = True) -> Model:
    """Change a node's operator (and, optionally, its domain), keeping its inputs, outputs and attributes.

    Args:
        model: The model to edit (not modified).
        node: The node's name.
        op_type: The new operator, e.g. "Sub".
        domain: The new domain (None keeps the node's; "" is ai.onnx). A new custom domain gets an
            opset import of version 1.
        check: Validate the result.

    Raises:
        NodeNotFoundError: No such node.
        NameNotFoundError: The standard domain has no such operator (with did-you-mean).
        EditError: The node's attributes or input count do not fit the new operator.
    """
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    argcheck.name(node, "node", what="node name")
    argcheck.name(op_type, "op_type", what="operator")
    argcheck.optional(argcheck.name, domain, "domain", what="domain", empty=True)
    argcheck.boolean(check, "check")
    proto = model.copy().lazy_proto
    target = _find_node(model, proto, node).node
    new_domain = _norm_domain(target.domain if domain is None else domain)
    _check_op_fits(proto, target, op_type, new_domain, keep_attributes=True)
    target.op_type = op_type
    target.domain = new_domain
    _ensure_opset(proto, new_domain)
    return _finish(model, proto, check=check, what=f"set_op_type {node}")


def _ensure_opset(proto: onnx.ModelProto, domain: str) -> None:
    if _opset_version(proto, domain) is None:
        proto.opset_import.append(helper.make_opsetid(domain, 1))


def _check_op_fits(proto: onnx.ModelProto, node: onnx.NodeProto, op_type: str, domain: str, *,
                   keep_attributes: bool) -> None:
    """Refuse an operator the domain does not have, or that the node's inputs/attributes do not fit."""
    if domain not in STANDARD_DOMAINS:
        return
    version = _opset_version(proto, domain) or onnx.defs.onnx_opset_version()
    try:
        schema = onnx.defs.get_schema(op_type, version, domain)
    except onnx.defs.SchemaError as err:
        known = sorted({s.name for s in onnx.defs.get_all_schemas() if s.domain == domain})
        error = not_found(NameNotFoundError, f"operator in domain {domain or 'ai.onnx'!r} (opset {version})",
                          op_type, known)
        raise error from err
    label = node_label(node)
    inputs = len(node.input)
    if not schema.min_input <= inputs <= schema.max_input:
        raise EditError(f"{label} has {inputs} inputs; {op_type} takes {schema.min_input} to {schema.max_input}",
                        hint="pick an operator with the same inputs, or rewire the node first")
    outputs = len(node.output)
    if not schema.min_output <= outputs <= schema.max_output:
        raise EditError(f"{label} has {outputs} outputs; {op_type} gives {schema.min_output} to {schema.max_output}",
                        hint="pick an operator with the same outputs")
    if keep_attributes:
        extra = [a.name for a in node.attribute if a.name not in schema.attributes]
        if extra:
            raise EditError(f"{label} has attributes {extra} that {op_type} does not take",
                            hint="remove them first (remove_attribute / --remove-attr)")


# ----------------------------------------------------------------------------------------- renames


@_noop_returns_input
def rename_tensor(model: Model, /, old: str, new: str, *, check: bool = True) -> Model:
    """Rename a tensor everywhere it appears: node inputs/outputs, graph inputs/outputs, initializers,
    value_info, and reads from If/Loop/Scan bodies (except bodies that define the same name themselves).

    Raises:
        TensorNotFoundError: No graph defines ``old``.
        EditError: ``new`` is already used somewhere in the model.
    """
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    argcheck.name(old, "old", what="tensor name")
    argcheck.name(new, "new", what="tensor name", empty=True)
    argcheck.boolean(check, "check")
    proto = model.copy().lazy_proto
    scope, _ = _find_scope(model, proto, old)
    if new == old:
        raise NoChangeError(f"tensor {old!r} already has that name", hint="give a different new name")
    _check_new_tensor_name(proto, new)
    _rename_scope(scope, {old: new})
    return _finish(model, proto, check=check, what=f"rename_tensor {old} -> {new}")


def _check_new_tensor_name(proto: onnx.ModelProto, new: str) -> None:
    if not new:
        raise EditError("a tensor name cannot be empty", hint="give a non-empty name")
    if new in graph_tensor_names(proto.graph):
        raise EditError(f"tensor name {new!r} is already used in the model",
                        hint="choose a name no tensor has (names must stay unique, subgraphs included)")


@_noop_returns_input
def rename_node(model: Model, /, old: str, new: str, *, check: bool = True) -> Model:
    """Rename a node (in any graph).

    Raises:
        NodeNotFoundError: No node is named ``old``.
        EditError: Another node is already named ``new``.
    """
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    argcheck.name(old, "old", what="node name")
    argcheck.name(new, "new", what="node name", empty=True)
    argcheck.boolean(check, "check")
    proto = model.copy().lazy_proto
    target = _find_node(model, proto, old).node
    if new == target.name:
        raise NoChangeError(f"node {old!r} already has that name", hint="give a different new name")
    if not new or new in _all_node_names(proto):
        raise EditError(f"node name {new!r} is {'empty' if not new else 'already used'}",
                        hint="choose a name no other node has")
    target.name = new
    return _finish(model, proto, check=check, what=f"rename_node {old} -> {new}")


# ------------------------------------------------------------------------------- graph structure


@_noop_returns_input
def bypass_node(model: Model, /, node: str, input_index: int = 0, *, check: bool = True) -> Model:
    """Remove a node and rewire the readers of its output to one of its inputs.

    When the node's output is a graph output, the chosen input tensor takes the output's name instead
    (so the model's outputs keep their names).

    Args:
        model: The model to edit (not modified).
        node: The node to remove.
        input_index: Which of its inputs its readers read instead.
        check: Validate the result.

    Raises:
        NodeNotFoundError: No such node.
        EditError: No such input; several outputs are used; the input's dtype differs from the output's;
            or the output is a graph output and the input is a graph input or initializer.
    """
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    argcheck.name(node, "node", what="node name")
    argcheck.integer(input_index, "input_index", minimum=0, maximum=argcheck.INT64_MAX)
    argcheck.boolean(check, "check")
    proto = model.copy().lazy_proto
    found = _find_node(model, proto, node)
    graph, target = found.graph, found.node
    label = node_label(target)
    inputs = list(target.input)
    if not 0 <= input_index < len(inputs) or not inputs[input_index]:
        raise EditError(f"{label} has no input #{input_index} (its inputs: {inputs})",
                        hint=f"choose input_index between 0 and {len(inputs) - 1}")
    source = inputs[input_index]
    used = [o for o in target.output if o and _readers(graph, o)]
    if len(used) > 1:
        raise EditError(f"{label} has {len(used)} outputs in use ({used}); bypassing would leave one dangling",
                        hint="remove the node with its readers (remove_node downstream=True) or rewire them first")
    out = used[0] if used else (target.output[0] if target.output else "")
    src_type, out_type = _elem_type(graph, source), _elem_type(graph, out)
    if graph is proto.graph and not (src_type and out_type):
        inferred = _inferred_types(model, proto, [source, out])
        src_type, out_type = src_type or inferred.get(source, 0), out_type or inferred.get(out, 0)
    if src_type and out_type and src_type != out_type:
        raise EditError(f"cannot bypass {label}: its input {source!r} is {_dtype_name(src_type)} but its output "
                        f"{out!r} is {_dtype_name(out_type)}", hint="choose another input_index, or keep the node")
    is_output = out in {o.name for o in graph.output}
    if is_output and (source not in GraphIndex(graph).producer or source in {o.name for o in graph.output}):
        raise EditError(f"cannot bypass {label}: its output {out!r} is a graph output and its input {source!r} "
                        "is not produced by a node of the same graph",
                        hint="replace the node by Identity instead (set_op_type NODE Identity)")
    fed = node_reads(target)
    del graph.node[found.index]
    _drop_value_info(graph, {o for o in target.output if o} - {source})
    if is_output:
        _drop_value_info(graph, {source})
        _rename_scope(graph, {source: out})
    elif out:
        _rename_scope(graph, {out: source}, defs=False)
    _prune(graph, fed=fed)  # what only the bypassed node read (its other inputs' producers, weights)
    return _finish(model, proto, check=check, what=f"bypass_node {node}")


def _inferred_types(model: Model, proto: onnx.ModelProto, names: Sequence[str]) -> dict[str, int]:
    """Element types of main-graph tensors by the typing engine's inference (no weights read, no run)."""
    found = tensor_types(model.derive(proto), [n for n in names if n], observe=False)
    return {n: tp.tensor_type.elem_type for n, tp in found.types.items() if tp.WhichOneof("value") == "tensor_type"}


def _drop_value_info(graph: onnx.GraphProto, names: set[str]) -> None:
    kept = [v for v in graph.value_info if v.name not in names]
    del graph.value_info[:]
    graph.value_info.extend(kept)


@_noop_returns_input
def remove_node(model: Model, /, node: str, *, downstream: bool = False, check: bool = True) -> Model:
    """Remove a node, and every node and initializer that only fed it.

    Args:
        model: The model to edit (not modified).
        node: The node to remove.
        downstream: Also remove every node computed from its outputs, and the graph outputs they give.
            Without it the node's outputs must be unused.
        check: Validate the result.

    Raises:
        NodeNotFoundError: No such node.
        EditError: Its outputs are still read (the message names the readers), or removing its readers
            would leave the graph without outputs.
    """
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    argcheck.name(node, "node", what="node name")
    argcheck.boolean(downstream, "downstream")
    argcheck.boolean(check, "check")
    proto = model.copy().lazy_proto
    found = _find_node(model, proto, node)
    graph, label = found.graph, node_label(found.node)
    index = GraphIndex(graph)
    doomed = {found.index}
    if downstream:
        doomed |= _descendants(index, found.index)
    else:
        for name in (o for o in found.node.output if o):
            if name in index.consumers or name in index.outputs:
                raise EditError(f"removing {label} would leave {name!r} dangling: read by "
                                + ", ".join(_readers(graph, name)),
                                hint="bypass the node instead (bypass_node), or remove its readers too "
                                     "(downstream=True / --remove-node-downstream)")
    lost = {o for i in doomed for o in graph.node[i].output if o}
    outputs = [o for o in graph.output if o.name not in lost]
    if len(outputs) != len(graph.output) and (graph is not proto.graph or not outputs):
        raise EditError(f"removing {label} and its readers would remove "
                        + ("every graph output" if not outputs else "an output of a subgraph body"),
                        hint="remove a node further downstream, or bypass this one")
    _prune(graph, doomed, index=index)
    del graph.output[:]
    graph.output.extend(outputs)
    return _finish(model, proto, check=check, what=f"remove_node {node}")


def _descendants(index: GraphIndex, start: int) -> set[int]:
    found: set[int] = set()
    frontier = [start]
    while frontier:
        i = frontier.pop()
        for name in (o for o in index.graph.node[i].output if o):
            for reader in index.consumers.get(name, []):
                if reader not in found:
                    found.add(reader)
                    frontier.append(reader)
    return found


def _prune(graph: onnx.GraphProto, removed: Collection[int] = (), *, fed: Iterable[str] = (),
           everything: bool = False, index: GraphIndex | None = None) -> set[str]:
    """Remove nodes and what only fed them: the one dead-node removal of every edit, linear in the graph.

    The nodes at the ``removed`` positions go first. Then, starting from what they read and from
    ``fed`` (tensors whose readers the caller already removed), a node whose outputs nothing reads any
    more goes, and what it read is looked at in turn; an initializer reached this way goes when
    nothing reads it. With ``everything``, the wave starts from every tensor of the graph, so every
    dead node and unused initializer goes (cleanup). Graph inputs, nodes without outputs and anything
    the wave does not reach stay. The value_info of a tensor that no longer exists goes too.

    Readers are counted once and decremented as nodes go, so removing the unused tail of a dead chain
    is linear in its length (rescanning the graph after each removal was quadratic: 22 s of work for
    2,000 nodes; bench/bench_remove.py).

    Args:
        graph: The graph to prune, in place.
        removed: Positions of nodes to remove.
        fed: More tensors whose readers were removed.
        everything: Start from every tensor (cleanup) instead of what the removed nodes read.
        index: An index of ``graph`` as it is now, if the caller has one.

    Returns:
        The names still read, by a node (its bodies' outer-scope reads included) or as a graph output.
    """
    index = index if index is not None else GraphIndex(graph)
    nodes, reads = graph.node, index.node_reads
    dead = set(removed)
    readers: dict[str, int] = {}
    for i, names in enumerate(reads):
        if i not in dead:
            for name in names:
                readers[name] = readers.get(name, 0) + 1
    for name in index.outputs:
        readers[name] = readers.get(name, 0) + 1
    wave = {name for i in dead for name in reads[i]} | set(fed)
    gone = {o for i in dead for o in nodes[i].output if o}
    if everything:
        wave |= {o for node in nodes for o in node.output if o} | set(index.initializers)
    pending = [name for name in wave if not readers.get(name)]
    while pending:
        producer = index.producer.get(pending.pop())
        if producer is None or producer in dead or any(readers.get(o) for o in nodes[producer].output if o):
            continue
        dead.add(producer)
        gone.update(o for o in nodes[producer].output if o)
        for name in reads[producer]:
            readers[name] -= 1
            wave.add(name)
            if not readers[name]:
                pending.append(name)
    if dead:
        keep = [node for i, node in enumerate(nodes) if i not in dead]
        del graph.node[:]
        graph.node.extend(keep)
    unused = {name for name in wave if not readers.get(name)}
    if unused & set(index.initializers):
        inits = [t for t in graph.initializer if t.name not in unused]
        del graph.initializer[:]
        graph.initializer.extend(inits)
        sparse = [s for s in graph.sparse_initializer if s.values.name not in unused]
        del graph.sparse_initializer[:]
        graph.sparse_initializer.extend(sparse)
    stale = {v.name for v in graph.value_info} & (gone | unused if not everything else {v.name for v in graph.value_info})
    if stale:
        _drop_value_info(graph, {n for n in stale - GraphIndex(graph).defined if not readers.get(n)})
    return {name for name, count in readers.items() if count}


@_noop_returns_input
def insert_node(model: Model, /, after: str, op_type: str, *, inputs: Sequence[str | np.ndarray] = (),
                attributes: Mapping[str, Any] | None = None, name: str | None = None, output: str | None = None,
                domain: str = "", check: bool = True) -> Model:
    """Insert a node that reads tensor ``after``; everything that read ``after`` reads its output instead.

    When ``after`` is a graph output, the graph output keeps its name: the original tensor is renamed
    ``<after>_pre`` (or so) and the new node produces ``after``.

    Args:
        model: The model to edit (not modified).
        after: The tensor the new node reads as its first input.
        op_type: The new node's operator.
        inputs: Further inputs: names of existing tensors, or arrays (added as initializers).
        attributes: The new node's attributes.
        name: The new node's name (default ``<after>/<op_type>``).
        output: The new node's output name (default ``<after>/<op_type>_output``).
        domain: The operator's domain ("" is ai.onnx; a new custom domain gets opset version 1).
        check: Validate the result.

    Raises:
        TensorNotFoundError: ``after`` or an input name does not exist.
        EditError: ``after`` is a graph input that is also a graph output; a given name is taken.
    """
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    argcheck.name(after, "after", what="tensor name")
    argcheck.name(op_type, "op_type", what="operator")
    _check_node_inputs(inputs)
    argcheck.optional(argcheck.mapping, attributes, "attributes", key=_attribute_key)
    argcheck.optional(argcheck.name, name, "name", what="node name")
    argcheck.optional(argcheck.name, output, "output", what="tensor name")
    argcheck.name(domain, "domain", what="domain", empty=True)
    argcheck.boolean(check, "check")
    proto = model.copy().lazy_proto
    graph, _ = _find_scope(model, proto, after)
    taken = graph_tensor_names(proto.graph)
    node_name = name or _fresh(f"{after}/{op_type}", set(_all_node_names(proto)))
    if node_name in _all_node_names(proto):
        raise EditError(f"node name {node_name!r} is already used", hint="choose another name")
    new_out = output or _fresh(f"{after}/{op_type}_output", taken)
    _check_new_tensor_name(proto, new_out)
    extra = _resolve_inputs(model, proto, graph, node_name, inputs)
    new_domain = _norm_domain(domain)
    node = helper.make_node(op_type, [after, *extra], [new_out], name=node_name, domain=new_domain or None)
    for key, value in (attributes or {}).items():
        node.attribute.append(_make_attribute(key, value, _schema_attr_type(proto, op_type, new_domain, key),
                                              f"node {node_name!r} ({op_type})"))
    _check_op_fits(proto, node, op_type, new_domain, keep_attributes=True)
    is_output = after in {o.name for o in graph.output}
    if is_output and after in {i.name for i in graph.input}:
        raise EditError(f"{after!r} is both a graph input and a graph output", hint="insert after another tensor")
    position = _insert_position(graph, after)
    if is_output:
        node.input[0] = new_out
        node.output[0] = after
        _rename_definition(graph, after, new_out)
    else:
        _rename_scope(graph, {after: new_out}, defs=False)
    graph.node.insert(position, node)
    _ensure_opset(proto, new_domain)
    return _finish(model, proto, check=check, what=f"insert_node {op_type} after {after}")


def _rename_definition(graph: onnx.GraphProto, old: str, new: str) -> None:
    """Rename where ``old`` is defined (a node output or initializer), leaving its readers alone."""
    for node in graph.node:
        _rename_list(node.output, {old: new})
    for tensor in graph.initializer:
        if tensor.name == old:
            tensor.name = new
    _drop_value_info(graph, {old})


def _schema_attr_type(proto: onnx.ModelProto, op_type: str, domain: str, name: str) -> int | None:
    schema = _schema(proto, op_type, domain)
    if schema is None or name not in schema.attributes:
        return None
    return cast(int, schema.attributes[name].type)


def _fresh(stem: str, taken: set[str]) -> str:
    if stem not in taken:
        return stem
    n = 1
    while f"{stem}_{n}" in taken:
        n += 1
    return f"{stem}_{n}"


def _resolve_inputs(model: Model, proto: onnx.ModelProto, graph: onnx.GraphProto, node_name: str,
                    inputs: Sequence[str | np.ndarray]) -> list[str]:
    names: list[str] = []
    visible = graph_tensor_names(proto.graph)
    for i, item in enumerate(inputs):
        if isinstance(item, str):
            if item and item not in visible:
                raise not_found(TensorNotFoundError, "tensor", item, sorted(visible), where=model.name)
            names.append(item)
        else:
            init_name = _fresh(f"{node_name}/input_{i + 1}", visible)
            graph.initializer.append(numpy_helper.from_array(np.asarray(item), init_name))
            names.append(init_name)
    return names


def _insert_position(graph: onnx.GraphProto, after: str) -> int:
    for i, node in enumerate(graph.node):
        if after in node.output:
            return i + 1
    return 0


# ------------------------------------------------------------------------------- values and inputs


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
    graph, _ = _find_scope(model, proto, name)
    current = _constant_tensor(model, graph, name)
    array = _as_value(value, current, f"initializer {name!r}", allow_reshape=allow_reshape)
    new = numpy_helper.from_array(array, current.name)
    current.Clear()
    current.CopyFrom(new)
    _refresh_shapes(model, proto, keep=set())  # the value may set a size (Resize scales, Reshape target)
    return _finish(model, proto, check=check, what=f"set_initializer {name}")


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
                            hint="turn it into a graph input (constant_to_input) and freeze that instead")
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
                            hint=f"convert the value to {dtype.name} (e.g. np.save('v.npy', v.astype('{dtype.name}')))")
    else:
        try:
            array = np.asarray(value, dtype=dtype)
        except (TypeError, ValueError) as err:
            raise EditError(f"{what} is {dtype.name}; cannot convert {value!r} to it",
                            hint=f"give {dtype.name} values") from err
        if array.dtype.kind in "iu" and not np.array_equal(array, np.asarray(value)):
            raise EditError(f"{what} is {dtype.name}; {value!r} has fractions", hint="give whole numbers")
    if shape is not None and not allow_reshape and not _shape_fits(array.shape, shape):
        shown = "[" + ", ".join("?" if d is None or isinstance(d, str) else str(d) for d in shape) + "]"
        raise EditError(f"{what} has shape {shown}; the new value has shape {list(array.shape)}",
                        hint="give a value of the same shape, or allow reshaping (allow_reshape=True)")
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
    tensor = _initializer(model, proto.graph, name)
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
    _refresh_shapes(model, proto, keep=set())
    return _finish(model, proto, check=check, what=f"initializer_to_input {name}")


def _hint_constant(model: Model, proto: onnx.ModelProto, name: str, verb: str, other: str) -> None:
    constants = [n.output[0] for n in proto.graph.node if n.op_type == "Constant" and n.output]
    initializers = [t.name for t in proto.graph.initializer]
    if verb == "initializer_to_input" and name in constants:
        raise EditError(f"{name!r} is the output of a Constant node, not an initializer",
                        hint=f"use {other} (--input-from-constant)")
    if verb == "constant_to_input" and name in initializers:
        raise EditError(f"{name!r} is an initializer, not a Constant node's output",
                        hint=f"use {other} (--input-from-initializer)")


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
    _refresh_shapes(model, proto, keep=set())
    return _finish(model, proto, check=check, what=f"constant_to_input {name}")


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
    info = _main_input(model, proto, name)
    elem = info.type.tensor_type.elem_type
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(elem)) if elem else None
    declared = _declared_shape(info)
    what = f"graph input {name!r}"
    array = _coerce(value, dtype, declared, what) if dtype is not None else np.asarray(value)
    kept = [i for i in proto.graph.input if i.name != name]
    del proto.graph.input[:]
    proto.graph.input.extend(kept)
    proto.graph.initializer.append(numpy_helper.from_array(array, name))
    _refresh_shapes(model, proto, keep=set())
    return _finish(model, proto, check=check, what=f"input_to_initializer {name}")


def _declared_shape(info: onnx.ValueInfoProto) -> list[Dim] | None:
    tensor_type = info.type.tensor_type
    if not tensor_type.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tensor_type.shape.dim]


# ------------------------------------------------------------------------------------------ shapes


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
    _refresh_shapes(model, proto, keep={tensor} if is_output else set())
    _warn_hardcoded(model, proto, tensor, changed)
    return _finish(model, proto, check=check, what=f"set_dims {tensor}")


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


def _refresh_shapes(model: Model, proto: onnx.ModelProto, *, keep: set[str]) -> None:
    """Re-infer the main graph's value_info and output shapes (except ``keep``) without reading weights:
    the typing engine with the model's declared types set aside (the edit made them stale)."""
    outputs = [v.name for v in proto.graph.output if v.name not in keep and v.type.HasField("tensor_type")]
    names = [*outputs, *(v.name for v in proto.graph.value_info)]
    found = tensor_types(model.derive(proto), names, declared=False, observe=False).types
    if not found and names:
        log.warning("shape inference failed; value_info and output shapes were left as they were")
        return
    for value in proto.graph.output:
        if value.name in keep or not value.type.HasField("tensor_type"):
            continue
        new = found.get(value.name)
        if new is None or not new.tensor_type.HasField("shape"):
            log.warning("cannot infer the shape of output %r (a custom op?); its declared shape %s was kept: "
                        "check it (set_dims)", value.name, _declared_shape(value))
            continue
        _copy_shape(new, value)
    kept = []
    for value in proto.graph.value_info:
        new = found.get(value.name)
        if new is not None and new.HasField("tensor_type") and new.tensor_type.HasField("shape"):
            _copy_shape(new, value)
            kept.append(value)
    del proto.graph.value_info[:]
    proto.graph.value_info.extend(kept)


def _copy_shape(source: onnx.TypeProto | None, target: onnx.ValueInfoProto) -> None:
    tensor_type = target.type.tensor_type
    tensor_type.ClearField("shape")
    if source is None or not source.tensor_type.HasField("shape"):
        return
    tensor_type.shape.CopyFrom(source.tensor_type.shape)
    for dim in tensor_type.shape.dim:
        if dim.HasField("dim_param") and dim.dim_param.startswith("unk__"):
            dim.Clear()  # an anonymous dim from inference: unknown


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


# ------------------------------------------------------------------------------------ ops and opsets


@_noop_returns_input
def replace_op(model: Model, /, old_op: str, new_op_type: str = "Identity", *, new_domain: str = "",
               keep_attributes: bool = False, check: bool = True) -> Model:
    """Replace every node of one operator (in every graph and local function) by another operator.

    The replaced nodes lose their attributes (unless ``keep_attributes``); a domain no node uses any
    more loses its opset import.

    Args:
        model: The model to edit (not modified).
        old_op: The operator to replace, ``domain::OpType`` (e.g. ``my::Debug``) or ``OpType`` for ai.onnx.
        new_op_type: The operator to use instead.
        new_domain: Its domain ("" is ai.onnx).
        keep_attributes: Keep the nodes' attributes.
        check: Validate the result.

    Raises:
        NodeNotFoundError: No node has that operator (with did-you-mean over the model's operators).
        EditError: A node's inputs, outputs or attributes do not fit the new operator.
    """
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    argcheck.name(old_op, "old_op", what="operator")
    argcheck.name(new_op_type, "new_op_type", what="operator")
    argcheck.name(new_domain, "new_domain", what="domain", empty=True)
    argcheck.boolean(keep_attributes, "keep_attributes")
    argcheck.boolean(check, "check")
    proto = model.copy().lazy_proto
    domain, op_type = _split_op(old_op)
    new_dom = _norm_domain(new_domain)
    targets = [n for n in _every_node(proto) if n.op_type == op_type and _norm_domain(n.domain) == domain]
    if not targets:
        present = sorted({(f"{n.domain}::" if _norm_domain(n.domain) else "") + n.op_type for n in _every_node(proto)})
        raise not_found(NodeNotFoundError, "operator", old_op, present, where=model.name)
    for node in targets:
        probe = onnx.NodeProto()
        probe.CopyFrom(node)
        if not keep_attributes:
            del probe.attribute[:]
        _check_op_fits(proto, probe, new_op_type, new_dom, keep_attributes=True)
    for node in targets:
        node.op_type = new_op_type
        node.domain = new_dom
        if not keep_attributes:
            del node.attribute[:]
    _ensure_opset(proto, new_dom)
    if domain and domain not in {_norm_domain(n.domain) for n in _every_node(proto)}:
        _drop_opsets(proto, {domain})
    return _finish(model, proto, check=check, what=f"replace_op {old_op} -> {new_op_type}")


def _every_node(proto: onnx.ModelProto) -> Iterable[onnx.NodeProto]:
    for graph, _ in iter_graphs(proto.graph):
        yield from graph.node
    for func in proto.functions:
        yield from func.node


def _drop_opsets(proto: onnx.ModelProto, domains: set[str]) -> None:
    kept = [o for o in proto.opset_import if _norm_domain(o.domain) not in domains]
    del proto.opset_import[:]
    proto.opset_import.extend(kept)


@_noop_returns_input
def set_opset(model: Model, /, domain: str, version: int | None, *, check: bool = True) -> Model:
    """Set, add or (with ``version=None``) remove the model's opset import for a domain.

    This changes the import only; it does not convert operators between versions (the result is
    validated, so an operator that does not exist at the new version is refused).

    Raises:
        EditError: Removing a domain some node still uses; a version below 1.
    """
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    argcheck.name(domain, "domain", what="domain", empty=True)
    argcheck.optional(argcheck.integer, version, "version", minimum=1, maximum=argcheck.INT64_MAX)
    argcheck.boolean(check, "check")
    proto = model.copy().lazy_proto
    dom = _norm_domain(domain)
    if version is None:
        users = [n for n in _every_node(proto) if _norm_domain(n.domain) == dom]
        if _opset_version(proto, dom) is None:
            raise not_found(NameNotFoundError, "opset import", domain,
                            [o.domain or "ai.onnx" for o in proto.opset_import], where=model.name)
        if users:
            raise EditError(f"cannot remove the opset import of {domain or 'ai.onnx'!r}: "
                            f"{len(users)} nodes use it, e.g. {node_label(users[0])}",
                            hint="replace those nodes first (replace_op / --replace-op)")
        _drop_opsets(proto, {dom})
    else:
        if isinstance(version, bool) or int(version) < 1:
            raise EditError(f"opset version {version!r} for {domain or 'ai.onnx'!r} is not valid",
                            hint="give a version >= 1")
        entry = next((o for o in proto.opset_import if _norm_domain(o.domain) == dom), None)
        if entry is None:
            proto.opset_import.append(helper.make_opsetid(dom, int(version)))
        else:
            entry.version = int(version)
    return _finish(model, proto, check=check, what=f"set_opset {domain or 'ai.onnx'}={version}")


# ------------------------------------------------------------------------------------------ cleanup


@_noop_returns_input
def cleanup(model: Model, /, *, inputs: bool = True, check: bool = True) -> Model:
    """Remove what nothing uses: dead nodes, unused initializers, inputs (if ``inputs``) and value_info,
    in subgraphs too; then unused local functions and opset imports (ai.onnx's is always kept).

    Raises:
    """
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    argcheck.boolean(inputs, "inputs")
    argcheck.boolean(check, "check")
    proto = model.copy().lazy_proto
    _clean_graph(proto.graph, top=True, inputs=inputs)
    _clean_functions(proto)
    used = {_norm_domain(n.domain) for n in _every_node(proto)}
    _drop_opsets(proto, {_norm_domain(o.domain) for o in proto.opset_import} - used - {""})
    return _finish(model, proto, check=check, what="cleanup")


def _clean_graph(graph: onnx.GraphProto, *, top: bool, inputs: bool) -> None:
    for node in graph.node:
        for sub in subgraphs(node):
            _clean_graph(sub, top=False, inputs=False)
    read = _prune(graph, everything=True)
    if top and inputs:
        unused = {i.name for i in graph.input} - read
        if unused:
            kept_inputs = [i for i in graph.input if i.name not in unused]
            del graph.input[:]
            graph.input.extend(kept_inputs)
            _drop_value_info(graph, unused)


def _clean_functions(proto: onnx.ModelProto) -> None:
    called = {(_norm_domain(n.domain), n.op_type) for g, _ in iter_graphs(proto.graph) for n in g.node}
    functions = {(_norm_domain(f.domain), f.name): f for f in proto.functions}
    frontier = [k for k in called if k in functions]
    used = set(frontier)
    while frontier:
        func = functions[frontier.pop()]
        for node in func.node:
            key = (_norm_domain(node.domain), node.op_type)
            if key in functions and key not in used:
                used.add(key)
                frontier.append(key)
    kept = [f for f in proto.functions if (_norm_domain(f.domain), f.name) in used]
    del proto.functions[:]
    proto.functions.extend(kept)


# ------------------------------------------------------------------------------------ fold constants


@_noop_returns_input
def fold_constants(model: Model, /, *, max_bytes: int = 2**20, check: bool = True) -> Model:
    """Evaluate the main-graph nodes that depend only on constants and replace them by initializers.

    The constant part is cut out as a small model and run once through ONNX Runtime. A folded tensor
    larger than ``max_bytes`` is not stored: its producing nodes stay. Non-deterministic ops (Random*,
    Multinomial, Bernoulli) and custom-domain ops are never folded. Constant nodes feeding only
    unfolded nodes are left alone.

    Raises:
        RuntimeFailure: ONNX Runtime fails on the constant part.
    """
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    argcheck.integer(max_bytes, "max_bytes", minimum=0, maximum=argcheck.INT64_MAX)
    argcheck.boolean(check, "check")
    proto = model.copy().lazy_proto
    graph = proto.graph
    index = GraphIndex(graph)
    constants = _constant_names(graph)
    folded = _foldable(graph, index, constants)
    if not folded:
        raise NoChangeError(f"fold_constants: no node of {model.name} depends only on constants",
                            hint="nothing to fold; drop --fold-constants")
    produced = [o for i in sorted(folded) for o in graph.node[i].output if o]
    part = Model(_constant_model(proto, index, folded, produced), model.base_dir)
    found = _ort.run_session(_ort.session(part, opt_level="disable"), produced, {}, f"the constant part of {model.name}")
    values = {name: np.asarray(value) for name, value in zip(produced, found)}
    while True:
        wanted = _fold_boundary(graph, index, folded)
        too_big = {index.producer[n] for n in wanted if values[n].nbytes > max_bytes}
        if not too_big:
            break
        folded -= too_big
    if not folded:
        raise NoChangeError(f"fold_constants: every foldable tensor of {model.name} is larger than {max_bytes} bytes",
                            hint="raise max_bytes (--fold-max-bytes)")
    _apply_fold(graph, folded, {name: values[name] for name in wanted})
    return _finish(model, proto, check=check, what="fold_constants")


def _constant_names(graph: onnx.GraphProto) -> set[str]:
    listed = {i.name for i in graph.input}
    names = {t.name for t in graph.initializer if t.name not in listed}
    names |= {n.output[0] for n in graph.node if n.op_type == "Constant" and n.output}
    return names


def _foldable(graph: onnx.GraphProto, index: GraphIndex, constants: set[str]) -> set[int]:
    known = set(constants)
    folded: set[int] = set()
    for i in index.topological_order():
        node = graph.node[i]
        if node.op_type == "Constant" or node.op_type in NONDETERMINISTIC:
            continue
        if _norm_domain(node.domain) not in STANDARD_DOMAINS or not index.node_reads[i]:
            continue
        if all(name in known for name in index.node_reads[i]):
            folded.add(i)
            known.update(o for o in node.output if o)
    return folded


def _fold_boundary(graph: onnx.GraphProto, index: GraphIndex, folded: set[int]) -> list[str]:
    """Outputs of folded nodes that something outside the folded set (or a graph output) reads."""
    outside = [i for i in range(len(graph.node)) if i not in folded]
    read = {name for i in outside for name in index.node_reads[i]} | set(index.outputs)
    return [o for i in sorted(folded) for o in graph.node[i].output if o and o in read]


def _constant_model(proto: onnx.ModelProto, index: GraphIndex, folded: set[int], wanted: list[str]) -> onnx.ModelProto:
    graph = proto.graph
    needed = {name for i in folded for name in index.node_reads[i]}
    constants = [graph.node[i] for i, n in enumerate(graph.node) if n.op_type == "Constant" and n.output[0] in needed]
    nodes = constants + [graph.node[i] for i in index.topological_order() if i in folded]
    inits = [t for t in graph.initializer if t.name in needed]
    small = helper.make_graph(nodes, "constants", [], [helper.make_empty_tensor_value_info(n) for n in wanted],
                              initializer=inits)
    probe = helper.make_model(small, opset_imports=list(proto.opset_import), ir_version=proto.ir_version)
    probe.functions.extend(proto.functions)
    return probe


def _apply_fold(graph: onnx.GraphProto, folded: set[int], values: Mapping[str, np.ndarray]) -> None:
    _prune(graph, folded)
    for name, value in values.items():
        graph.initializer.append(numpy_helper.from_array(np.asarray(value), name))


# ------------------------------------------------------------------------------------------- merge


def merge(a: Model, b: Model, /, connect: Mapping[str, str], *, prefixes: tuple[str, str] | None = None,
          outputs: Sequence[str] | None = None, check: bool = True) -> Model:
    """Join two models: named outputs of ``a`` feed inputs of ``b``.

    Args:
        a: The first model (its outputs feed ``b``).
        b: The second model.
        connect: ``{a_output: b_input}`` (names before prefixing).
        prefixes: Prefixes for every name of ``a`` and of ``b`` (subgraphs and node names included), to
            avoid clashes. None merges without renaming and refuses clashing names.
        outputs: The merged model's outputs (prefixed names); default: ``a``'s unconnected outputs, then
            ``b``'s outputs.
        check: Validate the result.

    External weights of both models stay on disk: when they live in different folders, the merged
    model reads them from the folders' common parent (``Model.base_dir``), each location prefixed with
    its own folder, so data files of the same name do not collide. Saving writes one data file.

    Raises:
        TensorNotFoundError: A connected name is not an output of ``a`` / an input of ``b``.
        EditError: Connected tensors differ in dtype or fixed dims; names clash; ai.onnx opsets differ.
    """
    argcheck.instance(a, "a", Model, argcheck.MODEL)
    argcheck.instance(b, "b", Model, argcheck.MODEL)
    argcheck.mapping(connect, "connect", key=_tensor_key, item=_tensor_key)
    if prefixes is not None:
        prefixes = _check_prefixes(prefixes)
    argcheck.optional(argcheck.names, outputs, "outputs", what="tensor name")
    argcheck.boolean(check, "check")
    _check_connect(a, b, connect)
    pa, pb = (prefixes or ("", ""))
    left, right = _prefixed(a.lazy_proto, pa), _prefixed(b.lazy_proto, pb)
    links = {pb + bi: pa + ao for ao, bi in connect.items()}
    _merged_opsets(a, b)  # (refuses opsets of one domain at two versions)
    _check_clashes(left, right, set(links), prefixes is not None)
    _rename_scope(right.graph, links, defs=False)
    base_dir = _merged_base(a, b, left, right)
    proto = onnx.ModelProto()
    graph = proto.graph
    graph.name = f"{a.lazy_proto.graph.name}+{b.lazy_proto.graph.name}"
    graph.node.extend([*left.graph.node, *right.graph.node])
    graph.input.extend([*left.graph.input, *(i for i in right.graph.input if i.name not in links)])
    graph.initializer.extend([*left.graph.initializer, *right.graph.initializer])
    graph.sparse_initializer.extend([*left.graph.sparse_initializer, *right.graph.sparse_initializer])
    default_outputs = [o for o in left.graph.output if o.name not in set(links.values())] + list(right.graph.output)
    graph.output.extend(_pick_outputs(default_outputs, left, right, outputs))
    finish(proto, [left, right])  # (the sub-model builder's fields: graphkit._submodel)
    result = Model(proto, base_dir, None)
    if check:
        check_or_raise(result, what="the merged model")
    return result


def _check_connect(a: Model, b: Model, connect: Mapping[str, str]) -> None:
    if not connect:
        raise EditError("merge needs at least one connection {a_output: b_input}",
                        hint="name which output of the first model feeds which input of the second")
    outs = {o.name: o for o in a.lazy_proto.graph.output}
    inits = {t.name for t in b.lazy_proto.graph.initializer}
    ins = {i.name: i for i in b.lazy_proto.graph.input if i.name not in inits}
    for ao, bi in connect.items():
        if ao not in outs:
            raise not_found(TensorNotFoundError, "graph output", ao, outs, where=a.name)
        if bi not in ins:
            raise not_found(TensorNotFoundError, "graph input", bi, ins, where=b.name)
        ta, tb = outs[ao].type.tensor_type, ins[bi].type.tensor_type
        if ta.elem_type and tb.elem_type and ta.elem_type != tb.elem_type:
            raise EditError(f"cannot connect {ao!r} ({_dtype_name(ta.elem_type)}) of {a.name} to {bi!r} "
                            f"({_dtype_name(tb.elem_type)}) of {b.name}: dtypes differ",
                            hint="insert a Cast (insert_node … Cast) on one side first")
        sa, sb = _declared_shape(outs[ao]), _declared_shape(ins[bi])
        if sa is not None and sb is not None and (len(sa) != len(sb) or any(
                isinstance(x, int) and isinstance(y, int) and x != y for x, y in zip(sa, sb))):
            raise EditError(f"cannot connect {ao!r} {sa} of {a.name} to {bi!r} {sb} of {b.name}: shapes differ",
                            hint="make the dims dynamic (set_dims) or reshape one side first")


def _prefixed(proto: onnx.ModelProto, prefix: str) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    if not prefix:
        return copy
    names = graph_tensor_names(copy.graph)
    mapping = {n: prefix + n for n in names}
    for graph, _ in iter_graphs(copy.graph):
        _prefix_graph(graph, mapping)
        for node in graph.node:
            if node.name:
                node.name = prefix + node.name
    return copy


def _prefix_graph(graph: onnx.GraphProto, mapping: Mapping[str, str]) -> None:
    """Rename every name of one graph (not its subgraphs; the caller visits them)."""
    for node in graph.node:
        _rename_list(node.input, mapping)
        _rename_list(node.output, mapping)
    for value in [*graph.input, *graph.output, *graph.value_info]:
        value.name = mapping.get(value.name, value.name)
    for tensor in graph.initializer:
        tensor.name = mapping.get(tensor.name, tensor.name)
    for sparse in graph.sparse_initializer:
        sparse.values.name = mapping.get(sparse.values.name, sparse.values.name)


def _merged_opsets(a: Model, b: Model) -> dict[str, int]:
    found: dict[str, int] = {}
    for model in (a, b):
        for entry in model.lazy_proto.opset_import:
            dom = _norm_domain(entry.domain)
            if dom in found and found[dom] != entry.version:
                raise EditError(f"{a.name} imports {dom or 'ai.onnx'} opset {found[dom]} but {b.name} imports "
                                f"{entry.version}", hint="bring both models to the same opset first "
                                "(onnx.version_converter), then merge")
            found[dom] = int(entry.version)
    return found


def _check_clashes(left: onnx.ModelProto, right: onnx.ModelProto, linked: set[str], prefixed: bool) -> None:
    clash = sorted((graph_tensor_names(left.graph) & graph_tensor_names(right.graph)) - linked)
    nodes = sorted(set(_all_node_names(left)) & set(_all_node_names(right)))
    if clash or nodes:
        shown = ", ".join(repr(n) for n in (clash or nodes)[:5])
        raise EditError(f"both models use the {'tensor' if clash else 'node'} names {shown}"
                        + (f" (and {len(clash or nodes) - 5} more)" if len(clash or nodes) > 5 else ""),
                        hint="give different prefixes" if prefixed else "give prefixes, e.g. prefixes=('a/', 'b/') "
                        "(--prefixes a/ b/)")
    funcs = {(f.domain, f.name): f for f in left.functions}
    for func in right.functions:
        other = funcs.get((func.domain, func.name))
        if other is not None and other.SerializeToString() != func.SerializeToString():
            raise EditError(f"both models define a different local function {func.domain}::{func.name}",
                            hint="rename one of the functions before merging")


def _merged_base(a: Model, b: Model, left: onnx.ModelProto, right: onnx.ModelProto) -> Path | None:
    folders = [(m.base_dir, p) for m, p in ((a, left), (b, right)) if m.base_dir is not None and m.has_external_data]
    if not folders:
        return a.base_dir or b.base_dir
    distinct = {f.resolve() for f, _ in folders}
    if len(distinct) == 1:
        return distinct.pop()
    common = Path(os.path.commonpath([str(f) for f in distinct]))
    for folder, proto in folders:
        relative = folder.resolve().relative_to(common).as_posix()
        for tensor, _ in iter_tensors(proto):
            _relocate(tensor, relative)
    return common


def _relocate(tensor: onnx.TensorProto, folder: str) -> None:
    if not is_external(tensor) or folder in ("", "."):
        return
    for entry in tensor.external_data:
        if entry.key == "location":
            entry.value = f"{folder}/{entry.value}"


def _pick_outputs(default: list[onnx.ValueInfoProto], left: onnx.ModelProto, right: onnx.ModelProto,
                  outputs: Sequence[str] | None) -> list[onnx.ValueInfoProto]:
    if outputs is None:
        return default
    available: dict[str, onnx.ValueInfoProto] = {}
    for value in [*left.graph.value_info, *right.graph.value_info, *left.graph.output, *right.graph.output]:
        available[value.name] = value
    produced = {o for p in (left, right) for n in p.graph.node for o in n.output if o}
    picked = []
    for name in outputs:
        if name in available:
            picked.append(available[name])
        elif name in produced:
            picked.append(helper.make_empty_tensor_value_info(name))
        else:
            raise not_found(TensorNotFoundError, "tensor", name, sorted(produced | set(available)),
                            where="the merged model")
    return picked


# -------------------------------------------------------------------------- onnx-graphsurgeon interop


def to_graphsurgeon(model: Model) -> Any:
    """An ``onnx_graphsurgeon.Graph`` of the model, for users who script with graphsurgeon.

    External weights are not read: their constants load lazily from the model's folder when their
    ``values`` are used, and are written back as the same external references by ``from_graphsurgeon``.
    """
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    import onnx_graphsurgeon as gs

    graph = gs.import_onnx(model.copy().lazy_proto)
    _lazy_external(graph, model, gs)
    return graph


def _lazy_external(graph: Any, model: Model, gs: Any) -> None:
    class _FromFolder(gs.ir.tensor.LazyValues):  # type: ignore[name-defined,misc]
        def load(self) -> np.ndarray:
            return tensor_value(model, self.tensor)

    for tensor in graph.tensors().values():
        values = getattr(tensor, "_values", None)
        if isinstance(values, gs.ir.tensor.LazyValues) and is_external(values.tensor):
            lazy = _FromFolder.__new__(_FromFolder)
            lazy.__dict__.update(values.__dict__)
            tensor._values = lazy
    for node in graph.nodes:
        for attr in node.attrs.values():
            if isinstance(attr, gs.Graph):
                _lazy_external(attr, model, gs)


def from_graphsurgeon(graph: Any, *, like: Model | None = None, check: bool = True) -> Model:
    """A Model from an ``onnx_graphsurgeon.Graph``, keeping what a bare export loses.

    Args:
        graph: The graphsurgeon graph.
        like: The model the graph came from: its weights' folder, ir_version, producer, doc string,
            model version, domain, metadata and opset imports of domains still used are kept.
        check: Validate the result.

    Raises:
        InvalidModelError: The exported model fails validation.
        EditError: graphsurgeon cannot export the graph.
    """
    argcheck.optional(argcheck.instance, like, "like", cls=Model, expected=argcheck.MODEL)
    argcheck.boolean(check, "check")
    import onnx_graphsurgeon as gs

    argcheck.instance(graph, "graph", gs.Graph, "an onnx_graphsurgeon.Graph (from graphkit.to_graphsurgeon)")
    try:
        proto = gs.export_onnx(graph)
    except Exception as err:  # graphsurgeon raises plain exceptions
        raise EditError(f"onnx-graphsurgeon cannot export the graph: {err}",
                        hint="check the graph's tensors have dtypes (graph.cleanup().toposort())") from err
    for tensor, _ in iter_tensors(proto):
        if is_external(tensor) and (tensor.HasField("raw_data") or not tensor.external_data):
            del tensor.external_data[:]  # graphsurgeon loaded (and may have changed) these values
            tensor.data_location = onnx.TensorProto.DEFAULT
    base_dir = None
    if like is not None:
        _restore_fields(proto, like.lazy_proto)
        base_dir = like.base_dir
    result = Model(proto, base_dir, None)
    if check:
        check_or_raise(result, what="the model from graphsurgeon")
    return result


def _restore_fields(proto: onnx.ModelProto, like: onnx.ModelProto) -> None:
    proto.ir_version = like.ir_version
    proto.producer_name = like.producer_name
    proto.producer_version = like.producer_version
    proto.domain = like.domain
    proto.model_version = like.model_version
    proto.doc_string = like.doc_string
    del proto.metadata_props[:]
    proto.metadata_props.extend(like.metadata_props)
    versions = {_norm_domain(o.domain): o.version for o in like.opset_import}
    for entry in proto.opset_import:
        entry.version = versions.get(_norm_domain(entry.domain), entry.version)
