"""The typing engine (graphkit._typing): one answer to "the types of these tensors", symbolic dims kept."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import graphkit as gk
from graphkit import _ort, _typing


def _stride8_model() -> gk.Model:
    """x [1, 1, H, 8] -> Conv stride 8 on H -> com.microsoft Gelu (ONNX cannot type it) -> Relu.

    The Conv's output height is floor((H - 1) / 8) + 1: 1 at H = 1 and at H = 2, so two probe runs
    at those sizes agree on 1, yet it is 2 at H = 16.
    """
    weight = helper.make_tensor("w", TensorProto.FLOAT, [1, 1, 1, 1], [1.5])
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", strides=[8, 1]),
        helper.make_node("Gelu", ["c"], ["g"], name="gelu", domain="com.microsoft"),
        helper.make_node("Relu", ["g"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes, "stride8", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, "H", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, "H8", 8])], initializer=[weight],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    return gk.Model(proto)


def _dims(value: onnx.ValueInfoProto) -> list[int | str]:
    return [d.dim_value if d.HasField("dim_value") else d.dim_param for d in value.type.tensor_type.shape.dim]


@pytest.fixture(params=[True, False], ids=["symbolic", "no-symbolic"])
def symbolic(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """With ONNX Runtime's symbolic inference (needs sympy), and without it (one observed run)."""
    if request.param:
        pytest.importorskip("sympy")
    else:
        monkeypatch.setattr(_ort, "symbolic_shapes", lambda proto: None)
    return bool(request.param)


def _assert_runs_like_the_source(source: gk.Model, part: gk.Model, names: list[str]) -> None:
    for height in (1, 2, 16, 17, 40):
        x = np.random.default_rng(height).standard_normal((1, 1, height, 8)).astype(np.float32)
        want = gk.run(source, {"x": x}, outputs=names)
        got = gk.run(part, {"x": x}, outputs=names, opt_level="all")
        for name in names:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-6, err_msg=f"{name} at H={height}")


def test_a_dim_a_stage_divides_stays_symbolic_in_extract_and_runs_at_other_sizes(symbolic: bool) -> None:
    model = _stride8_model()
    report = gk.extract_with_report(model, ["x"], ["g"])
    (out,) = report.model.graph.output
    dims = _dims(out)
    assert dims[0] == 1 or not symbolic  # (symbolic inference proves the batch; one run proves nothing)
    assert isinstance(dims[2], str) and dims[2]  # the divided dim: named, never the 1 both probes saw
    assert report.typed_by["g"] == ("inference" if symbolic else "runtime")
    _assert_runs_like_the_source(model, report.model, ["g"])


def test_a_dim_a_stage_divides_stays_symbolic_in_expose_and_runs_at_other_sizes(symbolic: bool) -> None:
    model = _stride8_model()
    exposed = gk.expose(model, ["g"])
    added = next(v for v in exposed.graph.output if v.name == "g")
    assert isinstance(_dims(added)[2], str)
    _assert_runs_like_the_source(model, exposed, ["g", "y"])


def test_onnx_inference_proves_fixed_dims_and_names_the_others() -> None:
    model = _stride8_model()
    found = _typing.tensor_types(model, ["c"], observe=False)
    dims = _dims(onnx.helper.make_value_info("c", found.types["c"]))
    assert dims[:2] == [1, 1] and dims[3] == 8  # proved by the Conv's shape inference
    assert isinstance(dims[2], str) and dims[2] != "H"
    assert found.source == {"c": "inference"}


def test_fresh_dim_names_avoid_the_models_own() -> None:
    b = gk.GraphBuilder("taken")
    b.input("x", "float32", ["unk_1", 4])
    b.node("NonZero", ["x"], name="nz", outputs=["n"])
    b.output("n", "int64", [2, "count"])
    model = b.build()
    found = _typing.tensor_types(model, ["n"], declared=False, observe=False)
    dims = _dims(onnx.helper.make_value_info("n", found.types["n"]))
    assert dims[0] == 2 and dims[1] != "unk_1" and isinstance(dims[1], str)


def test_declared_types_come_first_and_say_so() -> None:
    model = _stride8_model()
    found = _typing.tensor_types(model, ["x", "w"])
    assert found.source == {"x": "model", "w": "model"}
    assert _dims(onnx.helper.make_value_info("w", found.types["w"])) == [1, 1, 1, 1]


def test_weightless_copy_keeps_shape_constants_and_drops_weights() -> None:
    b = gk.GraphBuilder("weights")
    x = b.input("x", "float32", [2, 512])
    big = b.initializer(np.ones((512, 512), np.float32), "big")
    shape = b.initializer(np.array([4, 256], np.int64), "shape")
    h = b.node("MatMul", [x, big], name="mm", outputs=["h"])
    b.output(b.node("Reshape", [h, shape], name="rs", outputs=["y"]), "float32", [4, 256])
    model = b.build()
    before = model.proto.SerializeToString()
    copy = _typing.weightless(_typing.Source(model))
    inits = {t.name: t for t in copy.graph.initializer}
    assert not inits["big"].raw_data and not inits["big"].float_data
    assert onnx.numpy_helper.to_array(inits["shape"]).tolist() == [4, 256]
    assert model.proto.SerializeToString() == before


# ------------------------------------------------------------------ sequences, maps and optionals


def _sequence_model(*, empty: bool) -> gk.Model:
    """x -> (an empty sequence, or one of relu(x)) -> SequenceInsert x -> ConcatFromSequence -> Relu."""
    if empty:
        head = [helper.make_node("SequenceEmpty", [], ["s0"], name="empty", dtype=TensorProto.FLOAT)]
    else:
        head = [helper.make_node("Relu", ["x"], ["a"], name="first"),
                helper.make_node("SequenceConstruct", ["a"], ["s0"], name="construct")]
    nodes = [
        *head,
        helper.make_node("SequenceInsert", ["s0", "x"], ["s"], name="insert"),
        helper.make_node("ConcatFromSequence", ["s"], ["t"], name="concat", axis=0),
        helper.make_node("Relu", ["t"], ["y"], name="last"),
    ]
    graph = helper.make_graph(nodes, "seq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])])
    return gk.Model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def test_a_sequence_is_typed_as_a_sequence() -> None:
    found = _typing.tensor_types(_sequence_model(empty=True), ["s0", "s"])
    for name in ("s0", "s"):
        tp = found.types[name]
        assert tp.WhichOneof("value") == "sequence_type"
        assert tp.sequence_type.elem_type.tensor_type.elem_type == TensorProto.FLOAT


@pytest.mark.parametrize("empty", [True, False])
def test_a_sequence_crossing_a_cut_splits_and_chain_runs(empty: bool) -> None:
    model = _sequence_model(empty=empty)
    result = gk.split(model, at=["s0", "s"])
    assert [p.name for p in result[1].inputs] == ["s0", "x"]
    crossing = next(v for v in result[1].model.graph.input if v.name == "s0")
    assert crossing.type.WhichOneof("value") == "sequence_type"
    chain = gk.run_chain(result, reference=model, opt_level="disable")
    assert chain.passed and chain.exact


@pytest.mark.parametrize("empty", [True, False])
def test_a_sequence_crossing_capture_fragments_compares(empty: bool) -> None:
    model = _sequence_model(empty=empty)
    result = gk.compare(model, fragment_bytes=1)  # (one node per fragment: every tensor crosses)
    assert result.passed
    assert {d.name for d in result.tensors} >= {"t", "y"}


def test_symbolic_inference_that_types_part_of_a_graph_writes_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("sympy")
    monkeypatch.chdir(tmp_path)  # (onnxruntime's own entry point saves the model here when it gives up)
    b = gk.GraphBuilder("custom")
    b.input("x", "float32", ["n", 2])
    b.node("Mystery", ["x"], name="mystery", outputs=["t"], domain="custom")
    b.node("Relu", ["t"], name="relu", outputs=["y"])
    b.output("y", "float32", ["n", 2])
    found = _typing.tensor_types(b.build(), ["t"], observe=False)
    assert "t" not in found.types
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("dim", [-3, 1 << 40])
def test_the_observed_run_refuses_an_input_shape_it_cannot_generate(dim: int) -> None:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [dim, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = gk.Model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    found, why = _typing._observed_types(model, ["y"])
    assert found == {} and "input 'x' declares shape" in why and str(dim) in why


def test_symbolic_inference_is_skipped_past_its_node_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(_ort, "symbolic_shapes", lambda proto: calls.append(len(proto.graph.node)))
    monkeypatch.setattr(_typing, "SYMBOLIC_MAX_NODES", 0)
    model = _stride8_model()
    report = gk.extract_with_report(model, ["x"], ["g"])
    assert calls == []
    assert isinstance(_dims(report.model.graph.output[0])[2], str)  # still named, never sized by a guess
    _assert_runs_like_the_source(model, report.model, ["g"])


def _listed_initializer_model(ir_version: int) -> gk.Model:
    """x [1, 2, 5, 5] -> Conv with a weight made by ConstantOfShape(shape), where ``shape`` (an
    initializer) is also listed as a graph input, as every model before IR version 4 had to list it."""
    shape = helper.make_tensor("w_shape", TensorProto.INT64, [4], [7, 2, 3, 3])
    nodes = [
        helper.make_node("ConstantOfShape", ["w_shape"], ["w"], name="make_w",
                         value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.5])),
        helper.make_node("Conv", ["x", "w"], ["y"], name="conv"),
    ]
    graph = helper.make_graph(
        nodes, "listed",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 5, 5]),
         helper.make_tensor_value_info("w_shape", TensorProto.INT64, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=[shape],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    proto.ir_version = ir_version
    return gk.Model(proto)


def test_an_initializer_listed_as_input_before_ir_4_is_a_constant_for_inference() -> None:
    # The onnx wheel's light models (IR 3) build every weight so: their split boundaries had their
    # channel dims named instead of sized.
    found = _typing.tensor_types(_listed_initializer_model(3), ["y"], declared=False, observe=False)
    assert _dims(onnx.helper.make_value_info("y", found.types["y"])) == [1, 7, 3, 3]


def test_an_overridable_initializer_from_ir_4_on_gives_only_its_type() -> None:
    # The user may feed another shape: the channel count is not proven, so it stays named.
    found = _typing.tensor_types(_listed_initializer_model(4), ["y"], declared=False)
    dims = _dims(onnx.helper.make_value_info("y", found.types["y"]))
    assert len(dims) == 4 and all(isinstance(d, str) and d for d in dims)


def test_the_observed_run_does_not_generate_an_input_numpy_cannot_hold() -> None:
    # a hostile file (fuzz case 2118 of seed 1: whole_model with dims 0 and 2**62 and a cycle) made the
    # observed run of expose's typing fail inside numpy ("array is too big") instead of typing nothing
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [0, 2**62])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    model = gk.Model(helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]),
                                       opset_imports=[helper.make_opsetid("", 17)]))
    feeds, why = _typing._probe_feeds(model)
    assert feeds is None and "[0, 4611686018427387904]" in why
    small = gk.Model(helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [0, 3])],
        [y]), opset_imports=[helper.make_opsetid("", 17)]))
    feeds, _ = _typing._probe_feeds(small)
    assert feeds is not None and feeds["x"].shape == (0, 3)  # an empty input is still generated


def test_types_read_small_external_shapes_and_never_the_weights(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A model kept as saved with every tensor external (not through graphkit.load, which reads small
    ones in): the Reshape target's pieces are read from disk for inference, the weights are not."""
    from conftest import flatten_export, save_every_tensor_external

    source = save_every_tensor_external(flatten_export(), tmp_path)
    model = gk.Model(onnx.load(str(source), load_external_data=False), tmp_path)
    read: list[str] = []
    real = _typing.read_external_bytes

    def recording(model: gk.Model, tensor: onnx.TensorProto) -> bytes:
        read.append(tensor.name)
        return real(model, tensor)

    monkeypatch.setattr(_typing, "read_external_bytes", recording)
    found = gk.infer_shapes(model)
    types = {v.name: _dims(v) for v in found.graph.value_info}
    assert types["target"] == [2] and types["flat"] == [1, 1024] and types["m"] == [1, 10]
    assert read and not {"conv.weight", "fc.weight"} & set(read)

