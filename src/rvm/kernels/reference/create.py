"""Creation: zeros, ones, full, arange, one_hot, shape_of.

Part of the NumPy reference kernels (`rvm.kernels.reference`).
"""

import numpy as np

from rvm.kernels.reference.common import _dtype


def zeros(shape, dtype="float32"):
    return np.zeros(shape, dtype=_dtype(dtype))


def ones(shape, dtype="float32"):
    return np.ones(shape, dtype=_dtype(dtype))


def full(shape, fill_value, dtype="float32"):
    return np.full(shape, fill_value, dtype=_dtype(dtype))


def arange(start, stop, step=1, dtype="int64"):
    return np.arange(start, stop, step, dtype=_dtype(dtype))


def one_hot(indices, depth, on_value=1.0, off_value=0.0, axis=-1, dtype="float32"):
    """``on_value`` where the index equals the position along the new ``axis``, else off.

    Negative indices count from ``depth`` (ONNX); indices out of range give an all-off row.
    """
    idx = np.where(indices < 0, indices + depth, indices)
    hot = idx[..., None] == np.arange(depth)
    dtype = _dtype(dtype)
    out = np.where(hot, np.asarray(on_value).astype(dtype), np.asarray(off_value).astype(dtype))
    return np.moveaxis(out, -1, axis)


def shape_of(x):
    return np.array(np.shape(x), dtype=np.int64)


__all__ = ["zeros", "ones", "full", "arange", "one_hot", "shape_of"]
