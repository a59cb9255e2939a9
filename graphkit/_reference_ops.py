"""Spec-faithful replacements for the onnx ReferenceEvaluator kernels that deviate from the ONNX spec.

``compare --backend reference`` is meant to be an independent second opinion on ONNX Runtime. onnx
1.23's ReferenceEvaluator gets a few widely used operators wrong, so on real models (the light
models shipped with the onnx package) it disagreed with ONNX Runtime for reasons that were its own
bugs, not the model's. The classes here are handed to ``ReferenceEvaluator(proto, new_ops=OVERRIDES)``
and replace onnx's kernels for exactly these operators; each docstring quotes the spec text it
follows. All of them read attribute defaults from the schema of the opset the model imports
(onnx's own kernels take the newest schema's defaults, one root of the deviations below) and
compute in the input's dtype, as ONNX Runtime does.

The deviations fixed (onnx 1.23, ``onnx/reference/ops``):

- ``BatchNormalization`` opsets 7–13 with a single output: onnx's kernel fills in the schema
  default ``momentum`` and then normalises with the *batch* statistics (training mode). The spec
  says a node with the one output ``Y`` runs in test mode with the given ``mean``/``var``.
- ``LRN``: onnx's kernel loops over the batch dimension instead of the channels, so only the first
  N channels get a square sum; every other channel is divided by ``bias ** beta`` alone. It also
  refuses inputs that are not 4-D; the spec allows N x C x D1 x ... x Dk.
- ``Softmax``, ``LogSoftmax``, ``Hardmax`` before opset 13: onnx's kernels use the opset-13
  semantics (default ``axis=-1``, one axis). The spec before 13 coerces the input to 2-D at
  ``axis`` (default 1) and normalises over all dimensions from ``axis`` on.
- ``Add``, ``Sub``, ``Mul``, ``Div``, ``Pow``, ``And``, ``Or``, ``Xor``, ``Equal``, ``Greater``,
  ``Less`` before opset 7: onnx's kernels ignore ``broadcast``/``axis`` and broadcast as numpy
  does, so ``B`` of shape [2] added at ``axis=0`` to ``A`` of shape [2, 3] fails. (ONNX Runtime has
  no kernel for these versions: this evaluator is what checks an old model's conversion.)
- ``PRelu`` before opset 7: onnx's kernel broadcasts a slope of shape [C] as numpy does (along the
  last axis) unless that fails; then it looks for C among the input's dims. The operator applied
  it per channel (axis 1), as PyTorch's PReLU exported then means.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx.reference.op_run import OpRun

__all__ = ["LEGACY_BROADCAST", "OVERRIDES", "BatchNormalization", "Hardmax", "LRN", "LogSoftmax", "PRelu", "Softmax"]


def _opset(node: onnx.NodeProto, run_params: dict[str, Any]) -> int:
    """The version of ``node``'s domain the evaluator runs (the model's opset import)."""
    opsets = run_params.get("opsets") or {}
    version = opsets.get(node.domain, opsets.get("ai.onnx" if node.domain == "" else node.domain))
    return int(version) if version else onnx.defs.onnx_opset_version()


class _VersionedOp(OpRun):
    """An operator whose attribute defaults come from the schema of the model's opset version."""

    op_domain = ""

    def __init__(self, onnx_node: onnx.NodeProto, run_params: dict[str, Any], schema: Any = None) -> None:
        self.opset = _opset(onnx_node, run_params)
        if schema is None:
            schema = onnx.defs.get_schema(onnx_node.op_type, self.opset, onnx_node.domain)
        super().__init__(onnx_node, run_params, schema=schema)


class BatchNormalization(_VersionedOp):
    """BatchNormalization in test (inference) mode where the spec asks for it.

    Spec, opsets 7–13: "There are five required inputs … there are multiple cases for the number of
    outputs …: Output case #1: Y, mean, var, saved_mean, saved_var (training mode); Output case #2:
    Y (test mode)". Test mode computes ``Y = (X - input_mean) / sqrt(input_var + epsilon) * scale +
    B`` with the *given* mean and variance; ``momentum`` only matters in training mode.

    Nodes of opset < 7 (``is_test``), of opset >= 14 (``training_mode``, which onnx's kernel honours)
    and training-mode nodes (several outputs) keep onnx's own kernel.
    """

    def __new__(cls, onnx_node: onnx.NodeProto, run_params: dict[str, Any], schema: Any = None) -> Any:
        version = _opset(onnx_node, run_params)
        if 7 <= version < 14 and len([o for o in onnx_node.output if o]) == 1:
            return super().__new__(cls)
        from onnx.reference.ops import load_op

        own = load_op(onnx_node.domain, onnx_node.op_type, version)
        return own(onnx_node, run_params)

    def _run(self, x: np.ndarray, scale: np.ndarray, bias: np.ndarray, mean: np.ndarray, var: np.ndarray,
             **attrs: Any) -> tuple[np.ndarray]:
        return (batchnorm_inference(x, scale, bias, mean, var, float(attrs.get("epsilon", 1e-5))),)


def batchnorm_inference(x: np.ndarray, scale: np.ndarray, bias: np.ndarray, mean: np.ndarray,
                        var: np.ndarray, epsilon: float) -> np.ndarray:
    """``(x - mean) / sqrt(var + epsilon) * scale + bias`` per channel (axis 1), in ``x``'s dtype."""
    shape = (-1,) + (1,) * (x.ndim - 2)
    dtype = x.dtype

    def per_channel(v: np.ndarray) -> np.ndarray:
        return np.asarray(v, dtype=dtype).reshape(shape)

    denom = np.sqrt(per_channel(var) + dtype.type(epsilon))
    y = (x - per_channel(mean)) / denom * per_channel(scale) + per_channel(bias)
    return np.asarray(y, dtype=dtype)


class LRN(_VersionedOp):
    """Local response normalization across channels, for inputs N x C x D1 x ... x Dk.

    Spec: "square_sum[n, c, d1, ..., dk] = sum(X[n, i, d1, ..., dk] ^ 2), where max(0, c -
    floor((size - 1) / 2)) <= i <= min(C - 1, c + ceil((size - 1) / 2)). Y[n, c, d1, ..., dk] =
    X[n, c, d1, ..., dk] / (bias + alpha / size * square_sum[n, c, d1, ..., dk] ) ^ beta".
    """

    def _run(self, x: np.ndarray, **attrs: Any) -> tuple[np.ndarray]:
        size = attrs.get("size")
        if size is None:
            raise ValueError(f"LRN node {self.onnx_node.name!r} lacks the required attribute 'size'")
        return (lrn(x, int(size), float(attrs.get("alpha", 1e-4)), float(attrs.get("beta", 0.75)),
                    float(attrs.get("bias", 1.0))),)


def lrn(x: np.ndarray, size: int, alpha: float, beta: float, bias: float) -> np.ndarray:
    """The spec's LRN, square sums accumulated in ``x``'s dtype one window offset at a time."""
    if x.ndim < 3:
        raise ValueError(f"LRN needs an input of rank >= 3 (N x C x D1 ...), got shape {list(x.shape)}")
    dtype = x.dtype
    channels = x.shape[1]
    before, after = (size - 1) // 2, -(-(size - 1) // 2)
    square = x * x
    square_sum = np.zeros_like(square)
    for offset in range(-before, after + 1):  # channel c sums channels c + offset that exist
        lo, hi = max(0, -offset), min(channels, channels - offset)
        if lo < hi:
            square_sum[:, lo:hi] += square[:, lo + offset:hi + offset]
    scale = dtype.type(bias) + dtype.type(alpha / size) * square_sum
    return np.asarray(x / scale ** dtype.type(beta), dtype=dtype)


def _axis(axis: int, rank: int, node: onnx.NodeProto) -> int:
    if not -rank <= axis < max(rank, 1):
        raise ValueError(f"{node.op_type} node {node.name!r}: axis {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


class _AxisOp(_VersionedOp):
    """Softmax-like operators: opset < 13 coerces the input to 2-D at ``axis``; opset >= 13 uses one axis.

    Spec before opset 13: "The input does not need to explicitly be a 2D vector; rather, it will be
    coerced into one. For an arbitrary n-dimensional tensor input ∈ [a_0, a_1, ..., a_{k-1}, a_k,
    ..., a_{n-1}] and k is the axis provided, then input will be coerced into a 2-dimensional tensor
    with dimensions [a_0 * ... * a_{k-1}, a_k * ... * a_{n-1}]." (default ``axis`` 1). From opset
    13 the operator works along the one dimension ``axis`` (default -1).
    """

    def _run(self, x: np.ndarray, **attrs: Any) -> tuple[np.ndarray]:
        default = 1 if self.opset < 13 else -1
        axis = _axis(int(attrs.get("axis", default)), x.ndim, self.onnx_node)
        if x.size == 0:
            return (x.copy(),)
        if self.opset < 13:
            rows = int(np.prod(x.shape[:axis], dtype=np.int64))
            flat = x.reshape(rows, -1)
            return (np.asarray(self._along(flat, 1), dtype=x.dtype).reshape(x.shape),)
        return (np.asarray(self._along(x, axis), dtype=x.dtype),)

    def _along(self, x: np.ndarray, axis: int) -> np.ndarray:
        raise NotImplementedError


class Softmax(_AxisOp):
    """Softmax: ``exp(x - max) / sum(exp(x - max))`` over the normalised dimensions."""

    def _along(self, x: np.ndarray, axis: int) -> np.ndarray:
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        return e / e.sum(axis=axis, keepdims=True)


class LogSoftmax(_AxisOp):
    """LogSoftmax: ``(x - max) - log(sum(exp(x - max)))`` over the normalised dimensions."""

    def _along(self, x: np.ndarray, axis: int) -> np.ndarray:
        shifted = x - x.max(axis=axis, keepdims=True)
        return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


class Hardmax(_AxisOp):
    """Hardmax: 1 at the first maximum over the normalised dimensions, 0 elsewhere."""

    def _along(self, x: np.ndarray, axis: int) -> np.ndarray:
        y = np.zeros_like(x)
        np.put_along_axis(y, np.expand_dims(np.argmax(x, axis=axis), axis), 1, axis=axis)
        return y


class _LegacyBroadcast(_VersionedOp):
    """A binary operator before opset 7, broadcasting ``B`` to ``A`` as its ``broadcast``/``axis`` say.

    Spec (Add-6 and its siblings): "When broadcasting is specified, the second tensor can either be
    of element size 1 (including a scalar tensor and any tensor with rank equal to or smaller than
    the first tensor), or having its shape as a contiguous subset of the first tensor's shape. The
    starting of the mutually equal shape is specified by the argument "axis", and if it is not set,
    suffix matching is assumed." A dim of 1 in ``B`` expands, as the exporters of the time (PyTorch)
    relied on and ONNX's version converter keeps. Nodes of opset >= 7 keep onnx's own kernel.
    """

    def __new__(cls, onnx_node: onnx.NodeProto, run_params: dict[str, Any], schema: Any = None) -> Any:
        version = _opset(onnx_node, run_params)
        if version < 7:
            return super().__new__(cls)
        from onnx.reference.ops import load_op

        return load_op(onnx_node.domain, onnx_node.op_type, version)(onnx_node, run_params)

    def __init__(self, onnx_node: onnx.NodeProto, run_params: dict[str, Any], schema: Any = None) -> None:
        super().__init__(onnx_node, run_params, schema)
        from onnx.reference.ops import load_op

        # (the kernel of the first version without the attributes: the same computation on aligned inputs)
        bare = onnx.NodeProto()
        bare.CopyFrom(onnx_node)
        for attr in [a for a in bare.attribute if a.name in ("broadcast", "axis")]:
            bare.attribute.remove(attr)
        self._kernel = load_op(onnx_node.domain, onnx_node.op_type, 7)(bare, run_params)

    def _run(self, a: np.ndarray, b: np.ndarray, **attrs: Any) -> tuple[np.ndarray]:
        a, b = np.asarray(a), np.asarray(b)
        axis = attrs.get("axis")
        if attrs.get("broadcast") and b.size != 1 and axis is not None:
            start = _axis(int(axis), a.ndim, self.onnx_node)
            aligned = a.shape[start:start + b.ndim]
            if len(aligned) != b.ndim or any(x != y and y != 1 for x, y in zip(aligned, b.shape)):
                raise ValueError(f"{self.onnx_node.op_type} node {self.onnx_node.name!r}: B's shape {list(b.shape)} "
                                 f"is not A's {list(a.shape)} from axis {start}")
            b = b.reshape(b.shape + (1,) * (a.ndim - start - b.ndim))
        return tuple(self._kernel.run(a, b))


class PRelu(_VersionedOp):
    """PRelu before opset 7: a slope of shape [C] applies per channel (axis 1).

    Spec (PRelu-6): "Slope tensor. If `Slope` is of size 1, the value is shared across different
    channels": one slope per channel otherwise, the channels being axis 1 of an N x C x ... input.
    Nodes of opset >= 7 (unidirectional numpy broadcasting) keep onnx's own kernel.
    """

    def __new__(cls, onnx_node: onnx.NodeProto, run_params: dict[str, Any], schema: Any = None) -> Any:
        version = _opset(onnx_node, run_params)
        if version < 7:
            return super().__new__(cls)
        from onnx.reference.ops import load_op

        return load_op(onnx_node.domain, onnx_node.op_type, version)(onnx_node, run_params)

    def _run(self, x: np.ndarray, slope: np.ndarray, **attrs: Any) -> tuple[np.ndarray]:
        slope = np.asarray(slope, dtype=x.dtype)
        if slope.ndim == 1 and slope.size != 1 and x.ndim > 2:
            slope = slope.reshape((-1,) + (1,) * (x.ndim - 2))
        return (np.where(x > 0, x, x * slope).astype(x.dtype),)


#: Before opset 7, the binary operators that broadcast by attribute.
LEGACY_BROADCAST: tuple[type[OpRun], ...] = tuple(
    type(op, (_LegacyBroadcast,), {"__doc__": f"{op} before opset 7 (see ``_LegacyBroadcast``)."})
    for op in ("Add", "Sub", "Mul", "Div", "Pow", "And", "Or", "Xor", "Equal", "Greater", "Less"))

#: The kernels graphkit hands to ``ReferenceEvaluator(..., new_ops=OVERRIDES)``.
OVERRIDES: tuple[type[OpRun], ...] = (BatchNormalization, LRN, Softmax, LogSoftmax, Hardmax, PRelu,
                                       *LEGACY_BROADCAST)
