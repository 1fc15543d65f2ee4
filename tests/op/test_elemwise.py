from __future__ import annotations

import math

import numpy as np
import pytest
from op_testing import check, rand, var

from rvm import op
from rvm.errors import IRError
from rvm.ir import AnyType, Constant, infer_type, tensor

RNG_BITS = np.random.default_rng(10)
BINARY = {
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "divide": np.divide,
    "floor_divide": np.floor_divide,
    "mod": np.mod,
    "power": np.power,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "logaddexp": np.logaddexp,
}
COMPARE = {
    "equal": np.equal,
    "not_equal": np.not_equal,
    "less": np.less,
    "less_equal": np.less_equal,
    "greater": np.greater,
    "greater_equal": np.greater_equal,
    "logical_and": np.logical_and,
    "logical_or": np.logical_or,
}


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_binary_broadcast(name, dtype):
    x, y = var("x", (2, 3), dtype), var("y", (3,), dtype)
    a, b = rand((2, 3), dtype, 0.5, 2.0), rand((3,), dtype, 0.5, 2.0)
    out = check(getattr(op, name)(x, y), {x: a, y: b}, tensor((2, 3), dtype))
    np.testing.assert_allclose(out, BINARY[name](a, b), rtol=1e-3)


@pytest.mark.parametrize("name", sorted(COMPARE))
def test_compare_gives_bool(name):
    x, y = var("x", (4, 1)), var("y", (1, 5))
    a, b = rand((4, 1)), rand((1, 5))
    out = check(getattr(op, name)(x, y), {x: a, y: b}, tensor((4, 5), "bool"))
    np.testing.assert_array_equal(out, COMPARE[name](a, b))


def test_promotion_and_scalars_keep_dtype():
    x = var("x", (2,), "float16")
    call = op.add(x, 1.5)
    assert isinstance(call.args[1], Constant) and call.args[1].data.dtype == np.float16
    check(call, {x: rand((2,), "float16")}, tensor((2,), "float16"))
    check(op.multiply(2, x), {x: rand((2,), "float16")}, tensor((2,), "float16"))
    i = var("i", (2,), "int32")
    f = var("f", (2,), "float32")
    out = check(op.add(i, f), {i: rand((2,), "int32"), f: rand((2,))}, tensor((2,), "float64"))
    assert out.dtype == np.float64


def test_integer_divide_truncates_and_mod_follows_python():
    a_ = np.array([7, -7, 7, -7, 6], "int32")
    b_ = np.array([2, 2, -2, -2, 3], "int32")
    a, b = var("a", (5,), "int32"), var("b", (5,), "int32")
    np.testing.assert_array_equal(check(op.divide(a, b), {a: a_, b: b_}), [3, -3, -3, 3, 2])
    np.testing.assert_array_equal(check(op.floor_divide(a, b), {a: a_, b: b_}), a_ // b_)
    np.testing.assert_array_equal(check(op.mod(a, b), {a: a_, b: b_}), a_ % b_)


def test_python_operators_build_ops():
    x, y = var("x", (2, 3)), var("y", (2, 3))
    names = {
        x + y: "add", x - y: "subtract", x * y: "multiply", x / y: "divide",
        x // y: "floor_divide", x % y: "mod", x ** y: "power", x < y: "less",
        x <= y: "less_equal", x > y: "greater", x >= y: "greater_equal", -x: "negative",
    }  # fmt: skip
    for call, name in names.items():
        assert call.callee.name == name
    assert (x == 1.0).callee.name == "equal" and (x != 1.0).callee.name == "not_equal"
    w = var("w", (3, 4))
    assert infer_type(x @ w) == tensor((2, 4), "float32")
    assert infer_type(x < 0.0) == tensor((2, 3), "bool")


def test_logical_not_and_where():
    c, a, b = var("c", (2, 1), "bool"), var("a", (3,)), var("b", (2, 3))
    cv, av, bv = rand((2, 1), "bool"), rand((3,)), rand((2, 3))
    out = check(op.where(c, a, b), {c: cv, a: av, b: bv}, tensor((2, 3), "float32"))
    np.testing.assert_array_equal(out, np.where(cv, av, bv))
    check(op.where(c, 0.0, b), {c: cv, b: bv}, tensor((2, 3), "float32"))
    out = check(op.logical_not(c), {c: cv}, tensor((2, 1), "bool"))
    np.testing.assert_array_equal(out, ~cv)
    with pytest.raises(IRError, match="where: the condition must be a bool"):
        infer_type(op.where(a, a, b))


UNARY = {
    "negative": np.negative,
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "rsqrt": lambda v: 1 / np.sqrt(v),
    "tanh": np.tanh,
    "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
    "erf": np.vectorize(math.erf),
    "abs": np.abs,
    "sign": np.sign,
    "sin": np.sin,
    "cos": np.cos,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
    "floor": np.floor,
    "ceil": np.ceil,
    "round": np.round,
    "relu": lambda v: np.maximum(v, 0),
    "silu": lambda v: v / (1 + np.exp(-v)),
    "softplus": lambda v: np.log1p(np.exp(v)),
    "log1p": np.log1p,
    "expm1": np.expm1,
}

UNARY_DOMAIN = {  # (low, high) inside the op's domain, for those not defined on (-2, 2)
    "log": (0.1, 3.0),
    "log1p": (-0.9, 3.0),
    "sqrt": (0.1, 3.0),
    "rsqrt": (0.1, 3.0),
    "asin": (-0.95, 0.95),
    "acos": (-0.95, 0.95),
    "atanh": (-0.95, 0.95),
    "acosh": (1.0, 4.0),
}


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_unary(name, dtype):
    x = var("x", ("n", 3), dtype)
    a = rand((4, 3), dtype, *UNARY_DOMAIN.get(name, (-2.0, 2.0)))
    assert infer_type(getattr(op, name)(x)) == tensor(("n", 3), dtype)
    y = var("y", (4, 3), dtype)
    out = check(getattr(op, name)(y), {y: a}, tensor((4, 3), dtype))
    np.testing.assert_allclose(out, UNARY[name](a.astype("float64")), rtol=1e-5, atol=1e-6)


def test_unary_tails_and_integers():
    x = var("x", (4,))
    a = np.array([-80.0, -20.0, 20.0, 100.0], "float32")
    np.testing.assert_allclose(
        check(op.sigmoid(x), {x: a}), 1 / (1 + np.exp(-a.astype("f8"))), rtol=1e-6
    )
    np.testing.assert_allclose(
        check(op.softplus(x), {x: a}), np.log1p(np.exp(a.astype("f8"))), rtol=1e-6
    )
    i = var("i", (3,), "int32")
    iv = np.array([-3, 0, 5], "int32")
    for name in ("abs", "sign", "floor", "ceil", "round", "relu", "negative"):
        check(getattr(op, name)(i), {i: iv}, tensor((3,), "int32"))
    with pytest.raises(IRError, match=r"exp: expects a float tensor, got int32 \(3,\)"):
        infer_type(op.exp(i))


def test_gelu_leaky_relu_clip_cast():
    x = var("x", (2, 5))
    a = rand((2, 5), low=-4, high=4)
    exact = 0.5 * a * (1 + np.vectorize(math.erf)(a / np.sqrt(2)))
    np.testing.assert_allclose(check(op.gelu(x), {x: a}), exact, rtol=1e-5, atol=1e-6)
    approx = check(op.gelu(x, approximate="tanh"), {x: a})
    np.testing.assert_allclose(approx, exact, atol=1e-3)
    out = check(op.leaky_relu(x, alpha=0.2), {x: a}, tensor((2, 5), "float32"))
    np.testing.assert_allclose(out, np.where(a > 0, a, 0.2 * a), rtol=1e-6)
    out = check(op.clip(x, a_min=-1, a_max=0.5), {x: a}, tensor((2, 5), "float32"))
    np.testing.assert_array_equal(out, np.clip(a, -1, 0.5))
    out = check(op.cast(x, "int32"), {x: a}, tensor((2, 5), "int32"))
    np.testing.assert_array_equal(out, a.astype("int32"))
    out = check(op.cast(x, np.float16), {x: a}, tensor((2, 5), "float16"))


def test_bad_attrs():
    x = var("x", (2,))
    with pytest.raises(IRError, match="cast: unsupported dtype 'float8'"):
        op.cast(x, "float8")
    with pytest.raises(IRError, match="gelu: approximate must be one of"):
        op.gelu(x, approximate="fast")
    with pytest.raises(IRError, match="clip: a_min 2.0 is greater than a_max 1.0"):
        op.clip(x, 2, 1)
    with pytest.raises(IRError, match="leaky_relu: alpha must be a number"):
        op.leaky_relu(x, alpha="0.1")


def test_broadcast_errors_name_op_and_shapes():
    x, y = var("x", (2, 3)), var("y", (4, 3))
    with pytest.raises(IRError, match=r"add: cannot broadcast shapes \(2, 3\) and \(4, 3\)"):
        infer_type(op.add(x, y))
    with pytest.raises(IRError, match=r"less: cannot broadcast"):
        infer_type(x < y)


def test_symbolic_broadcast():
    cases = [
        (("n", 1), (1, 4), ("n", 4)),
        (("n",), ("n",), ("n",)),
        (("n", 3), (3,), ("n", 3)),
        ((5,), ("m",), (5,)),
        (("n",), ("m",), (None,)),
        ((1,), (None,), (None,)),
        ((4,), (None,), (4,)),
        (("n", 1, 3), ("k", 1), ("n", "k", 3)),
    ]
    for a, b, out in cases:
        assert infer_type(op.add(var("a", a), var("b", b))) == tensor(out, "float32"), (a, b)


def test_unknown_types_give_unknown_results():
    from rvm.ir import Var

    u = Var("u")
    assert infer_type(op.exp(u)) == AnyType()  # not typed yet, like u: gives way in joins
    assert infer_type(op.less(u, 1.0)) == tensor(None, "bool")  # the dtype is known anyway
    x = Var("x", tensor(None, "float32"))
    assert infer_type(op.add(x, var("y", (2, 3)))) == tensor(None, "float32")
    w = Var("w", tensor((2, 3), None))  # a dtype known only at run time stays unknown
    assert infer_type(op.add(w, var("y", (2, 3)))) == tensor((2, 3), None)
    assert infer_type(op.multiply(w, 2.0)) == tensor((2, 3), None)


@pytest.mark.parametrize("dtype", ["int8", "int32", "uint8", "uint16", "uint32", "uint64"])
def test_bitwise(dtype):
    x, y = var("x", (3, 5), dtype), var("y", (5,), dtype)
    info = np.iinfo(dtype)
    a = RNG_BITS.integers(info.min, info.max, (3, 5), endpoint=True, dtype=dtype)
    b = RNG_BITS.integers(info.min, info.max, (5,), endpoint=True, dtype=dtype)
    for fn, expected in (
        (op.bitwise_and, a & b),
        (op.bitwise_or, a | b),
        (op.bitwise_xor, a ^ b),
    ):
        out = check(fn(x, y), {x: a, y: b}, tensor((3, 5), dtype))
        np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(check(op.bitwise_not(x), {x: a}), ~a)


def test_bitwise_bools_and_errors():
    p, q = var("p", (4,), "bool"), var("q", (4,), "bool")
    a, b = np.array([1, 1, 0, 0], bool), np.array([1, 0, 1, 0], bool)
    np.testing.assert_array_equal(check(op.bitwise_xor(p, q), {p: a, q: b}), a ^ b)
    np.testing.assert_array_equal(check(op.bitwise_not(p), {p: a}), ~a)
    f = var("f", (4,), "float32")
    with pytest.raises(IRError, match="bitwise_and: expects an integer or bool tensor"):
        infer_type(op.bitwise_and(f, f))
    with pytest.raises(IRError, match="left_shift: expects an integer tensor, got bool"):
        infer_type(op.left_shift(p, q))


@pytest.mark.parametrize("dtype", ["int8", "int64", "uint8", "uint64"])
def test_shifts_wrap_and_saturate(dtype):
    bits = np.dtype(dtype).itemsize * 8
    signed = np.dtype(dtype).kind == "i"
    x, y = var("x", (6,), dtype), var("y", (6,), dtype)
    a = np.array([1, 3, 5, -8 if signed else 200, 7, -1 if signed else 9], dtype)
    counts = [0, 1, bits - 1, 2, bits, bits + 3]
    if signed:
        counts[-1] = -1  # a negative count is out of range too
    b = np.array(counts, dtype)
    left = check(op.left_shift(x, y), {x: a, y: b}, tensor((6,), dtype))
    right = check(op.right_shift(x, y), {x: a, y: b}, tensor((6,), dtype))
    for i in range(6):
        c = int(b[i])
        if 0 <= c < bits:
            wrapped = (int(a[i]) << c) % 2**bits
            if signed and wrapped >= 2 ** (bits - 1):
                wrapped -= 2**bits
            assert left[i] == wrapped
            assert right[i] == int(a[i]) >> c
        else:
            assert left[i] == 0
            assert right[i] == (-1 if int(a[i]) < 0 else 0)


def test_fmod_sign_of_dividend():
    x, y = var("x", (4,), "float32"), var("y", (4,), "float32")
    a = np.array([-4.5, 7.25, -3.0, 5.5], np.float32)
    b = np.array([2.0, -2.0, 3.0, 0.75], np.float32)
    np.testing.assert_array_equal(check(op.fmod(x, y), {x: a, y: b}), np.fmod(a, b))
    i, j = var("i", (4,), "int32"), var("j", (4,), "int32")
    c, d = np.array([-7, 7, -7, 7], np.int32), np.array([3, -3, -3, 3], np.int32)
    out = check(op.fmod(i, j), {i: c, j: d}, tensor((4,), "int32"))
    np.testing.assert_array_equal(out, [-1, 1, -1, 1])


def test_log1p_expm1_logaddexp_where_the_naive_forms_fail():
    x = var("x", (4,), "float64")
    tiny = np.array([1e-18, -1e-12, 2e-9, 0.0])
    np.testing.assert_allclose(check(op.log1p(x), {x: tiny}), tiny, rtol=1e-9, atol=0)
    np.testing.assert_allclose(check(op.expm1(x), {x: tiny}), tiny, rtol=1e-9, atol=0)
    a, b = var("a", (4,)), var("b", (4,))
    av = np.array([1e4, -np.inf, -1e4, 3.0], "float32")
    bv = np.array([1e4, -np.inf, 0.0, np.inf], "float32")
    out = check(op.logaddexp(a, b), {a: av, b: bv}, tensor((4,), "float32"))
    np.testing.assert_array_equal(out, np.float32([1e4 + np.log(2), -np.inf, 0.0, np.inf]))
    i = var("i", (3,), "int32")
    with pytest.raises(IRError, match=r"logaddexp: expects a float tensor, got int32 \(3,\)"):
        infer_type(op.logaddexp(i, i))
    with pytest.raises(IRError, match=r"log1p: expects a float tensor, got int32 \(3,\)"):
        infer_type(op.log1p(i))
