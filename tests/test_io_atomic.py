"""Crash-consistent saves: a model and its data file are replaced as a pair; temporaries never pile up."""

from __future__ import annotations

import os
import random
import signal
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import fixture

import graphkit as gk
from graphkit import _io as io
from graphkit import _write


def _weights_model(generation: int, tensors: int = 4, floats: int = 1024) -> gk.Model:
    """A model whose every weight holds ``generation`` (inline, in memory): one save of it is one version."""
    inits = [onnx.numpy_helper.from_array(np.full(floats, generation, np.float32), f"w{i}") for i in range(tensors)]
    nodes = [onnx.helper.make_node("Add", ["x", f"w{i}"], [f"y{i}"]) for i in range(tensors)]
    graph = onnx.helper.make_graph(
        nodes, "g", [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [floats])],
        [onnx.helper.make_tensor_value_info(f"y{i}", onnx.TensorProto.FLOAT, [floats]) for i in range(tensors)],
        inits)
    proto = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    proto.ir_version = 8
    return gk.Model(proto)


def _generation(path: Path) -> int:
    """The one generation every weight of the model at ``path`` holds (fails on a mix)."""
    model = gk.load(path)
    values = [gk.tensor_value(model, t) for t in model.graph.initializer]
    seen = {float(v) for value in values for v in (value.min(), value.max())}
    assert len(seen) == 1, f"mixed weights {sorted(seen)}"
    return int(seen.pop())


def _temps(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(_write.TEMP_PREFIX))


# ------------------------------------------------------------------------------- the data file's name


def test_saving_over_a_model_alternates_its_data_file_and_removes_the_old_one(tmp_path: Path) -> None:
    dest = tmp_path / "m.onnx"
    names = []
    for generation in range(4):
        gk.save(_weights_model(generation), dest, external=True)
        names.append(sorted(p.name for p in tmp_path.iterdir()))
        assert _generation(dest) == generation
    assert names == [["m.data", "m.onnx"], ["m.onnx", "m.onnx.data"]] * 2


def test_saving_inline_over_an_external_model_removes_its_data_file(tmp_path: Path) -> None:
    dest = tmp_path / "m.onnx"
    gk.save(_weights_model(1), dest, external=True)
    gk.save(_weights_model(2), dest, external=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"] and _generation(dest) == 2


def test_a_data_file_another_model_reads_is_left_in_place(tmp_path: Path) -> None:
    dest = tmp_path / "m.onnx"
    gk.save(_weights_model(1), dest, external=True)
    other = gk.load(dest)  # (reads m.data, which is about to become the previous data file)
    plan = io.WritePlan(overwrite=True, cli=False)
    plan.read(tmp_path / "m.data", "the external data of another.onnx", owner=str(tmp_path / "another.onnx"))
    plan.save(_weights_model(2), dest, external=True)
    assert (tmp_path / "m.data").is_file() and _generation(dest) == 2
    np.testing.assert_array_equal(gk.tensor_value(other, other.graph.initializer[0]), np.full(1024, 1, np.float32))


def test_an_explicit_location_alternates_with_a_numbered_name(tmp_path: Path) -> None:
    dest = tmp_path / "m.onnx"
    gk.save(_weights_model(1), dest, external=True, location="w.bin")
    gk.save(_weights_model(2), dest, external=True, location="w.bin")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "w.1.bin"] and _generation(dest) == 2


# ---------------------------------------------------------------------------------- temporary files


def test_temp_names_fit_the_name_limit_and_say_who_wrote_them() -> None:
    long = "m" * 250 + ".onnx"
    name = _write.temp_name(long)
    assert len(name.encode()) == 255 and name.startswith(f".gk-{os.getpid()}-") and name.endswith(".tmp")
    assert _write.temp_name("é" * 200).encode("utf-8", "surrogateescape").__len__() <= 255


def _dead_pid() -> int:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return pid


def test_the_next_save_removes_temporaries_of_dead_writers_only(tmp_path: Path) -> None:
    dest = tmp_path / ("m" * 245 + ".onnx")
    dead, alive = _dead_pid(), os.getppid()
    stale = [f".gk-{dead}-0123abcd.{dest.name}.tmp", f".gk-{dead}-0123abcd.{'m' * 245}.data.tmp"]
    kept = [f".gk-{alive}-0123abcd.{dest.name}.tmp", f".gk-{dead}-0123abcd.unrelated.onnx.tmp"]
    stale, kept = ([_write.fit_name(n[:-4], 255, ".tmp") for n in names] for names in (stale, kept))
    for name in stale + kept:
        (tmp_path / name).write_bytes(b"partial")
    gk.save(_weights_model(1), dest, external=True)
    assert _temps(tmp_path) == sorted(kept)


def test_a_failed_save_keeps_the_previous_pair_and_leaves_no_temporary(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dest = tmp_path / "m.onnx"
    gk.save(_weights_model(1), dest, external=True)
    before = sorted(p.name for p in tmp_path.iterdir())
    monkeypatch.setattr(io, "_write_proto", lambda *a, **k: (_ for _ in ()).throw(OSError(28, "full")))
    with pytest.raises(gk.WriteError, match="disk is full"):
        gk.save(_weights_model(2), dest, external=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == before and _generation(dest) == 1


def test_split_leaves_no_temporary_folder(tmp_path: Path) -> None:
    out = tmp_path / "parts"
    dead = _dead_pid()
    (tmp_path / f".gk-{dead}-0123abcd.parts.tmp").mkdir()
    gk.write_split(gk.split(gk.load(fixture("whole_model.onnx")), parts=2), out)
    gk.write_split(gk.split(gk.load(fixture("whole_model.onnx")), parts=3), out, overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["parts"]


# ------------------------------------------------------------------------------- killed mid-save


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_writer_killed_at_any_instant_leaves_the_old_or_the_new_model(tmp_path: Path) -> None:
    """~20 MB of external weights saved over the previous version, the writer SIGKILLed at random instants."""
    dest = tmp_path / "m.onnx"
    floats = 5 * 2**20 // 4  # 4 tensors of 5 MiB
    start = time.perf_counter()
    gk.save(_weights_model(0, floats=floats), dest, external=True)
    duration = time.perf_counter() - start
    rng = random.Random(18)
    outcomes = {"old": 0, "new": 0}
    current = 0
    for _ in range(15):
        model = _weights_model(current + 1, floats=floats)
        pid = os.fork()
        if pid == 0:  # the writer
            try:
                gk.save(model, dest, external=True)
            finally:
                os._exit(0)
        time.sleep(rng.uniform(0, duration * 1.5))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        found = _generation(dest)
        assert found in (current, current + 1)
        outcomes["old" if found == current else "new"] += 1
        current = found
    gk.save(_weights_model(current + 1, floats=floats), dest, external=True)
    assert _generation(dest) == current + 1
    assert len(list(tmp_path.iterdir())) == 2 and not _temps(tmp_path)
    print(f"killed saves: {outcomes}", file=sys.stderr)
