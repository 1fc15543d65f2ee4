from __future__ import annotations

import numpy as np
import pytest
from op_testing import check, var

from rvm import op
from rvm.errors import IRError
from rvm.ir import Var, infer_type, tensor


def test_zeros_ones_full():
    out = check(op.zeros((2, 3)), {}, tensor((2, 3), "float32"))
    np.testing.assert_array_equal(out, 0)
    out = check(op.ones((4,), "int32"), {}, tensor((4,), "int32"))
    np.testing.assert_array_equal(out, 1)
    out = check(op.full((2, 2), 7.5, "float16"), {}, tensor((2, 2), "float16"))
    np.testing.assert_array_equal(out, 7.5)
    assert infer_type(op.zeros(("n", 4))) == tensor(("n", 4), "float32")
    with pytest.raises(IRError, match="zeros: unsupported dtype 'complex64'"):
        op.zeros((2,), "complex64")
    with pytest.raises(IRError, match="ones: bad shape"):
        op.ones((2, -3))


def test_arange():
    call = op.arange(5)
    assert call.attrs == {"start": 0, "stop": 5, "step": 1, "dtype": "int64"}
    np.testing.assert_array_equal(check(call, {}, tensor((5,), "int64")), np.arange(5))
    out = check(op.arange(0.0, 1.0, 0.1), {}, tensor((10,), "float32"))
    np.testing.assert_allclose(out, np.arange(0, 1, 0.1), rtol=1e-6)
    check(op.arange(10, 0, -3), {}, tensor((4,), "int64"))
    check(op.arange(5, 2), {}, tensor((0,), "int64"))
    with pytest.raises(IRError, match="arange: step must not be 0"):
        op.arange(0, 5, 0)


def test_one_hot():
    i = var("i", (2, 3), "int64")
    iv = np.array([[0, 2, -1], [3, 9, 1]])
    out = check(op.one_hot(i, 4), {i: iv}, tensor((2, 3, 4), "float32"))
    ref = np.zeros((2, 3, 4), "float32")
    for (r, c), v in np.ndenumerate(iv):
        if -4 <= v < 4:
            ref[r, c, v % 4] = 1
    np.testing.assert_array_equal(out, ref)
    out = check(
        op.one_hot(i, 4, on_value=5, off_value=-1, axis=0, dtype="int32"),
        {i: iv},
        tensor((4, 2, 3), "int32"),
    )
    np.testing.assert_array_equal(out, np.moveaxis(np.where(ref == 1, 5, -1), -1, 0))
    with pytest.raises(IRError, match="one_hot: indices must be an integer tensor"):
        infer_type(op.one_hot(var("f", (2,)), 3))


def test_shape_of():
    x = var("x", (2, 3, 4))
    out = check(op.shape_of(x), {x: np.zeros((2, 3, 4), "float32")}, tensor((3,), "int64"))
    np.testing.assert_array_equal(out, [2, 3, 4])
    assert infer_type(op.shape_of(Var("u"))) == tensor((None,), "int64")
