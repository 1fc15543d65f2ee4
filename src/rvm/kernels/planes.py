"""Padded planes of one channel, for loops over windows (convolution, pooling).

A window loop reads the channel at offsets that may fall in the padding. Copying the channel
into a plane that already holds the padding value lets every tap read a plain run with no
per-element test; splitting the plane by the strides (`padded_phases`) makes each tap one
unit-stride run over all the output positions. `fill_phases` writes a convolution's phases
whole, padding included, on the pool when large.
"""

from __future__ import annotations

import numpy as np

from rvm.kernels import parfor
from rvm.kernels.jitting import jit

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)
U = np.uint64  # an index type without the negative-index test


@jit(**_OPTS, inline="always")
def copy(dst, src, n):  # type: ignore[no-untyped-def]
    """``dst[:n] = src[:n]`` (1-d arrays), element by element. The library assigns no array
    to a slice (``a[i:j] = b``): Numba compiles each such assignment with its shape-mismatch
    message, string formatting that cost 1.5-3 CPU-s of LLVM in each library function having
    one and again in every caller linking it (a 2.6 GHz Zen 4)."""
    for i in range(U(n)):
        dst[i] = src[i]


@jit(**_OPTS)
def phase_shape(oh, ow, kh, kw, sh, sw, dh, dw):  # type: ignore[no-untyped-def]
    """The plane (rows, columns) that every window of an (oh, ow) output reads, and the
    (rows, columns) of each of its phases (`split_phases`), one row of slack included."""
    hp = (oh - 1) * sh + dh * (kh - 1) + 1
    wp = (ow - 1) * sw + dw * (kw - 1) + 1
    return hp, wp, (hp + sh - 1) // sh + 1, (wp + sw - 1) // sw


@jit(**_OPTS)
def tap_starts(sh, sw, hq, wq, kh, kw, dh, dw):  # type: ignore[no-untyped-def]
    """Where the run of each tap (i, j) starts in the flat phases (index i * kw + j); see
    `padded_phases`."""
    starts = np.empty(kh * kw, dtype=np.int64)
    for i_ in range(kh):
        for j_ in range(kw):
            phase = ((i_ * dh) % sh) * sw + (j_ * dw) % sw
            starts[i_ * kw + j_] = phase * hq * wq + ((i_ * dh) // sh) * wq + (j_ * dw) // sw
    return starts


@jit(**_OPTS, inline="always")
def _two_phases(xf, at_x, iw, flat, a, hq, wq, row0, rows, h_first, sh, q0, q1, pl):  # type: ignore[no-untyped-def]  # noqa: E501
    """`padded_phases`' row phase ``a`` at a column stride of 2: each input row's columns
    [q0, q1) split into the two column phases in one pass, element pairs (even, odd) apart, a
    loop LLVM vectorizes (loads of two vectors deinterleaved by shuffles), where a phase at a
    time read every other element, one by one: squeezenet's stem's four phases (3 channels of
    224 x 224) in 23-26 us against 53-55 on a Zen 3 core."""
    lo = q0  # the first column, and the column phase it lands in
    b_lo = (lo + pl) % 2
    pairs = U((q1 - q0) // 2)
    at_lo = U((a * 2 + b_lo) * hq * wq + row0 * wq + (lo + pl) // 2)
    at_hi = U((a * 2 + 1 - b_lo) * hq * wq + row0 * wq + (lo + 1 + pl) // 2)
    src = U(at_x + h_first * iw + lo)
    odd = (q1 - q0) % 2 == 1  # one column left for the first phase
    src_step, dst_step = U(sh * iw), U(wq)
    for _ in range(rows):
        for k in range(pairs):
            flat[at_lo + k] = xf[src + U(2) * k]
            flat[at_hi + k] = xf[src + U(2) * k + U(1)]
        if odd:
            flat[at_lo + pairs] = xf[src + U(2) * pairs]
        at_lo, at_hi, src = at_lo + dst_step, at_hi + dst_step, src + src_step


@jit(**_OPTS, inline="always")
def _phase_rows(xf, at_x, ih, iw, flat, sh, sw, hq, wq, hp, wp, pt, pl, a, r0, r1, zero):  # type: ignore[no-untyped-def]  # noqa: E501
    """Rows [r0, r1) of row phase ``a`` of every column phase of the channel at ``at_x`` (the
    layout of `padded_phases`): the input's elements that reach the (hp, wp) plane, and with
    ``zero`` every other element of those rows zeroed (the padding, and the slack row and
    columns no window reads into its output; the pool's pieces of `fill_phases`). Without
    ``zero`` the range is the whole phase, [0, hq) (`padded_phases`), and the other elements
    keep their value: the range is not clipped then, a clip of the rows slowing
    `padded_phases` 5-10% on maps of 14 x 14 and 28 x 28 at stride 2 (a few instructions a
    phase are much of a small channel's time). The geometry once: the rows input rows land
    on, then each column phase's columns; the rows no input row reaches zeroed as one run
    per column phase, the others' margins row by row."""
    q0, q1 = max(0, -pl), min(iw, wp - pl)
    h0, h1 = max(0, -pt), min(ih, hp - pt)  # the input rows that reach the plane
    h_first = h0 + (a - pt - h0) % sh  # the first landing in phase a, on its row row0
    row0 = (h_first + pt) // sh
    end = row0 + (h1 - h_first + sh - 1) // sh
    lo_r, hi_r = row0, max(row0, end)  # the phase rows input rows land on
    if zero and (r0 > lo_r or r1 < hi_r):  # clipped to the range (padded_phases: the phase)
        lo_r = min(r1, max(r0, row0))
        hi_r = max(lo_r, min(r1, end))
        h_first += (lo_r - row0) * sh
    rows = hi_r - lo_r
    pair = sw == 2 and q1 - q0 >= 2  # both column phases in one pass (`_two_phases`)
    if pair and rows > 0:
        _two_phases(xf, at_x, iw, flat, a, hq, wq, lo_r, rows, h_first, sh, q0, q1, pl)
    if pair and not zero:  # nothing left to write
        return
    width = U(wq)
    for b in range(sw):  # the column phase
        first = q0 + (b - pl - q0) % sw  # the first column landing in phase b
        count = U(max(0, (q1 - first + sw - 1) // sw))
        lo = U((first + pl) // sw) if count > 0 else U(0)
        base = U((a * sw + b) * hq * wq)
        if zero:
            for k in range(U(r0 * wq), U(lo_r * wq)):
                flat[base + k] = 0
            for k in range(U(hi_r * wq), U(r1 * wq)):
                flat[base + k] = 0
            at = base + U(lo_r * wq)
            for _ in range(rows):
                for k in range(lo):
                    flat[at + k] = 0
                for k in range(lo + count, width):
                    flat[at + k] = 0
                at += width
        if pair or count == 0:
            continue
        at = base + U(lo_r * wq) + lo
        src = U(at_x + h_first * iw + first)
        src_step = U(sh * iw)
        if sw == 1:  # a unit-stride copy (vectorized)
            for _ in range(rows):
                for k in range(count):
                    flat[at + k] = xf[src + k]
                at, src = at + width, src + src_step
        else:
            step = U(sw)
            for _ in range(rows):
                for k in range(count):
                    flat[at + k] = xf[src + k * step]
                at, src = at + width, src + src_step


@jit(**_OPTS)
def padded_phases(xf, at_x, ih, iw, flat, sh, sw, hq, wq, hp, wp, pt, pl):  # type: ignore[no-untyped-def]
    """The (ih, iw) channel starting at ``at_x`` in the flat input ``xf``, padded by ``pt``
    rows on top and ``pl`` columns on the left and clipped to an (hp, wp) plane, into the
    plane's stride phases: ``flat`` holds sh * sw phases of (hq, wq), phase (a, b) the
    plane's rows a, a + sh, ... and columns b, b + sw, .... Positions no input element
    reaches keep the value ``flat`` was allocated with: the padding value, the same for every
    channel. Every row phase whole (`_phase_rows`).

    Output position (p, q) of a window loop with strides (sh, sw) reads, for tap (i, j),
    phase ((i * dh) % sh, (j * dw) % sw) at row p + (i * dh) // sh, column
    q + (j * dw) // sw: one run of oh * wq elements per tap from `tap_starts`, whose
    columns from ow on are wrap-around garbage to drop. (Indices are unsigned: a signed one
    costs a negative-index test per element, which stops vectorization; the phase of a row
    is known from the loop, with no division per row.)
    """
    for a in range(sh):  # the row phase: input rows h with (h + pt) % sh == a
        _phase_rows(xf, at_x, ih, iw, flat, sh, sw, hq, wq, hp, wp, pt, pl, a, 0, hq, False)


# A phase fill's job (int64): its length, the flat input's and the phases' addresses, the
# first channel's offset in the input, the channels, ih, iw, sh, sw, hq, wq, hp, wp, pt, pl,
# the pieces; its rows are the channels' (row phase, phase row) pairs, channel after channel.
_FILL_JOB = 16


@jit(**_OPTS)
def fill_job(xf, flat, at_x, channels, ih, iw, sh, sw, hq, wq, hp, wp, pt, pl, pieces):  # type: ignore[no-untyped-def]  # noqa: E501
    """The job of a phase fill (`fill_phases`' arguments) in ``pieces``."""
    job = np.empty(_FILL_JOB, dtype=np.int64)
    job[0], job[1], job[2], job[3] = _FILL_JOB, parfor.address(xf), parfor.address(flat), at_x
    job[4], job[5], job[6], job[7], job[8] = channels, ih, iw, sh, sw
    job[9], job[10], job[11], job[12], job[13], job[14] = hq, wq, hp, wp, pt, pl
    job[15] = pieces
    return job


@jit(**_OPTS)
def _fill_rows(xf, flat, job, k0, k1):  # type: ignore[no-untyped-def]
    """Rows [k0, k1) of the job's phases (`_phase_rows`, zeros written), a row counting every
    column phase: a run of rows a (channel, row phase) at a time."""
    ih, iw, sh, sw, hq, wq = job[5], job[6], job[7], job[8], job[9], job[10]
    hp, wp, pt, pl = job[11], job[12], job[13], job[14]
    size = sh * sw * hq * wq
    k = k0
    while k < k1:
        c_, rest = k // (sh * hq), k % (sh * hq)
        a, r0 = rest // hq, rest % hq
        r1 = min(hq, r0 + k1 - k)
        at_x = job[3] + c_ * ih * iw
        _phase_rows(xf, at_x, ih, iw, flat[c_ * size :], sh, sw, hq, wq, hp, wp, pt, pl, a, r0, r1,
                   True)  # fmt: skip
        k += r1 - r0


def _fill_task(piece, like, data):  # type: ignore[no-untyped-def]
    """Piece ``piece`` of a phase fill (`fill_phases`): an equal run of its rows."""
    job = parfor.job(data)
    rows = job[4] * job[7] * job[9]
    k0, k1 = parfor.piece_range(piece, job[15], rows, 1)
    xf = parfor.array_at(job[1], (job[3] + job[4] * job[5] * job[6],), like)
    flat = parfor.array_at(job[2], (job[4] * job[7] * job[8] * job[9] * job[10],), like)
    _fill_rows(xf, flat, job, k0, k1)


parfor.export_task("planes_phases", _fill_task)
_run_fill = parfor.runner("planes_phases")
TASKS = ("planes_phases",)
"""The library task a phase fill runs on the pool (`fill_phases`): what callers list among the
tasks their first run builds."""


@jit(**_OPTS)
def fill_phases(xf, flat, at_x, channels, ih, iw, sh, sw, hq, wq, hp, wp, pt, pl):  # type: ignore[no-untyped-def]  # noqa: E501
    """``channels`` (ih, iw) channels one after another from ``at_x`` in the flat input
    ``xf``, zero-padded (``pt`` rows on top, ``pl`` columns on the left) and clipped to an
    (hp, wp) plane, each split into its stride phases in ``flat`` (`padded_phases`' layout,
    ``sh * sw * hq * wq`` elements a channel, channel after channel), every element written:
    the caller need not zero it (a convolution's scratch is reused, not zeroed). Large fills
    (the phases written and the input read: the elements `parfor.chunks` counts) run on the
    pool by rows, each row written whole (`_phase_rows`), where
    the caller alone zeroed then filled them while the other cores waited for the product:
    squeezenet's stem (3 channels of 224 x 224, 0.6 MB of phases) 80-110 us of serial work a
    call on a Zen 3 core in the model (counted by the phases alone, the stem's fill stayed in the
    caller on AVX-512: 67 us, against 42 split on an Emerald Rapids' two cores). Small ones run
    in the caller, zeros then the input
    (`padded_phases`): row by row, a map of 14 x 14 took twice as long (256 channels)."""
    rows = channels * sh * hq
    if rows <= 0 or sw * wq <= 0:
        return
    if at_x < 0 or at_x + channels * ih * iw > xf.size or channels * sh * sw * hq * wq > flat.size:
        raise IndexError("fill_phases: a channel or its phases lie outside their array")
    # the elements it touches (`parfor.chunks`' measure): the phases written and the input read
    pieces = parfor.chunks(rows * sw * wq + channels * ih * iw, rows)
    if pieces == 1:  # in this thread: zeros, then the input's elements, channel by channel
        size = sh * sw * hq * wq
        for i in range(U(channels * size)):
            flat[i] = 0
        for c_ in range(channels):
            padded_phases(xf, at_x + c_ * ih * iw, ih, iw, flat[c_ * size :], sh, sw, hq, wq, hp,
                          wp, pt, pl)  # fmt: skip
        return
    job = fill_job(xf, flat, at_x, channels, ih, iw, sh, sw, hq, wq, hp, wp, pt, pl, pieces)
    _run_fill(xf, pieces, job)
