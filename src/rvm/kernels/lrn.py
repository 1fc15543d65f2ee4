"""Cross-channel local response normalization for jit kernels, compiled once.

`lrn(x, out, size, alpha_bits, beta_bits, bias_bits)` fills ``out`` with
``x / (bias + alpha / size * s) ** beta`` for ``x`` (n, c, h, w), both C-contiguous of one
float dtype, where ``s`` sums the squares of channels ``c - (size - 1) // 2`` to
``c + size // 2`` (`rvm.op.lrn` on axis 1). The float attributes come as the int64 bits of
their float64 values (the library's entry points take integers; a float converted to the
dtype first would round ``alpha`` before the division by ``size``, which the reference does
in float64).

Each output channel is one vectorizable run over the plane: the window's squares summed in
the dtype (as the reference does), then the power. A power has no vectorized libm call here
(`rvm.kernels.mathlib`), so the common exponents are square roots: ``t ** -0.75`` is
``y * y / sqrt(y)`` of ``y = 1 / sqrt(t)`` from reciprocal square root estimates
(`_three_quarters`), ``t ** 0.5`` is ``sqrt(t)``; others call ``pow``. Large inputs
are split by channels over threads (`rvm.kernels.parfor`).
"""

from __future__ import annotations

import numba as nb
import numpy as np

from rvm.kernels import entry, parfor
from rvm.kernels.jitting import jit
from rvm.kernels.planes import U

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)


@jit(**_OPTS, fastmath={"afn", "arcp"})
def _three_quarters(xf, of, dst, hw, scale, bias, acc):  # type: ignore[no-untyped-def]
    """``of[dst + i] = xf[dst + i] * t ** -0.75`` with ``t = bias + scale * acc[i]``, for i <
    ``hw``: ``y = 1 / sqrt(t)``, then ``y * (y / sqrt(y))``, which these flags let LLVM build
    from reciprocal square root estimates and a Newton step each (``vrsqrt14ps``) instead of
    two square roots and a division (inception_v1's 192 x 55 x 55 lrn: 1.8x faster, within
    3.5e-7 of the float64 power, one Zen 4 core). Not inlined: its flags are its own."""
    one = acc.dtype.type(1)
    for i in range(hw):
        y = one / np.sqrt(bias + scale * acc[i])
        of[dst + i] = xf[dst + i] * (y * (y / np.sqrt(y)))


@jit(**_OPTS)
def _channel(xf, of, at, plane, first, count, scale, beta, bias, acc):  # type: ignore[no-untyped-def]
    """The output channel at flat offset ``at`` (``plane`` elements): its window is the
    ``count`` channels from flat offset ``first``."""
    hw = U(plane)
    acc[:] = 0
    for k in range(count):
        src = U(first + k * plane)
        for i in range(hw):
            v = xf[src + i]
            acc[i] += v * v
    dst = U(at)
    if beta == 0.75:
        _three_quarters(xf, of, dst, hw, scale, bias, acc)
    elif beta == 0.5:
        for i in range(hw):
            of[dst + i] = xf[dst + i] / np.sqrt(bias + scale * acc[i])
    else:
        for i in range(hw):
            of[dst + i] = xf[dst + i] / (bias + scale * acc[i]) ** beta


@jit(**_OPTS, inline="always")
def _range(x, out, lo, hi, size, alpha, beta, bias):  # type: ignore[no-untyped-def]
    """Output channels ``lo`` to ``hi`` (flat n * c index)."""
    c, plane = x.shape[1], x.shape[2] * x.shape[3]
    xf, of = x.reshape(x.size), out.reshape(out.size)
    dt = x.dtype.type
    scale, b, k = dt(alpha / size), dt(beta), dt(bias)
    acc = np.empty(plane, dtype=x.dtype)
    before, after = (size - 1) // 2, size // 2
    for flat in range(lo, hi):
        ch = flat % c
        first, last = max(ch - before, 0), min(ch + after, c - 1)
        start = (flat - ch + first) * plane
        _channel(xf, of, flat * plane, plane, start, last - first + 1, scale, b, k, acc)


@jit(**_OPTS)
def bits_float(p, at):  # type: ignore[no-untyped-def]
    """The float64 whose bits are ``p[at]`` (an int64 array): `float_bits`' inverse, as the
    kernels that take float attributes in an int64 record read them (`rvm.kernels.qadd`)."""
    return p[at : at + 1].view(np.float64)[0]


_JOB = 12  # a job: its length, x, out, n, c, h, w, size, alpha, beta, bias (bits), chunks


def _task(k, like, data):  # type: ignore[no-untyped-def]
    """One chunk of channels of an lrn split over threads (`rvm.kernels.parfor`)."""
    job = parfor.job(data)
    n, c, h, w = job[3], job[4], job[5], job[6]
    x = parfor.array_at(job[1], (n, c, h, w), like)
    out = parfor.array_at(job[2], (n, c, h, w), like)
    lo, hi = k * n * c // job[11], (k + 1) * n * c // job[11]
    _range(x, out, lo, hi, job[7], bits_float(job, 8), bits_float(job, 9), bits_float(job, 10))


parfor.export_task("lrn", _task)
_run = parfor.runner("lrn")


@jit(**_OPTS)
def _work(elements, size):  # type: ignore[no-untyped-def]
    """The elements an lrn of ``elements`` over windows of ``size`` channels touches, for its
    cut over threads (`parfor.chunks`)."""
    return elements * (size + 2)


def first_run_tasks(elements: int, size: int) -> tuple[str, ...]:
    """The library task an lrn of ``elements`` over windows of ``size`` channels runs (when
    split): what its first run builds, worth building beforehand (`rvm.kernels.parfor.prefetch`)."""
    large = parfor.splits.py_func(_work.py_func(elements, size))  # Python: nothing to compile
    return ("lrn",) if large else ()


@jit(**_OPTS, inline="always")
def _lrn(x, out, params):  # type: ignore[no-untyped-def]
    """`lrn`'s work (``params``: size and the three float bits), over channels split between
    threads when it is large; False when the shapes disagree or size < 1."""
    n, c, h, w = x.shape
    if out.shape != x.shape or params[0] < 1:
        return False
    if x.size == 0:
        return True
    size = params[0]
    chunks = parfor.chunks(_work(x.size, size), n * c)
    if chunks < 2:
        alpha, beta, bias = bits_float(params, 1), bits_float(params, 2), bits_float(params, 3)
        _range(x, out, 0, n * c, size, alpha, beta, bias)
        return True
    job = np.array((_JOB, parfor.address(x), parfor.address(out), n, c, h, w, size,
                    params[1], params[2], params[3], chunks), dtype=np.int64)  # fmt: skip
    _run(x, chunks, job)
    return True


def _entry(a, b, c, dims, params):  # type: ignore[no-untyped-def]
    """`_lrn` on x (a), out (b) (see `rvm.kernels.entry`): 0 done, 1 the shapes
    disagree."""
    d = nb.carray(dims, 8)
    x = nb.carray(a, (d[0], d[1], d[2], d[3]))
    out = nb.carray(b, (d[4], d[5], d[6], d[7]))
    return 0 if _lrn(x, out, nb.carray(params, 4)) else 1


entry.export("lrn", _entry)
# What kernels call (`rvm.kernels.entry.caller`): ``entry_call(arrays, params)``, 0 done.
entry_call = entry.caller("lrn", 4)


# For Python callers (kernels call `entry_call`). Not cached: compiling it types the call, which
# registers the entry point (`entry.require`); cached object code would be linked without it.
@nb.njit(nogil=True)
def lrn(x, out, size, alpha_bits, beta_bits, bias_bits):  # type: ignore[no-untyped-def]
    """``out`` = the local response normalization of ``x`` (see the module docstring)."""
    i = np.int64
    if entry_call((x, out), (i(size), i(alpha_bits), i(beta_bits), i(bias_bits))) != 0:
        raise ValueError("lrn: the output's shape differs from the input's, or size < 1")


def float_bits(value: float) -> int:
    """The int64 bits of ``value`` as a float64: how `lrn` takes its float attributes."""
    return int(np.array(value, dtype=np.float64).view(np.int64))
