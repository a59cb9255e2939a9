"""Minimal repros: the smallest subgraph of a model that still fails the same way, with its inputs.

``reduce`` takes a model that ONNX Runtime refuses to load, fails while running, or (``fails_on
"compare"``) runs to values that leave tolerance against a reference side, and finds the smallest
subgraph that fails the same way (same kind of failure, same operator):

1. the whole model is tried once, to learn how it fails;
2. for load and run failures, the shortest failing prefix of the execution order is found by
   bisection (a linear scan would try every prefix up to the failing node); its last node is the
   failing one. For a comparison, the failing node is the first divergence;
3. windows of the nodes that failing node depends on, ending at it, are tried from the node alone
   upwards (doubling, then bisection), each fed the values its inputs had in the full run (for a
   comparison, the reference side's values); the smallest that still fails is the repro.

``save_repro`` writes a repro as a folder: ``model.onnx``, ``inputs.npz``, ``expected.npz`` (the
reference side's values, for a comparison) and ``README.txt`` with the one command that reproduces
the failure. Every model built here goes through the one sub-model builder (``graphkit._submodel``).
Models that onnx.checker or graphkit's checks reject are taken as they are: a model ONNX Runtime
refuses is what this is for.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import onnx

from graphkit import _backends, _io, _progress, _write
from graphkit import _check_args as argcheck
from graphkit._backends import BACKENDS, side_settings
from graphkit._compare import compare, tensor_figures
from graphkit._custom_ops import CustomOp
from graphkit._graph import GraphIndex
from graphkit._model import Model
from graphkit._options import Backend, FeedOptions, Provider, Tolerance
from graphkit._ort import Settings, first_line, run_session
from graphkit._progress import Progress
from graphkit._run import as_value, make_feeds
from graphkit._submodel import submodel
from graphkit._typing import tensor_types
from graphkit.errors import GraphkitError, RuntimeFailure, UsageError, WriteError

__all__ = ["FAILS_ON", "Failure", "Reduction", "reduce", "save_repro"]

log = logging.getLogger(__name__)

FailsOn = Literal["load", "run", "compare"]
#: What a reduction preserves: ONNX Runtime refusing the model, failing while running it, or a
#: comparison leaving tolerance.
FAILS_ON: dict[str, str] = {
    "load": "ONNX Runtime refuses to load it",
    "run": "ONNX Runtime fails while running it",
    "compare": "its values leave tolerance against the reference side",
}

_RUN_NODE = re.compile(r"running (\w+) node\. Name:'([^']*)'")
_LOAD_NODE = re.compile(r"Node \(([^)]*)\) Op \((\w+)\)")
_LOAD_NODE_2 = re.compile(r"In Node, \(\"([^\"]*)\", (\w+),")


@dataclass(frozen=True)
class Failure:
    """How a model fails.

    Attributes:
        kind: "load", "run" or "compare".
        op_type: The failing operator (named by ONNX Runtime's message, else the failing node's).
        node: The failing node's name ("" when not known).
        message: ONNX Runtime's message, or the comparison's figures.
    """

    kind: str
    op_type: str
    node: str
    message: str

    def same_as(self, other: Failure | None) -> bool:
        """The same kind of failure, in the same operator (when both name one)."""
        if other is None or other.kind != self.kind:
            return False
        return not (self.op_type and other.op_type) or self.op_type == other.op_type

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"kind": self.kind, "op_type": self.op_type, "node": self.node, "message": self.message}


@dataclass(frozen=True)
class Reduction:
    """A minimal repro.

    Attributes:
        model: The smallest failing subgraph, as a model.
        inputs: Its input values (for a comparison, the reference side's).
        expected: The reference side's values of its outputs (comparison only).
        failure: How it fails (the same way as the source).
        nodes: The names of its nodes.
        source: The source model's file or name.
        source_nodes: How many nodes the source has.
        runs: How many models were loaded and run to find it.
        linear_runs: How many a linear scan would have taken (every prefix up to the failing node;
            for a comparison, every window size up to the one found, on both sides).
        command: The arguments that reproduce the failure, after ``python -m graphkit``, with
            ``{dir}`` standing for the repro's folder.
    """

    model: Model
    inputs: Mapping[str, Any]
    expected: Mapping[str, Any]
    failure: Failure
    nodes: tuple[str, ...]
    source: str
    source_nodes: int
    runs: int
    linear_runs: int
    command: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (names and counts, not values)."""
        return {
            "failure": self.failure.to_dict(),
            "nodes": list(self.nodes),
            "inputs": sorted(self.inputs),
            "expected": sorted(self.expected),
            "source": self.source,
            "source_nodes": self.source_nodes,
            "runs": self.runs,
            "linear_runs": self.linear_runs,
            "command": list(self.command),
        }


def reduce(
    model: Model,
    /,
    other: Model | None = None,
    *,
    fails_on: FailsOn = "run",
    feeds: Mapping[str, Any] | None = None,
    feed_options: FeedOptions = FeedOptions(),
    backend: Backend | None = None,
    candidate_backend: Backend = "ort",
    tolerance: Tolerance = Tolerance(),
    provider: Provider = "cpu",
    reference_provider: Provider | None = None,
    candidate_provider: Provider | None = None,
    provider_options: Mapping[str, str] | None = None,
    custom_ops: Sequence[str | os.PathLike[str]] = (),
    python_ops: Sequence[CustomOp | str | os.PathLike[str]] = (),
    divergence: tuple[str, str] | None = None,
    progress: Progress | None = None,
) -> Reduction:
    """The smallest subgraph of ``model`` (or, comparing two models, of ``other``) that fails the same way.

    Args:
        model: The model (the reference model when ``other`` is given). It may be one that
            onnx.checker or graphkit's checks reject.
        other: A second model, the candidate (``fails_on="compare"`` only).
        fails_on: "load", "run" or "compare".
        feeds: Input values by name; missing ones are generated.
        feed_options: How the inputs not in ``feeds`` are generated.
        backend: The reference side's backend (compare; default "ort-noopt" for one model, "ort" for two).
        candidate_backend: The candidate side's backend (compare).
        tolerance: The tolerance a comparison applies.
        provider: The ONNX Runtime provider of every run ("cpu", "cuda", …).
        reference_provider: The reference side's provider, when it differs (compare).
        candidate_provider: The candidate side's provider, when it differs (compare).
        provider_options: Options of the provider.
        custom_ops: ONNX Runtime custom-op libraries to register.
        python_ops: Python implementations of custom operators (``graphkit.custom_op``), or files of them.
        divergence: (candidate tensor, reference tensor) of a first divergence a comparison already
            found (compare: skips running the comparison again).
        progress: Called as ``progress(runs, bound)`` after each model run (``bound``: the runs a linear
            scan could take, raised if the search needs more).

    Raises:
        UsageError: The model does not fail that way (nothing to reduce), or contradictory options.
        FeedError: Feeds that do not fit the model.
    """
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    argcheck.optional(argcheck.instance, other, "other", cls=Model, expected=argcheck.MODEL)
    argcheck.choice(fails_on, "fails_on", FAILS_ON)
    argcheck.optional(argcheck.choice, backend, "backend", choices=BACKENDS)
    argcheck.choice(candidate_backend, "candidate_backend", BACKENDS)
    argcheck.instance(tolerance, "tolerance", Tolerance, "a graphkit.Tolerance")
    argcheck.instance(feed_options, "feed_options", FeedOptions, "a graphkit.FeedOptions")
    progress = _progress.check(progress)
    if divergence is not None:
        argcheck.names(divergence, "divergence", what="tensor name")
        if len(divergence) != 2:
            raise UsageError(f"divergence= must be (candidate tensor, reference tensor), not {len(divergence)} names",
                             hint="pass the first divergence's tensor and its reference_name")
    ref_config, config = side_settings(provider, reference_provider, candidate_provider, provider_options,
                                        custom_ops, python_ops)
    if other is not None and fails_on != "compare":
        raise UsageError(f"a second model is compared against the first, so it is reduced only for a disagreement "
                         f"(compare), not for a failure to {fails_on}",
                         hint="reduce one model, or pass fails_on='compare'",
                         cli_hint="reduce one model, or pass --fails-on compare")
    if fails_on == "compare":
        ref_backend: Backend = backend or ("ort" if other is not None else "ort-noopt")
        reducer = _CompareReducer(model, other, feeds, feed_options, ref_backend, candidate_backend, tolerance,
                                  config, ref_config)
        reducer.watch(progress, len(reducer.cand.order))
        found = reducer.around(divergence[0], divergence[1]) if divergence is not None else reducer.reduce()
        _progress.report(progress, reducer.runs, reducer.runs)
        return found
    runner = _RunReducer(model, fails_on, feeds, feed_options, config)
    runner.watch(progress, len(runner.side.order) + 1)
    found = runner.reduce()
    _progress.report(progress, runner.runs, runner.runs)
    return found


class _Counted:
    """A reducer's count of model runs, reported to ``progress`` as it grows (against ``bound``, the
    runs a linear scan could take, raised if the search needs more)."""

    _runs = 0
    _progress: Progress | None = None
    _bound = 0

    def watch(self, progress: Progress | None, bound: int) -> None:
        self._progress, self._bound = progress, bound

    @property
    def runs(self) -> int:
        return self._runs

    @runs.setter
    def runs(self, value: int) -> None:
        self._runs = value
        _progress.report(self._progress, value, max(self._bound, value))


# ------------------------------------------------------------------------------------------ shared


class _Side:
    """A model indexed for cutting: its execution order and each node's position in it."""

    def __init__(self, model: Model) -> None:
        self.model = model
        self.proto = model.lazy_proto
        self.index = GraphIndex(self.proto.graph)
        try:
            self.order, self.rank = self.index.order, self.index.rank
        except GraphkitError:  # (a cycle or a dangling read: keep the file's order, ONNX Runtime will say)
            self.order = list(range(len(self.proto.graph.node)))
            self.rank = {i: i for i in self.order}
        self.nodes = self.proto.graph.node

    def name(self, i: int) -> str:
        node = self.nodes[i]
        return node.name or f"{node.op_type}#{i}"

    def elem_types(self, names: Sequence[str]) -> dict[str, int]:
        """The element types of tensors as this model has them: declared, else inferred (no run)."""
        declared = self.index.value_info
        found = {n: declared[n].type.tensor_type.elem_type for n in names
                 if n in declared and declared[n].type.tensor_type.elem_type}
        rest = [n for n in names if n not in found]
        if rest:
            for name, tp in tensor_types(self.model, rest, observe=False, symbolic=False).types.items():
                if tp.WhichOneof("value") == "tensor_type" and tp.tensor_type.elem_type:
                    found[name] = tp.tensor_type.elem_type
        return found

    def cone(self, tensors: Sequence[str]) -> list[int]:
        """The nodes the tensors depend on, in execution order."""
        return sorted(self.index.upstream_nodes(tensors), key=lambda i: self.rank.get(i, i))

    def boundary(self, nodes: Sequence[int]) -> list[str]:
        """What ``nodes`` read that none of them produces and that is no weight."""
        produced = {o for i in nodes for o in self.nodes[i].output if o}
        found: dict[str, None] = {}
        for i in nodes:
            for name in self.index.node_reads[i]:
                if name and name not in produced and name not in self.index.initializers:
                    found[name] = None
        return list(found)

    def frontier(self, nodes: Sequence[int]) -> list[str]:
        """The outputs of ``nodes`` that no other of them reads (so that every node runs), and graph outputs."""
        reads = {r for i in nodes for r in self.index.node_reads[i]}
        outputs = self.index.output_set
        return [o for i in nodes for o in self.nodes[i].output if o and (o not in reads or o in outputs)]

    def piece(self, nodes: Sequence[int], inputs: Mapping[str, Any], outputs: Sequence[str],
              graph_name: str | None = None) -> Model:
        """A model of ``nodes`` fed ``inputs`` (typed as the model declares them, else from the values)."""
        reads = {r for i in nodes for r in self.index.node_reads[i]}
        declared = self.index.value_info
        typed = [_declared(declared[n], v) if n in declared else _value_info(n, v) for n, v in inputs.items()]
        proto = submodel(self.proto, self.index, sorted(nodes, key=lambda i: self.rank.get(i, i)),
                         inputs=typed, outputs=[onnx.ValueInfoProto(name=n) for n in outputs],
                         initializers={n for n in reads if n in self.index.initializers}, graph_name=graph_name)
        return self.model.derive(proto)


def _declared(info: onnx.ValueInfoProto, value: Any) -> onnx.ValueInfoProto:
    """The declared type when it holds ``value`` (same element type and rank), else the value's own."""
    if not isinstance(value, np.ndarray) or not info.type.HasField("tensor_type"):
        return info if not isinstance(value, np.ndarray) else _value_info(info.name, value)
    tensor = info.type.tensor_type
    elem = onnx.helper.np_dtype_to_tensor_dtype(value.dtype) if value.dtype.kind not in "OUS" else onnx.TensorProto.STRING
    if tensor.elem_type != elem or not tensor.HasField("shape") or len(tensor.shape.dim) != value.ndim:
        return _value_info(info.name, value)
    for dim, size in zip(tensor.shape.dim, value.shape):
        if dim.HasField("dim_value") and dim.dim_value != size:
            return _value_info(info.name, value)
    return info


def _value_info(name: str, value: Any) -> onnx.ValueInfoProto:
    array = np.asarray(value)
    elem = onnx.TensorProto.STRING if array.dtype.kind in "OUS" else onnx.helper.np_dtype_to_tensor_dtype(array.dtype)
    return onnx.helper.make_tensor_value_info(name, elem, list(array.shape))


def _window_search(size: int, fails: Any) -> int | None:
    """The smallest window size in 1..``size`` for which ``fails(w)`` holds, trying 1, 2, 4, … and
    bisecting between the last size that passed and the first that failed (None: none fails)."""
    last_ok, w = 0, 1
    while True:
        w = min(w, size)
        if fails(w):
            break
        last_ok = w
        if w == size:
            return None
        w *= 2
    lo, hi = last_ok + 1, w
    while lo < hi:
        mid = (lo + hi) // 2
        if fails(mid):
            hi = mid
        else:
            lo = mid + 1
    return hi


# --------------------------------------------------------------------------------------- load, run


class _RunReducer(_Counted):
    """Reduces a model ONNX Runtime refuses or fails to run."""

    def __init__(self, model: Model, kind: str, feeds: Mapping[str, Any] | None, feed_options: FeedOptions,
                 config: Settings) -> None:
        self.side = _Side(model)
        self.kind = kind
        self.config = config
        self.feeds = make_feeds(model, feeds, feed_options=feed_options)
        self.runs = 0

    def attempt(self, piece: Model, feeds: Mapping[str, Any], outputs: Sequence[str],
                last: int | None) -> tuple[Failure | None, dict[str, Any]]:
        """Load and run ``piece``: how it fails (None when it does not), and its outputs."""
        self.runs += 1
        fallback = "" if last is None else self.side.nodes[last].op_type
        fallback_node = "" if last is None else self.side.name(last)
        try:
            session = self.config.session(piece)
        except RuntimeFailure as err:
            op, node = _named_in(err, _LOAD_NODE, _LOAD_NODE_2)
            return Failure("load", op or fallback, node or fallback_node, _cause(err)), {}
        try:
            values = run_session(session, list(outputs), dict(feeds), piece.name)
        except RuntimeFailure as err:
            op, node = _named_in(err, _RUN_NODE)
            return Failure("run", op or fallback, node or fallback_node, _cause(err)), {}
        finally:
            del session
        return None, {n: as_value(v) for n, v in zip(outputs, values)}

    def prefix(self, count: int) -> tuple[Model, dict[str, Any], list[str]]:
        nodes = self.side.order[:count]
        feeds = {n: v for n, v in self.feeds.items() if n in set(self.side.boundary(nodes))}
        outputs = self.side.frontier(nodes)
        return self.side.piece(nodes, feeds, outputs), feeds, outputs

    def reduce(self) -> Reduction:
        side = self.side
        total = len(side.order)
        if not total:
            raise UsageError(f"{side.model.name} has no nodes: nothing to reduce", hint="give a model with nodes")
        whole, _ = self.attempt(*self.prefix(total), side.order[-1])
        if whole is None or whole.kind != self.kind:
            happened = "loads and runs" if whole is None else f"fails to {whole.kind} instead"
            raise UsageError(f"{side.model.name} {happened}: nothing to reduce for a failure to {self.kind}",
                             hint="pass fails_on=" + ("'compare' to reduce a disagreement with a reference"
                                                     if whole is None else repr(whole.kind)),
                             cli_hint="pass --fails-on " + ("compare to reduce a disagreement with a reference"
                                                           if whole is None else whole.kind))
        lo, hi = 1, total  # the shortest failing prefix, by bisection
        while lo < hi:
            mid = (lo + hi) // 2
            found, _ = self.attempt(*self.prefix(mid), side.order[mid - 1])
            if whole.same_as(found):
                hi = mid
            else:
                lo = mid + 1
        failing = side.order[hi - 1]
        linear = hi + 1  # (a linear scan tries prefixes 1, 2, … up to this one, after the whole model)
        cone = side.cone([o for o in side.nodes[failing].output if o]) or [failing]
        cone = [i for i in cone if side.rank[i] <= side.rank[failing]]
        best: tuple[list[int], dict[str, Any], Failure] | None = None

        def fails(w: int) -> bool:
            nonlocal best
            window = cone[-w:]
            inputs = self.values(side.boundary(window), hi - 1)
            if inputs is None:
                return False
            found, _ = self.attempt(side.piece(window, inputs, side.frontier(window)), inputs,
                                    side.frontier(window), failing)
            if whole.same_as(found) and found is not None:
                best = (window, inputs, found)
                return True
            return False

        _window_search(len(cone), fails)  # (the last failing window tried is the smallest)
        if best is None:  # (no window fails on its own: the failing prefix is the repro)
            _model, feeds, _outputs = self.prefix(hi)
            best = (side.order[:hi], feeds, whole)
        window, inputs, failure = best
        piece = side.piece(window, inputs, side.frontier(window), graph_name=f"{side.proto.graph.name}_repro")
        command = ("run", "{dir}/model.onnx", "--input", "{dir}/inputs.npz")
        return Reduction(piece, inputs, {}, failure, tuple(side.name(i) for i in window), side.model.name,
                         total, self.runs, linear, command + _provider_args(self.config))

    def values(self, names: Sequence[str], before: int) -> dict[str, Any] | None:
        """The values ``names`` had in the full run (from a run of the first ``before`` nodes)."""
        wanted = [n for n in names if n not in self.feeds]
        found = {n: self.feeds[n] for n in names if n in self.feeds}
        if not wanted:
            return found
        nodes = self.side.order[:before]
        produced = {o for i in nodes for o in self.side.nodes[i].output if o}
        if any(n not in produced for n in wanted):
            return None
        outputs = list(dict.fromkeys(self.side.frontier(nodes) + wanted))
        feeds = {n: v for n, v in self.feeds.items() if n in set(self.side.boundary(nodes))}
        failure, values = self.attempt(self.side.piece(nodes, feeds, outputs), feeds, outputs, None)
        if failure is not None:
            return None
        found.update({n: values[n] for n in wanted})
        return found


def _named_in(err: RuntimeFailure, *patterns: re.Pattern[str]) -> tuple[str, str]:
    """(operator, node) named in ONNX Runtime's message, or ("", "")."""
    text = str(err.message)
    cause = err.__cause__
    if cause is not None:
        text += " " + str(cause)
    for pattern in patterns:
        found = pattern.search(text)
        if found:
            if pattern is _RUN_NODE:
                return found.group(1), found.group(2)
            return found.group(2), found.group(1)
    return "", ""


def _cause(err: RuntimeFailure) -> str:
    return first_line(err.__cause__) if err.__cause__ is not None else err.message


def _provider_args(config: Settings, prefix: str = "") -> tuple[str, ...]:
    args: list[str] = []
    if config.provider.lower() not in ("cpu", "cpuexecutionprovider"):
        args += [f"--{prefix}provider", config.provider]
    for key, value in config.provider_options.items():
        args += ["--provider-option", f"{key}={value}"]
    for library in config.custom_ops:
        args += ["--custom-ops", str(library)]
    return tuple(args)


# ----------------------------------------------------------------------------------------- compare


class _CompareReducer(_Counted):
    """Reduces a comparison that leaves tolerance to the smallest window around its first divergence
    that, fed the reference side's values, still leaves tolerance on the candidate side."""

    def __init__(self, model: Model, other: Model | None, feeds: Mapping[str, Any] | None,
                 feed_options: FeedOptions, ref_backend: Backend, cand_backend: Backend, tol: Tolerance,
                 config: Settings, ref_config: Settings) -> None:
        self.ref = _Side(model)
        self.cand = _Side(other) if other is not None else self.ref
        self.other = other
        self.feed_options = feed_options
        self.given = feeds
        self.ref_backend, self.cand_backend = ref_backend, cand_backend
        self.tol = tol
        self.config, self.ref_config = config, ref_config
        self.feeds = make_feeds(model, feeds, feed_options=feed_options)
        self.runs = 0
        self.compared_runs = 0

    def reduce(self) -> Reduction:
        result = compare(self.ref.model, self.other, backend=self.ref_backend, candidate_backend=self.cand_backend,
                         feeds=self.feeds, tolerance=self.tol, reference_provider=self.ref_config.provider,
                         candidate_provider=self.config.provider, provider_options=dict(self.config.provider_options),
                         custom_ops=self.config.custom_ops, python_ops=self.config.python_ops)
        self.runs += result.runs
        self.compared_runs = result.runs
        div = result.first_divergence
        if div is None:
            raise UsageError(f"{self.cand.model.name} agrees with the reference within tolerance: nothing to reduce",
                             hint="reduce with fails_on='load' or 'run' a model ONNX Runtime refuses or fails on",
                             cli_hint="reduce --fails-on load or run for a model ONNX Runtime refuses or fails on")
        return self.around(div.tensor, result.tensor(div.tensor).reference_name)

    def around(self, tensor: str, ref_tensor: str) -> Reduction:
        """The smallest window of the candidate ending at ``tensor``'s producer that still diverges."""
        cand = self.cand
        failing = cand.index.producer[tensor]
        cone = cand.cone([tensor])
        best: tuple[list[int], dict[str, Any], dict[str, Any], Failure] | None = None

        def fails(w: int) -> bool:
            nonlocal best
            window = cone[-w:]
            boundary = cand.boundary(window)
            values = self.reference_values([*boundary, ref_tensor] if ref_tensor not in boundary else boundary)
            if values is None:
                return False
            inputs = {n: values[n] for n in boundary}
            expected = values[ref_tensor]
            piece = cand.piece(window, inputs, [tensor])
            self.runs += 1
            got = _backends.execute(piece, inputs, [tensor], self.cand_backend,
                                    f"running the repro of {tensor!r}", self.config)[tensor]
            if not isinstance(got, np.ndarray) or got.shape != np.shape(expected):
                failure = Failure("compare", cand.nodes[failing].op_type, cand.name(failing),
                                  f"{tensor!r}: shape {list(np.shape(got))} against the reference's "
                                  f"{list(np.shape(expected))}")
            else:
                figures = tensor_figures(got, np.asarray(expected), self.tol)
                if figures["passed"]:
                    return False
                failure = Failure("compare", cand.nodes[failing].op_type, cand.name(failing),
                                  f"{tensor!r}: max abs error {figures['max_abs']:.3g} "
                                  f"(atol {self.tol.atol:g}, rtol {self.tol.rtol:g})")
            best = (window, inputs, {tensor: expected}, failure)
            return True

        size = _window_search(len(cone), fails)
        if size is None or best is None:
            raise UsageError(f"re-run on the reference side's values, no subgraph ending at {tensor!r} diverges",
                             hint="the difference comes from the inputs' generation; compare with another seed "
                                  "(FeedOptions seed=) or given feeds=",
                             cli_hint="the difference comes from the inputs' generation; compare with --seed or --input")
        window, inputs, expected, failure = best
        piece = cand.piece(window, inputs, [tensor], graph_name=f"{cand.proto.graph.name}_repro")
        command = ("compare", "{dir}/model.onnx", "--reference", "{dir}/expected.npz", "--input", "{dir}/inputs.npz",
                   "--candidate-backend", self.cand_backend, "--atol", f"{self.tol.atol:g}",
                   "--rtol", f"{self.tol.rtol:g}", *_provider_args(self.config, "candidate-"))
        scanned = self.compared_runs + 2 * len(window)  # (a linear scan tries every window size on both sides)
        return Reduction(piece, inputs, expected, failure, tuple(cand.name(i) for i in window), cand.model.name,
                         len(cand.order), self.runs, scanned, command)

    def reference_values(self, names: Sequence[str]) -> dict[str, Any] | None:
        """The reference side's values of candidate tensors ``names`` (same names), from one run of
        the nodes they depend on; None when the reference side has no such tensor."""
        ref = self.ref
        inputs = {n: v for n, v in self.feeds.items()}
        if any(n not in ref.index.producer and n not in inputs for n in names):
            return None
        wanted = [n for n in names if n not in inputs]
        found = {n: inputs[n] for n in names if n in inputs}
        if wanted:
            nodes = ref.cone(wanted)
            feeds = {n: v for n, v in inputs.items() if n in set(ref.boundary(nodes))}
            self.runs += 1
            values = _backends.execute(ref.piece(nodes, feeds, wanted), feeds, wanted, self.ref_backend,
                                       "computing the reference side's values for the repro", self.ref_config)
            found.update(values)
        if self.cand is not ref:  # (the candidate may take other dtypes: float16 against float32)
            elem_types = self.cand.elem_types([n for n, v in found.items() if isinstance(v, np.ndarray)])
            for name, elem in elem_types.items():
                value = found[name]
                dtype = onnx.helper.tensor_dtype_to_np_dtype(elem)
                if value.dtype != dtype:
                    with np.errstate(over="ignore"):  # (beyond float16's range is inf, as the candidate computes it)
                        found[name] = value.astype(dtype)
        return found


# ------------------------------------------------------------------------------------------ writing


def save_repro(reduction: Reduction, outdir: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
    """Write a repro folder: model.onnx, inputs.npz, expected.npz (comparisons) and README.txt, all or nothing.

    Args:
        reduction: The repro (from ``reduce``).
        outdir: The folder to create (or, with ``overwrite``, replace).
        overwrite: Replace an existing non-empty folder.

    Returns:
        The folder.

    Raises:
        UsageError: ``outdir`` is a file, or is not empty (without ``overwrite``).
        WriteError: The folder cannot be written.
    """
    argcheck.instance(reduction, "reduction", Reduction, "a Reduction (from graphkit.reduce)")
    argcheck.path(outdir, "outdir")
    argcheck.boolean(overwrite, "overwrite")
    folder = Path(outdir)
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"cannot write the repro into {folder}: it is a file", hint="give a folder path")
    if folder.is_dir() and any(folder.iterdir()) and not overwrite:
        raise UsageError(f"{folder} exists and is not empty", hint="choose a new folder, or pass overwrite=True",
                         cli_hint="choose a new folder, or pass --overwrite to replace it")
    _write.remove_stale_temps(folder.parent, [folder.name])
    tmp = folder.parent / _write.temp_name(folder.name, _write.name_limit(folder.parent))
    try:
        tmp.mkdir()
        _io.save(_typed_outputs(reduction), tmp / "model.onnx", external=False)
        _savez(tmp / "inputs.npz", reduction.inputs)
        if reduction.expected:
            _savez(tmp / "expected.npz", reduction.expected)
        (tmp / "README.txt").write_text(_readme(reduction, folder), encoding="utf-8")
        _write.replace_folder(tmp, folder)
    except OSError as err:
        shutil.rmtree(tmp, ignore_errors=True)
        raise WriteError(f"cannot write {folder}: {err.strerror or err}", hint="check the folder and free space") from err
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return folder


def _typed_outputs(reduction: Reduction) -> Model:
    """The repro's model with every graph output typed, as onnx.checker requires: from the expected
    values where there are some, else from inference (an output nothing can type stays as it is)."""
    model = reduction.model
    untyped = [o.name for o in model.lazy_proto.graph.output if not o.type.WhichOneof("value")]
    if not untyped:
        return model
    types = {n: _value_info(n, v).type for n, v in reduction.expected.items() if n in untyped and isinstance(v, np.ndarray)}
    rest = [n for n in untyped if n not in types]
    if rest:
        types |= tensor_types(model, rest, observe=False).types
    proto = onnx.ModelProto()
    proto.CopyFrom(model.lazy_proto)
    for output in proto.graph.output:
        if output.name in types and not output.type.WhichOneof("value"):
            output.type.CopyFrom(types[output.name])
    return model.derive(proto)


def _savez(path: Path, values: Mapping[str, Any]) -> None:
    arrays = {n: v for n, v in values.items() if isinstance(v, np.ndarray)}
    with open(path, "wb") as f:
        np.savez(f, **arrays)  # type: ignore[arg-type]


def _readme(reduction: Reduction, folder: Path) -> str:
    command = " ".join(_quote(part.replace("{dir}", str(folder))) for part in reduction.command)
    failure = reduction.failure
    what = {"load": "ONNX Runtime refuses to load it", "run": "ONNX Runtime fails while running it",
            "compare": "its output leaves tolerance against the expected values"}[failure.kind]
    lines = [
        f"A minimal repro cut from {reduction.source} ({reduction.source_nodes} nodes) by graphkit.",
        "",
        f"It keeps {len(reduction.nodes)} node(s): {', '.join(reduction.nodes)}.",
        f"Failure: {what}, in {failure.op_type} node {failure.node!r}:",
        f"  {failure.message}",
        "",
        "Files: model.onnx (the subgraph), inputs.npz (its inputs"
        + (", the reference side's values)" if reduction.expected else ")")
        + (", expected.npz (the reference side's outputs)" if reduction.expected else "") + ".",
        "",
        "Reproduce with:",
        f"  python -m graphkit {command}",
        "",
        f"Found in {reduction.runs} runs (a linear scan: {reduction.linear_runs}).",
        "",
    ]
    return "\n".join(lines)


def _quote(text: str) -> str:
    return text if re.fullmatch(r"[\w@%+=:,./-]+", text) else "'" + text.replace("'", "'\"'\"'") + "'"
