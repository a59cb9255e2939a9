"""Node references beyond a plain name: ``#<i>`` and ``OP#k`` positions, and a local function's nodes
seen as a graph (``FUNCTION/NODE``); ``_common._find_node`` resolves them."""

from __future__ import annotations

import re

import onnx
from onnx import helper

from graphkit._graph import position_ref
from graphkit.errors import EditError

#: ``OP#k``: the k-th node (from 0) of operator OP (``Conv#2``, ``my::Debug#0``).
_OP_POSITION = re.compile(r"^(?P<op>[^#]+)#(?P<k>\d+)$")


def _position_in(nodes: list[onnx.NodeProto], ref: str, model: str, where: str) -> int | None:
    """The position ``#<i>`` or ``OP#k`` names among ``nodes`` (None: not such a reference).

    Raises:
        EditError: The position is beyond the nodes there are.
    """
    position = position_ref(ref)
    if position is not None:
        if position < len(nodes):
            return position
        raise EditError(f"{where} of {model} has {len(nodes)} nodes; there is no node #{position}",
                        hint=f"use #0 to #{len(nodes) - 1}, or a node name")
    match = _OP_POSITION.match(ref)
    if match is None:
        return None
    op, k = match.group("op"), int(match.group("k"))
    same = [i for i, n in enumerate(nodes) if op in (n.op_type, f"{n.domain}::{n.op_type}")]
    if not same:
        return None
    if k < len(same):
        return same[k]
    raise EditError(f"{where} of {model} has {len(same)} {op} nodes; there is no {op}#{k}",
                    hint=f"use {op}#0 to {op}#{len(same) - 1}")


def _function_graph(func: onnx.FunctionProto) -> onnx.GraphProto:
    """A graph holding copies of a function's nodes, its inputs and outputs as untyped graph inputs and
    outputs (for the edits that walk a graph)."""
    holder = onnx.GraphProto()
    holder.name = func.name
    holder.node.extend(func.node)
    holder.input.extend(helper.make_empty_tensor_value_info(n) for n in func.input)
    holder.output.extend(helper.make_empty_tensor_value_info(n) for n in func.output)
    return holder
