"""graphkit._split: fragments partition the nodes, chain back to the whole model, and match their manifest."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import FIXTURES, LIGHT, digest, fixture

import graphkit as gk
from graphkit import _ort, _typing
from graphkit._graph import GraphIndex
from graphkit._model import iter_initializers
from graphkit._split import MANIFEST

TRUNK = "/convs1/convs1.2/Conv_output_0"
CONVS2_0 = "/convs2/convs2.0/Conv_output_0"
CONVS2_1 = "/convs2/convs2.1/Conv_output_0"
ADD = "/Add_output_0"


def _node_names(result: gk.Split) -> list[list[str]]:
    return [[n.name for n in f.model.graph.node] for f in result]


def assert_partition(model: gk.Model, result: gk.Split) -> None:
    """Each node in exactly one fragment; concatenated, the fragments run in a valid order."""
    source = [n.SerializeToString() for n in model.graph.node]
    pieces = [n.SerializeToString() for f in result for n in f.model.graph.node]
    assert sorted(pieces) == sorted(source)
    produced = set(GraphIndex(model.graph).inputs) | {t.name for t in model.graph.initializer}
    for f in result:
        index = GraphIndex(f.model.graph)
        for i, reads in enumerate(index.node_reads):
            for name in reads:
                assert name in produced or name in index.initializers or name in index.inputs \
                    or index.producer.get(name, i) < i, name
        produced |= {o for n in f.model.graph.node for o in n.output}
        for port in f.inputs:
            if port.source is None:
                assert port.name in GraphIndex(model.graph).inputs
            else:
                assert port.source < f.index
                assert port.name in {p.name for p in result[port.source].outputs}


def assert_chain_matches(model: gk.Model, result: gk.Split, **kwargs: object) -> gk.ChainResult:
    options = gk.FeedOptions(**kwargs)  # type: ignore[arg-type]
    chain = gk.run_chain(result, opt_level="disable", feed_options=options)
    assert chain.compared and chain.exact, [d.to_dict() for d in chain.diffs]
    whole = gk.run(model, opt_level="disable", feed_options=options)
    assert set(chain.outputs) == set(whole)
    for name, value in whole.items():
        np.testing.assert_array_equal(chain.outputs[name], value)
    return chain


@pytest.mark.parametrize(
    "cuts",
    [[TRUNK], [TRUNK, ADD], [TRUNK, CONVS2_1, ADD]],
    ids=["1-cut", "2-cuts", "3-cuts"],
)
def test_whole_model_split_at_cuts_chains_to_the_same_outputs(whole_model: gk.Model, cuts: list[str]) -> None:
    result = gk.split(whole_model, at=cuts)
    assert len(result) == len(cuts) + 1
    assert_partition(whole_model, result)
    for k, cut in enumerate(cuts):
        assert cut in {p.name for p in result[k].outputs}
    assert_chain_matches(whole_model, result, seed=3)


def test_three_cuts_put_each_branch_where_it_is_needed(whole_model: gk.Model) -> None:
    result = gk.split(whole_model, at=[TRUNK, CONVS2_1, ADD])
    assert _node_names(result) == [
        ["/convs1/convs1.0/Conv", "/convs1/convs1.1/Conv", "/convs1/convs1.2/Conv"],
        ["/convs2/convs2.0/Conv", "/convs2/convs2.1/Conv"],
        ["/convs3/convs3.0/Conv", "/convs3/convs3.1/Conv", "/Add"],
        ["/convs4/convs4.0/Conv", "/convs4/convs4.1/Conv", "/convs4/convs4.2/Conv"],
    ]


def test_parts_three_chains_and_prefers_single_tensor_cuts(whole_model: gk.Model) -> None:
    result = gk.split(whole_model, parts=3)
    assert len(result) == 3
    assert [f.nodes for f in result] == [3, 5, 3]
    assert result.cuts == ((TRUNK,), (ADD,))
    assert_partition(whole_model, result)
    assert_chain_matches(whole_model, result)


def test_a_tensor_skipping_a_fragment_is_fed_from_its_producer(whole_model: gk.Model) -> None:
    result = gk.split(whole_model, at=[TRUNK, CONVS2_0, CONVS2_1])
    assert [f.nodes for f in result] == [3, 1, 1, 6]
    last = result[3]
    origins = {p.name: p.source for p in last.inputs}
    assert origins == {TRUNK: 0, CONVS2_1: 2}
    trunk_port = next(p for p in result[0].outputs if p.name == TRUNK)
    assert trunk_port.to == (1, 3)
    assert_chain_matches(whole_model, result, seed=5)


def test_balance_by_weight_bytes() -> None:
    b = gk.GraphBuilder("lopsided")
    x = b.input("x", "float32", [1, 64])
    rng = np.random.default_rng(0)
    widths = [64, 64, 64, 64, 256]  # four 16 KiB weights, then one of 64 KiB
    for i, width in enumerate(widths):
        w = b.initializer(rng.standard_normal((64, width)).astype(np.float32) * 0.1, f"w{i}")
        x = b.node("MatMul", [x, w], name=f"mm{i}", outputs=[f"h{i}"])
        if i < len(widths) - 1:
            x = b.node("Relu", [x], name=f"relu{i}", outputs=[f"r{i}"])
    b.output(x, "float32", [1, 256])
    model = b.build()
    by_nodes = gk.split(model, parts=2)
    by_weights = gk.split(model, parts=2, balance="weights")
    assert [f.nodes for f in by_nodes] == [4, 5]
    assert [f.nodes for f in by_weights] == [7, 2]
    assert [f.weight_bytes for f in by_weights] == [64 * 64 * 4 * 4, 64 * 256 * 4]
    assert_chain_matches(model, by_weights)


@pytest.mark.parametrize("name", ["if_outer_scope.onnx", "loop_scan.onnx"])
@pytest.mark.parametrize("parts", [2, 3, 4])
def test_control_flow_fixtures_split_and_chain(name: str, parts: int) -> None:
    model = gk.load(fixture(name))
    result = gk.split(model, parts=parts)
    assert len(result) == parts
    assert_partition(model, result)
    assert_chain_matches(model, result, seed=parts)


def test_outer_reads_of_a_body_become_fragment_inputs() -> None:
    model = gk.load(fixture("if_outer_scope.onnx"))
    result = gk.split(model, at=["x_relu", "x_neg"])
    branch = result[2]
    assert [n.name for n in branch.model.graph.node] == ["sum", "positive", "branch", "final"]
    names = {p.name: p.source for p in branch.inputs}
    assert names == {"x": None, "x_relu": 0, "x_neg": 1}  # both read only inside the bodies
    inits = {t.name for t in branch.model.graph.initializer}
    assert {"W", "W2", "zero"} <= inits  # outer initializers the bodies read go with the If
    assert_chain_matches(model, result)


def test_loop_output_without_inferred_rank_is_typed_by_one_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_ort, "symbolic_shapes", lambda proto: None)  # (as without sympy)
    model = gk.load(fixture("loop_scan.onnx"))
    result = gk.split(model, at=["loop_acc"])
    port = next(p for p in result[0].outputs if p.name == "loop_acc")
    assert port.dtype == "float32" and port.shape == ["unk_1"]  # one run proves no size
    assert_chain_matches(model, result)


def test_loop_output_onnx_leaves_unranked_is_sized_by_symbolic_inference() -> None:
    pytest.importorskip("sympy")
    model = gk.load(fixture("loop_scan.onnx"))
    result = gk.split(model, at=["loop_acc"])
    port = next(p for p in result[0].outputs if p.name == "loop_acc")
    assert port.dtype == "float32" and port.shape == [3]  # the loop carries a [3] tensor
    assert_chain_matches(model, result)


def test_a_weight_shared_by_two_fragments_is_in_both() -> None:
    b = gk.GraphBuilder("shared")
    x = b.input("x", "float32", [4])
    w = b.initializer(np.arange(4, dtype=np.float32), "w")
    h = b.node("Mul", [x, w], name="first", outputs=["h"])
    b.node("Add", [h, w], name="second", outputs=["y"])
    b.output("y", "float32", [4])
    model = b.build()
    result = gk.split(model, at=["h"])
    assert [[t.name for t in f.model.graph.initializer] for f in result] == [["w"], ["w"]]
    assert [f.weight_bytes for f in result] == [16, 16]
    assert_chain_matches(model, result)


def test_split_is_pure(whole_model: gk.Model) -> None:
    before = whole_model.proto.SerializeToString()
    gk.split(whole_model, parts=4)
    assert whole_model.proto.SerializeToString() == before


# ----------------------------------------------------------------------------------------- errors


def test_unknown_cut_suggests_a_name(whole_model: gk.Model) -> None:
    with pytest.raises(gk.TensorNotFoundError) as err:
        gk.split(whole_model, at=["/convs1/convs1.2/Conv_output"])
    assert "'/convs1/convs1.2/Conv_output'" in err.value.message and "whole_model.onnx" in err.value.message
    assert "did you mean" in err.value.hint and TRUNK in err.value.hint


@pytest.mark.parametrize(
    ("cuts", "words", "hint"),
    [
        (["input.1"], "it is a graph input", "cut at a tensor a node computes"),
        (["convs1.0.weight"], "it is a initializer", "cut at a tensor a node computes"),
        ([TRUNK, TRUNK], "given twice", "each cut once"),
        ([ADD, TRUNK], f"cut '{TRUNK}' computes nothing new", "execution order"),
        (["output"], "nothing is left after the last cut 'output'", "remove the last cut"),
    ],
)
def test_bad_cuts_are_clear_errors(whole_model: gk.Model, cuts: list[str], words: str, hint: str) -> None:
    with pytest.raises(gk.UsageError) as err:
        gk.split(whole_model, at=cuts)
    assert words in err.value.message and hint in err.value.hint


def test_cut_inside_a_body_names_the_node() -> None:
    model = gk.load(fixture("if_outer_scope.onnx"))
    with pytest.raises(gk.UsageError) as err:
        gk.split(model, at=["then_out"])
    assert "'then_out'" in err.value.message and "'branch' (If)" in err.value.message
    assert "that node's output" in err.value.hint


def test_parts_and_at_together_or_too_many_parts(whole_model: gk.Model) -> None:
    with pytest.raises(gk.UsageError, match="either cut tensors"):
        gk.split(whole_model)
    with pytest.raises(gk.UsageError, match="either cut tensors"):
        gk.split(whole_model, at=[TRUNK], parts=2)
    with pytest.raises(gk.UsageError) as err:
        gk.split(whole_model, parts=12)
    assert "only 11 nodes" in err.value.message and "--parts 11" in (err.value.cli_hint or "") and "parts=11" in (err.value.hint or "")
    with pytest.raises(gk.UsageError, match="balance= must be one of"):
        gk.split(whole_model, parts=2, balance="flops")


# ------------------------------------------------------------------------------- write and load


def test_manifest_matches_the_files(whole_model: gk.Model, tmp_path: Path) -> None:
    written = gk.write_split(gk.split(whole_model, at=[TRUNK, CONVS2_0, CONVS2_1]), tmp_path / "out")
    folder = tmp_path / "out"
    manifest = json.loads((folder / MANIFEST).read_text())
    assert manifest["format"] == "graphkit.split" and manifest["version"] == 1
    assert manifest["source"]["sha256"] == digest(fixture("whole_model.onnx"))
    assert Path(manifest["source"]["path"]) == fixture("whole_model.onnx").resolve()
    assert sorted(p.name for p in folder.iterdir()) == [MANIFEST, *(f"part_0{i}.onnx" for i in range(4))]
    assert [e["file"] for e in manifest["fragments"]] == [f.file for f in written]
    for entry in manifest["fragments"]:
        part = gk.load(folder / entry["file"])
        assert digest(folder / entry["file"]) == entry["sha256"]
        assert [i["name"] for i in entry["inputs"]] == [v.name for v in part.graph.input]
        assert [o["name"] for o in entry["outputs"]] == [v.name for v in part.graph.output]
        assert entry["nodes"] == len(part.graph.node)
        assert entry["weight_bytes"] == sum(int(np.prod(t.dims)) * 4 for t in part.graph.initializer)
        assert gk.validate(part).passed
    last = manifest["fragments"][3]
    assert {i["name"]: i["from"] for i in last["inputs"]} == {TRUNK: 0, CONVS2_1: 2}
    assert manifest["fragments"][0]["inputs"] == [
        {"name": "input.1", "dtype": "float32", "shape": [1, 3, 20, 20], "from": "graph input"}]
    loaded = gk.load_split(folder)
    assert [[p.name for p in f.inputs] for f in loaded] == [[p.name for p in f.inputs] for f in written]
    chain = gk.run_chain(folder, opt_level="disable")
    assert chain.reference is not None and chain.exact


def test_written_split_runs_from_its_folder_after_a_move(whole_model: gk.Model, tmp_path: Path) -> None:
    gk.write_split(gk.split(whole_model, parts=3), tmp_path / "a")
    shutil.move(tmp_path / "a", tmp_path / "b")
    chain = gk.run_chain(tmp_path / "b", opt_level="disable")
    assert chain.exact and len(chain.fragments) == 3


def test_external_weights_go_with_their_fragment(ext_copy: Path, tmp_path: Path, small_external_kept: None) -> None:
    model = gk.load(ext_copy)
    before = {p.name: digest(p) for p in ext_copy.parent.iterdir()}
    result = gk.split(model, at=["/relu/Relu_output_0"])
    written = gk.write_split(result, tmp_path / "parts")
    folder = tmp_path / "parts"
    assert sorted(p.name for p in folder.iterdir()) == [MANIFEST, "part_00.data", "part_00.onnx", "part_01.data",
                                                        "part_01.onnx"]
    manifest = json.loads((folder / MANIFEST).read_text())
    assert [e["data"] for e in manifest["fragments"]] == ["part_00.data", "part_01.data"]
    for f, names in zip(written, (["fc1.weight", "fc1.bias"], ["fc2.weight", "fc2.bias"])):
        assert [t.name for t in iter_initializers(f.model.proto)] == names
        external = {t.name for t in f.model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL}
        assert external == {names[0]}  # (the weight; a bias under save's size_threshold is written inline)
    assert (folder / "part_00.data").stat().st_size >= 64 * 128 * 4
    assert (folder / "part_01.data").stat().st_size < 64 * 128 * 4
    chain = gk.run_chain(folder, opt_level="disable", feed_options=gk.FeedOptions(dims={"batch": 2}))
    assert chain.exact and chain.outputs["y"].shape == (2, 16)
    assert {p.name: digest(p) for p in ext_copy.parent.iterdir()} == before


def test_write_refuses_a_non_empty_folder_then_overwrites(whole_model: gk.Model, tmp_path: Path) -> None:
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "keep.txt").write_text("mine")
    result = gk.split(whole_model, parts=2)
    with pytest.raises(gk.UsageError) as err:
        gk.write_split(result, folder)
    assert str(folder) in err.value.message and "--overwrite" in (err.value.cli_hint or "") and "overwrite=True" in (err.value.hint or "")
    assert sorted(p.name for p in folder.iterdir()) == ["keep.txt"]
    gk.write_split(result, folder, overwrite=True)
    assert sorted(p.name for p in folder.iterdir()) == [MANIFEST, "part_00.onnx", "part_01.onnx"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_write_refuses_the_folder_holding_the_source(tmp_path: Path) -> None:
    shutil.copy(FIXTURES / "whole_model.onnx", tmp_path / "m.onnx")
    model = gk.load(tmp_path / "m.onnx")
    with pytest.raises(gk.UsageError) as err:
        gk.write_split(gk.split(model, parts=2), tmp_path, overwrite=True)
    assert "holds the source model" in err.value.message and err.value.hint
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_failed_write_leaves_nothing(whole_model: gk.Model, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from graphkit import _io as io

    calls = []
    real_save = io.save

    def failing(*args: object, **kwargs: object) -> gk.Model:
        calls.append(1)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real_save(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(io, "save", failing)
    with pytest.raises(gk.WriteError) as err:
        gk.write_split(gk.split(whole_model, parts=3), tmp_path / "out")
    assert "out" in err.value.message and err.value.hint
    assert list(tmp_path.iterdir()) == []


def test_load_detects_changed_and_missing_fragments(whole_model: gk.Model, tmp_path: Path) -> None:
    folder = tmp_path / "out"
    gk.write_split(gk.split(whole_model, parts=3), folder)
    shutil.copy(folder / "part_00.onnx", tmp_path / "saved.onnx")
    shutil.copy(folder / "part_02.onnx", folder / "part_00.onnx")
    with pytest.raises(gk.CorruptModelError) as err:
        gk.load_split(folder)
    assert "part_00.onnx" in err.value.message and "split the model again" in err.value.hint
    (folder / "part_00.onnx").unlink()
    with pytest.raises(gk.ModelNotFoundError) as missing:
        gk.load_split(folder)
    assert "part_00.onnx" in missing.value.message and missing.value.hint
    with pytest.raises(gk.ModelNotFoundError) as nothing:
        gk.load_split(tmp_path)
    assert MANIFEST in nothing.value.message


def test_changed_source_is_not_compared(whole_model: gk.Model, tmp_path: Path) -> None:
    shutil.copy(FIXTURES / "whole_model.onnx", tmp_path / "m.onnx")
    gk.write_split(gk.split(gk.load(tmp_path / "m.onnx"), parts=2), tmp_path / "out")
    assert gk.load_split(tmp_path / "out").find_source()[0] is not None
    shutil.copy(FIXTURES / "my_add.onnx", tmp_path / "m.onnx")
    model, why = gk.load_split(tmp_path / "out").find_source()
    assert model is None and "changed since the split" in why
    chain = gk.run_chain(tmp_path / "out")
    assert not chain.compared and chain.passed


def test_untyped_boundary_that_nothing_can_type_is_a_clear_error() -> None:
    b = gk.GraphBuilder("custom")
    b.input("x", "float32", [2, 2])
    b.node("Mystery", ["x"], name="mystery", outputs=["t"], domain="custom")
    b.node("Relu", ["t"], name="relu", outputs=["y"])
    b.output("y", "float32", [2, 2])
    model = b.build()
    with pytest.raises(gk.InvalidModelError) as err:
        gk.split(model, at=["t"])
    assert "'t'" in err.value.message and "running the model failed" in err.value.message
    assert "value_info" in err.value.hint


# -------------------------------------------------------------- typing the boundaries, and the checker


def _elementwise_chain(stages: int = 5) -> gk.Model:
    """Stages of two Add-Relu branches merged by Mean: what exact propagation types (no value_info)."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for s in range(stages):
        ends = []
        for b in range(2):
            w = f"w{s}_{b}"
            inits.append(onnx.numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), w))
            nodes += [helper.make_node("Add", [x, w], [f"a{s}_{b}"]), helper.make_node("Relu", [f"a{s}_{b}"], [f"r{s}_{b}"])]
            ends.append(f"r{s}_{b}")
        nodes.append(helper.make_node("Mean", ends, [f"m{s}"]))
        x = f"m{s}"
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["N", 8])], inits)
    return gk.Model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))




@pytest.mark.parametrize("source", ["chain", "whole_model.onnx", "if_outer_scope.onnx", *sorted(
    p.name for p in LIGHT.glob("*.onnx"))[:4]])
def test_propagated_boundary_types_equal_shape_inference(source: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if source == "chain":
        model = _elementwise_chain()
    elif (LIGHT / source).exists():
        model = gk.load(LIGHT / source)
    else:
        model = gk.load(fixture(source))
    parts = min(3, len(model.graph.node))
    real, typed = _typing._propagated_types, []
    monkeypatch.setattr(_typing, "_propagated_types", lambda *a: typed.append(real(*a)) or typed[-1])
    fast = [f.model.proto.SerializeToString() for f in gk.split(model, parts=parts)]
    if source == "chain":
        assert typed and typed[0]  # (propagation typed the boundaries here)
    monkeypatch.setattr(_typing, "_propagated_types", lambda *a: None)
    slow = [f.model.proto.SerializeToString() for f in gk.split(model, parts=parts)]
    assert fast == slow


def test_fragments_typed_from_their_nodes_get_the_plain_checker(checker_calls: list[bool]) -> None:
    calls = checker_calls
    model = _elementwise_chain()
    result = gk.split(model, at=["m1", "m3"])
    assert calls == [False, False, False]
    assert [f.model.graph.input[0].name for f in result] == ["x", "m1", "m3"]
    stale = onnx.ModelProto()
    stale.CopyFrom(model.proto)
    stale.graph.value_info.append(onnx.helper.make_tensor_value_info("m1", onnx.TensorProto.FLOAT, ["N", 8]))
    calls.clear()
    gk.split(gk.Model(stale), at=["m1", "m3"])
    assert calls == [True, True, False]  # (m1's type is the source's word for it: stated)
