"""auto_mixed_precision: the fewest float32 nodes, found by measurement in few runs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import fixture
from test_convert import overflow_model

import graphkit as gk
from graphkit.cli import main


def rounding_model() -> gk.Model:
    """y = x + 1000.3 - 1000: float16 holds 1000.3 as 1000.5 (its spacing there is 0.5), an error of 0.2."""
    return gk.parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[4] x) => (float[4] y) {
            k = Constant <value = float[1] {1000.3}> ()
            m = Constant <value = float[1] {1000.0}> ()
            r = Relu (x)
            a = Add (r, k)
            y = Sub (a, m)
        }""")


def test_overflow_fails_plain_float16_and_passes_keeping_only_the_overflowing_nodes() -> None:
    model = overflow_model()
    x = np.full((2, 3), 0.5, np.float32)
    plain = gk.run(gk.to_float16(model, keep_io_types=True), {"x": x})["y"]
    assert not np.allclose(plain, x, atol=1e-3, rtol=1e-2)
    before = model.serialized()
    result = gk.auto_mixed_precision(model, keep_io_types=True, feeds={"x": x})
    assert model.serialized() == before
    assert result.passed
    assert [(k.node, k.op_type) for k in result.kept] == [("#3", "Mul"), ("#4", "Div")]  # not the first Mul
    assert all("overflows float16" in k.reason for k in result.kept)
    assert result.kept[0].local_max_abs is not None
    np.testing.assert_allclose(gk.run(result.model, {"x": x})["y"], x, rtol=1e-3)
    assert result.runs <= 10 and result.candidates == 3


def test_a_loss_without_overflow_is_found_by_bisection() -> None:
    result = gk.auto_mixed_precision(rounding_model(), keep_io_types=True,
                                     feed_options=gk.FeedOptions(seed=2, ranges={"x": (0.0, 1.0)}))
    assert result.passed
    assert [k.node for k in result.kept] == ["#3"]  # its weight stays float32; Relu and Sub stay float16
    assert all(k.reason == "the outputs leave tolerance when it computes in float16" for k in result.kept)
    assert result.output_errors["y"] <= 1e-3


def test_a_model_fine_in_float16_keeps_nothing(whole_model: gk.Model) -> None:
    result = gk.auto_mixed_precision(whole_model, keep_io_types=True)
    assert result.passed and result.kept == () and result.runs == 2  # the float32 run and the float16 run
    assert result.to_dict()["runs"] == 2


def test_unreachable_tolerance_is_reported_not_searched_node_by_node(whole_model: gk.Model) -> None:
    result = gk.auto_mixed_precision(whole_model, tolerance=gk.Tolerance(0.0, 0.0))  # float16 inputs: never exact
    assert not result.passed and result.runs <= 4


def test_cli_auto_mixed_writes_the_recipe_that_edit_replays(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "overflow.onnx"
    gk.save(overflow_model(), source)
    out = tmp_path / "mixed.onnx"
    assert main(["convert", str(source), str(out), "--float16", "--auto-mixed", "--keep-io-types", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["passed"] and [k["node"] for k in report["kept"]] == ["#3", "#4"] and report["runs"] <= 10
    recipe = tmp_path / "mixed.recipe.yaml"
    assert yaml.safe_load(recipe.read_text()) == [
        {"op": "to_float16", "keep_io_types": True, "keep_op": [], "keep_node": ["#3", "#4"]}]
    again = tmp_path / "again.onnx"
    assert main(["edit", str(source), str(again), "--recipe", str(recipe)]) == 0
    x = np.full((2, 3), 0.25, np.float32)
    np.testing.assert_allclose(gk.run(gk.load(again), {"x": x})["y"], x, rtol=1e-3)


def test_cli_auto_mixed_prints_why_and_exits_1_when_out_of_reach(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "m.onnx"
    assert main(["convert", str(fixture("whole_model.onnx")), str(out), "--float16", "--auto-mixed",
                 "--atol", "0", "--rtol", "0", "--save-recipe", str(tmp_path / "r.json")]) == 1
    text = capsys.readouterr().out
    assert "NOT within atol 0 / rtol 0" in text and "model run(s)" in text
    assert json.loads((tmp_path / "r.json").read_text())[0]["op"] == "to_float16"


def test_cli_auto_mixed_with_an_empty_output_name_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    from graphkit.cli import main

    assert main(["convert", str(fixture("whole_model.onnx")), "", "--float16", "--auto-mixed"]) == 2
    assert "names no file" in capsys.readouterr().err
