"""Edit verbs: each returns a new valid model, leaves its input untouched, and computes what was meant."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import fixture
from onnx import helper, numpy_helper

import graphkit as gk
from graphkit._model import iter_graphs
from graphkit._recipe import parse_steps, run_steps
from graphkit.cli import main


def load(name: str) -> gk.Model:
    return gk.load(fixture(name))


def outputs_close(a: gk.Model, b: gk.Model, feeds: dict[str, np.ndarray] | None = None, **kw: object) -> bool:
    options = gk.FeedOptions(**kw)  # type: ignore[arg-type]
    ra, rb = gk.run(a, feeds, feed_options=options), gk.run(b, feeds, feed_options=options)
    return all(np.allclose(ra[k], rb[k], atol=1e-5) for k in ra)


def reshape_model() -> gk.Model:
    b = gk.GraphBuilder("reshape")
    b.input("x", "float32", [1, 3, 4, 4])
    shape = b.initializer(np.array([1, 48], dtype=np.int64), "target")
    b.node("Reshape", ["x", shape], name="flatten", outputs=["y"])
    b.output("y", "float32", [1, 48])
    return b.build()


def foldable_model() -> gk.Model:
    """y = x + (w * 2 + 1), with w an initializer and 2 a Constant; also an unused branch."""
    b = gk.GraphBuilder("fold")
    b.input("x", "float32", [2, 3])
    w = b.initializer(np.arange(6, dtype=np.float32).reshape(2, 3), "w")
    two = b.constant(np.array(2.0, dtype=np.float32), "two")
    one = b.initializer(np.array(1.0, dtype=np.float32), "one")
    scaled = b.node("Mul", [w, two], name="scale", outputs=["w2"])
    shifted = b.node("Add", [scaled, one], name="shift", outputs=["w3"])
    b.node("Add", ["x", shifted], name="out", outputs=["y"])
    b.output("y", "float32", [2, 3])
    return b.build()


def _with_dead_node(model: gk.Model) -> gk.Model:
    """``model`` plus an Abs node nothing reads (built without an edit, so cleanup has work to do)."""
    copy = model.copy()
    copy.graph.node.append(helper.make_node("Abs", [copy.graph.input[0].name], ["dead"], name="dead"))
    return copy


# --------------------------------------------------------------------------- purity, one per edit

EDITS: dict[str, tuple[str | Callable[[], gk.Model], Callable[[gk.Model], gk.Model]]] = {
    "set_attribute": ("srcnn.onnx", lambda m: gk.set_attribute(m, "/Resize", "mode", "linear")),
    "remove_attribute": ("srcnn.onnx", lambda m: gk.remove_attribute(m, "/Resize", "cubic_coeff_a")),
    "set_op_type": ("linear_func.onnx", lambda m: gk.set_op_type(m, "Add", "Sub")),
    "rename_tensor": ("if_outer_scope.onnx", lambda m: gk.rename_tensor(m, "x_relu", "renamed")),
    "rename_node": ("linear_func.onnx", lambda m: gk.rename_node(m, "Add", "plus")),
    "bypass_node": ("debug_markers.onnx", lambda m: gk.bypass_node(m, "/Debug_1")),
    "remove_node": ("loop_scan.onnx", lambda m: gk.remove_node(m, "final", downstream=True)),
    "insert_node": ("linear_func.onnx", lambda m: gk.insert_node(m, "c", "Relu")),
    "set_initializer": ("ext_weights/model.onnx",
                        lambda m: gk.set_initializer(m, "fc2.bias", np.zeros(16, dtype=np.float32))),
    "initializer_to_input": ("ext_weights/model.onnx", lambda m: gk.initializer_to_input(m, "fc1.bias")),
    "constant_to_input": ("srcnn.onnx", lambda m: gk.constant_to_input(m, "/Constant_output_0", "factor")),
    "input_to_initializer": ("linear_func.onnx",
                             lambda m: gk.input_to_initializer(m, "b", np.ones((10, 10), np.float32))),
    "set_dims": ("model_static.onnx", lambda m: gk.set_dims(m, "in", {0: "batch"})),
    "replace_op": ("debug_markers.onnx", lambda m: gk.replace_op(m, "my::Debug", drop_attributes=True)),
    "set_opset": ("debug_markers.onnx", lambda m: gk.set_opset(m, "my", 2)),
    "cleanup": (lambda: _with_dead_node(load("my_add.onnx")), gk.cleanup),
    "fold_constants": (foldable_model, gk.fold_constants),
}


@pytest.mark.parametrize("verb", sorted(EDITS))
def test_every_edit_leaves_its_input_byte_identical(verb: str) -> None:
    source, apply = EDITS[verb]
    model = load(source) if isinstance(source, str) else source()
    before = model.proto.SerializeToString(deterministic=True)
    result = apply(model)
    assert model.proto.SerializeToString(deterministic=True) == before
    assert result.proto.SerializeToString(deterministic=True) != before
    assert gk.validate(result).passed
    assert result.base_dir == model.base_dir


# ------------------------------------------------------------------------------------ attributes


def test_set_op_type_add_to_sub_computes_a_x_minus_b() -> None:
    model = load("linear_func.onnx")
    result = gk.set_op_type(model, "Add", "Sub")
    feeds = gk.make_feeds(model, feed_options=gk.FeedOptions(seed=4))
    np.testing.assert_allclose(gk.run(result, feeds)["output"], feeds["a"] * feeds["x"] - feeds["b"], rtol=1e-6)


def test_set_attribute_converts_to_the_schema_type_and_changes_values() -> None:
    model = load("srcnn.onnx")
    result = gk.set_attribute(model, "/Resize", "mode", "nearest")
    attr = next(a for a in result.graph.node[1].attribute if a.name == "mode")
    assert attr.s == b"nearest"
    assert not np.allclose(gk.run(result)["output"], gk.run(model)["output"])
    sub = gk.set_attribute(model, "/Resize", "cubic_coeff_a", -1)  # int for a FLOAT attribute
    assert next(a for a in sub.graph.node[1].attribute if a.name == "cubic_coeff_a").f == -1.0


def test_set_attribute_typed_values_on_a_custom_op() -> None:
    model = load("debug_markers.onnx")
    result = gk.set_attribute(model, "/Debug_0", "levels", [1, 2])
    result = gk.set_attribute(result, "/Debug_0", "scale", 0.5)
    result = gk.set_attribute(result, "/Debug_0", "table", np.arange(4, dtype=np.int32))
    attrs = {a.name: a for a in result.graph.node[1].attribute}
    assert list(attrs["levels"].ints) == [1, 2] and attrs["scale"].f == 0.5
    assert attrs["table"].type == onnx.AttributeProto.TENSOR


def test_set_attribute_wrong_type_names_the_node_and_hints() -> None:
    with pytest.raises(gk.EditError) as err:
        gk.set_attribute(load("srcnn.onnx"), "/conv1/Conv", "group", 1.5)
    assert "'group'" in str(err.value) and "/conv1/Conv" in str(err.value) and err.value.hint


def test_an_attribute_that_empties_a_shape_downstream_names_the_node_where_it_starts(tmp_path: Path,
                                                                                   capsys: pytest.CaptureFixture[str]
                                                                                   ) -> None:
    # strides 5 take 20x20 to 4x4, the next 3x3 Conv to 2x2, the one after to 0x0 (then negative)
    with pytest.raises(gk.EditError) as err:
        gk.set_attribute(load("whole_model.onnx"), "/convs1/convs1.0/Conv", "strides", [5, 5])
    message = str(err.value)
    assert message.startswith("set_attribute /convs1/convs1.0/Conv.strides: node '/convs1/convs1.2/Conv' (Conv) "
                              "would output '/convs1/convs1.2/Conv_output_0' float32[1,3,0,0], an empty shape, "
                              "from '/convs1/convs1.1/Conv_output_0' float32[1,3,2,2]"), message
    assert message.endswith("upstream, this edit set strides=[5, 5] on '/convs1/convs1.0/Conv'")
    assert "set_attribute" in err.value.hint and "--set-attr" in err.value.cli_hint
    with pytest.raises(gk.EditError) as err:
        gk.set_attribute(load("whole_model.onnx"), "/convs1/convs1.0/Conv", "dilations", [20, 20])
    assert "node '/convs1/convs1.0/Conv' (Conv) would output '/convs1/convs1.0/Conv_output_0' float32[1,3,-20,-20], " \
           "an impossible shape, from 'input.1' float32[1,3,20,20]" in str(err.value)
    assert str(err.value).endswith("this edit set its dilations=[20, 20]")
    out = tmp_path / "e.onnx"
    assert main(["edit", str(fixture("whole_model.onnx")), str(out), "--set-attr",
                 "/convs1/convs1.0/Conv.strides=[5,5]"]) == 2
    err_text = capsys.readouterr().err
    assert "node '/convs1/convs1.2/Conv'" in err_text and "graph output" not in err_text and not out.exists()


def test_set_attribute_unknown_attribute_suggests() -> None:
    with pytest.raises(gk.NameNotFoundError) as err:
        gk.set_attribute(load("srcnn.onnx"), "/conv1/Conv", "kernel_shap", [3, 3])
    assert "kernel_shape" in err.value.hint


def test_unknown_node_suggests_close_names() -> None:
    with pytest.raises(gk.NodeNotFoundError) as err:
        gk.set_op_type(load("linear_func.onnx"), "Ad", "Sub")
    assert "'Ad'" in str(err.value) and "'Add'" in err.value.hint


def test_a_node_is_found_by_its_position_in_the_main_graph() -> None:
    result = gk.rename_node(load("linear_func.onnx"), "#1", "plus")  # #1 is 'Add'
    assert [n.name for n in result.graph.node] == ["Mul", "plus"]


def test_a_position_past_the_last_node_names_the_range() -> None:
    with pytest.raises(gk.EditError) as err:
        gk.rename_node(load("linear_func.onnx"), "#2", "plus")
    assert "has 2 nodes; there is no node #2" in str(err.value) and "#0 to #1" in err.value.hint


def test_a_node_in_a_nested_body_is_found_by_name() -> None:
    result = gk.set_op_type(load("if_outer_scope.onnx"), "inner_sub", "Add")
    bodies = {n.name: n.op_type for g, _ in iter_graphs(result.graph) for n in g.node}
    assert bodies["inner_sub"] == "Add" and bodies["inner_mul"] == "Mul"


def test_a_name_two_nodes_share_is_refused_with_their_places() -> None:
    value = helper.make_tensor_value_info
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["r"], name="twin"),
                               helper.make_node("Neg", ["r"], ["y"], name="twin")], "twins",
                              [value("x", onnx.TensorProto.FLOAT, [2])], [value("y", onnx.TensorProto.FLOAT, [2])])
    model = gk.Model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    with pytest.raises(gk.EditError) as err:
        gk.rename_node(model, "twin", "single")
    assert "2 nodes are named 'twin'" in str(err.value) and "(main graph)" in str(err.value)
    assert "'#3'" in err.value.hint
    renamed = gk.rename_node(model, "#1", "single")
    assert [n.name for n in renamed.graph.node] == ["twin", "single"]


def test_set_op_type_unknown_operator_suggests() -> None:
    with pytest.raises(gk.NameNotFoundError) as err:
        gk.set_op_type(load("linear_func.onnx"), "Add", "Subb")
    assert "'Sub'" in err.value.hint


def test_remove_required_attribute_is_refused() -> None:
    with pytest.raises(gk.EditError) as err:
        gk.remove_attribute(load("if_outer_scope.onnx"), "cast", "to")  # a node inside an If body
    assert "'to'" in str(err.value) and "'cast'" in str(err.value) and err.value.hint


# ---------------------------------------------------------------------------------------- renames


def test_rename_tensor_reaches_into_if_bodies_and_keeps_values() -> None:
    model = load("if_outer_scope.onnx")
    result = gk.rename_tensor(model, "x_relu", "relu_out")
    text = result.proto.SerializeToString()
    assert b"x_relu" not in text
    for seed in range(3):
        assert outputs_close(model, result, seed=seed, ranges={"x": (-1.0, 1.0)})


def test_rename_initializer_read_in_nested_bodies() -> None:
    model = load("if_outer_scope.onnx")
    result = gk.rename_tensor(model, "W2", "weight_two")
    assert b"W2" not in result.proto.SerializeToString()
    assert outputs_close(model, result, {"x": -np.ones((2, 3), np.float32)})


def test_rename_respects_shadowing_in_a_body() -> None:
    loop_body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]), helper.make_node("Add", ["acc", "t"], ["acc_out"]),
         helper.make_node("Neg", ["t"], ["t_neg"])],
        "body",
        [helper.make_tensor_value_info("i", onnx.TensorProto.INT64, []),
         helper.make_tensor_value_info("c_in", onnx.TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc", onnx.TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("c_out", onnx.TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", onnx.TensorProto.FLOAT, [2])],
    )
    b = gk.GraphBuilder("shadow")
    b.input("t", "float32", [2])
    trip = b.initializer(np.array(2, np.int64), "trip")
    cond = b.initializer(np.array(True), "cond")
    b.node("Loop", [trip, cond, "t"], name="loop", outputs=["acc"], body=loop_body)
    b.output("acc", "float32", [2])
    model = b.build()
    # "acc" is defined in the main graph (the Loop's output) AND inside the body (a body input): the body
    # keeps its own "acc"; the body's read of the outer "t" is renamed.
    result = gk.rename_tensor(model, "acc", "total")
    body = result.graph.node[0].attribute[0].g
    assert [i.name for i in body.input][2] == "acc" and result.graph.output[0].name == "total"
    renamed = gk.rename_tensor(model, "t", "start")
    assert list(renamed.graph.node[0].attribute[0].g.node[1].input) == ["acc", "start"]
    x = np.array([1.0, 2.0], np.float32)
    np.testing.assert_allclose(gk.run(renamed, {"start": x})["acc"], x * 3)


def test_rename_to_an_existing_name_is_refused() -> None:
    with pytest.raises(gk.EditError) as err:
        gk.rename_tensor(load("linear_func.onnx"), "c", "output")
    assert "'output'" in str(err.value) and err.value.hint


def test_rename_unknown_tensor_suggests() -> None:
    with pytest.raises(gk.TensorNotFoundError) as err:
        gk.rename_tensor(load("linear_func.onnx"), "outpt", "z")
    assert "'output'" in err.value.hint


def test_rename_node() -> None:
    result = gk.rename_node(load("linear_func.onnx"), "Add", "plus")
    assert [n.name for n in result.graph.node] == ["Mul", "plus"]


# -------------------------------------------------------------------------------------- structure


def test_bypass_node_rewires_readers() -> None:
    model = load("debug_markers.onnx")
    result = gk.bypass_node(model, "/Debug_0")
    conv = result.graph.node[1]
    assert conv.input[0] == "/convs.0/Conv_output_0"


def test_bypass_node_whose_output_is_a_graph_output_keeps_the_name() -> None:
    model = load("debug_markers.onnx")
    result = gk.replace_op(gk.bypass_node(model, "/Debug_3"), "my::Debug", drop_attributes=True)
    assert [o.name for o in result.graph.output] == ["output"]
    reference = gk.replace_op(model, "my::Debug", drop_attributes=True)
    assert outputs_close(reference, result)


def test_bypass_refuses_a_dtype_change() -> None:
    b = gk.GraphBuilder("cast")
    b.input("x", "float32", [2])
    b.node("Cast", ["x"], name="cast", outputs=["xi"], to=onnx.TensorProto.INT64)
    b.node("Neg", ["xi"], name="neg", outputs=["y"])
    b.output("y", "int64", [2])
    with pytest.raises(gk.EditError) as err:
        gk.bypass_node(b.build(), "cast")
    assert "float32" in str(err.value) and "int64" in str(err.value) and err.value.hint


def test_remove_node_refuses_a_dangling_input() -> None:
    with pytest.raises(gk.EditError) as err:
        gk.remove_node(load("whole_model.onnx"), "/Add")
    assert "/convs4/convs4.0/Conv" in str(err.value) and "bypass" in err.value.hint


def test_remove_node_takes_what_only_it_fed() -> None:
    b = gk.GraphBuilder("branch")
    b.input("x", "float32", [2])
    w = b.initializer(np.ones(2, np.float32), "w")
    h = b.node("Mul", ["x", w], name="mul", outputs=["h"])
    b.node("Neg", [h], name="neg", outputs=["side"])
    b.node("Relu", ["x"], name="relu", outputs=["y"])
    b.output("y", "float32", [2])
    b.output("side", "float32", [2])
    built = b.build()
    result = gk.remove_node(built, "neg", downstream=True)
    assert [n.name for n in result.graph.node] == ["relu"]
    assert not result.graph.initializer and [o.name for o in result.graph.output] == ["y"]


def test_remove_node_downstream_removes_dependent_outputs() -> None:
    model = load("loop_scan.onnx")
    result = gk.remove_node(model, "final", downstream=True)
    assert [o.name for o in result.graph.output] == ["scan_state"]
    np.testing.assert_allclose(gk.run(result, feed_options=gk.FeedOptions(seed=1))["scan_state"], gk.run(model, feed_options=gk.FeedOptions(seed=1))["scan_state"])


def test_insert_node_after_a_tensor_and_after_a_graph_output() -> None:
    model = load("linear_func.onnx")
    feeds = gk.make_feeds(model, feed_options=gk.FeedOptions(seed=2))
    relu = gk.insert_node(model, "c", "Relu")
    np.testing.assert_allclose(gk.run(relu, feeds)["output"], np.maximum(feeds["a"] * feeds["x"], 0) + feeds["b"],
                               rtol=1e-6)
    neg = gk.insert_node(model, "output", "Neg")
    assert [o.name for o in neg.graph.output] == ["output"]
    np.testing.assert_allclose(gk.run(neg, feeds)["output"], -(feeds["a"] * feeds["x"] + feeds["b"]), rtol=1e-6)


def test_insert_node_with_a_constant_input_and_attributes() -> None:
    model = load("linear_func.onnx")
    feeds = gk.make_feeds(model, feed_options=gk.FeedOptions(seed=2))
    result = gk.insert_node(model, "output", "Mul", inputs=[np.array(3.0, np.float32)], name="triple")
    np.testing.assert_allclose(gk.run(result, feeds)["output"], 3 * (feeds["a"] * feeds["x"] + feeds["b"]), rtol=1e-5)
    clipped = gk.insert_node(model, "c", "LeakyRelu", attributes={"alpha": 0})  # int → FLOAT
    assert clipped.graph.node[1].attribute[0].f == 0.0


# --------------------------------------------------------------------------------- values, inputs


def test_srcnn_scales_become_input_factor_and_sizes_follow() -> None:
    model = load("srcnn.onnx")
    result = gk.constant_to_input(model, "/Constant_output_0", "factor")
    assert "factor" in [i.name for i in result.graph.input]
    image = gk.make_feeds(model, feed_options=gk.FeedOptions(seed=0))["input"]
    for factor, size in ((2, 64), (4, 128)):
        out = gk.run(result, {"input": image, "factor": np.array([1, 1, factor, factor], np.float32)})["output"]
        assert out.shape == (1, 3, size, size)
    same = gk.run(result, {"input": image, "factor": np.array([1, 1, 3, 3], np.float32)})["output"]
    np.testing.assert_allclose(same, gk.run(model, {"input": image})["output"], rtol=1e-5, atol=1e-5)


def test_initializer_to_input_then_freeze_round_trips_values(ext_copy: Path) -> None:
    model = gk.load(ext_copy)
    bias = gk.tensor_value(model, next(t for t in model.graph.initializer if t.name == "fc1.bias"))
    as_input = gk.initializer_to_input(model, "fc1.bias", "bias_in")
    x = gk.make_feeds(model, feed_options=gk.FeedOptions(seed=1, shapes={"x": [2, 64]}))["x"]
    np.testing.assert_allclose(gk.run(as_input, {"x": x, "bias_in": bias})["y"], gk.run(model, {"x": x})["y"])
    frozen = gk.input_to_initializer(as_input, "bias_in", bias)
    np.testing.assert_allclose(gk.run(frozen, {"x": x})["y"], gk.run(model, {"x": x})["y"])


def test_set_initializer_checks_dtype_and_shape(ext_copy: Path) -> None:
    model = gk.load(ext_copy)
    with pytest.raises(gk.EditError) as err:
        gk.set_initializer(model, "fc2.bias", np.zeros(16, np.float64))
    assert "float32" in str(err.value) and "float64" in str(err.value) and err.value.hint
    with pytest.raises(gk.EditError) as err:
        gk.set_initializer(model, "fc2.bias", np.zeros(8, np.float32))
    assert "[16]" in str(err.value) and "allow_reshape" in err.value.hint
    result = gk.set_initializer(model, "fc2.bias", [1.0] * 16)  # a list takes the initializer's dtype
    x = gk.make_feeds(model, feed_options=gk.FeedOptions(seed=1, shapes={"x": [1, 64]}))["x"]
    old_bias = gk.tensor_value(model, next(t for t in model.graph.initializer if t.name == "fc2.bias"))
    np.testing.assert_allclose(gk.run(result, {"x": x})["y"] - gk.run(model, {"x": x})["y"], [1.0 - old_bias],
                               rtol=1e-5, atol=1e-5)


def test_set_initializer_on_a_constant_node() -> None:
    model = load("my_add.onnx")
    result = gk.set_initializer(model, "/Constant_output_0", 5.0)
    feeds = gk.make_feeds(model, feed_options=gk.FeedOptions(seed=3))
    np.testing.assert_allclose(gk.run(result, feeds)["output"], 5 * feeds["a"] + feeds["b"], rtol=1e-6)


def test_freeze_refuses_wrong_dtype_and_shape() -> None:
    model = load("linear_func.onnx")
    with pytest.raises(gk.EditError) as err:
        gk.input_to_initializer(model, "b", np.ones((10, 10), np.int64))
    assert "'b'" in str(err.value) and err.value.hint
    with pytest.raises(gk.EditError):
        gk.input_to_initializer(model, "b", np.ones((3, 10), np.float32))


def test_initializer_to_input_on_a_constant_points_at_the_right_verb() -> None:
    with pytest.raises(gk.EditError) as err:
        gk.initializer_to_input(load("srcnn.onnx"), "/Constant_output_0")
    assert "constant_to_input" in err.value.hint


# ------------------------------------------------------------------------------------------ dims


SHAPES = [[1, 3, 10, 10], [2, 3, 10, 10], [1, 3, 20, 20], [4, 3, 16, 12], [1, 3, 10]]


def _accepts(model: gk.Model, shape: list[int]) -> bool:
    try:
        gk.run(model, {"in": np.ones(shape, np.float32)})
    except (gk.FeedError, gk.RuntimeFailure):
        return False
    return True


@pytest.mark.parametrize(("dims", "reference"), [({0: "batch"}, "model_dynamic_0.onnx"),
                                                 ({2: "in_dim_2", 3: "in_dim_3"}, "model_dynamic_23.onnx")])
def test_dynamic_axes_trio_from_model_static(dims: dict[int, str], reference: str) -> None:
    edited = gk.set_dims(load("model_static.onnx"), "in", dims)
    expected = load(reference)
    assert edited.graph.input[0] == expected.graph.input[0]
    for shape in SHAPES:
        assert _accepts(edited, shape) == _accepts(expected, shape), shape
    x = {"in": np.random.default_rng(0).standard_normal(SHAPES[3] if 0 in dims else SHAPES[2]).astype(np.float32)}
    if _accepts(edited, list(x["in"].shape)):
        np.testing.assert_allclose(gk.run(edited, x)["out"], gk.run(expected, x)["out"], rtol=1e-5)


def test_fixed_dim_turns_dynamic_back_to_static() -> None:
    fixed = gk.set_dims(load("model_dynamic_0.onnx"), "in", {0: 1})
    assert _accepts(fixed, [1, 3, 10, 10]) and not _accepts(fixed, [2, 3, 10, 10])
    assert [d.dim_value for d in fixed.graph.output[0].type.tensor_type.shape.dim] == [1, 3, 8, 8]


def test_set_dims_rewrites_a_hard_coded_reshape(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="graphkit._edit"):
        result = gk.set_dims(reshape_model(), "x", {0: "batch"})
    assert any("'flatten'" in r.getMessage() and "[1, 48] -> [0, 48]" in r.getMessage() for r in caplog.records)
    target = next(t for t in result.lazy_proto.graph.initializer if t.name == "target")
    assert numpy_helper.to_array(target).tolist() == [0, 48]
    assert gk.validate(result).passed


def test_set_dims_bad_axis_and_unknown_tensor() -> None:
    with pytest.raises(gk.EditError) as err:
        gk.set_dims(load("model_static.onnx"), "in", {5: "x"})
    assert "rank 4" in str(err.value) and err.value.hint
    with pytest.raises(gk.TensorNotFoundError) as err2:
        gk.set_dims(load("model_static.onnx"), "inn", {0: "b"})
    assert "'in'" in err2.value.hint


def test_set_dims_refreshes_stale_value_info() -> None:
    model = load("dcn.onnx")
    result = gk.set_dims(model, "input", {0: "batch"})
    offset = next(v for v in result.graph.value_info if v.name == "/conv1/Conv_output_0")
    assert offset.type.tensor_type.shape.dim[0].dim_param == "batch"


# ------------------------------------------------------------------------------ ops and opsets


def test_replace_debug_by_identity_drops_domain_and_refused_attributes() -> None:
    model = load("debug_markers.onnx")
    with pytest.raises(gk.EditError) as err:
        gk.replace_op(model, "my::Debug", "Identity")
    assert "has attributes ['name'] that Identity (at ai.onnx opset" in err.value.message
    assert "drop_attributes=True" in (err.value.hint or "") and "--drop-attributes" in (err.value.cli_hint or "")
    result = gk.replace_op(model, "my::Debug", "Identity", drop_attributes=True)
    assert {n.op_type for n in result.graph.node} == {"Conv", "Identity"}
    assert all(not n.attribute for n in result.graph.node if n.op_type == "Identity")
    assert {o.domain for o in result.proto.opset_import} == {""}
    conv_only = gk.run(result)  # now runs in ONNX Runtime: the Debug markers were the only obstacle
    assert conv_only["output"].shape == (1, 3, 10, 10)


_MY_GELU = """
<ir_version: 9, opset_import: ["" : %d, "com.example" : 1]>
g (float[6] x) => (float[6] y) {
    y = com.example.MyGelu<approximate = "tanh">(x)
}
"""


def test_replace_op_keeps_the_attributes_the_new_schema_takes(tmp_path: Path) -> None:
    result = gk.replace_op(gk.parse_model(_MY_GELU % 20), "com.example::MyGelu", "Gelu")
    node = result.graph.node[0]
    assert node.op_type == "Gelu" and [(a.name, a.s) for a in node.attribute] == [("approximate", b"tanh")]
    assert {o.domain for o in result.proto.opset_import} == {""}
    gk.save(result, tmp_path / "gelu.onnx")
    x = np.linspace(-3, 3, 6, dtype=np.float32)
    tanh = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    np.testing.assert_allclose(gk.run(gk.load(tmp_path / "gelu.onnx"), {"x": x})["y"], tanh, rtol=1e-5, atol=1e-6)


def test_replace_op_names_the_opset_that_introduced_the_operator() -> None:
    with pytest.raises(gk.EditError) as err:
        gk.replace_op(gk.parse_model(_MY_GELU % 17), "com.example::MyGelu", "Gelu")
    assert err.value.message == "Gelu does not exist at ai.onnx opset 17, the model's; it was introduced in opset 20"
    assert "set_opset('', 20)" in (err.value.hint or "") and "--set-opset ai.onnx=20" in (err.value.cli_hint or "")
    with pytest.raises(gk.NameNotFoundError) as unknown:
        gk.replace_op(gk.parse_model(_MY_GELU % 20), "com.example::MyGelu", "Gelux")
    assert "'Gelu'" in (unknown.value.hint or "")


def test_replace_unknown_op_suggests() -> None:
    with pytest.raises(gk.NodeNotFoundError) as err:
        gk.replace_op(load("debug_markers.onnx"), "my::Debg")
    assert "my::Debug" in err.value.hint


def test_set_opset_add_change_remove() -> None:
    model = load("linear_func.onnx")
    added = gk.set_opset(model, "com.example", 3)
    assert ("com.example", 3) in [(o.domain, o.version) for o in added.proto.opset_import]
    removed = gk.set_opset(added, "com.example", None)
    assert removed.proto.opset_import == model.proto.opset_import
    with pytest.raises(gk.EditError) as err:
        gk.set_opset(load("debug_markers.onnx"), "my", None)
    assert "/Debug_0" in str(err.value) and "replace_op" in err.value.hint
    assert gk.set_opset(model, "", 17) is model
    with pytest.raises(gk.NoChangeError):
        gk.set_opset.__wrapped__(model, "", 17)  # type: ignore[attr-defined]



def _dead_chain(size: int, *, read_at: int | None = None) -> gk.Model:
    """A live Relu beside a chain of ``size`` Adds (each with its own weight) whose end nothing reads;
    ``read_at``: the live path also reads that link of the chain. Every link has value_info."""
    b = gk.GraphBuilder("chain")
    b.input("x", "float32", [2])
    prev = "x"
    for i in range(size):
        w = b.initializer(np.full(2, i, np.float32), f"w{i}")
        prev = b.node("Add", [prev, w], name=f"link{i}", outputs=[f"t{i}"])
        b.value_info(prev, "float32", [2])
    live = b.node("Relu", ["x"], name="live", outputs=["r"])
    if read_at is not None:
        live = b.node("Add", [live, f"t{read_at}"], name="join", outputs=["j"])
    b.output(live, "float32", [2])
    return b.build()


def test_remove_node_takes_a_whole_dead_chain_with_its_weights_and_value_info() -> None:
    result = gk.remove_node(_dead_chain(300), "link299")
    assert [n.name for n in result.graph.node] == ["live"]
    assert not result.graph.initializer and not result.graph.value_info


def test_remove_node_stops_where_another_node_still_reads_the_chain() -> None:
    result = gk.remove_node(_dead_chain(10, read_at=4), "link9")
    assert [n.name for n in result.graph.node] == [*(f"link{i}" for i in range(5)), "live", "join"]
    assert [t.name for t in result.graph.initializer] == [f"w{i}" for i in range(5)]
    assert [v.name for v in result.graph.value_info] == [f"t{i}" for i in range(5)]


def test_remove_node_leaves_dead_code_it_did_not_feed() -> None:
    model = _with_dead_node(_dead_chain(3))
    result = gk.remove_node(model, "link2")
    assert [n.name for n in result.graph.node] == ["live", "dead"]


def test_remove_node_keeps_what_a_subgraph_body_reads() -> None:
    f = onnx.TensorProto.FLOAT
    then = helper.make_graph([helper.make_node("Identity", ["p"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", f, [2])])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", f, [2])])
    graph = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["p"], name="P"), helper.make_node("Abs", ["p"], ["d"], name="D"),
         helper.make_node("If", ["c"], ["z"], name="branch", then_branch=then, else_branch=other)],
        "body_reads", [helper.make_tensor_value_info("x", f, [2]),
                       helper.make_tensor_value_info("c", onnx.TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("z", f, [2])],
    )
    model = gk.Model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    result = gk.remove_node(model, "D")  # p is also read inside the If's then-branch: P stays
    assert [n.name for n in result.graph.node] == ["P", "branch"]


def test_bypass_node_drops_a_weight_only_the_bypassed_node_read() -> None:
    b = gk.GraphBuilder("scaled")
    b.input("x", "float32", [2])
    scale = b.initializer(np.full(2, 3, np.float32), "scale")
    b.node("Relu", [b.node("Mul", ["x", scale], name="mul", outputs=["m"])], name="relu", outputs=["y"])
    b.output("y", "float32", [2])
    result = gk.bypass_node(b.build(), "mul")
    assert [n.name for n in result.graph.node] == ["relu"] and list(result.graph.node[0].input) == ["x"]
    assert not result.graph.initializer


# ------------------------------------------------------------------------------ cleanup and fold


def test_cleanup_removes_unused_things_in_bodies_too() -> None:
    model = load("if_outer_scope.onnx").copy()
    then = model.graph.node[-2].attribute[0].g
    then.node.append(helper.make_node("Neg", ["then_out"], ["dead_in_body"], name="dead_body"))
    model.graph.node.insert(0, helper.make_node("Abs", ["x"], ["dead_top"], name="dead_top"))
    model.graph.initializer.append(helper.make_tensor("unused_w", onnx.TensorProto.FLOAT, [1], [1.0]))
    model.graph.input.append(helper.make_tensor_value_info("unused_in", onnx.TensorProto.FLOAT, [1]))
    model.graph.value_info.append(helper.make_tensor_value_info("gone", onnx.TensorProto.FLOAT, [1]))
    model.proto.opset_import.append(helper.make_opsetid("unused.domain", 1))
    model.proto.functions.append(helper.make_function("unused.domain", "F", ["a"], ["b"],
                                                      [helper.make_node("Neg", ["a"], ["b"])],
                                                      [helper.make_opsetid("", 17)]))
    result = gk.cleanup(model)
    text = result.proto.SerializeToString()
    for gone in (b"dead_body", b"dead_top", b"unused_w", b"unused_in", b"gone", b"unused.domain"):
        assert gone not in text, gone
    assert outputs_close(load("if_outer_scope.onnx"), result, seed=5)
    assert gk.cleanup(result) is result
    with pytest.raises(gk.NoChangeError) as err:
        gk.cleanup.__wrapped__(result)  # type: ignore[attr-defined]
    assert err.value.hint


def test_cleanup_of_an_unsorted_graph_keeps_every_live_node() -> None:
    model = _with_dead_node(_dead_chain(0, read_at=None)).copy()
    model.graph.node.insert(0, helper.make_node("Neg", ["r"], ["n"], name="reader_first"))
    model.graph.output[0].name = "n"
    result = gk.cleanup(model, check=False)  # reader_first reads r before live makes it; dead is dead
    assert [n.name for n in result.graph.node] == ["reader_first", "live"]
    assert gk.validate(gk.toposort(result)).passed


def test_fold_constants_replaces_constant_subgraph_by_values() -> None:
    model = foldable_model()
    result = gk.fold_constants(model)
    assert [n.name for n in result.graph.node] == ["out"]
    folded = next(t for t in result.graph.initializer if t.name == "w3")
    np.testing.assert_allclose(onnx.numpy_helper.to_array(folded), np.arange(6).reshape(2, 3) * 2 + 1)
    assert outputs_close(model, result, seed=1)


def test_fold_constants_respects_the_size_threshold() -> None:
    b = gk.GraphBuilder("big")
    b.input("x", "float32", [256, 256])
    shape = b.initializer(np.array([256, 256], np.int64), "shape")
    big = b.node("ConstantOfShape", [shape], name="fill", outputs=["ones"],
                 value=np.array([1.0], np.float32))
    b.node("Add", ["x", big], name="add", outputs=["y"])
    b.output("y", "float32", [256, 256])
    model = b.build()
    assert gk.fold_constants(model, max_bytes=1024) is model
    with pytest.raises(gk.NoChangeError) as err:
        gk.fold_constants.__wrapped__(model, max_bytes=1024)  # type: ignore[attr-defined]
    assert "max_bytes" in err.value.hint
    folded = gk.fold_constants(model, max_bytes=2**20)
    assert [n.op_type for n in folded.graph.node] == ["Add"]


# ------------------------------------------------------------------------------------------- merge


def _tail(folder: Path) -> gk.Model:
    """z = relu(y @ w + c) on y[batch, 16], saved with external weights in ``folder``/model.data."""
    b = gk.GraphBuilder("tail")
    b.input("y", "float32", ["batch", 16])
    w = b.initializer(np.random.default_rng(9).standard_normal((16, 4)).astype(np.float32), "fc1.weight")
    c = b.initializer(np.linspace(-1, 1, 4).astype(np.float32), "fc1.bias")
    h = b.node("MatMul", ["y", w], name="/fc1/MatMul", outputs=["/fc1/MatMul_output_0"])
    h = b.node("Add", [h, c], name="/fc1/Add", outputs=["/fc1/Add_output_0"])
    b.node("Relu", [h], name="/relu/Relu", outputs=["z"])
    b.output("z", "float32", ["batch", 4])
    folder.mkdir(parents=True)
    return gk.save(b.build(), folder / "model.onnx", external=True, location="model.data", size_threshold=0)


def test_merge_with_prefixes_and_external_weights_from_two_folders(ext_copy: Path, tmp_path: Path) -> None:
    head = gk.load(ext_copy)
    tail = _tail(tmp_path / "other")
    with pytest.raises(gk.EditError) as err:
        gk.merge(head, tail, {"y": "y"})
    assert "prefixes" in err.value.hint
    merged = gk.merge(head, tail, {"y": "y"}, prefixes=("a/", "b/"))
    x = gk.make_feeds(head, feed_options=gk.FeedOptions(seed=2, shapes={"x": [3, 64]}))["x"]
    expected = gk.run(tail, {"y": gk.run(head, {"x": x})["y"]})["z"]
    np.testing.assert_allclose(gk.run(merged, {"a/x": x})["b/z"], expected, rtol=1e-5)
    (tmp_path / "out").mkdir()
    gk.save(merged, tmp_path / "out" / "merged.onnx")
    assert (tmp_path / "out" / "merged.data").is_file()
    shutil.rmtree(ext_copy.parent)
    shutil.rmtree(tmp_path / "other")
    again = gk.load(tmp_path / "out" / "merged.onnx")
    np.testing.assert_allclose(gk.run(again, {"a/x": x})["b/z"], expected, rtol=1e-5)


def test_merge_prefixes_rename_inside_subgraphs() -> None:
    second = load("if_outer_scope.onnx")
    b = gk.GraphBuilder("head")
    b.input("p", "float32", [2, 3])
    b.node("Neg", ["p"], name="neg", outputs=["x"])
    b.output("x", "float32", [2, 3])
    head = b.build()
    merged = gk.merge(head, second, {"x": "x"}, prefixes=("h/", "s/"))
    body_inputs = [n for g, _ in iter_graphs(merged.graph) for node in g.node for n in node.input]
    assert all(n.startswith(("h/", "s/")) for n in body_inputs if n)
    p = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_allclose(gk.run(merged, {"h/p": p})["s/y"], gk.run(second, {"x": -p})["y"], rtol=1e-6)


def test_merge_refuses_a_dtype_mismatch_and_unknown_names() -> None:
    b = gk.GraphBuilder("ints")
    b.input("i", "int64", [10, 10])
    b.node("Neg", ["i"], name="neg", outputs=["j"])
    b.output("j", "int64", [10, 10])
    with pytest.raises(gk.EditError) as err:
        gk.merge(load("linear_func.onnx"), b.build(), {"output": "i"})
    assert "float32" in str(err.value) and "int64" in str(err.value)
    with pytest.raises(gk.TensorNotFoundError) as err2:
        gk.merge(load("linear_func.onnx"), b.build(), {"outpt": "i"})
    assert "'output'" in err2.value.hint


# ------------------------------------------------------------------------------- graphsurgeon


def test_graphsurgeon_round_trip_keeps_folder_and_metadata(ext_copy: Path, small_external_kept: None) -> None:
    model = gk.load(ext_copy)
    graph = gk.to_graphsurgeon(model)
    relu = next(n for n in graph.nodes if n.op == "Relu")
    relu.op = "Sigmoid"
    weight = graph.tensors()["fc1.weight"]
    assert weight.values.shape == (64, 128)  # read lazily from the model's folder, then held in memory
    back = gk.from_graphsurgeon(graph, like=model)
    assert back.base_dir == model.base_dir
    assert back.proto.metadata_props == model.proto.metadata_props
    assert (back.proto.ir_version, back.proto.producer_name) == (model.proto.ir_version, model.proto.producer_name)
    external = {t.name for t in back.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL}
    assert external == {"fc1.bias", "fc2.weight", "fc2.bias"}  # untouched weights stay on disk
    x = gk.make_feeds(model, feed_options=gk.FeedOptions(seed=1, shapes={"x": [2, 64]}))
    expected = gk.run(gk.set_op_type(model, "/relu/Relu", "Sigmoid"), x)["y"]
    np.testing.assert_allclose(gk.run(back, x)["y"], expected, rtol=1e-6)


# ------------------------------------------------------------------------------------------ recipe


def test_recipe_replays_the_same_edits_as_the_api(tmp_path: Path) -> None:
    np.save(tmp_path / "bias.npy", np.full(16, 0.5, np.float32))
    recipe = tmp_path / "edits.yaml"
    recipe.write_text(
        "- op: set_op_type\n  node: /relu/Relu\n  op_type: Sigmoid\n"
        "- op: set_initializer\n  name: fc2.bias\n  value: {npy: bias.npy}\n"
        "- op: rename_tensor\n  old: y\n  new: logits\n"
        "- op: set_dims\n  tensor: x\n  dims: {0: 1}\n"
        "- op: initializer_to_input\n  name: fc1.bias\n"
    )
    model = load("ext_weights/model.onnx")
    by_recipe = gk.apply_recipe(model, recipe)
    by_api = gk.set_op_type(model, "/relu/Relu", "Sigmoid")
    by_api = gk.set_initializer(by_api, "fc2.bias", np.full(16, 0.5, np.float32))
    by_api = gk.rename_tensor(by_api, "y", "logits")
    by_api = gk.set_dims(by_api, "x", {0: 1})
    by_api = gk.initializer_to_input(by_api, "fc1.bias")
    assert by_recipe.proto.SerializeToString(deterministic=True) == by_api.proto.SerializeToString(deterministic=True)


def test_recipe_steps_are_checked_before_any_edit() -> None:
    model = load("linear_func.onnx")
    with pytest.raises(gk.UsageError) as err:
        gk.apply_recipe(model, [{"op": "set_op_type", "node": "Add", "op_type": "Sub"}, {"op": "set_op_typ"}])
    assert "step 2" in str(err.value) and "set_op_type" in err.value.hint
    with pytest.raises(gk.UsageError) as err:
        gk.apply_recipe(model, [{"op": "rename_tensor", "old": "c", "neww": "d"}])
    assert "'neww'" in str(err.value) and "new" in err.value.hint


def test_recipe_no_op_step_is_a_note_and_only_a_no_op_edit_is_refused() -> None:
    model = load("linear_func.onnx")
    steps = [{"op": "set_op_type", "node": "Add", "op_type": "Sub"}, {"op": "set_op_type", "node": "Add", "op_type": "Sub"}]
    assert gk.apply_recipe(model, steps).graph.node[1].op_type == "Sub"
    assert gk.apply_recipe(model, [*steps[:1], {"op": "cleanup"}]).graph.node[1].op_type == "Sub"
    result, done = run_steps(model, parse_steps(steps))
    assert [d.changed for d in done] == [True, False] and result.graph.node[1].op_type == "Sub"
    assert done[1].note.startswith("step 2 (set_op_type): ") and "changes nothing" in done[1].note
    nothing = parse_steps([{"op": "cleanup"}, {"op": "rename_tensor", "old": "x", "new": "x"}])
    with pytest.raises(gk.NoChangeError) as err:
        run_steps(model, nothing)
    assert "none of the 2 steps changes anything: step 1 (cleanup)" in str(err.value)
    assert "allow_noop=True" in (err.value.hint or "") and "--allow-noop" in (err.value.cli_hint or "")
    with pytest.raises(gk.NoChangeError) as single:
        run_steps(model, parse_steps([{"op": "cleanup"}]))
    assert str(single.value).startswith("cleanup changes nothing")
    _, done = run_steps(model, nothing, allow_noop=True)
    assert [d.changed for d in done] == [False, False]


def test_no_op_edits_return_the_input_model_itself() -> None:
    model = load("linear_func.onnx")
    assert gk.rename_tensor(model, "x", "x") is model
    assert gk.rename_node(model, model.graph.node[0].name, model.graph.node[0].name) is model
    assert gk.cleanup(model) is model
    assert gk.apply_recipe(model, [{"op": "cleanup"}]) is model
    assert gk.set_op_type(model, model.graph.node[1].name, "Sub") is not model
    assert gk.set_op_type(model, "Add", "Add") is model and gk.set_op_type(model, "Add", "Add", "ai.onnx") is model
    assert gk.replace_op(model, "Add", "Add") is model


_WITH_FUNCTION = """
<ir_version: 8, opset_import: ["" : 17, "local" : 1]>
g (float[4] x) => (float[4] y) {
    t = local.Block(x)
    y = Relu(t)
}
<domain: "local", opset_import: ["" : 17]>
Block (a) => (b) {
    scaled = Mul(a, a)
    kept = Identity(scaled)
    b = LeakyRelu<alpha = 0.5>(kept)
}
"""


def test_nodes_inside_local_functions_are_addressable() -> None:
    model = gk.parse_model(_WITH_FUNCTION)
    x = np.array([-2.0, -1.0, 1.0, 2.0], np.float32)
    changed = gk.set_attribute(model, "Block/LeakyRelu#0", "alpha", 0.25)
    assert next(a.f for a in changed.proto.functions[0].node[2].attribute if a.name == "alpha") == 0.25
    bypassed = gk.bypass_node(changed, "Block/#1")
    assert [n.op_type for n in bypassed.proto.functions[0].node] == ["Mul", "LeakyRelu"]
    sub = gk.set_op_type(bypassed, "local::Block/Mul#0", "Sub")
    np.testing.assert_allclose(gk.run(sub, {"x": x})["y"], np.zeros(4, np.float32))
    np.testing.assert_allclose(gk.run(bypassed, {"x": x})["y"], x * x)
    assert model.proto.functions[0].node[1].op_type == "Identity"  # (the input is unchanged)
    with pytest.raises(gk.EditError) as err:
        gk.set_attribute(model, "Block/LeakyRelu#5", "alpha", 0.1)
    assert "function 'Block' of model 'g' has 1 LeakyRelu nodes; there is no LeakyRelu#5" in str(err.value)
    with pytest.raises(gk.NodeNotFoundError) as unknown:
        gk.set_attribute(model, "Block/kep", "alpha", 0.1)
    assert "no node of function 'Block' named 'kep'" in str(unknown.value)


_FUNCTION_WITH_CONSTANT = """
<ir_version: 8, opset_import: ["" : 17, "local" : 1]>
g (float[4] x) => (float[4] y) {
    t = local.Block(x)
    y = Relu(t)
}
<domain: "local", opset_import: ["" : 17]>
Block (a) => (b) {
    two = Constant<value = float[1] {2.0}>()
    scaled = Mul(a, two)
    kept = Identity(scaled)
    spare = Neg(a)
    b = LeakyRelu<alpha = 0.5>(kept)
}
"""


def test_every_node_edit_reaches_a_local_functions_nodes() -> None:
    model = gk.parse_model(_FUNCTION_WITH_CONSTANT)
    x = np.array([-2.0, -1.0, 1.0, 2.0], np.float32)
    np.testing.assert_allclose(gk.run(model, {"x": x})["y"], [0, 0, 2, 4])
    renamed = gk.rename_node(model, "Block/Neg#0", "spare_neg")
    assert [n.name for n in renamed.proto.functions[0].node] == ["", "", "", "spare_neg", ""]
    removed = gk.remove_node(renamed, "Block/spare_neg")
    assert [n.op_type for n in removed.proto.functions[0].node] == ["Constant", "Mul", "Identity", "LeakyRelu"]
    default_alpha = gk.remove_attribute(removed, "local::Block/#3", "alpha")  # LeakyRelu's default alpha, 0.01
    np.testing.assert_allclose(gk.run(default_alpha, {"x": x})["y"], [0, 0, 2, 4])
    leaky = gk.set_op_type(default_alpha, "Block/LeakyRelu#0", "Neg")
    np.testing.assert_allclose(gk.run(leaky, {"x": x})["y"], [4, 2, 0, 0])
    with pytest.raises(gk.EditError) as err:
        gk.remove_node(model, "Block/Mul#0", downstream=True)
    assert "would remove an output of function 'Block'" in str(err.value)
    with pytest.raises(gk.EditError) as taken:
        gk.rename_node(renamed, "Block/#0", "spare_neg")
    assert "'spare_neg' is already used" in str(taken.value)
    assert model.proto.functions[0].node[3].name == ""  # (the input is unchanged)


def test_tensor_edits_inside_a_local_function_work_or_say_what_does() -> None:
    model = gk.parse_model(_FUNCTION_WITH_CONSTANT)
    x = np.array([-2.0, -1.0, 1.0, 2.0], np.float32)
    held = gk.rename_tensor(model, "Block/kept", "held")
    assert [list(n.output) for n in held.proto.functions[0].node][2] == ["held"]
    assert list(held.proto.functions[0].node[4].input) == ["held"]
    formal = gk.rename_tensor(model, "Block/a", "Block/inp")
    assert list(formal.proto.functions[0].input) == ["inp"]
    for renamed in (held, formal):
        np.testing.assert_allclose(gk.run(renamed, {"x": x})["y"], [0, 0, 2, 4])
    minus_one = gk.insert_node(model, "Block/kept", "Sub", inputs=[np.array([1.0], np.float32)])
    np.testing.assert_allclose(gk.run(minus_one, {"x": x})["y"], [0, 0, 1, 3])
    negated = gk.insert_node(model, "Block/b", "Neg")  # (the function's output keeps its name)
    assert list(negated.proto.functions[0].output) == ["b"] and negated.proto.functions[0].node[-1].op_type == "Neg"
    np.testing.assert_allclose(gk.run(negated, {"x": x})["y"], [2, 1, 0, 0])
    three = gk.set_initializer(model, "Block/two", [3.0])
    np.testing.assert_allclose(gk.run(three, {"x": x})["y"], [0, 0, 3, 6])
    with pytest.raises(gk.EditError) as untyped:
        gk.insert_node(model, "Block/kept", "Sub", inputs=[1.0])
    assert "cannot tell the dtype of 'kept'" in str(untyped.value) and "numpy.array" in (untyped.value.hint or "")
    refused = [lambda: gk.set_dims(model, "Block/kept", {0: 4}), lambda: gk.add_output(model, "Block/kept"),
               lambda: gk.remove_output(model, "Block/b"), lambda: gk.set_dtype(model, "Block/a", "float16"),
               lambda: gk.constant_to_input(model, "Block/two"), lambda: gk.initializer_to_input(model, "Block/two"),
               lambda: gk.input_to_initializer(model, "Block/a", [1.0])]
    for edit in refused:
        with pytest.raises(gk.EditError) as err:
            edit()
        assert "of local function 'Block' in model 'g'" in str(err.value)
        assert "rename_tensor, insert_node and set_initializer" in (err.value.hint or "")
        assert "--rename, --insert-after and --set-initializer" in (err.value.cli_hint or "")
    with pytest.raises(gk.TensorNotFoundError) as unknown:
        gk.rename_tensor(model, "Block/kep", "k")
    assert "did you mean 'Block/kept'" in (unknown.value.hint or "")
    assert model.proto.functions[0].input[0] == "a"  # (the input is unchanged)


def test_nodes_by_operator_and_position() -> None:
    model = load("whole_model.onnx")
    result = gk.rename_node(model, "Conv#4", "fifth_conv")
    changed = [old.name for n, old in zip(result.graph.node, model.graph.node) if n != old]
    assert changed == ["/convs2/convs2.1/Conv"] and result.graph.node[4].name == "fifth_conv"
    with pytest.raises(gk.EditError) as err:
        gk.set_attribute(model, "Conv#10", "group", 1)
    assert "has 10 Conv nodes; there is no Conv#10" in err.value.message and "Conv#9" in (err.value.hint or "")


@pytest.mark.parametrize("edit", ["insert_node", "set_initializer"])
def test_a_value_beyond_the_dtype_is_refused_not_made_inf(edit: str) -> None:
    import warnings

    model = gk.load(fixture("whole_model.onnx"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's "overflow encountered in cast" would raise here
        with pytest.raises(gk.GraphkitError) as caught:
            if edit == "insert_node":
                gk.insert_node(model, after="/Add_output_0", op_type="Mul", inputs=[1e300])
            else:
                gk.set_initializer(model, tensor="convs1.0.bias", value=[1e39, 0.0, 0.0])
    assert "float32" in str(caught.value) and "beyond its range (at most 3.403e+38" in str(caught.value)


def test_insert_node_with_a_value_in_an_ir3_model_lists_the_new_initializer_as_an_input() -> None:
    # before IR version 4 every initializer must also be a graph input
    graph = onnx.helper.make_graph([onnx.helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                                   [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
                                   [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])])
    model = gk.Model(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 9)], ir_version=3))
    edited = gk.insert_node(model, "y", "Add", inputs=[np.float32(1)])
    assert [i.name for i in edited.lazy_proto.graph.input] == ["x", "y/Add/input_1"]
    out = gk.run(edited, {"x": np.array([-1, 2], np.float32)})
    np.testing.assert_array_equal(out["y"], [1, 3])
