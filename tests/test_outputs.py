"""add_output / remove_output: drop a classifier's ZipMap and expose its probabilities; values from ONNX Runtime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import graphkit as gk
from graphkit._edit.outputs import add_output, remove_output

_CLASSIFIER = """
<ir_version: 8, opset_import: ["" : 17, "ai.onnx.ml" : 3]>
g (float[N, 3] x) => (int64[N] label, seq(map(int64, float)) output_probability) {
    label, probabilities = ai.onnx.ml.LinearClassifier<classlabels_ints = [0, 1],
        coefficients = [1.0, -1.0, 0.5, -0.5, 2.0, 0.25], intercepts = [0.1, -0.1], post_transform = "SOFTMAX">(x)
    output_probability = ai.onnx.ml.ZipMap<classlabels_int64s = [0, 1]>(probabilities)
}
"""

X = np.array([[1.0, 2.0, 3.0], [-1.0, 0.5, 0.0]], np.float32)


def _expected_probabilities() -> np.ndarray:
    coefficients = np.array([[1.0, -1.0, 0.5], [-0.5, 2.0, 0.25]])
    scores = X.astype(np.float64) @ coefficients.T + np.array([0.1, -0.1])
    e = np.exp(scores - scores.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def test_drop_the_zipmap_and_expose_the_probabilities(tmp_path: Path) -> None:
    model = gk.parse_model(_CLASSIFIER)
    before = model.serialized()
    dropped = remove_output(model, "output_probability")
    assert model.serialized() == before
    assert [n.op_type for n in dropped.lazy_proto.graph.node] == ["LinearClassifier"]
    result = add_output(dropped, "probabilities")
    outputs = result.lazy_proto.graph.output
    assert [o.name for o in outputs] == ["label", "probabilities"]
    assert outputs[1].type.tensor_type.elem_type == 1
    gk.save(result, tmp_path / "probs.onnx")
    got = gk.run(gk.load(tmp_path / "probs.onnx"), feeds={"x": X})
    np.testing.assert_allclose(got["probabilities"], _expected_probabilities(), rtol=1e-5)
    assert list(got["label"]) == list(_expected_probabilities().argmax(1))


def test_output_errors_name_the_tensor() -> None:
    model = gk.parse_model(_CLASSIFIER)
    with pytest.raises(gk.TensorNotFoundError) as err:
        remove_output(model, "output_probabilty")
    assert "no graph output named 'output_probabilty'" in err.value.message
    assert "'output_probability'" in (err.value.hint or "")
    only = remove_output(model, "output_probability")
    with pytest.raises(gk.EditError) as last:
        remove_output(only, "label")
    assert "the only graph output" in last.value.message and "(add_output)" in (last.value.hint or "")
    assert "(--add-output)" in (last.value.cli_hint or "")
    assert add_output(model, "label") is model
    with pytest.raises(gk.TensorNotFoundError):
        add_output(model, "probabilitie")
