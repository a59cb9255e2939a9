"""Renaming tensors (scope-aware, subgraph bodies included) and nodes."""

from __future__ import annotations

from graphkit import _check_args as argcheck
from graphkit._edit._common import (
    _all_node_names,
    _check_new_tensor_name,
    _find_node,
    _find_scope,
    _finish,
    _noop_returns_input,
    _rename_scope,
)
from graphkit._model import Model
from graphkit.errors import (
    EditError,
    NoChangeError,
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
    scope, _ = _find_scope(model, proto, old)
    if new == old:
        raise NoChangeError(f"tensor {old!r} already has that name", hint="give a different new name")
    _check_new_tensor_name(proto, new)
    _rename_scope(scope, {old: new})
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
    target = _find_node(model, proto, old).node
    if new == target.name:
        raise NoChangeError(f"node {old!r} already has that name", hint="give a different new name")
    if not new or new in _all_node_names(proto):
        raise EditError(f"node name {new!r} is {'empty' if not new else 'already used'}",
                        hint="choose a name no other node has")
    target.name = new
    return _finish(model, proto, check=check, what=f"rename_node {old} -> {new}")
