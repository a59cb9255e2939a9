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
    _rename_list,
    _rename_scope,
    _tensor_key,
)
from graphkit._edit._opset_merge import merged_opsets, norm_domain
from graphkit._edit.renames import rename_everywhere
from graphkit._graph import graph_tensor_names
from graphkit._model import Model, is_external, iter_graphs, iter_tensors
from graphkit._submodel import finish
from graphkit._summary import TensorSig
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


def merge(a: Model, b: Model, /, connect: Mapping[str, str] | None = None, *,
          prefixes: tuple[str, str] | None = None, outputs: Sequence[str] | None = None,
          share_inputs: bool = True, check: bool = True) -> Model:
    """Join two models: named outputs of ``a`` feed inputs of ``b`` or, without ``connect``, side by side.

    Args:
        a: The first model (its outputs feed ``b``).
        b: The second model.
        connect: ``{a_output: b_input}`` (names before prefixing). None or empty: the models run side
            by side (an ensemble, two heads): graph inputs of the same name and type are shared
            (``share_inputs``), and both models' outputs are the result's.
        prefixes: Prefixes for every name of ``a`` and of ``b`` (subgraphs and node names included), to
            avoid clashes; a shared input keeps its name. None merges without renaming and refuses
            clashing names.
        outputs: The merged model's outputs (prefixed names); default: ``a``'s unconnected outputs, then
            ``b``'s outputs.
        share_inputs: Side by side, feed graph inputs of the same name and type from one input; False
            keeps them apart (then prefixes must tell them apart).
        check: Validate the result.

    Opset imports are reconciled: a domain imported at two versions takes the version at which every
    operator of both models keeps its schema, else the model at the other version is converted
    (onnx.version_converter), else the error lists the operators that differ; ir_version is the
    higher. External weights of both models stay on disk: when they live in different folders, the
    merged model reads them from the folders' common parent (``Model.base_dir``), each location
    prefixed with its own folder, so data files of the same name do not collide. Saving writes one
    data file.

    Raises:
        TensorNotFoundError: A connected name is not an output of ``a`` / an input of ``b``.
        EditError: Connected tensors differ in dtype or fixed dims; names clash; a shared input's types
            differ; opsets cannot be reconciled.
    """
    argcheck.instance(a, "a", Model, argcheck.MODEL)
    argcheck.instance(b, "b", Model, argcheck.MODEL)
    argcheck.optional(argcheck.mapping, connect, "connect", key=_tensor_key, item=_tensor_key)
    if prefixes is not None:
        prefixes = _check_prefixes(prefixes)
    argcheck.optional(argcheck.names, outputs, "outputs", what="tensor name")
    argcheck.boolean(share_inputs, "share_inputs")
    argcheck.boolean(check, "check")
    if not connect:
        result = merge_parallel(a, b, prefixes=prefixes, share_inputs=share_inputs, outputs=outputs)
    else:
        result = _merge_serial(a, b, connect, prefixes, outputs)
    if check:
        check_or_raise(result, what="the merged model")
    return result


def _merge_serial(a: Model, b: Model, connect: Mapping[str, str], prefixes: tuple[str, str] | None,
                  outputs: Sequence[str] | None) -> Model:
    _check_connect(a, b, connect)
    pa, pb = (prefixes or ("", ""))
    left, right = _prefixed(a.lazy_proto, pa), _prefixed(b.lazy_proto, pb)
    links = {pb + bi: pa + ao for ao, bi in connect.items()}
    versions = merged_opsets([(left, a.name), (right, b.name)], convertible=(0, 1))
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
    _set_versions(proto, versions)
    return Model(proto, base_dir, None)


def _check_connect(a: Model, b: Model, connect: Mapping[str, str]) -> None:
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
                            hint="insert a Cast on one side first (insert_node(…, op_type='Cast', attributes={'to': …}))",
                            cli_hint="insert a Cast on one side first (edit --insert-after TENSOR=Cast --attr to=DTYPE)")
        sa, sb = _declared_shape(outs[ao]), _declared_shape(ins[bi])
        if sa is not None and sb is not None and (len(sa) != len(sb) or any(
                isinstance(x, int) and isinstance(y, int) and x != y for x, y in zip(sa, sb))):
            raise EditError(f"cannot connect {ao!r} {sa} of {a.name} to {bi!r} {sb} of {b.name}: shapes differ",
                            hint="make the dims dynamic (set_dims) or reshape one side first",
                            cli_hint="make the dims dynamic (edit --dynamic) or reshape one side first")


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


def _check_clashes(left: onnx.ModelProto, right: onnx.ModelProto, linked: set[str], prefixed: bool) -> None:
    clash = sorted((graph_tensor_names(left.graph) & graph_tensor_names(right.graph)) - linked)
    nodes = sorted(set(_all_node_names(left)) & set(_all_node_names(right)))
    if clash or nodes:
        shown = ", ".join(repr(n) for n in (clash or nodes)[:5])
        raise EditError(f"both models use the {'tensor' if clash else 'node'} names {shown}"
                        + (f" (and {len(clash or nodes) - 5} more)" if len(clash or nodes) > 5 else ""),
                        hint="give different prefixes" if prefixed else "give prefixes, e.g. prefixes=('a/', 'b/')",
                        cli_hint="give different --prefixes" if prefixed else "give prefixes, e.g. --prefixes a/ b/")
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


# ------------------------------------------------------------------------- side by side (no connect)


def merge_parallel(a: Model, b: Model, *, prefixes: tuple[str, str] | None, share_inputs: bool,
                   outputs: Sequence[str] | None) -> Model:
    """``a`` and ``b`` side by side (``merge`` without ``connect``, which checks the arguments and the
    result): graph inputs of one name and type are shared unless ``share_inputs`` is off; every other
    name must be distinct, or made so with prefixes (a shared input keeps its name); both models'
    outputs are the result's.

    Raises:
        EditError: Inputs of one name differ in type (while shared); names clash; opsets cannot be
            reconciled.
    """
    pa, pb = prefixes or ("", "")
    shared = _shared_inputs(a, b) if share_inputs else set()
    left, right = _prefixed(a.lazy_proto, pa), _prefixed(b.lazy_proto, pb)
    rename_everywhere(left, {pa + n: n for n in shared if pa})
    rename_everywhere(right, {pb + n: n for n in shared if pb})
    versions = merged_opsets([(left, a.name), (right, b.name)], convertible=(0, 1))
    for proto in (left, right):
        _set_versions(proto, versions)
    _check_clashes(left, right, shared, prefixes is not None)
    base_dir = _merged_base(a, b, left, right)
    proto = onnx.ModelProto()
    graph = proto.graph
    graph.name = f"{a.lazy_proto.graph.name}+{b.lazy_proto.graph.name}"
    graph.node.extend([*left.graph.node, *right.graph.node])
    graph.input.extend([*left.graph.input, *(i for i in right.graph.input if i.name not in shared)])
    graph.initializer.extend([*left.graph.initializer, *right.graph.initializer])
    graph.sparse_initializer.extend([*left.graph.sparse_initializer, *right.graph.sparse_initializer])
    default_outputs = [*left.graph.output, *right.graph.output]
    graph.output.extend(_pick_outputs(default_outputs, left, right, outputs))
    finish(proto, [left, right])
    _set_versions(proto, versions)
    return Model(proto, base_dir, None)


def _inputs(model: Model) -> dict[str, onnx.ValueInfoProto]:
    graph = model.lazy_proto.graph
    inits = {t.name for t in graph.initializer}
    return {v.name: v for v in graph.input if v.name not in inits}


def _shared_inputs(a: Model, b: Model) -> set[str]:
    """The graph inputs both models have, by name; refuse one of the same name but another type."""
    ins_a, ins_b = _inputs(a), _inputs(b)
    shared = set()
    for name, value in ins_a.items():
        other = ins_b.get(name)
        if other is None:
            continue
        if value.type.SerializeToString(deterministic=True) != other.type.SerializeToString(deterministic=True):
            sa, sb = TensorSig.of(value), TensorSig.of(other)
            raise EditError(f"graph input {name!r} is {sa.dtype} {sa.shape_text()} in {a.name} but {sb.dtype} "
                            f"{sb.shape_text()} in {b.name}, so the models cannot share it",
                            hint="keep the inputs apart (share_inputs=False, prefixes=('a/', 'b/')), or make the "
                                 "types equal first (set_dims)",
                            cli_hint="keep the inputs apart (--no-share-inputs --prefixes a/ b/), or make the types "
                                     "equal first (edit --dynamic / --fixed)")
        shared.add(name)
    return shared


def _set_versions(proto: onnx.ModelProto, versions: Mapping[str, int]) -> None:
    for entry in proto.opset_import:
        entry.version = versions.get(norm_domain(entry.domain), entry.version)
