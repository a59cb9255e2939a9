"""The write plan: no command replaces a file it reads, writes into a device or FIFO, or writes half its outputs.

Each test runs a command that used to destroy an input (or write one output of two) and checks the
real outcome: the exit code, the message naming both files, the bytes of every input, and what is
(not) on disk afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import FIXTURES, digest, fixture, folder_digest

import graphkit as gk
from graphkit import _io as io
from graphkit.cli import main


@pytest.fixture
def e(tmp_path: Path) -> Path:
    """A copy of fixtures/ext_weights (model.onnx + model.data); returns the folder."""
    folder = tmp_path / "e"
    shutil.copytree(FIXTURES / "ext_weights", folder)
    return folder


def _values(path: Path) -> dict[str, np.ndarray]:
    model = gk.load(path)
    return {t.name: gk.tensor_value(model, t) for t in model.graph.initializer}


def _refused(capsys: pytest.CaptureFixture[str], *names: str) -> str:
    err = capsys.readouterr().err
    assert "graphkit: error:" in err and "hint:" in err and "Traceback" not in err, err
    for name in names:
        assert name in err, (name, err)
    return err


# ------------------------------------------------------------------ outputs that replace an input


def test_toposort_onto_the_inputs_weights_is_refused(e: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = folder_digest(e)
    assert main(["toposort", str(e / "model.onnx"), str(e / "model.data")]) == 2
    err = _refused(capsys, "refusing to overwrite the input", "model.data", "external data of", "model.onnx")
    assert "--overwrite" in err  # (the hint says it would not help)
    assert main(["toposort", str(e / "model.onnx"), str(e / "model.data"), "--overwrite"]) == 2
    assert folder_digest(e) == before


def test_an_output_named_like_a_data_file_gets_its_own_weights_file(e: Path) -> None:
    expected = _values(e / "model.onnx")
    assert main(["toposort", str(e / "model.onnx"), str(e / "w.data")]) == 0
    assert sorted(p.name for p in e.iterdir()) == ["model.data", "model.onnx", "w.data", "w.data.data"]
    saved = _values(e / "w.data")
    assert saved.keys() == expected.keys()
    for name, value in expected.items():
        np.testing.assert_array_equal(saved[name], value)


def test_extract_onto_the_name_of_the_sources_weights_is_refused(
        tmp_path: Path, e: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "src"
    src.mkdir()
    gk.save(gk.load(e / "model.onnx"), src / "model.onnx", location="weights.data")
    before = folder_digest(src)
    assert main(["extract", str(src / "model.onnx"), str(src / "weights.onnx"), "--outputs", "y"]) == 2
    _refused(capsys, "weights.data", "model.onnx")
    assert folder_digest(src) == before


def test_compare_report_onto_the_weights_is_refused(e: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = folder_digest(e)
    assert main(["compare", str(e / "model.onnx"), "--save-report", str(e / "model.data")]) == 2
    _refused(capsys, "refusing to overwrite the input", "model.data", "the report")
    assert folder_digest(e) == before


def test_run_save_onto_the_models_data_file_is_refused(
        tmp_path: Path, e: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gk.save(gk.load(e / "model.onnx"), tmp_path / "m.onnx", location="w.npz")
    before = digest(tmp_path / "w.npz")
    assert main(["run", str(tmp_path / "m.onnx"), "--save", str(tmp_path / "w.npz")]) == 2
    _refused(capsys, "w.npz", "m.onnx", "the saved values")
    assert main(["run", str(tmp_path / "m.onnx"), "--save", str(tmp_path / "w.npz"), "--overwrite"]) == 2
    assert digest(tmp_path / "w.npz") == before


def test_edit_recipe_onto_the_input_model_or_the_recipe_read_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "in.onnx"
    shutil.copy(fixture("linear_func.onnx"), model)
    recipe = tmp_path / "r.json"
    recipe.write_text(json.dumps([{"op": "set_op_type", "node": "Add", "op_type": "Sub"}]))
    before = folder_digest(tmp_path)
    out = tmp_path / "out.onnx"
    assert main(["edit", str(model), str(out), "--set-op-type", "Add=Sub", "--save-recipe", str(model)]) == 2
    _refused(capsys, "in.onnx", "the recipe")
    assert main(["edit", str(model), str(out), "--recipe", str(recipe), "--save-recipe", str(recipe),
                 "--overwrite"]) == 2
    _refused(capsys, "r.json", "the recipe")
    assert folder_digest(tmp_path) == before  # (and no out.onnx)


def test_edit_writes_neither_output_when_the_recipe_cannot_be_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "o.onnx"
    assert main(["edit", str(fixture("linear_func.onnx")), str(out), "--set-op-type", "Add=Sub",
                 "--save-recipe", str(tmp_path / "nodir" / "r.yaml")]) == 2
    _refused(capsys, "nodir", "does not exist")
    assert list(tmp_path.iterdir()) == []


def test_edit_writes_both_outputs(tmp_path: Path) -> None:
    out, recipe = tmp_path / "o.onnx", tmp_path / "r.yaml"
    assert main(["edit", str(fixture("linear_func.onnx")), str(out), "--set-op-type", "Add=Sub",
                 "--save-recipe", str(recipe)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.onnx", "r.yaml"]
    assert "set_op_type" in recipe.read_text()


def test_two_outputs_naming_one_file_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "o.onnx"
    assert main(["edit", str(fixture("linear_func.onnx")), str(out), "--set-op-type", "Add=Sub",
                 "--save-recipe", str(out)]) == 2
    _refused(capsys, "same file", "the recipe", "the output model")
    assert list(tmp_path.iterdir()) == []


def test_merge_onto_the_second_models_weights_is_refused(
        tmp_path: Path, e: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = folder_digest(e)
    assert main(["merge", str(fixture("linear_func.onnx")), str(e / "model.onnx"), str(e / "model.data"),
                 "--connect", "output=x"]) == 2
    _refused(capsys, "model.data", "external data of")
    assert folder_digest(e) == before


def test_split_into_the_folder_holding_the_weights_is_refused(
        e: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = folder_digest(e)
    assert main(["split", str(e / "model.onnx"), str(e), "--parts", "2", "--overwrite"]) == 2
    _refused(capsys, "holds", "model.onnx")
    assert folder_digest(e) == before


def test_run_chain_save_onto_the_source_models_weights_is_refused(
        tmp_path: Path, e: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gk.save(gk.load(e / "model.onnx"), tmp_path / "m.onnx", location="w.npz")
    parts = tmp_path / "parts"
    assert main(["split", str(tmp_path / "m.onnx"), str(parts), "--parts", "2"]) == 0
    capsys.readouterr()
    before = folder_digest(tmp_path)
    assert main(["run-chain", str(parts), "--source", str(tmp_path / "m.onnx"),
                 "--save", str(tmp_path / "w.npz")]) == 2
    _refused(capsys, "w.npz", "m.onnx")
    assert main(["run-chain", str(parts), "--save", str(parts / "part_00.data")]) == 2  # (not even an .npz)
    _refused(capsys, ".npz")
    assert folder_digest(tmp_path) == before


def test_an_output_through_a_symlink_to_an_input_is_refused(
        tmp_path: Path, e: Path, capsys: pytest.CaptureFixture[str]) -> None:
    link = tmp_path / "link.onnx"
    link.symlink_to(e / "model.data")
    before = folder_digest(e)
    assert main(["toposort", str(e / "model.onnx"), str(link)]) == 2
    _refused(capsys, "model.data")
    assert folder_digest(e) == before and link.is_symlink()


def test_api_save_never_replaces_the_models_weights(e: Path) -> None:
    model = gk.load(e / "model.onnx")
    before = folder_digest(e)
    with pytest.raises(gk.UsageError) as err:
        gk.save(model, e / "model.data")
    assert "model.data" in err.value.message and "model.onnx" in err.value.message
    assert err.value.hint and "--overwrite" not in err.value.hint  # (API errors name no CLI flag)
    assert folder_digest(e) == before


# ------------------------------------------------------------- --overwrite: the output model's own files


def test_overwrite_replaces_the_input_model_and_its_previous_weights(e: Path) -> None:
    expected = _values(e / "model.onnx")
    assert main(["toposort", str(e / "model.onnx"), str(e / "model.onnx"), "--overwrite"]) == 0
    assert sorted(p.name for p in e.iterdir()) == ["model.onnx", "model.onnx.data"]
    assert main(["toposort", str(e / "model.onnx"), str(e / "model.onnx"), "--overwrite"]) == 0
    assert sorted(p.name for p in e.iterdir()) == ["model.data", "model.onnx"]
    for name, value in _values(e / "model.onnx").items():
        np.testing.assert_array_equal(value, expected[name])


def test_an_unrelated_existing_output_is_replaced(tmp_path: Path) -> None:
    out = tmp_path / "o.onnx"
    out.write_bytes(b"old")
    assert main(["toposort", str(fixture("linear_func.onnx")), str(out)]) == 0
    assert gk.load(out).graph.node


# ------------------------------------------------------------------------- targets that are not files


@pytest.mark.parametrize("verb", ["toposort", "compare", "run", "edit-recipe"])
def test_devices_and_fifos_are_never_replaced(verb: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    model = str(fixture("linear_func.onnx"))
    for target, kind in ((str(fifo), "FIFO"), (os.devnull, "device")):
        args = {
            "toposort": ["toposort", model, target],
            "compare": ["compare", model, "--save-report", target],
            "run": ["run", model, "--save", target],
            "edit-recipe": ["edit", model, str(tmp_path / "o.onnx"), "--set-op-type", "Add=Sub",
                            "--save-recipe", target],
        }[verb]
        code = main(args)
        err = capsys.readouterr().err
        assert code == 2 and "Traceback" not in err, err
        assert kind in err or ".npz" in err
    assert stat.S_ISFIFO(fifo.stat().st_mode) and stat.S_ISCHR(os.stat(os.devnull).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo"]


def test_run_save_to_a_fifo_named_npz_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "out.npz"
    os.mkfifo(fifo)
    assert main(["run", str(fixture("linear_func.onnx")), "--save", str(fifo)]) == 2
    _refused(capsys, "FIFO")
    assert stat.S_ISFIFO(fifo.stat().st_mode)


def test_a_folder_as_output_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "d").mkdir()
    assert main(["toposort", str(fixture("linear_func.onnx")), str(tmp_path / "d")]) == 2
    _refused(capsys, "folder")


# ------------------------------------------------------------------------------ names and folders


def test_a_long_valid_output_name_works(tmp_path: Path, e: Path) -> None:
    out = tmp_path / ("m" * 240 + ".onnx")  # 245 characters
    assert main(["toposort", str(e / "model.onnx"), str(out)]) == 0
    assert main(["toposort", str(e / "model.onnx"), str(out), "--overwrite"]) == 0  # (alternate data name)
    names = sorted(p.name for p in tmp_path.iterdir() if p.name != "e")
    assert names == ["m" * 240 + ".onnx", "m" * 240 + ".onnx.data"]
    assert _values(out).keys() == _values(e / "model.onnx").keys()


def test_names_over_the_limit_and_nul_bytes_are_clear_errors(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    model = str(fixture("linear_func.onnx"))
    assert main(["toposort", model, str(tmp_path / ("m" * 300 + ".onnx"))]) == 2
    _refused(capsys, "over the file system's limit")
    assert main(["toposort", model, str(tmp_path / "a\0b.onnx")]) == 2
    _refused(capsys, "NUL")
    assert main(["compare", model, "--save-report", str(tmp_path / ("r" * 300))]) == 2
    _refused(capsys, "limit")
    assert list(tmp_path.iterdir()) == []


def test_run_save_of_a_tensor_name_too_long_for_npz(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    name = "t" * 100_000
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Identity", ["x"], [name])], "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
        [onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, [2])])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "m.onnx"))
    assert main(["run", str(tmp_path / "m.onnx"), "--save", str(tmp_path / "o.npz")]) == 2
    _refused(capsys, "100000 characters", "o.npz")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_save_arrays_keeps_every_name_and_writes_strings_without_pickles(tmp_path: Path) -> None:
    from graphkit._feeds import save_arrays

    arrays = {"file": np.arange(3), "allow_pickle": np.ones(2), "a/b": np.zeros(1),
              "s": np.array(["x", "yz"], dtype=object)}
    save_arrays(tmp_path / "o.npz", arrays)
    with np.load(tmp_path / "o.npz", allow_pickle=False) as loaded:
        assert sorted(loaded.files) == sorted(arrays)
        np.testing.assert_array_equal(loaded["file"], np.arange(3))
        assert loaded["s"].tolist() == ["x", "yz"]


# ------------------------------------------------------------------------------------ the plan itself


def test_plan_check_names_both_files_and_writes_nothing(tmp_path: Path, e: Path) -> None:
    plan = io.WritePlan()
    plan.read_model(gk.load(e / "model.onnx"))
    plan.read(tmp_path / "feeds.npz", "a feed file")
    plan.write_model(tmp_path / "out.onnx", external=True)
    plan.write(tmp_path / "feeds.npz", "the saved values")
    with pytest.raises(gk.UsageError) as err:
        plan.check()
    assert "feeds.npz" in err.value.message and "a feed file" in err.value.message
    assert list(tmp_path.iterdir()) == [e]


def test_plan_overwrite_lets_only_the_output_model_replace_a_model_read(e: Path) -> None:
    model = gk.load(e / "model.onnx")
    for overwrite, ok in ((False, False), (True, True)):
        plan = io.WritePlan(overwrite=overwrite)
        plan.read_model(model)
        plan.write_model(e / "model.onnx", external=True)
        if ok:
            plan.check()
        else:
            with pytest.raises(gk.UsageError, match="refusing to overwrite the input"):
                plan.check()
    plan = io.WritePlan(overwrite=True)
    plan.read_model(model)
    plan.write(e / "model.onnx", "the report")
    with pytest.raises(gk.UsageError, match="the report"):
        plan.check()
