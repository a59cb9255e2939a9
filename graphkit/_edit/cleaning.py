"""Dead-node removal (``_prune``, the one used by every edit) and cleanup (constant folding is in ``graphkit._simplify``)."""

from __future__ import annotations

from collections.abc import Collection, Iterable

import onnx

from graphkit import _check_args as argcheck
from graphkit._edit._common import (
    _drop_opsets,
    _drop_value_info,
    _every_node,
    _finish,
    _noop_returns_input,
    _norm_domain,
)
from graphkit._graph import GraphIndex, subgraphs
from graphkit._model import Model, iter_graphs


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
        _remove_initializers(graph, unused)
        sparse = [s for s in graph.sparse_initializer if s.values.name not in unused]
        del graph.sparse_initializer[:]
        graph.sparse_initializer.extend(sparse)
    stale = {v.name for v in graph.value_info} & (gone | unused if not everything else {v.name for v in graph.value_info})
    if stale:
        _drop_value_info(graph, {n for n in stale - GraphIndex(graph).defined if not readers.get(n)})
    return {name for name, count in readers.items() if count}


def _remove_initializers(graph: onnx.GraphProto, names: Collection[str]) -> None:
    """Remove the dense initializers called ``names``, in place: the others are not copied (rebuilding the
    list would copy every weight a pass made in memory, 100 MB for a transformer's packed attention weights)."""
    doomed = [i for i, tensor in enumerate(graph.initializer) if tensor.name in names]
    for i in reversed(doomed):
        del graph.initializer[i]


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
