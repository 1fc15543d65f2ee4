"""Reductions and scans (axis: None or a tuple of ints).

Part of the NumPy reference kernels (`rvm.kernels.reference`).
"""

import numpy as np

from rvm.kernels.reference.common import _is_float, _like


def _acc_dtype(x):
    """Sums and products keep the dtype; bools count as int64 (NumPy)."""
    return np.int64 if x.dtype == np.bool_ else x.dtype


def sum(x, axis=None, keepdims=False):
    return _like(np.sum(x, axis=axis, keepdims=keepdims, dtype=_acc_dtype(x)), _acc_dtype(x))


def prod(x, axis=None, keepdims=False):
    return _like(np.prod(x, axis=axis, keepdims=keepdims, dtype=_acc_dtype(x)), _acc_dtype(x))


def mean(x, axis=None, keepdims=False):
    return _like(np.mean(x, axis=axis, keepdims=keepdims), x.dtype)


def _lowest(dtype):
    """The identity of max: -inf, the least integer, or False."""
    dtype = np.dtype(dtype)
    if _is_float(dtype):
        return dtype.type(-np.inf)
    return np.False_ if dtype.kind == "b" else np.iinfo(dtype).min


def _highest(dtype):
    """The identity of min: inf, the greatest integer, or True."""
    dtype = np.dtype(dtype)
    if _is_float(dtype):
        return dtype.type(np.inf)
    return np.True_ if dtype.kind == "b" else np.iinfo(dtype).max


def max(x, axis=None, keepdims=False):
    """The maximum; over no elements it is the identity ``_lowest`` (ONNX ReduceMax)."""
    return _like(np.max(x, axis=axis, keepdims=keepdims, initial=_lowest(x.dtype)), x.dtype)


def min(x, axis=None, keepdims=False):
    """The minimum; over no elements it is the identity ``_highest`` (ONNX ReduceMin)."""
    return _like(np.min(x, axis=axis, keepdims=keepdims, initial=_highest(x.dtype)), x.dtype)


def argmax(x, axis=None, keepdims=False):
    return _like(np.argmax(x, axis=axis, keepdims=keepdims), np.int64)


def argmin(x, axis=None, keepdims=False):
    return _like(np.argmin(x, axis=axis, keepdims=keepdims), np.int64)


def variance(x, axis=None, keepdims=False):
    """Population variance (ddof=0)."""
    return _like(np.var(x, axis=axis, keepdims=keepdims), x.dtype)


def cumsum(x, axis=None, exclusive=False):
    """Inclusive (or exclusive) running sum along ``axis``; None flattens first."""
    if axis is None:
        x = np.ravel(x)
        axis = 0
    out = np.cumsum(x, axis=axis, dtype=_acc_dtype(x))
    if exclusive:
        out = out - x
    return _like(out, _acc_dtype(x))


def cumprod(x, axis=None, exclusive=False):
    """Inclusive (or exclusive: starting from 1) running product along ``axis``."""
    if axis is None:
        x = np.ravel(x)
        axis = 0
    out = np.moveaxis(np.cumprod(x, axis=axis, dtype=_acc_dtype(x)), axis, 0)
    if exclusive:
        out = np.concatenate([np.ones_like(out[:1]), out[:-1]])
    return _like(np.moveaxis(out, 0, axis), _acc_dtype(x))


__all__ = ["sum", "prod", "mean", "max", "min", "argmax", "argmin", "variance", "cumsum", "cumprod"]
