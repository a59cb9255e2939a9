"""diff: exactly the planted changes, nodes matched by name then by structure, weights with tolerance."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import fixture, planted_changes
from onnx import numpy_helper

import graphkit as gk
from graphkit._diff import diff


def test_diff_finds_exactly_the_planted_changes(whole_model: gk.Model) -> None:
    before = whole_model.serialized()
    result = diff(whole_model, planted_changes(whole_model), tolerance=gk.Tolerance(atol=1e-6, rtol=0.0))
    assert whole_model.serialized() == before
    got = {(c.kind, c.what, c.name, c.detail) for c in result.changes}
    assert got == {
        ("changed", "opset", "ai.onnx", "17 -> 18"),
        ("changed", "metadata", "source", "\"graphkit fixtures: the seed's whole_model\" -> 'changed'"),
        ("changed", "output", "output", "float32 [1, 3, 4, 4] -> float32 [batch, 3, 4, 4]"),
        ("changed", "node", "renamed_conv", "renamed from '/convs1/convs1.1/Conv'"),
        ("changed", "node", "/Add", "op Add -> Sub"),
        ("changed", "node", "/convs2/convs2.1/Conv", "attribute 'auto_pad' added: 'NOTSET'"),
        ("changed", "node", "/convs4/convs4.2/Conv", "input #0 '/convs4/convs4.1/Conv_output_0' -> 'relu_out'"),
        ("added", "node", "relu_new", "Relu reading '/convs4/convs4.1/Conv_output_0'"),
        ("changed", "initializer", "convs2.0.weight", "values differ at 80 of 81 elements (max abs 0.00597)"),
    }
    assert result.of("initializer", "convs2.0.weight")[0].detail.startswith("values differ at ")
    assert result.matched_by_structure == 1 and result.matched_by_name == 10
    assert not result.of("initializer", "convs4.0.bias")
    assert not diff(whole_model, planted_changes(whole_model)).of("initializer", "convs4.0.bias")  # (default Tolerance())
    strict = diff(whole_model, planted_changes(whole_model), tolerance=gk.Tolerance(0, 0))
    assert strict.of("initializer", "convs4.0.bias")


def test_identical_models_have_no_changes(whole_model: gk.Model) -> None:
    result = diff(whole_model, whole_model.copy())
    assert result.identical and result.to_dict()["changes"] == []


_TEXT = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[2, 3] x) => (float[2, 3] y) {
    a = Relu(x)
    b = Neg(a)
    c = Exp(b)
    y = Add(c, a)
}
"""


def test_unnamed_nodes_match_by_structure() -> None:
    a = gk.parse_model(_TEXT)
    b = gk.parse_model(_TEXT.replace("c = Exp(b)", "c = Sigmoid(b)").replace("b = Neg(a)", "bb = Neg(a)")
                       .replace("(b)", "(bb)"))
    result = diff(a, b)
    changed = [c for c in result.changes if c.what == "node"]
    assert [(c.kind, c.detail) for c in changed] == [
        ("changed", "output #0 renamed 'b' -> 'bb'"),
        ("changed", "op Exp -> Sigmoid"),
    ]
    assert result.matched_by_structure == 4


def _unnamed_chain(length: int, *, sigmoid_at: int = -1) -> gk.Model:
    lines = ["<ir_version: 8, opset_import: [\"\" : 17]>", f"g (float[2] x) => (float[2] t{length - 1}) {{"]
    previous = "x"
    for i in range(length):
        op = "Sigmoid" if i == sigmoid_at else ("Relu", "Neg", "Exp")[i % 3]
        lines.append(f"    t{i} = {op}({previous})")
        previous = f"t{i}"
    return gk.parse_model("\n".join([*lines, "}"]))


def test_long_unnamed_chains_pair_every_node_by_structure() -> None:
    result = diff(_unnamed_chain(300), _unnamed_chain(300, sigmoid_at=150))
    assert result.matched_by_structure == 300 and result.matched_by_name == 0
    assert [(c.kind, c.what, c.name, c.detail) for c in result.changes] == [
        ("changed", "node", "#150 (Sigmoid)", "op Relu -> Sigmoid"),
    ]


def test_nodes_reading_one_input_pair_by_position() -> None:
    text = """
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2] x) => (float[2] a, float[2] b, float[2] c) {
        a = Relu(x)
        b = Relu(x)
        c = Relu(x)
    }
    """
    a = gk.parse_model(text)
    b = gk.parse_model(text.replace("b = Relu(x)", "b = Neg(x)"))
    result = diff(a, b)
    assert [(c.kind, c.name, c.detail) for c in result.changes if c.what == "node"] == [
        ("changed", "#1 (Neg)", "op Relu -> Neg"),
    ]
    assert result.matched_by_structure == 3


def test_removed_node_and_input(whole_model: gk.Model) -> None:
    b = whole_model.copy()
    g = b.graph
    drop = next(n for n in g.node if n.name == "/convs4/convs4.1/Conv")
    nxt = next(n for n in g.node if n.name == "/convs4/convs4.2/Conv")
    nxt.input[0] = "/convs4/convs4.0/Conv_output_0"
    g.node.remove(drop)
    keep = [t for t in g.initializer if not t.name.startswith("convs4.1.")]
    del g.initializer[:]
    g.initializer.extend(keep)
    result = diff(whole_model, b)
    kinds = {(c.kind, c.what, c.name) for c in result.changes}
    assert ("removed", "node", "/convs4/convs4.1/Conv") in kinds
    assert ("removed", "initializer", "convs4.1.weight") in kinds and ("removed", "initializer", "convs4.1.bias") in kinds
    assert ("changed", "node", "/convs4/convs4.2/Conv") in kinds


def test_subgraph_bodies_are_diffed() -> None:
    a = gk.load(fixture("if_outer_scope.onnx"))
    b = a.copy()
    branch = next(n for n in b.graph.node if n.op_type == "If")
    then = next(at for at in branch.attribute if at.name == "then_branch")
    then.g.node[0].op_type = "Sub"
    result = diff(a, b)
    inner = [c for c in result.changes if c.graph != "main graph"]
    assert [(c.name, c.detail) for c in inner] == [("then_add", "op Add -> Sub")]
    assert "then_branch" in inner[0].graph
    assert result.of("node", "branch")[0].detail == "body 'then_branch': 1 change(s)"


def test_external_weights_are_read_one_by_one(ext_copy: Path, tmp_path: Path) -> None:
    a = gk.load(ext_copy)
    other = tmp_path / "b" / "model.onnx"
    other.parent.mkdir()
    changed = gk.load(ext_copy).copy()
    for t in changed.graph.initializer:
        if t.name == "fc1.weight":
            value = gk.tensor_value(changed, t).copy()
            value[0, 0] += 0.5
            t.CopyFrom(numpy_helper.from_array(value, t.name))
    gk.save(changed, other, external=True, size_threshold=0)
    result = diff(a, gk.load(other))
    assert [(c.name, c.detail) for c in result.changes] == [
        ("fc1.weight", "values differ at 1 of 8192 elements (max abs 0.5)")]


def test_renamed_weight_is_paired_by_use(whole_model: gk.Model) -> None:
    b = whole_model.copy()
    for t in b.graph.initializer:
        if t.name == "convs1.0.bias":
            t.name = "bias_renamed"
    next(n for n in b.graph.node if n.name == "/convs1/convs1.0/Conv").input[2] = "bias_renamed"
    result = diff(whole_model, b)
    assert [(c.what, c.name, c.detail) for c in result.changes] == [
        ("initializer", "bias_renamed", "renamed from 'convs1.0.bias'")]


def test_negative_tolerance_is_refused(whole_model: gk.Model) -> None:
    with pytest.raises(gk.UsageError) as info:
        diff(whole_model, whole_model, tolerance=gk.Tolerance(atol=-1, rtol=0.0))
    assert "atol=" in str(info.value) and "-1" in str(info.value) and info.value.hint


def test_diff_values_of_tensor_attributes() -> None:
    a = gk.load(fixture("my_add.onnx"))
    b = a.copy()
    const = next(n for n in b.graph.node if n.op_type == "Constant")
    const.attribute[0].t.CopyFrom(numpy_helper.from_array(np.array(3.0, dtype=np.float32)))
    result = diff(a, b)
    assert [c.detail for c in result.changes] == ["attribute 'value' values differ at 1 of 1 elements (max abs 1)"]


def _ort_optimized(name: str, tmp_path: Path) -> gk.Model:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(tmp_path / f"{name}_opt.onnx")
    ort.InferenceSession(str(fixture(f"{name}.onnx")), options, providers=["CPUExecutionProvider"])
    return gk.load(tmp_path / f"{name}_opt.onnx")


def test_diff_of_an_ort_optimized_model_shows_the_fusions(tmp_path: Path) -> None:
    a = gk.load(fixture("srcnn.onnx"))
    b = _ort_optimized("srcnn", tmp_path)
    result = diff(a, b)
    assert {c.name for c in result.changes if c.kind == "removed" and c.what == "node"} == {
        "Constant_0", "/relu/Relu", "/relu_1/Relu"}
    conv1 = result.of("node", "/conv1/Conv")[0].detail
    assert "op Conv -> com.microsoft::FusedConv" in conv1 and "attribute 'activation' added: 'Relu'" in conv1
    conv2 = result.of("node", "/conv2/Conv")[0].detail
    assert "input #0 '/relu/Relu_output_0' now comes from node '/conv1/Conv' (was node '/relu/Relu')" in conv2
    assert result.of("initializer", "/Constant_output_0")[0].kind == "added"
    # and the numbers still agree, tensor by tensor
    compared = gk.compare(a, b)
    assert compared.passed
    assert [t.name for t in compared.tensors] == ["/Resize_output_0", "/relu/Relu_output_0",
                                                  "/relu_1/Relu_output_0", "output"]


def _scaled(weight: np.ndarray) -> gk.Model:
    """y = x * Cast(w, float32): the weight's dtype may change without touching the graph's signature."""
    b = gk.GraphBuilder("scaled")
    x = b.input("x", "float32", [4])
    w = b.initializer(weight, "conv1.weight")
    cast = b.node("Cast", [w], name="cast", outputs=["w32"], to=1)
    b.output(b.node("Mul", [x, cast], name="mul", outputs=["y"]), "float32", [4])
    return b.build()


def test_dtype_change_reports_the_value_change_in_the_wider_dtype() -> None:
    weight = np.array([0.5, 1.0, -2.0, 3.0], np.float32)
    changed = weight.astype(np.float16)
    changed[2] += np.float16(1.25)  # -0.75: off by 1.25
    result = diff(_scaled(weight), _scaled(changed))
    (change,) = result.of("initializer", "conv1.weight")
    assert change.detail == ("float32 [4] -> float16 [4]; values after casting to float32: 1 of 4 elements "
                             "beyond tolerance, max abs change 1.25, max rel change 0.625")
    same = diff(_scaled(weight), _scaled(weight.astype(np.float16))).of("initializer", "conv1.weight")
    assert same[0].detail == "float32 [4] -> float16 [4]; values equal after casting to float32"
    ints = diff(_scaled(np.array([1, 2, 3, 4], np.int32)), _scaled(np.array([1, 2, 3, 9], np.int64)))
    assert ints.of("initializer", "conv1.weight")[0].detail == (
        "int32 [4] -> int64 [4]; values after casting to int64: 1 of 4 elements beyond tolerance, "
        "max abs change 5, max rel change 1.25")
    x = np.ones(4, np.float32)
    assert np.allclose(gk.run(_scaled(changed), feeds={"x": x})["y"], [0.5, 1.0, -0.75, 3.0])


def test_dtype_change_within_tolerance_still_shows_the_change() -> None:
    weight = np.array([0.1, 0.2, 0.3, 0.4], np.float32)
    result = diff(_scaled(weight), _scaled(weight.astype(np.float16)))
    (change,) = result.of("initializer", "conv1.weight")
    assert change.detail.startswith("float32 [4] -> float16 [4]; values after casting to float32: within tolerance, "
                                    "max abs change ")
    assert float(change.detail.split("max abs change ")[1].split(",")[0]) < 1e-4
