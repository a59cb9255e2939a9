"""Number types for argparse flags, through graphkit's one strict number parser (ASCII, bounded, finite)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from graphkit._numbers import INT64_MAX, parse_float, parse_int
from graphkit.errors import UsageError

__all__ = ["number", "whole"]


def whole(*, lo: int | None = 0, hi: int | Callable[[], int] = INT64_MAX) -> Callable[[str], int]:
    """An argparse ``type`` for a whole number in ``[lo, hi]`` (``hi`` may be computed when parsing)."""

    def parse(text: str) -> int:
        try:
            return parse_int(text, what="", lo=lo, hi=hi() if callable(hi) else hi)
        except UsageError as err:
            raise argparse.ArgumentTypeError(err.message) from err

    parse.__name__ = "whole number"
    return parse


def number(*, lo: float | None = None, hi: float | None = None, lo_open: bool = False) -> Callable[[str], float]:
    """An argparse ``type`` for a finite number within bounds (``lo_open``: above ``lo``)."""

    def parse(text: str) -> float:
        try:
            return parse_float(text, what="", lo=lo, hi=hi, lo_open=lo_open)
        except UsageError as err:
            raise argparse.ArgumentTypeError(err.message) from err

    parse.__name__ = "number"
    return parse
