"""python -m graphkit edit / merge: options in order, recipes, --save-recipe, errors that write nothing."""

from __future__ import annotations

import json
import os
import re
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
    code, out = edit(tmp_path, "debug_markers.onnx", "--replace-op", "my::Debug=Identity", "--drop-attributes", "--cleanup",
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


def test_fold_constants_shows_its_passes_as_a_bar(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = edit(tmp_path, "my_add.onnx", "--fold-constants", "--progress")
    err = capsys.readouterr().err
    assert code == 0 and "graphkit edit: fold_constants" in err and " passes" in err
    assert re.search(r"\| (\d+)/\1 \[", err), err  # the bar reached its total
    quiet = tmp_path / "quiet.onnx"
    assert main(["edit", str(fixture("my_add.onnx")), str(quiet), "--fold-constants", "--no-progress"]) == 0
    assert "graphkit edit" not in capsys.readouterr().err
    assert out.read_bytes() == quiet.read_bytes()  # the bar changes nothing in the result
    assert len(gk.load(out).graph.node) == len(gk.load(fixture("my_add.onnx")).graph.node) - 1


def test_an_error_after_a_bar_starts_its_own_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = edit(tmp_path, "dcn.onnx", "--fold-constants", "--progress")
    err = capsys.readouterr().err
    assert code == 2 and "graphkit edit: fold_constants" in err
    lines = re.split(r"[\r\n]", err)
    assert any(line.startswith("graphkit: error: fold_constants: no node of") for line in lines), err


# ------------------------------------------------------------------------ errors write nothing


ERRORS = [
    ("linear_func.onnx", ["--set-op-type", "Ad=Sub"], "'Ad'", "did you mean"),
    ("linear_func.onnx", ["--set-op-type", "Add=Subb"], "'Subb'", "did you mean"),
    ("srcnn.onnx", ["--set-attr", "/conv1/Conv.group=1.5"], "'group'", "integer"),
    ("srcnn.onnx", ["--remove-attr", "/conv1/Conv.groop"], "'groop'", "did you mean"),
    ("linear_func.onnx", ["--rename", "outpt=z"], "'outpt'", "did you mean"),
    ("linear_func.onnx", ["--rename-node", "Add=Mul"], "'Mul'", "choose"),
    ("whole_model.onnx", ["--remove-node", "/Add"], "dangling", "bypass"),
    ("linear_func.onnx", ["--bypass", "Add=5"], "no input #5", "--bypass NODE=INDEX"),
    ("linear_func.onnx", ["--insert-after", "cc=Relu"], "'cc'", "did you mean"),
    ("srcnn.onnx", ["--set-initializer", "conv1.bias=[1, 2]"], "shape", "--allow-reshape"),
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


#: What a Python keyword or call looks like in a hint (``downstream=True``, ``prefixes=('a/'``, ``set_dims(``).
_PYTHON_WORDS = re.compile(r"\b[a-z_]+=(True|False|None|\[|\(|\{|')|\b(set|remove|insert|bypass|rename|replace|"
                           r"constant|initializer|input)_[a-z_]+\(")

MORE_ERRORS = [
    ("whole_model.onnx", ["--remove-node", "/convs1/convs1.0/Conv"], "dangling", "--remove-node-downstream"),
    ("srcnn.onnx", ["--set-initializer", "conv1.bias=[1, 2]", "--allow-reshape", "--set-attr", "/conv1/Conv.grop=1"],
     "grop", "did you mean"),
    ("debug_markers.onnx", ["--replace-op", "my::Debug=Identity"], "['name']", "--drop-attributes"),
    ("linear_func.onnx", ["--set-opset", "ai.onnx=13", "--replace-op", "Add=Gelu"], "introduced in opset 20",
     "--set-opset ai.onnx=20"),
    ("linear_func.onnx", ["--remove-output", "output"], "only graph output", "--add-output"),
    ("linear_func.onnx", ["--rename-pattern", "^.*$=same"], "one name", "pattern"),
    ("linear_func.onnx", ["--replace-span", "x:c"], "INPUTS:OUTPUTS=MODEL.onnx", "--replace-span"),
    ("linear_func.onnx", ["--allow-reshape"], "--allow-reshape must follow --set-initializer", "--allow-reshape"),
]
ERRORS += MORE_ERRORS


@pytest.mark.parametrize(("source", "options", "names", "hint"), ERRORS, ids=[" ".join(e[1]) for e in ERRORS])
def test_errors_name_the_culprit_and_write_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   source: str, options: list[str], names: str, hint: str) -> None:
    before = digest(fixture(source))
    code, out = edit(tmp_path, source, *options)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "graphkit: error:" in err and names in err and "hint:" in err and hint in err.split("hint:")[1], err
    assert not _PYTHON_WORDS.search(err.split("hint:")[1]), err
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
                           "--replace-op", "my::Debug=Identity", "--drop-attributes"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert {n.op_type for n in gk.load(out).graph.node} == {"Conv", "Identity"}


def test_replace_span_round_trip_and_a_decomposed_layer_norm(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from test_splice import WEIGHTS, X, decomposed_layer_norm, expected_block, transformer_block

    block, span, ln = tmp_path / "block.onnx", tmp_path / "span.onnx", tmp_path / "ln.onnx"
    gk.save(transformer_block(), block)
    gk.save(decomposed_layer_norm(WEIGHTS["g1"], WEIGHTS["b1"]), ln)
    assert main(["extract", str(block), str(span), "--inputs", "ln1_out", "h", "--outputs", "y"]) == 0
    back = tmp_path / "back.onnx"
    assert main(["edit", str(block), str(back), "--replace-span", f"ln1_out,h:y={span}"]) == 0
    assert np.array_equal(gk.run(gk.load(back), {"x": X})["y"], gk.run(gk.load(block), {"x": X})["y"])
    out = tmp_path / "decomposed.onnx"
    recipe = tmp_path / "r.yaml"
    assert main(["edit", str(block), str(out), "--replace-span", f"x=x:ln1_out=ln={ln}", "--save-recipe", str(recipe)]) == 0
    assert "replacement: ln.onnx" in recipe.read_text()
    np.testing.assert_allclose(gk.run(gk.load(out), {"x": X})["y"], expected_block(X), atol=1e-5)
    capsys.readouterr()
    assert main(["edit", str(block), str(tmp_path / "bad.onnx"), "--replace-span", f"x,h:ln2_out={ln}"]) == 2
    err = capsys.readouterr().err
    assert "the span has 2 inputs ('x', 'h')" in err and "--replace-span 'SPAN_IN=MODEL_IN" in err
    assert "inputs={" not in err


def test_replace_span_names_with_colons_and_commas_are_escaped(tmp_path: Path) -> None:
    b = gk.GraphBuilder("tf")
    x = b.input("in:0", "float32", [2])
    r = b.node("Relu", [x], name="relu", outputs=["a,b:0"])
    b.output(b.node("Neg", [r], name="neg", outputs=["out:0"]), "float32", [2])
    model, part = tmp_path / "tf.onnx", tmp_path / "abs.onnx"
    gk.save(b.build(), model)
    b = gk.GraphBuilder("abs")
    v = b.input("v", "float32", [2])
    b.output(b.node("Abs", [v], name="abs", outputs=["w"]), "float32", [2])
    gk.save(b.build(), part)
    out = tmp_path / "out.onnx"
    assert main(["edit", str(model), str(out), "--replace-span", rf"in\:0:a\,b\:0={part}"]) == 0
    x = np.array([-2.0, 3.0], np.float32)
    np.testing.assert_allclose(gk.run(gk.load(out), {"in:0": x})["out:0"], [-2.0, -3.0])


def test_rename_pattern_prefix_scope_and_outputs_from_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = edit(tmp_path, "whole_model.onnx", "--rename-pattern", "^/(convs\\d)/=\\1.", "--scope", "nodes",
                     "--prefix", "m_", "--scope", "tensors", "--add-output", "m_/Add_output_0", "--json")
    assert code == 0, capsys.readouterr().err
    model = gk.load(out)
    assert "convs1.convs1.0/Conv" in {n.name for n in model.graph.node}
    assert [i.name for i in model.graph.input] == ["m_input.1"]
    assert [o.name for o in model.graph.output] == ["m_output", "m_/Add_output_0"]
    whole = gk.load(fixture("whole_model.onnx"))
    x = gk.make_feeds(whole)["input.1"]
    got = gk.run(model, {"m_input.1": x})
    want = gk.run(whole, {"input.1": x}, outputs=["output", "/Add_output_0"])
    assert np.array_equal(got["m_output"], want["output"]) and np.array_equal(got["m_/Add_output_0"], want["/Add_output_0"])
    capsys.readouterr()
    assert main(["edit", str(fixture("whole_model.onnx")), str(tmp_path / "x.onnx"), "--scope", "nodes"]) == 2
    assert "--scope 'nodes' must follow --rename-pattern or --prefix" in capsys.readouterr().err


def test_a_mistyped_name_in_a_late_step_is_reported_before_any_step_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from graphkit import _recipe as recipe

    ran: list[str] = []
    real = recipe._apply
    monkeypatch.setattr(recipe, "_apply", lambda model, op, args, check: ran.append(op) or real(model, op, args, check=check))
    code, _ = edit(tmp_path, "whole_model.onnx", "--rename", "/Add_output_0=sum", "--insert-after", "sum=Relu",
                   "--set-op-type", "sum/Relu=Sigmoid", "--fold-constants", "--set-attr", "/convs4/convs4.0/Cnv.group=1")
    err = capsys.readouterr().err
    assert code == 2 and ran == []
    assert "step 5 (set_attribute): no node named '/convs4/convs4.0/Cnv'" in err and "checked before any step ran" in err
    assert "'/convs4/convs4.0/Conv'" in err.split("hint:")[1]


def test_a_no_op_step_among_others_is_a_note(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = edit(tmp_path, "linear_func.onnx", "--cleanup", "--set-op-type", "Add=Sub")
    assert code == 0
    text = capsys.readouterr().out
    assert "no change: cleanup" in text and "note: step 1 (cleanup): cleanup changes nothing" in text
    code, _ = edit(tmp_path, "linear_func.onnx", "--cleanup", "--rename", "x=x")
    assert code == 2 and "none of the 2 steps changes anything" in capsys.readouterr().err


def test_a_node_set_to_its_own_operator_is_a_no_op(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for options in (["--set-op-type", "Add=Add"], ["--set-op-type", "Add=ai.onnx::Add"], ["--replace-op", "Add=Add"]):
        code, out = edit(tmp_path, "linear_func.onnx", *options)
        err = capsys.readouterr().err
        assert code == 2 and "changes nothing in" in err and "--allow-noop" in err and not out.exists()
    code, out = edit(tmp_path, "linear_func.onnx", "--set-op-type", "Add=Add", "--set-op-type", "Add=Sub")
    assert code == 0
    assert "note: step 1 (set_op_type): set_op_type Add changes nothing" in capsys.readouterr().out
    model = gk.load(out)
    feeds = gk.make_feeds(model, feed_options=gk.FeedOptions(seed=3))
    np.testing.assert_allclose(gk.run(model, feeds)["output"], feeds["a"] * feeds["x"] - feeds["b"], rtol=1e-6)


def test_tensors_and_nodes_inside_a_local_function_from_the_command_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "func.onnx"
    gk.save(gk.parse_model("""
        <ir_version: 8, opset_import: ["" : 17, "local" : 1]>
        g (float[4] x) => (float[4] y) {
            t = local.Block(x)
            y = Relu(t)
        }
        <domain: "local", opset_import: ["" : 17]>
        Block (a) => (b) {
            two = Constant<value = float[1] {2.0}>()
            scaled = Mul(a, two)
            b = LeakyRelu<alpha = 0.5>(scaled)
        }"""), source)
    np.save(tmp_path / "one.npy", np.ones(1, np.float32))
    out = tmp_path / "out.onnx"
    assert main(["edit", str(source), str(out), "--insert-after", "Block/scaled=Sub", "--operand", str(tmp_path / "one.npy"),
                 "--set-initializer", "Block/two=[3.0]", "--remove-attr", "Block/LeakyRelu#0.alpha",
                 "--set-op-type", "Block/LeakyRelu#0=Neg",
                 "--rename", "Block/scaled=tripled"]) == 0
    x = np.array([-2.0, -1.0, 1.0, 2.0], np.float32)
    np.testing.assert_allclose(gk.run(gk.load(out), {"x": x})["y"], np.maximum(-(3 * x - 1), 0))
    capsys.readouterr()
    assert main(["edit", str(source), str(out), "--fixed", "Block/a:0=4"]) == 2
    err = capsys.readouterr().err
    assert "'Block/a' is tensor 'a' of local function 'Block'" in err
    assert "hint: inside a function, --rename, --insert-after and --set-initializer" in err and "rename_tensor" not in err


def _scaled_model(path: Path) -> None:
    b = gk.GraphBuilder("net")
    x = b.input("input", "float32", ["batch", 3, 2, 2])
    w = b.initializer(np.array([1.0, 2.0, -1.0], np.float32).reshape(1, 3, 1, 1), "w")
    b.output(b.node("Mul", [x, w], name="mul", outputs=["output"]), "float32", ["batch", 3, 2, 2])
    gk.save(b.build(), path)


def test_insert_with_operands_and_attributes_in_one_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model, out, recipe = tmp_path / "net.onnx", tmp_path / "pre.onnx", tmp_path / "pre.yaml"
    _scaled_model(model)
    std = np.array([0.229, 0.224, 0.225], np.float32).reshape(3, 1, 1)
    np.save(tmp_path / "std.npy", std)
    code = main(["edit", str(model), str(out),
                 "--insert-after", "input=Sub", "--operand", "[[[0.485]], [[0.456]], [[0.406]]]",
                 "--insert-after", "input/Sub_output=Div", "--operand", str(tmp_path / "std.npy"),
                 "--insert-after", "output=Cast", "--attr", "to=float16", "--save-recipe", str(recipe)])
    assert code == 0, capsys.readouterr().err
    result = gk.load(out)
    assert [n.op_type for n in result.graph.node] == ["Sub", "Div", "Mul", "Cast"]
    assert result.graph.output[0].name == "output" and result.graph.output[0].type.tensor_type.elem_type == 10
    x = np.random.default_rng(0).random((2, 3, 2, 2), dtype=np.float32)
    mean = np.array([0.485, 0.456, 0.406], np.float32).reshape(3, 1, 1)
    want = ((x - mean) / std * np.array([1.0, 2.0, -1.0], np.float32).reshape(1, 3, 1, 1)).astype(np.float16)
    got = gk.run(result, {"input": x})["output"]
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=1e-3)
    replay = tmp_path / "replay.onnx"
    assert main(["edit", str(model), str(replay), "--recipe", str(recipe)]) == 0
    assert gk.load(replay).proto == result.proto
    capsys.readouterr()
    assert main(["edit", str(model), str(tmp_path / "x.onnx"), "--operand", "1.0"]) == 2
    assert "--operand '1.0' must follow --insert-after" in capsys.readouterr().err
    assert main(["edit", str(model), str(tmp_path / "x.onnx"), "--insert-after", "output=Cast",
                 "--attr", "to=float17"]) == 2
    assert "'float17' is none" in capsys.readouterr().err


def test_edit_help_documents_node_addressing(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["edit", "--help"]) == 0
    text = capsys.readouterr().out
    assert "#N (the N-th node of the main graph" in text and "OP#K" in text and "FUNCTION/NODE" in text
    assert "as FUNCTION/TENSOR" in text
    readme = (ROOT / "README.md").read_text()
    assert "`OP#K`" in readme and "`FUNCTION/NODE`" in readme and "`FUNCTION/TENSOR`" in readme


def test_a_recipe_replays_every_new_edit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from test_splice import HIDDEN, SEQ, WEIGHTS, X, _layer_norm, decomposed_layer_norm

    b = gk.GraphBuilder("net", opset=20)
    b.opset("com.example", 1)
    x = b.input("x", "float32", [1, SEQ, HIDDEN])
    g1, b1 = b.initializer(WEIGHTS["g1"], "g1"), b.initializer(WEIGHTS["b1"], "b1")
    ln = b.node("LayerNormalization", [x, g1, b1], name="ln", outputs=["ln1_out"], axis=-1, epsilon=1e-5)
    gelu = b.node("MyGelu", [ln], name="act", outputs=["act_out"], domain="com.example", approximate="tanh")
    b.output(b.node("MatMul", [gelu, b.initializer(WEIGHTS["wq"], "w")], name="proj", outputs=["y"]),
             "float32", [1, SEQ, HIDDEN])
    b.output(b.node("Identity", [ln], name="copy", outputs=["aux"]), "float32", [1, SEQ, HIDDEN])
    net, part = tmp_path / "net.onnx", tmp_path / "ln.onnx"
    gk.save(b.build(check=False), net)
    gk.save(decomposed_layer_norm(WEIGHTS["g1"], WEIGHTS["b1"]), part)
    out, recipe, replay = tmp_path / "out.onnx", tmp_path / "all.yaml", tmp_path / "replay.onnx"
    options = ["--replace-span", f"x:ln1_out={part}", "--replace-op", "com.example::MyGelu=Gelu",
               "--insert-after", "x=Mul", "--operand", "2.0", "--rename-pattern", "^ln1_=norm_", "--scope", "tensors",
               "--prefix", "v2/", "--scope", "nodes", "--remove-output", "aux", "--add-output", "norm_out",
               "--insert-after", "y=Cast", "--attr", "to=float16", "--set-initializer", f"w={tmp_path / 'w.npy'}",
               "--allow-reshape"]
    np.save(tmp_path / "w.npy", WEIGHTS["wk"])
    assert main(["edit", str(net), str(out), *options, "--save-recipe", str(recipe)]) == 0, capsys.readouterr().err
    steps = [s["op"] for s in (__import__("yaml").safe_load(recipe.read_text()))]
    assert steps == ["replace_span", "replace_op", "insert_node", "rename_pattern", "rename_pattern", "remove_output",
                     "add_output", "insert_node", "set_initializer"]
    assert main(["edit", str(net), str(replay), "--recipe", str(recipe)]) == 0, capsys.readouterr().err
    assert gk.load(replay).proto == gk.load(out).proto
    normed = _layer_norm(2 * X.astype(np.float64), WEIGHTS["g1"], WEIGHTS["b1"])
    gelu_tanh = 0.5 * normed * (1 + np.tanh(np.sqrt(2 / np.pi) * (normed + 0.044715 * normed**3)))
    got = gk.run(gk.load(replay), {"x": X})
    assert got["y"].dtype == np.float16 and list(got) == ["y", "norm_out"]
    np.testing.assert_allclose(got["y"].astype(np.float64), gelu_tanh @ WEIGHTS["wk"], rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(got["norm_out"], normed, rtol=1e-4, atol=1e-5)


def test_a_recipe_replays_a_side_by_side_merge_and_edits_inside_a_function(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gk.save(gk.parse_model("""
        <ir_version: 8, opset_import: ["" : 17, "local" : 1]>
        net (float[4] x) => (float[4] y) {
            t = local.Block(x)
            y = Relu(t)
        }
        <domain: "local", opset_import: ["" : 17]>
        Block (a) => (b) {
            two = Constant<value = float[1] {2.0}>()
            scaled = Mul(a, two)
            b = LeakyRelu<alpha = 0.5>(scaled)
        }"""), tmp_path / "net.onnx")
    gk.save(gk.parse_model("""
        <ir_version: 8, opset_import: ["" : 17]>
        head (float[4] x) => (float[4] z) {
            z = Neg(x)
        }"""), tmp_path / "head.onnx")
    np.save(tmp_path / "one.npy", np.ones(1, np.float32))
    (tmp_path / "r.yaml").write_text("""
- {op: merge, other: head.onnx}
- {op: set_attribute, node: Block/LeakyRelu#0, attribute: alpha, value: 0.25}
- {op: rename_tensor, old: Block/scaled, new: tripled}
- {op: insert_node, after: Block/tripled, op_type: Sub, inputs: [{npy: one.npy}]}
- {op: set_initializer, tensor: Block/two, value: [3.0]}
- {op: replace_op, old_op: Neg, new_op_type: Abs}
""")
    out = tmp_path / "out.onnx"
    assert main(["edit", str(tmp_path / "net.onnx"), str(out), "--recipe", str(tmp_path / "r.yaml")]) == 0, \
        capsys.readouterr().err
    x = np.array([-2.0, -1.0, 1.0, 2.0], np.float32)
    got = gk.run(gk.load(out), {"x": x})
    assert list(got) == ["y", "z"] and [i.name for i in gk.load(out).graph.input] == ["x"]
    leaky = np.where(3 * x - 1 > 0, 3 * x - 1, 0.25 * (3 * x - 1))
    np.testing.assert_allclose(got["y"], np.maximum(leaky, 0))
    np.testing.assert_allclose(got["z"], np.abs(x))


def test_replace_span_with_a_looping_link_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    loop = tmp_path / "loop.onnx"
    loop.symlink_to(loop)  # (found by the fuzz campaign: a RuntimeError traceback)
    out = tmp_path / "out.onnx"
    code = main(["edit", str(fixture("whole_model.onnx")), str(out), "--replace-span", f"a:b={loop}"])
    assert code == 2 and not out.exists()
    assert "loop.onnx" in capsys.readouterr().err
