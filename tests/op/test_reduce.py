from __future__ import annotations

import numpy as np
import pytest
from op_testing import check, rand, var

import rvm
from rvm import op
from rvm.errors import IRError
from rvm.ir import Builder, Tuple, infer_type, tensor

REDUCE = {
    "sum": np.sum,
    "mean": np.mean,
    "max": np.max,
    "min": np.min,
    "prod": np.prod,
    "variance": np.var,
}


@pytest.mark.parametrize("name", sorted(REDUCE))
@pytest.mark.parametrize(
    "axis,keepdims,shape",
    [
        (None, False, ()),
        (None, True, (1, 1, 1)),
        (1, False, (2, 4)),
        ([0, 2], True, (1, 3, 1)),
        ((-1,), False, (2, 3)),
    ],
)
def test_reductions(name, axis, keepdims, shape):
    x = var("x", (2, 3, 4))
    a = rand((2, 3, 4), low=0.5, high=1.5)
    out = check(
        getattr(op, name)(x, axis=axis, keepdims=keepdims), {x: a}, tensor(shape, "float32")
    )
    np_axis = tuple(axis) if isinstance(axis, list) else axis
    np.testing.assert_allclose(out, REDUCE[name](a, axis=np_axis, keepdims=keepdims), rtol=1e-5)


def test_axis_is_stored_normalized():
    x = var("x", (2, 3))
    assert op.sum(x, axis=1).attrs == {"axis": (1,), "keepdims": False}
    assert op.sum(x, axis=[0, 1]).attrs["axis"] == (0, 1)
    assert op.mean(x).attrs == {"axis": None, "keepdims": False}
    assert op.argmax(x, 1).attrs == {"axis": 1, "keepdims": False}


def test_integer_and_bool_reductions_keep_dtype():
    i = var("i", (3, 4), "int32")
    a = rand((3, 4), "int32", -5, 5)
    out = check(op.sum(i, axis=0), {i: a}, tensor((4,), "int32"))
    np.testing.assert_array_equal(out, a.sum(0))
    b = var("b", (3, 4), "bool")
    check(op.sum(b), {b: rand((3, 4), "bool")}, tensor((), "int64"))
    with pytest.raises(IRError, match="variance: expects a float tensor"):
        infer_type(op.variance(i))


@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_argmax_argmin(name):
    x = var("x", (3, 5))
    a = rand((3, 5))
    fn = getattr(np, name)
    out = check(getattr(op, name)(x, axis=1), {x: a}, tensor((3,), "int64"))
    np.testing.assert_array_equal(out, fn(a, axis=1))
    out = check(getattr(op, name)(x, axis=0, keepdims=True), {x: a}, tensor((1, 5), "int64"))
    np.testing.assert_array_equal(out, fn(a, axis=0, keepdims=True))
    out = check(getattr(op, name)(x), {x: a}, tensor((), "int64"))
    assert out == fn(a)
    with pytest.raises(IRError, match=f"{name}: axis must be an int"):
        getattr(op, name)(x, axis=[0, 1])


def test_cumsum():
    x = var("x", (3, 4))
    a = rand((3, 4))
    out = check(op.cumsum(x, axis=1), {x: a}, tensor((3, 4), "float32"))
    np.testing.assert_allclose(out, np.cumsum(a, axis=1), rtol=1e-6)
    out = check(op.cumsum(x, axis=0, exclusive=True), {x: a}, tensor((3, 4), "float32"))
    expected = np.concatenate([np.zeros((1, 4), "float32"), np.cumsum(a, 0)[:-1]])
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
    out = check(op.cumsum(x), {x: a}, tensor((12,), "float32"))
    np.testing.assert_allclose(out, np.cumsum(a), rtol=1e-5)
    assert infer_type(op.cumsum(var("y", ("n", 4)))) == tensor(("4*n",), "float32")
    i = var("i", (5,), "int32")
    out = check(op.cumsum(i), {i: np.arange(5, dtype="int32")}, tensor((5,), "int32"))
    np.testing.assert_array_equal(out, [0, 1, 3, 6, 10])


def test_symbolic_reductions():
    x = var("x", ("n", "m", 4))
    assert infer_type(op.sum(x, axis=1)) == tensor(("n", 4), "float32")
    assert infer_type(op.max(x, axis=-1, keepdims=True)) == tensor(("n", "m", 1), "float32")
    assert infer_type(op.mean(x, axis=[0, 1])) == tensor((4,), "float32")
    assert infer_type(op.argmax(x, axis=0)) == tensor(("m", 4), "int64")


def test_reduction_errors():
    x = var("x", (2, 3))
    with pytest.raises(IRError, match="sum: axis 2 is out of range for a tensor of rank 2"):
        infer_type(op.sum(x, axis=2))
    with pytest.raises(IRError, match=r"mean: repeated axis in \(1, -1\)"):
        infer_type(op.mean(x, axis=(1, -1)))
    with pytest.raises(IRError, match="sum: axis must be an int"):
        op.sum(x, axis=1.5)
    with pytest.raises(IRError, match="sum: keepdims must be True or False"):
        op.sum(x, keepdims=1)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int8", "uint16", "bool"])
def test_max_min_of_nothing_are_their_identities(dtype, exec_mode, kernels):
    x = var("x", (2, "n", 3), dtype)
    bb = Builder()
    with bb.function("main", [x]):
        hi = bb.emit(op.max(x, axis=1))
        lo = bb.emit(op.min(x, axis=(0, 1), keepdims=True))
        everything = bb.emit(op.max(x))
        bb.emit_output(Tuple((hi, lo, everything)))
    main = rvm.VirtualMachine(rvm.compile(bb.get(), kernels=kernels), exec_mode=exec_mode)["main"]
    if dtype == "bool":
        low, high = False, True
    elif dtype.startswith("float"):
        low, high = -np.inf, np.inf
    else:
        low, high = np.iinfo(dtype).min, np.iinfo(dtype).max
    hi, lo, everything = main(np.zeros((2, 0, 3), dtype))
    np.testing.assert_array_equal(hi, np.full((2, 3), low, dtype))
    np.testing.assert_array_equal(lo, np.full((1, 1, 3), high, dtype))
    np.testing.assert_array_equal(everything, np.array(low, dtype))
    assert hi.dtype == lo.dtype == everything.dtype == np.dtype(dtype)
    a = rand((2, 4, 3), dtype, 0, 5)  # not empty: the identities never win
    hi, lo, everything = main(a)
    np.testing.assert_array_equal(hi, a.max(axis=1))
    np.testing.assert_array_equal(lo, a.min(axis=(0, 1), keepdims=True))
    np.testing.assert_array_equal(everything, a.max())
