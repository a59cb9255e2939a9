"""Shape inference as a verb: a type for every tensor of a model, subgraph bodies included.

``infer_shapes`` writes value_info for every intermediate tensor of every graph (If/Loop/Scan
bodies too) and the types of the graph outputs, from the typing engine's sources in its order:

1. ONNX shape inference (strict, with data propagation) on a ``weightless`` copy of the whole
   model, with the model's declared intermediate types set aside, so a stale one cannot win;
2. ONNX Runtime's symbolic shape inference for main-graph dims ONNX leaves unknown
   (``_typing.symbolic_types``, which bounds its cost);
3. one observed run for the rank of main-graph tensors still unranked (``_typing.tensor_types``).

Dims stay symbolic: a dim derived from an input's ``batch`` stays ``batch``; a dim no source can
size gets a fresh name (``unk_1``), never a blank. A declared type that contradicts inference is
replaced and reported; a declared type where inference says nothing is kept (custom ops' outputs
are typed only by what the model declares). A contradiction in the model itself (an Add of [3]
and [4]) is an error naming the node and what it reads. Weights are never read.

``refresh_types`` is the same pass for an edit's result: it re-derives the types an edit made
stale and says which declared shapes changed.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field

import onnx

from graphkit import _check_args as argcheck
from graphkit._graph import node_label
from graphkit._model import Model, iter_graphs
from graphkit._summary import dtype_name
from graphkit._typing import (
    DimNamer,
    Source,
    has_dtype,
    infer_proto,
    is_anonymous,
    symbolic_types,
    tensor_types,
    type_dims,
    value_info_of,
    weightless,
)
from graphkit._validate import check_or_raise
from graphkit.errors import InvalidModelError

__all__ = ["Retyped", "ShapeInference", "Untyped", "change_text", "changed_outputs", "describe_type", "infer_shapes",
           "infer_shapes_with_report", "refresh_types"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Retyped:
    """A declared type that inference contradicts, and what replaced it.

    Attributes:
        tensor: The tensor.
        graph: Where it lives ("main graph", or the body's path).
        kind: "value_info", "output" or "body input".
        before: The declared type (``float32[1,3,4,4]``).
        after: The type written instead.
    """

    tensor: str
    graph: str
    kind: str
    before: str
    after: str

    def to_dict(self) -> dict[str, str]:
        return {"tensor": self.tensor, "graph": self.graph, "kind": self.kind, "before": self.before,
                "after": self.after}


@dataclass(frozen=True)
class Untyped:
    """A node output that no source could type (or rank).

    Attributes:
        tensor: The tensor.
        node: The node that makes it (its name, or ``#index`` when unnamed).
        op_type: The node's operator, ``domain::Op`` outside the standard domain.
        graph: Where the node lives.
        reason: Why: a custom domain without a schema, or inference could not tell.
    """

    tensor: str
    node: str
    op_type: str
    graph: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"tensor": self.tensor, "node": self.node, "op_type": self.op_type, "graph": self.graph,
                "reason": self.reason}


@dataclass(frozen=True)
class ShapeInference:
    """What ``infer_shapes_with_report`` found.

    Attributes:
        model: The model with every type it could find written in.
        typed: How many node outputs (every graph) have a dtype and a shape.
        untyped: The node outputs without one, by node.
        replaced: Declared types that inference contradicted, and what replaced them.
        symbolic: Whether ONNX Runtime's symbolic inference sized dims ONNX left unknown.
    """

    model: Model = field(repr=False)
    typed: int
    untyped: tuple[Untyped, ...]
    replaced: tuple[Retyped, ...]
    symbolic: bool = False

    def to_dict(self) -> dict[str, object]:
        return {"typed": self.typed, "untyped": len(self.untyped), "replaced": len(self.replaced),
                "symbolic": self.symbolic,
                "untyped_tensors": [u.to_dict() for u in self.untyped],
                "replaced_types": [r.to_dict() for r in self.replaced]}


def infer_shapes(model: Model, /, *, observe: bool = True, check: bool = True) -> Model:
    """The model with a type for every tensor of every graph (see ``infer_shapes_with_report``)."""
    return infer_shapes_with_report(model, observe=observe, check=check).model


def infer_shapes_with_report(model: Model, /, *, observe: bool = True, check: bool = True) -> ShapeInference:
    """Type every intermediate tensor (subgraph bodies too), and say what was typed, replaced or left.

    Value_info is written for every node output that is not a graph output; graph outputs and body
    inputs/outputs get their inferred types. Dynamic dims stay named; unknown ones get fresh names.
    Weights are never read, so a model of any size with external data costs what its graph costs.

    Args:
        model: The model (not modified).
        observe: When inference leaves a main-graph tensor unranked, run the model once in ONNX
            Runtime to observe its dtype and rank (its dims are then named, never sized).
        check: Validate the result (onnx.checker's full check and graphkit's checks).

    Returns:
        The typed model, with counts and lists of what was untyped and what was replaced.

    Raises:
        InvalidModelError: Inference finds a contradiction in the model itself (the message names the
            node and the types it reads), or the result fails validation.
    """
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    argcheck.boolean(observe, "observe")
    argcheck.boolean(check, "check")
    result = _infer(model, observe=observe)
    if check:
        check_or_raise(result.model, what="the model after shape inference")
    return result


def refresh_types(model: Model, *, keep: Collection[str] = (), label: str | None = None,
                  forget: Collection[int] = ()) -> tuple[Model, tuple[Retyped, ...]]:
    """Re-derive the declared types an edit made stale: the edited model with its value_info, graph
    output and body input/output types inferred afresh (``keep``: main-graph outputs whose declared
    type the edit set), and the declared types that changed. Only tensors that had value_info get
    one. A contradiction raises InvalidModelError naming the node (``label`` names the model).
    ``forget``: declared sizes that no longer hold where inference cannot size a dim (the old sizes of
    dims made dynamic); such a dim gets a fresh name instead."""
    result = _infer(model, keep=set(keep), observe=False, annotate_all=False, label=label, forget=set(forget))
    return result.model, result.replaced


# ----------------------------------------------------------------------------------------- the pass


def _infer(model: Model, *, keep: set[str] | None = None, observe: bool = True, annotate_all: bool = True,
           label: str | None = None, forget: set[int] | None = None) -> ShapeInference:
    inferred = _onnx_inference(model, label=label)
    sized = _symbolic_refinement(model, inferred, observe=observe)
    if sized and any(True for _ in _bodies(inferred.graph)):
        # bodies read main-graph tensors: a second pass lets them see the types just found
        inferred = _onnx_inference(model, extra=[v for v in inferred.graph.value_info], label=label)
        _symbolic_refinement(model, inferred, observe=False, only_vague=True)
    proto = model.copy().lazy_proto
    merger = _Merger(proto, keep or set(), annotate_all=annotate_all, forget=forget or set())
    for (graph, path), (typed, _) in zip(iter_graphs(proto.graph), iter_graphs(inferred.graph)):
        merger.graph(graph, typed, path, main=graph is proto.graph)
    return ShapeInference(model.derive(proto), merger.typed, tuple(merger.untyped), tuple(merger.replaced),
                          symbolic=bool(sized))


def _bodies(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    for sub, _ in iter_graphs(graph):
        if sub is not graph:
            yield sub


def _relaxed_copy(model: Model, extra: Sequence[onnx.ValueInfoProto] = ()) -> onnx.ModelProto:
    """A weightless copy of the whole model whose declared intermediate types are set aside:
    no value_info (but the types of what custom ops make, which only the model can tell, and
    ``extra``), no main-graph output types, and body outputs with their shapes cleared."""
    proto = weightless(Source(model, fast=False), value_info=False)
    source = model.lazy_proto
    known = {f.domain + "::" + f.name for f in source.functions}
    for graph, (copy, _) in zip((g for g, _ in iter_graphs(source.graph)), iter_graphs(proto.graph)):
        custom = {o for node in graph.node if _schemaless(node, known) for o in node.output if o}
        kept = [v for v in graph.value_info if v.name in custom]
        if copy is not proto.graph:
            del copy.value_info[:]
            for value in copy.output:
                if value.type.WhichOneof("value") == "tensor_type" and value.name not in custom:
                    value.type.tensor_type.ClearField("shape")
        copy.value_info.extend(kept)
    proto.graph.output.extend(onnx.ValueInfoProto(name=o.name) for o in source.graph.output)
    proto.graph.value_info.extend(extra)
    return proto


def _schemaless(node: onnx.NodeProto, functions: set[str]) -> bool:
    """Whether ONNX has no schema for the node (a custom op) and the model defines no function for it."""
    domain = node.domain if node.domain != "ai.onnx" else ""
    if domain + "::" + node.op_type in functions:
        return False
    return not _has_schema(node.op_type, domain)


@functools.lru_cache(maxsize=1024)
def _has_schema(op_type: str, domain: str) -> bool:
    return bool(onnx.defs.has(op_type, domain))  # (0.6 ms a call: once per op, not per node)


def _onnx_inference(model: Model, extra: Sequence[onnx.ValueInfoProto] = (), label: str | None = None
                    ) -> onnx.ModelProto:
    """Strict ONNX shape inference with data propagation on the relaxed copy; a failure names its node."""
    proto = _relaxed_copy(model, extra)
    try:
        inferred = infer_proto(proto, strict=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError) as err:
        raise _contradiction(label or model.name, proto, err) from err
    _forget_negative_dims(inferred)
    return inferred


def _forget_negative_dims(proto: onnx.ModelProto) -> None:
    """Clear the negative sizes ONNX inference writes where a computation cannot happen: the If
    branch a model never takes (the onnx wheel's expanded AffineGrid splits a 3-D size into 4 in
    its 2-D branch: [-1]). A size that is no size is no proof; the dim is then named afresh."""
    for graph, _ in iter_graphs(proto.graph):
        for value in (*graph.value_info, *graph.output):
            for dim in type_dims(value.type):
                if dim.HasField("dim_value") and dim.dim_value < 0:
                    dim.Clear()


_FAILURE = re.compile(r"\(op_type:(?P<op>[^,)]*)(?:, node name: (?P<name>[^)]*))?\): (?P<why>.*)")


def _contradiction(label: str, proto: onnx.ModelProto, err: Exception) -> InvalidModelError:
    """The error for a model inference finds contradictory: the node, its inputs' types and why."""
    text = str(err).strip()
    match = _FAILURE.search(text)
    why = re.sub(r"\[\w+\]\s*", "", match.group("why") if match else text).strip() or text
    index = _failing_node(proto, match.group("name") if match and match.group("name") else None,
                          match.group("op") if match else None)
    if index is None:
        return InvalidModelError(f"shape inference fails on {label}: {why}",
                                 hint="run 'python -m graphkit check' on the model to find the node")
    node = proto.graph.node[index]
    types = _types_before(proto, index)
    reads = ", ".join(f"{name!r} {describe_type(types[name]) if name in types else '(untyped)'}"
                      for name in node.input if name)
    made = ", ".join(repr(o) for o in node.output if o)
    return InvalidModelError(
        f"{label} contradicts itself at {node_label(node, index)}, which makes {made}: {why}"
        + (f"; it reads {reads}" if reads else ""),
        hint="fix the node or the types it reads (set_attribute, set_dims, remove_node), "
             "or check where the model came from",
        cli_hint="fix the node or the types it reads (graphkit edit: --set-attr, --fixed, --remove-node), "
                 "or check where the model came from",
    )


def _failing_node(proto: onnx.ModelProto, name: str | None, op: str | None) -> int | None:
    """The main-graph node whose inference fails: by name when the error gives one, else the first
    node at which inference of the graph's prefix fails (a bisection: log2(n) inference runs)."""
    nodes = proto.graph.node
    if name:
        for i, node in enumerate(nodes):
            if node.name == name:
                return i
    candidates = [i for i, node in enumerate(nodes) if op is None or node.op_type == op]
    if len(candidates) == 1:
        return candidates[0]
    lo, hi = 0, len(nodes)  # the prefix of lo nodes passes; find the smallest failing prefix
    if _prefix_passes(proto, hi):
        return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _prefix_passes(proto, mid):
            lo = mid
        else:
            hi = mid
    return hi - 1


def _prefix_passes(proto: onnx.ModelProto, count: int) -> bool:
    prefix = onnx.ModelProto()
    prefix.CopyFrom(proto)
    del prefix.graph.node[count:]
    del prefix.graph.output[:]
    try:
        infer_proto(prefix, strict=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError):
        return False
    return True


def _types_before(proto: onnx.ModelProto, index: int) -> dict[str, onnx.TypeProto]:
    """The types inference gives the tensors the nodes before ``index`` make (and the inputs)."""
    prefix = onnx.ModelProto()
    prefix.CopyFrom(proto)
    del prefix.graph.node[index:]
    del prefix.graph.output[:]
    try:
        typed = infer_proto(prefix)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError):
        typed = prefix
    found = {v.name: v.type for v in [*typed.graph.input, *typed.graph.value_info]}
    for tensor in typed.graph.initializer:
        found.setdefault(tensor.name, onnx.helper.make_tensor_type_proto(tensor.data_type, list(tensor.dims)))
    return found


def _symbolic_refinement(model: Model, inferred: onnx.ModelProto, *, observe: bool,
                         only_vague: bool = False) -> bool:
    """Size the main-graph dims ONNX left unknown by ONNX Runtime's symbolic inference, then rank the
    tensors still unranked by one observed run (with ``observe``); written into ``inferred``'s
    value_info in place. Returns whether anything was found."""
    graph = inferred.graph
    values = {v.name: v for v in [*graph.value_info, *graph.output]}
    made = [o for node in model.lazy_proto.graph.node for o in node.output if o]
    vague = [n for n in made if n not in values or _vague(values[n].type)]
    if not vague:
        return False
    found = False
    for name, tp in symbolic_types(model, vague).items():
        found |= _adopt(values, graph, name, tp)
    if observe and not only_vague:
        unranked = [n for n in made if n not in values or not _ranked(values[n].type)]
        if unranked:
            typing = tensor_types(model, unranked, declared=False)
            for name in unranked:
                if typing.source.get(name) == "runtime":
                    found |= _adopt(values, graph, name, typing.types[name])
    return found


def _vague(tp: onnx.TypeProto) -> bool:
    if tp.WhichOneof("value") == "tensor_type":
        return not _complete(tp)
    return not has_dtype(tp)


def _complete(tp: onnx.TypeProto) -> bool:
    """Whether ``tp`` is a tensor type with a dtype and every dim sized or named (the usual case,
    checked without building anything: it runs once per tensor)."""
    if tp.WhichOneof("value") != "tensor_type":
        return False
    tensor = tp.tensor_type
    if not tensor.elem_type or not tensor.HasField("shape"):
        return False
    for dim in tensor.shape.dim:
        if not dim.HasField("dim_value") and (not dim.dim_param or dim.dim_param.startswith("unk__")):
            return False
    return True


def _ranked(tp: onnx.TypeProto) -> bool:
    return tp.WhichOneof("value") != "tensor_type" or tp.tensor_type.HasField("shape")


def _adopt(values: dict[str, onnx.ValueInfoProto], graph: onnx.GraphProto, name: str, tp: onnx.TypeProto) -> bool:
    """Merge a type from a later source into ``name``'s: it fills what is missing, never overrides
    a dim ONNX inference sized or named."""
    old = values.get(name)
    if old is None or not has_dtype(old.type):
        if old is None:
            old = values[name] = graph.value_info.add()
            old.name = name
        old.type.CopyFrom(tp)
        return True
    if old.type.WhichOneof("value") != "tensor_type" or tp.WhichOneof("value") != "tensor_type":
        return False
    if old.type.tensor_type.elem_type != tp.tensor_type.elem_type or not tp.tensor_type.HasField("shape"):
        return False
    if not old.type.tensor_type.HasField("shape"):
        old.type.tensor_type.shape.CopyFrom(tp.tensor_type.shape)
        return True
    ours, theirs = old.type.tensor_type.shape.dim, tp.tensor_type.shape.dim
    if len(ours) != len(theirs):
        return False
    changed = False
    for mine, other in zip(ours, theirs):
        if is_anonymous(mine) and not is_anonymous(other):
            mine.CopyFrom(other)
            changed = True
    return changed


# -------------------------------------------------------------------------- writing the types back


class _Merger:
    """Writes inferred types into the model's graphs and keeps the counts."""

    def __init__(self, proto: onnx.ModelProto, keep: set[str], *, annotate_all: bool = True,
                 forget: set[int] | None = None) -> None:
        self.keep = keep
        self.forget = forget or set()
        #: Write value_info for every node output (infer-shapes), or only where the model had some (edits).
        self.annotate_all = annotate_all
        self.typed = 0
        self.untyped: list[Untyped] = []
        self.replaced: list[Retyped] = []
        self.functions = {f.domain + "::" + f.name for f in proto.functions}
        taken: set[str] = set()
        for graph, _ in iter_graphs(proto.graph):
            for values in (graph.input, graph.output, graph.value_info):
                for value in values:
                    taken.update(d.dim_param for d in type_dims(value.type) if d.dim_param)
        self.namer = DimNamer(taken)
        self.renamed: dict[str, str] = {}

    def graph(self, graph: onnx.GraphProto, typed: onnx.GraphProto, path: str, *, main: bool) -> None:
        """Write ``typed``'s types (the inferred copy of ``graph``) into ``graph``."""
        # (the copy's own objects: reused, not copied; a graph output's own entry is the one refined)
        found = {v.name: v for v in [*typed.value_info, *typed.output]}
        inferred = {v.name: v.type for v in [*typed.output, *typed.input]}
        declared = {v.name: v for v in graph.value_info}
        outputs = {v.name: v for v in graph.output}
        values: list[onnx.ValueInfoProto] = []
        seen: set[str] = set()
        for index, node in enumerate(graph.node):
            for name in node.output:
                if not name or name in seen:
                    continue
                seen.add(name)
                target = outputs.get(name)
                new = found.get(name)
                if target is None and name not in declared and not self.annotate_all:
                    continue
                if target is None and new is not None and name not in declared and _complete(new.type):
                    values.append(new)  # the common case: nothing declared, every dim known
                    self.typed += 1
                    continue
                if new is not None:
                    inferred[name] = new.type
                if target is not None:
                    if not (main and name in self.keep):
                        self._merge(target, inferred.get(name), path, "output")
                    final = target.type
                else:
                    value = declared.get(name) or onnx.ValueInfoProto(name=name)
                    self._merge(value, inferred.get(name), path, "value_info")
                    if has_dtype(value.type):
                        values.append(value_info_of(name, value.type, value))
                    final = value.type
                if has_dtype(final) and _ranked(final):
                    self.typed += 1
                else:
                    self.untyped.append(self._untyped(node, index, name, path))
        # value_info of names no node of this graph makes (outer-scope tensors a body annotates) stays
        values.extend(v for v in graph.value_info if v.name not in seen)
        del graph.value_info[:]
        graph.value_info.extend(values)
        if not main:
            for value in graph.input:
                self._merge(value, inferred.get(value.name), path, "body input", refine=False)

    def _merge(self, value: onnx.ValueInfoProto, new: onnx.TypeProto | None, path: str, kind: str, *,
               refine: bool = True) -> None:
        """Merge ``new`` into ``value``'s type: known inferred dims win (a different declared one is
        reported as replaced), a declared dim fills an unknown inferred one, and what is left unknown
        is named afresh. Without ``refine`` (body inputs, whose sizes may change between iterations)
        only a contradicted declared type is changed."""
        old = value.type
        if new is None or not has_dtype(new):
            self._name(old)
            return
        if not has_dtype(old):
            value.type.CopyFrom(new)
            self._name(value.type)
            return
        merged = _merged(old, new, refine=refine, forget=self.forget)
        if merged is None:
            return
        self._name(merged)
        before = describe_type(old)
        if _contradicts(old, merged):
            self.replaced.append(Retyped(value.name, path, kind, before, describe_type(merged)))
        value.type.CopyFrom(merged)

    def _name(self, tp: onnx.TypeProto) -> None:
        self.namer.name_dims(type_dims(tp), self.renamed)

    def _untyped(self, node: onnx.NodeProto, index: int, name: str, path: str) -> Untyped:
        op = f"{node.domain}::{node.op_type}" if node.domain not in ("", "ai.onnx") else node.op_type
        if _schemaless(node, self.functions):
            reason = f"custom op: ONNX has no schema for {op} and the model declares no type"
        else:
            reason = "inference could not tell"
        return Untyped(name, node.name or f"#{index}", op, path, reason)


def _merged(old: onnx.TypeProto, new: onnx.TypeProto, *, refine: bool, forget: set[int]) -> onnx.TypeProto | None:
    """The type to write (a copy), or None to leave ``old`` as it is."""
    if old.WhichOneof("value") != new.WhichOneof("value") or old.WhichOneof("value") != "tensor_type":
        if old.SerializeToString() == new.SerializeToString():
            return None
        return _copy(new) if refine or old.WhichOneof("value") != new.WhichOneof("value") else None
    ot, nt = old.tensor_type, new.tensor_type
    if ot.elem_type != nt.elem_type:
        return _copy(new)
    if not nt.HasField("shape"):
        return None
    if not ot.HasField("shape"):
        return _copy(new) if refine else None
    if len(ot.shape.dim) != len(nt.shape.dim):
        return _copy(new)
    result = _copy(old)
    for mine, inferred in zip(result.tensor_type.shape.dim, nt.shape.dim):
        if is_anonymous(inferred):
            if refine and mine.HasField("dim_value") and mine.dim_value in forget:
                mine.Clear()  # an old size inference no longer proves: named afresh
            continue
        if is_anonymous(mine) and not refine:
            continue
        if not _same_dim(mine, inferred):
            if mine.dim_param and not inferred.HasField("dim_value"):
                continue  # two names for one dim (an output's own 'out_h' for 'h - 2'): the model's stays
            if not refine and not mine.HasField("dim_value"):
                continue  # a named body-input dim: the body may see other sizes than the first
            mine.CopyFrom(inferred)
    return result


def _same_dim(a: onnx.TensorShapeProto.Dimension, b: onnx.TensorShapeProto.Dimension) -> bool:
    if a.HasField("dim_value") or b.HasField("dim_value"):
        return a.HasField("dim_value") and b.HasField("dim_value") and a.dim_value == b.dim_value
    return a.dim_param == b.dim_param


def _contradicts(old: onnx.TypeProto, new: onnx.TypeProto) -> bool:
    """Whether ``new`` changes what ``old`` stated (not merely fills what it left unknown)."""
    if old.WhichOneof("value") != new.WhichOneof("value"):
        return True
    if old.WhichOneof("value") != "tensor_type":
        return old.SerializeToString() != new.SerializeToString()
    ot, nt = old.tensor_type, new.tensor_type
    if ot.elem_type != nt.elem_type:
        return True
    if not ot.HasField("shape"):
        return False
    if not nt.HasField("shape") or len(ot.shape.dim) != len(nt.shape.dim):
        return True
    return any(not is_anonymous(a) and not _same_dim(a, b) for a, b in zip(ot.shape.dim, nt.shape.dim))


def _copy(tp: onnx.TypeProto) -> onnx.TypeProto:
    copy = onnx.TypeProto()
    copy.CopyFrom(tp)
    return copy


def describe_type(tp: onnx.TypeProto) -> str:
    """A type as text: ``float32[batch,3,4,4]``, ``float32 (unranked)``, ``seq(int64[2])``."""
    kind = tp.WhichOneof("value")
    if kind == "tensor_type":
        name = dtype_name(tp.tensor_type.elem_type)
        if not tp.tensor_type.HasField("shape"):
            return f"{name} (unranked)"
        dims = [str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in tp.tensor_type.shape.dim]
        return f"{name}[{','.join(dims)}]"
    if kind == "sequence_type":
        return f"seq({describe_type(tp.sequence_type.elem_type)})"
    if kind == "optional_type":
        return f"optional({describe_type(tp.optional_type.elem_type)})"
    if kind == "map_type":
        return f"map({dtype_name(tp.map_type.key_type)}, {describe_type(tp.map_type.value_type)})"
    return "(untyped)"


def changed_outputs(before: Model, after: Model) -> list[Retyped]:
    """The main-graph outputs (kept by both models) whose declared type differs between them."""
    old = {v.name: v.type for v in before.lazy_proto.graph.output}
    changes = []
    for value in after.lazy_proto.graph.output:
        tp = old.get(value.name)
        if tp is not None and tp.SerializeToString() != value.type.SerializeToString():
            changes.append(Retyped(value.name, "main graph", "output", describe_type(tp), describe_type(value.type)))
    return changes


def change_text(change: Retyped) -> str:
    """``output 'out': [1,3,4,4] -> [1,3,6,6]`` (the dtype shown only when it changed too)."""
    before, after = change.before, change.after
    head = before.split("[", 1)[0]
    if "[" in before and "[" in after and after.split("[", 1)[0] == head:
        before, after = before[len(head):], after[len(head):]
    return f"{change.kind} {change.tensor!r}: {before} -> {after}"
