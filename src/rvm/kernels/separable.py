"""Max and average pools separable row by row, for a column stride above 1 on wide inputs
(`rvm.kernels.pool`'s method there: it reads the input in place, where splitting it by the
column stride is a slow strided copy).

For each output row, its window rows are reduced column by column into a padded line, then
the line's columns tap by tap, and the row takes every stride-th.
"""

from __future__ import annotations

import numpy as np

from rvm.kernels.jitting import jit
from rvm.kernels.planes import U

__all__ = ["by_separable"]

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)


@jit(**_OPTS)
def _rows(xf, at, ih, iw, p_, kh, sh, dh, pt, line, pl, is_max):  # type: ignore[no-untyped-def]
    """``line[pl:pl + iw]`` = the max (``is_max``) or the sum, column by column, of the input
    rows of output row ``p_``'s windows in the (ih, iw) channel at ``at`` of ``xf``; the
    padding value when no row is in the input."""
    dst, first = U(pl), True
    for i_ in range(kh):
        r = p_ * sh - pt + i_ * dh
        if r < 0 or r >= ih:
            continue
        src = U(at + r * iw)
        if first:
            for c in range(U(iw)):
                line[dst + c] = xf[src + c]
            first = False
        elif is_max:
            for c in range(U(iw)):
                line[dst + c] = np.maximum(line[dst + c], xf[src + c])
        else:
            for c in range(U(iw)):
                line[dst + c] += xf[src + c]
    if first:
        for c in range(U(iw)):
            line[dst + c] = -np.inf if is_max else 0.0


@jit(**_OPTS)
def _cols(line, acc, n, kw, dw, is_max):  # type: ignore[no-untyped-def]
    """``acc[s]`` = the max or the sum of ``line[s + j * dw]`` over the taps j, for s < n:
    every window start, ``sw`` of them apart from 0."""
    for s in range(U(n)):
        acc[s] = line[s]
    for j in range(1, kw):
        off = U(j * dw)
        if is_max:
            for s in range(U(n)):
                acc[s] = np.maximum(acc[s], line[s + off])
        else:
            for s in range(U(n)):
                acc[s] += line[s + off]


@jit(**_OPTS)
def _emit_row(of, dst, acc, src, step, ow, scale, at_s, is_max):  # type: ignore[no-untyped-def]
    """Output row at ``dst`` of ``of`` = ``acc[src + q * step]`` for q < ow (averages
    multiplied by ``scale[at_s + q]``)."""
    dst, src, step, at_s = U(dst), U(src), U(step), U(at_s)
    if is_max:
        for q_ in range(U(ow)):
            of[dst + q_] = acc[src + q_ * step]
    else:
        for q_ in range(U(ow)):
            of[dst + q_] = acc[src + q_ * step] * scale[at_s + q_]


@jit(**_OPTS)
def _separable(x, out, lo, hi, line, acc, scale, is_max, window):  # type: ignore[no-untyped-def]
    """Channels ``lo`` to ``hi`` (flat n * c index), output row by output row: the window rows
    reduced column by column into ``line`` (its first ``pl`` and its last entries hold the
    padding value), then the window columns into ``acc``, of which the row takes every
    ``sw``-th."""
    kh, kw, sh, sw, dh, dw, pt, pl = window
    ih, iw, oh, ow = x.shape[2], x.shape[3], out.shape[2], out.shape[3]
    xf, of = x.reshape(x.size), out.reshape(out.size)
    line[:] = -np.inf if is_max else 0.0
    for plane in range(lo, hi):
        for p_ in range(oh):
            _rows(xf, plane * ih * iw, ih, iw, p_, kh, sh, dh, pt, line, pl, is_max)
            _cols(line, acc, (ow - 1) * sw + 1, kw, dw, is_max)
            _emit_row(of, (plane * oh + p_) * ow, acc, 0, sw, ow, scale, p_ * ow, is_max)


@jit(**_OPTS, inline="always")
def by_separable(x, out, lo, hi, scale, is_max, window, acc_dtype):  # type: ignore[no-untyped-def]
    """`_separable` on channels ``lo`` to ``hi``, with scratch of its own."""
    kh, kw, sh, sw, dh, dw, pt, pl = window
    width = max(pl + x.shape[3], (out.shape[3] - 1) * sw + (kw - 1) * dw + 1)
    line, acc = np.empty(width, dtype=acc_dtype), np.empty(width, dtype=acc_dtype)
    _separable(x, out, lo, hi, line, acc, scale, is_max, window)
