"""summarize(model): what ``inspect`` shows — structure only, no weights read."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any

import onnx

from graphkit import _check_args as argcheck
from graphkit._io import tensor_nbytes
from graphkit._model import Model, is_borrowed, is_external, iter_graphs, iter_tensors, read_in

__all__ = ["Summary", "TensorSig", "dtype_name", "shape_of", "summarize", "type_name"]


@lru_cache(maxsize=64)
def dtype_name(elem_type: int) -> str:
    """A readable dtype name ("float32", "int64") for an ONNX element type (remembered: numpy's
    names cost microseconds each, and a report may name tens of thousands of tensors)."""
    if elem_type == 0:
        return "unknown"
    try:
        return str(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, ValueError, TypeError):
        return onnx.TensorProto.DataType.Name(elem_type).lower() if elem_type in onnx.TensorProto.DataType.values() else str(elem_type)


def type_name(tp: onnx.TypeProto | None) -> str:
    """A type's element type as text: ``float32``, ``string`` (not numpy's ``object``),
    ``sequence(float32)``, ``map(int64,float32)``, ``optional(…)``, ``sparse(…)``, or ``unknown``."""
    kind = None if tp is None else tp.WhichOneof("value")
    if tp is None or kind is None:
        return "unknown"
    if kind in ("tensor_type", "sparse_tensor_type"):
        elem = getattr(tp, kind).elem_type
        name = "string" if elem == onnx.TensorProto.STRING else dtype_name(elem)
        return f"sparse({name})" if kind == "sparse_tensor_type" else name
    if kind == "sequence_type":
        return f"sequence({type_name(tp.sequence_type.elem_type)})"
    if kind == "optional_type":
        return f"optional({type_name(tp.optional_type.elem_type)})"
    if kind == "map_type":
        key = tp.map_type.key_type
        return f"map({'string' if key == onnx.TensorProto.STRING else dtype_name(key)},{type_name(tp.map_type.value_type)})"
    return kind


def shape_of(value: onnx.ValueInfoProto) -> list[int | str | None] | None:
    """The shape of a tensor value_info: ints, dim names, or None per unknown dim; None if unranked."""
    tensor_type = value.type.tensor_type
    if not tensor_type.HasField("shape"):
        return None
    dims: list[int | str | None] = []
    for dim in tensor_type.shape.dim:
        if dim.HasField("dim_value"):
            dims.append(int(dim.dim_value))
        elif dim.HasField("dim_param"):
            dims.append(dim.dim_param)
        else:
            dims.append(None)
    return dims


@dataclass(frozen=True)
class TensorSig:
    """A graph input or output: name, dtype and shape (named dims kept as names)."""

    name: str
    dtype: str
    shape: list[int | str | None] | None

    @classmethod
    def of(cls, value: onnx.ValueInfoProto) -> TensorSig:
        """From a ValueInfoProto (sequences, maps and optionals named by their element types)."""
        if value.type.WhichOneof("value") != "tensor_type":
            return cls(value.name, type_name(value.type), None)
        return cls(value.name, type_name(value.type), shape_of(value))

    def shape_text(self) -> str:
        """``[1, 3, 'batch', ?]`` style."""
        if self.shape is None:
            return "[unranked]"
        return "[" + ", ".join("?" if d is None else str(d) for d in self.shape) + "]"


@dataclass(frozen=True)
class Summary:
    """Everything ``inspect`` reports about a model.

    ``node_count`` counts the nodes of If/Loop/Scan bodies too (``subgraph_node_count`` of them);
    weights held in Constant nodes are counted apart from initializers (``constant_count``,
    ``constant_bytes``)."""

    path: str
    graph_name: str
    ir_version: int
    opsets: dict[str, int]
    producer: str
    producer_version: str
    doc_string: str
    inputs: list[TensorSig]
    outputs: list[TensorSig]
    node_count: int
    op_types: dict[str, int]
    initializer_count: int
    initializer_bytes: int
    constant_count: int
    constant_bytes: int
    subgraph_node_count: int
    external_bytes: int
    external_files: list[str]
    subgraphs: list[str]
    custom_domains: list[str]
    functions: list[str]
    metadata: dict[str, str]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)


def summarize(model: Model) -> Summary:
    """Describe a model's structure without reading any weight."""
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    proto = model.lazy_proto
    graph = proto.graph
    initializer_names = {t.name for t in graph.initializer}
    ops: Counter[str] = Counter()
    node_count = 0
    custom: set[str] = set()
    subgraph_paths: list[str] = []
    body_nodes = constant_count = constant_bytes = 0
    for sub, where in iter_graphs(graph):
        if sub is not graph:
            subgraph_paths.append(f"{where} ({len(sub.node)} nodes)")
            body_nodes += len(sub.node)
        for node in sub.node:
            node_count += 1
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
                for attr in node.attribute:
                    if attr.HasField("t"):  # (value; its bytes are counted from dims, not read)
                        constant_count += 1
                        constant_bytes += max(tensor_nbytes(attr.t), 0)
            domain = node.domain or ""
            ops[f"{domain}::{node.op_type}" if domain not in ("", "ai.onnx") else node.op_type] += 1
            if domain not in ("", "ai.onnx", "ai.onnx.ml", "com.microsoft"):
                custom.add(domain)
    weights = external = 0
    files: dict[str, None] = {}
    init_count = 0
    for tensor in (t for g, _ in iter_graphs(graph) for t in g.initializer):
        init_count += 1
        size = tensor_nbytes(tensor)
        weights += max(size, 0)
    held = {t.name for t, _ in iter_tensors(proto) if not is_external(t)} if read_in(model) else set()
    for name, location, size in read_in(model):  # (small external tensors load read in: on disk all the same)
        if name in held:
            files[location] = None
            external += size
    for tensor, _ in iter_tensors(proto):
        if is_external(tensor) and not is_borrowed(tensor):
            entries = {e.key: e.value for e in tensor.external_data}
            files[entries.get("location", "?")] = None
            external += max(tensor_nbytes(tensor), 0)
    return Summary(
        path=model.name,
        graph_name=graph.name,
        ir_version=proto.ir_version,
        opsets={(o.domain or "ai.onnx"): o.version for o in proto.opset_import},
        producer=proto.producer_name,
        producer_version=proto.producer_version,
        doc_string=proto.doc_string,
        inputs=[TensorSig.of(v) for v in graph.input if v.name not in initializer_names],
        outputs=[TensorSig.of(v) for v in graph.output],
        node_count=node_count,
        op_types=dict(ops.most_common()),
        initializer_count=init_count,
        initializer_bytes=weights,
        constant_count=constant_count,
        constant_bytes=constant_bytes,
        subgraph_node_count=body_nodes,
        external_bytes=external,
        external_files=list(files),
        subgraphs=subgraph_paths,
        custom_domains=sorted(custom),
        functions=[f"{f.domain}::{f.name}" for f in proto.functions],
        metadata={p.key: p.value for p in proto.metadata_props},
    )

