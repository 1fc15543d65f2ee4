"""Vectorizable float32 exp, tanh, sigmoid and erf for jit kernels (within 3 ulp).

The Numba/llvmlite wheels are built without Intel SVML (``llvmlite.binding.targets.has_svml()``
is False even with ``intel-cmplr-lib-rt`` installed), so ``np.exp`` in a loop is a scalar libm
call that LLVM cannot vectorize. These versions are straight-line arithmetic (range reduction,
a polynomial, and 2**n built from the exponent bits), which LLVM vectorizes like any other
elementwise code. NaN propagates; overflow gives inf; results below float32's range give 0
(or a denormal).

They are compiled (for float32) when a kernel first calls one, not at import: a first run whose
kernels call none builds none.
"""

from __future__ import annotations

import numba as nb
import numpy as np
from llvmlite import ir
from numba import types as nt
from numba.extending import intrinsic

_FAST = {"nsz", "arcp", "contract", "afn"}

# The constants of the arithmetic below, written once: `rvm.kernels.epilogue.VectorMath` builds
# the same functions as LLVM vectors from them. Polynomials are listed highest degree first.
EXP_RANGE = (-104.0, 89.0)  # exp32 clamps its argument to this: 0 and inf beyond
LOG2E = 1.4426950408889634
LN2_HI, LN2_LO = 0.693359375, -2.12194440e-4  # ln 2 = LN2_HI + LN2_LO, LN2_HI exact in 9 bits
EXP_POLY = (  # exp(r) = 1 + r + r * r * P(r) on |r| <= ln 2 / 2
    1.9875691500e-4,
    1.3981999507e-3,
    8.3334519073e-3,
    4.1665795894e-2,
    1.6666665459e-1,
    5.0000001201e-1,
)
TANH_SMALL = 0.625  # tanh32 takes its odd polynomial below this magnitude
TANH_POLY = (  # tanh(x) = x + x * z * P(z), z = x * x
    -5.70498872745e-3,
    2.06390887954e-2,
    -5.37397155531e-2,
    1.33314422036e-1,
    -3.33332819422e-1,
)
ERF_CLAMP = 10.0  # erfc(10) is 2e-45: 1 - it is 1 in float32
ERFC_POLY = (  # erfc(x) = t * exp(Q(t) - x * x), t = 1 / (1 + x / 2) (Numerical Recipes)
    0.17087277,
    -0.82215223,
    1.48851587,
    -1.13520398,
    0.27886807,
    -0.18628806,
    0.09678418,
    0.37409196,
    1.00002368,
    -1.26551223,
)


@intrinsic
def _bits_to_float32(typingctx, bits):  # type: ignore[no-untyped-def]
    """Reinterpret an int32 as a float32 (an LLVM bitcast)."""
    if bits != nt.int32:
        return None

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return builder.bitcast(args[0], ir.FloatType())

    return nt.float32(nt.int32), codegen


@nb.njit(inline="always", nogil=True, cache=True)
def _pow2(n):  # type: ignore[no-untyped-def]
    return _bits_to_float32(np.int32((n + 127) << 23))


@nb.njit(inline="always", nogil=True, cache=True, fastmath=_FAST)
def exp32(x):  # type: ignore[no-untyped-def]
    """e ** x for float32."""
    xc = np.minimum(np.maximum(x, np.float32(EXP_RANGE[0])), np.float32(EXP_RANGE[1]))
    n = np.floor(xc * np.float32(LOG2E) + np.float32(0.5))
    r = xc - n * np.float32(LN2_HI) - n * np.float32(LN2_LO)
    p = np.float32(EXP_POLY[0])
    p = p * r + np.float32(EXP_POLY[1])
    p = p * r + np.float32(EXP_POLY[2])
    p = p * r + np.float32(EXP_POLY[3])
    p = p * r + np.float32(EXP_POLY[4])
    p = p * r + np.float32(EXP_POLY[5])
    p = p * r * r + r + np.float32(1.0)
    ni = np.int32(n)
    half = ni >> 1
    return p * _pow2(half) * _pow2(ni - half)


@nb.njit(inline="always", nogil=True, cache=True, fastmath=_FAST)
def tanh32(x):  # type: ignore[no-untyped-def]
    """tanh(x) for float32: a polynomial near 0, 1 - 2 / (exp(2|x|) + 1) elsewhere."""
    a = np.abs(x)
    big = np.float32(1.0) - np.float32(2.0) / (exp32(np.float32(2.0) * a) + np.float32(1.0))
    big = big if x >= np.float32(0.0) else -big
    z = x * x
    p = np.float32(TANH_POLY[0])
    p = p * z + np.float32(TANH_POLY[1])
    p = p * z + np.float32(TANH_POLY[2])
    p = p * z + np.float32(TANH_POLY[3])
    p = p * z + np.float32(TANH_POLY[4])
    small = p * z * x + x
    return small if a < np.float32(TANH_SMALL) else big


@nb.njit(inline="always", nogil=True, cache=True, fastmath=_FAST)
def sigmoid32(x):  # type: ignore[no-untyped-def]
    """1 / (1 + exp(-x)) for float32, from exp(-|x|): exact in both tails."""
    e = exp32(-np.abs(x))
    r = np.float32(1.0) / (np.float32(1.0) + e)
    return r if x >= np.float32(0.0) else e * r


# erf(x) / x as a polynomial in x * x on [0, 1] (a least-squares fit at Chebyshev nodes,
# weighted to relative error: within 3e-10 before float32 rounding).
ERF_SMALL = (
    1.128379167080092,
    -0.3761263855273668,
    0.11283783442418069,
    -0.026865475422349103,
    0.005221138414767687,
    -0.0008485434518511763,
    0.00011274703883821869,
    -9.68963773230187e-06,
)


@nb.njit(inline="always", nogil=True, cache=True, fastmath=_FAST)
def erf32(x):  # type: ignore[no-untyped-def]
    """The error function for float32, within 3 ulp: ``x * P(x * x)`` below 1 in magnitude,
    ``1 - erfc(|x|)`` (with its sign) from there, erfc by Numerical Recipes' Chebyshev fit
    ``t * exp(Q(t) - x * x)``, ``t = 1 / (1 + |x| / 2)`` (relative error below 1.2e-7). Both
    are computed and one is selected, so a loop of it vectorizes."""
    z = x * x
    p = np.float32(ERF_SMALL[7])
    p = p * z + np.float32(ERF_SMALL[6])
    p = p * z + np.float32(ERF_SMALL[5])
    p = p * z + np.float32(ERF_SMALL[4])
    p = p * z + np.float32(ERF_SMALL[3])
    p = p * z + np.float32(ERF_SMALL[2])
    p = p * z + np.float32(ERF_SMALL[1])
    p = p * z + np.float32(ERF_SMALL[0])
    small = x * p
    a = np.abs(x)
    ac = np.minimum(a, np.float32(ERF_CLAMP))
    t = np.float32(1.0) / (np.float32(1.0) + np.float32(0.5) * ac)
    q = np.float32(ERFC_POLY[0])
    q = q * t + np.float32(ERFC_POLY[1])
    q = q * t + np.float32(ERFC_POLY[2])
    q = q * t + np.float32(ERFC_POLY[3])
    q = q * t + np.float32(ERFC_POLY[4])
    q = q * t + np.float32(ERFC_POLY[5])
    q = q * t + np.float32(ERFC_POLY[6])
    q = q * t + np.float32(ERFC_POLY[7])
    q = q * t + np.float32(ERFC_POLY[8])
    q = q * t + np.float32(ERFC_POLY[9])
    big = np.float32(1.0) - t * exp32(q - ac * ac)
    big = big if x >= np.float32(0.0) else -big
    return small if a < np.float32(1.0) else big
