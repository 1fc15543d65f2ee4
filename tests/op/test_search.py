"""topk, nonzero and unique against NumPy; their data-dependent shapes through the VM."""

from __future__ import annotations

import numpy as np
import pytest
from op_testing import check, rand, var

import rvm
from rvm import op
from rvm.errors import IRError
from rvm.ir import TupleType, infer_type, tensor
from rvm.script import T, func, module


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_topk_order_and_ties(largest, axis):
    x = var("x", (5, 7, 3))
    a = np.round(rand((5, 7, 3)), 1)  # rounding makes ties
    a[0, :, 0] = 1.0  # a whole row of ties
    n = a.shape[axis]
    k = n - 1
    values, indices = check(op.topk(x, k, axis=axis, largest=largest), {x: a})
    keys = -a if largest else a
    want = np.argsort(keys, axis=axis, kind="stable").take(np.arange(k), axis=axis)
    np.testing.assert_array_equal(indices, want)
    np.testing.assert_array_equal(values, np.take_along_axis(a, want, axis))


def test_topk_ints_and_errors():
    x = var("x", (6,), "int64")
    a = np.array([3, -(2**63), 7, 7, 2**63 - 1, 0], np.int64)
    values, indices = check(op.topk(x, 3), {x: a})
    np.testing.assert_array_equal(indices, [4, 2, 3])
    values, indices = check(op.topk(x, 2, largest=False), {x: a})
    np.testing.assert_array_equal(values, [-(2**63), 0])
    with pytest.raises(IRError, match=r"topk: k=7 is larger than axis 0 of shape \(6,\)"):
        infer_type(op.topk(x, 7))
    assert infer_type(op.topk(var("s", ("n", 4)), 2)) == TupleType(
        (tensor(("n", 2), "float32"), tensor(("n", 2), "int64"))
    )


@pytest.mark.parametrize("sorted_", [True, False])
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_unique(sorted_, axis):
    x = var("x", (4, 3), "int32")
    a = np.array([[2, 1, 2], [0, 5, 0], [2, 1, 2], [9, 1, 9]], np.int32)
    values, first, inverse, counts = check(op.unique(x, axis, sorted=sorted_), {x: a})
    taken = np.take(values, inverse, axis=0 if axis is None else axis)
    np.testing.assert_array_equal(taken, a.reshape(-1) if axis is None else a)
    np.testing.assert_array_equal(
        np.take(a.reshape(-1) if axis is None else a, first, 0 if axis is None else axis), values
    )
    assert counts.sum() == (a.size if axis is None else a.shape[axis])
    if not sorted_:
        assert np.all(np.diff(first) > 0)  # first-occurrence order
    else:
        ref = np.unique(a, axis=axis)
        np.testing.assert_array_equal(values, ref)


@module
class DataDependent:
    @func
    def main(x: T[(3, 4), "float32"]):
        nz = op.nonzero(op.greater(x, 0.0))
        return (nz, op.add(op.cast(nz, "float32"), 1.0), op.unique(op.round(x))[0])


def test_data_dependent_shapes_run_in_the_vm(exec_mode, kernels):
    a = np.array([[0, 1.5, 0, -2], [3, 0, 0, 0], [0.2, 0, 0, 7]], np.float32)
    assert infer_type(op.nonzero(var("x", (3, 4)))) == tensor((2, None), "int64")
    ex = rvm.compile(DataDependent, kernels=kernels)
    nz, plus, uniq = rvm.VirtualMachine(ex, exec_mode=exec_mode)["main"](a)
    np.testing.assert_array_equal(nz, np.array(np.nonzero(a > 0)))
    np.testing.assert_array_equal(plus, np.array(np.nonzero(a > 0)) + 1.0)
    np.testing.assert_array_equal(uniq, np.unique(np.round(a)))
