"""convert_opset: up and down, graphkit's own rewrites where ONNX's converter has no adapter; values equal."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from conftest import LIGHT, fixture
from onnx.reference import ReferenceEvaluator

import graphkit as gk
from graphkit.cli import main

CASES = {
    # name: (model text at the lower opset, lower, higher)
    "reducesum": ('(float[2,3] x) => (float[2,1] y) { y = ReduceSum <keepdims=1, axes=[1]> (x) }', 11, 13),
    "reducemean": ('(float[2,3] x) => (float[1,3] y) { y = ReduceMean <axes=[0]> (x) }', 13, 18),
    "squeeze": ('(float[2,1] x) => (float[2] y) { y = Squeeze <axes=[1]> (x) }', 11, 13),
    "unsqueeze": ('(float[2] x) => (float[2,1] y) { y = Unsqueeze <axes=[1]> (x) }', 11, 13),
    "split": ('(float[4] x) => (float[1] y, float[3] z) { y, z = Split <axis=0, split=[1,3]> (x) }', 11, 13),
    "clip": ('(float[4] x) => (float[4] y) { y = Clip <min=0.25, max=0.5> (x) }', 6, 11),
    "pad": ('(float[4] x) => (float[7] y) { y = Pad <pads=[1,2], value=1.5> (x) }', 2, 11),
    "resize": ('(float[1,1,2,2] x) => (float[1,1,4,4] y) { s = Constant <value = float[4] {1.0,1.0,2.0,2.0}> () '
               '\n y = Resize <mode="nearest"> (x, s) }', 10, 11),
    "reshape": ('(float[2,3] x) => (float[3,2] y) { s = Constant <value = int64[2] {3, 2}> () \n'
                'y = Reshape (x, s) }', 13, 14),
    "batchnorm": ('(float[1,2,3] x, float[2] g, float[2] b, float[2] m, float[2] v) => (float[1,2,3] y) '
                  '{ y = BatchNormalization <epsilon=0.01> (x, g, b, m, v) }', 9, 15),
    "dropout": ('(float[2,3] x) => (float[2,3] y) { y = Dropout <ratio=0.25> (x) }', 10, 13),
    "maxpool": ('(float[1,1,4,4] x) => (float[1,1,2,2] y) { y = MaxPool <kernel_shape=[2,2], strides=[2,2]> (x) }',
                8, 12),
    "averagepool": ('(float[1,1,4,4] x) => (float[1,1,3,3] y) { y = AveragePool <kernel_shape=[2,2]> (x) }', 7, 19),
    "add_broadcast": ('(float[2,3] x, float[3] b) => (float[2,3] y) { y = Add <broadcast=1> (x, b) }', 6, 7),
}


def _model(text: str, version: int) -> gk.Model:
    return gk.parse_model(f'<ir_version: 7, opset_import: ["" : {version}]> g {text}')


def _same(a: gk.Model, b: gk.Model, *, rtol: float = 0.0) -> None:
    feeds = gk.make_feeds(a, feed_options=gk.FeedOptions(seed=5))
    want, got = gk.run(a, feeds), gk.run(b, feeds)
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=rtol, atol=0)


def _ops(model: gk.Model) -> list[str]:
    return [n.op_type for n in model.lazy_proto.graph.node]


# (shape, axis or None for the default): the axis family's cases on both sides of opset 13
AXIS_CASES = {
    "middle_axis": ([2, 3, 4], 1),       # the two meanings differ: a rewrite each way
    "default_axis": ([2, 3, 4], None),   # default 1 before 13, -1 from 13
    "first_axis": ([2, 3, 4], 0),
    "negative_axis": ([2, 3, 4], -2),
    "trailing_ones": ([2, 5, 1, 1], 1),  # squeezenet's: the same sets, only the axis written out
    "last_axis": ([3, 4], 1),
}


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("case", sorted(AXIS_CASES))
@pytest.mark.parametrize("start", [12, 13])
def test_axis_family_keeps_its_values_up_and_down_across_13(op: str, case: str, start: int) -> None:
    shape, axis = AXIS_CASES[case]
    dims = ",".join(map(str, shape))
    attr = f" <axis={axis}>" if axis is not None else ""
    model = _model(f"(float[{dims}] x) => (float[{dims}] y) {{ y = {op}{attr} (x) }}", start)
    other = 13 if start == 12 else 12
    there = gk.convert_opset_with_report(model, other)
    onnx.checker.check_model(there.model.lazy_proto, full_check=True)
    _same(model, there.model, rtol=1e-6)
    rewritten = _ops(there.model) != [op]
    assert rewritten == (case not in ("trailing_ones", "last_axis")
                         and not (case == "default_axis" and start == 13)), _ops(there.model)
    assert there.rewritten == ((f"main graph: #0 ({op})",) if rewritten or axis is None
                               else ())  # (a default axis is written out)
    back = gk.convert_opset(there.model, start)
    onnx.checker.check_model(back.lazy_proto, full_check=True)
    _same(model, back, rtol=1e-6)


def test_axis_family_below_11_takes_a_non_negative_axis() -> None:
    model = _model("(float[2,3,4] x) => (float[2,3,4] y) { y = Softmax <axis=-2> (x) }", 13)
    down = gk.convert_opset(model, 10)
    assert [list(a.ints) for n in down.lazy_proto.graph.node for a in n.attribute if a.name == "perm"] \
        == [[0, 2, 1], [0, 2, 1]]
    assert [a.i for n in down.lazy_proto.graph.node for a in n.attribute if a.name == "axis"] == [2]
    _same(model, down, rtol=1e-6)


def test_axis_family_down_needs_the_rank_and_says_so() -> None:
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Softmax", ["r"], ["y"], axis=0)],
                              "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],  # (rank unknown)
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = gk.Model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8))
    with pytest.raises(gk.EditError) as err:
        gk.convert_opset(model, 12)
    assert "(Softmax)" in str(err.value) and "rank of 'r' is unknown" in str(err.value)
    assert "--fixed" in (err.value.cli_hint or "") and "set_dims" in (err.value.hint or "")


def test_light_squeezenet_softmax_keeps_its_values_at_13() -> None:
    model = gk.load(LIGHT / "light_squeezenet.onnx")  # opset 9, Softmax on [1, 1000, 1, 1] at the default axis 1
    up = gk.convert_opset(model, 13)
    softmax = next(n for n in up.lazy_proto.graph.node if n.op_type == "Softmax")
    assert [(a.name, a.i) for a in softmax.attribute] == [("axis", 1)] and "Flatten" not in _ops(up)
    _same(model, up)


def test_every_node_an_older_opset_lacks_is_named_and_nothing_returned() -> None:
    model = gk.load(LIGHT / "light_squeezenet.onnx")
    missing = [k for k, n in enumerate(model.lazy_proto.graph.node) if n.op_type == "ConstantOfShape"]
    with pytest.raises(gk.EditError) as err:
        gk.convert_opset(model, 8)
    message = str(err.value)
    assert f"cannot convert {len(missing)} node(s)" in message
    assert "ConstantOfShape does not exist before opset 9" in message
    assert all(f"#{k} (ConstantOfShape)" in message for k in missing)
    assert "choose opset 9 or later" in err.value.hint


def test_a_type_the_older_operator_does_not_take_is_named() -> None:
    model = _model('(float[2] x) => (float[4] y) { r = Constant <value = int64[1] {2}> ()\n y = Tile (x, r) }', 9)
    with pytest.raises(gk.EditError) as err:
        gk.convert_opset(model, 7)
    assert "#0 (Constant)" in str(err.value) and "its output 'r' is tensor(int64), which Constant does not take " \
        "in opset 7" in str(err.value)
    _same(model, gk.convert_opset(model, 11))  # (and where it takes it, the values stay)


def test_nodes_missing_in_bodies_and_functions_are_named_too() -> None:
    model = gk.parse_model("""<ir_version: 8, opset_import: ["" : 13, "local" : 1]>
        g (bool c, float[2] x) => (float[2] y) {
            y = If (c) <then_branch = t () => (float[2] a) { a = local.Act (x) },
                        else_branch = e () => (float[2] b) { b = Einsum <equation = "i->i"> (x) }>
        }
        <domain: "local", opset_import: ["" : 13]> Act (v) => (w) { w = Einsum <equation = "i->i"> (v) }""")
    with pytest.raises(gk.EditError) as err:
        gk.convert_opset(model, 11)
    message = str(err.value)
    assert "Einsum does not exist before opset 12" in message
    assert "main graph > If.else_branch: #0 (Einsum)" in message and "function Act: #0 (Einsum)" in message


def test_an_operator_defined_as_a_function_is_expanded_in_bodies_and_local_functions_too() -> None:
    model = gk.parse_model("""<ir_version: 8, opset_import: ["" : 14, "local" : 1]>
        g (bool c, float[2] x) => (float[2] y) {
            y = If (c) <then_branch = t () => (float[2] a) { a = local.Act (x) },
                        else_branch = e () => (float[2] b) { b = HardSwish (x) }>
        }
        <domain: "local", opset_import: ["" : 14]> Act (v) => (w) { w = HardSwish (v) }""")
    report = gk.convert_opset_with_report(model, 13)
    onnx.checker.check_model(report.model.lazy_proto, full_check=True)
    assert sum("expanded into its ONNX function" in label for label in report.rewritten) == 2
    x = np.array([-4.0, -1.5, 2.0, 5.0], np.float32)[1:3]
    for c in (True, False):
        got = gk.run(report.model, {"c": np.array(c), "x": x})["y"]
        np.testing.assert_allclose(got, x * np.clip(x / 6 + 0.5, 0, 1), rtol=1e-6)


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_case_up_and_down_keeps_the_values(case: str) -> None:
    text, low, high = CASES[case]
    lower = _model(text, low)
    up = gk.convert_opset_with_report(lower, high)
    assert up.model.lazy_proto.opset_import[0].version == high
    onnx.checker.check_model(up.model.lazy_proto, full_check=True)
    down = gk.convert_opset_with_report(up.model, low)
    assert down.model.lazy_proto.opset_import[0].version == low
    onnx.checker.check_model(down.model.lazy_proto, full_check=True)
    if case == "add_broadcast":  # (ONNX Runtime runs no Add before opset 7: check the numbers directly)
        x, b = np.ones((2, 3), np.float32), np.arange(3, dtype=np.float32)
        np.testing.assert_array_equal(gk.run(up.model, {"x": x, "b": b})["y"], x + b)
        assert [a.name for a in down.model.lazy_proto.graph.node[0].attribute] == ["broadcast"]
        return
    _same(lower, up.model)
    _same(lower, down.model)


@pytest.mark.parametrize("case", ["reshape", "batchnorm", "dropout", "maxpool", "averagepool"])
def test_down_from_forms_the_converter_cannot_convert_down(case: str) -> None:
    text, low, high = CASES[case]
    up = gk.convert_opset(_model(text, low), high)
    assert not _changes_needed(up)
    down = gk.convert_opset_with_report(up, low)
    onnx.checker.check_model(down.model.lazy_proto, full_check=True)
    _same(_model(text, low), down.model)


def _changes_needed(model: gk.Model) -> bool:
    """Whether a node still has an attribute at the value that would block converting it down."""
    return any(a.name in ("allowzero", "training_mode", "ceil_mode") and a.i for n in model.lazy_proto.graph.node
               for a in n.attribute)


def test_down_refuses_what_the_older_form_lacks_naming_each_node() -> None:
    model = gk.parse_model("""<ir_version: 8, opset_import: ["" : 14]>
        g (float[2,3] x, float[1,1,4,4] p) => (float[3,2] y, float[1,1,2,2] q, float[1,1,2,2] r) {
            s = Constant <value = int64[2] {3, 0}> ()
            y = Reshape <allowzero=1> (x, s)
            q = MaxPool <kernel_shape=[2,2], strides=[2,2], ceil_mode=1> (p)
            r = MaxPool <kernel_shape=[2,2], strides=[2,2], dilations=[1,1]> (p)
        }""")
    with pytest.raises(gk.EditError) as err:
        gk.convert_opset(model, 9)
    message = str(err.value)
    assert message.startswith("cannot convert 2 node(s)")
    assert "allowzero=1 with a 0 in its shape has no form before opset 14 (a 0 there copies the input's dim): " \
        "#1 (Reshape)" in message
    assert "ceil_mode=1 has no form before opset 10: #2 (MaxPool)" in message and "#3" not in message
    assert "keep opset 14 or later" in err.value.hint


def test_dropout_down_below_10_drops_an_unread_mask_and_refuses_a_read_one() -> None:
    read = _model('(float[2,3] x) => (float[2,3] y, bool[2,3] k) { y, k = Dropout <ratio=0.25> (x) }', 10)
    with pytest.raises(gk.EditError, match=r"its output 'k' is tensor\(bool\), which Dropout does not take in opset 9"):
        gk.convert_opset(gk.convert_opset(read, 13), 9)  # (the mask is a graph output)
    quiet = _model('(float[2,3] x) => (float[2,3] y) { y, k = Dropout <ratio=0.25> (x) }', 10)
    down = gk.convert_opset(gk.convert_opset(quiet, 13), 9)
    assert [list(n.output) for n in down.lazy_proto.graph.node if n.op_type == "Dropout"] == [["y"]]
    _same(quiet, down)


FUNCTION_MODEL = """<ir_version: 8, opset_import: ["" : {v}, "local" : 1]>
    g (float[2,3,4] x) => (float[2,1,4] y, float[2,3,4] z) {{
        y = local.Reduce (x)
        z = local.Norm (x)
    }}
    <domain: "local", opset_import: ["" : {v}]>
    Reduce (v) => (w) {{
        {reduce}
        c = Clip (r, lo, hi)
        w = Softmax <axis=-1> (c)
    }}
    <domain: "local", opset_import: ["" : {v}]>
    Norm (v) => (w) {{ w = Softmax <axis={axis}> (v) }}"""


def test_local_functions_convert_up_and_down() -> None:
    high = gk.parse_model("""<ir_version: 8, opset_import: ["" : 13, "local" : 1]>
        g (float[2,3,4] x) => (float[2,1,4] y) { y = local.Reduce (x) }
        <domain: "local", opset_import: ["" : 13]>
        Reduce (v) => (w) {
            a = Constant <value = int64[1] {1}> ()
            r = ReduceSum <keepdims=1> (v, a)
            lo = Constant <value = float {-0.5}> ()
            hi = Constant <value = float {0.5}> ()
            w = Clip (r, lo, hi)
        }""")
    down = gk.convert_opset_with_report(high, 10)
    onnx.checker.check_model(down.model.lazy_proto, full_check=True)
    reduce = down.model.lazy_proto.functions[0]
    assert [(n.op_type, [a.name for a in n.attribute]) for n in reduce.node] \
        == [("ReduceSum", ["keepdims", "axes"]), ("Clip", ["min", "max"])]  # (their Constants dropped)
    assert down.rewritten == ("function Reduce: #1 (ReduceSum)", "function Reduce: #4 (Clip)")
    _same(high, down.model)
    again = gk.convert_opset(down.model, 13)
    onnx.checker.check_model(again.lazy_proto, full_check=True)
    _same(high, again)


def test_a_local_function_softmax_goes_up_without_shapes_and_down_with_its_calls_shapes() -> None:
    low_text = "r = ReduceSum <keepdims=1, axes=[1]> (v)\n c0 = Identity (r)\n lo = Constant <value = float {-0.5}> ()"
    low = gk.parse_model(FUNCTION_MODEL.format(v=12, reduce=low_text, axis=1).replace("c = Clip (r, lo, hi)",
                                                                              "c = Clip (r, lo)"))
    up = gk.convert_opset(low, 13)
    norm = next(f for f in up.lazy_proto.functions if f.name == "Norm")
    assert [n.op_type for n in norm.node] == ["Flatten", "Shape", "Softmax", "Reshape"]  # (no shapes in a body)
    _same(low, up, rtol=1e-6)
    high_text = low_text.replace("r = ReduceSum <keepdims=1, axes=[1]> (v)",
                                 "a = Constant <value = int64[1] {1}> ()\n r = ReduceSum <keepdims=1> (v, a)")
    high = gk.parse_model(FUNCTION_MODEL.format(v=13, axis=1, reduce=high_text).replace(
        "c = Clip (r, lo, hi)", "c = Clip (r, lo)"))
    onnx.checker.check_model(high.lazy_proto, full_check=True)  # (opset 13's ReduceSum takes its axes as an input)
    down = gk.convert_opset(high, 12)  # (the body's shapes come from the call: x is [2, 3, 4])
    norm = next(f for f in down.lazy_proto.functions if f.name == "Norm")
    assert [n.op_type for n in norm.node] == ["Transpose", "Softmax", "Transpose"]
    _same(high, down, rtol=1e-6)
    lone = gk.parse_model("""<ir_version: 8, opset_import: ["" : 13, "local" : 1]>
        g (float[2,3,4] x) => (float[2,3,4] y) { y = local.Outer (x) }
        <domain: "local", opset_import: ["" : 13, "local" : 1]> Outer (v) => (w) { w = local.Norm (v) }
        <domain: "local", opset_import: ["" : 13]> Norm (v) => (w) { w = Softmax <axis=1> (v) }""")
    with pytest.raises(gk.EditError) as err:
        gk.convert_opset(lone, 12)  # (Norm is called only from a function: its rank is not known)
    assert "function Norm: #0 (Softmax)" in str(err.value) and "rank of 'v' is unknown" in str(err.value)


def test_a_function_node_whose_attribute_comes_from_the_call_is_named() -> None:
    model = gk.parse_model("""<ir_version: 8, opset_import: ["" : 13, "local" : 1]>
        g (float[2,3] x) => (float[2,3] y) { y = local.Scale <alpha = 0.5> (x) }
        <domain: "local", opset_import: ["" : 13]>
        Scale <alpha> (v) => (w) {
            a = Constant <value_float: float = @alpha> ()
            w = Mul (v, a)
        }""")
    with pytest.raises(gk.EditError) as err:
        gk.convert_opset(model, 11)
    assert "function Scale: #0 (Constant)" in str(err.value) and "['value_float'] come from the function's call" \
        in str(err.value)
    _same(model, gk.convert_opset(model, 12))  # (where Constant keeps its form)


def test_own_rewrites_move_axes_between_attribute_and_input() -> None:
    text, low, high = CASES["reducemean"]
    up = gk.convert_opset_with_report(_model(text, low), high)
    node = next(n for n in up.model.lazy_proto.graph.node if n.op_type == "ReduceMean")
    assert len(node.input) == 2 and not [a for a in node.attribute if a.name == "axes"]
    assert up.rewritten == ("main graph: #0 (ReduceMean)",)
    down = gk.convert_opset(up.model, low)
    node = next(n for n in down.lazy_proto.graph.node if n.op_type == "ReduceMean")
    assert list(node.input) == ["x"] and [list(a.ints) for a in node.attribute if a.name == "axes"] == [[0]]


def test_bodies_convert_too() -> None:
    model = gk.load(fixture("if_outer_scope.onnx"))  # opset 17: ReduceSum with axes as input, inside and out
    down = gk.convert_opset_with_report(model, 12)
    assert down.model.lazy_proto.opset_import[0].version == 12
    onnx.checker.check_model(down.model.lazy_proto, full_check=True)
    _same(model, down.model)
    _same(model, gk.convert_opset(down.model, 17))


def test_an_axes_input_computed_at_run_time_is_named_and_nothing_returned() -> None:
    model = gk.parse_model("""<ir_version: 8, opset_import: ["" : 13]>
        g (float[2,3] x, int64[1] a) => (float[2,1] y) { y = ReduceSum <keepdims=1> (x, a) }""")
    with pytest.raises(gk.EditError) as err:
        gk.convert_opset(model, 11)
    assert "(ReduceSum)" in str(err.value) and "'a'" in str(err.value) and "run time" in str(err.value)
    assert "--fold-constants" in (err.value.cli_hint or "") and "fold_constants" in (err.value.hint or "")


def test_resize_down_refuses_coordinates_opset_10_lacks() -> None:
    model = gk.load(fixture("srcnn.onnx"))
    with pytest.raises(gk.EditError, match="opset 10's Resize"):
        gk.convert_opset(model, 10)


@pytest.mark.parametrize("target", [11, 21])
def test_external_weights_stay_on_disk_up_and_down(ext_copy: Path, target: int) -> None:
    model = gk.load(ext_copy)  # (opset 17)
    converted = gk.convert_opset(model, target)
    assert converted.has_external_data and converted.base_dir == model.base_dir
    _same(model, converted)
    back = gk.convert_opset(converted, 17)
    assert back.has_external_data and back.base_dir == model.base_dir
    _same(model, back)


@pytest.mark.parametrize("name", ["if_outer_scope.onnx", "loop_scan.onnx"])
@pytest.mark.parametrize("target", [12, 21])
def test_bodies_convert_up_and_down(name: str, target: int) -> None:
    model = gk.load(fixture(name))  # (opset 17)
    there = gk.convert_opset(model, target)
    onnx.checker.check_model(there.lazy_proto, full_check=True)
    _same(model, there)
    _same(model, gk.convert_opset(there, 17))


@pytest.mark.slow
@pytest.mark.parametrize("target", [10, 13, 18, 21])
@pytest.mark.parametrize("path", sorted(LIGHT.glob("light_*.onnx")), ids=lambda p: p.stem)
def test_light_models_up_and_back_down_keep_their_values(path: Path, target: int) -> None:
    model = gk.load(path)  # (opset 9)
    up = gk.convert_opset(model, target)
    onnx.checker.check_model(up.lazy_proto, full_check=True)
    _same(model, up, rtol=1e-6)
    down = gk.convert_opset(up, 9)
    onnx.checker.check_model(down.lazy_proto, full_check=True)
    _same(model, down, rtol=1e-6)


def test_same_version_is_a_noop(whole_model: gk.Model) -> None:
    assert gk.convert_opset(whole_model, 17) is whole_model
    with pytest.raises(gk.NoChangeError):
        gk.convert_opset_with_report(whole_model, 17)


def test_cli_convert_opset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "clip6.onnx"
    gk.save(_model(CASES["clip"][0], 6), source)
    out = tmp_path / "clip13.onnx"
    assert main(["convert", str(source), str(out), "--opset", "13", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["source"] == 6 and report["target"] == 13 and report["max_abs_error"] == 0
    assert gk.load(out).lazy_proto.opset_import[0].version == 13
    bad = gk.parse_model("""<ir_version: 8, opset_import: ["" : 13]>
        g (float[2,3] x, int64[1] a) => (float[2,1] y) { y = ReduceSum <keepdims=1> (x, a) }""")
    gk.save(bad, tmp_path / "bad.onnx")
    assert main(["convert", str(tmp_path / "bad.onnx"), str(tmp_path / "no.onnx"), "--opset", "11"]) == 2
    assert not (tmp_path / "no.onnx").exists() and "ReduceSum" in capsys.readouterr().err


def test_set_opset_refuses_a_relabel_the_nodes_do_not_fit_and_points_at_convert() -> None:
    text, low, high = CASES["add_broadcast"]
    with pytest.raises(gk.EditError) as err:
        gk.set_opset(_model(text, low), "", high)
    assert "(Add)" in str(err.value) and "broadcast" in str(err.value)
    assert "convert IN OUT --opset 7" in (err.value.cli_hint or "") and "convert_opset(model, 7)" in (err.value.hint or "")
    converted = gk.convert_opset(_model(text, low), high)  # what the hint offers
    x, b = np.ones((2, 3), np.float32), np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(gk.run(converted, {"x": x, "b": b})["y"], x + b)


def _backend_folders() -> list[Path]:
    data = LIGHT.parent
    return sorted(p for kind in ("pytorch-converted", "pytorch-operator", "simple") for p in (data / kind).glob("test_*")
                  if (p / "model.onnx").exists() and (p / "test_data_set_0").is_dir())


def _tensors(folder: Path, kind: str) -> list[np.ndarray]:
    values = []
    for path in sorted((folder / "test_data_set_0").glob(f"{kind}_*.pb"), key=lambda p: int(p.stem.split("_")[1])):
        tensor = onnx.TensorProto()
        tensor.ParseFromString(path.read_bytes())
        values.append(onnx.numpy_helper.to_array(tensor))
    return values


@pytest.mark.slow
@pytest.mark.parametrize("folder", _backend_folders(), ids=lambda p: p.name)
def test_backend_models_convert_to_every_era_with_their_values_or_name_the_node(folder: Path) -> None:
    model = gk.load(folder / "model.onnx")
    graph = model.lazy_proto.graph
    names = [v.name for v in graph.input if v.name not in {t.name for t in graph.initializer}]
    feeds = dict(zip(names, _tensors(folder, "input")))
    source = model.lazy_proto.opset_import[0].version
    try:
        want = gk.run(model, feeds)
    except gk.GraphkitError:
        if source >= 7:
            pytest.skip("ONNX Runtime cannot run the original")
        # (older than ONNX Runtime runs: the values the test data expects)
        want = dict(zip((o.name for o in graph.output), _tensors(folder, "output")))
    converted = 0
    for target in (7, 9, 11, 13, 18, 21):
        if target == source:
            continue
        try:
            other = gk.convert_opset(model, target)
        except gk.EditError as err:  # (refused: the node is named, with the operator)
            assert re.search(r": (\S+|#\d+) \(\w+\)", str(err)), str(err)
            continue
        onnx.checker.check_model(other.lazy_proto, full_check=True)
        got = gk.run(other, feeds)
        for name, value in want.items():
            if np.asarray(value).dtype.kind in "fc":
                np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-6, err_msg=f"opset {target}")
            else:
                np.testing.assert_array_equal(got[name], value, err_msg=f"opset {target}")
        converted += 1
    assert converted or source in (7, 9, 11, 13, 18, 21)


# Before opset 7, binary operators broadcast B to A by attribute ("axis" places B inside A) and PRelu
# applies a slope [C] per channel; ONNX's converter asserts on a non-suffix axis (the bias Add of an
# N x C x L tensor as PyTorch exported it then) and writes PRelu's slope unchanged.
LEGACY = {
    "bias_axis_1": ("(float[2,3,4] a, float[3] b) => (float[2,3,4] c) { c = Add <broadcast=1, axis=1> (a, b) }",
                    lambda a, b: a + b.reshape(3, 1)),
    "axis_0": ("(float[2,3] a, float[2] b) => (float[2,3] c) { c = Mul <broadcast=1, axis=0> (a, b) }",
               lambda a, b: a * b.reshape(2, 1)),
    "size1_dims": ("(float[2,3] a, float[2,1] b) => (float[2,3] c) { c = Sub <broadcast=1, axis=0> (a, b) }",
                   lambda a, b: a - b),
    "suffix": ("(float[2,3] a, float[3] b) => (float[2,3] c) { c = Div <broadcast=1> (a, b) }",
               lambda a, b: a / b),
    "prelu_per_channel": ("(float[2,3,3] a, float[3] b) => (float[2,3,3] c) { c = PRelu (a, b) }",
                          lambda a, b: np.where(a > 0, a, a * b.reshape(3, 1))),
}


@pytest.mark.parametrize("case", sorted(LEGACY))
@pytest.mark.parametrize("target", [7, 11, 13])
def test_legacy_broadcast_converts_up_with_the_old_meaning(case: str, target: int) -> None:
    text, meaning = LEGACY[case]
    model = gk.parse_model(f'<ir_version: 3, opset_import: ["" : 6]> g {text}')
    converted = gk.convert_opset(model, target)
    onnx.checker.check_model(converted.lazy_proto, full_check=True)
    rng = np.random.default_rng(0)
    feeds = {i.name: rng.uniform(0.5, 2.0, [d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
             * rng.choice([-1, 1], [d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
             for i in model.lazy_proto.graph.input}
    np.testing.assert_allclose(gk.run(converted, feeds)["c"], meaning(feeds["a"], feeds["b"]), rtol=1e-6)


def test_a_constant_read_by_an_old_broadcast_keeps_its_shape_for_the_converter(tmp_path: Path) -> None:
    # graphkit converts the Constant itself, so ONNX's converter (whose Add 6->7 adapter needs the
    # shapes of what Add reads) got a graph without it: "Shape of input 1 is not available"
    model = gk.parse_model("""<ir_version: 3, opset_import: ["" : 6]>
        g (double[2,3] x) => (double[2,3] y) {
            k = Constant <value = double[1] {1.5}> ()
            s = Sigmoid (x)
            y = Add <broadcast = 1> (s, k)
        }""")
    converted = gk.convert_opset(model, 13)
    x = np.linspace(-1, 1, 6).reshape(2, 3)
    np.testing.assert_allclose(gk.run(converted, {"x": x})["y"], 1 / (1 + np.exp(-x)) + 1.5)
    assert not any(v.name == "k" for v in converted.lazy_proto.graph.value_info)  # (declared only for the converter)


def test_cli_converts_a_model_onnx_runtime_cannot_run_checking_it_on_the_reference_evaluator(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "old.onnx"
    gk.save(gk.parse_model(f'<ir_version: 3, opset_import: ["" : 6]> g {LEGACY["bias_axis_1"][0]}'), source)
    assert main(["run", str(source)]) == 2
    err = capsys.readouterr().err
    assert "opset 6" in err and f"convert {source} OUT.onnx --opset 13" in err  # (the hint says what runs it)
    assert main(["compare", str(source), str(source)]) == 2
    assert "compare --backend reference" in capsys.readouterr().err
    assert main(["compare", str(source), str(source), "--backend", "reference", "--candidate-backend", "reference"]) == 0
    out = tmp_path / "new.onnx"
    assert main(["convert", str(source), str(out), "--opset", "13"]) == 0
    captured = capsys.readouterr()
    assert "ReferenceEvaluator" in captured.err and "outputs equal to the input's" in captured.out
    assert main(["run", str(out)]) == 0


def test_cli_convert_checks_string_outputs_by_equality(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "strings.onnx"
    gk.save(gk.parse_model("""<ir_version: 7, opset_import: ["" : 10]>
        g (string[2] x) => (string[2] y) { y = StringNormalizer <case_change_action = "NONE"> (x) }"""), source)
    assert main(["convert", str(source), str(tmp_path / "out.onnx"), "--opset", "13",
                 "--value", 'x=["a", "b"]']) == 0, capsys.readouterr().err


@pytest.mark.parametrize(("source", "shape", "attrs", "target"), [
    (13, "[4,6]", "<axis=1>", 18),  # (an even Split: chunk() and GLU as exported; 18 needs num_outputs)
    (11, "[4,6]", "<axis=1>", 21),
    (18, "[4,6]", "<axis=1, num_outputs=2>", 17),
    (18, "[4,5]", "<axis=1, num_outputs=2>", 13),  # (18's smaller last chunk: sizes written out)
    (18, "[4,5]", "<axis=1, num_outputs=2>", 11),
])
def test_split_without_sizes_crosses_18_with_its_chunks(source: int, shape: str, attrs: str, target: int) -> None:
    model = _model(f"(float{shape} x) => (float[4,?] y, float[4,?] z) {{ y, z = Split {attrs} (x) }}", source)
    converted = gk.convert_opset(model, target)
    onnx.checker.check_model(converted.lazy_proto, full_check=True)
    _same(model, converted)


def test_split_into_chunks_of_an_unknown_axis_down_from_18_is_named() -> None:
    model = _model("(float[4,N] x) => (float[4,?] y, float[4,?] z) { y, z = Split <axis=1, num_outputs=2> (x) }", 18)
    with pytest.raises(gk.EditError, match=r"#0 \(Split\).*unknown size.*num_outputs=2"):
        gk.convert_opset(model, 17)


@pytest.mark.parametrize("body", ["y = Identity (x)", "y = Pow (x, x)"])
@pytest.mark.parametrize("target", [13, 11, 7])
def test_an_operator_that_only_widened_its_types_goes_down_as_it_is(body: str, target: int) -> None:
    # Identity 14/16 (sequences, optionals) and Pow 12 (integers): ONNX's converter has no adapter
    # down across them, so an opset-17 export with an Identity could not go down to 13
    model = _model(f"(float[2,3] x) => (float[2,3] y) {{ {body} }}", 17)
    converted = gk.convert_opset(model, target)
    onnx.checker.check_model(converted.lazy_proto, full_check=True)
    assert _ops(converted) == _ops(model)
    _same(model, converted)


def test_cli_convert_says_whose_run_failed(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "reshape_by_input.onnx"
    gk.save(_model("(float[6] x, int64[2] s) => (float[?, ?] y) { y = Reshape (x, s) }", 13), source)
    out = tmp_path / "out.onnx"
    assert main(["convert", str(source), str(out), "--opset", "14"]) == 2
    err = capsys.readouterr().err  # (the random 's' cannot reshape 6 values)
    assert "convert cannot check the result: the input model fails on the check's inputs" in err
    assert "--value NAME=JSON" in err and not out.exists()
    assert main(["convert", str(source), str(out), "--opset", "14", "--value", "s=[3, 2]"]) == 0

    import graphkit.cli.convert as verb

    real = verb.convert_opset_with_report

    def unrunnable(model: gk.Model, version: int) -> object:
        report = real(model, version)
        broken = gk.set_op_type(report.model, "#0", "Nothing", "com.example")
        return type(report)(broken, report.source, report.target, report.rewritten, report.converter)

    monkeypatch.setattr(verb, "convert_opset_with_report", unrunnable)
    assert main(["convert", str(source), str(tmp_path / "no.onnx"), "--opset", "14", "--value", "s=[3, 2]"]) == 2
    err = capsys.readouterr().err
    assert "the model converted to opset 14 fails where the input model runs" in err and not (tmp_path / "no.onnx").exists()


FUNCTION_OPS = {
    # op: (model text, its first version); a converter has no adapter below it: graphkit writes the
    # function ONNX defines the operator as (found converting a transformer with LayerNormalization to 13)
    "layernorm": ("(float[N,3,8] x, float[8] g, float[8] b) => (float[N,3,8] y) "
                  "{ y = LayerNormalization <axis=-1, epsilon=0.001> (x, g, b) }", 17),
    "gelu_tanh": ('(float[2,3,8] x) => (float[2,3,8] y) { y = Gelu <approximate="tanh"> (x) }', 20),
    "gelu": ("(float[2,3,8] x) => (float[2,3,8] y) { y = Gelu (x) }", 20),
    "hardswish": ("(float[2,3,8] x) => (float[2,3,8] y) { y = HardSwish (x) }", 14),
    "mish": ("(float[2,3,8] x) => (float[2,3,8] y) { y = Mish (x) }", 18),
}


@pytest.mark.parametrize("case", sorted(FUNCTION_OPS))
@pytest.mark.parametrize("target", [13, 11])
def test_an_operator_onnx_defines_as_a_function_goes_below_its_first_version(case: str, target: int) -> None:
    text, first = FUNCTION_OPS[case]
    model = _model(text, max(first, 17))
    report = gk.convert_opset_with_report(model, target)
    onnx.checker.check_model(report.model.lazy_proto, full_check=True)
    assert any("expanded into its ONNX function" in label for label in report.rewritten)
    assert all(n.op_type not in ("LayerNormalization", "Gelu", "HardSwish", "Mish", "CastLike")
               for n in report.model.lazy_proto.graph.node)
    feeds = gk.make_feeds(model, feed_options=gk.FeedOptions(seed=5, dims={"N": 3}))
    want, got = gk.run(model, feeds), gk.run(report.model, feeds)
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5, atol=1e-6)


def test_cli_convert_checks_by_whole_runs_where_compare_s_walk_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    # the check walks both models in fragments (bounded memory); the walk's pieces of a Scan whose body
    # reads outer constants failed in ONNX Runtime (the onnx wheel's expanded LinearAttention) where
    # both models run whole: the whole runs then decide
    import graphkit.cli.convert as verb

    def walk_fails(*args: object, **kwargs: object) -> object:
        raise gk.RuntimeFailure("running nodes 28-32 of 32 (from 'Scan'): Subgraph must have the shape set")

    monkeypatch.setattr(verb, "compare", walk_fails)
    source = tmp_path / "clip6.onnx"
    gk.save(_model(CASES["clip"][0], 6), source)
    assert main(["convert", str(source), str(tmp_path / "out.onnx"), "--opset", "13"]) == 0, capsys.readouterr().err
    assert "outputs equal to the input's" in capsys.readouterr().out


@pytest.mark.parametrize("target", [13, 10])
def test_pad_axes_go_below_18_as_pads_of_every_axis(target: int) -> None:
    model = _model('(float[2,3,4] x) => (float[2,5,5] y) <int64[4] p = {1, 0, 1, 1}, int64[2] a = {1, -1}> '
                   '{ y = Pad <mode = "constant"> (x, p, "", a) }', 18)
    converted = gk.convert_opset(model, target)
    onnx.checker.check_model(converted.lazy_proto, full_check=True)
    _same(model, converted)


def test_resize_goes_below_18_when_what_18_added_means_the_old_behaviour() -> None:
    def resize(scales: str, attrs: str) -> gk.Model:
        return _model(f"(float[1,1,2,2] x) => (float[1,1,4,4] y) <float[{scales.count(',') + 1}] s = {{{scales}}}> "
                      f'{{ y = Resize <mode = "nearest", {attrs}> (x, "", s) }}', 19)

    neutral = resize("1.0, 1.0, 2.0, 2.0", 'antialias = 0, keep_aspect_ratio_policy = "stretch", axes = [0, 1, 2, 3]')
    converted = gk.convert_opset(neutral, 13)
    onnx.checker.check_model(converted.lazy_proto, full_check=True)  # (the attributes stayed: invalid at 13)
    _same(neutral, converted)
    with pytest.raises(gk.EditError, match=r"#0 \(Resize\).*axes has no form before opset 18"):
        gk.convert_opset(resize("2.0, 2.0", "axes = [2, 3]"), 13)


def test_an_operator_whose_function_has_branches_or_is_deprecated_at_the_target() -> None:
    # AffineGrid's function reads its own names inside If branches: it is named, not written half-renamed
    affine = _model("(float[1,2,3] theta, int64[4] size) => (float[1,2,3,2] grid) "
                    "{ grid = AffineGrid <align_corners = 0> (theta, size) }", 20)
    with pytest.raises(gk.EditError, match=r"AffineGrid does not exist before opset 20"):
        gk.convert_opset(affine, 13)
    # GroupNormalization 18-20 is deprecated (a scale per group): 21's becomes its function's nodes
    group = _model("(float[2,4,3] x, float[4] s, float[4] b) => (float[2,4,3] y) "
                   "{ y = GroupNormalization <num_groups = 2> (x, s, b) }", 21)
    converted = gk.convert_opset(group, 19)
    onnx.checker.check_model(converted.lazy_proto, full_check=True)
    assert "GroupNormalization" not in _ops(converted)
    _same(group, converted, rtol=1e-5)


def test_cli_convert_checks_a_float16_output_within_about_one_unit_in_its_last_place(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a float16 Gelu written as its function's nodes differs from ONNX Runtime's kernel by 1.2e-4
    # (one float16 step near 0.1): the float32 tolerance refused it
    source = tmp_path / "gelu16.onnx"
    gk.save(gk.parse_model('<ir_version: 10, opset_import: ["" : 20]> g (float16[4,64] x) => (float16[4,64] y) '
                           '{ y = Gelu <approximate="tanh"> (x) }'), source)
    assert main(["convert", str(source), str(tmp_path / "out.onnx"), "--opset", "13", "--json"]) == 0, \
        capsys.readouterr().err
    assert 0 < json.loads(capsys.readouterr().out)["max_abs_error"] < 1e-3


def test_two_expanded_nodes_of_one_name_get_names_of_their_own() -> None:
    # (both LayerNormalizations named 'ln' were expanded into the same 'ln/...' tensors: not SSA)
    model = gk.parse_model("""<ir_version: 8, opset_import: ["" : 17]>
        g (float[2, 4] x) => (float[2, 4] y) <float[4] s = {1, 2, 3, 4}, float[4] b = {0, 1, 0, 1}> {
            h = LayerNormalization <axis = -1> (x, s, b)
            y = LayerNormalization <axis = -1> (h, s, b)
        }""")
    for node in model.proto.graph.node:
        node.name = "ln"
    converted = gk.convert_opset(model, 13)
    onnx.checker.check_model(converted.lazy_proto, full_check=True)
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)  # (ONNX Runtime refuses two nodes of one name)
    want = ReferenceEvaluator(model.proto).run(None, {"x": x})[0]
    np.testing.assert_allclose(ReferenceEvaluator(converted.lazy_proto).run(None, {"x": x})[0], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("source", "target"), [(8, 13), (11, 8)])
def test_scan_across_opset_9_is_named(source: int, target: int) -> None:
    # (Scan 8 has sequence_lens and a batch axis: the node was left as it was and the result was invalid)
    scan = 'Scan ("", initial, x)' if source < 9 else "Scan (initial, x)"
    batch = "1, " if source < 9 else ""
    model = gk.parse_model(f"""<ir_version: 7, opset_import: ["" : {source}]>
        g (float[{batch}2] initial, float[{batch}3, 2] x) => (float[{batch}2] y, float[{batch}3, 2] z) {{
            y, z = {scan} <num_scan_inputs = 1, body = body (float[2] sum_in, float[2] next) => (float[2] sum_out,
                                                                                           float[2] scan_out) {{
                sum_out = Add (sum_in, next)
                scan_out = Identity (sum_out)
            }}>
        }}""")
    with pytest.raises(gk.EditError, match=r"#0 \(Scan\).*Scan before opset 9 takes sequence_lens") as err:
        gk.convert_opset(model, target)
    assert "same side of opset 9" in err.value.hint


@pytest.mark.parametrize(("source", "body", "successor"), [
    (9, "y = Upsample <mode = \"nearest\"> (x, scales)", "Resize"),
    (10, "y = Scatter <axis = 2> (x, indices, updates)", "ScatterElements"),
])
def test_an_operator_deprecated_at_the_target_becomes_its_successor(source: int, body: str, successor: str) -> None:
    # (the node was kept as it was, deprecated at 13: the result failed the checker, the CLI blaming the model)
    model = gk.parse_model(f"""<ir_version: 7, opset_import: ["" : {source}]>
        g (float[1, 1, 2, 2] x) => (float[1, 1, {4 if 'Upsample' in body else 2}, {4 if 'Upsample' in body else 2}] y)
        <float[4] scales = {{1, 1, 2, 2}}, int64[1, 1, 2, 1] indices = {{1, 0}}, float[1, 1, 2, 1] updates = {{5, 6}}> {{
            {body}
        }}""")
    converted = gk.convert_opset(model, 13)
    onnx.checker.check_model(converted.lazy_proto, full_check=True)
    assert successor in _ops(converted) and _ops(model)[0] not in _ops(converted)
    _same(model, converted)


def test_cli_convert_says_an_invalid_result_is_the_conversion_s_not_the_model_s(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # (the hint was the checker's 'fix the node or tensor the checker names', blaming a model that passes it;
    # a converted MaxPool of opset 22 with ceil_mode fails ONNX's older shape inference so)
    from graphkit import _opset

    check = _opset._check_result

    def broken(original: gk.Model, result: gk.Model, target: int) -> None:
        result.proto.graph.node[0].input[0] = "nowhere"
        check(original, result, target)

    source = tmp_path / "relu.onnx"
    model = _model("(float[2] x) => (float[2] y) { y = Relu (x) }", 13)
    gk.save(model, source)
    monkeypatch.setattr(_opset, "_check_result", broken)
    out = tmp_path / "out.onnx"
    assert main(["convert", str(source), str(out), "--opset", "14"]) == 2
    err = capsys.readouterr().err
    assert "'nowhere'" in err and "the input model passes the checker, so the conversion to opset 14 made it" in err
    assert "hint: choose another version, and report it" in err and "Traceback" not in err and not out.exists()
    # the API never returns what the checker rejects either (it returned the invalid model)
    with pytest.raises(gk.InvalidModelError, match="so the conversion to opset 14 made it"):
        gk.convert_opset(model, 14)


def test_cli_convert_names_the_first_node_whose_values_differ(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # (nothing is written, so the hint to run compare on the two models could not be followed)
    from graphkit.cli import convert as cli_convert

    def wrong(model: gk.Model, version: int) -> Any:
        report = gk.convert_opset_with_report(model, version)
        next(n for n in report.model.proto.graph.node if n.name == "second").op_type = "Neg"
        return report

    source = tmp_path / "chain.onnx"
    model = _model("(float[4] x) => (float[4] y) { a = Relu (x) b = Relu (a) y = Sigmoid (b) }", 13)
    for node, name in zip(model.proto.graph.node, ("first", "second", "third")):
        node.name = name
    gk.save(model, source)
    monkeypatch.setattr(cli_convert, "convert_opset_with_report", wrong)
    out = tmp_path / "out.onnx"
    assert main(["convert", str(source), str(out), "--opset", "14"]) == 2
    err = capsys.readouterr().err
    assert "computes output 'y' differently" in err and "first at node 'second' (Neg), tensor 'b'" in err
    assert "hint: choose another version, and report it" in err and not out.exists()
