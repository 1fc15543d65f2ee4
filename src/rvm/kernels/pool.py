"""Float max and average pooling for jit kernels, compiled once and called by every pool kernel.

`pool2d(x, out, is_max, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr, ceil_mode, include_pad)`
(flags 0 or 1) fills ``out`` (n, c, oh, ow) with the pools of ``x`` (n, c, ih, iw), both
C-contiguous of one float dtype, with the semantics of `rvm.op.max_pool2d` /
`rvm.op.avg_pool2d`: windows of kh x kw taps ``dh``/``dw`` apart, ``sh``/``sw`` apart, over
the input padded by ``pt``, ``pl``, ``pb``, ``pr`` (top, left, bottom, right); padding never
wins a max, and an average divides the sum of a window's input elements by their count (plus
its padding elements with ``include_pad``; a ceil-mode window's overhang past the padding
never counts). Averages sum in float64, as the reference does, and are multiplied by a table
of the reciprocal counts made once per call (only edge windows differ in it). An average whose
one window is the whole map never comes here: `rvm.transform.legalize` makes it
`global_avg_pool2d`, a float32 mean (within float32 rounding of the float64 sum).

Kernels reach it through a C entry point (`rvm.kernels.entry`), so its code is compiled
once, not again into each kernel. Every step is a unit-stride, vectorizable run where it can
be (a strided read is not one):

- by default, channels are copied into planes that hold the padding value (-inf for max, 0
  for average) around them, split by the strides, many small planes stacked, and each pass
  over the whole stack adds three taps' runs (`rvm.kernels.planes`);
- for a column stride above 1 on a wide input, that split would be a slow strided copy; the
  pools are separable row by row instead (`rvm.kernels.separable`);
- pools 1 apart on maps narrower than a vector (a 3x3 pool of a 7 x 7 map to 5 x 5), many
  channels per vector run (`rvm.kernels.stacked`): a loop per output row there is all tail;
- when the output keeps few of the positions a run would compute (global-like windows), window
  by window (`rvm.kernels.windows`: averages sum each window's rows as vectorized runs);
- max pools whose windows overlap (a 3x3 window 2 apart, CNNs' common pool) are separable
  over the whole channel (`rvm.kernels.maxflat`): the window rows reduced at every position of the
  channel in one run, the window columns of the kept windows, and the output their
  subsample. Computing rows the stride skips costs less than many short loops (each with a
  scalar tail) or a strided copy: a half to 0.85 of the time of the others;
- max and average pools 3 columns wide, 1 or 2 apart (3x3, the commonest; averages 2 apart
  only) by output rows
  (`rvm.kernels.maxrows`, `rvm.kernels.avgrows`): vector loops written as LLVM intrinsics,
  the stride-2 columns split by shuffles; max pools in 0.3 to 0.6 of `rvm.kernels.maxflat`'s
  time on one core, averages in 0.7 to 0.85 of the others'; padded 3x3 pools 1 apart that
  keep the map's size (inception's, on 7 x 7 to 28 x 28 maps) a group of channels per run,
  the padding taken by masks (`rvm.kernels.maxrows.Blocks`), no fix-up loop per row;
- 2x2 windows 2 apart inside the input (vgg's, densenet's) as a stream, every element read
  once (`rvm.kernels.tiles`): a sixth to a third of the others' time;
- windows 3 columns wide 2 apart on maps whose needed columns fit in four vectors (12 x 12 to
  56 x 56 for float32 on AVX-512), and max pools' 2 columns wide in two, an output row from
  its window rows loaded whole (`rvm.kernels.narrow`): 0.45 to 0.7 of the time of
  `rvm.kernels.maxrows`, `avgrows` and `rvm.kernels.tiles` on 12 x 12 to 28 x 28 maps,
  0.65 to 0.97 on 54 x 54 to 56 x 56.

Max and average pools by each method are fifteen tasks of their own (`rvm.kernels.parfor`),
each built when first run (a model builds the ones its pools take); large pools are split by
channels over threads. The output
size is checked against the geometry before any memory is touched (ValueError).
"""

from __future__ import annotations

import numba as nb
import numpy as np

from rvm.kernels import avgrows, entry, narrow, parfor, separable, stacked, tiles, windows
from rvm.kernels.cpu import cpu
from rvm.kernels.jitting import jit
from rvm.kernels.maxflat import by_flat
from rvm.kernels.maxrows import by_lines, by_whole, planes_at_once, takes, whole
from rvm.kernels.planes import U, padded_phases, phase_shape, tap_starts

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)


@jit(**_OPTS)
def out_size(size, kern, stride, dil, lo, hi, ceil_mode):  # type: ignore[no-untyped-def]
    """The pooled size along one axis (-1 when the window is larger than the input)."""
    span = size + lo + hi - dil * (kern - 1) - 1
    if span < 0:
        return -1
    if not ceil_mode:
        return span // stride + 1
    o = -(-span // stride) + 1
    return o - 1 if (o - 1) * stride >= size + lo else o


@jit(**_OPTS)
def _counts(n_out, size, kern, stride, dil, lo, hi, include_pad):  # type: ignore[no-untyped-def]
    """Per output position along one axis: how many of its window's taps count."""
    low, high = (-lo, size + hi) if include_pad else (0, size)
    counts = np.zeros(n_out, dtype=np.float64)
    for p_ in range(n_out):
        for t in range(kern):
            at = p_ * stride - lo + t * dil
            if low <= at < high:
                counts[p_] += 1
    return counts


@jit(**_OPTS)
def _scales(oh, ow, rows, cols):  # type: ignore[no-untyped-def]
    """Per output position (p, q), flat: what its window's sum is multiplied by to make the
    average, 1 / (rows[p] * cols[q]) (`_counts`; 1 for a window with nothing to count)."""
    scale = np.empty(oh * ow, dtype=np.float64)
    for p_ in range(oh):
        for q_ in range(ow):
            scale[p_ * ow + q_] = 1.0 / max(rows[p_] * cols[q_], 1.0)
    return scale


@jit(**_OPTS)
def _max_taps(flat, starts, acc, run):  # type: ignore[no-untyped-def]
    """``acc[:run]`` = the maximum over the taps t of the run of ``flat`` at ``starts[t]``,
    three taps per pass over ``acc`` (a pass per tap reads and writes it three times as
    often); NaN wins, as in the reference."""
    taps = starts.shape[0]
    for t in range(0, taps, 3):
        a0 = U(starts[t])
        a1 = U(starts[min(t + 1, taps - 1)])  # fewer than three left: a tap again
        a2 = U(starts[min(t + 2, taps - 1)])
        if t == 0:
            for r_ in range(run):
                acc[r_] = np.maximum(np.maximum(flat[a0 + r_], flat[a1 + r_]), flat[a2 + r_])
        else:
            for r_ in range(run):
                m = np.maximum(np.maximum(flat[a0 + r_], flat[a1 + r_]), flat[a2 + r_])
                acc[r_] = np.maximum(acc[r_], m)


@jit(**_OPTS)
def _sum_taps(flat, starts, acc, run):  # type: ignore[no-untyped-def]
    """``acc[:run]`` = the sum over the taps t of the run of ``flat`` at ``starts[t]``, three
    taps per pass over ``acc``, in ``acc``'s dtype."""
    taps = starts.shape[0]
    zero = acc.dtype.type(0)
    for t in range(0, taps, 3):
        a0 = U(starts[t])
        a1, a2 = U(starts[min(t + 1, taps - 1)]), U(starts[min(t + 2, taps - 1)])
        k1, k2 = t + 1 < taps, t + 2 < taps  # fewer than three left: the tap again, unused
        for r_ in range(run):
            v = acc[r_] if t > 0 else zero
            v += flat[a0 + r_]
            if k1:
                v += flat[a1 + r_]
            if k2:
                v += flat[a2 + r_]
            acc[r_] = v


@jit(**_OPTS)
def _phased(x, out, lo, hi, k, flat, starts, acc, scale, is_max, window):  # type: ignore[no-untyped-def]
    """Channels ``lo`` to ``hi``, ``k`` at a time: each copied into its padded plane split by
    the strides (`rvm.kernels.planes`), the ``k`` planes stacked in each phase of
    ``flat``, then one run over the whole stack per three taps into ``acc`` (rows as wide
    as a phase's; a plane's windows never reach the next plane, and the rows between the
    planes' outputs are dropped). Small planes thus make long runs too. Averages are
    multiplied by ``scale`` (`_scales`)."""
    kh, kw, sh, sw, dh, dw, pt, pl = window
    ih, iw, oh, ow = x.shape[2], x.shape[3], out.shape[2], out.shape[3]
    hp, wp, hq, wq = phase_shape(oh, ow, kh, kw, sh, sw, dh, dw)
    xf, of = x.reshape(x.size), out.reshape(out.size)
    size = hq * wq  # one plane's share of a phase
    for first in range(lo, hi, k):
        m = min(k, hi - first)
        for j in range(m):
            plane = flat[j * size :]
            padded_phases(
                xf, (first + j) * ih * iw, ih, iw, plane, sh, sw, k * hq, wq, hp, wp, pt, pl
            )
        run = U((m - 1) * size + oh * wq)
        if is_max:
            _max_taps(flat, starts, acc, run)
        else:
            _sum_taps(flat, starts, acc, run)
        for j in range(m):
            dst = U((first + j) * oh * ow)
            for p_ in range(oh):
                src, at_s = U(j * size + p_ * wq), U(p_ * ow)
                if is_max:
                    for q_ in range(U(ow)):
                        of[dst + q_] = acc[src + q_]
                else:
                    for q_ in range(U(ow)):
                        of[dst + q_] = acc[src + q_] * scale[at_s + q_]
                dst += U(ow)


STACK = 4096
"""Elements of a phase that `_phased` fills with stacked planes at a time (an L1-sized run)."""
DIRECT_SPARSITY = 4
"""`_method` takes `rvm.kernels.windows` when a plane's phase holds this many times the
positions whose pools are kept (a 6 x 6 average of a 6 x 6 input keeps 1 row of 7)."""
SEPARABLE_WIDTH = 96
"""The input width from which a column stride above 1 takes `rvm.kernels.separable`: below it, its
per-row loops are too short, and the strided copy of `_phased` costs less (3x3 stride-2 max
pools on one thread broke even between 56 and 111 columns)."""


STACKED_WIDTH = cpu().vector_bits // 32
"""The input width below which pools 1 apart take `rvm.kernels.stacked` (a float32 vector's
lanes: a narrower row is all tail for a loop per row; on 6 x 6 and 7 x 7 maps it took half
the time of `rvm.kernels.maxrows` and `_phased`, on 13 x 13 and 14 x 14 0.87 to 0.92, on
27 x 27 and 28 x 28 1.3 to 1.6, on one core of an AVX-512 machine), but for 3x3 windows
padded by one whose output is the input's size: `rvm.kernels.maxrows` and `avgrows` reduce
groups of their channels in one run (`rvm.kernels.maxrows.planes_at_once`), in 0.5 to 0.85
of its time on 7 x 7 and 14 x 14 maps (one core of a Zen 4)."""


SEPARABLE, PHASED, DIRECT, FLAT, ROWS, TILES, STACKED, NARROW = 0, 1, 2, 3, 4, 5, 6, 7
"""The methods `_method` picks: `rvm.kernels.separable`, `_phased`, `rvm.kernels.windows`,
`rvm.kernels.maxflat`, `rvm.kernels.maxrows` (max) or `rvm.kernels.avgrows` (average),
`rvm.kernels.tiles`, `rvm.kernels.stacked`, `rvm.kernels.narrow`."""


@jit(**_OPTS)
def _method(is_max, iw, oh, ow, kh, kw, sh, sw, dh, dw, ih, pt, pl, size):  # type: ignore[no-untyped-def]
    """The method of a pool of elements of ``size`` bytes: `rvm.kernels.narrow` for windows 2
    apart along rows, 3 columns wide or max pools' 2, on maps it `rvm.kernels.narrow.takes`
    (0.45 to 0.7 of the others' time on 12 x 12 to 28 x 28 maps, 0.65 to 0.97 on 54 x 54 to
    56 x 56, one core of a Zen 4; 1 apart it lost to the runs of `rvm.kernels.maxrows` on
    6 x 6 to 14 x 14 maps, 2x2 averages to `rvm.kernels.tiles`); `rvm.kernels.tiles` for
    2x2 windows 2 apart inside the input (3 to 6 times faster than the others);
    `rvm.kernels.stacked` for windows 1 apart on maps
    narrower than `STACKED_WIDTH` (but 3x3 ones padded by one that keep the map's size),
    unless the output is much sparser than the input; by rows
    (`rvm.kernels.maxrows`, `avgrows`) for windows 3 columns wide that `takes`, averages 1
    apart only over whole channels (`avgrows.by_channels`; else `_phased` took 0.75 of their
    time on inception's 7 x 7 to 28 x 28 maps), unless the output is that sparse; else
    `rvm.kernels.maxflat` for max pools whose windows overlap (a half to 0.85 of the time
    of the others on CNNs' pools) unless the output is that sparse; else
    `rvm.kernels.separable` for a column stride above 1 on wide inputs (it reads the input in
    place, where splitting it by the column stride is a slow strided copy),
    `rvm.kernels.windows` for outputs much sparser than their input, else
    `_phased`."""
    if narrow.takes(is_max, kh, kw, sh, sw, dh, dw, ow, size):
        return NARROW
    if tiles.takes(ih, iw, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl):
        return TILES
    hp, wp, hq, wq = phase_shape(oh, ow, kh, kw, sh, sw, dh, dw)
    sparse = oh * wq * DIRECT_SPARSITY <= hq * wq
    grouped = kh == 3 and takes(kw, sw, dw) and pt == 1 and pl == 1 and ih >= 2
    grouped = grouped and planes_at_once(ih, iw, oh, ow, sh, sw, 2) > 1
    if not sparse and sh == 1 and sw == 1 and iw < STACKED_WIDTH and not grouped:
        if stacked.takes(ih, iw, oh, ow, sh, sw):
            return STACKED
    if not sparse and takes(kw, sw, dw):
        if is_max or sw == 2 or avgrows.by_channels(kh, kw, sw, pt, pl, iw, ow):
            return ROWS
    if is_max and not sparse and (dh * (kh - 1) + 1 > sh or dw * (kw - 1) + 1 > sw):
        return FLAT
    if sw > 1 and iw >= SEPARABLE_WIDTH:
        return SEPARABLE
    return DIRECT if sparse else PHASED


@jit(**_OPTS, inline="always")
def _by_phased(x, out, lo, hi, scale, is_max, window, acc_dtype):  # type: ignore[no-untyped-def]
    """`_phased` on channels ``lo`` to ``hi``, with scratch of its own: as many planes
    stacked as fill `STACK` elements."""
    kh, kw, sh, sw, dh, dw, pt, pl = window
    hp, wp, hq, wq = phase_shape(out.shape[2], out.shape[3], kh, kw, sh, sw, dh, dw)
    k = max(1, min(hi - lo, STACK // (hq * wq)))
    flat = np.full(sh * sw * k * hq * wq, -np.inf if is_max else 0.0, dtype=x.dtype)
    starts = tap_starts(sh, sw, k * hq, wq, kh, kw, dh, dw)
    acc = np.empty(k * hq * wq, dtype=acc_dtype)
    _phased(x, out, lo, hi, k, flat, starts, acc, scale, is_max, window)


# -- the tasks: max and average pools by each method, each built when first run ----------

_JOB = 22  # a job: its length, x, out, n, c, ih, iw, oh, ow, the 12 flags, the chunks


@jit(**_OPTS)
def _chunk(k, like, data):  # type: ignore[no-untyped-def]
    """A task's arrays, channels ``lo`` to ``hi`` (flat n * c index) of chunk ``k``, and its
    window (kh, kw, sh, sw, dh, dw, pt, pl), from the job at ``data``."""
    job = parfor.job(data)
    n, c, ih, iw, oh, ow = job[3], job[4], job[5], job[6], job[7], job[8]
    x = parfor.array_at(job[1], (n, c, ih, iw), like)
    out = parfor.array_at(job[2], (n, c, oh, ow), like)
    lo, hi = k * n * c // job[21], (k + 1) * n * c // job[21]
    return x, out, lo, hi, (job[10], job[11], job[12], job[13], job[14], job[15], job[16], job[17])


@jit(**_OPTS)
def _avg_scale(x, out, data, window):  # type: ignore[no-untyped-def]
    """What each output position's window sum is multiplied by (`_scales`), from the job at
    ``data``."""
    job = parfor.job(data)
    kh, kw, sh, sw, dh, dw, pt, pl = window
    ih, iw, oh, ow = x.shape[2], x.shape[3], out.shape[2], out.shape[3]
    rows = _counts(oh, ih, kh, sh, dh, pt, job[18], job[20])
    cols = _counts(ow, iw, kw, sw, dw, pl, job[19], job[20])
    return _scales(oh, ow, rows, cols)


# Chunk k of the channels of a max pool (maxima in the input's dtype) or of an average pool
# (sums in float64), by one method: a model builds the methods its pools take, not all of them.


def _max_separable_task(k, like, data):  # type: ignore[no-untyped-def]
    x, out, lo, hi, window = _chunk(k, like, data)
    separable.by_separable(x, out, lo, hi, np.empty(0, dtype=np.float64), True, window, x.dtype)


def _max_phased_task(k, like, data):  # type: ignore[no-untyped-def]
    x, out, lo, hi, window = _chunk(k, like, data)
    _by_phased(x, out, lo, hi, np.empty(0, dtype=np.float64), True, window, x.dtype)


def _max_direct_task(k, like, data):  # type: ignore[no-untyped-def]
    x, out, lo, hi, window = _chunk(k, like, data)
    windows.by_windows(x, out, lo, hi, np.empty(0, dtype=np.float64), True, window, x.dtype)


def _max_flat_task(k, like, data):  # type: ignore[no-untyped-def]
    x, out, lo, hi, window = _chunk(k, like, data)
    by_flat(x, out, lo, hi, window)


def _max_rows_task(k, like, data):  # type: ignore[no-untyped-def]
    x, out, lo, hi, window = _chunk(k, like, data)
    by_lines(x, out, lo, hi, window)


def _max_whole_task(k, like, data):  # type: ignore[no-untyped-def]
    x, out, lo, hi, window = _chunk(k, like, data)
    by_whole(x, out, lo, hi, window)


def _max_narrow_task(k, like, data):  # type: ignore[no-untyped-def]
    x, out, lo, hi, window = _chunk(k, like, data)
    narrow.by_narrow(x, out, lo, hi, np.empty(0, dtype=np.float64), True, window)


def _avg_narrow_task(k, like, data):  # type: ignore[no-untyped-def]
    x, out, lo, hi, window = _chunk(k, like, data)
    narrow.by_narrow(x, out, lo, hi, _avg_scale(x, out, data, window), False, window)


def _max_tiles_task(k, like, data):  # type: ignore[no-untyped-def]
    x, out, lo, hi, window = _chunk(k, like, data)
    tiles.by_tiles(x, out, lo, hi, True)


def _avg_tiles_task(k, like, data):  # type: ignore[no-untyped-def]
    x, out, lo, hi, window = _chunk(k, like, data)
    tiles.by_tiles(x, out, lo, hi, False)


def _max_stacked_task(k, like, data):  # type: ignore[no-untyped-def]
    x, out, lo, hi, window = _chunk(k, like, data)
    stacked.by_stacked(x, out, lo, hi, np.empty(0, dtype=np.float64), True, window, x.dtype)


def _avg_stacked_task(k, like, data):  # type: ignore[no-untyped-def]
    x, out, lo, hi, window = _chunk(k, like, data)
    scale = _avg_scale(x, out, data, window)
    stacked.by_stacked(x, out, lo, hi, scale, False, window, np.float64)


def _avg_rows_task(k, like, data):  # type: ignore[no-untyped-def]
    x, out, lo, hi, window = _chunk(k, like, data)
    avgrows.by_rows(x, out, lo, hi, _avg_scale(x, out, data, window), window)


def _avg_separable_task(k, like, data):  # type: ignore[no-untyped-def]
    x, out, lo, hi, window = _chunk(k, like, data)
    scale = _avg_scale(x, out, data, window)
    separable.by_separable(x, out, lo, hi, scale, False, window, np.float64)


def _avg_phased_task(k, like, data):  # type: ignore[no-untyped-def]
    x, out, lo, hi, window = _chunk(k, like, data)
    _by_phased(x, out, lo, hi, _avg_scale(x, out, data, window), False, window, np.float64)


def _avg_direct_task(k, like, data):  # type: ignore[no-untyped-def]
    x, out, lo, hi, window = _chunk(k, like, data)
    windows.by_windows(x, out, lo, hi, _avg_scale(x, out, data, window), False, window, np.float64)


for _name, _task in (
    ("pool2d_max_separable", _max_separable_task),
    ("pool2d_max_phased", _max_phased_task),
    ("pool2d_max_direct", _max_direct_task),
    ("pool2d_max_flat", _max_flat_task),
    ("pool2d_max_rows", _max_rows_task),
    ("pool2d_max_whole", _max_whole_task),
    ("pool2d_max_narrow", _max_narrow_task),
    ("pool2d_avg_narrow", _avg_narrow_task),
    ("pool2d_max_tiles", _max_tiles_task),
    ("pool2d_avg_tiles", _avg_tiles_task),
    ("pool2d_max_stacked", _max_stacked_task),
    ("pool2d_avg_stacked", _avg_stacked_task),
    ("pool2d_avg_rows", _avg_rows_task),
    ("pool2d_avg_separable", _avg_separable_task),
    ("pool2d_avg_phased", _avg_phased_task),
    ("pool2d_avg_direct", _avg_direct_task),
):
    parfor.export_task(_name, _task)
# Each runs once per chunk: on the pool when large, else once in the calling thread.
_run_max_separable = parfor.runner("pool2d_max_separable")
_run_max_phased = parfor.runner("pool2d_max_phased")
_run_max_direct = parfor.runner("pool2d_max_direct")
_run_max_flat = parfor.runner("pool2d_max_flat")
_run_max_rows = parfor.runner("pool2d_max_rows")
_run_max_whole = parfor.runner("pool2d_max_whole")
_run_max_narrow = parfor.runner("pool2d_max_narrow")
_run_avg_narrow = parfor.runner("pool2d_avg_narrow")
_run_max_tiles = parfor.runner("pool2d_max_tiles")
_run_avg_tiles = parfor.runner("pool2d_avg_tiles")
_run_max_stacked = parfor.runner("pool2d_max_stacked")
_run_avg_stacked = parfor.runner("pool2d_avg_stacked")
_run_avg_rows = parfor.runner("pool2d_avg_rows")
_run_avg_separable = parfor.runner("pool2d_avg_separable")
_run_avg_phased = parfor.runner("pool2d_avg_phased")
_run_avg_direct = parfor.runner("pool2d_avg_direct")


def first_run_tasks(
    is_max: bool,
    iw: int,
    oh: int,
    ow: int,
    kh: int,
    kw: int,
    sh: int,
    sw: int,
    dh: int,
    dw: int,
    ih: int,
    pt: int,
    pl: int,
) -> tuple[str, ...]:
    """The library task a pool of this shape (input height ``ih``, width ``iw``, padded
    ``pt`` on top and ``pl`` on the left) runs (`_method`): what its first run builds,
    worth building beforehand (`rvm.kernels.parfor.prefetch`), for float32."""
    how = _method.py_func(is_max, iw, oh, ow, kh, kw, sh, sw, dh, dw, ih, pt, pl, 4)
    names = {SEPARABLE: "separable", PHASED: "phased", DIRECT: "direct", FLAT: "flat",
             ROWS: "rows", TILES: "tiles", STACKED: "stacked", NARROW: "narrow"}  # fmt: skip
    name = names[how]
    if is_max and how == ROWS and whole.py_func(kh, kw, sh, sw, dh, pt, pl, ih, iw, oh, ow):
        name = "whole"  # `rvm.kernels.maxrows.by_whole`, a task of its own
    return (f"pool2d_{'max' if is_max else 'avg'}_{name}",)


@jit(**_OPTS)
def _pool2d(x, out, is_max, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr, ceil_mode, include_pad):  # type: ignore[no-untyped-def]
    """`pool2d`'s work, over channels split between threads when it is large; False when the
    shapes disagree with the geometry."""
    n, c, ih, iw = x.shape
    oh, ow = out.shape[2], out.shape[3]
    ok = min(kh, kw, sh, sw, dh, dw) > 0 and out.shape[0] == n and out.shape[1] == c
    ok = ok and oh == out_size(ih, kh, sh, dh, pt, pb, ceil_mode)
    if not (ok and ow == out_size(iw, kw, sw, dw, pl, pr, ceil_mode)):
        return False
    if n * c * oh * ow == 0:
        return True
    chunks = parfor.chunks(n * c * (ih * iw + oh * ow * kh * kw), n * c)
    job = np.array((_JOB, parfor.address(x), parfor.address(out), n, c, ih, iw, oh, ow, is_max,
                    kh, kw, sh, sw, dh, dw, pt, pl, pb, pr, include_pad, chunks),
                   dtype=np.int64)  # fmt: skip
    method = _method(is_max, iw, oh, ow, kh, kw, sh, sw, dh, dw, ih, pt, pl, x.itemsize)
    if is_max:
        if method == NARROW:
            _run_max_narrow(x, chunks, job)
        elif method == TILES:
            _run_max_tiles(x, chunks, job)
        elif method == ROWS and whole(kh, kw, sh, sw, dh, pt, pl, ih, iw, oh, ow):
            _run_max_whole(x, chunks, job)
        elif method == ROWS:
            _run_max_rows(x, chunks, job)
        elif method == STACKED:
            _run_max_stacked(x, chunks, job)
        elif method == FLAT:
            _run_max_flat(x, chunks, job)
        elif method == SEPARABLE:
            _run_max_separable(x, chunks, job)
        elif method == DIRECT:
            _run_max_direct(x, chunks, job)
        else:
            _run_max_phased(x, chunks, job)
    elif method == NARROW:
        _run_avg_narrow(x, chunks, job)
    elif method == TILES:
        _run_avg_tiles(x, chunks, job)
    elif method == ROWS:
        _run_avg_rows(x, chunks, job)
    elif method == STACKED:
        _run_avg_stacked(x, chunks, job)
    elif method == SEPARABLE:
        _run_avg_separable(x, chunks, job)
    elif method == DIRECT:
        _run_avg_direct(x, chunks, job)
    else:
        _run_avg_phased(x, chunks, job)
    return True


def _entry(a, b, c, dims, params):  # type: ignore[no-untyped-def]
    """`_pool2d` on x (a), out (b) (see `rvm.kernels.entry`): 0 done, 1 the shapes
    disagree."""
    d, p = nb.carray(dims, 8), nb.carray(params, 13)
    x = nb.carray(a, (d[0], d[1], d[2], d[3]))
    out = nb.carray(b, (d[4], d[5], d[6], d[7]))
    flags = (p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11], p[12])
    return 0 if _pool2d(x, out, *flags) else 1


entry.export("pool2d", _entry)
# What kernels call (`rvm.kernels.entry.caller`): ``entry_call(arrays, params)``, 0 done.
entry_call = entry.caller("pool2d", 13)


# For Python callers (kernels call `entry_call`). Not cached: compiling it types the call, which
# registers the entry point (`entry.require`); cached object code would be linked without it.
@nb.njit(nogil=True)
def pool2d(x, out, is_max, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr, ceil_mode, include_pad):  # type: ignore[no-untyped-def]
    """``out`` = the max or average pools of ``x`` (see the module docstring)."""
    i = np.int64
    window = (i(kh), i(kw), i(sh), i(sw), i(dh), i(dw), i(pt), i(pl), i(pb), i(pr))
    params = (i(is_max), *window, i(ceil_mode), i(include_pad))
    if entry_call((x, out), params) != 0:
        raise ValueError("pool2d: the operands' shapes do not match the geometry")
