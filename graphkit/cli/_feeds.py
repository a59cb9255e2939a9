"""Flags shared by the verbs that run models: --input, --shape, --dim, --range, --seed, runtime options,
and --atol/--rtol turned into a Tolerance."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from graphkit._feeds import load_feeds, parse_named, parse_range, parse_shape, resolve_feeds
from graphkit._numbers import MAX_THREADS_PER_CORE, max_threads, parse_int
from graphkit._options import FeedOptions, Tolerance
from graphkit.cli import _render
from graphkit.cli._args import whole
from graphkit.cli._custom import add_custom_op_options
from graphkit.errors import TensorNotFoundError, UsageError, did_you_mean, not_found

__all__ = ["FeedArgs", "add_feed_options", "add_runtime_options", "feed_args", "inputs_hint", "ms", "provider_options", "show_notes",
           "tolerance"]


def add_feed_options(parser: argparse.ArgumentParser) -> None:
    """--input, --shape, --dim, --range, --seed."""
    group = parser.add_argument_group("inputs (inputs not given are generated from the signature, seeded)")
    group.add_argument("--input", action="append", default=[], metavar="[NAME=]FILE",
                       help="an input's value from .npy, .npz or TensorProto .pb; an .npz without NAME feeds "
                            "every array by its key (repeatable)")
    group.add_argument("--shape", action="append", default=[], metavar="[NAME=]DIMS",
                       help="shape of a generated input, e.g. input=1x3x20x20 (NAME optional for one input)")
    group.add_argument("--dim", action="append", default=[], metavar="DIM=N",
                       help="value of a named dynamic dim for every generated input, e.g. batch=4")
    group.add_argument("--range", action="append", default=[], metavar="[NAME=]LO,HI",
                       help="value range of a generated input, e.g. input=0,255 (inclusive for integers)")
    group.add_argument("--value", action="append", default=[], metavar="NAME=JSON",
                       help="pin an input: a number fills its generated shape (--value n=3), a JSON list is "
                            "its value (--value ids=[[1,2,3]]) (repeatable)")
    group.add_argument("--seed", type=whole(), default=0, help="seed of generated inputs (default 0)")


def add_runtime_options(parser: argparse.ArgumentParser, *, opt_level: bool = True) -> None:
    """--provider, --provider-option, --opt-level, --threads, --custom-ops, --python-ops."""
    group = parser.add_argument_group("ONNX Runtime")
    group.add_argument("--provider", default="cpu",
                       help="execution provider: cpu (default), cuda, tensorrt, openvino, directml, or a full name")
    group.add_argument("--provider-option", dest="provider_options", action="append", default=[], metavar="K=V",
                       help="an option of the provider, e.g. device_id=1 (repeatable)")
    if opt_level:
        group.add_argument("--opt-level", default="all", choices=["disable", "basic", "extended", "all"],
                           help="graph optimization level (default all; disable for bit-exact comparisons)")
        group.add_argument("--threads", type=whole(hi=max_threads), default=0,
                           help=f"intra-op threads, at most {MAX_THREADS_PER_CORE} per core (default: ONNX Runtime's)")
    add_custom_op_options(parser)


def provider_options(items: Sequence[str], flag: str = "--provider-option") -> dict[str, str]:
    """``K=V`` texts as a dict.

    Raises:
        UsageError: An item without ``=`` or with an empty key.
    """
    options: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"{flag} {item!r}: expected KEY=VALUE", hint=f"e.g. {flag} device_id=0")
        options[key] = value
    return options


@dataclass(frozen=True)
class FeedArgs:
    """The parsed feed flags."""

    feeds: dict[str, np.ndarray]
    shapes: dict[str, tuple[int, ...]]
    ranges: dict[str, tuple[float, float]]
    dims: dict[str, int]
    files: tuple[str, ...]
    seed: int = 0
    notes: tuple[str, ...] = ()

    def options(self) -> FeedOptions:
        """The generation flags as the API's FeedOptions.

        Raises:
            UsageError: A value out of range, naming the flag.
        """
        try:
            return FeedOptions(seed=self.seed, shapes=self.shapes, dims=self.dims, ranges=self.ranges)
        except UsageError as err:
            raise UsageError(f"--seed/--shape/--dim/--range: {err.message}",
                             hint="e.g. --seed 1 --shape in=1x3x224x224 --dim batch=4 --range in=0,1") from err


def feed_args(args: argparse.Namespace, input_names: Sequence[str], where: str,
              dtypes: Mapping[str, np.dtype] | None = None, *,
              shapes_of: Iterable[Sequence[object] | None] | None = None) -> FeedArgs:
    """Read the feed files and parse the flags against the inputs' names (``dtypes``: the inputs'
    dtypes, which ``--value`` lists are converted to; ``shapes_of``: the inputs' shapes, whose named
    dims are the names ``--dim`` may set).

    Raises:
        FeedError: A feed file is unreadable or cannot be matched to an input.
        UsageError: A flag is malformed, or leaves out NAME where the model has several inputs.
    """
    files = load_feeds(args.input)
    notes: list[str] = []
    feeds = resolve_feeds(files, list(input_names), where=where, notes=notes)
    shapes = {_name(n, "--shape", input_names): s for n, s in (parse_shape(t) for t in args.shape)}
    ranges = {_name(n, "--range", input_names): r for n, r in (parse_range(t) for t in args.range)}
    for text in getattr(args, "value", []):
        pinned, value = _parse_value(text, input_names)
        if pinned in feeds:
            raise UsageError(f"--value {text!r}: input {pinned!r} is also given with --input", hint="give it once")
        if isinstance(value, (bool, int, float)):
            ranges[pinned] = (float(value), float(value))
        else:
            feeds[pinned] = _value_array(text, value, (dtypes or {}).get(pinned))
    dims: dict[str, int] = {}
    for text in args.dim:
        name, value = parse_named(text, "--dim")
        if name is None:
            raise UsageError(f"--dim {text!r}: expected DIM=N", hint="e.g. --dim batch=4")
        dims[name] = parse_int(value, what=f"--dim {text!r}", hint="e.g. --dim batch=4")
    if shapes_of is not None:
        _check_dim_names(dims, shapes_of, where)
    paths = tuple(sorted({f.path for f in files}))
    return FeedArgs(feeds, shapes, ranges, dims, paths, args.seed, tuple(notes))


def inputs_hint(given: str | None, *more: str) -> str:
    """The hint of a check whose run of the input model failed on the inputs it made: ONNX Runtime's
    own when it names an input flag already (an index out of range: --range), else the flags that give
    inputs; ``more`` adds other ways out."""
    hint = given if given and any(f in given for f in ("--input", "--value", "--range", "--shape", "--dim")) else \
        "the generated inputs may not suit the model: give its inputs (--input NAME=FILE, --value NAME=JSON, " \
        "--shape, --dim, --range)"
    return "; ".join((hint, *more))


def show_notes(parsed: FeedArgs) -> None:
    """Tell what the feed files held that no input took (the keys of an .npz that ``run --save`` wrote for
    the whole model, fed to a sub-model), before the verb runs."""
    for line in parsed.notes:
        _render.note(line)


def _check_dim_names(dims: Mapping[str, int], shapes_of: Iterable[Sequence[object] | None], where: str) -> None:
    """A --dim that names no dim of the inputs would be ignored, and the dim it was meant for would
    silently take the default size: refuse it, with the names there are."""
    named = sorted({d for shape in shapes_of for d in (shape or ()) if isinstance(d, str) and d})
    for name in dims:
        if name in named:
            continue
        if not named:
            raise UsageError(f"--dim {name}={dims[name]}: no graph input of {where} has a named dynamic dim",
                             hint="its inputs' dims are fixed or unnamed: give their shapes with --shape NAME=DIMS")
        raise UsageError(f"--dim {name}={dims[name]}: no graph input of {where} has a dim named {name!r}",
                         hint=did_you_mean(name, named) or f"its inputs' named dims: {', '.join(named)}")


def _parse_value(text: str, input_names: Sequence[str]) -> tuple[str, Any]:
    """``NAME=JSON`` → (name, the decoded JSON), splitting at the ``=`` after a known input name."""
    hint = "write --value NAME=3 or --value NAME=[[1,2,3]] (JSON)"
    splits = [k for k, char in enumerate(text) if char == "="]
    for k in splits:
        if text[:k] in input_names:
            try:
                return text[:k], json.loads(text[k + 1:])
            except (ValueError, RecursionError) as err:
                raise UsageError(f"--value {text!r}: {text[k + 1:]!r} is not JSON ({err})", hint=hint) from err
    name = text[:splits[0]] if splits else text
    if not splits:
        raise UsageError(f"--value {text!r}: expected NAME=JSON", hint=hint)
    missing = not_found(TensorNotFoundError, "graph input", name, input_names)
    raise UsageError(f"--value {text!r}: {missing.message}", hint=missing.cli_hint or missing.hint or hint)


def _value_array(text: str, value: Any, dtype: np.dtype | None) -> np.ndarray:
    if not isinstance(value, (str, list)):
        raise UsageError(f"--value {text!r}: expected a number or a JSON list", hint="e.g. --value ids=[[1,2,3]]")
    try:
        array = np.array(value, dtype=object if dtype is not None and dtype.kind in "OUS" else dtype)
        if dtype is None and array.dtype.kind == "f":
            array = array.astype(np.float32)
    except (TypeError, ValueError, OverflowError) as err:
        raise UsageError(f"--value {text!r}: not an array of {dtype or 'numbers'}: {err}",
                         hint="give a nested JSON list of numbers, one level per dim") from err
    if array.dtype == object and (dtype is None or dtype.kind not in "OUS"):
        raise UsageError(f"--value {text!r}: the rows of the JSON list have different lengths",
                         hint="give a nested JSON list of numbers, one level per dim")
    return array


def _name(name: str | None, flag: str, input_names: Sequence[str]) -> str:
    if name is not None:
        return name
    if len(input_names) == 1:
        return input_names[0]
    raise UsageError(f"{flag} without NAME= is ambiguous: the model has {len(input_names)} inputs "
                     f"({', '.join(repr(n) for n in input_names)})", hint=f"write {flag} NAME=VALUE")


def ms(seconds: float | None) -> str:
    """Seconds as milliseconds text."""
    return "-" if seconds is None else f"{seconds * 1000:.1f} ms"




def tolerance(atol: float, rtol: float) -> Tolerance:
    """--atol and --rtol as a Tolerance.

    Raises:
        UsageError: A tolerance that is negative or not finite, naming the flags.
    """
    try:
        return Tolerance(atol, rtol)
    except UsageError as err:
        raise UsageError(f"tolerances must be >= 0 (--atol {atol:g}, --rtol {rtol:g})",
                         hint="e.g. --atol 1e-6") from err
