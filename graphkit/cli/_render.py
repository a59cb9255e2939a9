"""The only place the CLI prints."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from graphkit._progress import Progress

__all__ = ["add_progress_option", "error", "human_bytes", "json_out", "progress", "progress_done", "table", "text",
           "warn"]


def text(message: str = "", *, end: str = "\n") -> None:
    """Print a line to standard output."""
    sys.stdout.write(message + end)
    sys.stdout.flush()


def warn(message: str) -> None:
    """Print a warning line to standard error."""
    sys.stderr.write(f"graphkit: warning: {message}\n")


def error(message: str, *, hint: str | None) -> None:
    """Print ``graphkit: error: …`` and ``hint: …`` to standard error."""
    sys.stderr.write(f"graphkit: error: {message}\n")
    if hint:
        sys.stderr.write(f"hint: {hint}\n")
    sys.stderr.flush()


def json_out(data: Any) -> None:
    """Print one JSON document."""
    sys.stdout.write(json.dumps(data, indent=2, default=_default) + "\n")
    sys.stdout.flush()


def _default(value: Any) -> Any:
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def table(rows: Sequence[Sequence[Any]], header: Sequence[str] | None = None, *, indent: int = 0) -> None:
    """Print a left-aligned text table."""
    cells = [[str(c) for c in row] for row in ([header] if header else []) + list(rows)]
    if not cells:
        return
    widths = [max(len(row[i]) for row in cells if i < len(row)) for i in range(max(len(r) for r in cells))]
    pad = " " * indent
    for n, row in enumerate(cells):
        text(pad + "  ".join(c.ljust(widths[i]) for i, c in enumerate(row)).rstrip())
        if header and n == 0:
            text(pad + "  ".join("-" * w for w in widths))


_bars: list[Any] = []


def progress(label: str, *, enabled: bool | None = None, unit: str = "nodes") -> Progress | None:
    """Open a progress bar on standard error and return it as a long call's ``progress=`` callback.

    ``progress_done()`` closes it (the CLI's ``main`` also does, whatever happened).

    Args:
        label: What is going on ("compare", "run-chain").
        enabled: True or False from ``--progress/--no-progress``; None: only when standard error is
            a terminal (so logs and pipes stay clean).
        unit: What ``done`` and ``total`` count.

    Returns:
        The callback ``(done, total)``, or None when no bar is shown.
    """
    if not (sys.stderr.isatty() if enabled is None else enabled):
        return None
    from tqdm import tqdm  # (only a shown bar needs it)

    bar = tqdm(desc=f"graphkit {label}", unit=f" {unit}", file=sys.stderr, leave=False, dynamic_ncols=True,
               mininterval=0.2)
    _bars.append(bar)

    def step(done: int, total: int) -> None:
        if bar.total != total:
            bar.total = total
            bar.refresh()
        bar.update(done - bar.n)
        if done >= total:  # (the last step is always drawn, whatever the refresh interval)
            bar.refresh()

    return step


def progress_done() -> None:
    """Close the open progress bars (their line is erased)."""
    while _bars:
        _bars.pop().close()


def add_progress_option(parser: argparse.ArgumentParser) -> None:
    """--progress/--no-progress (default: a bar only when standard error is a terminal)."""
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="show a progress bar on standard error (default: when it is a terminal)")


def human_bytes(n: int) -> str:
    """Bytes as B / KiB / MiB / GiB text."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"
