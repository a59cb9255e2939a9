"""validate() and toposort(): every problem named by node and tensor; stable, subgraph-aware sorting."""

from __future__ import annotations

import os
import random
from pathlib import Path

import onnx
import pytest
from conftest import fixture

import graphkit as gk
from graphkit._model import Model


def _shuffled(model: Model, seed: int) -> Model:
    clone = model.copy()
    nodes = list(clone.graph.node)
    random.Random(seed).shuffle(nodes)
    del clone.graph.node[:]
    clone.graph.node.extend(nodes)
    return clone


def _codes(report: gk.Report) -> list[str]:
    return [i.code for i in report.issues]


def test_clean_model_passes(whole_model: Model) -> None:
    report = gk.validate(whole_model)
    assert report.passed and report.issues == () and report.checker == "passed"


def test_dangling_input_names_node_position_and_tensor() -> None:
    model = gk.parse_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[2] x) => (float[2] y) { y = Add (x, x) }"""
    ).copy()
    model.graph.node[0].input[1] = "ghost"
    model.graph.node[0].name = "the_add"
    report = gk.validate(model)
    assert not report.passed
    issue = next(i for i in report.issues if i.code == "dangling-input")
    assert issue.node == "the_add" and issue.tensor == "ghost"
    assert "'the_add' (Add)" in issue.message and "input #1" in issue.message and "'ghost'" in issue.message
    assert issue.hint


def test_unsorted_graph_names_reader_and_producer(whole_model: Model) -> None:
    model = whole_model.copy()
    nodes = list(model.graph.node)
    nodes[0], nodes[1] = nodes[1], nodes[0]
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    report = gk.validate(model)
    issue = next(i for i in report.issues if i.code == "unsorted")
    assert issue.node == "/convs1/convs1.1/Conv"
    assert issue.tensor == "/convs1/convs1.0/Conv_output_0"
    assert "/convs1/convs1.0/Conv" in issue.message and "toposort" in (issue.hint or "")


def test_cycle_is_listed() -> None:
    b = gk.GraphBuilder("cyc")
    b.input("x", "float32", [2])
    b.node("Add", ["x", "c"], name="A", outputs=["a"])
    b.node("Relu", ["a"], name="B", outputs=["b"])
    b.node("Neg", ["b"], name="C", outputs=["c"])
    b.output("b", "float32", [2])
    with pytest.raises(gk.CycleError) as info:
        b.build(check=False)
    message = str(info.value)
    assert "'A' (Add)" in message and "'B' (Relu)" in message and "'C' (Neg)" in message
    # and validate lists it without raising
    model = Model(onnx.helper.make_model(onnx.helper.make_graph(
        b.nodes, "cyc", b.inputs, b.outputs), opset_imports=[onnx.helper.make_opsetid("", 17)]))
    report = gk.validate(model)
    cycle = next(i for i in report.issues if i.code == "cycle")
    assert "'A' (Add)" in cycle.message and "->" in cycle.message


def test_problems_are_all_listed_not_just_the_first(whole_model: Model) -> None:
    model = whole_model.copy()
    model.graph.node[3].input[0] = "nothing_1"
    model.graph.node[8].input[0] = "nothing_2"
    model.graph.node[5].output[0] = model.graph.node[4].output[0]
    entry = model.graph.output.add()
    entry.CopyFrom(model.graph.output[0])
    entry.name = "phantom"
    report = gk.validate(model)
    codes = _codes(report)
    assert codes.count("dangling-input") >= 2
    assert "duplicate-producer" in codes and "dangling-output" in codes
    assert {"nothing_1", "nothing_2", "phantom"} <= {i.tensor for i in report.issues}


def test_unused_initializer_and_input_are_warnings(whole_model: Model) -> None:
    model = whole_model.copy()
    model.graph.initializer.append(onnx.numpy_helper.from_array(__import__("numpy").zeros(3, "float32"), "spare"))
    model.graph.input.append(onnx.helper.make_tensor_value_info("unused_in", onnx.TensorProto.FLOAT, [1]))
    report = gk.validate(model)
    assert report.passed
    assert {(i.code, i.tensor) for i in report.warnings} == {("unused-initializer", "spare"), ("unused-input", "unused_in")}


def test_custom_domain_without_opset_import() -> None:
    model = gk.load(fixture("dcn.onnx")).copy()
    kept = [o for o in model.proto.opset_import if o.domain != "custom"]
    del model.proto.opset_import[:]
    model.proto.opset_import.extend(kept)
    report = gk.validate(model)
    issue = next(i for i in report.issues if i.code == "missing-opset-import")
    assert "'custom'" in issue.message and "deform_conv2d" in issue.message


def test_subgraph_problems_are_found() -> None:
    model = gk.load(fixture("if_outer_scope.onnx")).copy()
    branch = next(n for n in model.graph.node if n.op_type == "If")
    then = next(a for a in branch.attribute if a.name == "then_branch").g
    then.node[0].input[1] = "W_typo"
    report = gk.validate(model)
    issue = next(i for i in report.issues if i.code == "dangling-input")
    assert issue.tensor == "W_typo" and "branch" in issue.graph


def test_toposort_restores_a_shuffled_whole_model(whole_model: Model) -> None:
    for seed in range(5):
        shuffled = _shuffled(whole_model, seed)
        assert not gk.validate(shuffled).passed
        restored = gk.toposort(shuffled)
        assert gk.validate(restored).passed
        assert sorted(n.name for n in restored.graph.node) == sorted(n.name for n in whole_model.graph.node)
        a = gk.run(whole_model, feed_options=gk.FeedOptions(seed=1))["output"]
        b = gk.run(restored, feed_options=gk.FeedOptions(seed=1))["output"]
        assert (a == b).all()


def test_toposort_keeps_a_valid_order(whole_model: Model) -> None:
    before = whole_model.proto.SerializeToString()
    result = gk.toposort(whole_model)
    assert result.proto.SerializeToString() == before
    assert whole_model.proto.SerializeToString() == before  # input untouched


def test_toposort_is_stable_for_independent_nodes() -> None:
    # Two valid orders exist; the given one must be kept.
    model = gk.parse_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[2] x) => (float[2] y) { b = Neg (x) a = Relu (x) y = Add (a, b) }"""
    )
    assert [n.op_type for n in gk.toposort(model).graph.node] == ["Neg", "Relu", "Add"]


def test_toposort_respects_outer_scope_reads_of_subgraphs() -> None:
    model = gk.load(fixture("if_outer_scope.onnx"))
    shuffled = model.copy()
    nodes = list(shuffled.graph.node)
    if_index = next(i for i, n in enumerate(nodes) if n.op_type == "If")
    nodes.insert(0, nodes.pop(if_index))  # the If first: before the tensors its branches read
    del shuffled.graph.node[:]
    shuffled.graph.node.extend(nodes)
    report = gk.validate(shuffled, checker=False)
    assert not report.passed
    restored = gk.toposort(shuffled)
    assert gk.validate(restored).passed
    assert (gk.run(restored, feed_options=gk.FeedOptions(seed=2))["y"] == gk.run(model, feed_options=gk.FeedOptions(seed=2))["y"]).all()


def test_toposort_sorts_subgraph_bodies() -> None:
    model = gk.load(fixture("if_outer_scope.onnx")).copy()
    branch = next(n for n in model.graph.node if n.op_type == "If")
    body = next(a for a in branch.attribute if a.name == "else_branch").g
    nodes = list(body.node)
    nodes.reverse()
    del body.node[:]
    body.node.extend(nodes)
    assert not gk.validate(model, checker=False).passed
    assert gk.validate(gk.toposort(model)).passed


def test_toposort_cycle_is_an_error() -> None:
    model = gk.parse_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[2] x) => (float[2] y) { a = Relu (x) y = Neg (a) }"""
    ).copy()
    model.graph.node[0].input[0] = "y"
    with pytest.raises(gk.CycleError, match="cycle"):
        gk.toposort(model)


@pytest.mark.slow
def test_toposort_scales_to_100k_nodes() -> None:
    n = 100_000
    nodes = [onnx.helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"], name=f"n{i}") for i in range(n)]
    nodes.reverse()
    graph = onnx.helper.make_graph(nodes, "long", [onnx.helper.make_tensor_value_info("t0", 1, [1])],
                                   [onnx.helper.make_tensor_value_info(f"t{n}", 1, [1])])
    model = Model(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)]))
    result = gk.toposort(model)  # reversed chain: every node moves; quadratic code would not finish
    assert [x.name for x in result.graph.node[:3]] == ["n0", "n1", "n2"]
    assert result.graph.node[-1].name == f"n{n - 1}"


def test_no_verb_changes_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    from graphkit.cli import main

    def refuse(path: object) -> None:
        raise AssertionError(f"os.chdir({path!r}) called: a library call changes process-wide state")

    monkeypatch.setattr(os, "chdir", refuse)
    ext, whole = fixture("ext_weights/model.onnx"), fixture("whole_model.onnx")
    out = tmp_path / "out"
    out.mkdir()
    for args in (
        ["inspect", ext], ["check", ext], ["check", whole], ["check", fixture("if_outer_scope.onnx")],
        ["toposort", ext, out / "sorted.onnx"],
        ["extract", ext, out / "cut.onnx", "--inputs", "/fc1/Add_output_0", "--outputs", "y"],
        ["expose", ext, out / "exposed.onnx", "--tensors", "/relu/Relu_output_0"],
        ["edit", ext, out / "edited.onnx", "--set-op-type", "/relu/Relu=Sigmoid"],
        ["run", ext, "--shape", "x=2x64"],
        ["split", ext, out / "parts", "--parts", "2"], ["run-chain", out / "parts"],
        ["compare", ext], ["diff", ext, out / "edited.onnx"],
        ["markers", fixture("debug_markers.onnx"), out / "markers.onnx"],
        ["merge", fixture("my_add.onnx"), fixture("model_static.onnx"), out / "merged.onnx", "--connect", "output=in"],
    ):
        code = main([str(a) for a in args])
        assert code in (0, 1), (args, capsys.readouterr().err)
    assert gk.validate(gk.load(ext)).passed


def test_a_missing_ai_onnx_import_hints_a_version_that_exists() -> None:
    model = gk.load(fixture("whole_model.onnx")).copy()
    del model.proto.opset_import[:]
    issue = next(i for i in gk.validate(model).issues if i.code == "missing-opset-import")
    assert "'ai.onnx'" in issue.message
    assert "set_opset(model, 'ai.onnx', " in (issue.hint or "")
    assert "--set-opset ai.onnx=" in (issue.cli_hint or ""), issue.cli_hint  # (it said '--set-opset =1')
    version = int((issue.cli_hint or "").split("ai.onnx=")[1].split(")")[0])
    assert gk.validate(gk.set_opset(model, "ai.onnx", version)).passed  # (one the model's IR version allows)


def test_the_full_check_reads_small_external_values(tmp_path: Path) -> None:
    """onnx.checker's full check cannot read a Reshape target's pieces from external data; graphkit's
    checker gives it their values (the weights stay placeholders)."""
    from conftest import flatten_export, save_every_tensor_external

    source = save_every_tensor_external(flatten_export(), tmp_path)
    with pytest.raises(onnx.shape_inference.InferenceError, match="external"):
        onnx.checker.check_model(str(source), full_check=True)
    model = Model(onnx.load(str(source), load_external_data=False), tmp_path)
    report = gk.validate(model)
    assert report.passed, report.errors
    assert report.checker == "passed"
