"""Renaming tensors (scope-aware, subgraph bodies included) and nodes, one by one or by pattern.

Pattern renames: every tensor and/or node name of a model rewritten by one regular expression
and an optional prefix, consistently in every graph (If/Loop/Scan bodies included). A name maps to
the same new name wherever it appears (definition, reads, graph inputs and outputs, initializers,
value_info, quantization annotations), so a body that defines a name of its own keeps shadowing the
outer one after the rename. Two names that would become one are refused, listed: ONNX names are
single-assignment across scopes, and a merged name would silently rewire readers. Local functions
keep their internal names (they are a separate namespace); the nodes that call them are nodes like
any other.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Literal

import onnx

from graphkit import _check_args as argcheck
from graphkit._edit._addressing import _Found, _function_tensor
from graphkit._edit._common import (
    _all_node_names,
    _check_new_tensor_name,
    _find_node,
    _find_scope,
    _finish,
    _noop_returns_input,
    _rename_scope,
)
from graphkit._graph import graph_tensor_names
from graphkit._model import Model, iter_graphs
from graphkit.errors import (
    EditError,
    NoChangeError,
    UsageError,
)


@_noop_returns_input
def rename_tensor(model: Model, /, old: str, new: str, *, check: bool = True) -> Model:
    """Rename a tensor everywhere it appears: node inputs/outputs, graph inputs/outputs, initializers,
    value_info, and reads from If/Loop/Scan bodies (except bodies that define the same name themselves).

    Raises:
        TensorNotFoundError: No graph defines ``old``.
        EditError: ``new`` is already used somewhere in the model.
    """
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    argcheck.name(old, "old", what="tensor name")
    argcheck.name(new, "new", what="tensor name", empty=True)
    argcheck.boolean(check, "check")
    proto = model.copy().lazy_proto
    inside = _function_tensor(proto, old)
    if inside is not None:
        return _rename_in_function(model, proto, inside, old, new, check=check)
    scope, _ = _find_scope(model, proto, old, what="rename_tensor")
    if new == old:
        raise NoChangeError(f"tensor {old!r} already has that name", hint="give a different new name")
    _check_new_tensor_name(proto, new)
    _rename_scope(scope, {old: new})
    return _finish(model, proto, check=check, what=f"rename_tensor {old} -> {new}")


def _rename_in_function(model: Model, proto: onnx.ModelProto, inside: _Found, old: str, new: str, *,
                        check: bool) -> Model:
    """``old`` is ``FUNCTION/TENSOR``: rename the tensor inside that function (its formal inputs and
    outputs included; callers bind them by position). ``new`` is the name inside the function, with or
    without the same ``FUNCTION/`` before it."""
    function, inner = old.partition("/")[::2]
    new = new.removeprefix(f"{function}/")
    if new == inner:
        raise NoChangeError(f"tensor {old!r} already has that name", hint="give a different new name")
    if not new or new in graph_tensor_names(inside.graph):
        raise EditError(f"tensor name {new!r} is {'empty' if not new else 'already used'} in {inside.where}",
                        hint="choose a name no tensor of the function has")
    _rename_scope(inside.graph, {inner: new})
    inside.write_back()
    return _finish(model, proto, check=check, what=f"rename_tensor {old} -> {new}")


@_noop_returns_input
def rename_node(model: Model, /, old: str, new: str, *, check: bool = True) -> Model:
    """Rename a node (in any graph).

    Raises:
        NodeNotFoundError: No node is named ``old``.
        EditError: Another node is already named ``new``.
    """
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    argcheck.name(old, "old", what="node name")
    argcheck.name(new, "new", what="node name", empty=True)
    argcheck.boolean(check, "check")
    proto = model.copy().lazy_proto
    found = _find_node(model, proto, old)
    target = found.node
    if new == target.name:
        raise NoChangeError(f"node {old!r} already has that name", hint="give a different new name")
    taken = _all_node_names(proto) if found.function is None else [n.name for n in found.function.node]
    if not new or new in taken:
        raise EditError(f"node name {new!r} is {'empty' if not new else 'already used'}",
                        hint="choose a name no other node has")
    target.name = new
    return _finish(model, proto, check=check, what=f"rename_node {old} -> {new}")


# ---------------------------------------------------------------------------------------- by pattern

RenameScope = Literal["tensors", "nodes", "all"]
_SCOPES = ("tensors", "nodes", "all")


def rename_everywhere(proto: onnx.ModelProto | onnx.GraphProto, mapping: Mapping[str, str]) -> None:
    """Rename tensors by ``mapping`` in every graph of ``proto``, in place: node inputs and outputs,
    graph inputs, outputs and value_info, initializers (dense and sparse), quantization annotations.

    The mapping is applied to the name wherever it appears, whatever the scope: the caller makes it
    one-to-one over the model's names (``rename_pattern`` and the splice check that).
    """
    if not mapping:
        return
    graph = proto.graph if isinstance(proto, onnx.ModelProto) else proto
    for each, _ in iter_graphs(graph):
        for node in each.node:
            _rename_list(node.input, mapping)
            _rename_list(node.output, mapping)
        for value in [*each.input, *each.output, *each.value_info]:
            value.name = mapping.get(value.name, value.name)
        for tensor in each.initializer:
            tensor.name = mapping.get(tensor.name, tensor.name)
        for sparse in each.sparse_initializer:
            sparse.values.name = mapping.get(sparse.values.name, sparse.values.name)
        for annotation in each.quantization_annotation:
            annotation.tensor_name = mapping.get(annotation.tensor_name, annotation.tensor_name)


def _rename_list(names: Iterable[str], mapping: Mapping[str, str]) -> None:
    items = names  # (a protobuf repeated field, changed in place)
    for i, name in enumerate(list(items)):
        if name in mapping:
            items[i] = mapping[name]  # type: ignore[index]


def rename_nodes_everywhere(proto: onnx.ModelProto, mapping: Mapping[str, str]) -> None:
    """Rename nodes by ``mapping`` in every graph of ``proto`` (bodies included), in place."""
    if not mapping:
        return
    for each, _ in iter_graphs(proto.graph):
        for node in each.node:
            if node.name in mapping:
                node.name = mapping[node.name]


def _compile(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as err:
        raise UsageError(f"the pattern {pattern!r} is not a valid regular expression: {err}",
                         hint="write a Python regular expression, e.g. '^/model/' or '/' (escape '.' as '\\.')") from err


def renamer(pattern: str, replacement: str, prefix: str) -> Callable[[str], str]:
    """The function that renames one name (``prefix + re.sub(pattern, replacement, name)``).

    Raises:
        UsageError: The pattern is not a regular expression (when compiled) or the replacement does
            not fit it (when a name is renamed).
    """
    regex = _compile(pattern) if pattern else None

    def rename(name: str) -> str:
        new = name
        if regex is not None:
            try:
                new = regex.sub(replacement, name)
            except (re.error, IndexError) as err:
                raise UsageError(f"replacement= {replacement!r} does not fit pattern {pattern!r}: {err}",
                                 hint="refer only to groups the pattern has (\\1, \\g<name>)") from err
        return prefix + new

    return rename


def _mapping(names: Iterable[str], rename: Callable[[str], str], what: str) -> dict[str, str]:
    """old → new for the names that change; refuse empty names and collisions, listing them."""
    everything = sorted(set(names))
    result = {name: rename(name) for name in everything}
    empty = [old for old, new in result.items() if not new]
    if empty:
        shown = ", ".join(repr(n) for n in empty[:5])
        raise EditError(f"the rename would leave {len(empty)} {what} name(s) empty: {shown}",
                        hint="change the pattern so that every name keeps at least one character")
    by_new: dict[str, list[str]] = {}
    for old, new in result.items():
        by_new.setdefault(new, []).append(old)
    clashes = {new: olds for new, olds in by_new.items() if len(olds) > 1}
    if clashes:
        items = sorted(clashes.items())
        shown = "; ".join(f"{new!r} from " + ", ".join(repr(o) for o in olds) for new, olds in items[:5])
        more = f" (and {len(items) - 5} more)" if len(items) > 5 else ""
        raise EditError(f"the rename would give different {what}s one name: {shown}{more}",
                        hint="make the pattern keep the names apart (keep a distinguishing part, or add a prefix)")
    return {old: new for old, new in result.items() if new != old}


@_noop_returns_input
def rename_pattern(model: Model, /, pattern: str = "", replacement: str = "", *, prefix: str = "",
                   scope: RenameScope = "all", check: bool = True) -> Model:
    """Rename every tensor and/or node whose name matches a regular expression, and/or prefix them all.

    Each name becomes ``prefix + re.sub(pattern, replacement, name)`` (without a pattern: ``prefix +
    name``), in every graph: graph inputs and outputs, initializers, value_info, node inputs and
    outputs, quantization annotations and If/Loop/Scan bodies, the same name the same way everywhere
    (a body's own definition of a name keeps shadowing the outer one). Unnamed nodes stay unnamed.

    Args:
        model: The model to edit (not modified).
        pattern: A Python regular expression, e.g. ``'^/model/'`` or ``'/'``; "" renames nothing but
            adds ``prefix``.
        replacement: What each match becomes (``re.sub`` syntax: ``\\1`` refers to a group).
        prefix: Put before every (renamed) name.
        scope: "tensors", "nodes" or "all".
        check: Validate the result.

    Raises:
        UsageError: The pattern is not a regular expression, or the replacement refers to a group it lacks.
        EditError: Two names would become one (listed), or a name would become empty.
    """
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    argcheck.name(pattern, "pattern", what="regular expression", empty=True)
    argcheck.name(replacement, "replacement", what="replacement", empty=True)
    argcheck.name(prefix, "prefix", what="prefix", empty=True)
    argcheck.choice(scope, "scope", _SCOPES)
    argcheck.boolean(check, "check")
    if not pattern and not prefix:
        raise UsageError("rename_pattern needs a pattern or a prefix",
                         hint="give pattern= (and replacement=), or prefix=",
                         cli_hint="give --rename-pattern REGEX=REPLACEMENT, or --prefix P with a non-empty P")
    rename = renamer(pattern, replacement, prefix)
    proto = model.copy().lazy_proto
    tensors = _mapping(graph_tensor_names(proto.graph), rename, "tensor") if scope in ("tensors", "all") else {}
    nodes = _mapping(_all_node_names(proto), rename, "node") if scope in ("nodes", "all") else {}
    if not tensors and not nodes:
        raise NoChangeError(f"rename_pattern: no {'' if scope == 'all' else scope[:-1] + ' '}name of {model.name} "
                            f"matches {pattern!r}", hint="check the pattern (a Python regular expression) and the scope")
    rename_everywhere(proto, tensors)
    rename_nodes_everywhere(proto, nodes)
    what = f"rename_pattern {pattern!r} -> {replacement!r}" if pattern else f"rename_pattern prefix {prefix!r}"
    return _finish(model, proto, check=check, what=what)
