"""Float max and average pooling for jit kernels, compiled once and called by every pool kernel.

`pool2d(x, out, is_max, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr, ceil_mode, include_pad)`
(flags 0 or 1) fills ``out`` (n, c, oh, ow) with the pools of ``x`` (n, c, ih, iw), both
C-contiguous of one float dtype, with the semantics of `rvm.op.max_pool2d` /
`rvm.op.avg_pool2d`: windows of kh x kw taps ``dh``/``dw`` apart, ``sh``/``sw`` apart, over
the input padded by ``pt``, ``pl``, ``pb``, ``pr`` (top, left, bottom, right); padding never
wins a max, and an average divides the sum of a window's input elements by their count (plus
its padding elements with ``include_pad``; a ceil-mode window's overhang past the padding
never counts). Averages sum in float64, as the reference does.

Kernels reach it through a C entry point (`rvm.runtime.native.entry`), so its code is compiled once,
not again into each kernel. Each channel is copied into a plane that holds the padding value
(-inf for max, 0 for average) around it, split into its stride phases, so each tap is one
long vectorizable run (`rvm.runtime.native.planes`). The output size is checked against the geometry
before any memory is touched (ValueError).
"""

from __future__ import annotations

import numba as nb
import numpy as np

from rvm.runtime.native import entry
from rvm.runtime.native.planes import U, padded_phases, phase_shape, tap_starts

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)


@nb.njit(**_OPTS)
def out_size(size, kern, stride, dil, lo, hi, ceil_mode):  # type: ignore[no-untyped-def]
    """The pooled size along one axis (-1 when the window is larger than the input)."""
    span = size + lo + hi - dil * (kern - 1) - 1
    if span < 0:
        return -1
    if not ceil_mode:
        return span // stride + 1
    o = -(-span // stride) + 1
    return o - 1 if (o - 1) * stride >= size + lo else o


@nb.njit(**_OPTS)
def _counts(n_out, size, kern, stride, dil, lo, hi, include_pad):  # type: ignore[no-untyped-def]
    """Per output position along one axis: how many of its window's taps count."""
    low, high = (-lo, size + hi) if include_pad else (0, size)
    counts = np.zeros(n_out, dtype=np.float64)
    for p_ in range(n_out):
        for t in range(kern):
            at = p_ * stride - lo + t * dil
            if low <= at < high:
                counts[p_] += 1
    return counts


@nb.njit(**_OPTS)
def _windows(flat, starts, acc, is_max):  # type: ignore[no-untyped-def]
    """``acc`` (the output plane, flat, rows as wide as a phase's) = the max (``is_max``) or
    the sum of every window, one run per tap (see `rvm.runtime.native.planes`)."""
    run = U(acc.shape[0])
    acc[:] = -np.inf if is_max else 0.0
    for t in range(starts.shape[0]):
        at = U(starts[t])
        if is_max:
            for r_ in range(run):
                acc[r_] = np.maximum(acc[r_], flat[at + r_])
        else:
            for r_ in range(run):
                acc[r_] += flat[at + r_]


@nb.njit(**_OPTS)
def _pool2d(x, out, is_max, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr, ceil_mode, include_pad):  # type: ignore[no-untyped-def]
    """`pool2d`'s work; False when the shapes disagree with the geometry."""
    n, c, ih, iw = x.shape
    oh, ow = out.shape[2], out.shape[3]
    ok = min(kh, kw, sh, sw, dh, dw) > 0 and out.shape[0] == n and out.shape[1] == c
    ok = ok and oh == out_size(ih, kh, sh, dh, pt, pb, ceil_mode)
    if not (ok and ow == out_size(iw, kw, sw, dw, pl, pr, ceil_mode)):
        return False
    if n * c * oh * ow == 0:
        return True
    hp, wp, hq, wq = phase_shape(oh, ow, kh, kw, sh, sw, dh, dw)
    flat = np.full(sh * sw * hq * wq, -np.inf if is_max else 0.0, dtype=x.dtype)
    starts = tap_starts(sh, sw, hq, wq, kh, kw, dh, dw)
    top = np.empty(oh * wq, dtype=x.dtype)  # the maxima (rows wq wide)
    total = np.empty(oh * wq, dtype=np.float64)  # the sums
    rows = _counts(oh, ih, kh, sh, dh, pt, pb, include_pad)
    cols = _counts(ow, iw, kw, sw, dw, pl, pr, include_pad)
    xf, of = x.reshape(x.size), out.reshape(out.size)
    for plane in range(n * c):
        padded_phases(xf, plane * ih * iw, ih, iw, flat, sh, sw, hq, wq, hp, wp, pt, pl)
        at = plane * oh * ow
        if is_max:
            _windows(flat, starts, top, True)
        else:
            _windows(flat, starts, total, False)
        for p_ in range(oh):
            dst, src = U(at + p_ * ow), U(p_ * wq)
            if is_max:
                for q_ in range(U(ow)):
                    of[dst + q_] = top[src + q_]
            else:
                for q_ in range(U(ow)):
                    of[dst + q_] = total[src + q_] / max(rows[p_] * cols[q_], 1.0)
    return True


def _entry(a, b, c, dims, params):  # type: ignore[no-untyped-def]
    """`_pool2d` on x (a), out (b) (see `rvm.runtime.native.entry`): 0 done, 1 the shapes
    disagree."""
    d, p = nb.carray(dims, 8), nb.carray(params, 13)
    x = nb.carray(a, (d[0], d[1], d[2], d[3]))
    out = nb.carray(b, (d[4], d[5], d[6], d[7]))
    flags = (p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11], p[12])
    return 0 if _pool2d(x, out, *flags) else 1


entry.export("pool2d", _entry)
# What kernels call (`rvm.runtime.native.entry.caller`): ``entry_call(arrays, params)``, 0 done.
entry_call = entry.caller("pool2d", 13)


# For Python callers (kernels call `entry_call`). Not cached: compiling it types the call, which
# registers the entry point (`entry.require`); cached object code would be linked without it.
@nb.njit(nogil=True)
def pool2d(x, out, is_max, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr, ceil_mode, include_pad):  # type: ignore[no-untyped-def]
    """``out`` = the max or average pools of ``x`` (see the module docstring)."""
    i = np.int64
    window = (i(kh), i(kw), i(sh), i(sw), i(dh), i(dw), i(pt), i(pl), i(pb), i(pr))
    params = (i(is_max), *window, i(ceil_mode), i(include_pad))
    if entry_call((x, out), params) != 0:
        raise ValueError("pool2d: the operands' shapes do not match the geometry")
