"""The refusal of an edit whose result has an impossible shape: it names the node where a dim first
goes empty or negative, what that node reads, and the attributes the edit set."""

from __future__ import annotations

import onnx
from onnx import helper

from graphkit._graph import GraphIndex, node_label
from graphkit._infer import describe_type
from graphkit._model import Model
from graphkit._typing import tensor_types
from graphkit.errors import EditError

__all__ = ["refuse_impossible_dims"]


def refuse_impossible_dims(before: Model, result: Model, what: str) -> None:
    """Refuse a result whose retyped shapes hold a negative dim (a Conv whose input got smaller than
    its kernel, say), naming the first node, in execution order, that would output one: what it reads
    and, for the nodes the edit changed, the attributes it set."""
    graph = result.lazy_proto.graph
    declared = (*graph.output, *graph.value_info)
    if not any(d.HasField("dim_value") and d.dim_value < 0 for v in declared for d in v.type.tensor_type.shape.dim):
        return
    index = GraphIndex(graph)
    order = index.topological_order()
    names = [t for i in order for t in (*graph.node[i].input, *graph.node[i].output) if t]
    types = tensor_types(result, names, declared=False, observe=False).types
    first = next((i for i in order if any(o in types and _negative(types[o]) for o in graph.node[i].output)), None)
    if first is None:
        return
    # a dim that became 0 upstream (a Conv whose input got smaller than its kernel) is where it starts
    earlier = index.upstream_nodes(t for t in graph.node[first].input if t)
    was = tensor_types(before, [o for i in earlier for o in graph.node[i].output if o], declared=False,
                       observe=False).types if earlier else {}
    start = next((i for i in order if i in earlier and any(
        o in types and o in was and _emptied(was[o], types[o]) for o in graph.node[i].output)), first)
    changed = _changed_attributes(before, result)
    node = graph.node[start]
    bad = next(o for o in node.output if o in types and (_negative(types[o]) or (o in was and _emptied(was[o], types[o]))))
    reads = ", ".join(f"{t!r} {describe_type(types[t])}" if t in types else repr(t) for t in node.input if t)
    set_here = changed.get(node.name, "") if node.name else ""
    if set_here:
        cause = f"; this edit set its {set_here}"
    elif changed:
        cause = "; upstream, this edit set " + "; ".join(f"{a} on {n!r}" for n, a in changed.items())
    else:
        cause = ""
    shape = "an empty shape" if not _negative(types[bad]) else "an impossible shape"
    raise EditError(
        f"{what}: {node_label(node, start)} would output {bad!r} {describe_type(types[bad])}, {shape}, "
        f"from {reads}{cause}",
        hint="undo this edit, or change the attributes or shapes that size this node's inputs "
             "(set_attribute, set_dims)",
        cli_hint="undo this edit, or change the attributes or shapes that size this node's inputs "
                 "(--set-attr, --fixed)")


def _emptied(old: onnx.TypeProto, new: onnx.TypeProto) -> bool:
    """Whether a dim sized above 0 in ``old`` is 0 in ``new`` (same rank)."""
    if old.WhichOneof("value") != "tensor_type" or new.WhichOneof("value") != "tensor_type":
        return False
    a, b = old.tensor_type.shape.dim, new.tensor_type.shape.dim
    return len(a) == len(b) and any(x.HasField("dim_value") and x.dim_value > 0 and y.HasField("dim_value")
                                    and y.dim_value == 0 for x, y in zip(a, b))


def _negative(tp: onnx.TypeProto) -> bool:
    return tp.WhichOneof("value") == "tensor_type" and any(
        d.HasField("dim_value") and d.dim_value < 0 for d in tp.tensor_type.shape.dim)


def _changed_attributes(before: Model, after: Model) -> dict[str, str]:
    """Node name → the attributes an edit gave new values ("strides=[5, 5]"), main graph."""
    old = {n.name: n for n in before.lazy_proto.graph.node if n.name}
    changed: dict[str, str] = {}
    for node in after.lazy_proto.graph.node:
        was = old.get(node.name) if node.name else None
        if was is None:
            continue
        previous = {a.name: a for a in was.attribute}
        new = [a for a in node.attribute if a.name not in previous or previous[a.name] != a]
        if new:
            changed[node.name] = ", ".join(f"{a.name}={helper.get_attribute_value(a)!r}" for a in new
                                           if a.type != onnx.AttributeProto.GRAPH)
    return {k: v for k, v in changed.items() if v}
