"""The bf16 products' entry points (`rvm.kernels.entry`): `rvm.kernels.bf16conv`'s ``conv2d``
and `rvm.kernels.bf16`'s ``dense`` compiled once per process (or cache) and called by jit
kernels through a registered symbol, so a kernel links the library instead of compiling the
convolution's planes, tap tables and GEMM driver into its own code (a second of LLVM per
kernel), as `rvm.kernels.qentry` does for the integer products.

An entry point calls the library function on plain C-contiguous arrays of int64 parameters,
the types a Python caller's call has, so the two share one compile of it. A kernel checks its
operands' shapes before the call (`rvm.jit.bf16`, the op's type rule), so the entry points
take them as they come and always return 0.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from rvm.kernels import bf16, bf16conv, entry

__all__ = ["conv2d_bf16_call", "dense_bf16_call"]


def _conv2d(x, w, out, bias, res, affine, dims, params):  # type: ignore[no-untyped-def]
    """`bf16conv.conv2d` on x (4-d float32), w (2-d int16 bits), out (4-d float32), bias
    (1-d float32, empty: none), res (4-d float32, the output image or its pair plane's words;
    empty: none), affine (2-d float32,
    the prologue's scales and shifts, empty: none); the parameters:
    groups, sh, sw, dh, dw, pt, pl, kh, kw, act, panel (0: w in rows, else turned); the pair
    plane out's padding top, left and the output's height, width (0, 0, 0, 0: out is float32
    NCHW); the image's c, h, w when x is its pair plane (0, 0, 0: x is float32 NCHW); the
    prologue's index (`rvm.op.bf16.PROLOGUES`); the pairing's (`rvm.op.bf16.PAIRINGS`); 1 and
    the padding top and left when res is a pair plane (0, 0, 0: float32); 1 and the padding
    top and left when x is a pair plane laid out for another convolution (0, 0, 0: not); the
    planes laid out as positions by channel pairs (bit 0 x's, bit 1 out's, bit 2 res's; 0:
    none)."""
    d, p = nb.carray(dims, 17), nb.carray(params, 27)
    bf16conv.conv2d(
        nb.carray(x, (d[0], d[1], d[2], d[3])),
        nb.carray(w, (d[4], d[5])),
        nb.carray(out, (d[6], d[7], d[8], d[9])),
        p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8],
        nb.carray(bias, (d[10],)),
        p[9],
        nb.carray(res, (d[11], d[12], d[13], d[14])),
        p[10],
        (p[11], p[12], p[13], p[14]),
        (p[15], p[16], p[17]),
        (np.int64(nb.carray(affine, (d[15], d[16])).ctypes.data), p[18]),
        p[19],
        (p[20], p[21], p[22]),
        (p[23], p[24], p[25]),
        p[26],
    )  # fmt: skip
    return 0


def _dense(x, w, out, dims, params):  # type: ignore[no-untyped-def]
    """`bf16.dense` on x (2-d float32), w (2-d int16 bits), out (2-d float32); the parameter:
    the index of ``dense_bf16``'s ``input`` in `rvm.op.bf16.INPUTS` (1, ``"float32"``: x as
    it is, `bf16.dense`'s ``exact``; 0: rounded to bf16)."""
    d, p = nb.carray(dims, 6), nb.carray(params, 1)
    xa, wa = nb.carray(x, (d[0], d[1])), nb.carray(w, (d[2], d[3]))
    bf16.dense(xa, wa, nb.carray(out, (d[4], d[5])), p[0] != 0)
    return 0


entry.export("conv2d_bf16", _conv2d)
entry.export("dense_bf16", _dense)
# What kernels call (`rvm.kernels.entry.caller`): ``conv2d_bf16_call(arrays, params)``, 0 done.
# (20: before the residual's and the input's pair planes, session 76; 26: before the planes of
# positions, session 80)
conv2d_bf16_call = entry.caller("conv2d_bf16", 27, older=(20, 26))
dense_bf16_call = entry.caller("dense_bf16", 1)
