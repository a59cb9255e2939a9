"""compare: per-tensor figures, first divergence (local vs inherited), markers, bounded capture."""

from __future__ import annotations

import importlib
import json
import math
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import LIGHT, fixture
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import numpy_helper

import graphkit as gk
from graphkit import _reference_ops as reference_ops
from graphkit._compare import Tolerance, compare, markers, tensor_figures
from graphkit._run import make_feeds
from graphkit._run import run as ort_run


def _light(name: str) -> tuple[gk.Model, dict[str, np.ndarray]]:
    """A light model with the inputs onnx's backend runner feeds it (arange / n)."""
    model = gk.load(LIGHT / f"light_{name}.onnx")
    inits = {t.name for t in model.graph.initializer}
    feeds = {}
    for value in model.graph.input:
        if value.name in inits:
            continue
        shape = [d.dim_value or 1 for d in value.type.tensor_type.shape.dim]
        n = int(np.prod(shape))
        feeds[value.name] = (np.arange(n).reshape(shape) / n).astype(np.float32)
    return model, feeds


def _with_weight(model: gk.Model, name: str, change) -> gk.Model:
    copy = model.copy()
    for tensor in copy.graph.initializer:
        if tensor.name == name:
            tensor.CopyFrom(numpy_helper.from_array(change(numpy_helper.to_array(tensor)), name))
    return copy


# ------------------------------------------------------------------------------------------ figures


def test_figures_by_hand() -> None:
    c = np.array([1.0, 2.0, 3.0, 0.5], dtype=np.float32)
    r = np.array([1.0, 2.5, 3.0, 0.0], dtype=np.float32)
    f = tensor_figures(c, r, Tolerance(atol=0.1, rtol=0.1))
    assert f["max_abs"] == pytest.approx(0.5)
    assert f["max_rel"] == math.inf  # 0.5 against a reference of 0
    assert f["mean_abs"] == pytest.approx(0.25)
    assert f["mse"] == pytest.approx(0.125)
    assert f["cosine"] == pytest.approx(15 / math.sqrt(14.25 * 16.25))
    assert f["out_of_tolerance"] == pytest.approx(0.5)
    assert f["needed_atol"] == pytest.approx(0.5)
    assert f["needed_rtol"] == math.inf
    assert not f["passed"]
    assert tensor_figures(c, r, Tolerance(atol=0.5, rtol=0.1))["passed"]


def test_figures_nan_and_inf() -> None:
    same = tensor_figures(np.array([np.nan, np.inf, 1.0]), np.array([np.nan, np.inf, 1.0]), Tolerance())
    assert same["passed"] and same["nan"] == (1, 1) and same["inf"] == (1, 1) and same["max_abs"] == 0.0
    differ = tensor_figures(np.array([np.nan, 1.0]), np.array([0.0, 1.0]), Tolerance())
    assert not differ["passed"] and differ["out_of_tolerance"] == 0.5 and differ["nan"] == (1, 0)
    signs = tensor_figures(np.array([np.inf]), np.array([-np.inf]), Tolerance())
    assert not signs["passed"]
    # an Inf against a number is an unbounded error, not the finite pairs' 0 (no tolerance admits it)
    overflow = tensor_figures(np.array([np.inf, 2.0], np.float32), np.array([3e38, 2.0], np.float32), Tolerance())
    assert overflow["max_abs"] == overflow["max_rel"] == overflow["needed_atol"] == overflow["needed_rtol"] == math.inf
    assert overflow["mean_abs"] == 0.0 and overflow["mse"] == 0.0 and overflow["inf"] == (1, 0)


def test_figures_of_integers_and_booleans() -> None:
    assert tensor_figures(np.array([1, 2, 3]), np.array([1, 2, 4]), Tolerance(0, 0))["max_abs"] == 1.0
    assert tensor_figures(np.array([True, False]), np.array([True, False]), Tolerance(0, 0))["passed"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(-1e3, 1e3), st.floats(-1e3, 1e3)), min_size=1, max_size=40),
       st.floats(0, 1e-2))
def test_needed_tolerances_are_the_smallest_that_pass(pairs, rtol) -> None:
    c = np.array([p[0] for p in pairs])
    r = np.array([p[1] for p in pairs])
    f = tensor_figures(c, r, Tolerance(atol=1e-6, rtol=rtol))
    assert f["passed"] == bool(np.all(np.abs(c - r) <= 1e-6 + rtol * np.abs(r)))
    assert tensor_figures(c, r, Tolerance(atol=f["needed_atol"] * (1 + 1e-9) + 1e-300, rtol=rtol))["passed"]
    if f["needed_atol"] > 1e-9:
        assert not tensor_figures(c, r, Tolerance(atol=f["needed_atol"] * 0.99, rtol=rtol))["passed"]
    if math.isfinite(f["needed_rtol"]):
        assert tensor_figures(c, r, Tolerance(atol=1e-6, rtol=f["needed_rtol"] * (1 + 1e-9) + 1e-300))["passed"]


def test_chunked_figures_equal_one_shot(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(0)
    c, r = rng.standard_normal(10_000), rng.standard_normal(10_000)
    whole = tensor_figures(c, r, Tolerance())
    monkeypatch.setattr(importlib.import_module("graphkit._compare"), "_CHUNK", 999)
    chunked = tensor_figures(c, r, Tolerance())
    for key in ("max_abs", "max_rel", "mean_abs", "mse", "cosine", "out_of_tolerance", "needed_atol"):
        assert chunked[key] == pytest.approx(whole[key], rel=1e-12)
    assert whole["mse"] == pytest.approx(float(np.mean((c - r) ** 2)))
    assert whole["cosine"] == pytest.approx(float(c @ r / np.linalg.norm(c) / np.linalg.norm(r)))


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64, np.bool_])
def test_figures_of_equal_chunks_match_the_general_path(monkeypatch: pytest.MonkeyPatch, dtype: type) -> None:
    rng = np.random.default_rng(1)
    r = (rng.standard_normal(5_000) * 4).astype(dtype)
    c = r.copy()
    c[4_100:4_200] = (rng.standard_normal(100) * 4).astype(dtype)  # chunks 0-3 equal, chunk 4 not
    c[4_900] = r[4_900] = np.inf if np.dtype(dtype).kind == "f" else r[4_900]
    module = importlib.import_module("graphkit._compare")
    monkeypatch.setattr(module, "_CHUNK", 1_000)
    for a, b in ((c, r), (r, r), (r[:0], r[:0])):
        fast = tensor_figures(a, b, Tolerance())
        with monkeypatch.context() as m:
            m.setattr(module._Accumulator, "_add_equal", lambda self, c_raw, r_raw: False)
            general = tensor_figures(a, b, Tolerance())
        assert fast.keys() == general.keys()
        for key, value in general.items():
            assert fast[key] == (pytest.approx(value, rel=1e-12) if isinstance(value, float) else value), key


# ------------------------------------------------------------------------------------- two backends


def test_one_model_ort_against_ort_without_optimizations(whole_model: gk.Model) -> None:
    result = compare(whole_model)
    assert result.passed and result.first_divergence is None
    assert "no optimizations" in result.reference and "all optimizations" in result.candidate
    names = [t.name for t in result.tensors]
    assert names[0] == "/convs1/convs1.0/Conv_output_0" and names[-1] == "output" and len(names) == 9
    assert names.index("/Add_output_0") > names.index("/convs3/convs3.0/Conv_output_0")  # topological order
    # ONNX Runtime fuses the Add into the Conv before it, and the Conv of the other branch runs in
    # its blocked layout: the two tensors the optimized model never computes are not compared
    [fusion] = result.fusions
    assert fusion.tensor == "/Add_output_0"
    assert fusion.absorbed == ("/convs2/convs2.1/Conv_output_0", "/convs3/convs3.1/Conv_output_0")
    assert fusion.group == ("/convs2/convs2.1/Conv", "/convs3/convs3.1/Conv", "/Add")
    assert len(names) + len(fusion.absorbed) == len(result.unmatched_candidate) + 11


def test_reference_evaluator_figures_match_numpy(whole_model: gk.Model) -> None:
    result = compare(whole_model, backend="reference", candidate_backend="ort-noopt", feed_options=gk.FeedOptions(seed=3))
    feeds = make_feeds(whole_model, feed_options=gk.FeedOptions(seed=3))
    ort_out = ort_run(whole_model, feeds, opt_level="disable")["output"]
    from onnx.reference import ReferenceEvaluator

    ref_out = ReferenceEvaluator(whole_model.proto).run(["output"], feeds)[0]
    out = result.tensor("output")
    assert out.max_abs == pytest.approx(float(np.abs(ort_out.astype(np.float64) - ref_out).max()), abs=1e-12)
    assert result.passed


@pytest.mark.parametrize("name", ["if_outer_scope.onnx", "loop_scan.onnx", "srcnn.onnx"])
def test_control_flow_and_resize_models_agree_across_backends(name: str) -> None:
    model = gk.load(fixture(name))
    assert compare(model).passed
    assert compare(model, backend="reference").passed


def test_external_weights_model_compares(ext_copy: Path) -> None:
    model = gk.load(ext_copy)
    result = compare(model, backend="reference", feed_options=gk.FeedOptions(shapes={"x": [2, 64]}))
    assert result.passed and [t.name for t in result.tensors][-1] == "y"


def test_custom_op_names_the_op() -> None:
    with pytest.raises(gk.RuntimeFailure) as info:
        compare(gk.load(fixture("dcn.onnx")))
    assert "deform_conv2d" in str(info.value) and info.value.hint


# ------------------------------------------------------------------------------------- two models


def test_identical_models_pass_with_zero_error(whole_model: gk.Model) -> None:
    result = compare(whole_model, whole_model.copy())
    assert result.passed and len(result.tensors) == 11
    assert all(t.max_abs == 0.0 and t.mse == 0.0 and t.cosine == pytest.approx(1.0) for t in result.tensors)


def test_add_turned_into_sub_is_found_first_and_local(whole_model: gk.Model) -> None:
    edited = whole_model.copy()
    before = whole_model.serialized()
    next(n for n in edited.graph.node if n.name == "/Add").op_type = "Sub"
    result = compare(whole_model, edited)
    assert whole_model.serialized() == before
    div = result.first_divergence
    assert div is not None and (div.node, div.op_type, div.tensor) == ("/Add", "Sub", "/Add_output_0")
    assert div.local is True and div.fragment == ("/Add",)
    assert div.inputs == ("/convs2/convs2.1/Conv_output_0", "/convs3/convs3.1/Conv_output_0")
    by_name = {t.name: t for t in result.tensors}
    assert all(by_name[n].passed for n in list(by_name)[:7])
    assert by_name["/Add_output_0"].origin == "local"
    for name in ("/convs4/convs4.0/Conv_output_0", "/convs4/convs4.1/Conv_output_0", "output"):
        assert not by_name[name].passed and by_name[name].origin == "inherited"
        assert by_name[name].local_max_abs is not None and by_name[name].local_max_abs < 1e-5


def test_changed_conv_weight_is_local_and_downstream_inherited(whole_model: gk.Model) -> None:
    edited = _with_weight(whole_model, "convs3.0.weight", lambda w: w * 1.5)
    result = compare(whole_model, edited)
    div = result.first_divergence
    assert div is not None and div.node == "/convs3/convs3.0/Conv" and div.op_type == "Conv" and div.local
    origins = {t.name: t.origin for t in result.failed}
    assert origins == {
        "/convs3/convs3.0/Conv_output_0": "local",
        "/convs3/convs3.1/Conv_output_0": "inherited",
        "/Add_output_0": "inherited",
        "/convs4/convs4.0/Conv_output_0": "inherited",
        "/convs4/convs4.1/Conv_output_0": "inherited",
        "output": "inherited",
    }
    assert result.tensor("/convs2/convs2.1/Conv_output_0").passed  # the other branch is untouched


def _renamed(model: gk.Model, old: str, new: str) -> gk.Model:
    copy = model.copy()
    for node in copy.graph.node:
        node.input[:] = [new if n == old else n for n in node.input]
        node.output[:] = [new if n == old else n for n in node.output]
    return copy


def test_renamed_tensor_is_matched_through_a_mapping(whole_model: gk.Model) -> None:
    edited = _renamed(whole_model, "/Add_output_0", "sum")
    mapped = compare(whole_model, edited, mapping={"/Add_output_0": "sum"})
    pair = mapped.tensor("sum")
    assert pair.reference_name == "/Add_output_0" and pair.passed and pair.max_abs == 0.0
    assert mapped.renamed == ()  # (the mapping paired it)
    # without a mapping, the one tensor unmatched on each side, made by Add at the same place, pairs as renamed
    plain = compare(whole_model, edited)
    assert plain.renamed == (("/Add_output_0", "sum"),) and plain.tensor("sum").max_abs == 0.0
    assert plain.unmatched == () and plain.unmatched_candidate == ()


def test_outputs_are_matched_by_position_when_renamed(whole_model: gk.Model) -> None:
    edited = _renamed(whole_model, "output", "y")
    edited.graph.output[0].name = "y"
    result = compare(whole_model, edited)
    assert result.tensor("y").reference_name == "output" and result.passed


def test_mapping_names_an_unknown_tensor(whole_model: gk.Model) -> None:
    with pytest.raises(gk.TensorNotFoundError) as info:
        compare(whole_model, whole_model.copy(), mapping={"/Add_output": "x"})
    assert "/Add_output" in str(info.value) and "/Add_output_0" in info.value.hint


def test_fp16_candidate_compares_against_fp32(whole_model: gk.Model) -> None:
    half = whole_model.copy()
    for t in half.graph.initializer:
        t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float16), t.name))
    for v in list(half.graph.input) + list(half.graph.output):
        v.type.tensor_type.elem_type = onnx.TensorProto.FLOAT16
    result = compare(whole_model, half, tolerance=gk.Tolerance(atol=1e-2, rtol=1e-2))
    out = result.tensor("output")
    assert out.dtype == "float16/float32" and out.passed and 0 < out.max_abs < 1e-2
    strict = compare(whole_model, half, tolerance=gk.Tolerance(atol=1e-6, rtol=0))
    assert not strict.passed and strict.first_divergence is not None
    assert strict.first_divergence.node == "/convs1/convs1.0/Conv"


# ---------------------------------------------------------------------------------- tolerances


def test_per_tensor_tolerance_by_name_and_glob(whole_model: gk.Model) -> None:
    edited = _with_weight(whole_model, "convs4.2.weight", lambda w: w + 1e-3)
    failing = compare(whole_model, edited)
    assert [t.name for t in failing.failed] == ["output"]
    loose = compare(whole_model, edited, tolerances={"out*": Tolerance(atol=1.0, rtol=0.0)})
    assert loose.passed and loose.tensor("output").tolerance.atol == 1.0


def test_unknown_tolerance_name_is_refused(whole_model: gk.Model) -> None:
    with pytest.raises(gk.TensorNotFoundError) as info:
        compare(whole_model, tolerances={"outptu": Tolerance(1, 1)})
    assert "outptu" in str(info.value) and "'output'" in info.value.hint


def test_contradictory_sides_are_refused(whole_model: gk.Model) -> None:
    with pytest.raises(gk.UsageError) as info:
        compare(whole_model, backend="ort")
    assert "nothing to compare" in str(info.value) and info.value.hint
    with pytest.raises(gk.UsageError):
        compare(whole_model, whole_model, reference={"output": np.zeros(1)})
    with pytest.raises(gk.UsageError) as bad:
        compare(whole_model, backend="tensorrt")
    assert "tensorrt" in str(bad.value) and "ort-noopt" in bad.value.hint


# ------------------------------------------------------------------------------------- bounded


def test_small_fragments_give_the_same_figures(whole_model: gk.Model) -> None:
    edited = _with_weight(whole_model, "convs2.1.weight", lambda w: -w)
    big = compare(whole_model, edited)
    small = compare(whole_model, edited, fragment_bytes=1)
    assert small.runs > big.runs and small.runs >= 2 * 11
    assert [t.to_dict() for t in small.tensors] == [t.to_dict() for t in big.tensors]
    assert small.first_divergence == big.first_divergence


def test_progress_is_reported(whole_model: gk.Model) -> None:
    seen: list[tuple[int, int]] = []
    compare(whole_model, fragment_bytes=1, progress=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (11, 11) and len(seen) > 1


# -------------------------------------------------------------------------------------- markers


def test_markers_become_identity_with_exposed_outputs() -> None:
    model = gk.load(fixture("debug_markers.onnx"))
    result = markers(model)
    assert result.markers == {"x_0": "/Debug_0_output_0", "x_1": "/Debug_1_output_0",
                              "x_2": "/Debug_2_output_0", "x_3": "output"}
    assert {n.op_type for n in result.model.graph.node} == {"Conv", "Identity"}
    assert [o.name for o in result.model.graph.output] == ["output", "/Debug_0_output_0", "/Debug_1_output_0",
                                                           "/Debug_2_output_0"]
    assert "my" not in {o.domain for o in result.model.proto.opset_import}
    assert gk.validate(result.model).passed
    assert any(n.op_type == "Debug" for n in model.graph.node)  # input untouched


def test_markers_errors_name_the_node() -> None:
    with pytest.raises(gk.NameNotFoundError) as info:
        markers(gk.load(fixture("debug_markers.onnx")), domain="other")
    assert "other::Debug" in str(info.value) and "my::Debug" in info.value.hint
    with pytest.raises(gk.UsageError) as attr:
        markers(gk.load(fixture("debug_markers.onnx")), attr="label")
    assert "/Debug_0" in str(attr.value) and "--attr" in (attr.value.cli_hint or "") and "attr=" in (attr.value.hint or "")


def _chain_reference(model: gk.Model, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The seed's reference: the original chain of Conv blocks, run block by block (no markers)."""
    values, x = {}, feeds["input"]
    for i in range(4):
        b = gk.GraphBuilder(f"block{i}")
        b.input("x", "float32", [1, 3, 10, 10])
        weights = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
        w = b.initializer(weights[f"convs.{i}.weight"], "w")
        bias = b.initializer(weights[f"convs.{i}.bias"], "b")
        b.node("Conv", ["x", w, bias], outputs=["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
        b.output("y", "float32", [1, 3, 10, 10])
        x = ort_run(b.build(), {"x": x}, opt_level="disable")["y"]
        values[f"x_{i}"] = x
    return values


def test_markers_against_reference_values_reproduce_the_seed_table() -> None:
    model = gk.load(fixture("debug_markers.onnx"))
    feeds = make_feeds(model, feed_options=gk.FeedOptions(seed=0))
    reference = {"input": feeds["input"], **_chain_reference(model, feeds)}
    result = compare(model, reference=reference)
    assert result.passed and [t.marker for t in result.tensors] == ["x_0", "x_1", "x_2", "x_3"]
    assert all(t.mse < 1e-12 and t.node.startswith("/convs.") for t in result.tensors)
    assert not result.notes


def test_markers_fail_loudly_when_a_block_changes() -> None:
    model = gk.load(fixture("debug_markers.onnx"))
    feeds = make_feeds(model, feed_options=gk.FeedOptions(seed=0))
    reference = {"input": feeds["input"], **_chain_reference(model, feeds)}
    changed = _with_weight(model, "convs.2.weight", lambda w: w * 0.5)
    result = compare(changed, reference=reference)
    assert [t.marker for t in result.failed] == ["x_2", "x_3"]
    div = result.first_divergence
    assert div is not None and div.marker == "x_2" and div.node == "/convs.2/Conv" and div.op_type == "Conv"
    assert div.local is True and div.fragment == ("/convs.2/Conv", "/Debug_2")
    assert result.tensor("x_3").origin == "inherited"


def test_reference_without_inputs_warns_and_unknown_keys_are_listed() -> None:
    model = gk.load(fixture("debug_markers.onnx"))
    feeds = make_feeds(model, feed_options=gk.FeedOptions(seed=0))
    reference = {**_chain_reference(model, feeds), "x_9": np.zeros(3, np.float32)}
    result = compare(model, reference=reference)
    assert result.passed  # same seed, same inputs
    assert result.unmatched == ("x_9",)
    assert any("'input'" in n and "seed" in n for n in result.notes)


def test_reference_with_no_matching_name_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "ref.npz"
    np.savez(path, x_00=np.zeros(3))
    with pytest.raises(gk.TensorNotFoundError) as info:
        compare(gk.load(fixture("debug_markers.onnx")), reference=path)
    assert str(path) in str(info.value) and "x_0" in info.value.hint


def test_shape_mismatch_is_a_failure_with_a_reason() -> None:
    model = gk.load(fixture("debug_markers.onnx"))
    result = compare(model, reference={"x_1": np.zeros((1, 3, 5, 5), np.float32)})
    t = result.tensor("x_1")
    assert not t.passed and "shape [1, 3, 10, 10] differs" in (t.reason or "")


# ---------------------------------------------------------------------------------- light models


#: Light models shipped with onnx: tensors compared. Seconds on 2 shared cores: bvlc_alexnet 2,
#: zfnet512 3-5, squeezenet 2-3, resnet50 2-7, shufflenet 1-3 (between them they cover LRN, opset-9
#: Softmax and opset-9 BatchNormalization); inception_v1 10-11, vgg19 10-12, densenet121 12-16 (half of
#: it computing figures over 668 tensors), inception_v2 16-24 (the evaluator's AveragePool and Conv).
LIGHT_MODELS = {"bvlc_alexnet": 24, "zfnet512": 22, "squeezenet": 66, "resnet50": 176, "shufflenet": 203,
                "inception_v1": 143, "vgg19": 46, "densenet121": 668, "inception_v2": 371}


@pytest.mark.slow
@pytest.mark.parametrize("name", LIGHT_MODELS)
def test_reference_evaluator_agrees_with_ort_on_light_models(name: str) -> None:
    """The corrected evaluator (graphkit._reference_ops) matches ONNX Runtime on every compared tensor
    (ONNX Runtime without optimizations: with them, the tensors it fuses away are not compared).

    Default tolerance atol 1e-5, rtol 1e-3; the largest rtol actually needed is about 1.4e-5 (resnet50).
    """
    model, feeds = _light(name)
    result = compare(model, backend="reference", candidate_backend="ort-noopt", feeds=feeds)
    assert result.tolerance == Tolerance(atol=1e-5, rtol=1e-3)
    assert result.passed, [(t.name, t.op_type, t.max_rel) for t in result.failed[:5]]
    assert len(result.tensors) == LIGHT_MODELS[name]
    assert max(t.needed_rtol for t in result.tensors) < 1e-4  # a wide margin, not a near miss
    assert result.first_divergence is None


@pytest.fixture
def raw_evaluator(monkeypatch: pytest.MonkeyPatch) -> None:
    """onnx's ReferenceEvaluator without graphkit's corrected kernels."""
    monkeypatch.setattr(reference_ops, "OVERRIDES", ())


@pytest.mark.slow
@pytest.mark.usefixtures("raw_evaluator")
def test_raw_evaluator_softmax_divergence_on_light_squeezenet_is_found_local() -> None:
    model, feeds = _light("squeezenet")
    result = compare(model, backend="reference", candidate_backend="ort-noopt", feeds=feeds)
    assert len(result.tensors) == 66
    assert [t.name for t in result.failed] == ["softmaxout_1"]
    # opset-9 Softmax on a [1,1000,1,1] input: onnx's kernel normalizes the last axis, ORT axis 1
    div = result.first_divergence
    assert div is not None and div.op_type == "Softmax" and div.local is True


@pytest.mark.usefixtures("raw_evaluator")
def test_raw_evaluator_batchnorm_opset9_divergence_is_found_local() -> None:
    model, feeds = _light("resnet50")
    result = compare(model, backend="reference", candidate_backend="ort-noopt", feeds=feeds, tensors=["r0", "r1", "r2"])
    assert result.tensor("r0").passed  # the first Conv agrees
    div = result.first_divergence
    assert div is not None and (div.node, div.op_type, div.local) == ("n1", "BatchNormalization", True)
    assert result.tensor("r2").origin == "inherited"


@pytest.mark.slow
@pytest.mark.usefixtures("raw_evaluator")
def test_raw_evaluator_lrn_divergence_on_light_zfnet512_is_found_local() -> None:
    model, feeds = _light("zfnet512")
    result = compare(model, backend="reference", candidate_backend="ort-noopt", feeds=feeds)
    div = result.first_divergence
    assert div is not None and (div.tensor, div.op_type, div.local) == ("r6", "LRN", True)
    lrn = result.tensor("r6")
    assert lrn.max_rel > 1e-2  # onnx's kernel skips the square sums of channels >= N
    assert all(t.passed for t in result.tensors[: result.tensors.index(lrn)])


def test_a_huge_rtol_passes_without_a_numpy_warning() -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        figures = tensor_figures(np.array([1e3, 2.0]), np.array([999.0, 2.0]), Tolerance(atol=1e-6, rtol=1e307))
    assert figures["passed"]


# ------------------------------------------------------------------------------ first non-finite


def _log_of_negative() -> gk.Model:
    """y = Relu(Log(|x| - 2)) after a few finite nodes: Log is the first node to produce NaN."""
    b = gk.GraphBuilder("nan")
    x = b.input("x", "float32", [2, 3])
    a = b.node("Abs", [x], name="abs", outputs=["a"])
    s = b.node("Sub", [a, b.initializer(np.array(2.0, np.float32), "two")], name="sub", outputs=["s"])
    lg = b.node("Log", [s], name="log", outputs=["l"])
    b.output(b.node("Relu", [lg], name="relu", outputs=["y"]), "float32", [2, 3])
    return b.build()


def test_check_finite_names_the_first_node_and_its_input_ranges() -> None:
    x = np.array([[0.5, -1.0, 0.25], [1.0, 0.0, -0.75]], np.float32)
    result = gk.check_finite(_log_of_negative(), {"x": x}, fragment_bytes=1)
    first = result.first_nonfinite
    assert first is not None and not result.passed
    assert (first.node, first.op_type, first.tensor, first.nan, first.inf) == ("log", "Log", "l", 6, 0)
    (s,) = first.inputs
    assert (s.name, s.kind, s.min, s.max, s.nan) == ("s", "activation", -2.0, -1.0, 0)
    assert first.to_dict()["node"] == "log" and result.to_dict()["first_nonfinite"]["tensor"] == "l"


def test_check_finite_passes_a_finite_model_and_notes_nan_that_came_from_an_input(whole_model: gk.Model) -> None:
    assert gk.check_finite(whole_model).passed
    x = np.full((2, 3), np.nan, np.float32)
    result = gk.check_finite(_log_of_negative(), {"x": x})
    assert result.passed
    assert any("inputs hold NaN or Inf themselves: 'x'" in n for n in result.notes)
    assert any("only because" in n for n in result.notes)


def test_compare_check_finite_reports_first_nonfinite_in_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from graphkit.cli import main

    gk.save(_log_of_negative(), tmp_path / "nan.onnx")
    assert gk.compare(_log_of_negative(), check_finite=True).first_nonfinite is not None
    assert main(["compare", str(tmp_path / "nan.onnx"), "--check-finite", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["passed"] is True
    assert {k: data["first_nonfinite"][k] for k in ("node", "op_type", "tensor")} == \
        {"node": "log", "op_type": "Log", "tensor": "l"}
    assert [f["name"] for f in data["feeds"]] == ["x"] and data["feeds"][0]["source"] == "generated"
    assert main(["run", str(tmp_path / "nan.onnx"), "--check-finite"]) == 1
    out = capsys.readouterr().out
    assert "NON-FINITE: node 'log' (Log) produces 6 NaN in 'l' from finite inputs" in out
    assert "  s      activation" in out
    assert main(["run", str(fixture("whole_model.onnx")), "--check-finite", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["first_nonfinite"] is None


def test_compare_summary_lists_the_generated_inputs_and_dims(capsys: pytest.CaptureFixture[str]) -> None:
    from graphkit.cli import main

    assert main(["compare", str(fixture("model_dynamic_0.onnx")), "--shape", "in=2x3x10x10", "--seed", "4"]) == 0
    out = capsys.readouterr().out
    assert "inputs\n  in  float32  [2, 3, 10, 10]  generated (seed 4, range -1..1); batch=2 (--shape)" in out


def test_check_finite_gives_a_weights_range() -> None:
    b = gk.GraphBuilder("div")
    x = b.input("x", "float32", [3])
    zero = b.initializer(np.zeros(3, np.float32), "zero")
    b.output(b.node("Div", [b.node("Abs", [x], name="abs", outputs=["a"]), zero], name="div", outputs=["y"]),
             "float32", [3])
    first = gk.check_finite(b.build(), {"x": np.array([1.0, -2.0, 3.0], np.float32)}).first_nonfinite
    assert first is not None and (first.node, first.inf) == ("div", 3)
    assert [(r.name, r.kind, r.min, r.max) for r in first.inputs] == [("a", "activation", 1.0, 3.0),
                                                                     ("zero", "weight", 0.0, 0.0)]


def test_a_reference_value_beyond_float16_reaches_the_local_check_as_inf_without_a_warning() -> None:
    """x·1e5 passes float16's 65504: the local check of the Relu after it casts the reference's
    finite values to float16, where they are inf, as the candidate computes them (no numpy warning)."""
    import warnings

    b = gk.GraphBuilder("overflow")
    x = b.input("x", "float32", [64])
    a = b.node("Mul", [x, b.initializer(np.array(1e5, np.float32), "big")], name="scale", outputs=["a"])
    b.output(b.node("Relu", [a], name="relu", outputs=["y"]), "float32", [64])
    model = b.build()
    feeds = {"x": np.linspace(-1, 1, 64, dtype=np.float32)}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's "overflow encountered in cast" would raise here
        result = gk.compare(model, gk.to_float16(model), feeds=feeds)
    relu = result.tensor("y")
    assert not relu.passed and relu.local_max_abs is not None  # the local check ran on the cast values


def test_a_piece_with_a_scan_whose_body_reads_outer_constants_runs() -> None:
    # the piece took the constant axes as an input, so ONNX Runtime could not shape the Scan body's
    # outputs when it loaded it ("Subgraph must have the shape set for all outputs"; the onnx wheel's
    # expanded LinearAttention in simplify's and convert's checks)
    model = gk.parse_model("""<ir_version: 8, opset_import: ["" : 17]>
        g (float[2, 3] s0, float[4, 2, 3] xs) => (float[2, 3] final, float[4, 2, 3] ys) {
            axes = Constant <value = int64[1] {-1}> ()
            x2 = Relu (xs)
            final, ys = Scan <num_scan_inputs = 1, body = body (float[2, 3] s_in, float[2, 3] x_t) => (s_out, y_t) {
                u = Unsqueeze (x_t, axes)
                q = Squeeze (u, axes)
                s_out = Add (s_in, q)
                y_t = Mul (s_out, q)
            }> (s0, x2)
        }""")
    result = gk.compare(model, model, tensors=["final", "ys"], fragment_bytes=1)  # (a piece per node)
    assert result.passed and {t.name for t in result.tensors} == {"final", "ys"}


def test_a_piece_with_bodies_of_an_ir_3_model_lists_the_constants_it_holds_as_inputs() -> None:
    # (IR 3 requires every initializer to be a graph input: ONNX Runtime refused the piece, "Graph ctor
    # should have created NodeArg for initializer. Missing: s", and does not take a value for one)
    model = gk.parse_model("""<ir_version: 3, opset_import: ["" : 9]>
        g (float[2, 3] x, bool c) => (float[3, 2] y) {
            s0 = Constant <value = int64[2] {3, 2}> ()
            s = Identity (s0)
            y = If (c) <then_branch = then () => (float[3, 2] t) { t = Reshape (x, s) },
                        else_branch = other () => (float[3, 2] e) { e = Reshape (x, s0) }>
        }""")
    result = gk.compare(model, model, feeds={"c": np.array(True)}, fragment_bytes=1)  # (a piece per node)
    assert result.passed and result.runs > 2 and [t.name for t in result.tensors] == ["y"]
