"""python -m graphkit edit / merge: options in order, recipes, --save-recipe, errors that write nothing."""

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


def edit(tmp_path: Path, source: str, *options: str) -> tuple[int, Path]:
    out = tmp_path / "out.onnx"
    return main(["edit", str(fixture(source)), str(out), *options]), out


def test_set_op_type_then_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = edit(tmp_path, "linear_func.onnx", "--set-op-type", "Add=Sub")
    assert code == 0 and "wrote" in capsys.readouterr().out
    model = gk.load(out)
    feeds = gk.make_feeds(model, feed_options=gk.FeedOptions(seed=1))
    np.testing.assert_allclose(gk.run(model, feeds)["output"], feeds["a"] * feeds["x"] - feeds["b"], rtol=1e-6)


def test_options_apply_in_command_line_order(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = edit(tmp_path, "linear_func.onnx", "--rename", "c=product", "--insert-after", "product=Relu",
                     "--rename-node", "Add=plus", "--json")
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert [s["op"] for s in report["steps"]] == ["rename_tensor", "insert_node", "rename_node"]
    assert [n.name for n in gk.load(out).graph.node] == ["Mul", "product/Relu", "plus"]


def test_srcnn_factor_from_the_command_line(tmp_path: Path) -> None:
    code, out = edit(tmp_path, "srcnn.onnx", "--input-from-constant", "/Constant_output_0=factor")
    assert code == 0
    model = gk.load(out)
    result = gk.run(model, {"factor": np.array([1, 1, 2, 2], np.float32)})["output"]
    assert result.shape == (1, 3, 64, 64)


def test_dynamic_and_fixed_dims(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = edit(tmp_path, "model_static.onnx", "--dynamic", "in:0=batch", "--json")
    assert code == 0
    assert json.loads(capsys.readouterr().out)["warnings"] == []
    assert gk.run(gk.load(out), {"in": np.ones((3, 3, 10, 10), np.float32)})["out"].shape == (3, 3, 8, 8)
    code = main(["edit", str(out), str(tmp_path / "fixed.onnx"), "--fixed", "in:0=2"])
    assert code == 0
    with pytest.raises(gk.FeedError):
        gk.run(gk.load(tmp_path / "fixed.onnx"), {"in": np.ones((3, 3, 10, 10), np.float32)})


def test_replace_op_cleanup_and_save_recipe_replays(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recipe = tmp_path / "r.yaml"
    code, out = edit(tmp_path, "debug_markers.onnx", "--replace-op", "my::Debug=Identity", "--cleanup",
                     "--set-attr", "/convs.0/Conv.group=1", "--allow-noop", "--save-recipe", str(recipe))
    assert code == 0
    assert "no change: cleanup" in capsys.readouterr().out
    replay = tmp_path / "replay.onnx"
    assert main(["edit", str(fixture("debug_markers.onnx")), str(replay), "--recipe", str(recipe), "--allow-noop"]) == 0
    assert gk.load(replay).proto == gk.load(out).proto
    assert gk.run(gk.load(out))["output"].shape == (1, 3, 10, 10)


def test_recipe_json_with_npy_relative_to_the_recipe(tmp_path: Path) -> None:
    (tmp_path / "recipes").mkdir()
    np.save(tmp_path / "recipes" / "b.npy", np.full((10, 10), 2.0, np.float32))
    recipe = tmp_path / "recipes" / "freeze.json"
    recipe.write_text(json.dumps([{"op": "input_to_initializer", "name": "b", "value": {"npy": "b.npy"}}]))
    code, out = edit(tmp_path, "linear_func.onnx", "--recipe", str(recipe))
    assert code == 0
    model = gk.load(out)
    feeds = gk.make_feeds(model, feed_options=gk.FeedOptions(seed=0))
    np.testing.assert_allclose(gk.run(model, feeds)["output"], feeds["a"] * feeds["x"] + 2.0, rtol=1e-6)


def test_freeze_and_set_initializer_from_npy_and_json(tmp_path: Path) -> None:
    np.save(tmp_path / "scales.npy", np.array([1, 1, 2, 2], np.float32))
    code, out = edit(tmp_path, "srcnn.onnx", "--set-initializer", f"/Constant_output_0={tmp_path / 'scales.npy'}")
    assert code == 0 and gk.run(gk.load(out))["output"].shape == (1, 3, 64, 64)
    code, out = edit(tmp_path, "linear_func.onnx", "--freeze", "b=" + json.dumps([[1.0] * 10] * 10))
    assert code == 0 and [i.name for i in gk.load(out).graph.input] == ["a", "x"]


def test_fold_constants_and_set_opset(tmp_path: Path) -> None:
    code, out = edit(tmp_path, "my_add.onnx", "--input-from-constant", "/Constant_output_0=two",
                     "--freeze", "two=2.0", "--set-opset", "com.example=1")
    assert code == 0
    model = gk.load(out)
    assert ("com.example", 1) in [(o.domain, o.version) for o in model.proto.opset_import]
    code = main(["edit", str(out), str(tmp_path / "clean.onnx"), "--remove-opset", "com.example"])
    assert code == 0


# ------------------------------------------------------------------------ errors write nothing


ERRORS = [
    ("linear_func.onnx", ["--set-op-type", "Ad=Sub"], "'Ad'", "did you mean"),
    ("linear_func.onnx", ["--set-op-type", "Add=Subb"], "'Subb'", "did you mean"),
    ("srcnn.onnx", ["--set-attr", "/conv1/Conv.group=1.5"], "'group'", "integer"),
    ("srcnn.onnx", ["--remove-attr", "/conv1/Conv.groop"], "'groop'", "did you mean"),
    ("linear_func.onnx", ["--rename", "outpt=z"], "'outpt'", "did you mean"),
    ("linear_func.onnx", ["--rename-node", "Add=Mul"], "'Mul'", "choose"),
    ("whole_model.onnx", ["--remove-node", "/Add"], "dangling", "bypass"),
    ("linear_func.onnx", ["--bypass", "Add=5"], "no input #5", "input_index"),
    ("linear_func.onnx", ["--insert-after", "cc=Relu"], "'cc'", "did you mean"),
    ("srcnn.onnx", ["--set-initializer", "conv1.bias=[1, 2]"], "shape", "allow_reshape"),
    ("linear_func.onnx", ["--freeze", "b=[[1]]"], "'b'", "same shape"),
    ("srcnn.onnx", ["--input-from-initializer", "/Constant_output_0"], "Constant", "--input-from-constant"),
    ("srcnn.onnx", ["--input-from-constant", "conv1.bias"], "initializer", "--input-from-initializer"),
    ("model_static.onnx", ["--dynamic", "in:7=batch"], "axis 7", "axis from 0"),
    ("model_static.onnx", ["--fixed", "inn:0=1"], "'inn'", "did you mean"),
    ("debug_markers.onnx", ["--replace-op", "my::Debg=Identity"], "my::Debg", "did you mean"),
    ("debug_markers.onnx", ["--remove-opset", "my"], "/Debug_0", "replace"),
    ("linear_func.onnx", ["--cleanup"], "cleanup changes nothing", "--allow-noop"),
    ("linear_func.onnx", ["--fold-constants"], "depends only on constants", "nothing to fold"),
    ("linear_func.onnx", ["--set-op-type", "Add"], "--set-op-type", "Add=Sub"),
]


@pytest.mark.parametrize(("source", "options", "names", "hint"), ERRORS, ids=[" ".join(e[1]) for e in ERRORS])
def test_errors_name_the_culprit_and_write_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   source: str, options: list[str], names: str, hint: str) -> None:
    before = digest(fixture(source))
    code, out = edit(tmp_path, source, *options)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "graphkit: error:" in err and names in err and "hint:" in err and hint in err.split("hint:")[1], err
    assert "Traceback" not in err
    assert not out.exists() and list(tmp_path.iterdir()) == []
    assert digest(fixture(source)) == before


def test_a_failing_later_step_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _out = edit(tmp_path, "linear_func.onnx", "--set-op-type", "Add=Sub", "--rename", "nope=z",
                     "--save-recipe", str(tmp_path / "r.json"))
    assert code == 2 and "'nope'" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_bad_recipe_file_names_the_step(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recipe = tmp_path / "r.json"
    recipe.write_text(json.dumps([{"op": "cleanup"}, {"op": "renam_tensor", "old": "a", "new": "b"}]))
    code, out = edit(tmp_path, "linear_func.onnx", "--recipe", str(recipe))
    err = capsys.readouterr().err
    assert code == 2 and "step 2" in err and "rename_tensor" in err and not out.exists()


def test_refuses_to_overwrite_the_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    copy = tmp_path / "m.onnx"
    copy.write_bytes(fixture("linear_func.onnx").read_bytes())
    before = digest(copy)
    assert main(["edit", str(copy), str(copy), "--set-op-type", "Add=Sub"]) == 2
    assert "--overwrite" in capsys.readouterr().err and digest(copy) == before


def test_no_edit_given(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = edit(tmp_path, "linear_func.onnx")
    assert code == 2 and "no edit given" in capsys.readouterr().err and not out.exists()


# ------------------------------------------------------------------------------------------ merge


def test_merge_verb(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "merged.onnx"
    code = main(["merge", str(fixture("model_static.onnx")), str(fixture("model_dynamic_0.onnx")), str(out),
                 "--connect", "out=in", "--prefixes", "a/", "b/", "--json"])
    assert code == 2 and "shapes differ" in capsys.readouterr().err and not out.exists()
    code = main(["merge", str(fixture("linear_func.onnx")), str(fixture("linear_func.onnx")), str(out),
                 "--connect", "output=a", "--prefixes", "p/", "q/", "--json"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["inputs"] == ["p/a", "p/x", "p/b", "q/x", "q/b"] and report["outputs"] == ["q/output"]
    model = gk.load(out)
    feeds = gk.make_feeds(model, feed_options=gk.FeedOptions(seed=3))
    first = feeds["p/a"] * feeds["p/x"] + feeds["p/b"]
    np.testing.assert_allclose(gk.run(model, feeds)["q/output"], first * feeds["q/x"] + feeds["q/b"], rtol=1e-5)


def test_python_dash_m_edit(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = tmp_path / "o.onnx"
    proc = subprocess.run([sys.executable, "-m", "graphkit", "edit", str(fixture("debug_markers.onnx")), str(out),
                           "--replace-op", "my::Debug=Identity"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert {n.op_type for n in gk.load(out).graph.node} == {"Conv", "Identity"}
