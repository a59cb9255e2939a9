"""Argument checks for the public Python API: every public function calls these in its prologue.

A wrong type raises ``ArgumentTypeError`` (a ``UsageError`` that is also a ``TypeError``), a value of
the right type out of its domain raises ``UsageError`` (a ``ValueError``); both name the keyword and
what it expects, so a caller never meets a raw ``TypeError`` from deep inside numpy or protobuf.
Each check returns the value normalised (a list for a sequence, a dict for a mapping) so the caller
can keep using it without a second conversion. This module imports nothing of graphkit but errors.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from graphkit.errors import ArgumentTypeError, UsageError

__all__ = [
    "INT64_MAX",
    "MODEL",
    "boolean",
    "choice",
    "describe",
    "instance",
    "integer",
    "mapping",
    "name",
    "names",
    "names_or_paths",
    "optional",
    "path",
    "real",
    "shape",
    "value_range",
]

T = TypeVar("T")

#: The largest value an ONNX int field (dims, versions) holds.
INT64_MAX = 2**63 - 1
#: What a model argument must be, in words.
MODEL = "a graphkit Model (from graphkit.load)"

_REPR_LIMIT = 60


def describe(value: Any) -> str:
    """``float 2.5``, ``list containing None``: the type and a short repr, for messages."""
    text = repr(value)
    if len(text) > _REPR_LIMIT:
        text = text[: _REPR_LIMIT - 3] + "..."
    return f"{type(value).__name__} {text}"


def _wrong(keyword: str, expected: str, value: Any, hint: str | None = None) -> ArgumentTypeError:
    return ArgumentTypeError(f"{keyword}= must be {expected}, not {describe(value)}",
                             hint=hint or f"pass {expected} as {keyword}=")


def _bad(keyword: str, expected: str, value: Any, hint: str | None = None) -> UsageError:
    return UsageError(f"{keyword}= must be {expected}, not {value!r}"[:300], hint=hint or f"pass {expected} as {keyword}=")


def optional(check: Callable[..., T], value: Any, keyword: str, **options: Any) -> T | None:
    """``None`` stays None; anything else goes through ``check``."""
    return None if value is None else check(value, keyword, **options)


def instance(value: Any, keyword: str, cls: type[T] | tuple[type, ...], expected: str) -> T:
    """``value`` itself, when it is an instance of ``cls`` (``expected`` says what that is in words)."""
    if not isinstance(value, cls):
        raise _wrong(keyword, expected, value)
    return value  # type: ignore[return-value]


def boolean(value: Any, keyword: str) -> bool:
    """True or False (numpy's bool too; not 0/1, which usually means a mixed-up argument)."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return bool(value)
    raise _wrong(keyword, "True or False", value)


def integer(value: Any, keyword: str, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """An int (numpy integers too, not bool) within [minimum, maximum]."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise _wrong(keyword, _int_words(minimum, maximum), value)
    number = int(value)
    if (minimum is not None and number < minimum) or (maximum is not None and number > maximum):
        raise _bad(keyword, _int_words(minimum, maximum), number)
    return number


def _int_words(minimum: int | None, maximum: int | None) -> str:
    if minimum is not None and maximum is not None:
        return f"an int from {minimum} to {maximum}"
    if minimum is not None:
        return f"an int >= {minimum}"
    if maximum is not None:
        return f"an int <= {maximum}"
    return "an int"


def real(value: Any, keyword: str, *, minimum: float | None = None, finite: bool = True) -> float:
    """A real number (int or float, numpy's too, not bool), not NaN, finite unless ``finite=False``."""
    words = "a finite number" if finite else "a number"
    if minimum is not None:
        words += f" >= {minimum:g}"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise _wrong(keyword, words, value)
    number = float(value)
    if math.isnan(number) or (finite and math.isinf(number)) or (minimum is not None and number < minimum):
        raise _bad(keyword, words, number)
    return number


def name(value: Any, keyword: str, *, what: str = "name", empty: bool = False) -> str:
    """A str (a tensor, node, input... name); empty only when ``empty``."""
    if not isinstance(value, str):
        raise _wrong(keyword, f"a {what} (str)", value)
    if not value and not empty:
        raise UsageError(f"{keyword}= is an empty {what}", hint=f"give the {what}")
    _utf8(value, keyword, what)
    return value


def _utf8(value: str, keyword: str, what: str) -> None:
    """ONNX stores names as UTF-8: a lone surrogate (from a mis-decoded byte) cannot be stored."""
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as err:
            raise UsageError(f"{keyword}= is not valid text: {value!r}"[:300],
                             hint=f"a {what} must be encodable as UTF-8 ({err.reason} at position {err.start})") from err


def names(value: Any, keyword: str, *, what: str = "name", minimum: int = 0) -> list[str]:
    """A list or tuple (or other non-string iterable) of names, at least ``minimum`` of them."""
    items = _items(value, keyword, f"a list of {what}s")
    for item in items:
        if not isinstance(item, str) or not item:
            raise _wrong(keyword, f"a list of {what}s (non-empty str)", value)
        _utf8(item, keyword, what)
    if len(items) < minimum:
        raise UsageError(f"{keyword}= needs at least {minimum} {what}{'s' if minimum > 1 else ''}, got {len(items)}",
                         hint=f"e.g. {keyword}=['{what}']")
    return items


def _items(value: Any, keyword: str, expected: str) -> list[Any]:
    if isinstance(value, str):
        raise _wrong(keyword, expected, value, hint=f"wrap a single name in a list: {keyword}=[{value!r}]")
    if isinstance(value, (bytes, bytearray, Mapping)) or not isinstance(value, Iterable):
        raise _wrong(keyword, expected, value)
    return list(value)


def names_or_paths(value: Any, keyword: str) -> list[Any]:
    """A list (not one str) of paths or names, each checked by the caller."""
    return _items(value, keyword, "a list of paths")


def mapping(value: Any, keyword: str, *, key: Callable[[Any, str], Any] | None = None,
            item: Callable[[Any, str], Any] | None = None, expected: str = "a dict") -> dict[Any, Any]:
    """A Mapping whose keys and values pass ``key`` and ``item`` (each called with the entry's keyword)."""
    if not isinstance(value, Mapping):
        raise _wrong(keyword, expected, value)
    out = {}
    for k, v in value.items():
        if key is not None:
            k = key(k, f"{keyword}[{k!r}]" if isinstance(k, str) else f"{keyword} key")
        if item is not None:
            v = item(v, f"{keyword}[{k!r}]")
        out[k] = v
    return out


def choice(value: Any, keyword: str, choices: Iterable[str]) -> str:
    """One of ``choices`` (str)."""
    options = list(choices)
    words = "one of " + ", ".join(repr(c) for c in options)
    if not isinstance(value, str):
        raise _wrong(keyword, words, value)
    if value not in options:
        raise _bad(keyword, words, value)
    return value


def path(value: Any, keyword: str) -> str | os.PathLike[str]:
    """A str or os.PathLike naming a file: not empty, no NUL character."""
    if isinstance(value, (bytes, bytearray)) or not isinstance(value, (str, os.PathLike)):
        raise _wrong(keyword, "a path (str or pathlib.Path)", value)
    text = os.fspath(value)
    if not isinstance(text, str):
        raise _wrong(keyword, "a path (str or pathlib.Path)", value)
    if not text:
        raise UsageError(f"{keyword}= is an empty path", hint="give a file name")
    if "\0" in text:
        raise UsageError(f"{keyword}= contains a NUL character: {text!r}"[:300], hint="file names cannot contain NUL")
    return value


def shape(value: Any, keyword: str) -> tuple[int, ...]:
    """A sequence of dims, each an int >= 0."""
    items = _items(value, keyword, "a shape (a list of ints >= 0)")
    return tuple(integer(d, keyword, minimum=0, maximum=INT64_MAX) for d in items)


def value_range(value: Any, keyword: str) -> tuple[float, float]:
    """A pair (lo, hi) of finite numbers with lo <= hi."""
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence) or len(value) != 2:
        raise _wrong(keyword, "a pair (lo, hi) of numbers", value)
    lo, hi = real(value[0], keyword), real(value[1], keyword)
    if lo > hi:
        raise UsageError(f"{keyword}= has lo {lo:g} above hi {hi:g}", hint="give (lo, hi) with lo <= hi")
    return lo, hi
