"""Where a compared side runs a piece: the reference evaluator's local-function order, its fallback
to ONNX Runtime for operators it has no kernel for, and the side's session settings."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import graphkit as gk
from graphkit import _backends
from graphkit._ort import Settings


def _nested_functions(callee_first: bool) -> gk.Model:
    """y = outer(x) where outer(t) = inner(t) + 1 and inner(t) = 2·t; the functions listed in either order."""
    inner = helper.make_function("local", "inner", ["t"], ["u"], [
        helper.make_node("Constant", [], ["two"], value=helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])),
        helper.make_node("Mul", ["t", "two"], ["u"])], [helper.make_opsetid("", 17)])
    outer = helper.make_function("local", "outer", ["t"], ["v"], [
        helper.make_node("inner", ["t"], ["w"], domain="local"),
        helper.make_node("Constant", [], ["one"], value=helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])),
        helper.make_node("Add", ["w", "one"], ["v"])], [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])
    graph = helper.make_graph([helper.make_node("outer", ["x"], ["y"], domain="local", name="/outer")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
                              functions=[inner, outer] if callee_first else [outer, inner])
    return gk.Model(proto)


def test_reference_backend_runs_nested_functions_listed_caller_first() -> None:
    model = _nested_functions(callee_first=False)
    result = gk.compare(model, backend="reference")
    assert result.passed and result.tensor("y").max_abs == 0.0
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = _backends.execute(model, {"x": x}, ["y"], "reference", "test")["y"]
    np.testing.assert_array_equal(got, 2 * x + 1)
    fixed = _backends.functions_in_call_order(model.proto)
    assert [f.name for f in fixed.functions] == ["inner", "outer"]
    ordered = _nested_functions(callee_first=True).proto
    assert _backends.functions_in_call_order(ordered) is ordered


def _with_contrib_gelu() -> gk.Model:
    """x -> Relu -> com.microsoft::Gelu -> Neg: onnx's evaluator has no kernel for the Gelu."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="/relu"),
             helper.make_node("Gelu", ["r"], ["g"], name="/gelu", domain="com.microsoft"),
             helper.make_node("Neg", ["g"], ["y"], name="/neg")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 5])])
    return gk.Model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                            helper.make_opsetid("com.microsoft", 1)]))


def test_reference_backend_falls_back_to_onnx_runtime_for_an_op_it_lacks_and_says_so() -> None:
    model = _with_contrib_gelu()
    assert _backends.missing_kernels(model.proto) == [1]
    result = gk.compare(model, backend="reference", feed_options=gk.FeedOptions(seed=3))
    assert result.passed and {t.name for t in result.tensors} == {"r", "g", "y"}
    (note,) = [n for n in result.notes if "no kernel" in n]
    assert "com.microsoft::Gelu" in note and "'/gelu'" in note and "ONNX Runtime" in note
    x = np.linspace(-2, 2, 20, dtype=np.float32).reshape(4, 5)
    notes: list[str] = []
    y = _backends.execute(model, {"x": x}, ["y"], "reference", "test", Settings(), notes)["y"]
    relu = np.maximum(x, 0)
    gelu = 0.5 * relu * (1 + np.vectorize(__import__("math").erf)(relu / np.sqrt(2)))
    np.testing.assert_allclose(y, -gelu, rtol=1e-5, atol=1e-6)
    assert len(notes) == 1


def test_a_reference_failure_names_what_was_running() -> None:
    node = helper.make_node("Reshape", ["x", "shape"], ["y"], name="/reshape")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6]),
                                            helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = gk.Model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    with pytest.raises(gk.RuntimeFailure) as err:
        _backends.execute(model, {"x": np.ones(6, np.float32), "shape": np.array([4, 4])}, ["y"], "reference",
                          "running the piece")
    message = err.value.message
    assert message.startswith("running the piece: node '/reshape' (ai.onnx::Reshape) fails on onnx's ReferenceEvaluator")
    assert "and on ONNX Runtime" in message and err.value.hint


def test_a_node_the_evaluator_fails_on_runs_on_onnx_runtime_and_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    from onnx.reference.op_run import OpRun

    from graphkit import _reference_ops

    class Neg(OpRun):
        op_domain = ""

        def _run(self, x: np.ndarray) -> tuple[np.ndarray]:
            raise ValueError("this kernel is broken")

    monkeypatch.setattr(_reference_ops, "OVERRIDES", [*_reference_ops.OVERRIDES, Neg])
    model = _with_contrib_gelu()
    notes: list[str] = []
    x = np.linspace(-2, 2, 20, dtype=np.float32).reshape(4, 5)
    y = _backends.execute(model, {"x": x}, ["y"], "reference", "test", Settings(), notes)["y"]
    want = gk.run(model, {"x": x}, opt_level="disable")["y"]
    np.testing.assert_allclose(y, want, rtol=1e-6)
    (failed,) = [n for n in notes if "failed on node" in n]
    assert "'/neg'" in failed and "ai.onnx::Neg" in failed and "this kernel is broken" in failed
    plain = gk.parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[3] x) => (float[3] y) {
            a = Abs(x)
            y = Neg(a)
        }
    """)
    result = gk.compare(plain, backend="reference")
    assert result.passed and any("failed on node" in n and "Neg" in n for n in result.notes)
