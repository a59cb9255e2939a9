"""onnx-graphsurgeon interop: the only importer of onnx_graphsurgeon in graphkit."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from graphkit import _check_args as argcheck
from graphkit._edit._common import _norm_domain
from graphkit._io import tensor_value
from graphkit._model import Model, is_external, iter_tensors
from graphkit._validate import check_or_raise
from graphkit.errors import (
    EditError,
)


def to_graphsurgeon(model: Model) -> Any:
    """An ``onnx_graphsurgeon.Graph`` of the model, for users who script with graphsurgeon.

    External weights are not read: their constants load lazily from the model's folder when their
    ``values`` are used, and are written back as the same external references by ``from_graphsurgeon``.
    """
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    import onnx_graphsurgeon as gs

    graph = gs.import_onnx(model.copy().lazy_proto)
    _lazy_external(graph, model, gs)
    return graph


def _lazy_external(graph: Any, model: Model, gs: Any) -> None:
    class _FromFolder(gs.ir.tensor.LazyValues):  # type: ignore[name-defined,misc]
        def load(self) -> np.ndarray:
            return tensor_value(model, self.tensor)

    for tensor in graph.tensors().values():
        values = getattr(tensor, "_values", None)
        if isinstance(values, gs.ir.tensor.LazyValues) and is_external(values.tensor):
            lazy = _FromFolder.__new__(_FromFolder)
            lazy.__dict__.update(values.__dict__)
            tensor._values = lazy
    for node in graph.nodes:
        for attr in node.attrs.values():
            if isinstance(attr, gs.Graph):
                _lazy_external(attr, model, gs)


def from_graphsurgeon(graph: Any, *, like: Model | None = None, check: bool = True) -> Model:
    """A Model from an ``onnx_graphsurgeon.Graph``, keeping what a bare export loses.

    Args:
        graph: The graphsurgeon graph.
        like: The model the graph came from: its weights' folder, ir_version, producer, doc string,
            model version, domain, metadata and opset imports of domains still used are kept.
        check: Validate the result.

    Raises:
        InvalidModelError: The exported model fails validation.
        EditError: graphsurgeon cannot export the graph.
    """
    argcheck.optional(argcheck.instance, like, "like", cls=Model, expected=argcheck.MODEL)
    argcheck.boolean(check, "check")
    import onnx_graphsurgeon as gs

    argcheck.instance(graph, "graph", gs.Graph, "an onnx_graphsurgeon.Graph (from graphkit.to_graphsurgeon)")
    try:
        proto = gs.export_onnx(graph)
    except Exception as err:  # graphsurgeon raises plain exceptions
        raise EditError(f"onnx-graphsurgeon cannot export the graph: {err}",
                        hint="check the graph's tensors have dtypes (graph.cleanup().toposort())") from err
    for tensor, _ in iter_tensors(proto):
        if is_external(tensor) and (tensor.HasField("raw_data") or not tensor.external_data):
            del tensor.external_data[:]  # graphsurgeon loaded (and may have changed) these values
            tensor.data_location = onnx.TensorProto.DEFAULT
    base_dir = None
    if like is not None:
        _restore_fields(proto, like.lazy_proto)
        base_dir = like.base_dir
    result = Model(proto, base_dir, None)
    if check:
        check_or_raise(result, what="the model from graphsurgeon")
    return result


def _restore_fields(proto: onnx.ModelProto, like: onnx.ModelProto) -> None:
    proto.ir_version = like.ir_version
    proto.producer_name = like.producer_name
    proto.producer_version = like.producer_version
    proto.domain = like.domain
    proto.model_version = like.model_version
    proto.doc_string = like.doc_string
    del proto.metadata_props[:]
    proto.metadata_props.extend(like.metadata_props)
    versions = {_norm_domain(o.domain): o.version for o in like.opset_import}
    for entry in proto.opset_import:
        entry.version = versions.get(_norm_domain(entry.domain), entry.version)
