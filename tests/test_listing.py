"""graphkit._listing: every node and tensor typed, parameters and MACs counted against hand counts."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import LIGHT, fixture
from onnx import TensorProto, helper

import graphkit as gk

D, H, F, LAYERS = 32, 4, 64, 2  # hidden, heads, FFN width, layers of the test transformer


def transformer(layers: int = LAYERS) -> gk.Model:
    """An encoder x[batch, seq, D] → y with dynamic batch and seq: per layer Q/K/V/O projections,
    Q·Kᵀ and scores·V over H heads, a Relu FFN D → F → D. Weights are initializers."""
    b = gk.GraphBuilder("transformer")
    x = b.input("x", "float32", ["batch", "seq", D])
    heads = b.initializer(np.array([0, 0, H, D // H], np.int64), "heads")
    merged = b.initializer(np.array([0, 0, D], np.int64), "merged")
    scale = b.initializer(np.array(1 / np.sqrt(D // H), np.float32), "scale")
    rng = np.random.default_rng(0)

    def linear(prefix: str, value: str, n_in: int, n_out: int) -> str:
        w = b.initializer(rng.standard_normal((n_in, n_out)).astype(np.float32), f"{prefix}/w")
        bias = b.initializer(np.zeros(n_out, np.float32), f"{prefix}/b")
        return b.node("Add", [b.node("MatMul", [value, w], name=f"{prefix}/matmul"), bias], name=f"{prefix}/add")

    for i in range(layers):
        p = f"/layers.{i}"
        q, k, v = (b.node("Reshape", [linear(f"{p}/{n}", x, D, D), heads], name=f"{p}/{n}/split") for n in "qkv")
        q = b.node("Transpose", [q], name=f"{p}/q/t", perm=[0, 2, 1, 3])
        k = b.node("Transpose", [k], name=f"{p}/k/t", perm=[0, 2, 3, 1])
        v = b.node("Transpose", [v], name=f"{p}/v/t", perm=[0, 2, 1, 3])
        scores = b.node("Mul", [b.node("MatMul", [q, k], name=f"{p}/scores"), scale], name=f"{p}/scale")
        probs = b.node("Softmax", [scores], name=f"{p}/softmax", axis=-1)
        context = b.node("Transpose", [b.node("MatMul", [probs, v], name=f"{p}/context")], name=f"{p}/ctx/t",
                         perm=[0, 2, 1, 3])
        attn = linear(f"{p}/o", b.node("Reshape", [context, merged], name=f"{p}/merge"), D, D)
        x = b.node("Add", [x, attn], name=f"{p}/residual")
        x = linear(f"{p}/fc2", b.node("Relu", [linear(f"{p}/fc1", x, D, F)], name=f"{p}/relu"), F, D)
    b.output(b.node("Identity", [x], name="out", outputs=["y"]), "float32", ["batch", "seq", D])
    return b.build()


def hand_count(batch: int, seq: int, layers: int = LAYERS) -> dict[str, int]:
    """MACs by kind and parameters, counted by hand for ``transformer``."""
    tokens = batch * seq
    elementwise_per_layer = (
        tokens * D * 4  # the biases of q, k, v, o
        + batch * H * seq * seq * 2  # scale and softmax
        + tokens * D  # residual
        + tokens * F * 2 + tokens * D  # fc1 bias, relu, fc2 bias
    )
    return {
        "matmul": layers * tokens * (4 * D * D + 2 * D * F),
        "attention": layers * 2 * batch * H * seq * seq * (D // H),
        "elementwise": layers * elementwise_per_layer,
        "params": layers * (4 * (D * D + D) + D * F + F + F * D + D) + 1,  # + the scale
    }


def _by_kind(listing: gk.Listing) -> dict[str, int]:
    kinds: dict[str, int] = {}
    for node in listing.nodes:
        kinds[node.kind] = kinds.get(node.kind, 0) + (node.macs or 0)
    return kinds


def test_stats_of_a_transformer_match_the_hand_count_at_the_given_dims() -> None:
    listing = gk.list_nodes(transformer(), dims={"batch": 2, "seq": 16})
    expected = hand_count(2, 16)
    kinds = _by_kind(listing)
    assert {k: kinds[k] for k in ("matmul", "attention", "elementwise")} == {
        k: expected[k] for k in ("matmul", "attention", "elementwise")}
    assert kinds["data"] == 0
    assert listing.params == expected["params"]
    assert listing.macs == expected["matmul"] + expected["attention"] + expected["elementwise"]
    assert listing.unknown == [] and listing.dims == {"batch": 2, "seq": 16}
    scores = next(n for n in listing.nodes if n.name == "/layers.0/scores")
    assert (scores.kind, scores.macs, scores.params) == ("attention", 2 * H * 16 * 16 * (D // H), 0)


def test_a_shape_fixes_the_named_dims_it_gives_values_to() -> None:
    by_shape = gk.list_nodes(transformer(), shapes={"x": [2, 16, D]})
    assert by_shape.dims == {"batch": 2, "seq": 16}
    assert by_shape.macs == gk.list_nodes(transformer(), dims={"batch": 2, "seq": 16}).macs


def test_dynamic_dims_left_open_are_reported_not_guessed() -> None:
    listing = gk.list_nodes(transformer(layers=1))
    scores = next(n for n in listing.nodes if n.name == "/layers.0/scores")
    assert scores.macs is None and set(scores.unknown) >= {"batch", "seq"}
    assert "/layers.0/scores" in listing.unknown
    projection = next(n for n in listing.nodes if n.name == "/layers.0/q/matmul")
    assert projection.macs is None and projection.params == D * D  # parameters need no dims
    assert listing.params == hand_count(1, 1, layers=1)["params"]


def test_nodes_and_tensors_carry_dtype_and_shape_from_the_typing_engine() -> None:
    listing = gk.list_nodes(transformer(layers=1), dims={"batch": 1, "seq": 8})
    tensors = {t.name: t for t in listing.tensors}
    scores = next(n for n in listing.nodes if n.name == "/layers.0/scores")
    assert tensors[scores.outputs[0]].shape == [1, H, 8, 8]
    assert tensors[scores.outputs[0]].type_text() == "float32[1, 4, 8, 8]"
    assert (tensors["heads"].kind, tensors["heads"].dtype) == ("initializer", "int64")
    assert (tensors["x"].kind, tensors["y"].kind, tensors["y"].producer) == ("input", "output", "out")
    assert listing.nodes[0].index == 0 and [n.index for n in listing.nodes] == list(range(len(listing.nodes)))


def test_symbolic_dims_stay_named_without_given_dims() -> None:
    listing = gk.list_nodes(transformer(layers=1))
    tensors = {t.name: t for t in listing.tensors}
    q = next(n for n in listing.nodes if n.name == "/layers.0/q/matmul")
    assert tensors[q.outputs[0]].shape == ["batch", "seq", D]


def test_filters_by_op_type_and_name_glob() -> None:
    listing = gk.list_nodes(transformer(), op=["MatMul"], name=["/layers.1/*"])
    assert {n.op_type for n in listing.nodes} == {"MatMul"}
    assert all(n.name.startswith("/layers.1/") for n in listing.nodes) and len(listing.nodes) == 8
    assert listing.filtered
    assert all(t.name.startswith("/layers.1/") for t in listing.tensors)


def test_constant_node_weights_are_parameters_and_int64_shapes_are_not() -> None:
    b = gk.GraphBuilder("consts")
    x = b.input("x", "float32", [1, 4])
    w = b.constant(np.ones((4, 3), np.float32), "w")
    shape = b.constant(np.array([3, 1], np.int64), "shape")
    b.output(b.node("Reshape", [b.node("MatMul", [x, w], name="mm"), shape], name="r", outputs=["y"]),
             "float32", [3, 1])
    listing = gk.list_nodes(b.build())
    tensors = {t.name: t for t in listing.tensors}
    assert (tensors["w"].kind, tensors["w"].shape) == ("constant", [4, 3])
    assert listing.params == 12
    assert next(n for n in listing.nodes if n.name == "mm").macs == 12


def test_conv_and_conv_transpose_and_gemm_counts() -> None:
    b = gk.GraphBuilder("convs")
    x = b.input("x", "float32", [1, 4, 8, 8])
    w = b.initializer(np.ones((6, 2, 3, 3), np.float32), "w")  # group 2: 2 input channels per group
    bias = b.initializer(np.ones(6, np.float32), "bias")
    c = b.node("Conv", [x, w, bias], name="conv", group=2, pads=[1, 1, 1, 1])
    wt = b.initializer(np.ones((6, 5, 2, 2), np.float32), "wt")  # 6 in, 5 out, kernel 2x2, stride 2
    t = b.node("ConvTranspose", [c, wt], name="convt", strides=[2, 2])
    flat = b.node("Flatten", [t], name="flat")
    gw = b.initializer(np.ones((7, 5 * 16 * 16), np.float32), "gw")
    b.output(b.node("Gemm", [flat, gw], name="gemm", transB=1, outputs=["y"]), "float32", [1, 7])
    nodes = {n.name: n for n in gk.list_nodes(b.build()).nodes}
    assert (nodes["conv"].macs, nodes["conv"].params) == (6 * 8 * 8 * 2 * 3 * 3, 6 * 2 * 9 + 6)
    assert nodes["convt"].macs == 6 * 8 * 8 * 5 * 2 * 2
    assert nodes["gemm"].macs == 7 * 5 * 16 * 16
    assert (nodes["flat"].kind, nodes["flat"].macs) == ("data", 0)


def test_string_sequence_and_map_types_are_named_by_their_elements() -> None:
    from graphkit._listing import type_text_parts

    assert type_text_parts(helper.make_tensor_type_proto(TensorProto.STRING, [2])) == ("string", [2])
    seq = helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, None))
    assert type_text_parts(seq) == ("sequence(float32)", None)
    mapping = helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, None))
    assert type_text_parts(mapping) == ("map(int64,float32)", None)


def test_subgraph_nodes_are_counted_apart() -> None:
    listing = gk.list_nodes(gk.load(fixture("if_outer_scope.onnx")))
    owners = [n for n in listing.nodes if n.kind == "subgraph"]
    assert owners and listing.subgraph_nodes > 0
    assert all(n.macs is None for n in owners) and not set(listing.unknown) & {n.name for n in owners}


def test_shape_errors_name_the_input_and_the_fix() -> None:
    with pytest.raises(gk.UsageError) as err:
        gk.list_nodes(transformer(), shapes={"xx": [1, 2, D]})
    assert "'xx'" in err.value.message and "'x'" in err.value.hint
    with pytest.raises(gk.UsageError) as err:
        gk.list_nodes(transformer(), shapes={"x": [1, 2]})
    assert "has 2 dims; the input has 3" in err.value.message
    assert "shapes={'x': [1, 1, 32]}" in (err.value.hint or "") and "--shape x=1x1x32" in (err.value.cli_hint or "")
    with pytest.raises(gk.UsageError) as err:
        gk.list_nodes(transformer(), shapes={"x": [1, 2, 5]})
    assert "dim 2 is fixed to 32" in err.value.message


def test_listing_leaves_the_model_unchanged() -> None:
    model = transformer(layers=1)
    before = model.proto.SerializeToString()
    gk.list_nodes(model, dims={"seq": 4})
    assert model.proto.SerializeToString() == before


def test_resnet50_from_the_onnx_wheel_matches_the_hand_count() -> None:
    """torchvision's ResNet-50 has 4,089,184,256 MACs in its convolutions and classifier and
    25,557,032 parameters; caffe2's export also counts BatchNorm's running mean and variance
    (2 × 26,560 more). Its weights are ConstantOfShape outputs of initializer shapes."""
    listing = gk.list_nodes(gk.load(LIGHT / "light_resnet50.onnx"))
    kinds = _by_kind(listing)
    assert kinds["conv"] + kinds["gemm"] == 4_089_184_256
    assert listing.params == 25_557_032 + 53_120
    assert listing.unknown == []
    assert abs(listing.macs - 4_089_184_256) / 4_089_184_256 < 0.01  # elementwise ops add 0.65 %
