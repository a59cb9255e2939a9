"""diff(a, b): what changed between two models, structurally.

Nodes are matched by name first, then by structure (same op type, inputs coming from matched nodes,
the same graph inputs or the same weights, nearest position in topological order), so renamed and
unnamed nodes still pair up. Reported: nodes added, removed or changed (op, attributes, inputs),
initializers whose values differ beyond a tolerance, graph inputs/outputs and their shapes, value_info
shapes, opsets, IR version and metadata; If/Loop/Scan bodies are compared the same way. Weights are
read one pair at a time (external ones from disk), never both models' weights at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import onnx

from graphkit import _check_args as argcheck
from graphkit._graph import GraphIndex
from graphkit._io import tensor_value
from graphkit._model import Model, function_tensors, is_external
from graphkit._options import Tolerance
from graphkit._summary import TensorSig, dtype_name

__all__ = ["Change", "ModelDiff", "diff"]


@dataclass(frozen=True)
class Change:
    """One difference between the two models.

    Attributes:
        kind: "added", "removed" or "changed".
        what: "node", "initializer", "input", "output", "value_info", "opset", "metadata" or "model".
        name: The node, tensor, domain or key concerned (in B for added and changed, in A for removed).
        detail: What changed, readable ("op Add -> Sub", "attribute 'pads' [0, 0] -> [1, 1]").
        graph: Where ("main graph" or a path into a subgraph).
    """

    kind: str
    what: str
    name: str
    detail: str = ""
    graph: str = "main graph"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)


@dataclass(frozen=True)
class ModelDiff:
    """The result of ``diff``.

    Attributes:
        a: The first model's file or name.
        b: The second model's file or name.
        changes: Every difference, model-level first, then inputs/outputs, nodes, initializers.
        matched_by_name: Nodes paired by name.
        matched_by_structure: Nodes paired by structure (renamed or unnamed).
        tolerance: The tolerance used for weights.
    """

    a: str
    b: str
    changes: tuple[Change, ...]
    matched_by_name: int
    matched_by_structure: int
    tolerance: Tolerance

    @property
    def identical(self) -> bool:
        """True when nothing differs."""
        return not self.changes

    def counts(self) -> dict[str, int]:
        """``"<kind> <what>"`` → how many, e.g. ``{"changed node": 2}``."""
        found: dict[str, int] = {}
        for c in self.changes:
            key = f"{c.kind} {c.what}"
            found[key] = found.get(key, 0) + 1
        return found

    def of(self, what: str, name: str) -> list[Change]:
        """The changes about one node/tensor/key."""
        return [c for c in self.changes if c.what == what and c.name == name]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "a": self.a,
            "b": self.b,
            "identical": self.identical,
            "counts": self.counts(),
            "matched_by_name": self.matched_by_name,
            "matched_by_structure": self.matched_by_structure,
            "atol": self.tolerance.atol,
            "rtol": self.tolerance.rtol,
            "changes": [c.to_dict() for c in self.changes],
        }


def diff(a: Model, b: Model, /, *, tolerance: Tolerance = Tolerance()) -> ModelDiff:
    """The structural differences from ``a`` to ``b``.

    Args:
        a: The first (old) model.
        b: The second (new) model.
        tolerance: Weights differ where ``|b - a| > atol + rtol * |a|``; ``Tolerance(0, 0)`` compares
            them exactly.

    Raises:
        UsageError: An argument of the wrong type.
        ExternalDataError: An external weight cannot be read.
    """
    argcheck.instance(a, "a", Model, argcheck.MODEL)
    argcheck.instance(b, "b", Model, argcheck.MODEL)
    argcheck.instance(tolerance, "tolerance", Tolerance, "a graphkit.Tolerance")
    atol, rtol = tolerance.atol, tolerance.rtol
    out: list[Change] = []
    _model_level(a.lazy_proto, b.lazy_proto, out)
    differ = _GraphDiff(a, b, atol, rtol)
    differ.run(a.lazy_proto.graph, b.lazy_proto.graph, "main graph", out)
    differ.functions(a.lazy_proto, b.lazy_proto, out)
    return ModelDiff(a.name, b.name, tuple(out), differ.by_name, differ.by_structure, tolerance)


# ------------------------------------------------------------------------------------ model level


def _model_level(a: onnx.ModelProto, b: onnx.ModelProto, out: list[Change]) -> None:
    for field in ("ir_version", "producer_name", "producer_version", "domain", "model_version"):
        va, vb = getattr(a, field), getattr(b, field)
        if va != vb:
            out.append(Change("changed", "model", field, f"{va!r} -> {vb!r}"))
    oa = {o.domain or "ai.onnx": o.version for o in a.opset_import}
    ob = {o.domain or "ai.onnx": o.version for o in b.opset_import}
    _keyed(oa, ob, "opset", out)
    ma = {p.key: p.value for p in a.metadata_props}
    mb = {p.key: p.value for p in b.metadata_props}
    _keyed(ma, mb, "metadata", out)


def _keyed(a: dict[str, Any], b: dict[str, Any], what: str, out: list[Change]) -> None:
    for key in a:
        if key not in b:
            out.append(Change("removed", what, key, f"was {a[key]!r}"))
        elif a[key] != b[key]:
            out.append(Change("changed", what, key, f"{a[key]!r} -> {b[key]!r}"))
    for key in b:
        if key not in a:
            out.append(Change("added", what, key, f"{b[key]!r}"))


# ------------------------------------------------------------------------------------------ graphs


Source = tuple[str, Any, int]


class _GraphDiff:
    """Diffs one graph pair (and, through attributes, their subgraphs)."""

    def __init__(self, a: Model, b: Model, atol: float, rtol: float) -> None:
        self.a, self.b = a, b
        self.atol, self.rtol = atol, rtol
        self.by_name = 0
        self.by_structure = 0

    def run(self, ga: onnx.GraphProto, gb: onnx.GraphProto, where: str, out: list[Change]) -> None:
        ia, ib = GraphIndex(ga), GraphIndex(gb)
        order_a, order_b = _order(ia), _order(ib)
        self._signatures(ga, gb, ia, ib, where, out)
        pairs, structural = _match_nodes(ga, gb, ia, ib, order_a, order_b)
        self.by_name += len(pairs) - len(structural)
        self.by_structure += len(structural)
        paired_b = {j: i for i, j in pairs.items()}
        weights = dict(_name_pairs(ia.initializers, ib.initializers))
        weights.update(_weights_by_use(ia, ib, pairs, weights))
        for j in order_b:
            if j in paired_b:
                self._node(ga, gb, ia, ib, paired_b[j], j, pairs, weights, j in structural, where, out)
        for i in order_a:
            if i not in pairs:
                node = ga.node[i]
                out.append(Change("removed", "node", _label(node, i), node.op_type, where))
        for j in order_b:
            if j not in paired_b:
                node = gb.node[j]
                reads = ", ".join(repr(n) for n in node.input if n)
                out.append(Change("added", "node", _label(node, j), f"{node.op_type} reading {reads}", where))
        self._initializers(ia, ib, pairs, weights, where, out)

    # -- inputs, outputs, value_info
    def _signatures(self, ga: onnx.GraphProto, gb: onnx.GraphProto, ia: GraphIndex, ib: GraphIndex, where: str,
                    out: list[Change]) -> None:
        for what, la, lb in (
            ("input", [v for v in ga.input if v.name not in ia.initializers],
             [v for v in gb.input if v.name not in ib.initializers]),
            ("output", list(ga.output), list(gb.output)),
        ):
            sa = {v.name: TensorSig.of(v) for v in la}
            sb = {v.name: TensorSig.of(v) for v in lb}
            for name, sig in sa.items():
                if name not in sb:
                    out.append(Change("removed", what, name, f"{sig.dtype} {sig.shape_text()}", where))
                elif sb[name] != sig:
                    new = sb[name]
                    out.append(Change("changed", what, name,
                                      f"{sig.dtype} {sig.shape_text()} -> {new.dtype} {new.shape_text()}", where))
            for name, sig in sb.items():
                if name not in sa:
                    out.append(Change("added", what, name, f"{sig.dtype} {sig.shape_text()}", where))
        va = {v.name: TensorSig.of(v) for v in ga.value_info}
        for v in gb.value_info:
            if v.name in va and TensorSig.of(v) != va[v.name]:
                old, new = va[v.name], TensorSig.of(v)
                out.append(Change("changed", "value_info", v.name,
                                  f"{old.dtype} {old.shape_text()} -> {new.dtype} {new.shape_text()}", where))

    # -- nodes
    def _node(self, ga: onnx.GraphProto, gb: onnx.GraphProto, ia: GraphIndex, ib: GraphIndex, i: int, j: int,
              pairs: dict[int, int], weights: dict[str, str], structural: bool, where: str,
              out: list[Change]) -> None:
        na, nb = ga.node[i], gb.node[j]
        details: list[str] = []
        if structural and na.name != nb.name:
            details.append(f"renamed from {_label(na, i)!r}")
        if (na.domain or "", na.op_type) != (nb.domain or "", nb.op_type):
            details.append(f"op {_op(na)} -> {_op(nb)}")
        details.extend(self._inputs(na, nb, ia, ib, pairs, weights))
        for k, (oa, ob) in enumerate(zip(na.output, nb.output)):
            if oa != ob:
                details.append(f"output #{k} renamed {oa!r} -> {ob!r}")
        if len(na.output) != len(nb.output):
            details.append(f"{len(na.output)} outputs -> {len(nb.output)}")
        details.extend(self._attributes(na, nb, f"{where} > {_label(nb, j)}", out))
        if details:
            out.append(Change("changed", "node", _label(nb, j), "; ".join(details), where))

    def _inputs(self, na: onnx.NodeProto, nb: onnx.NodeProto, ia: GraphIndex, ib: GraphIndex,
                pairs: dict[int, int], weights: dict[str, str]) -> list[str]:
        found = []
        for k in range(max(len(na.input), len(nb.input))):
            xa = na.input[k] if k < len(na.input) else None
            xb = nb.input[k] if k < len(nb.input) else None
            if xa is None:
                found.append(f"input #{k} added {xb!r}")
            elif xb is None:
                found.append(f"input #{k} removed (was {xa!r})")
            elif not _same_source(sa := _source(xa, ia), sb := _source(xb, ib), pairs, weights):
                if xa == xb:
                    found.append(f"input #{k} {xa!r} now comes from {_describe(sb, ib)} (was {_describe(sa, ia)})")
                else:
                    found.append(f"input #{k} {xa!r} -> {xb!r}")
        return found

    def _attributes(self, na: onnx.NodeProto, nb: onnx.NodeProto, where: str, out: list[Change]) -> list[str]:
        aa = {a.name: a for a in na.attribute}
        ab = {a.name: a for a in nb.attribute}
        found = []
        for name, attr in aa.items():
            if name not in ab:
                found.append(f"attribute {name!r} removed (was {_attr_text(attr)})")
        for name, attr in ab.items():
            if name not in aa:
                found.append(f"attribute {name!r} added: {_attr_text(attr)}")
                continue
            old = aa[name]
            if attr.type == onnx.AttributeProto.GRAPH and old.type == attr.type:
                inner: list[Change] = []
                self.run(old.g, attr.g, f"{where}.{name}", inner)
                out.extend(inner)
                if inner:
                    found.append(f"body {name!r}: {len(inner)} change(s)")
            elif attr.type == onnx.AttributeProto.TENSOR and old.type == attr.type:
                text = self._values(tensor_value(self.a, old.t), tensor_value(self.b, attr.t))
                if text:
                    found.append(f"attribute {name!r} {text}")
            elif attr.type == onnx.AttributeProto.SPARSE_TENSOR and old.type == attr.type \
                    and list(old.sparse_tensor.dims) == list(attr.sparse_tensor.dims):
                for part in ("values", "indices"):
                    text = self._weight_values(getattr(old.sparse_tensor, part), getattr(attr.sparse_tensor, part))
                    if text:
                        found.append(f"attribute {name!r} ({part}) {text}")
            elif old.SerializeToString(deterministic=True) != attr.SerializeToString(deterministic=True):
                found.append(f"attribute {name!r} {_attr_text(old)} -> {_attr_text(attr)}")
        return found

    # -- local functions
    def functions(self, a: onnx.ModelProto, b: onnx.ModelProto, out: list[Change]) -> None:
        """Local functions added, removed, or changed in their nodes or in a tensor's values (a Constant's
        value in a body of a function node included: ``function_tensors`` walks them all)."""
        fa = {(f.domain, f.name): f for f in a.functions}
        fb = {(f.domain, f.name): f for f in b.functions}
        for key, func in fa.items():
            if key not in fb:
                out.append(Change("removed", "function", _function_name(func), f"{len(func.node)} node(s)"))
        for key, func in fb.items():
            old = fa.get(key)
            if old is None:
                out.append(Change("added", "function", _function_name(func), f"{len(func.node)} node(s)"))
                continue
            found = self._function(old, func)
            if found:
                out.append(Change("changed", "function", _function_name(func), "; ".join(found)))

    def _function(self, fa: onnx.FunctionProto, fb: onnx.FunctionProto) -> list[str]:
        shape_a, shape_b = _without_tensor_data(fa), _without_tensor_data(fb)
        if shape_a != shape_b:
            return ["nodes, inputs, outputs or attributes differ"]
        found = []
        for (ta, where), (tb, _) in zip(function_tensors(fa), function_tensors(fb)):
            text = self._weight_values(ta, tb)
            if text:
                found.append(f"tensor {ta.name or '(unnamed)'!r} ({where}) {text}")
        return found

    # -- weights
    def _initializers(self, ia: GraphIndex, ib: GraphIndex, pairs: dict[int, int], weights: dict[str, str],
                      where: str, out: list[Change]) -> None:
        paired_b = set(weights.values())
        for name_a, ta in ia.initializers.items():
            if name_a not in weights:
                out.append(Change("removed", "initializer", name_a, _tensor_text(ta), where))
                continue
            name_b = weights[name_a]
            tb = ib.initializers[name_b]
            details = [f"renamed from {name_a!r}"] if name_a != name_b else []
            if list(ta.dims) != list(tb.dims):
                details.append(f"{_tensor_text(ta)} -> {_tensor_text(tb)}")
            elif ta.data_type != tb.data_type:
                details.append(f"{_tensor_text(ta)} -> {_tensor_text(tb)}")
                text = self._cast_values(ta, tb)
                if text:
                    details.append(text)
            else:
                text = self._weight_values(ta, tb)
                if text:
                    details.append(text)
            if details:
                out.append(Change("changed", "initializer", name_b, "; ".join(details), where))
        for name_b, tb in ib.initializers.items():
            if name_b not in paired_b:
                out.append(Change("added", "initializer", name_b, _tensor_text(tb), where))

    def _weight_values(self, ta: onnx.TensorProto, tb: onnx.TensorProto) -> str:
        if not is_external(ta) and not is_external(tb) and ta.HasField("raw_data") and tb.HasField("raw_data") \
                and ta.raw_data == tb.raw_data:
            return ""
        va = tensor_value(self.a, ta)
        vb = tensor_value(self.b, tb)
        try:
            return self._values(va, vb)
        finally:
            del va, vb

    def _cast_values(self, ta: onnx.TensorProto, tb: onnx.TensorProto) -> str:
        """A weight whose dtype changed: its values compared in the wider of the two dtypes, so a
        float16 copy that is also off by 1.2 says so beside ``float32 -> float16``."""
        va = tensor_value(self.a, ta)
        vb = tensor_value(self.b, tb)
        try:
            return _cast_change(va, vb, self.atol, self.rtol)
        finally:
            del va, vb

    def _values(self, va: np.ndarray, vb: np.ndarray) -> str:
        if va.shape != vb.shape:
            return f"shape {list(va.shape)} -> {list(vb.shape)}"
        if va.dtype.kind in "OUS" or vb.dtype.kind in "OUS" or va.dtype == bool:
            differ = int(np.count_nonzero(va != vb))
            return f"values differ at {differ} of {va.size} elements" if differ else ""
        if np.array_equal(va, vb, equal_nan=va.dtype.kind == "f"):
            return ""
        a64, b64 = va.astype(np.float64), vb.astype(np.float64)
        with np.errstate(invalid="ignore"):
            delta = np.abs(b64 - a64)
            bad = ~(delta <= self.atol + self.rtol * np.abs(a64))
        bad &= ~(np.isnan(a64) & np.isnan(b64))
        count = int(np.count_nonzero(bad))
        if not count:
            return ""
        finite = delta[np.isfinite(delta)]
        worst = float(finite.max()) if finite.size else float("nan")
        return f"values differ at {count} of {va.size} elements (max abs {worst:.3g})"


def _cast_change(va: np.ndarray, vb: np.ndarray, atol: float, rtol: float) -> str:
    """The change between two arrays of different dtypes, both cast to the wider one first:
    ``values equal after casting to float32`` or ``values after casting to float32: 3 of 9 elements
    beyond tolerance, max abs change 1.2, max rel change 0.5``."""
    numeric = "biuf"
    if va.dtype.kind not in numeric or vb.dtype.kind not in numeric:
        differ = int(np.count_nonzero(va.astype(str) != vb.astype(str)))
        return f"values differ at {differ} of {va.size} elements" if differ else "values equal as text"
    wide = np.promote_types(va.dtype, vb.dtype)
    a_wide, b_wide = va.astype(wide), vb.astype(wide)
    if np.array_equal(a_wide, b_wide, equal_nan=wide.kind == "f"):
        return f"values equal after casting to {wide.name}"
    a64, b64 = a_wide.astype(np.float64), b_wide.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        delta = np.abs(b64 - a64)
        relative = delta / np.abs(a64)
        bad = ~(delta <= atol + rtol * np.abs(a64))
    both_nan = np.isnan(a64) & np.isnan(b64)
    bad &= ~both_nan
    finite = delta[np.isfinite(delta)]
    worst = float(finite.max()) if finite.size else float("nan")
    rel = relative[np.isfinite(relative)]
    worst_rel = float(rel.max()) if rel.size else float("inf")
    count = int(np.count_nonzero(bad))
    within = f"{count} of {va.size} elements beyond tolerance" if count else "within tolerance"
    return f"values after casting to {wide.name}: {within}, max abs change {worst:.3g}, max rel change {worst_rel:.3g}"


# -------------------------------------------------------------------------------------- matching


def _order(index: GraphIndex) -> list[int]:
    try:
        return index.topological_order()
    except Exception:  # a cyclic graph still gets diffed, in file order
        return list(range(len(index.graph.node)))


def _match_nodes(ga: onnx.GraphProto, gb: onnx.GraphProto, ia: GraphIndex, ib: GraphIndex,
                 order_a: list[int], order_b: list[int]) -> tuple[dict[int, int], set[int]]:
    """A-index → B-index for paired nodes, and the B indices paired by structure.

    Each unpaired B node is scored only against the A nodes that could pass: those reading a tensor
    with the same source at the same input position, or writing the same output name at the same
    position (a node sharing neither scores 0 and is never chosen). The work is linear in the graph
    size times the fan-out of the shared tensors; scanning every A node of the same op instead made
    two identical unnamed 50k-node chains take minutes.
    """
    names_a = _unique_names(ga)
    names_b = _unique_names(gb)
    pairs = {names_a[n]: names_b[n] for n in names_a if n in names_b}
    paired_b = {j: i for i, j in pairs.items()}
    structural: set[int] = set()
    weights = dict(_name_pairs(ia.initializers, ib.initializers))
    weights_back = {b: a for a, b in weights.items()}
    pos_a = {i: k / max(len(order_a), 1) for k, i in enumerate(order_a)}
    candidates: _Candidates | None = None  # built only when some node is left unpaired by name
    for strict in (True, False):
        for k, j in enumerate(order_b):
            if j in paired_b:
                continue
            nb = gb.node[j]
            candidates = candidates or _Candidates(ga)
            pool = candidates.for_node(nb, ib, ia, paired_b, weights_back)
            if strict:
                pool = [i for i in pool if (ga.node[i].op_type, ga.node[i].domain or "") == (nb.op_type, nb.domain or "")]
            best = _best_match(nb, pool, ia, ib, pairs, weights, pos_a, k / max(len(order_b), 1), same_op=strict)
            if best is not None:
                pairs[best] = j
                paired_b[j] = best
                structural.add(j)
    return pairs, structural


class _Candidates:
    """The A nodes that read a tensor at an input position, or write it at an output position."""

    def __init__(self, graph: onnx.GraphProto) -> None:
        self.readers: dict[tuple[int, str], list[int]] = {}
        self.writers: dict[tuple[int, str], list[int]] = {}
        for i, node in enumerate(graph.node):
            for k, name in enumerate(node.input):
                self.readers.setdefault((k, name), []).append(i)
            for k, name in enumerate(node.output):
                if name:
                    self.writers.setdefault((k, name), []).append(i)

    def for_node(self, nb: onnx.NodeProto, ib: GraphIndex, ia: GraphIndex, paired_b: dict[int, int],
                 weights_back: dict[str, str]) -> list[int]:
        """Every A node that may share an input source or an output name with ``nb`` (a superset)."""
        found: set[int] = set()
        for k, xb in enumerate(nb.input):
            name = _counterpart(_source(xb, ib), ia, paired_b, weights_back)
            if name is not None:
                found.update(self.readers.get((k, name), ()))
        for k, ob in enumerate(nb.output):
            if ob:
                found.update(self.writers.get((k, ob), ()))
        return sorted(found)


def _counterpart(source: Source, ia: GraphIndex, paired_b: dict[int, int], weights_back: dict[str, str]) -> str | None:
    """The name an A node reads where its source matches ``source`` (a B source), if any."""
    kind, ref, position = source
    if kind == "node":
        i = paired_b.get(ref)
        if i is None:
            return None
        outputs = ia.graph.node[i].output
        return outputs[position] if position < len(outputs) else None
    if kind == "init":
        return weights_back.get(ref)
    return ref


def _unique_names(graph: onnx.GraphProto) -> dict[str, int]:
    seen: dict[str, int] = {}
    dup: set[str] = set()
    for i, node in enumerate(graph.node):
        if node.name:
            if node.name in seen:
                dup.add(node.name)
            seen[node.name] = i
    return {n: i for n, i in seen.items() if n not in dup}


def _best_match(nb: onnx.NodeProto, pool: Sequence[int], ia: GraphIndex, ib: GraphIndex,
                pairs: dict[int, int], weights: dict[str, str], pos_a: dict[int, float], k_b: float, *,
                same_op: bool) -> int | None:
    """The unpaired A node in ``pool`` that best matches ``nb``: same op with a shared input or output,
    or (the loose pass, any op) every input the same."""
    sources_b = [_source(x, ib) for x in nb.input]
    best: tuple[float, int] | None = None
    for i in pool:
        if i in pairs:
            continue
        na = ia.graph.node[i]
        score = sum(1 for xa, sb in zip(na.input, sources_b) if _same_source(_source(xa, ia), sb, pairs, weights))
        score += sum(1 for oa, ob in zip(na.output, nb.output) if oa and oa == ob)
        needed = 1 if same_op else max(len(nb.input), 1)
        if score < needed or (not same_op and len(na.input) != len(nb.input)):
            continue
        key = (-score + abs(pos_a.get(i, 0.0) - k_b), i)
        if best is None or key < best:
            best = key
    return None if best is None else best[1]


def _source(name: str, index: GraphIndex) -> Source:
    if not name:
        return ("none", "", 0)
    if name in index.producer:
        i = index.producer[name]
        return ("node", i, list(index.graph.node[i].output).index(name))
    if name in index.initializers:
        return ("init", name, 0)
    return ("input", name, 0)


def _describe(source: Source, index: GraphIndex) -> str:
    kind, ref, _ = source
    if kind == "node":
        return f"node {_label(index.graph.node[ref], ref)!r}"
    return {"init": "an initializer", "input": "a graph input", "none": "nothing"}[kind]


def _same_source(sa: Source, sb: Source, pairs: dict[int, int], weights: dict[str, str]) -> bool:
    if sa[0] != sb[0]:
        return False
    if sa[0] == "node":
        return pairs.get(sa[1]) == sb[1] and sa[2] == sb[2]
    if sa[0] == "init":
        return weights.get(sa[1]) == sb[1]
    return sa[1] == sb[1]


def _name_pairs(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, str]]:
    return [(n, n) for n in a if n in b]


def _weights_by_use(ia: GraphIndex, ib: GraphIndex, pairs: dict[int, int], known: dict[str, str]) -> dict[str, str]:
    """Renamed weights: an unpaired initializer read at the same input of two paired nodes."""
    found: dict[str, str] = {}
    used_b = set(known.values())
    for i, j in pairs.items():
        na, nb = ia.graph.node[i], ib.graph.node[j]
        for xa, xb in zip(na.input, nb.input):
            if xa in ia.initializers and xb in ib.initializers and xa not in known and xa not in found \
                    and xb not in used_b:
                found[xa] = xb
                used_b.add(xb)
    return found


# ----------------------------------------------------------------------------------------- text


def _function_name(func: onnx.FunctionProto) -> str:
    return f"{func.domain}::{func.name}" if func.domain else func.name


def _without_tensor_data(func: onnx.FunctionProto) -> bytes:
    """The function's bytes with every tensor's data (inline or where external data lies) left out."""
    copy = onnx.FunctionProto()
    copy.CopyFrom(func)
    for tensor, _ in function_tensors(copy):
        for field in ("raw_data", "float_data", "int32_data", "string_data", "int64_data", "double_data",
                      "uint64_data", "external_data", "data_location"):
            tensor.ClearField(field)
    return copy.SerializeToString(deterministic=True)


def _label(node: onnx.NodeProto, index: int) -> str:
    return node.name or f"#{index} ({node.op_type})"


def _op(node: onnx.NodeProto) -> str:
    return f"{node.domain}::{node.op_type}" if node.domain not in ("", "ai.onnx") else node.op_type


def _attr_text(attr: onnx.AttributeProto) -> str:
    if attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
        return "<graph>"
    if attr.type == onnx.AttributeProto.TENSOR:
        return _tensor_text(attr.t)
    value = onnx.helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if isinstance(value, Sequence) and not isinstance(value, str):
        value = [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in value]
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _tensor_text(tensor: onnx.TensorProto) -> str:
    return f"{dtype_name(tensor.data_type)} {list(tensor.dims)}"
