"""NumPy reference implementations of every rvm op: the executable spec.

Each function is named after its op and called as ``f(*input_arrays, **attrs)`` with the
call's attributes (tuples, ints, floats, dtype names). Shapes in attributes arrive as concrete
ints: the caller resolves symbolic names first. ``concat`` and ``stack`` receive their tensors
as one sequence; ``split`` returns a tuple. Results are arrays (never NumPy scalars) of the
dtype the op's type rule promises: float32 in, float32 out.

This module is self-contained on purpose: it imports only ``math`` and ``numpy`` (and
``ml_dtypes``, on first use of a narrow dtype such as bfloat16) and holds only functions and
constants, because the compiler embeds its source in saved executables and
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


def _dtype(name):
    """The numpy dtype ``name``. A narrow one (bfloat16, float8_e4m3fn, int4...) is ml_dtypes',
    imported here on first use because importing it registers its names with numpy: a saved
    executable may run this library in a process that never imported it."""
    try:
        return np.dtype(name)
    except TypeError:
        import ml_dtypes  # noqa: F401

    return np.dtype(name)


def _is_float(dtype):
    """Whether ``dtype`` is a float, ml_dtypes' bfloat16/float8... (numpy kind "V") included."""
    return dtype.kind == "f" or dtype.name.startswith(("bfloat", "float"))


def _is_ml_float(dtype):
    """Whether ``dtype`` is one of ml_dtypes' floats, for which some numpy functions (einsum)
    have no loops: those compute in float32 and round once."""
    return _is_float(dtype) and dtype.name not in ("float16", "float32", "float64")


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


def _windows(xp, kernel, strides, dilation, out_shape):
    """For each kernel offset: (offset, the strided view of ``xp``'s spatial axes it reads)."""
    for offset in np.ndindex(*kernel):
        yield offset, xp[_tap(xp.ndim, offset, strides, dilation, out_shape)]


def _tap(ndim, offset, strides, dilation, out_shape):
    """The index of the elements kernel ``offset`` meets, over trailing spatial axes."""
    index = [slice(None)] * (ndim - len(offset))
    for k, s, d, o in zip(offset, strides, dilation, out_shape):
        index.append(slice(k * d, k * d + s * (o - 1) + 1, s))
    return tuple(index)


def _pad_pairs(padding):
    """(before..., after...) as one (before, after) pair per spatial axis."""
    n = len(padding) // 2
    return [(padding[i], padding[i + n]) for i in range(n)]


def _out_size(size, kernel, stride, pads, dilation, ceil_mode=False):
    span = size + pads[0] + pads[1] - dilation * (kernel - 1) - 1
    if not ceil_mode:
        return span // stride + 1
    out = -(-span // stride) + 1
    return out - 1 if (out - 1) * stride >= size + pads[0] else out


def _conv(x, w, strides, padding, dilation, groups):
    """N-d convolution, NC+spatial / OI+spatial, cross-correlation as in every framework."""
    dtype = _binary_dtype(x, w)
    if _is_ml_float(dtype):  # bfloat16, float8...: einsum has no loops for ml_dtypes' floats
        wide = _conv(x.astype(np.float32), w.astype(np.float32), strides, padding, dilation, groups)
        return _like(wide, dtype)
    pads = _pad_pairs(padding)
    kernel = w.shape[2:]
    out_sp = [
        _out_size(x.shape[2 + i], k, strides[i], pads[i], dilation[i]) for i, k in enumerate(kernel)
    ]
    xp = np.pad(x, [(0, 0), (0, 0)] + pads)
    n, c = x.shape[:2]
    o = w.shape[0]
    xg = xp.reshape((n, groups, c // groups) + xp.shape[2:])
    wg = w.reshape((groups, o // groups) + w.shape[1:])
    out = np.zeros((n, groups, o // groups, *out_sp), dtype=dtype)
    for offset, patch in _windows(xg, kernel, strides, dilation, out_sp):
        out += np.einsum("ngc...,goc->ngo...", patch, wg[(Ellipsis, *offset)]).astype(dtype)
    return out.reshape((n, o, *out_sp))


conv1d = conv2d = conv3d = _conv  # padding is (before..., after...) per spatial axis


def _conv_transpose(x, w, strides, padding, output_padding, dilation, groups):
    """N-d transposed convolution, NC+spatial input, IO+spatial weight (the gradient of conv).

    Input position ``i`` and kernel offset ``k`` add into position ``i * stride + k * dilation``
    of the full result; the output is that result from ``before`` on, ``after`` short of its
    end and ``output_padding`` longer (zeros past the end).
    """
    dtype = _binary_dtype(x, w)
    if _is_ml_float(dtype):
        wide = _conv_transpose(
            x.astype(np.float32), w.astype(np.float32), strides, padding, output_padding,
            dilation, groups,
        )  # fmt: skip
        return _like(wide, dtype)
    n, c = x.shape[:2]
    kernel = w.shape[2:]
    og = w.shape[1]
    pads = _pad_pairs(padding)
    sizes = x.shape[2:]
    full = [s * (i - 1) + d * (k - 1) + 1 for i, k, s, d in zip(sizes, kernel, strides, dilation)]
    out_sp = [f - lo - hi + e for f, (lo, hi), e in zip(full, pads, output_padding)]
    reach = [np.maximum(f, lo + o) for f, (lo, _), o in zip(full, pads, out_sp)]
    acc = np.zeros((n, groups, og, *reach), dtype=dtype)
    xg = x.reshape((n, groups, c // groups) + sizes)
    wg = w.reshape((groups, c // groups, og) + kernel)
    for offset in np.ndindex(*kernel):
        tap = _tap(acc.ndim, offset, strides, dilation, sizes)
        acc[tap] += np.einsum("ngc...,gco->ngo...", xg, wg[(Ellipsis, *offset)]).astype(dtype)
    crop = tuple(slice(lo, lo + o) for (lo, _), o in zip(pads, out_sp))
    return acc[(Ellipsis, *crop)].reshape((n, groups * og, *out_sp))


conv1d_transpose = conv2d_transpose = conv3d_transpose = _conv_transpose


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


def broadcast_to(x, shape):
    return np.array(np.broadcast_to(x, shape))


def pad(x, pad_width, pad_value=0.0, mode="constant"):
    """``x`` padded by a (before, after) pair per axis: with ``pad_value`` ("constant"), the
    edge value ("edge"), the mirror image without the edge ("reflect") or the other end
    ("wrap"), NumPy's modes of those names."""
    if mode == "constant":
        return np.pad(x, pad_width, constant_values=np.asarray(pad_value).astype(x.dtype))
    return np.pad(x, pad_width, mode=mode)


def tile(x, reps):
    return np.tile(x, reps)


def trilu(x, k=0, upper=True):
    """The upper (``np.triu``) or lower (``np.tril``) triangle of the last two axes, from the
    ``k``-th diagonal; the rest is zero."""
    return np.triu(x, k) if upper else np.tril(x, k)


# ---------------------------------------------------------------------------------------------
# Image resizing (ONNX Resize): one axis at a time, since the interpolation is separable


def _resize_source(mode, out, scale, n_in, size, roi):
    """The source coordinate of each output position along one axis, and the positions
    outside the input (tf_crop_and_resize only; else None). ``length`` is the fractional
    output length ``scale * n_in`` that ONNX's formulas use."""
    length = scale * n_in
    if mode == "align_corners":
        return (np.zeros(size) if length == 1 else out * (n_in - 1) / (length - 1)), None
    if mode == "asymmetric":
        return out / scale, None
    if mode == "tf_crop_and_resize":
        lo, hi = roi
        if length == 1:
            src = np.full(size, (hi - lo) * (n_in - 1) / 2)
        else:
            src = out * (hi - lo) * (n_in - 1) / (length - 1)
        src = src + lo * (n_in - 1)
        return src, (src < 0) | (src > n_in - 1)
    if mode == "pytorch_half_pixel" and length == 1:
        return np.full(size, -0.5), None
    src = (out + 0.5) / scale - 0.5  # half_pixel, pytorch_half_pixel
    if mode == "half_pixel_symmetric":
        src = src + n_in / 2 * (1 - size / length)
    return src, None


def _cubic_kernel(t, a):
    t = np.abs(t)
    near = ((a + 2) * t - (a + 3)) * t * t + 1
    far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return np.where(t <= 1, near, np.where(t < 2, far, 0.0))


def _resize_coeffs(ratio, scale, mode, nearest_mode, cubic_coeff_a, antialias):
    """Interpolation weights, one row per output position, for the taps around its source
    (``ratio``: the source's distance past the tap before it; 1 when exactly on a tap)."""
    r = ratio[:, None]
    if mode == "nearest":
        below = {
            "round_prefer_floor": r <= 0.5,
            "round_prefer_ceil": r < 0.5,
            "floor": np.ones_like(r, bool),
            "ceil": np.zeros_like(r, bool),
        }[nearest_mode] & (r != 1)
        return np.concatenate([below, ~below], axis=1).astype(np.float64)
    reach = 1 if mode == "linear" else 2
    if antialias:  # a kernel stretched by 1 / scale when shrinking, normalized
        s = np.minimum(scale, 1.0)
        start = int(np.floor(-reach / s) + 1)
        taps = np.arange(start, 2 - start)
        t = (taps[None, :] - r) * s
        w = np.clip(1 - np.abs(t), 0, 1) if mode == "linear" else _cubic_kernel(t, cubic_coeff_a)
        return w / np.sum(w, axis=1, keepdims=True)
    if mode == "linear":
        return np.concatenate([1 - r, r], axis=1)
    return _cubic_kernel(np.arange(-1, 3)[None, :] - r, cubic_coeff_a)


def _resize_axis(x, axis, size, scale, roi, attrs):
    """``x`` (float64) resized along ``axis`` to ``size``."""
    n_in = x.shape[axis]
    if size == 0:
        return np.take(x, np.arange(0), axis=axis)
    src, outside = _resize_source(
        attrs["coordinate_transformation_mode"], np.arange(size, dtype=np.float64), scale, n_in,
        size, roi,
    )  # fmt: skip
    base = np.floor(src)
    ratio = np.where(src == base, 1.0, src - base)
    coeffs = _resize_coeffs(
        ratio, scale, attrs["mode"], attrs["nearest_mode"], attrs["cubic_coeff_a"],
        attrs["antialias"],
    )  # fmt: skip
    taps = coeffs.shape[1]
    pad = -(-taps // 2)
    frac = src + pad - np.floor(src + pad)
    if taps % 2 == 0:
        first = np.where(frac == 0, -(taps // 2), 1 - taps // 2)
    else:
        first = np.where(frac <= 0.5, -((taps - 1) // 2), 1 - (taps - 1) // 2)
    idx = (np.floor(src + pad).astype(np.int64) + first)[:, None] + np.arange(taps) - pad
    if attrs["exclude_outside"]:
        coeffs = np.where((idx < 0) | (idx >= n_in), 0.0, coeffs)
        total = np.sum(coeffs, axis=1, keepdims=True)
        coeffs = coeffs / np.where(total == 0, 1.0, total)
    picked = np.take(x, np.clip(idx, 0, n_in - 1), axis=axis)
    shape = (1,) * axis + coeffs.shape + (1,) * (x.ndim - axis - 1)
    out = np.sum(picked * coeffs.reshape(shape), axis=axis + 1)
    if outside is not None:
        mask = outside.reshape((1,) * axis + (size,) + (1,) * (x.ndim - axis - 1))
        out = np.where(mask, attrs["extrapolation_value"], out)
    return out


def resize(
    x,
    sizes,
    scales,
    roi=None,
    mode="nearest",
    coordinate_transformation_mode="half_pixel",
    nearest_mode="round_prefer_floor",
    cubic_coeff_a=-0.75,
    exclude_outside=False,
    extrapolation_value=0.0,
    antialias=False,
):
    """ONNX Resize with every axis given: ``sizes`` is the output shape, ``scales`` the
    factor each axis's coordinate transform uses, ``roi`` (start..., end...) the crop of
    tf_crop_and_resize. Computed in float64; integer results round and saturate."""
    attrs = {
        "mode": mode,
        "coordinate_transformation_mode": coordinate_transformation_mode,
        "nearest_mode": nearest_mode,
        "cubic_coeff_a": cubic_coeff_a,
        "exclude_outside": exclude_outside,
        "extrapolation_value": extrapolation_value,
        "antialias": antialias,
    }
    out = np.asarray(x, np.float64)
    for axis in range(x.ndim):
        span = (0.0, 1.0) if roi is None else (roi[axis], roi[axis + x.ndim])
        if (
            math.isclose(scales[axis], 1.0)
            and sizes[axis] == x.shape[axis]
            and (math.isclose(span[0], 0.0) and math.isclose(span[1], 1.0))
        ):
            continue
        out = _resize_axis(out, axis, sizes[axis], scales[axis], span, attrs)
    if x.dtype.kind in "iu":
        info = np.iinfo(x.dtype)
        out = np.clip(np.rint(out), info.min, info.max)
    return _like(out, x.dtype)


# ---------------------------------------------------------------------------------------------
# Searching and sorting


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


def attention(q, k, v, mask, scale=1.0, mask_kind="add", fill=0.0, masked_row=0.0):
    """softmax(scale * q @ k^T, masked) @ v; rows whose scores are all -inf give
    ``masked_row``."""
    s = _like(np.matmul(q, np.swapaxes(k, -1, -2)) * scale, q.dtype)
    s = s + mask if mask_kind == "add" else np.where(mask, s, np.asarray(fill, q.dtype))
    top = np.max(s, axis=-1, keepdims=True, initial=-np.inf)
    empty = top == -np.inf
    with np.errstate(invalid="ignore", divide="ignore"):
        e = np.exp(s - np.where(empty, 0, top))
        p = e / np.sum(e, axis=-1, keepdims=True)
    p = np.where(empty, 0, p)
    out = np.matmul(_like(p, q.dtype), v)
    return _like(np.where(empty, np.asarray(masked_row, q.dtype), out), q.dtype)


def rms_norm(x, gamma, axes=(-1,), epsilon=1e-6):
    """x / sqrt(mean(x * x, axes) + epsilon) * gamma."""
    ms = np.mean(x * x, axis=tuple(axes), keepdims=True)
    return _like(x / np.sqrt(ms + np.asarray(epsilon, x.dtype)) * gamma, x.dtype)


def rope(x, cos, sin):
    """x * cos + rotate_half(x) * sin, rotate_half(x) = concat(-x2, x1) of the last axis's
    halves."""
    half = x.shape[-1] // 2
    rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return _like(x * cos + rotated * sin, x.dtype)


def check(x, cond, detail, message):
    """``x`` when ``cond`` holds, else ``ValueError(message)`` with ``{0}``, ``{1}``...
    replaced by the elements of ``detail``."""
    if not bool(cond):
        raise ValueError(message.format(*np.asarray(detail).tolist()))
    return x


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


# ---------------------------------------------------------------------------------------------
# Creation


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


def _contiguous(value):
    """``value`` (an array or a tuple of them) in C order, copied only where it is not."""
    if isinstance(value, tuple):
        return tuple(_contiguous(v) for v in value)
    if isinstance(value, np.ndarray) and not value.flags.c_contiguous:
        return value.copy(order="C")
    return value


def _store_exact(out, value):
    """``out[...] = value`` where ``value`` must have ``out``'s shape (no broadcasting): a
    result whose shape was computed at run time, written into an output planned from types."""
    if np.shape(value) != out.shape:
        raise ValueError(
            f"the result's shape {np.shape(value)}, computed at run time, differs from the "
            f"shape its type promised, {out.shape}"
        )
    out[...] = value


def _run_time_shape(op, shape, dims):
    """The result shape ``shape`` checked against ``dims``, the dimensions the program knew
    (ints; names resolved to the bound sizes, or left as names where the kernel has none)."""
    shape = tuple(int(d) for d in shape)
    if len(shape) != len(dims) or any(
        isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d != s
        for d, s in zip(dims, shape)
    ):
        raise ValueError(
            f"{op}: the shape computed at run time, {shape}, contradicts the shape the program "
            f"promised, {tuple(dims)}"
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
        raise ValueError(
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
        raise ValueError(
            f"dynamic_expand: cannot expand a tensor of shape {x.shape} to {target}"
        ) from None
    _run_time_shape("dynamic_expand", out_shape, dims)
    return np.ascontiguousarray(np.broadcast_to(x, out_shape))


def dynamic_full(shape, fill_value, dtype, dims):
    """A tensor of the run-time ``shape`` filled with ``fill_value``."""
    target = tuple(int(d) for d in np.ravel(shape).tolist())
    if any(d < 0 for d in target):
        raise ValueError(f"dynamic_full: negative dimension in the shape {target}")
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
        raise ValueError(f"dynamic_tile: bad repeats {counts} for a tensor of shape {x.shape}")
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
        raise ValueError(f"dynamic_squeeze: axes {list(picked)} of shape {x.shape} are not all 1")
    return np.squeeze(x, picked).copy()


def dynamic_unsqueeze(x, axes):
    """np.expand_dims at the run-time ``axes`` of the result."""
    picked = [int(a) for a in np.ravel(axes).tolist()]
    return np.expand_dims(x, _run_time_axes("dynamic_unsqueeze", picked, x.ndim + len(picked)))


def dynamic_split(x, sizes, axis, count):
    """``x`` cut along ``axis`` into pieces of the run-time ``sizes``."""
    widths = [int(v) for v in np.ravel(sizes).tolist()]
    if len(widths) != count or any(w < 0 for w in widths) or np.sum(widths) != x.shape[axis]:
        raise ValueError(
            f"dynamic_split: sizes {widths} must be {count} non-negative sizes adding up to "
            f"{x.shape[axis]}"
        )
    return tuple(np.ascontiguousarray(p) for p in np.split(x, np.cumsum(widths)[:-1], axis))


# ---------------------------------------------------------------------------------------------
# Quantized ops (rvm.op.quantized): exact integer sums (float64 holds them exactly)


def _requantize(acc, bias, scale, axis, y_zero, low, high, dtype):
    """``clip(round(float32(acc + bias) * scale) + y_zero, low, high)`` as ``dtype``, with
    ``bias`` and ``scale`` per output channel along ``axis`` (or scalars)."""
    shape = [1] * acc.ndim
    shape[axis] = -1
    total = acc + np.reshape(bias.astype(np.float64), shape if bias.size > 1 else ())
    scaled = total.astype(np.float32) * np.reshape(scale, shape if scale.size > 1 else ())
    y = np.round(scaled.astype(np.float32)).astype(np.float64) + y_zero
    return np.clip(y, low, high).astype(dtype)


def qconv2d(x, w, bias, scale, x_zero, y_zero, low, high, dtype, strides, padding, dilation,
            groups):  # fmt: skip
    """Quantized 2-d convolution: int32 sums of ``(x - x_zero) * w``, requantized."""
    pads = _pad_pairs(padding)
    kernel = w.shape[2:]
    out_sp = [_out_size(x.shape[2 + i], k, strides[i], pads[i], dilation[i]) for i, k in
              enumerate(kernel)]  # fmt: skip
    xp = np.pad(x.astype(np.float64) - x_zero, [(0, 0), (0, 0)] + pads)
    n, c = x.shape[:2]
    o = w.shape[0]
    xg = xp.reshape((n, groups, c // groups) + xp.shape[2:])
    cols = np.stack([p for _, p in _windows(xg, kernel, strides, dilation, out_sp)], axis=3)
    cols = cols.reshape(n, groups, -1, int(np.prod(out_sp)))
    wk = w.astype(np.float64).reshape(groups, o // groups, -1)
    acc = np.matmul(wk[None], cols).reshape((n, o, *out_sp))
    return _requantize(acc, bias, scale, 1, y_zero, low, high, dtype)


def qdense(x, w, bias, scale, x_zero, y_zero, low, high, dtype):
    """Quantized ``x @ w.T``: int32 sums of ``(x - x_zero) * w``, requantized."""
    acc = np.matmul(x.astype(np.float64) - x_zero, w.astype(np.float64).T)
    return _requantize(acc, bias, scale, -1, y_zero, low, high, dtype)
