"""Ops whose result shape comes from data at run time (`rvm.op.dynamic`).

Part of the NumPy reference kernels (`rvm.kernels.reference`).
"""

import math

import numpy as np

from rvm.kernels.reference.common import _dtype, _shape_error
from rvm.kernels.reference.image import resize
from rvm.kernels.reference.manipulate import pad, trilu
from rvm.kernels.reference.reduce import cumprod, cumsum, max, mean, min, prod, sum
from rvm.kernels.reference.search import topk


def _run_time_shape(op, shape, dims):
    """The result shape ``shape`` checked against ``dims``, the dimensions the program knew
    (ints; names resolved to the bound sizes, or left as names where the kernel has none)."""
    shape = tuple(int(d) for d in shape)
    if len(shape) != len(dims):
        raise _shape_error(
            f"{op}: the shape computed at run time, {shape}, has {len(shape)} dimensions, but "
            f"the program promised {len(dims)}: {tuple(dims)}"
        )
    wrong = [
        f"axis {i} is {s}, expected {d}"
        for i, (d, s) in enumerate(zip(dims, shape))
        if isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d != s
    ]
    if wrong:
        raise _shape_error(
            f"{op}: the shape computed at run time, {shape}, contradicts the shape the program "
            f"promised, {tuple(dims)} ({'; '.join(wrong)}: the inputs' dimensions disagree "
            "with the sizes computed from them)"
        )
    return shape


def dynamic_reshape(x, shape, dims, allowzero=False):
    """ONNX Reshape to the run-time ``shape``: one -1 is inferred, a 0 keeps ``x``'s
    dimension unless ``allowzero``."""
    target = [int(d) for d in np.ravel(shape).tolist()]
    if not allowzero:
        target = [x.shape[i] if d == 0 and i < x.ndim else d for i, d in enumerate(target)]
    try:
        out = np.reshape(x, target)
    except ValueError:
        raise _shape_error(
            f"dynamic_reshape: cannot reshape a tensor of shape {x.shape} to {tuple(target)}"
        ) from None
    _run_time_shape("dynamic_reshape", out.shape, dims)
    return np.ascontiguousarray(out)


def dynamic_expand(x, shape, dims):
    """ONNX Expand: ``x`` broadcast with the run-time ``shape`` (both ways)."""
    target = tuple(int(d) for d in np.ravel(shape).tolist())
    try:
        out_shape = np.broadcast_shapes(x.shape, target)
    except ValueError:
        raise _shape_error(
            f"dynamic_expand: cannot expand a tensor of shape {x.shape} to {target}"
        ) from None
    _run_time_shape("dynamic_expand", out_shape, dims)
    return np.ascontiguousarray(np.broadcast_to(x, out_shape))


def dynamic_full(shape, fill_value, dtype, dims):
    """A tensor of the run-time ``shape`` filled with ``fill_value``."""
    target = tuple(int(d) for d in np.ravel(shape).tolist())
    if any(d < 0 for d in target):
        raise _shape_error(f"dynamic_full: negative dimension in the shape {target}")
    _run_time_shape("dynamic_full", target, dims)
    return np.full(target, fill_value, dtype=_dtype(dtype))


def dynamic_arange(start, stop, step, dtype, length=None):
    """arange with 0-d tensor bounds read at run time."""
    a, b, s = (np.asarray(v).item() for v in (start, stop, step))
    if s == 0:
        raise ValueError("dynamic_arange: step must not be 0")
    n = math.ceil((b - a) / s)
    n = n if n > 0 else 0
    out = (a + s * np.arange(n)).astype(_dtype(dtype))
    _run_time_shape("dynamic_arange", out.shape, (length,))
    return out


def dynamic_tile(x, reps, dims):
    """``x`` repeated along each axis by the run-time ``reps``."""
    counts = [int(r) for r in np.ravel(reps).tolist()]
    if len(counts) != x.ndim or any(r < 0 for r in counts):
        raise _shape_error(f"dynamic_tile: bad repeats {counts} for a tensor of shape {x.shape}")
    out = np.tile(x, counts)
    _run_time_shape("dynamic_tile", out.shape, dims)
    return out


def dynamic_reduce(x, axes, reducer, keepdims=True, noop_with_empty_axes=False):
    """``reducer`` ("sum", "mean", "max", "min" or "prod") over the run-time ``axes``."""
    picked = [int(a) for a in np.ravel(axes).tolist()]
    if not picked and noop_with_empty_axes:
        return np.array(sum(x, axis=(), keepdims=True)) if reducer in ("sum", "prod") else x.copy()
    normal = [a + x.ndim if a < 0 else a for a in picked]
    if any(not 0 <= a < x.ndim for a in normal) or len(set(normal)) != len(normal):
        raise ValueError(f"dynamic_reduce: bad axes {picked} for a tensor of rank {x.ndim}")
    fn = {"sum": sum, "mean": mean, "max": max, "min": min, "prod": prod}[reducer]
    return fn(x, axis=tuple(normal) if normal else None, keepdims=keepdims)


def _one_int(value, what):
    flat = np.ravel(value).tolist()
    if len(flat) != 1:
        raise ValueError(f"{what} must hold one value, got {flat}")
    return int(flat[0])


def dynamic_trilu(x, k, upper=True):
    """trilu from the run-time diagonal ``k``."""
    return trilu(x, _one_int(k, "dynamic_trilu: k"), upper)


def dynamic_scan(x, axis, reducer, exclusive=False, reverse=False):
    """cumsum or cumprod along the run-time ``axis``, from the end with ``reverse``."""
    a = _one_int(axis, "dynamic_scan: axis")
    if not -x.ndim <= a < x.ndim:
        raise ValueError(f"dynamic_scan: axis {a} is out of range for a tensor of rank {x.ndim}")
    fn = cumsum if reducer == "sum" else cumprod
    if not reverse:
        return fn(x, a, exclusive)
    return np.ascontiguousarray(np.flip(fn(np.flip(x, a), a, exclusive), a))


def dynamic_topk(x, k, axis=-1, largest=True, sorted=True):
    """topk of the run-time ``k``."""
    n = _one_int(k, "dynamic_topk: k")
    if not 0 <= n <= x.shape[axis]:
        raise ValueError(f"dynamic_topk: k={n} is out of range for axis {axis} of {x.shape}")
    return topk(x, n, axis, largest, sorted)


def dynamic_pad(x, pads, value, axes=None, mode="constant"):
    """pad by the run-time ONNX ``pads`` (begins, then ends, over ``axes``); negative crops."""
    widths = [int(p) for p in np.ravel(pads).tolist()]
    axes = list(range(x.ndim)) if axes is None else [a % x.ndim for a in axes]
    if len(widths) != 2 * len(axes):
        raise ValueError(f"dynamic_pad: {len(widths)} pads for {len(axes)} axes")
    index = [slice(None)] * x.ndim
    grow = [(0, 0)] * x.ndim
    for i, a in enumerate(axes):
        before, after = widths[i], widths[i + len(axes)]
        index[a] = slice(-before if before < 0 else 0, x.shape[a] + after if after < 0 else None)
        grow[a] = (before if before > 0 else 0, after if after > 0 else 0)
    return np.ascontiguousarray(pad(x[tuple(index)], grow, np.ravel(value)[0], mode))


def _spread_axes(values, axes, fill):
    out = list(fill)
    for v, a in zip(values, axes):
        out[a] = v
    return out


def dynamic_resize(x, roi, scales, sizes, axes=None, keep_aspect_ratio_policy="stretch", **attrs):
    """ONNX Resize from the run-time ``roi``, ``scales`` and ``sizes`` over ``axes``."""
    rank = x.ndim
    axes = list(range(rank)) if axes is None else [a % rank for a in axes]
    scales = [float(v) for v in np.ravel(scales).tolist()]
    sizes = [int(v) for v in np.ravel(sizes).tolist()]
    roi = [float(v) for v in np.ravel(roi).tolist()]
    if scales:
        if len(scales) != len(axes) or any(v <= 0 for v in scales):
            raise ValueError(f"dynamic_resize: scales {scales} must be positive, one per axis")
        full = _spread_axes(scales, axes, [1.0] * rank)
        out = [int(math.floor(f * d)) if a in axes else d for a, (f, d) in
               enumerate(zip(full, x.shape))]  # fmt: skip
    elif sizes:
        if len(sizes) != len(axes):
            raise ValueError(f"dynamic_resize: {len(sizes)} sizes for {len(axes)} axes")
        ratios = [n / x.shape[a] for n, a in zip(sizes, axes)]
        if keep_aspect_ratio_policy != "stretch":
            ordered = sorted(ratios)
            scale = ordered[0] if keep_aspect_ratio_policy == "not_larger" else ordered[-1]
            ratios = [scale] * len(axes)
            sizes = [int(scale * x.shape[a] + 0.5) for a in axes]
        out = _spread_axes(sizes, axes, list(x.shape))
        full = _spread_axes(ratios, axes, [1.0] * rank)
    else:
        raise ValueError("dynamic_resize: needs scales or sizes")
    crop = attrs["coordinate_transformation_mode"] == "tf_crop_and_resize"
    if crop:
        n = len(axes)
        if len(roi) != 2 * n:
            raise ValueError(f"dynamic_resize: roi must have {2 * n} values, got {roi}")
        roi = _spread_axes(roi[:n], axes, [0.0] * rank) + _spread_axes(roi[n:], axes, [1.0] * rank)
    return resize(x, tuple(out), tuple(full), roi if crop else None, **attrs)


def _run_time_axes(op, axes, ndim):
    picked = [int(a) for a in np.ravel(axes).tolist()]
    normal = [a + ndim if a < 0 else a for a in picked]
    if any(not 0 <= a < ndim for a in normal) or len(set(normal)) != len(normal):
        raise ValueError(f"{op}: bad axes {picked} for rank {ndim}")
    return tuple(normal)


def dynamic_squeeze(x, axes):
    """np.squeeze over the run-time ``axes``, which must have size 1."""
    picked = _run_time_axes("dynamic_squeeze", axes, x.ndim)
    if any(x.shape[a] != 1 for a in picked):
        raise _shape_error(f"dynamic_squeeze: axes {list(picked)} of shape {x.shape} are not all 1")
    return np.squeeze(x, picked).copy()


def dynamic_unsqueeze(x, axes):
    """np.expand_dims at the run-time ``axes`` of the result."""
    picked = [int(a) for a in np.ravel(axes).tolist()]
    return np.expand_dims(x, _run_time_axes("dynamic_unsqueeze", picked, x.ndim + len(picked)))


def dynamic_split(x, sizes, axis, count):
    """``x`` cut along ``axis`` into pieces of the run-time ``sizes``."""
    widths = [int(v) for v in np.ravel(sizes).tolist()]
    if len(widths) != count or any(w < 0 for w in widths) or np.sum(widths) != x.shape[axis]:
        raise _shape_error(
            f"dynamic_split: sizes {widths} must be {count} non-negative sizes adding up to "
            f"{x.shape[axis]}"
        )
    return tuple(np.ascontiguousarray(p) for p in np.split(x, np.cumsum(widths)[:-1], axis))


__all__ = [
    "dynamic_reshape",
    "dynamic_expand",
    "dynamic_full",
    "dynamic_arange",
    "dynamic_tile",
    "dynamic_reduce",
    "dynamic_trilu",
    "dynamic_scan",
    "dynamic_topk",
    "dynamic_pad",
    "dynamic_resize",
    "dynamic_squeeze",
    "dynamic_unsqueeze",
    "dynamic_split",
]
