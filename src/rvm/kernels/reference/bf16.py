"""bf16 products (`rvm.op.bf16`): dense and conv2d of bf16-rounded inputs with float32 sums.

Part of the NumPy reference kernels (`rvm.kernels.reference`). The weights arrive as the int16
bits of bf16 values, as `rvm.transform.to_bf16` stores them; rounding is plain NumPy (ties to
even, NaN kept quiet), so no ml_dtypes is needed.
"""

import numpy as np

from rvm.kernels.reference.common import _like
from rvm.kernels.reference.conv import _conv

__all__ = ["bf16_bits", "conv2d_bf16", "dense_bf16"]


def _bf16_values(bits):
    """float32 values of the bf16 values whose bits are the int16 array ``bits``."""
    return (bits.astype(np.uint16).astype(np.uint32) << 16).view(np.float32)


def bf16_bits(x):
    """The bits (uint16) of the bf16 values nearest the float32 array ``x``: ties to even, a
    NaN a quiet NaN (as ml_dtypes rounds, without needing it)."""
    w = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (w + 0x7FFF + ((w >> 16) & 1)) >> 16
    nan = (w & 0x7FFFFFFF) > 0x7F800000
    return np.where(nan, (w >> 16) | 0x40, rounded).astype(np.uint16)


def _round_bf16(x):
    """float32 ``x`` rounded to the nearest bf16 (ties to even), as float32."""
    return (bf16_bits(x).astype(np.uint32) << 16).view(np.float32)


def dense_bf16(x, w):
    """``bf16(x) @ w.T`` with float32 sums; ``w`` (units, kp) int16 bf16 bits."""
    k = x.shape[-1]
    return _like(np.matmul(_round_bf16(x), _bf16_values(w)[:, :k].T), np.float32)


def conv2d_bf16(x, w, strides, padding, dilation, groups, kernel):
    """conv2d of ``bf16(x)`` with the flattened bf16 weight ``w`` (int16 bits)."""
    k = x.shape[1] // groups * kernel[0] * kernel[1]
    weight = _bf16_values(w)[:, :k].reshape(w.shape[0], x.shape[1] // groups, *kernel)
    return _conv(_round_bf16(x), weight, strides, padding, dilation, groups)
