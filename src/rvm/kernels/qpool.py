"""Max pooling of 8-bit integers (quantized models' uint8 and int8 activations).

`max_pool2d(x, out, low, kh, kw, sh, sw, dh, dw, pt, pl)` fills ``out`` (n, c, oh, ow) with
the window maxima of ``x`` (n, c, ih, iw), both C-contiguous of one 8-bit dtype, with the
semantics of `rvm.op.max_pool2d`: windows of kh x kw taps ``dh``/``dw`` apart, ``sh``/``sw``
apart, over the input padded by ``pt`` rows on top and ``pl`` columns on the left (the
padding, and a ceil-mode window's overhang, never wins: it holds ``low``, the dtype's
least value). The maximum is exact in the integers, so no float copy is made (a float pool
would convert the input and the output, 5 bytes moved per byte).

The pool is separable. A window that never leaves the input (no padding, no ceil-mode
overhang: the common stride-2 pools of CNNs) is reduced a plane at a time in long runs
(`_planes_inside`): the window rows of every start row at once (the plane's rows as one
flat run of bytes, vectorized 64 a step), then the taps along those runs, and each output
row takes every stride-th start; a whole plane a run, not a row, since rows of a few dozen
bytes leave the vector loop for its scalar tail. Otherwise, for each output row, its window
rows are reduced column by column into a padded line, then the line's columns tap by tap,
and the row takes every stride-th. Planes are split over rvm's threads
when the input is large (`rvm.kernels.parfor`: the task ``qpool``).
"""

from __future__ import annotations

import numba as nb
import numpy as np

from rvm.kernels import parfor, workpool
from rvm.kernels.planes import U
from rvm.kernels.qgemm import pointer_at

__all__ = ["max_pool2d"]

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)
SPLIT_MIN = 1 << 17  # input bytes a piece keeps at least when a pool is split


@nb.njit(**_OPTS)
def _planes_inside(xf, of, lo, hi, shape, window):  # type: ignore[no-untyped-def]
    """`_planes` for a window that never leaves the input (no padding, no overhang): per
    plane, the window rows' maxima ``v`` of every start row (the first ``(oh - 1) * sh + 1``
    rows as one flat run), the taps' maxima ``h`` along ``v`` (entries whose taps cross a
    row end are never read), then every stride-th of each output row's start row."""
    ih, iw, oh, ow = shape
    kh, kw, sh, sw, dh, dw = window[:6]
    rows = (oh - 1) * sh + 1
    n_v, n_h = U(rows * iw), U((rows - 1) * iw + (ow - 1) * sw + 1)
    v, h = np.empty(rows * iw, xf.dtype), np.empty(rows * iw, xf.dtype)
    for plane in range(lo, hi):
        at_x, at_o = U(plane * ih * iw), U(plane * oh * ow)
        for s in range(n_v):
            v[s] = xf[at_x + s]
        for i in range(1, kh):
            src = at_x + U(i * dh * iw)
            for s in range(n_v):
                v[s] = max(v[s], xf[src + s])
        for s in range(n_h):
            h[s] = v[s]
        for j in range(1, kw):
            off = U(j * dw)
            for s in range(n_h):
                h[s] = max(h[s], v[s + off])
        for p in range(oh):
            base, dst = U(p * sh * iw), at_o + U(p * ow)
            if sw == 2:  # a constant stride: the loads vectorize
                for q in range(U(ow)):
                    of[dst + q] = h[base + 2 * q]
            else:
                step = U(sw)
                for q in range(U(ow)):
                    of[dst + q] = h[base + q * step]


@nb.njit(**_OPTS)
def _planes(xf, of, lo, hi, shape, window, low):  # type: ignore[no-untyped-def]
    """Planes ``[lo, hi)`` (flat n * c index) of the pool: ``xf``/``of`` the flat input and
    output, ``shape`` (ih, iw, oh, ow), ``window`` (kh, kw, sh, sw, dh, dw, pt, pl)."""
    ih, iw, oh, ow = shape
    kh, kw, sh, sw, dh, dw, pt, pl = window
    inside = (oh - 1) * sh + (kh - 1) * dh < ih and (ow - 1) * sw + (kw - 1) * dw < iw
    if pt == 0 and pl == 0 and inside:
        _planes_inside(xf, of, lo, hi, shape, window)
        return
    starts = (ow - 1) * sw + 1  # the window starts a row's columns need
    width = starts + (kw - 1) * dw  # the padded line: column s is input column s - pl
    line = np.empty(width, xf.dtype)
    acc = np.empty(starts, xf.dtype)
    s0, s1 = U(min(max(0, pl), width)), U(max(min(width, iw + pl), 0))
    n_acc = U(starts)
    for plane in range(lo, hi):
        at_x, at_o = U(plane * ih * iw), U(plane * oh * ow)
        for p in range(oh):
            line[:] = low
            for i in range(kh):
                r = p * sh - pt + i * dh
                if r < 0 or r >= ih:
                    continue
                src = at_x + U(r * iw) - U(pl)  # line column s reads src + s (s >= pl)
                for s in range(s0, s1):
                    line[s] = max(line[s], xf[src + s])
            for s in range(n_acc):
                acc[s] = line[s]
            for j in range(1, kw):
                off = U(j * dw)
                for s in range(n_acc):
                    acc[s] = max(acc[s], line[s + off])
            dst, step = at_o + U(p * ow), U(sw)
            for q in range(U(ow)):
                of[dst + q] = acc[q * step]


@nb.njit(**_OPTS)
def _piece(p, job):  # type: ignore[no-untyped-def]
    """Planes ``[p * step, (p + 1) * step)`` of a split pool."""
    step, planes, low = job[5], job[6], job[19]
    shape = (job[7], job[8], job[9], job[10])
    window = (job[11], job[12], job[13], job[14], job[15], job[16], job[17], job[18])
    lo = p * step
    hi = min(planes, lo + step)
    if job[20]:
        xf, of = (
            nb.carray(pointer_at(job[1], _I8), job[2]),
            nb.carray(pointer_at(job[3], _I8), job[4]),
        )
        _planes(xf, of, lo, hi, shape, window, np.int8(low))
    else:
        xf, of = (
            nb.carray(pointer_at(job[1], _U8), job[2]),
            nb.carray(pointer_at(job[3], _U8), job[4]),
        )
        _planes(xf, of, lo, hi, shape, window, np.uint8(low))


def _task(p, like, data):  # type: ignore[no-untyped-def]
    """Piece ``p`` of a split pool (a pool task)."""
    _piece(p, parfor.job(data))


parfor.export_task("qpool", _task)
_run = parfor.runner("qpool")
_JOB = 21
_U8, _I8, _F32 = np.zeros(0, np.uint8), np.zeros(0, np.int8), np.zeros(0, np.float32)


@nb.njit(**_OPTS)
def max_pool2d(x, out, low, kh, kw, sh, sw, dh, dw, pt, pl):  # type: ignore[no-untyped-def]
    """`rvm.op.max_pool2d` of ``x`` (n, c, ih, iw) into ``out`` (n, c, oh, ow), 8-bit
    integers; ``low`` the dtype's least value (what the padding holds)."""
    ih, iw, oh, ow = x.shape[2], x.shape[3], out.shape[2], out.shape[3]
    planes = x.shape[0] * x.shape[1]
    xf, of = x.reshape(-1), out.reshape(-1)
    shape, window = (ih, iw, oh, ow), (kh, kw, sh, sw, dh, dw, pt, pl)
    threads = parfor.threads()
    parts = min(planes, x.size // SPLIT_MIN, 4 * threads)
    if threads < 2 or parts < 2 or workpool.busy():
        _planes(xf, of, 0, planes, shape, window, x.dtype.type(low))
        return
    step = -(-planes // parts)
    job = np.array((_JOB, xf.ctypes.data, xf.size, of.ctypes.data, of.size, step, planes,
                    ih, iw, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl, low, low < 0),
                   dtype=np.int64)  # fmt: skip
    _run(_F32, -(-planes // step), job)
