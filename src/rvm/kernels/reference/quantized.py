"""Quantized ops (`rvm.op.quantized`): exact integer sums (float64 holds them exactly),
requantized per output channel.

Part of the NumPy reference kernels (`rvm.kernels.reference`).
"""

import numpy as np

from rvm.kernels.reference.conv import _out_size, _pad_pairs, _windows

__all__ = ["qadd", "qconv2d", "qdense"]


def _requantize(acc, bias, scale, axis, y_zero, low, high, dtype):
    """``clip(round(float32(acc + bias) * scale) + y_zero, low, high)`` as ``dtype``, with
    ``bias`` and ``scale`` per output channel along ``axis`` (or scalars)."""
    shape = [1] * acc.ndim
    shape[axis] = -1
    total = acc + np.reshape(bias.astype(np.float64), shape if bias.size > 1 else ())
    scaled = total.astype(np.float32) * np.reshape(scale, shape if scale.size > 1 else ())
    y = np.round(scaled.astype(np.float32)).astype(np.float64) + y_zero
    return np.clip(y, low, high).astype(dtype)


def qconv2d(x, w, bias, scale, x_zero, y_zero, low, high, dtype, strides, padding, dilation,
            groups, weight_layout="OIHW", weight_shape=None, weight_pairs=None):  # fmt: skip
    """Quantized 2-d convolution: int32 sums of ``(x - x_zero) * w``, requantized (``w``
    (O, KH, KW, C / groups) when ``weight_layout`` is "OHWI"; "turned": ``(panels, KH * KW *
    Q + 1, width, 4)``, panel ``t``'s row ``(u * KW + v) * Q + k`` its channels' weights of
    input channels ``4k`` to ``4k + 3`` at tap ``(u, v)``, its last row their sums,
    ``weight_shape`` the OHWI shape; ``weight_pairs`` is a fact for the jit kernels)."""
    if weight_layout == "turned":
        o, kh, kw, cg = weight_shape
        panels, width = w.shape[0], w.shape[2]
        w = w[:, :-1].transpose(0, 2, 1, 3).reshape(panels * width, kh, kw, -1)[:o, :, :, :cg]
        weight_layout = "OHWI"
    if weight_layout == "OHWI":
        w = w.transpose(0, 3, 1, 2)
    pads = _pad_pairs(padding)
    kernel = w.shape[2:]
    out_sp = [_out_size(x.shape[2 + i], k, strides[i], pads[i], dilation[i]) for i, k in
              enumerate(kernel)]  # fmt: skip
    xp = np.pad(x.astype(np.float64) - x_zero, [(0, 0), (0, 0)] + pads)
    n, c = x.shape[:2]
    o = w.shape[0]
    xg = xp.reshape((n, groups, c // groups) + xp.shape[2:])
    cols = np.stack([p for _, p in _windows(xg, kernel, strides, dilation, out_sp)], axis=3)
    cols = cols.reshape(n, groups, -1, int(np.prod(out_sp)))
    wk = w.astype(np.float64).reshape(groups, o // groups, -1)
    acc = np.matmul(wk[None], cols).reshape((n, o, *out_sp))
    return _requantize(acc, bias, scale, 1, y_zero, low, high, dtype)


def qdense(x, w, bias, scale, x_zero, y_zero, low, high, dtype, weight_pairs=None):
    """Quantized ``x @ w.T``: int32 sums of ``(x - x_zero) * w``, requantized (``weight_pairs``
    is a fact for the jit kernels)."""
    acc = np.matmul(x.astype(np.float64) - x_zero, w.astype(np.float64).T)
    return _requantize(acc, bias, scale, -1, y_zero, low, high, dtype)


def qadd(a, b, a_zero, b_zero, y_zero, low, high, dtype, a_scale, b_scale, y_scale):
    """``clip(rint(((a - a_zero) * a_scale + (b - b_zero) * b_scale) / y_scale) + y_zero, low,
    high)`` in float32, as ``dtype``: a residual's DequantizeLinear, Add and QuantizeLinear."""
    f32 = np.float32
    s = (a.astype(f32) - f32(a_zero)) * f32(a_scale) + (b.astype(f32) - f32(b_zero)) * f32(b_scale)
    y = np.rint(s / f32(y_scale)) + f32(y_zero)
    return np.clip(y, low, high).astype(dtype)
