"""Image resizing (ONNX Resize): one axis at a time, since the interpolation is separable.

Part of the NumPy reference kernels (`rvm.kernels.reference`).
"""

import math

import numpy as np

from rvm.kernels.reference.common import _like


def _resize_source(mode, out, scale, n_in, size, roi):
    """The source coordinate of each output position along one axis, and the positions
    outside the input (tf_crop_and_resize only; else None). ``length`` is the fractional
    output length ``scale * n_in`` that ONNX's formulas use."""
    length = scale * n_in
    if mode == "align_corners":
        return (np.zeros(size) if length == 1 else out * (n_in - 1) / (length - 1)), None
    if mode == "asymmetric":
        return out / scale, None
    if mode == "tf_crop_and_resize":
        lo, hi = roi
        if length == 1:
            src = np.full(size, (hi - lo) * (n_in - 1) / 2)
        else:
            src = out * (hi - lo) * (n_in - 1) / (length - 1)
        src = src + lo * (n_in - 1)
        return src, (src < 0) | (src > n_in - 1)
    if mode == "pytorch_half_pixel" and length == 1:
        return np.full(size, -0.5), None
    src = (out + 0.5) / scale - 0.5  # half_pixel, pytorch_half_pixel
    if mode == "half_pixel_symmetric":
        src = src + n_in / 2 * (1 - size / length)
    return src, None


def _cubic_kernel(t, a):
    t = np.abs(t)
    near = ((a + 2) * t - (a + 3)) * t * t + 1
    far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return np.where(t <= 1, near, np.where(t < 2, far, 0.0))


def _resize_coeffs(ratio, scale, mode, nearest_mode, cubic_coeff_a, antialias):
    """Interpolation weights, one row per output position, for the taps around its source
    (``ratio``: the source's distance past the tap before it; 1 when exactly on a tap)."""
    r = ratio[:, None]
    if mode == "nearest":
        below = {
            "round_prefer_floor": r <= 0.5,
            "round_prefer_ceil": r < 0.5,
            "floor": np.ones_like(r, bool),
            "ceil": np.zeros_like(r, bool),
        }[nearest_mode] & (r != 1)
        return np.concatenate([below, ~below], axis=1).astype(np.float64)
    reach = 1 if mode == "linear" else 2
    if antialias:  # a kernel stretched by 1 / scale when shrinking, normalized
        s = np.minimum(scale, 1.0)
        start = int(np.floor(-reach / s) + 1)
        taps = np.arange(start, 2 - start)
        t = (taps[None, :] - r) * s
        w = np.clip(1 - np.abs(t), 0, 1) if mode == "linear" else _cubic_kernel(t, cubic_coeff_a)
        return w / np.sum(w, axis=1, keepdims=True)
    if mode == "linear":
        return np.concatenate([1 - r, r], axis=1)
    return _cubic_kernel(np.arange(-1, 3)[None, :] - r, cubic_coeff_a)


def _resize_axis(x, axis, size, scale, roi, attrs):
    """``x`` (float64) resized along ``axis`` to ``size``."""
    n_in = x.shape[axis]
    if size == 0:
        return np.take(x, np.arange(0), axis=axis)
    src, outside = _resize_source(
        attrs["coordinate_transformation_mode"], np.arange(size, dtype=np.float64), scale, n_in,
        size, roi,
    )  # fmt: skip
    base = np.floor(src)
    ratio = np.where(src == base, 1.0, src - base)
    coeffs = _resize_coeffs(
        ratio, scale, attrs["mode"], attrs["nearest_mode"], attrs["cubic_coeff_a"],
        attrs["antialias"],
    )  # fmt: skip
    taps = coeffs.shape[1]
    pad = -(-taps // 2)
    frac = src + pad - np.floor(src + pad)
    if taps % 2 == 0:
        first = np.where(frac == 0, -(taps // 2), 1 - taps // 2)
    else:
        first = np.where(frac <= 0.5, -((taps - 1) // 2), 1 - (taps - 1) // 2)
    idx = (np.floor(src + pad).astype(np.int64) + first)[:, None] + np.arange(taps) - pad
    if attrs["exclude_outside"]:
        coeffs = np.where((idx < 0) | (idx >= n_in), 0.0, coeffs)
        total = np.sum(coeffs, axis=1, keepdims=True)
        coeffs = coeffs / np.where(total == 0, 1.0, total)
    picked = np.take(x, np.clip(idx, 0, n_in - 1), axis=axis)
    shape = (1,) * axis + coeffs.shape + (1,) * (x.ndim - axis - 1)
    out = np.sum(picked * coeffs.reshape(shape), axis=axis + 1)
    if outside is not None:
        mask = outside.reshape((1,) * axis + (size,) + (1,) * (x.ndim - axis - 1))
        out = np.where(mask, attrs["extrapolation_value"], out)
    return out


def resize(
    x,
    sizes,
    scales,
    roi=None,
    mode="nearest",
    coordinate_transformation_mode="half_pixel",
    nearest_mode="round_prefer_floor",
    cubic_coeff_a=-0.75,
    exclude_outside=False,
    extrapolation_value=0.0,
    antialias=False,
):
    """ONNX Resize with every axis given: ``sizes`` is the output shape, ``scales`` the
    factor each axis's coordinate transform uses, ``roi`` (start..., end...) the crop of
    tf_crop_and_resize. Computed in float64; integer results round and saturate."""
    attrs = {
        "mode": mode,
        "coordinate_transformation_mode": coordinate_transformation_mode,
        "nearest_mode": nearest_mode,
        "cubic_coeff_a": cubic_coeff_a,
        "exclude_outside": exclude_outside,
        "extrapolation_value": extrapolation_value,
        "antialias": antialias,
    }
    out = np.asarray(x, np.float64)
    for axis in range(x.ndim):
        span = (0.0, 1.0) if roi is None else (roi[axis], roi[axis + x.ndim])
        if (
            math.isclose(scales[axis], 1.0)
            and sizes[axis] == x.shape[axis]
            and (math.isclose(span[0], 0.0) and math.isclose(span[1], 1.0))
        ):
            continue
        out = _resize_axis(out, axis, sizes[axis], scales[axis], span, attrs)
    if x.dtype.kind in "iu":
        info = np.iinfo(x.dtype)
        out = np.clip(np.rint(out), info.min, info.max)
    return _like(out, x.dtype)


__all__ = ["resize"]
