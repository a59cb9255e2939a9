"""simplify: every pass on small models built the way exporters build them, and on onnx's light models.

Every result is checked with onnx.checker (full) and run in ONNX Runtime against the input's values.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import LIGHT, fixture
from onnx import helper, numpy_helper

import graphkit as gk
import graphkit._simplify as passes
from graphkit._model import is_external

OPSET = '<ir_version: 8, opset_import: ["" : 17]>'


def parse(body: str) -> gk.Model:
    return gk.parse_model(OPSET + "\n" + body)


def assert_same_values(before: gk.Model, after: gk.Model, rtol: float = 1e-6, **dims: int) -> None:
    """``after`` passes onnx.checker's full check and computes what ``before`` does, on seeded inputs."""
    onnx.checker.check_model(str(after.path) if after.path else after.proto, full_check=True)
    options = gk.FeedOptions(seed=3, dims=dims)
    expected, found = gk.run(before, feed_options=options), gk.run(after, feed_options=options)
    assert set(found) == set(expected)
    for name, value in expected.items():
        np.testing.assert_allclose(found[name], value, rtol=rtol, atol=rtol, err_msg=name)


def ops(model: gk.Model) -> list[str]:
    return [n.op_type for n in model.graph.node]


EXPORTED_BLOCK = """
block (float[batch, seq, 8] x) => (float[batch, seq, 8] y)
<float[8, 8] wq = {1.0, 0.5, 0, 0, 0, 0, 0, 0, 0, 1.0, 0, 0, 0, 0, 0, 0, 0, 0, 1.0, 0, 0, 0, 0, 0, 0, 0, 0, 1.0, 0, 0,
                   0, 0, 0, 0, 0, 0, 1.0, 0, 0, 0, 0, 0, 0, 0, 0, 1.0, 0, 0, 0, 0, 0, 0, 0, 0, 1.0, 0, 0, 0, 0, 0,
                   0, 0, 1.0, 0.25}>
{
  q = MatMul(x, wq)
  s = Shape(x)
  i0 = Constant<value = int64 {0}>()
  b = Gather<axis = 0>(s, i0)
  i1 = Constant<value = int64 {1}>()
  n = Gather<axis = 0>(s, i1)
  ax = Constant<value = int64[1] {0}>()
  bu = Unsqueeze(b, ax)
  nu = Unsqueeze(n, ax)
  heads = Constant<value = int64[1] {2}>()
  width = Constant<value = int64[1] {4}>()
  split_shape = Concat<axis = 0>(bu, nu, heads, width)
  q4 = Reshape(q, split_shape)
  qt = Transpose<perm = [0, 2, 1, 3]>(q4)
  att = Mul(qt, qt)
  back = Transpose<perm = [0, 2, 1, 3]>(att)
  minus1 = Constant<value = int64[1] {-1}>()
  merge_shape = Concat<axis = 0>(bu, nu, minus1)
  merged = Reshape(back, merge_shape)
  dropped = Dropout(merged)
  y = Identity(dropped)
}
"""


# ------------------------------------------------------------------------------------ the passes


def test_constant_nodes_become_initializers_all_878() -> None:
    b = gk.GraphBuilder("consts")
    x = b.input("x", "float32", [4])
    for i in range(878):
        x = b.node("Add", [x, b.constant(np.full(4, i, np.float32), f"c{i}")])
    b.output(x, "float32", [4])
    model = b.build()
    result = gk.simplify_with_report(model, passes=["constants"])
    assert "Constant" not in ops(result.model)
    assert len(result.model.graph.initializer) == 878
    assert result.changes["constants"] == 878
    assert_same_values(model, result.model)


def test_a_constant_that_is_a_graph_output_stays_a_node() -> None:
    model = parse("g (float[2] x) => (float[2] y, float[2] k) { k = Constant<value = float[2] {1.0, 2.0}>()\n"
                  " y = Add(x, k) }")
    result = gk.simplify(model)
    assert ops(result) == ["Constant", "Add"]
    assert_same_values(model, result)


def test_identity_and_inference_dropout_go_without_copying_the_weight() -> None:
    weight = np.arange(4096, dtype=np.float32).reshape(64, 64)
    b = gk.GraphBuilder("ident")
    x = b.input("x", "float32", [1, 64])
    w = b.node("Identity", [b.initializer(weight, "w")], outputs=["w_alias"])
    h = b.node("MatMul", [x, w])
    h = b.node("Dropout", [h], outputs=["h_drop"])
    b.node("Identity", [h], outputs=["y"])
    b.output("y", "float32", [1, 64])
    model = b.build()
    result = gk.simplify(model)
    assert ops(result) == ["MatMul"]
    assert result.graph.node[0].output[0] == "y"  # the producer writes the graph output itself
    assert [t.name for t in result.graph.initializer] == ["w"]
    assert result.proto.ByteSize() < model.proto.ByteSize()
    assert_same_values(model, result)


def test_training_dropout_and_a_read_mask_stay() -> None:
    model = parse("g (float[4] x) => (float[4] y) <bool on = {1}, float r = {0.5}> { y = Dropout(x, r, on) }")
    assert gk.simplify(model) is model
    masked = parse("g (float[4] x) => (float[4] y, bool[4] mask) { y, mask = Dropout(x) }")
    assert gk.simplify(masked) is masked


def test_exported_shape_chain_becomes_constant_reshapes_when_dims_are_static() -> None:
    model = parse(EXPORTED_BLOCK.replace("batch, seq", "2, 5"))
    result = gk.simplify(model)
    assert sorted(ops(result)) == ["MatMul", "Mul", "Reshape", "Reshape", "Transpose", "Transpose"]
    shapes = {t.name: numpy_helper.to_array(t).tolist() for t in result.graph.initializer if t.data_type == 7}
    assert sorted(shapes.values()) == [[2, 5, 2, 4], [2, 5, 8]]
    assert_same_values(model, result)


def test_progress_counts_passes_and_ends_full() -> None:
    model = parse(EXPORTED_BLOCK.replace("batch, seq", "2, 5"))
    calls: list[tuple[int, int]] = []
    report = gk.simplify_with_report(model, progress=lambda done, total: calls.append((done, total)))
    per_round = len(passes.PASSES)
    assert calls[-1] == (report.rounds * per_round, report.rounds * per_round)
    assert [done for done, _ in calls[:-1]] == list(range(1, report.rounds * per_round + 1))
    assert all(done <= total for done, total in calls)
    folded: list[tuple[int, int]] = []
    gk.fold_constants(model, progress=lambda done, total: folded.append((done, total)))
    assert folded and folded[-1][0] == folded[-1][1]


def test_dynamic_dims_get_constant_reshape_targets_that_copy_the_named_dims() -> None:
    model = parse(EXPORTED_BLOCK)
    result = gk.simplify_with_report(model)
    assert sorted(ops(result.model)) == ["MatMul", "Mul", "Reshape", "Reshape", "Transpose", "Transpose"]
    assert result.changes["reshapes"] == 2
    shapes = {t.name: numpy_helper.to_array(t).tolist() for t in result.model.graph.initializer if t.data_type == 7}
    assert sorted(shapes.values()) == [[0, 0, 2, 4], [0, 0, 8]]  # batch and seq copied from the input
    for batch, seq in ((1, 1), (2, 7), (3, 16)):
        assert_same_values(model, result.model, batch=batch, seq=seq)


def test_a_reshape_whose_dims_inference_cannot_prove_keeps_its_computation() -> None:
    model = parse("g (float[batch, n] x, float[m] k) => (float[batch, p] y) {\n s = Shape(k)\n"
                  " m1 = Constant<value = int64[1] {-1}>()\n shp = Concat<axis = 0>(m1, s)\n"
                  " y = Reshape(x, shp) }")
    result = gk.simplify(model)
    assert ops(result) == ["Shape", "Concat", "Reshape"]


def test_a_static_dim_gathered_from_a_dynamic_shape_is_folded() -> None:
    model = parse("g (float[batch, 6] x) => (float[batch, 2, 3] y) {\n s = Shape(x)\n"
                  " one = Constant<value = int64 {1}>()\n d = Gather(s, one)\n"
                  " three = Constant<value = int64 {3}>()\n h = Div(d, three)\n"
                  " ax = Constant<value = int64[1] {0}>()\n hu = Unsqueeze(h, ax)\n"
                  " m1 = Constant<value = int64[1] {-1}>()\n t = Constant<value = int64[1] {3}>()\n"
                  " shp = Concat<axis = 0>(m1, hu, t)\n y = Reshape(x, shp) }")
    result = gk.simplify(model)
    assert ops(result) == ["Reshape"]
    assert numpy_helper.to_array(result.graph.initializer[0]).tolist() == [0, 2, 3]
    assert_same_values(model, result, batch=3)


def test_static_dims_sliced_from_a_dynamic_shape_are_folded() -> None:
    # (torch's scaled_dot_product_attention export reads the head size as Slice(Shape(q), [-1], [MAX]))
    model = parse("g (float[batch, seq, 2, 8] q) => (float[batch, seq, 2, 8] y) {\n s = Shape(q)\n"
                  " b = Constant<value = int64[1] {-1}>()\n e = Constant<value = int64[1] {9223372036854775807}>()\n"
                  " last = Slice(s, b, e)\n b2 = Constant<value = int64[1] {2}>()\n tail = Slice(s, b2, e)\n"
                  " width = Cast<to = 1>(last)\n root = Sqrt(width)\n y0 = Div(q, root)\n"
                  " n = ReduceProd<keepdims = 0>(tail)\n nf = Cast<to = 1>(n)\n y = Mul(y0, nf) }")
    result = gk.simplify(model)
    assert ops(result) == ["Div", "Mul"]
    assert_same_values(model, result, batch=3, seq=5)


def test_folding_reaches_if_and_loop_bodies() -> None:
    model = parse("""
g (bool c, float[2] x) => (float[2] y) <float[2] k = {1.0, 2.0}> {
  y = If(c) <
    then_branch = t () => (float[2] a) { two = Constant<value = float[2] {2.0, 2.0}>()\n k2 = Mul(k, two)\n
                                         k3 = Add(k2, two)\n a = Add(x, k3) },
    else_branch = e () => (float[2] b) { k4 = Neg(k)\n b = Sub(x, k4) }
  >
}""")
    result = gk.simplify(model)
    then, other = result.graph.node[0].attribute[0].g, result.graph.node[0].attribute[1].g
    branches = {result.graph.node[0].attribute[0].name: then, result.graph.node[0].attribute[1].name: other}
    assert ops_of(branches["then_branch"]) == ["Add"] and ops_of(branches["else_branch"]) == ["Sub"]
    for c in (True, False):
        feeds = {"c": np.array(c), "x": np.array([1.0, -1.0], np.float32)}
        np.testing.assert_allclose(gk.run(result, feeds)["y"], gk.run(model, feeds)["y"])
    onnx.checker.check_model(result.proto, full_check=True)


def ops_of(graph: onnx.GraphProto) -> list[str]:
    return [n.op_type for n in graph.node]


def test_a_constant_branch_output_becomes_a_constant_node() -> None:
    model = parse("""
g (bool c, float[2] x) => (float[2] y) <float[2] k = {1.0, 2.0}> {
  y = If(c) <
    then_branch = t () => (float[2] a) { a = Neg(k) },
    else_branch = e () => (float[2] b) { b = Abs(x) }
  >
}""")
    result = gk.simplify(model)
    assert ops_of(result.graph.node[0].attribute[0].g) == ["Constant"]
    onnx.checker.check_model(result.proto, full_check=True)
    feeds = {"c": np.array(True), "x": np.array([1.0, -1.0], np.float32)}
    np.testing.assert_allclose(gk.run(result, feeds)["y"], [-1.0, -2.0])


def test_loop_invariant_constants_fold_in_the_body() -> None:
    model = gk.load(fixture("loop_scan.onnx"))
    result = gk.simplify(model)
    assert_same_values(model, result)


def conv_chain(reads_twice: bool = False) -> gk.Model:
    rng = np.random.default_rng(0)
    b = gk.GraphBuilder("convbn")
    x = b.input("x", "float32", [1, 3, 8, 8])
    w = b.initializer(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    bias = b.initializer(rng.standard_normal(4).astype(np.float32), "b")
    c = b.node("Conv", [x, w, bias], pads=[1, 1, 1, 1], outputs=["conv"])
    stats = [b.initializer(v.astype(np.float32), n) for v, n in (
        (rng.uniform(0.5, 2, 4), "scale"), (rng.standard_normal(4), "shift"), (rng.standard_normal(4), "mean"),
        (rng.uniform(0.5, 2, 4), "var"))]
    n = b.node("BatchNormalization", [c, *stats], epsilon=1e-3)
    m = b.node("Mul", [b.initializer(rng.standard_normal((4, 1, 1)).astype(np.float32), "k"), n])
    a = b.node("Add", [m, b.initializer(rng.standard_normal((1, 4, 1, 1)).astype(np.float32), "o")])
    y = b.node("Relu", [a], outputs=["y"])
    b.output(y, "float32", [1, 4, 8, 8])
    if reads_twice:
        b.output(b.node("Neg", [c], outputs=["also"]), "float32", [1, 4, 8, 8])
    return b.build()


def test_batchnorm_mul_and_add_by_channel_fold_into_the_conv() -> None:
    model = conv_chain()
    result = gk.simplify_with_report(model)
    assert ops(result.model) == ["Conv", "Relu"] and result.changes["fuse"] == 3
    assert_same_values(model, result.model, rtol=1e-5)


def test_a_conv_output_read_twice_is_not_fused() -> None:
    model = conv_chain(reads_twice=True)
    assert ops(gk.simplify(model)) == ops(model)


def test_transposes_in_a_row_are_one_and_cancelling_ones_go() -> None:
    model = parse("g (float[2, 3, 4] x) => (float[4, 2, 3] y, float[2, 3, 4] z) {\n"
                  " a = Transpose<perm = [1, 0, 2]>(x)\n y = Transpose<perm = [2, 1, 0]>(a)\n"
                  " b = Transpose<perm = [2, 0, 1]>(x)\n c = Transpose<perm = [1, 2, 0]>(b)\n z = Neg(c) }")
    result = gk.simplify(model)
    assert ops(result) == ["Transpose", "Neg"]
    assert list(result.graph.node[0].attribute[0].ints) == [2, 0, 1]
    assert_same_values(model, result)


def test_identical_nodes_are_computed_once() -> None:
    model = parse("g (float[4] x) => (float[4] y) { a = Relu(x)\n b = Relu(x)\n ea = Exp(a)\n eb = Exp(b)\n"
                  " y = Add(ea, eb) }")
    result = gk.simplify_with_report(model)
    assert ops(result.model) == ["Relu", "Exp", "Add"] and result.changes["cse"] == 2
    assert_same_values(model, result.model)


def test_identical_constants_merge_and_unused_things_go() -> None:
    b = gk.GraphBuilder("dups")
    x = b.input("x", "float32", [3])
    b.input("unused", "float32", [3])
    a = b.node("Add", [x, b.initializer(np.ones(3, np.float32), "one_a")])
    m = b.node("Mul", [a, b.initializer(np.ones(3, np.float32), "one_b")])
    b.initializer(np.zeros(3, np.float32), "never_read")
    b.output(m, "float32", [3])
    model = b.build()
    model.proto.opset_import.append(helper.make_opsetid("com.example", 1))
    result = gk.simplify_with_report(model)
    assert [t.name for t in result.model.graph.initializer] == ["one_a"]
    assert [i.name for i in result.model.graph.input] == ["x"]
    assert [o.domain for o in result.model.proto.opset_import] == [""]
    assert result.changes["merge"] == 1
    options = gk.FeedOptions(seed=1)
    np.testing.assert_allclose(gk.run(result.model, feed_options=options)[m],
                               gk.run(model, feed_options=options)[m])


def test_a_value_above_max_bytes_keeps_its_node() -> None:
    model = parse("g (float[256] x) => (float[256] y) <float[256] k = {" + ", ".join(["1.0"] * 256) + "}> {\n"
                  " big = Mul(k, k)\n y = Add(x, big) }")
    assert ops(gk.simplify(model, max_bytes=512)) == ["Mul", "Add"]
    assert ops(gk.simplify(model, max_bytes=1024)) == ["Add"]


def test_an_op_runtime_cannot_fold_is_left_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    model = parse("g (float[2] x) => (float[2] y) <float[2] k = {1.0, 2.0}> {\n"
                  " kk = Neg(k)\n ks = Sin(k)\n z = Add(x, kk)\n y = Add(z, ks) }")
    real = passes._run

    def refuse_sin(state, nodes, *args):  # type: ignore[no-untyped-def]
        if any(n.op_type == "Sin" for n in nodes):
            raise gk.RuntimeFailure("no Sin here", hint="")
        return real(state, nodes, *args)

    monkeypatch.setattr(passes, "_run", refuse_sin)
    result = gk.simplify(model)
    assert ops(result) == ["Sin", "Add", "Add"]
    assert_same_values(model, result)


def test_external_weights_stay_on_disk(tmp_path: Path) -> None:
    shutil.copytree(fixture("ext_weights"), tmp_path / "ext")
    model = gk.load(tmp_path / "ext" / "model.onnx")
    copy = model.copy()
    first = copy.lazy_proto.graph.node[0]
    alias = helper.make_node("Identity", [first.input[1]], ["alias"], name="alias")
    first.input[1] = "alias"
    copy.lazy_proto.graph.node.insert(0, alias)
    edited = gk.Model(copy.lazy_proto, model.base_dir)
    result = gk.simplify(edited)
    assert "Identity" not in ops(result)
    assert all(is_external(t) for t in result.lazy_proto.graph.initializer if t.name in
               {t.name for t in model.lazy_proto.graph.initializer if is_external(t)})
    (tmp_path / "out").mkdir()
    gk.save(result, tmp_path / "out" / "model.onnx")
    assert_same_values(model, gk.load(tmp_path / "out" / "model.onnx"))


def test_simplify_is_pure_and_returns_the_input_when_nothing_changes() -> None:
    model = parse(EXPORTED_BLOCK)
    before = model.lazy_proto.SerializeToString()
    gk.simplify(model)
    assert model.lazy_proto.SerializeToString() == before
    plain = gk.load(fixture("linear_func.onnx"))
    assert gk.simplify(plain) is plain
    assert gk.simplify_with_report(plain).changes == dict.fromkeys(passes.PASSES, 0)


# ------------------------------------------------------------------------ each pass as an edit option


def test_each_pass_is_an_edit_that_refuses_to_change_nothing() -> None:
    model = parse(EXPORTED_BLOCK)
    assert "Constant" not in ops(gk.constants_to_initializers(model))
    assert "Identity" not in ops(gk.remove_identities(model)) and "Dropout" not in ops(gk.remove_identities(model))
    assert "Shape" not in ops(gk.fold_shapes(model))
    folded = gk.fold_constants(model)
    assert "Constant" not in ops(folded) and "Identity" in ops(folded)  # only Identities of constants go
    plain = gk.load(fixture("linear_func.onnx"))
    for edit in (gk.constants_to_initializers, gk.remove_identities, gk.fold_shapes, gk.merge_constants,
                 gk.fold_constants, gk.simplify):
        assert edit(plain) is plain
        with pytest.raises(gk.NoChangeError) as err:
            edit.__wrapped__(plain)  # type: ignore[attr-defined]
        assert err.value.hint


def test_fold_constants_rewires_an_identity_of_a_weight_instead_of_copying_it() -> None:
    weight = np.ones((128, 128), np.float32)
    b = gk.GraphBuilder("alias")
    x = b.input("x", "float32", [1, 128])
    b.node("MatMul", [x, b.node("Identity", [b.initializer(weight, "w")])], outputs=["y"])
    b.output("y", "float32", [1, 128])
    model = b.build()
    result = gk.fold_constants(model)
    assert ops(result) == ["MatMul"] and [t.name for t in result.graph.initializer] == ["w"]
    assert_same_values(model, result)


def test_fold_constants_folds_if_branches_and_static_shapes() -> None:
    model = parse("""
g (bool c, float[2, 3] x) => (float[6] y) <float[2] k = {1.0, 2.0}> {
  s = Shape(x)
  one = Constant<value = int64[1] {1}>()
  n = ReduceProd<keepdims = 1>(s)
  flat = Reshape(x, n)
  z = If(c) <
    then_branch = t () => (float[2] a) { two = Constant<value = float[2] {2.0, 2.0}>()\n a = Mul(k, two) },
    else_branch = e () => (float[2] b) { b = Neg(k) }
  >
  zz = ReduceSum<keepdims = 0>(z)
  y = Add(flat, zz)
}""")
    result = gk.fold_constants(model)
    assert ops(result) == ["Reshape", "If", "ReduceSum", "Add"]
    branches = {a.name: a.g for a in result.graph.node[1].attribute}
    assert ops_of(branches["then_branch"]) == ["Constant"] and ops_of(branches["else_branch"]) == ["Constant"]
    for c in (True, False):
        feeds = {"c": np.array(c), "x": np.arange(6, dtype=np.float32).reshape(2, 3)}
        np.testing.assert_allclose(gk.run(result, feeds)["y"], gk.run(model, feeds)["y"])


def test_the_passes_are_recipe_steps() -> None:
    model = parse(EXPORTED_BLOCK)
    result = gk.apply_recipe(model, [{"op": "constants_to_initializers"}, {"op": "remove_identities"},
                                     {"op": "fold_shapes"}, {"op": "fold_constants", "max_bytes": 4096},
                                     {"op": "merge_constants"}, {"op": "cleanup"}])
    assert sorted(ops(result)) == ["MatMul", "Mul", "Reshape", "Reshape", "Transpose", "Transpose"]
    assert ops(gk.apply_recipe(model, [{"op": "simplify"}])) == ops(gk.simplify(model))


# ---------------------------------------------------------------------------------------- errors


def test_a_contradiction_in_the_file_names_node_and_tensor() -> None:
    model = parse("g (float[2, 3] x) => (float[2, 3] y) <float[2, 4] r> { r = Relu(x)\n y = Neg(r) }")
    with pytest.raises(gk.InvalidModelError) as err:
        gk.simplify(model)
    assert "node #0 (Relu)" in err.value.message and "'r'" in err.value.message
    assert "(3) vs (4)" in err.value.message and err.value.hint


def test_unknown_pass_is_a_usage_error() -> None:
    with pytest.raises(gk.UsageError) as err:
        gk.simplify_with_report(parse(EXPORTED_BLOCK), passes=["fold", "fission"])
    assert "'fission'" in err.value.message and "constants" in err.value.hint


# ---------------------------------------------------------------------------------- light models


def test_initializers_listed_as_inputs_before_ir_4_are_constants() -> None:
    model = gk.load(LIGHT / "light_squeezenet.onnx")  # weights made by 39 ConstantOfShape nodes, IR version 3
    result = gk.simplify(model)
    assert "ConstantOfShape" not in ops(result) and "Dropout" not in ops(result) and len(ops(result)) == 65
    assert result.proto.ir_version == 3
    assert {t.name for t in result.graph.initializer} <= {i.name for i in result.graph.input}
    assert_same_values(model, result)



@pytest.mark.slow
@pytest.mark.parametrize("path", sorted(LIGHT.glob("light_*.onnx")), ids=lambda p: p.stem)
def test_light_models_simplify_to_the_same_values(path: Path) -> None:
    model = gk.load(path)
    result = gk.simplify(model)
    assert sum(gk.simplify_with_report(model).after.values()) <= len(model.graph.node)
    assert "Dropout" not in ops(result) and "Identity" not in ops(result)
    if result is not model:
        assert_same_values(model, result)


# ------------------------------------------------------------------------------ MatMul + Add → Gemm


def linear(x_dims: list[int | str], bias: np.ndarray, *, dtype: type = np.float32, twice: bool = False) -> gk.Model:
    rng = np.random.default_rng(1)
    b = gk.GraphBuilder("linear")
    x = b.input("x", np.dtype(dtype).name, x_dims)
    w = b.initializer(rng.standard_normal((8, 6)).astype(dtype), "w")
    product = b.node("MatMul", [x, w], outputs=["p"])
    y = b.node("Add", [b.initializer(bias.astype(dtype), "b"), product], outputs=["y"])
    out_dims = [*x_dims[:-1], 6] if bias.ndim < 3 else [*bias.shape[:-2], *x_dims[:-1], 6]
    b.output(y, np.dtype(dtype).name, out_dims)
    if twice:
        b.output(b.node("Relu", [product], outputs=["r"]), np.dtype(dtype).name, [*x_dims[:-1], 6])
    return b.build()


@pytest.mark.parametrize("bias_shape", [(6,), (1,), (1, 6), (4, 6), (4, 1), ()])
def test_matmul_and_add_of_a_bias_become_one_gemm(bias_shape: tuple[int, ...]) -> None:
    model = linear([4, 8], np.random.default_rng(2).standard_normal(bias_shape))
    result = gk.simplify_with_report(model)
    assert ops(result.model) == ["Gemm"] and result.changes["gemm"] == 1
    gemm = result.model.graph.node[0]
    assert list(gemm.input) == ["x", "w", "b"] and list(gemm.output) == ["y"] and not gemm.attribute
    assert_same_values(model, result.model, rtol=0)  # (ONNX Runtime computes both the same way: bit-identical)
    assert gk.fuse_gemm(model).graph.node[0].op_type == "Gemm"


def test_a_dynamic_row_count_fuses_with_a_row_bias_only() -> None:
    rng = np.random.default_rng(3)
    model = linear(["n", 8], rng.standard_normal(6))
    result = gk.simplify(model)
    assert ops(result) == ["Gemm"]
    for n in (1, 5):
        assert_same_values(model, result, rtol=0, n=n)
    assert ops(gk.simplify(linear(["n", 8], rng.standard_normal((4, 6))))) == ["MatMul", "Add"]  # (n may not be 4)


@pytest.mark.parametrize(("x_dims", "bias_shape", "dtype", "twice"), [
    ([2, 4, 8], (6,), np.float32, False),     # MatMul broadcasts a batch dim; Gemm cannot
    ([4, 8], (2, 4, 6), np.float32, False),   # Add would grow the product to 3-D
    ([4, 8], (6,), np.int32, False),          # ONNX Runtime has no int32 Gemm
    ([4, 8], (6,), np.float32, True),         # the product is read twice
])
def test_matmul_add_stays_where_gemm_is_not_the_same(x_dims: list[int | str], bias_shape: tuple[int, ...],
                                                     dtype: type, twice: bool) -> None:
    model = linear(x_dims, np.ones(bias_shape), dtype=dtype, twice=twice)
    assert "Gemm" not in ops(gk.simplify(model))
    with pytest.raises(gk.NoChangeError) as err:
        gk.fuse_gemm.__wrapped__(model)  # type: ignore[attr-defined]
    assert "Add of a constant bias" in err.value.hint


def test_gemm_fusion_reaches_bodies_and_keeps_the_body_valid() -> None:
    model = parse("""
g (bool c, float[2, 3] x) => (float[2, 2] y) <float[3, 2] w = {1.0, 2.0, 3.0, 4.0, 5.0, 6.0}, float[2] b = {0.5, -0.5}> {
  y = If(c) <
    then_branch = t () => (float[2, 2] a) { p = MatMul(x, w)\n a = Add(p, b) },
    else_branch = e () => (float[2, 2] d) { q = MatMul(x, w)\n d = Sub(q, b) }
  >
}""")
    result = gk.simplify(model)
    branches = {a.name: a.g for a in result.graph.node[0].attribute}
    assert ops_of(branches["else_branch"]) == ["MatMul", "Sub"]
    onnx.checker.check_model(result.proto, full_check=True)
    for c in (True, False):
        feeds = {"c": np.array(c), "x": np.arange(6, dtype=np.float32).reshape(2, 3)}
        np.testing.assert_array_equal(gk.run(result, feeds)["y"], gk.run(model, feeds)["y"])


# ------------------------------------------------------------------------- If with a constant condition

CONSTANT_IF = """
g (bool c, float[2] x) => (float[2] y, float[2] z) <float[2] k = {1.0, 2.0}> {
  yes = Constant<value = bool {1}>()
  t = Neg(x)
  a = If(yes) <
    then_branch = b1 () => (float[2] m) {
      u = Add(x, k)
      m = Mul(u, u)
    },
    else_branch = b2 () => (float[2] e) { e = Abs(x) }
  >
  nested = If(yes) <
    then_branch = b3 () => (float[2] s) {
      u = Sub(x, t)
      inner = Mul(u, x)
      s = If(c) <
        then_branch = b4 () => (float[2] v) { v = Add(inner, k) },
        else_branch = b5 () => (float[2] w) { w = Mul(inner, k) }
      >
    },
    else_branch = b6 () => (float[2] f) { f = Neg(x) }
  >
  no = Not(yes)
  through = If(no) <
    then_branch = b7 () => (float[2] g1) { g1 = Relu(x) },
    else_branch = b8 () => (float[2] g2) <float[2] three = {3.0, 4.0}> { g2 = Identity(three) }
  >
  sum = Add(a, nested)
  y = Add(sum, through)
  z = If(no) <
    then_branch = b9 () => (float[2] h1) { h1 = Relu(x) },
    else_branch = b10 () => (float[2] t2) { t2 = Identity(t) }
  >
}
"""


def test_an_if_with_a_constant_condition_becomes_the_branch_it_takes() -> None:
    model = parse(CONSTANT_IF)
    branch_value_info = model.graph.node[2].attribute[0].g.value_info
    branch_value_info.append(helper.make_tensor_value_info("u", onnx.TensorProto.FLOAT, [2]))
    result = gk.simplify_with_report(model)
    assert result.changes["branches"] == 4
    found = ops(result.model)
    assert found.count("If") == 1 and "Not" not in found  # (only the If on the graph input 'c' stays)
    names = [o for n in result.model.graph.node for o in n.output]
    # (the first branch's 'u' is renamed: the second branch defines one too; its value_info follows)
    assert len(names) == len(set(names)) and "u" in names and "u_1" in names
    assert [v.name for v in result.model.graph.value_info] == ["u_1"]
    assert next(n for n in result.model.graph.node if "u_1" in n.output).op_type == "Add"
    inner = next(n for n in result.model.graph.node if n.op_type == "If")
    assert {a.name for a in inner.attribute} == {"then_branch", "else_branch"}
    for c in (True, False):
        feeds = {"c": np.array(c), "x": np.array([1.5, -2.0], np.float32)}
        expected, found_values = gk.run(model, feeds), gk.run(result.model, feeds)
        for name in ("y", "z"):
            np.testing.assert_array_equal(found_values[name], expected[name])
    onnx.checker.check_model(result.model.proto, full_check=True)


def test_inline_branches_is_an_edit_option_that_needs_a_constant_condition() -> None:
    model = parse(CONSTANT_IF)
    folded = gk.fold_constants(model)  # (Not(yes) becomes a constant: every If but the inner one can go)
    result = gk.inline_branches(folded)
    assert [n.op_type for n in result.graph.node].count("If") == 1
    assert_same_values(model, result)
    dynamic = parse("g (bool c, float[2] x) => (float[2] y) { y = If(c) < then_branch = t () => (float[2] a) "
                    "{ a = Neg(x) }, else_branch = e () => (float[2] b) { b = Abs(x) } > }")
    with pytest.raises(gk.NoChangeError) as err:
        gk.inline_branches.__wrapped__(dynamic)  # type: ignore[attr-defined]
    assert "--fold-constants" in (err.value.cli_hint or "") and "fold_constants first" in (err.value.hint or "")


def projections(x_dims: list[int | str], count: int) -> gk.Model:
    rng = np.random.default_rng(4)
    b = gk.GraphBuilder("heads")
    x = b.input("x", "float32", x_dims)
    split = b.initializer(np.array([0, 0, 2, 3], np.int64), "split")
    for k in range(count):
        w = b.initializer(rng.standard_normal((8, 6)).astype(np.float32), f"w{k}")
        bias = b.initializer(rng.standard_normal(6).astype(np.float32), f"b{k}")
        h = b.node("Add", [b.node("MatMul", [x, w]), bias])
        b.output(b.node("Reshape", [h, split], outputs=[f"y{k}"]), "float32", [*x_dims[:2], 2, 3])
    return b.build()


def test_projections_of_one_static_input_share_one_reshape_into_gemms() -> None:
    model = projections([1, 4, 8], 3)  # (an attention's Q, K and V)
    result = gk.simplify_with_report(model)
    assert sorted(ops(result.model)) == ["Gemm"] * 3 + ["Reshape"] * 4 and result.changes["gemm"] == 2
    flat = result.model.graph.node[0]
    assert flat.op_type == "Reshape" and flat.input[0] == "x"
    targets = {t.name: numpy_helper.to_array(t).tolist() for t in result.model.graph.initializer}
    assert targets[flat.input[1]] == [4, 8]
    assert all(targets[n.input[1]] == [1, 4, 2, 3] for n in result.model.graph.node[1:] if n.op_type == "Reshape")
    assert_same_values(model, result.model)


def test_projections_stay_with_dynamic_dims_or_alone() -> None:
    assert "Gemm" not in ops(gk.simplify(projections(["batch", 4, 8], 3)))  # (the 2-D rows are not known)
    assert "Gemm" not in ops(gk.simplify(projections([1, 4, 8], 1)))  # (one projection: nothing saved)


def test_a_constant_if_inside_a_taken_branch_goes_too() -> None:
    model = parse("""
g (float[2] x) => (float[2] y) <bool yes = {1}, bool no = {0}, float[2] k = {1.0, 2.0}> {
  y = If(yes) <
    then_branch = t () => (float[2] a) {
      a = If(no) <
        then_branch = t2 () => (float[2] b) { b = Neg(x) },
        else_branch = e2 () => (float[2] c) { c = Add(x, k) }
      >
    },
    else_branch = e () => (float[2] d) { d = Abs(x) }
  >
}""")
    result = gk.simplify_with_report(model)
    assert ops(result.model) == ["Add"] and result.changes["branches"] == 2
    assert result.model.graph.node[0].output[0] == "y"
    assert_same_values(model, result.model, rtol=0)


def test_fuse_conv_and_merge_nodes_are_edits_of_one_pass_each() -> None:
    model = conv_chain()
    fused = gk.fuse_conv(model)
    assert ops(fused) == ["Conv", "Relu"]
    assert_same_values(model, fused, rtol=1e-5)
    twice = parse("g (float[2] x) => (float[2] y) { a = Relu(x)\n b = Relu(x)\n y = Add(a, b) }")
    merged = gk.merge_nodes(twice)
    assert ops(merged) == ["Relu", "Add"] and list(merged.graph.node[1].input) == ["a", "a"]
    assert_same_values(twice, merged, rtol=0)
    for edit in (gk.fuse_conv, gk.merge_nodes):
        with pytest.raises(gk.NoChangeError) as err:
            edit.__wrapped__(gk.load(fixture("linear_func.onnx")))  # type: ignore[attr-defined]
        assert err.value.hint


@pytest.mark.parametrize(("body", "left"), [
    # an IR-3-era exporter's flatten of a [1, 4] tensor (onnxsim removes it too)
    ("g (float[1, 4] x) => (float[1, 4] y) <int64[2] s = {1, -1}> { r = Relu (x)\n y = Reshape (r, s) }", ["Relu"]),
    # the same named dims in the same places: a Reshape to what it has at every size
    ("g (float[batch, 4] x) => (float[batch, 4] y) <int64[2] s = {0, 4}> { r = Reshape (x, s)\n y = Relu (r) }",
     ["Relu"]),
    # not the same: kept
    ("g (float[2, 4] x) => (float[4, 2] y) <int64[2] s = {4, 2}> { r = Relu (x)\n y = Reshape (r, s) }",
     ["Relu", "Reshape"]),
])
def test_a_reshape_to_the_shape_it_has_goes(body: str, left: list[str]) -> None:
    model = parse(body)
    result = gk.simplify(model)
    assert ops(result) == left
    assert_same_values(model, result, batch=3)


@pytest.mark.parametrize(("given", "meant"), [("constnats", "'constants'"), ("skip_layer_norm", "'skip_layernorm'")])
def test_an_unknown_pass_says_which_was_meant(given: str, meant: str) -> None:
    with pytest.raises(gk.UsageError, match=f"unknown simplify pass '{given}' in passes: did you mean {meant}"):
        gk.simplify_with_report(parse(EXPORTED_BLOCK), passes=[given], target="onnxruntime")
