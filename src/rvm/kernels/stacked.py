"""Max and average pools of small maps, many channels in each vector run (`rvm.kernels.pool`'s
method for pools 1 apart on maps narrower than a vector, in about half the time of a loop
per output row on 7 x 7 maps; inception's padded 3x3 pools that keep the map's size go to
`rvm.kernels.maxrows` and `avgrows`, which reduce groups of their channels in one run).

On a small map, a loop per output row is a few vector steps and a masked or scalar tail: the
loop's overhead is most of the time. Here a group of channels (about `GROUP` positions, the
channels lie one after another in the input) is reduced in runs over the whole group, the
taps that fall in the padding or in the next channel left out by tables of masks:

- the window rows, at every row of the map (rows a row stride skips too: there are few), one
  pass per tap: ``v[k] = op(v[k], x[k + tap's row offset])`` where the tap's row is in the
  channel;
- the window columns, at the output positions only, one pass per tap: ``acc[u] = op(acc[u],
  v[at[u] + tap's column offset])`` where the tap's column is in the channel, with ``at`` the
  output position's place in ``v`` (for a pool 1 apart whose output is its input's size,
  ``at[u]`` is ``u`` and the pass is a unit-stride run);
- an average's sum times its window's reciprocal count (`rvm.kernels.pool`'s table).

A selected tap is read unconditionally and kept or dropped by its mask (a select, which
vectorizes), so NaN in a dropped tap never counts and NaN in a window wins a max, as in the
reference; the reads stay inside ``v`` (it has a margin) and inside the channel group. Sums
are float64, as the reference's. The tables are built for one channel and copied along the
group by doubling (a few long copies). It takes the pools whose rows and columns (stride
apart) fit in the map (`takes`): no ceil-mode overhang past the map's last row or column.
Pools 2 apart take it too when asked (the window columns then a gather per tap), but on 12
x 12 to 28 x 28 maps they took 1.2 to 3.5 times the time of `rvm.kernels.maxrows`, so
`rvm.kernels.pool` gives it pools 1 apart only.
"""

from __future__ import annotations

import numpy as np

from rvm.kernels.jitting import jit
from rvm.kernels.planes import U, copy

__all__ = ["GROUP", "by_stacked", "takes"]

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)

GROUP = 2048
"""Positions of the input that a group of channels holds at most (one channel if larger): its
runs and tables stay in L1."""


@jit(**_OPTS)
def takes(ih, iw, oh, ow, sh, sw):  # type: ignore[no-untyped-def]
    """Whether `by_stacked` takes a pool of this input and output size and these strides: its
    kept rows and columns lie in the map."""
    return (oh - 1) * sh < ih and (ow - 1) * sw < iw


@jit(**_OPTS)
def _tile(table, length, copies):  # type: ignore[no-untyped-def]
    """``table[:length]`` repeated ``copies`` times from the start of ``table``, by doubling."""
    have = length
    while have < length * copies:
        n = min(have, length * copies - have)
        copy(table[have:], table, n)
        have += n


@jit(**_OPTS)
def _tables(ih, iw, oh, ow, m, window, scale, contiguous):  # type: ignore[no-untyped-def]
    """For a group of ``m`` channels: the row masks (a tap's row is in the channel, kh x m x
    ih x iw), the column masks at the output positions (kw x m x oh x ow), each output
    position's place in the group's rows (``at``, empty when ``contiguous``) and the
    averages' scales along the group (empty for a max: ``scale`` empty)."""
    kh, kw, sh, sw, dh, dw, pt, pl = window
    p, q = ih * iw, oh * ow
    rows = np.empty(kh * m * p, dtype=np.bool_)
    for i in range(kh):
        t = rows[i * m * p :]
        for r in range(ih):
            ok = 0 <= r + i * dh - pt < ih
            for c in range(iw):
                t[r * iw + c] = ok
        _tile(t, p, m)
    cols = np.empty(kw * m * q, dtype=np.bool_)
    for j in range(kw):
        t = cols[j * m * q :]
        for u in range(q):
            t[u] = 0 <= (u % ow) * sw + j * dw - pl < iw
        _tile(t, q, m)
    at = np.empty(0 if contiguous else m * q, dtype=np.int64)
    if not contiguous:
        for c in range(m):
            for u in range(q):
                at[c * q + u] = c * p + (u // ow) * sh * iw + (u % ow) * sw
    scales = np.empty(m * q if scale.size else 0, dtype=np.float64)
    if scale.size:
        copy(scales, scale, q)
        _tile(scales, q, m)
    return rows, cols, at, scales


@jit(**_OPTS)
def _rows_pass(xs, v, n, rows, off, is_max):  # type: ignore[no-untyped-def]
    """``v[k]`` = op(``v[k]``, ``xs[k + off]``) (max or sum) for k < ``n`` where ``rows[k]``;
    the k whose read would leave the group are in the padding (their mask is off) and are
    skipped."""
    k0, k1 = max(0, -off), min(n, n - off)
    if k1 <= k0:
        return
    d, s, r = v[k0:k1], xs[k0 + off : k1 + off], rows[k0:k1]
    if is_max:
        for k in range(U(k1 - k0)):
            a = np.maximum(d[k], s[k])
            d[k] = a if r[k] else d[k]
    else:
        for k in range(U(k1 - k0)):
            a = d[k] + s[k]
            d[k] = a if r[k] else d[k]


@jit(**_OPTS)
def _cols_pass(v, start, acc, nq, cols, at, is_max):  # type: ignore[no-untyped-def]
    """``acc[u]`` = op(``acc[u]``, ``v[start + at[u]]``) (``at[u]`` = u when ``at`` is
    empty) for u < ``nq`` where ``cols[u]``."""
    s = v[start:]
    if at.size == 0:
        if is_max:
            for u in range(U(nq)):
                a = np.maximum(acc[u], s[u])
                acc[u] = a if cols[u] else acc[u]
        else:
            for u in range(U(nq)):
                a = acc[u] + s[u]
                acc[u] = a if cols[u] else acc[u]
    elif is_max:
        for u in range(U(nq)):
            a = np.maximum(acc[u], s[U(at[u])])
            acc[u] = a if cols[u] else acc[u]
    else:
        for u in range(U(nq)):
            a = acc[u] + s[U(at[u])]
            acc[u] = a if cols[u] else acc[u]


@jit(**_OPTS, inline="always")
def by_stacked(x, out, lo, hi, scale, is_max, window, acc_dtype):  # type: ignore[no-untyped-def]
    """Max pools (``is_max``) or average pools (``scale``: the windows' reciprocal counts,
    oh x ow, float64) of channels ``lo`` to ``hi`` (flat n * c index) whose geometry
    `takes`, a group of channels at a time (see the module docstring); sums and maxima in
    ``acc_dtype``."""
    kh, kw, sh, sw, dh, dw, pt, pl = window
    ih, iw, oh, ow = x.shape[2], x.shape[3], out.shape[2], out.shape[3]
    p, q = ih * iw, oh * ow
    m = max(1, min(hi - lo, GROUP // p))
    contiguous = sh == 1 and sw == 1 and oh == ih and ow == iw
    rows, cols, at, scales = _tables(ih, iw, oh, ow, m, window, scale, contiguous)
    margin = max(pl, dw * (kw - 1))
    pad = -np.inf if is_max else 0.0
    v = np.full(m * p + 2 * margin, pad, dtype=acc_dtype)
    acc = np.empty(m * q, dtype=acc_dtype)
    xf, of = x.reshape(x.size), out.reshape(out.size)
    for first in range(lo, hi, m):
        g = min(m, hi - first)
        n, nq = g * p, g * q
        xs, body = xf[first * p : first * p + n], v[margin : margin + n]
        body[:] = pad
        for i in range(kh):
            _rows_pass(xs, body, n, rows[i * m * p :], (i * dh - pt) * iw, is_max)
        acc[:nq] = pad
        for j in range(kw):
            _cols_pass(v, margin + j * dw - pl, acc, nq, cols[j * m * q :], at, is_max)
        dst = of[first * q : first * q + nq]
        if is_max:
            copy(dst, acc, nq)
        else:
            for u in range(U(nq)):
                dst[u] = acc[u] * scales[u]
