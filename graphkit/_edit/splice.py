"""Splice: put another model's graph in place of a span of a model.

The span is what ``extract`` would cut between the same tensors (the same closure, the same errors
for a cut that leaks): the main-graph nodes that compute ``outputs`` from ``inputs``. Those nodes go,
with the weights only they read; the replacement's nodes take their place, its graph inputs reading
the span's inputs and its graph outputs producing the span's outputs (bound by position, or by
``{span name: replacement name}`` pairs). Its weights, value_info and local functions come along;
a name of the replacement that the model already uses elsewhere is prefixed with the replacement's
graph name (``<graph>/name``, made unique), a different local function of the same name is renamed.
Opset imports are merged (``graphkit._opset_merge``): one version per domain, or an error listing
the operators that keep the two apart.

So a span can be written out with ``extract``, edited or re-exported elsewhere, and spliced back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import onnx
from onnx import helper

from graphkit import _check_args as argcheck
from graphkit._edit._common import _finish, _fresh, _noop_returns_input
from graphkit._edit._opset_merge import merged_opsets, norm_domain
from graphkit._edit.merging import _merged_base
from graphkit._edit.renames import rename_everywhere
from graphkit._extract import _check_names, _cut, _Graph, _open_cut_error
from graphkit._graph import GraphIndex, graph_tensor_names, node_label
from graphkit._model import Model, iter_graphs
from graphkit._submodel import used_functions
from graphkit._summary import dtype_name
from graphkit.errors import EditError, TensorNotFoundError, UsageError, not_found

__all__ = ["replace_span"]

Binding = Sequence[str] | Mapping[str, str]


def _check_binding(value: object, keyword: str) -> list[str] | dict[str, str]:
    if isinstance(value, Mapping):
        return argcheck.mapping(value, keyword, key=lambda k, kw: argcheck.name(k, kw, what="tensor name"),
                                item=lambda v, kw: argcheck.name(v, kw, what="tensor name"))
    return argcheck.names(value, keyword, what="tensor name", minimum=1)


@_noop_returns_input
def replace_span(model: Model, /, inputs: Binding, outputs: Binding, replacement: Model, *,
                 check: bool = True) -> Model:
    """Replace the nodes that compute ``outputs`` from ``inputs`` by ``replacement``'s graph.

    Args:
        model: The model to edit (not modified).
        inputs: The span's input tensors. A list binds them, in order, to the replacement's graph
            inputs (those that are not initializers); ``{span_tensor: replacement_input}`` binds by name.
        outputs: The span's output tensors, bound to the replacement's graph outputs the same way.
        replacement: The model whose graph takes the span's place (not modified); its weights may lie
            in another folder.
        check: Validate the result.

    Raises:
        TensorNotFoundError: A name is not a tensor of the model's main graph, or not a graph input /
            output of the replacement.
        OpenCutError: An output cannot be computed from the inputs (as ``extract`` says it).
        EditError: The bindings do not fit (counts, dtypes); a tensor made inside the span is read
            outside it; the opsets cannot be reconciled.
    """
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    span_in = _check_binding(inputs, "inputs")
    span_out = _check_binding(outputs, "outputs")
    argcheck.instance(replacement, "replacement", Model, argcheck.MODEL)
    argcheck.boolean(check, "check")
    names_in, names_out = list(span_in), list(span_out)
    g = _Graph(model, fast=False)
    _check_names(g, names_in, "inputs")
    _check_names(g, names_out, "outputs")
    both = sorted(set(names_in) & set(names_out))
    if both:
        raise UsageError(f"{both[0]!r} is both an input and an output of the span",
                         hint="a span's outputs are computed from its inputs; name each tensor on one side")
    cut = _cut(g, names_in, names_out)
    if cut.missing:
        raise _open_cut_error(g, names_in, names_out, cut)
    _check_span(model, g, cut.nodes, names_out)
    guest = replacement.copy().lazy_proto
    bound_in = _bind(replacement, guest, span_in, "inputs", _graph_inputs(guest.graph))
    _pass_through_outputs(guest.graph)
    bound_out = _bind(replacement, guest, span_out, "outputs", [v.name for v in guest.graph.output])
    host = model.copy().lazy_proto
    _check_types(model, replacement, host.graph, guest.graph, {**bound_in, **bound_out})
    versions = merged_opsets([(host, model.name), (guest, replacement.name)], convertible=(1,))
    _remove_span(host.graph, cut.nodes, cut.initializers, set(names_in) | set(names_out))
    _make_room(host, guest, bound_in, bound_out)
    rename_everywhere(guest, {**bound_in, **bound_out})
    _drop_uncalled_functions(host)
    _bring_functions(host, guest)
    base_dir = _merged_base(model, replacement, host, guest)
    _insert(host.graph, guest.graph, cut.nodes[0], bound_in)
    _set_opsets(host, versions)
    host.ir_version = max(host.ir_version, guest.ir_version)
    return _finish(model, host, check=check, what=f"replace_span {names_in} -> {names_out}", base_dir=base_dir)


# ------------------------------------------------------------------------------------------ the span


def _check_span(model: Model, g: _Graph, nodes: Sequence[int], outputs: Sequence[str]) -> None:
    """Refuse a span whose outputs are not made by its nodes, or whose inner tensors are read outside it."""
    if not nodes:
        raise EditError(f"the span of {model.name} holds no node: its outputs are initializers or inputs",
                        hint="name outputs that nodes compute")
    span = set(nodes)
    made = {o: i for i in nodes for o in g.nodes[i].output if o}
    for name in outputs:
        if name not in made:
            raise EditError(f"{name!r} is not computed by the span of {model.name} ({g.kind(name)})",
                            hint="name outputs that nodes compute")
    inner = set(made) - set(outputs)
    for i, node in enumerate(g.nodes):
        if i in span:
            continue
        leaked = [r for r in g.reads(i) if r in inner]
        if leaked:
            raise EditError(f"{node_label(node, i)}, outside the span, reads {leaked[0]!r}, which the span computes "
                            f"({node_label(g.nodes[made[leaked[0]]], made[leaked[0]])})",
                            hint=f"add {leaked[0]!r} to the span's outputs, or widen the span to include its readers")
    for name in g.outputs:
        if name in inner:
            raise EditError(f"graph output {name!r} of {model.name} is computed inside the span",
                            hint=f"add {name!r} to the span's outputs")


def _remove_span(graph: onnx.GraphProto, nodes: Sequence[int], initializers: set[str], boundary: set[str]) -> set[str]:
    """Remove the span's nodes, the weights only they read and the value_info of their inner tensors;
    return the names that no longer exist."""
    doomed = set(nodes)
    gone = {o for i in doomed for o in graph.node[i].output if o} - boundary
    kept = [n for i, n in enumerate(graph.node) if i not in doomed]
    del graph.node[:]
    graph.node.extend(kept)
    index = GraphIndex(graph)
    still_read = {name for reads in index.node_reads for name in reads} | set(index.outputs)
    unused = {name for name in initializers if name not in still_read and name not in index.input_set}
    inits = [t for t in graph.initializer if t.name not in unused]
    del graph.initializer[:]
    graph.initializer.extend(inits)
    sparse = [s for s in graph.sparse_initializer if s.values.name not in unused]
    del graph.sparse_initializer[:]
    graph.sparse_initializer.extend(sparse)
    gone |= unused
    infos = [v for v in graph.value_info if v.name not in gone]
    del graph.value_info[:]
    graph.value_info.extend(infos)
    return gone


# ----------------------------------------------------------------------------------- the replacement


def _graph_inputs(graph: onnx.GraphProto) -> list[str]:
    inits = {t.name for t in graph.initializer} | {s.values.name for s in graph.sparse_initializer}
    return [v.name for v in graph.input if v.name not in inits]


def _pass_through_outputs(graph: onnx.GraphProto) -> None:
    """Give every graph output its own producing node: an output that is a graph input, an initializer
    or another output's tensor gets an Identity (a span output must be computed, and once)."""
    produced = {o for n in graph.node for o in n.output if o}
    taken = graph_tensor_names(graph)
    seen: set[str] = set()
    for value in graph.output:
        if value.name in produced and value.name not in seen:
            seen.add(value.name)
            continue
        new = _fresh(f"{value.name}_out", taken)
        taken.add(new)
        graph.node.append(helper.make_node("Identity", [value.name], [new], name=_fresh(f"{new}/Identity", taken)))
        value.name = new
        seen.add(new)


def _bind(replacement: Model, guest: onnx.ModelProto, span: list[str] | dict[str, str], keyword: str,
          ports: list[str]) -> dict[str, str]:
    """replacement port → span tensor."""
    what = "graph input" if keyword == "inputs" else "graph output"
    if isinstance(span, dict):
        found: dict[str, str] = {}
        for outer, port in span.items():
            if port not in ports:
                raise not_found(TensorNotFoundError, what, port, ports, where=replacement.name)
            found[port] = outer
        unbound = [p for p in ports if p not in found]
        if unbound and keyword == "inputs":
            raise EditError(f"{what} {unbound[0]!r} of {replacement.name} is bound to no tensor of the span",
                            hint=f"bind it in {keyword} ({{span_tensor: {unbound[0]!r}}}), or bind by position",
                            cli_hint=f"bind it in --replace-span (SPAN_TENSOR={unbound[0]}), or bind by position")
        if unbound:
            _drop_outputs(guest.graph, set(unbound))
        return found
    if len(span) != len(ports):
        raise EditError(f"the span has {len(span)} {keyword} ({', '.join(map(repr, span))}) but {replacement.name} "
                        f"has {len(ports)} {what}s ({', '.join(map(repr, ports))})",
                        hint=f"bind them by name ({keyword}={{span_tensor: replacement_{keyword[:-1]}}})",
                        cli_hint="bind them by name: --replace-span 'SPAN_IN=MODEL_IN,…:SPAN_OUT=MODEL_OUT,…=MODEL.onnx'")
    return dict(zip(ports, span))


def _drop_outputs(graph: onnx.GraphProto, names: set[str]) -> None:
    kept = [v for v in graph.output if v.name not in names]
    del graph.output[:]
    graph.output.extend(kept)


def _elem_types(graph: onnx.GraphProto) -> dict[str, int]:
    found: dict[str, int] = {t.name: int(t.data_type) for t in graph.initializer}
    for value in [*graph.value_info, *graph.input, *graph.output]:
        if value.type.HasField("tensor_type") and value.type.tensor_type.elem_type:
            found[value.name] = int(value.type.tensor_type.elem_type)
    return found


def _check_types(model: Model, replacement: Model, host: onnx.GraphProto, guest: onnx.GraphProto,
                 binding: Mapping[str, str]) -> None:
    """Refuse a binding whose declared dtypes differ (unknown ones are left to the result's check)."""
    outer, inner = _elem_types(host), _elem_types(guest)
    for port, name in binding.items():
        a, b = outer.get(name), inner.get(port)
        if a and b and a != b:
            raise EditError(f"{name!r} of {model.name} is {dtype_name(a)} but {port!r} of {replacement.name}, bound "
                            f"to it, is {dtype_name(b)}", hint="bind tensors of the same dtype, or add a Cast to the "
                                                            "replacement first")


def _make_room(host: onnx.ModelProto, guest: onnx.ModelProto, bound_in: Mapping[str, str],
               bound_out: Mapping[str, str]) -> None:
    """Rename the replacement's own tensors and nodes that the model already uses:
    ``<replacement graph>/<name>``, made unique."""
    ports = set(bound_in) | set(bound_out)
    taken = graph_tensor_names(host.graph) | set(bound_in.values()) | set(bound_out.values())
    own = graph_tensor_names(guest.graph) - ports
    stem = (guest.graph.name or "replacement") + "/"
    mapping: dict[str, str] = {}
    avoid = taken | own
    for name in sorted(own & taken):
        mapping[name] = _fresh(stem + name, avoid)
        avoid.add(mapping[name])
    rename_everywhere(guest, mapping)
    host_nodes = {n.name for g, _ in iter_graphs(host.graph) for n in g.node if n.name}
    guest_nodes = {n.name for g, _ in iter_graphs(guest.graph) for n in g.node if n.name}
    used = host_nodes | guest_nodes
    for graph, _ in iter_graphs(guest.graph):
        for node in graph.node:
            if node.name and node.name in host_nodes:
                node.name = _fresh(stem + node.name, used)
                used.add(node.name)


def _bring_functions(host: onnx.ModelProto, guest: onnx.ModelProto) -> None:
    """Add the replacement's local functions: one the model has identically is shared, a different
    one of the same name is renamed (and so are its callers in the replacement)."""
    have = {(f.domain, f.name, f.overload): f for f in host.functions}
    renamed: dict[tuple[str, str], str] = {}
    for func in guest.functions:
        key = (func.domain, func.name, func.overload)
        same = have.get(key)
        if same is not None and same.SerializeToString(deterministic=True) == func.SerializeToString(deterministic=True):
            continue
        if same is not None:
            names = {f.name for f in host.functions if f.domain == func.domain} | \
                    {f.name for f in guest.functions if f.domain == func.domain}
            new = _fresh(f"{func.name}_spliced", names)
            renamed[(func.domain, func.name)] = new
    for func in guest.functions:
        if (func.domain, func.name) in renamed:
            func.name = renamed[(func.domain, func.name)]
    callers = [n for g, _ in iter_graphs(guest.graph) for n in g.node] + [n for f in guest.functions for n in f.node]
    for node in callers:
        called = renamed.get((node.domain, node.op_type))
        if called is not None:
            node.op_type = called
    for func in guest.functions:
        key = (func.domain, func.name, func.overload)
        if key not in have:
            host.functions.append(func)
            have[key] = func


def _drop_uncalled_functions(host: onnx.ModelProto) -> None:
    """The model's local functions that only the span called go with it (so a replacement's function
    of the same name needs no new name)."""
    kept = used_functions(list(host.functions), host.graph)
    if len(kept) != len(host.functions):
        del host.functions[:]
        host.functions.extend(kept)


def _insert(graph: onnx.GraphProto, guest: onnx.GraphProto, position: int, bound_in: Mapping[str, str]) -> None:
    """Put the replacement's nodes where the span's first node was, then restore execution order."""
    nodes = list(graph.node)
    merged = nodes[:position] + list(guest.node) + nodes[position:]
    del graph.node[:]
    graph.node.extend(merged)
    graph.initializer.extend(guest.initializer)
    graph.sparse_initializer.extend(guest.sparse_initializer)
    ports = set(bound_in.values()) | {v.name for v in guest.output}
    known = {v.name for v in graph.value_info}
    graph.value_info.extend(v for v in guest.value_info if v.name not in ports and v.name not in known)
    graph.quantization_annotation.extend(q for q in guest.quantization_annotation if q.tensor_name not in known)
    order = GraphIndex(graph).topological_order()
    if order != list(range(len(order))):
        ordered = [graph.node[i] for i in order]
        copies = []
        for node in ordered:
            clone = onnx.NodeProto()
            clone.CopyFrom(node)
            copies.append(clone)
        del graph.node[:]
        graph.node.extend(copies)


def _set_opsets(host: onnx.ModelProto, versions: Mapping[str, int]) -> None:
    used = {norm_domain(n.domain) for g, _ in iter_graphs(host.graph) for n in g.node}
    used |= {norm_domain(n.domain) for f in host.functions for n in f.node} | {norm_domain(f.domain) for f in host.functions}
    present = {norm_domain(o.domain) for o in host.opset_import}
    for entry in host.opset_import:
        entry.version = versions.get(norm_domain(entry.domain), entry.version)
    for domain in sorted(used - present):
        if domain in versions:
            host.opset_import.append(helper.make_opsetid(domain, versions[domain]))
