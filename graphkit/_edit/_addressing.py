"""Node and tensor references beyond a plain name: ``#<i>`` and ``OP#k`` positions, and a local function's
nodes and tensors seen as a graph (``FUNCTION/NODE``, ``FUNCTION/TENSOR``); ``_common._find_node`` resolves
nodes."""

from __future__ import annotations

import re
from dataclasses import dataclass

import onnx
from onnx import helper

from graphkit._graph import GraphIndex, position_ref
from graphkit._model import Model, iter_graphs
from graphkit.errors import EditError


@dataclass(frozen=True)
class _Found:
    """A node located in some graph of a model, or in a local function.

    For a function's node, ``graph`` is a graph holding copies of the function's nodes (what the
    graph-level edits walk) and ``node`` the function's node itself; an edit that changes ``graph``
    calls ``write_back`` before it finishes.
    """

    graph: onnx.GraphProto
    index: int
    where: str
    function: onnx.FunctionProto | None = None

    @property
    def node(self) -> onnx.NodeProto:
        return (self.function or self.graph).node[self.index]

    def write_back(self) -> None:
        """Put the edited copies of a function's nodes, and its formal inputs and outputs, back into the
        function (a graph's: nothing to do)."""
        if self.function is not None:
            del self.function.node[:]
            self.function.node.extend(self.graph.node)
            for names, values in ((self.function.input, self.graph.input), (self.function.output, self.graph.output)):
                del names[:]
                names.extend(v.name for v in values)


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


def _function_tensor(proto: onnx.ModelProto, name: str) -> _Found | None:
    """``FUNCTION/TENSOR``: a tensor of a local function (a formal input or output, or what its nodes read
    or write) as a ``_Found`` whose ``graph`` holds the function's nodes and ``index`` is -1; None when
    no function has it or some graph of the model defines ``name`` itself (a graph's own tensor wins)."""
    function, sep, inner = name.partition("/")
    if not sep or not inner:
        return None
    for func in proto.functions:
        if function in (func.name, f"{func.domain}::{func.name}"):
            names = {*func.input, *func.output, *(t for n in func.node for t in (*n.input, *n.output))}
            if inner in names - {""}:
                if any(name in GraphIndex(g).defined for g, _ in iter_graphs(proto.graph)):
                    return None
                return _Found(_function_graph(func), -1, f"function {func.name!r}", func)
    return None


def _refuse_function_tensor(model: Model, proto: onnx.ModelProto, name: str, what: str) -> None:
    """Refuse, saying what does work there, an edit of graph tensors given a ``FUNCTION/TENSOR`` name.

    Raises:
        EditError: ``name`` is a tensor of a local function.
    """
    found = _function_tensor(proto, name)
    if found is None:
        return
    assert found.function is not None
    inner = name.partition("/")[2]
    raise EditError(f"{name!r} is tensor {inner!r} of local function {found.function.name!r} in {model.name}: {what} "
                    "changes the tensors of the model's graphs only (a function's tensors have no declared types, "
                    "initializers or graph outputs: the function is typed where it is called)",
                    hint="inside a function, rename_tensor, insert_node and set_initializer (a Constant's value) take "
                         "FUNCTION/TENSOR, and the node edits FUNCTION/NODE; or edit the main-graph tensors the "
                         "function's call reads or writes",
                    cli_hint="inside a function, --rename, --insert-after and --set-initializer (a Constant's value) "
                             "take FUNCTION/TENSOR, and the node edits FUNCTION/NODE; or edit the main-graph tensors "
                             "the function's call reads or writes")
