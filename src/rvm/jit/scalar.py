"""Scalar compute definitions of the elementwise ops, as Numba source over operand sources.

``scalar_compute[op](attrs, dtype, *operands) -> source`` gives one element of the op's result
from its operands' elements, which arrive already converted to the op's computation dtype
(``dtype``: the promoted dtype of the inputs, as NumPy's ``result_type``). Every constant is
typed in that dtype (``np.float32(0.5)``), so float32 chains stay float32 as in NumPy. The
definitions follow `rvm.kernels.reference` exactly: NaN propagation of maximum/minimum, Python
semantics of ``//`` and ``%``, truncating integer ``divide``, the stable sigmoid and softplus.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import numpy as np

from rvm.ir.types import FLOAT_DTYPES
from rvm.jit.te import Scalar, Unsupported
from rvm.op import ops

ScalarFn = Callable[..., str]

scalar_compute: dict[Any, ScalarFn] = {}
"""Per elementwise op: ``f(attrs, dtype, *operand_sources) -> element source``."""

SMALL_INTS = frozenset({"int8", "int16", "int32", "uint8"})


def lit(value: object, dtype: str) -> str:
    """Source of a constant of ``dtype``."""
    if dtype == "bool":
        return "True" if bool(value) else "False"
    if dtype in FLOAT_DTYPES:
        v = float(value)  # type: ignore[arg-type]
        if math.isnan(v):
            text = "np.nan"
        elif math.isinf(v):
            text = "np.inf" if v > 0 else "-np.inf"
        else:
            text = repr(v)
        return f"np.{dtype}({text})"
    return f"np.{dtype}({int(np.asarray(value).astype(dtype))})"


def convert(s: Scalar, dtype: str) -> Scalar:
    """``s`` converted to ``dtype`` (NumPy's astype semantics for bool targets)."""
    if s.dtype == dtype:
        return s
    if dtype == "bool":
        return Scalar(f"({s.code} != 0)", s.deps, dtype)
    return Scalar(f"np.{dtype}({s.code})", s.deps, dtype)


def _reg(*op_list: Any) -> Callable[[ScalarFn], ScalarFn]:
    def wrap(fn: ScalarFn) -> ScalarFn:
        for op in op_list:
            scalar_compute[op] = fn
        return fn

    return wrap


def _isfloat(t: str) -> bool:
    return t in FLOAT_DTYPES


# -- binary arithmetic ------------------------------------------------------------------------


@_reg(ops.add)
def _add(attrs: dict, t: str, a: str, b: str) -> str:
    return f"({a} | {b})" if t == "bool" else f"({a} + {b})"


@_reg(ops.subtract)
def _subtract(attrs: dict, t: str, a: str, b: str) -> str:
    if t == "bool":
        raise Unsupported("subtract of bools")
    return f"({a} - {b})"


@_reg(ops.multiply)
def _multiply(attrs: dict, t: str, a: str, b: str) -> str:
    return f"({a} & {b})" if t == "bool" else f"({a} * {b})"


@_reg(ops.divide)
def _divide(attrs: dict, t: str, a: str, b: str) -> str:
    if _isfloat(t):
        return f"({a} / {b})"
    # Truncation toward zero: floor division, plus one when the signs differ and it is inexact.
    return f"(({a} // {b}) + (1 if ({a} % {b} != 0) and (({a} < 0) != ({b} < 0)) else 0))"


@_reg(ops.floor_divide)
def _floor_divide(attrs: dict, t: str, a: str, b: str) -> str:
    return f"({a} // {b})"


@_reg(ops.mod)
def _mod(attrs: dict, t: str, a: str, b: str) -> str:
    return f"({a} % {b})"


@_reg(ops.power)
def _power(attrs: dict, t: str, a: str, b: str) -> str:
    if not _isfloat(t):
        raise Unsupported("integer power (NumPy raises for negative exponents)")
    return f"({a} ** {b})"


@_reg(ops.maximum)
def _maximum(attrs: dict, t: str, a: str, b: str) -> str:
    return f"np.maximum({a}, {b})"


@_reg(ops.minimum)
def _minimum(attrs: dict, t: str, a: str, b: str) -> str:
    return f"np.minimum({a}, {b})"


# -- comparisons and logic (operands in their common dtype, result bool) -----------------------

for _op, _sym in (
    (ops.equal, "=="),
    (ops.not_equal, "!="),
    (ops.less, "<"),
    (ops.less_equal, "<="),
    (ops.greater, ">"),
    (ops.greater_equal, ">="),
):
    scalar_compute[_op] = lambda attrs, t, a, b, _s=_sym: f"({a} {_s} {b})"


@_reg(ops.logical_and)
def _logical_and(attrs: dict, t: str, a: str, b: str) -> str:
    return f"(({a} != 0) & ({b} != 0))"


@_reg(ops.logical_or)
def _logical_or(attrs: dict, t: str, a: str, b: str) -> str:
    return f"(({a} != 0) | ({b} != 0))"


@_reg(ops.logical_not)
def _logical_not(attrs: dict, t: str, x: str) -> str:
    return f"({x} == 0)"


for _op, _sym in ((ops.bitwise_and, "&"), (ops.bitwise_or, "|"), (ops.bitwise_xor, "^")):

    def _bitwise(attrs: dict, t: str, a: str, b: str, _sym: str = _sym) -> str:
        return f"({a} {_sym} {b})"

    scalar_compute[_op] = _bitwise


@_reg(ops.bitwise_not)
def _bitwise_not(attrs: dict, t: str, x: str) -> str:
    return f"(not {x})" if t == "bool" else f"(~{x})"


@_reg(ops.where)
def _where(attrs: dict, t: str, c: str, a: str, b: str) -> str:
    return f"({a} if {c} else {b})"


# -- unary math --------------------------------------------------------------------------------


# The calls of mathlib functions (inlined, weighing on compile time) made while lowering.
_mathlib_calls: ContextVar[list[int] | None] = ContextVar("rvm_jit_mathlib_calls", default=None)


@contextmanager
def counting_mathlib() -> Iterator[list[int]]:
    """Counts, in its one item, the mathlib calls the scalar forms write within the block."""
    count = [0]
    token = _mathlib_calls.set(count)
    try:
        yield count
    finally:
        _mathlib_calls.reset(token)


def _mathlib(name: str, x: str) -> str:
    count = _mathlib_calls.get()
    if count is not None:
        count[0] += 1
    return f"{name}({x})"


def exp_source(t: str, x: str) -> str:
    """e ** x: the vectorizable `rvm.kernels.mathlib.exp32` for float32."""
    return _mathlib("exp32", x) if t == "float32" else f"np.exp({x})"


def tanh_source(t: str, x: str) -> str:
    """tanh(x): the vectorizable `rvm.kernels.mathlib.tanh32` for float32."""
    return _mathlib("tanh32", x) if t == "float32" else f"np.tanh({x})"


scalar_compute[ops.exp] = lambda attrs, t, x: exp_source(t, x)
scalar_compute[ops.tanh] = lambda attrs, t, x: tanh_source(t, x)

for _op, _fn in (
    (ops.log, "np.log"),
    (ops.sqrt, "np.sqrt"),
    (ops.sin, "np.sin"),
    (ops.cos, "np.cos"),
    (ops.asin, "np.arcsin"),
    (ops.acos, "np.arccos"),
    (ops.atan, "np.arctan"),
    (ops.asinh, "np.arcsinh"),
    (ops.acosh, "np.arccosh"),
    (ops.atanh, "np.arctanh"),
):
    scalar_compute[_op] = lambda attrs, t, x, _f=_fn: f"{_f}({x})"


@_reg(ops.rsqrt)
def _rsqrt(attrs: dict, t: str, x: str) -> str:
    return f"({lit(1.0, t)} / np.sqrt({x}))"


@_reg(ops.negative)
def _negative(attrs: dict, t: str, x: str) -> str:
    if t == "bool":
        raise Unsupported("negative of bools")
    return f"(-{x})"


@_reg(ops.abs)
def _abs(attrs: dict, t: str, x: str) -> str:
    return x if t in ("bool", "uint8") else f"np.abs({x})"


@_reg(ops.sign)
def _sign(attrs: dict, t: str, x: str) -> str:
    if t == "bool":
        return x
    return f"np.sign({x})"


@_reg(ops.floor)
def _floor(attrs: dict, t: str, x: str) -> str:
    return f"np.floor({x})" if _isfloat(t) else x


@_reg(ops.ceil)
def _ceil(attrs: dict, t: str, x: str) -> str:
    return f"np.ceil({x})" if _isfloat(t) else x


@_reg(ops.round)
def _round(attrs: dict, t: str, x: str) -> str:
    return f"np.rint({x})" if _isfloat(t) else x


@_reg(ops.relu)
def _relu(attrs: dict, t: str, x: str) -> str:
    if t == "bool":
        return x
    return f"np.maximum({x}, {lit(0, t)})"


@_reg(ops.leaky_relu)
def _leaky_relu(attrs: dict, t: str, x: str) -> str:
    return f"({x} if {x} > {lit(0, t)} else {x} * {lit(attrs['alpha'], t)})"


def sigmoid_source(t: str, x: str) -> str:
    """The stable sigmoid: exp(-|x|) based, exact in both tails as the reference."""
    if t == "float32":
        return _mathlib("sigmoid32", x)
    e = exp_source(t, f"(-np.abs({x}))")
    one = lit(1.0, t)
    return f"(({one} / ({one} + {e})) if {x} >= {lit(0, t)} else ({e} / ({one} + {e})))"


@_reg(ops.sigmoid)
def _sigmoid(attrs: dict, t: str, x: str) -> str:
    return sigmoid_source(t, x)


@_reg(ops.silu)
def _silu(attrs: dict, t: str, x: str) -> str:
    return f"({x} * {sigmoid_source(t, x)})"


@_reg(ops.softplus)
def _softplus(attrs: dict, t: str, x: str) -> str:
    return f"(np.maximum({x}, {lit(0, t)}) + np.log1p({exp_source(t, f'(-np.abs({x}))')}))"


@_reg(ops.erf)
def _erf(attrs: dict, t: str, x: str) -> str:
    return f"np.{t}(math.erf(np.float64({x})))"


@_reg(ops.gelu)
def _gelu(attrs: dict, t: str, x: str) -> str:
    half, one = lit(0.5, t), lit(1.0, t)
    if attrs.get("approximate") == "tanh":
        inner = f"{lit(0.7978845608028654, t)} * ({x} + {lit(0.044715, t)} * {x} * {x} * {x})"
        return f"({half} * {x} * ({one} + {tanh_source(t, inner)}))"
    scaled = f"({x} * {lit(0.7071067811865476, t)})"
    return f"({half} * {x} * ({one} + {_erf(attrs, t, scaled)}))"


@_reg(ops.clip)
def _clip(attrs: dict, t: str, x: str) -> str:
    out = x
    if attrs.get("a_min") is not None:
        out = f"np.maximum({out}, {lit(attrs['a_min'], t)})"
    if attrs.get("a_max") is not None:
        out = f"np.minimum({out}, {lit(attrs['a_max'], t)})"
    return out


@_reg(ops.cast)
def _cast(attrs: dict, t: str, x: str) -> str:
    return x  # the conversion to the result dtype happens on the operand (see `convert`)


def wrap_result(code: str, dtype: str) -> str:
    """Narrow integer results back to their dtype (Numba computes small ints in int64)."""
    if dtype in SMALL_INTS:
        return f"np.{dtype}({code})"
    return code
