"""The quantized products' entry points (`rvm.kernels.entry`): `rvm.kernels.qconv`'s
``qconv2d`` and ``qdense`` and `rvm.kernels.qturned`'s ``qconv2d_turned`` compiled once per
variant (the dtypes of their arrays) and called by jit kernels through a registered symbol,
so a kernel links the library instead of compiling its integer GEMM, im2col and requantizing
epilogue into its own code (seconds of LLVM per kernel).

A kernel checks its operands' shapes before the call (`rvm.jit.quantized`), so the entry
points take them as they come and always return 0. Their input and output are bytes, an int8
one's sign a last parameter (`entry.BYTES`): one build serves uint8 and int8 models.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from rvm.kernels import entry, qconv, qturned
from rvm.kernels.jitting import jit

__all__ = [
    "qconv2d",
    "qconv2d_call",
    "qconv2d_turned",
    "qconv2d_turned_call",
    "qdense",
    "qdense_call",
]


def _qconv2d(x, w, bias, scale, out, dims, params):  # type: ignore[no-untyped-def]
    """`qconv.qconv2d` on x, w (4-d), bias, scale (1-d), out (4-d); the parameters: x_zero,
    y_zero, low, high, groups, sh, sw, dh, dw, pt, pl, hwc (0 or 1), pairs (0 or 1: the
    weight's pairs fit 16 bits, `rvm.kernels.qtile.pairs_fit`), the signs (`entry.BYTES`)."""
    d, p = nb.carray(dims, 14), nb.carray(params, 14)
    qconv.qconv2d_bytes(
        nb.carray(x, (d[0], d[1], d[2], d[3])).view(np.uint8),
        nb.carray(w, (d[4], d[5], d[6], d[7])),
        nb.carray(bias, (d[8],)),
        nb.carray(scale, (d[9],)),
        nb.carray(out, (d[10], d[11], d[12], d[13])).view(np.uint8),
        p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11] != 0,
        _flip(p[13]), p[13] & 2 != 0, p[12] != 0,
    )  # fmt: skip
    return 0


def _qconv2d_turned(x, w, bias, scale, out, dims, params):  # type: ignore[no-untyped-def]
    """`qturned.qconv2d_turned` on x, w (4-d: `rvm.kernels.qturned.turn_weight`), bias, scale
    (1-d), out (4-d); the parameters: x_zero, y_zero, low, high, sh, sw, dh, dw, pt, pl, kh,
    kw, the signs (`entry.BYTES`)."""
    d, p = nb.carray(dims, 14), nb.carray(params, 13)
    qturned.qconv2d_turned_bytes(
        nb.carray(x, (d[0], d[1], d[2], d[3])).view(np.uint8),
        nb.carray(w, (d[4], d[5], d[6], d[7])),
        nb.carray(bias, (d[8],)),
        nb.carray(scale, (d[9],)),
        nb.carray(out, (d[10], d[11], d[12], d[13])).view(np.uint8),
        p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11],
        _flip(p[12]), p[12] & 2 != 0,
    )  # fmt: skip
    return 0


def _qdense(x, w, bias, scale, out, dims, params):  # type: ignore[no-untyped-def]
    """`qconv.qdense` on x, w (2-d), bias, scale (1-d), out (2-d); the parameters: x_zero,
    y_zero, low, high, pairs (as `_qconv2d`'s), the signs (`entry.BYTES`)."""
    d, p = nb.carray(dims, 8), nb.carray(params, 6)
    qconv.qdense_bytes(
        nb.carray(x, (d[0], d[1])).view(np.uint8),
        nb.carray(w, (d[2], d[3])),
        nb.carray(bias, (d[4],)),
        nb.carray(scale, (d[5],)),
        nb.carray(out, (d[6], d[7])).view(np.uint8),
        p[0], p[1], p[2], p[3], _flip(p[5]), p[5] & 2 != 0, p[4] != 0,
    )  # fmt: skip
    return 0


@jit(inline="always", nogil=True)
def _flip(signs):  # type: ignore[no-untyped-def]
    """The shift of the input's bytes into uint8: 128 when it is int8 (bit 0 of the signs)."""
    return 128 if signs & 1 else 0


entry.export("qconv2d", _qconv2d)
entry.export("qconv2d_turned", _qconv2d_turned)
entry.export("qdense", _qdense)
# What kernels call (`rvm.kernels.entry.caller`): ``qconv2d_call(arrays, params)``, 0 done.
qconv2d_call = entry.caller("qconv2d", 13)
qconv2d_turned_call = entry.caller("qconv2d_turned", 12)
qdense_call = entry.caller("qdense", 5)


# For Python callers (kernels call the entry points). Not cached: compiling one types the call,
# which registers the entry point (`entry.require`); cached object code would be linked
# without it. Each compiles in a fraction of a second and shares the entry point's object code
# with every kernel, where ``qconv.qconv2d`` called from Python would compile the whole
# library again for its argument types.
@jit(nogil=True)
def qconv2d(x, w, bias, scale, out, x_zero, y_zero, low, high, groups, sh, sw, dh, dw, pt, pl,
            hwc=False, pairs=False):  # type: ignore[no-untyped-def]  # fmt: skip
    """`qconv.qconv2d` through its entry point: the same arguments, C-contiguous arrays."""
    params = (x_zero, y_zero, low, high, groups, sh, sw, dh, dw, pt, pl, 1 if hwc else 0,
              1 if pairs else 0)  # fmt: skip
    qconv2d_call((x, w, bias, scale, out), params)


@jit(nogil=True)
def qconv2d_turned(x, w, bias, scale, out, x_zero, y_zero, low, high, sh, sw, dh, dw, pt, pl,
                   kh, kw):  # type: ignore[no-untyped-def]  # fmt: skip
    """`qturned.qconv2d_turned` through its entry point: the same arguments."""
    params = (x_zero, y_zero, low, high, sh, sw, dh, dw, pt, pl, kh, kw)
    qconv2d_turned_call((x, w, bias, scale, out), params)


@jit(nogil=True)
def qdense(x, w, bias, scale, out, x_zero, y_zero, low, high, pairs=False):  # type: ignore[no-untyped-def]  # noqa: E501
    """`qconv.qdense` through its entry point: the same arguments, C-contiguous arrays."""
    qdense_call((x, w, bias, scale, out), (x_zero, y_zero, low, high, 1 if pairs else 0))
