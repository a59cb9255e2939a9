"""Where one side of a comparison runs a piece of a model: ONNX Runtime or onnx's ReferenceEvaluator.

ONNX Runtime runs with the side's session settings (provider, custom-op libraries, Python
operators). The ReferenceEvaluator runs with graphkit.reference_ops' spec-faithful kernels and the
Python operators as evaluator operators, with the local functions listed callees first (the
evaluator builds each function from the ones listed before it, so a model listing a caller before
its callee, which ONNX allows, fails there otherwise). A node the evaluator has no kernel for (a
contrib or custom operator, or a node whose body or function uses one) runs on ONNX Runtime instead:
the piece is cut into runs of nodes the evaluator can run and the nodes it cannot, and each
fallback is noted, so one missing kernel does not stop the whole comparison.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import onnx

from graphkit._custom_ops import CustomOp, reference_op
from graphkit._graph import GraphIndex
from graphkit._io import inline_proto
from graphkit._model import Model, has_external_data
from graphkit._ort import Settings, provider_name
from graphkit._run import as_value, run_fragment, settings
from graphkit._submodel import submodel
from graphkit.errors import RuntimeFailure

__all__ = ["BACKENDS", "check_provider", "execute", "functions_in_call_order", "missing_kernels", "side_settings"]

#: Backends a model side can run on (see ``graphkit.Backend``).
BACKENDS: dict[str, str] = {
    "ort": "ONNX Runtime (all optimizations)",
    "ort-noopt": "ONNX Runtime (no optimizations)",
    "reference": "onnx ReferenceEvaluator (spec fixes: graphkit._reference_ops)",
}


def check_provider(provider: str) -> str:
    """ONNX Runtime's name of ``provider``.

    Raises:
        UsageError: This ONNX Runtime has no such provider; the message lists the ones it has.
    """
    return provider_name(provider)


def side_settings(provider: Any, reference_provider: Any, candidate_provider: Any, provider_options: Any,
                  custom_ops: Any, python_ops: Any) -> tuple[Settings, Settings]:
    """The reference and candidate sides' session settings from compare's and reduce's keywords,
    checked: ``provider`` for both unless ``reference_provider``/``candidate_provider`` says otherwise.

    Raises:
        ArgumentTypeError, UsageError: An argument of the wrong type or value, naming its keyword; a
            provider this ONNX Runtime lacks (the message lists the ones it has).
    """
    common = settings(provider=provider, provider_options=provider_options, custom_ops=custom_ops,
                      python_ops=python_ops)
    sides = []
    for name, chosen in (("reference_", reference_provider), ("candidate_", candidate_provider)):
        if chosen is None:
            sides.append(common)
        else:
            side = settings(provider=chosen, prefix=name)
            sides.append(replace(common, provider=side.provider))
    for side in sides:
        check_provider(side.provider)
    return sides[0], sides[1]


def execute(model: Model, feeds: Mapping[str, Any], outputs: Sequence[str], backend: str, what: str,
            config: Settings | None = None, notes: list[str] | None = None) -> dict[str, Any]:
    """Run ``model`` on ``backend`` ("ort", "ort-noopt" or "reference") and return ``outputs``.

    Args:
        config: The side's ONNX Runtime settings (also used for the reference backend's fallbacks).
        notes: Where a fallback to ONNX Runtime is noted (once per operator).

    Raises:
        RuntimeFailure: The backend fails; the message starts with ``what``.
    """
    config = config or Settings()
    if backend == "reference":
        return _reference(model, feeds, outputs, what, config, notes if notes is not None else [])
    opt = "disable" if backend == "ort-noopt" else "all"
    try:
        return run_fragment(model, feeds, outputs, opt_level=opt, config=config)
    except RuntimeFailure as err:
        raise RuntimeFailure(f"{what}: {err.message}", hint=err.hint, cli_hint=err.cli_hint) from err


def _reference(model: Model, feeds: Mapping[str, Any], outputs: Sequence[str], what: str, config: Settings,
               notes: list[str]) -> dict[str, Any]:
    proto = inline_proto(model) if has_external_data(model.lazy_proto) else model.lazy_proto
    proto = functions_in_call_order(proto)
    missing = missing_kernels(proto, config.python_ops)
    if not missing:
        try:
            return _evaluate(proto, feeds, outputs, what, config.python_ops)
        except _EvaluatorFailure:
            return _mixed(model.derive(proto), feeds, outputs, set(), what, config, notes, per_node=True)
    for node in (proto.graph.node[i] for i in sorted(missing)):
        note = (f"onnx's ReferenceEvaluator has no kernel for {_op_label(node)} (node {node.name or node.op_type!r}): "
                "such nodes ran on ONNX Runtime (no optimizations)")
        if not any(n.startswith(f"onnx's ReferenceEvaluator has no kernel for {_op_label(node)} ") for n in notes):
            notes.append(note)
    return _mixed(model.derive(proto), feeds, outputs, set(missing), what, config, notes)


def _reference_ops() -> Any:
    """graphkit._reference_ops, imported when a side runs on the evaluator: it imports onnx.reference
    (+13 MB resident), which a comparison on ONNX Runtime alone never needs."""
    from graphkit import _reference_ops

    return _reference_ops


class _EvaluatorFailure(RuntimeFailure):
    """onnx's ReferenceEvaluator raised (not a Python operator of the user's)."""


def _op_label(node: onnx.NodeProto) -> str:
    return f"{node.domain or 'ai.onnx'}::{node.op_type}"


def _evaluate(proto: onnx.ModelProto, feeds: Mapping[str, Any], outputs: Sequence[str], what: str,
              python_ops: Sequence[CustomOp]) -> dict[str, Any]:
    from onnx.reference import ReferenceEvaluator

    reference_ops = _reference_ops()
    try:
        evaluator = ReferenceEvaluator(proto, new_ops=[*reference_ops.OVERRIDES, *map(reference_op, python_ops)])
        values = evaluator.run(list(outputs), dict(feeds))
    except RuntimeFailure as err:  # a Python operator failed: its message names it
        raise RuntimeFailure(f"{what}: {err.message}", hint=err.hint, cli_hint=err.cli_hint) from err
    except Exception as err:  # the evaluator raises whatever its kernels raise
        text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise _EvaluatorFailure(
            f"{what}: onnx's ReferenceEvaluator failed: {text}",
            hint="compare with backend='ort-noopt' to leave the evaluator out",
            cli_hint="compare with --backend ort-noopt to leave the evaluator out",
        ) from err
    return {n: as_value(v) for n, v in zip(outputs, values)}


def _mixed(model: Model, feeds: Mapping[str, Any], outputs: Sequence[str], missing: set[int], what: str,
           config: Settings, notes: list[str], *, per_node: bool = False) -> dict[str, Any]:
    """Run consecutive nodes the evaluator can run on it, and every other node on ONNX Runtime.

    ``per_node``: every node on its own, so that a node the evaluator fails on (after it failed on
    the whole piece) is found, noted and run on ONNX Runtime instead."""
    proto = model.lazy_proto
    index = GraphIndex(proto.graph)
    order = index.topological_order()
    groups: list[tuple[bool, list[int]]] = []
    for i in order:
        fallback = i in missing
        if groups and groups[-1][0] == fallback and not fallback and not per_node:
            groups[-1][1].append(i)
        else:
            groups.append((fallback, [i]))
    last_use: dict[str, int] = {name: len(groups) for name in outputs}
    for g, (_, nodes) in enumerate(groups):
        for i in nodes:
            for name in index.node_reads[i]:
                last_use[name] = max(last_use.get(name, -1), g)
    env: dict[str, Any] = dict(feeds)
    for g, (fallback, nodes) in enumerate(groups):
        produced = [o for i in nodes for o in proto.graph.node[i].output if o]
        wanted = [o for o in produced if last_use.get(o, -1) > g]
        if not wanted:
            continue
        reads = list(dict.fromkeys(r for i in nodes for r in index.node_reads[i] if r not in produced))
        inputs = {r: env[r] for r in reads if r in env}
        piece = _piece(model, index, nodes, inputs, wanted)
        if fallback:
            values = execute(piece, inputs, wanted, "ort-noopt", what, config)
        else:
            try:
                values = _evaluate(piece.lazy_proto, inputs, wanted, what, config.python_ops)
            except _EvaluatorFailure as err:
                if len(nodes) > 1:
                    values = _mixed(piece, inputs, wanted, set(), what, config, notes, per_node=True)
                else:
                    values = _node_on_ort(proto.graph.node[nodes[0]], err, piece, inputs, wanted, what, config, notes)
        env.update(values)
    return {n: env[n] for n in outputs}


def _node_on_ort(node: onnx.NodeProto, failure: RuntimeFailure, piece: Model, inputs: Mapping[str, Any],
                 wanted: Sequence[str], what: str, config: Settings, notes: list[str]) -> dict[str, Any]:
    """Run one node the evaluator failed on with ONNX Runtime instead, and note it; when ONNX Runtime
    fails too, raise naming the node and both errors."""
    label = f"node {node.name or node.op_type!r} ({_op_label(node)})"
    reason = failure.message.split("ReferenceEvaluator failed: ", 1)[-1]
    try:
        values = execute(piece, inputs, wanted, "ort-noopt", what, config)
    except RuntimeFailure as err:
        raise RuntimeFailure(f"{what}: {label} fails on onnx's ReferenceEvaluator ({reason}) and on ONNX Runtime "
                             f"({err.message.split(': ', 1)[-1]})",
                             hint="check the node's inputs (shapes, values); the model may be invalid here") from err
    notes.append(f"onnx's ReferenceEvaluator failed on {label}: {reason}; it ran on ONNX Runtime (no optimizations)")
    return values


def _piece(model: Model, index: GraphIndex, nodes: Sequence[int], inputs: Mapping[str, Any],
           outputs: Sequence[str]) -> Model:
    reads: set[str] = set()
    for i in nodes:
        reads.update(index.node_reads[i])
    proto = submodel(
        model.lazy_proto, index, nodes,
        inputs=[_value_info(n, v) for n, v in inputs.items()],
        outputs=[onnx.ValueInfoProto(name=n) for n in outputs],
        initializers={n for n in reads if n in index.initializers},
        graph_name=f"{model.lazy_proto.graph.name}_piece",
    )
    return model.derive(proto)


def _value_info(name: str, value: Any) -> onnx.ValueInfoProto:
    array = np.asarray(value)
    elem = onnx.TensorProto.STRING if array.dtype.kind in "OUS" else onnx.helper.np_dtype_to_tensor_dtype(array.dtype)
    return onnx.helper.make_tensor_value_info(name, elem, list(array.shape))


# ----------------------------------------------------------------------------------- kernels


def missing_kernels(proto: onnx.ModelProto, python_ops: Sequence[CustomOp] = ()) -> list[int]:
    """Positions of the main graph's nodes the evaluator cannot run: no kernel for the node, or for a
    node of its bodies or of the local function it calls (at any depth)."""
    opsets = {o.domain or "": o.version for o in proto.opset_import}
    functions = {(f.domain, f.name): f for f in proto.functions}
    extra = {op.key for op in python_ops} | {(getattr(o, "op_domain", ""), o.__name__) for o in _reference_ops().OVERRIDES}
    known: dict[tuple[str, str], bool] = {}

    def runnable(node: onnx.NodeProto, seen: frozenset[tuple[str, str]]) -> bool:
        key = ("" if node.domain == "ai.onnx" else node.domain, node.op_type)
        if key in extra:
            ok = True
        elif key in functions:
            ok = key not in seen and all(runnable(n, seen | {key}) for n in functions[key].node)
        else:
            if key not in known:
                known[key] = _has_kernel(key[0], key[1], opsets.get(key[0]))
            ok = known[key]
        for attr in node.attribute:
            bodies = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
            ok = ok and all(runnable(n, seen) for body in bodies for n in body.node)
        return ok

    return [i for i, node in enumerate(proto.graph.node) if not runnable(node, frozenset())]


def _has_kernel(domain: str, op_type: str, version: int | None) -> bool:
    from onnx.reference.ops import aionnx_preview_training, aionnxml, experimental, load_op

    loaders: dict[str, Any] = {"": load_op, "ai.onnx.ml": aionnxml.load_op, "experimental": experimental.load_op,
                               "ai.onnx.preview.training": aionnx_preview_training.load_op}
    if domain not in loaders:
        return False
    try:
        loaders[domain](domain, op_type, version)
    except Exception:  # each loader raises its own kind of error for an unknown operator
        return False
    return True


def functions_in_call_order(proto: onnx.ModelProto) -> onnx.ModelProto:
    """``proto`` itself when each local function comes after those it calls; else a copy so ordered."""
    by_key = {(f.domain, f.name): k for k, f in enumerate(proto.functions)}
    order: list[int] = []
    state: dict[int, int] = {}  # 1: being visited, 2: placed

    def visit(k: int) -> None:
        if state.get(k):
            return
        state[k] = 1
        for node in _function_nodes(proto.functions[k]):
            callee = by_key.get((node.domain, node.op_type))
            if callee is not None and state.get(callee) != 1:
                visit(callee)
        state[k] = 2
        order.append(k)

    for k in range(len(proto.functions)):
        visit(k)
    if order == list(range(len(proto.functions))):
        return proto
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    del copy.functions[:]
    copy.functions.extend(proto.functions[k] for k in order)
    return copy


def _function_nodes(function: onnx.FunctionProto) -> list[onnx.NodeProto]:
    nodes: list[onnx.NodeProto] = []
    stack = [list(function.node)]
    while stack:
        for node in stack.pop():
            nodes.append(node)
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    stack.append(list(attr.g.node))
                elif attr.type == onnx.AttributeProto.GRAPHS:
                    stack.extend(list(g.node) for g in attr.graphs)
    return nodes
