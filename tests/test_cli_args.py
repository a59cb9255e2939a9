"""Hostile command-line arguments and input files: each is one `graphkit: error:` line naming the flag,
file or value, then a hint; exit 2, no traceback, nothing written (issue 18, "every argument parsed
strictly" and "one line, then a hint")."""

from __future__ import annotations

import json
import os
import shutil
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import fixture
from onnx import TensorProto, helper

from graphkit.cli import main


def refused(argv: list[str], capfd: pytest.CaptureFixture[str], *names: str, out: Path | None = None) -> str:
    """Run the CLI; assert exit 2 with one error line naming ``names``, one hint line, nothing written."""
    code = main(argv)
    err = capfd.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2, err
    assert "Traceback" not in err and "[E:onnxruntime" not in err, err
    assert len(lines) == 2 and lines[0].startswith("graphkit: error: ") and lines[1].startswith("hint: "), err
    for name in names:
        assert name in lines[0], (name, lines[0])
    if out is not None:
        assert not out.exists() and not any(out.parent.glob(f".{out.name}*"))
    return lines[0]


# --------------------------------------------------------------------------------------- numbers

NINES = "9" * 30


@pytest.mark.parametrize("flag, value", [
    ("--fixed", "in:0=²"), ("--fixed", "in:0=٣"), ("--fixed", f"in:0={NINES}"), ("--fixed", "in:²=1"),
    ("--fixed", "in:0=1_0"), ("--dynamic", f"in:{NINES}=batch"), ("--set-opset", "ai.onnx=²"),
    ("--set-opset", f"ai.onnx={NINES}"), ("--set-opset", "ai.onnx=0"), ("--fold-constants", "²"),
    ("--fold-constants", NINES), ("--bypass", f"/Conv={NINES}"),
])
def test_edit_numbers_are_ascii_and_bounded(tmp_path: Path, capfd: pytest.CaptureFixture[str], flag: str,
                                            value: str) -> None:
    out = tmp_path / "out.onnx"
    refused(["edit", str(fixture("model_static.onnx")), str(out), flag, value], capfd, flag, out=out)


@pytest.mark.parametrize("argv, named", [
    (["--dim", "batch=²"], "--dim"), (["--dim", f"batch={NINES}"], "--dim"), (["--dim", "batch=٣"], "--dim"),
    (["--shape", "in=1x²x10x10"], "--shape"), (["--shape", f"in=1x{NINES}"], "--shape"),
    (["--shape", "in=1x٣x10x10"], "--shape"), (["--range", "in=nan,1"], "--range"),
    (["--range", "in=0,inf"], "--range"), (["--range", "in=0,1e400"], "--range"),
    (["--threads", "100000"], "--threads"), (["--threads", "-1"], "--threads"), (["--threads", "²"], "--threads"),
    (["--seed", "٣"], "--seed"), (["--seed", NINES], "--seed"),
])
def test_run_numbers_are_ascii_and_bounded(tmp_path: Path, capfd: pytest.CaptureFixture[str], argv: list[str],
                                           named: str) -> None:
    save = tmp_path / "out.npz"
    refused(["run", str(fixture("model_dynamic_0.onnx")), "--save", str(save), *argv], capfd, named, out=save)


@pytest.mark.parametrize("argv, named", [
    (["--fragment-mb", "nan"], "--fragment-mb"), (["--fragment-mb", "inf"], "--fragment-mb"),
    (["--fragment-mb", "1e400"], "--fragment-mb"), (["--fragment-mb", "0"], "--fragment-mb"),
    (["--local-checks", NINES], "--local-checks"), (["--atol", "nan"], "--atol"), (["--rtol", "in=inf"], "--rtol"),
])
def test_compare_numbers_are_finite(tmp_path: Path, capfd: pytest.CaptureFixture[str], argv: list[str],
                                    named: str) -> None:
    report = tmp_path / "report.json"
    refused(["compare", str(fixture("whole_model.onnx")), "--save-report", str(report), *argv], capfd, named,
            out=report)


@pytest.mark.parametrize("argv, named", [
    (["diff", str(fixture("whole_model.onnx")), str(fixture("whole_model.onnx")), "--atol", "nan"], "--atol"),
    (["run-chain", "nowhere", "--rtol", "inf"], "--rtol"),
    (["split", str(fixture("whole_model.onnx")), "OUTDIR", "--parts", "2.5"], "--parts"),
    (["split", str(fixture("whole_model.onnx")), "OUTDIR", "--parts", NINES], "--parts"),
])
def test_other_verbs_numbers(tmp_path: Path, capfd: pytest.CaptureFixture[str], argv: list[str], named: str) -> None:
    argv = [str(tmp_path / "parts") if a == "OUTDIR" else a for a in argv]
    refused(argv, capfd, named)
    assert not (tmp_path / "parts").exists()


# ----------------------------------------------------------------------------------- text files


def _recipe(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


ALIAS_BOMB = b"""a: &a ["x", "x", "x", "x", "x", "x", "x", "x", "x"]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]
"""


@pytest.mark.parametrize("name, data, said", [
    ("r.json", b'[{"op": "cleanup", "x": "\xff"}]', "UTF-8"),
    ("r.yaml", b"- op: cleanup\n  note: \xff\n", "UTF-8"),
    ("r.json", b"[" * 100_000 + b"]" * 100_000, "deep"),
    ("r.yaml", b"[" * 30_000 + b"]" * 30_000, "deep"),
    ("r.yaml", ALIAS_BOMB, "alias"),
    ("r.yaml", b"- op: cleanup\n  inputs: [1,\n", "YAML"),
    ("r.yaml", b"- op: cleanup\x00\n", "YAML"),
    ("r.json", b'[{"op": "cleanup",}]', "JSON"),
])
def test_recipe_text_is_utf8_bounded_and_one_line(tmp_path: Path, capfd: pytest.CaptureFixture[str], name: str,
                                                  data: bytes, said: str) -> None:
    recipe = _recipe(tmp_path, name, data)
    out = tmp_path / "out.onnx"
    refused(["edit", str(fixture("whole_model.onnx")), str(out), "--recipe", str(recipe)], capfd, str(recipe), said,
            out=out)


def test_set_attr_json_value_nesting_is_bounded(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out.onnx"
    value = "[" * 50_000 + "]" * 50_000
    refused(["edit", str(fixture("whole_model.onnx")), str(out), "--set-attr", f"/Add.x={value}"], capfd,
            "--set-attr", out=out)


@pytest.mark.parametrize("data, said", [
    (b'{"a": "\xff"}', "UTF-8"), (b"[" * 50_000 + b"]" * 50_000, "deep"), (b'{"a": [1]}', "object of strings"),
])
def test_map_file_is_utf8_and_bounded(tmp_path: Path, capfd: pytest.CaptureFixture[str], data: bytes,
                                      said: str) -> None:
    mapping = _recipe(tmp_path, "map.json", data)
    report = tmp_path / "report.json"
    model = str(fixture("whole_model.onnx"))
    refused(["compare", model, model, "--map", str(mapping), "--save-report", str(report)], capfd, str(mapping),
            said, out=report)


# ---------------------------------------------------------------------------------------- FIFOs


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "pipe.npy"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("option", ["--recipe", "--set-attr", "--set-initializer", "--freeze", "npy-in-recipe"])
def test_edit_refuses_a_fifo_without_blocking(tmp_path: Path, capfd: pytest.CaptureFixture[str], fifo: Path,
                                              option: str) -> None:
    out = tmp_path / "out.onnx"
    source = str(fixture("linear_func.onnx"))
    if option == "--recipe":
        argv = ["--recipe", str(fifo)]
    elif option == "npy-in-recipe":
        recipe = tmp_path / "r.json"
        recipe.write_text(json.dumps([{"op": "input_to_initializer", "name": "x", "value": {"npy": fifo.name}}]))
        argv = ["--recipe", str(recipe)]
    elif option == "--set-attr":
        argv = ["--set-attr", f"Add.alpha={fifo}"]
    elif option == "--set-initializer":
        argv = ["--set-initializer", f"a={fifo}"]
    else:
        argv = ["--freeze", f"x={fifo}"]
    refused(["edit", source, str(out), *argv], capfd, str(fifo), "FIFO", out=out)


def test_feed_map_reference_and_manifest_fifos(tmp_path: Path, capfd: pytest.CaptureFixture[str], fifo: Path) -> None:
    model = str(fixture("whole_model.onnx"))
    refused(["run", model, "--input", f"input.1={fifo}"], capfd, str(fifo), "FIFO")
    refused(["compare", model, model, "--map", str(fifo)], capfd, str(fifo), "FIFO")
    refused(["compare", model, "--reference", str(fifo)], capfd, str(fifo), "FIFO")
    folder = tmp_path / "split"
    folder.mkdir()
    os.mkfifo(folder / "manifest.json")
    refused(["run-chain", str(folder)], capfd, "manifest.json", "FIFO")


# ------------------------------------------------------------------------------------ feed arrays


def _npy_claiming(path: Path, shape: tuple[int, ...], payload: bytes = b"\0" * 16) -> Path:
    with open(path, "wb") as handle:
        np.lib.format.write_array_header_1_0(handle, {"descr": "<f4", "fortran_order": False, "shape": shape})
        handle.write(payload)
    return path


def test_npy_header_claiming_a_trillion_elements(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    feed = _npy_claiming(tmp_path / "x.npy", (10**6, 10**6))
    refused(["run", str(fixture("model_static.onnx")), "--input", f"in={feed}"], capfd, str(feed))


@pytest.mark.parametrize("shape, said", [((10**12,), "4000000000000 bytes"), ((1, 3, 10, 10), "truncated")])
def test_npz_member_header_lies(tmp_path: Path, capfd: pytest.CaptureFixture[str], shape: tuple[int, ...],
                                said: str) -> None:
    member = _npy_claiming(tmp_path / "in.npy", shape)
    feed = tmp_path / "x.npz"
    with zipfile.ZipFile(feed, "w") as archive:
        archive.write(member, "in.npy")
    refused(["run", str(fixture("model_static.onnx")), "--input", str(feed)], capfd, str(feed), said)


def test_npz_member_over_the_size_limit(tmp_path: Path, capfd: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from graphkit import _arrays

    monkeypatch.setattr(_arrays, "MAX_ARRAY_BYTES", 1 << 20)
    feed = tmp_path / "x.npz"
    np.savez_compressed(feed, **{"in": np.zeros((4, 3, 256, 256), np.float32)})  # 3 MiB inflated, ~3 kB on disk
    refused(["run", str(fixture("model_static.onnx")), "--input", str(feed)], capfd, str(feed), "bytes")


def test_object_arrays_are_refused(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    feed = tmp_path / "in.npy"
    np.save(feed, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    refused(["run", str(fixture("model_static.onnx")), "--input", f"in={feed}"], capfd, str(feed), "object")


def test_truncated_npz(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    feed = tmp_path / "x.npz"
    np.savez(feed, **{"in": np.ones((1, 3, 10, 10), np.float32)})
    feed.write_bytes(feed.read_bytes()[:700])
    refused(["run", str(fixture("model_static.onnx")), "--input", str(feed)], capfd, str(feed))
    model = str(fixture("model_static.onnx"))
    refused(["compare", model, "--reference", str(feed)], capfd, str(feed))


def test_pb_with_unknown_data_type(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    tensor = helper.make_tensor("in", TensorProto.FLOAT, [1], [1.0])
    tensor.data_type = 999
    feed = tmp_path / "input_0.pb"
    feed.write_bytes(tensor.SerializeToString())
    refused(["run", str(fixture("model_static.onnx")), "--input", str(feed)], capfd, str(feed), "999")


def test_reference_with_a_lying_header(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    member = _npy_claiming(tmp_path / "out.npy", (10**12,))
    reference = tmp_path / "ref.npz"
    with zipfile.ZipFile(reference, "w") as archive:
        archive.write(member, "out.npy")
    refused(["compare", str(fixture("model_static.onnx")), "--reference", str(reference)], capfd, str(reference))


# ---------------------------------------------------------------------------------------- recipes


@pytest.mark.parametrize("step, said", [
    ({"op": "bypass_node", "node": "/Add", "input_index": 1.5}, "'input_index' must be a whole number"),
    ({"op": "rename_tensor", "old": 1, "new": "y"}, "'old' must be a string"),
    ({"op": "set_opset", "domain": "ai.onnx", "version": [1, 2]}, "'version' must be"),
    ({"op": "set_dims", "tensor": "input.1", "dims": 1}, "'dims' must be"),
    ({"op": "set_dims", "tensor": "input.1", "dims": {"²": 1}}, "axis"),
    ({"op": "merge", "other": "b.onnx", "connect": 1}, "'connect' must be a mapping"),
    ({"op": "insert_node", "after": "input.1", "op_type": "Relu", "inputs": "x"}, "'inputs' must be a list"),
    ({"op": "remove_node", "node": "/Add", "downstream": "yes"}, "'downstream' must be true or false"),
    ({"op": "set_initializer", "name": "w", "value": {"value": [1], "dtype": "object"}}, "dtype"),
])
def test_recipe_arguments_are_checked_before_any_step(tmp_path: Path, capfd: pytest.CaptureFixture[str],
                                                      step: dict[str, object], said: str) -> None:
    recipe = tmp_path / "r.json"
    recipe.write_text(json.dumps([{"op": "cleanup"}, step]))
    out = tmp_path / "out.onnx"
    line = refused(["edit", str(fixture("whole_model.onnx")), str(out), "--recipe", str(recipe)], capfd,
                   f"step 2 ({step['op']})", said, out=out)
    assert "step 1" not in line


# -------------------------------------------------------------------------------------- manifests


@pytest.fixture
def parts(tmp_path: Path) -> Path:
    folder = tmp_path / "parts"
    assert main(["split", str(fixture("whole_model.onnx")), str(folder), "--parts", "2"]) == 0
    return folder


def _edit_manifest(folder: Path, change: object) -> None:
    path = folder / "manifest.json"
    data = json.loads(path.read_text())
    change(data)  # type: ignore[operator]
    path.write_text(json.dumps(data).replace('"1e400"', "1e400"))  # a JSON number that overflows to inf


@pytest.mark.parametrize("change, said", [
    (lambda d: d.update(source=[1, 2]), "'source' must be an object"),
    (lambda d: d["fragments"][0].update(nodes="1e400"), "'nodes' must be a whole number"),
    (lambda d: d["fragments"][0]["inputs"][0].update(dtype="quux"), "'dtype' must be an ONNX dtype"),
    (lambda d: d["inputs"][0].update(dtype=7), "'dtype'"),
    (lambda d: d["fragments"][1]["inputs"][0].update({"from": 5}), "'from'"),
    (lambda d: d["fragments"][0].update(file="../outside/part_00.onnx"), "outside the split folder"),
    (lambda d: d["fragments"][0].update(file="/etc/passwd"), "not a file name inside"),
    (lambda d: d.update(fragments=[]), "no fragments"),
    (lambda d: d["fragments"][0].update(file="x" * 100_000), "100000 characters"),
])
def test_manifest_fields_are_checked(parts: Path, capfd: pytest.CaptureFixture[str], change: object,
                                     said: str) -> None:
    _edit_manifest(parts, change)
    capfd.readouterr()
    save = parts.parent / "chain.npz"
    refused(["run-chain", str(parts), "--save", str(save)], capfd, "manifest.json", said, out=save)


def test_manifest_fragment_through_a_symlink_outside(parts: Path, capfd: pytest.CaptureFixture[str]) -> None:
    outside = parts.parent / "outside"
    outside.mkdir()
    shutil.copy(parts / "part_00.onnx", outside / "part_00.onnx")
    (parts / "part_00.onnx").unlink()
    (parts / "part_00.onnx").symlink_to(outside / "part_00.onnx")
    capfd.readouterr()
    refused(["run-chain", str(parts)], capfd, "part_00.onnx", "outside the split folder")


def test_manifest_nesting_is_bounded(parts: Path, capfd: pytest.CaptureFixture[str]) -> None:
    path = parts / "manifest.json"
    text = path.read_text()
    path.write_text(text[:-2] + ', "deep": ' + "[" * 50_000 + "]" * 50_000 + "}\n")
    capfd.readouterr()
    refused(["run-chain", str(parts)], capfd, "manifest.json", "deep")


def test_manifest_records_sizes_and_does_not_hash_a_file_of_another_size(parts: Path,
                                                                          capfd: pytest.CaptureFixture[str]) -> None:
    data = json.loads((parts / "manifest.json").read_text())
    assert data["fragments"][0]["size"] == (parts / "part_00.onnx").stat().st_size
    assert data["source"]["size"] == fixture("whole_model.onnx").stat().st_size
    with open(parts / "part_00.onnx", "r+b") as handle:
        handle.truncate(1 << 40)  # sparse: hashing it would read a tebibyte of zeros
    capfd.readouterr()
    refused(["run-chain", str(parts)], capfd, "part_00.onnx", f"has {1 << 40} bytes")


# ----------------------------------------------------------------------------------- ONNX Runtime


def _model(tmp_path: Path, node: onnx.NodeProto, second: onnx.ValueInfoProto) -> Path:
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None]), second],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_runtime_failure_is_one_line_without_onnxruntime_log(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    model = _model(tmp_path, helper.make_node("Reshape", ["x", "s"], ["y"], name="reshape"),
                   helper.make_tensor_value_info("s", TensorProto.INT64, [1]))
    shape = tmp_path / "s.npy"
    np.save(shape, np.array([4], np.int64))
    x = tmp_path / "x.npy"
    np.save(x, np.zeros(6, np.float32))
    refused(["run", str(model), "--input", f"x={x}", "--input", f"s={shape}"], capfd, "ONNX Runtime", "reshape")


def test_runtime_allocation_failure_is_one_line(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    model = _model(tmp_path, helper.make_node("Expand", ["x", "s"], ["y"], name="expand"),
                   helper.make_tensor_value_info("s", TensorProto.INT64, [1]))
    shape = tmp_path / "s.npy"
    np.save(shape, np.array([2**50], np.int64))
    x = tmp_path / "x.npy"
    np.save(x, np.zeros(1, np.float32))
    refused(["run", str(model), "--input", f"x={x}", "--input", f"s={shape}"], capfd, "out of memory", "'expand'",
            str(2**52))



# ------------------------------------------------------------------------- findings of the fuzz campaign


def test_undecodable_argv_bytes_in_a_name(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out.onnx"
    refused(["edit", str(fixture("my_add.onnx")), str(out), "--replace-op", "Add=\udcff"], capfd, "new_op_type",
            "UTF-8", out=out)


@pytest.mark.parametrize("header", [b"{", b"1" * 60_000])
def test_npy_header_that_is_not_a_literal(tmp_path: Path, capfd: pytest.CaptureFixture[str], header: bytes) -> None:
    feed = tmp_path / "x.npy"
    feed.write_bytes(b"\x93NUMPY\x02\x00" + len(header).to_bytes(4, "little") + header)
    refused(["run", str(fixture("model_static.onnx")), "--input", f"in={feed}"], capfd, str(feed))
    refused(["edit", str(fixture("model_static.onnx")), str(tmp_path / "o.onnx"), "--set-initializer",
             f"conv.weight={feed}"], capfd, str(feed), out=tmp_path / "o.onnx")


def test_names_too_long_for_the_file_system(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    long = tmp_path / ("a" * 300)
    refused(["run-chain", str(long)], capfd, "a" * 300)
    refused(["run", str(fixture("model_static.onnx")), "--input", f"in={long}.npy"], capfd, "a" * 300)
    model = str(fixture("model_static.onnx"))
    refused(["compare", model, "--reference", f"{long}.npz"], capfd, "a" * 300)
    refused(["edit", model, str(tmp_path / "o.onnx"), "--recipe", f"{long}.json"], capfd, "a" * 300)


@pytest.mark.parametrize("dim", ["٣", NINES])
def test_extract_typed_input_dims_are_ascii_and_bounded(tmp_path: Path, capfd: pytest.CaptureFixture[str],
                                                        dim: str) -> None:
    out = tmp_path / "out.onnx"
    spec = f"input.1:float32:[1,{dim},10,10]"
    refused(["extract", str(fixture("whole_model.onnx")), str(out), "--inputs", spec, "--outputs", "output"], capfd,
            spec, out=out)


def test_onnxruntime_log_lines_are_shown_with_verbose(tmp_path: Path) -> None:
    import subprocess
    import sys

    model = _model(tmp_path, helper.make_node("Reshape", ["x", "s"], ["y"], name="reshape"),
                   helper.make_tensor_value_info("s", TensorProto.INT64, [1]))
    np.save(tmp_path / "s.npy", np.array([4], np.int64))
    np.save(tmp_path / "x.npy", np.zeros(6, np.float32))
    argv = ["run", str(model), "--input", f"x={tmp_path / 'x.npy'}", "--input", f"s={tmp_path / 's.npy'}"]
    quiet = subprocess.run([sys.executable, "-m", "graphkit", *argv], capture_output=True, text=True, check=False)
    loud = subprocess.run([sys.executable, "-m", "graphkit", "-v", *argv], capture_output=True, text=True, check=False)
    assert quiet.returncode == loud.returncode == 2
    assert "[E:onnxruntime" not in quiet.stderr and len(quiet.stderr.strip().splitlines()) == 2
    assert "[E:onnxruntime" in loud.stderr and "graphkit: error: ONNX Runtime failed running" in loud.stderr


def test_a_recorded_source_path_too_long_means_not_at_hand(parts: Path, capfd: pytest.CaptureFixture[str]) -> None:
    _edit_manifest(parts, lambda d: d["source"].update(relative_path="x" * 100_000, path="/" + "y" * 100_000))
    capfd.readouterr()
    assert main(["run-chain", str(parts), "--json"]) == 0
    result = json.loads(capfd.readouterr().out)
    assert "not at hand" in json.dumps(result)
