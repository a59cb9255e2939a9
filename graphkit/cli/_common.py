"""Argument helpers shared by the verbs: model paths, outputs, writing."""

from __future__ import annotations

import argparse
from pathlib import Path

from graphkit import io
from graphkit.errors import NoChangeError
from graphkit.model import Model
from graphkit.validate import check_or_raise

__all__ = ["add_noop_option", "add_output_options", "load", "refuse_noop", "write_model"]


def load(path: str) -> Model:
    """Load a model named on the command line."""
    return io.load(path)


def add_output_options(parser: argparse.ArgumentParser) -> None:
    """--overwrite, --external-data/--inline-data, --no-check."""
    parser.add_argument(
        "--overwrite", action="store_true", help="allow the output to replace an input file (still atomic)"
    )
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--external-data", dest="external", action="store_true", default=None,
                       help="write weights to a .data file beside the output")
    group.add_argument("--inline-data", dest="external", action="store_false",
                       help="write weights inside the .onnx file (under 2 GiB)")
    parser.add_argument("--no-check", dest="check", action="store_false",
                        help="write even if the result fails validation (not recommended)")


def write_model(model: Model, output: str, args: argparse.Namespace, *inputs: str | None,
                validated: bool = False) -> Model:
    """Validate (unless --no-check or ``validated``) and write atomically; refuse to replace an input unless --overwrite."""
    io.check_output_path(output, *inputs, overwrite=getattr(args, "overwrite", False))
    if getattr(args, "check", True) and not validated:
        check_or_raise(model, what=f"the model for {output}")
    return io.save(model, Path(output), external=getattr(args, "external", None))


def add_noop_option(parser: argparse.ArgumentParser) -> None:
    """--allow-noop: accept an operation that changes nothing (otherwise exit 2)."""
    parser.add_argument("--allow-noop", action="store_true",
                        help="write the result even if it is the unchanged input")


def refuse_noop(args: argparse.Namespace, message: str, hint: str) -> None:
    """Raise NoChangeError (exit 2) for an operation that changes nothing, unless --allow-noop."""
    if not getattr(args, "allow_noop", False):
        raise NoChangeError(message, hint=f"{hint}, or pass --allow-noop to write it anyway")
