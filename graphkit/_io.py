"""Loading and saving models: external data (lazy, streamed, contained) and atomic writes.

The only caller of onnx.load / onnx.save in graphkit (here we parse and serialize protos directly).
Weights stay on disk: ``load`` parses the model file only; external weights are checked (inside the
model's folder, present, long enough) but not read (only tensors under ``SMALL_EXTERNAL`` bytes are). ``save`` streams external weights from where they
lie to the destination's data file, one tensor at a time.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import mmap
import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from google.protobuf.message import DecodeError, EncodeError
from onnx import numpy_helper

from graphkit import _check_args as argcheck
from graphkit import _write
from graphkit._model import (
    Model,
    borrowed_file_changed,
    borrowed_path,
    borrowing,
    has_external_data,
    is_borrowed,
    is_external,
    iter_graphs,
    iter_initializers,
    iter_tensors,
    note_read_in,
    outline,
    unborrow,
)
from graphkit.errors import (
    CorruptModelError,
    ExternalDataError,
    GraphkitError,
    InvalidModelError,
    ModelNotFoundError,
    UnsafePathError,
    UsageError,
    WriteError,
)

__all__ = [
    "ExternalRef",
    "WritePlan",
    "atomic_output",
    "external_ref",
    "inline_proto",
    "load",
    "load_bytes",
    "raw_nbytes",
    "save",
    "tensor_nbytes",
    "tensor_value",
]

log = logging.getLogger(__name__)

PROTOBUF_LIMIT = 2**31 - 1
#: Models whose serialized size would pass this are saved with external data.
INLINE_LIMIT = 2**31 - 64 * 2**20
_COPY_CHUNK = 64 * 2**20
_ALIGN = 4096
#: Model files at least this large are scanned rather than parsed whole (see ``load``).
LAZY_FILE_MIN = 64 * 2**20
#: External tensors of fewer bytes are read in at load (what ``save`` would write inline): shapes,
#: axes, indices and scalars, whose values shape inference, folding and onnx.checker's full check read
#: (it cannot read external data). Exporters that write every initializer externally
#: (``size_threshold=0``) then give the same model as with inline small tensors; weights stay on disk.
SMALL_EXTERNAL = 1024
#: With a lazy load, inline initializers with at least this many bytes of raw data stay in the file.
LAZY_TENSOR_MIN = 64 * 2**10


@dataclass(frozen=True)
class ExternalRef:
    """Where an external tensor's bytes are: a file inside the model's folder, an offset and a length."""

    location: str
    path: Path
    offset: int
    length: int


# ----------------------------------------------------------------------------------------- loading


def load(path: str | os.PathLike[str], *, lazy: bool | None = None) -> Model:
    """Load an ONNX model, leaving its external weights on disk.

    A large model file (``LAZY_FILE_MIN``) is scanned, not parsed whole: its large inline weights
    stay in the file (borrowed, see ``graphkit._model``), so loading costs time proportional to the
    graph, not the weights. Saving writes them inline again (streamed from the file);
    ``tensor_value`` and ONNX Runtime read them from the file, and ``Model.proto`` reads them in. The
    file must then stay unchanged while the Model is in use. External tensors of fewer than
    ``SMALL_EXTERNAL`` bytes (shapes, axes, scalars an exporter wrote externally) are read in.

    Args:
        path: The ``.onnx`` file.
        lazy: Scan (True) or parse whole (False); None decides by the file's size.

    Returns:
        The Model, with ``base_dir`` set to the file's folder.

    Raises:
        ModelNotFoundError: The path does not exist or is not a file.
        CorruptModelError: The file is not a readable ONNX model.
        UnsafePathError: An external-data location escapes the model's folder.
        ExternalDataError: An external-data file is missing or shorter than its tensors need.
    """
    argcheck.path(path, "path")
    argcheck.optional(argcheck.boolean, lazy, "lazy")
    file = Path(path)
    size = _model_file_size(file)
    if size > PROTOBUF_LIMIT:
        raise CorruptModelError(
            f"{file} is {size / 2**30:.1f} GiB: no ONNX model file can exceed protobuf's 2 GiB limit",
            hint="a model this large keeps its weights as external data; is this the .onnx file?",
        )
    if lazy is None:
        lazy = size >= LAZY_FILE_MIN
    try:
        data, values = _scan_model_file(file) if lazy and size else (file.read_bytes(), 0)
    except OSError as err:
        raise ModelNotFoundError(f"cannot read {file}: {err.strerror}", hint="check the file's permissions") from err
    # Mostly tensor values (typed data the scan could not borrow): the strict parse would spend its
    # time on them, while the walk over names it saves costs nothing on so few (14M unpacked floats:
    # 0.8 s of 2.7 s, graphkit.load then takes as long as onnx.load).
    return _load_bytes(data, file.parent, file, strict=values * 2 < len(data))


def _model_file_size(file: Path) -> int:
    """The size of the model file, refusing a path that names no regular file with a clear error.

    Raises:
        ModelNotFoundError: The path does not exist, is not a regular file or cannot be a path at all.
    """
    try:
        info = file.stat()
    except ValueError as err:  # (a NUL byte: no system call can take the path)
        raise ModelNotFoundError(f"{_shown(str(file))} is not a usable path: it contains a NUL byte",
                                 hint="check the path; model files usually end in .onnx") from err
    except OSError as err:
        if err.errno == errno.ENAMETOOLONG:
            raise ModelNotFoundError(
                f"cannot open {_shown(str(file))}: a name in the path is longer than the system allows",
                hint=f"file and folder names can have at most {_NAME_MAX} bytes; rename or shorten the path",
            ) from err
        if err.errno in (errno.ENOENT, errno.ENOTDIR):
            raise ModelNotFoundError(f"no such file: {file}",
                                     hint="check the path; model files usually end in .onnx") from err
        raise ModelNotFoundError(f"cannot read {file}: {err.strerror}", hint="check the file's permissions") from err
    if not stat.S_ISREG(info.st_mode):
        raise ModelNotFoundError(f"{file} is not a file", hint="pass the .onnx file itself, not its folder")
    return info.st_size


def load_bytes(data: bytes, *, base_dir: str | os.PathLike[str] | None = None, source: Path | None = None) -> Model:
    """Parse a serialized model, checking its external-data references against ``base_dir``.

    Args:
        data: The serialized ModelProto.
        base_dir: The folder external-data locations are relative to.
        source: The file the bytes came from, for messages.

    Raises:
        CorruptModelError: The bytes are not an ONNX model.
        UnsafePathError: An external-data location escapes ``base_dir``.
        ExternalDataError: An external-data file is missing or too short.
    """
    return _load_bytes(data, base_dir, source, strict=True)


def _load_bytes(data: bytes, base_dir: str | os.PathLike[str] | None, source: Path | None, *, strict: bool) -> Model:
    label = str(source) if source is not None else "the model"
    proto, maybe_external = _parse(data, label, strict=strict)
    folder = Path(base_dir).resolve() if base_dir is not None else None
    model = Model(proto, folder, source)
    if maybe_external:
        _read_small_external(model)
    return model


def _read_small_external(model: Model) -> None:
    """Check every external tensor of ``model`` (``external_ref``) and read those under ``SMALL_EXTERNAL``
    bytes in, noting them on the model."""
    small: list[tuple[onnx.TensorProto, ExternalRef]] = []
    for tensor, where in iter_tensors(model.lazy_proto):
        if is_external(tensor):
            ref = external_ref(model, tensor, where=where)
            if _small(tensor, ref.length):
                small.append((tensor, ref))
    _read_in(small)
    note_read_in(model, ((tensor.name, ref.location, ref.length) for tensor, ref in small))


def _small(tensor: onnx.TensorProto, length: int) -> bool:
    """Whether an external tensor of ``length`` bytes is one load reads in (not a borrowed weight)."""
    return length < SMALL_EXTERNAL and not is_borrowed(tensor) and tensor.data_type != onnx.TensorProto.STRING


def _read_in(tensors: Sequence[tuple[onnx.TensorProto, ExternalRef]]) -> None:
    """Make each small external tensor inline, its bytes read from where ``external_ref`` found them
    (each file opened once)."""
    by_file: dict[Path, list[tuple[onnx.TensorProto, ExternalRef]]] = {}
    for tensor, ref in tensors:
        by_file.setdefault(ref.path, []).append((tensor, ref))
    for path, pieces in by_file.items():
        with open(path, "rb") as handle:
            for tensor, ref in sorted(pieces, key=lambda p: p[1].offset):
                handle.seek(ref.offset)
                data = handle.read(ref.length)
                if len(data) != ref.length:
                    raise ExternalDataError(f"tensor {tensor.name!r}: {ref.location!r} ended early",
                                            hint="the weights file is truncated")
                del tensor.external_data[:]
                tensor.ClearField("data_location")
                tensor.raw_data = data


# ------------------------------------------------------------------- lazy loading (wire-format scan)


def _varint(buf: mmap.mmap | bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("malformed varint")


def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _skip(buf: mmap.mmap | bytes, wire: int, pos: int, end: int) -> int:
    """The position after the field value at ``pos``; a value reaching past ``end`` is an error (checked
    here, so no length read from the file ever sends the scan walking through bytes it should skip)."""
    if wire == 0:
        after = _varint(buf, pos)[1]
    elif wire == 1:
        after = pos + 8
    elif wire == 2:
        length, pos = _varint(buf, pos)
        after = pos + length
    elif wire == 5:
        after = pos + 4
    else:
        raise ValueError(f"unsupported wire type {wire} at byte {pos}")
    if after > end:
        raise ValueError(f"a field at byte {pos} runs past the end of its message (byte {end})")
    return after


def _field_len(field: int, length: int) -> bytes:
    return _varint_bytes(field << 3 | 2) + _varint_bytes(length)


def _scan_model_file(file: Path) -> tuple[bytes, int]:
    """The model's bytes with each large inline initializer replaced by a stub pointing into the file.

    Only the ModelProto's and the main GraphProto's field headers (and the leading header fields of
    large initializers) are read in Python; everything else is copied through as byte ranges, once,
    and the weights are never read. Every length is checked against its enclosing message before it
    is used, so a corrupt file fails at the first impossible length. Also returns how many of the
    bytes kept are large initializers it could not borrow (typed values).
    """
    with open(file, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        try:
            pieces, values = _scan_model(buf, file.name, borrowing(file.resolve(), os.fstat(handle.fileno())))
        except (ValueError, IndexError) as err:
            raise CorruptModelError(
                f"{file} is not a readable ONNX model ({err})",
                hint="the file is truncated, corrupted or not ONNX; export or copy it again",
            ) from err
        view = memoryview(buf)
        try:  # (one copy of the kept ranges: slices of the view are not copies)
            return b"".join([view[p[0]:p[1]] if isinstance(p, tuple) else p for p in pieces]), values
        finally:
            view.release()


#: What the scan keeps: a byte range of the file, or bytes of its own (headers, stubs).
_Piece = tuple[int, int] | bytes


def _scan_model(buf: mmap.mmap, location: str, mark: onnx.StringStringEntryProto) -> tuple[list[_Piece], int]:
    pieces: list[_Piece] = []
    values = 0
    pos, end = 0, len(buf)
    while pos < end:
        key, body = _varint(buf, pos)
        if key == (7 << 3 | 2):  # ModelProto.graph
            length, start = _varint(buf, body)
            if start + length > end:
                raise ValueError(f"the graph needs {start + length} bytes, the file has {end}")
            graph, kept = _scan_graph(buf, start, start + length, location, mark)
            values += kept
            size = sum(p[1] - p[0] if isinstance(p, tuple) else len(p) for p in graph)
            pieces.append(_field_len(7, size))
            pieces.extend(graph)
            pos = start + length
        else:
            after = _skip(buf, key & 7, body, end)
            pieces.append((pos, after))
            pos = after
    return pieces, values


def _scan_graph(buf: mmap.mmap, start: int, end: int, location: str,
                mark: onnx.StringStringEntryProto) -> tuple[list[_Piece], int]:
    pieces: list[_Piece] = []
    values = 0  # (bytes of large initializers kept: typed values)
    run = pos = start
    while pos < end:
        key, body = _varint(buf, pos)
        if key == (5 << 3 | 2):  # GraphProto.initializer
            length, inner = _varint(buf, body)
            if inner + length > end:
                raise ValueError(f"an initializer at byte {pos} runs past the end of the graph (byte {end})")
            if length >= LAZY_TENSOR_MIN:
                stub = _stub_tensor(buf, inner, inner + length, location, mark)
                if stub is not None:
                    pieces.append((run, pos))
                    pieces.append(_field_len(5, len(stub)) + stub)
                    pos = run = inner + length
                    continue
                values += length
            pos = inner + length
        else:
            pos = _skip(buf, key & 7, body, end)
    pieces.append((run, end))
    return pieces, values


#: TensorProto fields that hold typed (not raw) data: such a tensor is parsed, not borrowed.
_TYPED_DATA_FIELDS = frozenset((4, 5, 6, 7, 10, 11))
#: A borrowable tensor has a few header fields (dims, type, name, ...): past this many, the walk stops.
_STUB_MAX_FIELDS = 4096


def _stub_tensor(buf: mmap.mmap, start: int, end: int, location: str,
                 mark: onnx.StringStringEntryProto) -> bytes | None:
    """A TensorProto's bytes without its raw_data, borrowing it from where raw_data lies in the file;
    None for a tensor that is not borrowed (external already, typed data, small raw data).

    The walk stops at the first field that rules borrowing out, so a tensor of millions of unpacked
    values costs one field, not millions of Python steps.
    """
    pieces: list[bytes] = []
    raw: tuple[int, int] | None = None
    pos = start
    fields = 0
    while pos < end:
        fields += 1
        if fields > _STUB_MAX_FIELDS:
            return None
        key, body = _varint(buf, pos)
        field, wire = key >> 3, key & 7
        if field in _TYPED_DATA_FIELDS or field == 13:  # typed data, or external_data: leave it as it is
            return None
        after = _skip(buf, wire, body, end)
        if field == 14 and wire == 0:  # data_location: explicit DEFAULT is inline data like no entry at all
            if _varint(buf, body)[0] != onnx.TensorProto.DEFAULT:
                return None
        elif field == 9 and wire == 2:
            length, payload = _varint(buf, body)
            raw = (payload, length)
        else:
            pieces.append(buf[pos:after])
        pos = after
    if raw is None or raw[1] < LAZY_TENSOR_MIN:
        return None
    extra = onnx.TensorProto()
    extra.data_location = onnx.TensorProto.EXTERNAL
    for key_, value in (("location", location), ("offset", str(raw[0])), ("length", str(raw[1]))):
        entry = extra.external_data.add()
        entry.key, entry.value = key_, value
    extra.metadata_props.append(mark)
    return b"".join(pieces) + extra.SerializeToString()


def _parse(data: bytes, label: str, *, strict: bool = True) -> tuple[onnx.ModelProto, bool]:
    """The parsed model, and whether any of its tensors may be stored externally.

    ``strict``: learn the facts (text is UTF-8, every main-graph node has an op type, which tensors
    are external) from the strict parse; False finds them by walking the parsed model instead.

    Raises:
        CorruptModelError: The bytes are not a readable ONNX model (naming what is wrong).
    """
    if not data:
        raise CorruptModelError(f"{label} is empty", hint="the file was probably truncated; export or copy it again")
    # The strict parse first, kept only for what it tells: it is let go before the real parse, so
    # the two never take memory at once.
    facts = _strict_parse(data) if strict else None
    utf8_checked = facts is not None
    op_count, empty_op = _main_op_types(facts) if facts is not None else (-1, True)
    external_marked = facts is None or _any_external(facts)
    del facts
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as err:
        raise CorruptModelError(
            f"{label} is not a readable ONNX model ({err})",
            hint="the file is truncated, corrupted or not ONNX; export or copy it again",
        ) from err
    if not proto.HasField("graph") or proto.ir_version <= 0:
        raise CorruptModelError(
            f"{label} parses as protobuf but is not an ONNX model (no graph or no ir_version)",
            hint="check that this is an .onnx model file",
        )
    if op_count != len(proto.graph.node) or empty_op:
        for node in proto.graph.node:
            if not node.op_type:
                raise CorruptModelError(
                    f"{label}: a node ({node.name or 'unnamed'}) has no op_type", hint="the file is corrupted"
                )
    bad = None if utf8_checked else _first_non_utf8(proto)
    if bad is not None:
        raise CorruptModelError(
            f"{label}: {bad} is not valid UTF-8 text", hint="the file is corrupted; export or copy it again"
        )
    # Only a tensor whose data_location is EXTERNAL reads an external file (see model.is_external),
    # and the strict parse lists every data_location: no need to look through the bytes.
    return proto, external_marked


def _any_external(message: Any) -> bool:
    """Whether a tensor anywhere in the strict parse ``message`` says its data is external.

    Repeated messages are merged there, so this visits one message per schema path present (a few
    dozen), not one per tensor.
    """
    if message.DESCRIPTOR.name == "TensorProto" and onnx.TensorProto.EXTERNAL in message.data_location:
        return True
    return any(
        _any_external(value)
        for entry, value in message.ListFields()
        if entry.message_type is not None  # (all singular in this schema)
    )


def _main_op_types(strict: Any) -> tuple[int, bool]:
    """How many op types the strict parse lists for the main graph's nodes, and whether one is
    empty: it lists every op_type they carry, so as many non-empty ones as there are nodes mean
    every node has one."""
    ops = strict.graph.node.op_type
    return len(ops), "" in ops


_STRICT_PACKAGE = "graphkit_utf8_check"
_strict_model_class: list[Any] = []


def _strict_parse(data: bytes) -> Any:
    """The model parsed with ``_strict_model``'s schema, or None when that parse fails.

    ONNX's schema is proto2, whose parser accepts any bytes in string fields (protobuf then hands
    out ``bytes`` instead of ``str`` for them, which breaks every name lookup). The same schema
    declared proto3 makes the parser verify UTF-8, so parsing the bytes once more with it tells
    whether all text is UTF-8 without a Python pass over every name. None also when the parse
    fails for another reason: the caller then looks for the bad name the slow way.
    """
    if not _strict_model_class:
        _strict_model_class.append(_strict_model())
    strict = _strict_model_class[0]()
    try:
        strict.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError):
        return None
    return strict


def _strict_model() -> Any:
    """A ModelProto class of ONNX's schema declared proto3 (string fields UTF-8 verified), every
    repeated message merged into one."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    schema = descriptor_pb2.FileDescriptorProto()
    onnx.ModelProto.DESCRIPTOR.file.CopyToProto(schema)
    prefix = f".{schema.package}."
    schema.name, schema.package, schema.syntax = f"{_STRICT_PACKAGE}.proto", _STRICT_PACKAGE, "proto3"
    field = descriptor_pb2.FieldDescriptorProto
    pending = list(schema.message_type)
    while pending:
        message = pending.pop()
        pending.extend(message.nested_type)
        if message.name == "TensorProto":
            # Typed values (float_data, int32_data, ...) hold no text: left out, they are kept as
            # unknown bytes instead of being decoded one by one (a third of the time on 14M
            # unpacked floats).
            kept = [entry for entry in message.field if entry.number not in _TYPED_DATA_FIELDS - {6}]
            del message.field[:]
            message.field.extend(kept)
        for entry in message.field:
            if entry.type_name.startswith(prefix):
                entry.type_name = f".{_STRICT_PACKAGE}.{entry.type_name[len(prefix):]}"
            # Every occurrence of a repeated message field merges into one message (as occurrences of
            # a singular one do): the parse fills a few long lists instead of building 10^5 small
            # messages. Strings are verified as they are read; singular ones become repeated so the
            # lists keep every occurrence (the main graph's node.op_type: one per node that has one).
            if entry.label == field.LABEL_REPEATED and entry.type == field.TYPE_MESSAGE:
                entry.label = field.LABEL_OPTIONAL
            elif (entry.label == field.LABEL_OPTIONAL and entry.type in (field.TYPE_STRING, field.TYPE_ENUM)
                  and not entry.HasField("oneof_index")):
                entry.label = field.LABEL_REPEATED  # (enums too: every tensor's data_location is kept)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(schema)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_STRICT_PACKAGE}.ModelProto"))


def _first_non_utf8(proto: onnx.ModelProto) -> str | None:
    """Where the model holds a name that protobuf could not decode as text (it then hands out bytes)."""
    for field_name in ("producer_name", "producer_version", "domain", "doc_string"):
        if isinstance(getattr(proto, field_name), bytes):
            return f"the model's {field_name}"
    for opset in proto.opset_import:
        if isinstance(opset.domain, bytes):
            return "an opset domain"
    for entry in proto.metadata_props:
        if isinstance(entry.key, bytes) or isinstance(entry.value, bytes):
            return "a metadata entry"
    for graph, where in iter_graphs(proto.graph):
        problem = _graph_non_utf8(graph)
        if problem:
            return f"{problem} in {where}"
    for func in proto.functions:
        if any(isinstance(v, bytes) for v in (func.name, func.domain, *func.input, *func.output)):
            return "a function name"
        for node in func.node:
            if _node_non_utf8(node):
                return f"a name in function {func.name!r}"
    return None


def _graph_non_utf8(graph: onnx.GraphProto) -> str | None:
    if isinstance(graph.name, bytes) or isinstance(graph.doc_string, bytes):
        return "the graph's name"
    for values in (graph.input, graph.output, graph.value_info):
        for value in values:
            if isinstance(value.name, bytes):
                return "a tensor name"
            for dim in value.type.tensor_type.shape.dim:
                if isinstance(dim.dim_param, bytes) or isinstance(dim.denotation, bytes):
                    return f"a dim name of {value.name!r}"
    for tensor in graph.initializer:  # (plain loops: this runs over every node of large graphs)
        if type(tensor.name) is bytes:
            return "an initializer name"
        if len(tensor.external_data):
            for e in tensor.external_data:
                if type(e.key) is bytes or type(e.value) is bytes:
                    return "an initializer name"
    for node in graph.node:
        if _node_non_utf8(node):
            return "a node's name, op type, domain or tensor name"
    return None


def _node_non_utf8(node: onnx.NodeProto) -> bool:
    if type(node.name) is bytes or type(node.op_type) is bytes or type(node.domain) is bytes:
        return True
    if type(node.doc_string) is bytes:
        return True
    for v in node.input:
        if type(v) is bytes:
            return True
    for v in node.output:
        if type(v) is bytes:
            return True
    if len(node.attribute):
        for a in node.attribute:
            if type(a.name) is bytes or type(a.ref_attr_name) is bytes:
                return True
    return False


def external_ref(model: Model, tensor: onnx.TensorProto, *, where: str = "") -> ExternalRef:
    """Resolve and check an external tensor's data: contained in the model's folder, present, long enough.

    Raises:
        UnsafePathError: The location is absolute, has ``..`` or resolves outside the folder.
        ExternalDataError: The file is missing, not a regular file, or too short; or fields are malformed.
    """
    entries = {e.key: e.value for e in tensor.external_data}
    name = tensor.name or "(unnamed)"
    context = f"tensor {name!r}" + (f" ({where})" if where and where != "main graph" else "") + f" of {model.name}"
    location = entries.get("location", "")
    if not location:
        raise ExternalDataError(f"{context} is external but has no location", hint="the model file is corrupted")
    borrowed = borrowed_path(tensor)
    if borrowed is not None:  # (the model file itself, as load found it: wherever a symlink to it sits)
        path = borrowed
    elif model.base_dir is None:
        raise ExternalDataError(
            f"{context} keeps its data in {location!r} but the model has no folder to read it from",
            hint="load the model from its file with graphkit.load so its weights can be found",
        )
    else:
        path = resolve_location(model.base_dir, location, context=context)
    try:
        offset = int(entries.get("offset", "0"))
        length = int(entries["length"]) if "length" in entries else -1
    except ValueError as err:
        raise ExternalDataError(f"{context} has a malformed offset or length", hint="the model file is corrupted") from err
    try:
        info = path.stat()
    except OSError as err:
        if err.errno == errno.ENAMETOOLONG:
            raise ExternalDataError(
                f"{context}: its external-data location {_shown(location)} is too long a path for this system",
                hint="the model file is corrupted or hand-edited; external data names are short file names",
            ) from err
        raise ExternalDataError(
            f"{context}: its external data file {location!r} is missing from {model.base_dir}",
            hint="copy the weights file next to the model, keeping its name",
        ) from err
    if not stat.S_ISREG(info.st_mode):
        raise ExternalDataError(f"{context}: {location!r} is not a regular file", hint="point it at a weights file")
    if borrowed_file_changed(tensor, info):
        raise ExternalDataError(
            f"{context}: {path} changed since the model was loaded from it",
            hint="its weights were left in the file (lazy load); load the model again",
        )
    expected = tensor_nbytes(tensor)
    if length < 0:
        length = expected if expected >= 0 else info.st_size - offset
    if offset < 0 or (expected >= 0 and length != expected):
        raise ExternalDataError(
            f"{context}: external length {length} at offset {offset} does not match its shape and dtype ({expected} bytes)",
            hint="the model file and its weights do not belong together; export them again",
        )
    if offset + length > info.st_size:
        raise ExternalDataError(
            f"{context}: needs bytes {offset}..{offset + length} of {location!r}, which has only {info.st_size}",
            hint="the weights file is truncated or belongs to another model; copy it again",
        )
    return ExternalRef(location, path, offset, length)


def resolve_location(base_dir: Path, location: str, *, context: str = "a tensor") -> Path:
    """Resolve an external-data location, refusing anything outside ``base_dir``.

    Raises:
        UnsafePathError: The location is absolute, contains ``..`` or a NUL byte, or resolves (through
            symlinks) outside.
        ExternalDataError: A path component is longer than a file name can be, or symlinks loop.
    """
    if "\0" in location:
        raise UnsafePathError(
            f"{context}: external-data location {_shown(location)} contains a NUL byte; refused",
            hint="the model file is corrupted or hand-edited; external data must name a file inside the model's folder",
        )
    too_long = next((part for part in location.replace("\\", "/").split("/") if len(part.encode()) > _NAME_MAX), None)
    if too_long is not None:
        raise ExternalDataError(
            f"{context}: external-data location {_shown(location)} has a path component of "
            f"{len(too_long.encode())} bytes, over the {_NAME_MAX} a file name can have",
            hint="the model file is corrupted or hand-edited; external data names are short file names",
        )
    candidate = Path(location)
    if candidate.is_absolute() or location.startswith(("/", "\\")) or (len(location) > 1 and location[1] == ":"):
        raise UnsafePathError(
            f"{context}: external-data location {location!r} is an absolute path; refused",
            hint="external data must be a relative path inside the model's folder",
        )
    if ".." in candidate.parts or ".." in location.replace("\\", "/").split("/"):
        raise UnsafePathError(
            f"{context}: external-data location {location!r} leaves the model's folder; refused",
            hint="external data must be a relative path inside the model's folder",
        )
    try:
        root = base_dir.resolve()
        resolved = (root / candidate).resolve()
    except (OSError, RuntimeError) as err:  # (RuntimeError: a symlink loop, before Python 3.13)
        raise ExternalDataError(
            f"{context}: external-data location {_shown(location)} cannot be resolved ({err})",
            hint="a symlink in the model's folder loops or is broken; copy the weights file itself there",
        ) from err
    if resolved != root and root not in resolved.parents:
        raise UnsafePathError(
            f"{context}: external-data location {location!r} resolves to {resolved}, outside {root}; refused",
            hint="a symlink points out of the model's folder; copy the weights into the folder instead",
        )
    return resolved


#: The longest file name (one path component) common file systems allow, in bytes.
_NAME_MAX = 255


def _shown(location: str) -> str:
    """``location`` for a message: quoted, control characters escaped, cut to a readable length."""
    text = repr(location)
    return text if len(text) <= 80 else f"{text[:60]}...{text[-15:]} ({len(location)} characters)"


def tensor_nbytes(tensor: onnx.TensorProto) -> int:
    """Bytes of the tensor's data in raw form, or -1 for strings and unknown dtypes."""
    count = 1
    for d in tensor.dims:
        count *= int(d)
    return raw_nbytes(tensor.data_type, count)


def raw_nbytes(data_type: int, count: int) -> int:
    """Bytes of ``count`` elements of ONNX dtype ``data_type`` in raw form, or -1 for strings and unknown dtypes."""
    itemsize = _ITEMSIZES.get(data_type)
    if itemsize is None:
        itemsize = _ITEMSIZES[data_type] = _itemsize(data_type)
    if itemsize < 0:
        return -1
    if data_type in _FOUR_BIT:
        return (count + 1) // 2
    return count * itemsize


_ITEMSIZES: dict[int, int] = {}


def _itemsize(data_type: int) -> int:
    """Bytes per element of an ONNX dtype, or -1 for strings and unknown dtypes."""
    if data_type == onnx.TensorProto.STRING:
        return -1
    try:
        return int(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(data_type)).itemsize)
    except (KeyError, ValueError, TypeError):
        return -1


_FOUR_BIT = {
    getattr(onnx.TensorProto, n) for n in ("INT4", "UINT4", "FLOAT4E2M1") if hasattr(onnx.TensorProto, n)
}


def read_external_bytes(model: Model, tensor: onnx.TensorProto) -> bytes:
    """Read an external tensor's raw bytes from disk."""
    ref = external_ref(model, tensor)
    with open(ref.path, "rb") as handle:
        handle.seek(ref.offset)
        data = handle.read(ref.length)
    if len(data) != ref.length:
        raise ExternalDataError(
            f"tensor {tensor.name!r}: {ref.location!r} ended early", hint="the weights file is truncated"
        )
    return data


def tensor_value(model: Model, tensor: onnx.TensorProto) -> np.ndarray:
    """The value of an initializer or tensor attribute, reading external data from disk if needed.

    Raises:
        InvalidModelError: The tensor's stored data contradicts its dtype or shape.
        ExternalDataError: Its external data is missing, outside the folder or too short.
    """
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    argcheck.instance(tensor, "tensor", onnx.TensorProto, "an onnx.TensorProto")
    if not is_external(tensor):
        return _to_array(tensor, model)
    inline = onnx.TensorProto()
    inline.CopyFrom(tensor)
    del inline.external_data[:]
    inline.ClearField("data_location")
    inline.raw_data = read_external_bytes(model, tensor)
    return _to_array(inline, model)


def _to_array(tensor: onnx.TensorProto, model: Model) -> np.ndarray:
    try:
        return numpy_helper.to_array(tensor)
    except (ValueError, TypeError, KeyError) as err:
        expected = tensor_nbytes(tensor)
        held = f"{len(tensor.raw_data)} bytes" if tensor.HasField("raw_data") else "its data"
        need = f" (shape {list(tensor.dims)} needs {expected} bytes)" if expected >= 0 else ""
        raise InvalidModelError(
            f"tensor {tensor.name!r} of {model.name}: {held} cannot be read as "
            f"{onnx.TensorProto.DataType.Name(tensor.data_type) if tensor.data_type in onnx.TensorProto.DataType.values() else tensor.data_type}"
            f"{need}: {err}",
            hint="the file is corrupted or was edited by hand; export it again",
        ) from err


def runtime_bytes(model: Model) -> tuple[bytes, Path | None]:
    """The model's bytes for ONNX Runtime, and the folder it must read external data from (None: none).

    Every external tensor is checked first (contained, present, long enough). Borrowed weights stay in
    the model file when ONNX Runtime finds that file in the folder under the name they give; otherwise
    (a model reached through a symlink, or re-based elsewhere) they are read into the bytes, as are
    external tensors under ``SMALL_EXTERNAL`` bytes (in a Model not from ``load``): ONNX Runtime
    cannot read an Unsqueeze's axes from external data.

    Raises:
        UnsafePathError: An external-data location escapes the model's folder.
        ExternalDataError: An external-data file is missing or too short.
    """
    proto = model.lazy_proto
    if not has_external_data(proto):
        return proto.SerializeToString(), None
    far = small = False
    for tensor, where in iter_tensors(proto):
        if is_external(tensor):
            ref = external_ref(model, tensor, where=where)
            far = far or (is_borrowed(tensor) and not _found_as(model, ref))
            small = small or _small(tensor, ref.length)
    if far or small:  # (a small one, in a Model not from load: ONNX Runtime cannot read a shape op's input from disk)
        proto = onnx.ModelProto()
        proto.CopyFrom(model.lazy_proto)
        for tensor, _ in iter_tensors(proto):
            if not is_external(tensor):
                continue
            ref = external_ref(model, tensor)
            if _small(tensor, ref.length) or (is_borrowed(tensor) and not _found_as(model, ref)):
                _inline_one(model, tensor)
    return proto.SerializeToString(), model.base_dir if has_external_data(proto) else None


def _found_as(model: Model, ref: ExternalRef) -> bool:
    """Whether ``ref.location`` in the model's folder is ``ref.path`` without leaving the folder through
    a symlink (ONNX Runtime refuses that)."""
    if model.base_dir is None:
        return False
    try:
        return (model.base_dir / ref.location).resolve() == ref.path and model.base_dir.resolve() in ref.path.parents
    except (OSError, RuntimeError):
        return False


def inline_proto(model: Model) -> onnx.ModelProto:
    """A copy of the model's proto with every external tensor's data read in (for small models)."""
    clone = onnx.ModelProto()
    clone.CopyFrom(model.lazy_proto)
    _inline_external(model, clone)
    return clone


# ------------------------------------------------------------------------------------------ saving


def save(
    model: Model,
    path: str | os.PathLike[str],
    *,
    external: bool | None = None,
    location: str | None = None,
    size_threshold: int = 1024,
) -> Model:
    """Write a model atomically, with its weights next to it.

    External weights are streamed from where they lie into one data file beside ``path``; inline
    weights stay inline. A model too large for one protobuf file is saved with external data.

    The model and its data file are replaced as a pair: a crash at any instant leaves either the
    previous pair or the new one. The data file is therefore never rewritten in place: it is
    ``<stem>.data`` (or ``location``), unless the model being replaced at ``path`` uses that name;
    then it is ``<name>.data`` (``model.onnx.data`` for ``model.onnx``; for a ``location``, the
    same name with ``.1`` before its extension). The previous data file is removed once the new
    model is in place. A save never replaces a file ``model`` reads its weights from, other than
    the model file at ``path`` itself.

    Args:
        model: The model to write.
        path: The destination ``.onnx`` file.
        external: True to write weights as external data, False to inline them, None to decide:
            external when the model already has external data or would not fit in 2 GiB.
        location: The data file's name, relative to the destination's folder (default ``<stem>.data``).
        size_threshold: With external data, tensors smaller than this many bytes stay inline.

    Returns:
        The saved model, as it would load from ``path``.

    Raises:
        WriteError: The folder does not exist or cannot be written, or the disk is full.
        UsageError: ``path`` names a device, FIFO or folder, a name is too long, or the write would
            replace a file the model reads its weights from.
        UnsafePathError: ``location`` leaves the destination's folder.
        ExternalDataError: A source weight is missing or truncated.
    """
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    argcheck.path(path, "path")
    argcheck.optional(argcheck.boolean, external, "external")
    argcheck.optional(argcheck.path, location, "location")
    argcheck.integer(size_threshold, "size_threshold", minimum=0)
    plan = WritePlan(overwrite=True, cli=False)
    plan.read_model(model)
    return plan.save(model, path, external=external, location=location, size_threshold=size_threshold)


def _save(
    model: Model,
    dest: Path,
    plan: WritePlan,
    *,
    external: bool | None,
    location: str | None,
    size_threshold: int,
) -> Model:
    """``save`` once the plan has checked ``dest``."""
    folder = dest.parent
    previous = _referenced_files(dest)
    if not external:
        saved = _save_inline_fast(model, dest, folder, previous, plan, allow_external=external is None)
        if saved is not None:
            return saved
    proto = onnx.ModelProto()
    proto.CopyFrom(model.lazy_proto)
    has_external = has_external_data(proto)
    borrowed = 0
    if has_external:
        borrowed = sum(external_ref(model, t).length for t in proto.graph.initializer if is_borrowed(t))
    serialized: bytes | None = None  # (the bytes to write, when serializing was how the size was learnt)
    if external is None:
        if has_external:
            really_external = any(is_external(t) and not is_borrowed(t) and not 0 <= tensor_nbytes(t) < size_threshold
                                  for t, _ in iter_tensors(proto))
            external = really_external or proto.ByteSize() + borrowed > INLINE_LIMIT
        else:
            serialized = _serialize(proto)
            external = serialized is None or len(serialized) > INLINE_LIMIT
    data_name = plan.data_name(dest, location, previous) if external else None
    data_dest = resolve_location(folder, data_name, context=f"saving {dest}") if data_name else None
    retire = plan.retired(dest, location, previous, keep=data_dest)
    with _atomic_pair(dest, data_dest, retire) as (tmp_model, tmp_data):
        if data_name is not None:
            assert tmp_data is not None
            _write_external(model, proto, tmp_data, data_name, size_threshold)
            _write_proto(proto, tmp_model, dest)
        elif borrowed:
            proto = _write_spliced(model, proto, tmp_model, dest)
        else:
            if has_external:
                _inline_external(model, proto)
                serialized = None
            _write_proto(proto, tmp_model, dest, serialized)
    log.info("wrote %s%s", dest, f" and {data_name}" if data_name else "")
    saved = Model(proto, folder.resolve(), dest)
    if data_name is not None:  # (as it would load: small tensors written externally read in)
        _read_small_external(saved)
    return saved


def _save_inline_fast(model: Model, dest: Path, folder: Path, previous: set[Path], plan: WritePlan, *,
                      allow_external: bool) -> Model | None:
    """Save a model without external data in one serialization: the common case of ``save``.

    Returns None, having written nothing, when the model has (or may have) external data, or is too
    large for one file and ``allow_external`` (``save`` then decides as usual).
    """
    data = _serialize(model.lazy_proto)
    if data is None or (allow_external and len(data) > INLINE_LIMIT) or outline(data).has_external_data:
        return None  # (the outline never misses an external tensor: no False where has_external_data is True)
    with _atomic_pair(dest, None, plan.retired(dest, None, previous, keep=None)) as (tmp_model, _):
        _write_proto(model.lazy_proto, tmp_model, dest, data)
    proto = onnx.ModelProto()
    proto.CopyFrom(model.lazy_proto)  # (the saved model owns its proto, as on the general path)
    log.info("wrote %s", dest)
    return Model(proto, folder.resolve(), dest)


def _write_spliced(model: Model, proto: onnx.ModelProto, tmp: Path, dest: Path) -> onnx.ModelProto:
    """Write ``proto`` inline, streaming each external main-graph initializer from its file into place.

    Other external tensors (attributes, subgraph initializers) are read in. Returns the proto as it
    loads lazily from ``dest``: the streamed weights are borrowed from ``dest``.
    """
    main = list(proto.graph.initializer)
    del proto.graph.initializer[:]  # (the list keeps them)
    for tensor, _ in iter_tensors(proto):
        if is_external(tensor):
            _inline_one(model, tensor)
    proto.graph.initializer.extend(main)
    result = onnx.ModelProto()
    result.CopyFrom(proto)
    records: list[tuple[bytes, ExternalRef | None]] = []
    for tensor in proto.graph.initializer:
        if is_external(tensor):
            ref = external_ref(model, tensor)
            head_proto = onnx.TensorProto()
            head_proto.CopyFrom(tensor)
            del head_proto.external_data[:]
            head_proto.ClearField("data_location")
            unborrow(head_proto)
            head = head_proto.SerializeToString() + _field_len(9, ref.length)
            records.append((_field_len(5, len(head) + ref.length) + head, ref))
        else:
            body = tensor.SerializeToString()
            records.append((_field_len(5, len(body)) + body, None))
    del proto.graph.initializer[:]
    graph_bytes = proto.graph.SerializeToString()
    graph_len = len(graph_bytes) + sum(len(h) + (r.length if r else 0) for h, r in records)
    proto.ClearField("graph")
    top = proto.SerializeToString() + _field_len(7, graph_len)
    if len(top) + graph_len > PROTOBUF_LIMIT:
        raise WriteError(f"cannot write {dest} inline: it would exceed protobuf's 2 GiB limit",
                         hint="save with external data (external=True)", cli_hint="save with external data (--external-data)")
    offsets: list[tuple[int, int]] = []
    sources: dict[Path, Any] = {}
    with open(tmp, "wb") as out, contextlib.ExitStack() as stack:
        out.write(top)
        out.write(graph_bytes)
        for head, source in records:
            out.write(head)
            if source is None:
                continue
            out.flush()
            offsets.append((out.tell(), source.length))
            if source.path not in sources:
                sources[source.path] = stack.enter_context(open(source.path, "rb"))
            _copy_range(sources[source.path], out, source.offset, source.length)
    position = iter(offsets)
    mark = borrowing(dest.resolve(), os.stat(tmp))  # (the rename into place keeps size and time)
    for tensor in result.graph.initializer:
        if is_external(tensor):
            offset, length = next(position)
            _point_at(tensor, dest.name, offset, length)
            tensor.metadata_props.append(mark)
    return result


def _serialize(proto: onnx.ModelProto) -> bytes | None:
    """The proto's bytes, or None when it is too large for one protobuf message."""
    try:
        data = proto.SerializeToString()
    except (ValueError, EncodeError):
        return None
    return data if len(data) <= PROTOBUF_LIMIT else None


def _inline_one(model: Model, tensor: onnx.TensorProto) -> None:
    data = read_external_bytes(model, tensor)
    del tensor.external_data[:]
    tensor.ClearField("data_location")  # (no explicit DEFAULT: inline data is the default)
    tensor.raw_data = data
    unborrow(tensor)


def _write_proto(proto: onnx.ModelProto, tmp: Path, dest: Path, serialized: bytes | None = None) -> None:
    """Write ``proto`` (``serialized``: its bytes, when already known)."""
    data = serialized if serialized is not None else _serialize(proto)
    if data is None:
        raise WriteError(
            f"cannot write {dest}: the graph alone exceeds protobuf's 2 GiB limit",
            hint="save with external data (external=True)",
            cli_hint="save with external data (--external-data)",
        )
    with open(tmp, "wb") as handle:
        handle.write(data)


def _inline_external(model: Model, proto: onnx.ModelProto) -> None:
    for tensor, _ in iter_tensors(proto):
        if is_external(tensor):
            _inline_one(model, tensor)


def _write_external(model: Model, proto: onnx.ModelProto, tmp: Path, name: str, threshold: int) -> None:
    """Stream every weight into ``tmp`` and point the tensors of ``proto`` at ``name``; tensors of fewer
    than ``threshold`` bytes are written inline, wherever they were (onnx.checker's full check cannot
    read a Reshape target or an axes tensor from external data)."""
    written: dict[tuple[Path, int, int], int] = {}
    sources: dict[Path, object] = {}
    with open(tmp, "wb") as out, contextlib.ExitStack() as stack:
        for tensor, _ in iter_tensors(proto):
            if tensor.data_type == onnx.TensorProto.STRING:
                continue
            if is_external(tensor):
                ref = external_ref(model, tensor)
                if ref.length < threshold and not is_borrowed(tensor):  # (as an inline one that small stays)
                    _inline_one(model, tensor)
                    continue
                key = (ref.path, ref.offset, ref.length)
                if key not in written:
                    if ref.path not in sources:
                        sources[ref.path] = stack.enter_context(open(ref.path, "rb"))
                    written[key] = _pad(out)
                    _copy_range(sources[ref.path], out, ref.offset, ref.length)  # type: ignore[arg-type]
                _point_at(tensor, name, written[key], ref.length)
        for tensor in iter_initializers(proto):
            if is_external(tensor) or tensor.data_type == onnx.TensorProto.STRING or not tensor.dims:
                continue
            if tensor.ByteSize() >= threshold:
                raw = tensor.raw_data if tensor.HasField("raw_data") else numpy_helper.to_array(tensor).tobytes()
                offset = _pad(out)
                out.write(raw)
                _point_at(tensor, name, offset, len(raw))


def _pad(out: object) -> int:
    position = out.tell()  # type: ignore[attr-defined]
    aligned = -(-position // _ALIGN) * _ALIGN
    if aligned != position:
        out.write(b"\0" * (aligned - position))  # type: ignore[attr-defined]
    return aligned


def _copy_range(src: object, dst: object, offset: int, length: int) -> None:
    src_fd, dst_fd = src.fileno(), dst.fileno()  # type: ignore[attr-defined]
    dst.flush()  # type: ignore[attr-defined]
    position = dst.tell()  # type: ignore[attr-defined]
    done = 0
    if hasattr(os, "copy_file_range"):
        with contextlib.suppress(OSError):
            while done < length:
                n = os.copy_file_range(src_fd, dst_fd, min(_COPY_CHUNK, length - done), offset + done, position + done)
                if n == 0:
                    break
                done += n
    src.seek(offset + done)  # type: ignore[attr-defined]
    dst.seek(position + done)  # type: ignore[attr-defined]
    while done < length:
        chunk = src.read(min(_COPY_CHUNK, length - done))  # type: ignore[attr-defined]
        if not chunk:
            raise ExternalDataError("a weights file ended early while copying", hint="the weights file is truncated")
        dst.write(chunk)  # type: ignore[attr-defined]
        done += len(chunk)


def _clear_data(tensor: onnx.TensorProto) -> None:
    for field in (
        "raw_data",
        "float_data",
        "int32_data",
        "string_data",
        "int64_data",
        "double_data",
        "uint64_data",
    ):
        tensor.ClearField(field)


def _point_at(tensor: onnx.TensorProto, location: str, offset: int, length: int) -> None:
    _clear_data(tensor)
    unborrow(tensor)
    del tensor.external_data[:]
    tensor.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
        entry = tensor.external_data.add()
        entry.key = key
        entry.value = value


# --------------------------------------------------------------------------------- atomic writing


@contextlib.contextmanager
def atomic_output(dest: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``dest``; on success it replaces ``dest``, on failure it is removed.

    Raises:
        UsageError: ``dest`` names a device, FIFO, socket or folder, or a name is too long.
        WriteError: The folder is missing or read-only, or the disk is full.
    """
    path = Path(dest)
    _write.check_target(path)
    with _write.staged(path) as tmp:
        yield tmp


@contextlib.contextmanager
def _atomic_pair(dest: Path, data_dest: Path | None, retire: Sequence[Path] = ()) -> Iterator[tuple[Path, Path | None]]:
    """Temporary paths for a model and its data file; on success both are put in place, data first.

    The data file's name is one the model now at ``dest`` does not use, so until the model file is
    renamed (last), the previous model still reads its own, complete, data. ``retire`` (the previous
    data files) are removed after that.
    """
    folder = dest.parent
    limit = _write.name_limit(folder)
    names = [dest.name, *_data_candidates(dest, None, limit)]
    if data_dest is not None and data_dest.parent == folder.resolve():
        names.append(data_dest.name)
    _write.remove_stale_temps(folder, names)
    tmp = folder / _write.temp_name(dest.name, limit)
    tmp_data = None
    if data_dest is not None:
        if data_dest.parent != folder.resolve():
            _write.remove_stale_temps(data_dest.parent, [data_dest.name])
        tmp_data = data_dest.parent / _write.temp_name(data_dest.name, limit)
    placed: Path | None = None
    try:
        yield tmp, tmp_data
        if tmp_data is not None and data_dest is not None and tmp_data.exists():
            if tmp_data.stat().st_size:
                _write.replace(tmp_data, data_dest)
                placed = data_dest
            else:  # nothing went external after all
                tmp_data.unlink()
        _write.replace(tmp, dest)
        _write.fsync_dir(folder)
    except OSError as err:
        _remove(tmp, tmp_data, placed)
        raise _write.write_error(dest, err) from err
    except BaseException:
        _remove(tmp, tmp_data, placed)
        raise
    for old in retire:
        with contextlib.suppress(OSError):
            old.unlink()
            log.info("removed %s (the previous weights of %s)", old, dest)


def _remove(*paths: Path | None) -> None:
    for p in paths:
        if p is not None:
            with contextlib.suppress(OSError):
                p.unlink()


def _data_candidates(dest: Path, location: str | None, limit: int = 255) -> list[str]:
    """The names a data file of ``dest`` takes, in order of preference (see ``save``)."""
    if location is None:
        names = [f"{dest.stem}.data", f"{dest.name}.data", f"{dest.name}.1.data"]
    else:
        given = Path(location)
        names = [location, str(given.with_name(f"{given.stem}.1{given.suffix}")),
                 str(given.with_name(f"{given.stem}.2{given.suffix}"))]
    fitted: list[str] = []
    for i, name in enumerate(names):
        head, _, last = name.rpartition("/") if "/" in name else ("", "", name)
        if len(os.fsencode(last)) > limit:  # (a long name: cut it, keeping the candidates apart)
            last = _write.fit_name(last, limit, f"~{i}.data")
        name = f"{head}/{last}" if head else last
        if name not in fitted:
            fitted.append(name)
    return fitted


def _referenced_files(dest: Path) -> set[Path]:
    """The external-data files (resolved) of the model now at ``dest``: none when there is no model there."""
    try:
        info = dest.stat()
    except (OSError, ValueError):
        return set()
    if not stat.S_ISREG(info.st_mode):
        return set()
    try:
        proto = load(dest).lazy_proto
    except GraphkitError:
        if info.st_size >= LAZY_FILE_MIN:
            return set()
        proto = onnx.ModelProto()  # (its data may be missing or short: still, do not reuse its names)
        try:
            proto.ParseFromString(dest.read_bytes())
        except (DecodeError, OSError, RuntimeError, ValueError):
            return set()
    root = dest.parent.resolve()
    locations = {e.value for t, _ in iter_tensors(proto) if is_external(t) and not is_borrowed(t)
                 for e in t.external_data if e.key == "location"}
    found: set[Path] = set()
    for location in locations:
        with contextlib.suppress(GraphkitError, OSError, ValueError):
            found.add(resolve_location(root, location))
    return found


# ------------------------------------------------------------------------------------- write plans


def _real(path: Path) -> str:
    """The path through every symlink (a path with a NUL byte, which names nothing, as it is)."""
    return os.path.realpath(path) if "\0" not in str(path) else str(path)


def _identity(path: Path) -> tuple[str, tuple[int, int] | None]:
    """A path's real path (through symlinks) and, when it exists, its (device, inode)."""
    real = _real(path)
    try:
        info = os.stat(real)
    except (OSError, ValueError):
        return real, None
    return real, (info.st_dev, info.st_ino)


@dataclass(frozen=True)
class _Read:
    path: Path
    real: str
    ident: tuple[int, int] | None
    what: str  # "the input model", "the external data of m.onnx", "the recipe", …
    model: bool  # a model file (an output model may replace it with ``overwrite``)
    owner: str | None  # for external data: the real path of the model file that reads it


@dataclass(frozen=True)
class _Write:
    path: Path
    real: str
    what: str
    kind: str  # "model", "data", "file" or "folder"


class WritePlan:
    """Every file a command reads and writes, checked before its first byte is written.

    A command lists what it reads (``read``; ``read_model``: a model file and every external-data
    file it uses) and what it writes (``write``, ``write_model``, ``write_folder``), then calls
    ``check``, so that it writes all its outputs or none. The writes then go through the plan
    (``save``, ``output``), which checks each again. Paths are compared through symlinks and by
    inode.

    The rules: an output never replaces a file the command reads, and the error names both; with
    ``overwrite``, the output model may replace a model file the command reads (``toposort m.onnx
    m.onnx``: its previous data file is removed once the new pair is in place), and nothing else.
    An output is never a device, FIFO, socket or (but for ``write_folder``) folder; its folder
    exists and is writable; its names fit the file system; two outputs never name the same file.

    Args:
        overwrite: Let the output model replace a model file the command reads.
        cli: Word hints for the command line (``--overwrite``) rather than for the Python API.
    """

    def __init__(self, *, overwrite: bool = False, cli: bool = True) -> None:
        self.overwrite = overwrite
        self.cli = cli
        self._reads: list[_Read] = []
        self._writes: list[_Write] = []

    # -- what the command reads

    def read(self, path: str | os.PathLike[str] | None, what: str = "the input", *, model: bool = False,
             owner: str | None = None) -> None:
        """Record a file the command reads (None: nothing)."""
        if path is None:
            return
        given = Path(path)
        real, ident = _identity(given)
        self._reads.append(_Read(given, real, ident, what, model, owner))

    def read_model(self, model: Model, what: str = "the input model") -> None:
        """Record a model's file and every external-data file it reads."""
        owner = None
        if model.path is not None:
            self.read(model.path, what, model=True)
            owner = os.path.realpath(model.path)
        proto = model.lazy_proto
        if not has_external_data(proto):
            return
        locations: set[str] = set()
        borrowed_from: set[Path] = set()
        for tensor, _ in iter_tensors(proto):
            if not is_external(tensor):
                continue
            source = borrowed_path(tensor)
            if source is not None:  # (inline weights left in the model file it was loaded from)
                borrowed_from.add(source)
                continue
            locations.update(e.value for e in tensor.external_data if e.key == "location")
        for source in sorted(borrowed_from):
            self.read(source, what, model=True)
        if model.base_dir is None:
            return
        for location in sorted(locations):
            try:
                path = resolve_location(model.base_dir, location)
            except GraphkitError:
                continue  # (load refused it already; nothing to protect)
            self.read(path, f"the external data of {model.name}", owner=owner)

    # -- what it writes

    def write(self, path: str | os.PathLike[str], what: str = "the output") -> Path:
        """Record a file the command writes (a report, saved values, a recipe)."""
        return self._add(Path(path), what, "file")

    def write_model(self, path: str | os.PathLike[str], *, external: bool = False,
                    location: str | None = None) -> Path:
        """Record an output model, and its data file when it may be saved with ``external`` data."""
        dest = self._add(Path(path), "the output model", "model")
        if external:
            folder = dest.parent
            if folder.is_dir() and "\0" not in str(dest):
                name = _data_candidates(dest, location, _write.name_limit(folder))
                chosen = self._choose(dest, name, _referenced_files(dest))
                self._add(folder / chosen, f"the weights of {dest}", "data")
        return dest

    def write_folder(self, path: str | os.PathLike[str], what: str = "the output folder") -> Path:
        """Record a folder the command creates or replaces as a whole (split's fragments)."""
        return self._add(Path(path), what, "folder")

    def _add(self, path: Path, what: str, kind: str) -> Path:
        self._writes.append(_Write(path, _real(path), what, kind))
        return path

    # -- checks

    def check(self) -> None:
        """Check every recorded output against the reads, each other and the file system.

        Raises:
            UsageError: An output would replace a file the command reads, two outputs are the same
                file, or an output names a device, FIFO, socket or folder, or is too long.
            WriteError: An output's folder does not exist or is not writable.
        """
        for write in self._writes:
            self._check_one(write)

    def _check_one(self, write: _Write) -> None:
        _write.check_target(write.path, what=write.what, folder_ok=write.kind == "folder")
        for other in self._writes:
            if other.real == write.real and (other.kind != write.kind or other.path != write.path):
                raise UsageError(f"{other.what} {other.path} and {write.what} {write.path} are the same file",
                                 hint="give each output its own path")
        if write.kind == "folder":
            self._check_folder(write)
            return
        real, ident = _identity(write.path)
        for read in self._reads:
            if read.real != real and (ident is None or read.ident != ident):
                continue
            if write.kind == "model" and read.model and self.overwrite:
                continue
            self._refuse(read, write)

    def _refuse(self, read: _Read, write: _Write) -> None:
        target = write.what if str(write.path) == str(read.path) else f"{write.what} {write.path}"
        if write.kind == "model" and read.model:
            hint = ("choose another output path, or pass --overwrite to replace it (the write stays atomic)"
                    if self.cli else "choose another output path")
        else:
            hint = "choose another output path" + (
                " (--overwrite only lets the output model replace a model it reads)" if self.cli else "")
        raise UsageError(f"refusing to overwrite the input {read.path} ({read.what}) with {target}", hint=hint)

    def _check_folder(self, write: _Write) -> None:
        if write.path.exists() and not write.path.is_dir():
            raise UsageError(f"cannot write {write.what} {write.path}: it is a file", hint="give a folder path")
        inside = write.real.rstrip(os.sep) + os.sep
        for read in self._reads:
            if read.real == write.real or read.real.startswith(inside):
                raise UsageError(f"refusing to write {write.what} {write.path}: it holds {read.what} {read.path}",
                                 hint="choose another output folder")

    def _choose(self, dest: Path, candidates: list[str], previous: set[Path]) -> str:
        """The first data-file name that is neither ``dest`` nor a file the model at ``dest`` uses."""
        folder = dest.parent.resolve()
        own = os.path.realpath(dest)
        for name in candidates:
            path = Path(os.path.realpath(folder / name))
            if str(path) != own and path not in previous:
                return name
        raise UsageError(f"cannot save {dest} with external data: the model there already uses every name its "
                         f"weights could take ({', '.join(candidates)})",
                         hint="save to another path, or remove the model there first")

    # -- writing

    def data_name(self, dest: Path, location: str | None, previous: set[Path]) -> str:
        """The data file name for saving a model to ``dest`` (checked against the plan; see ``save``)."""
        folder = dest.parent
        name = self._choose(dest, _data_candidates(dest, location, _write.name_limit(folder)), previous)
        data = folder / name
        self._check_one(_Write(data, _real(data), f"the weights of {dest}", "data"))
        return name

    def retired(self, dest: Path, location: str | None, previous: set[Path], *, keep: Path | None) -> list[Path]:
        """The previous data files of the model at ``dest`` that go once the new model is in place.

        Only names a save of ``dest`` would have chosen; never ``keep`` (the new data file), nor a file
        read as the weights of another model.
        """
        folder = dest.parent.resolve()
        limit = _write.name_limit(folder)
        ours = {Path(os.path.realpath(folder / n)) for n in _data_candidates(dest, None, limit)}
        if location is not None:
            ours |= {Path(os.path.realpath(folder / n)) for n in _data_candidates(dest, location, limit)}
        own = os.path.realpath(dest)
        others = {r.real for r in self._reads if r.owner is not None and r.owner != own}
        return sorted(p for p in previous if p in ours and p != keep and str(p) not in others and p.is_file())

    def save(self, model: Model, path: str | os.PathLike[str], *, external: bool | None = None,
             location: str | None = None, size_threshold: int = 1024) -> Model:
        """``graphkit.save`` within this plan: ``path`` is checked against what the command reads."""
        dest = Path(path)
        if not any(w.path == dest and w.kind == "model" for w in self._writes):
            self._add(dest, "the output model", "model")
        self._check_one(next(w for w in self._writes if w.path == dest and w.kind == "model"))
        return _save(model, dest, self, external=external, location=location, size_threshold=size_threshold)

    @contextlib.contextmanager
    def output(self, path: str | os.PathLike[str], what: str = "the output") -> Iterator[Path]:
        """Write a planned file atomically: yield a temporary path, renamed over ``path`` on success."""
        dest = Path(path)
        planned = next((w for w in self._writes if w.path == dest), None) or _Write(dest, _real(dest), what, "file")
        if planned not in self._writes:
            self._writes.append(planned)
        self._check_one(planned)
        with _write.staged(dest) as tmp:
            yield tmp
