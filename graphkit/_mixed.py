"""Mixed precision chosen by measurement: the fewest float32 nodes that keep the outputs within tolerance.

The search never runs the model once per node. One comparison of the float32 model with its float16
conversion (compare's per-tensor figures and its local/inherited split, which re-runs a failing node
alone on the float32 side's inputs) finds the nodes that overflow float16 on their own: they stay
float32. If the outputs still leave tolerance, a bisection over the execution order finds the first
node whose conversion (with the nodes before it converted and those after it float32) takes them out
of tolerance; it stays float32, and the search resumes after it. Each bisection costs log2(nodes)
runs, so the whole search costs about (kept nodes + 1) · log2(nodes) runs.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from graphkit import _check_args as argcheck
from graphkit._compare import compare, tensor_figures
from graphkit._convert import Float16Conversion, convert_float16, element_types, unnamed_label
from graphkit._graph import GraphIndex
from graphkit._model import Model
from graphkit._options import FeedOptions, Tolerance
from graphkit._run import input_specs, make_feeds, run
from graphkit.errors import UsageError

__all__ = ["MIXED_TOLERANCE", "MixedNode", "MixedPrecision", "auto_mixed_precision"]

log = logging.getLogger(__name__)

#: The default tolerance of the outputs (float16 keeps about three decimal digits).
MIXED_TOLERANCE = Tolerance(atol=1e-3, rtol=1e-2)

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class MixedNode:
    """A node the search keeps float32, and why.

    Attributes:
        node: Its name (``#k``, its position, when unnamed).
        op_type: Its operator.
        reason: Why: it overflows on its own, or the outputs leave tolerance when it is float16.
        local_max_abs: Its own error in float16, re-run on the float32 side's inputs (inf: it
            overflows), when measured.
        output_max_abs: The largest output error with it converted (in the run that singled it out).
    """

    node: str
    op_type: str
    reason: str
    local_max_abs: float | None = None
    output_max_abs: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"node": self.node, "op_type": self.op_type, "reason": self.reason,
                "local_max_abs": _json(self.local_max_abs), "output_max_abs": _json(self.output_max_abs)}


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
        runs: How many runs of the whole model the search took (each side of the comparison counts
            its fragment runs).
        node_runs: How many single nodes (or small fragments) it re-ran to tell local errors from
            inherited ones.
        candidates: How many main-graph nodes could have stayed float32.
    """

    model: Model = field(repr=False)
    conversion: Float16Conversion = field(repr=False)
    kept: tuple[MixedNode, ...]
    passed: bool
    output_errors: dict[str, float]
    tolerance: Tolerance
    runs: int
    node_runs: int
    candidates: int

    def keep_node(self) -> list[str]:
        """The names of the kept nodes, as ``to_float16(keep_node=...)`` takes them."""
        return [k.node for k in self.kept]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (without the model)."""
        return {"passed": self.passed, "kept": [k.to_dict() for k in self.kept],
                "output_errors": {k: _json(v) for k, v in self.output_errors.items()},
                "tolerance": self.tolerance.to_dict(), "runs": self.runs, "node_runs": self.node_runs,
                "candidates": self.candidates, "conversion": self.conversion.to_dict()}


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
        progress: Called with (runs done, runs expected at most) after each run of the search.

    Returns:
        The model and the search's report; ``passed`` is False when even the float32 nodes found
        cannot bring the outputs within tolerance (for instance float16 inputs without
        ``keep_io_types`` that lose too much).

    Raises:
        NodeNotFoundError: A ``keep_node`` name is no node of the model.
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
    if progress is not None and not callable(progress):
        raise UsageError("progress= must be a function (done, total)", hint="pass a callable or None")
    return _Search(model, tolerance, feeds, feed_options, keep_io_types, ops, nodes, progress).run()


class _Search:
    def __init__(self, model: Model, tolerance: Tolerance, feeds: Mapping[str, Any] | None,
                 feed_options: FeedOptions, keep_io_types: bool, keep_op: list[str], keep_node: list[str],
                 progress: Progress | None) -> None:
        self.model = model
        self.tolerance = tolerance
        self.keep_io_types = keep_io_types
        self.keep_op = keep_op
        self.keep_node = keep_node
        self.progress = progress
        self.feeds = make_feeds(model, feeds, feed_options=feed_options)
        self.runs = 0
        self.node_runs = 0
        self.nodes = model.lazy_proto.graph.node
        self.types = element_types(model)
        self.expected = 0

    def run(self) -> MixedPrecision:
        self.reference = run(self.model, self.feeds)
        self._ran()
        full = self._convert({})
        candidates = [k for k in GraphIndex(self.model.lazy_proto.graph).topological_order()
                      if k in set(full.main_converted)]
        self.expected = 3 + max(1, math.ceil(math.log2(len(candidates) + 1))) * 2
        errors, passed = self._evaluate(full)
        kept: dict[int, MixedNode] = {}
        conversion = full
        if not passed:  # (can float32 nodes help at all? not when the float16 inputs alone lose too much)
            everything = {k: "auto-mixed: searching" for k in candidates}
            if not self._evaluate(self._convert(everything))[1]:
                log.info("the outputs leave tolerance even with every node float32")
                return MixedPrecision(full.model, full, (), False, errors, self.tolerance, self.runs,
                                      self.node_runs, len(candidates))
            kept.update(self._overflowing(full))
        if kept:
            conversion = self._convert(self._reasons(kept))
            errors, passed = self._evaluate(conversion)
        start = 0
        while not passed:
            order = [k for k in candidates if k not in kept]
            found = self._first_breaking(order, kept, start)
            if found is None:
                break
            position, culprit, worst = found
            node = self.nodes[culprit]
            kept[culprit] = MixedNode(self._label(culprit), node.op_type,
                                      "the outputs leave tolerance when it computes in float16", None, worst)
            start = position - 1  # (the nodes before it passed converted: the next culprit comes later)
            conversion = self._convert(self._reasons(kept))
            errors, passed = self._evaluate(conversion)
        return MixedPrecision(conversion.model, conversion, self._ordered(kept, candidates), passed, errors,
                              self.tolerance, self.runs, self.node_runs, len(candidates))

    @staticmethod
    def _ordered(kept: Mapping[int, MixedNode], candidates: list[int]) -> tuple[MixedNode, ...]:
        return tuple(kept[k] for k in sorted(kept, key=candidates.index))

    # ------------------------------------------------------------------ steps

    def _convert(self, keep_main: Mapping[int, str]) -> Float16Conversion:
        return convert_float16(self.model, keep_io_types=self.keep_io_types, keep_op=self.keep_op,
                               keep_node=self.keep_node, keep_main=keep_main, types=self.types)

    def _reasons(self, kept: Mapping[int, MixedNode]) -> dict[int, str]:
        return {k: f"auto-mixed: {m.reason}" for k, m in kept.items()}

    def _evaluate(self, conversion: Float16Conversion) -> tuple[dict[str, float], bool]:
        """Run the converted model: each output's max abs error, and whether all are within tolerance."""
        model = conversion.model
        feeds = {}
        for spec in input_specs(model):
            value = self.feeds[spec.name]
            feeds[spec.name] = value.astype(spec.dtype) if value.dtype != spec.dtype else value
        got = run(model, feeds, outputs=list(self.reference))
        self._ran()
        errors: dict[str, float] = {}
        passed = True
        for name, want in self.reference.items():
            value = np.asarray(got[name])
            figures = tensor_figures(value.astype(want.dtype) if value.dtype != want.dtype else value, want,
                                     self.tolerance)
            bad = figures["nan"][0] != figures["nan"][1] or figures["inf"][0] != figures["inf"][1]
            errors[name] = math.inf if bad else float(figures["max_abs"])
            passed = passed and bool(figures["passed"]) and not bad
        return errors, passed

    def _overflowing(self, conversion: Float16Conversion) -> dict[int, MixedNode]:
        """The converted nodes that produce NaN or Inf on their own (re-run on float32 inputs), in one comparison."""
        with np.errstate(over="ignore"):  # (float32 inputs beyond float16's range become inf: what is measured)
            comparison = compare(self.model, conversion.model, feeds=self.feeds,
                                 tolerance=Tolerance(atol=math.inf, rtol=0.0), local_checks=len(self.nodes))
        self.runs += comparison.runs
        producer = {o: k for k, n in enumerate(self.nodes) for o in n.output if o}
        converted = set(conversion.main_converted)
        found: dict[int, MixedNode] = {}
        for diff in comparison.tensors:
            if diff.origin is not None:
                self.node_runs += 1
            k = producer.get(diff.name)
            if diff.origin == "local" and k is not None and k in converted and k not in found:
                found[k] = MixedNode(self._label(k), self.nodes[k].op_type,
                                     "overflows float16 on its own float32 inputs (NaN/Inf where float32 has none)",
                                     diff.local_max_abs, None)
        return found

    def _first_breaking(self, order: list[int], kept: Mapping[int, MixedNode],
                        start: int) -> tuple[int, int, float] | None:
        """Bisect ``order`` (execution order, kept nodes left out) for the first node whose conversion,
        with every node before it converted and every node after it float32, puts the outputs out of
        tolerance: (its position in ``order``, its node, the output error then), or None."""
        lo = min(start, len(order))  # converting order[:lo] passes (nothing, or what an earlier search proved)
        hi = len(order)  # converting order[:hi] fails (the current conversion failed)
        worst = math.inf
        while hi - lo > 1:
            mid = (lo + hi) // 2
            reasons = self._reasons(kept)
            reasons.update({k: "auto-mixed: searching" for k in order[mid:]})
            errors, passed = self._evaluate(self._convert(reasons))
            if passed:
                lo = mid
            else:
                hi, worst = mid, max(errors.values(), default=math.inf)
        if hi == 0 or hi > len(order):
            return None
        return hi, order[hi - 1], worst

    def _label(self, k: int) -> str:
        node = self.nodes[k]
        return node.name or unnamed_label(node, k)

    def _ran(self) -> None:
        self.runs += 1
        if self.progress is not None:
            self.expected = max(self.expected, self.runs + 1)
            self.progress(self.runs, self.expected)
