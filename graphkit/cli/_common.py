"""Argument helpers shared by the verbs: model paths, outputs, the write plan, writing."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable

from graphkit import _io as io
from graphkit._model import Model
from graphkit._validate import check_or_raise
from graphkit.errors import NoChangeError, UsageError

__all__ = ["add_noop_option", "add_output_options", "load", "plan", "refuse_noop", "write_model"]


def load(path: str) -> Model:
    """Load a model named on the command line."""
    if not path:  # (io.load's own check names its keyword, path=, which is no word of the command line)
        raise UsageError("the model's path is empty ('')", hint="give the .onnx file's path")
    return io.load(path)


def add_output_options(parser: argparse.ArgumentParser) -> None:
    """--overwrite, --external-data/--inline-data, --no-check."""
    parser.add_argument(
        "--overwrite", action="store_true",
        help="allow the output model to replace an input model (still atomic; never another input file)",
    )
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--external-data", dest="external", action="store_true", default=None,
                       help="write weights to a .data file beside the output")
    group.add_argument("--inline-data", dest="external", action="store_false",
                       help="write weights inside the .onnx file (under 2 GiB)")
    parser.add_argument("--no-check", dest="check", action="store_false",
                        help="write even if the result fails validation (not recommended)")


def plan(args: argparse.Namespace, *models: Model | None, output: str | None = None,
         reads: Iterable[tuple[str | os.PathLike[str] | None, str]] = ()) -> io.WritePlan:
    """The verb's write plan: it reads ``models`` (with their weights files) and ``reads``
    (path, what) and writes the model ``output``; more outputs may be added before ``check()``.

    The output model may get a data file when --external-data is given or, by default, when an
    input model has external weights.
    """
    result = io.WritePlan(overwrite=getattr(args, "overwrite", False))
    for model in models:
        if model is not None:
            result.read_model(model)
    for path, what in reads:
        result.read(path, what)
    if output is not None:
        external = getattr(args, "external", None)
        may_be_external = external if external is not None else any(
            m is not None and m.has_external_data for m in models)
        result.write_model(output, external=may_be_external)
    return result


def write_model(model: Model, output: str, args: argparse.Namespace, plan: io.WritePlan, *,
                validated: bool = False) -> Model:
    """Validate (unless --no-check or ``validated``) and write atomically, within the verb's ``plan``."""
    if getattr(args, "check", True) and not validated:
        check_or_raise(model, what=f"the model for {output}")
    return plan.save(model, output, external=getattr(args, "external", None))


def add_noop_option(parser: argparse.ArgumentParser) -> None:
    """--allow-noop: accept an operation that changes nothing (otherwise exit 2)."""
    parser.add_argument("--allow-noop", action="store_true",
                        help="write the result even if it is the unchanged input")


def refuse_noop(args: argparse.Namespace, message: str, hint: str) -> None:
    """Raise NoChangeError (exit 2) for an operation that changes nothing, unless --allow-noop."""
    if not getattr(args, "allow_noop", False):
        raise NoChangeError(message, hint=f"{hint}, or pass --allow-noop to write it anyway")
