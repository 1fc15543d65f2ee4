"""Max pooling of a bf16 pair plane (`rvm.op.bf16planes`' ``max_pool2d_pairs``).

`max_pool2d_pairs(x, out, c, h, w, spt, spl, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow, opt,
opl, signed)`
reads ``x``, the int32 pair plane of a ``c`` x ``h`` x ``w`` image (word ``(c2, spt + y,
spl + x)`` the bf16 pair of channels ``2 c2``, low half, and ``2 c2 + 1``), and writes the
window maxima of `rvm.op.max_pool2d` (windows of ``kh`` x ``kw`` taps ``dh``/``dw`` apart,
``sh``/``sw`` apart, over the image padded by ``pt`` rows and ``pl`` columns; the padding
never wins) into ``out``: float32 NCHW ``(n, c, oh, ow)``, or with ``opt`` >= 0 the next
convolution's pair plane, int32 ``(n, (c + 1) // 2, hq, wq)``, the image at ``(opt, opl)``
and every other word 0. A maximum of bf16 values is one of them, so the pool is exact, and
as rounding to bf16 keeps order, pooling the rounded values is rounding the pooled ones: a
pool between two bf16 convolutions may read and write pair planes (half the bytes of
float32) and the result is the same, bit for bit.

Where every value is no less than +0 (a ReLU's: the op's ``signed`` False) the halves'
bits order them as 16-bit integers, and the pool reads the plane where it lies (its left
padding words are 0s, which never win there; rows past the image are skipped, columns past it
set to the least key); else each channel pair's image is first copied, as keys whose order is
the values' (`_key`: a negative value's magnitude bits flipped, a NaN the greatest), into a
plane padded with the least key. Then, a channel pair at a time, output row by output row:
the window's rows' maxima of that row only (the rows the stride skips are never reduced),
the taps' maxima along them as one run (a tap a word, two halves, on), and each output word
the stride picks (at stride 2 a 64-bit pair's low half: the rows are a whole number of
vectors apart). At two threads, plane to plane, against the float32 pool of the same image:
64 x 112 x 112 to 56, padded, 40-46 us against 52-67; 192 x 56 x 56 to 28 32-37 against
35-44; 256 x 27 x 27 to 13 21-22 against 13-14 (its rows a vector of halves and a tail).
Everything a channel pair does is written out in one loop, no function of the arrays called
per pair or row: each such call took and dropped Numba's references, atomic operations, 18%
of the time at 27 x 27.
Channel pairs are split over rvm's threads when the pool is large (`rvm.kernels.parfor.chunks`:
the task ``bf16_pool``). Kernels call the pool through its entry point ``max_pool2d_pairs``
(`rvm.kernels.entry`).
"""

from __future__ import annotations

import numba as nb
import numpy as np

from rvm.kernels import entry, parfor
from rvm.kernels.jitting import jit
from rvm.kernels.planes import U, copy
from rvm.kernels.qsplit import F32

__all__ = ["max_pool2d_pairs", "max_pool2d_pairs_call"]

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)
_LOW = np.int16(-32768)  # the least key: what the padding holds, never the maximum


@jit(inline="always", **_OPTS)
def _key(s):  # type: ignore[no-untyped-def]
    """bf16 bits ``s`` (int16) as a key whose signed order is the values' order: a negative
    value's magnitude bits flipped; a NaN the greatest key (NaN wins, as in
    `rvm.op.max_pool2d`). Each step cast back to 16 bits, so that LLVM keeps the loops on
    16-bit lanes."""
    if np.int16(s & np.int16(0x7FFF)) > np.int16(0x7F80):
        return np.int16(0x7FFF)
    return _flip(s)


@jit(inline="always", **_OPTS)
def _flip(s):  # type: ignore[no-untyped-def]
    """`_key` but for NaNs, both ways: a negative value's magnitude bits flipped (its own
    inverse; the greatest key, a NaN's, stays a NaN's bits)."""
    return np.int16(s ^ np.int16(np.int16(s >> np.int16(15)) & np.int16(0x7FFF)))


# A pool's geometry (int64): the image's channels, height and width; the plane in's height,
# width, padding top and left; kh, kw, sh, sw, dh, dw, pt, pl; oh, ow; 1 for a pair plane
# out (0: float32 NCHW), its padding top and left, height and width; 1 where the values may
# be negative (compared as keys, `_key`), 0 where they are no less than +0 (a ReLU's).
_GEO = 23


@jit(**_OPTS)
def _pairs(x16, out, lo, hi, geo):  # type: ignore[no-untyped-def]
    """Channel pairs ``[lo, hi)`` (flat n * c2 index) of the pool: ``x16`` the plane's
    halves, ``out`` the output's 32-bit words; ``geo`` the geometry (`_GEO`); the module's
    docstring says how."""
    c, h, w, hq_in, wq_in, spt, spl = geo[0], geo[1], geo[2], geo[3], geo[4], geo[5], geo[6]
    kh, kw, sh, sw, dh, dw = geo[7], geo[8], geo[9], geo[10], geo[11], geo[12]
    pt, pl, oh, ow = geo[13], geo[14], geo[15], geo[16]
    planed, opt, opl, hq, wq = geo[17], geo[18], geo[19], geo[20], geo[21]
    keyed = geo[22] != 0  # else the values are no less than +0: their bits order them
    c2 = (c + 1) // 2
    hp = (oh - 1) * sh + (kh - 1) * dh + 1  # the padded rows and columns the windows read
    wp = (ow - 1) * sw + (kw - 1) * dw + 1
    # values no less than +0 are read in place where the plane's own padding (zeros, which
    # never win there) holds the pool's; else copied, as keys, into a plane padded with the
    # least key: as wide as the plane's rows (one flat run copies them) where the windows fit
    in_place = not keyed and spl >= pl
    width = wq_in if (in_place or wq_in >= wp) else wp
    w2 = 2 * width
    keys = np.full(0 if in_place else hp * w2 + 2, _LOW, np.int16)
    # v's and hm's rows (the kept ones) a whole number of vectors apart: a row's loop runs
    # whole vectors, its stride-2 words are the low halves of 64-bit pairs
    vs = (2 * wp + 63) // 64 * 64
    v = np.empty(oh * vs + 2 * kw * dw + 64, np.int16)
    hm = np.empty(oh * vs + 64, np.int16)
    words, pairs64 = hm.view(np.uint32), hm.view(np.uint64)
    src = x16 if in_place else keys  # one array for every pair (no references taken in the loop)
    r0, r1 = max(0, -pt), min(h, hp - pt)  # the image's rows and columns in the keys
    q0, q1 = max(0, -pl), min(w, wp - pl)
    size = 2 * hq_in * wq_in
    for k in range(lo, hi):
        n, p2 = k // c2, k % c2
        if planed:  # the words the image does not cover are 0
            for r in range(hq):
                row = (k * hq + r) * wq
                if opt <= r < opt + oh:
                    for q in range(opl):
                        out[row + q] = 0
                    for q in range(opl + ow, wq):
                        out[row + q] = 0
                else:
                    for q in range(wq):
                        out[row + q] = 0
            o_at, o_ld, o_next = (k * hq + opt) * wq + opl, wq, -1
        else:
            o_at, o_ld = ((n * c + 2 * p2) * oh) * ow, ow
            o_next = oh * ow if 2 * p2 + 1 < c else 0
        plane = 2 * k * hq_in * wq_in
        at = U(0)
        if in_place:  # image row r's padded column 0 at ``at + r * w2``
            at = U(plane + 2 * (spt * wq_in + spl - pl))
        elif width == wq_in and r1 > r0:
            # key (r + pt, x + pl) is word (spt + r, spl + x): one run from the image's first
            # row to its last, the plane's own padding words then set to the least key
            delta = 2 * ((spt - pt) * wq_in + spl - pl)
            k0 = max(2 * (r0 + pt) * wq_in, -delta)
            k1 = min(2 * (r1 + pt) * wq_in, size - delta)
            first = U(plane + delta)
            if keyed:
                for q in range(U(k0), U(k1)):
                    keys[q] = _key(x16[first + q])
            else:
                for q in range(U(k0), U(k1)):
                    keys[q] = x16[first + q]
            for r in range(r0 + pt, r1 + pt):
                row = r * w2
                for q in range(row, row + 2 * (q0 + pl)):
                    keys[q] = _LOW
                for q in range(row + 2 * (q1 + pl), row + w2):
                    keys[q] = _LOW
            for q in range(2 * (r0 + pt) * wq_in, k0):
                keys[q] = _LOW
            for q in range(k1, 2 * (r1 + pt) * wq_in):
                keys[q] = _LOW
        else:
            for r in range(r0, r1):  # row by row (the plane narrower than the windows)
                first = U(plane + 2 * ((spt + r) * wq_in + spl + q0))
                dst = U((r + pt) * w2 + 2 * (q0 + pl))
                for q in range(U(2 * max(0, q1 - q0))):
                    keys[dst + q] = _key(x16[first + q]) if keyed else x16[first + q]
        # the window rows' maxima of the rows the stride keeps (v's rows w2 apart), then
        # the taps' along them as one flat run (its windows across a row's end never read)
        n_h = U((oh - 1) * vs + 2 * (ow - 1) * sw + 2)
        for p in range(oh):
            row, r = U(p * vs), p * sh - pt  # the window's first row (of the image)
            i0, i1 = 0, kh  # the window's rows read: in place, the image's only
            if in_place and dh == 1:
                i0, i1 = max(0, -r), min(kh, h - r)
                r += i0
            elif in_place:
                i0 = max(0, (dh - 1 - r) // dh)
                i1 = min(kh, (h - r + dh - 1) // dh)
                r += i0 * dh
            else:
                r += pt  # the keys' rows are the padded image's
            top = at + U(r * w2)
            last = top + U((i1 - i0 - 1) * dh * w2)
            run = min(U(2 * wp), U(src.size) - last)
            if last + U(vs) <= U(src.size):  # whole vectors, past the row's end (unused)
                run = U(vs)
            if i1 - i0 == 3:  # the common window: its rows in one pass
                d1 = top + U(dh * w2)
                for q in range(run):
                    v[row + q] = max(max(src[top + q], src[d1 + q]), src[last + q])
            else:
                for q in range(run):
                    v[row + q] = src[top + q]
                for i in range(1, i1 - i0):
                    first = top + U(i * dh * w2)
                    for q in range(run):
                        v[row + q] = max(v[row + q], src[first + q])
            if in_place:  # columns past the image's (the next row's, or past the plane)
                for q in range(row + U(2 * (pl + w)), row + U(2 * wp)):
                    v[q] = _LOW
        if kw == 3:  # a tap is a word on: two halves
            t1, t2 = U(2 * dw), U(4 * dw)
            if keyed:
                for s in range(n_h):
                    hm[s] = _flip(max(max(v[s], v[s + t1]), v[s + t2]))
            else:
                for s in range(n_h):
                    hm[s] = max(max(v[s], v[s + t1]), v[s + t2])
        else:
            for s in range(n_h):
                hm[s] = v[s]
            for j in range(1, kw):
                off = U(2 * j * dw)
                for s in range(n_h):
                    hm[s] = max(hm[s], v[s + off])
            if keyed:
                for s in range(n_h):
                    hm[s] = _flip(hm[s])
        # all of it written out in this loop, no function of the arrays: each call took and
        # dropped references to them (atomic operations: 18% of the time at 27 x 27)
        step = U(sw)
        for p in range(oh):
            base, dst = U(p * vs // 2), U(o_at + p * o_ld)
            if o_next < 0 and sw == 2:  # a pair plane's words: each 64-bit pair's low word
                half = base // U(2)
                for q in range(U(ow)):
                    out[dst + q] = np.uint32(pairs64[half + q] & np.uint64(0xFFFFFFFF))
            elif o_next < 0:
                for q in range(U(ow)):
                    out[dst + q] = words[base + q * step]
            else:  # float32 bits: the low half's channel, then the high half's
                for q in range(U(ow)):
                    out[dst + q] = words[base + q * step] << np.uint32(16)
                if o_next > 0:
                    high = dst + U(o_next)
                    for q in range(U(ow)):
                        out[high + q] = words[base + q * step] & np.uint32(0xFFFF0000)


# A split pool's job (int64): its length, the plane in's address and halves, the output's
# address and words, channel pairs a piece, channel pairs; then the geometry (`_GEO`).
_JOB = 7 + _GEO


def _task(p, like, data):  # type: ignore[no-untyped-def]
    """Piece ``p`` of a split pool (the task ``bf16_pool``)."""
    job = parfor.job(data)
    x16 = parfor.array_at(job[1], (job[2] // 2,), like).view(np.int16)
    out = parfor.array_at(job[3], (job[4],), like).view(np.uint32)
    lo = p * job[5]
    _pairs(x16, out, lo, min(job[6], lo + job[5]), job[7:])


parfor.export_task("bf16_pool", _task)
_run = parfor.runner("bf16_pool")


@jit(**_OPTS)
def max_pool2d_pairs(x, out, c, h, w, spt, spl, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow, opt,
                     opl, signed):  # type: ignore[no-untyped-def]  # fmt: skip
    """The pool of the module's docstring: ``x`` (n, (c + 1) // 2, hq, wq) the pair plane's
    words as float32 (their bits), ``out`` float32 (n, c, oh, ow), or with ``opt`` >= 0 a
    pair plane's words (n, (c + 1) // 2, hq_out, wq_out) as float32. Raises ValueError when
    the arrays do not hold the image, the window or the output."""
    n, pairs, hq_in, wq_in = x.shape
    planed = opt >= 0
    c2 = (c + 1) // 2
    if pairs != c2 or hq_in < spt + h or wq_in < spl + w or out.shape[0] != n:
        raise ValueError("bf16 max_pool2d_pairs: the input's pair plane does not hold the image")
    if min(kh, kw, sh, sw, dh, dw) < 1 or pt < 0 or pl < 0 or min(oh, ow) < 0:
        raise ValueError("bf16 max_pool2d_pairs: a window needs positive sizes and strides")
    if (oh - 1) * sh - pt >= h or (ow - 1) * sw - pl >= w:
        raise ValueError("bf16 max_pool2d_pairs: a window starts past the image")
    if planed and (out.shape[1] != c2 or out.shape[2] < opt + oh or out.shape[3] < opl + ow):
        raise ValueError("bf16 max_pool2d_pairs: the pair plane out does not hold the output")
    if not planed and out.shape[1:] != (c, oh, ow):
        raise ValueError("bf16 max_pool2d_pairs: the output is not (n, c, oh, ow)")
    if n * c2 == 0 or oh * ow == 0:
        return
    xc = np.ascontiguousarray(x)
    x16 = xc.reshape(-1).view(np.int16)
    o32 = out.reshape(-1).view(np.uint32)
    geo = np.array((c, h, w, hq_in, wq_in, spt, spl, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow,
                    1 if planed else 0, opt, opl, out.shape[2], out.shape[3],
                    1 if signed else 0), np.int64)  # fmt: skip
    pairs_all = n * c2
    # cut as `rvm.kernels.pool` cuts a float32 pool: the values read and the windows' taps
    chunks = parfor.chunks(n * c * (h * w + oh * ow * kh * kw), pairs_all)
    if chunks <= 1:
        _pairs(x16, o32, 0, pairs_all, geo)
        return
    step = -(-pairs_all // chunks)
    job = np.empty(_JOB, np.int64)
    job[0], job[1], job[2] = _JOB, x16.ctypes.data, x16.size
    job[3], job[4], job[5], job[6] = o32.ctypes.data, o32.size, step, pairs_all
    copy(job[7:], geo, _GEO)
    _run(F32, -(-pairs_all // step), job)


def _entry(x, out, dims, params):  # type: ignore[no-untyped-def]
    """`max_pool2d_pairs` on x and out (4-d float32: the words' bits); the parameters: c, h,
    w, spt, spl, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow, opt (-1: out is float32 NCHW), opl,
    signed (0: the values are no less than +0).
    A kernel checks the shapes before the call: always 0."""
    d, p = nb.carray(dims, 8), nb.carray(params, 18)
    max_pool2d_pairs(
        nb.carray(x, (d[0], d[1], d[2], d[3])),
        nb.carray(out, (d[4], d[5], d[6], d[7])),
        p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11], p[12],
        p[13], p[14], p[15], p[16], p[17],
    )  # fmt: skip
    return 0


entry.export("max_pool2d_pairs", _entry)
# What kernels call (`rvm.kernels.entry.caller`): ``max_pool2d_pairs_call((x, out), params)``.
max_pool2d_pairs_call = entry.caller("max_pool2d_pairs", 18)
