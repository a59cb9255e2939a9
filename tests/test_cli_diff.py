"""The diff verb, in-process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import digest, fixture, planted_changes
from onnx import numpy_helper

import graphkit as gk
from graphkit.cli import main


def test_cli_diff(tmp_path: Path, whole_model: gk.Model, capsys: pytest.CaptureFixture[str]) -> None:
    b = tmp_path / "b.onnx"
    gk.save(planted_changes(whole_model), b)
    before = digest(b)
    assert main(["diff", str(fixture("whole_model.onnx")), str(b), "--atol", "1e-6"]) == 1
    out = capsys.readouterr().out
    assert "~ node '/Add': op Add -> Sub" in out
    assert "+ node 'relu_new': Relu reading '/convs4/convs4.1/Conv_output_0'" in out
    assert "9 differences" in out and "1 by structure" in out
    assert main(["diff", str(fixture("whole_model.onnx")), str(b), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["identical"] is False and data["counts"]["changed node"] == 4
    assert digest(b) == before


def test_cli_diff_identical_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(fixture("whole_model.onnx"))
    assert main(["diff", path, path]) == 0
    assert "identical (11 nodes matched by name)" in capsys.readouterr().out
    assert main(["diff", path, str(tmp_path / "missing.onnx")]) == 2
    err = capsys.readouterr().err
    assert "missing.onnx" in err and "hint:" in err


def test_cli_diff_shows_values_across_a_dtype_change(tmp_path: Path, whole_model: gk.Model,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    half = whole_model.copy()
    weight = next(t for t in half.lazy_proto.graph.initializer if t.name == "convs1.0.weight")
    value = gk.tensor_value(whole_model, weight).astype("float16")
    value.flat[0] += 1.2
    weight.CopyFrom(numpy_helper.from_array(value, weight.name))
    b = tmp_path / "half.onnx"
    gk.save(half, b, external=False)
    assert main(["diff", str(fixture("whole_model.onnx")), str(b)]) == 1
    out = capsys.readouterr().out
    assert "float32 [3, 3, 3, 3] -> float16 [3, 3, 3, 3]; values after casting to float32: " in out
    assert "max abs change 1.2" in out
