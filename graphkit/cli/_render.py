"""The only place the CLI prints."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import textwrap
from collections.abc import Sequence
from typing import Any

from graphkit._progress import Progress

__all__ = ["add_progress_option", "capped", "error", "human_bytes", "json_out", "more", "note", "progress", "progress_done",
           "shorten", "table", "text", "warn"]


def text(message: str = "", *, end: str = "\n") -> None:
    """Print a line to standard output."""
    sys.stdout.write(message + end)
    sys.stdout.flush()


def warn(message: str) -> None:
    """Print a warning line to standard error (above an open progress bar, which stays)."""
    line = f"graphkit: warning: {message}"
    if _bars:
        from tqdm import tqdm

        tqdm.write(line, file=sys.stderr)
    else:
        sys.stderr.write(line + "\n")


def note(message: str) -> None:
    """Print ``graphkit: note: …`` to standard error (beside a --json document, which stays alone on stdout)."""
    sys.stderr.write(f"graphkit: note: {message}\n")
    sys.stderr.flush()


def error(message: str, *, hint: str | None) -> None:
    """Print ``graphkit: error: …`` and ``hint: …`` to standard error (an open progress bar is
    erased first, so the error starts its own line)."""
    progress_done()
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


def table(rows: Sequence[Sequence[Any]], header: Sequence[str] | None = None, *, indent: int = 0,
          width: int | None = None, optional: Sequence[str] = ()) -> None:
    """Print a left-aligned text table.

    On a terminal (or given ``width``) the table fits its width: first the ``optional`` columns
    (header names, the first given goes first) are left out while the table could not show every
    cell at a readable width (and a line says which, and that ``--json`` has them); then the widest
    columns are narrowed and long cells shortened in the middle (``/encoder/lay…/MatMul_output_0``);
    ``--json`` keeps the full names.
    """
    cells = [[str(c) for c in row] for row in ([header] if header else []) + list(rows)]
    if not cells:
        return
    limit = width if width is not None else (shutil.get_terminal_size().columns if sys.stdout.isatty() else None)
    dropped: list[str] = []
    if limit is not None and header:
        cells, dropped = _drop_optional(cells, list(optional), limit - indent)
    widths = [max(len(row[i]) for row in cells if i < len(row)) for i in range(max(len(r) for r in cells))]
    if limit is not None:
        widths = _fit(widths, limit - indent)
        cells = [[shorten(c, widths[i]) for i, c in enumerate(row)] for row in cells]
    pad = " " * indent
    for n, row in enumerate(cells):
        text(pad + "  ".join(c.ljust(widths[i]) for i, c in enumerate(row)).rstrip())
        if header and n == 0:
            text(pad + "  ".join("-" * w for w in widths))
    if dropped and limit is not None:
        note = f"({', '.join(dropped)} left out to fit the terminal; --json has every column)"
        for line in textwrap.wrap(note, max(20, limit - indent)):
            text(pad + line)


#: A cell narrower than this is readable without shortening (longer names are cut in the middle).
_READABLE = 24


def _drop_optional(cells: list[list[str]], optional: list[str], limit: int) -> tuple[list[list[str]], list[str]]:
    """``cells`` without the optional columns (in order) it takes to show every cell at a readable width."""
    dropped: list[str] = []

    def needed(rows: list[list[str]]) -> int:
        columns = max(len(r) for r in rows)
        widths = [min(_READABLE, max(len(r[i]) for r in rows if i < len(r))) for i in range(columns)]
        return sum(widths) + 2 * (columns - 1)

    for name in optional:
        if needed(cells) <= limit:
            break
        if name in cells[0]:
            column = cells[0].index(name)
            cells = [row[:column] + row[column + 1:] for row in cells]
            dropped.append(name)
    return cells, dropped


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


#: The narrowest a column is made to fit the terminal.
_MIN_COLUMN = 12


def _fit(widths: list[int], limit: int) -> list[int]:
    """Column widths that fit ``limit`` characters (with two spaces between), narrowing the widest."""
    widths = list(widths)
    while sum(widths) + 2 * (len(widths) - 1) > limit:
        widest = max(range(len(widths)), key=widths.__getitem__)
        if widths[widest] <= _MIN_COLUMN:
            break
        excess = sum(widths) + 2 * (len(widths) - 1) - limit
        second = max((w for i, w in enumerate(widths) if i != widest), default=0)
        widths[widest] = max(_MIN_COLUMN, second, widths[widest] - excess) if second < widths[widest] \
            else max(_MIN_COLUMN, widths[widest] - 1)
    return widths


def shorten(value: str, width: int) -> str:
    """``value`` cut to ``width`` characters in the middle (``/encoder/lay…/MatMul_output_0``)."""
    if len(value) <= width or width < 5:
        return value
    tail = (width - 1) // 2
    return value[: width - 1 - tail] + "…" + value[len(value) - tail:]


def capped(items: Sequence[Any], limit: int, *, show_all: bool = False) -> Sequence[Any]:
    """The first ``limit`` items (all of them with ``show_all``); see ``more``."""
    return items if show_all or len(items) <= limit else items[:limit]


def more(shown: int, total: int, flag: str = "--all", *, indent: int = 0) -> None:
    """Print ``… N more (--all)`` when ``shown`` of ``total`` items were listed."""
    if total > shown:
        text(" " * indent + f"… {total - shown} more ({flag})")


def human_bytes(n: int) -> str:
    """Bytes as B / KiB / MiB / GiB text."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"
