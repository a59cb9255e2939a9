"""Edits of operators and opset imports: a node's operator (set_op_type), every node of one
operator (replace_op), the model's opset imports (set_opset)."""

from __future__ import annotations

from typing import cast

import onnx
from onnx import helper

from graphkit import _check_args as argcheck
from graphkit._edit._common import (
    STANDARD_DOMAINS,
    _drop_opsets,
    _ensure_opset,
    _every_node,
    _find_node,
    _finish,
    _noop_returns_input,
    _norm_domain,
    _opset_version,
    _split_op,
)
from graphkit._graph import node_label
from graphkit._model import Model
from graphkit.errors import (
    EditError,
    NameNotFoundError,
    NodeNotFoundError,
    not_found,
)


@_noop_returns_input
def set_op_type(model: Model, /, node: str, op_type: str, domain: str | None = None, *,
                check: bool = True) -> Model:
    """Change a node's operator (and, optionally, its domain), keeping its inputs, outputs and attributes.

    Args:
        model: The model to edit (not modified).
        node: The node's name.
        op_type: The new operator, e.g. "Sub".
        domain: The new domain (None keeps the node's; "" is ai.onnx). A new custom domain gets an
            opset import of version 1.
        check: Validate the result.

    Raises:
        NodeNotFoundError: No such node.
        NameNotFoundError: The standard domain has no such operator (with did-you-mean).
        EditError: The node's attributes or input count do not fit the new operator.
    """
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    argcheck.name(node, "node", what="node name")
    argcheck.name(op_type, "op_type", what="operator")
    argcheck.optional(argcheck.name, domain, "domain", what="domain", empty=True)
    argcheck.boolean(check, "check")
    proto = model.copy().lazy_proto
    target = _find_node(model, proto, node).node
    new_domain = _norm_domain(target.domain if domain is None else domain)
    _check_op_fits(proto, target, op_type, new_domain, keep_attributes=True)
    _relabel(target, op_type, new_domain)
    _ensure_opset(proto, new_domain)
    return _finish(model, proto, check=check, what=f"set_op_type {node}", retype=True)


def _newest_opset(domain: str) -> int | None:
    """The newest opset of a standard domain that this onnx knows (None: a custom domain)."""
    if domain not in STANDARD_DOMAINS:
        return None
    if domain == "":
        return int(onnx.defs.onnx_opset_version())
    versions = [int(s.since_version) for s in onnx.defs.get_all_schemas_with_history() if s.domain == domain]
    return max(versions) if versions else None


def _relabel(node: onnx.NodeProto, op_type: str, domain: str) -> None:
    """Give the node its new operator, leaving fields that already say so untouched (writing
    ``domain=""`` onto a node that had no domain field would make a no-op look like a change)."""
    if node.op_type != op_type:
        node.op_type = op_type
    if _norm_domain(node.domain) != domain:
        node.domain = domain


def _new_schema(proto: onnx.ModelProto, op_type: str, domain: str) -> onnx.defs.OpSchema:
    """The schema of ``op_type`` at the model's opset of ``domain`` (the newest when not imported).

    Raises:
        EditError: The operator exists, but only from a later opset (which one is named).
        NameNotFoundError: The domain has no such operator (with did-you-mean).
    """
    imported = _opset_version(proto, domain)
    version = imported or onnx.defs.onnx_opset_version()
    try:
        return onnx.defs.get_schema(op_type, version, domain)
    except onnx.defs.SchemaError as err:
        since = _introduced(op_type, domain)
        label = domain or "ai.onnx"
        if since is not None:
            raise EditError(f"{op_type} does not exist at {label} opset {version}, the model's; it was introduced "
                            f"in opset {since}",
                            hint=f"raise the model's opset first (set_opset({domain!r}, {since})), then replace",
                            cli_hint=f"raise the model's opset first (--set-opset {label}={since}), then replace") from err
        known = sorted({s.name for s in onnx.defs.get_all_schemas() if s.domain == domain})
        error = not_found(NameNotFoundError, f"operator in domain {label!r} (opset {version})", op_type, known)
        raise error from err


def _introduced(op_type: str, domain: str) -> int | None:
    """The opset that introduced ``op_type`` in ``domain`` (None: no opset has it)."""
    versions = [int(s.since_version) for s in onnx.defs.get_all_schemas_with_history()
                if s.name == op_type and s.domain == domain]
    return min(versions) if versions else None


def _check_op_fits(proto: onnx.ModelProto, node: onnx.NodeProto, op_type: str, domain: str, *,
                   keep_attributes: bool) -> None:
    """Refuse an operator the domain does not have (at the model's opset), or that the node's
    inputs/attributes do not fit."""
    if domain not in STANDARD_DOMAINS:
        return
    schema = _new_schema(proto, op_type, domain)
    label = node_label(node)
    inputs = len(node.input)
    if not schema.min_input <= inputs <= schema.max_input:
        raise EditError(f"{label} has {inputs} inputs; {op_type} takes {schema.min_input} to {schema.max_input}",
                        hint="pick an operator with the same inputs, or rewire the node first")
    outputs = len(node.output)
    if not schema.min_output <= outputs <= schema.max_output:
        raise EditError(f"{label} has {outputs} outputs; {op_type} gives {schema.min_output} to {schema.max_output}",
                        hint="pick an operator with the same outputs")
    if keep_attributes:
        extra = _refused_attributes(schema, node)
        if extra:
            raise EditError(f"{label} has attributes {extra} that {op_type} does not take",
                            hint="remove them first (remove_attribute)", cli_hint="remove them first (--remove-attr)")


def _refused_attributes(schema: onnx.defs.OpSchema, node: onnx.NodeProto) -> list[str]:
    """The node's attributes the schema does not accept: unknown names, or a type it does not declare."""
    refused = []
    for attr in node.attribute:
        declared = schema.attributes.get(attr.name)
        if declared is None:
            refused.append(attr.name)
        elif _declared_type(declared) != int(attr.type):
            refused.append(f"{attr.name} ({onnx.AttributeProto.AttributeType.Name(attr.type)}, "
                           f"{schema.name} takes {onnx.AttributeProto.AttributeType.Name(_declared_type(declared))})")
    return refused


def _check_relabelled(proto: onnx.ModelProto, domain: str, version: int) -> None:
    """Refuse a relabelled import under which a node no longer fits its operator (an opset-6 Add with
    ``broadcast`` under opset 7): the node needs converting, not relabelling."""
    if domain not in STANDARD_DOMAINS:
        return
    for node in _every_node(proto):
        if _norm_domain(node.domain) != domain:
            continue
        try:
            _check_op_fits(proto, node, node.op_type, domain, keep_attributes=True)
        except (EditError, NameNotFoundError) as err:
            raise EditError(f"set_opset only relabels the import, and under opset {version} {err.message}",
                            hint=f"convert the model instead: gk.convert_opset(model, {version})",
                            cli_hint=f"convert the model instead: python -m graphkit convert IN OUT --opset {version}"
                            ) from err


@_noop_returns_input
def replace_op(model: Model, /, old_op: str, new_op_type: str = "Identity", *, new_domain: str = "",
               drop_attributes: bool = False, check: bool = True) -> Model:
    """Replace every node of one operator (in every graph and local function) by another operator.

    The nodes keep the attributes the new operator's schema accepts at the model's opset (a
    ``com.example::MyGelu`` keeps ``approximate="tanh"`` as a ``Gelu``); attributes it does not accept
    are refused, listed, unless ``drop_attributes``. An operator of a custom domain (no schema) keeps
    every attribute. A domain no node uses any more loses its opset import.

    Args:
        model: The model to edit (not modified).
        old_op: The operator to replace, ``domain::OpType`` (e.g. ``my::Debug``) or ``OpType`` for ai.onnx.
        new_op_type: The operator to use instead.
        new_domain: Its domain ("" is ai.onnx).
        drop_attributes: Drop the attributes the new operator does not accept instead of refusing them.
        check: Validate the result.

    Raises:
        NodeNotFoundError: No node has that operator (with did-you-mean over the model's operators).
        EditError: The new operator does not exist at the model's opset (the opset that introduced it is
            named); a node's inputs or outputs do not fit it; attributes it does not accept (listed),
            without ``drop_attributes``.
    """
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    argcheck.name(old_op, "old_op", what="operator")
    argcheck.name(new_op_type, "new_op_type", what="operator")
    argcheck.name(new_domain, "new_domain", what="domain", empty=True)
    argcheck.boolean(drop_attributes, "drop_attributes")
    argcheck.boolean(check, "check")
    proto = model.copy().lazy_proto
    domain, op_type = _split_op(old_op)
    new_dom = _norm_domain(new_domain)
    targets = [n for n in _every_node(proto) if n.op_type == op_type and _norm_domain(n.domain) == domain]
    if not targets:
        present = sorted({(f"{n.domain}::" if _norm_domain(n.domain) else "") + n.op_type for n in _every_node(proto)})
        raise not_found(NodeNotFoundError, "operator", old_op, present, where=model.name)
    schema = _new_schema(proto, new_op_type, new_dom) if new_dom in STANDARD_DOMAINS else None
    for node in targets:
        refused = _refused_attributes(schema, node) if schema is not None else []
        if refused and not drop_attributes:
            where = f"{new_dom or 'ai.onnx'} opset {_opset_version(proto, new_dom) or onnx.defs.onnx_opset_version()}"
            raise EditError(f"{node_label(node)} has attributes {refused} that {new_op_type} (at {where}) does not take",
                            hint="drop them (drop_attributes=True), or pick an operator that takes them",
                            cli_hint="drop them (--drop-attributes after --replace-op), or pick an operator that "
                                     "takes them")
        probe = onnx.NodeProto()
        probe.CopyFrom(node)
        _keep_accepted(probe, schema)
        _check_op_fits(proto, probe, new_op_type, new_dom, keep_attributes=True)
    for node in targets:
        _relabel(node, new_op_type, new_dom)
        _keep_accepted(node, schema)
    _ensure_opset(proto, new_dom)
    if domain and domain not in {_norm_domain(n.domain) for n in _every_node(proto)}:
        _drop_opsets(proto, {domain})
    return _finish(model, proto, check=check, what=f"replace_op {old_op} -> {new_op_type}", retype=True)


def _declared_type(attribute: onnx.defs.OpSchema.Attribute) -> int:
    """A schema attribute's type as an AttributeProto type number."""
    return cast(int, attribute.type)


def _keep_accepted(node: onnx.NodeProto, schema: onnx.defs.OpSchema | None) -> None:
    if schema is None:
        return
    kept = [a for a in node.attribute if a.name in schema.attributes and _declared_type(schema.attributes[a.name]) == int(a.type)]
    del node.attribute[:]
    node.attribute.extend(kept)


@_noop_returns_input
def set_opset(model: Model, /, domain: str, version: int | None, *, check: bool = True) -> Model:
    """Set, add or (with ``version=None``) remove the model's opset import for a domain.

    This changes the import only; it does not convert operators between versions (the result is
    validated, so an operator that does not exist at the new version is refused).

    Raises:
        EditError: Removing a domain some node still uses; a version below 1.
    """
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    argcheck.name(domain, "domain", what="domain", empty=True)
    argcheck.optional(argcheck.integer, version, "version", minimum=1, maximum=argcheck.INT64_MAX)
    argcheck.boolean(check, "check")
    proto = model.copy().lazy_proto
    dom = _norm_domain(domain)
    if version is None:
        users = [n for n in _every_node(proto) if _norm_domain(n.domain) == dom]
        if _opset_version(proto, dom) is None:
            raise not_found(NameNotFoundError, "opset import", domain,
                            [o.domain or "ai.onnx" for o in proto.opset_import], where=model.name)
        if users:
            raise EditError(f"cannot remove the opset import of {domain or 'ai.onnx'!r}: "
                            f"{len(users)} nodes use it, e.g. {node_label(users[0])}",
                            hint="replace those nodes first (replace_op)", cli_hint="replace those nodes first (--replace-op)")
        _drop_opsets(proto, {dom})
    else:
        if isinstance(version, bool) or int(version) < 1:
            raise EditError(f"opset version {version!r} for {domain or 'ai.onnx'!r} is not valid",
                            hint="give a version >= 1")
        newest = _newest_opset(dom)
        if newest is not None and int(version) > newest:
            raise EditError(f"{dom or 'ai.onnx'} has no opset {version}: the newest this ONNX ({onnx.__version__}) "
                            f"knows is {newest}", hint=f"give a version from 1 to {newest}")
        entry = next((o for o in proto.opset_import if _norm_domain(o.domain) == dom), None)
        if entry is None:
            proto.opset_import.append(helper.make_opsetid(dom, int(version)))
        else:
            entry.version = int(version)
            _check_relabelled(proto, dom, int(version))
    return _finish(model, proto, check=check, what=f"set_opset {domain or 'ai.onnx'}={version}", retype=True)
