"""Progress: the callbacks long calls make, and the CLI's bar (tqdm on a terminal, silent otherwise)."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from conftest import fixture

import graphkit as gk
from graphkit import _progress
from graphkit.cli import _render, main


def test_check_refuses_what_cannot_be_called() -> None:
    with pytest.raises(gk.ArgumentTypeError) as err:
        _progress.check(5)
    assert "progress=" in err.value.message and "lambda done, total" in err.value.hint
    assert _progress.check(None) is None


def test_split_write_split_and_run_chain_report_each_fragment(tmp_path: Path) -> None:
    model = gk.load(fixture("whole_model.onnx"))
    built: list[tuple[int, int]] = []
    written: list[tuple[int, int]] = []
    ran: list[tuple[int, int]] = []
    parts = gk.split(model, parts=3, progress=lambda d, t: built.append((d, t)))
    folder = gk.write_split(parts, tmp_path / "parts", progress=lambda d, t: written.append((d, t)))
    gk.run_chain(folder, progress=lambda d, t: ran.append((d, t)))
    assert built == written == ran == [(1, 3), (2, 3), (3, 3)]


def test_the_bar_is_off_when_stderr_is_not_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stderr", io.StringIO())
    assert _render.progress("compare") is None
    assert _render.progress("compare", enabled=False) is None


def test_a_forced_bar_counts_and_is_erased_when_done(monkeypatch: pytest.MonkeyPatch) -> None:
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    step = _render.progress("split", enabled=True, unit="fragments")
    assert step is not None
    step(1, 3)
    step(3, 3)
    _render.progress_done()
    text = err.getvalue()
    assert "graphkit split" in text and "3/3" in text and "fragments" in text


@pytest.mark.parametrize(("flag", "shown"), [("--progress", True), ("--no-progress", False), (None, False)])
def test_split_and_run_chain_flags(flag: str | None, shown: bool, tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    extra = [flag] if flag else []
    assert main(["split", str(fixture("whole_model.onnx")), str(tmp_path / "p"), "--parts", "2", *extra]) == 0
    assert ("graphkit split" in capsys.readouterr().err) is shown
    assert main(["run-chain", str(tmp_path / "p"), *extra]) == 0
    assert ("graphkit run-chain" in capsys.readouterr().err) is shown


@pytest.mark.parametrize("flag", ["--progress", "--no-progress"])
def test_reduce_and_convert_auto_mixed_flags(flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    whole = str(fixture("whole_model.onnx"))
    edited = tmp_path / "edited.onnx"
    assert main(["edit", whole, str(edited), "--set-op-type", "/Add=Sub"]) == 0
    capsys.readouterr()
    assert main(["reduce", whole, str(tmp_path / "r"), "--candidate", str(edited), "--fails-on", "compare", flag]) == 0
    err = capsys.readouterr().err
    assert ("graphkit reduce" in err) is (flag == "--progress")
    if flag == "--progress":
        assert " runs" in err and re.search(r"\| (\d+)/\1 \[", err), err  # the bar reached its total
    assert main(["convert", whole, str(tmp_path / "half.onnx"), "--float16", "--auto-mixed", flag]) == 0
    err = capsys.readouterr().err
    assert ("graphkit convert" in err) is (flag == "--progress")
    assert main(["convert", whole, str(tmp_path / "plain.onnx"), "--float16", flag]) == 0
    err = capsys.readouterr().err
    assert ("graphkit convert" in err) is (flag == "--progress")
    if flag == "--progress":
        assert " weights" in err and re.search(r"\| (\d+)/\1 \[", err), err  # every float32 weight converted


def test_to_float16_reports_each_float32_weight() -> None:
    model = gk.load(fixture("whole_model.onnx"))
    calls: list[tuple[int, int]] = []
    plain = gk.to_float16(model)
    reported = gk.to_float16(model, progress=lambda done, total: calls.append((done, total)))
    floats = sum(1 for t in model.lazy_proto.graph.initializer if t.data_type == 1)
    assert calls == [(k, floats) for k in range(1, floats + 1)] and floats > 0
    assert reported.lazy_proto.SerializeToString() == plain.lazy_proto.SerializeToString()


def test_check_refuses_a_function_that_cannot_take_done_and_total() -> None:
    # found by the api fuzz campaign: gk.run_chain(fragments, progress=lambda: None) -> TypeError in report()
    model = gk.load(fixture("whole_model.onnx"))
    with pytest.raises(gk.ArgumentTypeError) as caught:
        gk.split(model, parts=2, progress=lambda: None)
    assert "progress=" in str(caught.value)
