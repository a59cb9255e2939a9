"""Input values from files: ``.npy``, ``.npz`` and ONNX TensorProto ``.pb`` (ONNX's own test-data format).

Also the parsers of the feed flags (``NAME=FILE``, ``NAME=1x3x20x20``, ``NAME=lo,hi``) and the atomic
writer of output arrays (``--save out.npz``). No onnxruntime here: reading values needs numpy and onnx only.
"""

from __future__ import annotations

import logging
import math
import os
import re
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import numpy_helper

from graphkit._arrays import check_array_size, open_npz, read_npy
from graphkit._files import check_regular, exists, read_bytes
from graphkit._io import WritePlan, atomic_output
from graphkit._numbers import INT64_MAX, parse_float, parse_int
from graphkit.errors import FeedError, UsageError, did_you_mean

__all__ = [
    "FeedFile",
    "load_feed_file",
    "load_feeds",
    "parse_named",
    "parse_range",
    "parse_shape",
    "read_tensor_file",
    "resolve_feeds",
    "npz_path",
    "save_arrays",
]

log = logging.getLogger(__name__)

FORMATS = (".npy", ".npz", ".pb")
#: Protocol buffers cannot be larger (a TensorProto .pb holds its data inline).
_MAX_PROTO_BYTES = 2**31 - 1
_TEST_DATA_NAME = re.compile(r"^input_(\d+)$")


@dataclass(frozen=True)
class FeedFile:
    """One array read from a file, with the input name it is for (None: not known yet).

    Attributes:
        name: The input it feeds, from ``NAME=FILE``, the ``.npz`` key or the TensorProto's name.
        value: The array.
        source: Where it came from, for messages (``file.npz[key]``).
        stem: The file's stem, used to guess the input when no name is known.
        path: The file.
        keyed: Read from an ``.npz`` given without a name, named by its key: an array whose key is
            no input of the model is left out (``run --save`` writes intermediate tensors too).
    """

    name: str | None
    value: np.ndarray
    source: str
    stem: str
    path: str = ""
    keyed: bool = False


def load_feed_file(path: str | os.PathLike[str], name: str | None = None) -> list[FeedFile]:
    """Read the arrays of one feed file.

    Each array's header is checked against the file's size and a size limit before anything is
    allocated; object arrays (which need pickle) are refused.

    Args:
        path: A ``.npy``, ``.npz`` or TensorProto ``.pb`` file.
        name: The input the file feeds (``NAME=FILE``). For an ``.npz`` with several arrays it picks
            the array stored under that key.

    Raises:
        FeedError: The file is missing, not a regular file, unreadable, too large, of an unknown format,
            or does not hold ``name``.
    """
    file = Path(path)
    if not exists(file):
        raise FeedError(f"no such feed file: {file}", hint="check the path", cli_hint="check the path given to --input")
    suffix = file.suffix.lower()
    if suffix not in FORMATS:
        check_regular(file, what="feed file", max_bytes=None, error=FeedError)
        raise FeedError(
            f"cannot read feed file {file}: unknown format {suffix or '(no suffix)'!r}",
            hint="give a .npy, .npz or ONNX TensorProto .pb file",
        )
    if suffix == ".npy":
        return [FeedFile(name, read_npy(file, what="feed file"), str(file), file.stem, str(file))]
    if suffix == ".npz":
        return _read_npz(file, name)
    tensor = read_tensor_file(file)
    return [FeedFile(name or tensor.name or None, _tensor_to_array(tensor, file), str(file), file.stem, str(file))]


def _read_npz(file: Path, name: str | None) -> list[FeedFile]:
    with open_npz(file, what="feed file") as archive:
        keys = archive.files
        if not keys:
            raise FeedError(f"{file} holds no arrays", hint="write the inputs with numpy.savez(file, name=value)")
        if name is not None and name not in keys and len(keys) > 1:
            suggestion = did_you_mean(name, keys)
            raise FeedError(
                f"{file} holds {len(keys)} arrays ({', '.join(repr(k) for k in keys)}) and none is named {name!r}",
                hint=suggestion or "load the file without a name to feed every array by its key",
                cli_hint=suggestion or f"pass the file without a name (--input {file}) to feed every array by its key",
            )
        if name is None:
            check_array_size(archive.declared_bytes(), what=f"the arrays of {file}")
            return [FeedFile(key, archive[key], f"{file}[{key}]", file.stem, str(file), keyed=True) for key in keys]
        key = name if name in keys else keys[0]
        return [FeedFile(name, archive[key], f"{file}[{key}]", file.stem, str(file))]


def read_tensor_file(path: str | os.PathLike[str]) -> onnx.TensorProto:
    """Parse a serialized ONNX TensorProto (``input_0.pb``, ``output_0.pb``).

    Raises:
        FeedError: The file is not a regular file of at most 2 GiB, or not a TensorProto.
    """
    file = Path(path)
    data = read_bytes(file, what="tensor file", max_bytes=_MAX_PROTO_BYTES, error=FeedError)
    tensor = onnx.TensorProto()
    try:
        tensor.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as err:
        raise FeedError(f"cannot read {file} as an ONNX TensorProto: {err}", hint="give a .pb written by "
                        "onnx.numpy_helper.from_array(...).SerializeToString()") from err
    if not tensor.data_type:
        raise FeedError(f"{file} is not an ONNX TensorProto (no data type)", hint="give a TensorProto .pb file")
    return tensor


def _tensor_to_array(tensor: onnx.TensorProto, file: Path) -> np.ndarray:
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        raise FeedError(f"{file} keeps its data in an external file", hint="save the value inline, or as .npy")
    try:
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)
    except (KeyError, ValueError, TypeError) as err:
        raise FeedError(f"{file} holds a tensor of unknown data type {tensor.data_type}",
                        hint="give a tensor of a standard ONNX data type (onnx.TensorProto.FLOAT, ...)") from err
    dims = list(tensor.dims)
    if any(d < 0 for d in dims):
        raise FeedError(f"{file} declares a negative dim in its shape {dims}", hint="the file is corrupted")
    check_array_size(math.prod(dims) * max(dtype.itemsize, 1), what=f"the tensor in {file}")
    try:
        return numpy_helper.to_array(tensor)
    except (ValueError, TypeError, KeyError) as err:
        raise FeedError(f"cannot decode the tensor in {file}: {err}", hint="the file is corrupted") from err


def load_feeds(specs: Iterable[str]) -> list[FeedFile]:
    """Read every ``--input`` value: ``NAME=FILE`` or ``FILE`` (an ``.npz`` then feeds all its arrays).

    Raises:
        FeedError: A file is missing or unreadable.
    """
    found: list[FeedFile] = []
    for spec in specs:
        name, path = _split_input_spec(spec)
        found.extend(load_feed_file(path, name))
    return found


def _split_input_spec(spec: str) -> tuple[str | None, str]:
    if "=" not in spec or os.path.exists(spec):  # (False, not an error, for a name too long or with NUL)
        return None, spec
    name, _, path = spec.partition("=")
    return (name or None), path


def resolve_feeds(files: Sequence[FeedFile], input_names: Sequence[str], *, where: str = "the model",
                  notes: list[str] | None = None) -> dict[str, np.ndarray]:
    """Assign each array to an input name.

    A nameless array goes to the input named like its file's stem, to input K for ONNX test data
    (``input_K.pb``), or to the only input of a one-input model. The arrays of an ``.npz`` given
    without a name whose keys are no input of the model are left out, each file's left-out keys
    told in one line appended to ``notes`` (so the values ``run --save`` wrote feed a sub-model).

    Raises:
        FeedError: An array's input cannot be told, or two arrays feed the same input.
    """
    result: dict[str, np.ndarray] = {}
    origin: dict[str, str] = {}
    wanted = set(input_names)
    ignored: dict[str, list[str]] = {}
    for item in files:
        if item.keyed and item.name not in wanted:
            ignored.setdefault(item.path, []).append(str(item.name))
            continue
        name = item.name or _guess_name(item, input_names, where)
        if name in result:
            raise FeedError(
                f"input {name!r} is fed twice: by {origin[name]} and by {item.source}",
                hint="give each input once",
            )
        result[name] = item.value
        origin[name] = item.source
    for path, keys in ignored.items():
        shown = ", ".join(repr(k) for k in keys[:5]) + (f" and {len(keys) - 5} more" if len(keys) > 5 else "")
        message = f"{path}: {len(keys)} array(s) that are no input of {where} were ignored ({shown})"
        log.info(message)
        if notes is not None:
            notes.append(message)
    return result


def _guess_name(item: FeedFile, input_names: Sequence[str], where: str) -> str:
    if item.stem in input_names:
        return item.stem
    match = _TEST_DATA_NAME.match(item.stem)
    if match and int(match.group(1)) < len(input_names):
        return input_names[int(match.group(1))]
    if len(input_names) == 1:
        return input_names[0]
    raise FeedError(
        f"cannot tell which input of {where} {item.source} feeds (its inputs: "
        + ", ".join(repr(n) for n in input_names) + ")",
        hint=f"write NAME={item.source}",
    )


# ---------------------------------------------------------------------------------- flag parsing


def parse_named(text: str, flag: str) -> tuple[str | None, str]:
    """Split ``NAME=VALUE`` at its last ``=`` (names may contain ``=``, values do not); no ``=``: (None, text)."""
    if "=" not in text:
        return None, text
    name, _, value = text.rpartition("=")
    if not value:
        raise UsageError(f"{flag} {text!r} has no value after '='", hint=f"write {flag} NAME=VALUE")
    return (name or None), value


def parse_shape(text: str, flag: str = "--shape") -> tuple[str | None, tuple[int, ...]]:
    """``NAME=1x3x20x20`` (or ``1,3,20,20``; ``NAME=`` optional for one-input models) → (name, shape).

    Raises:
        UsageError: The dims are not non-negative integers.
    """
    name, value = parse_named(text, flag)
    parts = [p for p in re.split(r"[x,×]", value.strip().strip("[]()")) if p.strip()] if value.strip("[]() ") else []
    hint = f"write {flag} NAME=1x3x224x224"
    dims = tuple(parse_int(p, what=f"{flag} {text!r}: dim", lo=0, hi=INT64_MAX, hint=hint) for p in parts)
    return name, dims


def parse_range(text: str, flag: str = "--range") -> tuple[str | None, tuple[float, float]]:
    """``NAME=lo,hi`` → (name, (lo, hi)).

    Raises:
        UsageError: Not two numbers with lo < hi.
    """
    name, value = parse_named(text, flag)
    parts = value.split(",")
    if len(parts) != 2:
        raise UsageError(f"{flag} {text!r}: expected two numbers lo,hi", hint=f"write {flag} NAME=-1,1")
    lo, hi = (parse_float(p, what=f"{flag} {text!r}", hint=f"write {flag} NAME=-1,1") for p in parts)
    if not lo < hi:
        raise UsageError(f"{flag} {text!r}: lo must be below hi", hint=f"write {flag} NAME=-1,1")
    return name, (lo, hi)


#: The longest name a zip member (an array in an .npz, ``NAME.npy``) can have, in bytes.
_MEMBER_NAME_MAX = 0xFFFF


def npz_path(path: str | os.PathLike[str]) -> Path:
    """``path`` as the destination of ``save_arrays``.

    Raises:
        UsageError: The path does not end in ``.npz``.
    """
    dest = Path(path)
    if dest.suffix.lower() != ".npz":
        raise UsageError(f"cannot save to {dest}: outputs are saved as .npz", hint="give a path ending in .npz")
    return dest


def save_arrays(path: str | os.PathLike[str], arrays: Mapping[str, np.ndarray], *,
                plan: WritePlan | None = None) -> Path:
    """Write arrays to an ``.npz`` atomically, keyed by tensor name (``np.load`` reads it back).

    Args:
        path: The ``.npz`` file.
        arrays: Name -> array. Arrays of Python strings are written as numpy strings (no pickles).
        plan: The write plan of the command writing it (checked against what the command reads).

    Raises:
        UsageError: The path does not end in ``.npz``, names a device, FIFO or folder, or a name is
            too long for a member of a zip file.
        WriteError: The file cannot be written.
    """
    dest = npz_path(path)
    for name in arrays:
        size = len(name.encode("utf-8", "surrogatepass")) + len(".npy")
        if size > _MEMBER_NAME_MAX:
            shown = f"{name[:40]}…" if len(name) > 40 else name
            raise UsageError(
                f"cannot save {shown!r} to {dest}: its name is {len(name)} characters long, over the "
                f"{_MEMBER_NAME_MAX - 4}-byte limit of a name in an .npz (a zip file)",
                hint="leave that tensor out, or rename it",
                cli_hint="leave that tensor out (choose tensors with --output), or rename it",
            )
    with (plan.output(dest, "the saved values") if plan is not None else atomic_output(dest)) as tmp, \
            open(tmp, "wb") as handle, \
            zipfile.ZipFile(handle, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
        for name, value in arrays.items():
            array = np.asarray(value)
            if array.dtype == object:
                array = array.astype(np.str_)
            with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, array, allow_pickle=False)
    return dest
