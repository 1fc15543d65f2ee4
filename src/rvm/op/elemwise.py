"""Elementwise ops: binary arithmetic with broadcasting, comparisons, logic, unary math.

Binary ops broadcast as NumPy does, with symbolic dims (`rvm.op.shapes.broadcast_shapes`), and
promote dtypes (`rvm.ir.promote_dtypes`). A Python scalar operand becomes a 0-d constant of the
other operand's dtype, so ``add(x, 1.0)`` on float16 stays float16 (the dtype rule of
`rvm.ir.types`). Comparisons and logical ops
give bool. Float math (exp, log, tanh, gelu...) accepts float tensors only and keeps their
dtype; ``abs``/``sign``/``relu``/``clip``/rounding keep any numeric dtype. Integer ``divide``
truncates toward zero (C, ONNX); ``floor_divide`` and ``mod`` follow Python, ``fmod`` C. Bitwise
ops take integers (and/or/xor/not bools too); shifts wrap within the dtype, and a shift count
outside ``[0, bits)`` saturates as NumPy's (0, or -1 for a right shift of a negative value).

Each op is declared once, on its builder (`rvm.op.declare.elementwise`): its name, operand
count, type rule and scalar form (the jit's compute); its NumPy reference is the function of
its name in `rvm.kernels.reference.elemwise`. A new elementwise op is one declaration here and
one reference function there.
"""

from __future__ import annotations

from rvm.dtypes import numpy_dtype
from rvm.errors import IRError
from rvm.ir.expr import Call, Expr, Op
from rvm.ir.op import OpPattern
from rvm.ir.types import TensorType, Type, promote_dtypes
from rvm.op import ops
from rvm.op.core import (
    ExprLike,
    as_expr,
    call,
    check_choice,
    check_dtype_attr,
    check_float,
    define_op,
)
from rvm.op.declare import Emitter, Rule, elementwise
from rvm.op.shapes import broadcast_shapes, rule

__all__: list[str] = []  # every builder below, in declaration order


def _binary(op: Op, a: ExprLike, b: ExprLike) -> Call:
    if not isinstance(a, Expr) and isinstance(b, Expr):
        a = as_expr(a, like=b)
    a = as_expr(a)
    return call(op, a, as_expr(b, like=a))


def _unary(op: Op, x: ExprLike) -> Call:
    return call(op, as_expr(x))


def _np(fn: str):  # noqa: ANN202 - a scalar form
    """The scalar form calling NumPy's ``fn`` on the operands."""
    return lambda e, *xs: f"np.{fn}({', '.join(xs)})"


def _infix(symbol: str):  # noqa: ANN202 - a scalar form
    return lambda e, a, b: f"({a} {symbol} {b})"


# ---------------------------------------------------------------------------------------------
# Binary arithmetic (numpy broadcasting, dtype promotion)


def _add_form(e: Emitter, a: str, b: str) -> str:
    return f"({a} | {b})" if e.dtype == "bool" else f"({a} + {b})"


@elementwise("add", 2, Rule.PROMOTE, _add_form, exports=__all__)
def add(a: ExprLike, b: ExprLike) -> Call:
    """``a + b`` with broadcasting."""
    return _binary(ops.add, a, b)


def _subtract_form(e: Emitter, a: str, b: str) -> str:
    if e.dtype == "bool":
        e.unsupported("subtract of bools")
    return f"({a} - {b})"


@elementwise("subtract", 2, Rule.PROMOTE, _subtract_form, exports=__all__)
def subtract(a: ExprLike, b: ExprLike) -> Call:
    """``a - b`` with broadcasting."""
    return _binary(ops.subtract, a, b)


def _multiply_form(e: Emitter, a: str, b: str) -> str:
    return f"({a} & {b})" if e.dtype == "bool" else f"({a} * {b})"


@elementwise("multiply", 2, Rule.PROMOTE, _multiply_form, exports=__all__)
def multiply(a: ExprLike, b: ExprLike) -> Call:
    """``a * b`` with broadcasting."""
    return _binary(ops.multiply, a, b)


def _divide_form(e: Emitter, a: str, b: str) -> str:
    if e.is_float:
        return f"({a} / {b})"
    # Truncation toward zero: floor division, plus one when the signs differ and it is inexact.
    return f"(({a} // {b}) + (1 if ({a} % {b} != 0) and (({a} < 0) != ({b} < 0)) else 0))"


@elementwise("divide", 2, Rule.PROMOTE, _divide_form, exports=__all__)
def divide(a: ExprLike, b: ExprLike) -> Call:
    """``a / b``; integer division truncates toward zero."""
    return _binary(ops.divide, a, b)


@elementwise("floor_divide", 2, Rule.PROMOTE, _infix("//"), exports=__all__)
def floor_divide(a: ExprLike, b: ExprLike) -> Call:
    """``a // b`` (rounds toward minus infinity)."""
    return _binary(ops.floor_divide, a, b)


@elementwise("mod", 2, Rule.PROMOTE, _infix("%"), exports=__all__)
def mod(a: ExprLike, b: ExprLike) -> Call:
    """``a % b`` with the sign of ``b``."""
    return _binary(ops.mod, a, b)


def _power_form(e: Emitter, a: str, b: str) -> str:
    if not e.is_float:
        e.unsupported("integer power (NumPy raises for negative exponents)")
    return f"({a} ** {b})"


@elementwise("power", 2, Rule.PROMOTE, _power_form, exports=__all__)
def power(a: ExprLike, b: ExprLike) -> Call:
    """``a ** b``."""
    return _binary(ops.power, a, b)


@elementwise("maximum", 2, Rule.PROMOTE, _np("maximum"), exports=__all__)
def maximum(a: ExprLike, b: ExprLike) -> Call:
    """The elementwise maximum."""
    return _binary(ops.maximum, a, b)


@elementwise("minimum", 2, Rule.PROMOTE, _np("minimum"), exports=__all__)
def minimum(a: ExprLike, b: ExprLike) -> Call:
    """The elementwise minimum."""
    return _binary(ops.minimum, a, b)


@elementwise("fmod", 2, Rule.PROMOTE, None, exports=__all__)
def fmod(a: ExprLike, b: ExprLike) -> Call:
    """The remainder of ``a / b`` with the sign of ``a`` (C's fmod)."""
    return _binary(ops.fmod, a, b)


# ---------------------------------------------------------------------------------------------
# Bitwise ops on integers (and bools for and/or/xor/not)


@elementwise("bitwise_and", 2, Rule.BITWISE, _infix("&"), exports=__all__)
def bitwise_and(a: ExprLike, b: ExprLike) -> Call:
    """``a & b`` on integers (logical and on bools)."""
    return _binary(ops.bitwise_and, a, b)


@elementwise("bitwise_or", 2, Rule.BITWISE, _infix("|"), exports=__all__)
def bitwise_or(a: ExprLike, b: ExprLike) -> Call:
    """``a | b`` on integers (logical or on bools)."""
    return _binary(ops.bitwise_or, a, b)


@elementwise("bitwise_xor", 2, Rule.BITWISE, _infix("^"), exports=__all__)
def bitwise_xor(a: ExprLike, b: ExprLike) -> Call:
    """``a ^ b`` on integers (logical xor on bools)."""
    return _binary(ops.bitwise_xor, a, b)


def _bitwise_not_form(e: Emitter, x: str) -> str:
    return f"(not {x})" if e.dtype == "bool" else f"(~{x})"


@elementwise("bitwise_not", 1, Rule.BITWISE, _bitwise_not_form, exports=__all__)
def bitwise_not(x: ExprLike) -> Call:
    """``~x`` on integers (logical not on bools)."""
    return _unary(ops.bitwise_not, x)


@elementwise("left_shift", 2, Rule.INTEGER, None, exports=__all__)
def left_shift(a: ExprLike, b: ExprLike) -> Call:
    """``a << b``, wrapping within the dtype; a count outside [0, bits) gives 0."""
    return _binary(ops.left_shift, a, b)


@elementwise("right_shift", 2, Rule.INTEGER, None, exports=__all__)
def right_shift(a: ExprLike, b: ExprLike) -> Call:
    """``a >> b`` (arithmetic for signed dtypes); a count outside [0, bits) gives the sign
    fill: 0, or -1 for a negative value."""
    return _binary(ops.right_shift, a, b)


# ---------------------------------------------------------------------------------------------
# Comparisons and logic (operands in their common dtype, bool results)


@elementwise("equal", 2, Rule.BOOL, _infix("=="), compute="inputs", exports=__all__)
def equal(a: ExprLike, b: ExprLike) -> Call:
    """``a == b`` as a bool tensor."""
    return _binary(ops.equal, a, b)


@elementwise("not_equal", 2, Rule.BOOL, _infix("!="), compute="inputs", exports=__all__)
def not_equal(a: ExprLike, b: ExprLike) -> Call:
    """``a != b`` as a bool tensor."""
    return _binary(ops.not_equal, a, b)


@elementwise("less", 2, Rule.BOOL, _infix("<"), compute="inputs", exports=__all__)
def less(a: ExprLike, b: ExprLike) -> Call:
    """``a < b`` as a bool tensor."""
    return _binary(ops.less, a, b)


@elementwise("less_equal", 2, Rule.BOOL, _infix("<="), compute="inputs", exports=__all__)
def less_equal(a: ExprLike, b: ExprLike) -> Call:
    """``a <= b`` as a bool tensor."""
    return _binary(ops.less_equal, a, b)


@elementwise("greater", 2, Rule.BOOL, _infix(">"), compute="inputs", exports=__all__)
def greater(a: ExprLike, b: ExprLike) -> Call:
    """``a > b`` as a bool tensor."""
    return _binary(ops.greater, a, b)


@elementwise("greater_equal", 2, Rule.BOOL, _infix(">="), compute="inputs", exports=__all__)
def greater_equal(a: ExprLike, b: ExprLike) -> Call:
    """``a >= b`` as a bool tensor."""
    return _binary(ops.greater_equal, a, b)


def _logical_and_form(e: Emitter, a: str, b: str) -> str:
    return f"(({a} != 0) & ({b} != 0))"


@elementwise("logical_and", 2, Rule.BOOL, _logical_and_form, compute="inputs", exports=__all__)
def logical_and(a: ExprLike, b: ExprLike) -> Call:
    """Elementwise logical and (nonzero is true)."""
    return _binary(ops.logical_and, a, b)


def _logical_or_form(e: Emitter, a: str, b: str) -> str:
    return f"(({a} != 0) | ({b} != 0))"


@elementwise("logical_or", 2, Rule.BOOL, _logical_or_form, compute="inputs", exports=__all__)
def logical_or(a: ExprLike, b: ExprLike) -> Call:
    """Elementwise logical or (nonzero is true)."""
    return _binary(ops.logical_or, a, b)


def _logical_not_form(e: Emitter, x: str) -> str:
    return f"({x} == 0)"


@elementwise("logical_not", 1, Rule.BOOL, _logical_not_form, compute="inputs", exports=__all__)
def logical_not(x: ExprLike) -> Call:
    """Elementwise logical not (nonzero is true)."""
    return _unary(ops.logical_not, x)


def _where_rule(op: Op, call_: Call, args: list[TensorType]) -> Type:
    cond, a, b = args
    if cond.dtype not in (None, "bool"):
        raise IRError(f"where: the condition must be a bool tensor, got {cond.dtype}")
    shape = broadcast_shapes("where", cond.shape, a.shape, b.shape)
    return TensorType(shape, promote_dtypes(a.dtype, b.dtype))


def _where_form(e: Emitter, c: str, a: str, b: str) -> str:
    return f"({a} if {c} else {b})"


@elementwise("where", 3, _where_rule, _where_form, compute="select", exports=__all__)
def where(cond: ExprLike, a: ExprLike, b: ExprLike) -> Call:
    """``a`` where ``cond`` (a bool tensor) holds, else ``b``; all three broadcast."""
    if not isinstance(a, Expr) and isinstance(b, Expr):
        a = as_expr(a, like=b)
    a = as_expr(a)
    return call(ops.where, as_expr(cond), a, as_expr(b, like=a))


# ---------------------------------------------------------------------------------------------
# Unary math and activations


def _negative_form(e: Emitter, x: str) -> str:
    if e.dtype == "bool":
        e.unsupported("negative of bools")
    return f"(-{x})"


@elementwise("negative", 1, Rule.PROMOTE, _negative_form, exports=__all__)
def negative(x: ExprLike) -> Call:
    """``-x``."""
    return _unary(ops.negative, x)


@elementwise("exp", 1, Rule.FLOAT, lambda e, x: e.exp(x), exports=__all__)
def exp(x: ExprLike) -> Call:
    """e ** x."""
    return _unary(ops.exp, x)


@elementwise("log", 1, Rule.FLOAT, _np("log"), exports=__all__)
def log(x: ExprLike) -> Call:
    """The natural logarithm."""
    return _unary(ops.log, x)


@elementwise("log1p", 1, Rule.FLOAT, _np("log1p"), exports=__all__)
def log1p(x: ExprLike) -> Call:
    """log(1 + x), precise for tiny x (where ``log(1 + x)`` loses it to rounding)."""
    return _unary(ops.log1p, x)


@elementwise("expm1", 1, Rule.FLOAT, _np("expm1"), exports=__all__)
def expm1(x: ExprLike) -> Call:
    """exp(x) - 1, precise for tiny x (where ``exp(x) - 1`` loses it to rounding)."""
    return _unary(ops.expm1, x)


@elementwise("logaddexp", 2, Rule.FLOAT, _np("logaddexp"), exports=__all__)
def logaddexp(a: ExprLike, b: ExprLike) -> Call:
    """log(exp(a) + exp(b)) with broadcasting, without overflow (-inf where both are)."""
    return _binary(ops.logaddexp, a, b)


@elementwise("sqrt", 1, Rule.FLOAT, _np("sqrt"), exports=__all__)
def sqrt(x: ExprLike) -> Call:
    """The square root."""
    return _unary(ops.sqrt, x)


@elementwise("rsqrt", 1, Rule.FLOAT, lambda e, x: f"({e.lit(1.0)} / np.sqrt({x}))", exports=__all__)
def rsqrt(x: ExprLike) -> Call:
    """1 / sqrt(x)."""
    return _unary(ops.rsqrt, x)


@elementwise("tanh", 1, Rule.FLOAT, lambda e, x: e.tanh(x), exports=__all__)
def tanh(x: ExprLike) -> Call:
    """The hyperbolic tangent."""
    return _unary(ops.tanh, x)


@elementwise("sigmoid", 1, Rule.FLOAT, lambda e, x: e.sigmoid(x), exports=__all__)
def sigmoid(x: ExprLike) -> Call:
    """1 / (1 + exp(-x))."""
    return _unary(ops.sigmoid, x)


@elementwise("erf", 1, Rule.FLOAT, lambda e, x: e.erf(x), exports=__all__)
def erf(x: ExprLike) -> Call:
    """The error function."""
    return _unary(ops.erf, x)


def _abs_form(e: Emitter, x: str) -> str:
    return x if e.dtype in ("bool", "uint8") else f"np.abs({x})"


@elementwise("abs", 1, Rule.PROMOTE, _abs_form, exports=__all__)
def abs(x: ExprLike) -> Call:
    """The absolute value."""
    return _unary(ops.abs, x)


@elementwise(
    "sign",
    1,
    Rule.PROMOTE,
    lambda e, x: x if e.dtype == "bool" else f"np.sign({x})",
    exports=__all__,
)
def sign(x: ExprLike) -> Call:
    """-1, 0 or 1 by the sign of x."""
    return _unary(ops.sign, x)


@elementwise("sin", 1, Rule.FLOAT, _np("sin"), exports=__all__)
def sin(x: ExprLike) -> Call:
    """The sine."""
    return _unary(ops.sin, x)


@elementwise("cos", 1, Rule.FLOAT, _np("cos"), exports=__all__)
def cos(x: ExprLike) -> Call:
    """The cosine."""
    return _unary(ops.cos, x)


@elementwise("asin", 1, Rule.FLOAT, _np("arcsin"), exports=__all__)
def asin(x: ExprLike) -> Call:
    """The arcsine (inverse sine), in [-pi/2, pi/2]; NaN outside [-1, 1]."""
    return _unary(ops.asin, x)


@elementwise("acos", 1, Rule.FLOAT, _np("arccos"), exports=__all__)
def acos(x: ExprLike) -> Call:
    """The arccosine (inverse cosine), in [0, pi]; NaN outside [-1, 1]."""
    return _unary(ops.acos, x)


@elementwise("atan", 1, Rule.FLOAT, _np("arctan"), exports=__all__)
def atan(x: ExprLike) -> Call:
    """The arctangent (inverse tangent), in (-pi/2, pi/2)."""
    return _unary(ops.atan, x)


@elementwise("asinh", 1, Rule.FLOAT, _np("arcsinh"), exports=__all__)
def asinh(x: ExprLike) -> Call:
    """The inverse hyperbolic sine."""
    return _unary(ops.asinh, x)


@elementwise("acosh", 1, Rule.FLOAT, _np("arccosh"), exports=__all__)
def acosh(x: ExprLike) -> Call:
    """The inverse hyperbolic cosine; NaN below 1."""
    return _unary(ops.acosh, x)


@elementwise("atanh", 1, Rule.FLOAT, _np("arctanh"), exports=__all__)
def atanh(x: ExprLike) -> Call:
    """The inverse hyperbolic tangent; +-inf at +-1, NaN outside [-1, 1]."""
    return _unary(ops.atanh, x)


def _rounding(fn: str):  # noqa: ANN202 - a scalar form
    """NumPy's ``fn`` on floats; integers pass through."""
    return lambda e, x: f"np.{fn}({x})" if e.is_float else x


@elementwise("floor", 1, Rule.PROMOTE, _rounding("floor"), exports=__all__)
def floor(x: ExprLike) -> Call:
    """Round toward minus infinity (integers pass through)."""
    return _unary(ops.floor, x)


@elementwise("ceil", 1, Rule.PROMOTE, _rounding("ceil"), exports=__all__)
def ceil(x: ExprLike) -> Call:
    """Round toward plus infinity (integers pass through)."""
    return _unary(ops.ceil, x)


@elementwise("round", 1, Rule.PROMOTE, _rounding("rint"), exports=__all__)
def round(x: ExprLike) -> Call:
    """Round half to even, as NumPy and ONNX Round (integers pass through)."""
    return _unary(ops.round, x)


def _relu_form(e: Emitter, x: str) -> str:
    return x if e.dtype == "bool" else f"np.maximum({x}, {e.lit(0)})"


@elementwise("relu", 1, Rule.PROMOTE, _relu_form, exports=__all__)
def relu(x: ExprLike) -> Call:
    """max(x, 0)."""
    return _unary(ops.relu, x)


def _leaky_relu_form(e: Emitter, x: str) -> str:
    return f"({x} if {x} > {e.lit(0)} else {x} * {e.lit(e.attrs['alpha'])})"


@elementwise("leaky_relu", 1, Rule.FLOAT, _leaky_relu_form, exports=__all__)
def leaky_relu(x: ExprLike, alpha: float = 0.01) -> Call:
    """x where x > 0, else alpha * x."""
    return call(ops.leaky_relu, as_expr(x), alpha=check_float("leaky_relu", "alpha", alpha))


def _gelu_form(e: Emitter, x: str) -> str:
    return e.gelu(x, tanh=e.attrs.get("approximate") == "tanh")


@elementwise("gelu", 1, Rule.FLOAT, _gelu_form, exports=__all__)
def gelu(x: ExprLike, approximate: str = "none") -> Call:
    """x * Phi(x) with the erf form, or the tanh approximation (``approximate="tanh"``)."""
    mode = check_choice("gelu", "approximate", approximate, ("none", "tanh"))
    return call(ops.gelu, as_expr(x), approximate=mode)


@elementwise("silu", 1, Rule.FLOAT, lambda e, x: f"({x} * {e.sigmoid(x)})", exports=__all__)
def silu(x: ExprLike) -> Call:
    """x * sigmoid(x) (swish)."""
    return _unary(ops.silu, x)


def _softplus_form(e: Emitter, x: str) -> str:
    """The stable form, as the reference: max(x, 0) + log1p(exp(-|x|))."""
    return f"(np.maximum({x}, {e.lit(0)}) + np.log1p({e.exp(f'(-np.abs({x}))')}))"


@elementwise("softplus", 1, Rule.FLOAT, _softplus_form, exports=__all__)
def softplus(x: ExprLike) -> Call:
    """log(1 + exp(x))."""
    return _unary(ops.softplus, x)


def _clip_form(e: Emitter, x: str) -> str:
    out = x
    if e.attrs.get("a_min") is not None:
        out = f"np.maximum({out}, {e.lit(e.attrs['a_min'])})"
    if e.attrs.get("a_max") is not None:
        out = f"np.minimum({out}, {e.lit(e.attrs['a_max'])})"
    return out


@elementwise("clip", 1, Rule.PROMOTE, _clip_form, exports=__all__)
def clip(x: ExprLike, a_min: float | None = None, a_max: float | None = None) -> Call:
    """x limited to [a_min, a_max]; a None bound is no bound."""
    lo = None if a_min is None else check_float("clip", "a_min", a_min)
    hi = None if a_max is None else check_float("clip", "a_max", a_max)
    if lo is not None and hi is not None and lo > hi:
        raise IRError(f"clip: a_min {lo} is greater than a_max {hi}")
    return call(ops.clip, as_expr(x), a_min=lo, a_max=hi)


def _cast_rule(op: Op, call_: Call, args: list[TensorType]) -> Type:
    return TensorType(args[0].shape, call_.attrs["dtype"])


# The conversion to the result dtype happens on the operand, as for every op (compute "result").
@elementwise("cast", 1, _cast_rule, lambda e, x: x, exports=__all__)
def cast(x: ExprLike, dtype: str) -> Call:
    """x converted to ``dtype`` (NumPy's astype)."""
    return call(ops.cast, as_expr(x), dtype=check_dtype_attr("cast", dtype))


# ---------------------------------------------------------------------------------------------
# Not elementwise for the jit: a numpy kernel of its own


define_op("bitcast", OpPattern.OPAQUE, 1)
__all__.append("bitcast")


@rule(ops.bitcast)
def _infer_bitcast(call_: Call, args: list[TensorType]) -> Type:
    (x,), dtype = args, call_.attrs["dtype"]
    if x.dtype is not None and numpy_dtype(x.dtype).itemsize != numpy_dtype(dtype).itemsize:
        raise IRError(
            f"bitcast: {x.dtype} and {dtype} differ in size "
            f"({numpy_dtype(x.dtype).itemsize} and {numpy_dtype(dtype).itemsize} bytes)"
        )
    return TensorType(x.shape, dtype)


def bitcast(x: ExprLike, dtype: str) -> Call:
    """x's bits read as ``dtype``, which must have the same size (NumPy's view)."""
    return call(ops.bitcast, as_expr(x), dtype=check_dtype_attr("bitcast", dtype))
