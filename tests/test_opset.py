"""convert_opset: up and down, graphkit's own rewrites where ONNX's converter has no adapter; values equal."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import fixture

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
    "add_broadcast": ('(float[2,3] x, float[3] b) => (float[2,3] y) { y = Add <broadcast=1> (x, b) }', 6, 7),
}


def _model(text: str, version: int) -> gk.Model:
    return gk.parse_model(f'<ir_version: 7, opset_import: ["" : {version}]> g {text}')


def _same(a: gk.Model, b: gk.Model) -> None:
    feeds = gk.make_feeds(a, feed_options=gk.FeedOptions(seed=5))
    want, got = gk.run(a, feeds), gk.run(b, feeds)
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value)


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


def test_own_rewrites_move_axes_between_attribute_and_input() -> None:
    text, low, high = CASES["reducemean"]
    up = gk.convert_opset_with_report(_model(text, low), high)
    node = next(n for n in up.model.lazy_proto.graph.node if n.op_type == "ReduceMean")
    assert len(node.input) == 2 and not [a for a in node.attribute if a.name == "axes"]
    assert up.rewritten == ("main graph: (unnamed) (ReduceMean)",)
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
    assert "--fold-constants" in err.value.hint


def test_resize_down_refuses_coordinates_opset_10_lacks() -> None:
    model = gk.load(fixture("srcnn.onnx"))
    with pytest.raises(gk.EditError, match="opset 10's Resize"):
        gk.convert_opset(model, 10)


def test_external_weights_stay_on_disk(ext_copy: Path) -> None:
    model = gk.load(ext_copy)
    version = model.lazy_proto.opset_import[0].version
    converted = gk.convert_opset(model, version - 1 if version > 13 else version + 1)
    assert converted.has_external_data and converted.base_dir == model.base_dir
    _same(model, converted)


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
    assert "convert IN OUT --opset 7" in err.value.hint
    converted = gk.convert_opset(_model(text, low), high)  # what the hint offers
    x, b = np.ones((2, 3), np.float32), np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(gk.run(converted, {"x": x, "b": b})["y"], x + b)
