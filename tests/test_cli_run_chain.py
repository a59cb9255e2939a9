"""python -m graphkit run-chain: per-fragment report, comparison with the whole model, exit codes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import FIXTURES, fixture

import graphkit as gk
from graphkit.cli import main


def _split(tmp_path: Path, *flags: str, model: Path | None = None) -> Path:
    out = tmp_path / "parts"
    assert main(["split", str(model or fixture("whole_model.onnx")), str(out), *flags]) == 0
    return out


def test_run_chain_reports_fragments_and_an_exact_match(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = _split(tmp_path, "--parts", "3")
    capsys.readouterr()
    assert main(["run-chain", str(out), "--opt-level", "disable", "--seed", "4"]) == 0
    text = capsys.readouterr().out
    assert "part_00.onnx" in text and "part_02.onnx" in text and "peak output" in text
    assert "whole model: load" in text
    assert "output  exact   0" in text
    assert "OK: the chain matches the whole model exactly" in text


def test_run_chain_json_and_save_match_the_whole_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = _split(tmp_path, "--at", "/convs1/convs1.2/Conv_output_0", "/convs2/convs2.1/Conv_output_0")
    capsys.readouterr()
    x = np.random.default_rng(0).standard_normal((1, 3, 20, 20)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    code = main(["run-chain", str(out), "--input", str(tmp_path / "x.npy"), "--save", str(tmp_path / "y.npz"),
                 "--json"])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] and data["compared"] and len(data["fragments"]) == 3
    assert data["feeds"][0]["source"] == "given"
    whole = gk.run(gk.load(fixture("whole_model.onnx")), {"input.1": x})["output"]
    with np.load(tmp_path / "y.npz") as saved:
        np.testing.assert_allclose(saved["output"], whole, rtol=1e-5, atol=1e-6)


def test_run_chain_exit_1_on_mismatch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copy(FIXTURES / "model_dynamic_0.onnx", tmp_path / "m.onnx")
    out = _split(tmp_path, "--parts", "1", model=tmp_path / "m.onnx")
    capsys.readouterr()
    code = main(["run-chain", str(out), "--source", str(fixture("model_static.onnx")), "--input",
                 f"in={_ones(tmp_path)}"])
    text = capsys.readouterr().out
    assert code == 0, text  # same weights, same conv: matches
    other = gk.GraphBuilder("other")
    other.input("in", "float32", ["batch", 3, 10, 10])
    other.node("Identity", ["in"], name="id", outputs=["pre"])
    other.node("MaxPool", ["pre"], name="pool", outputs=["out"], kernel_shape=[3, 3])
    other.output("out", "float32", ["batch", 3, 8, 8])
    gk.save(other.build(), tmp_path / "other.onnx")
    assert main(["run-chain", str(out), "--source", str(tmp_path / "other.onnx")]) == 1
    text = capsys.readouterr().out
    assert "MISMATCH" in text


def _ones(tmp_path: Path) -> Path:
    np.save(tmp_path / "ones.npy", np.ones((1, 3, 10, 10), np.float32))
    return tmp_path / "ones.npy"


def test_run_chain_without_the_source_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copy(FIXTURES / "whole_model.onnx", tmp_path / "m.onnx")
    out = _split(tmp_path, "--parts", "2", model=tmp_path / "m.onnx")
    (tmp_path / "m.onnx").unlink()
    capsys.readouterr()
    assert main(["run-chain", str(out)]) == 0
    assert "not compared: source model" in capsys.readouterr().out
    assert main(["run-chain", str(out), "--no-compare", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["compared"] is False and data["comparison"].startswith("comparison turned off")


def test_run_chain_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run-chain", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no split manifest" in err and "hint:" in err
    out = _split(tmp_path, "--parts", "2")
    capsys.readouterr()
    assert main(["run-chain", str(out), "--shape", "input.1=1x3x10x10"]) == 2
    err = capsys.readouterr().err
    assert "input 'input.1'" in err and "dim 2 is fixed to 20" in err and "Traceback" not in err


def test_control_flow_split_and_chain_through_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = _split(tmp_path, "--parts", "3", model=fixture("loop_scan.onnx"))
    capsys.readouterr()
    assert main(["run-chain", str(out), "--opt-level", "disable", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["exact"] and {o["name"] for o in data["outputs"]} == {"y", "scan_state"}


def test_run_chain_on_an_unavailable_provider_exits_2_naming_the_available_ones(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from graphkit import _ort

    if "CUDAExecutionProvider" in _ort.available_providers():
        pytest.skip("this machine has CUDA")
    out = _split(tmp_path, "--parts", "2")
    capsys.readouterr()
    assert main(["run-chain", str(out), "--provider", "cuda"]) == 2
    err = capsys.readouterr().err
    assert "no provider 'cuda'" in err and "CPUExecutionProvider" in err
    assert "hint: pick one of these with --provider" in err and "Traceback" not in err


def test_run_chain_reads_a_manifest_with_a_sequence_crossing_a_cut(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    # split wrote 'sequence(float32)' and run-chain refused its own manifest as "edited or damaged"
    # (found on the onnx wheel's test_sequence_model1)
    source = tmp_path / "sequence.onnx"
    gk.save(gk.parse_model("""<ir_version: 8, opset_import: ["" : 17]>
        g (float[2, 3] x, float[1, 3] y) => (float[3, 3] out) {
            s = SequenceConstruct (x, y)
            out = ConcatFromSequence <axis = 0> (s)
        }"""), source)
    parts = _split(tmp_path, "--parts", "2", model=source)
    assert "sequence(float32)" in (parts / "manifest.json").read_text()
    assert main(["run-chain", str(parts)]) == 0, capsys.readouterr().err
    assert "matches the whole model exactly" in capsys.readouterr().out
    data = json.loads((parts / "manifest.json").read_text())
    data["fragments"][0]["outputs"][0]["dtype"] = "sequence(float99)"
    (parts / "manifest.json").write_text(json.dumps(data))
    assert main(["run-chain", str(parts)]) == 2
    assert "'sequence(float99)'" in capsys.readouterr().err  # (a damaged type is still refused)
