"""Padded planes of one channel, for loops over windows (convolution, pooling).

A window loop reads the channel at offsets that may fall in the padding. Copying the channel
into a plane that already holds the padding value lets every tap read a plain run with no
per-element test; splitting the plane by the strides (`padded_phases`) makes each tap one
unit-stride run over all the output positions.
"""

from __future__ import annotations

import numpy as np

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


@jit(**_OPTS)
def padded_phases(xf, at_x, ih, iw, flat, sh, sw, hq, wq, hp, wp, pt, pl):  # type: ignore[no-untyped-def]
    """The (ih, iw) channel starting at ``at_x`` in the flat input ``xf``, padded by ``pt``
    rows on top and ``pl`` columns on the left and clipped to an (hp, wp) plane, into the
    plane's stride phases: ``flat`` holds sh * sw phases of (hq, wq), phase (a, b) the
    plane's rows a, a + sh, ... and columns b, b + sw, .... Positions no input element
    reaches keep the value ``flat`` was allocated with: the padding value, the same for every
    channel.

    Output position (p, q) of a window loop with strides (sh, sw) reads, for tap (i, j),
    phase ((i * dh) % sh, (j * dw) % sw) at row p + (i * dh) // sh, column
    q + (j * dw) // sw: one run of oh * wq elements per tap from `tap_starts`, whose
    columns from ow on are wrap-around garbage to drop. (Indices are unsigned: a signed one
    costs a negative-index test per element, which stops vectorization; the phase of a row
    is known from the loop, with no division per row.)
    """
    q0, q1 = max(0, -pl), min(iw, wp - pl)
    h0, h1 = max(0, -pt), min(ih, hp - pt)
    for a in range(sh):  # the row phase: input rows h with (h + pt) % sh == a
        h_first = h0 + (a - pt - h0) % sh
        if h_first >= h1:
            continue
        rows = (h1 - h_first + sh - 1) // sh
        row0 = (h_first + pt) // sh  # its first row in the phase
        if sw == 2 and q1 - q0 >= 2:  # both column phases in one pass (the stems' stride)
            _two_phases(xf, at_x, iw, flat, a, hq, wq, row0, rows, h_first, sh, q0, q1, pl)
            continue
        for b in range(sw):  # the column phase
            first = q0 + (b - pl - q0) % sw  # the first column landing in phase b
            count = U(max(0, (q1 - first + sw - 1) // sw))
            at = U((a * sw + b) * hq * wq + row0 * wq + (first + pl) // sw)
            src = U(at_x + h_first * iw + first)
            src_step, dst_step = U(sh * iw), U(wq)
            if sw == 1:  # a unit-stride copy (vectorized)
                for _ in range(rows):
                    for k in range(count):
                        flat[at + k] = xf[src + k]
                    at, src = at + dst_step, src + src_step
            else:
                step = U(sw)
                for _ in range(rows):
                    for k in range(count):
                        flat[at + k] = xf[src + k * step]
                    at, src = at + dst_step, src + src_step
