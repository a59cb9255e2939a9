"""Dynamic dims that run: set_dims/replace_dim rewrite the constants that hard-code the old size where
the rewrite is exact, refuse naming node and constant where not, and the result runs at every size
with the same per-sample values as the static model."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import LIGHT, fixture

import graphkit as gk
from graphkit._ort import run_session, session
from graphkit.cli import main


def _outputs(model: gk.Model, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    sess = session(model, opt_level="disable")
    return run_session(sess, [o.name for o in sess.get_outputs()], feeds, model.name)


def _per_sample_equal(static: gk.Model, dynamic: gk.Model, name: str, sample: tuple[int, ...],
                      batches: tuple[int, ...] = (1, 2, 7)) -> None:
    """``dynamic`` at each batch gives, sample by sample, what ``static`` gives for that sample alone."""
    onnx.checker.check_model(dynamic.proto, full_check=True)
    rng = np.random.default_rng(0)
    for batch in batches:
        x = rng.standard_normal((batch, *sample)).astype(np.float32)
        got = _outputs(dynamic, {name: x})
        for i in range(batch):
            want = _outputs(static, {name: x[i:i + 1]})
            for g, w in zip(got, want):
                np.testing.assert_allclose(g[i:i + 1], w, rtol=1e-5, atol=1e-6)


def _dims(model: gk.Model, name: str) -> list[int | str]:
    graph = model.lazy_proto.graph
    value = next(v for v in [*graph.input, *graph.output, *graph.value_info] if v.name == name)
    return [d.dim_value if d.HasField("dim_value") else d.dim_param for d in value.type.tensor_type.shape.dim]


def _constant(model: gk.Model, name: str) -> list[int]:
    return onnx.numpy_helper.to_array(next(t for t in model.lazy_proto.graph.initializer if t.name == name)).tolist()


@pytest.mark.parametrize("name", ["model_static.onnx", "model_dynamic_0.onnx", "model_dynamic_23.onnx"])
def test_the_dynamic_axes_fixtures_made_dynamic_run_at_every_batch(name: str) -> None:
    static = gk.load(fixture("model_static.onnx"))
    model = gk.load(fixture(name))
    dynamic = gk.replace_dim(model, 1, "batch") if name != "model_dynamic_0.onnx" else model
    assert _dims(dynamic, "in")[0] == "batch" and _dims(dynamic, "out")[0] == "batch"
    _per_sample_equal(static, dynamic, "in", (3, 10, 10))


def _flattening() -> gk.Model:
    weights = ",".join(f"{(i % 7) / 10:.1f}" for i in range(48 * 5))
    return gk.parse_model(f"""
<ir_version: 8, opset_import: ["" : 17]>
g (float[1, 3, 4, 4] x) => (float[1, 5] y) <float[48, 5] w = {{{weights}}}, int64[2] flat = {{1, 48}}> {{
  r = Relu(x)
  f = Reshape(r, flat)
  y = MatMul(f, w)
}}""")


def test_a_flattening_reshape_is_rewritten_to_copy_the_batch() -> None:
    static = _flattening()
    before = static.lazy_proto.SerializeToString()
    dynamic = gk.set_dims(static, "x", {0: "batch"})
    assert _constant(dynamic, "flat") == [0, 48]
    assert _dims(dynamic, "y") == ["batch", 5]
    assert static.lazy_proto.SerializeToString() == before
    _per_sample_equal(static, dynamic, "x", (3, 4, 4))


ATTENTION = """
<ir_version: 8, opset_import: ["" : 17]>
attn (float[1, 8, 16] x) => (float[1, 8, 16] y) <int64[4] heads = {1, 8, 2, 8}, int64[3] merged = {1, 8, 16}> {
  split = Reshape(x, heads)
  t = Transpose <perm = [0, 2, 1, 3]> (split)
  tt = Transpose <perm = [0, 1, 3, 2]> (t)
  scores = MatMul(t, tt)
  probs = Softmax <axis = -1> (scores)
  ctx = MatMul(probs, t)
  back = Transpose <perm = [0, 2, 1, 3]> (ctx)
  y = Reshape(back, merged)
}
"""


def test_batch_and_sequence_made_dynamic_through_attention_reshapes() -> None:
    static = gk.parse_model(ATTENTION)
    dynamic = gk.set_dims(gk.set_dims(static, "x", {0: "batch"}), "x", {1: "seq"})
    assert _constant(dynamic, "heads") == [0, 0, 2, 8] and _constant(dynamic, "merged") == [0, 0, 16]
    assert _dims(dynamic, "y") == ["batch", "seq", 16]
    _per_sample_equal(static, dynamic, "x", (8, 16), batches=(2, 7))
    (out,) = _outputs(dynamic, {"x": np.ones((3, 5, 16), np.float32)})
    assert out.shape == (3, 5, 16)


def test_a_shared_constant_is_copied_for_the_reader_that_changes() -> None:
    model = gk.parse_model("""
<ir_version: 8, opset_import: ["" : 17]>
g (float[1, 6] x, float[3, 2] z) => (float[1, 6] y, float[1, 6] w) <int64[2] s = {1, 6}> {
  y = Reshape(x, s)
  w = Reshape(z, s)
}""")
    dynamic = gk.set_dims(model, "x", {0: "batch"})
    readers = {n.output[0]: n.input[1] for n in dynamic.lazy_proto.graph.node}
    assert readers["w"] == "s" and _constant(dynamic, "s") == [1, 6]
    assert _constant(dynamic, readers["y"]) == [0, 6]


def test_expand_and_slice_constants_are_rewritten() -> None:
    static = gk.parse_model("""
<ir_version: 8, opset_import: ["" : 17]>
g (float[2, 1, 4] x) => (float[2, 3, 4] y) <int64[3] to = {2, 3, 4}, int64[1] s0 = {0}, int64[1] e0 = {2}, int64[1] a0 = {0}> {
  e = Expand(x, to)
  y = Slice(e, s0, e0, a0)
}""")
    dynamic = gk.set_dims(static, "x", {0: "n"})
    assert _constant(dynamic, "to") == [1, 3, 4]
    assert _constant(dynamic, "e0") == [2**63 - 1]
    assert _dims(dynamic, "y") == ["n", 3, 4]
    x = np.random.default_rng(1).standard_normal((5, 1, 4)).astype(np.float32)
    (out,) = _outputs(dynamic, {"x": x})
    np.testing.assert_array_equal(out, np.broadcast_to(x, (5, 3, 4)))


def test_a_reshape_with_no_place_for_the_dim_is_refused_naming_node_and_constant() -> None:
    model = gk.parse_model("""
<ir_version: 8, opset_import: ["" : 17]>
g (float[1, 3, 4] x) => (float[3, 4] y) <int64[2] drop = {3, 4}> {
  r = Relu(x)
  y = Reshape(r, drop)
}""")
    with pytest.raises(gk.EditError) as err:
        gk.set_dims(model, "x", {0: "batch"})
    message = str(err.value)
    assert "node #1 (Reshape)" in message and "constant 'drop' = [3, 4]" in message
    assert "old size 1 of dim 0 of 'r' (now 'batch')" in message and err.value.hint


def test_a_constant_size_meeting_the_dynamic_dim_is_refused_naming_where() -> None:
    model = gk.parse_model("""
<ir_version: 8, opset_import: ["" : 17]>
g (float[1, 3, 4] x) => (float[1, 4, 4] y) <float[4] cls = {0.5, 0.5, 0.5, 0.5}, int64[3] to = {1, 1, 4}> {
  c = Reshape(cls, to)
  y = Concat <axis = 1> (c, x)
}""")
    with pytest.raises(gk.EditError) as err:
        gk.set_dims(model, "x", {0: "batch"})
    message = str(err.value)
    assert "node #1 (Concat)" in message and "'c' float32[1,1,4]" in message and "'x' float32[batch,3,4]" in message
    assert "constant 'to' = [1, 1, 4]" in message


CLS_AND_PADDING = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[1, 3, 4] x) => (float[1, 8, 4] y, float[1, 3, 6] z) <float[1, 1, 4] cls = {0.5, -1.0, 2.0, 0.25},
    int64[3] reps = {1, 1, 1}, int64[3] to = {1, 1, 4}, int64[3] pad = {1, 3, 2}, float[1] k = {3.0}> {
  tiled = Tile(cls, reps)
  expanded = Expand(cls, to)
  zeros = ConstantOfShape <value = float[1] {1.5}> (pad)
  scaled = Mul(zeros, k)
  y = Concat <axis = 1> (tiled, x, expanded, x)
  relu = Relu(x)
  z = Concat <axis = 2> (relu, scaled)
}"""


def test_tile_expand_and_constant_of_shape_sizes_are_computed_from_the_input_shape() -> None:
    static = gk.parse_model(CLS_AND_PADDING)
    dynamic = gk.set_dims(static, "x", {0: "batch"})
    assert _dims(dynamic, "y") == ["batch", 8, 4] and _dims(dynamic, "z") == ["batch", 3, 6]
    ops = [n.op_type for n in dynamic.lazy_proto.graph.node]
    assert ops.count("Shape") == 3 and ops.count("Gather") == 3  # (one per rewritten constant)
    readers = {n.op_type: n for n in dynamic.lazy_proto.graph.node if n.op_type in ("Tile", "Expand", "ConstantOfShape")}
    assert [readers[op].input[-1] for op in ("Tile", "Expand")] != ["reps", "to"]
    assert readers["ConstantOfShape"].input[0] != "pad"
    assert not {"reps", "to", "pad"} & {t.name for t in dynamic.lazy_proto.graph.initializer}  # (unread: gone)
    _per_sample_equal(static, dynamic, "x", (3, 4))
    (y, z) = _outputs(dynamic, {"x": np.ones((5, 3, 4), np.float32)})
    assert y.shape == (5, 8, 4) and z.shape == (5, 3, 6)
    np.testing.assert_array_equal(y[:, 0], np.broadcast_to([0.5, -1.0, 2.0, 0.25], (5, 4)))
    np.testing.assert_array_equal(z[:, :, 4:], np.full((5, 3, 2), 4.5, np.float32))


def test_bias_reshapes_and_constant_shapes_raise_no_false_alarm(caplog: pytest.LogCaptureFixture) -> None:
    static = gk.parse_model("""
<ir_version: 8, opset_import: ["" : 17]>
g (float[1, 3, 4, 4] x) => (float[1, 3, 4, 4] y) <float[3] b = {1.0, 2.0, 3.0}, int64[4] bs = {1, 3, 1, 1}, int64[1] one = {1}> {
  bias = Reshape(b, bs)
  ones = ConstantOfShape <value = float[1] {1.0}> (one)
  scaled = Mul(x, ones)
  y = Add(scaled, bias)
}""")
    with caplog.at_level(logging.WARNING, logger="graphkit"):
        dynamic = gk.set_dims(static, "x", {0: "batch"})
    assert caplog.records == []
    assert _constant(dynamic, "bs") == [1, 3, 1, 1]
    _per_sample_equal(static, dynamic, "x", (3, 4, 4))


def test_a_loop_body_follows_the_dynamic_dim() -> None:
    static = gk.parse_model("""
<ir_version: 8, opset_import: ["" : 17]>
g (float[1, 4] x) => (float[1, 4] y) <int64 trip = {3}, bool go = {1}> {
  y = Loop(trip, go, x) <body = step (int64 i, bool c, float[1, 4] s) => (bool c_out, float[1, 4] s_out) {
    c_out = Identity(c)
    s_out = Add(s, x)
  }>
}""")
    dynamic = gk.set_dims(static, "x", {0: "batch"})
    body = dynamic.lazy_proto.graph.node[0].attribute[0].g
    assert [d.dim_param for d in body.input[2].type.tensor_type.shape.dim][:1] == ["batch"]
    assert [d.dim_param for d in body.output[1].type.tensor_type.shape.dim][:1] == ["batch"]
    _per_sample_equal(static, dynamic, "x", (4,), batches=(1, 3))


def test_fixing_a_dim_keeps_what_inference_knew() -> None:
    model = gk.parse_model("""
<ir_version: 8, opset_import: ["" : 17]>
g (int64[batch, seq] ids) => (float[batch, seq, 2] y) <float[5, 2] table = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}> {
  e = Gather(table, ids)
  y = Relu(e)
}""")
    typed = gk.infer_shapes(model)
    fixed = gk.set_dims(typed, "ids", {0: 1})
    assert _dims(fixed, "e") == [1, "seq", 2] and _dims(fixed, "y") == [1, "seq", 2]


def test_replace_dim_fixes_a_named_dim_on_every_input_and_output() -> None:
    model = gk.parse_model("""
<ir_version: 8, opset_import: ["" : 17]>
g (float[batch, 3] a, float[batch, 3] b) => (float[batch, 3] y) {
  y = Add(a, b)
}""")
    fixed = gk.replace_dim(model, "batch", 2)
    assert _dims(fixed, "a") == [2, 3] and _dims(fixed, "b") == [2, 3] and _dims(fixed, "y") == [2, 3]
    with pytest.raises(gk.TensorNotFoundError) as err:
        gk.replace_dim(model, "btach", 2)
    assert "batch" in str(err.value) + (err.value.hint or "")


def test_cli_fixed_dim_and_dynamic_dim(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out.onnx"
    assert main(["edit", str(fixture("model_static.onnx")), str(out), "--dynamic-dim", "1=batch"]) == 0
    assert "output 'out': [1,3,8,8] -> [batch,3,8,8]" in capsys.readouterr().out
    assert main(["edit", str(out), str(tmp_path / "back.onnx"), "--fixed-dim", "batch=1"]) == 0
    assert _dims(gk.load(tmp_path / "back.onnx"), "in") == [1, 3, 10, 10]
    assert main(["edit", str(out), str(tmp_path / "x.onnx"), "--dynamic-dim", "1=2"]) == 2
    assert "--dynamic-dim 1=batch" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("path", sorted(LIGHT.glob("*.onnx")), ids=lambda p: p.stem)
def test_every_light_model_made_batch_dynamic_runs_at_batch_2(path: Path) -> None:
    static = gk.load(path)
    inits = {t.name for t in static.lazy_proto.graph.initializer}
    x = next(v for v in static.lazy_proto.graph.input if v.name not in inits)
    dynamic = gk.set_dims(static, x.name, {0: "batch"})
    sample = tuple(d.dim_value for d in x.type.tensor_type.shape.dim[1:])
    _per_sample_equal(static, dynamic, x.name, sample, batches=(2,))


def test_a_size_at_several_axes_needs_the_axis(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = gk.parse_model("""
<ir_version: 8, opset_import: ["" : 17]>
g (float[1, 3, 1, 1] x) => (float[1, 3, 1, 1] y) {
  y = Relu(x)
}""")
    with pytest.raises(gk.EditError) as err:
        gk.replace_dim(model, 1, "batch")
    assert "'x' has size 1 at axes [0, 2, 3]" in str(err.value) and "1@AXIS=batch" in (err.value.cli_hint or "")
    assert "replace_dim(model, 1, 'batch', axis=AXIS)" in (err.value.hint or "")
    dynamic = gk.replace_dim(model, 1, "batch", axis=0)
    assert _dims(dynamic, "x") == ["batch", 3, 1, 1] and _dims(dynamic, "y") == ["batch", 3, 1, 1]
    source, out = tmp_path / "m.onnx", tmp_path / "out.onnx"
    gk.save(model, source)
    assert main(["edit", str(source), str(out), "--dynamic-dim", "1=batch"]) == 2
    assert "axes [0, 2, 3]" in capsys.readouterr().err
    assert main(["edit", str(source), str(out), "--dynamic-dim", "1@0=batch"]) == 0
    assert _dims(gk.load(out), "y") == ["batch", 3, 1, 1]


def test_a_shared_reshape_target_in_an_ir3_model_is_rewritten_validly() -> None:
    # a simplified light_shufflenet (IR 3; OC2_DUMMY_5 read by 4 Reshapes) fails the same way
    shape = onnx.numpy_helper.from_array(np.array([1, 3, 16], np.int64), "shape")
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Reshape", ["x", "shape"], ["a"], name="r1"),
         onnx.helper.make_node("Relu", ["a"], ["b"], name="relu"),
         onnx.helper.make_node("Reshape", ["b", "shape"], ["y"], name="r2")], "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 4, 4]),
         onnx.helper.make_tensor_value_info("shape", onnx.TensorProto.INT64, [3])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 3, 16])], [shape])
    static = gk.Model(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 9)], ir_version=3))
    dynamic = gk.set_dims(static, tensor="x", dims={0: "batch"})
    _per_sample_equal(static, dynamic, "x", (3, 4, 4))


def test_dynamic_batch_on_a_model_saved_with_every_tensor_external(tmp_path: Path) -> None:
    """The flattening Reshape's target pieces are external (size_threshold=0): --dynamic still finds
    the batch of 1 they hard-code, and the result runs at batch 2 with the static model's values."""
    from conftest import flatten_export, save_every_tensor_external

    source = save_every_tensor_external(flatten_export(), tmp_path / "src")
    out = tmp_path / "out" / "dynamic.onnx"
    out.parent.mkdir()
    assert main(["edit", str(source), str(out), "--dynamic", "x:0=batch", "--dynamic", "y:0=batch"]) == 0
    onnx.checker.check_model(str(out), full_check=True)
    static = gk.Model(flatten_export())
    x = np.random.default_rng(2).standard_normal((2, 3, 8, 8)).astype(np.float32)
    y = gk.run(gk.load(out), {"x": x})["y"]
    for k in range(2):
        np.testing.assert_allclose(y[k:k + 1], gk.run(static, {"x": x[k:k + 1]})["y"], rtol=1e-6, atol=1e-6)
