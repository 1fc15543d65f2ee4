"""The sum of two quantized tensors, requantized (`rvm.op.qadd`): a quantized model's
residual ``DequantizeLinear(a) + DequantizeLinear(b) [-> Relu] -> QuantizeLinear``.

`add(a, b, out, ...)` computes, element by element, in float32 as `rvm.op.qadd`'s reference
does::

    s = (a - a_zero) * a_scale + (b - b_zero) * b_scale
    out = clip(rint(s / y_scale) + y_zero, low, high)

(a ReLU folded into ``low``, as the integer products do: `rvm.op.quantized`), so its results
equal the reference's bit for bit (no contraction into fused multiply-adds, a true division).
The arrays are flat and of 8 bits, passed as bytes (one entry point serves every sign); the
loop reads each input as its dtype (one vectorized loop, in float32 lanes, a pair of dtypes).
The pass is one sweep of memory, cut over rvm's pool as the float convolutions' epilogue pass
is (`rvm.kernels.epipass.sweep_pieces`: the same rule for the same kind of loop): resnet50's
16 residuals at two threads ran on one core while the other waited, 3.2 ms of one-thread
work a call on a Zen 3 (session 49). Kernels call it through its entry point ``qadd``
(`rvm.kernels.entry`), compiled once per process or cache.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from rvm.kernels import entry, parfor
from rvm.kernels.epipass import sweep_pieces, sweep_range
from rvm.kernels.jitting import jit
from rvm.kernels.lrn import bits_float
from rvm.kernels.planes import U
from rvm.kernels.qsplit import F32, I8, U8, pointer_at

__all__ = ["add", "qadd_call"]

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)

# A job (int64): its length; a, b and out (addresses), their elements; a's zero point, b's,
# y's, low, high; the scales (a's, b's, y's: float64 bits); whether a, b are int8; the
# pieces.
(_LENGTH, _A, _B, _OUT, _TOTAL, _A_ZERO, _B_ZERO, _Y_ZERO, _LOW, _HIGH, _A_SCALE, _B_SCALE,
 _Y_SCALE, _A_SIGNED, _B_SIGNED, _PIECES, _JOB) = range(17)  # fmt: skip


@jit(**_OPTS)
def _sweep(a, b, out, job):  # type: ignore[no-untyped-def]
    """``out`` from ``a`` and ``b`` (of their dtypes: uint8 or int8; ``out`` the bytes) as the
    job says: one vectorized loop (float32 lanes) a pair of dtypes."""
    f32 = np.float32
    sa, sb = f32(bits_float(job, _A_SCALE)), f32(bits_float(job, _B_SCALE))
    sy = f32(bits_float(job, _Y_SCALE))
    za, zb = f32(job[_A_ZERO]), f32(job[_B_ZERO])
    zy, low, high = f32(job[_Y_ZERO]), f32(job[_LOW]), f32(job[_HIGH])
    for i in range(U(out.size)):
        s = (f32(a[i]) - za) * sa + (f32(b[i]) - zb) * sb
        q = min(max(np.rint(s / sy) + zy, low), high)
        out[i] = np.uint8(np.int32(q))  # an int8's bytes: the low byte


def _task(piece, like, data):  # type: ignore[no-untyped-def]
    """A pool task: piece ``piece`` of the job's elements (`sweep_range`)."""
    _piece(piece, parfor.job(data))


@jit(**_OPTS)
def _piece(piece, job):  # type: ignore[no-untyped-def]
    """Piece ``piece`` of the job's elements (`sweep_range`), its inputs read as their dtypes."""
    total = job[_TOTAL]
    lo, hi = sweep_range(piece, job[_PIECES], total)
    out = nb.carray(pointer_at(job[_OUT], U8), total)[lo:hi]
    ua = nb.carray(pointer_at(job[_A], U8), total)[lo:hi]
    ub = nb.carray(pointer_at(job[_B], U8), total)[lo:hi]
    sa = nb.carray(pointer_at(job[_A], I8), total)[lo:hi]
    sb = nb.carray(pointer_at(job[_B], I8), total)[lo:hi]
    if job[_A_SIGNED] and job[_B_SIGNED]:
        _sweep(sa, sb, out, job)
    elif job[_A_SIGNED]:
        _sweep(sa, ub, out, job)
    elif job[_B_SIGNED]:
        _sweep(ua, sb, out, job)
    else:
        _sweep(ua, ub, out, job)


parfor.export_task("qadd", _task)
_run = parfor.runner("qadd")


@jit(**_OPTS)
def add(a, b, out, a_zero, b_zero, y_zero, low, high, a_scale, b_scale, y_scale, signs):  # type: ignore[no-untyped-def]  # noqa: E501
    """`rvm.op.qadd` of ``a`` and ``b`` into ``out``: flat uint8 arrays of one size (the bytes
    of int8 ones: ``signs`` bit 0, 1 says a's, b's are int8); the scales as float64
    bits (`rvm.kernels.lrn.float_bits`). On the pool when large (`sweep_pieces`)."""
    total = out.size
    if total == 0:
        return
    job = np.empty(_JOB, np.int64)
    job[_LENGTH], job[_A], job[_B], job[_OUT] = _JOB, a.ctypes.data, b.ctypes.data, out.ctypes.data
    job[_TOTAL], job[_A_ZERO], job[_B_ZERO], job[_Y_ZERO] = total, a_zero, b_zero, y_zero
    job[_LOW], job[_HIGH] = low, high
    job[_A_SCALE], job[_B_SCALE], job[_Y_SCALE] = a_scale, b_scale, y_scale
    job[_A_SIGNED], job[_B_SIGNED] = signs & 1, (signs & 2) >> 1  # an int8 out: its bytes
    pieces = sweep_pieces(3 * total, total)  # two bytes read, one written, an element
    job[_PIECES] = pieces
    if pieces > 1:
        _run(F32, pieces, job)
    else:
        _piece(0, job)


def _entry(a, b, out, dims, params):  # type: ignore[no-untyped-def]
    """`add` on a, b, out (1-d); the parameters: a_zero, b_zero, y_zero, low, high, the
    scales' float64 bits (a's, b's, y's), the signs (`entry.BYTES`). Returns 1 when the
    sizes differ, else 0."""
    d, p = nb.carray(dims, 3), nb.carray(params, 9)
    if d[0] != d[2] or d[1] != d[2]:
        return 1
    add(nb.carray(a, (d[0],)), nb.carray(b, (d[1],)), nb.carray(out, (d[2],)),
        p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8])  # fmt: skip
    return 0


entry.export("qadd", _entry)
# What kernels call (`rvm.kernels.entry.caller`): ``qadd_call((a, b, out), params)``, 0 done.
qadd_call = entry.caller("qadd", 8)
