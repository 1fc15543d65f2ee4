"""Elementwise ops: binary arithmetic, comparisons, logic, unary math, activations, casts.

Part of the NumPy reference kernels (`rvm.kernels.reference`).
"""

import math

import numpy as np

from rvm.kernels.reference.common import (
    SQRT_2_OVER_PI,
    SQRT_HALF,
    _binary_dtype,
    _dtype,
    _is_float,
    _like,
)


def add(a, b):
    return _like(np.add(a, b), _binary_dtype(a, b))


def subtract(a, b):
    return _like(np.subtract(a, b), _binary_dtype(a, b))


def multiply(a, b):
    return _like(np.multiply(a, b), _binary_dtype(a, b))


def divide(a, b):
    """True division for floats; integer division truncates toward zero (C, ONNX)."""
    dtype = _binary_dtype(a, b)
    if _is_float(dtype):
        return _like(np.true_divide(a, b), dtype)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.floor_divide(a, b)
        r = np.mod(a, b)
    q = np.where((r != 0) & ((np.asarray(a) < 0) != (np.asarray(b) < 0)), q + 1, q)
    return _like(q, dtype)


def floor_divide(a, b):
    return _like(np.floor_divide(a, b), _binary_dtype(a, b))


def mod(a, b):
    """Modulo with the sign of the divisor (Python, NumPy)."""
    return _like(np.mod(a, b), _binary_dtype(a, b))


def fmod(a, b):
    """Remainder with the sign of the dividend (C's fmod, ONNX Mod with fmod=1)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return _like(np.fmod(a, b), _binary_dtype(a, b))


def power(a, b):
    return _like(np.power(a, b), _binary_dtype(a, b))


def maximum(a, b):
    return _like(np.maximum(a, b), _binary_dtype(a, b))


def minimum(a, b):
    return _like(np.minimum(a, b), _binary_dtype(a, b))


def equal(a, b):
    return np.asarray(np.equal(a, b))


def not_equal(a, b):
    return np.asarray(np.not_equal(a, b))


def less(a, b):
    return np.asarray(np.less(a, b))


def less_equal(a, b):
    return np.asarray(np.less_equal(a, b))


def greater(a, b):
    return np.asarray(np.greater(a, b))


def greater_equal(a, b):
    return np.asarray(np.greater_equal(a, b))


def logical_and(a, b):
    return np.asarray(np.logical_and(a, b))


def logical_or(a, b):
    return np.asarray(np.logical_or(a, b))


def logical_not(x):
    return np.asarray(np.logical_not(x))


def bitwise_and(a, b):
    return _like(np.bitwise_and(a, b), _binary_dtype(a, b))


def bitwise_or(a, b):
    return _like(np.bitwise_or(a, b), _binary_dtype(a, b))


def bitwise_xor(a, b):
    return _like(np.bitwise_xor(a, b), _binary_dtype(a, b))


def bitwise_not(x):
    return _like(np.invert(x), x.dtype)


def _shift_parts(a, b):
    """``a`` and ``b`` in their common dtype, the shifts in range, and a safe shift count."""
    dtype = _binary_dtype(a, b)
    a, b = np.broadcast_arrays(np.asarray(a, dtype), np.asarray(b, dtype))
    in_range = (b >= 0) & (b < dtype.itemsize * 8)
    return a, in_range, np.where(in_range, b, 0)


def left_shift(a, b):
    """``a << b`` wrapping within the dtype; a shift out of [0, bits) gives 0 (ONNX BitShift)."""
    a, in_range, count = _shift_parts(a, b)
    unsigned = np.dtype(f"u{a.dtype.itemsize}")
    shifted = np.left_shift(a.astype(unsigned), count.astype(unsigned)).astype(a.dtype)
    return _like(np.where(in_range, shifted, 0), a.dtype)


def right_shift(a, b):
    """``a >> b``, arithmetic for signed dtypes; a shift out of [0, bits) gives the sign fill
    (0, or -1 for a negative signed value), as NumPy's saturating shift and ONNX BitShift."""
    a, in_range, count = _shift_parts(a, b)
    fill = np.where(a < 0, -1, 0).astype(a.dtype)
    return _like(np.where(in_range, np.right_shift(a, count), fill), a.dtype)


def where(cond, a, b):
    return _like(np.where(cond, a, b), _binary_dtype(a, b))


def negative(x):
    return _like(np.negative(x), x.dtype)


def exp(x):
    return _like(np.exp(x), x.dtype)


def log(x):
    return _like(np.log(x), x.dtype)


def log1p(x):
    """log(1 + x), precise for tiny x."""
    return _like(np.log1p(x), x.dtype)


def expm1(x):
    """exp(x) - 1, precise for tiny x."""
    return _like(np.expm1(x), x.dtype)


def logaddexp(a, b):
    """log(exp(a) + exp(b)) without overflow."""
    return _like(np.logaddexp(a, b), _binary_dtype(a, b))


def sqrt(x):
    return _like(np.sqrt(x), x.dtype)


def rsqrt(x):
    return _like(np.reciprocal(np.sqrt(x)), x.dtype)


def tanh(x):
    return _like(np.tanh(x), x.dtype)


def sigmoid(x):
    """1 / (1 + exp(-x)), as exp(-log(1 + exp(-x))): no overflow, precise in both tails."""
    return _like(np.exp(-np.logaddexp(0, -x)), x.dtype)


def erf(x):
    """The error function, elementwise through ``math.erf`` (NumPy has none)."""
    flat = np.asarray(x, dtype=np.float64).ravel()
    out = np.fromiter((math.erf(v) for v in flat.tolist()), np.float64, count=flat.size)
    return _like(out.reshape(np.shape(x)), x.dtype)


def abs(x):
    return _like(np.abs(x), x.dtype)


def sign(x):
    return _like(np.sign(x), x.dtype)


def sin(x):
    return _like(np.sin(x), x.dtype)


def cos(x):
    return _like(np.cos(x), x.dtype)


def asin(x):
    return _like(np.arcsin(x), x.dtype)


def acos(x):
    return _like(np.arccos(x), x.dtype)


def atan(x):
    return _like(np.arctan(x), x.dtype)


def asinh(x):
    return _like(np.arcsinh(x), x.dtype)


def acosh(x):
    return _like(np.arccosh(x), x.dtype)


def atanh(x):
    return _like(np.arctanh(x), x.dtype)


def floor(x):
    if not _is_float(x.dtype):
        return np.array(x)
    return _like(np.floor(x), x.dtype)


def ceil(x):
    if not _is_float(x.dtype):
        return np.array(x)
    return _like(np.ceil(x), x.dtype)


def round(x):
    """Round half to even (NumPy, ONNX Round)."""
    if not _is_float(x.dtype):
        return np.array(x)
    return _like(np.round(x), x.dtype)


def relu(x):
    return _like(np.maximum(x, np.zeros((), x.dtype)), x.dtype)


def leaky_relu(x, alpha=0.01):
    return _like(np.where(x > 0, x, x * x.dtype.type(alpha)), x.dtype)


def gelu(x, approximate="none"):
    """x * Phi(x) (erf form), or the tanh approximation when ``approximate == "tanh"``."""
    if approximate == "tanh":
        inner = SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)
        return _like(0.5 * x * (1.0 + np.tanh(inner)), x.dtype)
    return _like(0.5 * x * (1.0 + erf(_like(x * SQRT_HALF, x.dtype))), x.dtype)


def silu(x):
    return _like(x * sigmoid(x), x.dtype)


def softplus(x):
    """log(1 + exp(x)) without overflow."""
    return _like(np.logaddexp(0, x), x.dtype)


def clip(x, a_min=None, a_max=None):
    out = np.asarray(x)
    if a_min is not None:
        out = np.maximum(out, np.asarray(a_min).astype(x.dtype))
    if a_max is not None:
        out = np.minimum(out, np.asarray(a_max).astype(x.dtype))
    return _like(out, x.dtype)


def cast(x, dtype):
    return np.asarray(x).astype(_dtype(dtype))


def bitcast(x, dtype):
    return np.ascontiguousarray(x).view(_dtype(dtype))


__all__ = [
    "add",
    "subtract",
    "multiply",
    "divide",
    "floor_divide",
    "mod",
    "fmod",
    "power",
    "maximum",
    "minimum",
    "equal",
    "not_equal",
    "less",
    "less_equal",
    "greater",
    "greater_equal",
    "logical_and",
    "logical_or",
    "logical_not",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "bitwise_not",
    "left_shift",
    "right_shift",
    "where",
    "negative",
    "exp",
    "log",
    "log1p",
    "expm1",
    "logaddexp",
    "sqrt",
    "rsqrt",
    "tanh",
    "sigmoid",
    "erf",
    "abs",
    "sign",
    "sin",
    "cos",
    "asin",
    "acos",
    "atan",
    "asinh",
    "acosh",
    "atanh",
    "floor",
    "ceil",
    "round",
    "relu",
    "leaky_relu",
    "gelu",
    "silu",
    "softplus",
    "clip",
    "cast",
    "bitcast",
]
