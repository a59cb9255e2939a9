"""A read-only index over one graph: who produces and who consumes each tensor, and in what order.

Subgraphs are first-class: a node with If/Loop/Scan bodies *reads* every outer-scope tensor its bodies
use (at any depth), so those reads count as the node's inputs for ordering, extraction and splitting.
"""

from __future__ import annotations

import gc
import heapq
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property

import onnx

from graphkit.errors import CycleError

__all__ = ["GraphIndex", "node_label", "paused_gc", "subgraph_outer_reads", "subgraphs", "toposort_proto"]

_gc_lock = threading.Lock()
_gc_pauses = 0
_gc_was_enabled = False


@contextmanager
def paused_gc() -> Iterator[None]:
    """Hold Python's cyclic garbage collector off for the block (nested and threaded uses count).

    A pass over a big graph creates hundreds of thousands of short-lived wrappers and lists, none
    in reference cycles; each few hundred allocations would otherwise start a collection that
    walks every live object, and on a 50k-node graph those collections cost as much as the pass.
    The collector is enabled again (if it was) when the last paused block ends, even on error.
    """
    global _gc_pauses, _gc_was_enabled
    with _gc_lock:
        if _gc_pauses == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_pauses += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pauses -= 1
            if _gc_pauses == 0 and _gc_was_enabled:
                gc.enable()


def node_label(node: onnx.NodeProto, index: int | None = None) -> str:
    """A readable name for a node: ``'name' (OpType)``, or ``node #3 (OpType)`` when unnamed."""
    op = f"{node.domain}::{node.op_type}" if node.domain not in ("", "ai.onnx") else node.op_type
    if node.name:
        return f"node {node.name!r} ({op})"
    return f"node #{index} ({op})" if index is not None else f"unnamed node ({op})"


def subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    """The graphs held in a node's attributes (If branches, Loop/Scan bodies)."""
    found: list[onnx.GraphProto] = []
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            found.append(attr.g)
        elif attr.type == onnx.AttributeProto.GRAPHS:
            found.extend(attr.graphs)
    return found


def subgraph_outer_reads(graph: onnx.GraphProto) -> set[str]:
    """Names a subgraph reads that it does not define itself (at any depth): its outer-scope reads."""
    defined = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    defined |= {t.values.name for t in graph.sparse_initializer}
    reads: set[str] = set()
    for node in graph.node:
        for name in node.input:
            if name and name not in defined:
                reads.add(name)
        for sub in subgraphs(node):
            reads |= {n for n in subgraph_outer_reads(sub) if n not in defined}
        defined.update(o for o in node.output if o)
    for out in graph.output:
        if out.name not in defined:
            reads.add(out.name)
    return reads


@dataclass
class GraphIndex:
    """Producers, consumers and definitions of every tensor in one graph.

    Args:
        graph: The graph to index (not modified).
        outer: Names visible from an enclosing scope (for subgraph bodies).
    """

    graph: onnx.GraphProto
    outer: frozenset[str] = field(default_factory=frozenset)

    @cached_property
    def initializers(self) -> dict[str, onnx.TensorProto]:
        """Initializer name → TensorProto (sparse initializers included by their values' name)."""
        found = {t.name: t for t in self.graph.initializer}
        for sparse in self.graph.sparse_initializer:
            found[sparse.values.name] = sparse.values
        return found

    @cached_property
    def inputs(self) -> list[str]:
        """Graph input names, in order."""
        return [i.name for i in self.graph.input]

    @cached_property
    def outputs(self) -> list[str]:
        """Graph output names, in order."""
        return [o.name for o in self.graph.output]

    @cached_property
    def producer(self) -> dict[str, int]:
        """Tensor name → index of the node that produces it (the first, if several do)."""
        found: dict[str, int] = {}
        for i, node in enumerate(self.graph.node):
            for name in node.output:
                if name:
                    found.setdefault(name, i)
        return found

    @cached_property
    def node_reads(self) -> list[list[str]]:
        """For each node, every tensor it reads: its inputs and its subgraphs' outer-scope reads."""
        reads: list[list[str]] = []
        for node in self.graph.node:
            names = [n for n in node.input if n]
            for sub in subgraphs(node):
                names.extend(sorted(subgraph_outer_reads(sub) - set(names)))
            reads.append(list(dict.fromkeys(names)))
        return reads

    @cached_property
    def consumers(self) -> dict[str, list[int]]:
        """Tensor name → indices of nodes that read it (directly or from a subgraph)."""
        found: dict[str, list[int]] = {}
        for i, names in enumerate(self.node_reads):
            for name in names:
                found.setdefault(name, []).append(i)
        return found

    @cached_property
    def value_info(self) -> dict[str, onnx.ValueInfoProto]:
        """Every typed tensor: value_info, inputs and outputs (outputs and inputs win)."""
        found = {v.name: v for v in self.graph.value_info}
        found.update({v.name: v for v in self.graph.output})
        found.update({v.name: v for v in self.graph.input})
        return found

    @cached_property
    def nodes_by_name(self) -> dict[str, int]:
        """Node name → index, for named nodes."""
        return {node.name: i for i, node in enumerate(self.graph.node) if node.name}

    @cached_property
    def tensor_names(self) -> list[str]:
        """Every tensor name the graph defines or reads, inputs first, then in node order."""
        names: dict[str, None] = dict.fromkeys(self.inputs)
        names.update(dict.fromkeys(self.initializers))
        for node in self.graph.node:
            names.update(dict.fromkeys(n for n in node.input if n))
            names.update(dict.fromkeys(n for n in node.output if n))
        return list(names)

    def defines(self, name: str) -> bool:
        """Whether the graph (or its outer scope) defines ``name``."""
        return name in self.producer or name in self.initializers or name in set(self.inputs) or name in self.outer

    def dependencies(self) -> list[list[int]]:
        """For each node, the indices of the nodes producing what it reads."""
        deps: list[list[int]] = []
        for names in self.node_reads:
            found = {self.producer[n] for n in names if n in self.producer}
            deps.append(sorted(found))
        return deps

    def topological_order(self) -> list[int]:
        """Node indices in a valid execution order, keeping the current order wherever it is valid.

        Raises:
            CycleError: The graph has a cycle; the message lists it.
        """
        deps = self.dependencies()
        count = len(deps)
        waiting = [len(d) for d in deps]
        users: list[list[int]] = [[] for _ in range(count)]
        for i, d in enumerate(deps):
            for j in d:
                users[j].append(i)
        ready = [i for i in range(count) if waiting[i] == 0]
        heapq.heapify(ready)
        order: list[int] = []
        while ready:
            i = heapq.heappop(ready)
            order.append(i)
            for user in users[i]:
                waiting[user] -= 1
                if waiting[user] == 0:
                    heapq.heappush(ready, user)
        if len(order) != count:
            stuck = sorted(set(range(count)) - set(order))
            cycle = list(reversed(self.find_cycle(stuck, deps)))  # data-flow order
            raise CycleError(
                "the graph has a cycle: " + " -> ".join(self._cycle_step(i) for i in cycle),
                hint="a node reads a tensor that depends on its own output; remove or rewire one of these nodes",
            )
        return order

    def find_cycle(self, candidates: Sequence[int], deps: Sequence[Sequence[int]] | None = None) -> list[int]:
        """One cycle among ``candidates`` (node indices), as a closed path (first node repeated last)."""
        deps = deps if deps is not None else self.dependencies()
        allowed = set(candidates)
        state: dict[int, int] = {}
        for start in candidates:
            if start in state:
                continue
            stack: list[tuple[int, Iterable[int]]] = [(start, iter(deps[start]))]
            path = [start]
            state[start] = 1
            while stack:
                node, children = stack[-1]
                advanced = False
                for child in children:
                    if child not in allowed:
                        continue
                    if state.get(child) == 1:
                        return [*path[path.index(child) :], child]
                    if child not in state:
                        state[child] = 1
                        stack.append((child, iter(deps[child])))
                        path.append(child)
                        advanced = True
                        break
                if not advanced:
                    state[node] = 2
                    stack.pop()
                    path.pop()
        return list(candidates[:1])

    def _cycle_step(self, i: int) -> str:
        node = self.graph.node[i]
        outs = ", ".join(repr(o) for o in node.output if o)
        return f"{node_label(node, i)} [{outs}]"


def toposort_proto(proto: onnx.ModelProto) -> None:
    """Sort ``proto``'s graphs in place (see ``graphkit.toposort``)."""
    _sort_graph(proto.graph)
    for func in proto.functions:
        holder = onnx.GraphProto()
        holder.node.extend(func.node)
        holder.input.extend(onnx.helper.make_value_info(n, onnx.TypeProto()) for n in func.input)
        _sort_graph(holder)
        del func.node[:]
        func.node.extend(holder.node)


def _sort_graph(graph: onnx.GraphProto) -> None:
    for node in graph.node:
        for sub in subgraphs(node):
            _sort_graph(sub)
    order = GraphIndex(graph).topological_order()
    if order == list(range(len(order))):
        return
    nodes = [graph.node[i] for i in order]
    copies = []
    for node in nodes:
        clone = onnx.NodeProto()
        clone.CopyFrom(node)
        copies.append(clone)
    del graph.node[:]
    graph.node.extend(copies)
