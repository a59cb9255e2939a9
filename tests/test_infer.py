"""infer_shapes: every tensor typed (bodies too), dims kept symbolic, stale types replaced, contradictions named."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import LIGHT, fixture

import graphkit as gk
from graphkit._model import iter_graphs
from graphkit._ort import run_session, session


def _types(graph: onnx.GraphProto) -> dict[str, list[int | str]]:
    """Every declared tensor type of ``graph`` as a list of sizes and names ('' for a blank dim)."""
    return {v.name: [d.dim_value if d.HasField("dim_value") else d.dim_param for d in v.type.tensor_type.shape.dim]
            for v in [*graph.value_info, *graph.output] if v.type.tensor_type.HasField("shape")}


def _every_output_typed(model: gk.Model) -> None:
    """Each node output of each graph has a dtype and a shape without a blank dim."""
    for graph, where in iter_graphs(model.lazy_proto.graph):
        declared = {v.name: v.type for v in [*graph.value_info, *graph.output]}
        for node in graph.node:
            for name in (o for o in node.output if o):
                tp = declared.get(name)
                assert tp is not None and tp.tensor_type.elem_type, f"{name} in {where} untyped"
                assert tp.tensor_type.HasField("shape"), f"{name} in {where} unranked"
                assert all(d.HasField("dim_value") or d.dim_param for d in tp.tensor_type.shape.dim), name


def _outputs(model: gk.Model, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    sess = session(model, opt_level="disable")
    return run_session(sess, [o.name for o in sess.get_outputs()], feeds, model.name)


def _same_values(a: gk.Model, b: gk.Model, feeds: dict[str, np.ndarray]) -> None:
    onnx.checker.check_model(b.proto, full_check=True)
    for x, y in zip(_outputs(a, feeds), _outputs(b, feeds)):
        np.testing.assert_array_equal(x, y)


TRANSFORMER = """
<ir_version: 8, opset_import: ["" : 17]>
attn (float[batch, seq, 8] x) => (float[batch, seq, 8] y) {
  w = Constant <value = float[8, 8] {1,0,0,0,0,0,0,0, 0,1,0,0,0,0,0,0, 0,0,1,0,0,0,0,0, 0,0,0,1,0,0,0,0,
                                     0,0,0,0,1,0,0,0, 0,0,0,0,0,1,0,0, 0,0,0,0,0,0,1,0, 0,0,0,0,0,0,0,1}> ()
  q = MatMul(x, w)
  shape = Shape(x)
  zero = Constant <value = int64[1] {0}> ()
  one = Constant <value = int64[1] {1}> ()
  b = Gather(shape, zero)
  s = Gather(shape, one)
  heads = Constant <value = int64[2] {2, 4}> ()
  target = Concat <axis = 0> (b, s, heads)
  split = Reshape(q, target)
  t = Transpose <perm = [0, 2, 1, 3]> (split)
  tt = Transpose <perm = [0, 1, 3, 2]> (t)
  scores = MatMul(t, tt)
  probs = Softmax <axis = -1> (scores)
  ctx = MatMul(probs, t)
  back = Transpose <perm = [0, 2, 1, 3]> (ctx)
  flat = Constant <value = int64[3] {0, 0, 8}> ()
  y = Reshape(back, flat)
}
"""


def test_infer_shapes_keeps_batch_and_sequence_named_through_a_transformer_block() -> None:
    model = gk.parse_model(TRANSFORMER)
    before = model.lazy_proto.SerializeToString()
    report = gk.infer_shapes_with_report(model)
    types = _types(report.model.lazy_proto.graph)
    assert types["q"] == ["batch", "seq", 8]
    assert types["split"] == ["batch", "seq", 2, 4]
    assert types["t"] == ["batch", 2, "seq", 4]
    assert types["scores"] == ["batch", 2, "seq", "seq"]
    assert types["back"] == ["batch", "seq", 2, 4] and types["y"] == ["batch", "seq", 8]
    assert report.untyped == () and report.replaced == ()
    assert report.typed == sum(len(n.output) for n in report.model.lazy_proto.graph.node)
    _every_output_typed(report.model)
    assert model.lazy_proto.SerializeToString() == before
    x = np.random.default_rng(0).standard_normal((3, 5, 8)).astype(np.float32)
    _same_values(model, report.model, {"x": x})


def test_infer_shapes_names_an_unknown_dim_afresh() -> None:
    model = gk.parse_model("""
<ir_version: 8, opset_import: ["" : 17]>
g (float[n, 4] x) => (float[m, 4] y) {
  zero = Constant <value = float {0}> ()
  keep = Greater(x, zero)
  idx = NonZero(keep)
  first = Constant <value = int64 {0}> ()
  rows = Gather <axis = 0> (idx, first)
  y = Gather <axis = 0> (x, rows)
}
""")
    result = gk.infer_shapes(model)
    types = _types(result.lazy_proto.graph)
    assert types["keep"] == ["n", 4]
    count = types["idx"][1]  # (a fresh name: unk_1 from graphkit, NonZero_2_o0__d1 from ONNX Runtime's inference)
    assert types["idx"][0] == 2 and isinstance(count, str) and count not in ("", "n", "m")
    assert types["rows"] == [types["idx"][1]]  # the same unknown count, the same name
    assert types["y"] == ["m", 4]  # the output's own name for it stays
    _every_output_typed(result)
    x = np.array([[1, -1, 2, 0], [-3, -1, -2, -4], [1, 1, 1, 1]], np.float32)
    _same_values(model, result, {"x": x})


def test_infer_shapes_types_every_body_and_the_outer_tensors_it_reads() -> None:
    for name in ("loop_scan.onnx", "if_outer_scope.onnx"):
        model = gk.load(fixture(name))
        report = gk.infer_shapes_with_report(model)
        assert report.untyped == (), name
        _every_output_typed(report.model)
    model = gk.load(fixture("loop_scan.onnx"))
    typed = gk.infer_shapes(model)
    scan = next(n for n in typed.lazy_proto.graph.node if n.op_type == "Scan")
    body = _types(scan.attribute[0].g)
    assert body["state_next"] == [3] and body["state_out"] == [3] and body["row_out"] == [3]
    assert _types(typed.lazy_proto.graph)["y"] == [4, 3]
    _same_values(model, typed, {"x": np.arange(12, dtype=np.float32).reshape(4, 3)})


def test_infer_shapes_replaces_and_reports_a_stale_value_info() -> None:
    model = gk.load(fixture("whole_model.onnx")).copy()
    stale = "/convs1/convs1.2/Conv_output_0"
    graph = model.lazy_proto.graph
    graph.value_info.append(onnx.helper.make_tensor_value_info(stale, onnx.TensorProto.FLOAT, [1, 3, 99, 14]))
    graph.output[0].type.tensor_type.shape.dim[2].dim_value = 77
    report = gk.infer_shapes_with_report(model)
    replaced = {r.tensor: r for r in report.replaced}
    assert set(replaced) == {stale, "output"}
    assert replaced[stale].before == "float32[1,3,99,14]" and replaced[stale].after == "float32[1,3,14,14]"
    assert replaced[stale].kind == "value_info" and replaced["output"].kind == "output"
    types = _types(report.model.lazy_proto.graph)
    assert types[stale] == [1, 3, 14, 14] and types["output"][2] != 77
    assert report.to_dict()["replaced"] == 2


def test_infer_shapes_lists_custom_ops_untyped_unless_declared() -> None:
    text = """
<ir_version: 8, opset_import: ["" : 17, "my" : 1]>
g (float[batch, 3] x) => (float[batch, 3] z) {
  y = my.Foo(x)
  z = Relu(y)
  w = my.Bar(x)
  v = Abs(w)
}
"""
    model = gk.parse_model(text)
    report = gk.infer_shapes_with_report(model, check=False)
    untyped = {u.tensor: u for u in report.untyped}
    assert set(untyped) == {"y", "w", "v"}
    assert untyped["y"].op_type == "my::Foo" and "custom op" in untyped["y"].reason
    assert untyped["v"].reason == "inference could not tell"
    declared = model.copy()
    declared.lazy_proto.graph.value_info.append(
        onnx.helper.make_tensor_value_info("w", onnx.TensorProto.FLOAT, ["batch", 5]))
    report = gk.infer_shapes_with_report(declared, check=False)
    assert {u.tensor for u in report.untyped} == {"y"}
    assert _types(report.model.lazy_proto.graph)["v"] == ["batch", 5]


def test_infer_shapes_names_the_node_of_a_contradiction() -> None:
    model = gk.parse_model("""
<ir_version: 8, opset_import: ["" : 17]>
g (float[2, 3] x, float[4] b) => (float[2, 3] z) {
  r = Relu(x)
  bad = Add(r, b)
  z = Abs(bad)
}
""")
    with pytest.raises(gk.InvalidModelError) as err:
        gk.infer_shapes(model)
    message = str(err.value)
    assert "node #1 (Add), which makes 'bad'" in message
    assert "'r' float32[2,3], 'b' float32[4]" in message and "Incompatible dimensions" in message
    assert "--set-attr" in (err.value.cli_hint or "") and "set_attribute" in (err.value.hint or "")


def test_infer_shapes_never_reads_external_weights(tmp_path: Path) -> None:
    shutil.copytree(fixture("ext_weights"), tmp_path / "m")
    model = gk.load(tmp_path / "m" / "model.onnx")
    for data in (tmp_path / "m").glob("*.data"):
        data.unlink()  # what it would read is gone: a read would fail (the checker's would: check=False)
    report = gk.infer_shapes_with_report(model, check=False)
    assert report.untyped == ()
    _every_output_typed(report.model)


@pytest.mark.slow
@pytest.mark.parametrize("path", sorted(LIGHT.glob("*.onnx")), ids=lambda p: p.stem)
def test_infer_shapes_types_every_light_model(path: Path) -> None:
    model = gk.load(path)
    report = gk.infer_shapes_with_report(model)
    assert report.untyped == () and report.replaced == ()
    _every_output_typed(report.model)
    inits = {t.name for t in model.lazy_proto.graph.initializer}
    graph_input = next(v for v in model.lazy_proto.graph.input if v.name not in inits)
    shape = [d.dim_value or 1 for d in graph_input.type.tensor_type.shape.dim]
    feeds = {graph_input.name: np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
    _same_values(model, report.model, feeds)


def test_infer_shapes_writes_no_even_split_where_the_sizes_come_at_run_time() -> None:
    # ONNX Runtime's symbolic inference splits evenly when it cannot compute a Split's sizes: the
    # onnx wheel's expanded RotaryEmbedding (sizes [head, 0] from Shape) was typed [.., 4] and [.., 4]
    # where ONNX Runtime makes [.., 8] and [.., 0], and the typed model failed in ONNX Runtime
    model = gk.parse_model("""
        <ir_version: 8, opset_import: ["" : 18]>
        g (float[2,8] x) => (float[2,8] y) {
            t = Transpose <perm = [1, 0]> (x)
            h = Shape <start = 0, end = 1> (t)
            d = Identity (h)
            z = Sub (h, d)
            sizes = Concat <axis = 0> (d, z)
            a, b = Split <axis = 1> (x, sizes)
            y = Concat <axis = 1> (a, b)
        }""")
    typed = _types(gk.infer_shapes(model).lazy_proto.graph)
    x = np.arange(16, dtype=np.float32).reshape(2, 8)
    exposed = gk.expose(model, tensors=["a", "b"])
    for name, value in gk.run(exposed, {"x": x}).items():
        dims = typed.get(name, [])
        assert all(not isinstance(d, int) or d == s for d, s in zip(dims, value.shape)), (name, dims, value.shape)


def test_infer_shapes_writes_no_negative_size_from_a_branch_never_taken() -> None:
    # ONNX inference sizes the 2-D branch of the onnx wheel's expanded AffineGrid (a 3-D size split
    # into 4) as [-1]: infer-shapes refused the valid model ("impossible shape [-1]")
    model = gk.parse_model("""
        <ir_version: 8, opset_import: ["" : 18]>
        g (int64[5] size) => (int64[3] first) {
            n = Size (size)
            four = Constant <value = int64 {4}> ()
            is4 = Equal (n, four)
            first = If (is4) <
                then_branch = t () => (int64[?] a_then) { a_then, b, c, d = Split <num_outputs = 4> (size) },
                else_branch = e () => (int64[?] a_else) { a_else, r = Split <num_outputs = 2> (size) }
            >
        }""")
    typed = gk.infer_shapes(model)
    onnx.checker.check_model(typed.lazy_proto, full_check=True)
    for graph, _ in iter_graphs(typed.lazy_proto.graph):
        assert all(d >= 0 for dims in _types(graph).values() for d in dims if isinstance(d, int))
    np.testing.assert_array_equal(gk.run(typed, {"size": np.arange(5)})["first"], [0, 1, 2])


def test_infer_shapes_does_not_declare_two_dims_one_where_they_broadcast() -> None:
    # ONNX Runtime's symbolic inference merged 'seq' into 'batch' (auto_merge) and typed z [batch, 4]:
    # with batch 1 and seq 5 z is [5, 4]
    model = gk.parse_model("""<ir_version: 8, opset_import: ["" : 17]>
        g (float[batch, 4] x, float[seq, 4] y) => (float[?, 4] z) { a = Relu (y)
            z = Add (x, a) }""")
    typed = gk.infer_shapes(model)
    dims = _types(typed.lazy_proto.graph)
    assert dims["a"] == ["seq", 4] and dims["z"][0] not in ("batch", "seq")
    z = gk.run(typed, {"x": np.ones((1, 4), np.float32), "y": np.ones((5, 4), np.float32)})["z"]
    assert z.shape == (5, 4)
