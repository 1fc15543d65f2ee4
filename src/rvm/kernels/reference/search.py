"""Searching and sorting: topk, nonzero, unique.

Part of the NumPy reference kernels (`rvm.kernels.reference`).
"""

import numpy as np


def topk(x, k, axis=-1, largest=True, sorted=True):
    """The ``k`` largest (or smallest) values along ``axis`` in order, and their int64
    indices; equal values come lowest index first (ONNX TopK)."""
    axis = axis % x.ndim
    if largest:  # a stable sort of the reversed axis, reversed back, keeps ties in order
        n = x.shape[axis]
        order = n - 1 - np.flip(np.argsort(np.flip(x, axis), axis=axis, kind="stable"), axis)
    else:
        order = np.argsort(x, axis=axis, kind="stable")
    idx = np.take(order, np.arange(k), axis=axis)
    return np.take_along_axis(x, idx, axis), idx.astype(np.int64)


def nonzero(x):
    """The int64 indices of the nonzero elements, one row per axis (ONNX NonZero)."""
    return np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)


def unique(x, axis=None, sorted=True):
    """The unique elements (or slices along ``axis``; None: of the flattened ``x``), the int64
    index of each one's first occurrence, the inverse indices that rebuild ``x``, and the
    counts. ``sorted=False`` keeps them in order of first occurrence (ONNX Unique)."""
    y, first, inverse, counts = np.unique(
        x, return_index=True, return_inverse=True, return_counts=True, axis=axis
    )
    inverse = np.reshape(inverse, -1)
    if not sorted:
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        y = np.take(y, order, axis=0 if axis is None else axis)
        first, counts, inverse = first[order], counts[order], rank[inverse]
    return tuple(
        [np.asarray(y, x.dtype)] + [np.asarray(a, np.int64) for a in (first, inverse, counts)]
    )


__all__ = ["topk", "nonzero", "unique"]
