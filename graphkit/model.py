"""Model: an ONNX ModelProto together with the folder its external weights live in.

A bare ModelProto cannot remember where its weights are; saving it elsewhere then points at a data
file that is not there. ``Model`` carries that folder (``base_dir``) everywhere, so every transform
and every writer can find the weights without reading them until their values are needed.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx

__all__ = ["BORROWED_KEY", "Model", "Outline", "has_external_data", "is_borrowed", "is_external", "iter_graphs", "iter_initializers", "iter_tensors", "outline"]

#: Marks (in TensorProto.metadata_props) an inline weight that ``graphkit.load`` left in the model file:
#: its external-data entries point into the .onnx file itself, and saving writes it inline again.
BORROWED_KEY = "graphkit.borrowed"


@dataclass(frozen=True, eq=False)
class Model:
    """An ONNX model and the folder its external weights are read from.

    Attributes:
        proto: The ModelProto. External weights are referenced, not loaded.
        base_dir: The folder external-data locations are relative to (None: no external data).
        path: The file the model was loaded from, if any.
    """

    proto: onnx.ModelProto
    base_dir: Path | None = None
    path: Path | None = None

    @property
    def graph(self) -> onnx.GraphProto:
        """The main graph."""
        return self.proto.graph

    @property
    def name(self) -> str:
        """The file the model came from, or its graph name, for messages."""
        return str(self.path) if self.path is not None else f"model {self.proto.graph.name!r}"

    def copy(self) -> Model:
        """Return a deep copy that shares the weights' folder."""
        clone = onnx.ModelProto()
        clone.CopyFrom(self.proto)
        return Model(clone, self.base_dir, self.path)

    def derive(self, proto: onnx.ModelProto) -> Model:
        """Return a new Model for ``proto`` that reads its weights where this one does."""
        return Model(proto, self.base_dir, None)

    @property
    def has_external_data(self) -> bool:
        """Whether any tensor's data lives in an external file."""
        return has_external_data(self.proto)

    def serialized(self) -> bytes:
        """The ModelProto's bytes (external weights stay references)."""
        return self.proto.SerializeToString()


def has_external_data(proto: onnx.ModelProto) -> bool:
    """Whether any tensor of ``proto`` (as ``iter_tensors`` finds them) keeps its data in an external file."""
    external = onnx.TensorProto.EXTERNAL
    for graph, where in iter_graphs(proto.graph):  # (no generator step per initializer: graphs have 10^4)
        if external in [t.data_location for t in graph.initializer]:
            return True
        for sparse in graph.sparse_initializer:
            if is_external(sparse.values) or is_external(sparse.indices):
                return True
        if any(is_external(t) for t, _ in _attribute_tensors(graph.node, where)):
            return True
    return any(is_external(t) for func in proto.functions for t, _ in _attribute_tensors(func.node, ""))


def is_external(tensor: onnx.TensorProto) -> bool:
    """Whether ``tensor`` keeps its data in an external file."""
    return tensor.data_location == onnx.TensorProto.EXTERNAL


def is_borrowed(tensor: onnx.TensorProto) -> bool:
    """Whether ``tensor`` is an inline weight left in its model file by a lazy load (see ``BORROWED_KEY``)."""
    return tensor.data_location == onnx.TensorProto.EXTERNAL and any(
        e.key == BORROWED_KEY for e in tensor.metadata_props
    )


def iter_graphs(graph: onnx.GraphProto, path: str = "") -> Iterator[tuple[onnx.GraphProto, str]]:
    """Yield ``graph`` and every subgraph (If/Loop/Scan bodies) at any depth, with a readable path.

    Args:
        graph: The graph to walk.
        path: A prefix naming where ``graph`` sits ("" for the main graph).
    """
    yield graph, path or "main graph"
    for node in graph.node:
        attributes = node.attribute
        if not attributes:  # (most nodes: skip them without building anything)
            continue
        for attr in attributes:
            kind = attr.type
            if kind != _GRAPH and kind != _GRAPHS:
                continue
            label = f"{path + ' > ' if path else ''}node {node.name or node.op_type!r}.{attr.name}"
            if kind == _GRAPH:
                yield from iter_graphs(attr.g, label)
            else:
                for i, sub in enumerate(attr.graphs):
                    yield from iter_graphs(sub, f"{label}[{i}]")


def iter_tensors(proto: onnx.ModelProto) -> Iterator[tuple[onnx.TensorProto, str]]:
    """Yield every TensorProto that may carry weights: initializers and tensor attributes.

    Covers the main graph, subgraphs and local functions; each with a short description of where it is.
    """
    yield from _graph_tensors(proto.graph, "")
    for func in proto.functions:
        yield from _attribute_tensors(func.node, f"function {func.domain}::{func.name}")


def _graph_tensors(graph: onnx.GraphProto, path: str) -> Iterator[tuple[onnx.TensorProto, str]]:
    """The tensors of ``graph`` then of its subgraphs in ``iter_graphs`` order, in one pass over its nodes."""
    where = path or "main graph"
    for tensor in graph.initializer:
        yield tensor, where
    for sparse in graph.sparse_initializer:
        yield sparse.values, where
        yield sparse.indices, where
    bodies: list[tuple[onnx.GraphProto, str]] = []
    for node in graph.node:
        attributes = node.attribute
        if not attributes:
            continue
        for attr in attributes:
            kind = attr.type
            if kind == onnx.AttributeProto.TENSOR:
                yield attr.t, where
            elif kind == onnx.AttributeProto.TENSORS:
                for t in attr.tensors:
                    yield t, where
            elif kind == onnx.AttributeProto.SPARSE_TENSOR:
                yield attr.sparse_tensor.values, where
                yield attr.sparse_tensor.indices, where
            elif kind in (_GRAPH, _GRAPHS):
                label = f"{path + ' > ' if path else ''}node {node.name or node.op_type!r}.{attr.name}"
                if kind == _GRAPH:
                    bodies.append((attr.g, label))
                else:
                    bodies.extend((sub, f"{label}[{i}]") for i, sub in enumerate(attr.graphs))
    for body, label in bodies:
        yield from _graph_tensors(body, label)


def iter_initializers(proto: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Yield the initializers of the main graph and of every subgraph."""
    for graph, _ in iter_graphs(proto.graph):
        yield from graph.initializer


_GRAPH = onnx.AttributeProto.GRAPH
_GRAPHS = onnx.AttributeProto.GRAPHS
_TENSOR_KINDS = (onnx.AttributeProto.TENSOR, onnx.AttributeProto.TENSORS, onnx.AttributeProto.SPARSE_TENSOR)


def _attribute_tensors(nodes: Iterable[onnx.NodeProto], where: str) -> Iterator[tuple[onnx.TensorProto, str]]:
    for node in nodes:
        attributes = node.attribute
        if not attributes:
            continue
        for attr in attributes:
            kind = attr.type
            if kind not in _TENSOR_KINDS:
                continue
            if kind == onnx.AttributeProto.TENSOR:
                yield attr.t, where
            elif kind == onnx.AttributeProto.TENSORS:
                for t in attr.tensors:
                    yield t, where
            else:
                yield attr.sparse_tensor.values, where
                yield attr.sparse_tensor.indices, where


# ------------------------------------------------------------------------------- wire outline


@dataclass(frozen=True, eq=False)
class Outline:
    """A few facts about a serialized model, read by one C-level parse instead of a pass over its nodes.

    The bytes are parsed with a reduced schema whose singular sub-message fields stand for ONNX's
    repeated ones: protobuf merges every occurrence of a singular message field, so the nodes of a
    graph merge into one message whose repeated fields hold every node's inputs (names, domains,
    ...) in order, and every tensor's ``data_location`` lands in one list. Facts about subgraphs
    merge all bodies found at one depth; each answer below is therefore exact for the main graph
    and conservative (never misses a case) for bodies and functions.
    """

    message: Any

    @property
    def main_has_bodies(self) -> bool:
        """Whether any node of the main graph has a graph-valued attribute (an If/Loop/Scan body)."""
        attrs = self.message.graph.node.attribute
        return bool(attrs.HasField("g") or attrs.HasField("graphs"))

    @property
    def has_external_data(self) -> bool:
        """True whenever ``has_external_data`` is (and possibly for tensors it does not look at)."""
        external = onnx.TensorProto.EXTERNAL
        return any(external in tensor.data_location for tensor in _outline_tensors(self.message))

    @property
    def node_domains(self) -> set[str]:
        """Every domain set explicitly on a node (main graph, bodies, functions); unset means ''."""
        return {d for node in _outline_nodes(self.message) for d in node.domain}

    @property
    def main_node_names(self) -> list[str]:
        """The names set on the main graph's nodes (in order; unnamed nodes may be missing or '')."""
        return list(self.message.graph.node.name)

    @property
    def main_node_inputs(self) -> set[str]:
        """Every name a main-graph node reads directly (not through bodies)."""
        return set(self.message.graph.node.input)

    @property
    def main_initializer_names(self) -> set[str]:
        """The names of the main graph's initializers and sparse initializers (values)."""
        graph = self.message.graph
        return set(graph.initializer.name) | set(graph.sparse_initializer.values.name)


def outline(data: bytes) -> Outline:
    """The ``Outline`` of ``data`` (a serialized ModelProto).

    Raises:
        google.protobuf.message.DecodeError: ``data`` is not a serialized model.
    """
    message = _outline_class()()
    message.ParseFromString(data)
    return Outline(message)


def _outline_graphs(graph: Any) -> Iterator[Any]:
    yield graph
    attrs = graph.node.attribute
    for name in ("g", "graphs"):
        if attrs.HasField(name):  # (an unset field reads as an empty default: never recurse into it)
            yield from _outline_graphs(getattr(attrs, name))


def _outline_nodes(message: Any) -> Iterator[Any]:
    if message.HasField("graph"):
        for graph in _outline_graphs(message.graph):
            yield graph.node
    if message.HasField("functions"):
        yield message.functions.node
        for name in ("g", "graphs"):
            if message.functions.node.attribute.HasField(name):
                for graph in _outline_graphs(getattr(message.functions.node.attribute, name)):
                    yield graph.node


def _outline_tensors(message: Any) -> Iterator[Any]:
    if message.HasField("graph"):
        for graph in _outline_graphs(message.graph):
            yield graph.initializer
            yield graph.sparse_initializer.values
            yield graph.sparse_initializer.indices
    for node in _outline_nodes(message):
        attrs = node.attribute
        yield attrs.t
        yield attrs.tensors
        for sparse in (attrs.sparse_tensor, attrs.sparse_tensors):
            yield sparse.values
            yield sparse.indices


@functools.cache
def _outline_class() -> Any:
    """The reduced schema of ``Outline`` (field numbers as in onnx.proto), built once."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    field_type = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(name="graphkit_outline.proto", package="graphkit_outline", syntax="proto2")
    message, string, int32 = field_type.TYPE_MESSAGE, field_type.TYPE_STRING, field_type.TYPE_INT32
    schema: dict[str, list[tuple[str, int, int, str]]] = {
        # (field, number, type, message type or "" for a repeated scalar)
        "Model": [("graph", 7, message, "Graph"), ("functions", 25, message, "Function")],
        "Graph": [("node", 1, message, "Node"), ("initializer", 5, message, "Tensor"),
                  ("sparse_initializer", 15, message, "Sparse")],
        "Node": [("input", 1, string, ""), ("name", 3, string, ""), ("attribute", 5, message, "Attribute"),
                 ("domain", 7, string, "")],
        "Attribute": [("t", 5, message, "Tensor"), ("g", 6, message, "Graph"), ("tensors", 10, message, "Tensor"),
                      ("graphs", 11, message, "Graph"), ("sparse_tensor", 22, message, "Sparse"),
                      ("sparse_tensors", 23, message, "Sparse")],
        "Tensor": [("name", 8, string, ""), ("data_location", 14, int32, "")],
        "Sparse": [("values", 1, message, "Tensor"), ("indices", 2, message, "Tensor")],
        "Function": [("node", 7, message, "Node")],
    }
    for name, fields in schema.items():
        described = file.message_type.add(name=name)
        for field_name, number, kind, type_name in fields:
            entry = described.field.add(name=field_name, number=number, type=kind)
            if kind == message:
                entry.label = field_type.LABEL_OPTIONAL  # (singular: every occurrence merges into one)
                entry.type_name = f".graphkit_outline.{type_name}"
            else:
                entry.label = field_type.LABEL_REPEATED
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("graphkit_outline.Model"))
