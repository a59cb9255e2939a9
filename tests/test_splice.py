"""replace_span: the span extract would cut is replaced by another model's graph; values checked in ONNX Runtime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import graphkit as gk
from graphkit._edit.splice import replace_span

HIDDEN, SEQ = 8, 4
_rng = np.random.default_rng(17)


def _weights() -> dict[str, np.ndarray]:
    shapes = {"wq": (HIDDEN, HIDDEN), "wk": (HIDDEN, HIDDEN), "wv": (HIDDEN, HIDDEN), "wo": (HIDDEN, HIDDEN),
              "w1": (HIDDEN, 2 * HIDDEN), "w2": (2 * HIDDEN, HIDDEN)}
    found = {k: (_rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32) for k, s in shapes.items()}
    for k in ("g1", "g2"):
        found[k] = (1 + 0.1 * _rng.standard_normal(HIDDEN)).astype(np.float32)
    for k in ("b1", "b2"):
        found[k] = (0.1 * _rng.standard_normal(HIDDEN)).astype(np.float32)
    return found


WEIGHTS = _weights()


def transformer_block() -> gk.Model:
    """A pre-norm transformer block: LayerNorm, single-head attention, residual, LayerNorm, MLP, residual."""
    b = gk.GraphBuilder("block", opset=17)
    x = b.input("x", "float32", [1, SEQ, HIDDEN])
    w = {k: b.initializer(v, k) for k, v in WEIGHTS.items()}
    ln1 = b.node("LayerNormalization", [x, w["g1"], w["b1"]], name="ln1", outputs=["ln1_out"], axis=-1, epsilon=1e-5)
    q = b.node("MatMul", [ln1, w["wq"]], name="q", outputs=["q_out"])
    k = b.node("MatMul", [ln1, w["wk"]], name="k", outputs=["k_out"])
    v = b.node("MatMul", [ln1, w["wv"]], name="v", outputs=["v_out"])
    kt = b.node("Transpose", [k], name="kt", outputs=["kt_out"], perm=[0, 2, 1])
    scores = b.node("MatMul", [q, kt], name="scores", outputs=["scores_out"])
    scale = b.initializer(np.array(1 / np.sqrt(HIDDEN), np.float32), "scale")
    scaled = b.node("Mul", [scores, scale], name="scaled", outputs=["scaled_out"])
    probs = b.node("Softmax", [scaled], name="softmax", outputs=["probs"], axis=-1)
    att = b.node("MatMul", [probs, v], name="att", outputs=["att_out"])
    proj = b.node("MatMul", [att, w["wo"]], name="proj", outputs=["proj_out"])
    h = b.node("Add", [x, proj], name="residual1", outputs=["h"])
    ln2 = b.node("LayerNormalization", [h, w["g2"], w["b2"]], name="ln2", outputs=["ln2_out"], axis=-1, epsilon=1e-5)
    f1 = b.node("MatMul", [ln2, w["w1"]], name="fc1", outputs=["fc1_out"])
    f2 = b.node("Relu", [f1], name="act", outputs=["act_out"])
    f3 = b.node("MatMul", [f2, w["w2"]], name="fc2", outputs=["fc2_out"])
    b.output(b.node("Add", [h, f3], name="residual2", outputs=["y"]), "float32", [1, SEQ, HIDDEN])
    return b.build()


def _layer_norm(x: np.ndarray, g: np.ndarray, beta: np.ndarray) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-5) * g + beta


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def expected_block(x: np.ndarray) -> np.ndarray:
    """The block in numpy (float64), the values every spliced variant must give."""
    w = {k: v.astype(np.float64) for k, v in WEIGHTS.items()}
    a = _layer_norm(x.astype(np.float64), w["g1"], w["b1"])
    q, k, v = a @ w["wq"], a @ w["wk"], a @ w["wv"]
    h = x + _softmax(q @ k.transpose(0, 2, 1) / np.sqrt(HIDDEN)) @ v @ w["wo"]
    return h + np.maximum(_layer_norm(h, w["g2"], w["b2"]) @ w["w1"], 0) @ w["w2"]


def decomposed_layer_norm(gamma: np.ndarray, beta: np.ndarray, *, opset: int = 17) -> gk.Model:
    """LayerNormalization over the last axis written with ReduceMean, Sub, Mul, Add, Sqrt and Div."""
    b = gk.GraphBuilder("ln_decomposed", opset=opset)
    x = b.input("x", "float32", [1, SEQ, HIDDEN])
    axes = {"axes": [-1]} if opset < 18 else {}
    extra = [b.initializer(np.array([-1], np.int64), "axes")] if opset >= 18 else []
    mean = b.node("ReduceMean", [x, *extra], name="reduce_mean", outputs=["mean"], keepdims=1, **axes)
    d = b.node("Sub", [x, mean], name="center", outputs=["centered"])
    sq = b.node("Mul", [d, d], name="square", outputs=["squared"])
    var = b.node("ReduceMean", [sq, *extra], name="reduce_var", outputs=["variance"], keepdims=1, **axes)
    eps = b.initializer(np.array(1e-5, np.float32), "epsilon")
    sd = b.node("Sqrt", [b.node("Add", [var, eps], name="add_eps", outputs=["var_eps"])], name="sqrt", outputs=["std"])
    normed = b.node("Div", [d, sd], name="normalize", outputs=["normed"])
    scaled = b.node("Mul", [normed, b.initializer(gamma, "gamma")], name="scale", outputs=["scaled"])
    b.output(b.node("Add", [scaled, b.initializer(beta, "beta")], name="shift", outputs=["ln"]),
             "float32", [1, SEQ, HIDDEN])
    return b.build()


X = _rng.standard_normal((1, SEQ, HIDDEN)).astype(np.float32)


def _y(model: gk.Model) -> np.ndarray:
    return gk.run(model, feeds={"x": X})["y"]


def test_the_block_computes_what_numpy_does() -> None:
    np.testing.assert_allclose(_y(transformer_block()), expected_block(X), atol=1e-5)


def test_splice_round_trip_gives_identical_values(tmp_path: Path) -> None:
    block = transformer_block()
    before = block.serialized()
    span = gk.extract(block, ["ln1_out", "h"], ["y"])
    gk.save(span, tmp_path / "span.onnx")
    edited_elsewhere = gk.load(tmp_path / "span.onnx")
    back = replace_span(block, ["ln1_out", "h"], ["y"], edited_elsewhere)
    assert block.serialized() == before
    gk.save(back, tmp_path / "back.onnx")
    assert np.array_equal(_y(gk.load(tmp_path / "back.onnx")), _y(block))
    middle = gk.extract(block, ["x"], ["h"])
    again = replace_span(block, ["x"], ["h"], middle)
    assert gk.diff(block, again).identical  # (the same nodes, names and weights; only the weights' order moved)
    assert np.array_equal(_y(again), _y(block))


def test_decomposed_layer_norm_replaces_the_fused_op(tmp_path: Path) -> None:
    block = transformer_block()
    ln = decomposed_layer_norm(WEIGHTS["g1"], WEIGHTS["b1"])
    result = replace_span(block, ["x"], ["ln1_out"], ln)
    graph = result.lazy_proto.graph
    ops = [n.op_type for n in graph.node]
    assert ops.count("LayerNormalization") == 1 and ops.count("ReduceMean") == 2
    names = {t.name for t in graph.initializer}
    assert {"gamma", "beta", "epsilon"} <= names and "g1" not in names and "b1" not in names
    gk.save(result, tmp_path / "decomposed.onnx")
    np.testing.assert_allclose(_y(gk.load(tmp_path / "decomposed.onnx")), expected_block(X), atol=1e-5)
    # The second LayerNorm with the same replacement: its names are taken now, so they are prefixed.
    ln2 = decomposed_layer_norm(WEIGHTS["g2"], WEIGHTS["b2"])
    both = replace_span(result, {"h": "x"}, {"ln2_out": "ln"}, ln2)
    ops = [n.op_type for n in both.lazy_proto.graph.node]
    assert "LayerNormalization" not in ops and ops.count("ReduceMean") == 4
    inits = {t.name for t in both.lazy_proto.graph.initializer}
    assert {"gamma", "ln_decomposed/gamma", "ln_decomposed/beta", "ln_decomposed/epsilon"} <= inits
    assert "ln_decomposed/reduce_mean" in {n.name for n in both.lazy_proto.graph.node}
    np.testing.assert_allclose(_y(both), expected_block(X), atol=1e-5)


def test_fused_layer_norm_replaces_the_decomposition() -> None:
    block = replace_span(transformer_block(), ["x"], ["ln1_out"], decomposed_layer_norm(WEIGHTS["g1"], WEIGHTS["b1"]))
    b = gk.GraphBuilder("fused", opset=17)
    x = b.input("x", "float32", [1, SEQ, HIDDEN])
    g, beta = b.initializer(WEIGHTS["g1"], "g"), b.initializer(WEIGHTS["b1"], "b")
    b.output(b.node("LayerNormalization", [x, g, beta], name="layer_norm", outputs=["ln"], axis=-1, epsilon=1e-5),
             "float32", [1, SEQ, HIDDEN])
    fused = replace_span(block, ["x"], ["ln1_out"], b.build())
    ops = [n.op_type for n in fused.lazy_proto.graph.node]
    assert ops.count("LayerNormalization") == 2 and "ReduceMean" not in ops and "Sqrt" not in ops
    np.testing.assert_allclose(_y(fused), expected_block(X), atol=1e-5)


def test_replacement_opset_is_reconciled_or_refused() -> None:
    block = transformer_block()
    newer = decomposed_layer_norm(WEIGHTS["g1"], WEIGHTS["b1"], opset=18)  # ReduceMean-18 takes axes as an input
    raised = replace_span(block, ["x"], ["ln1_out"], newer)  # the block's operators are the same at 18
    assert {o.domain: o.version for o in raised.lazy_proto.opset_import}[""] == 18
    np.testing.assert_allclose(_y(raised), expected_block(X), atol=1e-5)
    # ReduceMean-13 in the model, ReduceMean-18 in the replacement: the replacement is converted to 18.
    converted = replace_span(raised, {"h": "x"}, {"ln2_out": "ln"}, decomposed_layer_norm(WEIGHTS["g2"], WEIGHTS["b2"]))
    np.testing.assert_allclose(_y(converted), expected_block(X), atol=1e-5)
    b = gk.GraphBuilder("gelu", opset=20)  # Gelu has no version before 20, ReduceMean-18 is not ReduceMean-13
    x = b.input("x", "float32", [1, SEQ, HIDDEN])
    b.output(b.node("Gelu", [x], name="gelu", outputs=["gy"]), "float32", [1, SEQ, HIDDEN])
    older = replace_span(block, ["x"], ["ln1_out"], decomposed_layer_norm(WEIGHTS["g1"], WEIGHTS["b1"]))
    with pytest.raises(gk.EditError) as err:
        replace_span(older, ["h"], ["ln2_out"], b.build())
    assert "model 'block' imports ai.onnx opset 17 but model 'gelu' imports ai.onnx opset 20" in err.value.message
    assert "ReduceMean (ReduceMean-13 at opset 17, ReduceMean-18 at opset 20)" in err.value.message
    assert "No Previous Version of Gelu" in err.value.message
    assert "version_converter" in (err.value.hint or "")
    b = gk.GraphBuilder("double", opset=19)  # Add and Mul are the same at 17 and 19
    x = b.input("x", "float32", [1, SEQ, HIDDEN])
    b.output(b.node("Add", [x, x], name="double_it", outputs=["twice"]), "float32", [1, SEQ, HIDDEN])
    result = replace_span(block, ["x"], ["ln1_out"], b.build())
    assert {o.domain: o.version for o in result.lazy_proto.opset_import}[""] == 19
    x64 = X.astype(np.float64)
    w = {k: v.astype(np.float64) for k, v in WEIGHTS.items()}
    a = 2 * x64
    h = x64 + _softmax(a @ w["wq"] @ (a @ w["wk"]).transpose(0, 2, 1) / np.sqrt(HIDDEN)) @ (a @ w["wv"]) @ w["wo"]
    expected = h + np.maximum(_layer_norm(h, w["g2"], w["b2"]) @ w["w1"], 0) @ w["w2"]
    np.testing.assert_allclose(_y(result), expected, atol=1e-4)


def test_bindings_that_do_not_fit_are_refused() -> None:
    block = transformer_block()
    ln = decomposed_layer_norm(WEIGHTS["g1"], WEIGHTS["b1"])
    with pytest.raises(gk.EditError) as err:
        replace_span(block, ["x", "h"], ["ln2_out"], ln)
    assert "the span has 2 inputs ('x', 'h') but" in err.value.message and "has 1 graph inputs ('x')" in err.value.message
    assert "by name" in (err.value.hint or "")
    with pytest.raises(gk.TensorNotFoundError) as missing:
        replace_span(block, {"x": "input"}, ["ln1_out"], ln)
    assert "no graph input named 'input'" in missing.value.message and "'x'" in (missing.value.hint or "")
    with pytest.raises(gk.TensorNotFoundError) as unknown:
        replace_span(block, ["x"], ["ln1_ou"], ln)
    assert "ln1_ou" in unknown.value.message and "ln1_out" in (unknown.value.hint or "")


def test_a_span_whose_inner_tensor_is_read_outside_is_refused() -> None:
    block = transformer_block()
    ln = decomposed_layer_norm(WEIGHTS["g1"], WEIGHTS["b1"])
    with pytest.raises(gk.EditError) as err:
        replace_span(block, ["x"], ["q_out"], ln)  # ln1_out is also read by k and v
    assert "reads 'ln1_out', which the span computes" in err.value.message
    assert "add 'ln1_out' to the span's outputs" in (err.value.hint or "")


def test_an_open_span_is_explained_as_extract_does() -> None:
    with pytest.raises(gk.OpenCutError) as err:
        replace_span(transformer_block(), ["ln1_out"], ["y"], decomposed_layer_norm(WEIGHTS["g1"], WEIGHTS["b1"]))
    assert "cannot compute 'y': node 'residual1' (Add) reads 'x'" in err.value.message


def test_a_dtype_mismatch_is_refused() -> None:
    b = gk.GraphBuilder("ints", opset=17)
    x = b.input("x", "int64", [1, SEQ, HIDDEN])
    b.output(b.node("Neg", [x], name="neg", outputs=["n"]), "int64", [1, SEQ, HIDDEN])
    with pytest.raises(gk.EditError) as err:
        replace_span(transformer_block(), ["x"], ["ln1_out"], b.build())
    assert "'x' of model 'block' is float32 but 'x' of model 'ints', bound to it, is int64" in err.value.message


def test_a_pass_through_replacement_gets_an_identity() -> None:
    b = gk.GraphBuilder("nothing", opset=17)
    x = b.input("x", "float32", [1, SEQ, HIDDEN])
    b.output(x, "float32", [1, SEQ, HIDDEN])
    result = replace_span(transformer_block(), ["x"], ["ln1_out"], b.build())
    assert "Identity" in [n.op_type for n in result.lazy_proto.graph.node]
    x64 = X.astype(np.float64)
    w = {k: v.astype(np.float64) for k, v in WEIGHTS.items()}
    h = x64 + _softmax(x64 @ w["wq"] @ (x64 @ w["wk"]).transpose(0, 2, 1) / np.sqrt(HIDDEN)) @ (x64 @ w["wv"]) @ w["wo"]
    np.testing.assert_allclose(_y(result), h + np.maximum(_layer_norm(h, w["g2"], w["b2"]) @ w["w1"], 0) @ w["w2"],
                               atol=1e-4)


def test_local_functions_come_along_and_clashing_ones_are_renamed() -> None:
    text = """
    <ir_version: 8, opset_import: ["" : 17, "my" : 1]>
    g (float[1,4,8] x) => (float[1,4,8] y) {
        y = my.Act(x)
    }
    <domain: "my", opset_import: ["" : 17]>
    Act (a) => (b) {
        b = %s(a)
    }
    """
    host_text = """
    <ir_version: 8, opset_import: ["" : 17, "my" : 1]>
    g (float[1,4,8] x) => (float[1,4,8] y) {
        t = my.Act(x)
        u = my.Act(t)
        y = Neg(u)
    }
    <domain: "my", opset_import: ["" : 17]>
    Act (a) => (b) {
        b = Relu(a)
    }
    """
    host = gk.parse_model(host_text)
    same = replace_span(host, ["x"], ["t"], gk.parse_model(text % "Relu"))
    assert [f.name for f in same.lazy_proto.functions] == ["Act"]
    other = replace_span(host, ["x"], ["t"], gk.parse_model(text % "Abs"))
    assert sorted(f.name for f in other.lazy_proto.functions) == ["Act", "Act_spliced"]
    x = np.linspace(-1, 1, 32, dtype=np.float32).reshape(1, 4, 8)
    np.testing.assert_allclose(gk.run(other, feeds={"x": x})["y"], -np.abs(x))
    alone = replace_span(host, ["x"], ["u"], gk.parse_model(text % "Abs"))  # the model's Act is no longer called
    assert [(f.name, f.node[0].op_type) for f in alone.lazy_proto.functions] == [("Act", "Abs")]
    np.testing.assert_allclose(gk.run(same, feeds={"x": x})["y"], -np.maximum(x, 0))
