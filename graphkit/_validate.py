"""validate(model) -> Report, and toposort.

``validate`` runs onnx.checker (full check, custom domains allowed) and graphkit's own structural
checks, recursing into subgraphs and continuing past the first problem, so one run lists everything.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from math import prod
from pathlib import Path
from typing import Any

import onnx
from google.protobuf.message import EncodeError

from graphkit import _check_args as argcheck
from graphkit._build import ai_onnx_version_for
from graphkit._graph import GraphIndex, node_label, subgraphs, toposort_proto
from graphkit._io import raw_nbytes, read_external_bytes, tensor_nbytes
from graphkit._model import (
    Model,
    has_external_data,
    is_borrowed,
    is_external,
    iter_graphs,
    iter_tensors,
    outline,
)
from graphkit._typing import INFER_VALUE_LIMIT
from graphkit.errors import CycleError, GraphkitError, InvalidModelError, did_you_mean

__all__ = ["Issue", "Report", "check_or_raise", "require_sound", "toposort", "validate"]


@dataclass(frozen=True)
class Issue:
    """One problem found in a model.

    Attributes:
        severity: "error" (the model is invalid) or "warning" (legal but suspicious).
        code: A stable identifier, e.g. "dangling-input", "unsorted", "cycle".
        message: What is wrong, naming node and tensor.
        graph: Which graph ("main graph" or a path into a subgraph).
        node: The node's name or label, if one is involved.
        tensor: The tensor's name, if one is involved.
        hint: What to do about it, in the API's words.
        cli_hint: The same in the command line's words, where they differ (the CLI prints it instead).
    """

    severity: str
    code: str
    message: str
    graph: str = "main graph"
    node: str | None = None
    tensor: str | None = None
    hint: str | None = None
    cli_hint: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)


@dataclass(frozen=True)
class Report:
    """The result of ``validate``.

    Attributes:
        model: The model's file or name.
        issues: Every problem found, errors first.
        checker: "passed", "failed" or "skipped".
    """

    model: str
    issues: tuple[Issue, ...] = field(default_factory=tuple)
    checker: str = "passed"

    @property
    def errors(self) -> list[Issue]:
        """The issues that make the model invalid."""
        return [i for i in self.issues if i.severity == "error"]

    @property
    def warnings(self) -> list[Issue]:
        """The issues that are legal but suspicious."""
        return [i for i in self.issues if i.severity == "warning"]

    @property
    def passed(self) -> bool:
        """True when there are no errors (warnings allowed)."""
        return not self.errors

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "model": self.model,
            "ok": self.passed,
            "checker": self.checker,
            "errors": len(self.errors),
            "warnings": len(self.warnings),
            "issues": [i.to_dict() for i in self.issues],
        }


def validate(model: Model, *, checker: bool = True, full_check: bool = True) -> Report:
    """Check a model with onnx.checker and graphkit's structural checks, listing every problem.

    onnx.checker runs first; when it passes, graphkit's checks that it makes redundant (see
    ``_fine``) are proven clean in a few C-level calls, and the detailed checks run only when that
    proof fails, so a broken model gets the same full report either way.

    Args:
        model: The model to check (not modified; weights are not read).
        checker: Also run onnx.checker; False runs graphkit's own checks only.
        full_check: Run the checker's full check (with strict shape inference, which checks that
            the declared types agree with what the nodes compute); False runs its plain check.

    Returns:
        A Report; ``report.passed`` is False when any error was found.
    """
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    argcheck.boolean(checker, "checker")
    argcheck.boolean(full_check, "full_check")
    if not checker:
        return _report(model, None, "skipped")
    data = _serialized(model)
    if data is None:  # (too large for one message: the checker says so)
        message = run_checker(model, full_check=full_check)
    else:
        message = run_checker(model, full_check=full_check, serialized=data)
        if message is None and _fine(model, data, warnings=True):
            return Report(model.name)
    return _report(model, message, "passed" if message is None else "failed")


def _report(model: Model, message: str | None, checker_state: str) -> Report:
    """The full report: graphkit's detailed checks, plus the checker's ``message`` unless they explain it."""
    issues: list[Issue] = []
    _check_domains(model.lazy_proto, issues)
    _check_graph(model.lazy_proto.graph, frozenset(), "main graph", issues, top=True)
    if message is not None and not _already_explained(message, issues):
        issues.append(
            Issue("error", "checker", f"onnx.checker: {message}", hint="fix the node or tensor the checker names")
        )
    issues.sort(key=lambda i: i.severity != "error")
    return Report(model.name, tuple(issues), checker_state)


def check_or_raise(model: Model, *, what: str = "the result", full_check: bool = True) -> None:
    """Raise unless the model passes validation; used before any artifact is written.

    Args:
        model: The model to check.
        what: How to name the model in the message.
        full_check: Run onnx.checker's full check (see ``validate``); False only when strict shape
            inference cannot find anything its plain check does not (the caller says why).

    Raises:
        InvalidModelError: listing the first errors found.
    """
    data = _serialized(model)
    if data is not None:
        message = run_checker(model, full_check=full_check, serialized=data)
        if message is None and _fine(model, data, warnings=False):
            return
        report = _report(model, message, "passed" if message is None else "failed")
    else:
        report = validate(model, full_check=full_check)
    if report.passed:
        return
    first = report.errors[:3]
    more = f" (and {len(report.errors) - 3} more)" if len(report.errors) > 3 else ""
    raise InvalidModelError(
        f"{what} would be invalid: " + "; ".join(i.message for i in first) + more,
        hint=first[0].hint or "gk.validate(model) lists every problem",
        cli_hint=first[0].cli_hint or first[0].hint or "run 'python -m graphkit check' on the input for details",
    )


def _serialized(model: Model) -> bytes | None:
    """The model's bytes, or None when it is too large for one protobuf message."""
    try:
        data = model.lazy_proto.SerializeToString()
    except (ValueError, EncodeError):
        return None
    return data if len(data) <= _PROTOBUF_LIMIT else None


def _fine(model: Model, data: bytes, *, warnings: bool) -> bool:
    """Whether graphkit's checks would find no error (and no warning, if ``warnings``) in a model that
    passed onnx.checker's plain check. True only when proven; False sends the caller to ``_report``.

    What onnx.checker (plain check, as run here) already rejects, so a passing model has none of
    them (tests/test_validate_fast.py holds one case per code): every reader, input or body outer read,
    of a name not defined earlier in its scope (so no "dangling-input", "unsorted" or "cycle": its
    scopes are narrower than ours); every second producer of a name ("duplicate-producer"); every
    graph output nothing defines ("dangling-output"); every node whose domain the model (or, in a
    function, the function) does not import ("missing-opset-import"), except plain ONNX nodes when
    only "ai.onnx" (not "") is imported. What it does not reject, checked here: that exception, raw
    data or typed data longer than dims and dtype need ("initializer-size"; shorter is caught),
    impossible declared shapes ("absurd-shape") and the warnings.

    Args:
        model: The model.
        data: Its serialized bytes.
        warnings: Also prove there is nothing to warn about.
    """
    shape = outline(data)
    imported = {o.domain for o in model.lazy_proto.opset_import} | {"ai.onnx"}
    if "" not in imported or not shape.node_domains <= imported:
        return False
    bodies = shape.main_has_bodies
    graphs = [graph for graph, _ in iter_graphs(model.lazy_proto.graph)] if bodies else [model.lazy_proto.graph]
    for graph in graphs:
        if not _initializers_consistent(graph.initializer):
            return False
        problems: list[Issue] = []
        _check_dims(graph, "", problems)
        if problems:
            return False
    if not warnings:
        return True
    if bodies:  # (outer reads of bodies count as reads: leave the warnings to the detailed pass)
        return False
    names = [name for name in shape.main_node_names if name]
    if len(set(names)) != len(names):
        return False
    graph = model.lazy_proto.graph
    kept = shape.main_node_inputs | {o.name for o in graph.output}
    inputs = {i.name for i in graph.input}
    return not (shape.main_initializer_names - kept - inputs) and not (inputs - kept)


def _initializers_consistent(tensors: Iterable[onnx.TensorProto]) -> bool:
    """Whether ``tensor_data_problem`` finds nothing in ``tensors`` (a few field reads per raw tensor)."""
    itemsize = _ITEMSIZE
    for tensor in tensors:
        raw = tensor.raw_data
        if raw:
            dims = tensor.dims
            # equal sizes: a positive count, so only two or more dims can hide negative ones
            if len(raw) == itemsize.get(tensor.data_type, 0) * prod(dims) and (len(dims) < 2 or min(dims) >= 0):
                continue
        if tensor_data_problem(tensor) is not None:
            return False
    return True


def require_sound(model: Model, *, allow: tuple[str, ...] = ("unsorted",)) -> None:
    """Refuse a model whose graph is broken (graphkit's structural checks only, no onnx.checker).

    Verbs that work on the whole model (run, expose, split) call this first, so the error names the
    real problem (a dangling input, a cycle, a duplicate producer, an impossible shape) rather than a
    consequence of it.

    Args:
        model: The model to look at.
        allow: Issue codes that do not stop the verb (by default, an unsorted graph).

    Raises:
        InvalidModelError: naming the first problems found and pointing at ``check``.
    """
    issues: list[Issue] = []
    _check_domains(model.lazy_proto, issues)
    _check_graph(model.lazy_proto.graph, frozenset(), "main graph", issues, top=False)
    errors = [i for i in issues if i.severity == "error" and i.code not in allow]
    if not errors:
        return
    more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
    raise InvalidModelError(
        f"{model.name} is invalid: {errors[0].message}{more}",
        hint=(errors[0].hint or "") + "; gk.validate(model) lists every problem",
        cli_hint=(errors[0].cli_hint or errors[0].hint or "")
        + f"; 'python -m graphkit check {model.path or 'MODEL'}' lists every problem",
    )


def run_checker(model: Model, *, full_check: bool = True, serialized: bytes | None = None) -> str | None:
    """Run onnx.checker (full check unless told otherwise); return its message, or None when it passes.

    A model with external data is checked from a file in a scratch folder where each weights file it
    names stands as an empty placeholder (when the real one is a regular file): the checker looks for
    the files but never reads them, and graphkit checks their contents itself (``io.external_ref``).
    Borrowed weights (still in a lazily loaded model file) name one placeholder of their own. No
    working directory changes, so other threads are not affected.

    Args:
        model: The model to check.
        full_check: Run the full check (with strict shape inference).
        serialized: The model's bytes, when already at hand (saves serializing it again).
    """
    data = serialized if serialized is not None else _serialized(model)
    # (without a "location" entry, no tensor is external: the common case needs no scratch folder)
    external = has_external_data(model.lazy_proto) if data is None else b"location" in data
    try:
        if data is None:  # (too large for one message: the checker says so)
            onnx.checker.check_model(model.lazy_proto, full_check=full_check)
        elif not external:
            onnx.checker.check_model(data, full_check=full_check)
        else:
            with _checker_file(model, data) as path:
                onnx.checker.check_model(path, full_check=full_check)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as err:
        return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    except (ValueError, RuntimeError) as err:
        return str(err).strip() or type(err).__name__
    return None


_BORROWED_STANDIN = "graphkit-borrowed-weights"


@contextlib.contextmanager
def _checker_file(model: Model, data: bytes) -> Iterator[str]:
    """A scratch copy of the model (bytes ``data``) with a placeholder for each weights file it names."""
    proto = onnx.ModelProto()
    proto.ParseFromString(data)
    rewritten = False
    locations: set[str] = set()
    for tensor, _ in iter_tensors(proto):
        if not is_external(tensor):
            continue
        if _read_small(model, tensor):
            rewritten = True
            continue
        for entry in tensor.external_data:
            if entry.key != "location":
                continue
            if is_borrowed(tensor):
                entry.value, rewritten = _BORROWED_STANDIN, True
            locations.add(entry.value)
    with tempfile.TemporaryDirectory(prefix="graphkit-check-") as scratch:
        root = Path(scratch)
        for location in locations:
            if location == _BORROWED_STANDIN or _stands(model, location):
                with contextlib.suppress(OSError, ValueError):
                    (root / location).parent.mkdir(parents=True, exist_ok=True)
                    (root / location).touch()
        name = "model.onnx"
        while name in locations:
            name = "_" + name
        (root / name).write_bytes(proto.SerializeToString() if rewritten else data)
        yield str(root / name)


def _read_small(model: Model, tensor: onnx.TensorProto) -> bool:
    """Read in a small external tensor (at most ``INFER_VALUE_LIMIT`` bytes: a shape, axes, a scale)
    whose data can be read, as the typing engine does: the full check's shape inference reads such
    values and cannot read external data. Whether it did."""
    if is_borrowed(tensor) or not 0 <= tensor_nbytes(tensor) <= INFER_VALUE_LIMIT:
        return False
    try:
        data = read_external_bytes(model, tensor)
    except GraphkitError:  # (the placeholder stands for it, or not; graphkit's checks say what is wrong)
        return False
    del tensor.external_data[:]
    tensor.ClearField("data_location")
    tensor.raw_data = data
    return True


def _stands(model: Model, location: str) -> bool:
    """Whether a placeholder may stand for ``location``: a relative path (the checker judges the rest)
    naming a regular file in the model's folder."""
    parts = location.replace("\\", "/").split("/")
    if model.base_dir is None or not location or "\0" in location or os.path.isabs(location) or ".." in parts:
        return False
    try:
        return (model.base_dir / location).is_file()
    except (OSError, ValueError):
        return False


def _already_explained(message: str, issues: list[Issue]) -> bool:
    return any(i.severity == "error" and i.tensor and i.tensor in message for i in issues)


def _check_domains(proto: onnx.ModelProto, issues: list[Issue]) -> None:
    imported = {o.domain for o in proto.opset_import} | {"ai.onnx"}
    if "" in imported:
        imported.add("ai.onnx")
    missing: dict[str, str] = {}
    for graph, where in _graphs(proto):
        used = {node.domain for node in graph.node}
        if used <= imported:  # (the usual case: no node to name)
            continue
        for node in graph.node:
            domain = node.domain or ""
            if domain not in imported and domain not in missing:
                missing[domain] = f"{node_label(node)} in {where}"
    for func in proto.functions:
        func_domains = {o.domain for o in func.opset_import}
        for node in func.node:
            domain = node.domain or ""
            if domain not in imported and domain not in func_domains and domain not in missing:
                missing[domain] = f"{node_label(node)} in function {func.name!r}"
    for domain, first in missing.items():
        label = domain or "ai.onnx"
        version = ai_onnx_version_for(proto.ir_version) if label == "ai.onnx" else 1
        issues.append(
            Issue(
                "error",
                "missing-opset-import",
                f"domain {domain or 'ai.onnx'!r} is used (first by {first}) but the model imports no opset for it",
                node=first,
                hint=f"add an opset import for {label!r} (set_opset(model, {label!r}, {version}))",
                cli_hint=f"add an opset import for {label!r} (python -m graphkit edit … --set-opset {label}={version})",
            )
        )


def _graphs(proto: onnx.ModelProto) -> Iterator[tuple[onnx.GraphProto, str]]:
    yield from iter_graphs(proto.graph)


def _check_graph(graph: onnx.GraphProto, outer: frozenset[str], where: str, issues: list[Issue], *, top: bool) -> None:
    index = GraphIndex(graph, outer)
    defined_up_front = set(index.inputs) | set(index.initializers) | set(outer)
    # One pass over the nodes with one C-level set test per check; a node is looked at in detail
    # (labels, positions, owners) only when a test fails. Producer issues are listed before the
    # others, as if checked in a pass of their own.
    producer_issues: list[Issue] = []
    node_issues: list[Issue] = []
    seen = set(defined_up_front)
    seen.add("")  # (an empty name is an omitted optional input or output: nothing to check)
    node_names: set[str] = set()
    read: set[str] = set()
    has_bodies = False
    for i, node in enumerate(graph.node):
        name = node.name
        if name:
            if name in node_names:
                producer_issues.append(Issue("warning", "duplicate-node-name", f"two nodes are named {name!r}", where,
                                             name, hint="rename one so edits and reports can tell them apart"))
            node_names.add(name)
        inputs = node.input
        if not seen.issuperset(inputs):
            _check_node_inputs(graph, index, i, seen, where, node_issues)
        if top:
            read.update(inputs)
        if node.attribute:
            bodies = subgraphs(node)
            if bodies:
                has_bodies = True
                inner_outer = frozenset(outer | set(index.inputs) | set(index.initializers) | set(index.producer))
                label = node_label(node, i)
                for sub in bodies:
                    _check_graph(sub, inner_outer, f"{where} > {label}.{sub.name or 'body'}", node_issues, top=False)
                if top:
                    read.update(index.reads(i))
        outputs = node.output
        if not seen.isdisjoint(outputs):  # (also true for outer names a node redefines: no issue then)
            _check_node_outputs(graph, index, i, where, producer_issues)
        seen.update(outputs)
    issues.extend(producer_issues)
    issues.extend(node_issues)
    # A main graph without bodies or duplicate producers whose every node reads only what is defined
    # before it (no issue so far) is in execution order, hence acyclic: no sort needed to prove it.
    sorted_by_construction = not producer_issues and not node_issues and not has_bodies and not outer
    if not sorted_by_construction:
        try:
            index.topological_order()
        except CycleError as err:
            issues.append(Issue("error", "cycle", err.message, where, hint=err.hint, cli_hint=err.cli_hint))
    for out in graph.output:
        if out.name not in seen or (not out.name and "" not in defined_up_front):
            issues.append(
                Issue(
                    "error",
                    "dangling-output",
                    f"graph output {out.name!r} is produced by no node, input or initializer",
                    where,
                    tensor=out.name,
                    hint="remove the output or add the node that computes it",
                )
            )
    _check_tensor_data(graph, where, issues)
    _check_dims(graph, where, issues)
    if top:
        read.discard("")
        _check_unused(index, read, where, issues)


def _check_node_outputs(graph: onnx.GraphProto, index: GraphIndex, i: int, where: str, issues: list[Issue]) -> None:
    """Report each output of node ``i`` that a graph input, an initializer or an earlier node already produces."""
    node = graph.node[i]
    label = node_label(node, i)
    inputs = set(index.inputs)
    earlier_here: set[str] = set()
    for out in node.output:
        if not out:
            continue
        first = index.producer.get(out, i)
        owner: str | None = None
        if out in inputs:
            owner = "graph input"
        elif out in index.initializers:
            owner = "initializer"
        elif first < i:
            owner = node_label(graph.node[first], first)
        elif out in earlier_here:
            owner = label
        earlier_here.add(out)
        if owner is not None:
            issues.append(
                Issue(
                    "error",
                    "duplicate-producer",
                    f"{label} produces {out!r}, which {owner} already produces",
                    where,
                    node.name or label,
                    out,
                    "every tensor must have exactly one producer: rename one of the outputs",
                )
            )


def _check_node_inputs(
    graph: onnx.GraphProto, index: GraphIndex, i: int, seen: set[str], where: str, issues: list[Issue]
) -> None:
    """Report each input of node ``i`` that nothing defines before it (unsorted or dangling)."""
    node = graph.node[i]
    label = node_label(node, i)
    for pos, name in enumerate(node.input):
        if name in seen:
            continue
        if name in index.producer:
            producer = graph.node[index.producer[name]]
            issues.append(
                Issue(
                    "error",
                    "unsorted",
                    f"{label} reads input #{pos} {name!r} before {node_label(producer, index.producer[name])} produces it",
                    where,
                    node.name or label,
                    name,
                    "the nodes are not in execution order: run 'python -m graphkit toposort'",
                )
            )
        else:
            issues.append(
                Issue(
                    "error",
                    "dangling-input",
                    f"{label} reads input #{pos} {name!r}, which no node, graph input or initializer produces",
                    where,
                    node.name or label,
                    name,
                    _dangling_hint(name, (seen | set(index.producer)) - {""}),
                )
            )


_TYPED_FIELDS = ("float_data", "int32_data", "int64_data", "double_data", "uint64_data", "string_data")
#: More elements than any real tensor has: 2^40 (a tera-element).
ABSURD_ELEMENTS = 2**40


def _check_tensor_data(graph: onnx.GraphProto, where: str, issues: list[Issue]) -> None:
    for tensor in graph.initializer:
        problem = tensor_data_problem(tensor)
        if problem:
            issues.append(Issue("error", "initializer-size", f"initializer {tensor.name!r}: {problem}", where,
                                tensor=tensor.name, hint="the file is corrupted or was edited by hand; export it again"))


def tensor_data_problem(tensor: onnx.TensorProto) -> str | None:
    """Why a tensor's stored data contradicts its dims and dtype, or None when consistent."""
    count = 1
    for d in tensor.dims:
        if d < 0:
            return f"negative dim in shape {list(tensor.dims)}"
        count *= d
    if count > ABSURD_ELEMENTS:
        return f"shape {list(tensor.dims)} has an absurd number of elements ({count})"
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        return None  # checked against the file when loaded
    if tensor.HasField("raw_data"):
        expected = raw_nbytes(tensor.data_type, count)
        if expected >= 0 and len(tensor.raw_data) != expected:
            return f"holds {len(tensor.raw_data)} bytes but shape {list(tensor.dims)} of its dtype needs {expected}"
        return None
    stored = [f for f in _TYPED_FIELDS if len(getattr(tensor, f))]
    if not stored:
        return None if count == 0 else f"holds no data but shape {list(tensor.dims)} needs {count} elements"
    held = len(getattr(tensor, stored[0]))
    if tensor.data_type in (onnx.TensorProto.COMPLEX64, onnx.TensorProto.COMPLEX128):
        held //= 2
    if held != count and tensor.data_type not in _PACKED:
        return f"holds {held} elements but shape {list(tensor.dims)} needs {count}"
    return None


_PROTOBUF_LIMIT = 2**31 - 1
#: Bytes per element of the dtypes whose raw data is exactly count x itemsize (not strings, not 4-bit).
_ITEMSIZE = {
    dtype: raw_nbytes(dtype, 1)
    for dtype in onnx.TensorProto.DataType.values()
    if raw_nbytes(dtype, 1) > 0 and raw_nbytes(dtype, 2) == 2 * raw_nbytes(dtype, 1)
}
_PACKED = {getattr(onnx.TensorProto, n) for n in ("INT4", "UINT4", "FLOAT4E2M1") if hasattr(onnx.TensorProto, n)}


def _check_dims(graph: onnx.GraphProto, where: str, issues: list[Issue]) -> None:
    for kind, values in (("graph input", graph.input), ("graph output", graph.output), ("value_info", graph.value_info)):
        for value in values:
            dims = [d.dim_value for d in value.type.tensor_type.shape.dim if d.HasField("dim_value")]
            total = 1
            for d in dims:
                total *= max(d, 1)
            if any(d < 0 for d in dims) or total > ABSURD_ELEMENTS:
                issues.append(Issue("error", "absurd-shape", f"{kind} {value.name!r} has an impossible shape {dims}",
                                    where, tensor=value.name, hint="fix the shape (set_dims)",
                                    cli_hint="fix the shape (graphkit edit --fixed/--dynamic)"))


def _dangling_hint(name: str, known: set[str]) -> str:
    suggestion = did_you_mean(name, sorted(known))
    base = f"add {name!r} as a graph input or initializer, or rewire the node to an existing tensor"
    return f"{suggestion} ({base})" if suggestion else base


def _check_unused(index: GraphIndex, read: set[str], where: str, issues: list[Issue]) -> None:
    """Warn about initializers and graph inputs that no node reads (``read``: every name the nodes read)."""
    outputs = set(index.outputs)
    inputs = set(index.inputs)
    for name in index.initializers:
        if name not in read and name not in outputs and name not in inputs:
            issues.append(
                Issue(
                    "warning",
                    "unused-initializer",
                    f"initializer {name!r} is never read",
                    where,
                    tensor=name,
                    hint="remove it with cleanup(model)", cli_hint="remove it with 'python -m graphkit edit … --cleanup'",
                )
            )
    for name in index.inputs:
        if name not in read and name not in outputs:
            issues.append(
                Issue(
                    "warning",
                    "unused-input",
                    f"graph input {name!r} is never read",
                    where,
                    tensor=name,
                    hint="remove it with cleanup(model) if it is not needed",
                    cli_hint="remove it with 'python -m graphkit edit … --cleanup' if it is not needed",
                )
            )


# ---------------------------------------------------------------------------------------- toposort


def toposort(model: Model) -> Model:
    """A copy of the model with every graph's nodes in a valid execution order.

    Stable: an order that is already valid is kept; otherwise nodes move as little as possible (each
    node runs as early as its original position allows). Subgraphs are sorted too, and a node with a
    body is placed after the producers of the outer tensors its body reads.

    Raises:
        CycleError: A graph has a cycle; the message lists it.
    """
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    result = model.copy()
    toposort_proto(result.lazy_proto)
    return Model(result.lazy_proto, model.base_dir, None)
