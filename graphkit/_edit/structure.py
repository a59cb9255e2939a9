"""Edits of the graph's structure: insert, remove and bypass nodes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from graphkit import _check_args as argcheck
from graphkit._build import add_initializers
from graphkit._edit._addressing import _function_tensor
from graphkit._edit._common import (
    _all_node_names,
    _attribute_key,
    _check_new_tensor_name,
    _drop_value_info,
    _dtype_name,
    _elem_type,
    _ensure_opset,
    _find_node,
    _find_scope,
    _finish,
    _fresh,
    _noop_returns_input,
    _norm_domain,
    _readers,
    _rename_list,
    _rename_scope,
)
from graphkit._edit.attributes import _make_attribute, _schema_attr_type
from graphkit._edit.cleaning import _prune
from graphkit._edit.opsets import _check_op_fits
from graphkit._edit.values import _coerce
from graphkit._graph import GraphIndex, graph_tensor_names, node_label, node_reads
from graphkit._model import Model
from graphkit._typing import tensor_types
from graphkit.errors import (
    ArgumentTypeError,
    EditError,
    TensorNotFoundError,
    not_found,
)


def _check_node_inputs(inputs: Any) -> None:
    """insert_node's ``inputs``: tensor names, arrays, or numbers and lists of numbers (new initializers)."""
    if isinstance(inputs, (str, bytes, Mapping)) or not isinstance(inputs, Sequence):
        raise ArgumentTypeError(f"inputs= must be a list of tensor names, arrays or numbers, not "
                                f"{argcheck.describe(inputs)}",
                                hint="e.g. inputs=['scale'], inputs=[numpy.array([2.0], 'float32')] or inputs=[0.5]")
    for i, item in enumerate(inputs):
        if not isinstance(item, (str, np.ndarray)) and not _plain_numbers(item):
            raise ArgumentTypeError(f"inputs[{i}]= must be a tensor name, a numpy array, a number or a list of "
                                    f"numbers, not {argcheck.describe(item)}",
                                    hint="e.g. 0.5, [0.485, 0.456, 0.406] or numpy.array(..., dtype)")


def _plain_numbers(value: Any) -> bool:
    """A finite-depth number or (nested) list of numbers, booleans left out."""
    stack, seen = [value], 0
    while stack:
        item = stack.pop()
        seen += 1
        if isinstance(item, (list, tuple)) and seen < 10**7:
            stack.extend(item)
        elif isinstance(item, bool) or not isinstance(item, (int, float, np.integer, np.floating)):
            return False
    return True


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
                        hint=f"choose input_index between 0 and {len(inputs) - 1}",
                        cli_hint=f"choose an input between 0 and {len(inputs) - 1} (--bypass NODE=INDEX)")
    source = inputs[input_index]
    used = [o for o in target.output if o and _readers(graph, o)]
    if len(used) > 1:
        raise EditError(f"{label} has {len(used)} outputs in use ({used}); bypassing would leave one dangling",
                        hint="remove the node with its readers (remove_node(..., downstream=True)) or rewire them first",
                        cli_hint="remove the node with its readers (--remove-node-downstream) or rewire them first")
    out = used[0] if used else (target.output[0] if target.output else "")
    src_type, out_type = _elem_type(graph, source), _elem_type(graph, out)
    if graph is proto.graph and not (src_type and out_type):
        inferred = _inferred_types(model, proto, [source, out])
        src_type, out_type = src_type or inferred.get(source, 0), out_type or inferred.get(out, 0)
    if src_type and out_type and src_type != out_type:
        raise EditError(f"cannot bypass {label}: its input {source!r} is {_dtype_name(src_type)} but its output "
                        f"{out!r} is {_dtype_name(out_type)}", hint="choose another input_index, or keep the node",
                        cli_hint="bypass to another input (--bypass NODE=INDEX), or keep the node")
    is_output = out in {o.name for o in graph.output}
    if is_output and (source not in GraphIndex(graph).producer or source in {o.name for o in graph.output}):
        raise EditError(f"cannot bypass {label}: its output {out!r} is a graph output and its input {source!r} "
                        "is not produced by a node of the same graph",
                        hint="replace the node by Identity instead (set_op_type(model, node, 'Identity'))",
                        cli_hint="replace the node by Identity instead (--set-op-type NODE=Identity)")
    fed = node_reads(target)
    del graph.node[found.index]
    _drop_value_info(graph, {o for o in target.output if o} - {source})
    if is_output:
        _drop_value_info(graph, {source})
        _rename_scope(graph, {source: out})
    elif out:
        _rename_scope(graph, {out: source}, defs=False)
    _prune(graph, fed=fed)  # what only the bypassed node read (its other inputs' producers, weights)
    found.write_back()
    return _finish(model, proto, check=check, what=f"bypass_node {node}", retype=True)


def _inferred_types(model: Model, proto: onnx.ModelProto, names: Sequence[str]) -> dict[str, int]:
    """Element types of main-graph tensors by the typing engine's inference (no weights read, no run)."""
    found = tensor_types(model.derive(proto), [n for n in names if n], observe=False)
    return {n: tp.tensor_type.elem_type for n, tp in found.types.items() if tp.WhichOneof("value") == "tensor_type"}


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
        doomed |= index.downstream_nodes(o for o in found.node.output if o)
    else:
        for name in (o for o in found.node.output if o):
            if name in index.consumers or name in index.outputs:
                raise EditError(f"removing {label} would leave {name!r} dangling: read by "
                                + ", ".join(_readers(graph, name)),
                                hint="bypass the node instead (bypass_node), or remove its readers too "
                                     "(downstream=True)",
                                cli_hint="bypass the node instead (--bypass), or remove its readers too "
                                         "(--remove-node-downstream)")
    lost = {o for i in doomed for o in graph.node[i].output if o}
    outputs = [o for o in graph.output if o.name not in lost]
    if len(outputs) != len(graph.output) and (graph is not proto.graph or not outputs):
        raise EditError(f"removing {label} and its readers would remove "
                        + (f"an output of {found.where}" if found.function is not None else
                           "every graph output" if not outputs else "an output of a subgraph body"),
                        hint="remove a node further downstream, or bypass this one")
    _prune(graph, doomed, index=index)
    del graph.output[:]
    graph.output.extend(outputs)
    found.write_back()
    return _finish(model, proto, check=check, what=f"remove_node {node}", retype=True)


@_noop_returns_input
def insert_node(model: Model, /, after: str, op_type: str, *,
                inputs: Sequence[str | np.ndarray | float | Sequence[Any]] = (),
                attributes: Mapping[str, Any] | None = None, name: str | None = None, output: str | None = None,
                domain: str = "", check: bool = True) -> Model:
    """Insert a node that reads tensor ``after``; everything that read ``after`` reads its output instead.

    When ``after`` is a graph output, the graph output keeps its name: the original tensor is renamed
    ``<after>/<op_type>_output`` (or so) and the new node produces ``after``; the output's declared
    type is inferred anew (a Cast to float16 makes a float16 output).

    Args:
        model: The model to edit (not modified).
        after: The tensor the new node reads as its first input.
        op_type: The new node's operator.
        inputs: Further inputs, in order: names of existing tensors, arrays, or numbers and (nested)
            lists of numbers, which become initializers of ``after``'s dtype.
        attributes: The new node's attributes (a dtype name for a data-type attribute: ``{"to": "float16"}``).
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
    inside = _function_tensor(proto, after)  # FUNCTION/TENSOR: insert inside a local function
    if inside is not None:
        graph, after = inside.graph, after.partition("/")[2]
        taken, node_names = graph_tensor_names(graph), {n.name for n in graph.node if n.name}
    else:
        graph = _find_scope(model, proto, after, what="insert_node")[0]
        taken, node_names = graph_tensor_names(proto.graph), set(_all_node_names(proto))
    node_name = name or _fresh(f"{after}/{op_type}", node_names)
    if node_name in node_names:
        raise EditError(f"node name {node_name!r} is already used", hint="choose another name")
    new_out = output or _fresh(f"{after}/{op_type}_output", taken)
    if inside is None:
        _check_new_tensor_name(proto, new_out)
    elif new_out in taken:
        raise EditError(f"tensor name {new_out!r} is already used in {inside.where}",
                        hint="choose a name no tensor of the function has")
    extra = _resolve_inputs(model, proto, graph, node_name, inputs, after, taken, constants=inside is not None)
    new_domain = _norm_domain(domain)
    node = helper.make_node(op_type, [after, *extra], [new_out], name=node_name, domain=new_domain or None)
    for key, value in (attributes or {}).items():
        node.attribute.append(_make_attribute(key, value, _schema_attr_type(proto, op_type, new_domain, key),
                                              f"node {node_name!r} ({op_type})"))
    _check_op_fits(proto, node, op_type, new_domain, keep_attributes=True)
    is_output = after in {o.name for o in graph.output}
    if is_output and after in {i.name for i in graph.input}:
        raise EditError(f"{after!r} is both a graph input and a graph output", hint="insert after another tensor")
    producer = GraphIndex(graph).producer.get(after)
    position = 0 if producer is None else producer + 1  # (right after the node that makes it)
    if is_output:
        node.input[0] = new_out
        node.output[0] = after
        _rename_definition(graph, after, new_out)
    else:
        _rename_scope(graph, {after: new_out}, defs=False)
    graph.node.insert(position, node)
    if inside is not None:
        inside.write_back()
    _ensure_opset(proto, new_domain)
    if is_output and graph is proto.graph:
        _retype_output(model, proto, after)
    return _finish(model, proto, check=check, what=f"insert_node {op_type} after {after}", retype=True)


def _retype_output(model: Model, proto: onnx.ModelProto, name: str) -> None:
    """The declared type of graph output ``name``, now made by an inserted node, inferred anew (kept
    when inference cannot tell: a custom op)."""
    found = tensor_types(model.derive(proto), [name], declared=False, observe=False).types.get(name)
    if found is None or found.WhichOneof("value") != "tensor_type" or not found.tensor_type.elem_type:
        return
    for value in proto.graph.output:
        if value.name == name:
            shape = value.type.tensor_type.shape if value.type.tensor_type.HasField("shape") else None
            value.type.tensor_type.elem_type = found.tensor_type.elem_type
            if not found.tensor_type.HasField("shape") and shape is not None:
                value.type.tensor_type.ClearField("shape")


def _rename_definition(graph: onnx.GraphProto, old: str, new: str) -> None:
    """Rename where ``old`` is defined (a node output or initializer), leaving its readers alone."""
    for node in graph.node:
        _rename_list(node.output, {old: new})
    for tensor in graph.initializer:
        if tensor.name == old:
            tensor.name = new
    _drop_value_info(graph, {old})


def _resolve_inputs(model: Model, proto: onnx.ModelProto, graph: onnx.GraphProto, node_name: str,
                    inputs: Sequence[Any], after: str, visible: set[str], *, constants: bool) -> list[str]:
    """The names the inserted node reads after ``after``: existing tensors, or new initializers (Constant
    nodes with ``constants``: a local function has no initializers) holding the values given."""
    names: list[str] = []
    visible = set(visible)
    for i, item in enumerate(inputs):
        if isinstance(item, str):
            if item and item not in visible:
                raise not_found(TensorNotFoundError, "tensor", item, sorted(visible), where=model.name)
            names.append(item)
            continue
        array = item if isinstance(item, np.ndarray) else _constant_like(model, proto, graph, after, item, i)
        init_name = _fresh(f"{node_name}/input_{i + 1}", visible)
        visible.add(init_name)
        value = numpy_helper.from_array(np.asarray(array), init_name)
        if constants:
            graph.node.insert(0, helper.make_node("Constant", [], [init_name], name=init_name, value=value))
        else:
            add_initializers(graph, [value], ir_version=proto.ir_version, top=graph is proto.graph)
        names.append(init_name)
    return names


def _constant_like(model: Model, proto: onnx.ModelProto, graph: onnx.GraphProto, after: str, value: Any,
                   position: int) -> np.ndarray:
    """A number or list given as an input, as an array of ``after``'s dtype."""
    elem = _elem_type(graph, after)
    if not elem and graph is proto.graph:
        elem = _inferred_types(model, proto, [after]).get(after, 0)
    if not elem:
        raise EditError(f"cannot tell the dtype of {after!r}, so input #{position + 1} {value!r} has none",
                        hint="give the value as a typed array (numpy.array(..., dtype))",
                        cli_hint="give the value as a .npy file of the dtype wanted (--operand FILE.npy)")
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(elem))
    return _coerce(value, dtype, None, f"input #{position + 1} of the inserted node (as {after!r}: {dtype.name})")
