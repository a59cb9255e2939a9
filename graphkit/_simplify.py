"""simplify: the same computation in fewer nodes, every pass on every graph (If/Loop/Scan bodies too).

The passes, run in rounds until a round changes nothing:

- ``constants``: Constant nodes become initializers (a Constant that is itself a graph output stays:
  an initializer cannot be one in every runtime).
- ``identities``: Identity, and Dropout in inference (its mask unread, training_mode absent or
  false), are removed by rewiring their readers to their input; an Identity that renames a tensor
  into a graph output makes the producer write the output instead. A weight behind an Identity is
  read where it is, never copied.
- ``shapes``: Shape and Size of a tensor whose dims the typing engine (``graphkit._typing``) proves
  static become constants, and so does a Gather or Slice of static dims out of a Shape whose other
  dims are dynamic, so that ``Shape → Gather → Unsqueeze → Concat → Reshape`` folds into one Reshape.
- ``reshapes``: a Reshape whose target is computed gets a constant one when inference (not value_info)
  proves every output dim: a size, ``0`` (copy) for the input's dim of the same name at the same
  position, ``-1`` for at most one other; with dynamic batch and sequence the exporter's chain goes.
- ``fold``: nodes whose inputs are all constants (the graph's own, or an enclosing graph's for a
  body) are evaluated once in ONNX Runtime (through ``graphkit._ort``) and replaced by initializers,
  in batches whose weights stay within a byte budget; a value larger than ``max_bytes`` is not
  stored (its nodes stay), no node reading a weight larger than ``max_bytes`` is evaluated, and
  DequantizeLinear is kept (a QDQ model's weights stay quantized).
- ``branches``: an If whose condition is a constant is replaced by the nodes of the branch it takes
  (``graphkit._rewrite``: clashing names renamed, outer-scope reads and nested bodies kept).
- ``fuse``: an inference BatchNormalization, or a Mul or Add by a per-channel constant, after a Conv
  whose output it alone reads is folded into the Conv's weights and bias; two Transposes in a row
  are one (none when they cancel).
- ``attention``, ``gelu``, ``skip_layernorm`` (target ``onnxruntime`` only): multi-head attention,
  the Erf form of GELU and Add + LayerNormalization become ONNX Runtime's contrib operators
  ``com.microsoft::Attention``, ``Gelu``/``BiasGelu`` and ``SkipLayerNormalization`` where they compute
  the same function (``graphkit._fusions``); the result runs in ONNX Runtime only. Main graph.
- ``gemm``: ``Add(MatMul(A, B), C)`` becomes ``Gemm(A, B, C)`` where that is exact: A proven 2-D, B a
  2-D constant, C a constant broadcasting to the product, float or double; several such projections
  of one input of static dims, each reshaped (Q, K, V), share one Reshape to 2-D (``graphkit._rewrite``).
- ``merge``: initializers with the same dtype, shape and bytes (or the same external location) are
  merged into one.
- ``cse``: nodes with the same op, attributes and inputs are computed once.
- ``dead``: dead nodes, unused initializers, graph inputs, local functions and opset imports go
  (``graphkit._edit.cleaning``'s linear prune).

Weights stay where they are: nothing reads a weight except a fold that needs its value, and a
2.7 GB model with external data is simplified reading its graph only.
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from math import prod
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from graphkit import _check_args as argcheck
from graphkit import _fusions, _ort, _progress, _rewrite
from graphkit._build import add_initializers
from graphkit._edit._common import _drop_opsets, _noop_returns_input, _rename_scope
from graphkit._edit.cleaning import _clean_functions, _clean_graph, _prune, _remove_initializers
from graphkit._graph import GraphIndex, fresh_name, node_label, subgraphs
from graphkit._infer import _contradiction
from graphkit._io import tensor_nbytes, tensor_value
from graphkit._model import Model, iter_graphs
from graphkit._progress import Progress
from graphkit._typing import Source, infer_proto, tensor_dims, tensor_types, weightless
from graphkit._validate import check_or_raise
from graphkit.errors import GraphkitError, NoChangeError, UsageError, did_you_mean

__all__ = [
    "ORT_PASSES", "PASSES", "TARGETS", "Simplification", "constants_to_initializers", "fold_constants", "fold_shapes", "fuse_attention", "fuse_conv",
    "fuse_gelu", "fuse_gemm", "fuse_skip_layernorm", "inline_branches", "merge_constants", "merge_nodes", "op_counts", "remove_identities",
    "run_passes", "simplify", "simplify_with_report",
]

log = logging.getLogger(__name__)

#: The passes, in the order each round runs them.
PASSES = ("constants", "identities", "shapes", "reshapes", "fold", "branches", "fuse", "gemm", "merge", "cse", "dead")
#: The passes that write ONNX Runtime's contrib operators (target ``onnxruntime``); they run after
#: ``fuse`` and before ``gemm`` (which would take the attention's projections apart).
ORT_PASSES = ("attention", "gelu", "skip_layernorm")
#: What simplify's result may use: standard ONNX at the model's opsets (``onnx``), or ONNX Runtime's
#: contrib operators too (``onnxruntime``: the result runs in ONNX Runtime only).
TARGETS = ("onnx", "onnxruntime")
_ORDER = (*PASSES[:PASSES.index("gemm")], *ORT_PASSES, *PASSES[PASSES.index("gemm"):])
#: Folded values larger than this are not stored (their nodes stay), by default.
DEFAULT_MAX_BYTES = 64 * 2**20
#: At most this many bytes of weights, and this many nodes, are handed to ONNX Runtime in one folding
#: run: the values a run computes are held twice (ONNX Runtime's buffers and their copies), so smaller
#: runs keep the peak down (light_resnet50's 161 weight-making nodes in one run: 644 MB peak).
_BATCH_BYTES = 256 * 2**20
_BATCH_NODES = 32
_MAX_ROUNDS = 10

_STANDARD = {"", "ai.onnx", "ai.onnx.ml"}
#: Never folded: their outputs are not a function of their inputs, not tensors, or (DequantizeLinear)
#: folding them would turn a quantized weight back into floats.
_NOT_FOLDED = {
    "Constant", "Identity", "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
    "Multinomial", "Bernoulli", "DequantizeLinear", "SequenceConstruct", "SequenceEmpty", "SequenceInsert",
    "SequenceErase", "SplitToSequence", "Optional", "OptionalGetElement", "OptionalHasElement",
}
_INT64 = onnx.TensorProto.INT64


@dataclass(frozen=True)
class Simplification:
    """What ``simplify_with_report`` did.

    Attributes:
        model: The simplified model (the input Model itself when nothing changed).
        before: Op type → node count in the input, every graph (bodies included).
        after: The same for the result.
        changes: Pass → how many nodes it removed (``merge``: initializers merged; ``constants``:
            Constant nodes turned into initializers).
        rounds: How many rounds ran.
    """

    model: Model
    before: Mapping[str, int]
    after: Mapping[str, int]
    changes: Mapping[str, int] = field(default_factory=dict)
    rounds: int = 0

    @property
    def nodes_before(self) -> int:
        """Nodes in the input, every graph."""
        return sum(self.before.values())

    @property
    def nodes_after(self) -> int:
        """Nodes in the result, every graph."""
        return sum(self.after.values())

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "nodes_before": self.nodes_before,
            "nodes_after": self.nodes_after,
            "before": dict(sorted(self.before.items())),
            "after": dict(sorted(self.after.items())),
            "changes": dict(self.changes),
            "rounds": self.rounds,
        }


def op_counts(model: Model) -> dict[str, int]:
    """Op type → node count over every graph of ``model`` (bodies included; custom ops as ``domain::Op``)."""
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    return dict(_op_counts(model.lazy_proto))


@_noop_returns_input
def simplify(model: Model, /, *, max_bytes: int = DEFAULT_MAX_BYTES, check: bool = True,
             progress: Progress | None = None, target: str = "onnx") -> Model:
    """The same computation in fewer nodes: every pass of ``PASSES`` until none changes anything.

    Args:
        model: The model (not changed).
        max_bytes: Folded values larger than this stay computed by their nodes, and weights
            larger than this are never read to fold a node (or packed into an Attention's).
        check: Validate the result (onnx.checker's full check and graphkit's checks).
        progress: Called as ``progress(done, total)`` after each pass (``total`` grows by a round
            of passes while rounds still change something).
        target: ``"onnx"``: standard operators at the model's opsets, so the result runs wherever
            the original did. ``"onnxruntime"``: the passes of ``ORT_PASSES`` too, fusing attention,
            GELU and Add + LayerNormalization into ONNX Runtime's contrib operators (domain
            ``com.microsoft``); the result runs in ONNX Runtime only, and its outputs differ from the
            original's by float rounding (the fused kernels sum in another order).

    Returns:
        The simplified model, or ``model`` itself when nothing could be simplified (``simplify.__wrapped__``
        raises NoChangeError instead, as every edit does).

    Raises:
        UsageError: An unknown target.
        InvalidModelError: Shape inference contradicts the model itself (naming the node and the
            tensor), or the result fails validation.
    """
    result = simplify_with_report(model, max_bytes=max_bytes, check=check, progress=progress, target=target).model
    if result is model:
        raise NoChangeError(f"simplify changes nothing in {model.name}", hint="the model is already as simple as "
                            "simplify makes it; drop this step",
                            cli_hint="the model is already as simple as simplify makes it; drop --simplify")
    return result


def simplify_with_report(model: Model, /, *, max_bytes: int = DEFAULT_MAX_BYTES, check: bool = True,
                         passes: Sequence[str] | None = None, progress: Progress | None = None,
                         target: str = "onnx") -> Simplification:
    """``simplify``, with the op counts before and after and what each pass removed.

    Args:
        model: The model (not changed).
        max_bytes: As for ``simplify``.
        check: As for ``simplify``.
        passes: The passes to run (a subset of ``PASSES``, and with target ``"onnxruntime"`` of
            ``ORT_PASSES`` too; they run in the order of those lists); default every pass of the target.
        progress: As for ``simplify``.
        target: As for ``simplify``.

    Raises:
        UsageError: An unknown pass or target, or a pass of ``ORT_PASSES`` with target ``"onnx"``.
        InvalidModelError: As for ``simplify``.
    """
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    argcheck.integer(max_bytes, "max_bytes", minimum=0, maximum=argcheck.INT64_MAX)
    argcheck.boolean(check, "check")
    progress = _progress.check(progress)
    argcheck.choice(target, "target", TARGETS)
    wanted = _check_passes(passes, target)
    before = _op_counts(model.lazy_proto)
    result, changes, rounds, _ = _run_passes(model, wanted, max_bytes=max_bytes, progress=progress)
    if result is not model and check:
        check_or_raise(result, what="the simplified model")
    return Simplification(result, dict(before), dict(_op_counts(result.lazy_proto)), changes, rounds)


def _check_passes(passes: Any, target: str) -> list[str]:
    known = _ORDER if target == "onnxruntime" else PASSES
    if passes is None:
        return list(known)
    given = argcheck.names(passes, "passes", what="pass name")
    for name in given:
        if name in ORT_PASSES and target != "onnxruntime":
            raise UsageError(f"simplify pass {name!r} writes ONNX Runtime's contrib operators, and target is {target!r}",
                             hint="pass target='onnxruntime' (the result then runs in ONNX Runtime only)",
                             cli_hint="add --target onnxruntime (the result then runs in ONNX Runtime only)")
        if name not in known:
            close = did_you_mean(name, [*known, *ORT_PASSES])
            raise UsageError(f"unknown simplify pass {name!r} in passes" + (f": {close}" if close else ""),
                             hint="use some of " + ", ".join(known),
                             cli_hint="use some of " + ", ".join(known))
    return [p for p in known if p in given]


def run_passes(model: Model, passes: Sequence[str], *, max_bytes: int = DEFAULT_MAX_BYTES) -> tuple[Model, dict[str, int], int]:
    """Run ``passes`` (in ``PASSES`` order, ``ORT_PASSES`` before ``gemm``) in rounds until a round changes nothing; no validation.

    Returns:
        The result (``model`` itself when nothing changed), pass → changes, the number of rounds.

    Raises:
        InvalidModelError: Shape inference contradicts the model itself.
    """
    result, changes, rounds, _ = _run_passes(model, passes, max_bytes=max_bytes)
    return result, changes, rounds


def _run_passes(model: Model, passes: Sequence[str], *, max_bytes: int, constant_identities: bool = False,
                progress: Progress | None = None) -> tuple[Model, dict[str, int], int, _State]:
    if "shapes" in passes or "reshapes" in passes:
        _check_consistent(model)
    proto = model.copy().lazy_proto
    state = _State(model, proto, max_bytes, constant_identities=constant_identities)
    changes: Counter[str] = Counter()
    rounds = done = 0
    active = [name for name in _ORDER if name in passes]
    for rounds in range(1, _MAX_ROUNDS + 1):
        changed = 0
        for name in active:
            count = _PASS_FUNCTIONS[name](state)
            changes[name] += count
            changed += count
            done += 1
            _progress.report(progress, done, rounds * len(active))  # (a round more while rounds change something)
        if not changed:
            break
    _progress.report(progress, done, done)
    if not any(changes.values()):
        return model, {p: 0 for p in passes}, rounds, state
    return Model(proto, model.base_dir, None), {p: changes[p] for p in passes}, rounds, state


class _State:
    """The copy being simplified, the Model it came from (weights' folder) and the options."""

    def __init__(self, model: Model, proto: onnx.ModelProto, max_bytes: int, *,
                 constant_identities: bool = False) -> None:
        self.model = model
        #: Only Identities of constants go (fold_constants), not every Identity and Dropout.
        self.constant_identities = constant_identities
        #: How many folded values were left unstored for being larger than ``max_bytes``.
        self.too_big = 0
        self.proto = proto
        self.max_bytes = max_bytes
        #: Before IR version 4 every initializer is also a graph input.
        self.old_ir = proto.ir_version < 4
        self.opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 0)
        #: Nodes whose evaluation failed once (by id of their proto's serialization) are not tried again.
        self.failed: set[bytes] = set()
        #: The fusions' inferred types, by tensor name (a name keeps its meaning through every pass),
        #: and the names already asked for: asked once, on the graph before any contrib operator,
        #: which ONNX's inference cannot type through.
        self.fusion_types: dict[str, onnx.TypeProto] = {}
        self.fusion_asked: set[str] = set()

    def current(self) -> Model:
        return Model(self.proto, self.model.base_dir, None)


def _op_counts(proto: onnx.ModelProto) -> Counter[str]:
    counts: Counter[str] = Counter()
    for graph, _ in iter_graphs(proto.graph):
        for node in graph.node:
            op = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}"
            counts[op] += 1
    return counts


def _node_total(proto: onnx.ModelProto) -> int:
    return sum(len(graph.node) for graph, _ in iter_graphs(proto.graph))


def _set_nodes(graph: onnx.GraphProto, nodes: Iterable[onnx.NodeProto]) -> None:
    kept = list(nodes)
    del graph.node[:]
    graph.node.extend(kept)


# --------------------------------------------------------------------- consistency before anything


def _check_consistent(model: Model) -> None:
    """Refuse a model that ONNX shape inference finds contradicting itself, naming node and tensor.

    Raises:
        InvalidModelError: naming the node, what it makes, what it reads and why (``graphkit._infer``'s
            wording, as infer-shapes says it).
    """
    probe = weightless(Source(model))
    try:
        infer_proto(probe, strict=True, data_prop=False)
    except onnx.shape_inference.InferenceError as err:
        raise _contradiction(model.name, probe, err) from err


# ------------------------------------------------------------------------------ Constant nodes


def _pass_constants(state: _State) -> int:
    return _constants_in(state.proto.graph, top=True, listed=state.proto.ir_version < 4)


def _constants_in(graph: onnx.GraphProto, *, top: bool, listed: bool) -> int:
    count = 0
    for node in graph.node:
        for sub in subgraphs(node):
            count += _constants_in(sub, top=False, listed=listed)
    if listed and not top:
        return count  # (before IR 4 an initializer must also be a graph input, which a body cannot add)
    outputs = {o.name for o in graph.output}
    kept: list[onnx.NodeProto] = []
    added: list[onnx.TensorProto] = []
    for node in graph.node:
        tensor = None
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and len(node.output) == 1 \
                and node.output[0] not in outputs:
            tensor = _constant_tensor(node)
        if tensor is None:
            kept.append(node)
        else:
            added.append(tensor)
    if added:
        _set_nodes(graph, kept)
        graph.initializer.extend(added)
        if listed:
            graph.input.extend(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in added)
    return count + len(added)


def _constant_tensor(node: onnx.NodeProto) -> onnx.TensorProto | None:
    """The tensor a Constant node holds, named as its output; None for a sparse value."""
    if len(node.attribute) != 1:
        return None
    attr, name = node.attribute[0], node.output[0]
    kind = attr.name
    if kind == "value":
        tensor = onnx.TensorProto()
        tensor.CopyFrom(attr.t)
        tensor.name = name
        return tensor
    makers: dict[str, tuple[int, Any, list[int]]] = {
        "value_float": (onnx.TensorProto.FLOAT, [attr.f], []),
        "value_floats": (onnx.TensorProto.FLOAT, list(attr.floats), [len(attr.floats)]),
        "value_int": (_INT64, [attr.i], []),
        "value_ints": (_INT64, list(attr.ints), [len(attr.ints)]),
        "value_string": (onnx.TensorProto.STRING, [attr.s], []),
        "value_strings": (onnx.TensorProto.STRING, list(attr.strings), [len(attr.strings)]),
    }
    if kind not in makers:
        return None
    dtype, values, dims = makers[kind]
    return helper.make_tensor(name, dtype, dims, values)


# ------------------------------------------------------------------------ Identity and Dropout


def _pass_identities(state: _State) -> int:
    return _identities_in(state, state.proto.graph, {}, top=True)


def _identities_in(state: _State, graph: onnx.GraphProto, outer: Mapping[str, onnx.TensorProto], *,
                   top: bool = False) -> int:
    consts = _visible_constants(graph, outer, listed=top and state.old_ir)
    count = 0
    for node in graph.node:
        for sub in subgraphs(node):
            count += _identities_in(state, sub, consts)
    index = GraphIndex(graph)
    mapping: dict[str, str] = {}
    removed: list[int] = []
    for i, node in enumerate(index.nodes):
        source = _passthrough(state, node, index, consts)
        if state.constant_identities and source not in consts:
            continue
        if source is not None and node.output[0] not in index.output_set:
            mapping[node.output[0]] = source
            removed.append(i)
    if removed:
        for name in mapping:  # (a chain of Identities reads its first input)
            target = mapping[name]
            while target in mapping:
                target = mapping[target]
            mapping[name] = target
        _rename_scope(graph, mapping, defs=False, outputs=False)
        _prune(graph, removed)
        count += len(removed)
    if state.constant_identities:
        return count
    return count + _identities_into_outputs(state, graph, consts)


def _identities_into_outputs(state: _State, graph: onnx.GraphProto, consts: Mapping[str, onnx.TensorProto]) -> int:
    """``out = Identity(t)`` with ``out`` a graph output: the producer of ``t`` writes ``out`` itself."""
    index = GraphIndex(graph)
    renames: dict[str, str] = {}
    removed: list[int] = []
    for i, node in enumerate(index.nodes):
        source = _passthrough(state, node, index, consts)
        if source is None or source in renames:
            continue
        producer = index.producer.get(source)
        if producer is None or source in index.output_set or source in index.input_set:
            continue
        renames[source] = node.output[0]
        removed.append(i)
    if not removed:
        return 0
    doomed = set(removed)
    _set_nodes(graph, (n for i, n in enumerate(index.nodes) if i not in doomed))
    for name in renames:  # (the removed Identity's output keeps its declared type; the old name's goes)
        _drop_value_info(graph, {name})
    _rename_scope(graph, renames, defs=True, outputs=False)
    return len(removed)


def _drop_value_info(graph: onnx.GraphProto, names: set[str]) -> None:
    kept = [v for v in graph.value_info if v.name not in names]
    if len(kept) != len(graph.value_info):
        del graph.value_info[:]
        graph.value_info.extend(kept)


def _passthrough(state: _State, node: onnx.NodeProto, index: GraphIndex,
                 consts: Mapping[str, onnx.TensorProto]) -> str | None:
    """The input a node passes through unchanged to its first output, or None."""
    if node.domain not in ("", "ai.onnx") or not node.output or not node.output[0] or not node.input \
            or not node.input[0]:
        return None
    if node.op_type == "Identity":
        return node.input[0]
    if node.op_type != "Dropout" or state.opset < 7:
        return None
    if len(node.output) > 1 and node.output[1] and (node.output[1] in index.consumers
                                                    or node.output[1] in index.output_set):
        return None
    if len(node.input) > 2 and node.input[2]:
        mode = consts.get(node.input[2])
        if mode is None or tensor_nbytes(mode) != 1:
            return None
        if bool(np.asarray(tensor_value(state.model, mode)).reshape(-1)[0]):
            return None
    return node.input[0]


def _visible_constants(graph: onnx.GraphProto, outer: Mapping[str, onnx.TensorProto], *,
                       listed: bool = False) -> dict[str, onnx.TensorProto]:
    """Constants a graph's nodes can read: its initializers (not overridable inputs) and, unless
    shadowed, its enclosing graphs'. ``listed``: before IR version 4 every initializer is also listed
    as a graph input, and is a constant all the same (as the typing engine and onnxsim take it)."""
    inputs = set() if listed else {i.name for i in graph.input}
    defined = inputs | {o for n in graph.node for o in n.output}
    consts = {name: t for name, t in outer.items() if name not in defined}
    consts.update((t.name, t) for t in graph.initializer if t.name not in inputs)
    return consts


# ------------------------------------------------------------------------------- static shapes


def _pass_shapes(state: _State) -> int:
    return _shapes_in(state, state.proto.graph, top=True)


def _shapes_in(state: _State, graph: onnx.GraphProto, *, top: bool) -> int:
    count = 0
    for node in graph.node:
        for sub in subgraphs(node):
            count += _shapes_in(state, sub, top=False)
    shape_nodes = [n for n in graph.node if n.op_type in ("Shape", "Size") and n.domain in ("", "ai.onnx")
                   and n.input and n.input[0]]
    if not shape_nodes:
        return count
    names = list(dict.fromkeys(n.input[0] for n in shape_nodes))
    types = _types_of(state, graph, names, top=top, declared=False)
    values: dict[str, np.ndarray] = {}
    for node in shape_nodes:
        dims = tensor_dims(types.get(node.input[0]))
        if dims is None:
            continue
        if node.op_type == "Size":
            if all(isinstance(d, int) for d in dims):
                values[node.output[0]] = np.array(prod(dims), np.int64)
            continue
        picked = _shape_slice(node, dims)
        if all(isinstance(d, int) for d in picked):
            values[node.output[0]] = np.array(picked, np.int64)
        else:
            values.update(_static_gathers(graph, node.output[0], picked))
            values.update(_static_slices(graph, node.output[0], picked))
    if not values or (state.old_ir and not top):
        return count
    return count + _replace_by_constants(state, graph, values, top=top)


def _types_of(state: _State, graph: onnx.GraphProto, names: list[str], *, top: bool,
              declared: bool = True) -> dict[str, onnx.TypeProto]:
    """Types of ``names``: the typing engine for the main graph, what a body declares for a body.
    ``declared=False`` infers them from the graph inputs' types instead of believing value_info."""
    if top:
        # (a graph input's declared type is its type: asking inference for it would find it vague and
        # fall through to ONNX Runtime's symbolic inference, importing onnxruntime for nothing)
        given = {v.name: v.type for v in graph.input if v.name in set(names)}
        try:
            found = tensor_types(state.current(), [n for n in names if n not in given], declared=declared,
                                 observe=False).types
        except GraphkitError as err:
            log.info("simplify: cannot type the inputs of Shape nodes: %s", err)
            return given
        return {**found, **given}
    values = [*graph.input, *graph.value_info, *graph.output] if declared else list(graph.input)
    known = {v.name: v.type for v in values}
    for tensor in graph.initializer:
        known[tensor.name] = helper.make_tensor_type_proto(tensor.data_type, list(tensor.dims))
    return {n: known[n] for n in names if n in known}


def _shape_slice(node: onnx.NodeProto, dims: list[int | str]) -> list[int | str]:
    start, end = 0, None
    for attr in node.attribute:
        if attr.name == "start":
            start = attr.i
        elif attr.name == "end":
            end = attr.i
    return dims[start:end]


def _static_gathers(graph: onnx.GraphProto, shape: str, dims: list[int | str]) -> dict[str, np.ndarray]:
    """Gathers of static dims out of a shape whose other dims are dynamic: output → its value."""
    inits = {t.name: t for t in graph.initializer}
    found: dict[str, np.ndarray] = {}
    for node in graph.node:
        if node.op_type != "Gather" or node.domain not in ("", "ai.onnx") or len(node.input) < 2 \
                or node.input[0] != shape or node.input[1] not in inits:
            continue
        if any(a.name == "axis" and a.i != 0 for a in node.attribute):
            continue
        index_tensor = inits[node.input[1]]
        if tensor_nbytes(index_tensor) > 1024 or index_tensor.data_location == onnx.TensorProto.EXTERNAL:
            continue
        indices = numpy_helper.to_array(index_tensor)
        flat = [int(i) for i in indices.reshape(-1)]
        if any(not -len(dims) <= i < len(dims) for i in flat):
            continue
        picked = [dims[i] for i in flat]
        if all(isinstance(d, int) for d in picked):
            found[node.output[0]] = np.array(picked, np.int64).reshape(indices.shape)
    return found


def _static_slices(graph: onnx.GraphProto, shape: str, dims: list[int | str]) -> dict[str, np.ndarray]:
    """Slices of static dims out of a shape whose other dims are dynamic (``Slice(Shape(q), [-1], [MAX])``,
    the head size torch's scaled_dot_product_attention export reads): output → its value. Positive steps
    only, where Python's slicing and ONNX's clamping agree."""
    inits = {t.name: t for t in graph.initializer}
    found: dict[str, np.ndarray] = {}
    for node in graph.node:
        if node.op_type != "Slice" or node.domain not in ("", "ai.onnx") or not node.input or node.input[0] != shape:
            continue
        if len(node.input) > 1:  # (opset 10 on: starts, ends, axes, steps are inputs)
            parts = [_small_ints(inits, name) if name else None for name in list(node.input[1:5])]
            if any(p is None for p in parts[:2]) or any(p is None and name for p, name in zip(parts, node.input[1:5])):
                continue
            starts, ends = parts[0], parts[1]
            axes = parts[2] if len(parts) > 2 and parts[2] is not None else [0]
            steps = parts[3] if len(parts) > 3 and parts[3] is not None else [1]
        else:
            attrs = {a.name: list(a.ints) for a in node.attribute}
            starts, ends, axes, steps = attrs.get("starts"), attrs.get("ends"), attrs.get("axes", [0]), [1]
        if starts is None or ends is None or len(starts) != 1 or len(ends) != 1 or list(axes) not in ([0], [-1]) \
                or list(steps) != [1]:
            continue
        picked = dims[slice(starts[0], ends[0])]
        if picked and all(isinstance(d, int) for d in picked):
            found[node.output[0]] = np.array(picked, np.int64)
    return found


def _small_ints(inits: Mapping[str, onnx.TensorProto], name: str) -> list[int] | None:
    tensor = inits.get(name)
    if tensor is None or tensor.data_type not in (onnx.TensorProto.INT64, onnx.TensorProto.INT32) \
            or tensor.data_location == onnx.TensorProto.EXTERNAL or tensor_nbytes(tensor) > 64:
        return None
    return [int(v) for v in numpy_helper.to_array(tensor).reshape(-1)]


def _replace_by_constants(state: _State, graph: onnx.GraphProto, values: dict[str, np.ndarray], *,
                          top: bool) -> int:
    """Replace the producers of ``values`` by initializers (Constant nodes for graph outputs)."""
    index = GraphIndex(graph)
    outputs = index.output_set
    doomed = [index.producer[name] for name in values]
    before = len(graph.node)
    constants = []
    for name, value in values.items():
        if name in outputs:
            constants.append(helper.make_node("Constant", [], [name], value=numpy_helper.from_array(value, name)))
    _prune(graph, doomed, index=index)
    tensors = []
    for name in [n for n in values if n not in outputs]:  # (each array freed once it is copied)
        tensors.append(numpy_helper.from_array(values.pop(name), name))
    _add_initializers(state, graph, tensors, top=top)
    if constants:
        graph.node.extend(constants)
        _sort(graph)
    return before - len(graph.node)


def _add_initializers(state: _State, graph: onnx.GraphProto, tensors: list[onnx.TensorProto], *, top: bool) -> None:
    """Add initializers (before IR version 4, listed as graph inputs too, as that version requires)."""
    add_initializers(graph, tensors, ir_version=state.proto.ir_version, top=top)


def _sort(graph: onnx.GraphProto) -> None:
    order = GraphIndex(graph).topological_order()
    nodes = list(graph.node)
    _set_nodes(graph, (nodes[i] for i in order))


# ------------------------------------------------------------------------- Reshape targets from types


def _pass_reshapes(state: _State) -> int:
    """Reshapes whose target is computed (``Shape → Gather → … → Concat``) get a constant target when the
    typing engine proves every output dim: a size, ``0`` (copy) for a dim that is the same named dim of
    the input at the same position, and ``-1`` for at most one other; the computation then dies."""
    graph = state.proto.graph
    consts = _visible_constants(graph, {}, listed=state.old_ir)
    reshapes = [n for n in graph.node if n.op_type == "Reshape" and n.domain in ("", "ai.onnx") and len(n.input) == 2
                and n.input[1]]
    found = [n for n in reshapes if n.input[1] not in consts and not any(a.name == "allowzero" and a.i
                                                                         for a in n.attribute)]
    if not reshapes:
        return 0
    # (inferred, not declared: an exporter's name for an output dim is no proof of its size)
    types = _types_of(state, graph, list(dict.fromkeys(name for n in reshapes for name in (n.input[0], n.output[0]))),
                      top=True, declared=False)
    count = 0
    for node in reshapes:  # (to the shape it has: an Identity, which the identities pass removes)
        data, out = tensor_dims(types.get(node.input[0])), tensor_dims(types.get(node.output[0]))
        if data is not None and data == out and all(isinstance(d, int) or _named(d) for d in data):
            node.op_type = "Identity"
            del node.input[1:]
            del node.attribute[:]
            count += 1
    found = [n for n in found if n.op_type == "Reshape"]
    taken = {t.name for t in graph.initializer} | {o for n in graph.node for o in n.output} | {i.name for i in graph.input}
    for node in found:
        target = _exact_target(tensor_dims(types.get(node.input[0])), tensor_dims(types.get(node.output[0])))
        if target is None:
            continue
        name = fresh_name(f"{node.output[0]}/shape", taken)
        _add_initializers(state, graph, [numpy_helper.from_array(np.array(target, np.int64), name)], top=True)
        node.input[1] = name
        count += 1
    return count


def _exact_target(data: list[int | str] | None, out: list[int | str] | None) -> list[int] | None:
    """A constant Reshape target giving exactly ``out`` from ``data`` at every size, or None."""
    if data is None or out is None or not out:
        return None
    target: list[int] = []
    for j, dim in enumerate(out):
        if isinstance(dim, int):
            if dim == 0:
                return None  # (0 in a target copies the input's dim; a zero size cannot be written)
            target.append(dim)
        elif j < len(data) and data[j] == dim and _named(dim):
            target.append(0)
        else:
            target.append(-1)
    return target if target.count(-1) <= 1 else None


def _named(dim: str) -> bool:
    """A dim name that means the same size wherever it appears (not a placeholder for an unknown)."""
    return bool(dim) and dim != "?" and not dim.startswith("unk")


# ------------------------------------------------------------------------------ constant folding


def _pass_fold(state: _State) -> int:
    return _fold_in(state, state.proto.graph, {}, top=True)


def _fold_in(state: _State, graph: onnx.GraphProto, outer: Mapping[str, onnx.TensorProto], *,
             top: bool = False) -> int:
    listed = top and state.old_ir
    consts = _visible_constants(graph, outer, listed=listed)
    count = 0
    index = GraphIndex(graph)
    folded = _foldable(state, index, consts) if top or not state.old_ir else []
    if folded:
        count += _fold(state, graph, index, folded, consts, top=top)
        consts = _visible_constants(graph, outer, listed=listed)
    for node in graph.node:
        for sub in subgraphs(node):
            count += _fold_in(state, sub, consts)
    return count


def _foldable(state: _State, index: GraphIndex, consts: Mapping[str, onnx.TensorProto]) -> list[int]:
    """Nodes computable from constants alone, in topological order."""
    known = set(consts)
    found: list[int] = []
    for i in _order(index):
        node = index.nodes[i]
        if node.domain not in _STANDARD or node.op_type in _NOT_FOLDED or not node.input or subgraphs(node):
            continue
        if not all(name and name in known for name in node.input):
            continue
        if any(name in consts and _too_big(consts[name], state.max_bytes) for name in node.input):
            continue
        if node.SerializeToString() in state.failed:
            continue
        found.append(i)
        known.update(o for o in node.output if o)
    return found


def _order(index: GraphIndex) -> Sequence[int]:
    """The nodes' positions in execution order: as listed when the list is one (ONNX requires it; a
    check in one pass is cheaper than sorting 50k nodes), else sorted."""
    seen = set(index.outer) | set(index.input_set) | set(index.initializers)
    for i, reads in enumerate(index.node_reads):
        if any(name and name not in seen for name in reads):
            return index.topological_order()
        seen.update(index.nodes[i].output)
    return range(len(index.nodes))


def _too_big(tensor: onnx.TensorProto, limit: int) -> bool:
    size = tensor_nbytes(tensor)
    return size > limit or (size < 0 and tensor.ByteSize() > limit)


def _fold(state: _State, graph: onnx.GraphProto, index: GraphIndex, order: list[int],
          consts: Mapping[str, onnx.TensorProto], *, top: bool) -> int:
    """Evaluate the nodes at ``order`` and replace what leaves them by constants; the count removed."""
    folded = set(order)
    outside = {name for i, reads in enumerate(index.node_reads) if i not in folded for name in reads}
    boundary_of = outside | index.output_set
    values = _evaluate(state, [index.nodes[i] for i in order], consts, boundary_of)
    folded = {i for i in folded if all(o in values for o in index.nodes[i].output if o)}
    while True:  # a value too large to store keeps its node, and so what that node reads is needed
        wanted = _boundary(index, folded)
        too_big = {index.producer[n] for n in wanted if values[n].nbytes > state.max_bytes}
        if not too_big:
            break
        state.too_big += len(too_big)
        folded -= too_big
    if not folded:
        return 0
    kept = {name: values.pop(name) for name in _boundary(index, folded)}
    del values  # (the values left are not stored: free them before the stored ones are copied)
    return _replace_by_constants(state, graph, kept, top=top)


def _boundary(index: GraphIndex, folded: set[int]) -> list[str]:
    """Outputs of folded nodes that something outside the folded set (or a graph output) reads."""
    read = {name for i, reads in enumerate(index.node_reads) if i not in folded for name in reads}
    read |= index.output_set
    return [o for i in sorted(folded) for o in index.nodes[i].output if o and o in read]


def _evaluate(state: _State, nodes: list[onnx.NodeProto], consts: Mapping[str, onnx.TensorProto],
              keep: set[str]) -> dict[str, np.ndarray]:
    """Values of the nodes' outputs that ``keep`` names or later nodes read, in batches of bounded weight."""
    later_reads: Counter[str] = Counter(name for node in nodes for name in node.input)
    values: dict[str, np.ndarray] = {}
    batch: list[onnx.NodeProto] = []
    weights: set[str] = set()
    weight_bytes = 0
    for node in nodes:
        new = {n for n in node.input if n in consts and n not in weights}
        size = sum(max(tensor_nbytes(consts[n]), 0) for n in new)
        if batch and (weight_bytes + size > _BATCH_BYTES or len(batch) >= _BATCH_NODES):
            _run_batch(state, batch, consts, values, keep, later_reads)
            batch, weights, weight_bytes = [], set(), 0
            new = {n for n in node.input if n in consts}
            size = sum(max(tensor_nbytes(consts[n]), 0) for n in new)
        batch.append(node)
        weights |= new
        weight_bytes += size
    if batch:
        _run_batch(state, batch, consts, values, keep, later_reads)
    return {name: value for name, value in values.items() if name in keep}


def _run_batch(state: _State, batch: list[onnx.NodeProto], consts: Mapping[str, onnx.TensorProto],
               values: dict[str, np.ndarray], keep: set[str], later_reads: Counter[str]) -> None:
    for node in batch:
        for name in node.input:
            later_reads[name] -= 1
    _run_nodes(state, batch, consts, values, keep, later_reads, every_output=False)


def _run_nodes(state: _State, nodes: list[onnx.NodeProto], consts: Mapping[str, onnx.TensorProto],
               values: dict[str, np.ndarray], keep: set[str], later_reads: Counter[str], *, every_output: bool) -> None:
    made: set[str] = set()
    runnable: list[onnx.NodeProto] = []
    for node in nodes:  # (a node whose input failed to fold cannot run)
        if all(name in values or name in consts or name in made for name in node.input):
            runnable.append(node)
            made.update(o for o in node.output if o)
    wanted = [o for n in runnable for o in n.output if o and (every_output or o in keep or later_reads[o] > 0)]
    if not wanted:
        return
    try:
        found = _run(state, runnable, consts, values, wanted)
    except GraphkitError as err:
        if len(runnable) == 1:
            log.info("simplify: not folding %s: %s", node_label(runnable[0]), err)
            state.failed.add(runnable[0].SerializeToString())
            return
        for node in runnable:  # (one node ONNX Runtime cannot run must not stop the others)
            _run_nodes(state, [node], consts, values, keep, later_reads, every_output=True)
        return
    values.update(found)


def _run(state: _State, nodes: list[onnx.NodeProto], consts: Mapping[str, onnx.TensorProto],
         values: Mapping[str, np.ndarray], wanted: list[str]) -> dict[str, np.ndarray]:
    made = {o for n in nodes for o in n.output if o}
    fed = {name: values[name] for n in nodes for name in n.input if name not in made and name in values}
    needed = {name for n in nodes for name in n.input} - made - set(fed)
    graph = helper.make_graph(
        list(nodes), "fold",
        [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
         for name, v in fed.items()],
        [helper.make_empty_tensor_value_info(name) for name in wanted],
        initializer=[consts[name] for name in sorted(needed) if name in consts],
    )
    source = state.proto
    part = helper.make_model(graph, opset_imports=list(source.opset_import), ir_version=max(source.ir_version, 7))
    part.functions.extend(source.functions)
    model = Model(part, state.model.base_dir)
    session = _ort.session(model, opt_level="disable")
    found = _ort.run_session(session, wanted, fed, "a constant part")
    return {name: value for name, value in zip(wanted, found) if isinstance(value, np.ndarray)}


# ------------------------------------------------------------------ BatchNormalization, Mul, Add into Conv


def _pass_fuse(state: _State) -> int:
    """Fold what scales or shifts a Conv's output per channel into the Conv's weights and bias: an
    inference BatchNormalization, a Mul or an Add by a constant that is the same along every axis but
    the channel's. The Conv then writes that node's output. Only where the Conv's output feeds that
    node alone and its weights are constants of at most ``max_bytes``."""
    graph = state.proto.graph
    kinds = {n.op_type for n in graph.node}
    if "Conv" not in kinds:
        return _fuse_transposes(graph) if "Transpose" in kinds else 0
    consts = dict(_visible_constants(graph, {}, listed=state.old_ir))
    index = GraphIndex(graph)
    taken = set(index.all_tensor_names)
    fused: list[int] = []
    written: set[int] = set()
    for i, node in enumerate(index.nodes):
        conv_at = _conv_before(state, index, i, consts)
        if conv_at is None or conv_at in written:
            continue
        conv = index.nodes[conv_at]
        values = _fused_values(state, conv, node, consts)
        if values is None:
            continue
        names = []
        for value, current, stem in zip(values, [conv.input[1], conv.input[2] if len(conv.input) > 2 else ""],
                                        (f"{conv.input[1]}/fused", f"{node.output[0]}/bias")):
            if current and index.consumers.get(current) == [conv_at] and current in index.dense:
                index.dense[current].CopyFrom(numpy_helper.from_array(value, current))  # (no second copy)
                names.append(current)
                continue
            tensor = numpy_helper.from_array(value, fresh_name(stem, taken))
            _add_initializers(state, graph, [tensor], top=True)
            consts[tensor.name] = tensor
            names.append(tensor.name)
        del conv.input[1:]
        conv.input.extend(names)
        conv.output[0] = node.output[0]
        fused.append(i)
        written.add(conv_at)
    if fused:
        doomed = set(fused)
        _set_nodes(graph, (n for i, n in enumerate(index.nodes) if i not in doomed))
        _prune(graph, fed=[name for i in fused for name in index.nodes[i].input[1:]])
    return len(fused) + _fuse_transposes(graph)


def _fuse_transposes(graph: onnx.GraphProto) -> int:
    """``Transpose(Transpose(x, p1), p2)`` is one ``Transpose(x, p1[p2])`` (gone when that is the identity)
    where the first Transpose's output feeds the second alone."""
    index = GraphIndex(graph)
    removed: list[int] = []
    mapping: dict[str, str] = {}
    gone: set[int] = set()
    for i, node in enumerate(index.nodes):
        second = _perm(node)
        if second is None:
            continue
        at = index.producer.get(node.input[0])
        first = _perm(index.nodes[at]) if at is not None and at not in gone else None
        if at is None or first is None or len(first) != len(second) or index.consumers.get(node.input[0]) != [i] \
                or node.input[0] in index.output_set:
            continue
        perm = [first[k] for k in second]
        source = index.nodes[at].input[0]
        removed.append(at)
        gone.add(at)
        if perm == list(range(len(perm))) and node.output[0] not in index.output_set:
            mapping[node.output[0]] = source
            removed.append(i)
            gone.add(i)
            continue
        node.input[0] = source
        for attr in node.attribute:
            if attr.name == "perm":
                del attr.ints[:]
                attr.ints.extend(perm)
    if not removed:
        return 0
    _rename_scope(graph, mapping, defs=False, outputs=False)
    _prune(graph, removed)
    return len(removed)


def _perm(node: onnx.NodeProto) -> list[int] | None:
    if node.op_type != "Transpose" or node.domain not in ("", "ai.onnx") or not node.input or not node.input[0]:
        return None
    return next((list(a.ints) for a in node.attribute if a.name == "perm"), None)


def _conv_before(state: _State, index: GraphIndex, i: int, consts: Mapping[str, onnx.TensorProto]) -> int | None:
    """The position of the Conv whose output the node at ``i`` scales or shifts per channel, or None."""
    node = index.nodes[i]
    if node.domain not in ("", "ai.onnx") or len(node.output) < 1 or any(o for o in node.output[1:]):
        return None
    if node.op_type == "BatchNormalization":
        if state.opset < 9 or len(node.input) != 5 or any(a.name == "training_mode" and a.i for a in node.attribute):
            return None
        data, operands = node.input[0], list(node.input[1:])
    elif node.op_type in ("Mul", "Add") and len(node.input) == 2:
        data, operands = (node.input[0], [node.input[1]]) if node.input[1] in consts else (node.input[1], [node.input[0]])
    else:
        return None
    if not all(n in consts and not _too_big(consts[n], state.max_bytes) for n in operands):
        return None
    at = index.producer.get(data)
    if at is None or index.consumers.get(data) != [i] or data in index.output_set:
        return None
    conv = index.nodes[at]
    if conv.op_type != "Conv" or conv.domain not in ("", "ai.onnx") or len(conv.input) < 2 or conv.input[1] not in consts \
            or (len(conv.input) > 2 and conv.input[2] and conv.input[2] not in consts):
        return None
    return None if _too_big(consts[conv.input[1]], state.max_bytes) else at


def _fused_values(state: _State, conv: onnx.NodeProto, node: onnx.NodeProto,
                  consts: Mapping[str, onnx.TensorProto]) -> tuple[np.ndarray, np.ndarray] | None:
    """The Conv's new weights and bias, or None when the node does not act per output channel."""
    weight = tensor_value(state.model, consts[conv.input[1]])
    if weight.dtype not in (np.float32, np.float64) or weight.ndim < 3:
        return None
    channels = weight.shape[0]
    has_bias = len(conv.input) > 2 and bool(conv.input[2])
    bias = tensor_value(state.model, consts[conv.input[2]]).astype(np.float64) if has_bias else np.zeros(channels)
    operands = [tensor_value(state.model, consts[n]) for n in node.input if n in consts and n != node.input[0]] \
        if node.op_type == "BatchNormalization" else [tensor_value(state.model, consts[n]) for n in node.input if n in consts]
    if bias.shape != (channels,) or any(v.dtype != weight.dtype for v in operands):
        return None
    if node.op_type == "BatchNormalization":
        scale, shift, mean, var = (v.astype(np.float64) for v in operands)
        if any(v.shape != (channels,) for v in (scale, shift, mean, var)):
            return None
        epsilon = next((a.f for a in node.attribute if a.name == "epsilon"), 1e-5)
        factor = scale / np.sqrt(var + epsilon)
        offset = shift - mean * factor
    else:
        vector = _per_channel(operands[0], channels, weight.ndim)
        if vector is None:
            return None
        factor, offset = (vector, np.zeros(channels)) if node.op_type == "Mul" else (np.ones(channels), vector)
    fused_w = weight.astype(np.float64) * factor.reshape((channels,) + (1,) * (weight.ndim - 1))
    return fused_w.astype(weight.dtype), (bias * factor + offset).astype(weight.dtype)


def _per_channel(value: np.ndarray, channels: int, rank: int) -> np.ndarray | None:
    """``value`` as one number per output channel of a Conv output of ``rank`` dims, if it broadcasts so."""
    if value.ndim > rank:
        return None
    shape = (1,) * (rank - value.ndim) + value.shape
    if shape[0] != 1 or any(d != 1 for d in shape[2:]) or shape[1] not in (1, channels):
        return None
    return np.broadcast_to(value.reshape(-1).astype(np.float64), (channels,)).copy()


# ------------------------------------------------------------ MatMul + Add into Gemm, constant If


def _scopes(state: _State) -> list[tuple[onnx.GraphProto, dict[str, onnx.TensorProto], bool]]:
    """Every graph with the constants its nodes can read (an enclosing graph's too), main graph first."""
    found: list[tuple[onnx.GraphProto, dict[str, onnx.TensorProto], bool]] = []

    def walk(graph: onnx.GraphProto, outer: Mapping[str, onnx.TensorProto], top: bool) -> None:
        consts = _visible_constants(graph, outer, listed=top and state.old_ir)
        found.append((graph, consts, top))
        for node in graph.node:
            for sub in subgraphs(node):
                walk(sub, consts, False)

    walk(state.proto.graph, {}, True)
    return found


def _has_op(state: _State, op_type: str) -> bool:
    """Whether any graph has a node of ``op_type`` (a scan that spares the passes' constant maps)."""
    return any(n.op_type == op_type for graph, _ in iter_graphs(state.proto.graph) for n in graph.node)


def _pass_gemm(state: _State) -> int:
    if not _has_op(state, "MatMul"):
        return 0
    count = 0
    for graph, consts, top in _scopes(state):
        names = _rewrite.gemm_candidates(graph, consts)
        if names:
            # (inferred, not declared: Gemm needs A's rank proven)
            types = _types_of(state, graph, list(dict.fromkeys(names)), top=top, declared=False)
            fused = _rewrite.fuse_gemms(graph, consts, types, state.opset)
            if not fused and (top or not state.old_ir):  # (else the next round types the graph again first)
                taken = set(GraphIndex(state.proto.graph).all_tensor_names)
                known = len(graph.initializer)
                fused = _rewrite.fuse_gemm_groups(graph, consts, types, state.opset, taken)
                if top and state.old_ir:  # (its new target shapes are initializers: listed, as that IR requires)
                    graph.input.extend(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                                       for t in graph.initializer[known:])
            count += fused
    return count


def _pass_branches(state: _State) -> int:
    if not _has_op(state, "If"):
        return 0
    top = state.proto.graph
    count = 0
    for graph, consts, is_top in reversed(_scopes(state)):  # (bodies first: a branch is inlined simplified)
        if not any(n.op_type == "If" for n in graph.node) or (state.old_ir and not is_top):
            continue
        known = len(graph.initializer)
        count += _rewrite.inline_constant_ifs(graph, consts, lambda t: tensor_value(state.model, t), top)
        if is_top and state.old_ir:  # (before IR version 4 every initializer is also a graph input)
            graph.input.extend(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                               for t in graph.initializer[known:])
    return count


# ------------------------------------------------------------- ONNX Runtime's contrib operators


def _fusion_inputs(state: _State, *, limit: bool = False) -> tuple[dict[str, onnx.TensorProto], dict[str, onnx.TypeProto]]:
    """The main graph's constants (``limit``: those of at most ``max_bytes``) and the types the fusions
    need, inferred once per name (from the graph inputs' types, not value_info)."""
    graph = state.proto.graph
    consts = _visible_constants(graph, {}, listed=False)
    for node in graph.node:  # (Constant nodes too: each fusion is also an edit of its own, run before any folding)
        if node.op_type == "Constant" and node.domain in _STANDARD and len(node.output) == 1:
            value = next((a.t for a in node.attribute if a.name == "value" and a.type == onnx.AttributeProto.TENSOR),
                         None)
            if value is not None:
                consts.setdefault(node.output[0], value)
    if limit:
        consts = {n: t for n, t in consts.items() if not _too_big(t, state.max_bytes)}
    wanted = [n for n in _fusions.type_candidates(graph) if n not in state.fusion_asked and n not in consts]
    if wanted:
        state.fusion_asked.update(wanted)
        state.fusion_types.update(_types_of(state, graph, wanted, top=True, declared=False))
    return consts, state.fusion_types


def _fused(state: _State, count: int) -> int:
    """Import the contrib operators' domain once a fusion wrote one."""
    if count and not any(o.domain == _fusions.DOMAIN for o in state.proto.opset_import):
        state.proto.opset_import.append(helper.make_opsetid(_fusions.DOMAIN, 1))
    return count


def _fusion_scope(state: _State, op_types: Iterable[str]) -> bool:
    """Whether the main graph (of an IR version with initializers apart from inputs) has these ops."""
    return not state.old_ir and any(n.op_type in set(op_types) for n in state.proto.graph.node)


def _read(state: _State) -> Any:
    return lambda tensor: tensor_value(state.model, tensor)


def _taken(state: _State) -> set[str]:
    return set(GraphIndex(state.proto.graph).all_tensor_names) | {n.name for n in state.proto.graph.node if n.name}


def _pass_attention(state: _State) -> int:
    if not _fusion_scope(state, ["Softmax"]):
        return 0
    consts, types = _fusion_inputs(state, limit=True)
    return _fused(state, _fusions.fuse_attention(state.proto.graph, consts, types, _read(state), _taken(state),
                                                 state.opset))


def _pass_gelu(state: _State) -> int:
    if not _fusion_scope(state, ["Erf", "Tanh"]):
        return 0
    consts, types = _fusion_inputs(state)
    return _fused(state, _fusions.fuse_gelu(state.proto.graph, consts, types, _read(state), _taken(state)))


def _pass_skip_layernorm(state: _State) -> int:
    if not _fusion_scope(state, ["LayerNormalization", "ReduceMean"]):
        return 0
    consts, types = _fusion_inputs(state)
    return _fused(state, _fusions.fuse_skip_layernorm(state.proto.graph, consts, types, _read(state), _taken(state)))


# -------------------------------------------------------------------------- identical constants


def _pass_merge(state: _State) -> int:
    top = state.proto.graph
    return sum(_merge_in(graph, state.max_bytes, listed=graph is top and state.old_ir)
               for graph, _ in list(iter_graphs(top)))


def _merge_in(graph: onnx.GraphProto, limit: int, *, listed: bool = False) -> int:
    """Merge initializers with equal dtype, dims and data (inline, up to ``limit`` bytes) or the same
    external location; the first of each kind stays. ``listed``: initializers listed as graph inputs
    (before IR version 4) are constants too."""
    inputs = {i.name for i in graph.input} - ({t.name for t in graph.initializer} if listed else set())
    keep_as_is = inputs | {o.name for o in graph.output}
    first: dict[tuple[int, tuple[int, ...], bytes], str] = {}
    mapping: dict[str, str] = {}
    for tensor in graph.initializer:
        if tensor.name in keep_as_is or (_too_big(tensor, limit) and tensor.data_location != onnx.TensorProto.EXTERNAL):
            continue
        key = (tensor.data_type, tuple(tensor.dims), _digest(tensor))
        if key in first:
            mapping[tensor.name] = first[key]
        else:
            first[key] = tensor.name
    if not mapping:
        return 0
    _rename_scope(graph, mapping, defs=False, outputs=False)
    _remove_initializers(graph, set(mapping))
    _drop_value_info(graph, set(mapping))
    return len(mapping)


def _digest(tensor: onnx.TensorProto) -> bytes:
    """The tensor's data (or where it lies) as a digest, without its name and doc string."""
    bare = onnx.TensorProto()
    bare.CopyFrom(tensor)
    bare.ClearField("name")
    bare.ClearField("doc_string")
    return hashlib.sha256(bare.SerializeToString(deterministic=True)).digest()


# ------------------------------------------------------------------------------- identical nodes


def _pass_cse(state: _State) -> int:
    return sum(_cse_in(graph) for graph, _ in list(iter_graphs(state.proto.graph)))


def _cse_in(graph: onnx.GraphProto) -> int:
    """Nodes computing the same op with the same attributes on the same inputs are one node: the
    first stays and the others' readers read its outputs (a graph output keeps its own producer)."""
    index = GraphIndex(graph)
    first: dict[bytes, int] = {}
    mapping: dict[str, str] = {}
    removed: list[int] = []
    for i in _order(index):
        node = index.nodes[i]
        if node.op_type in _NOT_FOLDED - {"Identity", "DequantizeLinear"} or subgraphs(node) \
                or any(o in index.output_set for o in node.output) or not node.output:
            continue
        key = _node_key(node, mapping)
        if key not in first:
            first[key] = i
            continue
        kept = index.nodes[first[key]]
        mapping.update((o, k) for o, k in zip(node.output, kept.output) if o)
        removed.append(i)
    if not removed:
        return 0
    _rename_scope(graph, mapping, defs=False, outputs=False)
    _prune(graph, removed)
    return len(removed)


def _node_key(node: onnx.NodeProto, mapping: Mapping[str, str]) -> bytes:
    bare = onnx.NodeProto()
    bare.op_type, bare.domain, bare.overload = node.op_type, node.domain, node.overload
    bare.input.extend(mapping.get(n, n) for n in node.input)
    bare.attribute.extend(sorted(node.attribute, key=lambda a: a.name))
    bare.output.extend("" for _ in node.output)
    return bare.SerializeToString(deterministic=True)


# -------------------------------------------------------------------------------------- dead code


def _pass_dead(state: _State) -> int:
    proto = state.proto
    before = _node_total(proto) + sum(len(g.initializer) for g, _ in iter_graphs(proto.graph)) + len(proto.graph.input)
    functions, opsets = len(proto.functions), len(proto.opset_import)
    _clean_graph(proto.graph, top=True, inputs=True)
    _clean_functions(proto)
    used = {n.domain if n.domain != "ai.onnx" else "" for g, _ in iter_graphs(proto.graph) for n in g.node}
    used |= {n.domain if n.domain != "ai.onnx" else "" for f in proto.functions for n in f.node}
    _drop_opsets(proto, {o.domain if o.domain != "ai.onnx" else "" for o in proto.opset_import} - used - {""})
    after = _node_total(proto) + sum(len(g.initializer) for g, _ in iter_graphs(proto.graph)) + len(proto.graph.input)
    return before - after + functions - len(proto.functions) + opsets - len(proto.opset_import)


_PASS_FUNCTIONS = {
    "constants": _pass_constants,
    "identities": _pass_identities,
    "shapes": _pass_shapes,
    "reshapes": _pass_reshapes,
    "fold": _pass_fold,
    "branches": _pass_branches,
    "fuse": _pass_fuse,
    "attention": _pass_attention,
    "gelu": _pass_gelu,
    "skip_layernorm": _pass_skip_layernorm,
    "gemm": _pass_gemm,
    "merge": _pass_merge,
    "cse": _pass_cse,
    "dead": _pass_dead,
}


# -------------------------------------------------------------------------------- the edit options


def _as_edit(model: Model, passes: Sequence[str], *, what: str, hint: str, cli_hint: str | None = None,
             max_bytes: int = DEFAULT_MAX_BYTES, check: bool = True, constant_identities: bool = False,
             progress: Progress | None = None) -> Model:
    """Run ``passes`` as one edit: validated like every edit, NoChangeError when nothing changes."""
    argcheck.instance(model, "model", Model, argcheck.MODEL)
    argcheck.integer(max_bytes, "max_bytes", minimum=0, maximum=argcheck.INT64_MAX)
    argcheck.boolean(check, "check")
    progress = _progress.check(progress)
    result, _, _, state = _run_passes(model, passes, max_bytes=max_bytes, constant_identities=constant_identities,
                                      progress=progress)
    if result is model:
        if state.too_big:
            raise NoChangeError(f"{what}: every foldable tensor of {model.name} is larger than {max_bytes} bytes",
                                hint="raise max_bytes", cli_hint="raise the limit (--fold-constants MAX_BYTES)")
        if what == "fold_constants":
            raise NoChangeError(f"fold_constants: no node of {model.name} depends only on constants", hint=hint,
                                cli_hint=cli_hint)
        raise NoChangeError(f"{what} changes nothing in {model.name}", hint=hint, cli_hint=cli_hint)
    if check:
        check_or_raise(result, what=f"the model after {what}")
    return result


@_noop_returns_input
def fold_constants(model: Model, /, *, max_bytes: int = 2**20, check: bool = True,
                   progress: Progress | None = None) -> Model:
    """Replace what is computed from constants alone by its value, in every graph (bodies too).

    Constant nodes become initializers; an Identity of a constant is rewired to read the constant
    (a weight is never copied); Shape and Size of tensors whose dims are static become constants;
    the rest is evaluated once in ONNX Runtime. A value larger than ``max_bytes`` is not stored (its
    nodes stay); non-deterministic and custom-domain ops and DequantizeLinear are never folded.
    ``progress`` is called as ``progress(done, total)`` after each pass, as for ``simplify``.

    Raises:
        InvalidModelError: Shape inference contradicts the model itself, or the result is invalid.
    """
    return _as_edit(model, ["constants", "identities", "shapes", "fold"], what="fold_constants", max_bytes=max_bytes,
                    check=check, constant_identities=True, hint="nothing to fold; drop fold_constants",
                    cli_hint="nothing to fold; drop --fold-constants",
                    progress=progress)


@_noop_returns_input
def constants_to_initializers(model: Model, /, *, check: bool = True) -> Model:
    """Turn Constant nodes into initializers, in every graph (a Constant that is a graph output stays).

    Raises:
        InvalidModelError: The result is invalid.
    """
    return _as_edit(model, ["constants"], what="constants_to_initializers", check=check,
                    hint="the model has no Constant node that can become an initializer")


@_noop_returns_input
def remove_identities(model: Model, /, *, check: bool = True) -> Model:
    """Remove Identity nodes and Dropout in inference (mask unread, training_mode absent or false):
    their readers read their input; a graph output's producer writes it directly.

    Raises:
        InvalidModelError: The result is invalid.
    """
    return _as_edit(model, ["identities"], what="remove_identities", check=check,
                    hint="the model has no Identity or inference Dropout that can go")


@_noop_returns_input
def fold_shapes(model: Model, /, *, check: bool = True) -> Model:
    """Replace Shape/Size of static dims (and Gathers of static dims) by constants, give Reshapes whose
    output dims inference proves a constant target, and remove the shape computations left unused.
    Follow with ``fold_constants`` to fold what the new constants feed.

    Raises:
        InvalidModelError: Shape inference contradicts the model itself, or the result is invalid.
    """
    return _as_edit(model, ["shapes", "reshapes", "dead"], what="fold_shapes", check=check,
                    hint="no shape of the model is both computed and static")


@_noop_returns_input
def merge_constants(model: Model, /, *, check: bool = True) -> Model:
    """Merge initializers with equal dtype, shape and data (or the same external location) into one.

    Raises:
        InvalidModelError: The result is invalid.
    """
    return _as_edit(model, ["merge"], what="merge_constants", check=check, hint="no two initializers are equal")


@_noop_returns_input
def fuse_gemm(model: Model, /, *, check: bool = True) -> Model:
    """Replace ``Add(MatMul(A, B), C)`` by ``Gemm(A, B, C)`` where that is the same computation: A of
    rank 2 (proven by inference), B a 2-D constant, C a constant that broadcasts to the product
    (``[N]``, ``[1, N]``, ...), all float or double, the product read by the Add alone; in every graph.
    Several such projections of one input of static dims ``[..., K]``, each read by a Reshape (an
    attention's Q, K, V), become one ``Reshape(x, [M, K])`` and a Gemm each, the Reshapes given their
    static output shape as target.

    Raises:
        InvalidModelError: Shape inference contradicts the model itself, or the result is invalid.
    """
    return _as_edit(model, ["gemm"], what="fuse_gemm", check=check,
                    hint="no MatMul of a 2-D input by a 2-D constant is followed by an Add of a constant bias")


@_noop_returns_input
def inline_branches(model: Model, /, *, check: bool = True) -> Model:
    """Replace each If whose condition is a constant by the nodes of the branch it takes, in every graph
    (the branch's names that clash with the model's are renamed; its weights and value_info move along).
    Follow with ``fold_constants`` to fold a condition computed from constants first.

    Raises:
        InvalidModelError: The result is invalid.
    """
    return _as_edit(model, ["branches"], what="inline_branches", check=check,
                    hint="no If has a constant condition (an initializer); fold_constants first folds a "
                         "condition computed from constants",
                    cli_hint="no If has a constant condition (an initializer); --fold-constants first folds a "
                             "condition computed from constants")


@_noop_returns_input
def fuse_conv(model: Model, /, *, max_bytes: int = DEFAULT_MAX_BYTES, check: bool = True) -> Model:
    """Fold an inference BatchNormalization, or a Mul or Add by a per-channel constant, that alone reads
    a Conv's output into the Conv's weights and bias (weights of at most ``max_bytes``); and make two
    Transposes in a row one (none when they cancel). Main graph.

    Raises:
        InvalidModelError: The result is invalid.
    """
    return _as_edit(model, ["fuse"], what="fuse_conv", max_bytes=max_bytes, check=check,
                    hint="no Conv output is scaled or shifted per channel by a constant, and no two Transposes "
                         "follow each other")


@_noop_returns_input
def merge_nodes(model: Model, /, *, check: bool = True) -> Model:
    """Compute nodes with the same op, attributes and inputs once, in every graph: the first stays and
    the others' readers read its outputs (a graph output keeps its own producer).

    Raises:
        InvalidModelError: The result is invalid.
    """
    return _as_edit(model, ["cse"], what="merge_nodes", check=check,
                    hint="no two nodes compute the same op on the same inputs")


@_noop_returns_input
def fuse_attention(model: Model, /, *, max_bytes: int = DEFAULT_MAX_BYTES, check: bool = True) -> Model:
    """Replace each multi-head self-attention block by ONNX Runtime's ``com.microsoft::Attention``
    (the result runs in ONNX Runtime only). Main graph.

    A block is ``Softmax(scale · Q Kᵀ) V`` with Q, K, V each ``MatMul(x, W) (+ b)`` of one input x
    proven ``[batch, seq, hidden]`` (weights of at most ``max_bytes``, float32), split into heads by a
    Reshape whose constant target proves the head count and a Transpose, merged back by a Transpose
    and a Reshape, scaled by scalar constants. Its Q, K and V weights and biases are packed into one
    weight and one bias; ``num_heads`` comes from the Reshape, ``scale`` from the constants. A mask
    added to the scaled scores becomes Attention's ``attention_bias`` (a padding mask ``[batch, 1, 1,
    seq]`` broadcast along the queries); a block with a mask added before the scale, or anything else
    between the scores and the Softmax, is left as it is.

    Raises:
        InvalidModelError: Shape inference contradicts the model itself, or the result is invalid.
    """
    return _as_edit(model, ["attention"], what="fuse_attention", max_bytes=max_bytes, check=check,
                    hint="no Softmax(scale * Q K^T [+ mask]) V block of float32 projections of one 3-D input, "
                         "split into heads by a Reshape of constant target, was found; an export's computed "
                         "Reshape targets and Dropout go first with simplify(model, target='onnxruntime'), "
                         "which also fuses",
                    cli_hint="no Softmax(scale * Q K^T [+ mask]) V block of float32 projections of one 3-D input, "
                             "split into heads by a Reshape of constant target, was found; an export's computed "
                             "Reshape targets and Dropout go first with --simplify --target onnxruntime, which "
                             "also fuses")


@_noop_returns_input
def fuse_gelu(model: Model, /, *, check: bool = True) -> Model:
    """Replace each ``x * 0.5 * (1 + erf(x / sqrt(2)))`` (float32, constants exact) by ONNX Runtime's
    ``com.microsoft::Gelu``, or ``BiasGelu`` where x adds a 1-D constant bias to a projection; and each
    ``x * 0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))`` by ``FastGelu`` (the bias its second
    input). The result runs in ONNX Runtime only. Main graph.

    Raises:
        InvalidModelError: The result is invalid.
    """
    return _as_edit(model, ["gelu"], what="fuse_gelu", check=check,
                    hint="no float32 x * 0.5 * (1 + erf(x / sqrt(2))), nor its tanh approximation, was found "
                         "with exactly float32's constants")


@_noop_returns_input
def fuse_skip_layernorm(model: Model, /, *, check: bool = True) -> Model:
    """Replace each ``LayerNormalization(Add(a, b))`` over the last axis, a and b proven of one 3-D shape
    (float32, 1-D constant scale and bias), by ONNX Runtime's ``com.microsoft::SkipLayerNormalization``,
    taking in a constant bias added to a or b just before (the result runs in ONNX Runtime only).
    Main graph.

    Raises:
        InvalidModelError: Shape inference contradicts the model itself, or the result is invalid.
    """
    return _as_edit(model, ["skip_layernorm"], what="fuse_skip_layernorm", check=check,
                    hint="no LayerNormalization over the last axis reads an Add of two float32 3-D tensors of "
                         "one shape")
