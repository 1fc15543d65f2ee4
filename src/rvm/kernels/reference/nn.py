"""Neural-network ops: softmax, normalizations, lrn, matmul, einsum, dense.

Part of the NumPy reference kernels (`rvm.kernels.reference`).
"""

import numpy as np

from rvm.kernels.reference.common import _binary_dtype, _is_ml_float, _like


def softmax(x, axis=-1):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return _like(e / np.sum(e, axis=axis, keepdims=True), x.dtype)


def log_softmax(x, axis=-1):
    s = x - np.max(x, axis=axis, keepdims=True)
    return _like(s - np.log(np.sum(np.exp(s), axis=axis, keepdims=True)), x.dtype)


def layer_norm(x, gamma, beta, axes=(-1,), epsilon=1e-5):
    """Normalize over ``axes``; gamma and beta have the shape of those axes, in order."""
    axes = tuple(sorted(a % x.ndim for a in axes))
    m = np.mean(x, axis=axes, keepdims=True)
    v = np.var(x, axis=axes, keepdims=True)
    shape = [x.shape[i] if i in axes else 1 for i in range(x.ndim)]
    y = (x - m) / np.sqrt(v + epsilon) * np.reshape(gamma, shape) + np.reshape(beta, shape)
    return _like(y, x.dtype)


def batch_norm(x, gamma, beta, mean, var, axis=1, epsilon=1e-5):
    """Inference batch norm with the given statistics, per channel along ``axis``."""
    shape = [1] * x.ndim
    shape[axis] = x.shape[axis]

    def per_channel(t):
        return np.reshape(t, shape)

    scale = per_channel(gamma) / np.sqrt(per_channel(var) + epsilon)
    return _like((x - per_channel(mean)) * scale + per_channel(beta), x.dtype)


def lrn(x, size=5, axis=1, alpha=1e-4, beta=0.75, bias=1.0):
    """Local response normalization (ONNX): x / (bias + alpha / size * sum x^2) ** beta.

    The sum runs over channels ``c - (size - 1) // 2`` to ``c + size // 2`` along ``axis``.
    """
    sq = np.moveaxis(np.square(x), axis, -1)
    before, after = (size - 1) // 2, size // 2
    padded = np.pad(sq, [(0, 0)] * (sq.ndim - 1) + [(before, after)])
    window = np.zeros_like(sq)
    for k in range(size):
        window = window + padded[..., k : k + sq.shape[-1]]
    div = np.power(bias + (alpha / size) * np.moveaxis(window, -1, axis), beta)
    return _like(x / div, x.dtype)


def matmul(a, b):
    return _like(np.matmul(a, b), _binary_dtype(a, b))


def einsum(*operands, equation):
    """NumPy's einsum of ``operands`` in the operands' promoted dtype; ml_dtypes' floats
    (bfloat16...), for which einsum has no loops, compute in float32 and round once."""
    dtype = np.result_type(*operands)
    if _is_ml_float(dtype):
        operands = [o.astype(np.float32) for o in operands]
    return _like(np.einsum(equation, *operands, optimize=True), dtype)


def dense(x, w):
    """x @ w.T: ``w`` is (units, in_features) as in TVM and ONNX Gemm(transB=1)."""
    return _like(np.matmul(x, np.swapaxes(w, -1, -2)), _binary_dtype(x, w))


__all__ = ["softmax", "log_softmax", "layer_norm", "batch_norm", "lrn", "matmul", "einsum", "dense"]
