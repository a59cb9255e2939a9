"""Joining two models (merge)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import onnx
from onnx import helper

from graphkit import _check_args as argcheck
from graphkit._edit._common import (
    _all_node_names,
    _declared_shape,
    _dtype_name,
    _norm_domain,
    _rename_list,
    _rename_scope,
    _tensor_key,
)
from graphkit._graph import graph_tensor_names
from graphkit._model import Model, is_external, iter_graphs, iter_tensors
from graphkit._submodel import finish
from graphkit._validate import check_or_raise
from graphkit.errors import (
    ArgumentTypeError,
    EditError,
    TensorNotFoundError,
    not_found,
)


def _check_prefixes(prefixes: Any) -> tuple[str, str]:
    if isinstance(prefixes, (str, bytes, Mapping)) or not isinstance(prefixes, Sequence) or len(prefixes) != 2:
        raise ArgumentTypeError(f"prefixes= must be a pair of str, not {argcheck.describe(prefixes)}",
                                hint="e.g. prefixes=('a/', 'b/')")
    first = argcheck.name(prefixes[0], "prefixes[0]", what="prefix", empty=True)
    return first, argcheck.name(prefixes[1], "prefixes[1]", what="prefix", empty=True)


def merge(a: Model, b: Model, /, connect: Mapping[str, str], *, prefixes: tuple[str, str] | None = None,
          outputs: Sequence[str] | None = None, check: bool = True) -> Model:
    """Join two models: named outputs of ``a`` feed inputs of ``b``.

    Args:
        a: The first model (its outputs feed ``b``).
        b: The second model.
        connect: ``{a_output: b_input}`` (names before prefixing).
        prefixes: Prefixes for every name of ``a`` and of ``b`` (subgraphs and node names included), to
            avoid clashes. None merges without renaming and refuses clashing names.
        outputs: The merged model's outputs (prefixed names); default: ``a``'s unconnected outputs, then
            ``b``'s outputs.
        check: Validate the result.

    External weights of both models stay on disk: when they live in different folders, the merged
    model reads them from the folders' common parent (``Model.base_dir``), each location prefixed with
    its own folder, so data files of the same name do not collide. Saving writes one data file.

    Raises:
        TensorNotFoundError: A connected name is not an output of ``a`` / an input of ``b``.
        EditError: Connected tensors differ in dtype or fixed dims; names clash; ai.onnx opsets differ.
    """
    argcheck.instance(a, "a", Model, argcheck.MODEL)
    argcheck.instance(b, "b", Model, argcheck.MODEL)
    argcheck.mapping(connect, "connect", key=_tensor_key, item=_tensor_key)
    if prefixes is not None:
        prefixes = _check_prefixes(prefixes)
    argcheck.optional(argcheck.names, outputs, "outputs", what="tensor name")
    argcheck.boolean(check, "check")
    _check_connect(a, b, connect)
    pa, pb = (prefixes or ("", ""))
    left, right = _prefixed(a.lazy_proto, pa), _prefixed(b.lazy_proto, pb)
    links = {pb + bi: pa + ao for ao, bi in connect.items()}
    _merged_opsets(a, b)  # (refuses opsets of one domain at two versions)
    _check_clashes(left, right, set(links), prefixes is not None)
    _rename_scope(right.graph, links, defs=False)
    base_dir = _merged_base(a, b, left, right)
    proto = onnx.ModelProto()
    graph = proto.graph
    graph.name = f"{a.lazy_proto.graph.name}+{b.lazy_proto.graph.name}"
    graph.node.extend([*left.graph.node, *right.graph.node])
    graph.input.extend([*left.graph.input, *(i for i in right.graph.input if i.name not in links)])
    graph.initializer.extend([*left.graph.initializer, *right.graph.initializer])
    graph.sparse_initializer.extend([*left.graph.sparse_initializer, *right.graph.sparse_initializer])
    default_outputs = [o for o in left.graph.output if o.name not in set(links.values())] + list(right.graph.output)
    graph.output.extend(_pick_outputs(default_outputs, left, right, outputs))
    finish(proto, [left, right])  # (the sub-model builder's fields: graphkit._submodel)
    result = Model(proto, base_dir, None)
    if check:
        check_or_raise(result, what="the merged model")
    return result


def _check_connect(a: Model, b: Model, connect: Mapping[str, str]) -> None:
    if not connect:
        raise EditError("merge needs at least one connection {a_output: b_input}",
                        hint="name which output of the first model feeds which input of the second")
    outs = {o.name: o for o in a.lazy_proto.graph.output}
    inits = {t.name for t in b.lazy_proto.graph.initializer}
    ins = {i.name: i for i in b.lazy_proto.graph.input if i.name not in inits}
    for ao, bi in connect.items():
        if ao not in outs:
            raise not_found(TensorNotFoundError, "graph output", ao, outs, where=a.name)
        if bi not in ins:
            raise not_found(TensorNotFoundError, "graph input", bi, ins, where=b.name)
        ta, tb = outs[ao].type.tensor_type, ins[bi].type.tensor_type
        if ta.elem_type and tb.elem_type and ta.elem_type != tb.elem_type:
            raise EditError(f"cannot connect {ao!r} ({_dtype_name(ta.elem_type)}) of {a.name} to {bi!r} "
                            f"({_dtype_name(tb.elem_type)}) of {b.name}: dtypes differ",
                            hint="insert a Cast (insert_node … Cast) on one side first")
        sa, sb = _declared_shape(outs[ao]), _declared_shape(ins[bi])
        if sa is not None and sb is not None and (len(sa) != len(sb) or any(
                isinstance(x, int) and isinstance(y, int) and x != y for x, y in zip(sa, sb))):
            raise EditError(f"cannot connect {ao!r} {sa} of {a.name} to {bi!r} {sb} of {b.name}: shapes differ",
                            hint="make the dims dynamic (set_dims) or reshape one side first")


def _prefixed(proto: onnx.ModelProto, prefix: str) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    if not prefix:
        return copy
    names = graph_tensor_names(copy.graph)
    mapping = {n: prefix + n for n in names}
    for graph, _ in iter_graphs(copy.graph):
        _prefix_graph(graph, mapping)
        for node in graph.node:
            if node.name:
                node.name = prefix + node.name
    return copy


def _prefix_graph(graph: onnx.GraphProto, mapping: Mapping[str, str]) -> None:
    """Rename every name of one graph (not its subgraphs; the caller visits them)."""
    for node in graph.node:
        _rename_list(node.input, mapping)
        _rename_list(node.output, mapping)
    for value in [*graph.input, *graph.output, *graph.value_info]:
        value.name = mapping.get(value.name, value.name)
    for tensor in graph.initializer:
        tensor.name = mapping.get(tensor.name, tensor.name)
    for sparse in graph.sparse_initializer:
        sparse.values.name = mapping.get(sparse.values.name, sparse.values.name)


def _merged_opsets(a: Model, b: Model) -> dict[str, int]:
    found: dict[str, int] = {}
    for model in (a, b):
        for entry in model.lazy_proto.opset_import:
            dom = _norm_domain(entry.domain)
            if dom in found and found[dom] != entry.version:
                raise EditError(f"{a.name} imports {dom or 'ai.onnx'} opset {found[dom]} but {b.name} imports "
                                f"{entry.version}", hint="bring both models to the same opset first "
                                "(onnx.version_converter), then merge")
            found[dom] = int(entry.version)
    return found


def _check_clashes(left: onnx.ModelProto, right: onnx.ModelProto, linked: set[str], prefixed: bool) -> None:
    clash = sorted((graph_tensor_names(left.graph) & graph_tensor_names(right.graph)) - linked)
    nodes = sorted(set(_all_node_names(left)) & set(_all_node_names(right)))
    if clash or nodes:
        shown = ", ".join(repr(n) for n in (clash or nodes)[:5])
        raise EditError(f"both models use the {'tensor' if clash else 'node'} names {shown}"
                        + (f" (and {len(clash or nodes) - 5} more)" if len(clash or nodes) > 5 else ""),
                        hint="give different prefixes" if prefixed else "give prefixes, e.g. prefixes=('a/', 'b/') "
                        "(--prefixes a/ b/)")
    funcs = {(f.domain, f.name): f for f in left.functions}
    for func in right.functions:
        other = funcs.get((func.domain, func.name))
        if other is not None and other.SerializeToString() != func.SerializeToString():
            raise EditError(f"both models define a different local function {func.domain}::{func.name}",
                            hint="rename one of the functions before merging")


def _merged_base(a: Model, b: Model, left: onnx.ModelProto, right: onnx.ModelProto) -> Path | None:
    folders = [(m.base_dir, p) for m, p in ((a, left), (b, right)) if m.base_dir is not None and m.has_external_data]
    if not folders:
        return a.base_dir or b.base_dir
    distinct = {f.resolve() for f, _ in folders}
    if len(distinct) == 1:
        return distinct.pop()
    common = Path(os.path.commonpath([str(f) for f in distinct]))
    for folder, proto in folders:
        relative = folder.resolve().relative_to(common).as_posix()
        for tensor, _ in iter_tensors(proto):
            _relocate(tensor, relative)
    return common


def _relocate(tensor: onnx.TensorProto, folder: str) -> None:
    if not is_external(tensor) or folder in ("", "."):
        return
    for entry in tensor.external_data:
        if entry.key == "location":
            entry.value = f"{folder}/{entry.value}"


def _pick_outputs(default: list[onnx.ValueInfoProto], left: onnx.ModelProto, right: onnx.ModelProto,
                  outputs: Sequence[str] | None) -> list[onnx.ValueInfoProto]:
    if outputs is None:
        return default
    available: dict[str, onnx.ValueInfoProto] = {}
    for value in [*left.graph.value_info, *right.graph.value_info, *left.graph.output, *right.graph.output]:
        available[value.name] = value
    produced = {o for p in (left, right) for n in p.graph.node for o in n.output if o}
    picked = []
    for name in outputs:
        if name in available:
            picked.append(available[name])
        elif name in produced:
            picked.append(helper.make_empty_tensor_value_info(name))
        else:
            raise not_found(TensorNotFoundError, "tensor", name, sorted(produced | set(available)),
                            where="the merged model")
    return picked
