"""The infer-shapes verb: what it writes and prints, exit codes, and nothing written on error."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from conftest import ROOT, fixture

import graphkit as gk
from graphkit.cli import main


def test_infer_shapes_writes_every_type_and_prints_the_counts(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "typed.onnx"
    assert main(["infer-shapes", str(fixture("whole_model.onnx")), str(out)]) == 0
    assert capsys.readouterr().out.startswith(f"wrote {out}: 11 tensors typed, 0 untyped, 0 declared types replaced")
    typed = gk.load(out)
    onnx.checker.check_model(typed.proto, full_check=True)
    assert len(typed.lazy_proto.graph.value_info) == 10  # every node output but the graph output


def test_infer_shapes_json_counts_and_lists_the_replaced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stale = gk.load(fixture("whole_model.onnx")).copy()
    stale.lazy_proto.graph.value_info.append(
        onnx.helper.make_tensor_value_info("/Add_output_0", onnx.TensorProto.FLOAT, [1, 3, 5, 5]))
    source = tmp_path / "stale.onnx"
    gk.save(stale, source)
    assert main(["infer-shapes", str(source), str(tmp_path / "typed.onnx"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["typed"], data["untyped"], data["replaced"]) == (11, 0, 1)
    assert data["replaced_types"][0]["tensor"] == "/Add_output_0"
    assert data["replaced_types"][0]["before"] == "float32[1,3,5,5]"
    assert data["replaced_types"][0]["after"] == "float32[1,3,10,10]"


def test_infer_shapes_lists_custom_ops_by_node(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "typed.onnx"
    assert main(["infer-shapes", str(fixture("debug_markers.onnx")), str(out), "--no-check"]) == 0
    text = capsys.readouterr().out
    rows = [line.split() for line in text.splitlines()]
    assert "untyped:" in text and ["/Debug_0_output_0", "/Debug_0", "(my::Debug)", "main", "graph", "custom", "op:"] in [
        r[:7] for r in rows]


def test_infer_shapes_contradiction_exits_2_and_writes_nothing(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    bad = onnx.parser.parse_model("""
<ir_version: 8, opset_import: ["" : 17]>
g (float[2, 3] x, float[4] b) => (float[2, 3] z) {
  z = Add(x, b)
}
""")
    source, out = tmp_path / "bad.onnx", tmp_path / "typed.onnx"
    onnx.save(bad, source)
    assert main(["infer-shapes", str(source), str(out)]) == 2
    err = capsys.readouterr().err
    assert "graphkit: error:" in err and "node #0 (Add), which makes 'z'" in err and "'b' float32[4]" in err
    assert "hint:" in err and "Traceback" not in err
    assert not out.exists()


def test_infer_shapes_through_python_m(tmp_path: Path) -> None:
    out = tmp_path / "typed.onnx"
    done = subprocess.run([sys.executable, "-m", "graphkit", "infer-shapes", str(fixture("loop_scan.onnx")), str(out)],
                          capture_output=True, text=True, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr
    assert "12 tensors typed, 0 untyped" in done.stdout
