"""NumPy reference implementations of every rvm op: the executable spec.

Each function is named after its op and called as ``f(*input_arrays, **attrs)`` with the
call's attributes (tuples, ints, floats, dtype names). Shapes in attributes arrive as concrete
ints: the caller resolves symbolic names first. ``concat`` and ``stack`` receive their tensors
as one sequence; ``split`` returns a tuple. Results are arrays (never NumPy scalars) of the
dtype the op's type rule promises: float32 in, float32 out.

This module is self-contained on purpose: it imports only ``math`` and ``numpy`` and holds only
functions and constants, because the compiler embeds its source in saved executables and
executes it in a fresh namespace. Function names shadow builtins (``sum``, ``max``, ``abs``...)
so that every op maps to the function of its name; the module never uses those builtins.
"""

import math

import numpy as np

SQRT_HALF = 0.7071067811865476
SQRT_2_OVER_PI = 0.7978845608028654


def _like(result, dtype):
    """``result`` as an array of ``dtype`` (undoes float64 from 0-d or mixed promotion)."""
    return np.asarray(result, dtype=dtype)


def _binary_dtype(a, b):
    return np.result_type(a.dtype, b.dtype)


# ---------------------------------------------------------------------------------------------
# Binary arithmetic, comparisons, logic


def add(a, b):
    return _like(np.add(a, b), _binary_dtype(a, b))


def subtract(a, b):
    return _like(np.subtract(a, b), _binary_dtype(a, b))


def multiply(a, b):
    return _like(np.multiply(a, b), _binary_dtype(a, b))


def divide(a, b):
    """True division for floats; integer division truncates toward zero (C, ONNX)."""
    dtype = _binary_dtype(a, b)
    if dtype.kind == "f":
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


def where(cond, a, b):
    return _like(np.where(cond, a, b), _binary_dtype(a, b))


# ---------------------------------------------------------------------------------------------
# Unary math and activations (float ops keep the input's float dtype)


def negative(x):
    return _like(np.negative(x), x.dtype)


def exp(x):
    return _like(np.exp(x), x.dtype)


def log(x):
    return _like(np.log(x), x.dtype)


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


def floor(x):
    if x.dtype.kind != "f":
        return np.array(x)
    return _like(np.floor(x), x.dtype)


def ceil(x):
    if x.dtype.kind != "f":
        return np.array(x)
    return _like(np.ceil(x), x.dtype)


def round(x):
    """Round half to even (NumPy, ONNX Round)."""
    if x.dtype.kind != "f":
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
    return np.asarray(x).astype(dtype)


# ---------------------------------------------------------------------------------------------
# Reductions (axis: None or a tuple of ints)


def _acc_dtype(x):
    """Sums and products keep the dtype; bools count as int64 (NumPy)."""
    return np.int64 if x.dtype == np.bool_ else x.dtype


def sum(x, axis=None, keepdims=False):
    return _like(np.sum(x, axis=axis, keepdims=keepdims, dtype=_acc_dtype(x)), _acc_dtype(x))


def prod(x, axis=None, keepdims=False):
    return _like(np.prod(x, axis=axis, keepdims=keepdims, dtype=_acc_dtype(x)), _acc_dtype(x))


def mean(x, axis=None, keepdims=False):
    return _like(np.mean(x, axis=axis, keepdims=keepdims), x.dtype)


def max(x, axis=None, keepdims=False):
    return _like(np.max(x, axis=axis, keepdims=keepdims), x.dtype)


def min(x, axis=None, keepdims=False):
    return _like(np.min(x, axis=axis, keepdims=keepdims), x.dtype)


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


# ---------------------------------------------------------------------------------------------
# Neural-network ops


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


def dense(x, w):
    """x @ w.T: ``w`` is (units, in_features) as in TVM and ONNX Gemm(transB=1)."""
    return _like(np.matmul(x, np.swapaxes(w, -1, -2)), _binary_dtype(x, w))


def _windows(xp, kernel, strides, dilation, out_shape):
    """For each kernel offset: (offset, the strided view of ``xp``'s spatial axes it reads)."""
    for offset in np.ndindex(*kernel):
        index = [slice(None)] * (xp.ndim - len(kernel))
        for k, s, d, o in zip(offset, strides, dilation, out_shape):
            index.append(slice(k * d, k * d + s * (o - 1) + 1, s))
        yield offset, xp[tuple(index)]


def _out_size(size, kernel, stride, pads, dilation, ceil_mode=False):
    span = size + pads[0] + pads[1] - dilation * (kernel - 1) - 1
    if not ceil_mode:
        return span // stride + 1
    out = -(-span // stride) + 1
    return out - 1 if (out - 1) * stride >= size + pads[0] else out


def _conv(x, w, strides, pads, dilation, groups):
    """N-d convolution, NC+spatial / OI+spatial, cross-correlation as in every framework."""
    dtype = _binary_dtype(x, w)
    nsp = x.ndim - 2
    kernel = w.shape[2:]
    out_sp = [
        _out_size(x.shape[2 + i], kernel[i], strides[i], pads[i], dilation[i]) for i in range(nsp)
    ]
    xp = np.pad(x, [(0, 0), (0, 0)] + [tuple(p) for p in pads])
    n, c = x.shape[:2]
    o = w.shape[0]
    xg = xp.reshape((n, groups, c // groups) + xp.shape[2:])
    wg = w.reshape((groups, o // groups) + w.shape[1:])
    out = np.zeros((n, groups, o // groups, *out_sp), dtype=dtype)
    for offset, patch in _windows(xg, kernel, strides, dilation, out_sp):
        out += np.einsum("ngc...,goc->ngo...", patch, wg[(Ellipsis, *offset)]).astype(dtype)
    return out.reshape((n, o, *out_sp))


def conv1d(x, w, strides=(1,), padding=(0, 0), dilation=(1,), groups=1):
    """1-d convolution, NCW input and OIW weight; padding is (left, right)."""
    return _conv(x, w, strides, [padding], dilation, groups)


def conv2d(x, w, strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1):
    """2-d convolution, NCHW input and OIHW weight; padding is (top, left, bottom, right)."""
    pads = [(padding[0], padding[2]), (padding[1], padding[3])]
    return _conv(x, w, strides, pads, dilation, groups)


def _pool2d(x, pool_size, strides, padding, dilation, ceil_mode, reduce):
    """Window geometry shared by the pools; ``reduce(pads, extra, out_shape)`` does the rest.

    ``extra`` is the right padding ceil-mode windows need beyond ``pads`` to stay in bounds.
    """
    pads = [(padding[0], padding[2]), (padding[1], padding[3])]
    out_sp = []
    extra = []
    for i in range(2):
        o = _out_size(x.shape[2 + i], pool_size[i], strides[i], pads[i], dilation[i], ceil_mode)
        reach = (o - 1) * strides[i] + dilation[i] * (pool_size[i] - 1) + 1
        out_sp.append(o)
        extra.append(np.maximum(reach - (x.shape[2 + i] + pads[i][0] + pads[i][1]), 0))
    return reduce(pads, [int(e) for e in extra], out_sp)


def max_pool2d(
    x, pool_size=(1, 1), strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), ceil_mode=False
):
    """Max pooling over NCHW windows; padding never wins (it is -inf)."""
    low = np.asarray(-np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min).astype(x.dtype)

    def reduce(pads, extra, out_sp):
        widths = [(0, 0), (0, 0)] + [(p[0], p[1] + e) for p, e in zip(pads, extra)]
        xp = np.pad(x, widths, constant_values=low)
        out = np.full(x.shape[:2] + tuple(out_sp), low, dtype=x.dtype)
        for _, patch in _windows(xp, pool_size, strides, dilation, out_sp):
            out = np.maximum(out, patch)
        return out

    return _pool2d(x, pool_size, strides, padding, dilation, ceil_mode, reduce)


def avg_pool2d(
    x,
    pool_size=(1, 1),
    strides=(1, 1),
    padding=(0, 0, 0, 0),
    dilation=(1, 1),
    ceil_mode=False,
    count_include_pad=False,
):
    """Average pooling over NCHW windows.

    The divisor counts the window's input elements, plus its padding elements when
    ``count_include_pad``; the ceil-mode overhang past the padding is never counted.
    """

    def reduce(pads, extra, out_sp):
        widths = [(0, 0), (0, 0)] + [(p[0], p[1] + e) for p, e in zip(pads, extra)]
        xp = np.pad(x.astype(np.float64), widths)
        if count_include_pad:
            padded = [x.shape[2 + i] + pads[i][0] + pads[i][1] for i in range(2)]
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

    return _pool2d(x, pool_size, strides, padding, dilation, ceil_mode, reduce)


def global_avg_pool2d(x):
    return _like(np.mean(x, axis=(2, 3), keepdims=True), x.dtype)


def global_max_pool2d(x):
    return _like(np.max(x, axis=(2, 3), keepdims=True), x.dtype)


# ---------------------------------------------------------------------------------------------
# Layout and indexing


def reshape(x, shape):
    return np.reshape(x, shape)


def transpose(x, axes=None):
    return np.transpose(x, axes)


def expand_dims(x, axis):
    return np.expand_dims(x, axis)


def squeeze(x, axis=None):
    return np.squeeze(x, axis)


def flatten(x):
    """(N, d1, d2, ...) to (N, d1 * d2 * ...), as TVM's batch_flatten and ONNX Flatten(axis=1)."""
    rest = 1
    for d in x.shape[1:]:
        rest *= d
    return np.reshape(x, (x.shape[0], rest))


def concat(tensors, axis=0):
    return np.concatenate(tensors, axis=axis)


def split(x, indices_or_sections, axis=0):
    """A tuple of pieces: ``sections`` equal pieces, or cut before each of ``indices``."""
    return tuple(np.split(x, indices_or_sections, axis=axis))


def stack(tensors, axis=0):
    return np.stack(tensors, axis=axis)


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


def broadcast_to(x, shape):
    return np.array(np.broadcast_to(x, shape))


def pad(x, pad_width, pad_value=0.0):
    """Constant padding; ``pad_width`` holds a (before, after) pair per axis."""
    return np.pad(x, pad_width, constant_values=np.asarray(pad_value).astype(x.dtype))


def tile(x, reps):
    return np.tile(x, reps)


# ---------------------------------------------------------------------------------------------
# Creation


def zeros(shape, dtype="float32"):
    return np.zeros(shape, dtype=dtype)


def ones(shape, dtype="float32"):
    return np.ones(shape, dtype=dtype)


def full(shape, fill_value, dtype="float32"):
    return np.full(shape, fill_value, dtype=dtype)


def arange(start, stop, step=1, dtype="int64"):
    return np.arange(start, stop, step, dtype=dtype)


def one_hot(indices, depth, on_value=1.0, off_value=0.0, axis=-1, dtype="float32"):
    """``on_value`` where the index equals the position along the new ``axis``, else off.

    Negative indices count from ``depth`` (ONNX); indices out of range give an all-off row.
    """
    idx = np.where(indices < 0, indices + depth, indices)
    hot = idx[..., None] == np.arange(depth)
    out = np.where(hot, np.asarray(on_value).astype(dtype), np.asarray(off_value).astype(dtype))
    return np.moveaxis(out, -1, axis)


def shape_of(x):
    return np.array(np.shape(x), dtype=np.int64)
