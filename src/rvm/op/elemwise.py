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
"""

from __future__ import annotations

from rvm.dtypes import numpy_dtype
from rvm.errors import IRError
from rvm.ir.expr import Call, Expr, Op
from rvm.ir.op import OpPattern
from rvm.ir.types import FLOAT_DTYPES, INT_DTYPES, TensorType, Type, promote_dtypes
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
from rvm.op.shapes import broadcast_shapes, fmt, rule

__all__ = [
    "abs",
    "acos",
    "acosh",
    "add",
    "asin",
    "asinh",
    "atan",
    "atanh",
    "bitcast",
    "bitwise_and",
    "bitwise_not",
    "bitwise_or",
    "bitwise_xor",
    "cast",
    "ceil",
    "clip",
    "cos",
    "divide",
    "equal",
    "erf",
    "exp",
    "floor",
    "floor_divide",
    "fmod",
    "gelu",
    "greater",
    "greater_equal",
    "leaky_relu",
    "left_shift",
    "less",
    "less_equal",
    "log",
    "logical_and",
    "logical_not",
    "logical_or",
    "maximum",
    "minimum",
    "mod",
    "multiply",
    "negative",
    "not_equal",
    "power",
    "relu",
    "right_shift",
    "round",
    "rsqrt",
    "sigmoid",
    "sign",
    "silu",
    "sin",
    "softplus",
    "sqrt",
    "subtract",
    "tanh",
    "where",
]

# The ops of this module (`rvm.op.core.define_op`).
# Binary arithmetic (numpy broadcasting, dtype promotion).
define_op("add", OpPattern.BROADCAST, 2)
define_op("subtract", OpPattern.BROADCAST, 2)
define_op("multiply", OpPattern.BROADCAST, 2)
define_op("divide", OpPattern.BROADCAST, 2)
define_op("floor_divide", OpPattern.BROADCAST, 2)
define_op("mod", OpPattern.BROADCAST, 2)
define_op("power", OpPattern.BROADCAST, 2)
define_op("maximum", OpPattern.BROADCAST, 2)
define_op("minimum", OpPattern.BROADCAST, 2)
define_op("fmod", OpPattern.BROADCAST, 2)
# Bitwise ops on integers (and bools for and/or/xor/not).
define_op("bitwise_and", OpPattern.BROADCAST, 2)
define_op("bitwise_or", OpPattern.BROADCAST, 2)
define_op("bitwise_xor", OpPattern.BROADCAST, 2)
define_op("bitwise_not", OpPattern.ELEMWISE, 1)
define_op("left_shift", OpPattern.BROADCAST, 2)
define_op("right_shift", OpPattern.BROADCAST, 2)
# Comparisons and logic (bool results).
define_op("equal", OpPattern.BROADCAST, 2)
define_op("not_equal", OpPattern.BROADCAST, 2)
define_op("less", OpPattern.BROADCAST, 2)
define_op("less_equal", OpPattern.BROADCAST, 2)
define_op("greater", OpPattern.BROADCAST, 2)
define_op("greater_equal", OpPattern.BROADCAST, 2)
define_op("logical_and", OpPattern.BROADCAST, 2)
define_op("logical_or", OpPattern.BROADCAST, 2)
define_op("logical_not", OpPattern.ELEMWISE, 1)
define_op("where", OpPattern.BROADCAST, 3)
# Unary math and activations.
define_op("negative", OpPattern.ELEMWISE, 1)
define_op("exp", OpPattern.ELEMWISE, 1)
define_op("log", OpPattern.ELEMWISE, 1)
define_op("sqrt", OpPattern.ELEMWISE, 1)
define_op("rsqrt", OpPattern.ELEMWISE, 1)
define_op("tanh", OpPattern.ELEMWISE, 1)
define_op("sigmoid", OpPattern.ELEMWISE, 1)
define_op("erf", OpPattern.ELEMWISE, 1)
define_op("abs", OpPattern.ELEMWISE, 1)
define_op("sign", OpPattern.ELEMWISE, 1)
define_op("sin", OpPattern.ELEMWISE, 1)
define_op("cos", OpPattern.ELEMWISE, 1)
define_op("asin", OpPattern.ELEMWISE, 1)
define_op("acos", OpPattern.ELEMWISE, 1)
define_op("atan", OpPattern.ELEMWISE, 1)
define_op("asinh", OpPattern.ELEMWISE, 1)
define_op("acosh", OpPattern.ELEMWISE, 1)
define_op("atanh", OpPattern.ELEMWISE, 1)
define_op("floor", OpPattern.ELEMWISE, 1)
define_op("ceil", OpPattern.ELEMWISE, 1)
define_op("round", OpPattern.ELEMWISE, 1)
define_op("relu", OpPattern.ELEMWISE, 1)
define_op("leaky_relu", OpPattern.ELEMWISE, 1)
define_op("gelu", OpPattern.ELEMWISE, 1)
define_op("silu", OpPattern.ELEMWISE, 1)
define_op("softplus", OpPattern.ELEMWISE, 1)
define_op("clip", OpPattern.ELEMWISE, 1)
define_op("cast", OpPattern.ELEMWISE, 1)
define_op("bitcast", OpPattern.OPAQUE, 1)  # no jit compute: a numpy kernel of its own

# ---------------------------------------------------------------------------------------------
# Rules


def _binary_rule(op: Op, result_dtype: str | None = None, *, integer_only: bool = False) -> None:
    @rule(op)
    def infer_binary(call_: Call, args: list[TensorType]) -> Type:
        a, b = args
        if integer_only:
            _integer_input(op, a)
            _integer_input(op, b)
        shape = broadcast_shapes(op.name, a.shape, b.shape)
        return TensorType(shape, result_dtype or promote_dtypes(a.dtype, b.dtype))


def _integer_input(op: Op, x: TensorType) -> None:
    """Bitwise ops take integers; and/or/xor/not take bools too, shifts do not."""
    allowed = INT_DTYPES if op in (ops.left_shift, ops.right_shift) else INT_DTYPES | {"bool"}
    if x.dtype is not None and x.dtype not in allowed:
        what = "an integer" if op in (ops.left_shift, ops.right_shift) else "an integer or bool"
        raise IRError(f"{op.name}: expects {what} tensor, got {x.dtype} {fmt(x.shape)}")


def _unary_rule(op: Op, *, float_only: bool, result_dtype: str | None = None) -> None:
    @rule(op)
    def infer_unary(call_: Call, args: list[TensorType]) -> Type:
        (x,) = args
        if float_only and x.dtype is not None and x.dtype not in FLOAT_DTYPES:
            raise IRError(f"{op.name}: expects a float tensor, got {x.dtype} {fmt(x.shape)}")
        return TensorType(x.shape, result_dtype or x.dtype)


for _op in (
    ops.add,
    ops.subtract,
    ops.multiply,
    ops.divide,
    ops.floor_divide,
    ops.mod,
    ops.power,
    ops.maximum,
    ops.minimum,
    ops.fmod,
):
    _binary_rule(_op)
for _op in (ops.bitwise_and, ops.bitwise_or, ops.bitwise_xor, ops.left_shift, ops.right_shift):
    _binary_rule(_op, integer_only=True)
for _op in (
    ops.equal,
    ops.not_equal,
    ops.less,
    ops.less_equal,
    ops.greater,
    ops.greater_equal,
    ops.logical_and,
    ops.logical_or,
):
    _binary_rule(_op, "bool")
for _op in (
    ops.exp,
    ops.log,
    ops.sqrt,
    ops.rsqrt,
    ops.tanh,
    ops.sigmoid,
    ops.erf,
    ops.sin,
    ops.cos,
    ops.asin,
    ops.acos,
    ops.atan,
    ops.asinh,
    ops.acosh,
    ops.atanh,
    ops.gelu,
    ops.silu,
    ops.softplus,
    ops.leaky_relu,
):
    _unary_rule(_op, float_only=True)
for _op in (ops.negative, ops.abs, ops.sign, ops.floor, ops.ceil, ops.round, ops.relu, ops.clip):
    _unary_rule(_op, float_only=False)
_unary_rule(ops.logical_not, float_only=False, result_dtype="bool")


@rule(ops.bitwise_not)
def _infer_bitwise_not(call_: Call, args: list[TensorType]) -> Type:
    _integer_input(ops.bitwise_not, args[0])
    return args[0]


@rule(ops.where)
def _infer_where(call_: Call, args: list[TensorType]) -> Type:
    cond, a, b = args
    if cond.dtype not in (None, "bool"):
        raise IRError(f"where: the condition must be a bool tensor, got {cond.dtype}")
    shape = broadcast_shapes("where", cond.shape, a.shape, b.shape)
    return TensorType(shape, promote_dtypes(a.dtype, b.dtype))


@rule(ops.cast)
def _infer_cast(call_: Call, args: list[TensorType]) -> Type:
    return TensorType(args[0].shape, call_.attrs["dtype"])


@rule(ops.bitcast)
def _infer_bitcast(call_: Call, args: list[TensorType]) -> Type:
    (x,), dtype = args, call_.attrs["dtype"]
    if x.dtype is not None and numpy_dtype(x.dtype).itemsize != numpy_dtype(dtype).itemsize:
        raise IRError(
            f"bitcast: {x.dtype} and {dtype} differ in size "
            f"({numpy_dtype(x.dtype).itemsize} and {numpy_dtype(dtype).itemsize} bytes)"
        )
    return TensorType(x.shape, dtype)


# ---------------------------------------------------------------------------------------------
# Builders


def _binary(op: Op, a: ExprLike, b: ExprLike) -> Call:
    if not isinstance(a, Expr) and isinstance(b, Expr):
        a = as_expr(a, like=b)
    a = as_expr(a)
    return call(op, a, as_expr(b, like=a))


def add(a: ExprLike, b: ExprLike) -> Call:
    """``a + b`` with broadcasting."""
    return _binary(ops.add, a, b)


def subtract(a: ExprLike, b: ExprLike) -> Call:
    """``a - b`` with broadcasting."""
    return _binary(ops.subtract, a, b)


def multiply(a: ExprLike, b: ExprLike) -> Call:
    """``a * b`` with broadcasting."""
    return _binary(ops.multiply, a, b)


def divide(a: ExprLike, b: ExprLike) -> Call:
    """``a / b``; integer division truncates toward zero."""
    return _binary(ops.divide, a, b)


def floor_divide(a: ExprLike, b: ExprLike) -> Call:
    """``a // b`` (rounds toward minus infinity)."""
    return _binary(ops.floor_divide, a, b)


def mod(a: ExprLike, b: ExprLike) -> Call:
    """``a % b`` with the sign of ``b``."""
    return _binary(ops.mod, a, b)


def fmod(a: ExprLike, b: ExprLike) -> Call:
    """The remainder of ``a / b`` with the sign of ``a`` (C's fmod)."""
    return _binary(ops.fmod, a, b)


def bitwise_and(a: ExprLike, b: ExprLike) -> Call:
    """``a & b`` on integers (logical and on bools)."""
    return _binary(ops.bitwise_and, a, b)


def bitwise_or(a: ExprLike, b: ExprLike) -> Call:
    """``a | b`` on integers (logical or on bools)."""
    return _binary(ops.bitwise_or, a, b)


def bitwise_xor(a: ExprLike, b: ExprLike) -> Call:
    """``a ^ b`` on integers (logical xor on bools)."""
    return _binary(ops.bitwise_xor, a, b)


def bitwise_not(x: ExprLike) -> Call:
    """``~x`` on integers (logical not on bools)."""
    return call(ops.bitwise_not, as_expr(x))


def left_shift(a: ExprLike, b: ExprLike) -> Call:
    """``a << b``, wrapping within the dtype; a count outside [0, bits) gives 0."""
    return _binary(ops.left_shift, a, b)


def right_shift(a: ExprLike, b: ExprLike) -> Call:
    """``a >> b`` (arithmetic for signed dtypes); a count outside [0, bits) gives the sign
    fill: 0, or -1 for a negative value."""
    return _binary(ops.right_shift, a, b)


def power(a: ExprLike, b: ExprLike) -> Call:
    """``a ** b``."""
    return _binary(ops.power, a, b)


def maximum(a: ExprLike, b: ExprLike) -> Call:
    """The elementwise maximum."""
    return _binary(ops.maximum, a, b)


def minimum(a: ExprLike, b: ExprLike) -> Call:
    """The elementwise minimum."""
    return _binary(ops.minimum, a, b)


def equal(a: ExprLike, b: ExprLike) -> Call:
    """``a == b`` as a bool tensor."""
    return _binary(ops.equal, a, b)


def not_equal(a: ExprLike, b: ExprLike) -> Call:
    """``a != b`` as a bool tensor."""
    return _binary(ops.not_equal, a, b)


def less(a: ExprLike, b: ExprLike) -> Call:
    """``a < b`` as a bool tensor."""
    return _binary(ops.less, a, b)


def less_equal(a: ExprLike, b: ExprLike) -> Call:
    """``a <= b`` as a bool tensor."""
    return _binary(ops.less_equal, a, b)


def greater(a: ExprLike, b: ExprLike) -> Call:
    """``a > b`` as a bool tensor."""
    return _binary(ops.greater, a, b)


def greater_equal(a: ExprLike, b: ExprLike) -> Call:
    """``a >= b`` as a bool tensor."""
    return _binary(ops.greater_equal, a, b)


def logical_and(a: ExprLike, b: ExprLike) -> Call:
    """Elementwise logical and (nonzero is true)."""
    return _binary(ops.logical_and, a, b)


def logical_or(a: ExprLike, b: ExprLike) -> Call:
    """Elementwise logical or (nonzero is true)."""
    return _binary(ops.logical_or, a, b)


def logical_not(x: ExprLike) -> Call:
    """Elementwise logical not (nonzero is true)."""
    return call(ops.logical_not, as_expr(x))


def where(cond: ExprLike, a: ExprLike, b: ExprLike) -> Call:
    """``a`` where ``cond`` (a bool tensor) holds, else ``b``; all three broadcast."""
    if not isinstance(a, Expr) and isinstance(b, Expr):
        a = as_expr(a, like=b)
    a = as_expr(a)
    return call(ops.where, as_expr(cond), a, as_expr(b, like=a))


def _unary(op: Op, x: ExprLike) -> Call:
    return call(op, as_expr(x))


def negative(x: ExprLike) -> Call:
    """``-x``."""
    return _unary(ops.negative, x)


def exp(x: ExprLike) -> Call:
    """e ** x."""
    return _unary(ops.exp, x)


def log(x: ExprLike) -> Call:
    """The natural logarithm."""
    return _unary(ops.log, x)


def sqrt(x: ExprLike) -> Call:
    """The square root."""
    return _unary(ops.sqrt, x)


def rsqrt(x: ExprLike) -> Call:
    """1 / sqrt(x)."""
    return _unary(ops.rsqrt, x)


def tanh(x: ExprLike) -> Call:
    """The hyperbolic tangent."""
    return _unary(ops.tanh, x)


def sigmoid(x: ExprLike) -> Call:
    """1 / (1 + exp(-x))."""
    return _unary(ops.sigmoid, x)


def erf(x: ExprLike) -> Call:
    """The error function."""
    return _unary(ops.erf, x)


def abs(x: ExprLike) -> Call:
    """The absolute value."""
    return _unary(ops.abs, x)


def sign(x: ExprLike) -> Call:
    """-1, 0 or 1 by the sign of x."""
    return _unary(ops.sign, x)


def sin(x: ExprLike) -> Call:
    """The sine."""
    return _unary(ops.sin, x)


def cos(x: ExprLike) -> Call:
    """The cosine."""
    return _unary(ops.cos, x)


def asin(x: ExprLike) -> Call:
    """The arcsine (inverse sine), in [-pi/2, pi/2]; NaN outside [-1, 1]."""
    return _unary(ops.asin, x)


def acos(x: ExprLike) -> Call:
    """The arccosine (inverse cosine), in [0, pi]; NaN outside [-1, 1]."""
    return _unary(ops.acos, x)


def atan(x: ExprLike) -> Call:
    """The arctangent (inverse tangent), in (-pi/2, pi/2)."""
    return _unary(ops.atan, x)


def asinh(x: ExprLike) -> Call:
    """The inverse hyperbolic sine."""
    return _unary(ops.asinh, x)


def acosh(x: ExprLike) -> Call:
    """The inverse hyperbolic cosine; NaN below 1."""
    return _unary(ops.acosh, x)


def atanh(x: ExprLike) -> Call:
    """The inverse hyperbolic tangent; +-inf at +-1, NaN outside [-1, 1]."""
    return _unary(ops.atanh, x)


def floor(x: ExprLike) -> Call:
    """Round toward minus infinity (integers pass through)."""
    return _unary(ops.floor, x)


def ceil(x: ExprLike) -> Call:
    """Round toward plus infinity (integers pass through)."""
    return _unary(ops.ceil, x)


def round(x: ExprLike) -> Call:
    """Round half to even, as NumPy and ONNX Round (integers pass through)."""
    return _unary(ops.round, x)


def relu(x: ExprLike) -> Call:
    """max(x, 0)."""
    return _unary(ops.relu, x)


def leaky_relu(x: ExprLike, alpha: float = 0.01) -> Call:
    """x where x > 0, else alpha * x."""
    return call(ops.leaky_relu, as_expr(x), alpha=check_float("leaky_relu", "alpha", alpha))


def gelu(x: ExprLike, approximate: str = "none") -> Call:
    """x * Phi(x) with the erf form, or the tanh approximation (``approximate="tanh"``)."""
    mode = check_choice("gelu", "approximate", approximate, ("none", "tanh"))
    return call(ops.gelu, as_expr(x), approximate=mode)


def silu(x: ExprLike) -> Call:
    """x * sigmoid(x) (swish)."""
    return _unary(ops.silu, x)


def softplus(x: ExprLike) -> Call:
    """log(1 + exp(x))."""
    return _unary(ops.softplus, x)


def clip(x: ExprLike, a_min: float | None = None, a_max: float | None = None) -> Call:
    """x limited to [a_min, a_max]; a None bound is no bound."""
    lo = None if a_min is None else check_float("clip", "a_min", a_min)
    hi = None if a_max is None else check_float("clip", "a_max", a_max)
    if lo is not None and hi is not None and lo > hi:
        raise IRError(f"clip: a_min {lo} is greater than a_max {hi}")
    return call(ops.clip, as_expr(x), a_min=lo, a_max=hi)


def cast(x: ExprLike, dtype: str) -> Call:
    """x converted to ``dtype`` (NumPy's astype)."""
    return call(ops.cast, as_expr(x), dtype=check_dtype_attr("cast", dtype))


def bitcast(x: ExprLike, dtype: str) -> Call:
    """x's bits read as ``dtype``, which must have the same size (NumPy's view)."""
    return call(ops.bitcast, as_expr(x), dtype=check_dtype_attr("bitcast", dtype))
