"""Depthwise convolutions (one input channel per group, any channel multiplier) for
`rvm.kernels.conv`'s depthwise method: each input plane copied once into a zero-padded plane
split into its stride phases (`rvm.kernels.planes`), then the taps' weighted windows added as
long runs, three taps per pass; input planes in chunks on the pool when large.
"""

from __future__ import annotations

import numpy as np

from rvm.kernels import parfor
from rvm.kernels.jitting import jit
from rvm.kernels.planes import U, padded_phases, phase_shape, tap_starts

__all__ = ["depthwise"]

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)


@jit(**_OPTS)
def _depthwise_range(x, w, out, lo, hi, sh, sw, dh, dw, pt, pl):  # type: ignore[no-untyped-def]
    """Input planes ``lo`` to ``hi`` (flat n * c index) of a convolution with one input
    channel per group (depthwise, any channel multiplier): each plane is copied into a
    zero-padded plane split into its stride phases, then the taps add their weighted windows
    as long runs, three per pass (see `rvm.kernels.planes`)."""
    c, ih, iw = x.shape[1], x.shape[2], x.shape[3]
    o, kh, kw = w.shape[0], w.shape[2], w.shape[3]
    oh, ow = out.shape[2], out.shape[3]
    m = o // c  # outputs per input channel
    hp, wp, hq, wq = phase_shape(oh, ow, kh, kw, sh, sw, dh, dw)
    flat = np.zeros(sh * sw * hq * wq, dtype=x.dtype)
    starts = tap_starts(sh, sw, hq, wq, kh, kw, dh, dw)
    run = U(oh * wq)
    acc = np.empty(run, dtype=x.dtype)
    xf, wf, of = x.reshape(x.size), w.reshape(w.size), out.reshape(out.size)
    for plane in range(lo, hi):
        n_, ch = plane // c, plane % c
        padded_phases(xf, plane * ih * iw, ih, iw, flat, sh, sw, hq, wq, hp, wp, pt, pl)
        for oc in range(ch * m, ch * m + m):
            _weighted_taps(flat, starts, wf, oc * kh * kw, acc, run)
            _copy_rows(acc, wq, of, (n_ * o + oc) * oh * ow, oh, ow)


# A depthwise job (int64): its length (20), x, w, out, n, c, ih, iw, o, kh, kw, oh, ow, sh, sw,
# dh, dw, pt, pl, chunks.


def _depthwise_task(k, like, data):  # type: ignore[no-untyped-def]
    """One chunk of input planes of a depthwise convolution split over threads."""
    job = parfor.job(data)
    n, c, ih, iw, o = job[4], job[5], job[6], job[7], job[8]
    kh, kw, oh, ow = job[9], job[10], job[11], job[12]
    x = parfor.array_at(job[1], (n, c, ih, iw), like)
    w = parfor.array_at(job[2], (o, 1, kh, kw), like)
    out = parfor.array_at(job[3], (n, o, oh, ow), like)
    chunks = job[19]
    lo, hi = k * n * c // chunks, (k + 1) * n * c // chunks
    _depthwise_range(x, w, out, lo, hi, job[13], job[14], job[15], job[16], job[17], job[18])


# Built when a depthwise convolution first splits (`rvm.kernels.parfor`); its name is the
# convolution entry point's own task of old.
parfor.export_task("conv2d", _depthwise_task)
_run_depthwise = parfor.runner("conv2d")


@jit(**_OPTS)
def depthwise(x, w, out, sh, sw, dh, dw, pt, pl):  # type: ignore[no-untyped-def]
    """`_depthwise_range` over every input plane, in chunks of planes on the pool when large."""
    n, c, ih, iw = x.shape
    o, _, kh, kw = w.shape
    oh, ow = out.shape[2], out.shape[3]
    chunks = min(parfor.threads(), n * c)
    if chunks < 2 or n * o * (ih * iw + oh * ow * kh * kw) < parfor.MIN_WORK:
        _depthwise_range(x, w, out, 0, n * c, sh, sw, dh, dw, pt, pl)
        return
    job = np.array((20, parfor.address(x), parfor.address(w), parfor.address(out), n, c, ih, iw,
                    o, kh, kw, oh, ow, sh, sw, dh, dw, pt, pl, chunks), dtype=np.int64)  # fmt: skip
    _run_depthwise(x, chunks, job)


@jit(**_OPTS)
def _weighted_taps(flat, starts, wf, at_w, acc, run):  # type: ignore[no-untyped-def]
    """``acc[:run]`` = the sum over the taps t of ``wf[at_w + t]`` times the run of ``flat``
    at ``starts[t]``, three taps per pass over ``acc`` (a pass per tap reads and writes it
    three times as often)."""
    taps = starts.shape[0]
    if taps == 0:
        acc[:run] = 0
    first = True
    for t in range(0, taps, 3):
        left = taps - t
        w0, a0 = wf[at_w + t], U(starts[t])
        if left >= 3:
            w1, a1 = wf[at_w + t + 1], U(starts[t + 1])
            w2, a2 = wf[at_w + t + 2], U(starts[t + 2])
            if first:
                for r_ in range(run):
                    acc[r_] = w0 * flat[a0 + r_] + w1 * flat[a1 + r_] + w2 * flat[a2 + r_]
            else:
                for r_ in range(run):
                    acc[r_] += w0 * flat[a0 + r_] + w1 * flat[a1 + r_] + w2 * flat[a2 + r_]
        elif left == 2:
            w1, a1 = wf[at_w + t + 1], U(starts[t + 1])
            if first:
                for r_ in range(run):
                    acc[r_] = w0 * flat[a0 + r_] + w1 * flat[a1 + r_]
            else:
                for r_ in range(run):
                    acc[r_] += w0 * flat[a0 + r_] + w1 * flat[a1 + r_]
        elif first:
            for r_ in range(run):
                acc[r_] = w0 * flat[a0 + r_]
        else:
            for r_ in range(run):
                acc[r_] += w0 * flat[a0 + r_]
        first = False


@jit(**_OPTS)
def _copy_rows(acc, wq, of, at, oh, ow):  # type: ignore[no-untyped-def]
    """The first ``ow`` of every ``wq`` elements of ``acc`` to ``of[at:]`` (the output plane
    without the wrap-around columns); unsigned indices, as in `rvm.kernels.planes`."""
    for p_ in range(oh):
        dst, src = U(at + p_ * ow), U(p_ * wq)
        for q_ in range(U(ow)):
            of[dst + q_] = acc[src + q_]
