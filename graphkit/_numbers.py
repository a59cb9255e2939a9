"""Numbers from text (command-line flags, recipe and manifest fields): ASCII only, within bounds.

``int()`` and ``float()`` accept more than a user means: ``int("٣")`` is 3, ``"²".isdigit()`` is True
although ``int("²")`` fails, ``int("1_000")`` is 1000, ``float("nan")`` and ``float("1e400")`` (inf)
pass. Every number graphkit reads from text goes through :func:`parse_int` or :func:`parse_float`, so
each is plain ASCII, finite and inside the range its use allows, or a one-line error naming it.
"""

from __future__ import annotations

import math
import os
import re

from graphkit.errors import GraphkitError, UsageError

__all__ = [
    "INT64_MAX",
    "MAX_THREADS_PER_CORE",
    "check_int",
    "max_threads",
    "parse_float",
    "parse_int",
]

INT64_MAX = 2**63 - 1
#: Thread counts above this many per core only cost memory (ONNX Runtime allocates per thread).
MAX_THREADS_PER_CORE = 4

_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
#: More digits than any int64 has: refused before int() parses them.
_MAX_DIGITS = 19


def max_threads() -> int:
    """The most intra-op threads graphkit lets ONNX Runtime start: a small multiple of the cores."""
    return MAX_THREADS_PER_CORE * max(1, os.cpu_count() or 1)


def _clip(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else f"{text[:20]}...({len(text)} digits)"


def _say(what: str, fact: str) -> str:
    return f"{what}: {fact}" if what else fact


def _bounds(lo: float | None, hi: float | None) -> str:
    if lo is not None and hi is not None:
        return f"from {lo:g} to {hi:g}" if isinstance(lo, float) or isinstance(hi, float) else f"from {lo} to {hi}"
    if lo is not None:
        return f"at least {lo}"
    return f"at most {hi}"


def parse_int(text: str, *, what: str, lo: int | None = 0, hi: int | None = INT64_MAX,
              hint: str | None = None, error: type[GraphkitError] = UsageError) -> int:
    """Parse an integer written in ASCII digits (optional sign) that lies in ``[lo, hi]``.

    Args:
        text: The text.
        what: What it is, for the message (``"--threads"``, ``"--fixed 'in:0=x'"``).
        lo: The smallest value allowed (None: no bound).
        hi: The largest value allowed (None: no bound beyond int64).
        hint: The remedy to print; a default names the range.
        error: The error class to raise.

    Raises:
        UsageError: (or ``error``) ``text`` is not such a number.
    """
    stripped = text.strip()
    if not _INT.fullmatch(stripped):
        raise error(_say(what, f"{text!r} is not a whole number" + (" of ASCII digits" if stripped.isdigit() else "")),
                    hint=hint or f"give a whole number {_bounds(lo, hi)}")
    if len(stripped.lstrip("+-")) > _MAX_DIGITS:  # refused before int() spends time on it
        high = INT64_MAX if hi is None else hi
        raise error(_say(what, f"{_clip(stripped)} is out of range ({_bounds(lo, high)})"),
                    hint=hint or f"give a whole number {_bounds(lo, high)}")
    return check_int(int(stripped), what=what, lo=lo, hi=hi, hint=hint, error=error)


def check_int(value: int, *, what: str, lo: int | None = 0, hi: int | None = INT64_MAX,
              hint: str | None = None, error: type[GraphkitError] = UsageError) -> int:
    """Check an integer against ``[lo, hi]`` (and int64); return it.

    Raises:
        UsageError: (or ``error``) it is outside the range.
    """
    low = -INT64_MAX - 1 if lo is None else lo
    high = INT64_MAX if hi is None else hi
    if not low <= value <= high:
        raise error(_say(what, f"{value} is out of range ({_bounds(lo, high)})"),
                    hint=hint or f"give a whole number {_bounds(lo, high)}")
    return value


def parse_float(text: str, *, what: str, lo: float | None = None, hi: float | None = None,
                lo_open: bool = False, hint: str | None = None, error: type[GraphkitError] = UsageError) -> float:
    """Parse a finite decimal number written in ASCII (``1``, ``-0.5``, ``1e-5``) that lies within bounds.

    Args:
        text: The text.
        what: What it is, for the message.
        lo: The smallest value allowed (None: no bound).
        hi: The largest value allowed (None: no bound).
        lo_open: ``lo`` itself is not allowed (a size must be positive).
        hint: The remedy to print; a default names the range.
        error: The error class to raise.

    Raises:
        UsageError: (or ``error``) ``text`` is not such a number (nan, inf and overflowing values included).
    """
    stripped = text.strip()
    if not _FLOAT.fullmatch(stripped):
        raise error(_say(what, f"{text!r} is not a number"), hint=hint or "write it like 1, 0.5 or 1e-5")
    value = float(stripped)
    if not math.isfinite(value):
        raise error(_say(what, f"{text!r} is too large"), hint=hint or "give a finite number")
    too_low = lo is not None and (value <= lo if lo_open else value < lo)
    if too_low or (hi is not None and value > hi):
        side = "above" if lo_open else "at least"
        bound = f"{side} {lo:g}" if lo is not None else ""
        if hi is not None:
            bound = f"{bound} and at most {hi:g}" if bound else f"at most {hi:g}"
        raise error(_say(what, f"{text!r} is out of range (must be {bound})"), hint=hint or f"give a number {bound}")
    return value
