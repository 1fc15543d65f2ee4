"""Jit kernels of single ops and fused groups agree with the numpy kernels."""

from __future__ import annotations

import numpy as np
import pytest
from jit_helpers import Jit, check, numpy_run, prim, rand, var

from rvm import op

x = var("x", ("n", 8))
b = var("b", (8,))
X, B = rand((4, 8)), rand((8,), seed=1)
img = var("img", (1, 4, 7, 7))
IMG = rand((1, 4, 7, 7), seed=2)
ind = var("ind", (3,), "int64")
IND = np.array([0, -1, 3])

CASES = {
    "elementwise_chain": ([x, b], lambda: op.tanh(op.exp(x * 2.0 + b) - 1.0), (X, B)),
    "unary_float": (
        [x],
        lambda: (
            op.gelu(x)
            + op.gelu(x, approximate="tanh")
            + op.silu(x)
            + op.softplus(x)
            + op.sigmoid(x)
            + op.erf(x)
            + op.rsqrt(op.abs(x) + 1.0)
            + op.sin(x) * op.cos(x)
            + op.log(op.abs(x) + 1.0)
            + op.sign(x)
        ),
        (X,),
    ),
    "inverse_trig": (
        [x],
        lambda: (
            op.asin(op.tanh(x))
            + op.acos(op.tanh(x))
            + op.atan(x)
            + op.asinh(x)
            + op.acosh(op.abs(x) + 1.0)
            + op.atanh(op.tanh(x) * 0.9)
        ),
        (X,),
    ),
    "log1p_expm1_logaddexp": (
        [x, b],
        lambda: op.logaddexp(op.log1p(op.abs(x)), op.expm1(b * 0.5)),
        (X, B),
    ),
    "rounding": ([x], lambda: op.floor(x) + op.ceil(x) + op.round(x * 4.0), (X,)),
    "leaky_clip": ([x], lambda: op.clip(op.leaky_relu(x, 0.2), -0.5, 0.5), (X,)),
    "minmax_pow": (
        [x, b],
        lambda: op.maximum(x, b) - op.minimum(x, b) + op.power(op.abs(x), b * 0.0 + 0.5),
        (X, B),
    ),
    "fdiv_mod": ([x, b], lambda: op.floor_divide(x, b) + op.mod(x, b), (X, B)),
    "sum_last": ([x], lambda: op.sum(x, axis=-1), (X,)),
    "sum_first_keep": ([x], lambda: op.sum(x, axis=0, keepdims=True), (X,)),
    "mean_all": ([x], lambda: op.mean(x), (X,)),
    "max_min": ([x], lambda: op.max(x, axis=1) - op.min(x, axis=1), (X,)),
    "prod": ([x], lambda: op.prod(x, axis=(0, 1), keepdims=True), (X,)),
    "argmax0": ([x], lambda: op.argmax(x, axis=0), (X,)),
    "argmin_all": ([x], lambda: op.argmin(x, keepdims=True), (X,)),
    "variance": (
        [x],
        lambda: op.variance(x, axis=1, keepdims=True) + op.variance(x, axis=0, keepdims=True),
        (X,),
    ),
    "reduce_prologue_epilogue": (
        [x, b],
        lambda: op.exp(op.sum(op.relu(x + b), axis=1) * 0.1),
        (X, B),
    ),
    "softmax": ([x], lambda: op.softmax(x), (X,)),
    "softmax_axis0": ([x], lambda: op.softmax(x, axis=0), (X,)),
    "log_softmax": ([x], lambda: op.log_softmax(x), (X,)),
    "transpose": ([x], lambda: op.transpose(x, (1, 0)) * 2.0, (X,)),
    "reshape": ([x], lambda: op.reshape(x, (-1, 4, 2)) + 1.0, (X,)),
    "reshape_computed": ([x, b], lambda: op.reshape(x + b, (-1, 4)), (X, B)),
    "flatten": ([img], lambda: op.flatten(img), (IMG,)),
    "expand_squeeze": ([x], lambda: op.squeeze(op.expand_dims(x, 1), 1), (X,)),
    "concat": ([x], lambda: op.concat([x, op.exp(x)], axis=1), (X,)),
    "stack": ([x], lambda: op.stack([x, x * 2.0], axis=1), (X,)),
    "strided_slice": ([x], lambda: op.strided_slice(x, [1, 7], [100, 0], [2, -2]), (X,)),
    "take": ([x, ind], lambda: op.take(x, ind, axis=1), (X, IND)),
    "take_flat": ([x, ind], lambda: op.take(x, ind), (X, IND)),
    "broadcast_to": ([b], lambda: op.broadcast_to(b, (2, 3, 8)), (B,)),
    "where": ([var("c", ("n", 8), "bool"), x, b], lambda: None, (rand((4, 8), "bool"), X, B)),
    "cast_int": ([x], lambda: op.cast(x * 3.0, "int32"), (X,)),
    "compare_logic": (
        [x, b],
        lambda: op.logical_or(op.logical_and(x > b, x < 1.0), op.logical_not(x != b)),
        (X, B),
    ),
    "cumsum": ([x], lambda: op.cumsum(x, axis=1) + op.cumsum(x, axis=0, exclusive=True), (X,)),
    "pad_tile": ([b], lambda: op.pad(op.tile(b, (2, 2)), [(1, 2), (0, 1)], 3.0), (B,)),
    "pad_edge": ([x], lambda: op.pad(x, [(2, 1), (0, 9)], mode="edge") * 2.0, (X,)),
    "pad_reflect": ([x], lambda: op.exp(op.pad(x, [(5, 9), (9, 1)], mode="reflect")), (X,)),
    "pad_wrap": ([x], lambda: op.pad(x + 1.0, [(0, 11), (3, 17)], mode="wrap"), (X,)),
    "one_hot": ([ind], lambda: op.one_hot(ind, 5), (IND,)),
    "gather": (
        [x, var("gi", (2, 8), "int64")],
        lambda: None,
        (X, np.array([[0, 1, 2, 3, -1, 0, 1, 2]] * 2)),
    ),
}


def _build(name: str):
    params, fn, inputs = CASES[name]
    if name == "where":
        expr = op.where(params[0], params[1], params[2])
    elif name == "gather":
        expr = op.gather(params[0], params[1], axis=0)
    else:
        expr = fn()
    return prim(params, expr), inputs


@pytest.mark.parametrize("name", sorted(CASES))
def test_op(name: str) -> None:
    func, inputs = _build(name)
    check(func, *inputs, rtol=2e-5, atol=1e-5)


def test_split_result() -> None:
    check(prim([x], op.split(x, [3, 5], axis=1)), X)


def test_split_equal() -> None:
    check(prim([x], op.split(x, 2, axis=1)), X)


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8"])
def test_integer_arithmetic(dtype: str) -> None:
    a, c = var("a", (6,), dtype), var("c", (6,), dtype)
    lo = 1 if dtype == "uint8" else -100
    func = prim([a, c], op.divide(a * a, c) + op.mod(a, c) + op.floor_divide(a, c) - op.abs(a))
    A = rand((6,), dtype, seed=3, low=lo, high=100)
    C = rand((6,), dtype, seed=4, low=1, high=9)
    if dtype != "uint8":
        C = C * np.array([1, -1, 1, -1, 1, -1]).astype(dtype)
    check(func, A, C)


def test_bool_sum_and_mean() -> None:
    c = var("c", (3, 5), "bool")
    C = rand((3, 5), "bool")
    check(prim([c], op.sum(c, axis=1)), C)
    check(prim([c], op.max(c, axis=0)), C)


def test_size_zero_and_one_dims() -> None:
    k = Jit(prim([x, b], op.relu(x + b)))
    for rows in (0, 1, 5):
        check(k.func, rand((rows, 8)), B, kernel=k)
    y = var("y", ("n", 1))
    k2 = Jit(prim([x, y], x * y))
    for rows in (0, 1, 3):
        check(k2.func, rand((rows, 8)), rand((rows, 1)), kernel=k2)


def test_symbolic_reduction_on_many_shapes() -> None:
    z = var("z", ("n", "m"))
    k = Jit(prim([z], op.softmax(z)))
    for shape in ((1, 1), (3, 7), (5, 1), (2, 33)):
        check(k.func, rand(shape), kernel=k, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "make",
    [
        lambda z: op.transpose(op.softmax(z), (1, 0)) * 2.0,  # rows read across the loop nest
        lambda z: op.softmax(z) + op.softmax(z * 2.0),  # two row caches in one loop
        lambda z: op.sum(op.softmax(z), axis=[1]),  # a reduction over the cached row
        lambda z: op.softmax(op.reshape(z, (-1,))),  # one row: the cache filled once
    ],
)
def test_softmax_row_cache_in_fused_consumers(make) -> None:
    """softmax keeps each row's exp in a buffer; every consumer order reads it correctly."""
    z = var("z", (5, "m"))
    k = Jit(prim([z], make(z)))
    for m in (1, 7):
        check(k.func, rand((5, m)), kernel=k, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", [(5, 1), (4, 4, 1), (1, 1)])
@pytest.mark.parametrize(
    "make",
    [
        op.softmax,
        op.log_softmax,
        lambda z: op.softmax(op.tanh(op.relu(z))),  # the fuzz's random model 13
        lambda z: op.softmax(z) + op.softmax(z * 2.0),
    ],
)
def test_softmax_over_a_fixed_axis_of_one(shape, make) -> None:
    """An axis of one element gets no loop: the row buffer's reads must still come after the
    row's reductions store it (they came before: NaN where the answer is 1)."""
    z = var("z", shape)
    k = Jit(prim([z], make(z)))
    got = k(rand(shape))
    check(k.func, rand(shape), kernel=k, rtol=1e-5, atol=1e-6)
    if make is op.softmax:
        np.testing.assert_array_equal(got, np.ones(shape, np.float32))


def test_dps_style_writes_output() -> None:
    func = prim([x, b], op.relu(x + b))
    k = Jit(func, style="dps")
    out = np.empty((4, 8), np.float32)
    assert k(X, B, out) is None
    np.testing.assert_allclose(out, numpy_run(func, X, B), rtol=1e-6)


@pytest.mark.parametrize("style", ["return", "dps"])
@pytest.mark.parametrize("batch", [2, 1])
def test_reshaped_outputs_are_written_directly(style, batch) -> None:
    """A kernel whose output is a reshape or flatten of computed work (a channel shuffle's
    transpose, an activation) writes that work straight into its output: no buffer, no
    copy, the same values as the reference; a reshape of an input is still a copy."""
    x = var("x", ("n", 6, 5, 3))
    shuffle = op.reshape(
        op.transpose(op.reshape(x, (-1, 2, 3, 5, 3)), (0, 2, 1, 3, 4)), (-1, 6, 5, 3)
    )
    cases = [
        (shuffle, 1),  # the copy of the transpose's buffer is gone
        (op.flatten(op.relu(x)), 1),
        (op.reshape(x * 2.0, (-1, 5, 18)), 1),
        (op.reshape(x, (-1, 90)), 1),  # a view of the input, copied
    ]
    for result, loops in cases:
        func = prim([x], result)
        kernel = Jit(func, style=style)
        src = kernel.record.source
        assert "np.empty((" not in src.replace("out0 = np.empty", ""), src
        assert src.count("out0[") + src.count("out0.reshape(") == loops, src
        inputs = (rand((batch, 6, 5, 3)),)
        if style == "return":
            check(func, *inputs, kernel=kernel)
        else:
            want = numpy_run(func, *inputs)
            out = np.full(want.shape, np.nan, dtype=want.dtype)
            kernel(*inputs, out)
            np.testing.assert_array_equal(out, want)
