"""inspect --nodes/--tensors/--stats on the command line, and the hints that send users to inspect."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import LIGHT, PACKAGE, fixture
from test_listing import transformer

import graphkit as gk
from graphkit.cli import main


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(["inspect", "--json", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def test_nodes_lists_position_name_op_and_typed_tensors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "--nodes", str(fixture("whole_model.onnx"))]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "/Add " in line)
    assert re.match(r"#\d+\s+/Add\s+Add\s", row)
    assert "/convs3/convs3.1/Conv_output_0 float32[1," in row


def test_nodes_json_filtered_by_op_and_name(capsys: pytest.CaptureFixture[str]) -> None:
    data = _json(capsys, "--nodes", "--op", "Conv", "--name", "/convs1/*", str(fixture("whole_model.onnx")))
    assert [n["name"] for n in data["nodes"]] == [f"/convs1/convs1.{i}/Conv" for i in range(3)]
    assert data["filtered"] is True and "by_op" not in data


def test_an_op_type_the_model_lacks_is_exit_2_with_did_you_mean(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "--nodes", "--op", "Cnv", str(fixture("whole_model.onnx"))]) == 2
    err = capsys.readouterr().err
    assert "no node of op type named 'Cnv'" in err and "did you mean 'Conv'" in err and "Traceback" not in err
    with pytest.raises(gk.NameNotFoundError, match="'Cnv'"):
        gk.list_nodes(gk.load(fixture("whole_model.onnx")), op=["Cnv"])


def test_a_name_glob_matching_nothing_is_a_note(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "--nodes", "--name", "Conv", str(fixture("whole_model.onnx"))]) == 0
    captured = capsys.readouterr()
    assert "graphkit: note: --name 'Conv' matches no node or tensor" in captured.err and "'*Conv*'" in captured.err
    assert main(["inspect", "--nodes", "--name", "*Conv*", str(fixture("whole_model.onnx"))]) == 0
    assert "note" not in capsys.readouterr().err


def test_tensors_show_kind_and_producer(capsys: pytest.CaptureFixture[str]) -> None:
    data = _json(capsys, "--tensors", str(fixture("whole_model.onnx")))
    tensors = {t["name"]: t for t in data["tensors"]}
    assert tensors["/Add_output_0"]["producer"] == "/Add"
    assert tensors["input.1"]["kind"] == "input"
    assert tensors["convs2.0.weight"]["kind"] == "initializer"


def test_stats_with_dims_on_a_transformer_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t.onnx"
    gk.save(transformer(), path)
    assert main(["inspect", "--stats", str(path)]) == 0
    out = capsys.readouterr().out
    assert "nodes not counted" in out and "--dim" in out  # seq and batch are open: reported, not guessed
    data = _json(capsys, "--stats", "--dim", "batch=1", "--dim", "seq=16", str(path))
    assert data["unknown"] == [] and data["dims"] == {"batch": 1, "seq": 16}
    assert data["macs"] == sum(op["macs"] for op in data["by_op"])
    shaped = _json(capsys, "--stats", "--shape", "x=1x16x32", str(path))
    assert shaped["macs"] == data["macs"]


def test_stats_text_has_per_op_and_total_lines(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "--stats", str(LIGHT / "light_resnet50.onnx")]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^Conv\s+53\s+23\.45 M\s+4\.09 G", out, re.M)
    assert "25.61 M parameters, 4.12 G MACs (4,115,630,056)" in out


def test_selection_flags_without_a_listing_are_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "--op", "Conv", str(fixture("whole_model.onnx"))]) == 2
    assert "hint: add --nodes, --tensors or --stats" in capsys.readouterr().err


def test_a_bad_shape_is_exit_2_naming_the_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "--stats", "--shape", "nope=1x3", str(fixture("whole_model.onnx"))]) == 2
    err = capsys.readouterr().err
    assert "'nope'" in err and "input.1" in err


# --- hints that send users to inspect name the flag that shows what they promise ------------------


def test_unknown_tensor_hint_names_inspect_tensors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = main(["extract", str(fixture("whole_model.onnx")), str(tmp_path / "o.onnx"),
                 "--inputs", "input.1", "--outputs", "qqqqqqqqqqqqqqqqqqqqqqqq"])
    assert code == 2
    assert "whole_model.onnx --tensors' lists the names" in capsys.readouterr().err


def test_unknown_node_hint_names_inspect_nodes() -> None:
    from graphkit.errors import NodeNotFoundError, not_found

    err = not_found(NodeNotFoundError, "node", "zzzzzzzz", ["conv_a", "conv_b"], where="m.onnx")
    assert (err.cli_hint or "").startswith("'python -m graphkit inspect m.onnx --nodes' lists the names")
    assert (err.hint or "").startswith("gk.list_nodes(model) lists the names")
    err = not_found(NodeNotFoundError, "graph input", "zzzzzzzz", ["input_a"])
    assert (err.cli_hint or "").startswith("'python -m graphkit inspect MODEL' lists the names")
    assert (err.hint or "").startswith("gk.summarize(model) lists the names")


def test_split_at_an_input_hint_names_inspect_tensors() -> None:
    with pytest.raises(gk.UsageError) as err:
        gk.split(gk.load(fixture("whole_model.onnx")), at=["input.1"])
    assert "inspect MODEL --tensors" in (err.value.cli_hint or "") and "gk.list_nodes(model)" in (err.value.hint or "")


def test_every_hint_pointing_at_inspect_names_a_flag_or_the_summary() -> None:
    """A hint that says 'inspect' promises names; the plain summary shows only inputs and outputs."""
    loose = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if "graphkit inspect" in line and "--" not in line and "inspect MODEL'" not in line \
                    and "{path}{lister}" not in line and "MODEL --nodes" not in line:
                loose.append(f"{path.name}:{number}: {line.strip()}")
    assert not loose, "\n".join(loose)


def test_duplicate_node_name_hint_names_inspect_nodes() -> None:
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="dup"), helper.make_node("Relu", ["r"], ["y"], name="dup")],
        "dups", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    with pytest.raises(gk.EditError) as err:
        gk.set_op_type(gk.Model(helper.make_model(graph)), node="dup", op_type="Sigmoid")
    assert "'#3'" in (err.value.hint or "") and "gk.list_nodes(model) lists the positions" in (err.value.hint or "")
    assert "inspect MODEL --nodes' lists the positions" in (err.value.cli_hint or "")
