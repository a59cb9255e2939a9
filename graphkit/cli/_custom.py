"""--custom-ops and --python-ops, shared by every verb that runs a model or types one by running it.

Kept apart from ``_feeds`` so that extract and split, which take these flags, load no feed machinery.
"""

from __future__ import annotations

import argparse
from typing import Any

from graphkit._custom_ops import CustomOp, load_python_ops

__all__ = ["add_custom_op_options", "custom_op_reads", "python_ops", "runtime_kwargs"]


def add_custom_op_options(parser: argparse.ArgumentParser) -> None:
    """--custom-ops LIB.so and --python-ops FILE.py (both repeatable)."""
    group = parser.add_argument_group("custom operators")
    group.add_argument("--custom-ops", dest="custom_ops", action="append", default=[], metavar="LIB.so",
                       help="register an ONNX Runtime custom-operator library (repeatable)")
    group.add_argument("--python-ops", dest="python_ops", action="append", default=[], metavar="FILE.py",
                       help="Python implementations of custom operators, declared with @graphkit.custom_op "
                            "(repeatable; needs the custom-ops extra for ONNX Runtime)")


def custom_op_reads(args: argparse.Namespace) -> list[tuple[str, str]]:
    """The files --custom-ops and --python-ops read, for the write plan."""
    return [*((p, "a custom-op library") for p in getattr(args, "custom_ops", [])),
            *((p, "a Python operators file") for p in getattr(args, "python_ops", []))]


def runtime_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The keywords of run, run_chain and compare that the runtime flags give (providers aside)."""
    return {"custom_ops": list(args.custom_ops), "python_ops": python_ops(args)}


def python_ops(args: argparse.Namespace) -> tuple[CustomOp, ...]:
    """The operators of every --python-ops file (loaded once, whatever verb needs them).

    Raises:
        UsageError: A file is missing, fails when run, or declares no operator.
    """
    found: dict[tuple[str, str], CustomOp] = {}
    for path in args.python_ops:
        found.update((op.key, op) for op in load_python_ops(path))
    return tuple(found.values())
