"""Opset conversion, up and down, with weights left where they are.

ONNX's version converter does the main graph's nodes it has adapters for; graphkit rewrites itself
the operators whose arguments moved between attributes and inputs (the Reduce family, Squeeze,
Unsqueeze, Split, Clip, Pad) and Resize 10 ↔ 11, wherever they are: main graph, If/Loop/Scan bodies
and local functions. The converter never sees a weight: large initializers are passed without their
data and put back by name, so external weights stay on disk. A node that cannot be converted is
named with the reason and nothing is returned.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from graphkit import _check_args as argcheck
from graphkit._edit._common import _noop_returns_input
from graphkit._io import tensor_value
from graphkit._model import Model
from graphkit._typing import Source, function_holder, infer_proto, tensor_types, weightless
from graphkit._validate import check_or_raise, validate
from graphkit.errors import EditError, InvalidModelError, NoChangeError

__all__ = ["OpsetConversion", "convert_opset", "convert_opset_with_report"]

log = logging.getLogger(__name__)

#: Operator → the ai.onnx version from which its ``axes`` is an input instead of an attribute.
AXES_INPUT_SINCE = {
    "ReduceSum": 13, "Squeeze": 13, "Unsqueeze": 13, "ReduceMean": 18, "ReduceMax": 18, "ReduceMin": 18,
    "ReduceProd": 18, "ReduceL1": 18, "ReduceL2": 18, "ReduceLogSum": 18, "ReduceLogSumExp": 18,
    "ReduceSumSquare": 18,
}
#: Other operators graphkit rewrites itself, with the version where their form changed.
_OWN = {"Split": 13, "Clip": 11, "Pad": 11, "Resize": 11, "Softmax": 13, "LogSoftmax": 13, "Hardmax": 13}
#: Operators graphkit converts down itself from the version of their newer form (ONNX's converter
#: has no adapter down from it): that version and the oldest version graphkit converts them to.
_DOWN = {"Reshape": (14, 5), "BatchNormalization": (14, 7), "Dropout": (12, 7), "MaxPool": (10, 8),
         "AveragePool": (10, 7)}
#: (operator, version) -> attributes it gained then, with the value that means the older behaviour:
#: converting down drops them at that value and refuses the node otherwise.
_NEUTRAL: dict[tuple[str, int], dict[str, int]] = {
    ("Reshape", 14): {"allowzero": 0}, ("BatchNormalization", 14): {"training_mode": 0},
    ("MaxPool", 10): {"ceil_mode": 0, "dilations": 1}, ("AveragePool", 10): {"ceil_mode": 0},
    ("AveragePool", 19): {"dilations": 1},
}
#: (operator, attribute) -> the value a node may set an attribute its older versions lack to, meaning
#: what they did: going down, the attribute is dropped (a function body's Cast sets saturate=1).
_NEUTRAL_SET: dict[tuple[str, str], int] = {("Cast", "saturate"): 1, ("CastLike", "saturate"): 1,
                                            ("Shape", "start"): 0}
#: Operators that before opset 13 coerce their input to 2-D at ``axis`` and from 13 work on that one axis.
_AXIS_FAMILY = frozenset({"Softmax", "LogSoftmax", "Hardmax"})
_CONTROL = frozenset({"If", "Loop", "Scan"})
#: Operators that before opset 7 broadcast ``B`` to ``A`` by their ``broadcast``/``axis`` attributes
#: (from 7 as numpy does): ONNX's converter asserts on ``axis`` that is not a suffix (the bias
#: ``Add(broadcast=1, axis=1)`` of a [N, C, L] tensor, as PyTorch exported it then).
_LEGACY_BROADCAST = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "And", "Or", "Xor", "Equal", "Greater", "Less"})
_PLACEHOLDER = "graphkit.opset"
#: Initializers at least this large are passed to ONNX's converter without their data.
_STRIP_BYTES = 1024


@dataclass(frozen=True)
class OpsetConversion:
    """The result of ``convert_opset_with_report``.

    Attributes:
        model: The converted model.
        source: The ai.onnx version it had.
        target: The version it has now.
        rewritten: The nodes graphkit rewrote itself (``where: name (Op)``).
        converter: Whether ONNX's version converter converted the main graph's other nodes.
    """

    model: Model = field(repr=False)
    source: int
    target: int
    rewritten: tuple[str, ...]
    converter: bool

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (without the model)."""
        return {"source": self.source, "target": self.target, "rewritten": list(self.rewritten),
                "converter": self.converter}


@_noop_returns_input
def convert_opset(model: Model, /, version: int) -> Model:
    """Convert the model to another ai.onnx opset version, up or down.

    Args:
        model: The model (not changed).
        version: The target ai.onnx opset version.

    Returns:
        The converted model; the input model itself when it already has that version.

    Raises:
        EditError: A node cannot be converted (named, with the reason); nothing is returned.
        InvalidModelError: The result fails onnx.checker (the message says whether the input did too).
    """
    return _convert(model, version).model


def convert_opset_with_report(model: Model, /, version: int) -> OpsetConversion:
    """``convert_opset``, also saying which nodes graphkit rewrote itself.

    Raises:
        NoChangeError: The model already has that version.
        EditError: A node cannot be converted (named, with the reason).
    """
    return _convert(model, version)


def _convert(model: Model, version: int) -> OpsetConversion:
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    original = model
    target = argcheck.integer(version, "version", minimum=1, maximum=onnx.defs.onnx_opset_version())
    proto = onnx.ModelProto()
    proto.CopyFrom(model.lazy_proto)
    source = _version(proto.opset_import)
    if source is None:
        raise EditError(f"{model.name} imports no ai.onnx opset", hint="nothing to convert")
    if source == target:
        raise NoChangeError(f"{model.name} already has ai.onnx opset {target}", hint="choose another version")
    expanded = _expand_missing(model, proto, source, target)
    if expanded:  # (the rewriter reads names, shapes and weights from the expanded graph)
        copy = onnx.ModelProto()
        copy.CopyFrom(proto)
        model = Model(copy, model.base_dir, model.path)
    rewriter = _Rewriter(model, source, target)
    rewriter.rewritten.extend(expanded)
    missing = _missing_operators(proto, target) or _unfit_types(proto, source, target, _known_types(model))
    if missing:
        raise _refusal(model, target, missing)
    if rewriter.hide(proto.graph):
        proto.opset_import.add(domain=_PLACEHOLDER, version=1)
    need_converter = any(_changes(n, source, target) for n in proto.graph.node if n.domain != _PLACEHOLDER)
    if need_converter:
        stated = {v.name for v in proto.graph.value_info}
        _declare_hidden_outputs(model, proto.graph)
        proto = _run_converter(model, proto, target)
        # (the converter adds what it inferred at the source version: a Dropout mask's float before
        # 10 stays declared beside the bool mask of 10; only the model's own declarations stay)
        kept_infos = [v for v in proto.graph.value_info if v.name in stated]
        del proto.graph.value_info[:]
        proto.graph.value_info.extend(kept_infos)
    else:
        _set_version(proto.opset_import, target)
    rewriter.show(proto.graph, positions=not need_converter)
    rewriter.shaped = False  # (a function's shapes come from its calls)
    for func in proto.functions:
        if _version(func.opset_import) is not None:
            rewriter.function = (func.domain, func.name)
            rewriter.graph_nodes(func.node, f"function {func.name}", {}, rewriter.function_constants(func))
            _set_version(func.opset_import, target)
    if rewriter.problems:
        raise _refusal(model, target, rewriter.problems)
    _set_version(proto.opset_import, target)
    keep = [o for o in proto.opset_import if o.domain != _PLACEHOLDER]
    del proto.opset_import[:]
    proto.opset_import.extend(keep)
    _drop_unread(proto.graph, rewriter.detached)
    for func in proto.functions:
        _drop_unread_in_function(func, rewriter.detached)
    proto.ir_version = max(proto.ir_version, _ir_for(target))
    result = model.derive(proto)
    _check_result(original, result, target)
    return OpsetConversion(result, source, target, tuple(rewriter.rewritten), need_converter)


def _check_result(original: Model, result: Model, target: int) -> None:
    """Refuse a result onnx.checker rejects (never return what cannot be saved); when the input passes
    the checker, the conversion made the fault and the message says so."""
    try:
        check_or_raise(result, what=f"{original.name} converted to opset {target}")
    except InvalidModelError as err:
        if not validate(original).passed:
            raise
        raise InvalidModelError(f"{err.message}; the input model passes the checker, so the conversion to opset "
                                f"{target} made it",
                                hint="choose another version, and report it (the checker names the node)") from err


# ------------------------------------------------------------------ operators ONNX defines as functions


#: Rounds of expansion (a function body may use an operator that is itself a function).
_EXPAND_ROUNDS = 4


def _expand_missing(model: Model, proto: onnx.ModelProto, source: int, target: int) -> list[str]:
    """Replace, in ``proto``'s main graph and bodies, each node whose operator the target version lacks
    and which ONNX defines as a function of older operators (LayerNormalization 17, Gelu 20,
    GroupNormalization 21, Mish and HardSwish 22 ...) by that function's nodes at the source version,
    which the converter then takes down. Returns the labels of the nodes expanded."""
    labels: list[str] = []
    taken = _taken_names(proto)  # (one set for every expansion: two nodes of one name make the same names)
    for _ in range(_EXPAND_ROUNDS):
        types: dict[str, onnx.TypeProto] | None = None
        found = False
        places = [(where, graph.node, source) for where, graph in _named_graphs(proto.graph, "main graph")]
        # (a local function's types depend on its calls: only the operators with a plain function there)
        places += [(f"function {func.name}", func.node, _version(func.opset_import) or source) for func in proto.functions]
        for where, nodes, version in places:
            rebuilt: list[onnx.NodeProto] = []
            changed = False
            for k, node in enumerate(nodes):
                body = None
                if node.domain in ("", "ai.onnx") and _lacks(node.op_type, target) \
                        and not _lacks(node.op_type, version):
                    if types is None:
                        types = _all_types(model, proto)
                    body = _function_body(node, version, types if where.startswith(("main", "main graph")) else {})
                if body is None:
                    rebuilt.append(node)
                    continue
                rebuilt.extend(_inlined(node, body, k, taken, _defaults(node.op_type, version)))
                labels.append(f"{where}: {_node_label(node, k)} expanded into its ONNX function")
                changed = True
            if changed:
                del nodes[:]
                nodes.extend(rebuilt)
                found = True
        if not found:
            break
    return labels


def _lacks(op: str, version: int) -> bool:
    """Whether ai.onnx ``version`` has no ``op``, or only a deprecated one (GroupNormalization 18-20)."""
    try:
        return bool(onnx.defs.get_schema(op, version, "").deprecated)
    except Exception:  # onnx raises SchemaError for an op that does not exist at that version
        return True


def _all_types(model: Model, proto: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    """The types ONNX inference gives every tensor of ``proto`` (its weights read from ``model``)."""
    inferred = _inferred(model.derive(proto))
    types: dict[str, onnx.TypeProto] = {}
    for graph in _graphs(inferred.graph):
        for info in (*graph.input, *graph.output, *graph.value_info):
            types[info.name] = info.type
        for tensor in graph.initializer:
            types[tensor.name] = onnx.helper.make_tensor_type_proto(tensor.data_type, list(tensor.dims))
    return types


def _function_body(node: onnx.NodeProto, version: int, types: dict[str, onnx.TypeProto]) -> onnx.FunctionProto | None:
    """The function ONNX defines ``node``'s operator as, at ``version`` (None when it defines none, or
    a context-dependent one needs input types that are not known)."""
    try:
        schema = onnx.defs.get_schema(node.op_type, version, "")
    except Exception:  # onnx raises SchemaError for an op that does not exist at that version
        return None
    body = onnx.FunctionProto()
    if schema.has_function:  # type: ignore[attr-defined]
        body.CopyFrom(schema.function_body)
    elif not schema.has_context_dependent_function or any(  # type: ignore[attr-defined]
            n and n not in types for n in node.input):  # (a context-dependent body needs the input types)
        return None
    else:
        given = [types[n].SerializeToString() if n else onnx.TypeProto().SerializeToString() for n in node.input]
        try:
            body.ParseFromString(schema.get_context_dependent_function(  # type: ignore[attr-defined]
                node.SerializeToString(), given))
        except Exception:  # onnx raises from C++ where the function cannot be built for these types
            return None
    if not body.node or any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                            for n in body.node for a in n.attribute):
        return None  # (a body with If branches reads its own names from inside them: not inlined here)
    return body


def _defaults(op: str, version: int) -> dict[str, onnx.AttributeProto]:
    """The attribute defaults of ``op``'s schema at ``version`` (what a function body's reference to
    an attribute the node leaves out means)."""
    schema = onnx.defs.get_schema(op, version, "")
    return {name: attr.default_value for name, attr in schema.attributes.items()
            if attr.default_value.type != onnx.AttributeProto.UNDEFINED}


def _taken_names(proto: onnx.ModelProto) -> set[str]:
    names: set[str] = set()
    for graph in _graphs(proto.graph):
        names.update(n for node in graph.node for n in (*node.input, *node.output, node.name))
        names.update(t.name for t in graph.initializer)
        names.update(v.name for v in (*graph.input, *graph.output))
    return names


def _inlined(node: onnx.NodeProto, body: onnx.FunctionProto, position: int, taken: set[str],
             defaults: dict[str, onnx.AttributeProto]) -> list[onnx.NodeProto]:
    """The nodes of ``body`` computing ``node``'s outputs from its inputs: names made unique under the
    node's, attribute references resolved from the node (or dropped where it has none), and the nodes
    no output of the node needs left out."""
    base = node.name or f"{node.op_type}_{position}"
    renamed: dict[str, str] = {formal: actual for formal, actual in zip(body.input, node.input)}
    renamed.update({formal: "" for formal in list(body.input)[len(node.input):]})
    renamed.update({formal: actual for formal, actual in zip(body.output, node.output) if actual})

    def fresh(name: str) -> str:
        if name not in renamed:
            candidate, k = f"{base}/{name}", 1
            while candidate in taken:
                k += 1
                candidate = f"{base}/{name}_{k}"
            taken.add(candidate)
            renamed[name] = candidate
        return renamed[name]

    attrs = {**defaults, **{a.name: a for a in node.attribute}}
    made: list[onnx.NodeProto] = []
    for inner in body.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(inner)
        copy.input[:] = [fresh(n) if n else "" for n in inner.input]
        copy.output[:] = [fresh(n) if n else "" for n in inner.output]
        copy.name = fresh(inner.name or f"{inner.op_type}_{len(made)}")
        for attr in list(copy.attribute):
            if attr.ref_attr_name:
                given = attrs.get(attr.ref_attr_name)
                copy.attribute.remove(attr)
                if given is not None:
                    value = onnx.AttributeProto()
                    value.CopyFrom(given)
                    value.name = attr.name
                    copy.attribute.append(value)
        made.append(copy)
    needed = {o for o in node.output if o}
    kept: list[onnx.NodeProto] = []
    for inner in reversed(made):  # (the function's other outputs: Mean, InvStdDev of LayerNormalization)
        if any(o in needed for o in inner.output):
            kept.append(inner)
            needed.update(n for n in inner.input if n)
    return list(reversed(kept))


# ----------------------------------------------------------------------------------------- helpers


def _int_value(attr: onnx.AttributeProto) -> int | None:
    return int(attr.i) if attr.type == onnx.AttributeProto.INT else None


def _version(imports: Any) -> int | None:
    for entry in imports:
        if entry.domain in ("", "ai.onnx"):
            return int(entry.version)
    return None


def _set_version(imports: Any, version: int) -> None:
    for entry in imports:
        if entry.domain in ("", "ai.onnx"):
            entry.version = version


def _ir_for(version: int) -> int:
    """The lowest IR version that allows ai.onnx opset ``version``."""
    needed = [int(row[1]) for row in onnx.helper.VERSION_TABLE if row[2] == version]  # (release, ir, opset, ...)
    return min(needed) if needed else 3


def _since(op: str, version: int) -> int | None:
    try:
        return int(onnx.defs.get_schema(op, version, "").since_version)
    except Exception:  # onnx raises SchemaError for an op that does not exist at that version
        return None


def _changes(node: onnx.NodeProto, source: int, target: int) -> bool:
    """Whether the node's schema differs between the two versions (its form may need converting)."""
    if node.domain not in ("", "ai.onnx"):
        return False
    return _since(node.op_type, source) != _since(node.op_type, target)


def _crosses(since: int, source: int, target: int) -> int:
    """+1 when going up across ``since``, -1 when going down across it, 0 otherwise."""
    if source < since <= target:
        return 1
    if target < since <= source:
        return -1
    return 0


def _run_converter(model: Model, proto: onnx.ModelProto, target: int) -> onnx.ModelProto:
    """ONNX's version converter on ``proto`` without its large weights, which are put back after."""
    stripped: dict[str, onnx.TensorProto] = {}
    for tensor in proto.graph.initializer:
        if tensor.data_location == onnx.TensorProto.EXTERNAL or tensor.ByteSize() >= _STRIP_BYTES:
            kept = onnx.TensorProto()
            kept.CopyFrom(tensor)
            stripped[tensor.name] = kept
            for name in ("raw_data", "float_data", "int32_data", "int64_data", "double_data", "uint64_data"):
                tensor.ClearField(name)
            del tensor.external_data[:]
            tensor.ClearField("data_location")
            tensor.raw_data = np.zeros(int(np.prod(tensor.dims, dtype=np.int64)), np.uint8)[:0].tobytes()
    try:
        converted = onnx.version_converter.convert_version(proto, target)
    except Exception as err:  # onnx raises RuntimeError / ValueError from C++
        raise _converter_error(model, proto, err, target) from err
    for tensor in converted.graph.initializer:
        original = stripped.get(tensor.name)
        if original is not None:
            tensor.CopyFrom(original)
    return converted


def _converter_error(model: Model, proto: onnx.ModelProto, err: Exception, target: int) -> EditError:
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    found = (re.search(r"(No Adapter (?:From|To) Version \$?\d+) for (\w+)", text)
             or re.search(r"(No Previous Version) of (\w+) exists", text))
    if found:
        op = found.group(2)
        nodes = [(k, n) for k, n in enumerate(proto.graph.node) if n.op_type == op and n.domain in ("", "ai.onnx")]
        why = f"ONNX's version converter has no adapter for {op} ({found.group(1)})"
        problems = [_Problem(f"main graph: {_node_label(n, k)}", why,
                             "choose a version on the same side of the operator's change, or replace the node "
                             "(replace_op) first",
                             "choose a version on the same side of the operator's change, or replace the node "
                             "(edit --replace-op) first") for k, n in nodes]
        if problems:
            return _refusal(model, target, problems)
    return EditError(f"ONNX's version converter fails on {model.name} for opset {target}: {text}",
                     hint="gk.validate(model) checks the model; choose a nearer version",
                     cli_hint="run 'python -m graphkit check' on the model; choose a nearer version")


@dataclass(frozen=True)
class _Problem:
    """Why one node cannot be converted."""

    where: str  # "main graph: name (Op)"
    reason: str
    hint: str
    cli_hint: str | None = None  # (the hint in the command line's words, where they differ)


def _node_label(node: onnx.NodeProto, position: int) -> str:
    return f"{node.name or f'#{position}'} ({node.op_type})"


def _refusal(model: Model, target: int, problems: list[_Problem]) -> EditError:
    """One error naming every node that cannot be converted, each with its reason."""
    if len(problems) == 1:
        message = f"cannot convert {problems[0].where} of {model.name} to opset {target}: {problems[0].reason}"
    else:  # (grouped by reason, every node named: a model of one era fails on many nodes at once)
        groups: dict[str, list[str]] = {}
        for p in problems:
            groups.setdefault(p.reason, []).append(p.where.removeprefix("main graph: "))
        lines = "".join(f"\n  {reason}: {', '.join(where)}" for reason, where in groups.items())
        message = f"cannot convert {len(problems)} node(s) of {model.name} to opset {target}:{lines}"
    hints = list(dict.fromkeys(p.hint for p in problems if p.hint))
    cli_hints = list(dict.fromkeys(p.cli_hint or p.hint for p in problems if p.cli_hint or p.hint))
    return EditError(message, hint="; ".join(hints) or "choose another version",
                     cli_hint="; ".join(cli_hints) or "choose another version")


def _missing_operators(proto: onnx.ModelProto, target: int) -> list[_Problem]:
    """The ai.onnx nodes (main graph, bodies, local functions) whose operator does not exist at ``target``."""
    problems = []
    places: list[tuple[str, Any]] = [(where, graph.node) for where, graph in _named_graphs(proto.graph, "main graph")]
    places += [(f"function {f.name}", f.node) for f in proto.functions if _version(f.opset_import) is not None]
    for where, nodes in places:
        for k, node in enumerate(nodes):
            if node.domain not in ("", "ai.onnx") or _since(node.op_type, target) is not None:
                continue
            first = _first_version(node.op_type)
            reason = (f"{node.op_type} does not exist before opset {first}" if first and first > target
                      else f"{node.op_type} does not exist in opset {target}")
            hint = (f"choose opset {first} or later, or replace the node ({{}}) first" if first
                    else "replace the node ({}) first")
            problems.append(_Problem(f"{where}: {_node_label(node, k)}", reason, hint.format("replace_op"),
                                     hint.format("edit --replace-op")))
    return problems


def _unfit_types(proto: onnx.ModelProto, source: int, target: int, types: dict[str, int]) -> list[_Problem]:
    """The ai.onnx nodes (main graph and bodies) whose operator changed between the versions and whose
    inputs or outputs have a type the target version does not take (an int64 Constant below 9), and
    each Scan across opset 9 (whose form changed there)."""
    problems = []
    for where, graph in _named_graphs(proto.graph, "main graph"):
        for k, node in enumerate(graph.node):
            if node.domain not in ("", "ai.onnx") or _since(node.op_type, source) == _since(node.op_type, target):
                continue
            if node.op_type == "Scan" and _crosses(9, source, target):
                problems.append(_Problem(f"{where}: {_node_label(node, k)}", _SCAN_9,
                                         "keep a version on the same side of opset 9"))
                continue
            if node.op_type == "Dropout":  # (an unread mask is dropped: see _Rewriter._down)
                node = _without_unread_mask(node, proto)
            refused = _refused_type(node, target, types)
            if refused:
                problems.append(_Problem(f"{where}: {_node_label(node, k)}", refused,
                                         f"choose a version where {node.op_type} takes it, or cast around the node"))
    return problems


_SCAN_9 = ("Scan before opset 9 takes sequence_lens and scans along a batch axis, Scan 9 and later neither, and "
           "graphkit does not rewrite one form into the other")


def _without_unread_mask(node: onnx.NodeProto, proto: onnx.ModelProto) -> onnx.NodeProto:
    if len(node.output) < 2 or not node.output[1]:
        return node
    read = {n for g in _graphs(proto.graph) for other in g.node for n in other.input}
    read |= {o.name for g in _graphs(proto.graph) for o in g.output}
    if node.output[1] in read:
        return node
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    del copy.output[1:]
    return copy


def _refused_type(node: onnx.NodeProto, target: int, types: dict[str, int]) -> str:
    """Why the target version's schema refuses one of ``node``'s input or output types ("" when none)."""
    try:
        schema = onnx.defs.get_schema(node.op_type, target, "")
    except Exception:  # onnx raises SchemaError for an op that does not exist at that version
        return ""
    allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
    for kind, names, formal in (("input", node.input, schema.inputs), ("output", node.output, schema.outputs)):
        for k, name in enumerate(names):
            elem = types.get(name) if name else None
            if not elem or not formal:
                continue
            if k < len(formal):
                param = formal[k]
            elif formal[-1].option == onnx.defs.OpSchema.FormalParameterOption.Variadic:
                param = formal[-1]
            else:
                continue
            have = f"tensor({onnx.TensorProto.DataType.Name(elem).lower()})"
            options = allowed.get(param.type_str, {param.type_str})
            if any(o.startswith("tensor(") for o in options) and have not in options:
                return f"its {kind} {name!r} is {have}, which {node.op_type} does not take in opset {target}"
    return ""


def _first_version(op: str) -> int | None:
    """The first ai.onnx version that has ``op`` (None when it was removed, or never existed)."""
    for version in range(1, onnx.defs.onnx_opset_version() + 1):
        if _since(op, version) is not None:
            return version
    return None


def _named_graphs(graph: onnx.GraphProto, where: str) -> Iterator[tuple[str, onnx.GraphProto]]:
    yield where, graph
    for node in graph.node:
        for attr in node.attribute:
            bodies = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
            for body in bodies:
                yield from _named_graphs(body, f"{where} > {node.name or node.op_type}.{attr.name}")


# ------------------------------------------------------------------------------------- rewriting


class _Unconvertible(Exception):
    """Why a node cannot be converted (collected, so that every such node is named at once)."""

    def __init__(self, reason: str, *, hint: str, cli_hint: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.hint = hint
        self.cli_hint = cli_hint


class _Rewriter:
    def __init__(self, model: Model, source: int, target: int) -> None:
        self.model = model
        self.source = source
        self.target = target
        self.rewritten: list[str] = []
        self.detached: set[str] = set()
        self.names: set[str] = set()
        for graph in _graphs(model.lazy_proto.graph):
            self.names.update(n for node in graph.node for n in (*node.input, *node.output))
            self.names.update(t.name for t in graph.initializer)
        self.initializers: Any = None
        self.problems: list[_Problem] = []
        #: Nodes to put before and after a node (by id) when its graph's node list is rebuilt.
        self.around: dict[int, tuple[list[onnx.NodeProto], list[onnx.NodeProto]]] = {}
        self._shapes: dict[str, list[int | None] | None] | None = None
        self._types: dict[str, int] | None = None
        #: Whether names are looked up in the model's shapes, or in those of ``function``'s body.
        self.shaped = True
        self.function: tuple[str, str] = ("", "")
        self._function_shapes: dict[tuple[str, str], dict[str, list[int | None] | None]] = {}
        self.main_names = {n for node in model.lazy_proto.graph.node for n in node.output} | \
            {v.name for v in model.lazy_proto.graph.input}
        for graph in _graphs(model.lazy_proto.graph):
            self.names.update(node.name for node in graph.node if node.name)
        #: Every name a node, a graph output or a local function's output reads.
        self.read = {n for g in _graphs(model.lazy_proto.graph) for node in g.node for n in node.input}
        self.read |= {o.name for g in _graphs(model.lazy_proto.graph) for o in g.output}
        for func in model.lazy_proto.functions:
            self.read |= {n for node in func.node for n in node.input} | set(func.output)

    def own(self, node: onnx.NodeProto) -> bool:
        if node.domain not in ("", "ai.onnx"):
            return False
        return (node.op_type in AXES_INPUT_SINCE or node.op_type in _OWN or node.op_type in _CONTROL
                or node.op_type == "Constant" or self.down(node) or self.legacy(node)
                or self.compatible(node))

    def legacy(self, node: onnx.NodeProto) -> bool:
        """Whether ``node`` broadcasts by the rules before opset 7 and is converted to 7 or later."""
        return self.source < 7 <= self.target and (node.op_type in _LEGACY_BROADCAST or node.op_type == "PRelu")

    def down(self, node: onnx.NodeProto) -> bool:
        """Whether graphkit converts ``node`` down itself."""
        return node.op_type in _DOWN and self.target < self.source and self.source >= _DOWN[node.op_type][0]

    def compatible(self, node: onnx.NodeProto) -> bool:
        """Whether the node is valid as it is at the target version (its operator changed only in types,
        or not at all): its attributes exist there and its inputs and outputs fit."""
        try:
            schema = onnx.defs.get_schema(node.op_type, self.target, "")
        except Exception:  # onnx raises SchemaError for an op that does not exist at that version
            return False
        if schema.deprecated:  # (Scatter from 11, Upsample from 10: ONNX's converter writes their successors)
            return False
        if _since(node.op_type, self.source) == schema.since_version:
            return True
        if any(a.name not in schema.attributes and _NEUTRAL_SET.get((node.op_type, a.name)) != _int_value(a)
               for a in node.attribute):
            return False
        if any(a.required and a.name not in {x.name for x in node.attribute} for a in schema.attributes.values()):
            return False
        try:
            source = onnx.defs.get_schema(node.op_type, self.source, "")
        except Exception:
            return False
        same = [(i.name, i.type_str) for i in source.inputs] == [(i.name, i.type_str) for i in schema.inputs] \
            and [(o.name, o.type_str) for o in source.outputs] == [(o.name, o.type_str) for o in schema.outputs] \
            and set(source.attributes) == set(schema.attributes)
        if same:
            return True
        # Only its type variables were renamed or widened (Identity 14 and 16 took sequences and
        # optionals, Pow 12 integers; ONNX's converter has no adapter down across them): it fits
        # when every input and output has a known type the target version takes.
        # (an attribute the newer version added may be left out, or set to its old meaning: Shape's start=0)
        alike = [(i.name, i.option) for i in source.inputs] == [(i.name, i.option) for i in schema.inputs] \
            and [(o.name, o.option) for o in source.outputs] == [(o.name, o.option) for o in schema.outputs] \
            and set(schema.attributes) <= set(source.attributes)
        if not alike or not self.shaped:
            return False
        if self._types is None:
            self._types = _known_types(self.model)
        if any(n and n not in self._types for n in (*node.input, *node.output)):
            return False
        return not _refused_type(node, self.target, self._types)

    # -- placeholders: the converter never sees the nodes graphkit converts

    def hide(self, graph: onnx.GraphProto) -> list[int]:
        positions = []
        for k, node in enumerate(graph.node):
            if self.own(node):
                node.domain = _PLACEHOLDER
                positions.append(k)
        return positions

    def show(self, graph: onnx.GraphProto, *, positions: bool) -> None:
        """Convert the hidden nodes; ``positions``: whether the graph's nodes are where they were in
        the model (unnamed nodes are then named by position)."""
        hidden = [n for n in graph.node if n.domain == _PLACEHOLDER]
        for node in hidden:
            node.domain = ""
        constants = self.graph_constants(graph, {})  # (after: Constant nodes are hidden too)
        # (only those: the converter's nodes are at the target already, Upsample's Resize included)
        self.graph_nodes(graph.node, "main graph", {}, constants, only=set(map(id, hidden)),
                         initializers=graph.initializer, positions=positions)

    # -- constants a rewrite may read (initializers and Constant nodes, outer scopes included)

    def graph_constants(self, graph: onnx.GraphProto, outer: dict[str, Callable[[], np.ndarray]]
                        ) -> dict[str, Callable[[], np.ndarray]]:
        found = dict(outer)
        for tensor in graph.initializer:
            found[tensor.name] = functools.partial(tensor_value, self.model, tensor)
        for node in graph.node:
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and node.attribute:
                attr = node.attribute[0]
                if attr.name == "value" and not attr.ref_attr_name:
                    found[node.output[0]] = functools.partial(numpy_helper.to_array, attr.t)
        return found

    def function_constants(self, func: onnx.FunctionProto) -> dict[str, Callable[[], np.ndarray]]:
        holder = onnx.GraphProto()
        holder.node.extend(func.node)
        return self.graph_constants(holder, {})

    # -- the walk

    def graph_nodes(self, nodes: Any, where: str, outer: dict[str, Callable[[], np.ndarray]],
                    constants: dict[str, Callable[[], np.ndarray]], only: set[int] | None = None,
                    initializers: Any = None, positions: bool = True) -> None:
        added: list[onnx.NodeProto] = []
        previous = self.initializers
        for k, node in enumerate(list(nodes)):
            self.initializers = initializers
            if only is not None and id(node) not in only:
                continue
            if node.domain not in ("", "ai.onnx"):
                continue
            label = f"{where}: " + (_node_label(node, k) if positions or node.name else f"(unnamed) ({node.op_type})")
            for attr in node.attribute:
                bodies = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
                for body in bodies:
                    inner = self.graph_constants(body, constants)
                    self.graph_nodes(body.node, f"{where} > {node.name or node.op_type}.{attr.name}", constants,
                                     inner, initializers=body.initializer)
            if node.op_type in _CONTROL:
                continue
            try:
                changed = self._rewrite(node, constants, label, added)
            except _Unconvertible as err:
                self.problems.append(_Problem(label, err.reason, err.hint, err.cli_hint))
                continue
            if changed:
                self.rewritten.append(label)
        self.initializers = previous
        self._place(nodes, added)

    def _rewrite(self, node: onnx.NodeProto, constants: dict[str, Callable[[], np.ndarray]], label: str,
                 added: list[onnx.NodeProto]) -> bool:
        """Rewrite ``node`` for the target version; whether it changed."""
        references = [a.name for a in node.attribute if a.ref_attr_name]
        if references and self._reads_attributes(node):
            raise _Unconvertible(f"its attribute(s) {references} come from the function's call, and graphkit "
                                 f"rewrites {node.op_type} from values it can read",
                                 hint="inline the function first, or keep a version on the same side of the "
                                      "operator's change")
        if node.op_type in AXES_INPUT_SINCE:
            return self._axes(node, AXES_INPUT_SINCE[node.op_type], constants, label, added)
        if node.op_type == "Split":
            moved = self._attr_input(node, 13, "split", 1, np.int64, constants, label, added)
            return self._split_count(node, added) or moved
        if node.op_type == "Clip":
            return self._clip(node, constants, label, added)
        if node.op_type == "Pad":
            return self._pad(node, constants, label, added)
        if node.op_type == "Resize":
            return self._resize(node, label, added)
        if node.op_type == "Constant":
            return self._constant_node(node, label)
        if node.op_type in _AXIS_FAMILY:
            return self._axis_family(node)
        if self.legacy(node):
            return self._legacy_broadcast(node, added)
        if self.down(node):
            return self._down(node, constants, label)
        if _changes(node, self.source, self.target) and not self.compatible(node):
            self._check_compatible(node, label)
        if _changes(node, self.source, self.target):  # (attributes the target lacks, at their old meaning)
            schema = onnx.defs.get_schema(node.op_type, self.target, "")
            dropped = [a for a in node.attribute if a.name not in schema.attributes]
            for attr in dropped:
                node.attribute.remove(attr)
            return bool(dropped)
        return False

    def _reads_attributes(self, node: onnx.NodeProto) -> bool:
        """Whether rewriting ``node`` reads its attributes' values (which a function's call may give)."""
        op = node.op_type
        since = AXES_INPUT_SINCE.get(op) or _OWN.get(op)
        if since is not None and _crosses(since, self.source, self.target):
            return True
        if op in _AXIS_FAMILY and self.target < 11:
            return True
        if op == "Constant":
            return self.target < 12 and node.attribute[0].name != "value"
        return self.down(node)

    def _place(self, nodes: Any, added: list[onnx.NodeProto]) -> None:
        """Constant nodes made for inputs go first (they read nothing); nodes made around a node go
        right before and after it."""
        arounds = [self.around.pop(id(n), None) for n in nodes]
        if not added and not any(arounds):
            return
        ordered = list(added)
        for node, around in zip(list(nodes), arounds):
            before, after = around or ([], [])
            ordered += [*before, node, *after]
        copies = []
        for node in ordered:
            clone = onnx.NodeProto()
            clone.CopyFrom(node)
            copies.append(clone)
        del nodes[:]
        nodes.extend(copies)

    def _check_compatible(self, node: onnx.NodeProto, label: str) -> None:
        try:
            schema = onnx.defs.get_schema(node.op_type, self.target, "")
        except Exception as err:
            raise _Unconvertible("the operator does not exist there",
                            hint="choose another version") from err
        unknown = [a.name for a in node.attribute if a.name not in schema.attributes]
        if unknown:
            raise _Unconvertible(f"attribute(s) {unknown} do not exist "
                            f"there and graphkit has no rewrite for {node.op_type} inside a body or function",
                            hint="convert to a version on the same side of the operator's change")

    # -- rewrites

    def _constant(self, name: str, constants: dict[str, Callable[[], np.ndarray]], label: str, what: str) -> np.ndarray:
        reader = constants.get(name)
        if reader is None:
            raise _Unconvertible(f"its {what} {name!r} is computed at run "
                            "time and cannot become an attribute",
                            hint="fold it into a constant first (fold_constants), or keep a version where "
                                 "it is an input",
                            cli_hint="fold it into a constant first (edit --fold-constants), or keep a version where "
                                     "it is an input")
        return np.asarray(reader())

    def _input_constant(self, value: np.ndarray, base: str, added: list[onnx.NodeProto]) -> str:
        name = self._fresh(base)
        if self.initializers is not None:  # (a graph: a weight, which no opset version constrains)
            self.initializers.append(numpy_helper.from_array(value, name))
        else:  # (a local function holds no initializers)
            added.append(onnx.helper.make_node("Constant", [], [name], name=self._fresh(f"{base}/Constant"),
                                               value=numpy_helper.from_array(value, name)))
        return name

    def _fresh(self, base: str) -> str:
        name, k = base, 1
        while name in self.names:
            k += 1
            name = f"{base}_{k}"
        self.names.add(name)
        return name

    def _axes(self, node: onnx.NodeProto, since: int, constants: dict[str, Callable[[], np.ndarray]], label: str,
              added: list[onnx.NodeProto]) -> bool:
        return self._attr_input(node, since, "axes", 1, np.int64, constants, label, added)

    def _attr_input(self, node: onnx.NodeProto, since: int, attr: str, position: int, dtype: type,
                    constants: dict[str, Callable[[], np.ndarray]], label: str, added: list[onnx.NodeProto]) -> bool:
        direction = _crosses(since, self.source, self.target)
        if direction > 0:
            found = next((a for a in node.attribute if a.name == attr), None)
            if found is None:
                return False
            values: np.ndarray = np.asarray(list(found.ints), dtype)
            node.attribute.remove(found)
            while len(node.input) < position:
                node.input.append("")
            name = self._input_constant(values, f"{node.name or node.op_type}/{attr}", added)
            if len(node.input) == position:
                node.input.append(name)
            else:
                node.input.insert(position, name)
            return True
        if direction < 0:
            if len(node.input) <= position or not node.input[position]:
                return False
            values = self._constant(node.input[position], constants, label, attr)
            self.detached.add(node.input[position])
            del node.input[position]
            node.attribute.append(onnx.helper.make_attribute(attr, [int(v) for v in values.reshape(-1)]))
            if node.op_type.startswith("Reduce"):
                noop = next((a for a in node.attribute if a.name == "noop_with_empty_axes"), None)
                if noop is not None:
                    node.attribute.remove(noop)
            if node.op_type == "Split":
                extra = next((a for a in node.attribute if a.name == "num_outputs"), None)
                if extra is not None:
                    node.attribute.remove(extra)
            return True
        return False

    def _split_count(self, node: onnx.NodeProto, added: list[onnx.NodeProto]) -> bool:
        """Split without sizes across 18, where ``num_outputs`` became required (the last chunk may
        then be smaller); before 18 the axis splits evenly."""
        direction = _crosses(18, self.source, self.target)
        sized = (len(node.input) > 1 and bool(node.input[1])) or any(a.name == "split" for a in node.attribute)
        count = next((a for a in node.attribute if a.name == "num_outputs"), None)
        if direction > 0 and not sized and count is None:
            node.attribute.append(onnx.helper.make_attribute("num_outputs", len(node.output)))
            return True
        if direction >= 0 or count is None:
            return False
        node.attribute.remove(count)
        if sized:
            return True
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        dims = self._dims(node.input[0])
        size = dims[axis] if dims is not None and -len(dims) <= axis < len(dims) else None
        if size is None:
            raise _Unconvertible(f"it splits an axis of unknown size into num_outputs={count.i} chunks (the last may "
                                 "be smaller), and before opset 18 Split needs the sizes or an even split",
                                 hint="give the graph inputs full shapes first")
        chunk = -(-size // count.i)
        if size % count.i:
            sizes = [chunk] * (count.i - 1) + [size - chunk * (count.i - 1)]
            if self.target >= 13:
                node.input.append(self._input_constant(np.asarray(sizes, np.int64),
                                                       f"{node.name or node.op_type}/split", added))
            else:
                node.attribute.append(onnx.helper.make_attribute("split", sizes))
        return True

    def _clip(self, node: onnx.NodeProto, constants: dict[str, Callable[[], np.ndarray]], label: str,
              added: list[onnx.NodeProto]) -> bool:
        direction = _crosses(11, self.source, self.target)
        if direction > 0:
            bounds = {a.name: a.f for a in node.attribute if a.name in ("min", "max")}
            if not bounds:
                return False
            del node.attribute[:]
            names = []
            for key in ("min", "max"):
                names.append(self._input_constant(np.array(bounds[key], np.float32), f"{node.name or 'Clip'}/{key}",
                                                  added) if key in bounds else "")
            node.input.extend(names)
            while node.input and not node.input[-1]:
                del node.input[-1]
            return True
        if direction < 0:
            changed = False
            for position, key in ((1, "min"), (2, "max")):
                if len(node.input) > position and node.input[position]:
                    value = self._constant(node.input[position], constants, label, key)
                    self.detached.add(node.input[position])
                    node.attribute.append(onnx.helper.make_attribute(key, float(value.reshape(-1)[0])))
                    changed = True
            del node.input[1:]
            return changed
        return False

    def _pad(self, node: onnx.NodeProto, constants: dict[str, Callable[[], np.ndarray]], label: str,
             added: list[onnx.NodeProto]) -> bool:
        if self.target < 18 <= self.source and len(node.input) > 3 and node.input[3]:
            full = self._pads_of_every_axis(node, constants, label)
            self.detached.update(node.input[1:2] + node.input[3:4])
            del node.input[3:]
            if self.target >= 11:
                node.input[1] = self._input_constant(full, f"{node.name or 'Pad'}/pads", added)
                return True
            constants = {**constants, "": lambda: full}
            node.input[1] = ""  # (read back below from ``constants``)
        direction = _crosses(11, self.source, self.target)
        if direction > 0:
            pads = next((a for a in node.attribute if a.name == "pads"), None)
            if pads is None:
                return False
            value = next((a.f for a in node.attribute if a.name == "value"), 0.0)
            for attr in [a for a in node.attribute if a.name in ("pads", "value")]:
                node.attribute.remove(attr)
            node.input.append(self._input_constant(np.asarray(list(pads.ints), np.int64),
                                                   f"{node.name or 'Pad'}/pads", added))
            if value:
                node.input.append(self._input_constant(np.array(value, np.float32),
                                                       f"{node.name or 'Pad'}/value", added))
            return True
        if direction < 0:
            if len(node.input) > 3 and node.input[3]:
                raise _Unconvertible("its axes input has no attribute form",
                                hint="keep opset 18 or later for Pad with axes")
            pads = self._constant(node.input[1], constants, label, "pads")
            self.detached.update(node.input[1:3])
            node.attribute.append(onnx.helper.make_attribute("pads", [int(v) for v in pads.reshape(-1)]))
            if len(node.input) > 2 and node.input[2]:
                value = self._constant(node.input[2], constants, label, "constant_value")
                node.attribute.append(onnx.helper.make_attribute("value", float(value.reshape(-1)[0])))
            del node.input[1:]
            return True
        return False

    def _resize_down_18(self, node: onnx.NodeProto) -> bool:
        """Resize below 18 and 19: what they added is dropped where it means the older behaviour (no
        antialias, keep_aspect_ratio_policy "stretch", axes of every dim in order) and refused otherwise."""
        if not self.target < 18 <= self.source and not self.target < 19 <= self.source:
            return False
        attrs = {a.name: a for a in node.attribute}
        mode = attrs["coordinate_transformation_mode"].s.decode() if "coordinate_transformation_mode" in attrs else ""
        if self.target < 19 <= self.source and mode == "half_pixel_symmetric":
            raise _Unconvertible("coordinate_transformation_mode 'half_pixel_symmetric' has no form before opset 19",
                                 hint="keep opset 19 or later")
        if self.target >= 18:
            return False
        dims = self._dims(node.input[0])
        neutral = {"antialias": lambda a: a.i == 0,
                   "keep_aspect_ratio_policy": lambda a: a.s.decode() == "stretch",
                   "axes": lambda a: dims is not None and [int(x) % len(dims) for x in a.ints] == list(range(len(dims)))}
        changed = False
        for name, holds in neutral.items():
            if name in attrs:
                if not holds(attrs[name]):
                    raise _Unconvertible(f"its {name} has no form before opset 18", hint="keep opset 18 or later")
                node.attribute.remove(attrs[name])
                changed = True
        return changed

    def _pads_of_every_axis(self, node: onnx.NodeProto, constants: dict[str, Callable[[], np.ndarray]],
                            label: str) -> np.ndarray:
        """Pad 18's pads for its ``axes`` as the pads of every axis (0 for the others), as before 18."""
        axes = self._constant(node.input[3], constants, label, "axes").reshape(-1)
        pads = self._constant(node.input[1], constants, label, "pads").reshape(-1)
        dims = self._dims(node.input[0])
        if dims is None:
            raise _Unconvertible("its axes input needs the data's rank to become pads of every axis, and the rank "
                                 "is unknown", hint="keep opset 18 or later, or give the graph inputs full shapes")
        rank = len(dims)
        full = np.zeros(2 * rank, np.int64)
        for k, axis in enumerate(int(a) % rank for a in axes):
            full[axis], full[rank + axis] = pads[k], pads[len(axes) + k]
        return full

    def _constant_node(self, node: onnx.NodeProto, label: str) -> bool:
        """Below opset 12 a Constant holds only ``value`` (a tensor): value_float(s)/int(s) become one."""
        if self.target >= 12 or not node.attribute or node.attribute[0].name == "value":
            return False
        attr = node.attribute[0]
        kinds = {"value_float": np.float32, "value_floats": np.float32, "value_int": np.int64, "value_ints": np.int64}
        if attr.name not in kinds:
            raise _Unconvertible(f"its {attr.name} has no form there",
                            hint="keep opset 12 or later")
        value = onnx.helper.get_attribute_value(attr)
        tensor = numpy_helper.from_array(np.asarray(value, kinds[attr.name]))
        del node.attribute[:]
        node.attribute.append(onnx.helper.make_attribute("value", tensor))
        return True

    def _axis_family(self, node: onnx.NodeProto) -> bool:
        """Softmax, LogSoftmax and Hardmax across opset 13, and their negative axes below 11.

        Before 13 the operator views its input as 2-D at ``axis`` (``[prod(dims[:axis]),
        prod(dims[axis:])]``) and normalizes each row; from 13 it normalizes along ``axis`` alone. A
        row of the 2-D view holds the elements sharing their indices before ``axis``; a line along
        ``axis`` those sharing every index but the axis's. The two are the same sets exactly when
        every dim after ``axis`` is 1 (the indices after it are then all 0), which includes ``axis``
        being the last: then only the axis is written out (its default moved from 1 to -1).
        Otherwise, going up, Flatten at ``axis`` makes the 2-D view, the operator runs on its last
        axis and Reshape restores the shape; going down, Transpose moves ``axis`` last, where the
        2-D view is that one axis, and back.
        """
        old_source, old_target = self.source < 13, self.target < 13
        attr = next((a for a in node.attribute if a.name == "axis"), None)
        axis = int(attr.i) if attr is not None else (1 if old_source else -1)
        dims = self._dims(node.input[0]) if node.input else None
        rank = len(dims) if dims is not None else None
        position = axis + rank if rank is not None and axis < 0 else axis
        same = axis == -1 or (dims is not None and all(d == 1 for d in dims[position + 1:]))
        if old_source == old_target or same:
            if self.target < 11 and axis < 0:  # (negative axes exist from opset 11)
                if rank is None:
                    raise _Unconvertible(f"its axis {axis} is negative, which opset {self.target} does not allow, "
                                         f"and the rank of {node.input[0]!r} is unknown",
                                         hint="give the model's inputs static ranks first (set_dims), or "
                                              "keep opset 11 or later",
                                         cli_hint="give the model's inputs static ranks first (edit --fixed), or "
                                                  "keep opset 11 or later")
                return self._set_axis(node, position)
            return self._set_axis(node, axis) if old_source != old_target else False
        if not old_target:
            self._flatten_around(node, axis)
            return True
        if rank is None:
            raise _Unconvertible(f"before opset 13 {node.op_type} normalizes over every dim from its axis on, and "
                                 f"the rank of {node.input[0]!r} is unknown, so the axis cannot be moved last",
                                 hint="give the model's inputs static ranks first (set_dims), or keep "
                                      "opset 13 or later",
                                 cli_hint="give the model's inputs static ranks first (edit --fixed), or keep "
                                          "opset 13 or later")
        self._transpose_around(node, position, rank)
        return True

    def _down(self, node: onnx.NodeProto, constants: dict[str, Callable[[], np.ndarray]], label: str) -> bool:
        """Reshape, BatchNormalization, Dropout, MaxPool and AveragePool down: what their newer forms added is dropped where
        it is at the value that means the older behaviour, and refused otherwise (named)."""
        op = node.op_type
        oldest = _DOWN[op][1]
        if self.target < oldest:
            raise _Unconvertible(f"graphkit converts {op} down to opset {oldest}, not below",
                                 hint=f"choose opset {oldest} or later")
        attrs = {a.name: a for a in node.attribute}
        changed = False
        if op == "Reshape" and self.target < 14 and "allowzero" in attrs and attrs["allowzero"].i:
            shape = self._constant(node.input[1], constants, label, "shape")
            if (shape == 0).any():
                raise _Unconvertible("allowzero=1 with a 0 in its shape has no form before opset 14 (a 0 "
                                     "there copies the input's dim)", hint="keep opset 14 or later")
            node.attribute.remove(attrs.pop("allowzero"))  # (no 0 in the shape: allowzero changes nothing)
            changed = True
        for (name, version), neutral in _NEUTRAL.items():
            if name != op or not self.target < version <= self.source:
                continue
            for key, value in neutral.items():
                if key not in attrs:
                    continue
                found = onnx.helper.get_attribute_value(attrs[key])
                if any(int(v) != value for v in (found if isinstance(found, list) else [found])):
                    raise _Unconvertible(f"{key}={found} has no form before opset {version}",
                                         hint=f"keep opset {version} or later")
                node.attribute.remove(attrs.pop(key))
                changed = True
        if op == "BatchNormalization" and self.target < 14 <= self.source:
            if any(node.output[1:]):
                raise _Unconvertible("its running mean and variance outputs have no form before opset 14",
                                     hint="keep opset 14 or later, or remove those outputs")
            changed = changed or len(node.output) > 1
            del node.output[1:]
        if op == "Dropout" and self.target < 12 <= self.source:
            changed = self._dropout_down(node, attrs, constants, label)
        if op == "Dropout" and self.target < 10 and len(node.output) > 1 and node.output[1]:
            if node.output[1] in self.read:
                raise _Unconvertible("its mask output is bool from opset 10 and of the data's type before",
                                     hint="keep opset 10 or later, or remove the mask output")
            del node.output[1:]  # (nothing reads it)
            changed = True
        return changed

    def _dropout_down(self, node: onnx.NodeProto, attrs: dict[str, onnx.AttributeProto],
                      constants: dict[str, Callable[[], np.ndarray]], label: str) -> bool:
        """Dropout 12's ratio and training_mode inputs back to opset 10's ratio attribute (inference only)."""
        if len(node.input) > 2 and node.input[2]:
            training = self._constant(node.input[2], constants, label, "training_mode")
            if bool(training.reshape(-1)[0]):
                raise _Unconvertible("training_mode true has no form before opset 12", hint="keep opset 12 or later")
            self.detached.add(node.input[2])
        if len(node.input) > 1 and node.input[1]:
            ratio = self._constant(node.input[1], constants, label, "ratio")
            self.detached.add(node.input[1])
            node.attribute.append(onnx.helper.make_attribute("ratio", float(ratio.reshape(-1)[0])))
        del node.input[1:]
        if "seed" in attrs:  # (no randomness without training)
            node.attribute.remove(attrs["seed"])
        return True

    @staticmethod
    def _set_axis(node: onnx.NodeProto, axis: int) -> bool:
        attr = next((a for a in node.attribute if a.name == "axis"), None)
        if attr is not None and attr.i == axis:
            return False
        if attr is None:
            node.attribute.append(onnx.helper.make_attribute("axis", axis))
        else:
            attr.i = axis
        return True

    def _flatten_around(self, node: onnx.NodeProto, axis: int) -> None:
        """Opset 13's ``node`` computing the old meaning: Flatten at ``axis``, the last axis, Reshape back."""
        source, result = node.input[0], node.output[0]
        base = node.name or node.op_type
        flat, flat_out, shape = self._fresh(f"{source}/2d"), self._fresh(f"{result}/2d"), self._fresh(f"{source}/shape")
        before = [onnx.helper.make_node("Flatten", [source], [flat], name=self._fresh(f"{base}/Flatten"), axis=axis),
                  onnx.helper.make_node("Shape", [source], [shape], name=self._fresh(f"{base}/Shape"))]
        reshape = onnx.helper.make_node("Reshape", [flat_out, shape], [result], name=self._fresh(f"{base}/Reshape"))
        if self.target >= 14:  # (a 0 in the shape is a 0, not "copy the dim")
            reshape.attribute.append(onnx.helper.make_attribute("allowzero", 1))
        node.input[0], node.output[0] = flat, flat_out
        self._set_axis(node, 1)
        self.around[id(node)] = (before, [reshape])

    def _transpose_around(self, node: onnx.NodeProto, position: int, rank: int) -> None:
        """The old ``node`` computing opset 13's meaning: Transpose ``position`` last, normalize, Transpose back."""
        source, result = node.input[0], node.output[0]
        base = node.name or node.op_type
        perm = [k for k in range(rank) if k != position] + [position]
        back = [int(k) for k in np.argsort(perm)]
        moved, moved_out = self._fresh(f"{source}/axis_last"), self._fresh(f"{result}/axis_last")
        before = onnx.helper.make_node("Transpose", [source], [moved], name=self._fresh(f"{base}/Transpose"), perm=perm)
        after = onnx.helper.make_node("Transpose", [moved_out], [result], name=self._fresh(f"{base}/Transpose_back"),
                                      perm=back)
        node.input[0], node.output[0] = moved, moved_out
        self._set_axis(node, rank - 1)
        self.around[id(node)] = ([before], [after])

    def _legacy_broadcast(self, node: onnx.NodeProto, added: list[onnx.NodeProto]) -> bool:
        """``node`` broadcasting as numpy does (opset 7): ``B`` given trailing 1-dims where ``axis``
        placed it before the end of ``A``; PRelu's per-channel slope [C] made [C, 1, ...]."""
        if node.op_type == "PRelu":
            x, slope = self._dims(node.input[0]), self._dims(node.input[1])
            if x is None or slope is None:
                raise _Unconvertible("the ranks of its inputs are unknown, and before opset 7 a slope of shape [C] "
                                     "applies per channel (axis 1)", hint="give the graph inputs full shapes first")
            if len(slope) != 1 or len(x) <= 2 or slope[0] == 1:
                return False
            self._unsqueeze(node, 1, list(range(1, len(x) - 1)), added)
            return True
        attrs = {a.name: a for a in node.attribute if a.name in ("broadcast", "axis")}
        for attr in attrs.values():
            node.attribute.remove(attr)
        if not attrs.get("broadcast") or not attrs["broadcast"].i or "axis" not in attrs:
            return bool(attrs)
        a, b = self._dims(node.input[0]), self._dims(node.input[1])
        if a is None or b is None:
            raise _Unconvertible("the ranks of its inputs are unknown, and before opset 7 'axis' places B inside A",
                                 hint="give the graph inputs full shapes first")
        axis = attrs["axis"].i + len(a) if attrs["axis"].i < 0 else attrs["axis"].i
        trailing = len(a) - axis - len(b)
        if trailing > 0 and not all(d == 1 for d in b):
            self._unsqueeze(node, 1, list(range(len(b), len(b) + trailing)), added)
        return True

    def _unsqueeze(self, node: onnx.NodeProto, position: int, axes: list[int], added: list[onnx.NodeProto]) -> None:
        """Put an Unsqueeze (at the target version) of ``axes`` before ``node``'s input ``position``."""
        source = node.input[position]
        base = node.name or node.op_type
        result = self._fresh(f"{source}/unsqueezed")
        if self.target >= AXES_INPUT_SINCE["Unsqueeze"]:
            axes_name = self._input_constant(np.asarray(axes, np.int64), f"{base}/unsqueeze_axes", added)
            unsqueeze = onnx.helper.make_node("Unsqueeze", [source, axes_name], [result],
                                              name=self._fresh(f"{base}/Unsqueeze"))
        else:
            unsqueeze = onnx.helper.make_node("Unsqueeze", [source], [result], name=self._fresh(f"{base}/Unsqueeze"),
                                              axes=axes)
        node.input[position] = result
        before, after = self.around.get(id(node), ([], []))
        self.around[id(node)] = ([*before, unsqueeze], after)

    def _dims(self, name: str) -> list[int | None] | None:
        """The dims of ``name`` (None for an unknown dim), or None when its rank is unknown or it is a
        local function's (whose types depend on the call)."""
        if not self.shaped:
            if self.function not in self._function_shapes:
                self._function_shapes[self.function] = _function_shapes(self.model, self.function)
            return self._function_shapes[self.function].get(name)
        if self._shapes is None:
            self._shapes = _known_shapes(self.model)
        if self._shapes.get(name) is None and name in self.main_names:
            found = tensor_types(Source(self.model), [name], observe=False).types.get(name)
            self._shapes[name] = _dims_of(found) if found is not None else None
        return self._shapes.get(name)

    def _resize(self, node: onnx.NodeProto, label: str, added: list[onnx.NodeProto]) -> bool:
        dropped = self._resize_down_18(node)
        direction = _crosses(11, self.source, self.target)
        attrs = {a.name: a for a in node.attribute}
        if direction > 0:  # (opset 10's Resize and Upsample scale from the corner: asymmetric, nearest floors)
            roi = self._input_constant(np.zeros(0, np.float32), f"{node.name or 'Resize'}/roi", added)
            node.input.insert(1, roi)
            node.attribute.append(onnx.helper.make_attribute("coordinate_transformation_mode", "asymmetric"))
            mode = attrs["mode"].s.decode() if "mode" in attrs else "nearest"
            if mode == "nearest":
                node.attribute.append(onnx.helper.make_attribute("nearest_mode", "floor"))
            return True
        if direction < 0:
            transform = attrs["coordinate_transformation_mode"].s.decode() if "coordinate_transformation_mode" in attrs \
                else "half_pixel"
            mode = attrs["mode"].s.decode() if "mode" in attrs else "nearest"
            nearest = attrs["nearest_mode"].s.decode() if "nearest_mode" in attrs else "round_prefer_floor"
            sizes = len(node.input) > 3 and node.input[3]
            if transform != "asymmetric" or (mode == "nearest" and nearest != "floor") or sizes \
                    or len(node.input) < 3 or not node.input[2] or mode == "cubic":
                raise _Unconvertible(
                    f"opset 10's Resize has only scales, "
                    f"asymmetric coordinates and flooring nearest, and this one uses coordinate_transformation_mode "
                    f"{transform!r}, mode {mode!r}" + (f", nearest_mode {nearest!r}" if mode == "nearest" else "")
                    + (", sizes" if sizes else ""),
                    hint="keep opset 11 or later for this model")
            scales = node.input[2]
            del node.input[1:]
            node.input.append(scales)
            for attr in [a for a in node.attribute if a.name != "mode"]:
                node.attribute.remove(attr)
            return True
        return dropped


def _inferred(model: Model) -> onnx.ModelProto:
    """A weightless copy of the model with what ONNX shape inference proves in its value_info."""
    proto = weightless(Source(model))
    try:
        return infer_proto(proto, data_prop=True)
    except Exception as err:  # (inference fails on some valid models: keep what is declared)
        log.debug("shape inference failed: %s", err)
        return proto


def _declare_hidden_outputs(model: Model, graph: onnx.GraphProto) -> set[str]:
    """Declare in ``graph``'s value_info the types ONNX inference proves for the outputs of the nodes
    hidden from the version converter, which cannot infer through them (its broadcasting adapters
    need the shapes of what they read: Add(6) reading a Constant's output). Returns the names declared."""
    hidden = {o for node in graph.node if node.domain == _PLACEHOLDER for o in node.output if o}
    declared = {v.name for v in (*graph.input, *graph.output, *graph.value_info)}
    added = set()
    for info in _inferred(model).graph.value_info:
        if info.name in hidden and info.name not in declared and _dims_of(info.type) is not None:
            graph.value_info.append(info)
            added.add(info.name)
    return added


def _known_types(model: Model) -> dict[str, int]:
    """The element types of the tensors of the main graph and its bodies, where known."""
    proto = _inferred(model)
    types: dict[str, int] = {}
    for graph in (*_graphs(proto.graph), *_graphs(model.lazy_proto.graph)):
        for info in (*graph.input, *graph.output, *graph.value_info):
            if info.type.HasField("tensor_type") and info.type.tensor_type.elem_type:
                types[info.name] = info.type.tensor_type.elem_type
        for tensor in graph.initializer:
            types[tensor.name] = tensor.data_type
        for node in graph.node:
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and node.attribute \
                    and node.attribute[0].type == onnx.AttributeProto.TENSOR:
                types[node.output[0]] = node.attribute[0].t.data_type
    return types


def _known_shapes(model: Model) -> dict[str, list[int | None] | None]:
    """The dims of the tensors of the main graph and its bodies that ONNX shape inference proves."""
    proto = _inferred(model)
    shapes: dict[str, list[int | None] | None] = {}
    for graph in (*_graphs(proto.graph), model.lazy_proto.graph):
        for info in (*graph.input, *graph.output, *graph.value_info):
            dims = _dims_of(info.type)
            if dims is not None or info.name not in shapes:
                shapes[info.name] = dims
        for tensor in graph.initializer:
            shapes[tensor.name] = [int(d) for d in tensor.dims]
    return shapes


def _function_shapes(model: Model, key: tuple[str, str]) -> dict[str, list[int | None] | None]:
    """The dims inside the local function ``key`` (domain, name), by ONNX shape inference on its body
    with the types each call in the main graph or its bodies passes in; a dim the calls disagree on is
    unknown, and so is the rank of a tensor they disagree on or of a function only functions call."""
    source = model.lazy_proto
    func = next(f for f in source.functions if (f.domain, f.name) == key)
    types: dict[str, onnx.TypeProto] = {}
    inferred = _inferred(model)
    for graph in (*_graphs(inferred.graph), *_graphs(source.graph)):
        for info in (*graph.input, *graph.output, *graph.value_info):
            if info.type.HasField("tensor_type"):
                types[info.name] = info.type
    merged: dict[str, list[int | None] | None] | None = None
    for graph in _graphs(source.graph):
        for call in graph.node:
            if (call.domain, call.op_type) != key:
                continue
            body = _body_shapes(source, func, call, types)
            if merged is None:
                merged = body
                continue
            for name in set(merged) | set(body):
                a, b = merged.get(name), body.get(name)
                merged[name] = None if a is None or b is None or len(a) != len(b) else \
                    [x if x == y else None for x, y in zip(a, b)]
    return merged or {}


def _body_shapes(source: onnx.ModelProto, func: onnx.FunctionProto, call: onnx.NodeProto,
                 types: dict[str, onnx.TypeProto]) -> dict[str, list[int | None] | None]:
    """The dims inside ``func`` as ``call`` calls it (attribute references left out: inference skips them)."""
    graph = onnx.GraphProto(name=func.name)
    graph.node.extend(func.node)
    for name, given in zip(func.input, call.input):
        info = graph.input.add()
        info.name = name
        if given in types:
            info.type.CopyFrom(types[given])
    holder = function_holder(source, func, graph)
    try:
        holder = infer_proto(holder, data_prop=True)
    except Exception as err:  # (onnx raises InferenceError and others from C++)
        log.debug("shape inference of function %s failed: %s", func.name, err)
    return {info.name: _dims_of(info.type) for info in (*holder.graph.input, *holder.graph.value_info)}


def _dims_of(tp: onnx.TypeProto) -> list[int | None] | None:
    if not tp.HasField("tensor_type") or not tp.tensor_type.HasField("shape"):
        return None
    return [int(d.dim_value) if d.HasField("dim_value") else None for d in tp.tensor_type.shape.dim]


def _drop_unread(graph: onnx.GraphProto, names: set[str]) -> None:
    """Remove the initializers and Constant nodes among ``names`` that nothing reads any more."""
    if not names:
        return
    read = {n for g in _graphs(graph) for node in g.node for n in node.input} | {o.name for o in graph.output}
    gone = names - read
    for g in _graphs(graph):
        keep = [t for t in g.initializer if t.name not in gone]
        if len(keep) != len(g.initializer):
            del g.initializer[:]
            g.initializer.extend(keep)
        nodes = [n for n in g.node if not (n.op_type == "Constant" and n.output and n.output[0] in gone)]
        if len(nodes) != len(g.node):
            del g.node[:]
            g.node.extend(nodes)


def _drop_unread_in_function(func: onnx.FunctionProto, names: set[str]) -> None:
    """Remove the Constant nodes among ``names`` that nothing in ``func`` reads any more."""
    holder = onnx.GraphProto()
    holder.node.extend(func.node)
    read = {n for g in _graphs(holder) for node in g.node for n in node.input} | set(func.output)
    nodes = [n for n in func.node if not (n.op_type == "Constant" and n.output and n.output[0] in names - read)]
    if len(nodes) != len(func.node):
        del func.node[:]
        func.node.extend(nodes)


def _graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _graphs(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for sub in attr.graphs:
                    yield from _graphs(sub)

