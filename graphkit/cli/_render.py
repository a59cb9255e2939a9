"""The only place the CLI prints."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["error", "human_bytes", "json_out", "progress", "progress_done", "table", "text", "warn"]


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


def progress(done: int, total: int) -> None:
    """Show ``done/total`` nodes on standard error, rewriting one line."""
    sys.stderr.write(f"\rgraphkit: {done}/{total} nodes ({100 * done // max(total, 1)}%)")
    sys.stderr.flush()


def progress_done() -> None:
    """End a progress line."""
    sys.stderr.write("\n")
    sys.stderr.flush()


def human_bytes(n: int) -> str:
    """Bytes as B / KiB / MiB / GiB text."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"
