"""Edits refresh the declared types they make stale: value_info and graph outputs follow the edit,
the CLI says which output shapes changed, and an edit that cannot be typed is refused naming the node."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import fixture

import graphkit as gk
from graphkit._ort import run_session, session
from graphkit.cli import main

WHOLE = fixture("whole_model.onnx")
X = np.random.default_rng(0).standard_normal((1, 3, 20, 20)).astype(np.float32)


def _shape(model: gk.Model, name: str) -> list[int | str]:
    graph = model.lazy_proto.graph
    value = next(v for v in [*graph.output, *graph.value_info] if v.name == name)
    return [d.dim_value if d.HasField("dim_value") else d.dim_param for d in value.type.tensor_type.shape.dim]


def _run(model: gk.Model, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    onnx.checker.check_model(model.proto, full_check=True)
    sess = session(model, opt_level="disable")
    return run_session(sess, [o.name for o in sess.get_outputs()], feeds, model.name)


def _input_name(model: gk.Model) -> str:
    return model.lazy_proto.graph.input[0].name


def test_bypassing_a_shrinking_conv_retypes_the_output() -> None:
    model = gk.load(WHOLE)
    before = model.lazy_proto.SerializeToString()
    edited = gk.bypass_node(model, "/convs4/convs4.2/Conv")
    assert _shape(model, "output") == [1, 3, 4, 4] and _shape(edited, "output") == [1, 3, 6, 6]
    (out,) = _run(edited, {_input_name(model): X})
    assert out.shape == (1, 3, 6, 6)
    assert model.lazy_proto.SerializeToString() == before


def test_stale_value_info_is_rederived_after_an_edit() -> None:
    model = gk.infer_shapes(gk.load(WHOLE))  # every intermediate declared
    edited = gk.bypass_node(model, "/convs4/convs4.0/Conv")
    assert _shape(model, "/convs4/convs4.1/Conv_output_0") == [1, 3, 6, 6]
    assert _shape(edited, "/convs4/convs4.1/Conv_output_0") == [1, 3, 8, 8]
    assert _shape(edited, "output") == [1, 3, 6, 6]
    _run(edited, {_input_name(model): X})


def test_a_new_initializer_of_another_shape_retypes_what_follows() -> None:
    model = gk.parse_model("""
<ir_version: 8, opset_import: ["" : 17]>
g (float[1, 4] x) => (float[1, 4] y) <float[4] b = {1.0, 1.0, 1.0, 1.0}> {
  r = Relu(x)
  y = Add(r, b)
}
""")
    edited = gk.set_initializer(model, tensor="b", value=np.arange(3, dtype=np.float32).reshape(3, 1),
                                allow_reshape=True)
    assert _shape(edited, "y") == [3, 4]
    (out,) = _run(edited, {"x": np.ones((1, 4), np.float32)})
    np.testing.assert_array_equal(out, np.array([[1] * 4, [2] * 4, [3] * 4], np.float32))


def test_an_inserted_node_retypes_what_follows() -> None:
    model = gk.load(WHOLE)
    edited = gk.insert_node(model, "/convs4/convs4.1/Conv_output_0", "MaxPool",
                            attributes={"kernel_shape": [2, 2], "strides": [2, 2]}, name="pool")
    assert _shape(edited, "output") == [1, 3, 1, 1]
    (out,) = _run(edited, {_input_name(model): X})
    assert out.shape == (1, 3, 1, 1)


def test_removing_a_branch_keeps_the_other_outputs_typed() -> None:
    model = gk.infer_shapes(gk.load(WHOLE))
    exposed = gk.expose(model, ["/convs2/convs2.1/Conv_output_0"])
    edited = gk.remove_node(exposed, "/convs4/convs4.0/Conv", downstream=True)
    assert [o.name for o in edited.lazy_proto.graph.output] == ["/convs2/convs2.1/Conv_output_0"]
    assert not any(v.name.startswith("/convs4") for v in edited.lazy_proto.graph.value_info)
    _run(edited, {_input_name(model): X})


ZIPMAP = """
<ir_version: 8, opset_import: ["" : 17, "ai.onnx.ml" : 3]>
classifier (float[N, 3] x) => (seq(map(int64, float)) probabilities) {
  p = Softmax <axis = 1> (x)
  probabilities = ai.onnx.ml.ZipMap <classlabels_int64s = [0, 1, 2]> (p)
}
"""


def test_bypassing_zipmap_retypes_the_output_to_a_tensor() -> None:
    model = gk.parse_model(ZIPMAP)
    edited = gk.bypass_node(model, "#1")
    output = edited.lazy_proto.graph.output[0]
    assert output.name == "probabilities"
    assert output.type.WhichOneof("value") == "tensor_type"
    assert _shape(edited, "probabilities") == ["N", 3]
    x = np.array([[1, 2, 3], [0, 0, 0]], np.float32)
    (out,) = _run(edited, {"x": x})
    np.testing.assert_allclose(out.sum(axis=1), [1, 1], rtol=1e-6)


def test_an_edit_that_cannot_be_typed_is_refused_naming_the_node() -> None:
    model = gk.load(WHOLE)
    with pytest.raises(gk.EditError) as err:
        gk.bypass_node(model, "/convs2/convs2.0/Conv")
    message = str(err.value)
    assert "the model after bypass_node /convs2/convs2.0/Conv" in message
    assert "node '/Add' (Add)" in message and "Incompatible dimensions" in message
    assert "'/convs3/convs3.1/Conv_output_0' float32[1,3,10,10]" in message
    assert err.value.hint


def test_cli_edit_prints_the_changed_output_shapes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out.onnx"
    assert main(["edit", str(WHOLE), str(out), "--bypass", "/convs4/convs4.2/Conv"]) == 0
    assert "output 'output': [1,3,4,4] -> [1,3,6,6]" in capsys.readouterr().out
    assert main(["edit", str(WHOLE), str(out), "--bypass", "/convs4/convs4.2/Conv", "--json", "--overwrite"]) == 0
    shapes = json.loads(capsys.readouterr().out)["shapes"]
    assert shapes == [{"tensor": "output", "graph": "main graph", "kind": "output",
                       "before": "float32[1,3,4,4]", "after": "float32[1,3,6,6]"}]


def test_cli_edit_that_cannot_be_typed_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out.onnx"
    assert main(["edit", str(WHOLE), str(out), "--bypass", "/convs3/convs3.0/Conv"]) == 2
    err = capsys.readouterr().err
    assert "node '/Add' (Add)" in err and "hint:" in err and not out.exists()


def test_a_model_that_could_not_be_typed_before_can_still_be_edited() -> None:
    broken = gk.Model(onnx.parser.parse_model("""
<ir_version: 8, opset_import: ["" : 17]>
g (float[2, 3] x, float[4] b) => (float[2, 3] z) {
  r = Relu(x)
  bad = Add(r, b)
  z = Abs(bad)
}"""))
    edited = gk.set_op_type(broken, "#0", "Neg", check=False)  # (the contradiction is the model's own)
    assert [n.op_type for n in edited.lazy_proto.graph.node] == ["Neg", "Add", "Abs"]
