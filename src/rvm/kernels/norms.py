"""Layer and RMS normalization over rows for jit kernels, compiled once.

`norm_rows(x, gamma, beta, out, eps_bits, rms)` fills ``out`` (rows, n) from ``x`` (rows, n),
both C-contiguous of one float dtype, a row at a time:

- layer norm (``rms`` 0): ``(x - mean) / sqrt(var + eps) * gamma + beta``, the mean and the
  (biased) variance of the row, as `rvm.op.layer_norm` over trailing axes flattened to ``n``;
- RMS norm (``rms`` 1): ``x / sqrt(mean(x * x) + eps) * gamma`` (`rvm.op.rms_norm`; ``beta``
  is not read).

``gamma`` and ``beta`` have ``n`` values; ``eps`` comes as the int64 bits of its float64 value
(`rvm.kernels.lrn.float_bits`), as the library's entry points take integers. Rows are
independent: a large input's are cut into chunks on rvm's pool (`rvm.kernels.parfor`), and a
row's result does not depend on the cut. A transformer's norms are the rows of its activations
(BERT-base at 128 tokens: 128 rows of 768), which the product before wrote on both cores:
a single core reading them waits on the other's cache (49 us a norm in the model against 16 us
alone, one Zen 4 core), so the pool's pieces read what they wrote, mostly.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from rvm.kernels import entry, parfor
from rvm.kernels.jitting import jit
from rvm.kernels.lrn import bits_float

__all__ = ["first_run_tasks", "norm_rows", "norm_rows_call", "over_rows"]

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)
# reassoc: the row's sums vectorize (a sum in order is a chain of dependent adds: 3 us a row of
# 768). Every copy of `_range` is the same IR under the same flags: one rounding everywhere.
_FAST = dict(_OPTS, fastmath={"nsz", "arcp", "contract", "afn", "reassoc"})

PASSES = 4
"""The elements a row's normalization touches per element, for its cut over threads
(`parfor.chunks`): three reads (sum, squares, output) and one write."""


@jit(**_FAST)
def _row(x, g, b, o, n, eps, rms):  # type: ignore[no-untyped-def]
    """One row: ``x``, ``o`` its ``n`` values in and out (1-d views)."""
    dt = x.dtype.type
    size = dt(n)
    if rms:
        sq = dt(0)
        for i in range(n):
            sq += x[i] * x[i]
        r = dt(1) / np.sqrt(sq / size + eps)
        for i in range(n):
            o[i] = x[i] * r * g[i]
        return
    s = dt(0)
    for i in range(n):
        s += x[i]
    mean = s / size
    sq = dt(0)
    for i in range(n):
        d = x[i] - mean
        sq += d * d
    r = dt(1) / np.sqrt(sq / size + eps)
    for i in range(n):
        o[i] = (x[i] - mean) * r * g[i] + b[i]


@jit(**_OPTS, inline="always")
def _range(x, g, b, o, lo, hi, eps, rms):  # type: ignore[no-untyped-def]
    """Rows ``lo`` to ``hi`` of ``x`` (rows, n) into ``o``."""
    n = x.shape[1]
    e = x.dtype.type(eps)
    for r in range(lo, hi):
        _row(x[r], g, b, o[r], n, e, rms)


_JOB = 10  # a job: its length, x, gamma, beta, out, rows, n, eps (bits), rms, chunks


def _task(k, like, data):  # type: ignore[no-untyped-def]
    """One chunk of rows of a normalization split over threads (`rvm.kernels.parfor`)."""
    job = parfor.job(data)
    rows, n, chunks = job[5], job[6], job[9]
    x = parfor.array_at(job[1], (rows, n), like)
    g = parfor.array_at(job[2], (n,), like)
    b = parfor.array_at(job[3], (n,), like)
    o = parfor.array_at(job[4], (rows, n), like)
    lo, hi = k * rows // chunks, (k + 1) * rows // chunks
    _range(x, g, b, o, lo, hi, bits_float(job, 7), job[8] != 0)


parfor.export_task("norm_rows", _task)
_run = parfor.runner("norm_rows")


def over_rows(ndim: int, axes: tuple[int, ...] | list[int]) -> bool:
    """Whether a norm over ``axes`` (in range, any order) of an ``ndim``-d input is one over
    rows, `norm_rows`' (the jit calls it for those, `rvm.jit.compute`): the trailing axes, at
    least one."""
    k = len(axes)
    return k > 0 and sorted(axes) == list(range(ndim - k, ndim))


def first_run_tasks(rows: int | None, n: int) -> tuple[str, ...]:
    """The library task a normalization of ``rows`` rows of ``n`` runs when split (rows known
    at run time only, None: a sequence's, counted as many): what its first run builds, worth
    building beforehand (`rvm.kernels.parfor.prefetch`)."""
    if rows is None:
        return ("norm_rows",) if n > 1 else ()
    return ("norm_rows",) if parfor.splits.py_func(PASSES * rows * n) else ()


@jit(**_OPTS, inline="always")
def _norm(x, g, b, o, params):  # type: ignore[no-untyped-def]
    """`norm_rows`' work (``params``: eps's bits, rms), over rows split between threads when
    it is large; False when the shapes disagree."""
    rows, n = x.shape
    rms = params[1] != 0
    if o.shape != x.shape or g.shape[0] != n or (not rms and b.shape[0] != n):
        return False
    if x.size == 0:
        return True
    chunks = parfor.chunks(PASSES * x.size, rows)
    if chunks < 2:
        _range(x, g, b, o, 0, rows, bits_float(params, 0), rms)
        return True
    beta = b if not rms else g  # an address the task never reads
    job = np.array((_JOB, parfor.address(x), parfor.address(g), parfor.address(beta),
                    parfor.address(o), rows, n, params[0], params[1], chunks),
                   dtype=np.int64)  # fmt: skip
    _run(x, chunks, job)
    return True


def _entry(x, g, b, o, dims, params):  # type: ignore[no-untyped-def]
    """`_norm` on x (rows, n), gamma (n), beta (n; RMS: any), out (rows, n) (see
    `rvm.kernels.entry`): 0 done, 1 the shapes disagree."""
    d, p = nb.carray(dims, 6), nb.carray(params, 2)
    xa, oa = nb.carray(x, (d[0], d[1])), nb.carray(o, (d[4], d[5]))
    return 0 if _norm(xa, nb.carray(g, (d[2],)), nb.carray(b, (d[3],)), oa, p) else 1


entry.export("norm_rows", _entry)
# What kernels call (`rvm.kernels.entry.caller`): ``norm_rows_call((x, g, b, out), params)``.
norm_rows_call = entry.caller("norm_rows", 2)


# For Python callers (kernels call `norm_rows_call`). Not cached: compiling it types the call,
# which registers the entry point (`entry.require`); cached object code would be linked without.
@nb.njit(nogil=True)
def norm_rows(x, gamma, beta, out, eps_bits, rms):  # type: ignore[no-untyped-def]
    """``out`` = the normalization of ``x``'s rows (see the module docstring)."""
    if norm_rows_call((x, gamma, beta, out), (np.int64(eps_bits), np.int64(rms))) != 0:
        raise ValueError("norm_rows: gamma, beta or the output do not match the input's rows")
