"""GraphBuilder: bottom-up models in a few lines, sorted and checked."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import graphkit as gk


def test_linear_func_in_a_few_lines() -> None:
    b = gk.GraphBuilder("linear_func")
    a, x, c = (b.input(n, "float32", [10, 10]) for n in ("a", "x", "b"))
    b.output(b.node("Add", [b.node("Mul", [a, x]), c], outputs=["output"]), "float32", [10, 10])
    model = b.build()
    assert model.graph.name == "linear_func"
    assert [n.op_type for n in model.graph.node] == ["Mul", "Add"]
    rng = np.random.default_rng(0)
    feeds = {n: rng.standard_normal((10, 10)).astype(np.float32) for n in ("a", "x", "b")}
    out = gk.run(model, feeds)["output"]
    np.testing.assert_allclose(out, feeds["a"] * feeds["x"] + feeds["b"], rtol=1e-6)


def test_auto_names_are_unique_and_readable() -> None:
    b = gk.GraphBuilder()
    b.input("x", "float32", [2])
    y = b.node("Relu", ["x"])
    z = b.node("Relu", [y])
    b.output(z, "float32", [2])
    model = b.build()
    names = [n.name for n in model.graph.node]
    assert len(set(names)) == 2 and all(n.startswith("Relu_") for n in names)
    assert z.endswith("_output_0")


def test_named_dynamic_dims_and_dtypes() -> None:
    b = gk.GraphBuilder()
    b.input("ids", "int64", ["batch", "seq"])
    b.input("mask", np.bool_, ["batch", None])
    b.node("Cast", ["ids"], to=onnx.TensorProto.FLOAT, outputs=["f"])
    b.node("Cast", ["mask"], to=onnx.TensorProto.FLOAT, outputs=["m"])
    b.output(b.node("Mul", ["f", "m"]), "float32", ["batch", "seq"])
    summary = gk.summarize(b.build())
    assert [(s.name, s.dtype, s.shape) for s in summary.inputs] == [
        ("ids", "int64", ["batch", "seq"]),
        ("mask", "bool", ["batch", None]),
    ]


def test_initializers_constants_and_tensor_attributes() -> None:
    b = gk.GraphBuilder()
    b.input("x", "float32", [2, 3])
    w = b.initializer(np.ones((3, 4), np.float32), "w")
    k = b.constant(np.float32(2.0))
    y = b.node("MatMul", ["x", w])
    b.output(b.node("Mul", [y, k]), "float32", [2, 4])
    model = b.build()
    out = next(iter(gk.run(model, {"x": np.ones((2, 3), np.float32)}).values()))
    np.testing.assert_array_equal(out, np.full((2, 4), 6.0, np.float32))


def test_custom_domain_gets_an_opset_import_and_string_attr_named_name() -> None:
    b = gk.GraphBuilder()
    b.input("x", "float32", [1])
    b.node("Debug", ["x"], domain="my", attrs={"name": "x_0"}, outputs=["y"])
    b.output("y", "float32", [1])
    model = b.build()
    assert {o.domain: o.version for o in model.proto.opset_import}["my"] == 1
    assert model.graph.node[0].attribute[0].s == b"x_0"


def test_nodes_added_out_of_order_are_sorted() -> None:
    b = gk.GraphBuilder()
    b.input("x", "float32", [1])
    b.node("Neg", ["r"], outputs=["y"], name="late")
    b.node("Relu", ["x"], outputs=["r"], name="early")
    b.output("y", "float32", [1])
    assert [n.name for n in b.build().graph.node] == ["early", "late"]


def test_duplicate_names_and_bad_dtypes_are_errors() -> None:
    b = gk.GraphBuilder()
    b.input("x", "float32", [1])
    with pytest.raises(gk.UsageError, match="'x' is already used"):
        b.input("x", "float32", [1])
    with pytest.raises(gk.UsageError, match="unknown dtype"):
        b.input("y", "floaty", [1])


def test_invalid_graph_is_rejected_by_build() -> None:
    b = gk.GraphBuilder()
    b.input("x", "float32", [1])
    b.node("NoSuchOp", ["x"], outputs=["y"])
    b.output("y", "float32", [1])
    with pytest.raises(gk.InvalidModelError, match="NoSuchOp"):
        b.build()


def test_parse_model_from_text() -> None:
    model = gk.parse_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        linear_func (float[10,10] a, float[10,10] x, float[10,10] b) => (float[10,10] output) {
            c = Mul (a, x)
            output = Add (c, b)
        }"""
    )
    assert [n.op_type for n in model.graph.node] == ["Mul", "Add"]
    with pytest.raises(gk.InvalidModelError, match="parse"):
        gk.parse_model("not onnx text {")


def test_add_initializers_follows_the_ir_version_rules() -> None:
    from onnx import helper, numpy_helper

    from graphkit._build import add_initializers

    def model(ir_version: int) -> onnx.ModelProto:
        body = helper.make_graph([helper.make_node("Add", ["x", "one"], ["z"], name="add")], "then", [],
                                 [helper.make_tensor_value_info("z", onnx.TensorProto.FLOAT, [2])])
        other = helper.make_graph([helper.make_node("Identity", ["x"], ["w"], name="same")], "else", [],
                                  [helper.make_tensor_value_info("w", onnx.TensorProto.FLOAT, [2])])
        graph = helper.make_graph(
            [helper.make_node("If", ["c"], ["y"], name="if", then_branch=body, else_branch=other)], "g",
            [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2]),
             helper.make_tensor_value_info("c", onnx.TensorProto.BOOL, [])],
            [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)], ir_version=ir_version)

    for ir_version in (3, 7):
        proto = model(ir_version)
        body = next(a.g for a in proto.graph.node[0].attribute if a.name == "then_branch")
        add_initializers(body, [numpy_helper.from_array(np.ones(2, np.float32), "one")], ir_version=ir_version,
                         top=False)
        add_initializers(proto.graph, [numpy_helper.from_array(np.ones(2, np.float32), "unused")],
                         ir_version=ir_version, top=True)
        onnx.checker.check_model(proto, full_check=True)
        listed = [i.name for i in proto.graph.input]
        assert listed == (["x", "c", "unused"] if ir_version < 4 else ["x", "c"])
        assert [n.op_type for n in body.node] == (["Constant", "Add"] if ir_version < 4 else ["Add"])
        out = gk.run(gk.Model(proto), {"x": np.array([1, 2], np.float32), "c": np.array(True)})
        np.testing.assert_array_equal(out["y"], [2, 3])
