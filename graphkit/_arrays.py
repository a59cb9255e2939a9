"""Arrays from a user's ``.npy`` and ``.npz`` files, each checked against its header before allocation.

``numpy.load`` trusts the header: one claiming 10^12 elements allocates terabytes before finding the
data missing, and a 6 MB ``.npz`` can hold a member that inflates to 6 GB. Here the header's element
count times the item size must equal the bytes the file (or zip member) holds and stay under
:data:`MAX_ARRAY_BYTES`; object arrays are refused (they need pickle); a truncated or corrupt archive
is a one-line error. Reading an ``.npz`` is lazy: a member is read when it is asked for.
"""

from __future__ import annotations

import math
import os
import tokenize
import zipfile
import zlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

import numpy as np
import numpy.lib.format as npformat

from graphkit._files import open_file, open_input
from graphkit.errors import FeedError, GraphkitError

__all__ = ["MAX_ARRAY_BYTES", "NpzArrays", "check_array_size", "open_npz", "read_npy"]

#: The largest array read from a file, in bytes (the whole of an ``.npz``'s members together too).
MAX_ARRAY_BYTES = 4 << 30
_NPY_HINT = "write it with numpy.save (numeric or fixed-width string arrays)"


def _one_line(err: BaseException, limit: int = 200) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_array_size(nbytes: int, *, what: str, error: type[GraphkitError] = FeedError) -> None:
    """Refuse an array of more than :data:`MAX_ARRAY_BYTES` bytes before it is allocated.

    Raises:
        FeedError: (or ``error``) it is larger.
    """
    if nbytes > MAX_ARRAY_BYTES:
        raise error(f"{what} would take {nbytes} bytes, more than graphkit reads from a file "
                    f"({MAX_ARRAY_BYTES} bytes)", hint="give a smaller array")


def _header(fp: IO[bytes], what: str, error: type[GraphkitError]) -> tuple[tuple[int, ...], bool, np.dtype[Any]]:
    try:
        version = npformat.read_magic(fp)
        if version == (1, 0):
            shape, fortran, dtype = npformat.read_array_header_1_0(fp)
        elif version == (2, 0):
            shape, fortran, dtype = npformat.read_array_header_2_0(fp)
        else:
            raise ValueError(f"unsupported .npy format version {version[0]}.{version[1]}")
    except (ValueError, OSError, EOFError, SyntaxError, TypeError, tokenize.TokenError, RecursionError, MemoryError,
            zlib.error, zipfile.BadZipFile) as err:  # numpy parses the header as a Python literal
        raise error(f"cannot read {what} as .npy: {_one_line(err)}", hint=_NPY_HINT) from err
    return tuple(int(d) for d in shape), bool(fortran), dtype


def _read_checked(fp: IO[bytes], available: int, what: str, error: type[GraphkitError],
                  real_file: bool) -> np.ndarray:
    """Read one .npy stream whose header starts at ``fp``'s position and which holds ``available`` bytes."""
    start = fp.tell()
    shape, fortran, dtype = _header(fp, what, error)
    if dtype.hasobject:
        raise error(f"{what} holds Python objects (dtype {dtype}), which graphkit does not unpickle",
                    hint="save numeric arrays, or strings as a fixed-width ('U'/'S') array")
    if any(d < 0 for d in shape):
        raise error(f"{what} has a negative dim in its shape {shape}", hint=_NPY_HINT)
    count = math.prod(shape)
    if dtype.itemsize == 0 and count:
        raise error(f"{what} has items of size 0 (dtype {dtype})", hint=_NPY_HINT)
    nbytes = count * dtype.itemsize
    check_array_size(nbytes, what=what, error=error)
    held = available - (fp.tell() - start)
    if nbytes != held:
        state = "is truncated" if nbytes > held else "has extra bytes"
        raise error(f"{what} {state}: its header declares {shape} {dtype} ({nbytes} bytes), the file holds {held}",
                    hint=_NPY_HINT)
    try:
        if real_file:
            flat = np.fromfile(fp, dtype=dtype, count=count)
        else:
            buffer = bytearray(nbytes)
            got = fp.readinto(buffer) if nbytes else 0  # type: ignore[attr-defined]
            while got < nbytes:
                more = fp.readinto(memoryview(buffer)[got:])  # type: ignore[attr-defined]
                if not more:
                    break
                got += more
            flat = np.frombuffer(buffer, dtype=dtype, count=count if got == nbytes else got // max(dtype.itemsize, 1))
    except MemoryError as err:
        raise error(f"not enough memory to read {what} ({nbytes} bytes)", hint="free memory or give a smaller array") from err
    except (OSError, ValueError, EOFError, zlib.error, zipfile.BadZipFile) as err:
        raise error(f"cannot read {what}: {_one_line(err)}", hint="the file is corrupt; write it again") from err
    if flat.size != count:
        raise error(f"{what} is truncated: {flat.size} of {count} elements present", hint=_NPY_HINT)
    if fortran:
        return flat.reshape(shape[::-1]).transpose()
    return flat.reshape(shape)


def read_npy(path: str | os.PathLike[str], *, what: str = "array file",
             error: type[GraphkitError] = FeedError) -> np.ndarray:
    """Read an ``.npy`` file after checking its header against the file's size and the size limit.

    Raises:
        FeedError: (or ``error``) not a regular readable file, not .npy, object dtype, truncated, too large.
    """
    file = Path(path)
    label = f"{what} {file}"
    with open_input(file, what=what, max_bytes=None, error=error) as (handle, size):
        return _read_checked(handle, size, label, error, real_file=True)


class NpzArrays(Mapping[str, np.ndarray]):
    """The arrays of an ``.npz``, read (and checked) one at a time when asked for. Close it, or use ``with``."""

    def __init__(self, path: Path, handle: IO[bytes], archive: zipfile.ZipFile, error: type[GraphkitError]) -> None:
        self.path = path
        self._handle = handle
        self._archive = archive
        self._error = error
        self._members: dict[str, zipfile.ZipInfo] = {}
        for info in archive.infolist():
            key = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
            self._members[key] = info

    @property
    def files(self) -> list[str]:
        """The keys, in the archive's order (as ``numpy.lib.npyio.NpzFile.files``)."""
        return list(self._members)

    def declared_bytes(self) -> int:
        """The bytes all members take once decompressed, as the archive declares them."""
        return sum(info.file_size for info in self._members.values())

    def __getitem__(self, key: str) -> np.ndarray:
        info = self._members[key]
        label = f"{self.path}[{key}]"
        check_array_size(info.file_size, what=label, error=self._error)
        try:
            with self._archive.open(info) as member:
                return _read_checked(member, info.file_size, label, self._error, real_file=False)
        except (zipfile.BadZipFile, zlib.error, OSError, EOFError, NotImplementedError, RuntimeError) as err:
            # (RuntimeError: an encrypted member; NotImplementedError: an unknown compression)
            raise self._error(f"cannot read {label}: {_one_line(err)}",
                              hint="the archive is corrupt or truncated; write it again") from err

    def __iter__(self) -> Iterator[str]:
        return iter(self._members)

    def __len__(self) -> int:
        return len(self._members)

    def close(self) -> None:
        """Close the archive and its file."""
        self._archive.close()
        self._handle.close()

    def __enter__(self) -> NpzArrays:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_npz(path: str | os.PathLike[str], *, what: str = "array file",
             error: type[GraphkitError] = FeedError) -> NpzArrays:
    """Open an ``.npz`` (a regular file) for lazy, checked reading of its arrays.

    Raises:
        FeedError: (or ``error``) not a regular readable file, or not a zip archive (truncated included).
    """
    file = Path(path)
    handle, _size = open_file(file, what=what, max_bytes=None, error=error)
    try:
        archive = zipfile.ZipFile(handle)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as err:
        handle.close()
        raise error(f"cannot read {what} {file} as .npz: {_one_line(err)}",
                    hint="write it with numpy.savez (the file may be truncated)") from err
    except BaseException:
        handle.close()
        raise
    return NpzArrays(file, handle, archive, error)
