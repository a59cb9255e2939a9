"""The one sub-model builder: what a model made from part of another keeps, decided in one place.

extract, split's fragments, compare's capture fragments and merge all build through ``submodel`` (a
cut of one model) or ``finish`` (a graph put together from one or more models), so the same cut
gives the same fields whichever verb made it. The policy:

- ``ir_version``: the source's (merge: the highest of its sources');
- ``opset_import``: the domains the kept nodes use (bodies and used local functions included), at
  the source's versions; ai.onnx is always imported;
- ``producer_name``, ``producer_version``, ``domain``, ``model_version``, ``doc_string``,
  ``metadata_props``: the source's (merge: the first source that sets each; metadata keys of both,
  the first model's value winning);
- the graph's name, doc string and metadata_props: the source's (a verb may rename the graph);
- ``value_info`` of the kept tensors (node outputs and initializers, not the new inputs and
  outputs, which carry their own types);
- ``quantization_annotation`` of every tensor the result holds, new inputs and outputs included;
- exactly the local functions the kept nodes call, directly, from bodies or from other functions.

What a verb adds on top, and only that: split names each fragment's graph ``<graph>_part<i>`` and
adds the metadata entry ``graphkit.split`` = ``fragment <i> of <n> of <model>``; compare names a
capture fragment's graph ``<graph>_fragment``; merge names its graph ``<a>+<b>``.

Weights are never read: initializers are copied as they are (external ones stay references).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence, Set

import onnx

from graphkit._graph import GraphIndex, subgraphs
from graphkit._model import iter_graphs

__all__ = ["finish", "submodel", "used_functions"]

_MODEL_FIELDS = ("producer_name", "producer_version", "domain", "model_version", "doc_string")


def submodel(
    source: onnx.ModelProto,
    index: GraphIndex,
    nodes: Sequence[int],
    *,
    inputs: Sequence[onnx.ValueInfoProto],
    outputs: Sequence[onnx.ValueInfoProto],
    initializers: Set[str],
    graph_name: str | None = None,
    metadata: Mapping[str, str] | None = None,
) -> onnx.ModelProto:
    """A model of ``nodes`` (indices into ``index``, the source's main graph, in the order given).

    Args:
        source: The source model's proto.
        index: The source's main-graph index.
        nodes: The kept nodes, in the order the result holds them.
        inputs: The result's graph inputs, typed (the caller types them).
        outputs: The result's graph outputs (typed, or bare names where the caller runs them only).
        initializers: Names of the initializers (dense or sparse) the result keeps.
        graph_name: The result's graph name (default: the source's).
        metadata: metadata_props entries the verb adds (documented in this module's docstring).

    The source's graph inputs that are kept initializers (overridable defaults) stay graph inputs;
    below IR 4, where every initializer must be a graph input, the kept ones are listed as inputs.
    """
    src = index.graph
    proto = onnx.ModelProto()
    graph = proto.graph  # (built in place: copying 10^4 nodes again costs as much as selecting them)
    graph.name = src.name if graph_name is None else graph_name
    graph.node.extend([index.nodes[i] for i in nodes])
    graph.initializer.extend(index.initializers_in(initializers))
    if len(src.sparse_initializer):
        graph.sparse_initializer.extend(s for s in src.sparse_initializer if s.values.name in initializers)
    graph.input.extend(inputs)
    given = {v.name for v in inputs}
    if not index.input_set.isdisjoint(initializers):
        originals = {v.name: v for v in src.input}
        graph.input.extend(originals[n] for n in index.inputs if n in initializers and n not in given)
    if source.ir_version < 4:
        listed = {v.name for v in graph.input}
        graph.input.extend(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                           for t in graph.initializer if t.name not in listed)
    graph.output.extend(outputs)
    if len(src.value_info) or len(src.quantization_annotation):
        kept = {o for i in nodes for o in index.nodes[i].output if o} | set(initializers)
        _tensor_fields(graph, [src], kept, given | {v.name for v in outputs})
    if src.doc_string:
        graph.doc_string = src.doc_string
    if len(src.metadata_props):
        graph.metadata_props.extend(src.metadata_props)
    _model_fields(proto, [source], metadata)
    return proto


def finish(proto: onnx.ModelProto, sources: Sequence[onnx.ModelProto]) -> onnx.ModelProto:
    """Give ``proto``, whose graph holds the chosen nodes, inputs, outputs and initializers (names
    as in ``sources``), the policy's fields from ``sources``, first one first: merge's way in."""
    graph = proto.graph
    kept = {o for n in graph.node for o in n.output if o} | {t.name for t in graph.initializer}
    boundary = {v.name for v in graph.input} | {v.name for v in graph.output}
    del graph.value_info[:]
    del graph.quantization_annotation[:]
    _tensor_fields(graph, [s.graph for s in sources], kept - boundary, boundary)
    _model_fields(proto, sources, None)
    return proto


def _tensor_fields(graph: onnx.GraphProto, sources: Iterable[onnx.GraphProto], kept: Set[str],
                   boundary: Set[str]) -> None:
    """value_info of the kept tensors (not of the boundary), quantization annotations of both."""
    seen: set[str] = set()
    annotated: set[str] = set()
    for src in sources:  # (the first source's entry for a tensor wins)
        for value in src.value_info:
            if value.name in kept and value.name not in boundary and value.name not in seen:
                seen.add(value.name)
                graph.value_info.append(value)
        for q in src.quantization_annotation:
            if (q.tensor_name in kept or q.tensor_name in boundary) and q.tensor_name not in annotated:
                annotated.add(q.tensor_name)
                graph.quantization_annotation.append(q)


def _model_fields(proto: onnx.ModelProto, sources: Sequence[onnx.ModelProto],
                  metadata: Mapping[str, str] | None) -> None:
    """The model-level fields of the policy, from ``sources`` (first one first), on ``proto``."""
    proto.ir_version = max(s.ir_version for s in sources)
    for name in _MODEL_FIELDS:
        found = next((getattr(s, name) for s in sources if s.HasField(name) and getattr(s, name)), None)
        if found is not None:
            setattr(proto, name, found)
    props: dict[str, str] = {}
    for s in sources:
        for entry in s.metadata_props:
            props.setdefault(entry.key, entry.value)
    props.update(metadata or {})
    for key, value in props.items():
        item = proto.metadata_props.add()
        item.key, item.value = key, value
    functions = used_functions([f for s in sources for f in s.functions], proto.graph)
    del proto.functions[:]
    proto.functions.extend(functions)
    del proto.opset_import[:]
    proto.opset_import.extend(_used_opsets(sources, proto.graph, functions))


def used_functions(functions: Sequence[onnx.FunctionProto], graph: onnx.GraphProto) -> list[onnx.FunctionProto]:
    """The ``functions`` that ``graph``'s nodes call, directly, from bodies, or from other functions
    (each once, in the order given; the first of a name wins)."""
    if not functions:
        return []
    table: dict[tuple[str, str, str], onnx.FunctionProto] = {}
    for f in functions:
        table.setdefault((f.domain, f.name, getattr(f, "overload", "")), f)
    used: set[tuple[str, str, str]] = set()
    stack: list[onnx.NodeProto] = [n for sub, _ in iter_graphs(graph) for n in sub.node]
    while stack:
        node = stack.pop()
        key = (node.domain, node.op_type, getattr(node, "overload", ""))
        if key in table and key not in used:
            used.add(key)
            func = table[key]
            stack.extend(func.node)
        for sub in subgraphs(node):
            stack.extend(n for s, _ in iter_graphs(sub) for n in s.node)
    return [f for key, f in table.items() if key in used]


def _used_opsets(sources: Sequence[onnx.ModelProto], graph: onnx.GraphProto,
                 functions: Sequence[onnx.FunctionProto]) -> list[onnx.OperatorSetIdProto]:
    """The sources' opset imports of the domains the graph's nodes (bodies included) and the kept
    functions' nodes use; ai.onnx always."""
    if len(sources) == 1 and all(o.domain in ("", "ai.onnx") for o in sources[0].opset_import):
        # (nothing but ai.onnx to choose from: no pass over the nodes; one took 0.22 s over the
        # 50k nodes of bench model b on a busy 2-core machine, a third of its extraction time)
        return list(sources[0].opset_import)
    used = {""}
    nodes = graph.node
    used.update(n.domain for n in nodes)
    if any(len(n.attribute) for n in nodes):
        for sub, _ in iter_graphs(graph):
            used.update(n.domain for n in sub.node)
    for func in functions:
        used.update(n.domain for n in func.node)
        used.add(func.domain)
    used = {"" if d == "ai.onnx" else d for d in used}
    found: dict[str, onnx.OperatorSetIdProto] = {}
    for s in sources:
        for entry in s.opset_import:
            domain = "" if entry.domain == "ai.onnx" else entry.domain
            if domain in used and domain not in found:
                found[domain] = entry
    return list(found.values())
