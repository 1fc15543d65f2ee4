"""Max, average and global pooling.

Part of the NumPy reference kernels (`rvm.kernels.reference`).
"""

import numpy as np

from rvm.kernels.reference.common import _like
from rvm.kernels.reference.conv import _out_size, _pad_pairs, _tap, _windows
from rvm.kernels.reference.reduce import _lowest, max


def _pool_geometry(x, pool_size, strides, padding, dilation, ceil_mode):
    """(pads, extra, out_shape): ``extra`` is the right padding ceil-mode windows need beyond
    ``pads`` to stay in bounds."""
    pads = _pad_pairs(padding)
    out_sp, extra = [], []
    for i, k in enumerate(pool_size):
        o = _out_size(x.shape[2 + i], k, strides[i], pads[i], dilation[i], ceil_mode)
        reach = (o - 1) * strides[i] + dilation[i] * (k - 1) + 1
        out_sp.append(o)
        extra.append(int(np.maximum(reach - (x.shape[2 + i] + pads[i][0] + pads[i][1]), 0)))
    return pads, extra, out_sp


def _max_pool(x, pool_size, strides, padding, dilation, ceil_mode):
    """Max pooling over N-d windows; padding never wins (it is -inf)."""
    pads, extra, out_sp = _pool_geometry(x, pool_size, strides, padding, dilation, ceil_mode)
    low = _lowest(x.dtype)
    widths = [(0, 0), (0, 0)] + [(p[0], p[1] + e) for p, e in zip(pads, extra)]
    xp = np.pad(x, widths, constant_values=low)
    out = np.full(x.shape[:2] + tuple(out_sp), low, dtype=x.dtype)
    for _, patch in _windows(xp, pool_size, strides, dilation, out_sp):
        out = np.maximum(out, patch)
    return out


def _avg_pool(x, pool_size, strides, padding, dilation, ceil_mode, count_include_pad):
    """Average pooling over N-d windows.

    The divisor counts the window's input elements, plus its padding elements when
    ``count_include_pad``; the ceil-mode overhang past the padding is never counted.
    """
    pads, extra, out_sp = _pool_geometry(x, pool_size, strides, padding, dilation, ceil_mode)
    widths = [(0, 0), (0, 0)] + [(p[0], p[1] + e) for p, e in zip(pads, extra)]
    xp = np.pad(x.astype(np.float64), widths)
    if count_include_pad:
        padded = [x.shape[2 + i] + lo + hi for i, (lo, hi) in enumerate(pads)]
        weight = np.pad(np.ones(padded), [(0, e) for e in extra])
    else:
        weight = np.pad(np.ones(x.shape[2:]), widths[2:])
    total = np.zeros(x.shape[:2] + tuple(out_sp))
    count = np.zeros(tuple(out_sp))
    for _, patch in _windows(xp, pool_size, strides, dilation, out_sp):
        total += patch
    for _, cnt in _windows(weight, pool_size, strides, dilation, out_sp):
        count += cnt
    return _like(total / np.maximum(count, 1.0), x.dtype)


max_pool1d = max_pool2d = max_pool3d = _max_pool


avg_pool1d = avg_pool2d = avg_pool3d = _avg_pool


def max_pool_indices(x, pool_size, strides, padding, dilation, ceil_mode=False):
    """Where each window of ``max_poolNd`` found its maximum: the row-major index into the
    spatial plane of its (batch, channel); the first maximum wins a tie, padding never."""
    pads, extra, out_sp = _pool_geometry(x, pool_size, strides, padding, dilation, ceil_mode)
    widths = [(0, 0), (0, 0)] + [(p[0], p[1] + e) for p, e in zip(pads, extra)]
    xp = np.pad(x, widths, constant_values=_lowest(x.dtype))
    inside = np.pad(np.ones(x.shape[2:], dtype=bool), widths[2:])
    best = np.zeros(x.shape[:2] + tuple(out_sp), dtype=x.dtype)
    tap = np.zeros(best.shape, dtype=np.int64)
    seen = np.zeros(best.shape, dtype=bool)
    taps = list(np.ndindex(*pool_size))
    for t, offset in enumerate(taps):
        valid = inside[_tap(inside.ndim, offset, strides, dilation, out_sp)]
        patch = xp[_tap(xp.ndim, offset, strides, dilation, out_sp)]
        wins = valid & (~seen | (patch > best))
        best = np.where(wins, patch, best)
        tap = np.where(wins, t, tap)
        seen |= valid
    offsets = np.asarray(taps, dtype=np.int64).reshape(len(taps), len(pool_size))
    index = np.zeros(best.shape, dtype=np.int64)
    for i, o in enumerate(out_sp):
        trailing = (1,) * (len(out_sp) - i - 1)  # broadcasts the window starts along axis i
        start = (np.arange(o) * strides[i] - pads[i][0]).reshape((o, *trailing))
        index = index * x.shape[2 + i] + start + offsets[tap, i] * dilation[i]
    return index


def global_avg_pool2d(x):
    return _like(np.mean(x, axis=(2, 3), keepdims=True), x.dtype)


def global_max_pool2d(x):
    return max(x, axis=(2, 3), keepdims=True)


__all__ = [
    "max_pool1d",
    "max_pool2d",
    "max_pool3d",
    "avg_pool1d",
    "avg_pool2d",
    "avg_pool3d",
    "max_pool_indices",
    "global_avg_pool2d",
    "global_max_pool2d",
]
