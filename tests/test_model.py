"""Model: what ``proto`` hands out, and the one walk over every tensor (``iter_tensors``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import graphkit as gk
from graphkit import _io as io
from graphkit._model import BORROWED_KEY, has_external_data, is_borrowed, iter_tensors

# ------------------------------------------------------------------------------ a standard proto

_SIDE = 4736  # a 4736 x 4736 float32 weight: 85.6 MiB, above the lazy-load threshold


@pytest.fixture(scope="module")
def big_inline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An 85 MiB inline model (y = x @ W + b) that graphkit loads lazily."""
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((_SIDE, _SIDE), dtype=np.float32)
    bias = rng.standard_normal((_SIDE,), dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["t"]), helper.make_node("Add", ["t", "b"], ["y"])],
        "big",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, _SIDE])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, _SIDE])],
        [numpy_helper.from_array(weight, "W"), numpy_helper.from_array(bias, "b")],
    )
    path = tmp_path_factory.mktemp("big") / "big.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    assert path.stat().st_size >= io.LAZY_FILE_MIN + 16 * 2**20
    return path


def test_proto_of_a_lazily_loaded_model_is_what_onnx_load_gives(big_inline: Path, tmp_path: Path) -> None:
    import onnxruntime as ort

    model = gk.load(big_inline)
    assert any(is_borrowed(t) for t in model.lazy_proto.graph.initializer)  # loaded lazily
    proto = model.proto
    assert not has_external_data(proto)
    assert not any(e.key == BORROWED_KEY for t in proto.graph.initializer for e in t.metadata_props)
    assert proto == onnx.load(str(big_inline))

    x = np.random.default_rng(1).standard_normal((1, _SIDE), dtype=np.float32)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    got = session.run(None, {"x": x})[0]
    weight = numpy_helper.to_array(proto.graph.initializer[0])
    np.testing.assert_allclose(got, x @ weight + numpy_helper.to_array(proto.graph.initializer[1]), rtol=1e-4, atol=1e-3)

    copy = tmp_path / "copy.onnx"
    onnx.save(proto, str(copy))
    onnx.checker.check_model(str(copy), full_check=True)
    assert onnx.load(str(copy)) == onnx.load(str(big_inline))


def test_graphkit_keeps_borrowed_weights_in_the_file_until_proto_is_asked_for(big_inline: Path, tmp_path: Path) -> None:
    model = gk.load(big_inline)
    part = gk.extract(model, ["t"], ["y"])
    saved = gk.save(part, tmp_path / "tail.onnx")
    gk.validate(model)
    gk.summarize(model)
    gk.run(saved, {"t": np.ones((1, _SIDE), np.float32)})
    # nothing above read the 85 MiB weight into the source model: it is still borrowed
    assert [t.name for t in model.lazy_proto.graph.initializer if is_borrowed(t)] == ["W"]
    assert model.graph is model.proto.graph
    assert not any(is_borrowed(t) for t in model.lazy_proto.graph.initializer)  # read in, in place


def test_proto_of_a_model_with_external_data_keeps_its_references(ext_copy: Path, small_external_kept: None) -> None:
    model = gk.load(ext_copy)
    assert model.has_external_data and has_external_data(model.proto)
    proto = onnx.load(str(ext_copy), load_external_data=False)
    assert model.proto == proto


def test_a_file_cannot_forge_a_borrowed_mark(tmp_path: Path) -> None:
    outside = tmp_path / "secret.bin"
    outside.write_bytes(b"\1" * 64)
    folder = tmp_path / "m"
    folder.mkdir()
    tensor = helper.make_tensor("w", TensorProto.FLOAT, [16], [0.0] * 16)
    _externalize(tensor, "../secret.bin", 0, 64)
    tensor.metadata_props.add(key=BORROWED_KEY, value="1:" + str(outside))
    path = folder / "model.onnx"
    onnx.save(_identity_model([tensor]), str(path))
    with pytest.raises(gk.UnsafePathError, match="secret"):
        gk.load(path)


# -------------------------------------------------------------------- one walk over every tensor


def _externalize(tensor: onnx.TensorProto, location: str, offset: int, length: int) -> None:
    for field in ("raw_data", "float_data", "int32_data", "int64_data"):
        tensor.ClearField(field)
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
        tensor.external_data.add(key=key, value=value)


def _identity_model(initializers: list[onnx.TensorProto]) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16])], initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _hidden_weights_model(folder: Path, nested: str = "w.bin", sparse: str = "w.bin",
                          nested_values: tuple[float, ...] = (1, 2, 3, 4)) -> Path:
    """A model whose only external data sits where walks tend not to look: a Constant inside an If
    inside a local function (``nested``), and a Constant's sparse_value in the main graph (``sparse``)."""
    data = np.array(nested_values, np.float32).tobytes() + np.array([5, 6], np.float32).tobytes()
    (folder / "w.bin").write_bytes(data)
    hidden = numpy_helper.from_array(np.zeros(4, np.float32), "hidden")
    _externalize(hidden, nested, 0, 16)
    then_branch = helper.make_graph([helper.make_node("Constant", [], ["c"], value=hidden)], "then", [],
                                    [helper.make_tensor_value_info("c", TensorProto.FLOAT, [4])])
    else_branch = helper.make_graph([helper.make_node("Constant", [], ["c2"], value_floats=[0.0] * 4)], "else", [],
                                    [helper.make_tensor_value_info("c2", TensorProto.FLOAT, [4])])
    func = helper.make_function(
        "local", "pick", ["cond", "x"], ["y"],
        [helper.make_node("If", ["cond"], ["k"], then_branch=then_branch, else_branch=else_branch),
         helper.make_node("Add", ["x", "k"], ["y"])],
        [helper.make_opsetid("", 17)],
    )
    values = numpy_helper.from_array(np.zeros(2, np.float32), "sv")
    _externalize(values, sparse, 16, 8)
    sparse_value = helper.make_sparse_tensor(values, numpy_helper.from_array(np.array([0, 3], np.int64), "si"), [4])
    graph = helper.make_graph(
        [helper.make_node("Constant", [], ["s"], sparse_value=sparse_value),
         helper.make_node("pick", ["cond", "x"], ["p"], domain="local"),
         helper.make_node("Add", ["p", "s"], ["y"])],
        "g",
        [helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
    )
    model = helper.make_model(graph, functions=[func],
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])
    path = folder / "model.onnx"
    onnx.save(model, str(path))
    return path


def test_iter_tensors_finds_function_bodies_and_sparse_attributes(tmp_path: Path) -> None:
    proto = onnx.load(str(_hidden_weights_model(tmp_path)), load_external_data=False)
    found = {(t.name, where) for t, where in iter_tensors(proto) if t.data_location == TensorProto.EXTERNAL}
    assert found == {("sv", "main graph"), ("hidden", "function local::pick > node 'If'.then_branch")}
    assert has_external_data(proto)


def test_load_checks_external_data_hidden_in_a_function_body(tmp_path: Path) -> None:
    (tmp_path / "secret.bin").write_bytes(b"\0" * 64)
    folder = tmp_path / "m"
    folder.mkdir()
    with pytest.raises(gk.UnsafePathError, match=r"hidden.*function local::pick"):
        gk.load(_hidden_weights_model(folder, nested="../secret.bin"))


def test_load_checks_external_data_of_a_sparse_attribute(tmp_path: Path) -> None:
    (tmp_path / "secret.bin").write_bytes(b"\0" * 64)
    folder = tmp_path / "m"
    folder.mkdir()
    with pytest.raises(gk.UnsafePathError, match="sv"):
        gk.load(_hidden_weights_model(folder, sparse="../secret.bin"))


def test_inspect_lists_external_data_hidden_in_bodies_and_sparse_attributes(tmp_path: Path) -> None:
    summary = gk.summarize(gk.load(_hidden_weights_model(tmp_path)))
    assert summary.external_files == ["w.bin"]
    assert summary.external_bytes == 16 + 8


def test_save_reads_external_data_hidden_in_a_function_body(tmp_path: Path) -> None:
    model = gk.load(_hidden_weights_model(tmp_path))
    feeds = {"cond": np.array(True), "x": np.zeros(4, np.float32)}
    expected = np.array([6, 2, 3, 10], np.float32)
    out = tmp_path / "out"
    out.mkdir()
    saved = gk.save(model, out / "copy.onnx", external=False)
    assert not has_external_data(saved.proto)
    np.testing.assert_array_equal(gk.run(saved, feeds)["y"], expected)


def test_diff_sees_a_changed_value_hidden_in_a_function_body(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = gk.load(_hidden_weights_model(tmp_path / "a"))
    b = gk.load(_hidden_weights_model(tmp_path / "b", nested_values=(1, 2, 3, 5)))
    changes = gk.diff(a, b).changes
    assert [(c.kind, c.what, c.name) for c in changes] == [("changed", "function", "local::pick")]
    assert "'hidden'" in changes[0].detail and "1 of 4" in changes[0].detail
    assert gk.diff(a, gk.load(_hidden_weights_model(tmp_path / "b"))).identical


def test_diff_sees_a_changed_value_in_a_sparse_attribute(tmp_path: Path, small_external_kept: None) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = gk.load(_hidden_weights_model(tmp_path / "a"))
    b = gk.load(_hidden_weights_model(tmp_path / "b"))
    data = bytearray((tmp_path / "b" / "w.bin").read_bytes())
    data[16:20] = np.array([9], np.float32).tobytes()
    (tmp_path / "b" / "w.bin").write_bytes(bytes(data))
    changes = gk.diff(a, b).changes
    assert len(changes) == 1 and changes[0].what == "node" and "sparse_value" in changes[0].detail
