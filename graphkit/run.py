"""ONNX Runtime sessions, feeds and runs. The only importer of onnxruntime in graphkit.

Models with external weights run from where their weights lie: the session reads the ModelProto from
memory and the weights from the model's folder (``session.model_external_initializers_file_folder_path``),
so no weight is copied into memory twice.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from graphkit.errors import FeedError, RuntimeFailure, TensorNotFoundError, UsageError, not_found
from graphkit.model import Model
from graphkit.summary import TensorSig

__all__ = ["OPT_LEVELS", "make_feeds", "run", "session"]

log = logging.getLogger(__name__)

OPT_LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}
PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}


def session(model: Model, *, provider: str = "cpu", opt_level: str = "all", threads: int = 0) -> ort.InferenceSession:
    """An ONNX Runtime session for ``model``, reading external weights from the model's folder.

    Raises:
        RuntimeFailure: ONNX Runtime refuses the model (the message names what it says).
    """
    if opt_level not in OPT_LEVELS:
        raise UsageError(f"unknown optimization level {opt_level!r}", hint="use one of " + ", ".join(OPT_LEVELS))
    options = ort.SessionOptions()
    options.graph_optimization_level = OPT_LEVELS[opt_level]
    options.log_severity_level = 3
    if threads:
        options.intra_op_num_threads = threads
    if model.base_dir is not None and model.has_external_data:
        options.add_session_config_entry("session.model_external_initializers_file_folder_path", str(model.base_dir))
    providers = [PROVIDERS.get(provider, provider)]
    try:
        return ort.InferenceSession(model.serialized(), options, providers=providers)
    except Exception as err:  # onnxruntime raises its own exception types
        raise RuntimeFailure(
            f"ONNX Runtime cannot load {model.name}: {_first_line(err)}",
            hint="run 'python -m graphkit check' on the model; custom-domain ops need their library",
        ) from err


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


@dataclass(frozen=True)
class FeedSpec:
    """What a graph input expects: name, numpy dtype, and shape (ints, names or None)."""

    name: str
    dtype: np.dtype
    shape: list[int | str | None] | None


def input_specs(model: Model) -> list[FeedSpec]:
    """The model's real inputs (initializers excluded), with numpy dtypes."""
    initializers = {t.name for t in model.graph.initializer}
    specs = []
    for value in model.graph.input:
        if value.name in initializers:
            continue
        sig = TensorSig.of(value)
        elem = value.type.tensor_type.elem_type
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem)) if elem else np.dtype("float32")
        specs.append(FeedSpec(sig.name, dtype, sig.shape))
    return specs


def make_feeds(
    model: Model,
    feeds: Mapping[str, Any] | None = None,
    *,
    seed: int = 0,
    shapes: Mapping[str, Sequence[int]] | None = None,
    ranges: Mapping[str, tuple[float, float]] | None = None,
    default_dim: int = 1,
) -> dict[str, np.ndarray]:
    """Complete ``feeds`` with seeded random values for every input not given, and check them all.

    Args:
        model: The model whose inputs to feed.
        feeds: Given values by input name.
        seed: Seed of the generated values (the same seed gives the same values).
        shapes: Shapes for generated inputs (needed for dynamic dims; default ``default_dim``).
        ranges: Value ranges (lo, hi) for generated inputs.
        default_dim: The value of a dynamic dim that ``shapes`` does not fix.

    Raises:
        FeedError: A feed names no input, or its dtype, rank or a fixed dim is wrong.
    """
    specs = input_specs(model)
    by_name = {s.name: s for s in specs}
    given = dict(feeds or {})
    for name in list(given) + list(shapes or {}) + list(ranges or {}):
        if name not in by_name:
            err = not_found(TensorNotFoundError, "graph input", name, by_name, where=model.name)
            raise FeedError(err.message, hint=err.hint)
    rng = np.random.default_rng(seed)
    result: dict[str, np.ndarray] = {}
    for spec in specs:
        if spec.name in given:
            result[spec.name] = check_feed(spec, np.asarray(given[spec.name]), model.name)
            continue
        shape = _choose_shape(spec, (shapes or {}).get(spec.name), default_dim, model.name)
        lo, hi = (ranges or {}).get(spec.name, _default_range(spec.dtype))
        result[spec.name] = _random(rng, spec.dtype, shape, lo, hi)
    return result


def _default_range(dtype: np.dtype) -> tuple[float, float]:
    if dtype.kind == "f":
        return (-1.0, 1.0)
    if dtype.kind == "b":
        return (0, 1)
    if dtype.kind == "u":
        return (0, 10)
    return (0, 10)


def _random(rng: np.random.Generator, dtype: np.dtype, shape: tuple[int, ...], lo: float, hi: float) -> np.ndarray:
    if dtype.kind == "f":
        values = rng.random(size=shape, dtype=np.float32) if dtype.itemsize <= 4 else rng.random(size=shape)
        return (values * (hi - lo) + lo).astype(dtype, copy=False)
    if dtype.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype.kind in "iu":
        return rng.integers(int(lo), int(hi), size=shape, endpoint=False).astype(dtype)
    if dtype.kind in "OU":
        return np.array([f"s{i}" for i in range(int(np.prod(shape)))], dtype=object).reshape(shape)
    raise FeedError(f"cannot generate values of dtype {dtype}", hint="pass this input's value with --input")


def _choose_shape(spec: FeedSpec, given: Sequence[int] | None, default_dim: int, where: str) -> tuple[int, ...]:
    if given is not None:
        shape = tuple(int(d) for d in given)
        _check_shape(spec, shape, where)
        _check_size(spec, shape, where)
        return shape
    if spec.shape is None:
        raise FeedError(
            f"input {spec.name!r} of {where} has no known rank",
            hint=f"give its shape, e.g. --shape {spec.name}=1x3x224x224",
        )
    chosen = tuple(d if isinstance(d, int) and d > 0 else default_dim for d in spec.shape)
    if any(not isinstance(d, int) for d in spec.shape):
        log.info("input %r: dynamic dims set to %s", spec.name, chosen)
    _check_size(spec, chosen, where)
    return chosen


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
            hint=f"the declared shape is wrong or too large; give a smaller one with --shape {spec.name}=…",
        )


def check_feed(spec: FeedSpec, value: np.ndarray, where: str = "the model") -> np.ndarray:
    """Check a given value's dtype and shape against what the input expects.

    Raises:
        FeedError: naming the input and the expected and given dtype/shape.
    """
    if value.dtype != spec.dtype and not (spec.dtype.kind in "OU" and value.dtype.kind in "OU"):
        raise FeedError(
            f"input {spec.name!r} of {where} expects {spec.dtype}, got {value.dtype} (shape {list(value.shape)})",
            hint=f"convert the value to {spec.dtype}",
        )
    _check_shape(spec, tuple(value.shape), where)
    return value


def _check_shape(spec: FeedSpec, shape: tuple[int, ...], where: str) -> None:
    if spec.shape is None:
        return
    expected = "[" + ", ".join("?" if d is None else str(d) for d in spec.shape) + "]"
    if len(shape) != len(spec.shape):
        raise FeedError(
            f"input {spec.name!r} of {where} expects rank {len(spec.shape)} {expected}, got shape {list(shape)}",
            hint="give a value of the expected rank",
        )
    for axis, (want, got) in enumerate(zip(spec.shape, shape)):
        if isinstance(want, int) and want > 0 and want != got:
            raise FeedError(
                f"input {spec.name!r} of {where} expects shape {expected}, got {list(shape)}: dim {axis} is fixed to {want}",
                hint="only dims shown as names or ? are dynamic; make the dim dynamic first if needed",
            )


def run(
    model: Model,
    feeds: Mapping[str, Any] | None = None,
    *,
    outputs: Sequence[str] | None = None,
    seed: int = 0,
    shapes: Mapping[str, Sequence[int]] | None = None,
    ranges: Mapping[str, tuple[float, float]] | None = None,
    provider: str = "cpu",
    opt_level: str = "all",
) -> dict[str, np.ndarray]:
    """Run a model through ONNX Runtime and return its outputs by name.

    Inputs not in ``feeds`` are generated from the signature (seeded).

    Args:
        model: The model to run.
        feeds: Input values by name.
        outputs: Which graph outputs to return (default: all).
        seed: Seed for generated inputs.
        shapes: Shapes for generated inputs with dynamic dims.
        ranges: Value ranges for generated inputs.
        provider: "cpu" (default) or an ONNX Runtime provider name.
        opt_level: ONNX Runtime graph optimization level: disable, basic, extended or all.

    Raises:
        FeedError: A feed is unknown or of the wrong dtype/shape.
        TensorNotFoundError: An output name is not a graph output.
        RuntimeFailure: ONNX Runtime refuses the model or fails while running it.
    """
    all_feeds = make_feeds(model, feeds, seed=seed, shapes=shapes, ranges=ranges)
    names = [o.name for o in model.graph.output]
    wanted = list(outputs) if outputs is not None else names
    for name in wanted:
        if name not in names:
            raise not_found(TensorNotFoundError, "graph output", name, names, where=model.name)
    sess = session(model, provider=provider, opt_level=opt_level)
    try:
        values = sess.run(wanted, all_feeds)
    except Exception as err:  # onnxruntime raises its own exception types
        raise RuntimeFailure(
            f"ONNX Runtime failed running {model.name}: {_first_line(err)}",
            hint="check the input shapes; run 'python -m graphkit check' on the model",
        ) from err
    return dict(zip(wanted, (np.asarray(v) for v in values)))
