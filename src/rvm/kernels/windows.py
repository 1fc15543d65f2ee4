"""Pools window by window: for outputs much smaller than their windows' span.

Global-like pools (resnet's, shufflenet's and inception's final 7x7 averages) and pools with
large strides keep few of the positions a run per tap would compute, so `rvm.kernels.pool`
takes this method for them (its tasks ``pool2d_max_direct`` and ``pool2d_avg_direct``): each
output's window is reduced on its own. An average's window with adjacent columns is summed
run by run, each of its rows in the input a vectorized run (one run for all of them when they
span whole input rows one apart), in float64 partial sums in any order; other windows tap by
tap, skipping the taps outside the input.
"""

from __future__ import annotations

import numpy as np

from rvm.kernels.jitting import jit
from rvm.kernels.maxrows import _taps_in
from rvm.kernels.planes import U

__all__ = ["by_windows"]

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)


@jit(nogil=True, cache=True, error_model="numpy", boundscheck=False, fastmath={"reassoc"})
def _run_sum(xf, start, n, acc0):  # type: ignore[no-untyped-def]
    """``acc0`` plus the sum of ``xf[start:start + n]``, in ``acc0``'s dtype, in any order (a
    vector of partial sums; in float64, sums of float32 values hardly depend on the order)."""
    total, start = acc0, U(start)
    for i in range(U(n)):
        total += xf[start + i]
    return total


@jit(**_OPTS)
def _direct_avg(x, out, lo, hi, scale, acc0, window):  # type: ignore[no-untyped-def]
    """`_direct` for averages whose windows take adjacent columns: each window's part in the
    input summed run by run (a run per window row, one for all of them when they span whole
    input rows one apart: resnet's and shufflenet's final 7x7 averages)."""
    kh, kw, sh, sw, dh, dw, pt, pl = window
    ih, iw, oh, ow = x.shape[2], x.shape[3], out.shape[2], out.shape[3]
    xf, of = x.reshape(x.size), out.reshape(out.size)
    for plane in range(lo, hi):
        for p_ in range(oh):
            r0 = p_ * sh - pt
            # the window's first and last rows in the input (no division when dh is 1: two
            # per window were a sixth of a 7 x 7 global average's time)
            first, last = _taps_in(r0, ih, kh, dh)
            for q_ in range(ow):
                c0 = q_ * sw - pl
                c1 = min(iw, c0 + kw)
                c0 = max(c0, 0)
                acc = acc0
                if last >= first and c1 > c0:
                    row = (plane * ih + r0 + first * dh) * iw
                    if c0 == 0 and c1 == iw and dh == 1:
                        acc = _run_sum(xf, row, (last - first + 1) * iw, acc0)
                    else:
                        for i_ in range(last - first + 1):
                            acc = _run_sum(xf, row + i_ * dh * iw + c0, c1 - c0, acc)
                of[(plane * oh + p_) * ow + q_] = acc * scale[p_ * ow + q_]


@jit(**_OPTS)
def _direct(x, out, lo, hi, scale, is_max, acc0, window):  # type: ignore[no-untyped-def]
    """Channels ``lo`` to ``hi``, window by window (``acc0``: a zero of the accumulator's
    dtype): for outputs much smaller than their windows' span (global-like pools), where a
    run per tap would compute every position of the plane for the few kept."""
    kh, kw, sh, sw, dh, dw, pt, pl = window
    if not is_max and dw == 1:
        _direct_avg(x, out, lo, hi, scale, acc0, window)
        return
    ih, iw, oh, ow = x.shape[2], x.shape[3], out.shape[2], out.shape[3]
    xf, of = x.reshape(x.size), out.reshape(out.size)
    for plane in range(lo, hi):
        for p_ in range(oh):
            for q_ in range(ow):
                acc = acc0 - np.inf if is_max else acc0
                for i_ in range(kh):
                    r = p_ * sh - pt + i_ * dh
                    if r < 0 or r >= ih:
                        continue
                    row = (plane * ih + r) * iw
                    for j_ in range(kw):
                        c = q_ * sw - pl + j_ * dw
                        if 0 <= c < iw:
                            v = xf[row + c]
                            acc = np.maximum(acc, v) if is_max else acc + v
                at = (plane * oh + p_) * ow + q_
                of[at] = acc if is_max else acc * scale[p_ * ow + q_]


@jit(**_OPTS, inline="always")
def by_windows(x, out, lo, hi, scale, is_max, window, acc_dtype):  # type: ignore[no-untyped-def]
    """Max pools (``is_max``, ``acc_dtype`` x's) or average pools (float64; ``scale``: the
    windows' reciprocal counts, oh * ow) of channels ``lo`` to ``hi`` (flat n * c index),
    window by window (see the module docstring)."""
    _direct(x, out, lo, hi, scale, is_max, np.zeros(1, dtype=acc_dtype)[0], window)
