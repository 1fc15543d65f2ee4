"""Indexing: slices, take, gather and scatter.

Part of the NumPy reference kernels (`rvm.kernels.reference`).
"""

import numpy as np


def strided_slice(x, begin, end, strides, axes):
    """x[begin:end:stride] along each of ``axes``; Python slicing, out-of-range ends clamp."""
    index = [slice(None)] * x.ndim
    for b, e, s, a in zip(begin, end, strides, axes):
        index[a] = slice(b, e, s)
    return np.array(x[tuple(index)])


def dynamic_slice(x, begin, end, axes, strides):
    """strided_slice with ``begin`` and ``end`` read from 1-d integer arrays at run time."""
    index = [slice(None)] * x.ndim
    for b, e, s, a in zip(np.ravel(begin).tolist(), np.ravel(end).tolist(), strides, axes):
        index[a] = slice(int(b), int(e), s)
    return np.array(x[tuple(index)])


def take(x, indices, axis=None):
    """NumPy take (negative indices count from the end); axis None takes from the flat x."""
    return np.take(x, indices, axis=axis)


def gather(x, indices, axis=0):
    """NumPy take_along_axis / ONNX GatherElements: out[i][j] = x[indices[i][j]][j] (axis 0)."""
    return np.take_along_axis(x, indices, axis=axis)


def gather_nd(x, indices, batch_dims=0):
    """ONNX GatherND: each index tuple along ``indices``' last axis picks a slice of ``x``;
    the first ``batch_dims`` axes of both are matched one to one."""
    b = batch_dims
    batch = x.shape[:b]
    size = int(np.prod(batch, dtype=np.int64))
    rows = np.reshape(x, (size,) + x.shape[b:])
    picks = np.reshape(indices, (size, -1, indices.shape[-1]))
    which = np.arange(size).reshape(size, 1)
    out = rows[(which, *np.moveaxis(picks, -1, 0))]
    return np.reshape(out, batch + indices.shape[b:-1] + x.shape[b + indices.shape[-1] :])


_SCATTER_REDUCE = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _scatter(x, where, updates, reduction):
    """``x`` with ``updates`` written (or combined by ``reduction``) at index tuple ``where``;
    repeated indices combine in order (NumPy's ``ufunc.at``)."""
    out = np.array(x)
    if reduction == "none":
        out[where] = updates
    else:
        _SCATTER_REDUCE[reduction].at(out, where, updates)
    return out


def scatter_elements(x, indices, updates, axis=0, reduction="none"):
    """ONNX ScatterElements, the inverse of ``gather``: ``out[..indices[i][j]..][j] = u[i][j]``
    along ``axis``; negative indices count from the end."""
    idx = np.where(indices < 0, indices + x.shape[axis], indices)
    where = list(np.indices(indices.shape, sparse=True))
    where[axis] = idx
    return _scatter(x, tuple(where), updates, reduction)


def scatter_nd(x, indices, updates, reduction="none"):
    """ONNX ScatterND, the inverse of ``gather_nd``: each index tuple along ``indices``' last
    axis names a slice of ``x`` that the matching slice of ``updates`` replaces."""
    return _scatter(x, tuple(np.moveaxis(indices, -1, 0)), updates, reduction)


__all__ = [
    "strided_slice",
    "dynamic_slice",
    "take",
    "gather",
    "gather_nd",
    "scatter_elements",
    "scatter_nd",
]
