"""The simplify verb: the op-count table, verification against the input, exit codes, nothing written on error."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import ROOT, digest, fixture

import graphkit as gk
from graphkit.cli import main

EXPORTED = """<ir_version: 8, opset_import: ["" : 17]>
g (float[2, 6] x) => (float[2, 2, 3] y) <float[6] k = {1.0, 2.0, 3.0, 4.0, 5.0, 6.0}> {
  s = Shape(x)
  i0 = Constant<value = int64 {0}>()
  b = Gather(s, i0)
  ax = Constant<value = int64[1] {0}>()
  bu = Unsqueeze(b, ax)
  rest = Constant<value = int64[2] {2, 3}>()
  shp = Concat<axis = 0>(bu, rest)
  kk = Identity(k)
  xk = Mul(x, kk)
  y = Reshape(xk, shp)
}"""


@pytest.fixture
def exported(tmp_path: Path) -> Path:
    path = tmp_path / "exported.onnx"
    gk.save(gk.parse_model(EXPORTED), path)
    return path


def test_simplify_prints_the_op_table_and_writes_a_verified_model(exported: Path, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out.onnx"
    before = digest(exported)
    assert main(["simplify", str(exported), str(out)]) == 0
    text = capsys.readouterr().out
    assert "Constant   3      0" in text and "Shape      1      0" in text and "total      10     2" in text
    assert "verified: 1 output(s) within tolerance" in text and f"wrote {out}" in text
    result = gk.load(out)
    onnx.checker.check_model(str(out), full_check=True)
    assert [n.op_type for n in result.graph.node] == ["Mul", "Reshape"]
    feeds = {"x": np.arange(12, dtype=np.float32).reshape(2, 6)}
    np.testing.assert_array_equal(gk.run(result, feeds)["y"], gk.run(gk.load(exported), feeds)["y"])
    assert digest(exported) == before


def test_simplify_json(exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simplify", str(exported), str(tmp_path / "o.onnx"), "--json", "--no-verify"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["nodes_before"] == 10 and data["nodes_after"] == 2 and data["verified"] is None
    assert data["after"] == {"Mul": 1, "Reshape": 1} and data["changes"]["constants"] == 3


def test_a_result_that_differs_is_not_written(exported: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    import graphkit.cli.simplify as verb

    real = verb.simplify_with_report

    def wrong(model: gk.Model, **kw: object) -> gk.Simplification:
        report = real(model, **kw)  # type: ignore[arg-type]
        broken = gk.set_op_type(report.model, "#0", "Add")
        return gk.Simplification(broken, report.before, report.after, report.changes, report.rounds)

    monkeypatch.setattr(verb, "simplify_with_report", wrong)
    out = tmp_path / "out.onnx"
    assert main(["simplify", str(exported), str(out)]) == 1
    captured = capsys.readouterr()
    assert "not written" in captured.err and "first divergence: node" in captured.err and "(Add)" in captured.err
    assert not out.exists()
    assert main(["simplify", str(exported), str(out), "--no-verify"]) == 0
    assert out.exists()


def test_a_contradiction_exits_2_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.onnx"
    gk.save(gk.parse_model('<ir_version: 8, opset_import: ["" : 17]>\ng (float[2, 3] x) => (float[2, 3] y) '
                           "<float[2, 4] r> { r = Relu(x)\n y = Neg(r) }"), bad)
    out = tmp_path / "out.onnx"
    assert main(["simplify", str(bad), str(out)]) == 2
    err = capsys.readouterr().err
    assert "graphkit: error:" in err and "contradicts itself at node #0 (Relu)" in err and "'r'" in err and "hint:" in err
    assert "Traceback" not in err and not out.exists()


def test_skip_leaves_a_pass_out(exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "o.onnx"
    assert main(["simplify", str(exported), str(out), "--skip", "identities", "--skip", "shapes", "--skip", "reshapes",
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["after"].get("Identity") == 1 and data["after"].get("Shape") == 1


def test_simplify_through_python_dash_m(tmp_path: Path) -> None:
    out = tmp_path / "o.onnx"
    done = subprocess.run([sys.executable, "-m", "graphkit", "simplify", str(fixture("if_outer_scope.onnx")),
                           str(out)], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "verified" in done.stdout and out.exists()


def test_the_passes_are_edit_options_and_recipe_steps(exported: Path, tmp_path: Path) -> None:
    out, recipe = tmp_path / "edited.onnx", tmp_path / "r.yaml"
    assert main(["edit", str(exported), str(out), "--constants-to-initializers", "--remove-identities", "--fold-shapes",
                 "--save-recipe", str(recipe)]) == 0
    assert [n.op_type for n in gk.load(out).graph.node] == ["Mul", "Reshape"]
    again = tmp_path / "again.onnx"
    assert main(["edit", str(exported), str(again), "--recipe", str(recipe)]) == 0
    assert [n.op_type for n in gk.load(again).graph.node] == ["Mul", "Reshape"]
    once = tmp_path / "once.onnx"
    assert main(["edit", str(exported), str(once), "--simplify"]) == 0
    assert [n.op_type for n in gk.load(once).graph.node] == ["Mul", "Reshape"]
    assert main(["edit", str(once), str(tmp_path / "noop.onnx"), "--simplify"]) == 2


def test_progress_bars_for_the_passes_and_the_verification(exported: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simplify", str(exported), str(tmp_path / "bar.onnx"), "--progress"]) == 0
    err = capsys.readouterr().err
    assert "graphkit simplify" in err and "passes" in err
    assert "graphkit simplify: verify" in err
    assert main(["simplify", str(exported), str(tmp_path / "quiet.onnx"), "--no-progress"]) == 0
    assert "graphkit simplify" not in capsys.readouterr().err


BRANCH_AND_LINEAR = """<ir_version: 8, opset_import: ["" : 17]>
g (float[2, 3] x) => (float[2, 2] y) <float[3, 2] w = {1.0, 2.0, 3.0, 4.0, 5.0, 6.0}, float[2] b = {0.5, -0.5}> {
  yes = Constant<value = bool {1}>()
  h = If(yes) <
    then_branch = t () => (float[2, 3] a) { a = Relu(x) },
    else_branch = e () => (float[2, 3] c) { c = Neg(x) }
  >
  p = MatMul(h, w)
  y = Add(p, b)
}"""


def test_gemm_and_branch_passes_are_edit_options_and_recipe_steps(tmp_path: Path) -> None:
    source, out, recipe = tmp_path / "m.onnx", tmp_path / "o.onnx", tmp_path / "r.yaml"
    gk.save(gk.parse_model(BRANCH_AND_LINEAR), source)
    assert main(["edit", str(source), str(out), "--fold-constants", "--inline-branches", "--fuse-gemm",
                 "--save-recipe", str(recipe)]) == 0
    assert [n.op_type for n in gk.load(out).graph.node] == ["Relu", "Gemm"]
    feeds = {"x": np.array([[1.0, -2.0, 3.0], [-0.5, 0.25, 2.0]], np.float32)}
    np.testing.assert_array_equal(gk.run(gk.load(out), feeds)["y"], gk.run(gk.load(source), feeds)["y"])
    again = tmp_path / "again.onnx"
    assert main(["edit", str(source), str(again), "--recipe", str(recipe)]) == 0
    assert [n.op_type for n in gk.load(again).graph.node] == ["Relu", "Gemm"]
    assert main(["edit", str(out), str(tmp_path / "noop.onnx"), "--fuse-gemm"]) == 2


def test_fuse_conv_and_merge_nodes_options_and_steps(tmp_path: Path) -> None:
    source, out, recipe = tmp_path / "m.onnx", tmp_path / "o.onnx", tmp_path / "r.yaml"
    gk.save(gk.parse_model("""<ir_version: 8, opset_import: ["" : 17]>
g (float[1, 2, 3] x) => (float[1, 2, 3] y) {
  a = Transpose<perm = [0, 2, 1]>(x)
  b = Transpose<perm = [0, 2, 1]>(a)
  c = Relu(b)
  d = Relu(b)
  y = Add(c, d)
}"""), source)
    assert main(["edit", str(source), str(out), "--fuse-conv", "--merge-nodes", "--save-recipe", str(recipe)]) == 0
    assert [n.op_type for n in gk.load(out).graph.node] == ["Relu", "Add"]
    x = np.arange(6, dtype=np.float32).reshape(1, 2, 3) - 2
    np.testing.assert_array_equal(gk.run(gk.load(out), {"x": x})["y"], 2 * np.maximum(x, 0))
    again = tmp_path / "again.onnx"
    assert main(["edit", str(source), str(again), "--recipe", str(recipe)]) == 0
    assert [n.op_type for n in gk.load(again).graph.node] == ["Relu", "Add"]


def test_a_check_the_generated_inputs_cannot_run_asks_for_inputs_or_no_verify(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # found on the onnx wheel's expanded AffineGrid (its size input as random numbers): the error was
    # compare's ("running nodes 36-54 of 54 ... '<graph>_fragment'") with a hint to run check
    source = tmp_path / "reshape_by_input.onnx"
    gk.save(gk.parse_model("""<ir_version: 8, opset_import: ["" : 17]>
        g (float[6] x, int64[2] s) => (float[?, ?] y) {
            one = Constant <value = float {1.0}> ()
            i = Identity (one)
            x1 = Mul (x, i)
            y = Reshape (x1, s)
        }"""), source)
    out = tmp_path / "out.onnx"
    assert main(["simplify", str(source), str(out)]) == 2
    err = capsys.readouterr().err
    assert "simplify cannot check the result: the input model fails on the check's inputs" in err
    assert "--value NAME=JSON" in err and "--no-verify" in err and "_fragment" not in err and not out.exists()
    assert main(["simplify", str(source), str(out), "--value", "s=[2, 3]"]) == 0
    assert out.exists()


def test_a_result_that_fails_where_the_input_runs_is_named_as_simplify_s(
        exported: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import graphkit.cli.simplify as verb

    real = verb.simplify_with_report

    def unrunnable(model: gk.Model, **kw: object) -> gk.Simplification:
        report = real(model, **kw)  # type: ignore[arg-type]
        broken = gk.set_op_type(report.model, "#0", "Nothing", "com.example")
        return gk.Simplification(broken, report.before, report.after, report.changes, report.rounds)

    monkeypatch.setattr(verb, "simplify_with_report", unrunnable)
    out = tmp_path / "out.onnx"
    assert main(["simplify", str(exported), str(out)]) == 2
    err = capsys.readouterr().err
    assert "the simplified model fails in ONNX Runtime where the input model runs" in err and "--skip PASS" in err
    assert not out.exists()


def test_inputs_the_check_cannot_make_point_at_no_verify(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "bf16.onnx"
    gk.save(gk.parse_model("""<ir_version: 8, opset_import: ["" : 17]>
        g (bfloat16[2] x) => (bfloat16[2] y) { i = Identity (x)
 y = Neg (i) }"""), source)
    assert main(["simplify", str(source), str(tmp_path / "out.onnx")]) == 2
    err = capsys.readouterr().err
    assert "bfloat16" in err and "--input x=FILE" in err and "--no-verify" in err
    assert main(["simplify", str(source), str(tmp_path / "out.onnx"), "--no-verify"]) == 0


def _external_locations(path: Path) -> set[str]:
    proto = onnx.load(str(path), load_external_data=False)
    return {e.value for t in proto.graph.initializer for e in t.external_data if e.key == "location"}


@pytest.mark.parametrize("target", ["onnx", "onnxruntime"])
def test_simplify_a_model_saved_with_every_tensor_external(tmp_path: Path, target: str) -> None:
    """Exporters that write every initializer externally (size_threshold=0): the Reshape target's
    pieces are on disk too. simplify does what it does on the inline model, and writes a model that
    passes the full check, its weights on disk beside it."""
    from conftest import flatten_export, save_every_tensor_external

    source = save_every_tensor_external(flatten_export(), tmp_path / "src")
    inline = tmp_path / "inline.onnx"
    onnx.save(flatten_export(), str(inline))
    before = digest(source.parent / "x.data")
    out = tmp_path / "out" / "simple.onnx"
    out.parent.mkdir()
    assert main(["simplify", str(source), str(out), "--target", target]) == 0
    assert main(["simplify", str(inline), str(tmp_path / "simple_inline.onnx"), "--target", target]) == 0
    assert digest(source.parent / "x.data") == before
    onnx.checker.check_model(str(out), full_check=True)
    assert _external_locations(out) == {"simple.data"}
    result, expected = gk.load(out), gk.load(tmp_path / "simple_inline.onnx")
    assert [n.op_type for n in result.graph.node] == [n.op_type for n in expected.graph.node]
    assert "Shape" not in {n.op_type for n in result.graph.node}
    feeds = {"x": np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)}
    np.testing.assert_array_equal(gk.run(result, feeds)["y"], gk.run(expected, feeds)["y"])
