"""A float32 per-channel affine map and ReLU as one pass, split over rvm's pool.

A jit kernel whose single output is its one float32 input of 3 or 4 dims (channels at axis 1)
through inference batch norms and additions, subtractions, multiplications and divisions by
per-channel values, then an optional ReLU (`rvm.jit.channel_affine`), computes each channel's
scale and shift once (a loop over the channels) and calls `entry_call` (``channel_affine``)
for ``out = act(x * scale[c] + shift[c])``, rather than running its own loop nest over the
output in the calling thread. That loop ran in the calling thread alone: densenet121's 62
standalone batch norm, multiply, add and ReLU kernels took 6% of its one-thread time, the other
core idle at two threads. Here the input and output, viewed as rows (an image's channel each),
are cut into contiguous pieces of equal size (whole vectors between them; up to 4 a thread,
`parfor.chunks`), each one linear sweep a row's run at a time, on the pool when the pass
touches `parfor.MIN_WORK` elements or more, else in the calling thread.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from rvm.kernels import entry, parfor
from rvm.kernels.epipass import ACTIVATIONS, row_run  # the same activations and arithmetic
from rvm.kernels.gemmshape import LANES
from rvm.kernels.jitting import jit

__all__ = ["channel_affine", "entry_call", "splits"]

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)

# A job (int64): its length, the input's and the output's addresses, their elements, a row's
# elements, channels, the coefficients' address (each channel's scale and shift), the activation
# (`ACTIVATIONS`), the pieces.
_JOB_FIELDS = 9


def _task(piece, like, data):  # type: ignore[no-untyped-def]
    """A pool task: piece ``piece`` of the job's output, one run of its elements."""
    job = parfor.job(data)
    total, cols, channels, act, pieces = job[3], job[4], job[5], job[7], job[8]
    x = parfor.array_at(job[1], (total,), like)
    out = parfor.array_at(job[2], (total,), like)
    coef = parfor.array_at(job[6], (2 * channels,), like)
    lo, hi = parfor.piece_range(piece, pieces, total, LANES)
    _sweep(x, out, coef, lo, hi, cols, channels, act)


@jit(**_OPTS)
def _sweep(x, out, coef, lo, hi, cols, channels, act):  # type: ignore[no-untyped-def]
    """``out[lo:hi] = act(x * scale + shift)``, a row (``cols`` elements) at a time
    (`epipass.row_run`), each row's channel's scale and shift ``coef[2 * channel]`` and
    ``coef[2 * channel + 1]``."""
    row = lo // cols
    channel = row % channels
    at_x, at_out = parfor.address(x), parfor.address(out)
    while lo < hi:
        end = min(hi, (row + 1) * cols)
        s, t = coef[2 * channel], coef[2 * channel + 1]
        row_run(at_x + 4 * lo, at_out + 4 * lo, end - lo, s, t, 0, act)
        row += 1
        channel += 1
        if channel == channels:
            channel = 0
        lo = end


parfor.export_task("channel_affine", _task)
_run = parfor.runner("channel_affine")
_call = parfor.caller("channel_affine")
FIRST_RUN_TASKS = ("channel_affine",)


@jit(**_OPTS)
def splits(total):  # type: ignore[no-untyped-def]
    """Whether a pass over ``total`` elements goes to the pool: it touches (reads, writes)
    `parfor.MIN_WORK` elements or more."""
    return 2 * total >= parfor.MIN_WORK  # no callee: a compile's first run calls it


@jit(**_OPTS, inline="always")
def channel_affine(x, out, coef, act):  # type: ignore[no-untyped-def]
    """``out = act(x * coef[2 c] + coef[2 c + 1])`` for each channel c, float32,
    C-contiguous: ``x`` and ``out`` (n, c, h, w) of one shape (``out`` may be ``x``), ``coef``
    of 2 values a channel (its scale, its shift); ``act`` an index of `ACTIVATIONS`. The
    caller checks the shapes."""
    total = out.size
    if total == 0:
        return
    channels = out.shape[1]
    pieces = parfor.chunks(2 * total, total)  # the elements `splits` counts
    job = np.empty(_JOB_FIELDS, dtype=np.int64)
    job[0], job[1], job[2], job[3] = _JOB_FIELDS, parfor.address(x), parfor.address(out), total
    job[4], job[5] = total // (out.shape[0] * channels), channels
    job[6], job[7], job[8] = parfor.address(coef), act, pieces
    if pieces > 1:
        _run(out, pieces, job)
    else:
        _call(out, 0, job)


# -- the compiled entry point (see `rvm.kernels.entry`) ------------------------------------


def _entry(a, b, c, dims, params):  # type: ignore[no-untyped-def]
    """`channel_affine` on x (a), out (b) and the coefficients viewed (1, 1, c, 2) (c);
    ``params``: the activation: 0 done, 1 the shapes disagree."""
    d, act = nb.carray(dims, 12), nb.carray(params, 1)[0]
    if act < 0 or act >= len(ACTIVATIONS):
        return 1
    if d[0] != d[4] or d[1] != d[5] or d[2] != d[6] or d[3] != d[7]:
        return 1
    if d[8] != 1 or d[9] != 1 or d[10] != d[1] or d[11] != 2:
        return 1
    x = nb.carray(a, (d[0], d[1], d[2], d[3]))
    out = nb.carray(b, (d[0], d[1], d[2], d[3]))
    channel_affine(x, out, nb.carray(c, (2 * d[1],)), act)
    return 0


entry.export("channel_affine", _entry)
# What kernels call (`rvm.kernels.entry.caller`): ``entry_call(arrays, params)``, 0 done.
entry_call = entry.caller("channel_affine", 1)
