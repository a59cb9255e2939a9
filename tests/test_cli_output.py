"""Output people can read: capped lists with "… N more (--all)", tables that fit the terminal, diff
--only, check's unsorted nodes in one line, inspect's Constant weights, body nodes and non-tensor types."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import fixture
from onnx import TensorProto, helper

import graphkit as gk
from graphkit._summary import TensorSig, type_name
from graphkit.cli import _render, main


def test_long_cells_are_shortened_in_the_middle_to_fit(capsys: pytest.CaptureFixture[str]) -> None:
    name = "/encoder/layers.11/attention/self/query/MatMul_output_0"
    _render.table([(name, "float32", "1x128x768")], ["tensor", "dtype", "shape"], width=40)
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= 40
    assert lines[2].startswith("/encoder/") and "…" in lines[2] and "MatMul_output_0"[-6:] in lines[2]


def test_tables_keep_full_names_when_not_on_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    name = "x" * 300
    _render.table([(name, "a")])
    assert name in capsys.readouterr().out


def test_shorten_keeps_both_ends() -> None:
    assert _render.shorten("abcdefghijklmnop", 9) == "abcd…mnop"
    assert _render.shorten("short", 9) == "short"


def _chain_model(n: int) -> gk.Model:
    b = gk.GraphBuilder("chain")
    x = b.input("x", "float32", [1, 2])
    for i in range(n):
        x = b.node("Relu", [x], name=f"relu_{i}", outputs=[f"t{i}"])
    b.output(b.node("Identity", [x], name="out", outputs=["y"]), "float32", [1, 2])
    return b.build()


def test_expose_all_caps_its_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "chain.onnx"
    gk.save(_chain_model(60), src)
    assert main(["expose", str(src), str(tmp_path / "all.onnx"), "--all"]) == 0
    out = capsys.readouterr().out
    assert "… 20 more (--json lists them)" in out and "t59" not in out


def test_diff_caps_and_filters_by_kind(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _chain_model(50)
    b = a.copy()
    for node in b.proto.graph.node[:45]:
        node.op_type = "Sigmoid"
    helper.set_model_props(b.proto, {"note": "edited"})
    pa, pb = tmp_path / "a.onnx", tmp_path / "b.onnx"
    gk.save(a, pa)
    gk.save(b, pb)
    assert main(["diff", str(pa), str(pb)]) == 1
    out = capsys.readouterr().out
    assert "… 6 more (--all)" in out  # 45 nodes and 1 metadata entry, 40 listed
    assert main(["diff", str(pa), str(pb), "--only", "metadata"]) == 1
    out = capsys.readouterr().out
    assert "+ metadata 'note'" in out and "node" not in out.split("+++")[1].splitlines()[1]
    assert main(["diff", str(pa), str(pb), "--only", "weights", "--json"]) == 0  # no weight changed
    assert json.loads(capsys.readouterr().out)["changes"] == []


def test_check_folds_unsorted_nodes_into_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = _chain_model(10)
    nodes = list(model.proto.graph.node)
    model.proto.graph.ClearField("node")
    model.proto.graph.node.extend(reversed(nodes))
    path = tmp_path / "reversed.onnx"
    onnx.save(model.proto, path)  # (gk.save would refuse the unsorted graph)
    assert main(["check", str(path)]) == 1
    out = capsys.readouterr().out
    assert "10 nodes are out of order" in out and "toposort" in out
    assert out.count("[unsorted]") == 1
    assert main(["check", str(path), "--all"]) == 1
    assert capsys.readouterr().out.count("[unsorted]") == 10


def test_inspect_counts_constant_weights_and_body_nodes(capsys: pytest.CaptureFixture[str]) -> None:
    b = gk.GraphBuilder("consts")
    x = b.input("x", "float32", [4])
    w = b.constant(np.ones(1000, np.float32)[:4], "w")
    b.output(b.node("Add", [x, w], name="add", outputs=["y"]), "float32", [4])
    summary = gk.summarize(b.build())
    assert (summary.initializer_count, summary.constant_count, summary.constant_bytes) == (0, 1, 16)
    loop = gk.summarize(gk.load(fixture("if_outer_scope.onnx")))
    assert loop.subgraph_node_count > 0 and loop.node_count > loop.subgraph_node_count
    assert main(["inspect", str(fixture("if_outer_scope.onnx"))]) == 0
    assert f"{loop.subgraph_node_count} in subgraph bodies" in capsys.readouterr().out


def test_string_sequence_and_map_types_are_named() -> None:
    assert type_name(helper.make_tensor_type_proto(TensorProto.STRING, [2])) == "string"
    seq = helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, None))
    assert type_name(seq) == "sequence(float32)"
    mapping = helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, None))
    assert type_name(mapping) == "map(int64,float32)"
    value = helper.make_value_info("s", seq)
    assert TensorSig.of(value) == TensorSig("s", "sequence(float32)", None)
    assert TensorSig.of(helper.make_tensor_value_info("t", TensorProto.STRING, [3])).dtype == "string"
