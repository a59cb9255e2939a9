"""Feeds and run on ONNX Runtime sessions (``graphkit._ort`` owns the onnxruntime import).

Models with external weights run from where their weights lie: the session reads the ModelProto from
memory and the weights from the model's folder (``session.model_external_initializers_file_folder_path``),
so no weight is copied into memory twice.

Generated feeds are seeded per input (the seed and the input's name), so an input's value does not
change when another input is given from a file or when the inputs are listed in another order.
"""

from __future__ import annotations

import logging
import os
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from graphkit import _check_args as argcheck
from graphkit import _ort
from graphkit._custom_ops import CustomOp, check_python_ops
from graphkit._graph import GraphIndex
from graphkit._model import Model
from graphkit._numbers import max_threads
from graphkit._options import FeedOptions, OptLevel, Provider
from graphkit._summary import TensorSig
from graphkit._validate import require_sound
from graphkit.errors import (
    ArgumentTypeError,
    FeedError,
    TensorNotFoundError,
    not_found,
)

if TYPE_CHECKING:
    pass

__all__ = [
    "OPT_LEVELS",
    "FeedNote",
    "FeedSpec",
    "RunResult",
    "TensorStats",
    "check_feed",
    "input_specs",
    "make_feeds",
    "plan_feeds",
    "run",
    "run_detailed",
    "session",
    "as_value",
    "tensor_stats",
    "value_nbytes",
]

log = logging.getLogger(__name__)

OPT_LEVELS = _ort.OPT_LEVELS
PROVIDERS = _ort.PROVIDERS


#: An ONNX Runtime session for a model (``graphkit._ort`` is the one place that imports onnxruntime).
session = _ort.session
_run_session = _ort.run_session


# ------------------------------------------------------------------------------------------ feeds


@dataclass(frozen=True)
class FeedSpec:
    """What a graph input expects: name, numpy dtype, and shape (ints, names or None)."""

    name: str
    dtype: np.dtype
    shape: list[int | str | None] | None

    @classmethod
    def of(cls, value: onnx.ValueInfoProto) -> FeedSpec:
        """From a graph input's ValueInfoProto (an untyped input is taken as float32)."""
        sig = TensorSig.of(value)
        elem = value.type.tensor_type.elem_type
        try:
            dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem)) if elem else np.dtype("float32")
        except (KeyError, ValueError, TypeError) as err:
            raise FeedError(
                f"input {value.name!r} has element type {elem}, which numpy cannot hold",
                hint="the model declares an unknown or unsupported dtype; fix the input's type",
            ) from err
        return cls(sig.name, dtype, sig.shape)

    def shape_text(self) -> str:
        """``[1, 3, 'batch', ?]`` style."""
        if self.shape is None:
            return "[unranked]"
        return "[" + ", ".join("?" if d is None else str(d) for d in self.shape) + "]"


def input_specs(model: Model) -> list[FeedSpec]:
    """The model's real inputs (initializers excluded), with numpy dtypes."""
    initializers = {t.name for t in model.lazy_proto.graph.initializer}
    return [FeedSpec.of(v) for v in model.lazy_proto.graph.input if v.name not in initializers]


@dataclass(frozen=True)
class FeedNote:
    """How one input's value was obtained.

    Attributes:
        name: The input.
        dtype: Its numpy dtype name.
        shape: The value's shape.
        source: "given" or "generated".
        low: Lower bound of generated values (None when given).
        high: Upper bound of generated values (None when given).
        chosen_dims: For generated inputs, the value chosen for each dynamic dim, by axis label
            (the dim's name, or ``dim <axis>`` when unnamed), with how it was chosen.
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    source: str
    low: float | None = None
    high: float | None = None
    chosen_dims: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "name": self.name,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "source": self.source,
            "range": None if self.low is None else [self.low, self.high],
            "chosen_dims": dict(self.chosen_dims),
        }


def make_feeds(
    model: Model,
    feeds: Mapping[str, Any] | None = None,
    *,
    feed_options: FeedOptions = FeedOptions(),
) -> dict[str, np.ndarray]:
    """Complete ``feeds`` with seeded random values for every input not given, and check them all.

    Args:
        model: The model whose inputs to feed.
        feeds: Given values by input name.
        feed_options: How the inputs not given are generated (seed, shapes, dims, ranges).

    Raises:
        FeedError: A feed names no input, or its dtype, rank or a fixed dim is wrong.
        UsageError: An argument of the wrong type.
    """
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    check_run_args(feeds, feed_options)
    values, _ = plan_feeds(input_specs(model), feeds, feed_options=feed_options, where=model.name,
                           bounds=index_bounds(model))
    return values


def check_run_args(feeds: Any, feed_options: Any, *, outputs: Any = None, provider: Any = "cpu",
                   opt_level: Any = "all", threads: Any = 0, provider_options: Any = None, custom_ops: Any = (),
                   python_ops: Any = ()) -> _ort.Settings:
    """The prologue of every public function that runs a model: each argument of the right type.

    Returns:
        The session settings the arguments describe.
    """
    argcheck.optional(argcheck.mapping, feeds, "feeds", key=lambda k, kw: argcheck.name(k, kw, what="input name"))
    argcheck.instance(feed_options, "feed_options", FeedOptions, "a graphkit.FeedOptions")
    argcheck.optional(argcheck.names, outputs, "outputs", what="tensor name")
    return settings(provider=provider, opt_level=opt_level, threads=threads, provider_options=provider_options,
                    custom_ops=custom_ops, python_ops=python_ops)


def settings(*, provider: Any = "cpu", opt_level: Any = "all", threads: Any = 0, provider_options: Any = None,
             custom_ops: Any = (), python_ops: Any = (), prefix: str = "") -> _ort.Settings:
    """Checked session settings (``prefix`` names compare's per-side keywords: ``reference_provider``).

    Raises:
        ArgumentTypeError, UsageError: An argument of the wrong type or value, naming its keyword; a
            provider this ONNX Runtime does not have (the message lists the ones it has).
    """
    argcheck.name(provider, f"{prefix}provider", what="provider")
    argcheck.choice(opt_level, "opt_level", OPT_LEVELS)
    argcheck.integer(threads, "threads", minimum=0, maximum=max_threads())
    options = argcheck.optional(argcheck.mapping, provider_options, f"{prefix}provider_options",
                                key=_option_text, item=_option_value) or {}
    if isinstance(custom_ops, (str, os.PathLike)):
        raise ArgumentTypeError(f"custom_ops= must be a list of library paths, not {argcheck.describe(custom_ops)}",
                                hint=f"wrap one library in a list: custom_ops=[{os.fspath(custom_ops)!r}]")
    libraries = tuple(os.fspath(argcheck.path(p, f"custom_ops[{k}]"))
                      for k, p in enumerate(argcheck.optional(argcheck.names_or_paths, custom_ops, "custom_ops") or []))
    return _ort.Settings(provider, opt_level, threads, options, libraries, check_python_ops(python_ops))


def _option_text(value: Any, keyword: str) -> str:
    return argcheck.name(value, keyword, what="provider option")


def _option_value(value: Any, keyword: str) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return argcheck.name(value, keyword, what="provider option value", empty=True)


def plan_feeds(
    specs: Sequence[FeedSpec],
    feeds: Mapping[str, Any] | None = None,
    *,
    feed_options: FeedOptions = FeedOptions(),
    where: str = "the model",
    bounds: Mapping[str, int] | None = None,
) -> tuple[dict[str, np.ndarray], list[FeedNote]]:
    """Check the given feeds and generate the others, saying what was chosen for each input.

    A named dynamic dim takes its value from ``dims``, else from a given feed or shape that has the
    same dim name, else ``default_dim``; an unnamed one from ``default_dim``. Integer ranges are
    inclusive; an integer input without a range of its own stays below its entry in ``bounds``
    (``index_bounds``: the size of what it indexes).

    Returns:
        The values by input name, and one FeedNote per input (in ``specs`` order).

    Raises:
        FeedError: A feed, shape or range names no input, or a value's dtype, rank or fixed dim is wrong.
    """
    by_name = {s.name: s for s in specs}
    given = dict(feeds or {})
    seed, shapes, ranges = feed_options.seed, feed_options.shapes, feed_options.ranges
    dims, default_dim = feed_options.dims, feed_options.default_dim
    for name in [*given, *shapes, *ranges]:
        if name not in by_name:
            err = not_found(TensorNotFoundError, "graph input", name, by_name, where=where)
            raise FeedError(err.message, hint=err.hint, cli_hint=err.cli_hint)
    checked = {name: check_feed(by_name[name], _as_array(name, value, where), where) for name, value in given.items()}
    for name, shape in shapes.items():
        _check_shape(by_name[name], tuple(int(d) for d in shape), where)
    named = _named_dims(specs, checked, shapes, dims or {})
    values: dict[str, np.ndarray] = {}
    notes: list[FeedNote] = []
    for spec in specs:
        if spec.name in checked:
            value = checked[spec.name]
            values[spec.name] = value
            notes.append(FeedNote(spec.name, str(value.dtype), tuple(value.shape), "given"))
            continue
        shape, chosen = _choose_shape(spec, shapes.get(spec.name), named, dims or {}, default_dim, where)
        lo, hi = ranges.get(spec.name, _default_range(spec.dtype))
        bound = (bounds or {}).get(spec.name)
        if spec.name not in ranges and bound is not None and spec.dtype.kind in "iu" and bound - 1 < hi:
            hi = max(float(bound - 1), lo)
        values[spec.name] = _random(_rng_for(seed, spec.name), spec, shape, lo, hi)
        notes.append(FeedNote(spec.name, str(spec.dtype), shape, "generated", float(lo), float(hi), chosen))
        if chosen:
            log.info("input %r: dynamic dims set to %s", spec.name, chosen)
    return values, notes


#: Operators that pass integer values through unchanged (an index keeps its meaning through them).
_PASS_THROUGH = frozenset({"Cast", "Identity", "Unsqueeze", "Squeeze", "Reshape", "Flatten", "Expand", "Tile",
                           "Transpose", "Slice", "Gather"})
#: Operators whose input 1 indexes input 0 along ``axis``.
_INDEXING = frozenset({"Gather", "GatherElements"})


def index_bounds(model: Model) -> dict[str, int]:
    """Integer graph input → the size of the smallest axis it indexes (through Gather or
    GatherElements, possibly after Cast, Unsqueeze, Reshape and the like), where that size is known.

    Token ids feeding an embedding table of 30522 rows get 30522, so generated ids stay valid.
    """
    graph = model.lazy_proto.graph
    index = GraphIndex(graph)
    sizes = _known_shapes(model)
    bounds: dict[str, int] = {}
    for spec in input_specs(model):
        if spec.dtype.kind not in "iu":
            continue
        seen, stack, found = {spec.name}, [spec.name], []
        while stack:
            tensor = stack.pop()
            for i in index.consumers.get(tensor, []):
                node = graph.node[i]
                if node.op_type in _INDEXING and len(node.input) > 1 and node.input[1] == tensor:
                    size = _axis_size(node, sizes)
                    if size is not None:
                        found.append(size)
                elif node.op_type in _PASS_THROUGH and node.input and node.input[0] == tensor:
                    for out in node.output:
                        if out and out not in seen:
                            seen.add(out)
                            stack.append(out)
        if found:
            bounds[spec.name] = min(found)
    return bounds


def _known_shapes(model: Model) -> dict[str, list[int | str | None]]:
    graph = model.lazy_proto.graph
    shapes: dict[str, list[int | str | None]] = {t.name: list(t.dims) for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.output:
            value = next((a.t for a in node.attribute if a.name == "value" and a.HasField("t")), None)
            if value is not None:
                shapes[node.output[0]] = list(value.dims)
    for value in [*graph.input, *graph.value_info]:
        shape = TensorSig.of(value).shape
        if shape is not None and value.name not in shapes:
            shapes[value.name] = shape
    return shapes


def _axis_size(node: onnx.NodeProto, shapes: Mapping[str, list[int | str | None]]) -> int | None:
    shape = shapes.get(node.input[0])
    if not shape:
        return None
    axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
    if not -len(shape) <= axis < len(shape):
        return None
    size = shape[axis]
    return size if isinstance(size, int) and size > 0 else None


def _as_array(name: str, value: Any, where: str) -> np.ndarray:
    try:
        return np.asarray(value)
    except (ValueError, TypeError) as err:
        raise FeedError(f"the value given for input {name!r} of {where} is not an array: {err}",
                        hint="give a numpy array") from err


def _named_dims(
    specs: Sequence[FeedSpec], given: Mapping[str, np.ndarray], shapes: Mapping[str, Sequence[int]],
    dims: Mapping[str, int],
) -> dict[str, tuple[int, str]]:
    """Dim name → (value, how it was chosen), from --dim, then given values and --shape values."""
    found: dict[str, tuple[int, str]] = {name: (int(v), "--dim") for name, v in dims.items()}
    for spec in specs:
        known = given[spec.name].shape if spec.name in given else shapes.get(spec.name)
        if known is None or spec.shape is None or len(known) != len(spec.shape):
            continue
        for want, got in zip(spec.shape, known):
            if isinstance(want, str) and want not in found:
                found[want] = (int(got), f"from {spec.name!r}")
    return found


def _rng_for(seed: int, name: str) -> np.random.Generator:
    return np.random.default_rng([int(seed) & 0xFFFFFFFF, zlib.crc32(name.encode())])


def _default_range(dtype: np.dtype) -> tuple[float, float]:
    if dtype.kind == "f":
        return (-1.0, 1.0)
    if dtype.kind == "b":
        return (0, 1)
    return (0, 9)


def _random(rng: np.random.Generator, spec: FeedSpec, shape: tuple[int, ...], lo: float, hi: float) -> np.ndarray:
    # (numpy's generators return a scalar, not an array, for shape (): ONNX Runtime refuses a scalar)
    return np.asarray(_random_values(rng, spec, shape, lo, hi))


def _random_values(rng: np.random.Generator, spec: FeedSpec, shape: tuple[int, ...], lo: float, hi: float) -> Any:
    dtype = spec.dtype
    if dtype.kind == "f":
        values = rng.random(size=shape, dtype=np.float32) if dtype.itemsize <= 4 else rng.random(size=shape)
        return (values * (hi - lo) + lo).astype(dtype, copy=False)
    if dtype.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype.kind in "iu":
        low, high = int(np.ceil(lo)), int(np.floor(hi))
        if high < low:
            raise FeedError(f"the range {lo:g}..{hi:g} of input {spec.name!r} holds no {dtype} value",
                            hint=f"give a range with a whole number in it, e.g. FeedOptions(ranges={{{spec.name!r}: (0, 1)}})",
                            cli_hint=f"give a range with a whole number in it, e.g. --range {spec.name}=0,1")
        return rng.integers(low, high, size=shape, endpoint=True).astype(dtype)
    if dtype.kind in "OU":
        return np.array([f"s{i}" for i in range(int(np.prod(shape)))], dtype=object).reshape(shape)
    raise FeedError(f"cannot generate values of dtype {dtype} for input {spec.name!r}",
                    hint=f"pass this input's value in feeds={{{spec.name!r}: …}}",
                    cli_hint=f"pass this input's value with --input {spec.name}=FILE")


def _choose_shape(
    spec: FeedSpec, given: Sequence[int] | None, named: Mapping[str, tuple[int, str]], dims: Mapping[str, int],
    default_dim: int, where: str,
) -> tuple[tuple[int, ...], dict[str, str]]:
    if given is not None:
        shape = tuple(int(d) for d in given)
        _check_shape(spec, shape, where)
        _check_size(spec, shape, where)
        from_flag = {
            _dim_label(want, axis): f"{shape[axis]} (--shape)"
            for axis, want in enumerate(spec.shape or [])
            if not isinstance(want, int) or want < 0
        }
        return shape, from_flag
    if spec.shape is None:
        raise FeedError(
            f"input {spec.name!r} of {where} has no known rank, so its shape cannot be guessed",
            hint=f"give its shape, e.g. FeedOptions(shapes={{{spec.name!r}: [1, 3, 224, 224]}}), or its value in feeds=",
            cli_hint=f"give its shape, e.g. --shape {spec.name}=1x3x224x224, or its value with --input",
        )
    shape_list: list[int] = []
    chosen: dict[str, str] = {}
    for axis, want in enumerate(spec.shape):
        if isinstance(want, int) and want >= 0:
            shape_list.append(want)
        elif isinstance(want, str) and want in named:
            value, how = named[want]
            shape_list.append(value)
            chosen[want] = f"{value} ({how})"
        else:
            shape_list.append(default_dim)
            chosen[_dim_label(want, axis)] = f"{default_dim} (default; set it with --shape or --dim)"
    _check_size(spec, tuple(shape_list), where)
    return tuple(shape_list), chosen


#: Generated inputs larger than this are refused (the shape is almost surely wrong).
MAX_GENERATED_BYTES = 8 * 2**30


def _check_size(spec: FeedSpec, shape: tuple[int, ...], where: str) -> None:
    count = 1
    for d in shape:
        count *= d
    size = count * spec.dtype.itemsize
    if any(d < 0 for d in shape) or size > MAX_GENERATED_BYTES:
        raise FeedError(
            f"input {spec.name!r} of {where} has shape {list(shape)}: a generated value would need "
            f"{size / 2**30:.3g} GiB",
            hint=f"the declared shape is wrong or too large; give a smaller one (FeedOptions shapes={{{spec.name!r}: …}})",
            cli_hint=f"the declared shape is wrong or too large; give a smaller one with --shape {spec.name}=…",
        )


def _dim_label(want: int | str | None, axis: int) -> str:
    return want if isinstance(want, str) else f"dim {axis}"


def check_feed(spec: FeedSpec, value: np.ndarray, where: str = "the model") -> np.ndarray:
    """Check a given value's dtype and shape against what the input expects.

    Raises:
        FeedError: naming the input and the expected and given dtype/shape.
    """
    if value.dtype != spec.dtype and not (spec.dtype.kind in "OU" and value.dtype.kind in "OU"):
        raise FeedError(
            f"input {spec.name!r} of {where} expects {spec.dtype} {spec.shape_text()}, "
            f"got {value.dtype} {list(value.shape)}",
            hint=f"convert the value to {spec.dtype} (e.g. numpy's .astype('{spec.dtype}'))",
        )
    _check_shape(spec, tuple(value.shape), where)
    return value


def _check_shape(spec: FeedSpec, shape: tuple[int, ...], where: str) -> None:
    if spec.shape is None:
        return
    expected = spec.shape_text()
    if len(shape) != len(spec.shape):
        raise FeedError(
            f"input {spec.name!r} of {where} expects {spec.dtype} of rank {len(spec.shape)} {expected}, "
            f"got shape {list(shape)} (rank {len(shape)})",
            hint="give a value of the expected rank",
        )
    for axis, (want, got) in enumerate(zip(spec.shape, shape)):
        if isinstance(want, int) and want >= 0 and want != got:
            raise FeedError(
                f"input {spec.name!r} of {where} expects {spec.dtype} {expected}, got {list(shape)}: "
                f"dim {axis} is fixed to {want}",
                hint=f"only dims shown as names or ? are dynamic; make dim {axis} dynamic first if needed "
                     f"(set_dims(model, tensor={spec.name!r}, dims={{{axis}: 'N'}}))",
                cli_hint=f"only dims shown as names or ? are dynamic; make dim {axis} dynamic first if needed "
                         f"(python -m graphkit edit MODEL OUT --dynamic {spec.name}:{axis}=N)",
            )


# ------------------------------------------------------------------------------------------- run


@dataclass(frozen=True)
class TensorStats:
    """A few numbers about one tensor: what ``run`` prints for each output."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    min: float | None = None
    max: float | None = None
    mean: float | None = None
    std: float | None = None
    nan: int = 0
    inf: int = 0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (NaN statistics become null)."""
        def clean(v: float | None) -> float | None:
            return None if v is None or not np.isfinite(v) else v

        return {
            "name": self.name, "dtype": self.dtype, "shape": list(self.shape), "bytes": self.nbytes,
            "min": clean(self.min), "max": clean(self.max), "mean": clean(self.mean), "std": clean(self.std),
            "nan": self.nan, "inf": self.inf,
        }


def tensor_stats(name: str, value: np.ndarray) -> TensorStats:
    """Statistics of a numeric array over its finite values (strings get none)."""
    value = np.asarray(value)
    base = {"name": name, "dtype": str(value.dtype), "shape": tuple(value.shape), "nbytes": int(value.nbytes)}
    if value.dtype.kind not in "biuf" or value.size == 0:
        return TensorStats(**base)  # type: ignore[arg-type]
    data = value.astype(np.float64) if value.dtype.kind != "f" else value.astype(np.float64, copy=False)
    finite = np.isfinite(data)
    nan = int(np.isnan(data).sum())
    inf = int(data.size - finite.sum() - nan)
    values = data[finite] if not finite.all() else data
    if values.size == 0:
        return TensorStats(**base, nan=nan, inf=inf)  # type: ignore[arg-type]
    return TensorStats(
        **base,  # type: ignore[arg-type]
        min=float(values.min()), max=float(values.max()), mean=float(values.mean()), std=float(values.std()),
        nan=nan, inf=inf,
    )


@dataclass(frozen=True)
class RunResult:
    """The outputs of one run, with how its inputs were made and how long it took.

    Attributes:
        model: The model's file or name.
        outputs: Output name → value.
        feeds: How each input was obtained.
        load_seconds: Session creation time.
        run_seconds: Inference time.
        provider: The provider used.
        opt_level: The graph optimization level used.
        inputs: The values fed (given or generated), by input name.
    """

    model: str
    outputs: dict[str, np.ndarray]
    feeds: tuple[FeedNote, ...]
    load_seconds: float
    run_seconds: float
    provider: str
    opt_level: str
    inputs: dict[str, np.ndarray] = field(default_factory=dict)

    def stats(self) -> list[TensorStats]:
        """Statistics of every output, in order."""
        return [tensor_stats(n, v) for n, v in self.outputs.items()]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (statistics, not values)."""
        return {
            "model": self.model,
            "provider": self.provider,
            "opt_level": self.opt_level,
            "load_seconds": self.load_seconds,
            "run_seconds": self.run_seconds,
            "feeds": [n.to_dict() for n in self.feeds],
            "outputs": [s.to_dict() for s in self.stats()],
        }


def run(
    model: Model,
    feeds: Mapping[str, Any] | None = None,
    *,
    outputs: Sequence[str] | None = None,
    feed_options: FeedOptions = FeedOptions(),
    provider: Provider = "cpu",
    opt_level: OptLevel = "all",
    threads: int = 0,
    provider_options: Mapping[str, str] | None = None,
    custom_ops: Sequence[str | os.PathLike[str]] = (),
    python_ops: Sequence[CustomOp | str | os.PathLike[str]] = (),
) -> dict[str, np.ndarray]:
    """Run a model through ONNX Runtime and return its outputs by name.

    Inputs not in ``feeds`` are generated from the signature (seeded).

    Args:
        model: The model to run.
        feeds: Input values by name.
        outputs: Which tensors to return (default: the graph outputs). Names of intermediate tensors
            of the main graph are exposed as extra outputs for this run.
        feed_options: How the inputs not in ``feeds`` are generated (seed, shapes, dims, ranges).
        provider: "cpu" (default), "cuda", "tensorrt", ... or a full ONNX Runtime provider name.
        opt_level: ONNX Runtime graph optimization level: disable, basic, extended or all.
        threads: Intra-op threads (0: ONNX Runtime's default).
        provider_options: The provider's options ({"device_id": "1"}), as ONNX Runtime takes them.
        custom_ops: Custom-operator libraries to register (``.so``/``.dll`` paths).
        python_ops: Python implementations of custom operators: ``graphkit.custom_op`` functions or
            paths of files declaring them (run through onnxruntime-extensions, the ``custom-ops`` extra).

    Raises:
        FeedError: A feed is unknown or of the wrong dtype/shape.
        TensorNotFoundError: An output name is no tensor of the main graph.
        UsageError: A provider this ONNX Runtime does not have (the message lists the ones it has), a
            missing library, or Python operators without onnxruntime-extensions.
        RuntimeFailure: ONNX Runtime refuses the model or fails while running it.
    """
    return run_detailed(
        model, feeds, outputs=outputs, feed_options=feed_options, provider=provider, opt_level=opt_level,
        threads=threads, provider_options=provider_options, custom_ops=custom_ops, python_ops=python_ops,
    ).outputs


def run_detailed(
    model: Model,
    feeds: Mapping[str, Any] | None = None,
    *,
    outputs: Sequence[str] | None = None,
    feed_options: FeedOptions = FeedOptions(),
    provider: Provider = "cpu",
    opt_level: OptLevel = "all",
    threads: int = 0,
    provider_options: Mapping[str, str] | None = None,
    custom_ops: Sequence[str | os.PathLike[str]] = (),
    python_ops: Sequence[CustomOp | str | os.PathLike[str]] = (),
) -> RunResult:
    """Like ``run``, returning a RunResult: the outputs, how each input was made, and timings.

    Raises:
        FeedError: A feed is unknown or of the wrong dtype/shape.
        TensorNotFoundError: An output name is no tensor of the main graph.
        UsageError: A provider this ONNX Runtime does not have, a missing library, or Python
            operators without onnxruntime-extensions.
        RuntimeFailure: ONNX Runtime refuses the model or fails while running it.
        InvalidModelError: The graph is broken (dangling input, cycle, duplicate producer, …).
    """
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    config = check_run_args(feeds, feed_options, outputs=outputs, provider=provider, opt_level=opt_level,
                            threads=threads, provider_options=provider_options, custom_ops=custom_ops,
                            python_ops=python_ops)
    require_sound(model)
    all_feeds, notes = plan_feeds(input_specs(model), feeds, feed_options=feed_options, where=model.name,
                                  bounds=index_bounds(model))
    target, wanted = _with_outputs(model, outputs)
    start = time.perf_counter()
    sess = config.session(target)
    loaded = time.perf_counter()
    values = _run_session(sess, wanted, all_feeds, model.name)
    done = time.perf_counter()
    result = {name: np.asarray(v) for name, v in zip(wanted, values)}
    return RunResult(model.name, result, tuple(notes), loaded - start, done - loaded, config.label(), opt_level,
                     dict(all_feeds))


def run_fragment(model: Model, feeds: Mapping[str, np.ndarray], outputs: Sequence[str], *,
                 opt_level: str = "all", config: _ort.Settings | None = None) -> dict[str, np.ndarray]:
    """Run a piece graphkit cut from a model that passed ``require_sound``, fed every input.

    ``run`` without its per-call soundness pass and feed planning: a compare walk runs thousands of
    such pieces, each sound by construction (nodes of a sound graph, inputs typed from the arrays
    fed), and on a 50k-node model those passes cost more than ONNX Runtime does.

    Args:
        config: The session settings (provider, custom operators); ``opt_level`` overrides its level.

    Raises:
        RuntimeFailure: ONNX Runtime refuses the piece or fails while running it.
    """
    target, wanted = _with_outputs(model, outputs)
    # (no arena: the values outlive the session, and an arena stays whole while one of them lives)
    sess = (config or _ort.Settings()).session(target, opt_level=opt_level, arena=False)
    values = _run_session(sess, wanted, feeds, model.name)
    return {name: as_value(v) for name, v in zip(wanted, values)}


def as_value(value: Any) -> Any:
    """A value ONNX Runtime returned, as graphkit hands it on: an array for a tensor; a sequence
    (list) or map (dict) as it is, so it can be fed back where a sequence or map is expected."""
    return value if isinstance(value, (list, dict)) else np.asarray(value)


def value_nbytes(value: Any) -> int:
    """Bytes held by a tensor, or by the tensors in a sequence or map."""
    if isinstance(value, list):
        return sum(value_nbytes(v) for v in value)
    if isinstance(value, dict):
        return sum(value_nbytes(v) for v in value.values())
    return int(np.asarray(value).nbytes)


def _with_outputs(model: Model, outputs: Sequence[str] | None) -> tuple[Model, list[str]]:
    """The model to run (with intermediate tensors exposed as outputs if asked) and the names to fetch."""
    names = [o.name for o in model.lazy_proto.graph.output]
    if outputs is None:
        return model, names
    wanted = list(dict.fromkeys(outputs))
    present = set(names)
    extra = [n for n in wanted if n not in present]
    if not extra:
        return model, wanted
    index = GraphIndex(model.lazy_proto.graph)
    for name in extra:
        if name not in index.producer:
            raise not_found(TensorNotFoundError, "tensor computed by a node", name, index.producer, where=model.name)
    clone = model.copy()
    typed = index.value_info
    for name in extra:
        entry = clone.lazy_proto.graph.output.add()
        if name in typed:
            entry.CopyFrom(typed[name])
        else:
            entry.name = name
    return Model(clone.lazy_proto, model.base_dir, model.path), wanted
