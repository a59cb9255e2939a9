"""simplify's target 'onnxruntime': attention, GELU and Add + LayerNormalization fused into ONNX Runtime's
contrib operators, on small encoders built the way torch.onnx writes them and the way bench/generate.py
does; and the near-misses (a mask, a scale that is not a scalar, head counts that disagree, another
constant) left as they are.

Every fused result passes onnx.checker (full) and runs in ONNX Runtime against the input's values.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from conftest import fixture, folder_digest
from onnx import TensorProto, helper, numpy_helper

import graphkit as gk
from graphkit._model import is_external
from graphkit._simplify import PASSES, op_counts
from graphkit.cli import main

HIDDEN, HEADS, SEQ = 16, 2, 5
#: The fused kernels sum in another order than the decomposed graph.
ATOL = 1e-5


class _Builder:
    """Nodes and initializers of an encoder, named as torch.onnx names them."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def const(self, value: Any, dtype: Any = np.float32) -> str:
        self.count += 1
        name = f"/Constant_{self.count}_output_0"
        self.nodes.append(helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array(value, dtype), name)))
        return name

    def init(self, value: np.ndarray, stem: str = "w") -> str:
        self.count += 1
        name = f"{stem}.{self.count}"
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def weight(self, *shape: int) -> str:
        return self.init((self.rng.standard_normal(shape) / math.sqrt(shape[0])).astype(np.float32))

    def node(self, op: str, inputs: list[str], **attrs: Any) -> str:
        self.count += 1
        name = f"/{op}_{self.count}"
        self.nodes.append(helper.make_node(op, inputs, [name + "_output_0"], name=name, **attrs))
        return name + "_output_0"

    def model(self, x_dims: list[Any], y: str, *, opset: int = 17, mask: str = "") -> gk.Model:
        self.nodes.append(helper.make_node("Identity", [y], ["y"], name="/output/Identity"))
        inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_dims)]
        if mask == "input":  # (an additive mask [batch, 1, 1, seq], as a model's caller computes it)
            inputs.append(helper.make_tensor_value_info("mask", TensorProto.FLOAT, [x_dims[0], 1, 1, x_dims[1]]))
        elif mask == "bert":  # (BERT's attention_mask of 0/1 per token)
            inputs.append(helper.make_tensor_value_info("attention_mask", TensorProto.INT64, x_dims[:2]))
        graph = helper.make_graph(self.nodes, "encoder", inputs,
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, x_dims)], self.inits)
        proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
        onnx.checker.check_model(proto, full_check=True)
        return gk.Model(proto)


def _encoder(*, static: bool = True, layers: int = 2, style: str = "torch", mask: str = "",
             scale: str = "scores", batch_in_target: bool = False, gelu_half: float = 0.5, softmax_axis: int = -1,
             pre_norm: bool = False, probs_output: bool = False, decomposed: bool = False, opset: int = 17) -> gk.Model:
    """A post-LayerNorm (or ``pre_norm``) encoder: torch.onnx's style (Constant nodes, the head split
    computed from ``Shape(x)``, K transposed twice, ``Div`` by √d) or generate.py's (constant ``[0, 0,
    heads, size]`` targets, K transposed once, ``Mul`` by 1/√d). The keywords make the near-misses."""
    b = _Builder()
    size = HIDDEN // HEADS
    x = "x"
    extra_outputs: list[str] = []
    bert_mask = "mask"
    if mask == "bert":  # ((1 - mask[:, None, None, :]) * -10000, as BERT's exports compute it once for every layer)
        extended = b.node("Cast", [b.node("Unsqueeze", ["attention_mask", b.const([1, 2], np.int64)])], to=TensorProto.FLOAT)
        bert_mask = b.node("Mul", [b.node("Sub", [b.const(1.0), extended]), b.const(-10000.0)])

    def norm(x: str, scale: np.ndarray, shift: np.ndarray) -> str:
        if not decomposed:
            return b.node("LayerNormalization", [x, b.init(scale), b.init(shift)], axis=-1, epsilon=1e-5)
        centered = b.node("Sub", [x, b.node("ReduceMean", [x], axes=[-1])])
        var = b.node("ReduceMean", [b.node("Pow", [centered, b.const(2.0)])], axes=[-1])
        normed = b.node("Div", [centered, b.node("Sqrt", [b.node("Add", [var, b.const(1e-12)])])])
        return b.node("Add", [b.node("Mul", [normed, b.init(scale)]), b.init(shift)])
    for _ in range(layers):
        if style == "torch":
            shape = b.node("Shape", [x])
            batch = b.node("Unsqueeze", [b.node("Gather", [shape, b.const(0, np.int64)], axis=0), b.const([0], np.int64)])
            length = b.node("Unsqueeze", [b.node("Gather", [shape, b.const(1, np.int64)], axis=0), b.const([0], np.int64)])

            def split(heads: int, batch: str = batch, length: str = length) -> str:
                return b.node("Concat", [batch, length, b.const([heads], np.int64), b.const([HIDDEN // heads], np.int64)],
                              axis=0)
            merge = b.node("Concat", [batch, length, b.const([HIDDEN], np.int64)], axis=0)
        else:
            def split(heads: int) -> str:
                return b.init(np.array([1 if batch_in_target else 0, 0, heads, HIDDEN // heads], np.int64), "shape")
            merge = b.init(np.array([0, 0, HIDDEN], np.int64), "shape")
        residual = x
        if pre_norm:
            x = norm(x, np.ones(HIDDEN, np.float32), np.zeros(HIDDEN, np.float32))
        parts = {}
        for part in "qkv":
            heads = HEADS
            w = b.weight(HIDDEN, HIDDEN)
            if style == "torch":
                w = b.node("Transpose", [w], perm=[1, 0])  # (nn.Linear's weight, folded by simplify)
            h = b.node("Add", [b.node("MatMul", [x, w]), b.init(b.rng.standard_normal(HIDDEN).astype(np.float32))])
            if scale == "q" and part == "q":
                h = b.node("Mul", [h, b.const(1 / math.sqrt(size))])
            h = b.node("Reshape", [h, split(heads)])
            if part == "k" and style != "torch":
                parts[part] = b.node("Transpose", [h], perm=[0, 2, 3, 1])
            else:
                parts[part] = b.node("Transpose", [h], perm=[0, 2, 1, 3])
        k = b.node("Transpose", [parts["k"]], perm=[0, 1, 3, 2]) if style == "torch" else parts["k"]
        q = parts["q"]
        if scale == "sdpa":  # (torch's scaled_dot_product_attention export: √scale on Q and on Kᵀ, the head size read
            #                  from Q's shape)
            width = b.node("Cast", [b.node("Slice", [b.node("Shape", [q]), b.const([-1], np.int64),
                                                     b.const([2**63 - 1], np.int64)])], to=TensorProto.FLOAT)
            root = b.node("Sqrt", [b.node("Cast", [b.node("Div", [b.const([1.0]), b.node("Sqrt", [width])])],
                                          to=TensorProto.FLOAT)])
            q, k = b.node("Mul", [q, root]), b.node("Mul", [k, root])
        scores = b.node("MatMul", [q, k])
        if scale == "scores":
            scores = b.node("Div", [scores, b.node("Sqrt", [b.node("Cast", [b.const(size, np.int64)], to=TensorProto.FLOAT)])]) \
                if style == "torch" else b.node("Mul", [scores, b.init(np.array(1 / math.sqrt(size), np.float32), "scale")])
        elif scale == "tensor":  # (one factor per key position: no scalar scale)
            scores = b.node("Mul", [scores, b.init(np.full((1, 1, 1, SEQ), 0.3, np.float32), "scale")])
        if mask:  # (a padding mask [1, 1, 1, seq], a causal one [1, 1, seq, seq], or one given as an input)
            value = {"padding": np.where(np.arange(SEQ) < 3, 0, -1e4).reshape(1, 1, 1, SEQ),
                     "causal": np.triu(np.full((SEQ, SEQ), -1e4), 1).reshape(1, 1, SEQ, SEQ)}.get(mask)
            bias = b.init(value.astype(np.float32), "mask") if value is not None else bert_mask
            if scale == "after_mask":
                scores = b.node("Div", [b.node("Add", [scores, bias]), b.const(math.sqrt(size))])
            else:
                scores = b.node("Add", [scores, bias])
        probs = b.node("Softmax", [scores], axis=softmax_axis)
        if probs_output:
            extra_outputs.append(probs)
        context = b.node("Transpose", [b.node("MatMul", [probs, parts["v"]])], perm=[0, 2, 1, 3])
        attended = b.node("MatMul", [b.node("Reshape", [context, merge]), b.weight(HIDDEN, HIDDEN)])
        attended = b.node("Add", [attended, b.init(b.rng.standard_normal(HIDDEN).astype(np.float32) * 0.1)])
        if style == "torch":
            attended = b.node("Dropout", [attended])
        summed = b.node("Add", [residual, attended])
        if pre_norm:  # (the sum is the residual stream: normalized for the FFN, and added to its output)
            x = norm(summed, np.ones(HIDDEN, np.float32), np.zeros(HIDDEN, np.float32))
        else:
            x = norm(summed, b.rng.uniform(0.5, 1.5, HIDDEN).astype(np.float32),
                     b.rng.standard_normal(HIDDEN).astype(np.float32) * 0.1)
        up = b.node("Add", [b.node("MatMul", [x, b.weight(HIDDEN, 2 * HIDDEN)]),
                            b.init(b.rng.standard_normal(2 * HIDDEN).astype(np.float32) * 0.1)])
        erf = b.node("Erf", [b.node("Div", [up, b.const(math.sqrt(2))])])
        gelu = b.node("Mul", [b.node("Mul", [up, b.node("Add", [erf, b.const(1.0)])]), b.const(gelu_half)])
        down = b.node("Add", [b.node("MatMul", [gelu, b.weight(2 * HIDDEN, HIDDEN)]),
                              b.init(b.rng.standard_normal(HIDDEN).astype(np.float32) * 0.1)])
        if pre_norm:
            x = b.node("Add", [summed, down])
        else:
            x = norm(b.node("Add", [x, down]), np.ones(HIDDEN, np.float32), np.zeros(HIDDEN, np.float32))
    dims: list[Any] = [1, SEQ, HIDDEN] if static else ["batch", "sequence", HIDDEN]
    model = b.model(dims, x, mask=mask, opset=opset)
    for name in extra_outputs:
        model.proto.graph.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, HEADS, SEQ, SEQ]))
    return model


def _ops(model: gk.Model) -> dict[str, int]:
    return op_counts(model)


def _max_error(before: gk.Model, after: gk.Model, **dims: int) -> float:
    """``after`` passes onnx.checker's full check; the largest difference of its outputs from ``before``'s."""
    onnx.checker.check_model(str(after.path) if after.path else after.proto, full_check=True)
    options = gk.FeedOptions(seed=3, dims=dims)
    expected, found = gk.run(before, feed_options=options), gk.run(after, feed_options=options)
    assert set(found) == set(expected)
    return max(float(np.max(np.abs(found[k].astype(np.float64) - v))) for k, v in expected.items())


def _fused(model: gk.Model, **kwargs: Any) -> gk.Model:
    before = model.proto.SerializeToString()
    result = gk.simplify(model, target="onnxruntime", **kwargs)
    assert model.proto.SerializeToString() == before
    return result


# ------------------------------------------------------------------------------------ the matches


@pytest.mark.parametrize("style", ["torch", "generate"])
@pytest.mark.parametrize("static", [True, False])
def test_an_encoder_becomes_seven_contrib_and_matmul_nodes_per_layer(style: str, static: bool) -> None:
    model = _encoder(style=style, static=static)
    result = _fused(model)
    assert _ops(result) == {"com.microsoft::Attention": 2, "MatMul": 6, "com.microsoft::SkipLayerNormalization": 4,
                            "com.microsoft::BiasGelu": 2}
    assert {(o.domain, o.version) for o in result.proto.opset_import} == {("", 17), ("com.microsoft", 1)}
    attention = next(n for n in result.graph.node if n.op_type == "Attention")
    attrs = {a.name: helper.get_attribute_value(a) for a in attention.attribute}
    assert attrs["num_heads"] == HEADS and attrs["scale"] == pytest.approx(1 / math.sqrt(HIDDEN // HEADS))
    weights = {t.name: t for t in result.graph.initializer}
    assert list(weights[attention.input[1]].dims) == [HIDDEN, 3 * HIDDEN]
    assert list(weights[attention.input[2]].dims) == [3 * HIDDEN]
    assert _max_error(model, result) < ATOL
    if not static:
        assert _max_error(model, result, batch=3, sequence=7) < ATOL


def test_the_default_target_writes_standard_onnx_only() -> None:
    result = gk.simplify(_encoder())
    assert not any(op.startswith("com.microsoft") for op in _ops(result))
    assert all(o.domain == "" for o in result.proto.opset_import)


def test_a_scale_on_q_before_the_head_split_is_the_attention_scale() -> None:
    model = _encoder(style="generate", scale="q")
    result = _fused(model)
    attention = next(n for n in result.graph.node if n.op_type == "Attention")
    scale = next(a.f for a in attention.attribute if a.name == "scale")
    assert scale == pytest.approx(1 / math.sqrt(HIDDEN // HEADS))
    assert _max_error(model, result) < ATOL


def test_no_scale_at_all_is_written_as_scale_one() -> None:
    model = _encoder(style="generate", scale="none")
    result = _fused(model)
    attention = next(n for n in result.graph.node if n.op_type == "Attention")
    assert next(a.f for a in attention.attribute if a.name == "scale") == 1.0
    assert _max_error(model, result) < ATOL


@pytest.mark.parametrize(("mask", "static", "expands"), [("padding", True, 0), ("causal", True, 0), ("input", True, 1),
                                                         ("input", False, 1)])
def test_a_mask_added_to_the_scaled_scores_is_the_attention_bias(mask: str, static: bool, expands: int) -> None:
    model = _encoder(style="generate", mask=mask, static=static)
    result = _fused(model)
    counts = _ops(result)
    assert counts["com.microsoft::Attention"] == 2 and counts.get("Expand", 0) == expands
    assert counts.get("Shape", 0) == (0 if static else 1)  # (the mask's broadcast, shared by both layers)
    weights = {t.name: t for t in result.graph.initializer}
    for node in (n for n in result.graph.node if n.op_type == "Attention"):
        assert len(node.input) == 6 and node.input[5]
        if node.input[5] in weights:
            assert list(weights[node.input[5]].dims) == [1, 1, SEQ, SEQ]
    assert _max_error(model, result) < ATOL
    if not static:
        assert _max_error(model, result, batch=3, sequence=7) < ATOL


@pytest.mark.parametrize("static", [True, False])
def test_torch_sdpa_export_scales_q_and_k_by_the_root_of_a_scale_read_from_the_shape(static: bool) -> None:
    model = _encoder(style="torch", scale="sdpa", static=static, mask="input")
    result = _fused(model)
    counts = _ops(result)
    assert counts["com.microsoft::Attention"] == 2 and "Slice" not in counts
    attention = next(n for n in result.graph.node if n.op_type == "Attention")
    assert next(a.f for a in attention.attribute if a.name == "scale") == pytest.approx(1 / math.sqrt(HIDDEN // HEADS))
    assert _max_error(model, result) < ATOL
    if not static:
        assert _max_error(model, result, batch=2, sequence=9) < ATOL


@pytest.mark.parametrize("opset", [14, 17])
def test_a_bert_export_below_opset_17_decomposed_layernorm_and_token_mask(opset: int) -> None:
    model = _encoder(style="torch", static=False, mask="bert", decomposed=True, opset=opset)
    result = _fused(model)
    counts = _ops(result)
    assert counts["com.microsoft::Attention"] == 2 and counts["com.microsoft::SkipLayerNormalization"] == 4
    assert counts["com.microsoft::BiasGelu"] == 2 and counts["Expand"] == 1
    assert "ReduceMean" not in counts and "Softmax" not in counts
    options = gk.FeedOptions(seed=5, dims={"batch": 3, "sequence": 7}, ranges={"attention_mask": (0, 2)})
    expected, found = gk.run(model, feed_options=options), gk.run(result, feed_options=options)
    assert float(np.max(np.abs(found["y"] - expected["y"]))) < ATOL
    onnx.checker.check_model(result.proto, full_check=True)


def test_a_pre_norm_residual_stream_is_written_by_skip_layernorm_fourth_output() -> None:
    model = _encoder(style="generate", pre_norm=True, layers=1)
    result = _fused(model)
    skips = [n for n in result.graph.node if n.op_type == "SkipLayerNormalization"]
    assert len(skips) == 1 and len(skips[0].output) == 4 and skips[0].output[3]
    assert _ops(result)["com.microsoft::Attention"] == 1
    assert _max_error(model, result) < ATOL


# ------------------------------------------------------------------------------- the near-misses


@pytest.mark.parametrize(("variant", "kept"), [
    (dict(mask="padding", scale="after_mask"), "Softmax"),  # a mask added before the scale: it would be scaled
    (dict(mask="padding", softmax_axis=2), "Softmax"),  # a masked Softmax over the queries
    (dict(scale="tensor"), "Softmax"),                 # a scale per key position, not a scalar
    (dict(batch_in_target=True, static=False), "Softmax"),  # a head split that hard-codes batch 1 (dynamic batch)
    (dict(softmax_axis=2), "Softmax"),                 # a Softmax over the queries
    (dict(probs_output=True), "Softmax"),              # the probabilities are a graph output
    (dict(gelu_half=0.49), "Erf"),                     # not GELU's 0.5
])
def test_a_pattern_that_almost_matches_is_left_alone(variant: dict[str, Any], kept: str) -> None:
    model = _encoder(style="generate", **variant)
    result = _fused(model)
    counts = _ops(result)
    assert counts.get(kept) == 2
    if kept == "Softmax":
        assert "com.microsoft::Attention" not in counts
        assert counts["com.microsoft::BiasGelu"] == 2  # (the rest still fuses)
    else:
        assert "com.microsoft::BiasGelu" not in counts and "com.microsoft::Gelu" not in counts
        assert counts["com.microsoft::Attention"] == 2
    assert _max_error(model, result) < ATOL


def _parse(text: str) -> gk.Model:
    return gk.parse_model('<ir_version: 8, opset_import: ["" : 17]>\n' + text)


def test_gelu_without_a_bias_is_gelu_and_the_tanh_form_is_fast_gelu() -> None:
    model = _parse("""
    g (float[2, 8] x) => (float[2, 8] y, float[2, 8] t)
    <float r = {0.70710677}, float one = {1.0}, float half = {0.5}, float c = {0.7978846}, float k = {0.044715},
     float three = {3.0}>
    {
      s = Mul(r, x)
      e = Erf(s)
      a = Add(one, e)
      h = Mul(x, half)
      y = Mul(a, h)
      p = Pow(x, three)
      q = Mul(p, k)
      u = Add(x, q)
      v = Mul(u, c)
      w = Tanh(v)
      z = Add(w, one)
      m = Mul(x, z)
      t = Mul(m, half)
    }""")
    result = gk.fuse_gelu(model)
    assert _ops(result) == {"com.microsoft::Gelu": 1, "com.microsoft::FastGelu": 1}
    assert _max_error(model, result) < ATOL


@pytest.mark.parametrize(("kappa", "fused"), [(0.044715, True), (0.0447, False)])
def test_the_tanh_form_after_a_projection_is_fast_gelu_with_its_bias(kappa: float, fused: bool) -> None:
    rng = np.random.default_rng(1)
    w = ", ".join(f"{v:.4f}" for v in rng.standard_normal(64))
    model = _parse(f"""
    g (float[batch, 3, 8] i) => (float[batch, 3, 8] t)
    <float[8, 8] w = {{{w}}}, float[8] b = {{0.1, -0.2, 0.3, 0, 0.5, -0.6, 0.7, 0.8}}, float one = {{1.0}},
     float half = {{0.5}}, float c = {{0.7978846}}, float k = {{{kappa}}}>
    {{
      mm = MatMul(i, w)
      x = Add(mm, b)
      x2 = Mul(x, x)
      x3 = Mul(x, x2)
      q = Mul(k, x3)
      u = Add(x, q)
      v = Mul(c, u)
      th = Tanh(v)
      z = Add(one, th)
      xz = Mul(x, z)
      t = Mul(half, xz)
    }}""")
    result = gk.simplify(model, target="onnxruntime")
    counts = _ops(result)
    if fused:
        assert counts == {"MatMul": 1, "com.microsoft::FastGelu": 1}
        node = next(n for n in result.graph.node if n.op_type == "FastGelu")
        assert list(node.input) == ["mm", "b"]
    else:
        assert "com.microsoft::FastGelu" not in counts and counts["Tanh"] == 1
    assert _max_error(model, result, batch=2) < ATOL


def test_gelu_with_an_approximate_sqrt2_is_left_alone() -> None:
    model = _parse("""
    g (float[2, 8] x) => (float[2, 8] y)
    <float r = {1.4142}, float one = {1.0}, float half = {0.5}>
    {
      s = Div(x, r)
      e = Erf(s)
      a = Add(e, one)
      m = Mul(x, a)
      y = Mul(m, half)
    }""")
    with pytest.raises(gk.NoChangeError, match="fuse_gelu changes nothing"):
        gk.fuse_gelu.__wrapped__(model)


def test_an_add_that_broadcasts_is_no_skip_layernorm() -> None:
    model = _parse("""
    g (float[2, 3, 8] x, float[1, 1, 8] b) => (float[2, 3, 8] y, float[2, 3, 8] z)
    <float[8] gamma = {1, 1, 1, 1, 1, 1, 1, 1}, float[8] beta = {0, 0, 0, 0, 0, 0, 0, 1}>
    {
      s = Add(x, b)
      y = LayerNormalization<axis = -1>(s, gamma, beta)
      t = Add(x, x)
      z = LayerNormalization<axis = 1>(t, gamma, beta)
    }""")
    with pytest.raises(gk.NoChangeError, match="fuse_skip_layernorm changes nothing"):
        gk.fuse_skip_layernorm.__wrapped__(model)


# ---------------------------------------------------------------------- API, edit options, recipe


def test_each_fusion_is_an_edit_of_its_own() -> None:
    model = gk.simplify(_encoder(style="generate"))  # (standard: the Gemm-free 3-D projections stay MatMul)
    steps: list[Callable[[gk.Model], gk.Model]] = [gk.fuse_attention, gk.fuse_gelu, gk.fuse_skip_layernorm]
    result = model
    for step in steps:
        result = step(result)
    assert _ops(result) == {"com.microsoft::Attention": 2, "MatMul": 6, "com.microsoft::SkipLayerNormalization": 4,
                            "com.microsoft::BiasGelu": 2}
    assert _max_error(model, result) < ATOL


def test_an_onnxruntime_pass_needs_the_onnxruntime_target() -> None:
    with pytest.raises(gk.UsageError, match="'attention' writes ONNX Runtime's contrib operators") as err:
        gk.simplify_with_report(_encoder(), passes=["attention"])
    assert "target='onnxruntime'" in err.value.hint
    with pytest.raises(gk.UsageError, match="target"):
        gk.simplify(_encoder(), target="tensorrt")


def test_simplify_report_counts_the_fusions() -> None:
    report = gk.simplify_with_report(_encoder(style="generate"), target="onnxruntime")
    assert report.changes["attention"] > 0 and report.changes["gelu"] > 0 and report.changes["skip_layernorm"] > 0
    skipped = gk.simplify_with_report(_encoder(style="generate"), target="onnxruntime",
                                      passes=[*PASSES, "gelu"])
    assert "com.microsoft::Attention" not in skipped.after and skipped.after["com.microsoft::BiasGelu"] == 2


def test_cli_simplify_target_onnxruntime_verifies_and_writes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source, out = tmp_path / "enc.onnx", tmp_path / "out.onnx"
    gk.save(_encoder(static=False), source)
    assert main(["simplify", str(source), str(out), "--target", "onnxruntime", "--dim", "batch=2",
                 "--dim", "sequence=7"]) == 0
    said = capsys.readouterr().out
    assert "com.microsoft::Attention" in said and "verified" in said
    assert _ops(gk.load(out))["com.microsoft::Attention"] == 2
    assert main(["simplify", str(source), str(tmp_path / "std.onnx"), "--skip", "attention"]) == 0
    capsys.readouterr()
    assert main(["simplify", str(source), str(tmp_path / "j.onnx"), "--target", "onnxruntime", "--skip", "gelu",
                 "--no-verify", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["target"] == "onnxruntime" and data["changes"]["attention"] > 0 and "gelu" not in data["changes"]
    assert data["after"]["com.microsoft::Attention"] == 2 and data["after"]["Erf"] == 2


def test_cli_edit_fusion_options_and_recipe(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source, out, recipe = tmp_path / "enc.onnx", tmp_path / "out.onnx", tmp_path / "r.yaml"
    gk.save(_encoder(style="generate"), source)
    assert main(["edit", str(source), str(out), "--simplify", "--target", "onnxruntime", "--save-recipe", str(recipe)]) == 0
    assert "target: onnxruntime" in recipe.read_text()
    assert _ops(gk.load(out))["com.microsoft::Attention"] == 2
    again = tmp_path / "again.onnx"
    assert main(["edit", str(source), str(again), "--recipe", str(recipe)]) == 0
    assert _ops(gk.load(again)) == _ops(gk.load(out))
    fused = tmp_path / "fused.onnx"
    assert main(["edit", str(source), str(fused), "--fuse-attention", "--fuse-gelu", "--fuse-skip-layernorm"]) == 0
    assert {"com.microsoft::Attention", "com.microsoft::BiasGelu",
            "com.microsoft::SkipLayerNormalization"} <= set(_ops(gk.load(fused)))
    capsys.readouterr()
    assert main(["edit", str(fused), str(tmp_path / "x.onnx"), "--fuse-attention"]) == 2
    assert "hint:" in capsys.readouterr().err
    assert main(["edit", str(source), str(tmp_path / "y.onnx"), "--cleanup", "--target", "onnxruntime"]) == 2
    assert "--target 'onnxruntime' must follow --simplify" in capsys.readouterr().err


def test_the_encoder_fixture_becomes_seven_nodes() -> None:
    model = gk.load(fixture("encoder.onnx"))
    result = _fused(model)
    assert _ops(result) == {"com.microsoft::Attention": 1, "MatMul": 3, "com.microsoft::SkipLayerNormalization": 2,
                            "com.microsoft::BiasGelu": 1}
    assert _max_error(model, result, batch=2, sequence=9) < ATOL


def test_external_weights_stay_on_disk_and_the_packed_ones_are_written(tmp_path: Path) -> None:
    source = tmp_path / "in" / "model.onnx"
    source.parent.mkdir()
    gk.save(_encoder(style="generate"), source, external=True, location="model.data", size_threshold=256)
    before = folder_digest(source.parent)
    model = gk.load(source)
    result = gk.simplify(model, target="onnxruntime")
    kept = [t.name for t in result.graph.initializer if is_external(t)]
    assert kept and not any("qkv" in name for name in kept)  # (what was not packed is read where it lies)
    out = tmp_path / "out" / "model.onnx"
    out.parent.mkdir()
    gk.save(result, out, external=True, location="model.data")
    assert folder_digest(source.parent) == before
    assert _max_error(model, gk.load(out)) < ATOL


def _vit_block(*, unbind: str = "gather", static: bool = True, order: tuple[int, int, int] = (0, 1, 2)) -> gk.Model:
    """A vision transformer's pre-norm attention as torch.onnx exports timm's: one packed ``qkv`` projection
    reshaped to [batch, tokens, 3, heads, size], transposed by [2, 0, 3, 1, 4] and taken apart (Gather 0, 1, 2,
    or Split + Squeeze), Q scaled, K transposed, the heads merged and projected. ``order``: which third is Q,
    K and V (only 0, 1, 2 is Attention's packing)."""
    b = _Builder(seed=4)
    size = HIDDEN // HEADS
    normed = b.node("LayerNormalization", ["x", b.init(np.ones(HIDDEN, np.float32)), b.init(np.zeros(HIDDEN, np.float32))],
                    axis=-1, epsilon=1e-6)
    qkv = b.node("Add", [b.node("MatMul", [normed, b.weight(HIDDEN, 3 * HIDDEN)]),
                         b.init(b.rng.standard_normal(3 * HIDDEN).astype(np.float32) * 0.1)])
    split = b.node("Reshape", [qkv, b.init(np.array([0, 0, 3, HEADS, size], np.int64), "shape")])
    stacked = b.node("Transpose", [split], perm=[2, 0, 3, 1, 4])
    if unbind == "gather":
        parts = [b.node("Gather", [stacked, b.init(np.array(i, np.int64), "index")], axis=0) for i in range(3)]
    else:
        outs = [f"/Split_out_{i}" for i in range(3)]
        b.nodes.append(helper.make_node("Split", [stacked, b.init(np.array([1, 1, 1], np.int64), "sizes")], outs,
                                        name="/Split", axis=0))
        parts = [b.node("Squeeze", [o, b.init(np.array([0], np.int64), "axes")]) for o in outs]
    q, k, v = (parts[i] for i in order)
    q = b.node("Mul", [q, b.init(np.array(size ** -0.5, np.float32), "scale")])
    probs = b.node("Softmax", [b.node("MatMul", [q, b.node("Transpose", [k], perm=[0, 1, 3, 2])])], axis=-1)
    context = b.node("Reshape", [b.node("Transpose", [b.node("MatMul", [probs, v])], perm=[0, 2, 1, 3]),
                                 b.init(np.array([0, 0, HIDDEN], np.int64), "shape")])
    out = b.node("Add", [b.node("MatMul", [context, b.weight(HIDDEN, HIDDEN)]), b.init(np.zeros(HIDDEN, np.float32))])
    y = b.node("Add", ["x", out])
    return b.model([1, SEQ, HIDDEN] if static else ["batch", "tokens", HIDDEN], y)


@pytest.mark.parametrize(("unbind", "static"), [("gather", True), ("split", True), ("gather", False)])
def test_a_vision_transformer_packed_qkv_is_attention_with_its_own_weight(unbind: str, static: bool) -> None:
    model = _vit_block(unbind=unbind, static=static)
    result = _fused(model)
    counts = _ops(result)
    assert counts["com.microsoft::Attention"] == 1 and "Softmax" not in counts and "Transpose" not in counts
    attention = next(n for n in result.graph.node if n.op_type == "Attention")
    packed = next(n for n in model.graph.node if n.op_type == "MatMul").input[1]
    assert attention.input[1] == packed  # (the model's weight, not a copy)
    assert _max_error(model, result) < ATOL
    if not static:
        assert _max_error(model, result, batch=2, tokens=9) < ATOL


def test_a_packed_qkv_in_another_order_is_left_alone() -> None:
    model = _vit_block(order=(1, 0, 2))
    result = _fused(model)
    assert "com.microsoft::Attention" not in _ops(result)
    assert _max_error(model, result) < ATOL


def test_float16_and_weights_beyond_max_bytes_are_left_alone() -> None:
    half = gk.to_float16(_encoder(style="generate"))  # (ONNX Runtime's CPU kernels of these operators are float32)
    assert not any(op.startswith("com.microsoft") for op in _ops(_fused(half)))
    model = _encoder(style="generate")
    small = _fused(model, max_bytes=HIDDEN * HIDDEN * 4 - 1)  # (each Q/K/V weight is one byte more)
    counts = _ops(small)
    assert "com.microsoft::Attention" not in counts and counts["com.microsoft::BiasGelu"] == 2
    assert _max_error(model, small) < ATOL


def _gemm_block(target: list[int], batch: int = 2, seq: int = 4) -> gk.Model:
    """Self-attention whose projections are Gemms of x flattened to [batch · seq, hidden] (what the gemm pass
    makes), each split into heads by a Reshape to ``target``."""
    b = _Builder(seed=1)
    flat = b.node("Reshape", ["x", b.init(np.array([batch * seq, HIDDEN], np.int64), "shape")])
    heads = []
    for perm in ([0, 2, 1, 3], [0, 2, 3, 1], [0, 2, 1, 3]):
        projected = b.node("Gemm", [flat, b.weight(HIDDEN, HIDDEN), b.init(np.zeros(HIDDEN, np.float32), "bias")])
        heads.append(b.node("Transpose", [b.node("Reshape", [projected, b.init(np.array(target, np.int64), "shape")])],
                            perm=perm))
    probs = b.node("Softmax", [b.node("MatMul", heads[:2])], axis=-1)
    context = b.node("Reshape", [b.node("Transpose", [b.node("MatMul", [probs, heads[2]])], perm=[0, 2, 1, 3]),
                                 b.init(np.array([batch, seq, HIDDEN], np.int64), "shape")])
    return b.model([batch, seq, HIDDEN], context)


@pytest.mark.parametrize(("target", "fused"), [([2, 4, HEADS, HIDDEN // HEADS], True),
                                               ([-1, 4, HEADS, HIDDEN // HEADS], True),
                                               ([0, -1, HEADS, HIDDEN // HEADS], False)])
def test_a_head_split_of_a_gemm_output_copies_the_flat_dims(target: list[int], fused: bool) -> None:
    # A 0 in the Reshape of the Gemm's [batch · seq, hidden] copies batch · seq: [0, -1, heads, size] makes a
    # sequence of one token per row, where each token attends to itself alone (not Attention).
    model = _gemm_block(target)
    result = _fused(model)
    assert (_ops(result).get("com.microsoft::Attention") == 1) is fused
    assert _max_error(model, result) < ATOL


def test_a_zero_scale_is_left_alone_where_attention_would_read_it_as_the_default() -> None:
    # (ONNX Runtime's Attention takes scale=0 for "not given": 1/√size; the graph's softmax of zeros is uniform)
    model = _encoder(style="generate", layers=1)
    for tensor in model.proto.graph.initializer:
        if tensor.name.startswith("scale"):
            tensor.CopyFrom(numpy_helper.from_array(np.array(0.0, np.float32), tensor.name))
    result = _fused(model)
    assert "com.microsoft::Attention" not in _ops(result) and _ops(result)["Softmax"] == 1
    assert _max_error(model, result) < ATOL
