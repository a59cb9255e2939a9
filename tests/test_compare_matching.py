"""compare's matching across optimizers: renamed inputs (--map), unmatched counts on each side, fused
and renamed values (onnxsim's BatchNormalization folding, ONNX Runtime's fusions), float vs QDQ."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto
from onnx import helper as oh
from onnx import numpy_helper as nh

import graphkit as gk
from graphkit._compare import compare
from graphkit.cli import main

_RNG = np.random.default_rng(0)
_W = _RNG.standard_normal((8, 3, 3, 3)).astype(np.float32)
_B = _RNG.standard_normal(8).astype(np.float32)
_SCALE = _RNG.uniform(0.5, 1.5, 8).astype(np.float32)
_SHIFT = _RNG.standard_normal(8).astype(np.float32)
_MEAN = _RNG.standard_normal(8).astype(np.float32)
_VAR = _RNG.uniform(0.5, 1.5, 8).astype(np.float32)
_W2 = _RNG.standard_normal((4, 8, 3, 3)).astype(np.float32)


def _conv_bn(*, folded: bool = False, input_name: str = "images") -> onnx.ModelProto:
    """images -> Conv -> c -> BatchNormalization -> b -> Relu -> r -> Conv -> y -> Sigmoid -> out;
    ``folded``: the BatchNormalization folded into the first Conv, which keeps its output name 'c'
    (what onnxsim does)."""
    inits = [nh.from_array(_W2, "W2")]
    conv = oh.make_node("Conv", [input_name, "W", "B"], ["c"], name="conv", pads=[1, 1, 1, 1])
    if folded:
        k = _SCALE / np.sqrt(_VAR + 1e-5)
        inits += [nh.from_array((_W * k[:, None, None, None]).astype(np.float32), "W"),
                  nh.from_array(((_B - _MEAN) * k + _SHIFT).astype(np.float32), "B")]
        nodes = [conv, oh.make_node("Relu", ["c"], ["r"], name="relu")]
    else:
        inits += [nh.from_array(a, n) for a, n in
                  [(_W, "W"), (_B, "B"), (_SCALE, "s"), (_SHIFT, "bb"), (_MEAN, "m"), (_VAR, "v")]]
        nodes = [conv, oh.make_node("BatchNormalization", ["c", "s", "bb", "m", "v"], ["b"], name="bn"),
                 oh.make_node("Relu", ["b"], ["r"], name="relu")]
    nodes += [oh.make_node("Conv", ["r", "W2"], ["y"], name="conv2"), oh.make_node("Sigmoid", ["y"], ["out"], name="sig")]
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info(input_name, TensorProto.FLOAT, [1, 3, 16, 16])],
                          [oh.make_tensor_value_info("out", TensorProto.FLOAT, [1, 4, 14, 14])], inits)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)])


def _model(proto: onnx.ModelProto) -> gk.Model:
    return gk.Model(proto)


# ------------------------------------------------------------------------------------ renamed inputs


def test_renamed_input_compares_with_a_mapping() -> None:
    result = compare(_model(_conv_bn()), _model(_conv_bn(input_name="input")), mapping={"images": "input"})
    assert result.passed and [t.name for t in result.tensors] == ["c", "b", "r", "y", "out"]
    assert all(t.max_abs == 0.0 for t in result.tensors)
    assert result.unmatched == () and result.unmatched_candidate == ()


def test_renamed_input_without_a_mapping_names_the_input_and_the_flag() -> None:
    with pytest.raises(gk.FeedError) as info:
        compare(_model(_conv_bn()), _model(_conv_bn(input_name="input")))
    assert "has input 'input'" in info.value.message and "--map" in (info.value.cli_hint or "") and "mapping=" in (info.value.hint or "")


def test_mapping_an_unknown_input_suggests_the_graph_inputs() -> None:
    with pytest.raises(gk.TensorNotFoundError) as info:
        compare(_model(_conv_bn()), _model(_conv_bn(input_name="input")), mapping={"images": "inputs"})
    assert "'inputs'" in info.value.message and "'input'" in info.value.hint


def test_cli_map_renames_an_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gk.save(_model(_conv_bn()), tmp_path / "a.onnx")
    gk.save(_model(_conv_bn(input_name="input")), tmp_path / "b.onnx")
    (tmp_path / "map.json").write_text(json.dumps({"images": "input"}))
    code = main(["compare", str(tmp_path / "a.onnx"), str(tmp_path / "b.onnx"), "--map", str(tmp_path / "map.json")])
    out = capsys.readouterr().out
    assert code == 0 and "matched 5 tensors; unmatched: 0 of the reference's, 0 of the candidate's" in out
    assert "graph outputs: within tolerance (1 of 1 pass)" in out


# ---------------------------------------------------------------------------------------- unmatched


def _renamed(proto: onnx.ModelProto, names: tuple[str, ...] = ("c", "b", "r", "y")) -> onnx.ModelProto:
    for node in proto.graph.node:  # every intermediate renamed; the output keeps its name
        node.input[:] = [f"x_{n}" if n in names else n for n in node.input]
        node.output[:] = [f"x_{n}" if n in names else n for n in node.output]
    return proto


def test_names_that_do_not_match_are_counted_on_each_side() -> None:
    # folded and renamed: 4 reference tensors against 3, no one-to-one pairing
    result = compare(_model(_conv_bn()), _model(_renamed(_conv_bn(folded=True), ("c", "r", "y"))))
    assert result.passed and [t.name for t in result.tensors] == ["out"] and result.renamed == ()
    assert result.unmatched == ("c", "b", "r", "y") and result.unmatched_candidate == ("x_c", "x_r", "x_y")
    data = result.to_dict()
    assert data["matched"] == 1 and data["renamed"] == []
    assert data["unmatched"] == {"reference": {"count": 4, "names": ["c", "b", "r", "y"]},
                                 "candidate": {"count": 3, "names": ["x_c", "x_r", "x_y"]}}


def test_a_pure_rename_pairs_the_tensors_by_producer_and_order_and_compares_them() -> None:
    result = compare(_model(_conv_bn()), _model(_renamed(_conv_bn())), tolerance=gk.Tolerance(0.0, 0.0))
    assert result.renamed == (("c", "x_c"), ("b", "x_b"), ("r", "x_r"), ("y", "x_y"))
    assert [(t.reference_name, t.name) for t in result.tensors] == [*result.renamed, ("out", "out")]
    assert all(t.passed and t.max_abs == 0 for t in result.tensors)
    assert result.unmatched == () and result.unmatched_candidate == () and result.fusions == ()
    assert result.to_dict()["renamed"][0] == {"reference": "c", "candidate": "x_c"}
    # a producer whose operator changed is no rename: nothing is paired, and nothing compared equal
    changed = _renamed(_conv_bn())
    changed.graph.node[2].op_type = "Sigmoid"  # the Relu
    other = compare(_model(_conv_bn()), _model(changed))
    assert other.renamed == () and other.unmatched == ("c", "b", "r", "y") and not other.passed


def test_cli_says_renamed_not_fused_after_a_rename(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gk.save(_model(_conv_bn()), tmp_path / "a.onnx")
    gk.save(_model(_renamed(_conv_bn())), tmp_path / "b.onnx")
    assert main(["compare", str(tmp_path / "a.onnx"), str(tmp_path / "b.onnx")]) == 0
    out = capsys.readouterr().out
    assert "matched 5 tensors; unmatched: 0 of the reference's, 0 of the candidate's" in out
    assert "renamed: 4 tensors that no name matched, paired by producer operator and execution order " \
           "('c' -> 'x_c', 'b' -> 'x_b', 'r' -> 'x_r', …); compared as pairs" in out
    assert "fused" not in out and "absorbing" not in out


# ------------------------------------------------------------------------------------ fused values


def test_batchnorm_folded_into_conv_is_a_fused_value_not_a_divergence() -> None:
    result = compare(_model(_conv_bn()), _model(_conv_bn(folded=True)))
    assert result.passed and result.first_divergence is None
    conv = result.tensor("c")
    assert not conv.passed and conv.origin == "fused" and conv.max_abs > 1.0
    assert "producer changed" in (conv.reason or "") and "'r'" in (conv.reason or "")
    assert [t.name for t in result.fused] == ["c"] and result.failed == []
    assert result.unmatched == ("b",)
    assert [(f.tensor, f.op_type, f.absorbed) for f in result.fusions] == [("c", "Conv", ("b",))]
    assert result.outputs_passed is True
    data = result.to_dict()
    assert data["passed"] and data["fused"] == ["c"] and data["fusions"][0]["absorbed"] == ["b"]


def test_a_real_divergence_is_not_taken_for_a_fused_value() -> None:
    broken = _conv_bn(folded=True)
    broken.graph.node[1].op_type = "Sigmoid"  # the Relu after the folded Conv
    result = compare(_model(_conv_bn()), _model(broken))
    assert not result.passed and result.first_divergence is not None
    assert result.first_divergence.tensor == "c" and result.tensor("c").origin != "fused"


def test_the_same_model_on_two_backends_compares_what_onnxruntime_fused_as_it_runs_it() -> None:
    result = compare(_model(_conv_bn()))
    assert result.passed and result.fused == []  # (no tensor kept a name with a new meaning)
    # the optimized model never computes 'c' and 'b' (the Conv, BatchNormalization and Relu run as
    # one node): exposing them would have stopped the fusion, so they are reported, not compared
    assert [t.name for t in result.tensors] == ["r", "out"]
    assert [(f.tensor, f.absorbed, f.group) for f in result.fusions] == [
        ("r", ("c", "b"), ("conv", "bn", "relu")), ("out", ("y",), ("conv2", "sig"))]
    assert all(f.node and f.op_type in ("FusedConv", "Conv") for f in result.fusions)


def _planted_conv_bn() -> onnx.ModelProto:
    """_conv_bn with a BatchNormalization whose mean cancels the Conv's large bias and whose variance
    is tiny: unfused, the Conv's output (about 1e4, float32) loses its low digits before the
    normalization multiplies them by about 300; folded into the Conv's weights, it does not."""
    proto = _conv_bn()
    values = {"B": np.full(8, 1e4, np.float32), "m": np.full(8, 1e4, np.float32) + _MEAN,
              "v": np.full(8, 1e-6, np.float32)}
    for k, tensor in enumerate(proto.graph.initializer):
        if tensor.name in values:
            proto.graph.initializer[k].CopyFrom(nh.from_array(values[tensor.name], tensor.name))
    return proto


def test_a_divergence_inside_an_onnxruntime_fusion_names_the_fused_group() -> None:
    model = _model(_planted_conv_bn())
    result = compare(model)
    assert not result.passed and result.outputs_passed is False
    div = result.first_divergence
    assert div is not None and div.tensor == "r" and div.fragment == ("conv", "bn", "relu")
    assert div.culprit == "conv, bn, relu" and div.local is True
    fusion = result.fusions[0]
    assert f"ONNX Runtime fused these nodes into {fusion.op_type} {fusion.node!r}" in div.culprit_reason
    # the plain runs agree with it: the whole model differs with and without optimizations
    feeds = gk.make_feeds(model)
    full = gk.run(model, feeds)["out"]
    plain = gk.run(model, feeds, opt_level="disable")["out"]
    assert float(np.abs(full - plain).max()) == pytest.approx(result.tensor("out").max_abs, rel=1e-6)


def test_onnxsim_copy_compares_passed_with_its_fused_tensor() -> None:
    onnxsim = pytest.importorskip("onnxsim")
    simplified, ok = onnxsim.simplify(_conv_bn())
    assert ok
    result = compare(_model(_conv_bn()), _model(simplified))
    assert result.passed and [t.name for t in result.fused] == ["c"]
    assert [f.absorbed for f in result.fusions] == [("b",)]


def test_onnxruntime_optimized_copy_compares_passed_with_its_fusions(tmp_path: Path) -> None:
    import onnxruntime as ort

    gk.save(_model(_conv_bn()), tmp_path / "a.onnx")
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(tmp_path / "opt.onnx")
    ort.InferenceSession(str(tmp_path / "a.onnx"), options, providers=["CPUExecutionProvider"])
    optimized = gk.load(tmp_path / "opt.onnx")
    assert any(n.op_type == "FusedConv" for n in optimized.graph.node)
    result = compare(gk.load(tmp_path / "a.onnx"), optimized)
    assert result.passed and [t.name for t in result.tensors] == ["r", "out"]
    assert [(f.tensor, f.op_type, f.absorbed) for f in result.fusions] == [
        ("r", "FusedConv", ("c", "b")), ("out", "FusedConv", ("y",))]


def test_cli_reports_fusions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gk.save(_model(_conv_bn()), tmp_path / "a.onnx")
    gk.save(_model(_conv_bn(folded=True)), tmp_path / "b.onnx")
    assert main(["compare", str(tmp_path / "a.onnx"), str(tmp_path / "b.onnx")]) == 0
    out = capsys.readouterr().out
    assert "FAIL fused" in out and "fused or renamed value: 'c' (Conv 'conv'), absorbing the reference's 'b'" in out
    assert "PASSED: 4 tensors within atol 1e-05, rtol 0.001 (1 fused or renamed)" in out


# -------------------------------------------------------------------------------------- float vs QDQ


def test_float_against_qdq_matches_through_quantize_dequantize_pairs(tmp_path: Path) -> None:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.items = iter([{"images": np.random.default_rng(i).standard_normal((1, 3, 16, 16)).astype(np.float32)}
                               for i in range(4)])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.items, None)

    gk.save(_model(_conv_bn()), tmp_path / "a.onnx")
    quantize_static(str(tmp_path / "a.onnx"), str(tmp_path / "q.onnx"), Reader(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
    result = compare(gk.load(tmp_path / "a.onnx"), gk.load(tmp_path / "q.onnx"), tolerance=gk.Tolerance(0.5, 0.5))
    # activations after their QuantizeLinear/DequantizeLinear pair, against the float tensor
    dq = result.tensor("c_DequantizeLinear_Output")
    assert dq.reference_name == "c" and dq.op_type == "DequantizeLinear" and 0 < dq.max_abs < 0.5
    assert result.tensor("images_DequantizeLinear_Output").reference_name == "images"
    # weights through their DequantizeLinear, against the float weight
    weight = result.tensor("W_DequantizeLinear_Output")
    assert weight.reference_name == "W" and 0 < weight.max_abs < 0.05 and weight.cosine > 0.999
    assert result.tensor("W2_DequantizeLinear_Output").reference_name == "W2"
    assert result.tensor("out").passed and result.outputs_passed is True
