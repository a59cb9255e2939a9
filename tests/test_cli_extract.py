"""The extract and expose verbs: written files, exit codes, messages, and nothing written on error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, digest, fixture

import graphkit as gk
from graphkit.cli import main

WHOLE = str(fixture("whole_model.onnx"))
C12 = "/convs1/convs1.2/Conv_output_0"
C21 = "/convs2/convs2.1/Conv_output_0"
C40 = "/convs4/convs4.0/Conv_output_0"


def test_extract_writes_the_submodel(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "part.onnx"
    before = digest(Path(WHOLE))
    assert main(["extract", WHOLE, str(out), "--inputs", C12, "--outputs", C40]) == 0
    text = capsys.readouterr().out
    assert f"wrote {out}: 6 nodes, 1 input(s), 1 output(s), 10 initializers" in text
    assert C12 in text and "[1, 3, 14, 14]" in text
    part = gk.load(out)
    assert [v.name for v in part.graph.input] == [C12] and [v.name for v in part.graph.output] == [C40]
    assert digest(Path(WHOLE)) == before


def test_extract_json_reports_what_was_kept(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "part.onnx"
    assert main(["extract", WHOLE, str(out), "--inputs", "input.1", C12, "--outputs", C40, C21, "--json"]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert data["output"] == str(out)
    assert data["nodes"] == 6 and data["unused_inputs"] == ["input.1"]
    assert [i["name"] for i in data["inputs"]] == ["input.1", C12]
    assert [o["name"] for o in data["outputs"]] == [C40, C21]
    assert data["weight_bytes"] == 5 * 84 * 4 and data["initializers"] == 10
    assert "'input.1' is not needed" in captured.err


def test_extract_insufficient_inputs_exits_2_and_writes_nothing(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "part.onnx"
    assert main(["extract", WHOLE, str(out), "--inputs", C21, "--outputs", "output"]) == 2
    err = capsys.readouterr().err
    assert "graphkit: error: cannot compute 'output'" in err and "node '/Add' (Add)" in err
    assert "'/convs3/convs3.1/Conv_output_0'" in err
    assert "hint: add '/convs3/convs3.1/Conv_output_0' to --inputs" in err
    assert "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_extract_unknown_tensor_exits_2_with_did_you_mean(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "part.onnx"
    assert main(["extract", WHOLE, str(out), "--inputs", "input1", "--outputs", "output"]) == 2
    err = capsys.readouterr().err
    assert "'input1'" in err and "did you mean 'input.1'" in err
    assert not out.exists()


def test_extract_takes_types_from_the_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = str(fixture("debug_markers.onnx"))
    out = tmp_path / "part.onnx"
    assert main(["extract", model, str(out), "--no-observe", "--inputs", "/Debug_1_output_0",
                 "--outputs", "/convs.2/Conv_output_0"]) == 2
    err = capsys.readouterr().err
    assert "'/Debug_1_output_0'" in err and "node '/Debug_1' (my::Debug)" in err
    assert "hint: give its type, e.g. --inputs '/Debug_1_output_0:float32:" in err
    assert not out.exists()
    assert main(["extract", model, str(out), "--inputs", "/Debug_1_output_0:float32:[1,3,10,10]",
                 "--outputs", "/convs.2/Conv_output_0"]) == 0
    part = gk.load(out)
    assert part.graph.input[0].name == "/Debug_1_output_0"
    value = np.ones((1, 3, 10, 10), np.float32)
    assert gk.run(part, {"/Debug_1_output_0": value})["/convs.2/Conv_output_0"].shape == (1, 3, 10, 10)


def test_extract_needs_inputs_or_outputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["extract", WHOLE, str(tmp_path / "x.onnx")]) == 2
    assert "give --inputs, --outputs or both" in capsys.readouterr().err


def test_extract_refuses_to_overwrite_its_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "m.onnx"
    src.write_bytes(Path(WHOLE).read_bytes())
    before = digest(src)
    assert main(["extract", str(src), str(src), "--inputs", C12, "--outputs", C40]) == 2
    assert "refusing to overwrite" in capsys.readouterr().err
    assert digest(src) == before


def test_extract_external_weights_writes_only_kept_ones(ext_copy: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "part.onnx"
    assert main(["extract", str(ext_copy), str(out), "--inputs", "/relu/Relu_output_0", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["weight_bytes"] == (128 * 16 + 16) * 4
    assert (tmp_path / "part.data").stat().st_size < 16 * 1024


def test_expose_tensors_all_and_op_types(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "more.onnx"
    assert main(["expose", WHOLE, str(out), "--tensors", C21, "/Add_output_0"]) == 0
    assert "2 new output(s), 3 in all" in capsys.readouterr().out
    assert [v.name for v in gk.load(out).graph.output] == ["output", C21, "/Add_output_0"]
    assert main(["expose", WHOLE, str(out), "--all", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["added"]) == 10 and data["already_outputs"] == ["output"]
    assert main(["expose", WHOLE, str(out), "--op-types", "Add"]) == 0
    assert [v.name for v in gk.load(out).graph.output] == ["output", "/Add_output_0"]


def test_expose_errors_write_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "more.onnx"
    assert main(["expose", str(fixture("loop_scan.onnx")), str(out), "--tensors", "delta"]) == 2
    err = capsys.readouterr().err
    assert "'delta'" in err and "node 'loop' (Loop)" in err and "cannot output tensors" in err
    assert "hint: expose the outputs of node 'loop' (Loop) instead ('loop_acc')" in err
    assert main(["expose", WHOLE, str(out), "--op-types", "Conf"]) == 2
    assert "did you mean 'Conv'" in capsys.readouterr().err
    assert main(["expose", WHOLE, str(out)]) == 2
    assert "nothing to expose" in capsys.readouterr().err
    assert not out.exists()


def test_extract_through_python_m(tmp_path: Path) -> None:
    out = tmp_path / "part.onnx"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "graphkit", "extract", WHOLE, str(out), "--inputs", C12, "--outputs", C40],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert out.is_file()
    failed = subprocess.run(
        [sys.executable, "-m", "graphkit", "extract", WHOLE, str(tmp_path / "bad.onnx"), "--inputs", C21,
         "--outputs", "output"],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False,
    )
    assert failed.returncode == 2 and "node '/Add' (Add)" in failed.stderr
    assert not (tmp_path / "bad.onnx").exists()


def test_tensor_names_with_colons_are_names_and_typed_specs_are_types(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Relu", ["x"], ["h:float16"]), helper.make_node("Neg", ["h:float16"], ["y:0"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y:0", TensorProto.FLOAT, [2])])
    source = tmp_path / "colons.onnx"
    gk.save(gk.Model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])), source)
    out = tmp_path / "part.onnx"
    assert main(["extract", str(source), str(out), "--inputs", "h:float16", "--outputs", "y:0", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [(s["name"], s["dtype"]) for s in data["inputs"]] == [("h:float16", "float32")]  # (a name, not a type)
    assert main(["extract", str(source), str(out), "--inputs", "h:float16:float32:[2]", "--outputs", "y:0:float32:[2]",
                 "--json", "--overwrite"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["typed_by"] == {"h:float16": "user", "y:0": "user"}
