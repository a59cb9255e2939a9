"""python -m graphkit split: fragments and manifest written, table or JSON printed, errors leave nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import digest, fixture

from graphkit.cli import main

TRUNK = "/convs1/convs1.2/Conv_output_0"


def test_split_parts_writes_fragments_and_manifest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = digest(fixture("whole_model.onnx"))
    out = tmp_path / "parts"
    assert main(["split", str(fixture("whole_model.onnx")), str(out), "--parts", "3"]) == 0
    text = capsys.readouterr().out
    assert "part_00.onnx" in text and f"{TRUNK} <- #0" in text and "output (graph output)" in text
    assert f"wrote 3 fragments and manifest.json to {out}" in text
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "part_00.onnx", "part_01.onnx", "part_02.onnx"]
    assert digest(fixture("whole_model.onnx")) == before


def test_split_at_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "parts"
    assert main(["split", str(fixture("whole_model.onnx")), str(out), "--at", TRUNK, "/Add_output_0", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data == json.loads((out / "manifest.json").read_text())
    assert [f["nodes"] for f in data["fragments"]] == [3, 5, 3]
    assert data["method"] == {"at": [TRUNK, "/Add_output_0"]}


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--at", "/nope"], "no tensor named '/nope'"),
        (["--at", "input.1"], "it is a graph input"),
        (["--parts", "40"], "only 11 nodes"),
    ],
)
def test_split_errors_exit_2_and_write_nothing(
    tmp_path: Path, flags: list[str], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["split", str(fixture("whole_model.onnx")), str(tmp_path / "parts"), *flags]) == 2
    err = capsys.readouterr().err
    assert words in err and "hint:" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_split_needs_at_or_parts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["split", str(fixture("whole_model.onnx")), str(tmp_path / "p")]) == 2
    assert "one of the arguments --at --parts is required" in capsys.readouterr().err


def test_split_refuses_a_non_empty_folder_without_overwrite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "parts"
    assert main(["split", str(fixture("whole_model.onnx")), str(out), "--parts", "2"]) == 0
    first = {p.name: digest(p) for p in out.iterdir()}
    assert main(["split", str(fixture("whole_model.onnx")), str(out), "--parts", "3"]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert {p.name: digest(p) for p in out.iterdir()} == first
    assert main(["split", str(fixture("whole_model.onnx")), str(out), "--parts", "3", "--overwrite"]) == 0
    assert len(list(out.glob("part_*.onnx"))) == 3
