"""Python implementations of two custom operators, for ``--python-ops examples/python_ops.py``.

``my::my_add`` is the custom-op tutorial's 2·a + b; ``custom::deform_conv2d`` is torchvision's
deformable convolution (as exported to ONNX by mmcv/torchvision: inputs x, weight, offset; attributes
stride, padding, dilation, groups, offset_groups), here without bias and mask. Each runs the same in
ONNX Runtime (through onnxruntime-extensions) and in ``compare --backend reference``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import graphkit


@graphkit.custom_op("my", "my_add", outputs=["float32"])
def my_add(a: np.ndarray, b: np.ndarray, **_: Any) -> np.ndarray:
    return (2 * a + b).astype(np.float32)


@graphkit.custom_op("custom", "deform_conv2d", outputs=["float32"])
def deform_conv2d(x: np.ndarray, weight: np.ndarray, offset: np.ndarray, *, stride: list[int] = (1, 1),
                  padding: list[int] = (0, 0), dilation: list[int] = (1, 1), groups: int = 1,
                  offset_groups: int = 1, **_: Any) -> np.ndarray:
    n, c, h, w = x.shape
    out_c, c_per_group, kh, kw = weight.shape
    out_h = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    out_w = (w + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    offset = offset.reshape(n, offset_groups, kh * kw, 2, out_h, out_w)
    base_y = (np.arange(out_h) * stride[0] - padding[0])[:, None]
    base_x = (np.arange(out_w) * stride[1] - padding[1])[None, :]
    # columns[n, c, k, oy, ox]: x sampled (bilinearly, zero outside) at kernel tap k, shifted by its offset
    columns = np.zeros((n, c, kh * kw, out_h, out_w), np.float64)
    channels_per_offset = c // offset_groups
    for k in range(kh * kw):
        ky, kx = divmod(k, kw)
        for g in range(offset_groups):
            ys = base_y + ky * dilation[0] + offset[:, g, k, 0]
            xs = base_x + kx * dilation[1] + offset[:, g, k, 1]
            chans = slice(g * channels_per_offset, (g + 1) * channels_per_offset)
            columns[:, chans, k] = _bilinear(x[:, chans], ys, xs)
    out = np.zeros((n, out_c, out_h, out_w), np.float64)
    per_group = out_c // groups
    for g in range(groups):
        cols = columns[:, g * c_per_group:(g + 1) * c_per_group].reshape(n, c_per_group * kh * kw, out_h * out_w)
        wg = weight[g * per_group:(g + 1) * per_group].reshape(per_group, c_per_group * kh * kw)
        out[:, g * per_group:(g + 1) * per_group] = np.einsum("ok,nkp->nop", wg, cols).reshape(n, per_group, out_h, out_w)
    return out.astype(np.float32)


def _bilinear(x: np.ndarray, ys: np.ndarray, xs: np.ndarray) -> np.ndarray:
    """x[n, c, y, x] at fractional (ys[n, oy, ox], xs[n, oy, ox]); 0 outside the image."""
    n, c, h, w = x.shape
    y0, x0 = np.floor(ys).astype(int), np.floor(xs).astype(int)
    result = np.zeros((n, c, *ys.shape[1:]), np.float64)
    for dy in (0, 1):
        for dx in (0, 1):
            yy, xx = y0 + dy, x0 + dx
            weight = (1 - np.abs(ys - yy)) * (1 - np.abs(xs - xx))
            inside = (yy >= 0) & (yy < h) & (xx >= 0) & (xx < w)
            for b in range(n):
                values = x[b][:, np.clip(yy[b], 0, h - 1), np.clip(xx[b], 0, w - 1)]
                result[b] += values * (weight[b] * inside[b])
    return result
