"""Max pools whose windows overlap, separable over whole channels (`rvm.kernels.pool`'s method
for 3x3 windows 2 apart, CNNs' common pool).

Per channel, the window rows are reduced at every position of the channel in one unit-stride
run, then the window columns of the kept windows only, whose subsample is the output. The
rows the stride skips cost less to compute than the alternatives cost: a few short loops per
output row (each with a scalar tail as long as a vector), or a strided copy of the channel
split by the strides. On one core of an AVX-512 machine this takes a half to 0.85 of the time
of `rvm.kernels.pool`'s other methods on the light CNNs' max pools; it is not used for
windows that do not overlap (2x2, 2 apart: every input read once anyway), where it took twice
as long.
"""

from __future__ import annotations

import numpy as np

from rvm.kernels.jitting import jit
from rvm.kernels.planes import U, padded_phases

__all__ = ["by_flat"]

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)


@jit(**_OPTS)
def _max_flat(x, out, lo, hi, plane, v, h, window):  # type: ignore[no-untyped-def]
    """Max pools of channels ``lo`` to ``hi`` as two long runs and a subsample per channel:
    the window rows reduced at every position of the plane (``v``), then the window columns
    (``h``), one unit-stride run over the whole plane each (a row's tail is no short loop of its
    own), and the output is every (sh, sw)-th position of ``h``. ``plane`` holds the channel
    padded with -inf when the pool pads or its windows overhang the input (else it is empty
    and the channel is read in place); either way its rows are ``wp`` apart. NaN wins, as in
    the reference."""
    kh, kw, sh, sw, dh, dw, pt, pl = window
    ih, iw, oh, ow = x.shape[2], x.shape[3], out.shape[2], out.shape[3]
    hp = (oh - 1) * sh + dh * (kh - 1) + 1
    wp = (ow - 1) * sw + dw * (kw - 1) + 1
    in_place = plane.size == 0
    if in_place:
        wp = iw
    xf, of = x.reshape(x.size), out.reshape(out.size)
    n_v = U(((oh - 1) * sh + 1) * wp)  # the rows' reductions the columns' read
    n_h = U((oh - 1) * sh * wp + (ow - 1) * sw + 1)  # the windows' corners the output reads
    for c in range(lo, hi):
        src = xf[c * ih * iw :]
        if not in_place:
            padded_phases(xf, c * ih * iw, ih, iw, plane, 1, 1, hp, wp, hp, wp, pt, pl)
            src = plane
        _max_taps_run(src, v, n_v, kh, U(dh * wp))
        if sw == 1:  # the columns' run too, then each output row a copy
            _max_taps_run(v, h, n_h, kw, U(dw))
            dst = U(c * oh * ow)
            for p_ in range(oh):
                at = U(p_ * sh * wp)
                for q_ in range(U(ow)):
                    of[dst + q_] = h[at + q_]
                dst += U(ow)
        else:  # the kept windows' columns only, row by row
            _max_cols_strided(v, of, c * oh * ow, oh, ow, kw, sh * wp, sw, dw)


@jit(**_OPTS)
def _max_cols_strided(v, of, at_out, oh, ow, kw, row_step, sw, dw):  # type: ignore[no-untyped-def]
    """``of[at_out + p * ow + q]`` = the maximum over t < kw of ``v[p * row_step + q * sw + t *
    dw]``: the windows' columns at column stride ``sw`` > 1 (3 taps at stride 2, the common
    pool, a loop of its own: its strided loads vectorize)."""
    dst = U(at_out)
    for p_ in range(oh):
        at = U(p_ * row_step)
        if sw == 2 and kw == 3 and dw == 1:
            for q_ in range(U(ow)):
                a = at + U(2) * q_
                of[dst + q_] = np.maximum(np.maximum(v[a], v[a + U(1)]), v[a + U(2)])
        else:
            step = U(sw)
            for q_ in range(U(ow)):
                of[dst + q_] = v[at + step * q_]
            for t in range(1, kw):
                off = at + U(t * dw)
                for q_ in range(U(ow)):
                    of[dst + q_] = np.maximum(of[dst + q_], v[off + step * q_])
        dst += U(ow)


@jit(**_OPTS)
def _max_taps_run(src, dst, n, taps, apart):  # type: ignore[no-untyped-def]
    """``dst[:n]`` = the maximum over t < taps of ``src[t * apart:][:n]``, three taps a pass."""
    for t in range(0, taps, 3):
        a0 = U(t) * apart
        a1 = U(min(t + 1, taps - 1)) * apart  # fewer than three left: a tap again
        a2 = U(min(t + 2, taps - 1)) * apart
        if t == 0:
            for j in range(n):
                dst[j] = np.maximum(np.maximum(src[a0 + j], src[a1 + j]), src[a2 + j])
        else:
            for j in range(n):
                m = np.maximum(np.maximum(src[a0 + j], src[a1 + j]), src[a2 + j])
                dst[j] = np.maximum(dst[j], m)


@jit(**_OPTS, inline="always")
def by_flat(x, out, lo, hi, window):  # type: ignore[no-untyped-def]
    """`_max_flat` on channels ``lo`` to ``hi``, with scratch of its own."""
    kh, kw, sh, sw, dh, dw, pt, pl = window
    ih, iw, oh, ow = x.shape[2], x.shape[3], out.shape[2], out.shape[3]
    hp = (oh - 1) * sh + dh * (kh - 1) + 1
    wp = (ow - 1) * sw + dw * (kw - 1) + 1
    inside = pt == 0 and pl == 0 and hp <= ih and wp <= iw
    plane = np.full(0 if inside else hp * wp, -np.inf, dtype=x.dtype)
    v = np.empty(hp * (iw if inside else wp), dtype=x.dtype)
    _max_flat(x, out, lo, hi, plane, v, np.empty(v.size if sw == 1 else 0, x.dtype), window)
