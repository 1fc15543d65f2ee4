"""Window pools of every rank and max_pool_indices against a direct loop over windows."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from op_testing import check, rand, var

import rvm
from rvm import op
from rvm.errors import IRError
from rvm.ir import infer_type, tensor


def out_size(size, k, s, lo, hi, d, ceil_mode):
    span = size + lo + hi - d * (k - 1) - 1
    o = (-(-span // s) if ceil_mode else span // s) + 1
    return o - 1 if ceil_mode and (o - 1) * s >= size + lo else o


def pool_loop(x, k, s, pads, d, include_pad=False, ceil_mode=False):
    """(max, average, argmax) of every window, one window at a time."""
    nsp = x.ndim - 2
    sizes = x.shape[2:]
    lo, hi = pads[:nsp], pads[nsp:]
    out_sp = [out_size(sizes[i], k[i], s[i], lo[i], hi[i], d[i], ceil_mode) for i in range(nsp)]
    mx, avg = np.zeros((*x.shape[:2], *out_sp)), np.zeros((*x.shape[:2], *out_sp))
    arg = np.zeros((*x.shape[:2], *out_sp), dtype=np.int64)
    for pos in np.ndindex(*out_sp):
        coords = [[p * s[i] - lo[i] + j * d[i] for j in range(k[i])] for i, p in enumerate(pos)]
        valid = [[c for c in cs if 0 <= c < sizes[i]] for i, cs in enumerate(coords)]
        padded = [[c for c in cs if -lo[i] <= c < sizes[i] + hi[i]] for i, cs in enumerate(coords)]
        win = x[(Ellipsis, *np.ix_(*valid))].reshape(*x.shape[:2], -1)
        mx[(Ellipsis, *pos)] = win.max(-1)
        count = np.prod([len(p) for p in (padded if include_pad else valid)])
        avg[(Ellipsis, *pos)] = win.sum(-1) / count
        flat = [np.ravel_multi_index(c, sizes) for c in itertools.product(*valid)]
        arg[(Ellipsis, *pos)] = np.asarray(flat)[win.argmax(-1)]  # argmax: the first maximum
    return mx, avg, arg


CASES = [  # shape, pool_size, strides, padding, dilation, ceil_mode
    ((2, 3, 7, 8), (2, 2), (2, 2), (0, 0, 0, 0), (1, 1), False),
    ((2, 3, 7, 8), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False),
    ((2, 3, 7, 8), (3, 2), (1, 2), (1, 0, 0, 1), (1, 1), False),
    ((2, 3, 7, 8), (3, 3), (2, 2), (0, 0, 0, 0), (1, 1), True),
    ((2, 3, 7, 8), (3, 3), (2, 2), (1, 1, 1, 1), (2, 1), True),
    ((2, 3, 11), (3,), (2,), (1, 2), (1,), False),
    ((1, 2, 10), (2,), (3,), (0, 1), (3,), True),
    ((1, 2, 5, 6, 7), (2, 3, 2), (2, 1, 2), (1, 0, 1, 0, 1, 1), (1, 2, 1), False),
    ((2, 1, 6, 5, 4), (3, 2, 2), (2, 2, 3), (1, 1, 0, 1, 0, 1), (1, 1, 2), True),
]


@pytest.mark.parametrize("shape, k, s, pads, d, ceil_mode", CASES)
def test_pools_match_a_loop_over_windows(shape, k, s, pads, d, ceil_mode):
    x = var("x", shape)
    a = np.round(rand(shape), 1)  # rounding makes ties for the argmax
    nsp = len(k)
    mx, avg, arg = pool_loop(a, k, s, pads, d, ceil_mode=ceil_mode)
    max_pool = {1: op.max_pool1d, 2: op.max_pool2d, 3: op.max_pool3d}[nsp]
    out = check(max_pool(x, k, s, pads, d, ceil_mode), {x: a})
    np.testing.assert_array_equal(out, mx.astype("float32"))
    out = check(op.max_pool_indices(x, k, s, pads, d, ceil_mode), {x: a})
    np.testing.assert_array_equal(out, arg)
    avg_pool = {1: op.avg_pool1d, 2: op.avg_pool2d, 3: op.avg_pool3d}[nsp]
    out = check(avg_pool(x, k, s, pads, d, ceil_mode), {x: a})
    np.testing.assert_allclose(out, avg, rtol=1e-5, atol=1e-6)
    _, avg_include, _ = pool_loop(a, k, s, pads, d, include_pad=True, ceil_mode=ceil_mode)
    out = check(avg_pool(x, k, s, pads, d, ceil_mode, count_include_pad=True), {x: a})
    np.testing.assert_allclose(out, avg_include, rtol=1e-5, atol=1e-6)


def test_max_pool_of_ints_and_indices_by_hand():
    x = var("x", (1, 1, 2, 4), "int32")
    a = np.array([[[[1, 7, 7, 2], [7, 0, 3, 9]]]], np.int32)
    out = check(op.max_pool2d(x, 2, 2, padding=(0, 1, 0, 1)), {x: a})
    np.testing.assert_array_equal(out, [[[[7, 7, 9]]]])
    out = check(op.max_pool_indices(x, (2, 2), 2, padding=(0, 1, 0, 1)), {x: a})
    np.testing.assert_array_equal(out, [[[[4, 1, 7]]]])  # padding never wins
    out = check(op.max_pool_indices(x, (2, 2), 1), {x: a})
    np.testing.assert_array_equal(out, [[[[1, 1, 7]]]])  # a tie: the first in window order


def test_pool_shapes_and_global_pools():
    x = var("x", ("n", 8, 32, 32))
    assert infer_type(op.max_pool2d(x, 2, 2)) == tensor(("n", 8, 16, 16), "float32")
    assert infer_type(op.max_pool2d(x, 3, 2, 1)) == tensor(("n", 8, 16, 16), "float32")
    assert infer_type(op.avg_pool2d(x, 3, 2, ceil_mode=True)) == tensor(("n", 8, 16, 16), "float32")
    assert infer_type(op.global_avg_pool2d(x)) == tensor(("n", 8, 1, 1), "float32")
    y = var("y", (2, 3, 4, 5))
    a = rand((2, 3, 4, 5))
    out = check(op.global_avg_pool2d(y), {y: a}, tensor((2, 3, 1, 1), "float32"))
    np.testing.assert_allclose(out, a.mean((2, 3), keepdims=True), rtol=1e-6)
    out = check(op.global_max_pool2d(y), {y: a}, tensor((2, 3, 1, 1), "float32"))
    np.testing.assert_array_equal(out, a.max((2, 3), keepdims=True))
    with pytest.raises(IRError, match="global_max_pool2d: the input .NCHW. must have rank 4"):
        infer_type(op.global_max_pool2d(var("z", (3, 4, 5))))


def test_pool_shapes_of_other_ranks_and_errors():
    v = var("v", ("n", 4, 9))
    assert infer_type(op.max_pool1d(v, 3, 2, 1)) == tensor(("n", 4, 5), "float32")
    assert op.avg_pool1d(v, 3).attrs["padding"] == (0, 0)
    d = var("d", (1, 2, "t", 8, 9))
    assert infer_type(op.avg_pool3d(d, (1, 2, 3), (1, 2, 3))) == tensor(
        (1, 2, None, 4, 3), "float32"
    )
    assert infer_type(op.max_pool_indices(d, (1, 2, 2), 2, ceil_mode=True)) == tensor(
        (1, 2, None, 4, 5), "int64"
    )
    with pytest.raises(IRError, match=r"max_pool3d: the input \(NCDHW\) must have rank 5"):
        infer_type(op.max_pool3d(v, 2))
    with pytest.raises(IRError, match="avg_pool1d: window of size 5 .dilation 3. is larger"):
        infer_type(op.avg_pool1d(v, 5, dilation=3))
    with pytest.raises(IRError, match="max_pool_indices: pool_size must have one int per spatial"):
        op.max_pool_indices(v, 3)
    with pytest.raises(IRError, match="max_pool1d: strides must be >= 1"):
        op.max_pool1d(v, 2, 0)


@rvm.script.module
class Windows:
    @rvm.script.func
    def main(
        x: rvm.script.T[(2, 3, 7), "float32"],
        v: rvm.script.T[(1, 2, 4, 5, 6), "float32"],
        w: rvm.script.T[(2, 1, 3, 2, 2), "float32"],
        u: rvm.script.T[(3, 2, 2, 3), "float32"],
    ):
        a = op.relu(op.max_pool1d(x, 3, 2, 1, ceil_mode=True)) + 1.0
        b = op.avg_pool3d(op.conv3d(v, w, padding=1, groups=2), 2, 2, count_include_pad=True)
        c = op.max_pool_indices(v, (2, 2, 2), 2, (0, 1, 1, 1, 0, 0))
        t = op.conv2d_transpose(op.reshape(x, (2, 3, 7, 1)), u, 2, 1)
        return (a, b, c, op.tanh(t))


def test_pools_and_convs_run_in_the_vm(exec_mode, kernels):
    args = [rand((2, 3, 7)), rand((1, 2, 4, 5, 6)), rand((2, 1, 3, 2, 2)), rand((3, 2, 2, 3))]
    want = rvm.interpret(Windows, "main", *args)
    ex = rvm.compile(Windows, kernels=kernels)
    got = rvm.VirtualMachine(ex, exec_mode=exec_mode)["main"](*args)
    x, v = args[:2]
    expect_a = np.maximum(pool_loop(x, (3,), (2,), (1, 1), (1,), ceil_mode=True)[0], 0) + 1
    np.testing.assert_allclose(got[0], expect_a, rtol=1e-6)
    np.testing.assert_array_equal(
        got[2], pool_loop(v, (2,) * 3, (2,) * 3, (0, 1, 1, 1, 0, 0), (1,) * 3)[2]
    )
    for g, e in zip(got, want):
        assert g.dtype == e.dtype and g.shape == e.shape
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)
