"""reference_ops: each corrected kernel against a literal numpy reading of the ONNX spec and ONNX Runtime.

Every test also shows, by values, the deviation of onnx's own kernel that the override removes.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx.reference import ReferenceEvaluator

import graphkit as gk
from graphkit._compare import compare
from graphkit._reference_ops import OVERRIDES
from graphkit._run import run as ort_run

RNG = np.random.default_rng(0)


def _model(op: str, opset: int, inputs: dict[str, np.ndarray], n_out: int = 1,
           consts: dict[str, np.ndarray] | None = None, **attrs: object) -> gk.Model:
    """One ``op`` node; its first output has the first input's shape, the others are per channel."""
    b = gk.GraphBuilder(op.lower(), opset=opset)
    names = []
    for name, value in inputs.items():
        b.input(name, "float32", list(value.shape))
        names.append(name)
    for name, value in (consts or {}).items():
        names.append(b.initializer(value, name))
    outs = [f"y{i}" for i in range(n_out)]
    b.node(op, names, outputs=outs, **attrs)
    shape = list(next(iter(inputs.values())).shape)
    for i, out in enumerate(outs):
        b.output(out, "float32", shape if i == 0 else [shape[1]])
    return b.build()


def _fixed(model: gk.Model, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ReferenceEvaluator(model.proto, new_ops=list(OVERRIDES)).run(None, feeds)


def _raw(model: gk.Model, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ReferenceEvaluator(model.proto).run(None, feeds)


def _ort(model: gk.Model, feeds: dict[str, np.ndarray]) -> np.ndarray:
    return ort_run(model, feeds, opt_level="disable")["y0"]


# --------------------------------------------------------------------------------- spec readings


def spec_lrn(x: np.ndarray, size: int, alpha: float, beta: float, bias: float) -> np.ndarray:
    """The spec's formula, term by term, in float64."""
    x64 = x.astype(np.float64)
    channels = x.shape[1]
    square_sum = np.zeros_like(x64)
    for c in range(channels):
        lo = max(0, c - math.floor((size - 1) / 2))
        hi = min(channels - 1, c + math.ceil((size - 1) / 2))
        for i in range(lo, hi + 1):
            square_sum[:, c] += x64[:, i] ** 2
    return x64 / (bias + alpha / size * square_sum) ** beta


def spec_coerced(fn, x: np.ndarray, axis: int) -> np.ndarray:
    """Opset < 13: coerce to [a_0 * ... * a_{k-1}, a_k * ... * a_{n-1}], apply ``fn`` per row."""
    axis = axis % x.ndim
    rows = int(np.prod(x.shape[:axis]))
    flat = x.astype(np.float64).reshape(rows, -1)
    return np.stack([fn(row) for row in flat]).reshape(x.shape)


def spec_along(fn, x: np.ndarray, axis: int) -> np.ndarray:
    """Opset >= 13: apply ``fn`` to every 1-D slice along ``axis``."""
    return np.apply_along_axis(fn, axis, x.astype(np.float64))


def softmax_1d(v: np.ndarray) -> np.ndarray:
    e = np.exp(v - v.max())
    return e / e.sum()


def log_softmax_1d(v: np.ndarray) -> np.ndarray:
    return v - v.max() - np.log(np.exp(v - v.max()).sum())


def hardmax_1d(v: np.ndarray) -> np.ndarray:
    out = np.zeros_like(v)
    out[int(np.argmax(v))] = 1  # the first maximum
    return out


SPEC_1D = {"Softmax": softmax_1d, "LogSoftmax": log_softmax_1d, "Hardmax": hardmax_1d}


def spec_batchnorm(x, scale, bias, mean, var, epsilon):
    shape = (-1,) + (1,) * (x.ndim - 2)
    x64 = x.astype(np.float64)
    return ((x64 - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + epsilon) * scale.reshape(shape)
            + bias.reshape(shape))


# ------------------------------------------------------------------------------------------- LRN


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 8])
def test_lrn_window_matches_the_spec_for_odd_and_even_sizes(size: int) -> None:
    x = RNG.normal(size=(2, 7, 3, 4)).astype(np.float32) * 3
    attrs = {"size": size, "alpha": 0.05, "beta": 0.75, "bias": 2.0}
    model = _model("LRN", 13, {"x": x}, **attrs)
    want = spec_lrn(x, **attrs)
    got = _fixed(model, {"x": x})[0]
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    if size % 2:
        np.testing.assert_allclose(_ort(model, {"x": x}), want, rtol=1e-6, atol=1e-7)
    else:  # ONNX Runtime's CPU kernel takes odd sizes only: the spec alone is the judge here
        with pytest.raises(gk.RuntimeFailure, match="size_ % 2 == 1"):
            _ort(model, {"x": x})
    # onnx 1.23's kernel sums squares for the first N (=2) channels only
    raw = _raw(model, {"x": x})[0]
    assert not np.allclose(raw[:, 2:], want[:, 2:], rtol=1e-3)


def test_lrn_takes_the_opset_1_default_attributes_and_any_rank() -> None:
    x = RNG.normal(size=(1, 6, 2, 3, 2)).astype(np.float32) * 40
    model = _model("LRN", 9, {"x": x}, size=3)  # alpha 1e-4, beta 0.75, bias 1 by default
    np.testing.assert_allclose(_fixed(model, {"x": x})[0], spec_lrn(x, 3, 1e-4, 0.75, 1.0), rtol=1e-6)


def test_lrn_light_model_parameters_deviate_about_1e_3_in_onnx_and_not_here() -> None:
    """alexnet's LRN (size 5, alpha 1e-4, beta 0.75, bias 1) at activations of magnitude ~5."""
    x = np.abs(RNG.normal(size=(1, 16, 5, 5))).astype(np.float32) * 5
    attrs = {"size": 5, "alpha": 1e-4, "beta": 0.75, "bias": 1.0}
    model = _model("LRN", 9, {"x": x}, **attrs)
    want, ort = spec_lrn(x, **attrs), _ort(model, {"x": x})
    raw_err = np.abs(_raw(model, {"x": x})[0] - ort) / np.abs(ort)
    assert 5e-4 < raw_err.max() < 1e-2  # the size of the light models' LRN disagreement
    assert raw_err[:, :1].max() < 1e-6  # channel 0 (< N) is the one onnx gets right
    np.testing.assert_allclose(_fixed(model, {"x": x})[0], ort, rtol=1e-6)
    np.testing.assert_allclose(ort, want, rtol=1e-6)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 3), c=st.integers(1, 9), size=st.integers(1, 11), beta=st.floats(0.1, 1.5),
       alpha=st.floats(1e-4, 1.0), bias=st.floats(0.5, 3.0), seed=st.integers(0, 2**16))
def test_lrn_agrees_with_the_spec_for_any_window(n: int, c: int, size: int, beta: float, alpha: float,
                                                 bias: float, seed: int) -> None:
    x = np.random.default_rng(seed).normal(size=(n, c, 2, 3)).astype(np.float32)
    model = _model("LRN", 13, {"x": x}, size=size, alpha=alpha, beta=beta, bias=bias)
    np.testing.assert_allclose(_fixed(model, {"x": x})[0], spec_lrn(x, size, alpha, beta, bias),
                               rtol=2e-6, atol=1e-7)


# -------------------------------------------------------------------------- Softmax and friends


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize(("opset", "axis"), [(11, None), (11, 2), (11, -1), (11, 0), (13, None), (13, 1),
                                             (13, -3), (9, None), (1, None)])
def test_softmax_family_follows_the_opset_semantics(op: str, opset: int, axis: int | None) -> None:
    x = RNG.normal(size=(2, 3, 4, 5)).astype(np.float32) * 4
    x[1, 0, 0, :2] = x[1].max() + 1  # a tie for Hardmax: the first maximum wins
    attrs = {} if axis is None else {"axis": axis}
    model = _model(op, opset, {"x": x}, **attrs)
    if opset < 13:
        want = spec_coerced(SPEC_1D[op], x, 1 if axis is None else axis)
    else:
        want = spec_along(SPEC_1D[op], x, -1 if axis is None else axis)
    got = _fixed(model, {"x": x})[0]
    assert got.dtype == np.float32 and got.shape == x.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_ort(model, {"x": x}), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
def test_opset_11_default_axis_is_1_and_spans_the_trailing_dims(op: str) -> None:
    """squeezenet's case: [1, 1000, 1, 1] normalised over axis 1 (onnx's kernel uses the last axis)."""
    x = RNG.normal(size=(1, 10, 1, 1)).astype(np.float32)
    model = _model(op, 11, {"x": x})
    want = spec_coerced(SPEC_1D[op], x, 1)
    np.testing.assert_allclose(_fixed(model, {"x": x})[0], want, rtol=1e-5, atol=1e-6)
    assert not np.allclose(_raw(model, {"x": x})[0], want, rtol=1e-3)
    assert op != "Softmax" or math.isclose(float(want.sum()), 1.0, rel_tol=1e-9)


def test_softmax_opset_11_and_13_differ_on_4d_input_with_axis_1() -> None:
    x = RNG.normal(size=(2, 3, 4, 5)).astype(np.float32)
    old = _fixed(_model("Softmax", 11, {"x": x}, axis=1), {"x": x})[0]
    new = _fixed(_model("Softmax", 13, {"x": x}, axis=1), {"x": x})[0]
    np.testing.assert_allclose(old.sum(axis=(1, 2, 3)), 1.0, rtol=1e-5)  # one distribution per batch item
    np.testing.assert_allclose(new.sum(axis=1), 1.0, rtol=1e-5)  # one per (n, h, w)
    assert not np.allclose(old, new)


def test_softmax_of_an_empty_tensor_is_empty() -> None:
    x = np.zeros((0, 3), np.float32)
    got = _fixed(_model("Softmax", 11, {"x": x}), {"x": x})[0]
    assert got.shape == (0, 3) and got.dtype == np.float32


# ---------------------------------------------------------------------------- BatchNormalization


def _bn_inputs(channels: int = 4) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    x = RNG.normal(size=(2, channels, 3, 3)).astype(np.float32) * 5 + 2
    params = {"scale": RNG.uniform(0.5, 2, channels), "bias": RNG.normal(size=channels),
              "mean": RNG.normal(size=channels), "var": RNG.uniform(0.1, 3, channels)}
    return x, {k: v.astype(np.float32) for k, v in params.items()}


@pytest.mark.parametrize(("opset", "attrs"), [(9, {}), (9, {"momentum": 0.5, "epsilon": 1e-3}), (7, {}),
                                              (14, {"training_mode": 0}), (15, {})])
def test_batchnorm_single_output_is_inference_with_the_given_statistics(opset: int, attrs: dict) -> None:
    x, params = _bn_inputs()
    model = _model("BatchNormalization", opset, {"x": x}, consts=params, **attrs)
    want = spec_batchnorm(x, *params.values(), attrs.get("epsilon", 1e-5))
    got = _fixed(model, {"x": x})[0]
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(_ort(model, {"x": x}), want, rtol=1e-5, atol=1e-5)


def test_batchnorm_opset_9_in_onnx_uses_batch_statistics() -> None:
    x, params = _bn_inputs()
    model = _model("BatchNormalization", 9, {"x": x}, consts=params)
    want = spec_batchnorm(x, *params.values(), 1e-5)
    assert not np.allclose(_raw(model, {"x": x})[0], want, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(_fixed(model, {"x": x})[0], want, rtol=1e-5, atol=1e-5)


def test_batchnorm_training_mode_keeps_onnx_kernel() -> None:
    x, params = _bn_inputs()
    model = _model("BatchNormalization", 14, {"x": x}, n_out=3, consts=params, training_mode=1)
    got, raw = _fixed(model, {"x": x}), _raw(model, {"x": x})
    assert len(got) == 3
    for a, b in zip(got, raw):
        np.testing.assert_array_equal(a, b)
    batch_mean = x.astype(np.float64).mean(axis=(0, 2, 3))
    np.testing.assert_allclose(got[1], params["mean"] * 0.9 + batch_mean * 0.1, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------- compare


def test_compare_reference_backend_uses_the_corrected_kernels() -> None:
    x, params = _bn_inputs()
    b = gk.GraphBuilder("net", opset=9)
    b.input("x", "float32", list(x.shape))
    bn = b.node("BatchNormalization", ["x", *(b.initializer(v, k) for k, v in params.items())], outputs=["bn"])
    lrn = b.node("LRN", [bn], outputs=["lrn"], size=3, alpha=0.1, beta=0.75, bias=1.0)
    b.node("Softmax", [lrn], outputs=["y"])
    b.output("y", "float32", list(x.shape))
    result = compare(b.build(), backend="reference", feeds={"x": x})
    assert result.passed and [t.name for t in result.tensors] == ["bn", "lrn", "y"]
    assert "graphkit._reference_ops" in result.reference
    assert all(t.max_rel < 1e-5 for t in result.tensors)


# --------------------------------------------------------------------------------- before opset 7


@pytest.mark.parametrize(("op", "a_shape", "b_shape", "axis", "meaning"), [
    ("Add", [2, 3, 4], [3], 1, lambda a, b: a + b.reshape(3, 1)),
    ("Mul", [2, 3], [2], 0, lambda a, b: a * b.reshape(2, 1)),
    ("Sub", [2, 3], [2, 1], 0, lambda a, b: a - b),  # (a dim of 1 expands, as exporters relied on)
    ("Div", [3, 3], [3], 0, lambda a, b: a / b.reshape(3, 1)),  # numpy would divide along the last axis
])
def test_binary_ops_before_opset_7_broadcast_b_at_axis(op: str, a_shape: list[int], b_shape: list[int], axis: int,
                                                       meaning: object) -> None:
    a, b = RNG.uniform(1, 2, a_shape).astype(np.float32), RNG.uniform(1, 2, b_shape).astype(np.float32)
    model = _model(op, 6, {"a": a}, consts={"b": b}, broadcast=1, axis=axis)
    np.testing.assert_allclose(_fixed(model, {"a": a})[0], meaning(a, b), rtol=1e-6)  # type: ignore[operator]


def test_prelu_before_opset_7_applies_the_slope_per_channel() -> None:
    x = RNG.standard_normal([2, 3, 3]).astype(np.float32)
    slope = np.array([0.1, 0.2, 0.3], np.float32)
    model = _model("PRelu", 6, {"x": x}, consts={"slope": slope})
    want = np.where(x > 0, x, x * slope.reshape(3, 1))
    np.testing.assert_allclose(_fixed(model, {"x": x})[0], want, rtol=1e-6)
    assert not np.allclose(_raw(model, {"x": x})[0], want)  # (onnx's kernel: along the last axis)
