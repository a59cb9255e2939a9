"""python -m graphkit run: printed and JSON output, feeds from files, errors with exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, fixture

import graphkit as gk
from graphkit.cli import main


def test_run_prints_inputs_chosen_dims_and_output_stats(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(fixture("model_dynamic_0.onnx")), "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert "in  float32  [1, 3, 10, 10]  generated (seed 3, range -1..1); batch=1 (default" in out
    assert "out   float32  [1, 3, 8, 8]" in out
    for word in ("min", "max", "mean", "std", "load", "run"):
        assert word in out


def test_run_json_and_save(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, x, b = (np.full((10, 10), v, np.float32) for v in (2.0, 3.0, 1.0))
    np.savez(tmp_path / "feeds.npz", a=a, x=x)
    np.save(tmp_path / "b.npy", b)
    code = main(["run", str(fixture("linear_func.onnx")), "--input", str(tmp_path / "feeds.npz"),
                 "--input", f"b={tmp_path / 'b.npy'}", "--save", str(tmp_path / "out.npz"), "--json"])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert [f["source"] for f in data["feeds"]] == ["given", "given", "given"]
    (output,) = data["outputs"]
    assert output["name"] == "output" and output["min"] == 7.0 and output["max"] == 7.0 and output["std"] == 0.0
    with np.load(tmp_path / "out.npz") as saved:
        np.testing.assert_array_equal(saved["output"], np.full((10, 10), 7.0, np.float32))


def test_shape_range_and_output_flags(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", str(fixture("model_dynamic_23.onnx")), "--shape", "1x3x20x20", "--range", "in=0,1",
                 "--output", "out", "--json"])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["feeds"][0]["shape"] == [1, 3, 20, 20] and data["feeds"][0]["range"] == [0.0, 1.0]
    assert data["feeds"][0]["chosen_dims"] == {"in_dim_2": "20 (--shape)", "in_dim_3": "20 (--shape)"}
    assert data["outputs"][0]["shape"] == [1, 3, 18, 18]


@pytest.mark.parametrize(
    ("model", "flags", "words"),
    [
        ("model_static.onnx", ["--shape", "in=2x3x10x10"], "dim 0 is fixed to 1"),
        ("model_dynamic_0.onnx", ["--shape", "in=1x3x20x20"], "dim 2 is fixed to 10"),
        ("model_dynamic_23.onnx", ["--shape", "in=2x3x10x10"], "dim 0 is fixed to 1"),
        ("model_static.onnx", ["--shape", "inp=1x3x10x10"], "no graph input named 'inp'"),
        ("linear_func.onnx", ["--shape", "10x10"], "--shape without NAME= is ambiguous"),
        ("model_static.onnx", ["--shape", "in=1xbad"], "is not a whole number"),
        ("model_static.onnx", ["--opt-level", "max"], "invalid choice"),
    ],
)
def test_bad_flags_exit_2_with_message_and_hint(
    model: str, flags: list[str], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", str(fixture(model)), *flags]) == 2
    err = capsys.readouterr().err
    assert words in err and "hint:" in err and "Traceback" not in err


def test_wrong_dtype_from_file_names_input_and_dtypes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    np.save(tmp_path / "x.npy", np.zeros((1, 3, 10, 10), np.float64))
    assert main(["run", str(fixture("model_static.onnx")), "--input", f"in={tmp_path / 'x.npy'}",
                 "--save", str(tmp_path / "out.npz")]) == 2
    err = capsys.readouterr().err
    assert "input 'in'" in err and "expects float32 [1, 3, 10, 10], got float64 [1, 3, 10, 10]" in err
    assert "hint: convert the value to float32" in err
    assert not (tmp_path / "out.npz").exists()


def test_save_refuses_to_overwrite_an_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    np.savez(tmp_path / "feeds.npz", **{"in": np.zeros((1, 3, 10, 10), np.float32)})
    before = (tmp_path / "feeds.npz").read_bytes()
    assert main(["run", str(fixture("model_static.onnx")), "--input", str(tmp_path / "feeds.npz"),
                 "--save", str(tmp_path / "feeds.npz")]) == 2
    assert "refusing to overwrite the input" in capsys.readouterr().err
    assert (tmp_path / "feeds.npz").read_bytes() == before


def test_python_dash_m_graphkit_run(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "graphkit", "run", str(fixture("my_add.onnx")), "--json"],
                          cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["outputs"][0]["name"] == "output" and data["outputs"][0]["shape"] == [1, 3, 10, 10]


def test_save_keeps_inputs_and_outputs_so_compare_needs_nothing_else(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from graphkit.cli import main

    ref = tmp_path / "ref.npz"
    assert main(["markers", str(fixture("debug_markers.onnx")), str(tmp_path / "id.onnx")]) == 0
    assert main(["run", str(tmp_path / "id.onnx"), "--seed", "5", "--opt-level", "disable", "--save", str(ref)]) == 0
    saved = np.load(ref)
    assert {"input", "output", "/Debug_0_output_0"} <= set(saved.files)
    capsys.readouterr()
    assert main(["compare", str(fixture("debug_markers.onnx")), "--reference", str(ref)]) == 0
    captured = capsys.readouterr()
    assert "PASSED" in captured.out and "no value for input" not in captured.err


@pytest.mark.parametrize("argv", [
    ["run", "{m}", "--provider", "cuda"],
    ["compare", "{m}", "--candidate-provider", "cuda"],
    ["compare", "{m}", "--reference-provider", "tensorrt", "--backend", "ort"],
])
def test_unavailable_provider_exits_2_naming_the_available_ones(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    from graphkit import _ort

    if "CUDAExecutionProvider" in _ort.available_providers():
        pytest.skip("this machine has CUDA")
    assert main([a.format(m=fixture("my_add.onnx")) for a in argv]) == 2
    err = capsys.readouterr().err
    assert "no provider" in err and "CPUExecutionProvider" in err and "hint: pick one of these with --provider" in err


def test_provider_option_is_shown_and_a_bad_one_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(fixture("my_add.onnx")), "--provider", "cpu", "--provider-option",
                 "arena_extend_strategy=kSameAsRequested"]) == 0
    assert "provider cpu (arena_extend_strategy=kSameAsRequested)" in capsys.readouterr().out
    assert main(["run", str(fixture("my_add.onnx")), "--provider-option", "novalue"]) == 2
    assert "KEY=VALUE" in capsys.readouterr().err


def test_integer_ranges_are_inclusive_and_a_value_can_be_pinned(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import graphkit as gk

    b = gk.GraphBuilder("ints")
    n, m = b.input("n", "int64", [200]), b.input("m", "int64", [2, 2])
    x = b.input("x", "float32", ["k"])
    b.output(b.node("Identity", [n], name="/n", outputs=["n_out"]), "int64", [200])
    b.output(b.node("Identity", [m], name="/m", outputs=["m_out"]), "int64", [2, 2])
    b.output(b.node("Identity", [x], name="/x", outputs=["x_out"]), "float32", ["k"])
    gk.save(b.build(), tmp_path / "ints.onnx")
    code = main(["run", str(tmp_path / "ints.onnx"), "--range", "n=0,1", "--value", "m=[[1,2],[3,4]]",
                 "--value", "x=0.5", "--shape", "x=3", "--save", str(tmp_path / "out.npz")])
    out = capsys.readouterr().out
    assert code == 0
    assert "n  int64    [200]   generated (seed 0, range 0..1)" in out
    assert "m  int64    [2, 2]  given" in out and "x  float32  [3]     fixed value 0.5 (--value)" in out
    with np.load(tmp_path / "out.npz") as saved:
        assert set(np.unique(saved["n_out"]).tolist()) == {0, 1}
        np.testing.assert_array_equal(saved["m_out"], [[1, 2], [3, 4]])
        np.testing.assert_array_equal(saved["x_out"], np.full(3, 0.5, np.float32))
    assert main(["run", str(tmp_path / "ints.onnx"), "--value", "mm=[1]"]) == 2
    assert "did you mean 'm'" in capsys.readouterr().err
    assert main(["run", str(tmp_path / "ints.onnx"), "--value", "m=[[1,2],[3]"]) == 2
    assert "not JSON" in capsys.readouterr().err


def test_saved_values_feed_a_sub_model_and_extra_keys_are_a_note(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    cut = "/convs1/convs1.2/Conv_output_0"
    whole, sub = str(fixture("whole_model.onnx")), str(tmp_path / "sub.onnx")
    ref, got = tmp_path / "ref.npz", tmp_path / "got.npz"
    assert main(["run", whole, "--output", cut, "--output", "output", "--save", str(ref), "--opt-level", "disable"]) == 0
    assert main(["extract", whole, sub, "--inputs", cut, "--outputs", "output"]) == 0
    capsys.readouterr()
    assert main(["run", sub, "--input", str(ref), "--save", str(got), "--opt-level", "disable"]) == 0
    out = capsys.readouterr().out
    assert f"note: {ref}: 2 array(s) that are no input of {sub} were ignored ('input.1', 'output')" in out
    with np.load(ref) as a, np.load(got) as b:
        assert np.array_equal(a["output"], b["output"])
    assert main(["run", sub, "--input", str(ref), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["notes"] == [
        f"{ref}: 2 array(s) that are no input of {sub} were ignored ('input.1', 'output')"]


def test_every_verb_taking_input_files_ignores_extra_npz_keys_with_a_note(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cut = "/convs1/convs1.2/Conv_output_0"
    whole, sub = str(fixture("whole_model.onnx")), str(tmp_path / "sub.onnx")
    ref = tmp_path / "ref.npz"
    assert main(["run", whole, "--output", cut, "--output", "output", "--save", str(ref), "--opt-level", "disable"]) == 0
    assert main(["extract", whole, sub, "--inputs", cut, "--outputs", "output"]) == 0
    assert main(["split", sub, str(tmp_path / "chain"), "--parts", "2"]) == 0
    bad = str(tmp_path / "bad.onnx")  # the last Conv's bias moved by 1: the outputs leave tolerance
    np.save(tmp_path / "bias.npy", np.ones(3, np.float32))
    assert main(["edit", sub, bad, "--set-initializer", f"convs4.1.bias={tmp_path / 'bias.npy'}"]) == 0
    capsys.readouterr()
    note = f"graphkit: note: {ref}: 2 array(s) that are no input of {{}} were ignored ('input.1', 'output')"
    runs = [
        (["compare", sub, "--reference", str(ref), "--input", str(ref)], 0, sub),
        (["run-chain", str(tmp_path / "chain"), "--input", str(ref), "--save", str(tmp_path / "chain.npz")], 0,
         "the chain"),
        (["simplify", sub, str(tmp_path / "simple.onnx"), "--input", str(ref)], 0, sub),
        (["convert", sub, str(tmp_path / "opset18.onnx"), "--opset", "18", "--input", str(ref)], 0, sub),
        (["reduce", sub, str(tmp_path / "repro"), "--candidate", bad, "--fails-on", "compare", "--input", str(ref)],
         0, sub),
    ]
    for argv, code, where in runs:
        assert main(argv) == code, argv
        assert note.format(where) in capsys.readouterr().err, argv
    with np.load(ref) as expected, np.load(tmp_path / "chain.npz") as chained:
        np.testing.assert_allclose(chained["output"], expected["output"], rtol=1e-5, atol=1e-6)
    repro = gk.load(tmp_path / "repro" / "model.onnx")
    assert [n.op_type for n in repro.graph.node if "convs4.1.bias" in n.input] == ["Conv"]
    assert main(["compare", sub, "--reference", str(ref), "--input", str(ref), "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert notes[0] == note.format(sub).removeprefix("graphkit: note: ")


def test_a_mistyped_dim_is_refused_with_the_dims_there_are(capsys: pytest.CaptureFixture[str]) -> None:
    # ignored, it would leave 'batch' at its default of 1 without a word
    assert main(["run", str(fixture("model_dynamic_0.onnx")), "--dim", "bacth=4"]) == 2
    err = capsys.readouterr().err
    assert "--dim bacth=4: no graph input of " in err and "model_dynamic_0.onnx has a dim named 'bacth'" in err
    assert "did you mean 'batch'?" in err
    assert main(["run", str(fixture("model_static.onnx")), "--dim", "batch=4"]) == 2
    assert "has a named dynamic dim" in capsys.readouterr().err


@pytest.mark.parametrize("verb", ["compare", "simplify", "reduce", "convert"])
def test_every_verb_that_runs_a_model_checks_dim_names(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       verb: str) -> None:
    extra = {"compare": [], "simplify": [str(tmp_path / "s.onnx")], "reduce": [str(tmp_path / "r")],
             "convert": [str(tmp_path / "c.onnx"), "--opset", "16"]}[verb]
    argv = [verb, str(fixture("model_dynamic_0.onnx")), *extra, "--dim", "seq=4"]
    assert main(argv) == 2
    assert "model_dynamic_0.onnx has a dim named 'seq'" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_run_chain_checks_dim_names_against_the_chain_inputs(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["split", str(fixture("model_dynamic_23.onnx")), str(tmp_path / "parts"), "--parts", "1"]) == 0
    capsys.readouterr()
    assert main(["run-chain", str(tmp_path / "parts"), "--dim", "bogus=2"]) == 2
    assert "no graph input of the chain has a dim named 'bogus'" in capsys.readouterr().err


def test_a_fixed_dim_names_the_edit_that_makes_it_dynamic(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    np.save(tmp_path / "small.npy", np.zeros((1, 3, 5, 5), np.float32))
    assert main(["run", str(fixture("whole_model.onnx")), "--input", f"input.1={tmp_path / 'small.npy'}"]) == 2
    err = capsys.readouterr().err
    assert "dim 2 is fixed to 20" in err and "--dynamic input.1:2=N" in err
    import graphkit as gk

    with pytest.raises(gk.FeedError) as caught:
        gk.run(gk.load(fixture("whole_model.onnx")), {"input.1": np.zeros((1, 3, 5, 5), np.float32)})
    assert "set_dims(" in str(caught.value.hint) and "--" not in str(caught.value.hint)
