"""Bottom-up model construction over ``onnx.helper.make_*``: short, and correct by construction.

    >>> b = GraphBuilder("linear_func")
    >>> a, x, c = b.input("a", "float32", [10, 10]), b.input("x", "float32", [10, 10]), b.input("b", "float32", [10, 10])
    >>> b.output(b.node("Add", [b.node("Mul", [a, x]), c], outputs=["output"]), "float32", [10, 10])
    'output'
    >>> model = b.build()

Inputs and outputs take a numpy-style dtype and a shape whose dims may be ints, names (dynamic, named)
or None (dynamic, unnamed). Nodes are auto-named ``<OpType>_<n>`` and their outputs
``<node>_output_<i>`` unless named. Custom domains get an opset import automatically. ``build()``
sorts the nodes and runs onnx.checker.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from graphkit import _check_args as argcheck
from graphkit._graph import toposort_proto
from graphkit._model import Model
from graphkit.errors import ArgumentTypeError, InvalidModelError, UsageError

__all__ = ["DEFAULT_OPSET", "GraphBuilder", "add_initializers", "ai_onnx_version_for", "dtype_to_onnx", "make_value_info",
           "parse_model"]

#: The default ai.onnx opset of built models (supported by every ONNX Runtime graphkit accepts).
DEFAULT_OPSET = 17
DEFAULT_IR_VERSION = 8

Dim = int | str | None


#: The newest ai.onnx version graphkit imports on its own (what every ONNX Runtime of the last years runs).
_AI_ONNX_CAP = 21


def ai_onnx_version_for(ir_version: int) -> int:
    """The ai.onnx version to import into a model of ``ir_version`` that imports none: the newest its
    IR version allows, at most 21 (version 1's Cast takes ``to`` as a string)."""
    allowed = [int(row[2]) for row in onnx.helper.VERSION_TABLE if int(row[1]) <= max(ir_version, 3)]
    return min(max(allowed, default=7), _AI_ONNX_CAP)


def dtype_to_onnx(dtype: Any) -> int:
    """An ONNX TensorProto data type from a numpy dtype, a name ("float32", "int64") or an ONNX enum.

    Raises:
        UsageError: The dtype is unknown.
    """
    if isinstance(dtype, int) and not isinstance(dtype, bool):
        if dtype in onnx.TensorProto.DataType.values():
            return dtype
        raise UsageError(f"unknown ONNX data type {dtype}", hint="use a name such as 'float32' or 'int64'")
    if isinstance(dtype, str) and dtype.upper() in set(onnx.TensorProto.DataType.keys()):
        return int(onnx.TensorProto.DataType.Value(dtype.upper()))
    try:
        return int(helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))
    except (TypeError, KeyError, ValueError) as err:
        raise UsageError(f"unknown dtype {dtype!r}", hint="use a numpy dtype name such as 'float32' or 'int64'") from err


def add_initializers(graph: onnx.GraphProto, tensors: Sequence[onnx.TensorProto], *, ir_version: int,
                     top: bool) -> None:
    """Add constant tensors to ``graph`` the way its IR version allows.

    From IR version 4 they are initializers. Before it, every initializer must also be a graph input:
    in the main graph they are listed as inputs too; an If/Loop/Scan body cannot gain inputs, so there
    they become Constant nodes (first in the body, before any reader).

    Args:
        graph: The graph to add to (changed in place).
        tensors: The named values.
        ir_version: The model's IR version.
        top: Whether ``graph`` is the model's main graph.
    """
    if ir_version >= 4:
        graph.initializer.extend(tensors)
    elif top:
        graph.initializer.extend(tensors)
        graph.input.extend(helper.make_tensor_value_info(t.name, t.data_type, [int(d) for d in t.dims])
                           for t in tensors)
    else:
        for at, tensor in enumerate(tensors):
            graph.node.insert(at, helper.make_node("Constant", [], [tensor.name], name=tensor.name, value=tensor))


def make_value_info(name: str, dtype: Any, shape: Sequence[Dim] | None) -> onnx.ValueInfoProto:
    """A typed ValueInfoProto; dims may be ints, names (dynamic) or None (unknown)."""
    argcheck.name(name, "name", what="tensor name")
    return helper.make_tensor_value_info(name, dtype_to_onnx(dtype), _dims(shape))


def _dims(shape: Any) -> list[Dim] | None:
    """``shape`` as a list of dims (int >= 0, a dim name, or None), or None for an unknown rank."""
    if shape is None:
        return None
    dims: list[Dim] = []
    for dim in _shape_items(shape):
        if dim is not None and not isinstance(dim, str):
            dim = argcheck.integer(dim, "shape", minimum=0, maximum=argcheck.INT64_MAX)
        dims.append(dim)
    return dims


def _shape_items(shape: Any) -> list[Any]:
    if isinstance(shape, (str, bytes, Mapping)) or not isinstance(shape, Sequence):
        raise ArgumentTypeError(f"shape= must be a list of dims (int, name or None), not {argcheck.describe(shape)}",
                                         hint="e.g. shape=['batch', 3, 224, 224]")
    return list(shape)


def parse_model(text: str) -> Model:
    """A Model from ONNX textual syntax (``onnx.parser``), checked.

    Raises:
        InvalidModelError: The text does not parse or the model fails the checker.
    """
    argcheck.instance(text, "text", str, "ONNX textual syntax (str)")
    try:
        proto = onnx.parser.parse_model(text)
    except Exception as err:  # the parser raises its own exception types
        raise InvalidModelError(f"cannot parse the model text: {err}", hint="see onnx's textual syntax") from err
    _check(proto)
    return Model(proto)


class GraphBuilder:
    """Builds a graph node by node, then a checked Model.

    Args:
        name: The graph's name.
        opset: The ai.onnx opset version.
        ir_version: The model's IR version.
        producer_name: Recorded in the model.
        doc_string: The graph's doc string.
    """

    def __init__(
        self,
        name: str = "graph",
        *,
        opset: int = DEFAULT_OPSET,
        ir_version: int = DEFAULT_IR_VERSION,
        producer_name: str = "graphkit",
        doc_string: str = "",
    ) -> None:
        argcheck.name(name, "name", what="graph name", empty=True)
        argcheck.integer(opset, "opset", minimum=1, maximum=argcheck.INT64_MAX)
        argcheck.integer(ir_version, "ir_version", minimum=1, maximum=argcheck.INT64_MAX)
        argcheck.name(producer_name, "producer_name", what="producer name", empty=True)
        argcheck.name(doc_string, "doc_string", what="doc string", empty=True)
        self.name = name
        self.opsets: dict[str, int] = {"": opset}
        self.ir_version = ir_version
        self.producer_name = producer_name
        self.doc_string = doc_string
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.value_infos: list[onnx.ValueInfoProto] = []
        self.metadata: dict[str, str] = {}
        self._names: set[str] = set()
        self._counter = itertools.count()

    # -- naming -------------------------------------------------------------------------------
    def _fresh(self, stem: str) -> str:
        while True:
            candidate = f"{stem}_{next(self._counter)}"
            if candidate not in self._names:
                return candidate

    def _claim(self, name: str, what: str) -> str:
        if name in self._names:
            raise UsageError(f"{what} name {name!r} is already used in graph {self.name!r}", hint="choose another name")
        self._names.add(name)
        return name

    # -- declarations ---------------------------------------------------------------------------
    def input(self, name: str, dtype: Any = "float32", shape: Sequence[Dim] | None = None) -> str:
        """Declare a graph input; returns its name."""
        argcheck.name(name, "name", what="input name")
        self.inputs.append(make_value_info(self._claim(name, "input"), dtype, shape))
        return name

    def output(self, name: str, dtype: Any = "float32", shape: Sequence[Dim] | None = None) -> str:
        """Declare a graph output (a tensor some node produces); returns its name."""
        argcheck.name(name, "name", what="output name")
        self.outputs.append(make_value_info(name, dtype, shape))
        return name

    def value_info(self, name: str, dtype: Any, shape: Sequence[Dim] | None) -> str:
        """Record the type of an intermediate tensor."""
        self.value_infos.append(make_value_info(name, dtype, shape))
        return name

    def initializer(self, value: Any, name: str | None = None, *, dtype: Any = None) -> str:
        """Add an initializer from a numpy array (or anything np.asarray takes); returns its name."""
        argcheck.optional(argcheck.name, name, "name", what="initializer name")
        array = _array(value, dtype)
        tensor_name = self._claim(name, "initializer") if name else self._claim(self._fresh("init"), "initializer")
        self.initializers.append(_tensor(array, tensor_name))
        return tensor_name

    def constant(self, value: Any, name: str | None = None, *, dtype: Any = None) -> str:
        """Add a Constant node holding ``value``; returns its output's name."""
        argcheck.optional(argcheck.name, name, "name", what="tensor name")
        array = _array(value, dtype)
        return self.node("Constant", [], outputs=[name] if name else None, value=_tensor(array, ""))

    def node(
        self,
        op_type: str,
        inputs: Sequence[str],
        *,
        outputs: Sequence[str] | int | None = None,
        name: str | None = None,
        domain: str = "",
        domain_version: int = 1,
        doc_string: str | None = None,
        attrs: Mapping[str, Any] | None = None,
        **attributes: Any,
    ) -> str:
        """Add a node; returns the name of its first output (see ``node_outputs`` for all of them).

        Args:
            op_type: The operator, e.g. "Conv".
            inputs: Input tensor names ("" for an omitted optional input).
            outputs: Output names, or how many outputs to auto-name (default 1).
            name: The node's name (auto-named if omitted).
            domain: The operator's domain; a new custom domain gets an opset import.
            domain_version: The opset version to import for a new custom domain.
            doc_string: The node's doc string.
            attrs: Attributes whose names clash with these keywords (e.g. a string attribute "name").
            **attributes: Attributes; numpy arrays become tensor attributes.
        """
        return self.node_outputs(
            op_type,
            inputs,
            outputs=outputs,
            name=name,
            domain=domain,
            domain_version=domain_version,
            doc_string=doc_string,
            attrs=attrs,
            **attributes,
        )[0]

    def node_outputs(
        self,
        op_type: str,
        inputs: Sequence[str],
        *,
        outputs: Sequence[str] | int | None = None,
        name: str | None = None,
        domain: str = "",
        domain_version: int = 1,
        doc_string: str | None = None,
        attrs: Mapping[str, Any] | None = None,
        **attributes: Any,
    ) -> list[str]:
        """Like ``node`` but returns every output's name."""
        argcheck.name(op_type, "op_type", what="operator")
        for i, item in enumerate(_input_names(inputs)):
            argcheck.name(item, f"inputs[{i}]", what="tensor name", empty=True)
        if isinstance(outputs, int) and not isinstance(outputs, bool):
            argcheck.integer(outputs, "outputs", minimum=1, maximum=2**16)
        elif outputs is not None:
            for i, item in enumerate(_input_names(outputs, "outputs")):
                argcheck.name(item, f"outputs[{i}]", what="tensor name", empty=True)
            if not outputs:
                raise UsageError("outputs= is empty: a node has at least one output", hint="e.g. outputs=['y']")
        argcheck.optional(argcheck.name, name, "name", what="node name")
        argcheck.name(domain, "domain", what="domain", empty=True)
        argcheck.integer(domain_version, "domain_version", minimum=1, maximum=argcheck.INT64_MAX)
        argcheck.optional(argcheck.name, doc_string, "doc_string", what="doc string", empty=True)
        argcheck.optional(argcheck.mapping, attrs, "attrs", key=lambda k, kw: argcheck.name(k, kw, what="attribute name"))
        node_name = self._claim(name, "node") if name else self._claim(self._fresh(op_type), "node")
        if outputs is None or isinstance(outputs, int):
            count = 1 if outputs is None else outputs
            out_names = [self._claim(f"{node_name}_output_{i}", "tensor") for i in range(count)]
        else:
            out_names = [self._claim(o, "tensor") if o else "" for o in outputs]
        merged = {**attributes, **(attrs or {})}
        node = helper.make_node(op_type, list(inputs), out_names, name=node_name, domain=domain or None)
        for key, value in merged.items():
            if value is not None:
                node.attribute.append(_attribute(key, value))
        if doc_string:
            node.doc_string = doc_string
        if domain and domain not in self.opsets:
            self.opsets[domain] = domain_version
        self.nodes.append(node)
        return out_names

    def opset(self, domain: str, version: int) -> None:
        """Import (or change) an opset version for a domain ("" is ai.onnx)."""
        argcheck.name(domain, "domain", what="domain", empty=True)
        argcheck.integer(version, "version", minimum=1, maximum=argcheck.INT64_MAX)
        self.opsets[domain] = version

    # -- result -----------------------------------------------------------------------------
    def build(self, *, check: bool = True, metadata: Mapping[str, str] | None = None) -> Model:
        """The finished Model, topologically sorted and (by default) passing onnx.checker.

        Raises:
            InvalidModelError: The checker rejects the model.
            CycleError: The nodes form a cycle.
        """
        argcheck.boolean(check, "check")
        argcheck.optional(argcheck.mapping, metadata, "metadata",
                          key=lambda k, kw: argcheck.name(k, kw, what="metadata key"),
                          item=lambda v, kw: argcheck.name(v, kw, what="metadata value", empty=True))

        graph = helper.make_graph(
            self.nodes,
            self.name,
            self.inputs,
            self.outputs,
            initializer=self.initializers,
            value_info=self.value_infos,
            doc_string=self.doc_string or None,
        )
        proto = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid(d, v) for d, v in self.opsets.items()],
            producer_name=self.producer_name,
            ir_version=self.ir_version,
        )
        for key, value in {**self.metadata, **(metadata or {})}.items():
            entry = proto.metadata_props.add()
            entry.key, entry.value = key, value
        toposort_proto(proto)
        if check:
            _check(proto)
        return Model(proto)


def _check(proto: onnx.ModelProto) -> None:
    try:
        onnx.checker.check_model(proto)
    except onnx.checker.ValidationError as err:
        raise InvalidModelError(f"the built model is invalid: {err}", hint="fix the node named in the message") from err


def _input_names(value: Any, keyword: str = "inputs") -> list[Any]:
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
        raise ArgumentTypeError(f"{keyword}= must be a list of tensor names, not {argcheck.describe(value)}",
                                         hint=f"e.g. {keyword}=['x']")
    return list(value)


def _array(value: Any, dtype: Any) -> np.ndarray:
    try:
        array = np.asarray(value, dtype=None if dtype is None else np.dtype(dtype))
    except (TypeError, ValueError) as err:
        raise UsageError(f"cannot make a tensor of {argcheck.describe(value)}: {err}",
                         hint="give a numpy array, or numbers and a dtype such as 'float32'") from err
    if array.dtype.kind in "OV":
        raise UsageError(f"cannot make a tensor of {argcheck.describe(value)}: it holds Python objects",
                         hint="give a numeric numpy array")
    return array


def _tensor(array: np.ndarray, name: str) -> onnx.TensorProto:
    try:
        return numpy_helper.from_array(array, name)
    except (TypeError, ValueError) as err:
        raise UsageError(f"an ONNX tensor cannot hold {array.dtype} values: {err}",
                         hint="give numbers (or str for a string tensor) with a numpy dtype such as 'float32'") from err


def _attribute(key: str, value: Any) -> onnx.AttributeProto:
    try:
        return helper.make_attribute(key, numpy_helper.from_array(value) if isinstance(value, np.ndarray) else value)
    except (TypeError, ValueError) as err:
        raise UsageError(f"attribute {key!r} cannot hold {argcheck.describe(value)}: {err}",
                         hint="attributes take ints, floats, strings, numpy arrays, graphs or lists of one kind") from err
