"""Vectorizable float32 exp, tanh, sigmoid and erf for jit kernels (within 3 ulp), and GELU.

The Numba/llvmlite wheels are built without Intel SVML (``llvmlite.binding.targets.has_svml()``
is False even with ``intel-cmplr-lib-rt`` installed), so ``np.exp`` in a loop is a scalar libm
call that LLVM cannot vectorize. These versions are straight-line arithmetic (range reduction,
a polynomial, and 2**n built from the exponent bits), which LLVM vectorizes like any other
elementwise code. NaN propagates; overflow gives inf; results below float32's range give 0
(or a denormal).

Each is a Numba intrinsic of a float32 argument: a call writes the function's LLVM IR into its
caller (a kernel, or a library function), where LLVM optimizes and vectorizes it with the
caller's loop. Nothing is compiled on its own. (As ``@njit(inline="always")`` functions they
were inlined in Numba's IR: each call copied, typed and lowered the function's Python body
again, 0.3-0.5 CPU-s a call in every kernel's compile; compiled apart and linked, LLVM's
inliner left erf's calls out of the loop, which then ran scalar.) The IR is the arithmetic each
comment below states, operation for operation, as Numba lowers it (`_Scalar`), its float
operations flagged with the functions' own fastmath flags (`_FAST`) whatever the caller's, as
the inlined functions' were: the results are theirs to the bit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from llvmlite import ir
from numba import types as nt
from numba.core import cgutils
from numba.extending import intrinsic

_FAST = {"nsz", "arcp", "contract", "afn"}

# The constants of the arithmetic below, written once. Polynomials are listed highest degree
# first.
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

# GELU's erf and tanh (`gelu32`, `gelu_tanh32`; the GEMM epilogue's, `rvm.kernels.epilogue`)
# as odd rational functions, (clamp, P, Q): ``s * P(s * s) / Q(s * s)`` for |s| < clamp, +-1
# from there (the function is 1 there in float32). Eigen's and XLA's float32 erf and tanh: fits
# within 1.1 ulp of erf before rounding, 5.4 ulp after (near 1, where GELU's ``1 + erf`` keeps
# float32's absolute error anyway), tanh 4.6 ulp. A third of erf32's (tanh32's) arithmetic and
# no exp: BERT-base's FFN GELU took 217 us of a 1681 us product (two threads), 66 of 1566 now.
ERF_FAST = (
    4.0,
    (  # P, highest degree first
        -2.72614225801306e-10,
        2.77068142495902e-08,
        -2.10102402082508e-06,
        -5.69250639462346e-05,
        -7.34990630326855e-04,
        -2.95459980854025e-03,
        -1.60960333262415e-02,
    ),
    (
        -1.45660718464996e-05,
        -2.13374055278905e-04,
        -1.68282697438203e-03,
        -7.37332916720468e-03,
        -1.42647390514189e-02,
    ),
)
TANH_FAST = (
    7.90531110763549805,
    (
        -2.76076847742355e-16,
        2.00018790482477e-13,
        -8.60467152213735e-11,
        5.12229709037114e-08,
        1.48572235717979e-05,
        6.37261928875436e-04,
        4.89352455891786e-03,
    ),
    (
        1.19825839466702e-06,
        1.18534705686654e-04,
        2.26843463243900e-03,
        4.89352518554385e-03,
    ),
)
SQRT_HALF = 0.7071067811865476
SQRT_2_OVER_PI = 0.7978845608028654
GELU_CUBIC = 0.044715  # GELU's tanh form: tanh(SQRT_2_OVER_PI * (x + GELU_CUBIC * x ** 3))

F32 = ir.FloatType()
_FLAGS = tuple(sorted(_FAST))
I32 = ir.IntType(32)


class _Flagged:
    """An IR builder whose float operations, comparisons and calls carry `_FAST`'s flags, as
    the functions' own fastmath (``fastmath=_FAST``) gave them inlined, whatever the caller's."""

    def __init__(self, builder: ir.IRBuilder) -> None:
        self._b = builder
        self.module = builder.module

    def __getattr__(self, name: str) -> Any:
        return getattr(self._b, name)

    def fadd(self, x: ir.Value, y: ir.Value) -> ir.Value:
        return self._b.fadd(x, y, flags=_FLAGS)

    def fsub(self, x: ir.Value, y: ir.Value) -> ir.Value:
        return self._b.fsub(x, y, flags=_FLAGS)

    def fmul(self, x: ir.Value, y: ir.Value) -> ir.Value:
        return self._b.fmul(x, y, flags=_FLAGS)

    def fdiv(self, x: ir.Value, y: ir.Value) -> ir.Value:
        return self._b.fdiv(x, y, flags=_FLAGS)

    def fcmp_ordered(self, op: str, x: ir.Value, y: ir.Value) -> ir.Value:
        return self._b.fcmp_ordered(op, x, y, flags=_FLAGS)

    def fcmp_unordered(self, op: str, x: ir.Value, y: ir.Value) -> ir.Value:
        return self._b.fcmp_unordered(op, x, y, flags=_FLAGS)

    def call(self, fn: ir.Function, args: list[ir.Value]) -> ir.Value:
        return self._b.call(fn, args, fastmath=_FLAGS)


class _Scalar:
    """Writes float32 scalar IR as Numba lowers the Python arithmetic of the docstrings (the
    same operations in the same order; the caller's fastmath pass flags them as it flags its
    own), so that the inlined code is the code Numba's inlining gave. With ``lanes``, the same
    operations on vectors of that many float32 lanes (`gelu_ir`: the GEMM epilogue's)."""

    def __init__(self, builder: ir.IRBuilder, lanes: int = 0) -> None:
        self.b = _Flagged(builder)
        self.lanes = lanes
        self.t = ir.VectorType(F32, lanes) if lanes else F32

    def f(self, value: float) -> ir.Constant:
        """A float32 constant (``np.float32(value)``), in every lane."""
        v = float(np.float32(value))
        return ir.Constant(self.t, [v] * self.lanes if self.lanes else v)

    def _intrinsic(self, name: str, x: ir.Value) -> ir.Value:
        if not self.lanes:
            return self.b.call(self.b.module.declare_intrinsic(f"llvm.{name}", [F32]), [x])
        full = f"llvm.{name}.v{self.lanes}f32"  # llvmlite names scalar overloads only
        fn = cgutils.get_or_insert_function(self.b.module, ir.FunctionType(self.t, [self.t]), full)
        return self.b.call(fn, [x])

    def abs(self, x: ir.Value) -> ir.Value:
        """``np.abs(x)``."""
        return self._intrinsic("fabs", x)

    def neg(self, x: ir.Value) -> ir.Value:
        """``-x`` (``-0.0 - x``, Numba's negation)."""
        return self.b.fsub(self.f(-0.0), x)

    def where(self, op: str, x: ir.Value, y: ir.Value, a: ir.Value, c: ir.Value) -> ir.Value:
        """``a if x <op> y else c``."""
        return self.b.select(self.b.fcmp_ordered(op, x, y), a, c)

    def _extreme(self, op: str, x: ir.Value, y: ir.Value) -> ir.Value:
        """``np.minimum`` (``<=``) or ``np.maximum`` (``>=``): NaN preferred."""
        b = self.b
        nan = b.select(b.fcmp_unordered("uno", x, x), x, y)
        return b.select(b.fcmp_unordered("uno", x, y), nan, self.where(op, x, y, x, y))

    def horner(self, x: ir.Value, coefficients: tuple[float, ...]) -> ir.Value:
        """``p = c0; p = p * x + c1; ...`` (highest degree first)."""
        p = self.f(coefficients[0])
        for c in coefficients[1:]:
            p = self.b.fadd(self.b.fmul(p, x), self.f(c))
        return p

    def _pow2(self, n: ir.Value) -> ir.Value:
        """2 ** n for an int32 ``n`` in float32's exponent range, from its bits."""
        b = self.b
        bits = b.shl(b.add(n, ir.Constant(I32, 127)), ir.Constant(I32, 23))
        return b.bitcast(bits, F32)

    def exp(self, x: ir.Value) -> ir.Value:
        """`exp32`."""
        b, f = self.b, self.f
        xc = self._extreme("<=", self._extreme(">=", x, f(EXP_RANGE[0])), f(EXP_RANGE[1]))
        n = self._intrinsic("floor", b.fadd(b.fmul(xc, f(LOG2E)), f(0.5)))
        r = b.fsub(b.fsub(xc, b.fmul(n, f(LN2_HI))), b.fmul(n, f(LN2_LO)))
        p = self.horner(r, EXP_POLY)
        p = b.fadd(b.fadd(b.fmul(b.fmul(p, r), r), r), f(1.0))
        ni = b.fptosi(n, I32)
        half = b.ashr(ni, ir.Constant(I32, 1))
        return b.fmul(b.fmul(p, self._pow2(half)), self._pow2(b.sub(ni, half)))

    def tanh(self, x: ir.Value) -> ir.Value:
        """`tanh32`."""
        b, f = self.b, self.f
        a = self.abs(x)
        big = b.fsub(f(1.0), b.fdiv(f(2.0), b.fadd(self.exp(b.fmul(f(2.0), a)), f(1.0))))
        big = self.where(">=", x, f(0.0), big, self.neg(big))
        z = b.fmul(x, x)
        small = b.fadd(b.fmul(b.fmul(self.horner(z, TANH_POLY), z), x), x)
        return self.where("<", a, f(TANH_SMALL), small, big)

    def sigmoid(self, x: ir.Value) -> ir.Value:
        """`sigmoid32`."""
        b, f = self.b, self.f
        e = self.exp(self.neg(self.abs(x)))
        r = b.fdiv(f(1.0), b.fadd(f(1.0), e))
        return self.where(">=", x, f(0.0), r, b.fmul(e, r))

    def erf(self, x: ir.Value) -> ir.Value:
        """`erf32`."""
        b, f = self.b, self.f
        z = b.fmul(x, x)
        small = b.fmul(x, self.horner(z, tuple(reversed(ERF_SMALL))))
        a = self.abs(x)
        ac = self._extreme("<=", a, f(ERF_CLAMP))
        t = b.fdiv(f(1.0), b.fadd(f(1.0), b.fmul(f(0.5), ac)))
        q = self.horner(t, ERFC_POLY)
        big = b.fsub(f(1.0), b.fmul(t, self.exp(b.fsub(q, b.fmul(ac, ac)))))
        big = self.where(">=", x, f(0.0), big, self.neg(big))
        return self.where("<", a, f(1.0), small, big)

    def odd_rational(self, s: ir.Value, fit: tuple) -> ir.Value:
        """``s * P(s * s) / Q(s * s)`` below the clamp of ``fit`` (`ERF_FAST`, `TANH_FAST`)
        in magnitude, else 1 with the sign of ``s`` (-1 where s < 0 or NaN)."""
        b, f = self.b, self.f
        clamp, p, q = fit
        z = b.fmul(s, s)
        e = b.fmul(s, b.fdiv(self.horner(z, p), self.horner(z, q)))
        one = self.where(">=", s, f(0.0), f(1.0), f(-1.0))
        return self.where("<", self.abs(s), f(clamp), e, one)

    def gelu(self, x: ir.Value) -> ir.Value:
        """`gelu32`."""
        b, f = self.b, self.f
        e = self.odd_rational(b.fmul(x, f(SQRT_HALF)), ERF_FAST)
        return b.fmul(b.fmul(f(0.5), x), b.fadd(f(1.0), e))

    def gelu_tanh(self, x: ir.Value) -> ir.Value:
        """`gelu_tanh32`."""
        b, f = self.b, self.f
        cube = b.fmul(b.fmul(x, x), x)
        inner = b.fmul(f(SQRT_2_OVER_PI), b.fadd(x, b.fmul(f(GELU_CUBIC), cube)))
        e = self.odd_rational(inner, TANH_FAST)
        return b.fmul(b.fmul(f(0.5), x), b.fadd(f(1.0), e))


def _float32_function(name: str, write: Callable[[_Scalar, ir.Value], ir.Value]) -> Any:
    """The Numba intrinsic ``name`` of one float32 argument whose IR ``write`` (a `_Scalar`
    method) makes."""

    def typer(typingctx, x):  # type: ignore[no-untyped-def]
        if x != nt.float32:
            return None

        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            return write(_Scalar(builder), args[0])

        return nt.float32(nt.float32), codegen

    typer.__name__ = name
    return intrinsic(typer)


# e ** x for float32: ``xc = np.minimum(np.maximum(x, EXP_RANGE[0]), EXP_RANGE[1])``,
# ``n = np.floor(xc * LOG2E + 0.5)``, ``r = xc - n * LN2_HI - n * LN2_LO``, ``p`` = EXP_POLY's
# Horner sum at ``r``, ``p = p * r * r + r + 1``, then ``p * 2 ** half * 2 ** (n - half)``
# with ``half = int32(n) >> 1`` (each power built from its exponent bits).
exp32 = _float32_function("exp32", _Scalar.exp)
# tanh(x) for float32: ``x + x * z * P(z)`` (``z = x * x``, P = TANH_POLY) below TANH_SMALL
# in magnitude, ``1 - 2 / (exp32(2 |x|) + 1)`` with the sign of x from there.
tanh32 = _float32_function("tanh32", _Scalar.tanh)
# 1 / (1 + exp(-x)) for float32, from ``e = exp32(-|x|)``: ``r = 1 / (1 + e)`` for x >= 0,
# ``e * r`` below: exact in both tails.
sigmoid32 = _float32_function("sigmoid32", _Scalar.sigmoid)
# The error function for float32, within 3 ulp: ``x * P(x * x)`` below 1 in magnitude (P =
# ERF_SMALL), ``1 - erfc(|x|)`` (with its sign) from there, erfc by Numerical Recipes'
# Chebyshev fit ``t * exp32(Q(t) - x * x)``, ``t = 1 / (1 + |x| / 2)``, |x| clamped at
# ERF_CLAMP (Q = ERFC_POLY, relative error below 1.2e-7). Both are computed and one is
# selected, so a loop of it vectorizes.
erf32 = _float32_function("erf32", _Scalar.erf)
# GELU's erf form for float32, ``0.5 * x * (1 + e)``: ``s = x * SQRT_HALF``, ``z = s * s``,
# ``e = s * (P(z) / Q(z))`` (ERF_FAST's) where ``|s|`` is below its clamp, else 1 with the sign
# of s (-1 where s < 0 or NaN: NaN propagates through x).
gelu32 = _float32_function("gelu32", _Scalar.gelu)
# GELU's tanh form for float32: the same of ``s = SQRT_2_OVER_PI * (x + GELU_CUBIC * (x * x *
# x))`` with TANH_FAST.
gelu_tanh32 = _float32_function("gelu_tanh32", _Scalar.gelu_tanh)


def gelu_ir(builder: ir.IRBuilder, x: ir.Value, tanh: bool) -> ir.Value:
    """`gelu32` (``tanh``: `gelu_tanh32`) of the float32 vector ``x``, written into ``builder``
    as the intrinsics write it for one lane."""
    writer = _Scalar(builder, x.type.count)
    return writer.gelu_tanh(x) if tanh else writer.gelu(x)
