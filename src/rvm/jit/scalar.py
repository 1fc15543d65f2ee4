"""Scalar compute of the elementwise ops, as Numba source over operand sources.

``scalar_compute[op](attrs, dtype, *operands) -> source`` gives one element of the op's result
from its operands' elements, which arrive already converted to the op's computation dtype
(``dtype``: the promoted dtype of the inputs, as NumPy's ``result_type``). Each op's form is
declared with the op (`rvm.op.declare.ELEMENTWISE`, the declarations of `rvm.op.elemwise`);
this module gives the forms their `ScalarEmitter`: constants typed in the computation dtype
(``np.float32(0.5)``, so float32 chains stay float32 as in NumPy) and the vectorizable float32
math of `rvm.kernels.mathlib`. The forms follow `rvm.kernels.reference` exactly: NaN
propagation of maximum/minimum, Python semantics of ``//`` and ``%``, truncating integer
``divide``, the stable sigmoid and softplus.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, NoReturn

import numpy as np

from rvm.ir.types import FLOAT_DTYPES
from rvm.jit.te import Scalar, Unsupported
from rvm.kernels.mathlib import GELU_CUBIC, SQRT_2_OVER_PI, SQRT_HALF
from rvm.op.declare import ELEMENTWISE, ScalarForm

ScalarFn = Callable[..., str]


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


def erf_source(t: str, x: str) -> str:
    """erf(x): the vectorizable `rvm.kernels.mathlib.erf32` for float32, else ``math.erf``
    (a scalar call) in float64."""
    if t == "float32":
        return _mathlib("erf32", x)
    return f"np.{t}(math.erf(np.float64({x})))"


def gelu_source(t: str, x: str, tanh: bool = False) -> str:
    """GELU's erf form, ``0.5 x (1 + erf(x / sqrt 2))``, or its tanh form (``tanh``): the
    vectorizable `rvm.kernels.mathlib.gelu32` (`gelu_tanh32`) for float32, the GEMM epilogue's
    arithmetic; else from `erf_source` (`tanh_source`)."""
    if t == "float32":
        return _mathlib("gelu_tanh32" if tanh else "gelu32", x)
    half, one = lit(0.5, t), lit(1.0, t)
    if tanh:
        cubic = f"({x} + {lit(GELU_CUBIC, t)} * {x} * {x} * {x})"
        shape = tanh_source(t, f"({lit(SQRT_2_OVER_PI, t)} * {cubic})")
    else:
        shape = erf_source(t, f"({x} * {lit(SQRT_HALF, t)})")
    return f"({half} * {x} * ({one} + {shape}))"


def sigmoid_source(t: str, x: str) -> str:
    """The stable sigmoid: exp(-|x|) based, exact in both tails as the reference."""
    if t == "float32":
        return _mathlib("sigmoid32", x)
    e = exp_source(t, f"(-np.abs({x}))")
    one = lit(1.0, t)
    return f"(({one} / ({one} + {e})) if {x} >= {lit(0, t)} else ({e} / ({one} + {e})))"


class ScalarEmitter:
    """What a declared scalar form writes with (`rvm.op.declare.Emitter`): one per element
    expression, for the call's ``attrs`` and the computation dtype ``dtype``."""

    __slots__ = ("attrs", "dtype")

    def __init__(self, attrs: dict[str, Any], dtype: str) -> None:
        self.attrs = attrs
        self.dtype = dtype

    @property
    def is_float(self) -> bool:
        return self.dtype in FLOAT_DTYPES

    def lit(self, value: object) -> str:
        return lit(value, self.dtype)

    def exp(self, x: str) -> str:
        return exp_source(self.dtype, x)

    def tanh(self, x: str) -> str:
        return tanh_source(self.dtype, x)

    def sigmoid(self, x: str) -> str:
        return sigmoid_source(self.dtype, x)

    def erf(self, x: str) -> str:
        return erf_source(self.dtype, x)

    def gelu(self, x: str, tanh: bool = False) -> str:
        return gelu_source(self.dtype, x, tanh)

    def unsupported(self, reason: str) -> NoReturn:
        raise Unsupported(reason)


def _scalar_fn(form: ScalarForm) -> ScalarFn:
    def element(attrs: dict, dtype: str, *operands: str) -> str:
        return form(ScalarEmitter(attrs, dtype), *operands)

    return element


scalar_compute: dict[Any, ScalarFn] = {
    op: _scalar_fn(decl.scalar) for op, decl in ELEMENTWISE.items() if decl.scalar is not None
}
"""Per elementwise op the jit lowers: ``f(attrs, dtype, *operand_sources) -> element source``."""


def wrap_result(code: str, dtype: str) -> str:
    """Narrow integer results back to their dtype (Numba computes small ints in int64)."""
    if dtype in SMALL_INTS:
        return f"np.{dtype}({code})"
    return code
