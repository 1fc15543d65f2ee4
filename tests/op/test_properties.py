"""Property tests: shape rules agree with NumPy on random shapes (or both reject them)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from op_testing import evaluate, var

from rvm import op
from rvm.errors import IRError
from rvm.ir import infer_type, tensor

dims = st.integers(min_value=1, max_value=4)
shapes = st.lists(dims, min_size=0, max_size=4).map(tuple)


def _numpy_or_error(fn):
    try:
        return fn()
    except ValueError:
        return None


@settings(max_examples=100, deadline=None)
@given(a=shapes, b=shapes)
def test_broadcast_matches_numpy(a, b):
    expected = _numpy_or_error(lambda: np.broadcast_shapes(a, b))
    call = op.add(var("a", a), var("b", b))
    if expected is None:
        with pytest.raises(IRError, match="add: cannot broadcast shapes"):
            infer_type(call)
    else:
        assert infer_type(call) == tensor(expected, "float32")


@settings(max_examples=100, deadline=None)
@given(
    data=st.data(),
    shape=shapes,
    keepdims=st.booleans(),
    name=st.sampled_from(["sum", "mean", "max", "prod", "argmax"]),
)
def test_reduction_shapes_match_numpy(data, shape, keepdims, name):
    ndim = len(shape)
    one_axis = st.integers(-ndim - 1, ndim)
    if name == "argmax":
        axis = data.draw(st.none() | one_axis)
    else:
        in_range = st.integers(-ndim, ndim - 1) if ndim else st.nothing()
        axis = data.draw(st.none() | one_axis | st.lists(in_range, max_size=ndim))
    if ndim == 0 and isinstance(axis, int):
        return  # NumPy's ufunc reductions accept axis 0 and -1 on 0-d arrays (a legacy quirk)
    a = np.ones(shape, "float32")
    np_axis = tuple(axis) if isinstance(axis, list) else axis
    fn = getattr(np, name)
    try:
        expected = fn(a, axis=np_axis, keepdims=keepdims).shape
    except (ValueError, np.exceptions.AxisError):
        expected = None
    call = getattr(op, name)(var("x", shape), axis=axis, keepdims=keepdims)
    if expected is None:
        with pytest.raises(IRError, match=name):
            infer_type(call)
    else:
        ty = infer_type(call)
        assert ty.shape == expected
        assert evaluate(call, {call.args[0]: a}).shape == expected


batch = st.lists(dims, min_size=0, max_size=2).map(tuple)


@settings(max_examples=100, deadline=None)
@given(
    ba=batch, bb=batch, n=dims, k1=dims, k2=dims, m=dims,
    a1d=st.booleans(), b1d=st.booleans(),
)  # fmt: skip
def test_matmul_shapes_match_numpy(ba, bb, n, k1, k2, m, a1d, b1d):
    a = (k1,) if a1d else (*ba, n, k1)
    b = (k2,) if b1d else (*bb, k2, m)
    expected = _numpy_or_error(lambda: np.matmul(np.ones(a), np.ones(b)).shape)
    call = op.matmul(var("a", a), var("b", b))
    if expected is None:
        with pytest.raises(IRError, match="matmul: "):
            infer_type(call)
    else:
        assert infer_type(call) == tensor(expected, "float32")


@settings(max_examples=50, deadline=None)
@given(shape=st.lists(dims, min_size=1, max_size=4).map(tuple), data=st.data())
def test_reshape_with_minus_one_matches_numpy(shape, data):
    size = int(np.prod(shape))
    divisors = [d for d in range(1, size + 1) if size % d == 0]
    target = data.draw(st.lists(st.sampled_from(divisors), max_size=3))
    pos = data.draw(st.integers(0, len(target)))
    target.insert(pos, -1)
    expected = _numpy_or_error(lambda: np.ones(shape).reshape(target).shape)
    call = op.reshape(var("x", shape), target)
    if expected is None:
        with pytest.raises(IRError, match="reshape: cannot reshape"):
            infer_type(call)
    else:
        assert infer_type(call).shape == expected
        # A symbolic batch dim is solved the same way.
        sym = infer_type(op.reshape(var("y", ("n", *shape)), ["n", *target]))
        assert sym.shape == ("n", *expected)
