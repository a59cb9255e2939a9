"""Model: an ONNX ModelProto together with the folder its external weights live in.

A bare ModelProto cannot remember where its weights are; saving it elsewhere then points at a data
file that is not there. ``Model`` carries that folder (``base_dir``) everywhere, so every transform
and every writer can find the weights without reading them until their values are needed.

A large inline model loaded lazily keeps its large weights in its own file: graphkit holds them as
*borrowed* tensors (external-data entries pointing into the .onnx file, marked with this process's
token) in ``Model.lazy_proto``. ``Model.proto`` reads them in the first time it is asked for, so what
users get is always a standard ModelProto.
"""

from __future__ import annotations

import functools
import os
import secrets
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx

from graphkit import _check_args as argcheck
from graphkit.errors import ArgumentTypeError

__all__ = [
    "BORROWED_KEY",
    "Model",
    "Outline",
    "borrowed_file_changed",
    "borrowed_path",
    "borrowing",
    "function_tensors",
    "has_external_data",
    "is_borrowed",
    "is_external",
    "iter_graphs",
    "iter_initializers",
    "iter_tensors",
    "note_read_in",
    "outline",
    "read_in",
    "unborrow",
]

#: Marks (in TensorProto.metadata_props of ``Model.lazy_proto``) an inline weight that ``graphkit.load``
#: left in the model file: its external-data entries point into the .onnx file itself.
BORROWED_KEY = "graphkit.borrowed"
#: The mark's value starts with this token, unknown outside this process: a file cannot carry a mark
#: graphkit would trust (a trusted mark skips the containment check, as it names the model file itself).
_TOKEN = secrets.token_hex(16)


@dataclass(frozen=True, eq=False, init=False)
class Model:
    """An ONNX model and the folder its external weights are read from.

    Attributes:
        lazy_proto: The ModelProto as graphkit holds it, for graphkit's own structure-only work: after a
            lazy load its large inline weights are borrowed (still in the file). Never hand it to onnx.
        base_dir: The folder external-data locations are relative to (None: no external data).
        path: The file the model was loaded from, if any.
    """

    lazy_proto: onnx.ModelProto = field(repr=False)
    base_dir: Path | None = None
    path: Path | None = None
    #: Whether ``proto`` has already read in what was borrowed (one walk per Model, not per access).
    _standard: bool = field(default=False, repr=False)
    #: The small external tensors ``graphkit.load`` read in: (name, location, bytes) each, what the file
    #: keeps on disk beside the tensors still external (``summarize`` counts them; a derived model drops them).
    _read_in: tuple[tuple[str, str, int], ...] = field(default=(), repr=False)

    def __init__(self, proto: onnx.ModelProto, base_dir: Path | None = None, path: Path | None = None) -> None:
        if not isinstance(proto, onnx.ModelProto):
            raise ArgumentTypeError(f"proto= must be an onnx.ModelProto, not {argcheck.describe(proto)}",
                                    hint="load a model with graphkit.load, or wrap a ModelProto: Model(proto, base_dir)")
        if base_dir is not None and not isinstance(base_dir, Path):
            base_dir = Path(argcheck.path(base_dir, "base_dir"))
        if path is not None and not isinstance(path, Path):
            path = Path(argcheck.path(path, "path"))
        object.__setattr__(self, "lazy_proto", proto)
        object.__setattr__(self, "base_dir", base_dir)
        object.__setattr__(self, "path", path)
        object.__setattr__(self, "_standard", False)
        object.__setattr__(self, "_read_in", ())

    @property
    def proto(self) -> onnx.ModelProto:
        """The ModelProto, standard: onnx.save, onnx.checker and ONNX Runtime take it as they take
        onnx.load's result (external weights stay references to files in ``base_dir``).

        Weights a lazy load left in the model file are read in on first access (in place: afterwards
        the model holds them in memory, as onnx.load would).
        """
        proto = self.lazy_proto
        if not self._standard:
            if has_external_data(proto):
                _read_borrowed(proto)
            object.__setattr__(self, "_standard", True)
        return proto

    @property
    def graph(self) -> onnx.GraphProto:
        """The main graph of ``proto``."""
        return self.proto.graph

    @property
    def name(self) -> str:
        """The file the model came from, or its graph name, for messages."""
        return str(self.path) if self.path is not None else f"model {self.lazy_proto.graph.name!r}"

    def copy(self) -> Model:
        """Return a deep copy that shares the weights' folder (borrowed weights stay borrowed)."""
        clone = onnx.ModelProto()
        clone.CopyFrom(self.lazy_proto)
        copy = Model(clone, self.base_dir, self.path)
        note_read_in(copy, self._read_in)
        return copy

    def derive(self, proto: onnx.ModelProto) -> Model:
        """Return a new Model for ``proto`` that reads its weights where this one does."""
        return Model(proto, self.base_dir, None)

    @property
    def has_external_data(self) -> bool:
        """Whether any tensor of ``proto`` keeps its data in an external file (borrowed weights do not)."""
        proto = self.lazy_proto
        return has_external_data(proto) and any(is_external(t) and not is_borrowed(t) for t, _ in iter_tensors(proto))

    def serialized(self) -> bytes:
        """The bytes of ``lazy_proto`` (external and borrowed weights stay references)."""
        return self.lazy_proto.SerializeToString()


def note_read_in(model: Model, pieces: Iterable[tuple[str, str, int]]) -> None:
    """Record on a Model just loaded the small external tensors load read in: (name, location, bytes) each."""
    object.__setattr__(model, "_read_in", tuple(pieces))


def read_in(model: Model) -> tuple[tuple[str, str, int], ...]:
    """The small external tensors ``graphkit.load`` read into ``model``: (name, location, bytes) each."""
    return model._read_in


def has_external_data(proto: onnx.ModelProto) -> bool:
    """Whether any tensor of ``proto`` (as ``iter_tensors`` finds them, borrowed ones included) keeps its
    data in an external file."""
    external = onnx.TensorProto.EXTERNAL
    graph = proto.graph
    if external in [t.data_location for t in graph.initializer]:  # (the usual answer, without a generator step per tensor)
        return True
    return any(t.data_location == external for t, _ in iter_tensors(proto))


def is_external(tensor: onnx.TensorProto) -> bool:
    """Whether ``tensor`` keeps its data in an external file (or, borrowed, in the model file)."""
    return tensor.data_location == onnx.TensorProto.EXTERNAL


def is_borrowed(tensor: onnx.TensorProto) -> bool:
    """Whether ``tensor`` is an inline weight left in its model file by a lazy load (see ``BORROWED_KEY``)."""
    return borrowed_path(tensor) is not None


def borrowed_path(tensor: onnx.TensorProto) -> Path | None:
    """The model file a borrowed ``tensor`` lies in (resolved when it was loaded), or None if not borrowed."""
    mark = _mark(tensor)
    return None if mark is None else mark[0]


def borrowed_file_changed(tensor: onnx.TensorProto, info: os.stat_result) -> bool:
    """Whether the file a borrowed ``tensor`` lies in (``info``: its stat) is no longer the one it was
    borrowed from (another size or modification time): its offsets then mean nothing."""
    mark = _mark(tensor)
    return mark is not None and (info.st_size, info.st_mtime_ns) != mark[1:]


def borrowing(path: Path, info: os.stat_result) -> onnx.StringStringEntryProto:
    """The mark that makes a tensor borrowed from the model file ``path`` (resolved; ``info``: its stat)."""
    return onnx.StringStringEntryProto(key=BORROWED_KEY, value=f"{_TOKEN}:{info.st_size}:{info.st_mtime_ns}:{path}")


def _mark(tensor: onnx.TensorProto) -> tuple[Path, int, int] | None:
    if tensor.data_location != onnx.TensorProto.EXTERNAL or not len(tensor.metadata_props):
        return None
    for entry in tensor.metadata_props:
        if entry.key == BORROWED_KEY and entry.value.startswith(_TOKEN + ":"):
            size, mtime, path = entry.value[len(_TOKEN) + 1:].split(":", 2)
            return Path(path), int(size), int(mtime)
    return None


def unborrow(tensor: onnx.TensorProto) -> None:
    """Drop the borrowed mark (the tensor's data is being written out, or read in, for real)."""
    marks = [e for e in tensor.metadata_props if e.key != BORROWED_KEY]
    if len(marks) != len(tensor.metadata_props):
        del tensor.metadata_props[:]
        tensor.metadata_props.extend(marks)


def _read_borrowed(proto: onnx.ModelProto) -> None:
    """Read every borrowed tensor's data into it, making it an ordinary inline tensor.

    Raises:
        ExternalDataError: The model file changed since it was loaded (shorter than a tensor needs).
    """
    from graphkit.errors import ExternalDataError

    handles: dict[Path, Any] = {}
    try:
        for tensor, where in iter_tensors(proto):
            path = borrowed_path(tensor)
            if path is None:
                continue
            entries = {e.key: e.value for e in tensor.external_data}
            offset, length = int(entries.get("offset", "0")), int(entries.get("length", "0"))
            try:
                handle = handles.get(path) or handles.setdefault(path, open(path, "rb"))  # noqa: SIM115
                changed = borrowed_file_changed(tensor, os.fstat(handle.fileno()))
                handle.seek(offset)
                data = handle.read(length)
            except OSError as err:
                raise ExternalDataError(
                    f"tensor {tensor.name!r} ({where}): cannot read it from {path}: {err.strerror}",
                    hint="the model file moved or changed after it was loaded; load it again",
                ) from err
            if changed or len(data) != length:
                raise ExternalDataError(
                    f"tensor {tensor.name!r} ({where}): {path} changed since the model was loaded from it",
                    hint="its weights were left in the file (lazy load); load the model again",
                )
            del tensor.external_data[:]
            tensor.ClearField("data_location")
            tensor.raw_data = data
            unborrow(tensor)
    finally:
        for handle in handles.values():
            handle.close()


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
            label = _body_label(path, node, attr)
            if kind == _GRAPH:
                yield from iter_graphs(attr.g, label)
            else:
                for i, sub in enumerate(attr.graphs):
                    yield from iter_graphs(sub, f"{label}[{i}]")


def iter_tensors(proto: onnx.ModelProto) -> Iterator[tuple[onnx.TensorProto, str]]:
    """Yield every TensorProto of the model that may carry weights, with where it is.

    The one walk over a model's tensors: initializers and sparse initializers (values and indices),
    tensor, tensors, sparse-tensor and sparse-tensors attributes (Constant's value and sparse_value
    among them) of every node, in the main graph, in If/Loop/Scan bodies at any depth, and in local
    functions and the bodies of their nodes at any depth. Each graph's own tensors come before its
    bodies'; the main graph comes first, then the functions in order.
    """
    yield from _graph_tensors(proto.graph, "")
    for func in proto.functions:
        yield from function_tensors(func)


def function_tensors(func: onnx.FunctionProto) -> Iterator[tuple[onnx.TensorProto, str]]:
    """``iter_tensors`` for one local function: its nodes' tensor attributes and its bodies' tensors."""
    label = f"function {func.domain}::{func.name}" if func.domain else f"function {func.name}"
    yield from _node_tensors(func.node, label, label)


def _graph_tensors(graph: onnx.GraphProto, path: str) -> Iterator[tuple[onnx.TensorProto, str]]:
    where = path or "main graph"
    for tensor in graph.initializer:
        yield tensor, where
    for sparse in graph.sparse_initializer:
        yield sparse.values, where
        yield sparse.indices, where
    yield from _node_tensors(graph.node, path, where)


def _node_tensors(nodes: Iterable[onnx.NodeProto], path: str, where: str) -> Iterator[tuple[onnx.TensorProto, str]]:
    """The attribute tensors of ``nodes`` (in one pass over them), then every tensor of their bodies."""
    bodies: list[tuple[onnx.GraphProto, str]] = []
    for node in nodes:
        attributes = node.attribute
        if not attributes:
            continue
        for attr in attributes:
            kind = attr.type
            if kind not in _TENSOR_OR_GRAPH:
                continue
            if kind == _TENSOR:
                yield attr.t, where
            elif kind == _TENSORS:
                for t in attr.tensors:
                    yield t, where
            elif kind == _SPARSE_TENSOR:
                yield attr.sparse_tensor.values, where
                yield attr.sparse_tensor.indices, where
            elif kind == _SPARSE_TENSORS:
                for sparse in attr.sparse_tensors:
                    yield sparse.values, where
                    yield sparse.indices, where
            elif kind == _GRAPH:
                bodies.append((attr.g, _body_label(path, node, attr)))
            else:
                label = _body_label(path, node, attr)
                bodies.extend((sub, f"{label}[{i}]") for i, sub in enumerate(attr.graphs))
    for body, label in bodies:
        yield from _graph_tensors(body, label)


def _body_label(path: str, node: onnx.NodeProto, attr: onnx.AttributeProto) -> str:
    return f"{path + ' > ' if path else ''}node {node.name or node.op_type!r}.{attr.name}"


def iter_initializers(proto: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Yield the initializers of the main graph and of every subgraph."""
    for graph, _ in iter_graphs(proto.graph):
        yield from graph.initializer


_GRAPH = onnx.AttributeProto.GRAPH
_GRAPHS = onnx.AttributeProto.GRAPHS
_TENSOR = onnx.AttributeProto.TENSOR
_TENSORS = onnx.AttributeProto.TENSORS
_SPARSE_TENSOR = onnx.AttributeProto.SPARSE_TENSOR
_SPARSE_TENSORS = onnx.AttributeProto.SPARSE_TENSORS
_TENSOR_OR_GRAPH = frozenset((_TENSOR, _TENSORS, _SPARSE_TENSOR, _SPARSE_TENSORS, _GRAPH, _GRAPHS))


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
