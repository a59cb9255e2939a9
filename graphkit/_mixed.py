"""Mixed precision chosen by measurement: the fewest float32 nodes that keep the outputs within tolerance.

The search never runs the model once per node, never converts the weights more than once, and never
holds the model: every run goes fragment by fragment as compare walks a model (``_Walker``: each
fragment's session holds its weights only, a value is dropped after its last reader).

1. One walk over the float32 model gives its outputs (the reference) and every converted node's
   *local* error: after each fragment runs, its nodes run again, converted to float16 and each on the
   float32 values of its own inputs (decoupled models cut to the fragment budget, so an error is the
   node's own and not inherited from upstream). Two passes of work: every node in float32 and again
   in float16.
2. The guess: the nodes that overflow float16 on their own (NaN/Inf where float32 has none) and the
   few whose own relative error stands out. The float16 model is tried first, unless nothing
   overflows and some of the nodes that stand out have an own error alone beyond the outputs'
   tolerance: then the guess is those nodes, tried first. Keeping a node float32 can also make the
   outputs worse (a Cast where ONNX Runtime would have kept float32 values), so a guess that fails
   is followed by the float16 model.
3. If neither passes (and keeping every node float32 does: else the search stops, ``passed``
   False), a galloping search along the ranking by own error and a bisection find the shortest
   prefix that brings the outputs back. A last pass tries each kept node away, least error first,
   keeping those the outputs need, until each node left was tried away from the set left (within
   2·log2(nodes) trials; the nodes it has no trial left for stay, marked so).

A model within the fragment budget runs each trial in one session, as the user's will. A larger one runs
each trial in fragments and computes only what earlier trials did not: the values a walk passes between
fragments are kept on disk under the signature of the computation that made them, a walk starts from
the latest such values its outputs depend on, and its fragments also end around the nodes later trials
will change, where no float16 value is alive. A float16 value passed between fragments goes as float32
when ONNX Runtime's CPU provider holds it in float32 inside one session (it computes float16 nodes it
has no kernel for in float32 between Casts it removes in pairs), so that the fragments compute what one
session does as far as that can be read from its graph (not always: it also picks a node's kernel by
its neighbours).

Every trial converts the graph again but reads each weight's float16 (or float32) copy from one scratch
store written on first use (``graphkit._convert.WeightStore``), so a trial costs its sessions and runs,
not a conversion of the weights. The work is counted in passes (nodes computed over the model's nodes:
one pass is one inference of the whole model, the unit of a tool that runs the model per trial) and in
ONNX Runtime session runs.
"""

from __future__ import annotations

import hashlib
import logging
import math
import shutil
import tempfile
import weakref
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from graphkit import _check_args as argcheck
from graphkit._backends import execute
from graphkit._compare import DEFAULT_FRAGMENT_BYTES, _Graph, _value_info, _Walker, tensor_figures
from graphkit._convert import (
    Float16Conversion,
    WeightStore,
    check_keep_op,
    convert_float16,
    element_types,
    unnamed_label,
)
from graphkit._graph import GraphIndex
from graphkit._model import Model
from graphkit._options import FeedOptions, Tolerance
from graphkit._ort import Settings
from graphkit._run import input_specs, make_feeds, run
from graphkit._submodel import submodel
from graphkit.errors import RuntimeFailure, UsageError

__all__ = ["MIXED_TOLERANCE", "MixedNode", "MixedPrecision", "auto_mixed_precision"]

log = logging.getLogger(__name__)

#: The default tolerance of the outputs (float16 keeps about three decimal digits).
MIXED_TOLERANCE = Tolerance(atol=1e-3, rtol=1e-2)

Progress = Callable[[int, int], None]

_OVERFLOW = "overflows float16 on its own float32 inputs (NaN/Inf where float32 has none)"
_NEEDED = "the outputs leave tolerance when it computes in float16"
_UNTESTED = ("among the largest own errors, in the float32 set that brings the outputs within tolerance "
             "(not tested alone: the search's run budget ended)")


@dataclass(frozen=True)
class MixedNode:
    """A node the search keeps float32, and why.

    Attributes:
        node: Its name (``#k``, its position, when unnamed).
        op_type: Its operator.
        reason: Why: it overflows on its own, or the outputs leave tolerance when it is float16.
        local_max_abs: Its own error in float16, run on the float32 model's values of its inputs
            (inf: it overflows), when measured.
        output_max_abs: The largest output error with it in float16 (in the run that showed it is
            needed), when such a run was made.
        local_relative: Its own error in float16 relative to its values, ``rms(error) / rms(float32
            value)`` (inf: it overflows), when measured: what the search ranks nodes by.
    """

    node: str
    op_type: str
    reason: str
    local_max_abs: float | None = None
    output_max_abs: float | None = None
    local_relative: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"node": self.node, "op_type": self.op_type, "reason": self.reason,
                "local_max_abs": _json(self.local_max_abs), "output_max_abs": _json(self.output_max_abs),
                "local_relative": _json(self.local_relative)}


@dataclass(frozen=True)
class MixedPrecision:
    """The result of ``auto_mixed_precision``.

    Attributes:
        model: The mixed-precision model.
        conversion: Its conversion report (every node kept float32, for any reason).
        kept: The nodes the search kept float32 (beyond what the conversion keeps anyway).
        passed: Whether its outputs are within tolerance of the float32 model's.
        output_errors: Each output's max abs error against the float32 model.
        tolerance: The tolerance applied to the outputs.
        runs: Every ONNX Runtime session run the search made: ``trial_runs`` + ``fragment_runs``.
        trial_runs: Session runs of the trials (each converted candidate, run fragment by fragment).
        fragment_runs: Session runs of the first walk: the float32 model run fragment by fragment (the
            reference outputs) and each fragment's nodes re-run in float16 on their float32 inputs
            (every node's local error).
        measured: How many nodes' local errors were measured.
        candidates: How many main-graph nodes could have stayed float32.
        passes: The work of all those runs in whole-model inferences (nodes computed over the model's
            nodes): the unit of one run of the whole model, the first walk counting 2 (every node in
            float32 and again in float16).
        trials: How many candidate sets of float32 nodes were run.
    """

    model: Model = field(repr=False)
    conversion: Float16Conversion = field(repr=False)
    kept: tuple[MixedNode, ...]
    passed: bool
    output_errors: dict[str, float]
    tolerance: Tolerance
    runs: int
    trial_runs: int
    fragment_runs: int
    measured: int
    candidates: int
    passes: float = 0.0
    trials: int = 0

    def keep_node(self) -> list[str]:
        """The names of the kept nodes, as ``to_float16(keep_node=...)`` takes them."""
        return [k.node for k in self.kept]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (without the model)."""
        return {"passed": self.passed, "kept": [k.to_dict() for k in self.kept],
                "output_errors": {k: _json(v) for k, v in self.output_errors.items()},
                "tolerance": self.tolerance.to_dict(), "runs": self.runs, "trial_runs": self.trial_runs,
                "fragment_runs": self.fragment_runs, "passes": self.passes, "trials": self.trials,
                "measured": self.measured, "candidates": self.candidates,
                "conversion": self.conversion.to_dict()}


def _json(value: float | None) -> float | str | None:
    return value if value is None or math.isfinite(value) else str(value)


def auto_mixed_precision(
    model: Model,
    /,
    *,
    tolerance: Tolerance = MIXED_TOLERANCE,
    feeds: Mapping[str, Any] | None = None,
    feed_options: FeedOptions = FeedOptions(),
    keep_io_types: bool = False,
    keep_op: Sequence[str] = (),
    keep_node: Sequence[str] = (),
    progress: Progress | None = None,
    fragment_bytes: int = DEFAULT_FRAGMENT_BYTES,
) -> MixedPrecision:
    """Convert to float16, keeping float32 the fewest nodes needed for the outputs to stay within tolerance.

    Args:
        model: The float32 model (not changed).
        tolerance: What the outputs must stay within, against the float32 model's.
        feeds: Input values by name; missing ones are generated (``feed_options``).
        feed_options: How the inputs not in ``feeds`` are generated.
        keep_io_types: Keep float32 graph inputs and outputs float32.
        keep_op: Operators that stay float32 anyway.
        keep_node: Nodes that stay float32 anyway.
        progress: Called with (session runs done, an estimate of their total) after each run.
        fragment_bytes: About how many bytes of weights and values each session holds at most (every
            run goes fragment by fragment; ONNX Runtime also holds float32 copies of float16 weights).
            A model within it runs each trial in one session, which computes exactly what the user's
            session will; a larger one passes values between fragments, where ONNX Runtime's CPU
            provider may compute float16 nodes otherwise than in one session.

    Returns:
        The model and the search's report; ``passed`` is False when even the float32 nodes found
        cannot bring the outputs within tolerance (for instance float16 inputs without
        ``keep_io_types`` that lose too much).

    Raises:
        NodeNotFoundError: A ``keep_node`` name is no node of the model.
        NameNotFoundError: A ``keep_op`` operator that no node of the model has.
        UsageError: The model has no float32 data.
        FeedError: Feeds that do not fit the model.
        RuntimeFailure: ONNX Runtime fails to run a converted model.
    """
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    argcheck.instance(tolerance, "tolerance", Tolerance, "a graphkit.Tolerance")
    argcheck.optional(argcheck.mapping, feeds, "feeds", key=lambda v, k: argcheck.name(v, k, what="input name"))
    argcheck.instance(feed_options, "feed_options", FeedOptions, "a graphkit.FeedOptions")
    argcheck.boolean(keep_io_types, "keep_io_types")
    ops = argcheck.names(keep_op, "keep_op", what="operator")
    nodes = argcheck.names(keep_node, "keep_node", what="node name")
    check_keep_op(model, ops)
    argcheck.integer(fragment_bytes, "fragment_bytes", minimum=1)
    if progress is not None and not callable(progress):
        raise UsageError("progress= must be a function (done, total)", hint="pass a callable or None")
    search = _Search(model, tolerance, feeds, feed_options, keep_io_types, ops, nodes, progress, fragment_bytes)
    try:
        return search.run()
    finally:  # (on an error or Ctrl-C too: the traceback would keep the scratch folders alive)
        search.values.discard()
        search.store.discard()


@dataclass(frozen=True)
class _Local:
    """A node's own error in float16, on the float32 values of its inputs."""

    max_abs: float
    relative: float  # rms(error) / rms(float32 value): how the search ranks nodes
    overflow: bool  # NaN/Inf where float32 has none


@dataclass(frozen=True)
class _Trial:
    errors: dict[str, float]
    passed: bool

    @property
    def worst(self) -> float:
        return max(self.errors.values(), default=0.0)


class _Search:
    def __init__(self, model: Model, tolerance: Tolerance, feeds: Mapping[str, Any] | None,
                 feed_options: FeedOptions, keep_io_types: bool, keep_op: list[str], keep_node: list[str],
                 progress: Progress | None, fragment_bytes: int = DEFAULT_FRAGMENT_BYTES) -> None:
        self.model = model
        self.budget = fragment_bytes
        self.tolerance = tolerance
        self.keep_io_types = keep_io_types
        self.keep_op = keep_op
        self.keep_node = keep_node
        self.progress = progress
        self.feeds = make_feeds(model, feeds, feed_options=feed_options)
        self.trial_runs = 0
        self.fragment_runs = 0
        self.work = 0.0  # nodes computed, over all runs (passes: work / nodes of the model)
        self.nodes = model.lazy_proto.graph.node
        self.index = GraphIndex(model.lazy_proto.graph)
        self.types = element_types(model)
        self.store = WeightStore()
        self.trials: dict[frozenset[int], _Trial] = {}
        self.local: dict[int, _Local] = {}
        self.reference: dict[str, Any] = {}
        self.values = _Values()
        self.guess: set[int] = set()  # the first float32 set the search tries after the float16 model
        self.expected = 3
        self.candidates: list[int] = []
        self.taken = set(self.index.all_tensor_names)

    # ------------------------------------------------------------------ the search

    def run(self) -> MixedPrecision:
        full = self._convert({})
        candidates = [k for k in self.index.order if k in set(full.main_converted)]
        self.candidates = candidates
        self.expected = 3 + 2 * max(1, math.ceil(math.log2(len(candidates) + 1)))
        self._capture(candidates)
        overflow = [k for k in candidates if k in self.local and self.local[k].overflow]
        rank = {k: r for r, k in enumerate(candidates)}
        ranking = sorted((k for k in candidates if k not in set(overflow)), key=lambda k: (-self._relative(k), rank[k]))
        base = set(overflow)
        first = self._gap(ranking)
        # The float16 model first, unless nothing overflows and some of the nodes that stand out have an
        # own error alone beyond the outputs' tolerance (ONNX Runtime's CPU provider keeps many float16
        # values float32 inside one session, so an overflow alone is weak evidence): then those nodes
        # first, and the last pass proves each needed or drops it. Keeping a node float32 can also
        # make the outputs worse (a Cast where ONNX Runtime would have kept float32 values), so a guess
        # that fails is followed by the float16 model before the search widens.
        beyond = {k for k in ranking[:first] if self._beyond(k)}
        guess_first = bool(beyond) and not base
        self.guess = beyond if guess_first else base | set(ranking[:first])
        if not guess_first and self._trial(set()).passed:
            return self._result(set(), {}, candidates)
        if self.guess and self._trial(self.guess).passed:
            chosen = set(self.guess)
        elif guess_first and self._trial(set()).passed:
            return self._result(set(), {}, candidates)
        elif not self._all_float32_passes(candidates):
            log.info("the outputs leave tolerance even with every node float32")
            return self._result(set(), {}, candidates, passed=False)
        else:
            chosen = base | set(ranking[:self._shortest_prefix(base, ranking, first)])
        kept = self._minimize(chosen, set(overflow), rank)
        return self._result(set(kept), kept, candidates)

    def _beyond(self, k: int) -> bool:
        """Whether node ``k``'s own error (not an overflow) is beyond what the outputs may differ by."""
        scale = max((float(np.max(np.abs(v))) for v in self.reference.values()
                     if isinstance(v, np.ndarray) and v.dtype.kind in "fiu" and v.size), default=0.0)
        local = self.local.get(k)
        return local is not None and not local.overflow and \
            local.max_abs > self.tolerance.atol + self.tolerance.rtol * scale

    def _all_float32_passes(self, candidates: list[int]) -> bool:
        """Whether keeping every candidate float32 passes: without a run when that is exactly the float32
        model."""
        return self._all_float32_is_the_model() or self._trial(set(candidates)).passed

    def _minimize(self, chosen: set[int], overflow: set[int], rank: Mapping[int, int]) -> dict[int, MixedNode]:
        """Try each node of ``chosen`` away, least own error first (the overflowing ones last), keeping
        those the outputs need, until each node left was tried away from the set left (keeping a node
        float32 can also hurt, so one that was needed may no longer be once another goes); within a
        budget of trials (the nodes not tried stay, marked so)."""
        needed: dict[int, _Trial] = {}
        budget = len(self.trials) + 2 * max(1, math.ceil(math.log2(len(rank) + 1)))
        changed = True
        while changed:  # (until each node left was tried away from the set that is left)
            changed = False
            for k in sorted(chosen, key=lambda k: (k in overflow, self._relative(k), -rank[k])):
                without = chosen - {k}
                if frozenset(without) not in self.trials and len(self.trials) >= budget:
                    continue  # (not tried: it stays)
                trial = self._trial(without)
                if trial.passed:
                    chosen = without
                    changed = changed or bool(needed)
                    needed.pop(k, None)
                else:
                    needed[k] = trial
        kept: dict[int, MixedNode] = {}
        for k in chosen:
            if k in needed:
                reason = _NEEDED
            else:
                reason = _OVERFLOW if k in overflow else _UNTESTED
            kept[k] = MixedNode(self._label(k), self.nodes[k].op_type, reason, *self._figures(k, needed.get(k)))
        return kept

    def _relative(self, k: int) -> float:
        local = self.local.get(k)
        if local is None:
            return 0.0
        return math.inf if local.overflow else local.relative

    def _gap(self, ranking: list[int]) -> int:
        """How many nodes the first trial keeps float32: the few that stand out, when some do (a drop of
        the own errors by 4x or more, a drop to zero included, within the first sqrt(nodes) of the
        ranking); else none (the first trial is the float16 model)."""
        best, where = 4.0, 0
        for i in range(min(len(ranking) - 1, math.isqrt(len(ranking)) + 1)):
            high, low = self._relative(ranking[i]), self._relative(ranking[i + 1])
            if high <= 0:
                break
            ratio = math.inf if low <= 0 else high / low
            if ratio >= best:
                best, where = ratio, i + 1
        return where

    def _shortest_prefix(self, base: set[int], ranking: list[int], failed: int) -> int:
        """The smallest n > ``failed`` such that keeping ``base`` and ``ranking[:n]`` float32 passes
        (keeping all of ``ranking`` passes; keeping ``ranking[:failed]`` fails): a galloping search
        (2·failed, 4·failed… nodes), then a bisection between the last prefix that failed and the
        first that passed."""
        lo, hi, size = failed, len(ranking), max(1, 2 * failed)
        while size < hi:
            if self._trial(base | set(ranking[:size])).passed:
                hi = size
                break
            lo, size = size, size * 2
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self._trial(base | set(ranking[:mid])).passed:
                hi = mid
            else:
                lo = mid
        return hi

    def _result(self, kept_set: set[int], kept: Mapping[int, MixedNode], candidates: list[int], *,
                passed: bool | None = None) -> MixedPrecision:
        conversion = self._convert({k: f"auto-mixed: {kept[k].reason}" for k in kept_set})
        trial = self._trial(kept_set)
        self.store.hand_over(conversion.model)
        ordered = tuple(kept[k] for k in candidates if k in kept_set)
        return MixedPrecision(conversion.model, conversion, ordered, trial.passed if passed is None else passed,
                              trial.errors, self.tolerance, self.trial_runs + self.fragment_runs, self.trial_runs,
                              self.fragment_runs, len(self.local), len(candidates),
                              round(self.work / max(1, len(self.nodes)), 2), len(self.trials))

    # ------------------------------------------------------------------ trials

    def _convert(self, keep_main: Mapping[int, str]) -> Float16Conversion:
        return convert_float16(self.model, keep_io_types=self.keep_io_types, keep_op=self.keep_op,
                               keep_node=self.keep_node, keep_main=keep_main, types=self.types, store=self.store)

    def _trial(self, keep: set[int]) -> _Trial:
        """Run the conversion with ``keep`` float32 (once per set), fragment by fragment: each output's
        max abs error, and whether all are within tolerance."""
        key = frozenset(keep)
        if key in self.trials:
            return self.trials[key]
        if key == frozenset(self.candidates) and self._all_float32_is_the_model():
            got: dict[str, Any] = dict(self.reference)
        else:
            got = self._walk(self._convert(dict.fromkeys(keep, "auto-mixed: searching")), set(keep) | self.guess)
        errors: dict[str, float] = {}
        passed = True
        for name, want in self.reference.items():
            value = np.asarray(got[name])
            figures = tensor_figures(value.astype(want.dtype) if value.dtype != want.dtype else value, want,
                                     self.tolerance)
            bad = figures["nan"][0] != figures["nan"][1] or figures["inf"][0] != figures["inf"][1]
            errors[name] = math.inf if bad else float(figures["max_abs"])
            passed = passed and bool(figures["passed"]) and not bad
        self.trials[key] = _Trial(errors, passed)
        return self.trials[key]

    def _walk(self, conversion: Float16Conversion, cuts: set[int]) -> dict[str, Any]:
        """The outputs of a converted model, run fragment by fragment as compare walks a model: each
        fragment's session holds its weights only (read from the one store), and a value is dropped
        after its last reader. A model within the fragment budget runs in one session, as the user's
        will; in a larger one a float16 value that passes between fragments is rounded to float16 there,
        as the model declares it (inside one session ONNX Runtime's CPU provider computes most float16
        nodes in float32 between Casts it removes, so a walk's outputs may differ from one session's).

        Only what earlier trials did not compute runs: every value a walk passes between fragments is
        kept on disk under the signature of the computation that made it (``_signatures``), and the
        walk starts from the latest such values its outputs depend on. A walk's fragments end before
        each node of ``cuts`` (main-graph positions of the float32 model), where later trials that
        change that node resume, where no float16 value is alive (``_cuts``), when the model does not
        fit one session anyway."""
        model = conversion.model
        proto = model.lazy_proto
        index = GraphIndex(proto.graph)
        sigs = _signatures(proto, index)
        outputs = list(self.reference)
        stored, inputs, nodes = self._plan(index, sigs, outputs)
        feeds: dict[str, Any] = {}
        for spec in input_specs(model):
            if spec.name in inputs:
                value = self.feeds[spec.name]
                feeds[spec.name] = value.astype(spec.dtype) if value.dtype != spec.dtype else value
        feeds.update({n: self.values.get(sigs[n]) for n in stored})
        walked = model
        if stored:  # (resumed: the nodes left, reading the stored values)
            order = [i for i in index.order if i in nodes]
            infos = {v.name: v for v in proto.graph.input}
            piece = submodel(proto, index, order,
                             inputs=[_value_info(n, feeds[n]) if n in stored else infos[n] for n in feeds],
                             outputs=[onnx.ValueInfoProto(name=o) for o in outputs],
                             initializers={r for i in order for r in index.node_reads[i] if r in index.initializers},
                             graph_name=proto.graph.name)
            walked = model.derive(piece)
            index = GraphIndex(piece.graph)
        share = len(self.nodes) / max(1, len(proto.graph.node))

        def ran(chunk: list[int], _feeds: Mapping[str, Any], values: Mapping[str, Any]) -> None:
            self.work += len(chunk) * share
            for name, value in values.items():
                self.values.put(sigs.get(name), value)
            self._ran(trial=True)

        half, ends = conversion.main_float16, set(outputs) | {v.name for v in proto.graph.input}
        inside: list[set[str]] = []  # (asked of ONNX Runtime once, when a float16 value crosses fragments)

        def adapt(fragment: Model, given: Mapping[str, Any],
                  exposed: list[str]) -> tuple[Model, dict[str, Any], dict[str, str]]:
            if not any(n in half and n not in ends for n in (*given, *exposed)):
                return fragment, dict(given), {n: n for n in exposed}
            if not inside:
                inside.append(_float32_inside(model, half))
            return _widen(fragment, given, exposed, inside[0])

        graph = _Graph(walked, index, {}, self.model.name)
        walker = _Walker(graph, "ort", feeds, set(outputs),
                         budget=self.budget, label=f"{self.model.name} (mixed precision, trial)",
                         first_step=self._first_step(), visit=ran, adapt=adapt)
        # (the whole budget, not compare's quarter of a run: one side runs, and a model within it runs
        # in one session, exactly as the user's session will)
        walker.budget = max(self.budget, 1)
        # Cuts only where the walk has fragments anyway: even where only float32 values pass, a cut
        # can change what ONNX Runtime computes (it picks a float16 or float32 kernel for a node by
        # its neighbours: on the 403 MB transformer, trials in one session kept 8 LayerNormalizations,
        # trials cut so 12), and a model within the budget is judged as the user's session runs it.
        if graph.run_bytes() > walker.budget:
            walker.cuts = _cuts(walker.order, index, conversion.main_float16,
                                [i for i in (self._converted_node(index, k) for k in cuts) if i is not None])
        got: dict[str, Any] = {}
        for batch in walker:
            got.update(batch)
        return {o: got[o] for o in outputs}

    def _plan(self, index: GraphIndex, sigs: Mapping[str, bytes],
              outputs: list[str]) -> tuple[list[str], set[str], set[int]]:
        """What a walk of ``outputs`` runs: the stored values it starts from (the latest it depends on),
        the graph inputs it reads and the nodes it computes."""
        stored: list[str] = []
        inputs: set[str] = set()
        nodes: set[int] = set()
        seen: set[str] = set()
        stack = list(outputs)
        while stack:
            name = stack.pop()
            if name in seen or name in index.initializers:
                continue
            seen.add(name)
            if sigs.get(name) in self.values:
                stored.append(name)
            elif name in index.input_set:
                inputs.add(name)
            else:
                producer = index.producer.get(name)
                if producer is not None and producer not in nodes:
                    nodes.add(producer)
                    stack.extend(index.node_reads[producer])
        return stored, inputs, nodes

    def _converted_node(self, index: GraphIndex, k: int) -> int | None:
        """Where node ``k`` of the float32 model is in a converted model's ``index`` (found by its
        outputs; a graph output the conversion renamed is made by a Cast that reads it)."""
        node = self.nodes[k]
        outputs = set(index.outputs)
        for out in node.output:
            found = index.producer.get(out)
            if found is None:
                continue
            made = index.nodes[found]
            if made.op_type == "Cast" and node.op_type != "Cast" and out in outputs and made.input:
                found = index.producer.get(made.input[0], found)
            return found
        return None

    # ------------------------------------------------------------------ reference and local errors

    def _capture(self, candidates: list[int]) -> None:
        """The float32 model's outputs and every candidate's local error, in one walk: the float32 model
        runs fragment by fragment, and after each fragment its candidates run again in float16, each
        on the float32 values of its own inputs (the fragment's feeds and values, so that nothing is
        held beyond the walk's own values)."""
        weights = self.index.initializers
        self.constants = {o: i for i, n in enumerate(self.nodes) if n.op_type == "Constant" and n.domain in ("", "ai.onnx")
                          for o in n.output}
        reads = {k: [r for r in dict.fromkeys(self.index.node_reads[k]) if r not in weights and r not in self.constants]
                 for k in candidates}
        outputs = {k: [o for o in self.nodes[k].output if o] for k in candidates}
        wanted = {n for k in candidates for n in (*reads[k], *outputs[k])} | set(self.index.outputs)
        chosen = set(candidates)

        def measure(chunk: list[int], feeds: Mapping[str, Any], values: Mapping[str, Any]) -> None:
            self.fragment_runs += 1
            self.work += len(chunk)
            self._progress()
            ready = [k for k in chunk if k in chosen]
            if not ready:
                return
            held = {**feeds, **values}
            for part in _chunks(ready, reads, outputs, held, self.budget):
                self._measure_fragment(part, reads, outputs, held)

        walker = _Walker(_Graph(self.model, self.index, {}, self.model.name), "ort", self.feeds, wanted,
                         budget=self.budget // 2, label=f"{self.model.name} (float32, captured)",
                         first_step=self._first_step(), visit=measure)
        graph_outputs = set(self.index.outputs)
        for batch in walker:
            self.reference.update({n: v for n, v in batch.items() if n in graph_outputs})
        missing = [n for n in self.index.outputs if n not in self.reference]
        if missing:  # (an output that is a weight, or that no node computes)
            self.reference.update(run(self.model, self.feeds, outputs=missing))
            self.work += len(self.nodes)
            self._ran(trial=False)
        self.reference = {n: self.reference[n] for n in self.index.outputs}

    def _measure_fragment(self, ready: list[int], reads: Mapping[int, list[str]], outputs: Mapping[int, list[str]],
                          held: Mapping[str, Any]) -> None:
        """Run ``ready``'s nodes in float16, each on the float32 values of its inputs, in one decoupled
        model (every read a graph input, every output renamed), and record their local errors."""
        measurable = [k for k in ready if all(isinstance(held.get(r), np.ndarray) for r in reads[k])]
        if not measurable:
            return
        inputs = list(dict.fromkeys(r for k in measurable for r in reads[k]))
        produced = [o for k in measurable for o in outputs[k]]
        # (a Constant's value is converted with its readers, as in the whole model: it comes along)
        sources = sorted({self.constants[r] for k in measurable for r in self.index.node_reads[k] if r in self.constants})
        proto = submodel(self.model.lazy_proto, self.index, [*sources, *measurable],
                         inputs=[_value_info(n, held[n]) for n in inputs], outputs=[],
                         initializers={r for k in measurable for r in self.index.node_reads[k]
                                       if r in self.index.initializers},
                         graph_name=f"{self.model.lazy_proto.graph.name}_local")
        taken = self.taken
        renamed: dict[str, str] = {}
        for node in proto.graph.node[len(sources):]:
            for j, out in enumerate(node.output):
                if out:
                    renamed[out] = node.output[j] = _fresh(f"{out}/float16", taken)
        del proto.graph.value_info[:]
        proto.graph.output.extend(onnx.ValueInfoProto(name=renamed[o]) for o in produced)
        types = dict(self.types)
        types.update({new: self.types[old] for old, new in renamed.items() if old in self.types})
        try:
            twin = convert_float16(self.model.derive(proto), keep_io_types=True, keep_op=self.keep_op, keep_node=[],
                                   keep_main={}, types=types, store=self.store)
            first = self.nodes[measurable[0]].name or self.nodes[measurable[0]].op_type
            got = execute(twin.model, {n: held[n] for n in inputs}, [renamed[o] for o in produced], "ort",
                          f"{self.model.name}: {len(measurable)} node(s) in float16 from {first!r}")
        except (RuntimeFailure, UsageError) as err:
            log.info("local errors not measured for %d node(s): %s", len(measurable), err)
            return
        finally:
            self.fragment_runs += 1
            self.work += len(measurable)
            self._progress()
        for k in measurable:
            figures = [_local(np.asarray(got[renamed[o]]), np.asarray(held[o]))
                       for o in outputs[k] if isinstance(held.get(o), np.ndarray)]
            if figures:
                self.local[k] = _Local(max(f.max_abs for f in figures), max(f.relative for f in figures),
                                       any(f.overflow for f in figures))

    def _all_float32_is_the_model(self) -> bool:
        """Whether keeping every candidate float32 gives back the float32 model's computation exactly, so
        that it passes without a run: float32 inputs and outputs kept, and nothing converted outside the
        candidates (no If/Loop/Scan bodies, local functions or Casts to float32, which convert anyway)."""
        if not self.keep_io_types or len(self.model.lazy_proto.functions):
            return False
        for node in self.nodes:
            if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
                return False
            if node.op_type == "Cast" and any(a.name == "to" and a.i == onnx.TensorProto.FLOAT for a in node.attribute):
                return False
        return True

    def _first_step(self) -> int:
        """How many nodes a walk's first fragment runs: the fragment budget over four times the largest
        graph input or output (the walk grows or shrinks its fragments from there)."""
        largest = max((v.nbytes for v in (*self.feeds.values(), *self.reference.values())
                       if isinstance(v, np.ndarray)), default=0)
        return max(1, self.budget // max(4 * largest, 1))

    # ------------------------------------------------------------------ helpers

    def _figures(self, k: int, failing: _Trial | None = None) -> tuple[float | None, float | None, float | None]:
        local = self.local.get(k)
        output = failing.worst if failing is not None else None
        if local is None:
            return None, output, None
        return (math.inf if local.overflow else local.max_abs), output, (math.inf if local.overflow else local.relative)

    def _label(self, k: int) -> str:
        node = self.nodes[k]
        return node.name or unnamed_label(node, k)

    def _ran(self, *, trial: bool) -> None:
        if trial:
            self.trial_runs += 1
        else:
            self.fragment_runs += 1
        self._progress()

    def _progress(self) -> None:
        if self.progress is not None:
            # (expected: the trials left of about 3 + 2·log2(nodes), at the first walk's sessions each)
            done = self.trial_runs + self.fragment_runs
            left = max(1, self.expected - len(self.trials)) * max(1, self.fragment_runs // 2)
            self.progress(done, done + left)


def _float32_inside(model: Model, half: Set[str]) -> set[str]:
    """The float16 tensors of ``model`` that ONNX Runtime's CPU provider holds in float32 inside one
    session: it computes a float16 node it has no float16 kernel for in float32 between Casts it
    inserts, and removes such Casts in pairs, so the tensor between two such nodes never exists. Read
    from the graph it optimizes for a weightless copy (the weights become graph inputs)."""
    proto = onnx.ModelProto()
    proto.CopyFrom(model.lazy_proto)
    graph = proto.graph
    weights = list(graph.initializer)
    del graph.initializer[:], graph.sparse_initializer[:]
    listed = {v.name for v in graph.input}
    graph.input.extend(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                       for t in weights if t.name not in listed)
    try:
        optimized = Settings().optimized(Model(proto))
    except RuntimeFailure as err:
        log.info("ONNX Runtime's graph of the float16 model is not available (%s): float16 values are "
                 "passed between fragments as float16", err)
        return set()
    present = {n for node in optimized.graph.node for n in (*node.input, *node.output)}
    present.update(v.name for v in optimized.graph.output)
    return {name for name in half if name not in present}


def _widen(fragment: Model, feeds: Mapping[str, Any], exposed: list[str],
           wide: Set[str]) -> tuple[Model, dict[str, Any], dict[str, str]]:
    """``fragment`` rewritten so that its float16 values in ``wide`` (those one session holds in
    float32) enter and leave it as float32, with a Cast at each end that ONNX Runtime removes with its
    own; its readers inside read it back through float32 too, as in one session."""
    graph = fragment.lazy_proto.graph
    taken = {n for node in graph.node for n in (*node.input, *node.output)} | {v.name for v in graph.input}
    run_feeds = dict(feeds)
    first: list[onnx.NodeProto] = []
    for value in graph.input:
        name = value.name
        given = feeds.get(name)
        if name not in wide or not isinstance(given, np.ndarray) or given.dtype.kind != "f":
            continue
        outer = _fresh(f"{name}/float32", taken)
        run_feeds.pop(name)
        run_feeds[outer] = given.astype(np.float32)
        value.CopyFrom(onnx.helper.make_tensor_value_info(outer, onnx.TensorProto.FLOAT, list(given.shape)))
        first.append(onnx.helper.make_node("Cast", [outer], [name], to=onnx.TensorProto.FLOAT16, name=f"{outer}/Cast"))
    fetch = {name: name for name in exposed}
    after: dict[str, list[onnx.NodeProto]] = {}
    for value in graph.output:
        name = value.name
        if name not in wide:
            continue
        outer, back = _fresh(f"{name}/float32", taken), _fresh(f"{name}/float16", taken)
        after[name] = [onnx.helper.make_node("Cast", [name], [outer], to=onnx.TensorProto.FLOAT, name=f"{outer}/Cast"),
                       onnx.helper.make_node("Cast", [outer], [back], to=onnx.TensorProto.FLOAT16, name=f"{back}/Cast")]
        for node in graph.node:
            for j, read in enumerate(node.input):
                if read == name:
                    node.input[j] = back
        fetch[name] = outer
        value.name = outer
        value.ClearField("type")
    if first or after:
        nodes = list(first)
        for node in graph.node:
            nodes.append(node)
            for out in node.output:
                nodes.extend(after.get(out, ()))
        del graph.node[:]
        graph.node.extend(nodes)
    return fragment, run_feeds, fetch


def _cuts(order: list[int], index: GraphIndex, half: Set[str], nodes: list[int]) -> set[int]:
    """Where a walk over ``order`` may end fragments so that a later trial changing one of ``nodes``
    resumes there: for each, the last position at or before it and the first after it where no
    float16 value is alive (a float16 value passed between fragments would be rounded to float16
    there, where one session keeps the float32 value it computed: the cut would change the outputs).
    Returns the nodes the fragments end before."""
    last_use: dict[str, int] = {}
    for p, i in enumerate(order):
        for name in index.node_reads[i]:
            last_use[name] = p
    clean: list[bool] = []  # clean[p]: no float16 value alive before position p
    alive = {n for n in index.input_set if n in last_use and n not in index.initializers}
    ends: dict[int, list[str]] = {}
    for name in alive:
        ends.setdefault(last_use[name], []).append(name)
    count = sum(1 for n in alive if n in half)
    for p, i in enumerate(order):
        clean.append(count == 0)
        for name in index.nodes[i].output:
            if name and last_use.get(name, -1) > p:
                ends.setdefault(last_use[name], []).append(name)
                count += name in half
        count -= sum(1 for name in ends.pop(p, []) if name in half)
    where = {i: p for p, i in enumerate(order)}
    cuts: set[int] = set()
    for node in nodes:
        at = where.get(node)
        if at is None:
            continue
        before = next((q for q in range(at, 0, -1) if clean[q]), None)
        after = next((q for q in range(at + 1, len(order)) if clean[q]), None)
        cuts.update(order[q] for q in (before, after) if q is not None)
    return cuts


class _Values:
    """Values earlier trials computed, on disk (a scratch folder removed with the search), by the
    signature of the computation that made them."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="graphkit-mixed-"))
        self.paths: dict[bytes, Path] = {}
        self._cleanup = weakref.finalize(self, shutil.rmtree, str(self.folder), True)

    def discard(self) -> None:
        """Remove the folder now."""
        self._cleanup()
        self.paths.clear()

    def __contains__(self, sig: object) -> bool:
        return sig in self.paths

    def put(self, sig: bytes | None, value: Any) -> None:
        if sig is None or sig in self.paths or not isinstance(value, np.ndarray) or value.dtype.kind not in "biufc":
            return
        path = self.folder / f"{len(self.paths)}.npy"
        np.save(path, value)
        self.paths[sig] = path

    def get(self, sig: bytes) -> np.ndarray:
        return np.asarray(np.load(self.paths[sig]))


def _signatures(proto: onnx.ModelProto, index: GraphIndex) -> dict[str, bytes]:
    """Each main-graph tensor's signature: a digest of the computation that makes it (its node's
    operator and attributes and its inputs' signatures, down to the graph inputs and the weights' bytes
    or places on disk). Two tensors with one signature hold the same value on the same inputs."""
    sigs: dict[str, bytes] = {}
    for tensor in proto.graph.initializer:
        sigs[tensor.name] = _tensor_signature(tensor)
    for value in proto.graph.input:
        sigs.setdefault(value.name, _digest(b"input", value.SerializeToString()))
    shell = onnx.NodeProto()
    for i in index.order:
        node = index.nodes[i]
        shell.CopyFrom(node)
        del shell.input[:], shell.output[:]
        shell.name = ""
        parts = [shell.SerializeToString(), *(sigs.get(r, b"?" + r.encode()) for r in index.node_reads[i])]
        made = _digest(*parts)
        for j, out in enumerate(node.output):
            if out:
                sigs[out] = _digest(made, str(j).encode())
    return sigs


def _tensor_signature(tensor: onnx.TensorProto) -> bytes:
    if tensor.ByteSize() <= 1 << 16:
        return _digest(b"weight", tensor.SerializeToString())
    shell = onnx.TensorProto()
    shell.CopyFrom(tensor)
    for name in ("raw_data", "float_data", "int32_data", "int64_data", "double_data", "uint64_data"):
        shell.ClearField(name)
    payload = [tensor.raw_data, np.asarray(tensor.float_data).tobytes(), np.asarray(tensor.int32_data).tobytes(),
               np.asarray(tensor.int64_data).tobytes(), np.asarray(tensor.double_data).tobytes()]
    return _digest(b"weight", shell.SerializeToString(), *payload)


def _digest(*parts: bytes) -> bytes:
    h = hashlib.blake2b(digest_size=20)
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.digest()


def _local(half: np.ndarray, want: np.ndarray) -> _Local:
    """One output's local error: ``half`` (the float16 node's, cast back) against ``want`` (float32's).

    Ranked by the relative RMS error rather than by the worst element against the tolerance: on a
    transformer (265 nodes) the worst-element ranking needed 54 nodes float32 before the outputs
    passed, the RMS ranking 6 (its LayerNormalizations)."""
    if half.shape != want.shape:
        return _Local(math.inf, math.inf, False)
    if want.dtype.kind not in "fiuc" or half.dtype.kind not in "fiuc":
        same = bool(np.array_equal(half, want))
        return _Local(0.0 if same else math.inf, 0.0 if same else math.inf, False)
    got = half.astype(np.float64)
    ref = want.astype(np.float64)
    finite = np.isfinite(ref)
    overflow = bool(np.any(finite & ~np.isfinite(got)))
    both = finite & np.isfinite(got)
    if not both.any():
        return _Local(0.0, 0.0, overflow)
    diff = np.abs(got[both] - ref[both])
    error = float(np.sqrt(np.mean(diff * diff)))
    scale = float(np.sqrt(np.mean(ref[both] * ref[both])))
    relative = error / scale if scale > 0 else (math.inf if error > 0 else 0.0)
    return _Local(float(diff.max()), relative, overflow)


def _nbytes(value: Any) -> int:
    return int(value.nbytes) if isinstance(value, np.ndarray) else 0


def _chunks(ready: list[int], reads: Mapping[int, list[str]], outputs: Mapping[int, list[str]],
            held: Mapping[str, Any], budget: int) -> list[list[int]]:
    """``ready`` in order, cut so that each local measurement's values (its distinct inputs and its
    outputs) stay within compare's fragment budget: a capture fragment can expose more than that
    (light_densenet121's last fragment exposed 337 MB, and one decoupled model over all of it
    peaked at 914 MB)."""
    chunks: list[list[int]] = [[]]
    seen: set[str] = set()
    total = 0
    for k in ready:
        names = [n for n in (*reads[k], *outputs[k]) if n not in seen]
        n_bytes = sum(_nbytes(held.get(n)) for n in names)
        if chunks[-1] and total + n_bytes > budget:
            chunks.append([])
            seen, total = set(), 0
            names = list(dict.fromkeys((*reads[k], *outputs[k])))
            n_bytes = sum(_nbytes(held.get(n)) for n in names)
        chunks[-1].append(k)
        seen.update(names)
        total += n_bytes
    return chunks


def _fresh(base: str, taken: set[str]) -> str:
    name, k = base, 1
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    taken.add(name)
    return name
