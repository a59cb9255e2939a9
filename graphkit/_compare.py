"""Per-tensor accuracy comparison, the first node where numbers diverge, and marker nodes.

``compare`` runs the same inputs through two sides and compares every tensor both sides have, in
the candidate's topological order:

- one model on two backends: ONNX Runtime with all optimizations (the candidate) against ONNX
  Runtime without optimizations or onnx's ReferenceEvaluator (the reference). The evaluator runs
  with graphkit._reference_ops' spec-faithful kernels for the operators onnx 1.23 gets wrong
  (BatchNormalization opsets 7-13, LRN, Softmax/LogSoftmax/Hardmax before opset 13), so it is an
  independent second opinion rather than a source of false alarms;
- two models (the first is the reference): tensors matched by name, by marker name, by a mapping,
  and graph outputs by position;
- a model against reference values in an ``.npz`` keyed by tensor or marker name.

Memory stays bounded: each side is run fragment by fragment (consecutive nodes in topological order,
each fragment exposing a bounded number of bytes); a tensor's figures are computed as soon as both
sides have it, and its arrays are dropped unless a later local check needs them.

The first tensor out of tolerance names the *first divergence*. Its node (or the smallest fragment
ending at it whose inputs the reference side knows) is re-run on the candidate side with the reference
side's inputs: if it still diverges, the error is *local* to that node; otherwise it is *inherited*.
"""

from __future__ import annotations

import fnmatch
import logging
import math
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from graphkit import _backends
from graphkit import _check_args as argcheck
from graphkit._arrays import open_npz
from graphkit._backends import BACKENDS, side_settings
from graphkit._custom_ops import CustomOp
from graphkit._files import check_regular, exists, read_data
from graphkit._graph import GraphIndex, subgraphs
from graphkit._io import tensor_nbytes, tensor_value
from graphkit._model import Model
from graphkit._options import Backend, FeedOptions, Provider, Tolerance
from graphkit._ort import Settings
from graphkit._run import FeedNote, index_bounds, input_specs, make_feeds, plan_feeds, settings, value_nbytes
from graphkit._submodel import submodel
from graphkit._typing import tensor_types
from graphkit._validate import require_sound
from graphkit.errors import (
    ArgumentTypeError,
    FeedError,
    NameNotFoundError,
    RuntimeFailure,
    TensorNotFoundError,
    UsageError,
    did_you_mean,
    not_found,
)

__all__ = [
    "BACKENDS",
    "Comparison",
    "Divergence",
    "Fusion",
    "MarkerResult",
    "TensorDiff",
    "Tolerance",
    "compare",
    "load_mapping",
    "load_reference",
    "markers",
    "tensor_figures",
]

log = logging.getLogger(__name__)

DEFAULT_FRAGMENT_BYTES = 64 * 2**20
_CHUNK = 1 << 18  # elements per step when computing figures: their float64 temporaries stay near 12 MB
_MAX_FRAGMENT_NODES = 64  # the largest fragment a local check re-runs
_MIN_FRAGMENT_BYTES = 2**20  # the smallest budget a model's size sets (fragment_bytes may set less)
_FIRST_NAMES = 5  # unmatched names listed in a report (the counts are complete)

Progress = Callable[[int, int], None]
#: A fragment rewritten before it runs: (model, feeds, exposed) -> (model, feeds, exposed name -> output).
Adapt = Callable[[Model, Mapping[str, Any], list[str]], tuple[Model, dict[str, Any], dict[str, str]]]
#: A fragment seen after it ran: (its nodes, its feeds, its exposed values).
Visit = Callable[[list[int], Mapping[str, Any], Mapping[str, Any]], None]


# ------------------------------------------------------------------------------------------ results


@dataclass(frozen=True)
class TensorDiff:
    """The figures of one tensor compared on both sides.

    Attributes:
        name: The tensor's name in the candidate.
        reference_name: Its name on the reference side (an npz key, or a tensor of the first model).
        marker: The marker's name, when the tensor is a marker's output.
        node: The node producing it in the candidate ("" for graph inputs).
        op_type: That node's operator.
        dtype: The candidate's dtype (``float16/float32`` when the sides differ).
        shape: The candidate's shape.
        reference_shape: The reference's shape (differs only on a shape mismatch).
        max_abs: Largest absolute error over elements finite on both sides.
        max_rel: Largest relative error ``|c - r| / |r|`` (inf where r is 0 and c is not).
        mean_abs: Mean absolute error.
        mse: Mean squared error.
        cosine: Cosine similarity of the flattened tensors (1.0 for two zero tensors).
        out_of_tolerance: Share of elements out of tolerance (0..1), NaN/Inf mismatches included.
        needed_atol: The smallest atol that would pass with this rtol.
        needed_rtol: The smallest rtol that would pass with this atol.
        nan: NaN counts (candidate, reference).
        inf: Inf counts (candidate, reference).
        tolerance: The tolerance applied.
        passed: Whether the tensor is within tolerance.
        origin: For a failed tensor: "local" (its node diverges on reference inputs), "inherited", or
            None when not checked.
        local_max_abs: The max abs error of the node re-run on the reference side's inputs.
        local_nonfinite: How that re-run's NaN/Inf counts differ from the reference's, when they do.
        reason: Why it failed when not by tolerance (shape mismatch, NaN/Inf mismatch).
        sample: For a failed tensor, up to ``SAMPLE_SIZE`` (candidate, reference) value pairs taken
            evenly, the worst element among them (the HTML report's histograms and scatter).
    """

    name: str
    reference_name: str
    marker: str | None
    node: str
    op_type: str
    dtype: str
    shape: tuple[int, ...]
    reference_shape: tuple[int, ...]
    max_abs: float
    max_rel: float
    mean_abs: float
    mse: float
    cosine: float
    out_of_tolerance: float
    needed_atol: float
    needed_rtol: float
    nan: tuple[int, int]
    inf: tuple[int, int]
    tolerance: Tolerance
    passed: bool
    origin: str | None = None
    local_max_abs: float | None = None
    reason: str | None = None
    sample: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False, compare=False)
    local_nonfinite: str | None = None

    @property
    def label(self) -> str:
        """The marker's name if any, else the tensor's name."""
        return self.marker or self.name

    @property
    def nonfinite(self) -> str | None:
        """How the NaN/Inf counts differ ("candidate 32448 Inf, reference 0"), or None when they agree
        (``max_abs`` is over the pairs finite on both sides, so it cannot show this)."""
        return nonfinite_text(self.nan, self.inf)

    @property
    def error_text(self) -> str:
        """The error in words: how the NaN/Inf counts differ, else the max abs error."""
        return self.nonfinite or f"max abs error {self.max_abs:.3g}"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (inf and NaN as strings, which JSON cannot hold)."""
        return {
            "name": self.name,
            "reference_name": self.reference_name,
            "marker": self.marker,
            "node": self.node,
            "op_type": self.op_type,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "reference_shape": list(self.reference_shape),
            "max_abs": _json_float(self.max_abs),
            "max_rel": _json_float(self.max_rel),
            "mean_abs": _json_float(self.mean_abs),
            "mse": _json_float(self.mse),
            "cosine": _json_float(self.cosine),
            "out_of_tolerance": _json_float(self.out_of_tolerance),
            "needed_atol": _json_float(self.needed_atol),
            "needed_rtol": _json_float(self.needed_rtol),
            "nan": list(self.nan),
            "inf": list(self.inf),
            "atol": self.tolerance.atol,
            "rtol": self.tolerance.rtol,
            "passed": self.passed,
            "origin": self.origin,
            "local_max_abs": None if self.local_max_abs is None else _json_float(self.local_max_abs),
            "local_nonfinite": self.local_nonfinite,
            "reason": self.reason,
        }


def _json_float(value: float) -> float | str:
    return value if math.isfinite(value) else str(value)


@dataclass(frozen=True)
class Divergence:
    """The first node (in topological order) whose output leaves tolerance.

    Attributes:
        node: The node's name (or label when unnamed).
        op_type: Its operator.
        tensor: The first tensor out of tolerance.
        marker: The marker's name, when that tensor is a marker's output.
        inputs: The node's inputs.
        max_abs: The tensor's max abs error in the full run.
        local: True when the node (fragment) still diverges when re-run on the reference side's
            inputs; False when its error is inherited; None when it could not be re-run.
        local_max_abs: The max abs error of that re-run.
        nonfinite: How the tensor's NaN/Inf counts differ from the reference's ("candidate 32448 Inf,
            reference 0"), when they do: then ``max_abs`` (over finite pairs) does not show the error.
        local_nonfinite: The same for the re-run.
        fragment: The nodes re-run (just ``node`` unless the reference side lacks its inputs).
        culprit: The node (or nodes) where the numbers go wrong: this one when it diverges on the
            reference side's inputs, or when its compared inputs are within tolerance and its output
            is not (it amplifies differences within tolerance, or ONNX Runtime fused it with its
            neighbours when capturing: then the fragment's nodes are named).
        culprit_reason: Why that node is the culprit.
    """

    node: str
    op_type: str
    tensor: str
    marker: str | None
    inputs: tuple[str, ...]
    max_abs: float
    local: bool | None
    local_max_abs: float | None
    fragment: tuple[str, ...]
    culprit: str = ""
    culprit_reason: str = ""
    nonfinite: str | None = None
    local_nonfinite: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "node": self.node,
            "op_type": self.op_type,
            "tensor": self.tensor,
            "marker": self.marker,
            "inputs": list(self.inputs),
            "max_abs": _json_float(self.max_abs),
            "local": self.local,
            "local_max_abs": None if self.local_max_abs is None else _json_float(self.local_max_abs),
            "nonfinite": self.nonfinite,
            "local_nonfinite": self.local_nonfinite,
            "fragment": list(self.fragment),
            "culprit": self.culprit,
            "culprit_reason": self.culprit_reason,
        }


@dataclass(frozen=True)
class Fusion:
    """A candidate tensor whose producer absorbed reference nodes (an optimizer's fusion).

    Attributes:
        tensor: The candidate tensor (matched on both sides).
        node: Its producer in the candidate.
        op_type: That producer's operator (``FusedConv``, or the same operator with folded weights).
        absorbed: Reference tensors between this one and the previous matched ones that the
            candidate does not have (their nodes were folded into ``node``).
        group: One model on ONNX Runtime with optimizations against a side without: the model's
            nodes ONNX Runtime fused into ``node`` (conv, bn, relu); ``absorbed`` are then the
            tensors between them, which it never computes (not compared).
    """

    tensor: str
    node: str
    op_type: str
    absorbed: tuple[str, ...]
    group: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"tensor": self.tensor, "node": self.node, "op_type": self.op_type, "absorbed": list(self.absorbed),
                "group": list(self.group)}


@dataclass(frozen=True)
class Comparison:
    """The result of ``compare``.

    Attributes:
        reference: What the reference side is ("whole_model.onnx on ONNX Runtime (no optimizations)").
        candidate: What the candidate side is.
        tensors: Every compared tensor, in the candidate's topological order.
        first_divergence: The first node out of tolerance, or None.
        tolerance: The global tolerance.
        unmatched: Reference-side names (npz keys, tensors of the first model) that matched no
            candidate tensor.
        notes: Warnings worth showing (inputs the reference file lacks, skipped tensors).
        runs: How many fragment runs each side needed.
        feeds: How each input of the model run first was obtained (given, or generated with its dims).
        first_nonfinite: With ``check_finite``: the first candidate node producing NaN/Inf from finite
            inputs, or None.
        unmatched_candidate: Candidate tensors worth comparing that matched no reference name.
        outputs: The candidate's graph outputs that were compared.
        fusions: Candidate tensors whose producer absorbed reference nodes (two models only).
        renamed: (reference, candidate) names of tensors paired as renamed: the ones no name matched,
            when both sides have as many, made in the same execution order by the same operators
            (two models only); they are compared like the others.
    """

    reference: str
    candidate: str
    tensors: tuple[TensorDiff, ...]
    first_divergence: Divergence | None
    tolerance: Tolerance
    unmatched: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    runs: int = 0
    feeds: tuple[FeedNote, ...] = ()
    first_nonfinite: NonFinite | None = None
    unmatched_candidate: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    fusions: tuple[Fusion, ...] = ()
    renamed: tuple[tuple[str, str], ...] = ()

    @property
    def passed(self) -> bool:
        """True when every compared tensor is within tolerance (a fused or renamed value, whose
        downstream tensors match again, does not fail the comparison)."""
        return not self.failed

    @property
    def failed(self) -> list[TensorDiff]:
        """The tensors out of tolerance (fused or renamed values left out: see ``fused``)."""
        return [t for t in self.tensors if not t.passed and t.origin != "fused"]

    @property
    def fused(self) -> list[TensorDiff]:
        """Tensors out of tolerance whose value is not the reference's by design: their producer
        changed (an optimizer fused a node into it, or reused its name) and every tensor computed
        from them downstream matches again."""
        return [t for t in self.tensors if t.origin == "fused"]

    @property
    def outputs_passed(self) -> bool | None:
        """Whether the compared graph outputs are within tolerance (None when none was compared)."""
        found = [t for t in self.tensors if t.name in self.outputs]
        return all(t.passed for t in found) if found else None

    def tensor(self, name: str) -> TensorDiff:
        """The figures of a tensor, by candidate name, reference name or marker name.

        Raises:
            TensorNotFoundError: No compared tensor has that name.
        """
        for t in self.tensors:
            if name in (t.name, t.reference_name, t.marker):
                return t
        names = [t.label for t in self.tensors]
        raise not_found(TensorNotFoundError, "compared tensor", name, names)

    def to_html(self, model: Model | None = None) -> str:
        """A self-contained HTML report (no request leaves the page): the verdict and first divergence,
        the error along execution order, every tensor in a sortable table, value histograms and
        scatters of the failures and, with the candidate ``model``, the divergent node's neighbourhood.

        Raises:
            UsageError: plotly (the ``report`` extra) is not installed.
        """
        from graphkit._report import comparison_html  # (plotly is needed by reports only)

        return comparison_html(self, model=model)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: ``passed``, ``tensors``, ``first_divergence`` and the counts."""
        failed = self.failed
        return {
            "passed": self.passed,
            "reference": self.reference,
            "candidate": self.candidate,
            "tolerance": self.tolerance.to_dict(),
            "outputs_passed": self.outputs_passed,
            "compared": len(self.tensors),
            "matched": len(self.tensors),
            "failed": len(failed),
            "local": sum(1 for t in failed if t.origin == "local"),
            "inherited": sum(1 for t in failed if t.origin == "inherited"),
            "fused": [t.name for t in self.fused],
            "fusions": [f.to_dict() for f in self.fusions],
            "renamed": [{"reference": a, "candidate": b} for a, b in self.renamed],
            "first_divergence": None if self.first_divergence is None else self.first_divergence.to_dict(),
            "tensors": [t.to_dict() for t in self.tensors],
            "unmatched": {
                "reference": {"count": len(self.unmatched), "names": list(self.unmatched[:_FIRST_NAMES])},
                "candidate": {"count": len(self.unmatched_candidate),
                              "names": list(self.unmatched_candidate[:_FIRST_NAMES])},
            },
            "notes": list(self.notes),
            "runs": self.runs,
            "feeds": [n.to_dict() for n in self.feeds],
            "first_nonfinite": None if self.first_nonfinite is None else self.first_nonfinite.to_dict(),
        }


# ------------------------------------------------------------------------------------------ figures


def tensor_figures(candidate: np.ndarray, reference: np.ndarray, tolerance: Tolerance) -> dict[str, Any]:
    """Error figures of ``candidate`` against ``reference`` (same shape), computed in bounded chunks.

    Returns:
        A dict with max_abs, max_rel, mean_abs, mse, cosine, out_of_tolerance, needed_atol,
        needed_rtol, nan, inf and passed.
    """
    c_flat, r_flat = _flat(candidate), _flat(reference)
    if c_flat.dtype.kind in "OUS" or r_flat.dtype.kind in "OUS":
        return _equality_figures(c_flat, r_flat)
    acc = _Accumulator(tolerance)
    for start in range(0, max(c_flat.size, 1), _CHUNK):
        acc.add(c_flat[start : start + _CHUNK], r_flat[start : start + _CHUNK])
    return acc.result(c_flat.size)


def _flat(array: np.ndarray) -> np.ndarray:
    array = np.asarray(array)
    return array.reshape(-1)


def _equality_figures(c: np.ndarray, r: np.ndarray) -> dict[str, Any]:
    mismatched = int(np.count_nonzero(c != r)) if c.size else 0
    share = mismatched / c.size if c.size else 0.0
    return {
        "max_abs": 0.0 if not mismatched else math.inf, "max_rel": 0.0 if not mismatched else math.inf,
        "mean_abs": 0.0, "mse": 0.0, "cosine": 1.0 if not mismatched else 0.0, "out_of_tolerance": share,
        "needed_atol": 0.0 if not mismatched else math.inf, "needed_rtol": 0.0 if not mismatched else math.inf,
        "nan": (0, 0), "inf": (0, 0), "passed": not mismatched,
    }


class _Accumulator:
    """Running sums of the figures over chunks of elements."""

    def __init__(self, tolerance: Tolerance) -> None:
        self.tol = tolerance
        self.max_abs = 0.0
        self.max_rel = 0.0
        self.sum_abs = 0.0
        self.sum_sq = 0.0
        self.dot = 0.0
        self.norm_c = 0.0
        self.norm_r = 0.0
        self.out = 0
        self.need_atol = 0.0
        self.need_rtol = 0.0
        self.nan = [0, 0]
        self.inf = [0, 0]
        self.finite = 0
        self.special_out = 0  # NaN or Inf on one side only (or Infs of opposite signs)

    def add(self, c_raw: np.ndarray, r_raw: np.ndarray) -> None:
        if self._add_equal(c_raw, r_raw):
            return
        c = c_raw.astype(np.float64)
        r = r_raw.astype(np.float64)
        if not (np.isfinite(c).all() and np.isfinite(r).all()):
            c, r = self._special(c, r)
        self.finite += c.size
        if not c.size:
            return
        diff = c - r
        self.sum_sq += float(np.dot(diff, diff))
        np.abs(diff, out=diff)
        mag = np.abs(r)
        self.max_abs = max(self.max_abs, float(diff.max()))
        self.sum_abs += float(diff.sum())
        self.dot += float(np.dot(c, r))
        self.norm_c += float(np.dot(c, c))
        self.norm_r += float(np.dot(r, r))
        del c, r
        with np.errstate(over="ignore"):  # (a huge rtol makes rtol * |r| infinite: then it passes)
            slack = diff - self.tol.rtol * mag  # passes where slack <= atol
        self.out += int(np.count_nonzero(slack > self.tol.atol))
        self.need_atol = max(self.need_atol, float(slack.max()))
        del slack
        zero = mag == 0
        if zero.any():
            if np.count_nonzero(diff[zero]):
                self.max_rel = math.inf
            if np.count_nonzero(diff[zero] > self.tol.atol):
                self.need_rtol = math.inf
            keep = ~zero
            diff, mag = diff[keep], mag[keep]
        if diff.size:
            with np.errstate(over="ignore"):
                self.max_rel = max(self.max_rel, float((diff / mag).max()))
                diff -= self.tol.atol
                diff /= mag
            self.need_rtol = max(self.need_rtol, float(diff.max()))

    def _add_equal(self, c_raw: np.ndarray, r_raw: np.ndarray) -> bool:
        """The figures of a chunk equal on both sides and finite (the common case: a node both
        sides computed alike) in three passes instead of about twenty: only the norms change; the
        maxima, sums of errors and needed tolerances stay as they are. Whether it applied.
        (light_resnet50, ONNX Runtime against itself without optimizations: figures 22.6 s -> see
        bench/bench_compare.py; the same figures as the general path, tests/test_compare.py.)"""
        if c_raw.dtype != r_raw.dtype or c_raw.dtype.kind not in "fiub" or not np.array_equal(c_raw, r_raw):
            return False  # (NaN never equals itself: a chunk with one takes the general path)
        c = c_raw.astype(np.float64)
        if c_raw.dtype.kind == "f" and not np.isfinite(c).all():
            return False
        norm = float(np.dot(c, c))
        self.norm_c += norm
        self.norm_r += norm
        self.dot += norm
        self.finite += c.size
        return True

    def _special(self, c: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Count NaN/Inf on each side, count mismatched ones as out of tolerance, keep the finite pairs."""
        c_nan, r_nan = np.isnan(c), np.isnan(r)
        c_inf, r_inf = np.isinf(c), np.isinf(r)
        self.nan[0] += int(c_nan.sum())
        self.nan[1] += int(r_nan.sum())
        self.inf[0] += int(c_inf.sum())
        self.inf[1] += int(r_inf.sum())
        finite = ~(c_nan | r_nan | c_inf | r_inf)
        same_special = (c_nan & r_nan) | (c_inf & r_inf & (np.sign(c) == np.sign(r)))
        mismatched = int(np.count_nonzero(~finite & ~same_special))
        self.out += mismatched
        self.special_out += mismatched
        return c[finite], r[finite]

    def result(self, size: int) -> dict[str, Any]:
        n = max(self.finite, 1)
        if self.norm_c == 0.0 and self.norm_r == 0.0:
            cosine = 1.0
        elif self.norm_c == 0.0 or self.norm_r == 0.0:
            cosine = 0.0
        else:
            cosine = max(-1.0, min(1.0, self.dot / (math.sqrt(self.norm_c) * math.sqrt(self.norm_r))))
        # A NaN or Inf on one side only is an unbounded error that no tolerance admits; the mean,
        # MSE and cosine stay those of the pairs finite on both sides.
        unbounded = math.inf if self.special_out else 0.0
        return {
            "max_abs": max(self.max_abs, unbounded),
            "max_rel": max(self.max_rel, unbounded),
            "mean_abs": self.sum_abs / n,
            "mse": self.sum_sq / n,
            "cosine": cosine,
            "out_of_tolerance": self.out / size if size else 0.0,
            "needed_atol": max(self.need_atol, unbounded, 0.0),
            "needed_rtol": max(self.need_rtol, unbounded, 0.0),
            "nan": (self.nan[0], self.nan[1]),
            "inf": (self.inf[0], self.inf[1]),
            "passed": self.out == 0,
        }


# ------------------------------------------------------------------------------------------ markers


@dataclass(frozen=True)
class MarkerResult:
    """Markers turned into Identity nodes.

    Attributes:
        model: The model with every marker replaced by an Identity node (outputs exposed if asked).
        markers: Marker name → the tensor holding its value (the Identity's output), in graph order.
    """

    model: Model
    markers: dict[str, str]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"markers": dict(self.markers)}


def markers(
    model: Model, /, *, domain: str = "my", op: str = "Debug", attr: str = "name", expose: bool = True
) -> MarkerResult:
    """Replace marker nodes (``domain::op`` carrying a name in attribute ``attr``) by Identity nodes.

    Args:
        model: The model (not modified).
        domain: The markers' domain.
        op: The markers' op type.
        attr: The string attribute holding each marker's name.
        expose: Also make every marker's output a graph output.

    Returns:
        The new model and the marker-name → tensor-name map.

    Raises:
        NameNotFoundError: The model has no such marker node.
        UsageError: A marker lacks the name attribute, has not one input and one output, or two
            markers share a name.
    """
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    argcheck.name(domain, "domain", what="domain", empty=True)
    argcheck.name(op, "op", what="operator")
    argcheck.name(attr, "attr", what="attribute name")
    argcheck.boolean(expose, "expose")
    found = _find_markers(model, domain, op, attr)
    if not found:
        ops = sorted({f"{n.domain or 'ai.onnx'}::{n.op_type}" for n in model.lazy_proto.graph.node if n.domain not in ("", "ai.onnx")})
        raise NameNotFoundError(
            f"{model.name} has no {domain}::{op} marker nodes",
            hint=("its custom ops are " + ", ".join(ops) + "; give domain= and op=") if ops
            else "mark tensors with a Debug node carrying a 'name' attribute first",
            cli_hint=("its custom ops are " + ", ".join(ops) + "; pass --domain and --op") if ops
            else "mark tensors with a Debug node carrying a 'name' attribute first",
        )
    proto = onnx.ModelProto()
    proto.CopyFrom(model.lazy_proto)
    outputs = {o.name for o in proto.graph.output}
    for index, _label in found.values():
        node = proto.graph.node[index]
        identity = onnx.helper.make_node("Identity", [node.input[0]], [node.output[0]], name=node.name)
        node.CopyFrom(identity)
        if expose and node.output[0] not in outputs:
            proto.graph.output.append(onnx.ValueInfoProto(name=node.output[0]))
            outputs.add(node.output[0])
    _type_outputs(model.derive(proto))
    if not any(n.domain == domain for n in proto.graph.node):
        kept = [o for o in proto.opset_import if o.domain != domain]
        del proto.opset_import[:]
        proto.opset_import.extend(kept)
    mapping = {name: proto.graph.node[index].output[0] for name, (index, _) in found.items()}
    return MarkerResult(model.derive(proto), mapping)


def _find_markers(model: Model, domain: str, op: str, attr: str) -> dict[str, tuple[int, str]]:
    """Marker name → (node index, node label), checked."""
    found: dict[str, tuple[int, str]] = {}
    for i, node in enumerate(model.lazy_proto.graph.node):
        if node.op_type != op or (node.domain or "") != domain:
            continue
        label = node.name or f"node #{i}"
        values = [a for a in node.attribute if a.name == attr]
        if not values or values[0].type != onnx.AttributeProto.STRING:
            raise UsageError(
                f"marker {label!r} ({domain}::{op}) has no string attribute {attr!r}",
                hint="give the attribute that holds the marker's name (attr= of markers, marker_spec= of compare)",
                cli_hint="give the attribute that holds the marker's name (--attr of markers, --marker-attr of compare)",
            )
        if len([n for n in node.input if n]) != 1 or len([n for n in node.output if n]) != 1:
            raise UsageError(
                f"marker {label!r} ({domain}::{op}) has {len(node.input)} inputs and {len(node.output)} outputs",
                hint="a marker passes one tensor through: one input, one output",
            )
        name = values[0].s.decode("utf-8", "replace")
        if name in found:
            raise UsageError(
                f"two markers are named {name!r}: {found[name][1]!r} and {label!r}",
                hint="give every marker a distinct name",
            )
        found[name] = (i, label)
    return found


def _type_outputs(model: Model) -> None:
    """Give the model's untyped graph outputs the type the typing engine infers (in place; no run)."""
    untyped = [o for o in model.lazy_proto.graph.output if not o.type.WhichOneof("value")]
    if not untyped:
        return
    found = tensor_types(model, [o.name for o in untyped], observe=False).types
    for out in untyped:
        if out.name in found:
            out.type.CopyFrom(found[out.name])


# ------------------------------------------------------------------------------------- inputs/files


def load_reference(path: str | os.PathLike[str]) -> Mapping[str, np.ndarray]:
    """Open reference values in an ``.npz`` (read lazily, one array at a time, each checked against its
    header and the size limit before it is allocated).

    Raises:
        FeedError: The file is missing, not a regular file, or not a readable npz; an array read from
            it later is truncated, too large or holds Python objects.
    """
    file = Path(path)
    if not exists(file):
        raise FeedError(f"no such reference file: {file}", hint="pass an .npz of reference values keyed by tensor name")
    check_regular(file, what="reference file", max_bytes=None, error=FeedError)
    if file.suffix.lower() == ".npy":
        raise FeedError(f"{file} holds one array, not named values", hint="save them with numpy.savez(path, name=array)")
    return open_npz(file, what="reference file")


def load_mapping(path: str | os.PathLike[str]) -> dict[str, str]:
    """Read a JSON mapping ``{"name in the first model": "name in the second"}``.

    Raises:
        UsageError: The file is missing, not a regular file, not UTF-8 JSON, or not an object of strings.
    """
    file = Path(path)
    data = read_data(file, what="mapping file", yaml=False)
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        raise UsageError(f"{file} must be a JSON object of strings", hint='write {"name_in_A": "name_in_B", ...}')
    return data


# ------------------------------------------------------------------------------------------- sides


@dataclass
class _Graph:
    """A model prepared for capture: markers replaced, indexed, ordered."""

    model: Model
    index: GraphIndex  # its order, rank (node -> position) and position (tensor -> producer's rank)
    markers: dict[str, str]  # marker name -> tensor
    label: str = ""  # the original model's file or name
    types: dict[str, onnx.ValueInfoProto] = field(default_factory=dict)  # tensor -> type, once asked
    inferred: dict[str, onnx.TypeProto] | None = None  # every tensor's type, once a fragment needs one
    sizes: dict[str, int] | None = None  # node output -> bytes, where its shape is static
    computed: set[str] | None = None  # the tensors computed from a graph input, once asked
    footprint: int | None = None  # about what one run holds (run_bytes), once asked

    @classmethod
    def of(cls, model: Model, marker_spec: tuple[str, str, str]) -> _Graph:
        domain, op, attr = marker_spec
        label = model.name
        mapping: dict[str, str] = {}
        if _find_markers(model, domain, op, attr):
            result = markers(model, domain=domain, op=op, attr=attr, expose=False)
            model, mapping = result.model, result.markers
        index = GraphIndex(model.lazy_proto.graph)
        index.order  # noqa: B018 (a cycle is reported here, before anything runs)
        return cls(model, index, mapping, label)

    @property
    def order(self) -> list[int]:
        """Node indices in execution order."""
        return self.index.order

    @property
    def position(self) -> dict[str, int]:
        """Node output -> the position of its producer in ``order``."""
        return self.index.position

    @property
    def rank(self) -> dict[int, int]:
        """Node index -> its position in ``order``."""
        return self.index.rank

    @property
    def produced(self) -> list[str]:
        """Node outputs, in topological order."""
        return sorted(self.position, key=self.position.__getitem__)

    def comparable(self, *, constants: bool = False) -> list[str]:
        """Node outputs worth comparing, in topological order: read by a node or a graph output, and
        (unless ``constants``) computed from a graph input rather than from weights alone."""
        outputs = set(self.index.outputs)
        live = [n for n in self.produced if n in self.index.consumers or n in outputs]
        if constants:
            return live
        varying = self.varying()
        return [n for n in live if n in varying]

    def varying(self) -> set[str]:
        """The tensors computed from a graph input (not from weights and constants alone)."""
        if self.computed is None:
            varying = set(self.index.inputs) - set(self.index.initializers)
            nodes = self.model.lazy_proto.graph.node
            for i in self.order:
                if any(r in varying for r in self.index.node_reads[i]):
                    varying.update(o for o in nodes[i].output if o)
            self.computed = varying
        return self.computed

    def value_info(self, tensor: str) -> onnx.ValueInfoProto:
        """The typed ValueInfoProto of a tensor from the model (the typing engine, no run): how a
        captured sequence, map or optional value (not an array, so not typed from itself) is fed."""
        found = self.types.get(tensor)
        if found is None:
            tp = tensor_types(self.model, [tensor], observe=False).types.get(tensor)
            found = self.types[tensor] = onnx.ValueInfoProto(name=tensor)
            if tp is not None:
                found.type.CopyFrom(tp)
        return found

    def declared_types(self) -> dict[str, onnx.TypeProto]:
        """The types the model declares or implies for its node outputs and inputs (the typing
        engine without a run; unknown dims stay named), computed once."""
        if self.inferred is None:
            names = [*self.index.inputs, *self.produced]
            self.inferred = dict(tensor_types(self.model, names, observe=False).types)
        return self.inferred

    def static_nbytes(self) -> dict[str, int]:
        """Bytes of each node output whose dtype and every dim ONNX shape inference proves (no run,
        no symbolic inference: cheap), computed once; a fragment is sized from these."""
        if self.sizes is None:
            found = tensor_types(self.model, self.produced, observe=False, symbolic=False).types
            self.sizes = {}
            for name, tp in found.items():
                size = _static_nbytes(tp)
                if size is not None:
                    self.sizes[name] = size
        return self.sizes

    def run_bytes(self) -> int:
        """About what one run of the model holds: its weights (initializers and values computed from
        them alone) and the largest set of activations alive at once, from static sizes (an
        activation of unknown size counts nothing); computed once."""
        if self.footprint is None:
            sizes, varying, index = self.static_nbytes(), self.varying(), self.index
            weights = sum(max(tensor_nbytes(t), 0) for t in index.initializers.values())
            weights += sum(n for name, n in sizes.items() if name not in varying)
            last_use: dict[str, int] = {}
            for k, i in enumerate(self.order):
                for name in index.node_reads[i]:
                    last_use[name] = k
            dies: dict[int, list[str]] = {}
            live = peak = 0
            for k, i in enumerate(self.order):
                for name in index.nodes[i].output:
                    if name in varying and name in sizes:
                        live += sizes[name]
                        dies.setdefault(max(last_use.get(name, k), k), []).append(name)
                peak = max(peak, live)
                live -= sum(sizes[name] for name in dies.pop(k, []))
            self.footprint = weights + peak
        return self.footprint

    def input_info(self, tensor: str, value: Any) -> onnx.ValueInfoProto:
        """How a captured value enters a fragment: typed as the model has the tensor (symbolic dims
        where the model's are), so that every branch of an If type-checks as it does in the whole
        model; an array the model's type does not hold takes its dtype and rank, every dim named."""
        if not isinstance(value, np.ndarray):
            return self.value_info(tensor)
        declared = self.declared_types().get(tensor)
        if declared is not None and _holds(declared, value):
            info = onnx.ValueInfoProto(name=tensor)
            info.type.CopyFrom(declared)
            return info
        elem = onnx.TensorProto.STRING if value.dtype.kind in "OUS" else onnx.helper.np_dtype_to_tensor_dtype(value.dtype)
        return onnx.helper.make_tensor_value_info(tensor, elem, [f"{tensor}_d{k}" for k in range(value.ndim)])

    def marker_of(self, tensor: str) -> str | None:
        for name, t in self.markers.items():
            if t == tensor:
                return name
        return None

    def node_of(self, tensor: str) -> onnx.NodeProto | None:
        i = self.index.producer.get(tensor)
        return None if i is None else self.model.lazy_proto.graph.node[i]

    def source_of(self, tensor: str) -> onnx.NodeProto | None:
        """The node computing a tensor's value, looking through Identity nodes (markers)."""
        node = self.node_of(tensor)
        while node is not None and node.op_type == "Identity" and node.input[0] in self.index.producer:
            node = self.node_of(node.input[0])
        return node


def _fragment_model(graph: _Graph, nodes: Sequence[int], inputs: Mapping[str, Any],
                    outputs: Sequence[str]) -> Model:
    """A model of ``nodes`` (in order) reading ``inputs`` and exposing ``outputs`` (the sub-model
    builder, ``graphkit._submodel``; its graph is named ``<graph>_fragment``). Arrays type their
    inputs; other values (sequences, maps) take the model's type for them."""
    index = graph.index
    reads: dict[str, None] = {}
    for i in nodes:
        reads.update(dict.fromkeys(index.node_reads[i]))
    weights = index.initializers  # (by name: a fragment reads few of a big model's weights)
    # Only a fragment with If/Loop/Scan bodies needs its inputs typed as the model has them (an
    # untaken branch type-checks against them); typing every tensor of the model costs a shape
    # inference pass and ONNX Runtime's symbolic inference (sympy: +34 MB on light_squeezenet).
    bodies = any(len(index.nodes[i].attribute) and subgraphs(index.nodes[i]) for i in nodes)
    # With bodies, small integer values (axes, shapes, counts) enter as the constants they were in the
    # model: ONNX Runtime shapes a Scan body's outputs when it loads the piece, and cannot from an
    # Unsqueeze whose axes are an input ("Subgraph must have the shape set for all outputs").
    fixed = {n: v for n, v in inputs.items() if isinstance(v, np.ndarray) and v.dtype.kind in "iub"
             and v.size <= _FIXED_ELEMENTS} if bodies else {}
    proto = submodel(
        graph.model.lazy_proto, index, nodes,
        inputs=[graph.input_info(n, v) if bodies else _value_info(n, v) if isinstance(v, np.ndarray)
                else graph.value_info(n) for n, v in inputs.items() if n not in fixed],
        outputs=[onnx.ValueInfoProto(name=n) for n in outputs],
        initializers={n for n in reads if n in weights},
        graph_name=f"{graph.model.lazy_proto.graph.name}_fragment",
    )
    proto.graph.initializer.extend(numpy_helper.from_array(v, n) for n, v in fixed.items())
    if proto.ir_version < 4:  # (an initializer of IR 3 is also a graph input)
        proto.graph.input.extend(_value_info(n, v) for n, v in fixed.items())
    return graph.model.derive(proto)


#: The most elements of an integer value a piece with bodies takes as a constant (see _fragment_model).
_FIXED_ELEMENTS = 64


def _value_info(name: str, value: np.ndarray) -> onnx.ValueInfoProto:
    elem = onnx.TensorProto.STRING if value.dtype.kind in "OUS" else onnx.helper.np_dtype_to_tensor_dtype(value.dtype)
    return onnx.helper.make_tensor_value_info(name, elem, list(value.shape))


def _static_nbytes(tp: onnx.TypeProto) -> int | None:
    """Bytes of a tensor of type ``tp`` when its element type has a fixed size and every dim is sized."""
    if tp.WhichOneof("value") != "tensor_type" or not tp.tensor_type.HasField("shape"):
        return None
    tensor = tp.tensor_type
    if tensor.elem_type in (onnx.TensorProto.UNDEFINED, onnx.TensorProto.STRING):
        return None
    try:
        itemsize = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type).itemsize
    except (KeyError, ValueError, TypeError):
        return None
    count = 1
    for d in tensor.shape.dim:
        if not d.HasField("dim_value") or d.dim_value < 0:
            return None
        count *= d.dim_value
    return count * itemsize


def _holds(declared: onnx.TypeProto, value: np.ndarray) -> bool:
    """Whether a tensor type admits ``value``: same element type and rank, every sized dim equal."""
    if declared.WhichOneof("value") != "tensor_type":
        return False
    tensor = declared.tensor_type
    elem = onnx.TensorProto.STRING if value.dtype.kind in "OUS" else onnx.helper.np_dtype_to_tensor_dtype(value.dtype)
    if tensor.elem_type != elem or not tensor.HasField("shape") or len(tensor.shape.dim) != value.ndim:
        return False
    return all(not d.HasField("dim_value") or d.dim_value == size for d, size in zip(tensor.shape.dim, value.shape))



def _execute(model: Model, feeds: Mapping[str, np.ndarray], outputs: Sequence[str], backend: str,
             what: str, config: Settings | None = None, notes: list[str] | None = None) -> dict[str, np.ndarray]:
    """Run ``model`` on ``backend`` and return ``outputs``; errors name ``what`` was being run
    (``graphkit._backends``: the side's session settings, the reference evaluator's fallbacks)."""
    proto = model.lazy_proto  # (a value the piece holds as a constant is not fed; IR 3 lists it as an input too)
    inputs = {i.name for i in proto.graph.input}
    if proto.ir_version < 4:
        inputs -= {t.name for t in proto.graph.initializer}
    return _backends.execute(model, {n: v for n, v in feeds.items() if n in inputs}, outputs, backend, what, config,
                             notes)


class _Walker:
    """Runs one side fragment by fragment and yields the wanted tensors' values, a fragment at a time."""

    def __init__(self, graph: _Graph, backend: str, feeds: Mapping[str, np.ndarray], wanted: set[str],
                 *, budget: int, label: str, progress: Progress | None = None, config: Settings | None = None,
                 notes: list[str] | None = None, first_step: int = 1, fusions: bool = False,
                 visit: Visit | None = None, cuts: Iterable[int] = (), adapt: Adapt | None = None) -> None:
        self.graph = graph
        # (for the mixed-precision search: ``visit`` sees each fragment's nodes, feeds and values after
        # it ran; a fragment ends before each node of ``cuts``, where a later trial may resume; ``adapt``
        # rewrites a fragment before it runs: model, feeds, exposed -> model, feeds, exposed -> output)
        self.visit = visit
        self.adapt = adapt
        self.cuts = set(cuts)
        self.first_step = max(first_step, 1)  # (1: learn the bytes per node before growing)
        self.backend = backend
        self.config = config
        self.notes = notes if notes is not None else []
        self.feeds = dict(feeds)
        self.wanted = wanted
        # At most ``budget``, and at most a quarter of what a run of the model holds: both sides'
        # fragments are alive at once, and for a small model 64 MB of them would be most of the
        # comparison's memory (light_densenet121: 245 MB against 160 MB for a plain run; ->
        # see bench/bench_compare.py).
        self.budget = max(min(budget, max(graph.run_bytes() // 4, _MIN_FRAGMENT_BYTES)), 1)
        self.label = label
        self.progress = progress
        self.runs = 0
        self.order = self._needed_order()
        # With ``fusions`` (ONNX Runtime with optimizations against a side without them), a tensor
        # ONNX Runtime fuses away is not exposed, since exposing it would stop the fusion and the
        # capture would compare kernels the optimized model never runs; what was fused is kept:
        self.fusions = fusions and backend == "ort"
        self.groups: dict[str, _Group] = {}  # group output -> the nodes ONNX Runtime fused into it
        self.fused_away: dict[str, str] = {}  # wanted tensor that no longer exists -> its group's output

    def _needed_order(self) -> list[int]:
        """The nodes the wanted tensors depend on, in topological order, each node computed from
        weights and constants alone placed just before its first reader: its value is then held
        for a fragment or two, not from the start of the walk (the onnx wheel's light models make
        every weight with a ConstantOfShape: held from the start, light_resnet50's 100 MB of them
        were kept twice, once per side, for most of the walk)."""
        index, nodes = self.graph.index, self.graph.model.lazy_proto.graph.node
        needed = index.upstream_nodes(self.wanted)
        varying = self.graph.varying()
        order: list[int] = []
        placed: set[int] = set()
        for i in self.graph.order:
            if i not in needed or i in placed:
                continue
            if not any(o in varying for o in nodes[i].output if o):
                continue  # (placed before its first reader, or at the end when nothing reads it)
            stack, todo = [i], []
            while stack:  # the deferred producers i reads, depth first, each before its readers
                j = stack.pop()
                if j in placed:
                    continue
                todo.append(j)
                placed.add(j)
                for name in index.node_reads[j]:
                    k = index.producer.get(name)
                    if k is not None and k in needed and k not in placed:
                        stack.append(k)
            order.extend(sorted(todo, key=self.graph.rank.__getitem__))
        order.extend(i for i in self.graph.order if i in needed and i not in placed)
        return order

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        index, nodes = self.graph.index, self.graph.model.lazy_proto.graph.node
        last_use: dict[str, int] = {}
        for k, i in enumerate(self.order):
            for name in index.node_reads[i]:
                last_use[name] = k
        live: dict[str, np.ndarray] = {n: v for n, v in self.feeds.items() if n in last_use}
        initial = {n: v for n, v in self.feeds.items() if n in self.wanted}
        if initial:
            yield initial
        sizes = self.graph.static_nbytes()
        k, total = 0, len(self.order)
        nodes_at_most = self.first_step  # then at most four times the previous fragment's nodes
        per_unknown: float | None = None  # bytes of an output of unknown size, as last observed
        while k < total:
            end = self._chunk_end(k, nodes_at_most, sizes, per_unknown, last_use)
            chunk = self.order[k:end]
            produced = [o for i in chunk for o in nodes[i].output if o]
            keep = [o for o in produced if last_use.get(o, -1) >= end]
            exposed = list(dict.fromkeys([o for o in produced if o in self.wanted] + keep))
            reads = {r for i in chunk for r in index.node_reads[i]} - set(produced)
            feeds = {r: live[r] for r in reads if r in live}
            first = nodes[chunk[0]].name or nodes[chunk[0]].op_type
            what = f"{self.label}: running nodes {k + 1}-{end} of {total} (from {first!r})"
            if self.fusions:
                exposed = self._unfused(chunk, produced, feeds, keep, exposed, last_use, what)
            fragment = _fragment_model(self.graph, chunk, feeds, exposed)
            if self.adapt is None:
                values = _execute(fragment, feeds, exposed, self.backend, what, self.config, self.notes)
            else:
                fragment, run_feeds, fetch = self.adapt(fragment, feeds, exposed)
                got = _execute(fragment, run_feeds, list(fetch.values()), self.backend, what, self.config, self.notes)
                values = {o: got[fetch[o]] for o in exposed}
                del got, run_feeds
            self.runs += 1
            if self.visit is not None:
                self.visit(chunk, feeds, values)
            live.update({o: values[o] for o in keep})
            for name in [n for n in live if last_use.get(n, -1) < end]:
                del live[name]
            unknown = [o for o in exposed if o not in sizes]
            if unknown:
                per_unknown = max(sum(value_nbytes(values[o]) for o in unknown) / len(unknown), 1.0)
            nodes_at_most = min(len(chunk) * 4, 4096)
            batch = {o: values[o] for o in exposed if o in self.wanted}
            del values, feeds
            if self.progress is not None:
                self.progress(end, total)
            k = end
            yield batch
            del batch

    def _unfused(self, chunk: list[int], produced: list[str], feeds: Mapping[str, Any], keep: list[str],
                 exposed: list[str], last_use: Mapping[str, int], what: str) -> list[str]:
        """The tensors of ``chunk`` to expose so that ONNX Runtime optimizes it as it would the
        model: those its optimized graph of the chunk (exposing only what later fragments read and
        the graph outputs) still has. The others are recorded as fused into the group whose output
        they feed (``groups``, ``fused_away``)."""
        outputs = set(self.graph.index.outputs)
        needed = [o for o in produced if o in keep or o in outputs or (o in self.wanted and o not in last_use)]
        if not needed:
            return exposed
        probe = _fragment_model(self.graph, chunk, feeds, needed)
        try:
            optimized = (self.config or Settings()).optimized(probe, opt_level="all")
        except RuntimeFailure as err:  # (the run that follows reports a real refusal)
            log.info("%s: ONNX Runtime's optimized graph is not available (%s); exposing every tensor", what, err)
            return exposed
        graph = optimized.graph
        present = {n for node in graph.node for n in [*node.input, *node.output]} | {o.name for o in graph.output}
        varying = self.graph.varying()  # (weights ONNX Runtime folded into new ones are no fusion)
        gone = {o for o in produced if o not in present and o in varying}
        if not gone:
            return exposed
        made_by = {o: node for node in graph.node for o in node.output}
        original = set(produced) | set(feeds) | set(self.graph.index.inputs) | set(self.graph.index.initializers)
        index = self.graph.index
        for name in produced:
            if name in gone or name not in self.wanted:
                continue
            members, absorbed, stack = [index.producer[name]], [], [index.producer[name]]
            while stack:
                for read in index.node_reads[stack.pop()]:
                    if read in gone and read not in absorbed:
                        absorbed.append(read)
                        members.append(index.producer[read])
                        stack.append(index.producer[read])
            if absorbed:
                group = _Group(tuple(sorted(set(members), key=self.graph.rank.__getitem__)),
                               tuple(a for a in produced if a in absorbed),
                               _optimized_nodes(made_by, name, original))
                self.groups[name] = group
                self.fused_away.update({a: name for a in group.absorbed if a in self.wanted})
        return [o for o in exposed if o not in gone]

    def _chunk_end(self, k: int, nodes_at_most: int, sizes: Mapping[str, int], per_unknown: float | None,
                   last_use: Mapping[str, int]) -> int:
        """Where the fragment starting at ``k`` ends: its weights and the outputs it exposes come to
        about ``budget`` bytes, each output costed at its static size (shape fully known) or, if not
        known, at the last observed size of such an output. Past ``nodes_at_most`` nodes (four times the previous fragment's) it
        stops at the first node with an output of unknown size, so that an estimate made on small
        nodes is corrected before it can overshoot by much; static sizes need no such correction
        (and fewer boundaries leave ONNX Runtime more of the fusions it makes in the whole model)."""
        nodes, index = self.graph.model.lazy_proto.graph.node, self.graph.index
        weights = index.initializers
        limit = min(len(self.order), k + 4096)
        spent, end = 0.0, k
        loaded: set[str] = set()  # (a fragment's session holds its weights too: 2.7 GB model, 64 MB each)
        while end < limit:
            cost, guessed = 0.0, False
            for name in index.node_reads[self.order[end]]:
                if name in weights and name not in loaded:
                    loaded.add(name)
                    cost += max(tensor_nbytes(weights[name]), 0)
            for o in nodes[self.order[end]].output:
                if o and (o in self.wanted or last_use.get(o, -1) > end):
                    size = sizes.get(o)
                    guessed = guessed or size is None
                    cost += (per_unknown or 0.0) if size is None else size
            if end > k and (spent + cost > self.budget or (guessed and end - k >= nodes_at_most)
                            or self.order[end] in self.cuts):
                break
            spent += cost
            end += 1
        return end


@dataclass(frozen=True)
class _Group:
    """Nodes ONNX Runtime fused into the computation of one tensor (which the group outputs)."""

    nodes: tuple[int, ...]  # the model's nodes, in execution order
    absorbed: tuple[str, ...]  # the tensors between them, which the optimized model does not have
    optimized: tuple[tuple[str, str, str], ...]  # what ONNX Runtime runs instead: (op_type, name, domain)

    def describe(self) -> str:
        """What ONNX Runtime runs instead, for reports: "FusedConv 'conv' (com.microsoft)"."""
        return ", ".join(f"{op} {name!r}" + (f" ({domain})" if domain else "") for op, name, domain in self.optimized)


def _optimized_nodes(made_by: Mapping[str, onnx.NodeProto], tensor: str,
                     original: set[str]) -> tuple[tuple[str, str, str], ...]:
    """The optimized graph's nodes computing ``tensor`` from tensors the model has, in order."""
    found: list[onnx.NodeProto] = []
    stack = [tensor]
    seen: set[int] = set()
    while stack:
        node = made_by.get(stack.pop())
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        found.append(node)
        stack.extend(n for n in node.input if n and n not in original)
    return tuple((n.op_type, n.name, n.domain) for n in reversed(found))


class _ModelSource:
    """Reference values from a model side: walks forward on demand, keeps values while still needed."""

    def __init__(self, walker: _Walker, keep_until: Mapping[str, int]) -> None:
        self.walker = walker
        self.stream = iter(walker)
        self.cache: dict[str, np.ndarray] = {}
        self.drop_at: dict[int, list[str]] = {}
        for name, last in keep_until.items():
            self.drop_at.setdefault(last, []).append(name)

        self.unwanted: set[str] = set()

    def get(self, name: str) -> np.ndarray | None:
        while name not in self.cache:
            try:
                batch = next(self.stream)
            except StopIteration:
                return None
            self.cache.update({n: v for n, v in batch.items() if n not in self.unwanted})
        return self.cache[name]

    def peek(self, name: str) -> np.ndarray | None:
        return self.cache.get(name)

    def release(self, position: int) -> None:
        for name in self.drop_at.pop(position, []):
            self.cache.pop(name, None)

    def discard(self, names: Iterable[str]) -> None:
        """Values the candidate will never compare (ONNX Runtime fused them away): not kept."""
        for name in names:
            self.unwanted.add(name)
            self.cache.pop(name, None)


class _NpzSource:
    """Reference values from an npz: each read on demand."""

    def __init__(self, values: Mapping[str, np.ndarray]) -> None:
        self.values = values

    def get(self, name: str) -> np.ndarray | None:
        return np.asarray(self.values[name]) if name in self.values else None

    def peek(self, name: str) -> np.ndarray | None:
        return self.get(name)

    def release(self, position: int) -> None:
        return None

    def discard(self, names: Iterable[str]) -> None:
        return None


# ----------------------------------------------------------------------------------------- compare


@dataclass(frozen=True)
class _FeedOptions:
    """How to generate the inputs that are not given."""

    options: FeedOptions
    notes: list[FeedNote] = field(default_factory=list)  # how the first model's inputs were made

    def make(self, model: Model, feeds: Mapping[str, Any] | None) -> dict[str, np.ndarray]:
        values, notes = plan_feeds(input_specs(model), feeds, feed_options=self.options, where=model.name,
                                   bounds=index_bounds(model))
        if not self.notes:
            self.notes.extend(notes)
        return values


@dataclass(frozen=True)
class _Pair:
    candidate: str
    reference: str
    marker: str | None
    quantized: bool = False  # a QDQ candidate's dequantized value against the float reference


def compare(
    model: Model,
    /,
    other: Model | None = None,
    *,
    reference: Mapping[str, np.ndarray] | str | os.PathLike[str] | None = None,
    backend: Backend | None = None,
    candidate_backend: Backend = "ort",
    feeds: Mapping[str, Any] | None = None,
    feed_options: FeedOptions = FeedOptions(),
    tolerance: Tolerance = Tolerance(),
    tolerances: Mapping[str, Tolerance] | None = None,
    mapping: Mapping[str, str] | None = None,
    tensors: Sequence[str] | None = None,
    constants: bool = False,
    marker_spec: tuple[str, str, str] = ("my", "Debug", "name"),
    fragment_bytes: int = DEFAULT_FRAGMENT_BYTES,
    local_checks: int = 64,
    progress: Progress | None = None,
    provider: Provider = "cpu",
    reference_provider: Provider | None = None,
    candidate_provider: Provider | None = None,
    provider_options: Mapping[str, str] | None = None,
    custom_ops: Sequence[str | os.PathLike[str]] = (),
    python_ops: Sequence[CustomOp | str | os.PathLike[str]] = (),
    check_finite: bool = False,
) -> Comparison:
    """Run the same inputs through two sides and compare every tensor both have.

    The sides: with ``reference`` values, ``model`` on ``candidate_backend`` against them; with
    ``other``, ``model`` (the reference, on ``backend``, default "ort") against ``other`` (on
    ``candidate_backend``); otherwise ``model`` on ``candidate_backend`` against ``model`` on
    ``backend`` (default "ort-noopt").

    Args:
        model: The model (the reference model when ``other`` is given).
        other: A second model, the candidate (edited, optimized, fp16, quantized).
        reference: Reference values (an ``.npz`` path or a mapping) keyed by tensor or marker name;
            graph inputs found there are used as feeds.
        backend: The reference side's backend: "ort", "ort-noopt" or "reference" (onnx's
            ReferenceEvaluator with the kernels of graphkit._reference_ops).
        candidate_backend: The candidate side's backend.
        feeds: Input values by name; missing ones are generated.
        feed_options: How the inputs not in ``feeds`` are generated (seed, shapes, dims, ranges).
        tolerance: The tolerance of every tensor without one of its own.
        tolerances: Per-tensor tolerances by tensor name, marker name or glob pattern.
        mapping: Names in the first model → names in the second, where they differ.
        tensors: Compare only these tensors (names, marker names or glob patterns); default every
            tensor that some node reads or that is a graph output.
        constants: Also compare tensors computed from weights alone (ConstantOfShape, folded shapes).
        marker_spec: (domain, op, attribute) of marker nodes, replaced by Identity before running.
        fragment_bytes: About how many bytes of tensors each fragment run exposes at most; a
            model whose weights and live activations are smaller than four times this exposes a
            quarter of them per fragment (so the comparison stays near a plain run's memory).
        local_checks: At most this many failed tensors get a local/inherited check.
        progress: Called with (nodes done, nodes total) after each candidate fragment.
        provider: The execution provider of both sides' ONNX Runtime sessions ("cpu", "cuda", ...).
        reference_provider: The reference side's provider, when it differs from ``provider``.
        candidate_provider: The candidate side's provider, when it differs from ``provider``.
        provider_options: The providers' options ({"device_id": "1"}), as ONNX Runtime takes them.
        custom_ops: Custom-operator libraries to register in every ONNX Runtime session.
        python_ops: Python implementations of custom operators (``graphkit.custom_op`` functions or
            paths of files declaring them), run by both backends.
        check_finite: Also find the first candidate node producing NaN/Inf from finite inputs
            (``Comparison.first_nonfinite``), in a second bounded-memory walk of the candidate.

    Raises:
        UsageError: Contradictory options, an unknown backend, nothing to compare.
        TensorNotFoundError: A tolerance, mapping or ``tensors`` entry names no tensor.
        NameNotFoundError: A ``marker_spec`` other than the default whose operator no model has.
        FeedError: Feeds or reference values that do not fit the model.
        RuntimeFailure: A backend refuses a model or fails while running it.
    """
    _check_compare_args(model, other, reference, feeds, feed_options, tolerance, tolerances, mapping, tensors,
                        constants, marker_spec, fragment_bytes, local_checks, progress)
    argcheck.optional(argcheck.choice, backend, "backend", choices=BACKENDS)
    argcheck.choice(candidate_backend, "candidate_backend", BACKENDS)
    argcheck.boolean(check_finite, "check_finite")
    ref_config, cand_config = side_settings(provider, reference_provider, candidate_provider, provider_options,
                                             custom_ops, python_ops)
    if reference is not None and other is not None:
        raise UsageError("compare takes a second model or reference values, not both",
                         hint="compare(model, other) or compare(model, reference='ref.npz')",
                         cli_hint="compare A.onnx B.onnx, or A.onnx --reference ref.npz")
    for name in (backend, candidate_backend):
        if name is not None and name not in BACKENDS:
            raise UsageError(f"unknown backend {name!r}", hint="use one of " + ", ".join(BACKENDS))
    if reference is not None and backend is not None:
        raise UsageError("backend picks the reference side's backend; with reference values the reference is the file",
                         hint="use candidate_backend= to choose how the model runs",
                         cli_hint="with --reference, use --candidate-backend (not --backend) to choose how the model runs")
    for side in (model, other):
        if side is not None:
            require_sound(side)
    tol = tolerance
    gen = _FeedOptions(feed_options)
    _check_marker_spec(marker_spec, [m for m in (model, other) if m is not None])
    cand = _Graph.of(other if other is not None else model, marker_spec)
    if reference is not None:
        values = load_reference(reference) if isinstance(reference, (str, os.PathLike)) else reference
        label = str(reference) if isinstance(reference, (str, os.PathLike)) else "reference values"
        return _compare_npz(cand, values, label, candidate_backend, feeds, gen, tol, tolerances,
                            tensors, fragment_bytes, local_checks, progress, cand_config=cand_config,
                            check_finite=check_finite)
    ref = _Graph.of(model, marker_spec) if other is not None else cand
    ref_backend = backend or ("ort" if other is not None else "ort-noopt")
    same_provider = _backends.check_provider(ref_config.provider) == _backends.check_provider(cand_config.provider)
    if other is None and ref_backend == candidate_backend and same_provider:
        raise UsageError(f"both sides would run {model.name} on {BACKENDS[ref_backend]}: nothing to compare",
                         hint="pick another backend= ('ort-noopt' or 'reference') or candidate_provider=, or give a "
                              "second model",
                         cli_hint="pick another --backend (ort-noopt or reference) or --candidate-provider, or give a "
                                  "second model")
    pairs, renamed_inputs = _match_models(ref, cand, mapping or {})
    unmatched: tuple[list[str], list[str]] = ([], [])
    if tensors is None:
        worth = cand.comparable(constants=constants)
        pairs = [p for p in pairs if p.candidate in set(worth)]
        paired_ref, paired_cand = {p.reference for p in pairs}, {p.candidate for p in pairs}
        unmatched = ([n for n in ref.comparable(constants=constants) if n not in paired_ref],
                     [n for n in worth if n not in paired_cand])
        renamed = _renamed_pairs(ref, cand, *unmatched)
        if renamed:
            pairs = sorted([*pairs, *renamed], key=lambda p: cand.position[p.candidate])
            unmatched = ([], [])
    result = _compare_models(ref, cand, pairs, unmatched, renamed_inputs, ref_backend, candidate_backend, feeds,
                             gen, tol, tolerances, tensors, fragment_bytes, local_checks, progress,
                             ref_config=ref_config, cand_config=cand_config, check_finite=check_finite)
    if tensors is None and renamed:
        result = replace(result, renamed=tuple((p.reference, p.candidate) for p in renamed))
    return result


def _renamed_pairs(ref: _Graph, cand: _Graph, ref_names: Sequence[str], cand_names: Sequence[str]) -> list[_Pair]:
    """The unmatched tensors of both sides as renamed pairs, when they pair one to one: as many on each
    side and, in execution order, each made by the same operator at the same output slot (a rename
    keeps both); else none, and they stay unmatched."""
    if not ref_names or len(ref_names) != len(cand_names):
        return []
    pairs = []
    for a, b in zip(ref_names, cand_names):
        made_a, made_b = ref.node_of(a), cand.node_of(b)
        if made_a is None or made_b is None or (made_a.domain, made_a.op_type) != (made_b.domain, made_b.op_type) \
                or list(made_a.output).index(a) != list(made_b.output).index(b) or cand.marker_of(b):
            return []
        pairs.append(_Pair(b, a, None))
    return pairs


def _check_marker_spec(marker_spec: Sequence[str], models: Sequence[Model]) -> None:
    """Refuse a marker operator that was asked for (not the default) and that no model has: a typo
    would otherwise leave the markers in place, for ONNX Runtime to refuse as an unknown operator."""
    domain, op = marker_spec[0], marker_spec[1]
    if (domain, op) == ("my", "Debug"):
        return
    nodes = [n for m in models for n in m.lazy_proto.graph.node]
    if any(n.op_type == op and (n.domain or "") == domain for n in nodes):
        return
    ops = sorted({f"{n.domain}::{n.op_type}" for n in nodes if n.domain not in ("", "ai.onnx")})
    close = did_you_mean(f"{domain}::{op}", ops)
    known = (close + " " if close else "") + (f"(its custom ops: {', '.join(ops[:5])})" if ops else
                                              "(it has no custom-domain node)")
    verb = "has" if len(models) == 1 else "have"
    raise NameNotFoundError(f"{' and '.join(m.name for m in models)} {verb} no {domain}::{op} marker nodes",
                            hint=f"{known}; give marker_spec=(domain, op, attribute) of the markers",
                            cli_hint=f"{known}; pass --marker-domain and --marker-op of the markers")


def _check_compare_args(model: Any, other: Any, reference: Any, feeds: Any, feed_options: Any, tolerance: Any,
                        tolerances: Any, mapping: Any, tensors: Any, constants: Any, marker_spec: Any,
                        fragment_bytes: Any, local_checks: Any, progress: Any) -> None:
    """compare's prologue: every argument of the right type (backends are checked where they are read)."""
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    argcheck.optional(argcheck.instance, other, "other", cls=Model, expected=argcheck.MODEL)
    if isinstance(reference, (str, os.PathLike)):
        argcheck.path(reference, "reference")
    elif reference is not None:
        argcheck.mapping(reference, "reference", key=_tensor_key, expected="a mapping of names to arrays, or an .npz path")
    argcheck.optional(argcheck.mapping, feeds, "feeds", key=_tensor_key)
    argcheck.instance(feed_options, "feed_options", FeedOptions, "a graphkit.FeedOptions")
    argcheck.instance(tolerance, "tolerance", Tolerance, "a graphkit.Tolerance")
    argcheck.optional(argcheck.mapping, tolerances, "tolerances", key=_tensor_key, item=_tolerance_item)
    argcheck.optional(argcheck.mapping, mapping, "mapping", key=_tensor_key, item=_tensor_key)
    argcheck.optional(argcheck.names, tensors, "tensors", what="tensor name")
    argcheck.boolean(constants, "constants")
    if (isinstance(marker_spec, (str, bytes)) or not isinstance(marker_spec, Sequence) or len(marker_spec) != 3
            or not all(isinstance(part, str) for part in marker_spec)):
        raise ArgumentTypeError(f"marker_spec= must be (domain, op, attribute), three str, not "
                                f"{argcheck.describe(marker_spec)}", hint="e.g. marker_spec=('my', 'Debug', 'name')")
    argcheck.integer(fragment_bytes, "fragment_bytes", minimum=0)
    argcheck.integer(local_checks, "local_checks", minimum=0)
    if progress is not None and not callable(progress):
        raise ArgumentTypeError(f"progress= must be a function (done, total), not {argcheck.describe(progress)}",
                                hint="pass a callable or None")


def _tensor_key(value: Any, keyword: str) -> str:
    return argcheck.name(value, keyword, what="tensor name")


def _tolerance_item(value: Any, keyword: str) -> Tolerance:
    return argcheck.instance(value, keyword, Tolerance, "a graphkit.Tolerance")


def _side_label(graph: _Graph, backend: str, config: Settings | None = None) -> str:
    label = f"{graph.label} on {BACKENDS[backend]}"
    if config is not None and backend != "reference" and config.provider.lower() not in ("cpu", "cpuexecutionprovider"):
        label += f" with provider {config.label()}"
    return label


def _match_models(ref: _Graph, cand: _Graph, mapping: Mapping[str, str]) -> tuple[list[_Pair], dict[str, str]]:
    """Pairs of (candidate, reference) tensors in the candidate's order, and the candidate's graph
    inputs that ``mapping`` renames (candidate name → reference name)."""
    ref_names = set(ref.position) | set(ref.index.inputs)
    cand_names = set(cand.position) | set(cand.index.inputs)
    for a, b in mapping.items():
        if a not in ref_names and a not in ref.markers:
            raise not_found(TensorNotFoundError, "tensor", a, sorted(ref_names | set(ref.markers)), where=ref.label)
        if b not in cand_names and b not in cand.markers:
            raise not_found(TensorNotFoundError, "tensor", b, sorted(cand_names | set(cand.markers)), where=cand.label)
    to_ref: dict[str, str] = {}
    for a, b in mapping.items():
        to_ref[cand.markers.get(b, b)] = ref.markers.get(a, a)
    cand_inputs = set(cand.index.inputs) - set(cand.index.initializers)
    renamed_inputs = {b: a for b, a in to_ref.items() if b in cand_inputs}
    for name, tensor in cand.markers.items():
        if name in ref.markers:
            to_ref.setdefault(tensor, ref.markers[name])
    ref_outs, cand_outs = ref.index.outputs, cand.index.outputs
    if len(ref_outs) == len(cand_outs):
        for a, b in zip(ref_outs, cand_outs):
            if b not in ref_names:
                to_ref.setdefault(b, a)
    pairs = []
    for name in cand.produced:
        target = to_ref.get(name, name)
        if target in ref.position:
            pairs.append(_Pair(name, target, cand.marker_of(name)))
    return _qdq_pairs(ref, cand, pairs), renamed_inputs


def _restrict(pairs: list[_Pair], tensors: Sequence[str] | None, cand: _Graph) -> list[_Pair]:
    if tensors is None:
        return pairs
    keep = []
    known = {p.candidate for p in pairs} | {p.reference for p in pairs} | {p.marker for p in pairs if p.marker}
    for name in tensors:
        if name not in known and not any(fnmatch.fnmatchcase(k, name) for k in known):
            raise not_found(TensorNotFoundError, "compared tensor", name, sorted(known), where=cand.label)
    for p in pairs:
        labels = [p.candidate, p.reference] + ([p.marker] if p.marker else [])
        if any(fnmatch.fnmatchcase(label, pattern) for label in labels for pattern in tensors):
            keep.append(p)
    return keep


def _tolerance_for(pair: _Pair, tol: Tolerance, tolerances: Mapping[str, Tolerance],
                   dtypes: Sequence[np.dtype] = ()) -> Tolerance:
    """The tensor's own tolerance if it has one, else the global one; the default global tolerance
    is loosened to the floor of a low-precision float on either side (float16, bfloat16:
    ``Tolerance.for_dtype``), while one the caller chose is applied as given."""
    labels = [pair.candidate, pair.reference] + ([pair.marker] if pair.marker else [])
    for label in labels:
        if label in tolerances:
            return tolerances[label]
    for pattern, value in tolerances.items():
        if any(fnmatch.fnmatchcase(label, pattern) for label in labels):
            return value
    if tol == Tolerance():
        for dtype in dtypes:
            tol = tol.for_dtype(str(dtype))
    return tol


def _check_tolerance_names(tolerances: Mapping[str, Tolerance], pairs: list[_Pair], where: str) -> None:
    known = {p.candidate for p in pairs} | {p.reference for p in pairs} | {p.marker for p in pairs if p.marker}
    for name in tolerances:
        if name not in known and not any(fnmatch.fnmatchcase(k, name) for k in known):
            err = not_found(TensorNotFoundError, "compared tensor", name, sorted(known), where=where)
            raise TensorNotFoundError(f"tolerance for {name!r}: {err.message}", hint=err.hint,
                                      cli_hint=err.cli_hint)


def _compare_models(ref: _Graph, cand: _Graph, pairs: list[_Pair], unmatched: tuple[list[str], list[str]],
                    renamed_inputs: Mapping[str, str], ref_backend: str, cand_backend: str,
                    feeds: Mapping[str, Any] | None, gen: _FeedOptions, tol: Tolerance,
                    tolerances: Mapping[str, Tolerance] | None, tensors: Sequence[str] | None,
                    budget: int, local_checks: int, progress: Progress | None, *,
                    ref_config: Settings | None = None, cand_config: Settings | None = None,
                    check_finite: bool = False) -> Comparison:
    pairs = _restrict(pairs, tensors, cand)
    if not pairs:
        raise UsageError(f"{ref.label} and {cand.label} have no tensor in common to compare",
                         hint="map names that differ with mapping={'name_in_A': 'name_in_B'}",
                         cli_hint="map names that differ with --map mapping.json ({\"name_in_A\": \"name_in_B\"})")
    _check_tolerance_names(tolerances or {}, pairs, cand.label)
    ref_feeds = gen.make(ref.model, feeds)
    cand_feeds = _map_feeds(ref_feeds, cand, ref.label, renamed_inputs)
    plan = _Plan.build(cand, pairs, set(cand_feeds))
    ref_walker = _Walker(ref, ref_backend, ref_feeds, {p.reference for p in pairs}, budget=budget,
                         label=_side_label(ref, ref_backend, ref_config), config=ref_config)
    source = _ModelSource(ref_walker, plan.keep_until(pairs))
    runner = _Runner(cand, cand_backend, cand_feeds, source, plan, tol, tolerances or {}, local_checks,
                     config=cand_config)
    cand_walker = _Walker(cand, cand_backend, cand_feeds, {p.candidate for p in pairs}, budget=budget,
                          label=_side_label(cand, cand_backend, cand_config), progress=progress, config=cand_config,
                          notes=runner.notes, fusions=ref is cand and ref_backend != cand_backend)
    ref_walker.notes = runner.notes
    runner.ref = ref if ref is not cand else None
    runner.two_backends = ref is cand
    result = runner.run(pairs, cand_walker)
    finite = _scan_finite(cand, cand_backend, cand_feeds, cand_config, budget) if check_finite else None
    if ref is not cand and tensors is None:
        weights = _qdq_weights(ref, cand, cand_backend, tol, tolerances or {}, cand_config)
        result = (tuple(weights) + result[0], result[1], result[2])
    return Comparison(_side_label(ref, ref_backend, ref_config), _side_label(cand, cand_backend, cand_config),
                      result[0], result[1], tol, tuple(unmatched[0]), tuple(result[2]), ref_walker.runs + cand_walker.runs,
                      tuple(gen.notes), finite.first_nonfinite if finite else None,
                      unmatched_candidate=tuple(unmatched[1]), outputs=tuple(cand.index.outputs),
                      fusions=_runtime_fusions(cand, cand_walker) if ref is cand
                      else _fusions(ref, cand, pairs, unmatched[0], result[0]))


def _map_feeds(feeds: Mapping[str, np.ndarray], cand: _Graph, where: str,
              renamed: Mapping[str, str]) -> dict[str, np.ndarray]:
    """The reference side's feeds for the candidate: same names (or as ``renamed`` maps them), cast to
    the candidate's input dtypes."""
    specs = input_specs(cand.model)
    mapped: dict[str, np.ndarray] = {}
    for spec in specs:
        source = renamed.get(spec.name, spec.name)
        if source not in feeds:
            close = did_you_mean(spec.name, feeds)
            raise FeedError(
                f"{cand.label} has input {spec.name!r}, which {where} does not have",
                hint="map renamed inputs with mapping={'name_in_A': 'name_in_B'}" + (f" ({close})" if close else ""),
                cli_hint="map renamed inputs with --map mapping.json ({\"name_in_A\": \"name_in_B\"})"
                + (f" ({close})" if close else ""),
            )
        value = feeds[source]
        mapped[spec.name] = value.astype(spec.dtype) if value.dtype != spec.dtype else value
    return mapped


def _compare_npz(cand: _Graph, values: Mapping[str, np.ndarray], label: str, cand_backend: str,
                 feeds: Mapping[str, Any] | None, gen: _FeedOptions, tol: Tolerance, tolerances: Mapping[str, Tolerance] | None, tensors: Sequence[str] | None,
                 budget: int, local_checks: int, progress: Progress | None, *,
                 cand_config: Settings | None = None, check_finite: bool = False) -> Comparison:
    keys = list(values.keys())
    inputs = {s.name for s in input_specs(cand.model)}
    pairs: list[_Pair] = []
    unmatched: list[str] = []
    by_tensor: dict[str, str] = {}
    for key in keys:
        tensor = cand.markers.get(key, key)
        if tensor in cand.position:
            by_tensor[tensor] = key
        elif key not in inputs:
            unmatched.append(key)
    for name in cand.produced:
        if name in by_tensor:
            pairs.append(_Pair(name, by_tensor[name], cand.marker_of(name)))
    if not pairs:
        candidates = list(cand.markers) + cand.produced
        hint = cli_hint = None
        if keys:
            err = not_found(TensorNotFoundError, "tensor or marker", keys[0], candidates)
            hint, cli_hint = err.hint, err.cli_hint
        raise TensorNotFoundError(
            f"none of the {len(keys)} names in {label} is a tensor or marker of {cand.label}"
            + (f" (first: {keys[0]!r})" if keys else ""),
            hint=hint or "key the reference values by tensor name or marker name",
            cli_hint=cli_hint or hint or "key the reference values by tensor name or marker name",
        )
    notes = []
    given = dict(feeds or {})
    from_file = [n for n in inputs if n in values and n not in given]
    for name in from_file:
        given[name] = np.asarray(values[name])
    missing = sorted(inputs - set(given))
    if missing:
        notes.append(f"{label} has no value for input(s) {', '.join(repr(m) for m in missing)}: using seeded "
                     f"random values (seed {gen.options.seed}); the reference must have been computed on the same inputs")
    if unmatched:
        notes.append(f"{len(unmatched)} name(s) in {label} match no tensor or marker: "
                     + ", ".join(repr(u) for u in unmatched[:5]) + (" …" if len(unmatched) > 5 else ""))
    pairs = _restrict(pairs, tensors, cand)
    _check_tolerance_names(tolerances or {}, pairs, cand.label)
    cand_feeds = gen.make(cand.model, given)
    plan = _Plan.build(cand, pairs, set(cand_feeds))
    runner = _Runner(cand, cand_backend, cand_feeds, _NpzSource(values), plan, tol, tolerances or {}, local_checks,
                     config=cand_config)
    walker = _Walker(cand, cand_backend, cand_feeds, {p.candidate for p in pairs}, budget=budget,
                     label=_side_label(cand, cand_backend, cand_config), progress=progress, config=cand_config,
                     notes=runner.notes)
    tensors_, first, more_notes = runner.run(pairs, walker)
    finite = _scan_finite(cand, cand_backend, cand_feeds, cand_config, budget) if check_finite else None
    paired = {p.candidate for p in pairs}
    unmatched_cand = tuple(n for n in cand.comparable() if n not in paired) if tensors is None else ()
    return Comparison(label, _side_label(cand, cand_backend, cand_config), tensors_, first, tol, tuple(unmatched),
                      tuple(notes + more_notes), walker.runs, tuple(gen.notes),
                      finite.first_nonfinite if finite else None,
                      unmatched_candidate=unmatched_cand, outputs=tuple(cand.index.outputs))


# ---------------------------------------------------------------------------------- local checks


@dataclass
class _Fragment:
    """The smallest set of candidate nodes ending at a tensor's producer whose inputs the reference knows."""

    nodes: list[int]  # in topological order
    boundary: list[str]  # activations read from the reference side (or feeds)
    main: int  # the node named as the culprit (the producer, skipping pass-through Identity nodes)
    fused: str = ""  # what ONNX Runtime fused ``nodes`` into, when it did (the group is the culprit)


@dataclass
class _Plan:
    """Static structure for local checks: each compared tensor's fragment, and how long values are kept."""

    fragments: dict[str, _Fragment | None]

    @classmethod
    def build(cls, cand: _Graph, pairs: Sequence[_Pair], feeds: set[str]) -> _Plan:
        available = {p.candidate for p in pairs} | feeds
        return cls({p.candidate: _fragment_for(cand, p.candidate, available) for p in pairs})

    def keep_until(self, pairs: Sequence[_Pair]) -> dict[str, int]:
        """Reference name → the last pair position that still needs its value."""
        to_ref = {p.candidate: p.reference for p in pairs}
        keep: dict[str, int] = {}
        for k, p in enumerate(pairs):
            keep[p.reference] = max(keep.get(p.reference, -1), k)
            frag = self.fragments.get(p.candidate)
            for name in frag.boundary if frag else []:
                if name in to_ref:
                    keep[to_ref[name]] = max(keep.get(to_ref[name], -1), k)
        return keep


def _fragment_for(cand: _Graph, tensor: str, available: set[str]) -> _Fragment | None:
    index = cand.index
    start = index.producer.get(tensor)
    if start is None:
        return None
    nodes, boundary, stack = {start}, [], [start]
    while stack:
        i = stack.pop()
        for name in index.node_reads[i]:
            if name in index.initializers:
                continue
            if name in available or name not in index.producer:
                if name not in boundary:
                    boundary.append(name)
                continue
            j = index.producer[name]
            if j not in nodes:
                if len(nodes) >= _MAX_FRAGMENT_NODES:
                    return None
                nodes.add(j)
                stack.append(j)
    ordered = sorted(nodes, key=cand.rank.__getitem__)
    main = start
    graph_nodes = cand.model.lazy_proto.graph.node
    while graph_nodes[main].op_type == "Identity" and graph_nodes[main].input[0] in index.producer \
            and index.producer[graph_nodes[main].input[0]] in nodes:
        main = index.producer[graph_nodes[main].input[0]]
    return _Fragment(ordered, boundary, main)


class _Runner:
    """Streams candidate fragments, pulls the matching reference values, computes figures and checks."""

    def __init__(self, cand: _Graph, backend: str, feeds: Mapping[str, np.ndarray],
                 source: _ModelSource | _NpzSource, plan: _Plan, tol: Tolerance,
                 tolerances: Mapping[str, Tolerance], local_checks: int, config: Settings | None = None) -> None:
        self.cand = cand
        self.backend = backend
        self.config = config
        self.feeds = feeds
        self.source = source
        self.plan = plan
        self.tol = tol
        self.tolerances = tolerances
        self.checks_left = local_checks
        self.dtypes: dict[str, np.dtype] = {n: v.dtype for n, v in feeds.items()}
        self.notes: list[str] = []
        self.ref: _Graph | None = None  # the reference model, when it is another model (fused values)
        self.two_backends = False  # one model on two backends (ONNX Runtime's fusions differ between them)

    def run(self, pairs: list[_Pair], walker: _Walker) -> tuple[tuple[TensorDiff, ...], Divergence | None, list[str]]:
        results: list[TensorDiff] = []
        position = {p.candidate: k for k, p in enumerate(pairs)}
        self.to_ref = {p.candidate: p.reference for p in pairs}
        pending = {p.candidate: p for p in pairs}
        discarded = 0
        for batch in walker:
            if len(walker.fused_away) > discarded:  # (in insertion order: only the new ones)
                fused = list(walker.fused_away)[discarded:]
                discarded = len(walker.fused_away)
                self.source.discard(self.to_ref[n] for n in fused if n in self.to_ref)
            for name in sorted(batch, key=lambda n: position.get(n, -1)):
                pair = pending.pop(name, None)
                if pair is None:
                    continue
                if name in walker.groups:
                    self.plan.fragments[name] = self._group_fragment(walker.groups[name])
                diff = self._compare_one(pair, batch[name])
                if diff is not None:
                    results.append(diff)
                self.source.release(position[name])
            del batch
        fused = [n for n in pending if n in walker.fused_away]
        if fused:
            self.notes.append(f"{len(fused)} tensor(s) not compared: ONNX Runtime fused them away (see the fusions): "
                              + ", ".join(repr(n) for n in fused[:5]) + (" …" if len(fused) > 5 else ""))
        pending = {n: p for n, p in pending.items() if n not in walker.fused_away}
        if pending:
            self.notes.append(f"{len(pending)} tensor(s) were not produced by the candidate run: "
                              + ", ".join(repr(n) for n in list(pending)[:5]))
        if self.ref is not None:
            results = _mark_fused(results, self.ref, self.cand, pairs)
        failing = next((t for t in results if not t.passed and t.origin != "fused"), None)
        first = None if failing is None else self._divergence(failing, {t.name: t for t in results})
        return tuple(results), first, self.notes

    def _group_fragment(self, group: _Group) -> _Fragment:
        """The local-check fragment of a fused group's output: the group, read from outside it."""
        index, varying = self.cand.index, self.cand.varying()
        nodes, stack = set(group.nodes), list(group.nodes)
        while stack:  # with the nodes computing the constants it reads (weights made by nodes)
            for name in index.node_reads[stack.pop()]:
                j = index.producer.get(name)
                if j is not None and j not in nodes and name not in varying:
                    nodes.add(j)
                    stack.append(j)
        produced = {o for i in nodes for o in index.nodes[i].output}
        boundary = list(dict.fromkeys(r for i in sorted(nodes) for r in index.node_reads[i]
                                      if r not in produced and r not in index.initializers))
        return _Fragment(sorted(nodes, key=self.cand.rank.__getitem__), boundary, group.nodes[-1], group.describe())

    def _compare_one(self, pair: _Pair, value: np.ndarray) -> TensorDiff | None:
        if isinstance(value, np.ndarray):
            self.dtypes[pair.candidate] = value.dtype
        expected = self.source.get(pair.reference)
        if expected is None:
            self.notes.append(f"the reference side did not produce {pair.reference!r}")
            return None
        if not isinstance(value, np.ndarray) or not isinstance(expected, np.ndarray):
            self.notes.append(f"{pair.candidate!r} is not a tensor (sequence or map): skipped")
            return None
        tol = _tolerance_for(pair, self.tol, self.tolerances, (value.dtype, expected.dtype))
        diff = _make_diff(self.cand, pair, value, expected, tol)
        if not diff.passed and self.checks_left > 0 and not (diff.reason or "").startswith("shape"):
            self.checks_left -= 1
            local = self._local_error(pair, expected, tol)
            if local is not None:
                diff = replace(diff, origin="local" if not local[0] else "inherited", local_max_abs=local[1],
                               local_nonfinite=local[2])
        return diff

    def _local_error(self, pair: _Pair, expected: np.ndarray, tol: Tolerance
                     ) -> tuple[bool, float, str | None] | None:
        """Re-run the tensor's fragment on the reference side's inputs: (passes, max abs, how the NaN/Inf
        counts differ), or None."""
        frag = self.plan.fragments.get(pair.candidate)
        if frag is None:
            return None
        inputs: dict[str, np.ndarray] = {}
        for name in frag.boundary:
            value = self.feeds.get(name) if name in self.feeds else None
            if value is None and name in self.to_ref:
                value = self.source.peek(self.to_ref[name])
            if value is None:
                return None
            dtype = self.dtypes.get(name)
            same = dtype is None or not isinstance(value, np.ndarray) or value.dtype == dtype
            if not same:
                with np.errstate(over="ignore"):  # (beyond float16's range is inf, as the candidate computes it)
                    value = value.astype(dtype)
            inputs[name] = value
        what = f"re-running {pair.candidate!r} on the reference side's inputs"
        model = _fragment_model(self.cand, frag.nodes, inputs, [pair.candidate])
        got = _execute(model, inputs, [pair.candidate], self.backend, what, self.config, self.notes)[pair.candidate]
        if got.shape != expected.shape:
            return (False, math.inf, None)
        figures = tensor_figures(got, expected, tol)
        return (bool(figures["passed"]), float(figures["max_abs"]), nonfinite_text(figures["nan"], figures["inf"]))

    def _divergence(self, diff: TensorDiff, compared: Mapping[str, TensorDiff] | None = None) -> Divergence:
        frag = self.plan.fragments.get(diff.name)
        graph_nodes = self.cand.model.lazy_proto.graph.node
        if frag is not None:
            node = graph_nodes[frag.main]
            names = tuple(graph_nodes[i].name or f"#{i}" for i in frag.nodes)
        else:
            found = self.cand.node_of(diff.name)
            node = found if found is not None else onnx.NodeProto()
            names = ()
        local = None if diff.origin is None else diff.origin == "local"
        culprit, reason = self._culprit(node, diff, names, local, compared or {})
        return Divergence(node.name or node.op_type, node.op_type, diff.name, diff.marker,
                          tuple(n for n in node.input), diff.max_abs, local, diff.local_max_abs, names,
                          culprit, reason, diff.nonfinite, diff.local_nonfinite)

    def _culprit(self, node: onnx.NodeProto, diff: TensorDiff, fragment: tuple[str, ...], local: bool | None,
                 compared: Mapping[str, TensorDiff]) -> tuple[str, str]:
        """The node where the numbers go wrong, and why (see ``Divergence.culprit``)."""
        label = node.name or node.op_type
        frag = self.plan.fragments.get(diff.name)
        if frag is not None and frag.fused:
            return self._fused_culprit(frag, fragment, diff, local, compared)
        if local:
            error = diff.local_nonfinite or f"max abs {diff.local_max_abs or 0.0:.3g}"
            return label, f"re-run on the reference side's inputs it still diverges ({error})"
        boundary = frag.boundary if frag is not None else [n for n in node.input if n]
        inputs = [compared[n] for n in boundary if n in compared]
        bad = [t for t in inputs if not t.passed]
        if bad:
            return label, f"it reads {bad[0].name!r}, which is out of tolerance but fused or renamed"
        worst = max((t.max_abs for t in inputs), default=0.0)
        within = (f"its compared inputs are within tolerance (largest error {worst:.3g}) and its output is not"
                  if inputs else "none of its inputs is compared, and its output is out of tolerance")
        if local is False and self.two_backends and self.backend == "ort" and len(fragment) > 1:
            return ", ".join(fragment), (f"{within}; re-run alone on the reference side's inputs it agrees, so "
                                         "the difference comes from ONNX Runtime optimizing these nodes together")
        if local is False:
            return label, (f"{within}: it amplifies differences that are within tolerance "
                           f"(re-run on the reference side's inputs it agrees, max abs {diff.local_max_abs or 0.0:.3g}); "
                           "loosen the tolerance of its inputs or of this tensor")
        return label, within


    def _fused_culprit(self, frag: _Fragment, names: tuple[str, ...], diff: TensorDiff, local: bool | None,
                       compared: Mapping[str, TensorDiff]) -> tuple[str, str]:
        """The group ONNX Runtime fused, named with what it runs instead."""
        inputs = [compared[n] for n in frag.boundary if n in compared]
        bad = [t for t in inputs if not t.passed]
        group = ", ".join(self.cand.index.nodes[i].name or f"#{i}" for i in frag.nodes
                          if any(o in self.cand.varying() for o in self.cand.index.nodes[i].output))
        if bad:
            return group, (f"it reads {bad[0].name!r}, which is out of tolerance; ONNX Runtime fused these nodes "
                           f"into {frag.fused}")
        unknown = [n for n in frag.boundary if n not in compared and n not in self.feeds]
        worst = max((t.max_abs for t in inputs), default=0.0)
        within = ("its inputs are within tolerance" + (f" (largest error {worst:.3g})" if inputs else
                                                      " (the graph's inputs, fed alike)") + " and its output is not"
                  if not unknown else "its output is out of tolerance (inputs " + ", ".join(map(repr, unknown[:3]))
                  + " not compared)")
        rerun = (f"; re-run alone on the reference side's inputs it still diverges (max abs {diff.local_max_abs or 0.0:.3g})"
                 if local else "")
        return group, f"{within}: ONNX Runtime fused these nodes into {frag.fused}{rerun}"


def _make_diff(cand: _Graph, pair: _Pair, value: np.ndarray, expected: np.ndarray, tol: Tolerance) -> TensorDiff:
    node = cand.source_of(pair.candidate) if pair.marker else cand.node_of(pair.candidate)
    dtype = str(value.dtype) if value.dtype == expected.dtype else f"{value.dtype}/{expected.dtype}"
    base: dict[str, Any] = {
        "name": pair.candidate, "reference_name": pair.reference, "marker": pair.marker,
        "node": "" if node is None else (node.name or node.op_type), "op_type": "" if node is None else node.op_type,
        "dtype": dtype, "shape": tuple(value.shape), "reference_shape": tuple(expected.shape), "tolerance": tol,
    }
    if value.shape != expected.shape:
        if value.size != expected.size:
            nan = math.nan
            return TensorDiff(**base, max_abs=nan, max_rel=nan, mean_abs=nan, mse=nan, cosine=nan,
                              out_of_tolerance=1.0, needed_atol=math.inf, needed_rtol=math.inf, nan=(0, 0),
                              inf=(0, 0), passed=False,
                              reason=f"shape {list(value.shape)} differs from the reference's {list(expected.shape)}")
        expected = expected.reshape(value.shape)
    figures = tensor_figures(value, expected, tol)
    differ = nonfinite_text(figures["nan"], figures["inf"])
    reason = f"NaN/Inf differ: {differ}" if differ else None
    sample = None if figures["passed"] else value_sample(value, expected)
    return TensorDiff(**base, **figures, reason=reason if not figures["passed"] else None, sample=sample)


def nonfinite_text(nan: tuple[int, int], inf: tuple[int, int]) -> str | None:
    """How the (candidate, reference) NaN and Inf counts differ, in words ("candidate 32448 Inf,
    reference 0"; both kinds: "candidate 2 NaN, 0 Inf; reference 0 NaN, 5 Inf"), or None."""
    kinds = [(kind, counts) for kind, counts in (("NaN", nan), ("Inf", inf)) if counts[0] != counts[1]]
    if not kinds:
        return None
    if len(kinds) == 1:
        kind, (cand, ref) = kinds[0]
        return f"candidate {cand} {kind}, reference {ref}"
    return f"candidate {nan[0]} NaN, {inf[0]} Inf; reference {nan[1]} NaN, {inf[1]} Inf"


#: How many value pairs a failed tensor keeps for the report (2 × 16 KiB as float64).
SAMPLE_SIZE = 2048


def value_sample(candidate: np.ndarray, reference: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Up to ``SAMPLE_SIZE`` (candidate, reference) pairs of equal-shape numeric arrays, evenly
    strided, with the element of largest absolute error among them; None for other dtypes."""
    c, r = _flat(candidate), _flat(reference)
    if c.dtype.kind not in "biuf" or r.dtype.kind not in "biuf" or not c.size:
        return None
    picks = np.unique(np.linspace(0, c.size - 1, min(c.size, SAMPLE_SIZE)).astype(np.int64))
    if c.size <= _CHUNK:  # (the worst element of a larger tensor is not worth another pass)
        with np.errstate(invalid="ignore", over="ignore"):
            error = np.abs(c.astype(np.float64) - r.astype(np.float64))
        if not np.isnan(error).all():
            worst = int(np.nanargmax(error))
            if worst not in picks:
                picks[-1] = worst
    return c[picks].astype(np.float64), r[picks].astype(np.float64)


# ------------------------------------------------------------------------------- first non-finite


@dataclass(frozen=True)
class ValueRange:
    """The range of one input of a node, over its finite values.

    Attributes:
        name: The tensor.
        kind: "input" (a graph input), "weight" (an initializer) or "activation".
        min: Its smallest finite value (None when it has none or is not numeric).
        max: Its largest finite value.
        nan: How many NaN it holds.
        inf: How many Inf it holds.
    """

    name: str
    kind: str
    min: float | None
    max: float | None
    nan: int = 0
    inf: int = 0

    @property
    def finite(self) -> bool:
        return not (self.nan or self.inf)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"name": self.name, "kind": self.kind, "min": self.min, "max": self.max, "nan": self.nan,
                "inf": self.inf}


@dataclass(frozen=True)
class NonFinite:
    """The first node, in execution order, that produces NaN or Inf from finite inputs.

    Attributes:
        node: The node's name (its op type when unnamed).
        op_type: Its operator.
        tensor: Its first output holding NaN or Inf.
        nan: NaN count of that output.
        inf: Inf count of that output.
        inputs: The range of each of the node's inputs (all finite).
    """

    node: str
    op_type: str
    tensor: str
    nan: int
    inf: int
    inputs: tuple[ValueRange, ...]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"node": self.node, "op_type": self.op_type, "tensor": self.tensor, "nan": self.nan, "inf": self.inf,
                "inputs": [r.to_dict() for r in self.inputs]}


@dataclass(frozen=True)
class FiniteCheck:
    """The result of ``check_finite``.

    Attributes:
        model: The model's file or name.
        first_nonfinite: The first node producing NaN/Inf from finite inputs, or None.
        checked: How many tensors were checked.
        notes: Non-finite values that came from the inputs or weights themselves, and the like.
    """

    model: str
    first_nonfinite: NonFinite | None
    checked: int
    notes: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        """True when no node produces NaN or Inf from finite inputs."""
        return self.first_nonfinite is None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"model": self.model, "passed": self.passed, "checked": self.checked,
                "first_nonfinite": None if self.first_nonfinite is None else self.first_nonfinite.to_dict(),
                "notes": list(self.notes)}


def check_finite(
    model: Model,
    /,
    feeds: Mapping[str, Any] | None = None,
    *,
    feed_options: FeedOptions = FeedOptions(),
    backend: Backend = "ort",
    provider: Provider = "cpu",
    provider_options: Mapping[str, str] | None = None,
    custom_ops: Sequence[str | os.PathLike[str]] = (),
    python_ops: Sequence[CustomOp | str | os.PathLike[str]] = (),
    fragment_bytes: int = DEFAULT_FRAGMENT_BYTES,
) -> FiniteCheck:
    """Find the first node, in execution order, whose output holds NaN or Inf although its inputs do not.

    The model runs fragment by fragment, as compare's capture does, keeping only each tensor's range,
    so memory stays close to a plain run's.

    Args:
        model: The model.
        feeds: Input values by name; the others are generated (seeded).
        feed_options: How the inputs not in ``feeds`` are generated.
        backend: "ort" (all optimizations), "ort-noopt" or "reference".
        provider: The execution provider.
        provider_options: The provider's options.
        custom_ops: Custom-operator libraries.
        python_ops: Python implementations of custom operators.
        fragment_bytes: About how many bytes of tensors each fragment run exposes at most; a
            model whose weights and live activations are smaller than four times this exposes a
            quarter of them per fragment (so the comparison stays near a plain run's memory).

    Raises:
        FeedError: Feeds that do not fit the model.
        RuntimeFailure: The backend fails.
    """
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    argcheck.optional(argcheck.mapping, feeds, "feeds", key=_tensor_key)
    argcheck.instance(feed_options, "feed_options", FeedOptions, "a graphkit.FeedOptions")
    argcheck.choice(backend, "backend", BACKENDS)
    argcheck.integer(fragment_bytes, "fragment_bytes", minimum=0)
    config = settings(provider=provider, provider_options=provider_options, custom_ops=custom_ops,
                      python_ops=python_ops)
    _backends.check_provider(config.provider)
    require_sound(model)
    graph = _Graph.of(model, ("my", "Debug", "name"))
    values = make_feeds(model, feeds, feed_options=feed_options)
    return _scan_finite(graph, backend, values, config, fragment_bytes)


def _scan_finite(graph: _Graph, backend: str, feeds: Mapping[str, Any], config: Settings | None,
                 budget: int) -> FiniteCheck:
    notes: list[str] = []
    walker = _Walker(graph, backend, feeds, set(graph.produced), budget=budget,
                     label=_side_label(graph, backend, config), config=config, notes=notes)
    ranges: dict[str, ValueRange] = {n: _range_of(n, "input", v) for n, v in feeds.items()}
    nodes = graph.model.lazy_proto.graph.node
    inherited: list[str] = []
    checked = 0
    for batch in walker:
        for name in sorted(batch, key=lambda n: graph.position.get(n, -1)):
            value = batch[name]
            if name in ranges:
                continue
            ranges[name] = found = _range_of(name, "activation", value)
            checked += 1
            if found.finite:
                continue
            i = graph.index.producer[name]
            inputs = tuple(_input_range(graph, r, ranges) for r in graph.index.node_reads[i])
            if all(r.finite for r in inputs):
                node = nodes[i]
                first = NonFinite(node.name or node.op_type, node.op_type, name, found.nan, found.inf, inputs)
                return FiniteCheck(graph.label, first, checked, tuple(notes + _inherited_note(inherited)))
            inherited.append(name)
        del batch
    non_finite_feeds = [n for n, r in ranges.items() if r.kind == "input" and not r.finite]
    if non_finite_feeds:
        notes.append("these inputs hold NaN or Inf themselves: " + ", ".join(repr(n) for n in non_finite_feeds))
    return FiniteCheck(graph.label, None, checked, tuple(notes + _inherited_note(inherited)))


def _inherited_note(names: list[str]) -> list[str]:
    if not names:
        return []
    return [f"{len(names)} tensor(s) hold NaN/Inf only because an input, a weight or an earlier tensor does "
            f"(first: {names[0]!r})"]


def _input_range(graph: _Graph, name: str, ranges: dict[str, ValueRange]) -> ValueRange:
    if name in ranges:
        return ranges[name]
    tensor = graph.index.initializers.get(name)
    if tensor is not None:
        ranges[name] = _range_of(name, "weight", tensor_value(graph.model, tensor))
        return ranges[name]
    return ValueRange(name, "activation", None, None)


def _range_of(name: str, kind: str, value: Any) -> ValueRange:
    """The finite range and NaN/Inf counts of a value, in chunks (no full-size float64 copy)."""
    if not isinstance(value, np.ndarray) or value.dtype.kind not in "biuf" or value.size == 0:
        return ValueRange(name, kind, None, None)
    flat = value.reshape(-1)
    if flat.dtype.kind != "f":
        return ValueRange(name, kind, float(flat.min()), float(flat.max()))
    lo, hi, nan, inf = math.inf, -math.inf, 0, 0
    for start in range(0, flat.size, _CHUNK):
        chunk = flat[start:start + _CHUNK]
        finite = np.isfinite(chunk)
        if not finite.all():
            isnan = np.isnan(chunk)
            nan += int(isnan.sum())
            inf += int(chunk.size - int(finite.sum()) - int(isnan.sum()))
            chunk = chunk[finite]
        if chunk.size:
            lo, hi = min(lo, float(chunk.min())), max(hi, float(chunk.max()))
    return ValueRange(name, kind, lo if math.isfinite(lo) else None, hi if math.isfinite(hi) else None, nan, inf)


# ------------------------------------------------------------------------------ fused and renamed


def _mark_fused(results: list[TensorDiff], ref: _Graph, cand: _Graph, pairs: Sequence[_Pair]) -> list[TensorDiff]:
    """Failed tensors whose producer changed and whose nearest compared tensors downstream all pass
    are fused or renamed values (an optimizer folded a node into their producer, or gave its output
    another tensor's name), not divergences."""
    by_name = {t.name: t for t in results}
    to_ref = {p.candidate: p.reference for p in pairs}
    quantized = {p.candidate for p in pairs if p.quantized}
    paired_ref = set(to_ref.values())
    marked = []
    for t in results:
        if not t.passed and t.name not in quantized:
            downstream = _next_compared(cand, t.name, by_name)
            change = _producer_change(ref, cand, t.name, t.reference_name, to_ref) if downstream else None
            if change is not None and all(by_name[d].passed for d in downstream):
                gone = _unmatched_downstream(ref, t.reference_name, paired_ref)
                folded = f"; the reference's {', '.join(repr(g) for g in gone[:3])} has no counterpart" if gone else ""
                t = replace(t, origin="fused", reason=(
                    f"fused or renamed: its producer changed ({change}) and what is computed from it "
                    f"({', '.join(repr(d) for d in downstream[:3])}) matches again{folded}"))
        marked.append(t)
    return marked


def _fusions(ref: _Graph, cand: _Graph, pairs: Sequence[_Pair], unmatched: Sequence[str],
             tensors: Sequence[TensorDiff]) -> tuple[Fusion, ...]:
    """Matched tensors whose candidate producer changed and absorbed reference tensors that have no
    counterpart (``unmatched``, walking the reference upstream to the previous matched tensors)."""
    to_ref = {p.candidate: p.reference for p in pairs}
    gone = set(unmatched)
    found = []
    covered: set[str] = set()
    for t in tensors:  # a fused value (its name kept, its producer changed) absorbed what follows it
        node = cand.node_of(t.name)
        if t.origin == "fused" and node is not None:
            absorbed = [n for n in _unmatched_downstream(ref, t.reference_name, set(to_ref.values())) if n in gone]
            absorbed += [n for n in _unmatched_upstream(ref, t.reference_name, gone) if n not in absorbed]
            covered.update(absorbed)
            found.append(Fusion(t.name, node.name or node.op_type, node.op_type, tuple(absorbed)))
    done = {f.tensor for f in found}
    for p in pairs:
        if p.quantized or p.candidate in done or _producer_change(ref, cand, p.candidate, p.reference, to_ref) is None:
            continue
        absorbed = [n for n in _unmatched_upstream(ref, p.reference, gone) if n not in covered]
        node = cand.node_of(p.candidate)
        if absorbed and node is not None:
            covered.update(absorbed)
            found.append(Fusion(p.candidate, node.name or node.op_type, node.op_type, tuple(absorbed)))
    return tuple(found)


def _runtime_fusions(cand: _Graph, walker: _Walker) -> tuple[Fusion, ...]:
    """The groups ONNX Runtime fused on the candidate side, each named by the node it runs for it."""
    found = []
    for tensor, group in walker.groups.items():
        op, name, _ = group.optimized[0] if group.optimized else ("", "", "")
        names = tuple(cand.index.nodes[i].name or f"#{i}" for i in group.nodes)
        found.append(Fusion(tensor, name, op, group.absorbed, names))
    return tuple(found)


def _unmatched_upstream(graph: _Graph, tensor: str, gone: set[str], limit: int = 64) -> list[str]:
    """The tensors in ``gone`` (no counterpart) that ``tensor`` is computed from on the reference
    side through other such tensors."""
    index = graph.index
    found: list[str] = []
    stack = [tensor]
    seen = {tensor}
    while stack and len(found) < limit:
        i = index.producer.get(stack.pop())
        if i is None:
            continue
        for name in index.node_reads[i]:
            if name in gone and name not in seen:
                seen.add(name)
                found.append(name)
                stack.append(name)
    return sorted(found, key=lambda n: graph.position.get(n, 0))


def _next_compared(graph: _Graph, tensor: str, compared: Mapping[str, TensorDiff], limit: int = 10_000) -> list[str]:
    """The compared tensors nearest downstream of ``tensor`` (each path stops at the first one)."""
    index, nodes = graph.index, graph.model.lazy_proto.graph.node
    found: list[str] = []
    seen = {tensor}
    stack = [tensor]
    while stack and len(seen) < limit:
        name = stack.pop()
        for i in index.consumers.get(name, []):
            for out in nodes[i].output:
                if not out or out in seen:
                    continue
                seen.add(out)
                if out in compared:
                    found.append(out)
                else:
                    stack.append(out)
    return sorted(found, key=lambda n: graph.position.get(n, 0))


def _unmatched_downstream(graph: _Graph, tensor: str, paired: set[str], limit: int = 64) -> list[str]:
    """Tensors computed from ``tensor`` on the reference side, up to the next paired ones, that have
    no counterpart (what an optimizer folded away)."""
    index, nodes = graph.index, graph.model.lazy_proto.graph.node
    found: list[str] = []
    stack = [tensor]
    seen = {tensor}
    while stack and len(found) < limit:
        name = stack.pop()
        for i in index.consumers.get(name, []):
            for out in nodes[i].output:
                if out and out not in seen and out not in paired:
                    seen.add(out)
                    found.append(out)
                    stack.append(out)
    return sorted(found, key=lambda n: graph.position.get(n, 0))


def _producer_change(ref: _Graph, cand: _Graph, tensor: str, ref_tensor: str, to_ref: Mapping[str, str]) -> str | None:
    """How the candidate's producer of ``tensor`` differs from the reference's producer of
    ``ref_tensor`` (operator, inputs, attributes, weights), or None when they are the same."""
    c, r = cand.node_of(tensor), ref.node_of(ref_tensor)
    if c is None or r is None:
        return None if c is None and r is None else "a graph input on one side"
    if (c.op_type, c.domain) != (r.op_type, r.domain):
        return f"{r.op_type} -> {c.op_type}"
    if len(c.input) != len(r.input):
        return f"{r.op_type} with {len(r.input)} inputs -> {len(c.input)}"
    for a, b in zip(c.input, r.input):
        a_weight, b_weight = cand.index.initializers.get(a), ref.index.initializers.get(b)
        if a_weight is not None and b_weight is not None:
            if _weight_key(a_weight) != _weight_key(b_weight):
                return f"{c.op_type} weight {a!r} differs from the reference's {b!r}"
        elif to_ref.get(a, a) != b:
            return f"{c.op_type} reads {a!r} where the reference reads {b!r}"
    if sorted(x.SerializeToString() for x in c.attribute) != sorted(x.SerializeToString() for x in r.attribute):
        return f"{c.op_type} attributes differ"
    return None


def _weight_key(tensor: onnx.TensorProto) -> bytes:
    """A weight's content as bytes, without its name (external weights: where they lie)."""
    copy = onnx.TensorProto()
    copy.CopyFrom(tensor)
    copy.name = ""
    return copy.SerializeToString()


# ------------------------------------------------------------------------------------ float vs QDQ

_DQ_SUFFIX = "_DequantizeLinear_Output"


def _qdq_pairs(ref: _Graph, cand: _Graph, pairs: list[_Pair]) -> list[_Pair]:
    """``pairs`` plus, for a quantized (QDQ) candidate, each activation after its
    QuantizeLinear/DequantizeLinear pair against the reference tensor the QuantizeLinear reads, as
    ONNX Runtime's qdq_loss_debug matches them (the tensor before quantization keeps its name)."""
    nodes = cand.model.lazy_proto.graph.node
    if not any(n.op_type == "DequantizeLinear" for n in nodes):
        return pairs
    have = {p.candidate for p in pairs}
    to_ref = {p.candidate: p.reference for p in pairs}
    extra: dict[str, str] = {}
    for node in nodes:
        if node.op_type != "DequantizeLinear" or not node.output or node.output[0] in have:
            continue
        q = cand.index.producer.get(node.input[0])
        if q is None or nodes[q].op_type != "QuantizeLinear":
            continue
        source = nodes[q].input[0]
        target = to_ref.get(source, source)
        if target in ref.position or (target in ref.index.input_set and target not in ref.index.initializers):
            extra[node.output[0]] = target
    if not extra:
        return pairs
    merged = {p.candidate: p for p in pairs}
    merged.update({c: _Pair(c, r, None, quantized=True) for c, r in extra.items()})
    return [merged[n] for n in cand.produced if n in merged]


def _qdq_weights(ref: _Graph, cand: _Graph, backend: str, tol: Tolerance,
                 tolerances: Mapping[str, Tolerance], config: Settings | None) -> list[TensorDiff]:
    """Each weight the QDQ candidate dequantizes (a DequantizeLinear of initializers) against the
    reference's float weight of the same name (``W`` for ``W_quantized`` / ``W_DequantizeLinear_Output``)."""
    index, nodes = cand.index, cand.model.lazy_proto.graph.node
    found: dict[int, str] = {}
    for i, node in enumerate(nodes):
        if node.op_type != "DequantizeLinear" or not node.output or node.input[0] not in index.initializers:
            continue
        if not all(n in index.initializers for n in node.input if n):
            continue
        for name in (node.output[0].removesuffix(_DQ_SUFFIX), node.input[0].removesuffix("_quantized")):
            if name in ref.index.initializers and name not in index.initializers:
                found[i] = name
                break
    if not found:
        return []
    order = sorted(found)
    outputs = [nodes[i].output[0] for i in order]
    model = _fragment_model(cand, order, {}, outputs)
    values = _execute(model, {}, outputs, backend, f"dequantizing the weights of {cand.label}", config)
    diffs = []
    for i, out in zip(order, outputs):
        pair = _Pair(out, found[i], None, quantized=True)
        expected = tensor_value(ref.model, ref.index.initializers[found[i]])
        value = values.pop(out)
        diffs.append(_make_diff(cand, pair, value, expected,
                                _tolerance_for(pair, tol, tolerances, (value.dtype, expected.dtype))))
    return diffs
