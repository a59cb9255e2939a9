"""The neighbourhood of a node or tensor, cut out of a model for ``view --around`` and drawn by the
HTML report: the nodes within ``depth`` steps up and down the main graph, as a sub-model."""

from __future__ import annotations

from dataclasses import dataclass

from graphkit import _check_args as argcheck
from graphkit._extract import extract
from graphkit._graph import GraphIndex, subgraphs
from graphkit._model import Model, iter_graphs
from graphkit.errors import NameNotFoundError, UsageError, not_found

__all__ = ["Neighbourhood", "around_nodes", "neighbourhood"]


@dataclass(frozen=True)
class Neighbourhood:
    """A cut around one node.

    Attributes:
        model: The sub-model holding the nodes around the centre.
        centre: The node it is centred on (name, or ``#index``).
        nodes: How many nodes it keeps; ``total`` of the source's main graph.
        inputs: The tensors where it was cut on the way in (they become its inputs).
        outputs: Its outputs: what the kept nodes compute that other nodes or the graph use.
        inside: When the name asked for is a node or tensor of an If/Loop/Scan body, that name (the
            cut is centred on the main-graph node holding the body); else None.
    """

    model: Model
    centre: str
    nodes: int
    total: int
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    inside: str | None = None


def around_nodes(index: GraphIndex, start: int, depth: int) -> dict[int, int]:
    """Node index → signed distance from ``start`` (negative upstream), within ``depth`` steps."""
    found = {start: 0}
    for direction in (-1, 1):
        frontier = [start]
        for step in range(1, depth + 1):
            following: list[int] = []
            for i in frontier:
                if direction < 0:
                    near = [index.producer[n] for n in index.reads(i) if n in index.producer]
                else:
                    near = [j for n in index.outputs_of(i) for j in index.consumers.get(n, ())]
                for j in near:
                    if j not in found:
                        found[j] = direction * step
                        following.append(j)
            frontier = following
    return found


def centre_node(index: GraphIndex, name: str, where: str) -> int:
    """The node a name stands for: a node (name or ``#index``), the node whose If/Loop/Scan body
    holds a node or tensor of that name, or the producer (else the first reader) of a tensor.

    Raises:
        NameNotFoundError: Neither a node nor a tensor of the main graph.
        UsageError: A tensor that no node computes or reads.
    """
    found = index.node_index(name)
    if found is not None:
        return found
    owner = body_holder(index, name)
    if owner is not None:
        return owner
    if name in index.producer:
        return index.producer[name]
    readers = index.consumers.get(name, ())
    if readers:
        return readers[0]
    if name in set(index.tensor_names):
        raise UsageError(f"{name!r} in {where} is neither computed nor read by a node", hint="name a node or a tensor it reads")
    raise not_found(NameNotFoundError, "node or tensor", name,
                    [*index.nodes_by_name, *index.tensor_names], where=where)


def body_holder(index: GraphIndex, name: str) -> int | None:
    """The main-graph node whose If/Loop/Scan body (at any depth) holds a node named ``name`` or
    defines a tensor of that name, or None (also for names of the main graph itself)."""
    if name in index.nodes_by_name or name in index.producer:
        return None
    for i, node in enumerate(index.nodes):
        if not len(node.attribute):
            continue
        for body in subgraphs(node):
            if any(n.name == name for graph, _ in iter_graphs(body) for n in graph.node):
                return i
    return index.body_owner(name)


def neighbourhood(model: Model, /, around: str, *, depth: int = 2) -> Neighbourhood:
    """The sub-model of the nodes within ``depth`` steps of node or tensor ``around`` (a name inside
    an If/Loop/Scan body stands for the main-graph node holding that body: ``inside`` says so).

    Raises:
        NameNotFoundError: ``around`` names no node or tensor of the main graph.
    """
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    argcheck.name(around, "around")
    argcheck.integer(depth, "depth", minimum=0, maximum=1000)
    index = GraphIndex(model.lazy_proto.graph)
    start = centre_node(index, around, model.name)
    kept = around_nodes(index, start, depth)
    produced = {n for i in kept for n in index.outputs_of(i) if n}
    inputs = [n for i in sorted(kept) for n in index.reads(i)
              if n and n not in produced and n not in index.initializers]
    graph_outputs = index.output_set
    outputs = [n for i in sorted(kept) for n in index.outputs_of(i) if n and (
        n in graph_outputs or any(j not in kept for j in index.consumers.get(n, ()))
        or not index.consumers.get(n))]
    inputs, outputs = list(dict.fromkeys(inputs)), list(dict.fromkeys(outputs))
    sub = extract(model, inputs=inputs, outputs=outputs, check=False)
    node = index.nodes[start]
    inside = around if body_holder(index, around) == start else None
    return Neighbourhood(sub, node.name or f"#{start}", len(kept), len(index.nodes), tuple(inputs), tuple(outputs),
                         inside)
