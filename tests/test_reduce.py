"""reduce and --save-repro: the smallest subgraph that fails the same way, written with its inputs."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import fixture
from onnx import TensorProto
from onnx import helper as oh
from onnx import numpy_helper as nh

import graphkit as gk
from graphkit.cli import main

_FAILING = 70  # the deep node that fails


def _chain(bad: str = "run", length: int = 100) -> gk.Model:
    """x[n] through ``length`` elementwise nodes; node 70 fails: a Reshape to [3, 7] at run time
    (``bad="run"``, n = 10), or an operator ONNX Runtime does not know (``bad="load"``)."""
    nodes, prev = [], "x"
    inits = [nh.from_array(np.array([3, 7], np.int64), "bad_shape"), nh.from_array(np.array([-1], np.int64), "flat")]
    for i in range(length):
        out = f"t{i}"
        if i == _FAILING and bad == "run":
            nodes.append(oh.make_node("Reshape", [prev, "bad_shape"], [out], name=f"reshape{i}"))
        elif i == _FAILING:
            nodes.append(oh.make_node("NoSuchOp", [prev], [out], name=f"unknown{i}"))
        elif i == _FAILING + 1:
            nodes.append(oh.make_node("Reshape", [prev, "flat"], [out], name=f"flat{i}"))
        else:
            nodes.append(oh.make_node(["Relu", "Neg", "Abs", "Sigmoid"][i % 4], [prev], [out], name=f"n{i}"))
        prev = out
    graph = oh.make_graph(nodes, "chain", [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
                          [oh.make_tensor_value_info(prev, TensorProto.FLOAT, None)], inits)
    return gk.Model(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)]))


_SHAPE = gk.FeedOptions(shapes={"x": [10]})


def test_a_deep_run_failure_reduces_to_its_node_in_fewer_runs_than_a_linear_scan() -> None:
    model = _chain()
    before = model.proto.SerializeToString()
    result = gk.reduce(model, fails_on="run", feed_options=_SHAPE)
    assert result.nodes == ("reshape70",) and len(result.model.graph.node) <= 3
    assert result.failure.kind == "run" and result.failure.op_type == "Reshape" and result.failure.node == "reshape70"
    assert "cannot be reshaped" in result.failure.message
    # bisection: the whole model, ~log2(100) prefixes, the inputs' values and the node alone
    assert result.runs <= 12 and result.linear_runs == _FAILING + 2
    print(f"reduce: {result.runs} runs, a linear scan {result.linear_runs}")  # (the figure the issue asks for)
    assert list(result.inputs) == ["t69"] and result.inputs["t69"].shape == (10,)
    with pytest.raises(gk.RuntimeFailure) as info:  # the repro still fails, the same way
        gk.run(result.model, dict(result.inputs))
    assert "Reshape node. Name:'reshape70'" in str(info.value)
    assert model.proto.SerializeToString() == before


def test_progress_counts_runs_against_a_linear_scan_and_ends_full() -> None:
    calls: list[tuple[int, int]] = []
    result = gk.reduce(_chain(), feeds={"x": np.ones(10, np.float32)},
                       progress=lambda done, total: calls.append((done, total)))
    assert calls[-1] == (result.runs, result.runs)
    assert [done for done, _ in calls[:-1]] == list(range(1, result.runs + 1))
    assert calls[0][1] == 101  # (the bound: a linear scan of the 100 nodes, and the whole model)


def test_the_repro_keeps_the_value_the_failure_needs() -> None:
    result = gk.reduce(_chain(), fails_on="run", feed_options=_SHAPE)
    expected = gk.run(_chain(length=_FAILING), feed_options=_SHAPE)["t69"]
    np.testing.assert_array_equal(result.inputs["t69"], expected)


def test_a_load_failure_of_a_model_the_checker_rejects_is_reduced() -> None:
    model = _chain("load")
    with pytest.raises(onnx.checker.ValidationError):
        onnx.checker.check_model(model.proto, full_check=True)
    result = gk.reduce(model, fails_on="load", feed_options=_SHAPE)
    assert result.failure.kind == "load" and result.failure.op_type == "NoSuchOp"
    assert result.nodes == ("unknown70",) and result.runs < result.linear_runs


def test_a_model_that_does_not_fail_that_way_is_an_error_naming_the_other_kind() -> None:
    with pytest.raises(gk.UsageError) as info:
        gk.reduce(_chain(), fails_on="load", feed_options=_SHAPE)
    assert "fails to run instead" in info.value.message and "--fails-on run" in (info.value.cli_hint or "") and "fails_on='run'" in (info.value.hint or "")
    with pytest.raises(gk.UsageError) as info:
        gk.reduce(gk.load(fixture("whole_model.onnx")))
    assert "loads and runs" in info.value.message and "compare" in info.value.hint


def _edited(tmp_path: Path) -> tuple[Path, Path]:
    source = Path(fixture("whole_model.onnx"))
    edited = tmp_path / "edited.onnx"
    gk.save(gk.set_op_type(gk.load(source), "/Add", "Sub"), edited)
    return source, edited


def test_a_comparison_reduces_to_the_divergent_node_with_the_reference_values(tmp_path: Path) -> None:
    source, edited = _edited(tmp_path)
    result = gk.reduce(gk.load(source), gk.load(edited), fails_on="compare")
    assert result.nodes == ("/Add",) and result.failure.op_type == "Sub"
    assert sorted(result.inputs) == ["/convs2/convs2.1/Conv_output_0", "/convs3/convs3.1/Conv_output_0"]
    reference = gk.run(gk.load(source), outputs=["/Add_output_0", *result.inputs])
    for name, value in result.inputs.items():
        np.testing.assert_array_equal(value, reference[name])
    np.testing.assert_array_equal(result.expected["/Add_output_0"], reference["/Add_output_0"])


def test_save_repro_writes_the_four_files_and_its_command_reproduces(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    source, edited = _edited(tmp_path)
    out = tmp_path / "repro"
    code = main(["compare", str(source), str(edited), "--save-repro", str(out)])
    text = capsys.readouterr().out
    assert code == 1 and "kept 1 of 11 nodes: /Add" in text
    assert sorted(p.name for p in out.iterdir()) == ["README.txt", "expected.npz", "inputs.npz", "model.onnx"]
    onnx.checker.check_model(str(out / "model.onnx"), full_check=True)  # (its outputs are typed)
    readme = (out / "README.txt").read_text()
    command = next(line.strip() for line in readme.splitlines() if line.strip().startswith("python -m graphkit"))
    assert command.startswith(f"python -m graphkit compare {out}/model.onnx --reference {out}/expected.npz "
                              f"--input {out}/inputs.npz --candidate-backend ort")
    assert main([*shlex.split(command)[3:], "--json"]) == 1  # the repro diverges the same way
    data = json.loads(capsys.readouterr().out)
    assert data["first_divergence"]["node"] == "/Add" and data["first_divergence"]["op_type"] == "Sub"
    assert data["first_divergence"]["local"] is True


def test_save_repro_refuses_a_folder_that_is_not_empty(tmp_path: Path) -> None:
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("x")
    result = gk.reduce(_chain(), feed_options=_SHAPE)
    with pytest.raises(gk.UsageError) as info:
        gk.save_repro(result, tmp_path / "full")
    assert "not empty" in info.value.message and "--overwrite" in (info.value.cli_hint or "") and "overwrite=True" in (info.value.hint or "")
    assert (tmp_path / "full" / "keep.txt").read_text() == "x"


def test_cli_reduce_writes_the_repro_and_prints_the_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gk.save(_chain(), tmp_path / "chain.onnx")
    code = main(["reduce", str(tmp_path / "chain.onnx"), str(tmp_path / "out"), "--shape", "x=10"])
    text = capsys.readouterr().out
    assert code == 0 and "kept 1 of 100 nodes: reshape70" in text and "(a linear scan: 72)" in text
    assert (tmp_path / "out" / "model.onnx").is_file() and (tmp_path / "out" / "inputs.npz").is_file()
    onnx.checker.check_model(str(tmp_path / "out" / "model.onnx"), full_check=True)
    assert main(["run", str(tmp_path / "out" / "model.onnx"), "--input", str(tmp_path / "out" / "inputs.npz")]) == 2
    assert "Reshape node. Name:'reshape70'" in capsys.readouterr().err


def test_cli_reduce_of_a_comparison(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source, edited = _edited(tmp_path)
    code = main(["reduce", str(source), str(tmp_path / "out"), "--candidate", str(edited), "--fails-on", "compare",
                 "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["nodes"] == ["/Add"] and data["failure"]["kind"] == "compare"
    assert data["expected"] == ["/Add_output_0"]


def test_save_repro_of_a_float16_copy_with_float32_io(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the commonest comparison of all: a model against its `convert --float16 --keep-io-types` copy
    source = fixture("whole_model.onnx")
    half = tmp_path / "half.onnx"
    gk.save(gk.to_float16(gk.load(source), keep_io_types=True), half)
    out = tmp_path / "repro"
    code = main(["compare", str(source), str(half), "--save-repro", str(out)])
    captured = capsys.readouterr()
    assert code == 1, captured.err
    onnx.checker.check_model(str(out / "model.onnx"), full_check=True)
    readme = (out / "README.txt").read_text()
    command = next(line.strip() for line in readme.splitlines() if line.strip().startswith("python -m graphkit"))
    assert main(shlex.split(command)[3:]) == 1  # the repro diverges as the whole comparison did
