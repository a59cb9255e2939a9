"""Precision conversion: float32 weights and computation to float16, with float32 kept where it must be.

Which inputs of a node may become float16 is read from the operator's schema: the type variables
(``T``, ``T1``…) that admit ``tensor(float16)`` and are bound to float32 in the model. Positions whose
type is fixed (Resize's ``scales``, shape and index inputs) stay as they are, and so do the float32
nodes that compute them (a shape computed in float16 is wrong above 2048). A node whose operator has
no float16 kernel in ONNX Runtime's CPU provider (asked of ONNX Runtime itself, once per signature)
stays float32, as do custom-domain nodes and those the caller names. Casts are inserted only where a
tensor crosses between the two precisions, one per tensor and direction; Cast nodes of the model
take either precision as they are, so no Cast is put in front of a Cast. If/Loop/Scan bodies are
converted with their nodes, consistently with the types their node passes in and out.

Weights are converted one at a time; weights that lie outside the model (external data, or left in a
large model file by a lazy load) are written converted into a scratch data file, so converting a
large model holds about one weight in memory, not all of them.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import shutil
import tempfile
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from graphkit import _check_args as argcheck
from graphkit import _ort, _progress
from graphkit._build import dtype_to_onnx
from graphkit._edit._common import _ensure_opset, _noop_returns_input, _refuse_function_tensor
from graphkit._graph import subgraphs, toposort_proto
from graphkit._io import external_ref
from graphkit._model import Model, borrowed_path, is_borrowed, is_external, iter_tensors, unborrow
from graphkit._progress import Progress
from graphkit._typing import Source, function_holder, infer_proto, weightless
from graphkit.errors import (
    EditError,
    ExternalDataError,
    NameNotFoundError,
    NoChangeError,
    NodeNotFoundError,
    TensorNotFoundError,
    UsageError,
    not_found,
)

__all__ = ["Clamped", "Float16Conversion", "KeptNode", "check_keep_op", "set_dtype", "to_float16", "to_float16_with_report"]

log = logging.getLogger(__name__)

FLOAT = onnx.TensorProto.FLOAT
FLOAT16 = onnx.TensorProto.FLOAT16
#: The largest finite float16.
FP16_MAX = 65504.0
#: The smallest positive float16 (a subnormal); smaller non-zero magnitudes would become 0.
FP16_TINY = 2.0**-24

#: Operators computing shapes, sizes and indices from float values: when their result feeds an input
#: that must be exact (a shape, an index, Resize's scales), they stay float32 (float16 holds integers
#: exactly only up to 2048).
_SHAPE_ARITHMETIC = frozenset({
    "Abs", "Add", "Cast", "Ceil", "Clip", "Concat", "Div", "Expand", "Floor", "Gather", "Identity", "Max",
    "Min", "Mul", "Neg", "Pow", "Range", "ReduceMax", "ReduceMin", "ReduceProd", "Reshape", "Round", "Sign",
    "Slice", "Sqrt", "Squeeze", "Sub", "Unsqueeze", "Where",
})
#: Operators that stay float32 whatever the kernels: their float inputs are positions or counts.
_EXACT_OPS = {"Range": "Range computes positions (float16 is exact only up to 2048)"}
#: Operators whose output dtype comes from an attribute: converted only as below, else kept.
_DTYPE_ATTR_OPS = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                             "Multinomial", "EyeLike", "Bernoulli"})
_CONTROL_FLOW = frozenset({"If", "Loop", "Scan"})
#: Operators whose float16 kernel in ONNX Runtime's CPU provider refuses a ``reduction`` other than
#: "none" when it runs, though the session loads ("MLFloat16 data type is not supported with
#: ScatterND opset 18 when reduction is 'min'"): the one-node probe cannot see it.
_RUNTIME_REDUCTIONS = frozenset({"ScatterElements", "ScatterND"})
#: Elements of a weight on disk converted at a time (4 MiB of float32): what converting holds of it.
_CHUNK = 1 << 20


# ------------------------------------------------------------------------------------------ results


@dataclass(frozen=True)
class KeptNode:
    """A node that stays float32, and why.

    Attributes:
        node: The node's name (its op type and position when unnamed).
        op_type: Its operator.
        graph: Where it is ("main graph", or the body it is in).
        reason: Why it stays float32.
    """

    node: str
    op_type: str
    graph: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"node": self.node, "op_type": self.op_type, "graph": self.graph, "reason": self.reason}


@dataclass(frozen=True)
class Clamped:
    """A weight with values float16 cannot hold, clamped into its range.

    Attributes:
        tensor: The weight's name (an initializer, or the node whose value attribute it is).
        graph: Where it is.
        over: How many values exceeded ±65504 (set to ±65504).
        under: How many non-zero values were smaller than 2**-24 in magnitude (set to ±2**-24).
        max_abs: The largest magnitude in the weight before clamping.
    """

    tensor: str
    graph: str
    over: int
    under: int
    max_abs: float

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"tensor": self.tensor, "graph": self.graph, "over": self.over, "under": self.under,
                "max_abs": self.max_abs}


@dataclass(frozen=True)
class Float16Conversion:
    """The result of ``to_float16_with_report``.

    Attributes:
        model: The converted model.
        converted: How many nodes compute in float16.
        kept: The nodes with float32 data that stay float32, and why.
        casts: How many Cast nodes were inserted at the boundaries.
        weights: How many float32 weights became float16.
        clamped: The weights with values outside float16's range.
    """

    model: Model = field(repr=False)
    converted: int
    kept: tuple[KeptNode, ...]
    casts: int
    weights: int
    clamped: tuple[Clamped, ...]
    #: The main-graph nodes (by position) that compute in float16.
    main_converted: tuple[int, ...] = field(default=(), repr=False)
    #: The main graph's float16 tensors (node outputs, inserted Casts', inputs, weights).
    main_float16: frozenset[str] = field(default=frozenset(), repr=False)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (without the model)."""
        return {"converted": self.converted, "kept": [k.to_dict() for k in self.kept], "casts": self.casts,
                "weights": self.weights, "clamped": [c.to_dict() for c in self.clamped]}


# ---------------------------------------------------------------------------------------- public API


def to_float16(
    model: Model,
    /,
    *,
    keep_io_types: bool = False,
    keep_op: Sequence[str] = (),
    keep_node: Sequence[str] = (),
    progress: Progress | None = None,
) -> Model:
    """Return the model with float32 weights and computation in float16.

    Args:
        model: The model to convert (not changed).
        keep_io_types: Keep float32 graph inputs and outputs float32 (Casts inside); otherwise they
            become float16.
        keep_op: Operators that stay float32.
        keep_node: Nodes (by name, in the main graph or a body, or ``#k``: the main graph's node at
            position k) that stay float32.
        progress: Called as ``progress(done, total)`` as float32 weights are converted.

    Returns:
        The converted model. Weights that lie outside the model are written converted into a
        scratch folder that lives as long as the returned model (save it to keep it).

    Raises:
        NodeNotFoundError: A ``keep_node`` name is no node of the model.
        NameNotFoundError: A ``keep_op`` operator that no node of the model has.
        UsageError: The model has no float32 data to convert.
        ExternalDataError: An external weight is missing or truncated.
    """
    return to_float16_with_report(model, keep_io_types=keep_io_types, keep_op=keep_op, keep_node=keep_node,
                                  progress=progress).model


def to_float16_with_report(
    model: Model,
    /,
    *,
    keep_io_types: bool = False,
    keep_op: Sequence[str] = (),
    keep_node: Sequence[str] = (),
    progress: Progress | None = None,
) -> Float16Conversion:
    """``to_float16``, also saying which nodes stayed float32 and why, and which weights were clamped.

    Raises:
        NodeNotFoundError: A ``keep_node`` name is no node of the model.
        NameNotFoundError: A ``keep_op`` operator that no node of the model has.
        UsageError: The model has no float32 data to convert.
        ExternalDataError: An external weight is missing or truncated.
    """
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    argcheck.boolean(keep_io_types, "keep_io_types")
    ops = argcheck.names(keep_op, "keep_op", what="operator")
    nodes = argcheck.names(keep_node, "keep_node", what="node name")
    check_keep_op(model, ops)
    report = _progress.check(progress)
    return _Converter(model, keep_io_types=keep_io_types, keep_op=set(ops), keep_node=nodes,
                      progress=report).convert()


def check_keep_op(model: Model, ops: Sequence[str]) -> None:
    """Refuse an operator to keep in float32 that no node of the model (bodies and functions included)
    has: a typo would otherwise keep nothing without a word."""
    proto = model.lazy_proto
    present = {n.op_type for g in _graphs(proto.graph) for n in g.node}
    present |= {n.op_type for f in proto.functions for n in f.node}
    for op in ops:
        if op not in present:
            err = not_found(NameNotFoundError, "node of op type", op, sorted(present), where=model.name)
            raise NameNotFoundError(f"an operator to keep in float32: {err.message}", hint=err.hint,
                                    cli_hint=err.cli_hint)


def convert_float16(model: Model, *, keep_io_types: bool, keep_op: Sequence[str], keep_node: Sequence[str],
                    keep_main: Mapping[int, str], types: Mapping[str, int] | None = None,
                    store: WeightStore | None = None) -> Float16Conversion:
    """``to_float16_with_report`` with arguments already checked, main-graph nodes kept by position
    (``keep_main``: position → why), when known the element types (``element_types(model)``), and a
    ``store`` shared by several conversions of the same weights (each is then read, converted and
    written once; the result lives in the store's folder, which lives as long as the store)."""
    converter = _Converter(model, keep_io_types=keep_io_types, keep_op=set(keep_op), keep_node=list(keep_node),
                           keep_main=keep_main, store=store)
    return converter.convert(types)


# ------------------------------------------------------------------------------------------- typing


def _declared_element_types(root: onnx.GraphProto) -> dict[str, int]:
    """The element types that ``root`` and its bodies state (inputs, outputs, value_info, initializers)."""
    types: dict[str, int] = {}
    for graph in _graphs(root):
        for info in (*graph.input, *graph.output, *graph.value_info):
            elem = info.type.tensor_type.elem_type if info.type.HasField("tensor_type") else 0
            if elem:
                types[info.name] = elem
        for tensor in graph.initializer:
            types[tensor.name] = tensor.data_type
    return types


def element_types(model: Model) -> dict[str, int]:
    """The element type of every tensor whose type is known (main graph and bodies), by name.

    From declared types, initializers and ONNX shape inference on a weightless copy; the main
    graph's names inference leaves untyped are observed in one ONNX Runtime run.
    """
    proto = weightless(Source(model))
    with contextlib.suppress(Exception):  # (inference fails on some valid models: keep what is declared)
        proto = infer_proto(proto, data_prop=False)
    types = _declared_element_types(proto.graph)
    for graph in _graphs(proto.graph):
        for node in graph.node:
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
                for attr in node.attribute:
                    if attr.name == "value" and attr.type == onnx.AttributeProto.TENSOR:
                        types[node.output[0]] = attr.t.data_type
    for tensor in model.lazy_proto.graph.initializer:
        types[tensor.name] = tensor.data_type
    missing = [o for n in model.lazy_proto.graph.node for o in n.output if o and o not in types]
    if missing:
        from graphkit._typing import tensor_types

        found = tensor_types(model, missing, observe=True).types
        for name, tp in found.items():
            if tp.HasField("tensor_type") and tp.tensor_type.elem_type:
                types[name] = tp.tensor_type.elem_type
    return types


def _graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    yield graph
    for node in graph.node:
        for sub in subgraphs(node):
            yield from _graphs(sub)


# ------------------------------------------------------------------------------------- node schemas


@dataclass(frozen=True)
class _Ports:
    """How a node's data crosses into float16: per input and output, whether it becomes float16."""

    inputs: tuple[bool, ...]
    outputs: tuple[bool, ...]
    any_input: tuple[bool, ...] = ()  # inputs that take either precision as they come (Cast's)


def _schema(op: str, domain: str, version: int) -> Any:
    try:
        return onnx.defs.get_schema(op, version, domain)
    except Exception:  # onnx raises SchemaError for unknown ops
        return None


def _formal_types(schema: Any, count: int, outputs: bool) -> list[str]:
    """The type string (a variable like 'T' or a fixed 'tensor(float)') of each of ``count`` positions."""
    formal = schema.outputs if outputs else schema.inputs
    result = []
    for k in range(count):
        if k < len(formal):
            result.append(formal[k].type_str)
        elif formal and formal[-1].option == onnx.defs.OpSchema.FormalParameterOption.Variadic:
            result.append(formal[-1].type_str)
        else:
            result.append("")
    return result


def _float16_ports(node: onnx.NodeProto, version: int, types: Mapping[str, int]) -> _Ports | str:
    """Which of ``node``'s float32 inputs and outputs become float16 when it is converted, or why it cannot be."""
    schema = _schema(node.op_type, node.domain, version)
    if schema is None:
        return f"no schema for {node.op_type} in opset {version}"
    ins = _formal_types(schema, len(node.input), False)
    outs = _formal_types(schema, len(node.output), True)
    allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
    for name, var in [*zip(node.input, ins), *zip(node.output, outs)]:
        # A sequence's or optional's element type is not in ``types``: converting the tensors beside
        # it would leave the two disagreeing (SequenceInsert of a float16 tensor into a float32 sequence).
        containers = {t for t in allowed.get(var, ()) if not t.startswith("tensor(")}
        if name and containers and (len(containers) == len(allowed[var]) or name not in types):
            return f"{node.op_type} works on a sequence or optional, which stays float32"
    flip: set[str] = set()
    for name, var in [*zip(node.input, ins), *zip(node.output, outs)]:
        if name and types.get(name) == FLOAT and var in allowed and "tensor(float16)" in allowed[var]:
            flip.add(var)
    for name, var in zip(node.input, ins):
        # (a custom operator's output nothing types: float32 or not, converting the node beside it
        # would bind its type variable to two types, as Conv after a my::Debug marker did)
        if name and var in flip and name not in types:
            return f"it reads {name!r}, whose dtype graphkit cannot tell (declare its type in the model's value_info)"
    return _Ports(tuple(bool(n) and v in flip and types.get(n) == FLOAT for n, v in zip(node.input, ins)),
                  tuple(bool(n) and v in flip for n, v in zip(node.output, outs)))


# ------------------------------------------------------------------------------ ONNX Runtime kernels


@functools.lru_cache(maxsize=4096)
def _runtime_refuses(op: str, domain: str, version: int, ir_version: int, attributes: bytes,
                     inputs: tuple[int, ...], outputs: tuple[int, ...]) -> str:
    """Why ONNX Runtime's CPU provider cannot run this signature ("" when it can): a one-node session."""
    node = onnx.NodeProto()
    node.ParseFromString(attributes)
    node.input[:] = [f"i{k}" if t else "" for k, t in enumerate(inputs)]
    node.output[:] = [f"o{k}" for k in range(len(outputs))]
    graph = onnx.helper.make_graph(
        [node], "probe",
        [onnx.helper.make_tensor_value_info(f"i{k}", t, None) for k, t in enumerate(inputs) if t],
        [onnx.helper.make_tensor_value_info(f"o{k}", t, None) for k, t in enumerate(outputs)])
    proto = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid(domain, version)])
    proto.ir_version = ir_version
    return _ort.refusal(proto.SerializeToString())


# ------------------------------------------------------------------------------------ the converter


class _Converter:
    def __init__(self, model: Model, *, keep_io_types: bool, keep_op: set[str], keep_node: list[str],
                 keep_main: Mapping[int, str] | None = None, store: WeightStore | None = None,
                 progress: Progress | None = None) -> None:
        self.source = model
        self.progress = progress
        self.store = store
        self.keep_main = dict(keep_main or {})
        self.main_converted: list[int] = []
        self.main_float16: frozenset[str] = frozenset()
        self.keep_io_types = keep_io_types
        self.keep_op = keep_op
        self.keep_node = set(keep_node)
        self.proto = onnx.ModelProto()
        self.proto.CopyFrom(model.lazy_proto)
        self.opsets = {o.domain or "": o.version for o in self.proto.opset_import}
        if "ai.onnx" in self.opsets and "" not in self.opsets:
            self.opsets[""] = self.opsets["ai.onnx"]
        self.functions = {(f.domain, f.name): f for f in model.lazy_proto.functions}
        #: (domain, name, input dtypes) -> the element types inside that function called so (None:
        #: not all known, so its calls stay float32), and the name of its float16 variant once made.
        self.function_types: dict[tuple[str, str, tuple[int, ...]], dict[str, int] | None] = {}
        self.variants: dict[tuple[str, str, tuple[int, ...]], str] = {}
        self.kept: list[KeptNode] = []
        self.clamped: list[Clamped] = []
        self.converted = 0
        self.casts = 0
        self.weights = 0
        self.float_weights = 0  # (the progress total: float32 initializers of every graph)
        self.names: set[str] = set()
        self.spill: _Spill | None = None

    # ------------------------------------------------------------------ entry

    def convert(self, types: Mapping[str, int] | None = None) -> Float16Conversion:
        self._check_keep_nodes()
        self.types = dict(types) if types is not None else element_types(self.source)
        if FLOAT not in self.types.values():
            raise UsageError(f"{self.source.name} has no float32 tensor to convert",
                             hint="to_float16 converts float32 weights and computation; this model has none")
        for graph in _graphs(self.proto.graph):
            for node in graph.node:
                self.names.update(n for n in (*node.input, *node.output) if n)
            self.names.update(t.name for t in graph.initializer)
            self.names.update(v.name for v in (*graph.input, *graph.output))
            self.float_weights += sum(1 for t in graph.initializer if t.data_type == FLOAT)
        try:
            fp16_io = not self.keep_io_types
            self._graph(self.proto.graph, "main graph", {}, inputs_fp16=fp16_io, outputs_fp16=fp16_io, main=True)
            self._settle_functions()
            toposort_proto(self.proto)
            if any(n.domain in ("", "ai.onnx") for g in _graphs(self.proto.graph) for n in g.node):
                _ensure_opset(self.proto, "")  # (Casts in a model that imports only custom domains)
        except BaseException:
            if self.spill is not None:
                self.spill.discard()
            raise
        if self.store is not None:
            self.store.adopt_rest(self.source, self.proto)
            return Float16Conversion(Model(self.proto, self.store.folder, None), self.converted, tuple(self.kept),
                                     self.casts, self.weights, tuple(self.clamped), tuple(self.main_converted),
                                     self.main_float16)
        base_dir = self.source.base_dir
        if self.spill is not None:
            self.spill.adopt_rest(self.source, self.proto)
            self.spill.close()
            base_dir = self.spill.folder
        result = Model(self.proto, base_dir, None)
        if self.spill is not None:
            weakref.finalize(result, shutil.rmtree, str(self.spill.folder), True)
        return Float16Conversion(result, self.converted, tuple(self.kept), self.casts, self.weights,
                                 tuple(self.clamped), tuple(self.main_converted), self.main_float16)

    def _check_keep_nodes(self) -> None:
        main = self.source.lazy_proto.graph
        known = [n.name for g in _graphs(main) for n in g.node if n.name]
        known += [n.name for f in self.source.lazy_proto.functions for n in f.node if n.name]
        known += [unnamed_label(n, k) for k, n in enumerate(main.node) if not n.name]
        have = set(known) | {f"#{k}" for k in range(len(main.node))}
        for name in self.keep_node:
            if name not in have:
                err = not_found(NodeNotFoundError, "node", name, known, where=self.source.name)
                raise NodeNotFoundError(f"a node to keep in float32: {err.message}", hint=err.hint,
                                        cli_hint=err.cli_hint)

    # ------------------------------------------------------------------ one graph

    def _graph(self, graph: onnx.GraphProto, where: str, outer: dict[str, int], *, inputs_fp16: bool,
               outputs_fp16: bool, main: bool) -> None:
        """Convert ``graph`` in place. ``outer``: the final element type of the names it may read from
        enclosing graphs."""
        types = self.types
        nodes = list(graph.node)
        modes: list[_Ports | None] = []
        for k, node in enumerate(nodes):
            ports, reason = self._decide(node)
            if main and ports is not None and f"#{k}" in self.keep_node:
                ports, reason = None, "kept by keep_node"
            if main and k in self.keep_main and ports is not None:
                ports, reason = None, self.keep_main[k]
            modes.append(ports)
            if reason:
                self._keep(node, k, where, reason)
        self._keep_exact_sources(nodes, modes, where, {t.name for t in graph.initializer})
        working = [k for k, p in enumerate(modes) if p is not None and (any(p.inputs) or any(p.outputs))]
        self.converted += len(working)
        if main:
            self.main_converted = [k for k in working if nodes[k].op_type != "Cast"]

        initializers = {t.name: t for t in graph.initializer}
        graph_inputs = {v.name for v in graph.input}
        # natural[x]: the element type tensor x has where it is made, after conversion
        natural: dict[str, int] = {}
        for name in graph_inputs:
            if types.get(name) == FLOAT and name not in initializers:
                natural[name] = FLOAT16 if inputs_fp16 else FLOAT
        for k, node in enumerate(nodes):
            ports = modes[k]
            for j, out in enumerate(node.output):
                if out and types.get(out) == FLOAT:
                    natural[out] = FLOAT16 if ports is not None and j < len(ports.outputs) and ports.outputs[j] else FLOAT
        # what each consumer wants of each float32 tensor
        wants: dict[str, set[int]] = {}
        for k, node in enumerate(nodes):
            ports = modes[k]
            for j, name in enumerate(node.input):
                if not name or types.get(name) != FLOAT:
                    continue
                if ports is not None and ports.any_input and ports.any_input[j]:
                    continue
                wants.setdefault(name, set()).add(FLOAT16 if ports is not None and ports.inputs[j] else FLOAT)
        required_out: dict[str, int] = {}
        for out in graph.output:
            if types.get(out.name) == FLOAT:
                required_out[out.name] = FLOAT16 if outputs_fp16 else FLOAT
        # weights: converted in place when every reader wants float16, else copied for the float16 readers
        for name, tensor in initializers.items():
            if tensor.data_type != FLOAT:
                continue
            want = wants.get(name, set())
            if want == {FLOAT16} and required_out.get(name, FLOAT16) == FLOAT16:
                self._convert_tensor(tensor, name, where)
                natural[name] = FLOAT16
            else:
                natural[name] = FLOAT
        for k, node in enumerate(nodes):
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and types.get(node.output[0]) == FLOAT:
                name = node.output[0]
                value = next((a.t for a in node.attribute if a.name == "value" and not a.ref_attr_name), None)
                if value is not None and value.data_type == FLOAT and wants.get(name, set()) == {FLOAT16} \
                        and required_out.get(name, FLOAT16) == FLOAT16:  # (a value a function's call gives stays)
                    self._convert_tensor(value, node.name or name, where)
                    natural[name] = FLOAT16
                    modes[k] = _Ports((), (True,))
                else:
                    natural[name] = FLOAT
        for name, final in outer.items():
            natural.setdefault(name, final)

        # variants: (tensor, element type) -> the name that holds it
        variant: dict[tuple[str, int], str] = {}
        new_nodes: list[onnx.NodeProto] = []
        new_inits: list[onnx.TensorProto] = []
        for name, have in natural.items():
            variant[(name, have)] = name
        out_types = [required_out.get(out.name, 0) for out in graph.output]
        for out in graph.output:
            need = required_out.get(out.name)
            held = natural.get(out.name)
            if need is None or held is None or need == held:
                continue
            have = held
            if main:  # (the output keeps its name: the tensor made inside is renamed)
                inner = self._fresh(f"{out.name}_{_short(have)}")
                self._rename_production(nodes, graph, out.name, inner, initializers)
                variant[(out.name, have)] = inner
                variant[(out.name, need)] = out.name
                new_nodes.append(self._cast(inner, out.name, need))
            else:
                cast = self._fresh(f"{out.name}_{_short(need)}")
                new_nodes.append(self._cast(variant[(out.name, have)], cast, need))
                variant[(out.name, need)] = cast
                out.name = cast

        def get(name: str, need: int) -> str:
            key = (name, need)
            if key in variant:
                return variant[key]
            have = natural.get(name)
            source = variant[(name, have)] if have is not None else name
            made = self._fresh(f"{name}_{_short(need)}")
            tensor = initializers.get(name)
            if tensor is not None and have == FLOAT and need == FLOAT16:
                copy = onnx.TensorProto()
                copy.CopyFrom(tensor)
                copy.name = made
                self._convert_tensor(copy, name, where)
                new_inits.append(copy)
            else:
                new_nodes.append(self._cast(source, made, need))
            variant[key] = made
            return made

        for k, node in enumerate(nodes):
            ports = modes[k]
            original_inputs = list(node.input)
            for j, name in enumerate(node.input):
                if not name or types.get(name) != FLOAT or (ports is not None and ports.any_input and ports.any_input[j]):
                    if name and (name, natural.get(name)) in variant:
                        node.input[j] = variant[(name, natural[name])]
                    continue
                need = FLOAT16 if ports is not None and ports.inputs[j] else FLOAT
                node.input[j] = get(name, need)
            self._retype_node(node, ports)
            if node.op_type == "Cast" and node.domain in ("", "ai.onnx") and ports is not None:
                source = original_inputs[0] if original_inputs else ""
                arrives = natural.get(source, types.get(source, 0)) if types.get(source) == FLOAT else types.get(source, 0)
                if arrives and arrives == _attr_int(node, "to"):
                    node.op_type = "Identity"  # (a Cast to the type it already has: merged away)
                    del node.attribute[:]
            if (node.domain or "", node.op_type) in self.functions and ports is not None \
                    and (any(ports.inputs) or any(ports.outputs)):
                node.op_type = self._function_variant(node, original_inputs)
            if node.op_type in _CONTROL_FLOW and node.domain in ("", "ai.onnx"):
                converted = ports is not None and (any(ports.inputs) or any(ports.outputs))
                inner_outer = dict(outer)
                for (name, dtype), shown in variant.items():
                    if shown == name:
                        inner_outer[name] = dtype
                for sub_attr in node.attribute:
                    for body in ([sub_attr.g] if sub_attr.type == onnx.AttributeProto.GRAPH else list(sub_attr.graphs)):
                        label = f"{where} > node {node.name or node.op_type!r}.{sub_attr.name}"
                        self._graph(body, label, inner_outer, inputs_fp16=converted, outputs_fp16=converted,
                                    main=False)
        for value in graph.input:  # (an initializer listed as an input, as older models do, follows its weight)
            if types.get(value.name) == FLOAT and natural.get(value.name) == FLOAT16:
                value.type.tensor_type.elem_type = FLOAT16
        for value, final in zip(graph.output, out_types):
            if final and value.type.HasField("tensor_type"):
                value.type.tensor_type.elem_type = final
        self._retype_value_info(graph, natural, variant)
        if main:
            self.main_float16 = frozenset({shown for (_, dtype), shown in variant.items() if dtype == FLOAT16}
                                          | {n for n, t in types.items() if t == FLOAT16})
        graph.node.extend(new_nodes)
        graph.initializer.extend(new_inits)

    # ------------------------------------------------------------------ local functions

    def _call_key(self, node: onnx.NodeProto, inputs: Sequence[str]) -> tuple[str, str, tuple[int, ...]]:
        return (node.domain or "", node.op_type, tuple(self.types.get(n, 0) if n else 0 for n in inputs))

    def _call_types(self, node: onnx.NodeProto) -> dict[str, int] | None:
        """The element types inside the function ``node`` calls, given the types it is called with
        (None when some float-carrying name inside cannot be typed)."""
        key = self._call_key(node, node.input)
        if key not in self.function_types:
            func = self.functions[key[:2]]
            self.function_types[key] = _function_types(self.source.lazy_proto, func, node, key[2])
        return self.function_types[key]

    def _function_variant(self, node: onnx.NodeProto, inputs: Sequence[str]) -> str:
        """The name of the float16 variant of the function ``node`` calls (made on first use): its float
        inputs and outputs float16, its body converted like a graph's, float32 kept inside where needed."""
        key = self._call_key(node, inputs)
        if key in self.variants:
            return self.variants[key]
        func = self.functions[key[:2]]
        local = self.function_types[key]
        assert local is not None  # (_decide keeps the calls it cannot type)
        taken = {f.name for f in self.proto.functions if f.domain == func.domain}
        variant = onnx.FunctionProto()
        variant.CopyFrom(func)
        variant.name = _unique(f"{func.name}_float16", taken)
        self.variants[key] = variant.name
        holder = onnx.GraphProto()
        holder.node.extend(variant.node)
        for name in variant.input:
            holder.input.append(onnx.helper.make_tensor_value_info(name, local.get(name, 0), None))
        for name in variant.output:
            holder.output.append(onnx.helper.make_tensor_value_info(name, local.get(name, 0), None))
        saved = self.types, self.opsets
        self.types = local
        self.opsets = {**self.opsets, **{o.domain or "": o.version for o in func.opset_import}}
        try:
            self._graph(holder, f"function {func.name}", {}, inputs_fp16=True, outputs_fp16=True, main=False)
        finally:
            self.types, self.opsets = saved
        del variant.node[:]
        variant.node.extend(holder.node)
        del variant.output[:]
        variant.output.extend(o.name for o in holder.output)
        self.proto.functions.append(variant)
        return variant.name

    def _settle_functions(self) -> None:
        """A function no node calls any more in float32 is replaced by its one float16 variant, under
        its own name (or dropped beside several variants); one still called in float32 stays."""
        if not self.variants:
            return
        renames: dict[tuple[str, str], str] = {}
        while True:
            calls = {(n.domain or "", n.op_type) for nodes in _node_lists(self.proto) for n in nodes}
            unused = [(domain, name) for (domain, name, _) in self.variants
                      if (domain, name) not in calls and any(f.domain == domain and f.name == name
                                                             for f in self.proto.functions)]
            if not unused:
                break
            kept = [f for f in self.proto.functions if (f.domain, f.name) not in unused]
            del self.proto.functions[:]
            self.proto.functions.extend(kept)
        for domain, name in {(d, n) for d, n, _ in self.variants}:
            made = {v for (d, n, _), v in self.variants.items() if (d, n) == (domain, name)}
            original = any(f.domain == domain and f.name == name for f in self.proto.functions)
            if len(made) == 1 and not original:
                renames[(domain, made.pop())] = name
        if not renames:
            return
        for func in self.proto.functions:
            func.name = renames.get((func.domain, func.name), func.name)
        for nodes in _node_lists(self.proto):
            for n in nodes:
                n.op_type = renames.get((n.domain or "", n.op_type), n.op_type)

    # ------------------------------------------------------------------ decisions

    def _decide(self, node: onnx.NodeProto) -> tuple[_Ports | None, str]:
        """How ``node`` is converted (None: it stays as it is) and, when it keeps float32 data, why."""
        types = self.types
        floats = any(types.get(n) == FLOAT for n in (*node.input, *node.output) if n)
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            return None, ""  # (a source: decided with the weights)
        if not floats and node.op_type not in ("Cast", "ConstantOfShape") and node.op_type not in _CONTROL_FLOW:
            return None, ""
        if node.name and node.name in self.keep_node:
            return None, "kept by keep_node" if floats else ""
        if node.op_type in self.keep_op:
            return None, "kept by keep_op" if floats else ""
        domain = node.domain or ""
        if (domain, node.op_type) in self.functions:
            if self._call_types(node) is None:
                return None, (f"calls local function {node.op_type}, whose body graphkit cannot type for this call"
                              if floats else "")
            ins = tuple(bool(n) and types.get(n) == FLOAT for n in node.input)
            outs = tuple(bool(n) and types.get(n) == FLOAT for n in node.output)
            return _Ports(ins, outs), ""
        if domain not in ("", "ai.onnx"):
            return None, f"custom domain {domain!r}" if floats else ""
        if node.op_type in _EXACT_OPS:
            return None, _EXACT_OPS[node.op_type] if floats else ""
        if node.op_type in _DTYPE_ATTR_OPS:
            return None, f"{node.op_type} makes its dtype from an attribute" if floats else ""
        version = self.opsets.get("", 1)
        if node.op_type == "Cast":
            to = _attr_int(node, "to")
            return _Ports(tuple(False for _ in node.input), (to == FLOAT,), tuple(True for _ in node.input)), ""
        if node.op_type == "ConstantOfShape":
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            if value is None or value.data_type != FLOAT:
                return None, ""
            return _Ports((False,), (True,)), ""
        if node.op_type in _CONTROL_FLOW:
            ins = tuple(bool(n) and types.get(n) == FLOAT for n in node.input)
            outs = tuple(bool(n) and types.get(n) == FLOAT for n in node.output)
            return _Ports(ins, outs), ""
        ports = _float16_ports(node, version, types)
        if isinstance(ports, str):
            return None, ports
        if not any(ports.inputs) and not any(ports.outputs):
            return ports, ""
        refusal = self._runtime_refusal(node, version, ports)
        if refusal:
            return None, f"ONNX Runtime's CPU provider cannot run {node.op_type} in float16 ({refusal})"
        return ports, ""

    def _runtime_refusal(self, node: onnx.NodeProto, version: int, ports: _Ports) -> str:
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
            return ""
        ins = []
        for k, name in enumerate(node.input):
            if not name:
                ins.append(0)
                continue
            dtype = self.types.get(name)
            if dtype is None:
                return ""  # (cannot tell: let the session tell later)
            ins.append(FLOAT16 if ports.inputs[k] else dtype)
        outs = []
        for k, name in enumerate(node.output):
            dtype = self.types.get(name) if name else None
            if dtype is None:
                return ""
            outs.append(FLOAT16 if ports.outputs[k] else dtype)
        reduction = next((a.s.decode() for a in node.attribute if a.name == "reduction"), "none")
        if node.op_type in _RUNTIME_REDUCTIONS and reduction != "none" and FLOAT16 in ins:
            # (the session loads; the kernel refuses float16 only when it runs)
            return f"no float16 kernel with reduction '{reduction}'"
        bare = onnx.NodeProto(op_type=node.op_type, domain=node.domain)
        bare.attribute.extend(node.attribute)
        return _runtime_refuses(node.op_type, node.domain, version, self.proto.ir_version,
                                bare.SerializeToString(), tuple(ins), tuple(outs))

    def _keep_exact_sources(self, nodes: list[onnx.NodeProto], modes: list[_Ports | None], where: str,
                            weights: set[str]) -> None:
        """Keep float32 the converted nodes whose float results feed an input that must be exact."""
        producer = {o: k for k, n in enumerate(nodes) for o in n.output if o}
        stack: list[tuple[str, str]] = []
        for k, node in enumerate(nodes):
            ports = modes[k]
            cast_to_int = node.op_type == "Cast" and _attr_int(node, "to") not in (FLOAT, FLOAT16, onnx.TensorProto.DOUBLE,
                                                                                 onnx.TensorProto.BFLOAT16)
            for j, name in enumerate(node.input):
                if not name or self.types.get(name) != FLOAT:
                    continue
                fixed = ports is not None and not ports.inputs[j] and not (ports.any_input and ports.any_input[j])
                kept_exact = ports is None and node.op_type in _EXACT_OPS
                if fixed or kept_exact or cast_to_int:
                    what = f"{node.op_type}'s input {j}" if not cast_to_int else "a Cast to integers"
                    stack.append((name, what))
        seen: set[str] = set()
        derived = _shape_derived(nodes, weights)
        while stack:
            name, what = stack.pop()
            if name in seen or name not in producer or name not in derived:
                continue
            seen.add(name)
            k = producer[name]
            node = nodes[k]
            if node.op_type == "Cast":  # (a Cast takes either precision: it only stops making float16)
                modes[k] = _Ports((False,), (False,), (True,))
            elif modes[k] is not None:
                modes[k] = None
                self._keep(node, k, where, f"computes {what}, which must be exact")
            stack.extend((n, what) for n in node.input if n and self.types.get(n) == FLOAT)

    def _keep(self, node: onnx.NodeProto, k: int, where: str, reason: str) -> None:
        self.kept.append(KeptNode(node.name or unnamed_label(node, k), node.op_type, where, reason))

    # ------------------------------------------------------------------ rewriting

    def _retype_node(self, node: onnx.NodeProto, ports: _Ports | None) -> None:
        if ports is None:
            return
        if node.op_type == "Cast" and ports.outputs and ports.outputs[0]:
            for attr in node.attribute:
                if attr.name == "to":
                    attr.i = FLOAT16
        elif node.op_type == "ConstantOfShape":
            for attr in node.attribute:
                if attr.name == "value":
                    self._convert_tensor(attr.t, node.name or node.output[0], "")

    def _rename_production(self, nodes: list[onnx.NodeProto], graph: onnx.GraphProto, old: str, new: str,
                           initializers: Mapping[str, onnx.TensorProto]) -> None:
        for node in nodes:
            for j, out in enumerate(node.output):
                if out == old:
                    node.output[j] = new
        if old in initializers:
            initializers[old].name = new
        for value in graph.input:
            if value.name == old:
                value.name = new

    def _retype_value_info(self, graph: onnx.GraphProto, natural: Mapping[str, int],
                           variant: Mapping[tuple[str, int], str]) -> None:
        keep = []
        renamed = {shown: (name, dtype) for (name, dtype), shown in variant.items() if shown != name}
        for info in graph.value_info:
            if info.type.HasField("tensor_type") and info.type.tensor_type.elem_type == FLOAT:
                final = natural.get(info.name)
                if final is not None:
                    info.type.tensor_type.elem_type = final
            keep.append(info)
        for info in keep:
            for shown, (name, dtype) in renamed.items():
                if info.name == name:
                    extra = onnx.ValueInfoProto()
                    extra.CopyFrom(info)
                    extra.name = shown
                    extra.type.tensor_type.elem_type = dtype
                    graph.value_info.append(extra)

    def _cast(self, source: str, target: str, to: int) -> onnx.NodeProto:
        self.casts += 1
        return onnx.helper.make_node("Cast", [source], [target], name=self._fresh(f"{target}/Cast"), to=to)

    def _fresh(self, base: str) -> str:
        name, k = base, 1
        while name in self.names:
            k += 1
            name = f"{base}_{k}"
        self.names.add(name)
        return name

    def _convert_tensor(self, tensor: onnx.TensorProto, label: str, where: str) -> None:
        """Make ``tensor`` float16 in place, clamping values out of range; external data is spilled."""
        if tensor.data_type != FLOAT:
            return
        self.weights += 1
        self._convert_weight(tensor, label, where)
        _progress.report(self.progress, self.weights, max(self.weights, self.float_weights))

    def _convert_weight(self, tensor: onnx.TensorProto, label: str, where: str) -> None:
        if is_external(tensor):
            if self.store is not None:
                store = self.store
                figures = store.converted(tensor, lambda t: self._convert_external(t, where, store.spill))
            else:
                if self.spill is None:
                    self.spill = _Spill()
                figures = self._convert_external(tensor, where, self.spill)
            if figures is not None:
                self.clamped.append(Clamped(label, where or "main graph", *figures))
            return
        values = numpy_helper.to_array(tensor)
        half, clamped = _to_half(values)
        if clamped is not None:
            self.clamped.append(Clamped(label, where or "main graph", *clamped))
        name = tensor.name
        converted = numpy_helper.from_array(half, name)
        tensor.ClearField("float_data")
        tensor.ClearField("raw_data")
        tensor.data_type = FLOAT16
        tensor.raw_data = converted.raw_data
        del values

    def _convert_external(self, tensor: onnx.TensorProto, where: str, spill: _Spill) -> tuple[int, int, float] | None:
        """Convert a weight on disk chunk by chunk into ``spill``'s file: memory holds one chunk, not the
        weight. Returns (over, under, largest magnitude) when values had to be clamped."""
        ref = external_ref(self.source, tensor, where=where)
        count = ref.length // 4
        over = under = 0
        largest = 0.0
        position = spill.start()
        with open(ref.path, "rb") as handle:
            handle.seek(ref.offset)
            for start in range(0, count, _CHUNK):
                chunk = np.fromfile(handle, dtype="<f4", count=min(_CHUNK, count - start))
                if chunk.size != min(_CHUNK, count - start):
                    raise ExternalDataError(f"tensor {tensor.name!r}: {ref.location!r} ended early",
                                            hint="the weights file is truncated")
                half, n_over, n_under, most = _to_half_counted(chunk)
                over, under, largest = over + n_over, under + n_under, max(largest, most)
                spill.handle.write(half.astype("<f2", copy=False).tobytes())
                del chunk, half
        spill.finish(tensor, position, FLOAT16)
        return (over, under, largest) if over or under else None


def _node_lists(proto: onnx.ModelProto) -> Iterator[Any]:
    """Every node list of the model, in place: the main graph, local functions and their bodies."""
    for graph in _graphs(proto.graph):
        yield graph.node
    for func in proto.functions:
        yield func.node
        for node in func.node:
            for sub in subgraphs(node):
                for graph in _graphs(sub):
                    yield graph.node


def _function_types(model: onnx.ModelProto, func: onnx.FunctionProto, call: onnx.NodeProto,
                    dtypes: tuple[int, ...]) -> dict[str, int] | None:
    """The element types inside ``func`` called by ``call`` with inputs of ``dtypes``, by ONNX shape
    inference on its body as a graph (attribute references resolved from the call); None when a
    name inside stays untyped, since converting around it could mix precisions."""
    given = {a.name: a for a in call.attribute}
    defaults = {a.name: a for a in func.attribute_proto}
    graph = onnx.GraphProto(name=func.name)
    for node in func.node:
        copy = graph.node.add()
        copy.CopyFrom(node)
        if not _resolve_references(copy, given, defaults):
            return None
    for name, dtype in zip(func.input, dtypes):
        if name:
            graph.input.append(onnx.helper.make_tensor_value_info(name, dtype, None) if dtype
                               else onnx.helper.make_value_info(name, onnx.TypeProto()))
    try:
        holder = infer_proto(function_holder(model, func, graph), data_prop=False)
    except Exception as err:  # (onnx raises InferenceError and others from C++)
        log.debug("typing local function %s failed: %s", func.name, err)
        return None
    types = _declared_element_types(holder.graph)
    for g in _graphs(holder.graph):
        for node in g.node:
            if any(o and o not in types for o in node.output):
                return None
    return types


def _resolve_references(node: onnx.NodeProto, given: Mapping[str, onnx.AttributeProto],
                        defaults: Mapping[str, onnx.AttributeProto]) -> bool:
    """Replace ``node``'s attribute references (and its bodies') by the call's values or the defaults."""
    kept = []
    for attr in node.attribute:
        if attr.ref_attr_name:
            value = given.get(attr.ref_attr_name) or defaults.get(attr.ref_attr_name)
            if value is None:
                continue
            resolved = onnx.AttributeProto()
            resolved.CopyFrom(value)
            resolved.name = attr.name
            kept.append(resolved)
            continue
        for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)):
            for inner in sub.node:
                if not _resolve_references(inner, given, defaults):
                    return False
        kept.append(attr)
    copies = []
    for attr in kept:
        copy = onnx.AttributeProto()
        copy.CopyFrom(attr)
        copies.append(copy)
    del node.attribute[:]
    node.attribute.extend(copies)
    return True


def _shape_derived(nodes: Sequence[onnx.NodeProto], weights: set[str]) -> set[str]:
    """The tensors computed (by shape arithmetic) from shapes, sizes and weights alone, not from data."""
    derived: set[str] = set(weights)
    for node in nodes:  # (in order: the graph is sorted)
        if node.op_type in ("Shape", "Size", "Constant"):
            derived.update(node.output)
        elif node.op_type in _SHAPE_ARITHMETIC and all(not n or n in derived for n in node.input):
            derived.update(o for o in node.output if o)
    return derived


def _to_half(values: np.ndarray) -> tuple[np.ndarray, tuple[int, int, float] | None]:
    """``values`` as float16, clamped into its range, and (over, under, max magnitude) when clamping was needed."""
    half, over, under, largest = _to_half_counted(values)
    return half, ((over, under, largest) if over or under else None)


def _to_half_counted(values: np.ndarray) -> tuple[np.ndarray, int, int, float]:
    """``values`` as float16 clamped into its range, how many values were above it and below it, and
    the largest finite magnitude."""
    magnitude = np.abs(values)
    finite = np.isfinite(values)
    over = finite & (magnitude > FP16_MAX)
    under = (magnitude > 0) & (magnitude < FP16_TINY)
    n_over, n_under = int(over.sum()), int(under.sum())
    largest = float(np.max(magnitude, where=finite, initial=0.0))
    if not n_over and not n_under:
        return values.astype(np.float16), 0, 0, largest
    fixed = np.where(over, np.sign(values) * FP16_MAX, values)
    fixed = np.where(under, np.sign(values) * FP16_TINY, fixed)
    return fixed.astype(np.float16), n_over, n_under, largest


def unnamed_label(node: onnx.NodeProto, position: int) -> str:
    """How the reports name an unnamed node: ``#position``, its place in its graph, as ``keep_node``
    (and edit) take a main-graph node by position."""
    return f"#{position}"


def _short(dtype: int) -> str:
    return "float16" if dtype == FLOAT16 else "float32"


def _attr_int(node: onnx.NodeProto, name: str) -> int:
    for attr in node.attribute:
        if attr.name == name:
            return int(attr.i)
    return 0


# -------------------------------------------------------------------------------- scratch weights


class _Spill:
    """A scratch folder holding the converted copies of weights that lived outside the model."""

    NAME = "weights.data"
    MARK = "graphkit.converted"

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="graphkit-convert-"))
        self.handle = open(self.folder / self.NAME, "wb")  # noqa: SIM115 (closed by close/discard)

    def write(self, tensor: onnx.TensorProto, data: bytes, data_type: int) -> None:
        position = self.start()
        self.handle.write(data)
        self.finish(tensor, position, data_type)

    def start(self) -> int:
        """Where the next tensor's bytes go (aligned to a page): write them, then ``finish``."""
        position = self.handle.tell()
        aligned = -(-position // 4096) * 4096
        if aligned != position:
            self.handle.write(b"\0" * (aligned - position))
        return aligned

    def finish(self, tensor: onnx.TensorProto, aligned: int, data_type: int) -> None:
        """Point ``tensor`` at the bytes written since ``start`` returned ``aligned``."""
        length = self.handle.tell() - aligned
        for name in ("raw_data", "float_data", "int32_data", "int64_data", "double_data", "uint64_data"):
            tensor.ClearField(name)
        del tensor.external_data[:]
        unborrow(tensor)
        tensor.data_type = data_type
        tensor.data_location = onnx.TensorProto.EXTERNAL
        for key, value in (("location", self.NAME), ("offset", str(aligned)), ("length", str(length))):
            tensor.external_data.add(key=key, value=value)
        tensor.metadata_props.add(key=self.MARK, value="")

    def adopt_rest(self, model: Model, proto: onnx.ModelProto) -> None:
        """Copy in the external weights of ``proto`` that were not converted (the model's folder is now
        this one); weights borrowed from a model file stay where they are."""
        for tensor, _ in iter_tensors(proto):
            if not is_external(tensor) or is_borrowed(tensor):
                continue
            if any(e.key == self.MARK for e in tensor.metadata_props):
                marks = [e for e in tensor.metadata_props if e.key != self.MARK]
                del tensor.metadata_props[:]
                tensor.metadata_props.extend(marks)
                continue
            self.copy_in(model, tensor)
            marks = [e for e in tensor.metadata_props if e.key != self.MARK]
            del tensor.metadata_props[:]
            tensor.metadata_props.extend(marks)

    def copy_in(self, model: Model, tensor: onnx.TensorProto) -> None:
        """Copy the external (or borrowed) ``tensor`` of ``model`` into the file as it is, and point it there."""
        ref = external_ref(model, tensor)
        position = self.start()
        with open(ref.path, "rb") as handle:
            handle.seek(ref.offset)
            left = ref.length
            while left:  # (in pieces: memory holds one piece, not the weight)
                piece = handle.read(min(left, _CHUNK * 4))
                if not piece:
                    raise ExternalDataError(f"tensor {tensor.name!r}: {ref.location!r} ended early",
                                            hint="the weights file is truncated")
                self.handle.write(piece)
                left -= len(piece)
        self.finish(tensor, position, tensor.data_type)

    def close(self) -> None:
        self.handle.close()

    def discard(self) -> None:
        with contextlib.suppress(OSError):
            self.handle.close()
        shutil.rmtree(self.folder, ignore_errors=True)



class WeightStore:
    """Weights that lie outside the model, converted or copied once for several conversions of it.

    The mixed-precision search converts the same model many times with different nodes kept float32:
    each external (or borrowed) weight is read, converted and written into one scratch folder the
    first time a conversion needs it, and every later conversion points at that copy. The folder is
    removed when the store is garbage collected, unless ``hand_over`` gave it to a model.
    """

    def __init__(self) -> None:
        self.spill = _Spill()
        self.folder = self.spill.folder
        #: (the source data's reference, element type) -> external_data entries, clamping figures
        self.placed: dict[tuple[Any, ...], tuple[list[tuple[str, str]], tuple[int, int, float] | None]] = {}
        self._cleanup = weakref.finalize(self, shutil.rmtree, str(self.folder), True)

    @staticmethod
    def _key(tensor: onnx.TensorProto, data_type: int) -> tuple[Any, ...]:
        return (tuple((e.key, e.value) for e in tensor.external_data), str(borrowed_path(tensor)), data_type)

    def converted(self, tensor: onnx.TensorProto,
                  convert: Callable[[onnx.TensorProto], tuple[int, int, float] | None]) -> tuple[int, int, float] | None:
        """Point the external float32 ``tensor`` at its float16 copy, written by ``convert`` (into this
        store's spill) on first use; the clamping figures when its values lie outside float16's range."""
        key = self._key(tensor, FLOAT16)
        if key not in self.placed:
            clamped = convert(tensor)
            self.placed[key] = ([(e.key, e.value) for e in tensor.external_data], clamped)
        else:
            self._point(tensor, key, FLOAT16)
        return self.placed[key][1]

    def adopt_rest(self, model: Model, proto: onnx.ModelProto) -> None:
        """Point the external weights of ``proto`` that were not converted at copies in the store
        (borrowed ones too, so that ONNX Runtime reads them from the store's folder, not memory)."""
        for tensor, _ in iter_tensors(proto):
            if not is_external(tensor):
                continue
            if any(e.key == _Spill.MARK for e in tensor.metadata_props):
                marks = [e for e in tensor.metadata_props if e.key != _Spill.MARK]
                del tensor.metadata_props[:]
                tensor.metadata_props.extend(marks)
                continue
            key = self._key(tensor, tensor.data_type)
            if key not in self.placed:
                self.spill.copy_in(model, tensor)
                self.placed[key] = ([(e.key, e.value) for e in tensor.external_data], None)
            else:
                self._point(tensor, key, tensor.data_type)
            marks = [e for e in tensor.metadata_props if e.key != _Spill.MARK]
            del tensor.metadata_props[:]
            tensor.metadata_props.extend(marks)
        self.spill.handle.flush()

    def _point(self, tensor: onnx.TensorProto, key: tuple[Any, ...], data_type: int) -> None:
        for name in ("raw_data", "float_data", "int32_data", "int64_data", "double_data", "uint64_data"):
            tensor.ClearField(name)
        del tensor.external_data[:]
        unborrow(tensor)
        tensor.data_type = data_type
        tensor.data_location = onnx.TensorProto.EXTERNAL
        for k, v in self.placed[key][0]:
            tensor.external_data.add(key=k, value=v)
        tensor.metadata_props.add(key=_Spill.MARK, value="")

    def discard(self) -> None:
        """Remove the folder now (not when the store is collected: an exception's traceback can keep the
        store alive), unless ``hand_over`` gave it to a model."""
        if self._cleanup.alive:
            self.spill.discard()
            self._cleanup()

    def hand_over(self, model: Model) -> None:
        """Let ``model`` (made with this store) own the folder: it is removed with the model, not the store."""
        self.spill.close()
        self._cleanup.detach()
        weakref.finalize(model, shutil.rmtree, str(self.folder), True)


# ----------------------------------------------------------------------------------- input/output dtype


@_noop_returns_input
def set_dtype(model: Model, /, tensor: str, dtype: str) -> Model:
    """Change the dtype of a graph input or output, with a Cast inside the model.

    A graph input takes ``dtype`` and a Cast back to its old dtype feeds what read it (uint8 images
    into a float model, int32 indices into an int64 one); a graph output is cast from what its node
    makes to ``dtype``. Names stay as they are, so callers feed and read the same names.

    Args:
        model: The model (not changed).
        tensor: The graph input or output.
        dtype: The new dtype ("float16", "int32", "uint8", ...).

    Returns:
        The edited model; the input model itself when it already has that dtype.

    Raises:
        TensorNotFoundError: ``tensor`` is no graph input or output (with the closest names).
        EditError: It is both an input and an output, an initializer listed as an input, or its dtype
            is not declared.
        UsageError: ``dtype`` is no dtype.
    """
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    name = argcheck.name(tensor, "tensor", what="tensor name")
    argcheck.name(dtype, "dtype", what="dtype")
    target = dtype_to_onnx(dtype)
    graph = model.lazy_proto.graph
    inputs = {v.name: v for v in graph.input}
    outputs = {v.name: v for v in graph.output}
    if name not in inputs and name not in outputs:
        _refuse_function_tensor(model, model.lazy_proto, name, "set_dtype")
        err = not_found(TensorNotFoundError, "graph input or output", name, [*inputs, *outputs], where=model.name)
        raise TensorNotFoundError(err.message, hint=(err.hint or "") + "; set_dtype changes graph inputs and outputs",
                                  cli_hint=(err.cli_hint or err.hint or "")
                                  + "; --set-dtype changes graph inputs and outputs")
    if name in inputs and name in outputs:
        raise EditError(f"{name!r} of {model.name} is both a graph input and a graph output",
                        hint="give the output its own name first (insert_node(model, NAME, 'Identity'))",
                        cli_hint="give the output its own name first (edit --insert-after NAME=Identity)")
    if name in inputs and any(t.name == name for t in graph.initializer):
        # (an initializer listed as an input, as IR < 4 requires of every weight: its value stays float32
        # beside a declared float16, which the checker refuses)
        raise EditError(f"{name!r} of {model.name} is a weight (an initializer also listed as a graph input), not "
                        "a value fed at run time", hint="convert weights with to_float16 (keep_io_types=True keeps "
                        "the inputs), or make it a plain input first (remove its initializer)",
                        cli_hint="convert weights with 'python -m graphkit convert IN OUT --float16' (--keep-io-types "
                                 "keeps the inputs)")
    declared = (inputs.get(name) or outputs[name]).type
    old = declared.tensor_type.elem_type if declared.HasField("tensor_type") else 0
    if not old:
        raise EditError(f"{name!r} of {model.name} has no declared tensor dtype to cast from",
                        hint="type it first (gk.infer_shapes, or gk.set_dims)",
                        cli_hint="type it first (python -m graphkit infer-shapes, or edit --fixed/--dynamic)")
    if old == target:
        raise NoChangeError(f"{name!r} of {model.name} is already {_dtype_name(target)}",
                            hint="choose another dtype")
    proto = onnx.ModelProto()
    proto.CopyFrom(model.lazy_proto)
    graph = proto.graph
    names = {n for g in _graphs(graph) for node in g.node for n in (*node.input, *node.output)}
    names |= {v.name for v in (*graph.input, *graph.output, *graph.value_info)} | {t.name for t in graph.initializer}
    inner = _unique(f"{name}_{_dtype_name(old)}", names)
    if name in inputs:
        _rename_reads(graph, name, inner)
        cast = onnx.helper.make_node("Cast", [name], [inner], name=_unique(f"{name}/Cast", _node_names(graph)), to=old)
        graph.node.insert(0, cast)
        next(v for v in graph.input if v.name == name).type.tensor_type.elem_type = target
    else:
        for node in graph.node:
            for j, out in enumerate(node.output):
                if out == name:
                    node.output[j] = inner
        _rename_reads(graph, name, inner)
        for info in graph.value_info:
            if info.name == name:
                info.name = inner
        if name in {t.name for t in graph.initializer}:
            next(t for t in graph.initializer if t.name == name).name = inner
        cast = onnx.helper.make_node("Cast", [inner], [name], name=_unique(f"{name}/Cast", _node_names(graph)), to=target)
        graph.node.append(cast)
        next(v for v in graph.output if v.name == name).type.tensor_type.elem_type = target
    _ensure_opset(proto, "")
    toposort_proto(proto)
    return model.derive(proto)


def _rename_reads(graph: onnx.GraphProto, old: str, new: str) -> None:
    """Every read of ``old`` in ``graph`` and its bodies (outer-scope reads) reads ``new``."""
    for g in _graphs(graph):
        if g is not graph and any(v.name == old for v in (*g.input, *g.initializer)):
            continue  # (a body that defines the name itself)
        for node in g.node:
            for j, value in enumerate(node.input):
                if value == old:
                    node.input[j] = new
        for out in g.output:
            if g is not graph and out.name == old:
                out.name = new


def _node_names(graph: onnx.GraphProto) -> set[str]:
    return {n.name for g in _graphs(graph) for n in g.node if n.name}


def _unique(base: str, taken: set[str]) -> str:
    name, k = base, 1
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    taken.add(name)
    return name


def _dtype_name(dtype: int) -> str:
    try:
        return str(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(dtype)))
    except (KeyError, TypeError, ValueError):  # (bfloat16, float8: no numpy name)
        return onnx.TensorProto.DataType.Name(dtype).lower()
