"""Bad input never crashes, hangs or loses data; a hostile model cannot reach outside its folder.

Each bad model is made here; each verb must answer with one `graphkit: error:` line naming the problem and
a hint, exit 2 (check: exit 1 for a readable model whose graph is wrong), no traceback, no output file,
and its input's bytes unchanged.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import FIXTURES, digest, fixture

from graphkit.cli import main


def _proto(name: str = "whole_model.onnx") -> onnx.ModelProto:
    return onnx.load(str(fixture(name)))


def _write(tmp: Path, proto: onnx.ModelProto) -> Path:
    path = tmp / "bad.onnx"
    onnx.save(proto, str(path))
    return path


Needle = str | tuple[str, ...]


def truncated(tmp: Path) -> tuple[Path, str]:
    data = fixture("whole_model.onnx").read_bytes()
    (tmp / "bad.onnx").write_bytes(data[: len(data) * 2 // 3])
    return tmp / "bad.onnx", "not a readable ONNX model"


def corrupted(tmp: Path) -> tuple[Path, str]:
    data = bytearray(fixture("whole_model.onnx").read_bytes())
    data[5:40] = b"\xff" * 35
    (tmp / "bad.onnx").write_bytes(bytes(data))
    return tmp / "bad.onnx", "bad.onnx"


def not_onnx(tmp: Path) -> tuple[Path, str]:
    (tmp / "bad.onnx").write_text("name,value\nweights,1.0\n")
    return tmp / "bad.onnx", "not"


def empty(tmp: Path) -> tuple[Path, str]:
    (tmp / "bad.onnx").write_bytes(b"")
    return tmp / "bad.onnx", "empty"


def dangling(tmp: Path) -> tuple[Path, str]:
    proto = _proto()
    proto.graph.node[4].input[0] = "nowhere"
    return _write(tmp, proto), "nowhere"


def cycle(tmp: Path) -> tuple[Path, str]:
    proto = _proto()
    proto.graph.node[0].input[0] = proto.graph.node[2].output[0]
    return _write(tmp, proto), "cycle"


def duplicate_names(tmp: Path) -> tuple[Path, Needle]:
    proto = _proto()
    renamed = proto.graph.node[6].output[0]
    proto.graph.node[6].output[0] = proto.graph.node[5].output[0]
    # either the duplicated name, or (extract) the name its readers now miss
    return _write(tmp, proto), (proto.graph.node[5].output[0], renamed)


def unknown_op(tmp: Path) -> tuple[Path, str]:
    proto = _proto()
    proto.graph.node[3].op_type = "Convolve"
    return _write(tmp, proto), "Convolve"


def unknown_domain(tmp: Path) -> tuple[Path, str]:
    proto = _proto()
    proto.graph.node[3].domain = "acme.secret"
    return _write(tmp, proto), "acme.secret"


def negative_dim(tmp: Path) -> tuple[Path, str]:
    proto = _proto()
    proto.graph.input[0].type.tensor_type.shape.dim[2].dim_value = -20
    return _write(tmp, proto), "input.1"


def enormous_dim(tmp: Path) -> tuple[Path, str]:
    proto = _proto()
    proto.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 2**45
    return _write(tmp, proto), "input.1"


def wrong_data_size(tmp: Path) -> tuple[Path, str]:
    proto = _proto()
    tensor = proto.graph.initializer[0]
    tensor.raw_data = tensor.raw_data[:-8]
    return _write(tmp, proto), tensor.name


def _external(tmp: Path) -> Path:
    shutil.copytree(FIXTURES / "ext_weights", tmp / "ext")
    return tmp / "ext" / "model.onnx"


def missing_external(tmp: Path) -> tuple[Path, str]:
    path = _external(tmp)
    (path.parent / "model.data").unlink()
    return path, "model.data"


def external_past_end(tmp: Path) -> tuple[Path, str]:
    path = _external(tmp)
    proto = onnx.load(str(path), load_external_data=False)
    entries = proto.graph.initializer[0].external_data
    next(e for e in entries if e.key == "offset").value = str(10**9)
    onnx.save(proto, str(path))
    return path, "fc1.weight"


def hostile_parent(tmp: Path) -> tuple[Path, str]:
    path = _external(tmp)
    (tmp / "secret").write_bytes(np.arange(100_000, dtype=np.uint8).tobytes())
    proto = onnx.load(str(path), load_external_data=False)
    next(e for e in proto.graph.initializer[0].external_data if e.key == "location").value = "../../secret"
    onnx.save(proto, str(path))
    return path, "../../secret"


def hostile_symlink(tmp: Path) -> tuple[Path, str]:
    path = _external(tmp)
    outside = tmp / "outside.data"
    shutil.move(path.parent / "model.data", outside)
    os.symlink(outside, path.parent / "model.data")
    return path, "outside"


def hostile_absolute(tmp: Path) -> tuple[Path, str]:
    path = _external(tmp)
    proto = onnx.load(str(path), load_external_data=False)
    next(e for e in proto.graph.initializer[0].external_data if e.key == "location").value = "/etc/passwd"
    onnx.save(proto, str(path))
    return path, "/etc/passwd"


FILE_LEVEL: list[Callable[[Path], tuple[Path, Needle]]] = [
    truncated, corrupted, not_onnx, empty, missing_external, external_past_end,
    hostile_parent, hostile_symlink, hostile_absolute,
]
GRAPH_LEVEL: list[Callable[[Path], tuple[Path, Needle]]] = [
    dangling, cycle, duplicate_names, unknown_op, unknown_domain, negative_dim, enormous_dim, wrong_data_size,
]


def _last_output(model: Path) -> str:
    try:
        return onnx.load(str(model), load_external_data=False).graph.output[0].name
    except Exception:  # unreadable on purpose: any name will do, loading fails first
        return "output"


def _snapshot(folder: Path) -> dict[str, str]:
    return {p.name: digest(p) for p in folder.iterdir() if p.is_file() and not p.is_symlink()}


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _assert_clean_error(err: str, needle: str | tuple[str, ...]) -> None:
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert lines[0].startswith("graphkit: error: "), err
    needles = (needle,) if isinstance(needle, str) else needle
    assert any(n in lines[0] for n in needles), f"{needles!r} not named in: {lines[0]}"
    assert len(lines) == 2 and lines[1].startswith("hint: "), err


# Each verb as it is called on a model path; outputs (if any) go to out/.
VERBS: dict[str, Callable[[Path, Path], list[str]]] = {
    "inspect": lambda m, out: ["inspect", str(m)],
    "check": lambda m, out: ["check", str(m)],
    "toposort": lambda m, out: ["toposort", str(m), str(out / "r.onnx")],
    "edit": lambda m, out: ["edit", str(m), str(out / "r.onnx"), "--set-opset", "ai.onnx=17", "--allow-noop"],
    "extract": lambda m, out: ["extract", str(m), str(out / "r.onnx"), "--outputs", _last_output(m)],
    "expose": lambda m, out: ["expose", str(m), str(out / "r.onnx"), "--all"],
    "split": lambda m, out: ["split", str(m), str(out / "parts"), "--parts", "2"],
    "run": lambda m, out: ["run", str(m), "--save", str(out / "r.npz")],
    "compare": lambda m, out: ["compare", str(m), "--save-report", str(out / "r.json")],
    "markers": lambda m, out: ["markers", str(m), str(out / "r.onnx")],
    "diff": lambda m, out: ["diff", str(m), str(fixture("whole_model.onnx"))],
    "merge": lambda m, out: ["merge", str(m), str(fixture("linear_func.onnx")), str(out / "r.onnx"),
                             "--connect", "output=a", "--prefixes", "a/", "b/"],
}
WRITES = {"toposort", "edit", "extract", "expose", "split", "run", "compare"}  # verbs whose single input's graph problems must stop the write


def _assert_refused(verb: str, make: Callable[[Path], tuple[Path, Needle]], tmp_path: Path,
                    capsys: pytest.CaptureFixture[str]) -> None:
    model, needle = make(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    before = _snapshot(model.parent)
    code, _, err = _run(VERBS[verb](model, out), capsys)
    assert code == 2
    _assert_clean_error(err, needle)
    assert list(out.iterdir()) == []
    assert _snapshot(model.parent) == before


@pytest.mark.parametrize("make", FILE_LEVEL, ids=lambda f: f.__name__)
@pytest.mark.parametrize("verb", list(VERBS))
def test_unreadable_or_hostile_input(verb: str, make: Callable[[Path], tuple[Path, Needle]], tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    _assert_refused(verb, make, tmp_path, capsys)


@pytest.mark.parametrize("make", GRAPH_LEVEL, ids=lambda f: f.__name__)
@pytest.mark.parametrize("verb", [v for v in VERBS if v in WRITES])
def test_invalid_graph_is_refused_by_writing_verbs(verb: str, make: Callable[[Path], tuple[Path, Needle]],
                                                   tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _assert_refused(verb, make, tmp_path, capsys)


@pytest.mark.parametrize("make", GRAPH_LEVEL, ids=lambda f: f.__name__)
def test_check_lists_graph_problems_with_exit_1(make: Callable[[Path], tuple[Path, Needle]], tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    model, needle = make(tmp_path)
    code, out, err = _run(["check", str(model)], capsys)
    assert code == 1 and err == ""
    assert (needle if isinstance(needle, str) else needle[0]) in out and "FAILED" in out


def test_read_only_folder_and_full_disk_are_clear(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    from graphkit import _io as io

    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(io, "_write_proto", refuse)
    code, _, err = _run(["toposort", str(fixture("whole_model.onnx")), str(tmp_path / "o.onnx")], capsys)
    assert code == 2
    _assert_clean_error(err, "read-only")
    assert list(tmp_path.iterdir()) == []


def test_run_refuses_an_in_memory_model_pointing_outside(tmp_path: Path) -> None:
    import graphkit as gk

    path, _ = hostile_parent(tmp_path)
    proto = onnx.load(str(path), load_external_data=False)
    model = gk.Model(proto, base_dir=path.parent, path=None)  # built in memory: never went through load
    with pytest.raises(gk.UnsafePathError, match=r"\.\./\.\./secret"):
        gk.run(model, feed_options=gk.FeedOptions(shapes={"x": [1, 64]}))
    with pytest.raises(gk.UnsafePathError):
        gk.save(model, tmp_path / "copy.onnx")
    assert not (tmp_path / "copy.onnx").exists()


def test_inspect_of_a_lazily_loaded_model_counts_no_external_data(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import graphkit as gk
    from graphkit import _io as io
    from graphkit._model import is_borrowed

    monkeypatch.setattr(io, "LAZY_TENSOR_MIN", 1024)
    model = gk.load(fixture("srcnn.onnx"), lazy=True)
    assert any(is_borrowed(t) for t in model.lazy_proto.graph.initializer)
    summary = gk.summarize(model)
    assert summary.external_files == [] and summary.external_bytes == 0
    assert summary.initializer_bytes > 60_000


@pytest.mark.parametrize(
    "args",
    [
        ["extract", "{m}", "{o}", "--inputs", "input.1", "--outputs", "output"],
        ["expose", "{m}", "{o}", "--tensors", "output"],
        ["edit", "{m}", "{o}", "--fixed", "input.1:0=1"],
        ["edit", "{m}", "{o}", "--cleanup"],
    ],
    ids=["extract-everything", "expose-an-output", "edit-same-dim", "edit-cleanup-clean"],
)
def test_no_silent_no_ops(args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "o.onnx"
    filled = [a.format(m=fixture("whole_model.onnx"), o=out) for a in args]
    code, _, err = _run(filled, capsys)
    assert code == 2 and "nothing" in err and "--allow-noop" in err
    assert not out.exists()
    code, _, _ = _run([*filled, "--allow-noop"], capsys)
    assert code == 0 and out.exists()
