"""Opening a user's input file safely: recipes, --map files, feed and reference arrays, manifests.

Every such file must be a regular file of bounded size, and that is checked on the open descriptor
before a byte is read: a FIFO would block forever, a device would never end. Text is UTF-8 (a bad
byte is an error naming its offset), and JSON and YAML are parsed with a bounded nesting depth (deep
brackets would exhaust the interpreter's stack) and, for YAML, a safe loader without aliases (an alias
bomb expands a few hundred bytes into gigabytes). Errors are one line, the fact, plus a hint.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from graphkit.errors import GraphkitError, UsageError

__all__ = [
    "MAX_NESTING",
    "MAX_TEXT_BYTES",
    "check_regular",
    "exists",
    "is_dir",
    "json_depth",
    "open_file",
    "open_input",
    "parse_json",
    "parse_yaml",
    "read_bytes",
    "read_data",
    "read_text",
]

#: Recipes, --map files and manifests larger than this are refused (a real one is kilobytes).
MAX_TEXT_BYTES = 64 << 20
#: Deepest nesting of brackets (JSON) or collections (YAML) accepted; a real recipe nests 4 deep.
MAX_NESTING = 100


def exists(path: str | os.PathLike[str]) -> bool:
    """Whether something is at ``path``; True when asking fails for another reason than its absence
    (a name too long, a NUL byte, no permission), so that opening it reports that reason."""
    try:
        os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except (OSError, ValueError):
        return True
    return True


def is_dir(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a folder (False when it cannot be asked: the caller's next step says why)."""
    try:
        return stat.S_ISDIR(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def check_regular(path: str | os.PathLike[str], *, what: str, max_bytes: int | None,
                  error: type[GraphkitError] = UsageError) -> os.stat_result:
    """Check that ``path`` names a regular file of at most ``max_bytes`` without opening it.

    Raises:
        UsageError: (or ``error``) it is missing, not a regular file, or too large.
    """
    file = Path(path)
    try:
        info = os.stat(file)
    except (OSError, ValueError) as err:  # ValueError: a NUL byte in the path
        reason = getattr(err, "strerror", None) or str(err)
        raise error(f"cannot read {what} {file}: {reason}", hint="check the path") from err
    _check_stat(info, file, what, max_bytes, error)
    return info


def _check_stat(info: os.stat_result, file: Path, what: str, max_bytes: int | None,
                error: type[GraphkitError]) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise error(f"cannot read {what} {file}: it is {_kind(info.st_mode)}", hint="give a regular file")
    if max_bytes is not None and info.st_size > max_bytes:
        raise error(f"{what} {file} is too large ({info.st_size} bytes; at most {max_bytes} are read)",
                    hint=f"give a smaller {what}")


def open_file(path: str | os.PathLike[str], *, what: str, max_bytes: int | None,
              error: type[GraphkitError] = UsageError) -> tuple[IO[bytes], int]:
    """Open a user's input file for reading, once it is known to be a regular file of bounded size.

    The file is opened without blocking and checked through its descriptor, so a FIFO swapped in
    after a check cannot make the read hang. The caller closes the returned file.

    Returns:
        The binary file object and the file's size.

    Raises:
        UsageError: (or ``error``) missing, unreadable, not a regular file, or larger than ``max_bytes``.
    """
    file = Path(path)
    check_regular(file, what=what, max_bytes=max_bytes, error=error)
    try:
        fd = os.open(file, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        raise error(f"cannot read {what} {file}: {err.strerror or err}",
                    hint="check the path and its permissions") from err
    try:
        info = os.fstat(fd)
        _check_stat(info, file, what, max_bytes, error)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb"), info.st_size
    except BaseException:
        os.close(fd)
        raise


@contextmanager
def open_input(path: str | os.PathLike[str], *, what: str, max_bytes: int | None,
               error: type[GraphkitError] = UsageError) -> Iterator[tuple[IO[bytes], int]]:
    """:func:`open_file` as a context manager that closes the file.

    Yields:
        The binary file object and the file's size.
    """
    handle, size = open_file(path, what=what, max_bytes=max_bytes, error=error)
    with handle:
        yield handle, size


def read_bytes(path: str | os.PathLike[str], *, what: str, max_bytes: int = MAX_TEXT_BYTES,
               error: type[GraphkitError] = UsageError) -> bytes:
    """The bytes of a user's input file (a regular file of at most ``max_bytes``).

    Raises:
        UsageError: (or ``error``) as :func:`open_input`.
    """
    with open_input(path, what=what, max_bytes=max_bytes, error=error) as (handle, _size):
        try:
            data = handle.read(max_bytes + 1)
        except OSError as err:
            raise error(f"cannot read {what} {path}: {err.strerror or err}", hint="check the file") from err
    if len(data) > max_bytes:  # it grew while being read
        raise error(f"{what} {path} is too large (over {max_bytes} bytes)", hint=f"give a smaller {what}")
    return data


def read_text(path: str | os.PathLike[str], *, what: str, max_bytes: int = MAX_TEXT_BYTES,
              error: type[GraphkitError] = UsageError) -> str:
    """A user's text file decoded as UTF-8 (a leading byte-order mark is dropped).

    Raises:
        UsageError: (or ``error``) unreadable as :func:`open_input`, or not UTF-8 (naming the offset).
    """
    data = read_bytes(path, what=what, max_bytes=max_bytes, error=error)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise error(f"{what} {path} is not UTF-8 text: byte 0x{data[err.start]:02x} at offset {err.start} "
                    f"(line {line})", hint="save the file as UTF-8") from err


_JSON_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"?|[\[\]{}]')


def json_depth(text: str, limit: int) -> int:
    """The deepest bracket nesting of JSON text (strings skipped), stopping once it passes ``limit``."""
    depth = deepest = 0
    for match in _JSON_TOKENS.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    break
        elif token in "]}":
            depth -= 1
    return deepest


def parse_json(text: str, *, what: str, max_depth: int = MAX_NESTING,
               error: type[GraphkitError] = UsageError) -> Any:
    """Parse JSON text whose nesting is at most ``max_depth`` deep; NaN and Infinity are refused.

    Raises:
        UsageError: (or ``error``) invalid JSON (with its line and column), or nested too deeply.
    """
    if json_depth(text, max_depth) > max_depth:
        raise error(f"{what} nests brackets more than {max_depth} deep",
                    hint="check the file; real ones nest a few levels deep")
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as err:
        raise error(f"{what} is not valid JSON: {err.msg} at line {err.lineno}, column {err.colno}",
                    hint="fix the syntax at that position") from err
    except (ValueError, RecursionError) as err:  # e.g. an integer of more than 4300 digits, or NaN
        raise error(f"{what} is not valid JSON: {err}", hint="fix the value") from err


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_yaml(text: str, *, what: str, max_depth: int = MAX_NESTING,
               error: type[GraphkitError] = UsageError) -> Any:
    """Parse YAML with the safe loader, refusing aliases and nesting over ``max_depth``.

    Raises:
        UsageError: (or ``error``) invalid YAML (one line: the problem, its line and column), an alias,
            or nested too deeply.
    """
    import yaml

    loader = None
    try:
        loader = _safe_loader(yaml)(text)  # (its reader already refuses control characters)
        loader._max_depth = max_depth
        return loader.get_single_data()
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = err.problem or err.context or "invalid YAML"
        raise error(f"{what} is not valid YAML: {problem}{where}", hint=_yaml_hint(problem)) from err
    except yaml.YAMLError as err:
        raise error(f"{what} is not valid YAML: {' '.join(str(err).split())}", hint="fix the syntax") from err
    except RecursionError as err:
        raise error(f"{what} nests too deeply", hint="check the file") from err
    finally:
        if loader is not None:
            loader.dispose()


def _yaml_hint(problem: str) -> str:
    if "alias" in problem:
        return "write the value out instead of referring to an anchor (&name / *name)"
    if "deep" in problem:
        return "check the file; real ones nest a few levels deep"
    return "fix the syntax at that position"


_LOADER: Any = None


def _safe_loader(yaml: Any) -> Any:
    """yaml.SafeLoader, refusing aliases and deep nesting while it composes nodes."""
    global _LOADER
    if _LOADER is not None:
        return _LOADER

    class _Loader(yaml.SafeLoader):  # type: ignore[misc,name-defined]
        _depth = 0
        _max_depth = MAX_NESTING

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                raise yaml.composer.ComposerError(None, None, "aliases (*name) are not allowed", event.start_mark)
            self._depth += 1
            try:
                if self._depth > self._max_depth:
                    raise yaml.composer.ComposerError(None, None, f"nested more than {self._max_depth} deep",
                                                      self.peek_event().start_mark)
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1

    _LOADER = _Loader
    return _LOADER


def read_data(path: str | os.PathLike[str], *, what: str, yaml: bool | None = None, max_bytes: int = MAX_TEXT_BYTES,
              error: type[GraphkitError] = UsageError) -> Any:
    """A user's JSON (or YAML: ``.yaml``/``.yml``, or ``yaml=True``) file, read and parsed safely.

    Raises:
        UsageError: (or ``error``) as :func:`read_text`, :func:`parse_json` and :func:`parse_yaml`.
    """
    file = Path(path)
    text = read_text(file, what=what, max_bytes=max_bytes, error=error)
    as_yaml = file.suffix.lower() in (".yaml", ".yml") if yaml is None else yaml
    label = f"{what} {file}"
    if as_yaml:
        return parse_yaml(text, what=label, error=error)
    return parse_json(text, what=label, error=error)
