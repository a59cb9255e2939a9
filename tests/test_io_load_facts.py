"""What load must refuse, it refuses wherever in the model it hides (guards for any future load shortcut)."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

import graphkit as gk

_X = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
_Y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])


def _model(nodes: list[onnx.NodeProto], initializers: list[TensorProto] | None = None, **kwargs: object) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", [_X], [_Y], initializer=initializers or [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], **kwargs)


def _chain(count: int) -> list[onnx.NodeProto]:
    names = ["x", *(f"t{i}" for i in range(count - 1)), "y"]
    return [helper.make_node("Relu", [names[i]], [names[i + 1]], name=f"n{i}") for i in range(count)]


def _write(tmp_path: Path, data: bytes, name: str = "m.onnx") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def _external(name: str, location: str) -> TensorProto:
    tensor = helper.make_tensor(name, TensorProto.FLOAT, [1], [1.0])
    tensor.ClearField("float_data")
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", "4")):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    return tensor


def _if_node(body_nodes: list[onnx.NodeProto], body_inits: list[TensorProto] | None = None) -> onnx.NodeProto:
    out = helper.make_tensor_value_info("b", TensorProto.FLOAT, [1])
    body = helper.make_graph(body_nodes, "body", [], [out], initializer=body_inits or [])
    return helper.make_node("If", ["c"], ["y"], name="branch", then_branch=body, else_branch=body)


def _external_model(place: str, location: str) -> onnx.ModelProto:
    tensor = _external("w", location)
    nodes: list[onnx.NodeProto] = [helper.make_node("Identity", ["x"], ["y"])]
    inits: list[TensorProto] = []
    functions: list[onnx.FunctionProto] = []
    if place == "initializer":
        inits.append(tensor)
    elif place == "constant":
        nodes.append(helper.make_node("Constant", [], ["k"], value=tensor))
    elif place == "constants":
        attr = helper.make_attribute("values", [helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0]), tensor])
        node = helper.make_node("Custom", [], ["k"], domain="custom")
        node.attribute.append(attr)
        nodes.append(node)
    elif place == "body initializer":
        nodes.append(_if_node([helper.make_node("Identity", ["w"], ["b"])], [tensor]))
    elif place == "body constant":
        nodes.append(_if_node([helper.make_node("Constant", [], ["b"], value=tensor)]))
    elif place == "function":
        body = [helper.make_node("Constant", [], ["o"], value=tensor)]
        functions.append(helper.make_function("custom", "F", [], ["o"], body, [helper.make_opsetid("", 17)]))
        nodes.append(helper.make_node("F", [], ["k"], domain="custom"))
    else:
        sparse = helper.make_sparse_tensor(tensor, helper.make_tensor("i", TensorProto.INT64, [1], [0]), [1])
        nodes.append(helper.make_node("Constant", [], ["k"], sparse_value=sparse))
    return _model(nodes, inits, functions=functions)


# ------------------------------------------------------------------ what load refused, it still refuses


@pytest.mark.parametrize("place", ["initializer", "constant", "constants", "body initializer", "body constant", "function", "sparse"])
def test_external_data_escaping_the_folder_is_refused_wherever_it_is(tmp_path: Path, place: str) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    (tmp_path / "w.bin").write_bytes(b"\0" * 4)
    path = _write(folder, _external_model(place, "../w.bin").SerializeToString())
    with pytest.raises(gk.UnsafePathError) as info:
        gk.load(path)
    assert "'w'" in info.value.message and "../w.bin" in info.value.message and info.value.hint


@pytest.mark.parametrize("place", ["initializer", "constant", "constants", "body initializer", "body constant", "function", "sparse"])
def test_an_external_tensor_without_a_location_is_refused_wherever_it_is(tmp_path: Path, place: str) -> None:
    proto = _external_model(place, "w.bin")
    data = proto.SerializeToString()
    assert data.count(b"location") >= 1  # (the If node holds the body twice)
    broken = data.replace(b"location", b"filename")  # (same length: no location entry left at all)
    path = _write(tmp_path, broken)
    with pytest.raises(gk.ExternalDataError) as info:
        gk.load(path)
    assert "'w'" in info.value.message and "no location" in info.value.message and info.value.hint
    assert path.read_bytes() == broken


@pytest.mark.parametrize("op_type", ["", None])
def test_a_node_without_op_type_among_many_is_refused(tmp_path: Path, op_type: str | None) -> None:
    nodes = _chain(200)
    nodes[150].attribute.append(helper.make_attribute("alpha", 0.5))
    if op_type is None:
        nodes[150].ClearField("op_type")
    else:
        nodes[150].op_type = op_type
    path = _write(tmp_path, _model(nodes).SerializeToString())
    with pytest.raises(gk.CorruptModelError) as info:
        gk.load(path)
    assert str(path) in info.value.message and "n150" in info.value.message and "op_type" in info.value.message
    assert info.value.hint


def _non_utf8(proto: onnx.ModelProto, marker: str) -> bytes:
    data = proto.SerializeToString()
    assert marker.encode() in data
    return data.replace(marker.encode(), marker.encode()[:-1] + b"\xff")


@pytest.mark.parametrize(
    ("where", "said"),
    [
        ("node", "a node's name"),
        ("initializer", "an initializer name"),
        ("body", "node 'branch'"),
        ("input", "a tensor name"),
    ],
)
def test_a_non_utf8_name_is_refused_wherever_it_is(tmp_path: Path, where: str, said: str) -> None:
    nodes = _chain(20)
    inits = [helper.make_tensor("weightQ", TensorProto.FLOAT, [1], [1.0])]
    if where == "node":
        nodes[7].name = "nodeQ"
    elif where == "body":
        nodes.append(_if_node([helper.make_node("Identity", ["x"], ["b"], name="innerQ")]))
    proto = _model(nodes, inits)
    if where == "input":
        proto.graph.input[0].name = "inputQ"
    marker = {"node": "nodeQ", "initializer": "weightQ", "body": "innerQ", "input": "inputQ"}[where]
    path = _write(tmp_path, _non_utf8(proto, marker))
    with pytest.raises(gk.CorruptModelError) as info:
        gk.load(path)
    assert str(path) in info.value.message and said in info.value.message and "UTF-8" in info.value.message
    assert info.value.hint


@pytest.mark.parametrize("cut", [1, 7, 100, -3, -1])
def test_a_truncated_file_is_refused(tmp_path: Path, cut: int) -> None:
    data = _model(_chain(30), [helper.make_tensor("w", TensorProto.FLOAT, [4], [1.0] * 4)]).SerializeToString()
    path = _write(tmp_path, data[:cut])
    with pytest.raises(gk.CorruptModelError) as info:
        gk.load(path)
    assert str(path) in info.value.message and info.value.hint
