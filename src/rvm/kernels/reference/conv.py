"""Convolutions and transposed convolutions over N-d windows.

Part of the NumPy reference kernels (`rvm.kernels.reference`).
"""

import numpy as np

from rvm.kernels.reference.common import (
    _bf16_values,
    _binary_dtype,
    _is_ml_float,
    _like,
    _round_bf16,
)


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


def conv2d_packed(x, w, channels, strides, padding, dilation, groups):
    """conv2d by a weight packed in panels of output channels: (groups, panels, kh, kw,
    c / groups, panel), unpacked to OIHW."""
    g, panels, kh, kw, cg, panel = w.shape
    full = w.transpose(0, 1, 5, 4, 2, 3).reshape(g, panels * panel, cg, kh, kw)
    oihw = full[:, : channels // groups].reshape(channels, cg, kh, kw)
    return _conv(x, oihw, strides, padding, dilation, groups)


def conv2d_winograd(x, u, padding, precision="fp32"):
    """conv2d (3x3, stride 1) by a weight transformed for Winograd's F(2x2, 3x3): ``u`` (16, o,
    c), ``G g G^T`` of each kernel ``g`` (G = [[1, 0, 0], [1/2, 1/2, 1/2], [1/2, -1/2, 1/2], [0,
    0, 1]]), taken back to OIHW by G's left inverse [[1, 0, 0, 0], [0, 1, -1, 0], [0, 0, 0,
    1]]. With ``precision="bf16"``, ``u`` is (16, o, ceil(c / 2)) int32 words of bf16 pairs:
    Winograd's own sum (`_winograd_bf16`)."""
    if precision == "bf16":
        return _winograd_bf16(x, u, padding)
    back = np.array([[1, 0, 0, 0], [0, 1, -1, 0], [0, 0, 0, 1]], dtype=np.float64)
    grid = u.astype(np.float64).reshape(4, 4, *u.shape[1:])
    oihw = np.einsum("ai,ijoc,bj->ocab", back, grid, back).astype(u.dtype)
    return _conv(x, oihw, (1, 1), padding, (1, 1), 1)


_BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], dtype=np.float32)
_AT = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], dtype=np.float32)


def _winograd_bf16(x, u, padding):
    """Winograd's F(2x2, 3x3) with bf16 products, as `rvm.kernels.winograd` sums: each tile's
    4 x 4 input window ``d`` transformed, ``V = B^T d B`` (float32, its rows first: the same
    bits), rounded to bf16; the
    products ``M = U V`` summed over the channels (float64 here, float32 there: the sums'
    order differs); ``Y = A^T M A``; ``u`` (16, o, c2) int32 words, word ``(xi, o, p)`` the bf16
    bits of ``U[xi, o, 2 p]`` (low half) and ``U[xi, o, 2 p + 1]`` (high half)."""
    n, c, h, w = x.shape
    pt, pl, pb, pr = padding
    oh, ow = h + pt + pb - 2, w + pl + pr - 2
    th, tw = (oh + 1) // 2, (ow + 1) // 2
    xp = np.zeros((n, c, 2 * th + 2, 2 * tw + 2), dtype=np.float32)
    kept_h, kept_w = min(h, 2 * th + 2 - pt), min(w, 2 * tw + 2 - pl)  # what the tiles read
    xp[:, :, pt : pt + kept_h, pl : pl + kept_w] = x[:, :, :kept_h, :kept_w]
    d = np.lib.stride_tricks.sliding_window_view(xp, (4, 4), axis=(2, 3))[:, :, ::2, ::2]
    rows = np.einsum("ai,nctuij->nctuaj", _BT, d, dtype=np.float32)  # down the rows first,
    v = _round_bf16(np.einsum("nctuaj,bj->nctuab", rows, _BT, dtype=np.float32))  # as there
    halves = u.view(np.uint16).reshape(*u.shape[:2], -1)[:, :, :c]
    uf = _bf16_values(halves).astype(np.float64).reshape(4, 4, u.shape[1], c)
    m = np.einsum("abok,nktuab->notuab", uf, v.astype(np.float64))
    y = np.einsum("pa,notuab,qb->notpuq", _AT, m, _AT)
    return y.reshape(n, u.shape[1], 2 * th, 2 * tw)[:, :, :oh, :ow].astype(np.float32)


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


__all__ = [
    "conv1d",
    "conv2d",
    "conv2d_packed",
    "conv2d_winograd",
    "conv3d",
    "conv1d_transpose",
    "conv2d_transpose",
    "conv3d_transpose",
]
