"""compare on what real models showed: capture fragments typed as the model declares them (an If whose
untaken branch only type-checks with symbolic dims), dtype-dependent tolerances, the graph outputs'
verdict, and a culprit for every failing first divergence."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import fixture
from onnx import TensorProto
from onnx import helper as oh
from onnx import numpy_helper as nh

import graphkit as gk
from graphkit._compare import compare
from graphkit.cli import main


def _if_model() -> gk.Model:
    """x[N, 3] -> Relu -> y; If N == 1: Squeeze(y, 0) else ReduceSum(y, 0): with N = 2 the then-branch
    does not type-check at the concrete shape [2, 3], only at the declared [N, 3]."""
    then = oh.make_graph([oh.make_node("Squeeze", ["y", "zero"], ["o1"])], "then", [],
                         [oh.make_tensor_value_info("o1", TensorProto.FLOAT, None)])
    other = oh.make_graph([oh.make_node("ReduceSum", ["y", "zero"], ["o2"], keepdims=0)], "else", [],
                          [oh.make_tensor_value_info("o2", TensorProto.FLOAT, None)])
    nodes = [oh.make_node("Relu", ["x"], ["y"], name="relu"), oh.make_node("Shape", ["y"], ["s"], name="shape"),
             oh.make_node("Gather", ["s", "zero_s"], ["n"], name="g"), oh.make_node("Equal", ["n", "one"], ["c"], name="eq"),
             oh.make_node("If", ["c"], ["z"], name="if", then_branch=then, else_branch=other),
             oh.make_node("Neg", ["z"], ["out"], name="neg")]
    inits = [nh.from_array(np.array([0], np.int64), "zero"), nh.from_array(np.array(0, np.int64), "zero_s"),
             nh.from_array(np.array(1, np.int64), "one")]
    graph = oh.make_graph(nodes, "ifg", [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
                          [oh.make_tensor_value_info("out", TensorProto.FLOAT, None)], inits)
    return gk.Model(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)]))


def test_an_if_whose_untaken_branch_needs_symbolic_dims_compares() -> None:
    options = gk.FeedOptions(shapes={"x": [2, 3]})
    outputs = gk.run(_if_model(), feed_options=options)
    result = compare(_if_model(), feed_options=options, fragment_bytes=1)  # (one node per fragment at most)
    assert result.passed and result.outputs_passed is True
    assert [t.name for t in result.tensors][-1] == "out" and result.tensor("out").shape == outputs["out"].shape


def _relu(dtype: int) -> gk.Model:
    graph = oh.make_graph([oh.make_node("Relu", ["x"], ["y"], name="relu")], "r",
                          [oh.make_tensor_value_info("x", dtype, [4, 8])], [oh.make_tensor_value_info("y", dtype, [4, 8])])
    return gk.Model(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)]))


def test_float16_tensors_are_held_to_the_float16_floor() -> None:
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float16)
    off = {"x": x, "y": (np.maximum(x, 0) + np.float16(3e-3)).astype(np.float16)}  # 3 units in float16's last place
    result = compare(_relu(TensorProto.FLOAT16), reference=off)
    assert result.passed and result.tensor("y").tolerance == gk.Tolerance(1e-2, 1e-2)
    strict = compare(_relu(TensorProto.FLOAT16), reference=off, tolerances={"y": gk.Tolerance(1e-5, 1e-3)})
    assert not strict.passed  # a tensor's own tolerance is kept as given
    x32 = x.astype(np.float32)
    float32 = compare(_relu(TensorProto.FLOAT), reference={"x": x32, "y": np.maximum(x32, 0) + 3e-3})
    assert not float32.passed and float32.tensor("y").tolerance == gk.Tolerance()


def _scaled(factor: float) -> gk.Model:
    """x -> Mul(x, factor) -> a; d = a - x (cancels to 0 when factor is 1); b = d * 1e4; out = -b."""
    graph = oh.make_graph(
        [oh.make_node("Mul", ["x", "f"], ["a"], name="scale"), oh.make_node("Sub", ["a", "x"], ["d"], name="cancel"),
         oh.make_node("Mul", ["d", "big"], ["b"], name="amplify"), oh.make_node("Neg", ["b"], ["out"], name="neg")], "s",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [16])], [oh.make_tensor_value_info("out", TensorProto.FLOAT, [16])],
        [nh.from_array(np.array(factor, np.float32), "f"), nh.from_array(np.array(1e4, np.float32), "big")])
    return gk.Model(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)]))


def test_an_amplifying_node_is_the_culprit_of_an_inherited_divergence() -> None:
    result = compare(_scaled(1.0), _scaled(1.0 + 2e-6), feed_options=gk.FeedOptions(ranges={"x": (1, 2)}))
    assert result.tensor("a").passed and result.tensor("d").passed and not result.tensor("b").passed
    div = result.first_divergence
    assert div is not None and div.node == "amplify" and div.local is False
    assert div.culprit == "amplify" and "inputs are within tolerance" in div.culprit_reason
    assert "amplifies" in div.culprit_reason and result.outputs_passed is False


def test_a_local_divergence_is_its_own_culprit_and_the_cli_says_so(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    edited = tmp_path / "edited.onnx"
    gk.save(gk.set_op_type(gk.load(fixture("whole_model.onnx")), "/Add", "Sub"), edited)
    result = compare(gk.load(fixture("whole_model.onnx")), gk.load(edited))
    div = result.first_divergence
    assert div is not None and div.culprit == "/Add" and "still diverges" in div.culprit_reason
    assert result.to_dict()["first_divergence"]["culprit"] == "/Add" and result.to_dict()["outputs_passed"] is False
    assert main(["compare", str(fixture("whole_model.onnx")), str(edited)]) == 1
    out = capsys.readouterr().out
    assert "culprit: '/Add': re-run on the reference side's inputs it still diverges" in out
    assert "graph outputs: OUT OF TOLERANCE (0 of 1 pass)" in out
