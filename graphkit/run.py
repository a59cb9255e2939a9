"""ONNX Runtime sessions, feeds, run and run_chain. The only importer of onnxruntime in graphkit.

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
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import onnx

from graphkit.errors import FeedError, RuntimeFailure, TensorNotFoundError, UsageError, not_found
from graphkit.graph import GraphIndex
from graphkit.io import external_ref
from graphkit.model import Model, is_external, iter_tensors
from graphkit.summary import TensorSig
from graphkit.validate import require_sound

if TYPE_CHECKING:
    import onnxruntime as ort

    from graphkit.split import Split

__all__ = [
    "OPT_LEVELS",
    "ChainResult",
    "FeedNote",
    "FeedSpec",
    "FragmentRun",
    "OutputDiff",
    "RunResult",
    "TensorStats",
    "check_feed",
    "compare_outputs",
    "input_specs",
    "make_feeds",
    "plan_feeds",
    "run",
    "run_chain",
    "run_detailed",
    "session",
    "tensor_stats",
]

log = logging.getLogger(__name__)

#: Optimization level → the name of its ``onnxruntime.GraphOptimizationLevel`` member.
OPT_LEVELS = {
    "disable": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "all": "ORT_ENABLE_ALL",
}
PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider", "tensorrt": "TensorrtExecutionProvider"}


# --------------------------------------------------------------------------------------- sessions


def session(model: Model, *, provider: str = "cpu", opt_level: str = "all", threads: int = 0) -> ort.InferenceSession:
    """An ONNX Runtime session for ``model``, reading external weights from the model's folder.

    Args:
        model: The model to load.
        provider: "cpu", "cuda", "tensorrt" or a full ONNX Runtime provider name.
        opt_level: Graph optimization level: disable, basic, extended or all.
        threads: Intra-op threads (0: ONNX Runtime's default).

    Raises:
        UsageError: Unknown optimization level, or a provider this ONNX Runtime does not have.
        RuntimeFailure: ONNX Runtime refuses the model (the message names what it says).
    """
    if opt_level not in OPT_LEVELS:
        raise UsageError(f"unknown optimization level {opt_level!r}", hint="use one of " + ", ".join(OPT_LEVELS))
    ort = _onnxruntime()
    full_provider = PROVIDERS.get(provider.lower(), provider)
    available = ort.get_available_providers()
    if full_provider not in available:
        raise UsageError(
            f"ONNX Runtime here has no provider {provider!r}",
            hint="available: " + ", ".join(available) + " (install onnxruntime-gpu for cuda)",
        )
    options = ort.SessionOptions()
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, OPT_LEVELS[opt_level])
    options.log_severity_level = 3
    if threads:
        options.intra_op_num_threads = threads
    if model.has_external_data:
        _check_external_data(model)
        assert model.base_dir is not None  # external_ref refuses external data without a folder
        options.add_session_config_entry("session.model_external_initializers_file_folder_path", str(model.base_dir))
    try:
        return ort.InferenceSession(model.serialized(), options, providers=[full_provider])
    except Exception as err:  # onnxruntime raises its own exception types
        raise RuntimeFailure(
            f"ONNX Runtime cannot load {model.name}: {_first_line(err)}",
            hint="run 'python -m graphkit check' on the model; custom-domain ops need their library",
        ) from err


def _onnxruntime() -> ModuleType:
    """The onnxruntime module, imported on first use (importing it costs ~0.1 s; most verbs never run it)."""
    import onnxruntime

    return onnxruntime


def _check_external_data(model: Model) -> None:
    """Refuse external data outside the model's folder, missing or too short, before ONNX Runtime reads it."""
    for tensor, where in iter_tensors(model.proto):
        if is_external(tensor):
            external_ref(model, tensor, where=where)


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _run_session(sess: ort.InferenceSession, names: list[str], feeds: Mapping[str, np.ndarray], label: str) -> list[Any]:
    try:
        return list(sess.run(names, dict(feeds)))
    except Exception as err:  # onnxruntime raises its own exception types
        raise RuntimeFailure(
            f"ONNX Runtime failed running {label}: {_first_line(err)}",
            hint="check the input shapes and values; run 'python -m graphkit check' on the model",
        ) from err


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
    initializers = {t.name for t in model.graph.initializer}
    return [FeedSpec.of(v) for v in model.graph.input if v.name not in initializers]


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
    seed: int = 0,
    shapes: Mapping[str, Sequence[int]] | None = None,
    ranges: Mapping[str, tuple[float, float]] | None = None,
    default_dim: int = 1,
    dims: Mapping[str, int] | None = None,
) -> dict[str, np.ndarray]:
    """Complete ``feeds`` with seeded random values for every input not given, and check them all.

    Args:
        model: The model whose inputs to feed.
        feeds: Given values by input name.
        seed: Seed of the generated values (the same seed gives the same values).
        shapes: Shapes for generated inputs (needed for dynamic dims; default ``default_dim``).
        ranges: Value ranges (lo, hi) for generated inputs.
        default_dim: The value of a dynamic dim that nothing else fixes.
        dims: Values of named dynamic dims (``{"batch": 4}``), for every input that has them.

    Raises:
        FeedError: A feed names no input, or its dtype, rank or a fixed dim is wrong.
    """
    values, _ = plan_feeds(
        input_specs(model), feeds, seed=seed, shapes=shapes, ranges=ranges, default_dim=default_dim, dims=dims,
        where=model.name,
    )
    return values


def plan_feeds(
    specs: Sequence[FeedSpec],
    feeds: Mapping[str, Any] | None = None,
    *,
    seed: int = 0,
    shapes: Mapping[str, Sequence[int]] | None = None,
    ranges: Mapping[str, tuple[float, float]] | None = None,
    default_dim: int = 1,
    dims: Mapping[str, int] | None = None,
    where: str = "the model",
) -> tuple[dict[str, np.ndarray], list[FeedNote]]:
    """Check the given feeds and generate the others, saying what was chosen for each input.

    A named dynamic dim takes its value from ``dims``, else from a given feed or shape that has the
    same dim name, else ``default_dim``; an unnamed one from ``default_dim``.

    Returns:
        The values by input name, and one FeedNote per input (in ``specs`` order).

    Raises:
        FeedError: A feed, shape or range names no input, or a value's dtype, rank or fixed dim is wrong.
    """
    by_name = {s.name: s for s in specs}
    given = dict(feeds or {})
    shapes = dict(shapes or {})
    ranges = dict(ranges or {})
    for name in [*given, *shapes, *ranges]:
        if name not in by_name:
            err = not_found(TensorNotFoundError, "graph input", name, by_name, where=where)
            raise FeedError(err.message, hint=err.hint)
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
        values[spec.name] = _random(_rng_for(seed, spec.name), spec, shape, lo, hi)
        notes.append(FeedNote(spec.name, str(spec.dtype), shape, "generated", float(lo), float(hi), chosen))
        if chosen:
            log.info("input %r: dynamic dims set to %s", spec.name, chosen)
    return values, notes


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
    return (0, 10)


def _random(rng: np.random.Generator, spec: FeedSpec, shape: tuple[int, ...], lo: float, hi: float) -> np.ndarray:
    dtype = spec.dtype
    if dtype.kind == "f":
        values = rng.random(size=shape, dtype=np.float32) if dtype.itemsize <= 4 else rng.random(size=shape)
        return (values * (hi - lo) + lo).astype(dtype, copy=False)
    if dtype.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype.kind in "iu":
        low, high = int(np.ceil(lo)), int(np.floor(hi))
        return rng.integers(low, max(high, low + 1), size=shape, endpoint=False).astype(dtype)
    if dtype.kind in "OU":
        return np.array([f"s{i}" for i in range(int(np.prod(shape)))], dtype=object).reshape(shape)
    raise FeedError(f"cannot generate values of dtype {dtype} for input {spec.name!r}",
                    hint=f"pass this input's value with --input {spec.name}=FILE")


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
            if not isinstance(want, int) or want <= 0
        }
        return shape, from_flag
    if spec.shape is None:
        raise FeedError(
            f"input {spec.name!r} of {where} has no known rank, so its shape cannot be guessed",
            hint=f"give its shape, e.g. --shape {spec.name}=1x3x224x224, or its value with --input",
        )
    shape_list: list[int] = []
    chosen: dict[str, str] = {}
    for axis, want in enumerate(spec.shape):
        if isinstance(want, int) and want > 0:
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
            hint=f"the declared shape is wrong or too large; give a smaller one with --shape {spec.name}=…",
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
        if isinstance(want, int) and want > 0 and want != got:
            raise FeedError(
                f"input {spec.name!r} of {where} expects {spec.dtype} {expected}, got {list(shape)}: "
                f"dim {axis} is fixed to {want}",
                hint="only dims shown as names or ? are dynamic; make the dim dynamic first if needed",
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
    seed: int = 0,
    shapes: Mapping[str, Sequence[int]] | None = None,
    ranges: Mapping[str, tuple[float, float]] | None = None,
    provider: str = "cpu",
    opt_level: str = "all",
    dims: Mapping[str, int] | None = None,
    threads: int = 0,
) -> dict[str, np.ndarray]:
    """Run a model through ONNX Runtime and return its outputs by name.

    Inputs not in ``feeds`` are generated from the signature (seeded).

    Args:
        model: The model to run.
        feeds: Input values by name.
        outputs: Which tensors to return (default: the graph outputs). Names of intermediate tensors
            of the main graph are exposed as extra outputs for this run.
        seed: Seed for generated inputs.
        shapes: Shapes for generated inputs with dynamic dims.
        ranges: Value ranges for generated inputs.
        provider: "cpu" (default) or an ONNX Runtime provider name.
        opt_level: ONNX Runtime graph optimization level: disable, basic, extended or all.
        dims: Values of named dynamic dims for generated inputs.
        threads: Intra-op threads (0: ONNX Runtime's default).

    Raises:
        FeedError: A feed is unknown or of the wrong dtype/shape.
        TensorNotFoundError: An output name is no tensor of the main graph.
        RuntimeFailure: ONNX Runtime refuses the model or fails while running it.
    """
    return run_detailed(
        model, feeds, outputs=outputs, seed=seed, shapes=shapes, ranges=ranges, provider=provider,
        opt_level=opt_level, dims=dims, threads=threads,
    ).outputs


def run_detailed(
    model: Model,
    feeds: Mapping[str, Any] | None = None,
    *,
    outputs: Sequence[str] | None = None,
    seed: int = 0,
    shapes: Mapping[str, Sequence[int]] | None = None,
    ranges: Mapping[str, tuple[float, float]] | None = None,
    provider: str = "cpu",
    opt_level: str = "all",
    dims: Mapping[str, int] | None = None,
    threads: int = 0,
) -> RunResult:
    """Like ``run``, returning a RunResult: the outputs, how each input was made, and timings.

    Raises:
        FeedError: A feed is unknown or of the wrong dtype/shape.
        TensorNotFoundError: An output name is no tensor of the main graph.
        RuntimeFailure: ONNX Runtime refuses the model or fails while running it.
        InvalidModelError: The graph is broken (dangling input, cycle, duplicate producer, …).
    """
    require_sound(model)
    all_feeds, notes = plan_feeds(
        input_specs(model), feeds, seed=seed, shapes=shapes, ranges=ranges, dims=dims, where=model.name
    )
    target, wanted = _with_outputs(model, outputs)
    start = time.perf_counter()
    sess = session(target, provider=provider, opt_level=opt_level, threads=threads)
    loaded = time.perf_counter()
    values = _run_session(sess, wanted, all_feeds, model.name)
    done = time.perf_counter()
    result = {name: np.asarray(v) for name, v in zip(wanted, values)}
    return RunResult(model.name, result, tuple(notes), loaded - start, done - loaded, provider, opt_level,
                     dict(all_feeds))


def run_fragment(model: Model, feeds: Mapping[str, np.ndarray], outputs: Sequence[str], *,
                 opt_level: str = "all") -> dict[str, np.ndarray]:
    """Run a piece graphkit cut from a model that passed ``require_sound``, fed every input.

    ``run`` without its per-call soundness pass and feed planning: a compare walk runs thousands of
    such pieces, each sound by construction (nodes of a sound graph, inputs typed from the arrays
    fed), and on a 50k-node model those passes cost more than ONNX Runtime does.

    Raises:
        RuntimeFailure: ONNX Runtime refuses the piece or fails while running it.
    """
    target, wanted = _with_outputs(model, outputs)
    values = _run_session(session(target, opt_level=opt_level), wanted, feeds, model.name)
    return {name: np.asarray(v) for name, v in zip(wanted, values)}


def _with_outputs(model: Model, outputs: Sequence[str] | None) -> tuple[Model, list[str]]:
    """The model to run (with intermediate tensors exposed as outputs if asked) and the names to fetch."""
    names = [o.name for o in model.graph.output]
    if outputs is None:
        return model, names
    wanted = list(dict.fromkeys(outputs))
    present = set(names)
    extra = [n for n in wanted if n not in present]
    if not extra:
        return model, wanted
    index = GraphIndex(model.graph)
    for name in extra:
        if name not in index.producer:
            raise not_found(TensorNotFoundError, "tensor computed by a node", name, index.producer, where=model.name)
    clone = model.copy()
    typed = index.value_info
    for name in extra:
        entry = clone.graph.output.add()
        if name in typed:
            entry.CopyFrom(typed[name])
        else:
            entry.name = name
    return Model(clone.proto, model.base_dir, model.path), wanted


# -------------------------------------------------------------------------------------- run_chain


@dataclass(frozen=True)
class FragmentRun:
    """One fragment's part in a chain run.

    Attributes:
        index: Position in the chain.
        name: The fragment's file or name.
        nodes: Its node count.
        load_seconds: Session creation time.
        run_seconds: Inference time.
        output_bytes: Bytes of everything it produced.
        peak_output_bytes: Bytes of its largest output.
        live_bytes: Bytes of the values the chain holds after it (still needed later, or final).
    """

    index: int
    name: str
    nodes: int
    load_seconds: float
    run_seconds: float
    output_bytes: int
    peak_output_bytes: int
    live_bytes: int

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "index": self.index, "name": self.name, "nodes": self.nodes, "load_seconds": self.load_seconds,
            "run_seconds": self.run_seconds, "output_bytes": self.output_bytes,
            "peak_output_bytes": self.peak_output_bytes, "live_bytes": self.live_bytes,
        }


@dataclass(frozen=True)
class OutputDiff:
    """How one chained output compares with the whole model's.

    Attributes:
        name: The output.
        max_abs: Largest absolute difference (None when shapes or dtypes differ, or it is missing).
        max_rel: Largest relative difference ``|a-b| / |b|`` over nonzero references.
        exact: Bit-for-bit equal (NaNs in the same places count as equal).
        ok: Within the tolerance.
        note: Why it is not comparable, if so.
    """

    name: str
    max_abs: float | None
    max_rel: float | None
    exact: bool
    ok: bool
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"name": self.name, "max_abs": self.max_abs, "max_rel": self.max_rel, "exact": self.exact,
                "ok": self.ok, "note": self.note}


def compare_outputs(
    actual: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray], *, rtol: float, atol: float
) -> list[OutputDiff]:
    """Compare ``actual`` with ``expected`` output by output (``expected`` decides the names)."""
    diffs = []
    for name, want in expected.items():
        if name not in actual:
            diffs.append(OutputDiff(name, None, None, False, False, "missing from the chain's outputs"))
            continue
        got, want = np.asarray(actual[name]), np.asarray(want)
        if got.shape != want.shape or got.dtype != want.dtype:
            note = f"got {got.dtype} {list(got.shape)}, expected {want.dtype} {list(want.shape)}"
            diffs.append(OutputDiff(name, None, None, False, False, note))
            continue
        diffs.append(_diff(name, got, want, rtol, atol))
    return diffs


def _diff(name: str, got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> OutputDiff:
    if got.dtype.kind not in "biufc":
        same = bool(np.array_equal(got, want))
        return OutputDiff(name, None, None, same, same)
    equal_nan = got.dtype.kind in "fc"
    exact = bool(np.array_equal(got, want, equal_nan=equal_nan))
    if got.size == 0:
        return OutputDiff(name, 0.0, 0.0, exact, True)
    a, b = got.astype(np.float64), want.astype(np.float64)
    both_nan = np.isnan(a) & np.isnan(b)
    delta = np.where(both_nan, 0.0, np.abs(a - b))
    delta = np.where(np.isnan(delta), np.inf, delta)
    max_abs = float(delta.max())
    nonzero = np.abs(b) > 0
    max_rel = float((delta[nonzero] / np.abs(b[nonzero])).max()) if nonzero.any() else 0.0
    ok = exact or bool(np.allclose(got, want, rtol=rtol, atol=atol, equal_nan=equal_nan))
    return OutputDiff(name, max_abs, max_rel, exact, ok)


@dataclass(frozen=True)
class ChainResult:
    """The result of ``run_chain``.

    Attributes:
        outputs: The final outputs by name (the source's graph outputs).
        feeds: How each graph input was obtained.
        fragments: One FragmentRun per fragment, in order.
        reference: The whole model's file or name, when it was run to compare with.
        whole_load_seconds: Session creation time of the whole model (None without reference).
        whole_run_seconds: Inference time of the whole model (None without reference).
        diffs: Per-output comparison with the whole model (empty without reference).
        rtol: Relative tolerance used.
        atol: Absolute tolerance used.
        provider: The provider used.
        opt_level: The graph optimization level used.
    """

    outputs: dict[str, np.ndarray]
    feeds: tuple[FeedNote, ...]
    fragments: tuple[FragmentRun, ...]
    reference: str | None
    whole_load_seconds: float | None
    whole_run_seconds: float | None
    diffs: tuple[OutputDiff, ...]
    rtol: float
    atol: float
    provider: str
    opt_level: str

    @property
    def compared(self) -> bool:
        """Whether the chain was compared with the whole model."""
        return self.reference is not None

    @property
    def ok(self) -> bool:
        """True unless a compared output is outside the tolerance."""
        return all(d.ok for d in self.diffs)

    @property
    def exact(self) -> bool:
        """True when compared and every output is bit-for-bit equal."""
        return self.compared and all(d.exact for d in self.diffs)

    @property
    def chain_seconds(self) -> float:
        """Total time of the chain: every fragment's load and run."""
        return sum(f.load_seconds + f.run_seconds for f in self.fragments)

    @property
    def peak_live_bytes(self) -> int:
        """The most bytes of intermediate values the chain held at once."""
        return max((f.live_bytes for f in self.fragments), default=0)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (statistics of the outputs, not their values)."""
        return {
            "ok": self.ok,
            "compared": self.compared,
            "exact": self.exact,
            "reference": self.reference,
            "provider": self.provider,
            "opt_level": self.opt_level,
            "rtol": self.rtol,
            "atol": self.atol,
            "feeds": [n.to_dict() for n in self.feeds],
            "fragments": [f.to_dict() for f in self.fragments],
            "chain_seconds": self.chain_seconds,
            "whole_load_seconds": self.whole_load_seconds,
            "whole_run_seconds": self.whole_run_seconds,
            "peak_live_bytes": self.peak_live_bytes,
            "outputs": [tensor_stats(n, v).to_dict() for n, v in self.outputs.items()],
            "diffs": [d.to_dict() for d in self.diffs],
        }


def run_chain(
    fragments: Split | Sequence[Model] | str | os.PathLike[str],
    feeds: Mapping[str, Any] | None = None,
    *,
    reference: Model | Literal["auto"] | None = "auto",
    seed: int = 0,
    shapes: Mapping[str, Sequence[int]] | None = None,
    ranges: Mapping[str, tuple[float, float]] | None = None,
    dims: Mapping[str, int] | None = None,
    provider: str = "cpu",
    opt_level: str = "all",
    rtol: float = 1e-4,
    atol: float = 1e-5,
    threads: int = 0,
) -> ChainResult:
    """Run fragments in order, each fed by the graph inputs and the earlier fragments' outputs.

    Values are dropped as soon as no later fragment reads them. With a reference (the whole model),
    it is run on the same feeds and every output is compared.

    Args:
        fragments: A Split (from ``graphkit.split``), a split folder or its manifest.json, or Models in
            execution order.
        feeds: Graph input values by name; the others are generated (seeded).
        reference: The whole model to compare with; "auto" uses the split's source model when it is
            at hand (and unchanged); None compares nothing.
        seed: Seed for generated inputs.
        shapes: Shapes for generated inputs with dynamic dims.
        ranges: Value ranges for generated inputs.
        dims: Values of named dynamic dims for generated inputs.
        provider: "cpu" (default) or an ONNX Runtime provider name.
        opt_level: ONNX Runtime graph optimization level, for the fragments and the reference.
        rtol: Relative tolerance of the comparison.
        atol: Absolute tolerance of the comparison.
        threads: Intra-op threads (0: ONNX Runtime's default).

    Raises:
        FeedError: A feed is unknown or of the wrong dtype/shape.
        UsageError: No fragments, or a fragment reads a tensor nothing before it produces.
        RuntimeFailure: ONNX Runtime refuses or fails on a fragment or the reference.
    """
    models, specs, final_names, ref = _chain_parts(fragments, reference)
    if ref is not None:
        specs = _merge_specs(input_specs(ref), specs)
    values, notes = plan_feeds(specs, feeds, seed=seed, shapes=shapes, ranges=ranges, dims=dims,
                               where="the chain's inputs")
    last_use = _last_uses(models, final_names)
    env: dict[str, np.ndarray] = {n: v for n, v in values.items() if n in last_use}
    runs = []
    for i, model in enumerate(models):
        runs.append(_run_fragment(i, model, env, last_use, provider, opt_level, threads))
    outputs = {n: env[n] for n in final_names if n in env}
    diffs: list[OutputDiff] = []
    whole_load = whole_run = None
    if ref is not None:
        start = time.perf_counter()
        sess = session(ref, provider=provider, opt_level=opt_level, threads=threads)
        loaded = time.perf_counter()
        names = [o.name for o in ref.graph.output]
        ref_feeds = {s.name: values[s.name] for s in input_specs(ref)}
        expected = dict(zip(names, (np.asarray(v) for v in _run_session(sess, names, ref_feeds, ref.name))))
        whole_load, whole_run = loaded - start, time.perf_counter() - loaded
        del sess
        diffs = compare_outputs(outputs, expected, rtol=rtol, atol=atol)
    return ChainResult(
        outputs, tuple(notes), tuple(runs), ref.name if ref is not None else None, whole_load, whole_run,
        tuple(diffs), rtol, atol, provider, opt_level,
    )


def _chain_parts(
    fragments: Split | Sequence[Model] | str | os.PathLike[str], reference: Model | Literal["auto"] | None
) -> tuple[list[Model], list[FeedSpec], list[str], Model | None]:
    """Models in order, the chain's input specs, its final output names, and the reference to compare with."""
    from graphkit.split import Split, load_split

    if isinstance(fragments, (str, os.PathLike)):
        fragments = load_split(fragments)
    if isinstance(fragments, Split):
        models = [f.model for f in fragments.fragments]
        specs = [FeedSpec(p.name, np.dtype(p.dtype), p.shape) for p in fragments.inputs]
        final = [p.name for p in fragments.outputs]
        auto = fragments.source_model() if reference == "auto" else None
    else:
        models = list(fragments)
        specs, final = _open_ends(models)
        auto = None
    if not models:
        raise UsageError("no fragments to run", hint="split a model first: python -m graphkit split IN OUTDIR --parts N")
    ref = auto if reference == "auto" else reference
    return models, specs, final, ref


def _open_ends(models: Sequence[Model]) -> tuple[list[FeedSpec], list[str]]:
    """For plain models: inputs nothing earlier produces, and outputs nothing later reads."""
    producer = {o.name: j for j, model in enumerate(models) for o in model.graph.output}
    specs: list[FeedSpec] = []
    for i, model in enumerate(models):
        for spec in input_specs(model):
            j = producer.get(spec.name, -1)
            if j >= i:
                raise UsageError(
                    f"fragment {i} ({model.name}) reads {spec.name!r}, which fragment {j} computes "
                    + ("itself" if j == i else "after it"),
                    hint="run the fragments in the order of their manifest",
                )
            if j < 0 and spec.name not in {s.name for s in specs}:
                specs.append(spec)
    read_later: set[str] = set()
    final: list[str] = []
    for model in reversed(models):
        final[:0] = [o.name for o in model.graph.output if o.name not in read_later]
        read_later.update(s.name for s in input_specs(model))
    return specs, final


def _merge_specs(primary: Sequence[FeedSpec], extra: Sequence[FeedSpec]) -> list[FeedSpec]:
    names = {s.name for s in primary}
    return [*primary, *(s for s in extra if s.name not in names)]


def _last_uses(models: Sequence[Model], final: Sequence[str]) -> dict[str, int]:
    """Tensor name → index of the last fragment reading it (final outputs: past the end)."""
    last: dict[str, int] = {}
    for i, model in enumerate(models):
        for spec in input_specs(model):
            last[spec.name] = i
    for name in final:
        last[name] = len(models)
    return last


def _run_fragment(
    i: int, model: Model, env: dict[str, np.ndarray], last_use: Mapping[str, int], provider: str, opt_level: str,
    threads: int,
) -> FragmentRun:
    label = f"fragment {i} ({model.name})"
    specs = input_specs(model)
    missing = [s.name for s in specs if s.name not in env]
    if missing:
        raise UsageError(
            f"{label} reads {', '.join(repr(n) for n in missing)}, which no graph input or earlier fragment provides",
            hint="run the fragments in the order of their manifest; give every graph input",
        )
    feeds = {s.name: check_feed(s, env[s.name], label) for s in specs}
    names = [o.name for o in model.graph.output]
    start = time.perf_counter()
    sess = session(model, provider=provider, opt_level=opt_level, threads=threads)
    loaded = time.perf_counter()
    values = _run_session(sess, names, feeds, label)
    done = time.perf_counter()
    del sess
    produced = [np.asarray(v) for v in values]
    for name, value in zip(names, produced):
        if last_use.get(name, -1) > i:
            env[name] = value
    for name in [n for n in env if last_use.get(n, -1) <= i]:
        del env[name]
    sizes = [v.nbytes for v in produced]
    return FragmentRun(
        i, model.name, len(model.graph.node), loaded - start, done - loaded, sum(sizes), max(sizes, default=0),
        sum(v.nbytes for v in env.values()),
    )
