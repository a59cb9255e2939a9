"""What every edit family shares: node and tensor lookup, schemas and opsets, argument keys,
finishing an edit (no-op refusal, validation) and scope-aware renames."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path
from typing import Any, ParamSpec

import onnx
from onnx import helper

from graphkit import _check_args as argcheck
from graphkit._build import ai_onnx_version_for
from graphkit._edit._addressing import _Found, _function_graph, _position_in, _refuse_function_tensor
from graphkit._edit._impossible import refuse_impossible_dims
from graphkit._graph import GraphIndex, graph_tensor_names, node_label, subgraphs
from graphkit._infer import refresh_types
from graphkit._model import Model, iter_graphs
from graphkit._validate import check_or_raise
from graphkit.errors import (
    EditError,
    InvalidModelError,
    NoChangeError,
    NodeNotFoundError,
    TensorNotFoundError,
    not_found,
)

log = logging.getLogger(__name__)


Dim = int | str | None
STANDARD_DOMAINS = {"", "ai.onnx", "ai.onnx.ml", "ai.onnx.training", "ai.onnx.preview.training"}


def _all_node_names(proto: onnx.ModelProto) -> list[str]:
    """Every node name of the model, bodies included (each once)."""
    return [name for g, _ in iter_graphs(proto.graph) for name in GraphIndex(g).positions_by_name]


def _find_node(model: Model, proto: onnx.ModelProto, name: str) -> _Found:
    """Locate a node: by name in any graph; ``#<i>``, the main graph's i-th node; ``OP#k``, the main
    graph's k-th node of operator OP; ``FUNCTION/NODE``, a node (by name, ``#<i>`` or ``OP#k``) of
    a local function. A node's own name wins over the other readings.

    Raises:
        NodeNotFoundError: No node has that name (with did-you-mean).
        EditError: Several nodes share the name; a position beyond the nodes there are.
    """
    hits = [_Found(g, i, where) for g, where in iter_graphs(proto.graph)
            for i in GraphIndex(g).positions_by_name.get(name, ())]
    if len(hits) > 1:
        places = ", ".join(sorted({h.where for h in hits}))
        raise EditError(f"{len(hits)} nodes are named {name!r} in {model.name} ({places})",
                        hint="name a main-graph node by its position instead, e.g. '#3' or 'Conv#0' "
                             "(gk.list_nodes(model) lists the positions)",
                        cli_hint="name a main-graph node by its position instead, e.g. '#3' or 'Conv#0' "
                                 "('python -m graphkit inspect MODEL --nodes' lists the positions)")
    if hits:
        return hits[0]
    index = _position_in(list(proto.graph.node), name, model.name, "the main graph")
    if index is not None:
        return _Found(proto.graph, index, "main graph")
    function, _, inner = name.partition("/")
    for func in proto.functions:
        if function in (func.name, f"{func.domain}::{func.name}") and inner:
            nodes = list(func.node)
            index = next((i for i, n in enumerate(nodes) if n.name == inner), None)
            if index is None:
                index = _position_in(nodes, inner, model.name, f"function {func.name!r}")
            if index is None:
                raise not_found(NodeNotFoundError, f"node of function {func.name!r}", inner,
                                [n.name for n in nodes if n.name], where=model.name)
            return _Found(_function_graph(func), index, f"function {func.name!r}", func)
    candidates = _all_node_names(proto) + [f"{f.name}/{n.name}" for f in proto.functions for n in f.node if n.name]
    raise not_found(NodeNotFoundError, "node", name, candidates, where=model.name)


def _find_scope(model: Model, proto: onnx.ModelProto, tensor: str, *, what: str = "this edit"
                ) -> tuple[onnx.GraphProto, str]:
    """The graph that defines ``tensor`` (the main graph first).

    Raises:
        TensorNotFoundError: No graph defines it (with did-you-mean).
        EditError: Several subgraphs define it and the main graph does not; it names a local function's
            tensor (``what``, the edit, does not reach those).
    """
    if tensor in GraphIndex(proto.graph).defined:
        return proto.graph, "main graph"
    hits = [(g, where) for g, where in iter_graphs(proto.graph) if tensor in GraphIndex(g).defined]
    if not hits:
        _refuse_function_tensor(model, proto, tensor, what)
        inside = [f"{f.name}/{t}" for f in proto.functions
                  for t in sorted({*f.input, *f.output, *(o for n in f.node for o in n.output)} - {""})]
        raise not_found(TensorNotFoundError, "tensor", tensor, [*sorted(graph_tensor_names(proto.graph)), *inside],
                        where=model.name)
    if len(hits) > 1:
        raise EditError(f"tensor {tensor!r} is defined in {len(hits)} subgraphs of {model.name}: "
                        + "; ".join(w for _, w in hits), hint="these are different tensors; edit the model with "
                        "to_graphsurgeon for a body-specific change")
    return hits[0]


def _main_input(model: Model, proto: onnx.ModelProto, name: str, *, what: str = "this edit") -> onnx.ValueInfoProto:
    inits = {t.name for t in proto.graph.initializer}
    inputs = [i for i in proto.graph.input if i.name not in inits]
    for value in inputs:
        if value.name == name:
            return value
    _refuse_function_tensor(model, proto, name, what)
    raise not_found(TensorNotFoundError, "graph input", name, [i.name for i in inputs], where=model.name)


def _initializer(model: Model, proto: onnx.ModelProto, name: str, *, what: str = "this edit") -> onnx.TensorProto:
    for tensor in proto.graph.initializer:
        if tensor.name == name:
            return tensor
    _refuse_function_tensor(model, proto, name, what)
    raise not_found(TensorNotFoundError, "initializer", name, [t.name for t in proto.graph.initializer],
                    where=model.name)


def _split_op(op: str) -> tuple[str, str]:
    """``'my::Debug'`` → ("my", "Debug"); ``'Relu'`` → ("", "Relu")."""
    if "::" in op:
        domain, _, name = op.rpartition("::")
        return _norm_domain(domain), name
    return "", op


def _norm_domain(domain: str | None) -> str:
    return "" if domain in (None, "ai.onnx") else str(domain)


def _opset_version(proto: onnx.ModelProto, domain: str) -> int | None:
    for entry in proto.opset_import:
        if _norm_domain(entry.domain) == _norm_domain(domain):
            return int(entry.version)
    return None


def _schema(proto: onnx.ModelProto, op_type: str, domain: str) -> onnx.defs.OpSchema | None:
    """The op's schema at the model's opset, or None for custom domains and unknown ops."""
    version = _opset_version(proto, domain)
    if _norm_domain(domain) not in STANDARD_DOMAINS or version is None:
        return None
    try:
        return onnx.defs.get_schema(op_type, version, _norm_domain(domain))
    except onnx.defs.SchemaError:
        return None


def _elem_type(graph: onnx.GraphProto, name: str) -> int:
    """The element type of a tensor if the graph records it, else 0."""
    for tensor in graph.initializer:
        if tensor.name == name:
            return int(tensor.data_type)
    for value in [*graph.input, *graph.output, *graph.value_info]:
        if value.name == name and value.type.HasField("tensor_type"):
            return int(value.type.tensor_type.elem_type)
    for node in graph.node:
        if node.op_type == "Constant" and node.output and node.output[0] == name:
            for attr in node.attribute:
                if attr.name == "value":
                    return int(attr.t.data_type)
    return 0


def _dtype_name(elem: int) -> str:
    return onnx.helper.tensor_dtype_to_np_dtype(elem).name if elem else "unknown"


_P = ParamSpec("_P")


def _noop_returns_input(edit: Callable[_P, Model]) -> Callable[_P, Model]:
    """The public edit: where ``edit`` raises NoChangeError, return the input model itself (and log why).

    The raising function stays reachable as ``__wrapped__`` for callers that refuse no-ops (the CLI).
    """

    @functools.wraps(edit)
    def public(*args: _P.args, **kwargs: _P.kwargs) -> Model:
        try:
            return edit(*args, **kwargs)
        except NoChangeError as err:
            log.info("%s: returning the model unchanged (%s)", err.message, err.hint)
            model = args[0] if args else kwargs.get("model", kwargs.get("a"))
            assert isinstance(model, Model)  # every edit takes the model first
            return model

    return public


def _tensor_key(value: Any, keyword: str) -> str:
    return argcheck.name(value, keyword, what="tensor name")


def _attribute_key(value: Any, keyword: str) -> str:
    return argcheck.name(value, keyword, what="attribute name")


def _finish(before: Model, proto: onnx.ModelProto, *, check: bool, what: str, base_dir: Path | None = None,
            retype: bool = False, keep: Collection[str] = (), forget: Collection[int] = ()) -> Model:
    """Wrap the edited proto; refuse a no-op; re-derive the declared types it made stale (``retype``:
    value_info, graph outputs but ``keep``, body inputs and outputs); validate.

    Raises:
        NoChangeError: The edit changed nothing.
        EditError: The result cannot be typed consistently (the message names the node).
        InvalidModelError: The result fails validation.
    """
    if proto.SerializeToString(deterministic=True) == before.lazy_proto.SerializeToString(deterministic=True):
        raise NoChangeError(f"{what} changes nothing in {before.name}",
                            hint="drop this edit (an edit that changes nothing returns its input model)",
                            cli_hint="drop this edit, or pass --allow-noop to accept edits that change nothing")
    result = Model(proto, base_dir if base_dir is not None else before.base_dir, None)
    if retype:
        try:
            result, _ = refresh_types(result, keep=keep, label=f"the model after {what}", forget=forget)
        except InvalidModelError as err:
            if not _typable(before):  # the edit did not cause it: its types stay as the edit left them
                log.info("%s: %s cannot be typed before the edit either; declared types left as they are",
                         what, before.name)
            else:
                raise EditError(err.message, hint="undo this edit, or make the nodes it feeds agree with it "
                                                  "(set_attribute, set_dims, remove_node)",
                                cli_hint="undo this edit, or make the nodes it feeds agree with it "
                                         "(--set-attr, --fixed, --remove-node)") from err
        refuse_impossible_dims(before, result, what)
    if check:
        check_or_raise(result, what=f"the model after {what}")
    return result


def _typable(model: Model) -> bool:
    """Whether strict shape inference types the model without finding a contradiction."""
    try:
        refresh_types(model)
    except InvalidModelError:
        return False
    return True


def _rename_scope(graph: onnx.GraphProto, mapping: Mapping[str, str], *, defs: bool = True,
                  outputs: bool = True, skip: onnx.NodeProto | None = None) -> None:
    """Rename tensors in ``graph`` and, unless shadowed, in its nested subgraphs.

    Args:
        graph: The scope whose names change.
        mapping: Old name → new name.
        defs: Also rename definitions (inputs, initializers, node outputs, value_info); False rewires reads only.
        outputs: Also rename the graph's outputs (reads of this scope).
        skip: A node whose inputs stay as they are (a node just inserted to read the old name).
    """
    if not mapping:
        return
    for node in graph.node:
        if node is not skip:
            _rename_list(node.input, mapping)
        if defs:
            _rename_list(node.output, mapping)
        if node is skip:
            continue
        for sub in subgraphs(node):
            shadowed = GraphIndex(sub).defined
            inner = {k: v for k, v in mapping.items() if k not in shadowed}
            _rename_scope(sub, inner, defs=False, outputs=True)
            for value in sub.value_info:  # types recorded for outer tensors
                if value.name in inner:
                    value.name = inner[value.name]
    if outputs:
        for value in graph.output:
            if value.name in mapping:
                value.name = mapping[value.name]
    if defs:
        for value in [*graph.input, *graph.value_info]:
            if value.name in mapping:
                value.name = mapping[value.name]
        for tensor in graph.initializer:
            if tensor.name in mapping:
                tensor.name = mapping[tensor.name]
        for sparse in graph.sparse_initializer:
            if sparse.values.name in mapping:
                sparse.values.name = mapping[sparse.values.name]


def _rename_list(names: Any, mapping: Mapping[str, str]) -> None:
    for i, name in enumerate(names):
        if name in mapping:
            names[i] = mapping[name]


def _readers(graph: onnx.GraphProto, name: str) -> list[str]:
    """Labels of the nodes (and graph outputs) of ``graph`` that read ``name``."""
    index = GraphIndex(graph)
    found = [node_label(graph.node[i], i) for i in index.consumers.get(name, [])]
    if name in index.outputs:
        found.append("a graph output")
    return found


_A = onnx.AttributeProto


def _ensure_opset(proto: onnx.ModelProto, domain: str) -> None:
    """Import ``domain`` if the model does not: version 1 of a custom domain, ``ai_onnx_version_for``
    the model's IR version for ai.onnx (a model importing only a custom domain got ai.onnx 1, or no
    import for the Casts put in it)."""
    if _opset_version(proto, domain) is None:
        version = ai_onnx_version_for(proto.ir_version) if domain in ("", "ai.onnx") else 1
        proto.opset_import.append(helper.make_opsetid(domain, version))


def _check_new_tensor_name(proto: onnx.ModelProto, new: str) -> None:
    if not new:
        raise EditError("a tensor name cannot be empty", hint="give a non-empty name")
    if new in graph_tensor_names(proto.graph):
        raise EditError(f"tensor name {new!r} is already used in the model",
                        hint="choose a name no tensor has (names must stay unique, subgraphs included)")


def _drop_value_info(graph: onnx.GraphProto, names: set[str]) -> None:
    kept = [v for v in graph.value_info if v.name not in names]
    del graph.value_info[:]
    graph.value_info.extend(kept)


def _fresh(stem: str, taken: set[str]) -> str:
    if stem not in taken:
        return stem
    n = 1
    while f"{stem}_{n}" in taken:
        n += 1
    return f"{stem}_{n}"


def _declared_shape(info: onnx.ValueInfoProto) -> list[Dim] | None:
    tensor_type = info.type.tensor_type
    if not tensor_type.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tensor_type.shape.dim]


def _every_node(proto: onnx.ModelProto) -> Iterable[onnx.NodeProto]:
    for graph, _ in iter_graphs(proto.graph):
        yield from graph.node
    for func in proto.functions:
        yield from func.node


def _drop_opsets(proto: onnx.ModelProto, domains: set[str]) -> None:
    kept = [o for o in proto.opset_import if _norm_domain(o.domain) not in domains]
    del proto.opset_import[:]
    proto.opset_import.extend(kept)
