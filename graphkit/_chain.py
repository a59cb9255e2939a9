"""run_chain: a split's fragments run in order through ONNX Runtime, compared with the whole model.

It stands above ``run`` (sessions and feeds) and ``split`` (the fragments it runs); nothing below it
imports it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np

from graphkit import _check_args as argcheck
from graphkit import _progress
from graphkit._custom_ops import CustomOp
from graphkit._model import Model
from graphkit._options import FeedOptions, OptLevel, Provider, Tolerance
from graphkit._ort import Settings
from graphkit._progress import Progress
from graphkit._run import (
    FeedNote,
    FeedSpec,
    _run_session,
    as_value,
    check_feed,
    check_run_args,
    index_bounds,
    input_specs,
    plan_feeds,
    tensor_stats,
    value_nbytes,
)
from graphkit._split import Split, load_split
from graphkit.errors import ArgumentTypeError, UsageError

__all__ = ["ChainResult", "FragmentRun", "OutputDiff", "compare_outputs", "run_chain"]


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
        passed: Within the tolerance.
        note: Why it is not comparable, if so.
    """

    name: str
    max_abs: float | None
    max_rel: float | None
    exact: bool
    passed: bool
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"name": self.name, "max_abs": self.max_abs, "max_rel": self.max_rel, "exact": self.exact,
                "ok": self.passed, "note": self.note}


def compare_outputs(
    actual: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray], tolerance: Tolerance
) -> list[OutputDiff]:
    """Compare ``actual`` with ``expected`` output by output (``expected`` decides the names); a float16
    or bfloat16 output is held to at least its dtype's floor (``Tolerance.for_dtype``)."""
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
        tol = tolerance.for_dtype(str(want.dtype))
        diff = _diff(name, got, want, tol.rtol, tol.atol)
        if tol is not tolerance and not diff.exact:
            diff = replace(diff, note=f"{want.dtype} tolerance: atol {tol.atol:g}, rtol {tol.rtol:g}")
        diffs.append(diff)
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
        tolerance: The tolerance of the comparison.
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
    tolerance: Tolerance
    provider: str
    opt_level: str

    @property
    def compared(self) -> bool:
        """Whether the chain was compared with the whole model."""
        return self.reference is not None

    @property
    def passed(self) -> bool:
        """True unless a compared output is outside the tolerance."""
        return all(d.passed for d in self.diffs)

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
            "ok": self.passed,
            "compared": self.compared,
            "exact": self.exact,
            "reference": self.reference,
            "provider": self.provider,
            "opt_level": self.opt_level,
            "rtol": self.tolerance.rtol,
            "atol": self.tolerance.atol,
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
    feed_options: FeedOptions = FeedOptions(),
    tolerance: Tolerance = Tolerance(),
    provider: Provider = "cpu",
    opt_level: OptLevel = "all",
    threads: int = 0,
    provider_options: Mapping[str, str] | None = None,
    custom_ops: Sequence[str | os.PathLike[str]] = (),
    python_ops: Sequence[CustomOp | str | os.PathLike[str]] = (),
    progress: Progress | None = None,
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
        feed_options: How the inputs not in ``feeds`` are generated (seed, shapes, dims, ranges).
        tolerance: The tolerance of the comparison with the whole model.
        provider: "cpu" (default) or an ONNX Runtime provider name.
        opt_level: ONNX Runtime graph optimization level, for the fragments and the reference.
        threads: Intra-op threads (0: ONNX Runtime's default).
        provider_options: The provider's options ({"device_id": "1"}), as ONNX Runtime takes them.
        custom_ops: Custom-operator libraries to register (``.so``/``.dll`` paths).
        python_ops: Python implementations of custom operators (``graphkit.custom_op`` functions or
            paths of files declaring them).
        progress: Called with (fragments run, fragments) after each fragment.

    Raises:
        FeedError: A feed is unknown or of the wrong dtype/shape.
        UsageError: No fragments, or a fragment reads a tensor nothing before it produces; a provider
            this ONNX Runtime does not have.
        RuntimeFailure: ONNX Runtime refuses or fails on a fragment or the reference.
    """
    config = check_run_args(feeds, feed_options, provider=provider, opt_level=opt_level, threads=threads,
                            provider_options=provider_options, custom_ops=custom_ops, python_ops=python_ops)
    argcheck.instance(tolerance, "tolerance", Tolerance, "a graphkit.Tolerance")
    _progress.check(progress)
    if not (reference is None or isinstance(reference, Model) or (isinstance(reference, str) and reference == "auto")):
        raise ArgumentTypeError(f"reference= must be a Model, 'auto' or None, not {argcheck.describe(reference)}",
                                hint="pass the whole model, 'auto' (the split's source) or None")
    models, specs, final_names, ref = _chain_parts(fragments, reference)
    if ref is not None:
        specs = _merge_specs(input_specs(ref), specs)
    bounds: dict[str, int] = {}
    for part in ([ref] if ref is not None else models):
        for name, size in index_bounds(part).items():
            bounds[name] = min(size, bounds.get(name, size))
    values, notes = plan_feeds(specs, feeds, feed_options=feed_options, where="the chain's inputs", bounds=bounds)
    last_use = _last_uses(models, final_names)
    env: dict[str, np.ndarray] = {n: v for n, v in values.items() if n in last_use}
    runs = []
    for i, model in enumerate(models):
        runs.append(_run_fragment(i, model, env, last_use, config))
        _progress.report(progress, i + 1, len(models))
    outputs = {n: env[n] for n in final_names if n in env}
    diffs: list[OutputDiff] = []
    whole_load = whole_run = None
    if ref is not None:
        start = time.perf_counter()
        sess = config.session(ref)
        loaded = time.perf_counter()
        names = [o.name for o in ref.lazy_proto.graph.output]
        ref_feeds = {s.name: values[s.name] for s in input_specs(ref)}
        expected = dict(zip(names, (as_value(v) for v in _run_session(sess, names, ref_feeds, ref.name))))
        whole_load, whole_run = loaded - start, time.perf_counter() - loaded
        del sess
        diffs = compare_outputs(outputs, expected, tolerance)
    return ChainResult(
        outputs, tuple(notes), tuple(runs), ref.name if ref is not None else None, whole_load, whole_run,
        tuple(diffs), tolerance, config.label(), opt_level,
    )


def _chain_parts(
    fragments: Split | Sequence[Model] | str | os.PathLike[str], reference: Model | Literal["auto"] | None
) -> tuple[list[Model], list[FeedSpec], list[str], Model | None]:
    """Models in order, the chain's input specs, its final output names, and the reference to compare with."""
    if isinstance(fragments, (str, os.PathLike)):
        fragments = load_split(argcheck.path(fragments, "fragments"))
    if isinstance(fragments, Split):
        models = [f.model for f in fragments.fragments]
        specs = [FeedSpec(p.name, np.dtype(p.dtype), p.shape) for p in fragments.inputs]
        final = [p.name for p in fragments.outputs]
        auto = fragments.source_model() if reference == "auto" else None
    else:
        if not isinstance(fragments, (list, tuple)):
            raise ArgumentTypeError(f"fragments= must be a Split, a split folder or a list of Models, not "
                                    f"{argcheck.describe(fragments)}", hint="e.g. fragments=graphkit.split(model, parts=2)")
        models = [argcheck.instance(m, f"fragments[{i}]", Model, argcheck.MODEL) for i, m in enumerate(fragments)]
        specs, final = _open_ends(models)
        auto = None
    if not models:
        raise UsageError("no fragments to run", hint="split a model first: gk.split(model, parts=N)",
                         cli_hint="split a model first: python -m graphkit split IN OUTDIR --parts N")
    ref = auto if reference == "auto" else reference
    return models, specs, final, ref


def _open_ends(models: Sequence[Model]) -> tuple[list[FeedSpec], list[str]]:
    """For plain models: inputs nothing earlier produces, and outputs nothing later reads."""
    producer = {o.name: j for j, model in enumerate(models) for o in model.lazy_proto.graph.output}
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
        final[:0] = [o.name for o in model.lazy_proto.graph.output if o.name not in read_later]
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
    i: int, model: Model, env: dict[str, np.ndarray], last_use: Mapping[str, int], config: Settings,
) -> FragmentRun:
    label = f"fragment {i} ({model.name})"
    specs = input_specs(model)
    missing = [s.name for s in specs if s.name not in env]
    if missing:
        raise UsageError(
            f"{label} reads {', '.join(repr(n) for n in missing)}, which no graph input or earlier fragment provides",
            hint="run the fragments in the order of their manifest; give every graph input",
        )
    kinds = {v.name: v.type.WhichOneof("value") for v in model.lazy_proto.graph.input}
    # (a sequence, map or optional crossing a cut is fed as ONNX Runtime returned it)
    feeds = {s.name: check_feed(s, env[s.name], label) if kinds.get(s.name) in ("tensor_type", None) else env[s.name]
             for s in specs}
    names = [o.name for o in model.lazy_proto.graph.output]
    start = time.perf_counter()
    sess = config.session(model)
    loaded = time.perf_counter()
    values = _run_session(sess, names, feeds, label)
    done = time.perf_counter()
    del sess
    produced = [as_value(v) for v in values]
    for name, value in zip(names, produced):
        if last_use.get(name, -1) > i:
            env[name] = value
    for name in [n for n in env if last_use.get(n, -1) <= i]:
        del env[name]
    sizes = [value_nbytes(v) for v in produced]
    return FragmentRun(
        i, model.name, len(model.lazy_proto.graph.node), loaded - start, done - loaded, sum(sizes), max(sizes, default=0),
        sum(value_nbytes(v) for v in env.values()),
    )
