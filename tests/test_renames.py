"""rename_pattern: every tensor and/or node renamed by one regular expression, consistently, bodies included."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

import graphkit as gk
from graphkit._edit.renames import rename_pattern


def _loop() -> gk.Model:
    """A Loop whose body input 'model_acc' shadows the main graph's 'model_acc' (the Loop's output);
    the body also reads the outer 'model_t'."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["model_c_in"], ["model_c_out"]),
         helper.make_node("Add", ["model_acc", "model_t"], ["model_acc_out"])],
        "body",
        [helper.make_tensor_value_info("model_i", onnx.TensorProto.INT64, []),
         helper.make_tensor_value_info("model_c_in", onnx.TensorProto.BOOL, []),
         helper.make_tensor_value_info("model_acc", onnx.TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("model_c_out", onnx.TensorProto.BOOL, []),
         helper.make_tensor_value_info("model_acc_out", onnx.TensorProto.FLOAT, [2])],
    )
    b = gk.GraphBuilder("shadow")
    b.input("model_t", "float32", [2])
    trip = b.initializer(np.array(2, np.int64), "model_trip")
    cond = b.initializer(np.array(True), "model_cond")
    b.node("Loop", [trip, cond, "model_t"], name="model_loop", outputs=["model_acc"], body=body)
    b.output("model_acc", "float32", [2])
    return b.build()


def test_a_pattern_renames_every_scope_and_keeps_the_shadowing(tmp_path: Path) -> None:
    model = _loop()
    before = model.serialized()
    result = rename_pattern(model, "^model_", "", scope="tensors")
    assert model.serialized() == before
    graph = result.lazy_proto.graph
    assert [i.name for i in graph.input] == ["t"] and [o.name for o in graph.output] == ["acc"]
    assert {t.name for t in graph.initializer} == {"trip", "cond"} and graph.node[0].name == "model_loop"
    body = graph.node[0].attribute[0].g
    assert [i.name for i in body.input] == ["i", "c_in", "acc"]  # its own 'acc' still shadows the outer one
    assert list(body.node[1].input) == ["acc", "t"]  # and the outer 't' is read under its new name
    gk.save(result, tmp_path / "renamed.onnx")
    x = np.array([1.0, 2.0], np.float32)
    np.testing.assert_allclose(gk.run(gk.load(tmp_path / "renamed.onnx"), feeds={"t": x})["acc"], 3 * x)


def test_replace_slashes_and_prefix_nodes_only() -> None:
    b = gk.GraphBuilder("m")
    x = b.input("x", "float32", [2])
    r = b.node("Relu", [x], name="/enc/relu", outputs=["/enc/r"])
    b.output(b.node("Neg", [r], name="/enc/neg", outputs=["y"]), "float32", [2])
    model = b.build()
    slashes = rename_pattern(model, "/", "_")
    assert [n.name for n in slashes.lazy_proto.graph.node] == ["_enc_relu", "_enc_neg"]
    assert list(slashes.lazy_proto.graph.node[0].output) == ["_enc_r"]
    nodes = rename_pattern(model, prefix="v2.", scope="nodes")
    assert [n.name for n in nodes.lazy_proto.graph.node] == ["v2./enc/relu", "v2./enc/neg"]
    assert list(nodes.lazy_proto.graph.node[0].output) == ["/enc/r"]
    everything = rename_pattern(model, r"^/(\w+)/", r"\1.", prefix="p:")
    assert [i.name for i in everything.lazy_proto.graph.input] == ["p:x"]
    assert [n.name for n in everything.lazy_proto.graph.node] == ["p:enc.relu", "p:enc.neg"]
    x = np.array([-1.0, 2.0], np.float32)
    assert np.allclose(gk.run(everything, feeds={"p:x": x})["p:y"], [0.0, -2.0])
    for renamed in (slashes, nodes):
        assert np.allclose(gk.run(renamed, feeds={"x": x})["y"], [0.0, -2.0])


def test_collisions_are_listed() -> None:
    b = gk.GraphBuilder("m")
    x = b.input("a/x", "float32", [2])
    r = b.node("Relu", [x], name="a/relu", outputs=["a/r"])
    s = b.node("Relu", [r], name="b/relu", outputs=["b/r"])
    b.output(b.node("Add", [r, s], name="add", outputs=["y"]), "float32", [2])
    model = b.build()
    with pytest.raises(gk.EditError) as err:
        rename_pattern(model, "^[ab]/", "")
    assert "'r' from 'a/r', 'b/r'" in err.value.message and "tensors" in err.value.message
    with pytest.raises(gk.EditError) as nodes:
        rename_pattern(model, "^[ab]/", "", scope="nodes")
    assert "different nodes one name: 'relu' from 'a/relu', 'b/relu'" in nodes.value.message
    with pytest.raises(gk.EditError) as empty:
        rename_pattern(model, ".*", "", scope="nodes")
    assert "empty" in empty.value.message


def test_bad_patterns_and_no_ops() -> None:
    model = _loop()
    with pytest.raises(gk.UsageError) as err:
        rename_pattern(model, "([", "")
    assert "'([' is not a valid regular expression" in err.value.message and err.value.hint
    with pytest.raises(gk.UsageError) as group:
        rename_pattern(model, "model", r"\2")
    assert "does not fit pattern" in group.value.message
    assert rename_pattern(model, "^nothing", "x") is model
    with pytest.raises(gk.NoChangeError):
        rename_pattern.__wrapped__(model, "^nothing", "x")
    with pytest.raises(gk.UsageError):
        rename_pattern(model)
