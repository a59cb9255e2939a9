"""Putting files in place: temporary names, flushing to disk, renaming, and cleaning up after dead writers.

Every file graphkit writes is first written under a temporary name in its destination's folder,
flushed to disk, then renamed over the destination: a reader sees the old file or the new one, never
a part of one. A temporary name says which process wrote it and for which file
(``.gk-<pid>-<random>.<name>.tmp``, cut to fit the file system's name limit), so the next write to
the same place removes the ones whose writer is no longer running (killed, crashed, out of power).

Nothing here knows about models; ``graphkit._io`` builds model saves and write plans on top of it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import shutil
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path

from graphkit.errors import UsageError, WriteError

__all__ = [
    "TEMP_PREFIX",
    "check_target",
    "fit_name",
    "fsync_dir",
    "fsync_path",
    "name_limit",
    "remove_stale_temps",
    "replace",
    "staged",
    "temp_name",
    "write_error",
]

#: Every temporary file or folder graphkit creates starts with this.
TEMP_PREFIX = ".gk-"
_TEMP = re.compile(r"\.gk-(\d{1,10})-([0-9a-f]{8})\.(.*)\.tmp", re.DOTALL)
#: Linux's PATH_MAX: longer paths cannot be opened at all.
_PATH_MAX = 4096


def name_limit(folder: Path) -> int:
    """The longest file name (in bytes) the file system of ``folder`` accepts."""
    try:
        return int(os.pathconf(folder, "PC_NAME_MAX"))
    except (OSError, ValueError):
        return 255


def fit_name(name: str, limit: int, tail: str = "") -> str:
    """``name`` + ``tail``, with ``name`` cut (at a byte boundary) so that the whole fits in ``limit`` bytes."""
    raw, end = os.fsencode(name), os.fsencode(tail)
    if len(raw) + len(end) <= limit:
        return name + tail
    return os.fsdecode(raw[: max(limit - len(end), 0)]) + tail


def temp_name(target: str, limit: int = 255) -> str:
    """A fresh temporary name for a file about to become ``target`` (a name in the same folder)."""
    head = f"{TEMP_PREFIX}{os.getpid()}-{secrets.token_hex(4)}."
    return head + fit_name(target, limit - len(head), ".tmp")


def _writer_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):  # (PermissionError: alive, someone else's)
        return True
    return True


def remove_stale_temps(folder: Path, targets: Iterable[str]) -> list[str]:
    """Remove the temporaries in ``folder`` left for ``targets`` by writers that are no longer running.

    Returns:
        The names removed.
    """
    wanted = {os.fsencode(t) for t in targets}
    limit = name_limit(folder)
    removed: list[str] = []
    try:
        entries = [e for e in os.scandir(folder) if e.name.startswith(TEMP_PREFIX)]
    except OSError:
        return removed
    for entry in entries:
        found = _TEMP.fullmatch(entry.name)
        if found is None:
            continue
        embedded = os.fsencode(found[3])
        cut = len(os.fsencode(entry.name)) == limit  # (a cut name is a prefix of its target)
        if not any(embedded == t or (cut and t.startswith(embedded)) for t in wanted):
            continue
        if _writer_alive(int(found[1])):
            continue
        with contextlib.suppress(OSError):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
            removed.append(entry.name)
    return removed


def fsync_path(path: Path) -> None:
    """Flush a written file's bytes to disk (before it is renamed into place)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(folder: Path) -> None:
    """Flush a folder's entries (after a rename), where the file system supports it."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


def replace(tmp: Path, dest: Path) -> None:
    """Flush ``tmp`` and rename it over ``dest``."""
    fsync_path(tmp)
    os.replace(tmp, dest)


def check_target(dest: Path, *, what: str = "the output", folder_ok: bool = False) -> None:
    """Refuse a destination that cannot be written as a regular file, before anything is written.

    Checks: no NUL byte, every name within the file system's limit, the whole path within PATH_MAX,
    the folder exists and is writable, and what is there now (if anything) is a regular file (or a
    folder, with ``folder_ok``) - never a device, FIFO or socket, even for root.

    Raises:
        UsageError: The path is malformed, too long, or names something that is not a regular file.
        WriteError: The folder does not exist or cannot be written.
    """
    text = str(dest)
    if "\0" in text:
        raise UsageError(f"cannot write {what} {text!r}: the path contains a NUL byte",
                         hint="give a path without NUL characters")
    if not dest.name or dest.name in (".", ".."):
        raise UsageError(f"cannot write {what} {text}: it names a folder, not a file", hint="give a file name")
    folder = dest.parent
    limit = name_limit(folder) if folder.is_dir() else 255
    for part in dest.parts:
        size = len(os.fsencode(part))
        if size > limit:
            name = "the name" if part == text else f"the name {_short(part)}"
            raise UsageError(
                f"cannot write {what} {_short(text)}: {name} is {size} bytes long, "
                f"over the file system's limit of {limit}",
                hint="choose a shorter name",
            )
    if len(os.fsencode(os.path.abspath(text))) >= _PATH_MAX:
        raise UsageError(f"cannot write {what} {_short(text)}: the path is over {_PATH_MAX} bytes long",
                         hint="choose a shorter path")
    if not folder.is_dir():
        missing = "is not a folder" if folder.exists() else "does not exist"
        raise WriteError(f"cannot write {what} {text}: folder {folder} {missing}", hint="create the folder first")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise WriteError(f"cannot write {what} {text}: folder {folder} is not writable",
                         hint="write to a folder you can write to")
    try:
        mode = dest.stat().st_mode  # (through a symlink: what it points at)
    except FileNotFoundError:
        return
    except OSError as err:
        raise write_error(dest, err) from err
    if stat.S_ISREG(mode) or (folder_ok and stat.S_ISDIR(mode)):
        return
    kind = _kind(mode)
    hint = "give a file name ending in .onnx" if stat.S_ISDIR(mode) else "write to a regular file"
    raise UsageError(f"refusing to write {what} {text}: it is {kind}, not a regular file", hint=hint)


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else f"{text[:40]}…{text[-30:]} ({len(text)} characters)"


@contextlib.contextmanager
def staged(dest: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``dest``; on success it is flushed and renamed over ``dest``.

    On failure (any exception) the temporary file is removed and ``dest`` is left as it was.
    Temporaries of dead writers for ``dest`` are removed first.

    Raises:
        WriteError: The folder is missing or read-only, or the disk is full.
    """
    folder = dest.parent
    remove_stale_temps(folder, [dest.name])
    tmp = folder / temp_name(dest.name, name_limit(folder))
    try:
        yield tmp
        replace(tmp, dest)
        fsync_dir(folder)
    except OSError as err:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise write_error(dest, err) from err
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def write_error(dest: Path, err: OSError) -> WriteError:
    """The WriteError for an OSError met while writing ``dest``."""
    if isinstance(err, WriteError):
        return err
    reason = {
        errno.ENOSPC: ("the disk is full", "free some space or write elsewhere"),
        errno.EDQUOT: ("the disk quota is exhausted", "free some space or write elsewhere"),
        errno.EACCES: ("permission denied", "write to a folder you can write to"),
        errno.EPERM: ("permission denied", "write to a folder you can write to"),
        errno.EROFS: ("the file system is read-only", "write to a writable folder"),
        errno.ENOENT: ("the folder does not exist", "create the folder first"),
        errno.ENAMETOOLONG: ("the name is too long", "choose a shorter name"),
        errno.EISDIR: ("it is a folder", "give a file name"),
    }.get(err.errno or 0, (err.strerror or str(err), "check the destination"))
    return WriteError(f"cannot write {dest}: {reason[0]}", hint=reason[1])


def replace_folder(tmp: Path, folder: Path) -> None:
    """Put the finished folder ``tmp`` (beside ``folder``) in ``folder``'s place: renamed in when
    ``folder`` is absent or empty, else swapped with it (the old one removed after)."""
    if folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
    if not folder.exists():
        os.replace(tmp, folder)
        fsync_dir(folder.parent)
        return
    old = folder.parent / temp_name(folder.name, name_limit(folder.parent))
    os.replace(folder, old)
    try:
        os.replace(tmp, folder)
    except OSError:
        os.replace(old, folder)
        raise
    fsync_dir(folder.parent)
    shutil.rmtree(old, ignore_errors=True)
