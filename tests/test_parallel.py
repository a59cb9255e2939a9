"""Parallel merge: two models side by side, inputs shared or kept apart, opsets reconciled."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import graphkit as gk
from graphkit._edit.merging import merge_parallel


def _head(name: str, op: str, *, opset: int = 17, out: str = "y", ir: int = 8, shape: list | None = None) -> gk.Model:
    b = gk.GraphBuilder(name, opset=opset, ir_version=ir)
    x = b.input("x", "float32", shape or ["batch", 3])
    w = b.initializer(np.array([1.0, 2.0, 3.0], np.float32), "w")
    m = b.node("Mul", [x, w], name="mul", outputs=["m"])
    b.output(b.node(op, [m], name="act", outputs=[out]), "float32", shape or ["batch", 3])
    return b.build()


X = np.array([[-1.0, 0.5, 2.0], [1.0, -3.0, 0.25]], np.float32)
W = np.array([1.0, 2.0, 3.0], np.float32)


def test_two_heads_share_their_input(tmp_path: Path) -> None:
    a, b = _head("a", "Relu"), _head("b", "Neg")
    merged = merge_parallel(a, b, prefixes=("a/", "b/"), share_inputs=True, outputs=None)
    graph = merged.lazy_proto.graph
    assert [i.name for i in graph.input] == ["x"]
    assert [o.name for o in graph.output] == ["a/y", "b/y"]
    assert graph.name == "a+b"
    gk.save(merged, tmp_path / "m.onnx")
    out = gk.run(gk.load(tmp_path / "m.onnx"), feeds={"x": X})
    assert np.allclose(out["a/y"], np.maximum(X * W, 0)) and np.allclose(out["b/y"], -(X * W))


def test_inputs_kept_apart_with_prefixes() -> None:
    merged = merge_parallel(_head("a", "Relu"), _head("b", "Neg"), prefixes=("a/", "b/"), share_inputs=False,
                            outputs=None)
    assert [i.name for i in merged.lazy_proto.graph.input] == ["a/x", "b/x"]
    out = gk.run(merged, feeds={"a/x": X, "b/x": 2 * X})
    assert np.allclose(out["b/y"], -(2 * X * W))


def test_clashing_names_without_prefixes_are_refused() -> None:
    with pytest.raises(gk.EditError) as err:
        merge_parallel(_head("a", "Relu"), _head("b", "Neg"), prefixes=None, share_inputs=True, outputs=None)
    assert "both models use the tensor names" in err.value.message and "'m'" in err.value.message
    assert "prefixes" in (err.value.hint or "")


def test_an_input_of_one_name_and_two_types_is_not_shared() -> None:
    with pytest.raises(gk.EditError) as err:
        merge_parallel(_head("a", "Relu"), _head("b", "Neg", shape=[2, 3]), prefixes=("a/", "b/"),
                       share_inputs=True, outputs=None)
    assert "graph input 'x' is float32 [batch, 3] in model 'a' but float32 [2, 3] in model 'b'" in err.value.message
    assert "share_inputs=False" in (err.value.hint or "") and "--no-share-inputs" in (err.value.cli_hint or "")


def test_opsets_and_ir_versions_are_reconciled() -> None:
    a = _head("a", "Relu", opset=13, ir=7)
    b = _head("b", "Neg", opset=18, ir=8)
    merged = merge_parallel(a, b, prefixes=("a/", "b/"), share_inputs=True, outputs=None)
    assert {o.domain or "ai.onnx": o.version for o in merged.lazy_proto.opset_import} == {"ai.onnx": 18}
    assert merged.lazy_proto.ir_version == 8
    out = gk.run(merged, feeds={"x": X})
    assert np.allclose(out["a/y"], np.maximum(X * W, 0))


def test_opsets_are_converted_when_an_operator_changed() -> None:
    b = gk.GraphBuilder("old", opset=11)
    x = b.input("x", "float32", ["batch", 3])
    b.output(b.node("ReduceMean", [x], name="rm", outputs=["y"], axes=[1]), "float32", ["batch", 1])
    old = b.build()
    b = gk.GraphBuilder("new", opset=18)
    x = b.input("x", "float32", ["batch", 3])
    axes = b.initializer(np.array([1], np.int64), "axes")
    b.output(b.node("ReduceMax", [x, axes], name="rm", outputs=["y"]), "float32", ["batch", 1])
    merged = merge_parallel(old, b.build(), prefixes=("a/", "b/"), share_inputs=True, outputs=None)
    assert {o.domain or "ai.onnx": o.version for o in merged.lazy_proto.opset_import} == {"ai.onnx": 18}
    out = gk.run(merged, feeds={"x": X})
    assert np.allclose(out["a/y"], X.mean(1, keepdims=True)) and np.allclose(out["b/y"], X.max(1, keepdims=True))


def test_custom_domain_versions_that_differ_are_refused() -> None:
    a = gk.parse_model('<ir_version: 8, opset_import: ["" : 17, "my" : 1]> g (float[2] x) => (float[2] y) '
                       "{ y = Relu(x) }")
    b = gk.parse_model('<ir_version: 8, opset_import: ["" : 17, "my" : 2]> g (float[2] x) => (float[2] y) '
                       "{ y = Neg(x) }")
    with pytest.raises(gk.EditError) as err:
        merge_parallel(a, b, prefixes=("a/", "b/"), share_inputs=True, outputs=None)
    assert "imports my opset 1 but" in err.value.message and "my opset 2" in err.value.message
    assert "custom domain" in err.value.message


def test_merge_without_connect_is_side_by_side_and_checked() -> None:
    merged = gk.merge(_head("a", "Relu"), _head("b", "Neg"), prefixes=("a/", "b/"))
    assert [i.name for i in merged.lazy_proto.graph.input] == ["x"]
    out = gk.run(merged, feeds={"x": X})
    assert np.allclose(out["a/y"], np.maximum(X * W, 0)) and np.allclose(out["b/y"], -(X * W))
    apart = gk.merge(_head("a", "Relu"), _head("b", "Neg"), {}, prefixes=("a/", "b/"), share_inputs=False)
    assert [i.name for i in apart.lazy_proto.graph.input] == ["a/x", "b/x"]


def test_merge_side_by_side_on_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from graphkit.cli import main

    a, b, out = tmp_path / "a.onnx", tmp_path / "b.onnx", tmp_path / "ab.onnx"
    gk.save(_head("a", "Relu", opset=13, ir=7), a)
    gk.save(_head("b", "Neg", opset=18), b)
    assert main(["merge", str(a), str(b), str(out), "--prefixes", "a/", "b/", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["inputs"] == ["x"] and report["outputs"] == ["a/y", "b/y"]
    assert report["opsets"] == {"ai.onnx": 18} and report["ir_version"] == 8
    got = gk.run(gk.load(out), feeds={"x": X})
    assert np.allclose(got["a/y"], np.maximum(X * W, 0)) and np.allclose(got["b/y"], -(X * W))
    assert main(["merge", str(a), str(b), str(tmp_path / "no.onnx"), "--no-share-inputs", "--prefixes", "a/", "b/"]) == 0
    assert [i.name for i in gk.load(tmp_path / "no.onnx").graph.input] == ["a/x", "b/x"]
    capsys.readouterr()
    assert main(["merge", str(a), str(b), str(tmp_path / "clash.onnx")]) == 2
    err = capsys.readouterr().err
    assert "both models use the tensor names" in err and "--prefixes a/ b/" in err and "prefixes=(" not in err
