"""Progress reports from long library calls: the callback type and its argument check.

A long function (compare, run_chain, split, write_split, …) takes ``progress=``: a function called
as ``progress(done, total)`` as work completes (units are the function's: nodes, fragments). The
library never prints; the CLI passes a bar from ``graphkit.cli._render.progress`` (tqdm on a
terminal, nothing otherwise or with ``--no-progress``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from graphkit import _check_args as argcheck
from graphkit.errors import ArgumentTypeError

__all__ = ["Progress", "check", "report"]

#: ``progress(done, total)``: called as work completes.
Progress = Callable[[int, int], None]


def check(value: Any, keyword: str = "progress") -> Progress | None:
    """``value`` as a progress callback (None: no reports)."""
    if value is not None and not callable(value):
        raise ArgumentTypeError(f"{keyword}= must be a function (done, total), not {argcheck.describe(value)}",
                                hint=f"pass e.g. {keyword}=lambda done, total: print(done, total), or None")
    if value is not None and not _takes_two(value):
        raise ArgumentTypeError(f"{keyword}= must take two arguments (done, total); {argcheck.describe(value)} cannot",
                                hint=f"pass e.g. {keyword}=lambda done, total: print(done, total), or None")
    return value


def _takes_two(function: Any) -> bool:
    """Whether ``function(done, total)`` binds; a callable whose signature Python cannot read is trusted."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # (some builtins and C callables have no readable signature)
        return True
    try:
        signature.bind(0, 0)
    except TypeError:
        return False
    return True


def report(progress: Progress | None, done: int, total: int) -> None:
    """Call ``progress(done, total)`` if there is one."""
    if progress is not None:
        progress(done, total)
