"""Max pooling of 8-bit integers (quantized models' uint8 and int8 activations).

`max_pool2d(x, out, low, kh, kw, sh, sw, dh, dw, pt, pl)` fills ``out`` (n, c, oh, ow) with
the window maxima of ``x`` (n, c, ih, iw), both C-contiguous of one 8-bit dtype, with the
semantics of `rvm.op.max_pool2d`: windows of kh x kw taps ``dh``/``dw`` apart, ``sh``/``sw``
apart, over the input padded by ``pt`` rows on top and ``pl`` columns on the left (the
padding, and a ceil-mode window's overhang, never wins: it holds ``low``, the dtype's
least value). The maximum is exact in the integers, so no float copy is made (a float pool
would convert the input and the output, 5 bytes moved per byte).

The pool is separable and reduced a plane at a time in long runs (`_plane_runs`, as
`rvm.kernels.maxflat` does for floats): the window rows at every start row at once (the
plane's rows as one flat run of bytes, vectorized 64 a step), then the taps along that run,
and each output row takes every stride-th start. A whole plane a run, not a row at a time,
since rows of a few dozen bytes leave the vector loop for its scalar tail; the rows the
stride skips cost less than that. The common window, 3 taps at stride 2 in a row (every
CNN's 3 x 3 / 2 pool), skips the taps' run: each output row takes its taps straight from its
start row, seen as 16-bit pairs whose two bytes are a window's first two taps (shifts, masks
and maxima on 16-bit lanes, where a stride-2 byte gather does not vectorize; every step
cast back to 16 bits, else Numba's 64-bit integers keep LLVM to 8 lanes a vector): 1.6-2.7x
faster than the runs for squeezenet's and resnet50's pools. Rows shorter than `FLAT_PAIRS`
take the pairs of the plane's whole run at once and copy each row's out (a row alone would
stay in the vector loop's scalar tail). A pool that pads (or overhangs)
reads a copy of each plane padded with ``low``. Planes are split over rvm's threads when the
input is large (`rvm.kernels.parfor`: the task ``qpool``). Kernels call the pool through its
entry point ``qmax_pool2d`` (`rvm.kernels.entry`, one per dtype: ``uint8_uint8``,
``int8_int8``), compiled once per process or cache rather than into each kernel (3 CPU-s of
LLVM per kernel).
"""

from __future__ import annotations

import numba as nb
import numpy as np

from rvm.kernels import entry, parfor, workpool
from rvm.kernels.cpu import cpu
from rvm.kernels.jitting import jit
from rvm.kernels.planes import U
from rvm.kernels.qsplit import F32, I8, U8, pointer_at

__all__ = ["max_pool2d", "qmax_pool2d_call"]

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)
SPLIT_MIN = 1 << 17
"""Input bytes a pool's work is counted in: pieces of half that at least (`parfor.pieces`: a
multiple of the threads). Whole ones only, squeezenet's int8 pool of 256 channels at 27 x 27
(187 KB) ran on one thread: 37 us against 19 in two pieces on two Zen 3 threads (in turns in
one process; its pools of 387 and 774 KB the same either way)."""
FLAT_PAIRS = cpu().vector_bits // 16
"""Output rows shorter than this (a vector of 16-bit lanes) take `_plane_runs`'s 3-tap,
stride-2 pairs over the plane's whole run at once, then are copied: one Emerald Rapids core,
one thread, against a row at a time, squeezenet's pool at 55 x 55 -> 27 1.13-1.17x faster,
27 -> 13 0.99-1.05x (at 32; 64 not measured)."""


@jit(**_OPTS)
def _plane_runs(src, at, wp, v, h, of, at_o, oh, ow, window, flip):  # type: ignore[no-untyped-def]
    """Output plane ``of[at_o:][:oh * ow]`` from the plane at ``src[at:]`` (rows ``wp``
    apart) that every window reads inside: the window rows' maxima ``v`` of every start row
    (the first ``(oh - 1) * sh + 1`` rows as one flat run), the taps' maxima ``h`` along
    ``v`` (entries whose taps cross a row end are never read), then every stride-th of each
    output row's start row. A 3-tap window takes its rows, then its taps, in one pass each;
    3 taps at stride 2 take each output row's taps straight from ``v`` (`_pairs_max`: ``v``
    of an even size, so that its 16-bit view covers it). ``flip`` is 0x8080 for int8 (see
    `_pairs_max`), else 0.
    """
    kh, kw, sh, sw, dh, dw = window[:6]
    n_v = U(((oh - 1) * sh + 1) * wp)
    n_h = U((oh - 1) * sh * wp + (ow - 1) * sw + 1)
    at = U(at)
    if kh == 3:  # the common window: its rows in one pass
        r1, r2 = at + U(dh * wp), at + U(2 * dh * wp)
        for s in range(n_v):
            v[s] = max(max(src[at + s], src[r1 + s]), src[r2 + s])
    else:
        for s in range(n_v):
            v[s] = src[at + s]
        for i in range(1, kh):
            first = at + U(i * dh * wp)
            for s in range(n_v):
                v[s] = max(v[s], src[first + s])
    if kw == 3 and sw == 2 and dw == 1 and (sh * wp) % 2 == 0:
        # Each output row from its start row of ``v`` as 16-bit pairs (the stride-2 taps
        # of a pair are its two bytes: shifts and masks, no deinterleaving shuffles).
        v16, of8 = v.view(np.uint16), of.view(np.uint8)
        if ow < FLAT_PAIRS:
            # A few dozen outputs a row stay in the vector loop's scalar tail: the pairs of
            # every start row's run at once into ``h`` instead, each row's then copied.
            half = U(sh * wp // 2)  # pairs between start rows
            pairs, h8 = U(oh - 1) * half + U(ow), h.view(np.uint8)
            if flip:
                _pairs_max(v16, h8, U(0), pairs, np.uint16(0x8080))
            else:
                _pairs_max(v16, h8, U(0), pairs, np.uint16(0))
            for p in range(oh):
                src, dst = U(p) * half, U(at_o + p * ow)
                for q in range(U(ow)):
                    of[dst + q] = h[src + q]
            return
        for p in range(oh):  # a slice per row and a constant flip: the loop vectorizes
            row, dst = v16[p * sh * wp // 2 :], U(at_o + p * ow)
            if flip:
                _pairs_max(row, of8, dst, U(ow), np.uint16(0x8080))
            else:
                _pairs_max(row, of8, dst, U(ow), np.uint16(0))
        return
    if kw == 3:
        t1, t2 = U(dw), U(2 * dw)
        for s in range(n_h):
            h[s] = max(max(v[s], v[s + t1]), v[s + t2])
    else:
        for s in range(n_h):
            h[s] = v[s]
        for j in range(1, kw):
            off = U(j * dw)
            for s in range(n_h):
                h[s] = max(h[s], v[s + off])
    for p in range(oh):
        base, dst = U(p * sh * wp), U(at_o + p * ow)
        if sw == 2:  # a constant stride: the loads vectorize
            for q in range(U(ow)):
                of[dst + q] = h[base + 2 * q]
        else:
            step = U(sw)
            for q in range(U(ow)):
                of[dst + q] = h[base + q * step]


@jit(inline="always", **_OPTS)
def _pairs_max(v16, of8, dst, ow, flip):  # type: ignore[no-untyped-def]
    """``of8[dst + q]`` = the maximum of bytes ``2q``, ``2q + 1``, ``2q + 2`` of ``v16``
    (a row of bytes seen as little-endian 16-bit pairs: the taps of a 3-wide window at stride
    2 are pair ``q``'s two bytes and pair ``q + 1``'s low one), for ``q < ow``; shifts, masks
    and maxima on 16-bit lanes, which vectorize where a stride-2 byte gather does not. Bytes
    of int8 values are compared as unsigned after ``flip`` (0x8080) turns their order into
    the unsigned one, and flipped back."""
    mask, eight, back = np.uint16(255), np.uint16(8), np.uint16(flip & 255)
    for q in range(ow):
        # Each step cast back to 16 bits: Numba computes on 64-bit integers, and the
        # casts let LLVM narrow the loop to 16-bit lanes (4x faster on long runs here).
        pair, after = np.uint16(v16[q] ^ flip), np.uint16(v16[q + 1] ^ flip)
        low, high = np.uint16(pair & mask), np.uint16(pair >> eight)
        top = np.uint16(max(max(low, high), np.uint16(after & mask)))
        of8[dst + q] = np.uint8(top ^ back)


@jit(**_OPTS)
def _planes(xf, of, lo, hi, shape, window, low):  # type: ignore[no-untyped-def]
    """Planes ``[lo, hi)`` (flat n * c index) of the pool: ``xf``/``of`` the flat input and
    output, ``shape`` (ih, iw, oh, ow), ``window`` (kh, kw, sh, sw, dh, dw, pt, pl). A pool
    that pads, or whose last windows overhang, reads each plane from a copy padded with
    ``low`` (its border written once: the same for every plane)."""
    ih, iw, oh, ow = shape
    kh, kw, sh, sw, dh, dw, pt, pl = window
    hp = (oh - 1) * sh + (kh - 1) * dh + 1  # the rows and columns the windows read
    wp = (ow - 1) * sw + (kw - 1) * dw + 1
    inside = pt == 0 and pl == 0 and hp <= ih and wp <= iw
    width = iw if inside else wp
    # v: a 16-bit array's bytes (even-sized, for `_pairs_max`'s view), one pair spare.
    v = np.empty(hp * width // 2 + 2, np.uint16).view(xf.dtype)
    h = np.empty(hp * width, xf.dtype)
    flip = np.uint16(0x8080 if low < 0 else 0)
    plane = np.full(0 if inside else hp * wp, low, xf.dtype)
    r0, r1 = max(0, -pt), min(ih, hp - pt)  # the input rows and columns in the plane
    c0, c1 = max(0, -pl), min(iw, wp - pl)
    for k in range(lo, hi):
        if inside:
            _plane_runs(xf, k * ih * iw, iw, v, h, of, k * oh * ow, oh, ow, window, flip)
            continue
        for r in range(r0, r1):
            src, dst = U(k * ih * iw + r * iw + c0), U((r + pt) * wp + c0 + pl)
            for c in range(U(max(0, c1 - c0))):
                plane[dst + c] = xf[src + c]
        _plane_runs(plane, 0, wp, v, h, of, k * oh * ow, oh, ow, window, flip)


@jit(inline="always", **_OPTS)
def _piece(p, job):  # type: ignore[no-untyped-def]
    """Planes ``[p * step, (p + 1) * step)`` of a split pool."""
    step, planes, low = job[5], job[6], job[19]
    shape = (job[7], job[8], job[9], job[10])
    window = (job[11], job[12], job[13], job[14], job[15], job[16], job[17], job[18])
    lo = p * step
    hi = min(planes, lo + step)
    if job[20]:
        xf, of = (
            nb.carray(pointer_at(job[1], I8), job[2]),
            nb.carray(pointer_at(job[3], I8), job[4]),
        )
        _planes(xf, of, lo, hi, shape, window, np.int8(low))
    else:
        xf, of = (
            nb.carray(pointer_at(job[1], U8), job[2]),
            nb.carray(pointer_at(job[3], U8), job[4]),
        )
        _planes(xf, of, lo, hi, shape, window, np.uint8(low))


def _task(p, like, data):  # type: ignore[no-untyped-def]
    """Piece ``p`` of a split pool (a pool task)."""
    _piece(p, parfor.job(data))


parfor.export_task("qpool", _task)
_run = parfor.runner("qpool")
_JOB = 21


@jit(**_OPTS)
def max_pool2d(x, out, low, kh, kw, sh, sw, dh, dw, pt, pl):  # type: ignore[no-untyped-def]
    """`rvm.op.max_pool2d` of ``x`` (n, c, ih, iw) into ``out`` (n, c, oh, ow), 8-bit
    integers; ``low`` the dtype's least value (what the padding holds)."""
    ih, iw, oh, ow = x.shape[2], x.shape[3], out.shape[2], out.shape[3]
    planes = x.shape[0] * x.shape[1]
    xf, of = x.reshape(-1), out.reshape(-1)
    shape, window = (ih, iw, oh, ow), (kh, kw, sh, sw, dh, dw, pt, pl)
    threads = parfor.threads()
    parts = min(planes, parfor.pieces(threads, 2 * x.size // SPLIT_MIN))
    if threads < 2 or parts < 2 or workpool.busy():
        _planes(xf, of, 0, planes, shape, window, x.dtype.type(low))
        return
    step = -(-planes // parts)
    job = np.array((_JOB, xf.ctypes.data, xf.size, of.ctypes.data, of.size, step, planes,
                    ih, iw, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl, low, low < 0),
                   dtype=np.int64)  # fmt: skip
    _run(F32, -(-planes // step), job)


def _entry(x, out, dims, params):  # type: ignore[no-untyped-def]
    """`max_pool2d` on x and out (4-d, one 8-bit dtype); the parameters: low, kh, kw, sh, sw,
    dh, dw, pt, pl. A kernel checks the shapes before the call: always 0."""
    d, p = nb.carray(dims, 8), nb.carray(params, 9)
    max_pool2d(
        nb.carray(x, (d[0], d[1], d[2], d[3])),
        nb.carray(out, (d[4], d[5], d[6], d[7])),
        p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8],
    )  # fmt: skip
    return 0


entry.export("qmax_pool2d", _entry)
# What kernels call (`rvm.kernels.entry.caller`): ``qmax_pool2d_call((x, out), params)``.
qmax_pool2d_call = entry.caller("qmax_pool2d", 9)
