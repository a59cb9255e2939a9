"""Output people can read: capped lists with "… N more (--all)", tables that fit the terminal, diff
--only, check's unsorted nodes in one line, inspect's Constant weights, body nodes and non-tensor types,
and ONNX Runtime's own log lines kept off the terminal unless -v."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import ROOT, fixture
from onnx import TensorProto, helper, numpy_helper

import graphkit as gk
from graphkit._summary import TensorSig, type_name
from graphkit.cli import _render, main


def test_long_cells_are_shortened_in_the_middle_to_fit(capsys: pytest.CaptureFixture[str]) -> None:
    name = "/encoder/layers.11/attention/self/query/MatMul_output_0"
    _render.table([(name, "float32", "1x128x768")], ["tensor", "dtype", "shape"], width=40)
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= 40
    assert lines[2].startswith("/encoder/") and "…" in lines[2] and "MatMul_output_0"[-6:] in lines[2]


@pytest.mark.parametrize("columns", [80, 120])
def test_compare_table_fits_the_terminal_leaving_out_columns_not_names(
        columns: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from graphkit.cli.compare import _print

    model = gk.load(fixture("whole_model.onnx"))
    result = gk.compare(model, gk.to_float16(gk.set_op_type(model, node="/Add", op_type="Sub")))
    monkeypatch.setattr(_render.shutil, "get_terminal_size", lambda: os.terminal_size((columns, 24)))
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    _print(result, show_all=False)
    lines = capsys.readouterr().out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("tensor "))
    rows = lines[head:head + 2 + len(result.tensors)]
    assert max(len(line) for line in rows) <= columns
    assert any(line.startswith("/Add_output_0 ") for line in rows)  # names whole
    assert sum("FAIL inherited" in line for line in rows) == 3 and "max_abs" in rows[0]
    note = lines[head + 2 + len(result.tensors):]
    note = note[:next(i for i, line in enumerate(note) if line.endswith(")")) + 1]
    assert max(len(line) for line in note) <= columns
    text = " ".join(note)
    assert text.startswith("(MSE, ") and text.endswith("left out to fit the terminal; --json has every column)")


def test_run_stats_fit_the_terminal_leaving_out_std_and_size(monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from graphkit._run import TensorStats
    from graphkit.cli.run import render_stats

    name = "/decoder/layers.5/final_layer_norm/LayerNormalization_output_0"
    monkeypatch.setattr(_render.shutil, "get_terminal_size", lambda: os.terminal_size((80, 24)))
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    render_stats([TensorStats(name, "float32", (1, 128, 512), 262144, -4.123456, 5.654321, 0.0012345, 1.0002)])
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert lines[0].split() == ["name", "dtype", "shape", "min", "max", "mean"]
    assert "-4.12346" in lines[2] and "5.65432" in lines[2] and name[:10] in lines[2] and name[-10:] in lines[2]
    assert " ".join(line.strip() for line in lines[3:]).startswith("(std, size left out to fit the terminal")


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


def test_compare_caps_its_failing_tensors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src, edited = tmp_path / "chain.onnx", tmp_path / "edited.onnx"
    gk.save(_chain_model(60), src)
    assert main(["edit", str(src), str(edited), "--set-op-type", "relu_0=Sigmoid"]) == 0
    capsys.readouterr()
    assert main(["compare", str(src), str(edited)]) == 1
    out = capsys.readouterr().out
    assert "… 21 more (--all)" in out  # 61 failing tensors (60 Relus and the output), 40 listed
    assert "t39" in out and "t40 " not in out
    assert main(["compare", str(src), str(edited), "--all"]) == 1
    out = capsys.readouterr().out
    assert "more (--all)" not in out and "t59" in out


def test_check_caps_its_issues(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = _chain_model(3)
    for i in range(45):
        model.proto.graph.initializer.append(numpy_helper.from_array(np.zeros(1, np.float32), f"unused_{i}"))
    path = tmp_path / "unused.onnx"
    onnx.save(model.proto, path)
    assert main(["check", str(path)]) == 0  # unused initializers are warnings
    out = capsys.readouterr().out
    assert out.count("[unused-initializer]") == 40 and "… 5 more (--all)" in out
    assert main(["check", str(path), "--all"]) == 0
    assert capsys.readouterr().out.count("[unused-initializer]") == 45


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


# --- ONNX Runtime's log lines: only with -v --------------------------------------------------------


def _unused_initializer_model(path: Path) -> Path:
    """y = x + c·c with an initializer no node reads: ONNX Runtime warns when a session loads it."""
    graph = helper.make_graph(
        [helper.make_node("Mul", ["c", "c"], ["cc"], name="mul"), helper.make_node("Add", ["x", "cc"], ["y"], name="add")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
        [numpy_helper.from_array(np.ones(3, np.float32), "c"), numpy_helper.from_array(np.ones(4, np.float32), "unused")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("verbose", [False, True])
def test_onnx_runtime_warnings_reach_the_terminal_only_with_v(verbose: bool, tmp_path: Path) -> None:
    model = _unused_initializer_model(tmp_path / "m.onnx")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = [sys.executable, "-m", "graphkit", *(["-v"] if verbose else []), "run", str(model)]
    done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert ("Removing initializer 'unused'" in done.stderr) is verbose, done.stderr


def _verbs(tmp_path: Path) -> dict[str, list[str]]:
    whole = str(fixture("whole_model.onnx"))
    edited = tmp_path / "edited.onnx"
    assert main(["edit", whole, str(edited), "--set-op-type", "/Add=Sub"]) == 0
    assert main(["split", whole, str(tmp_path / "parts"), "--parts", "2"]) == 0
    folds = str(_unused_initializer_model(tmp_path / "folds.onnx"))  # (c·c is computed in ONNX Runtime)
    return {
        "run": ["run", whole],
        "compare": ["compare", whole, str(edited)],
        "run-chain": ["run-chain", str(tmp_path / "parts")],
        "simplify": ["simplify", folds, str(tmp_path / "s.onnx")],
        "edit --fold-constants": ["edit", folds, str(tmp_path / "f.onnx"), "--fold-constants"],
        "convert --auto-mixed": ["convert", whole, str(tmp_path / "c.onnx"), "--float16", "--auto-mixed"],
        "reduce": ["reduce", whole, str(tmp_path / "r"), "--candidate", str(edited), "--fails-on", "compare"],
    }


@pytest.mark.parametrize("verbose", [False, True])
def test_every_session_a_verb_opens_logs_warnings_only_with_v(verbose: bool, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    import onnxruntime

    levels: list[int] = []

    class Recording(onnxruntime.InferenceSession):  # type: ignore[misc]
        def __init__(self, model: object, options: object = None, *args: object, **kwargs: object) -> None:
            levels.append(getattr(options, "log_severity_level", -1))
            super().__init__(model, options, *args, **kwargs)

    verbs = _verbs(tmp_path)
    caplog.set_level(logging.INFO if verbose else logging.WARNING, logger="graphkit")
    monkeypatch.setattr(onnxruntime, "InferenceSession", Recording)
    opened = {}
    for name, argv in verbs.items():
        levels.clear()
        code = main(argv)
        assert code in (0, 1), name
        opened[name] = sorted(set(levels))
    assert all(opened.values()), opened  # every verb opened sessions
    assert opened == {name: [2 if verbose else 4] for name in verbs}


def test_infer_shapes_caps_its_replaced_types(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = _chain_model(60)
    for i in range(60):  # every intermediate declared [1, 3]; inference proves [1, 2]
        model.proto.graph.value_info.append(helper.make_tensor_value_info(f"t{i}", TensorProto.FLOAT, [1, 3]))
    path = tmp_path / "stale.onnx"
    onnx.save(model.proto, path)
    assert main(["infer-shapes", str(path), str(tmp_path / "typed.onnx")]) == 0
    out = capsys.readouterr().out
    assert "60 declared types replaced" in out and "… 20 more (--json lists them)" in out
    assert "t39 " in out and "t40 " not in out
    assert main(["infer-shapes", str(path), str(tmp_path / "typed2.onnx"), "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["replaced_types"]) == 60


def test_convert_caps_the_nodes_kept_float32(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "chain.onnx"
    gk.save(_chain_model(60), path)
    assert main(["convert", str(path), str(tmp_path / "half.onnx"), "--float16", "--keep-op", "Relu"]) == 0
    out = capsys.readouterr().out
    assert "60 kept float32" in out and "… 20 more (--json lists them)" in out
    assert "relu_39 " in out and "relu_40 " not in out
