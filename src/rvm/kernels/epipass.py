"""A float32 convolution's epilogue as one pass over its output, split over rvm's pool.

A jit kernel whose float32 convolution (`rvm.kernels.conv`, `rvm.kernels.direct`) writes
straight into the kernel's output, then adds a per-channel bias, a residual of the output's
shape and a ReLU, in that order (`rvm.jit.lower`), hands them to the library rather than
running a loop of its own over the output: with the convolution (``conv2d_fused``, whose GEMM
applies them as it stores where it can, `rvm.kernels.convmethod.fuses_epilogue`, else runs this
pass; the direct method's ``conv2d_packed_fused`` applies a bias and a ReLU in its tiles, and
this pass with a residual), or after it, `entry_call` (``conv_epilogue``). Its own loop ran in
the calling thread alone: on resnet50 about 4.5 of 75 ms at one thread, the other core idle at
two. Here the output, viewed as rows (an image's output channel each), is cut into
contiguous pieces of equal size (whole vectors between them; up to 4 a thread,
`parfor.chunks`), each one linear sweep a row's run at a time, on the pool when the pass
touches `MIN_WORK` elements or more, else in the calling thread. A row's run is one
`row_run`, the arithmetic a kernel's own loop had (the same operations in the same order, so
the same results), written once for this pass and `rvm.kernels.affine`'s. One sweep of the
whole output after the convolution prefetches better than the same epilogue in the
convolution's tiles or bands, whose short runs of the residual lost 0-26% at one thread
(session 34's prototypes); the vector epilogue `rvm.kernels.epilogue.tile_rows`, called a row
at a time, lost 10-190% on rows of 7 x 7 to 28 x 28 (its masked tail a row) against Numba's
loop, which `row_run` replaced. In registers in the GEMM's final
store, before C is written (`rvm.kernels.sgemm.FUSED_EPILOGUE`, AVX2's packed tiles), the
epilogue costs no second sweep: on a Zen 3 core resnet50's 1x1 layers on 56 x 56 and 28 x 28
maps and its 7 x 7 stem took 3-8% less time than with this pass, those on 14 x 14 and 7 x 7 the
same.
"""

from __future__ import annotations

import numba as nb
import numpy as np
from llvmlite import ir
from numba import types as nt
from numba.core import cgutils
from numba.extending import intrinsic

from rvm.kernels import entry, parfor
from rvm.kernels.cpu import cpu
from rvm.kernels.gemmshape import LANES
from rvm.kernels.jitting import jit
from rvm.kernels.vectors import VectorIR

__all__ = [
    "ACTIVATIONS",
    "entry_call",
    "epilogue_rows",
    "operands",
    "row_run",
    "sweep_pieces",
    "sweep_range",
]

ACTIVATIONS = ("none", "relu")  # the activations it applies, by index

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)

# A job (int64): its length, the output's address, its elements, a row's elements, channels,
# the bias's address (0: none) and its step a row (1: a channel each; 0: one value for all),
# the activation (`ACTIVATIONS`), the residual's address (0: none), the pieces.
_JOB_FIELDS = 10


def _task(piece, like, data):  # type: ignore[no-untyped-def]
    """A pool task: piece ``piece`` of the job's output, one run of its elements."""
    job = parfor.job(data)
    total, cols, channels = job[2], job[3], job[4]
    step, act, pieces = job[6], job[7], job[9]
    out = parfor.array_at(job[1], (total,), like)
    bias = parfor.array_at(job[5], ((channels if step else 1) if job[5] else 0,), like)
    res = parfor.array_at(job[8], (total if job[8] else 0,), like)
    lo, hi = sweep_range(piece, pieces, total)
    _sweep(out, bias, res, lo, hi, cols, channels, step, act)


@jit(**_OPTS)
def sweep_pieces(touched, total):  # type: ignore[no-untyped-def]
    """The pieces a sweep over ``total`` elements (one pass of memory, a run of its elements a
    piece: `sweep_range`) touching ``touched`` elements is cut into (`parfor.chunks`: on the
    pool from `parfor.MIN_WORK`). Also the int8 residual's (`rvm.kernels.qadd`)."""
    return parfor.chunks(touched, total)


@jit(**_OPTS, inline="always")
def sweep_range(piece, pieces, total):  # type: ignore[no-untyped-def]
    """(lo, hi): the elements of piece ``piece`` of a sweep cut into ``pieces``
    (`sweep_pieces`): equal runs, whole vectors between them."""
    return parfor.piece_range(piece, pieces, total, LANES)


@intrinsic
def row_run(typingctx, x, out, n, scale, shift, res, act):  # type: ignore[no-untyped-def]
    """``out[j] = act(x[j] * scale + shift + res[j])`` for j < ``n``, float32 on int64
    addresses (``out`` may be ``x``; ``res`` 0: none; ``act`` an index of `ACTIVATIONS`):
    one run of a channel's elements, the pass's arithmetic (this module's and
    `rvm.kernels.affine`'s), written once. ``x * scale + shift`` is one fused multiply-add
    where the CPU has them (as a kernel's ``contract`` flag makes it; with a scale of 1,
    exactly ``x + shift``); the ReLU keeps a NaN, as the tiles' epilogues do. Whole vectors,
    then the last ``n % LANES`` elements one at a time: a masked vector a row (AVX2's masked
    stores) made a 7 x 7 map's rows slower than Numba's own loop, whose per-row set-up in turn
    took twice this run's time on rows of 32 to 64 elements (7.9-8.1 against 15-18 ns, one
    Zen 3 core, the same bits)."""
    sig = nt.void(nt.int64, nt.int64, nt.int64, nt.float32, nt.float32, nt.int64, nt.int64)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        x, out, n, scale, shift, res, act = args
        b, i64, f32 = builder, ir.IntType(64), ir.FloatType()
        v = VectorIR(builder, LANES)

        def fma(vtype, name):  # type: ignore[no-untyped-def]
            def call(a, s, t):  # type: ignore[no-untyped-def]
                if cpu().fma:
                    return b.call(v.declare(vtype, [vtype] * 3, name), [a, s, t])
                return b.fadd(b.fmul(a, s), t)

            return call

        lanes = (v.f32, fma(v.f32, f"llvm.fma.v{LANES}f32"),
                 v.broadcast(scale, v.f32), v.broadcast(shift, v.f32))  # fmt: skip
        ones = (f32, fma(f32, "llvm.fma.f32"), scale, shift)

        def element(j, width, with_res, relu):  # type: ignore[no-untyped-def]
            vtype, mul_add, s, t = lanes if width > 1 else ones
            at = b.mul(j, i64(4))
            y = mul_add(b.load(b.inttoptr(b.add(x, at), vtype.as_pointer()), align=4), s, t)
            if with_res:
                y = b.fadd(y, b.load(b.inttoptr(b.add(res, at), vtype.as_pointer()), align=4))
            if relu:
                zero = ir.Constant(vtype, None)
                y = b.select(b.fcmp_ordered("<", y, zero), zero, y)
            b.store(y, b.inttoptr(b.add(out, at), vtype.as_pointer()), align=4)

        def run(with_res, relu):  # type: ignore[no-untyped-def]
            whole = b.sdiv(n, i64(LANES))
            with cgutils.for_range(b, whole) as loop:
                element(b.mul(loop.index, i64(LANES)), LANES, with_res, relu)
            with cgutils.for_range_slice(b, b.mul(whole, i64(LANES)), n, i64(1)) as (j, _):
                element(j, 1, with_res, relu)

        relu = b.icmp_signed("==", act, i64(1))
        with b.if_else(b.icmp_signed("!=", res, i64(0))) as (added, alone):
            for branch, with_res in ((added, True), (alone, False)):
                with branch, b.if_else(relu) as (on, off):
                    with on:
                        run(with_res, True)
                    with off:
                        run(with_res, False)
        return context.get_dummy_value()

    return sig, codegen


@jit(**_OPTS)
def _sweep(out, bias, res, lo, hi, cols, channels, step, act):  # type: ignore[no-untyped-def]
    """``out[lo:hi] = act(out + bias + res)``, a row (``cols`` elements) at a time
    (`row_run`)."""
    row = lo // cols
    channel = row % channels
    at, added = parfor.address(out), parfor.address(res) if res.size else 0
    while lo < hi:
        end = min(hi, (row + 1) * cols)
        b = bias[channel * step] if bias.size else np.float32(0)
        at_res = added + 4 * lo if added else 0
        row_run(at + 4 * lo, at + 4 * lo, end - lo, np.float32(1), b, at_res, act)
        row += 1
        channel += 1
        if channel == channels:
            channel = 0
        lo = end


parfor.export_task("conv_epilogue", _task)
_run = parfor.runner("conv_epilogue")
_call = parfor.caller("conv_epilogue")
FIRST_RUN_TASKS = ("conv_epilogue",)


@jit(**_OPTS, inline="always")
def epilogue_rows(out, bias, act, res):  # type: ignore[no-untyped-def]
    """``out = act(out + bias + res)`` in place, float32, C-contiguous: ``out`` (n, c, h, w),
    ``bias`` of c values, or 1 (every channel's), or 0 (none); ``res`` of ``out``'s shape, or
    empty (none); ``act`` an index of `ACTIVATIONS`. The caller checks the shapes."""
    total = out.size
    if total == 0:
        return
    channels = out.shape[1]
    touched = total * (3 if res.size else 2)  # read and written, and the residual read
    pieces = sweep_pieces(touched, total)
    job = np.empty(_JOB_FIELDS, dtype=np.int64)
    job[0], job[1], job[2] = _JOB_FIELDS, parfor.address(out), total
    job[3], job[4] = total // (out.shape[0] * channels), channels
    job[5] = parfor.address(bias) if bias.size else 0
    job[6] = 1 if bias.size > 1 else 0
    job[7] = act
    job[8] = parfor.address(res) if res.size else 0
    job[9] = pieces
    if pieces > 1:
        _run(out, pieces, job)
    else:
        _call(out, 0, job)


# -- the compiled entry point (see `rvm.kernels.entry`) ------------------------------------


@jit(**_OPTS, inline="always")
def operands(out, b, bias_dims, c, res_dims, act, with_bias, with_res):  # type: ignore[no-untyped-def]  # noqa: E501
    """(whether they agree, the bias, the residual) for `epilogue_rows` on ``out`` (4-d) from
    an entry point's pointers and dims: the bias at ``b`` viewed (1, c or 1, 1, 1) when
    ``with_bias``, else none (empty); the residual at ``c``, of ``out``'s shape, when
    ``with_res``; the activation ``act`` an index of `ACTIVATIONS`."""
    nbias = bias_dims[1] if with_bias else 0
    ok = 0 <= act < len(ACTIVATIONS)
    if with_bias and (bias_dims[0] != 1 or bias_dims[2] != 1 or bias_dims[3] != 1):
        ok = False
    if with_bias and nbias != 1 and nbias != out.shape[1]:
        ok = False
    if with_res:
        for axis in range(4):
            if res_dims[axis] != out.shape[axis]:
                ok = False
    bias = nb.carray(b, (nbias if ok else 0,))
    res = nb.carray(c, (out.size if with_res and ok else 0,))
    return ok, bias, res


def _entry(a, b, c, dims, params):  # type: ignore[no-untyped-def]
    """`epilogue_rows` on out (a), the bias viewed (1, c or 1, 1, 1) (b) and the residual
    (c); ``params``: the activation, whether there is a bias, whether a residual (an array
    absent is passed as out, unread): 0 done, 1 the shapes disagree."""
    d, p = nb.carray(dims, 12), nb.carray(params, 3)
    out = nb.carray(a, (d[0], d[1], d[2], d[3]))
    ok, bias, res = operands(out, b, d[4:8], c, d[8:12], p[0], p[1], p[2])
    if not ok:
        return 1
    epilogue_rows(out, bias, p[0], res)
    return 0


entry.export("conv_epilogue", _entry)
# What kernels call (`rvm.kernels.entry.caller`): ``entry_call(arrays, params)``, 0 done.
entry_call = entry.caller("conv_epilogue", 3)
