"""A lone reshape is a view of its input (RESHAPE_TENSOR) and `shape_of` is the SHAPE_OF
instruction, in every exec mode; storage reuse never hands a viewed block to another tensor."""

from __future__ import annotations

import numpy as np
import pytest

import rvm
from rvm import op
from rvm.script import T, func, module


@module
class Views:
    @func
    def flat(x: T[(2, 6), "float32"]):
        return op.reshape(x, (-1,))

    @func
    def rows(x: T[("n", 6), "float32"]):
        return op.reshape(x, ("n", 2, 3))

    @func
    def reuse(x: T[(4, 8), "float32"]):
        a = op.sum(x, axis=1, keepdims=True)
        b = op.reshape(a, (4,))  # a view of a's block, which must stay a's
        c = op.sum(x * 2.0, axis=1, keepdims=True)
        d = op.sum(x * 3.0, axis=1, keepdims=True)
        return (b, c + d)

    @func
    def shape(x: T[("n", 6), "float32"]):
        return op.shape_of(x)


@pytest.fixture(scope="module")
def views_ex() -> rvm.Executable:
    return rvm.compile(Views)


def test_reshape_is_a_view(views_ex, exec_mode):
    vm = rvm.VirtualMachine(views_ex, exec_mode=exec_mode)
    x = np.random.rand(2, 6).astype(np.float32)
    y = vm["flat"](x)
    np.testing.assert_array_equal(y, x.reshape(-1))
    assert np.shares_memory(x, y)
    for n in (1, 3):
        x = np.random.rand(n, 6).astype(np.float32)
        y = vm["rows"](x)
        np.testing.assert_array_equal(y, x.reshape(n, 2, 3))
        assert np.shares_memory(x, y)


def test_a_viewed_block_is_not_reused(views_ex, exec_mode):
    vm = rvm.VirtualMachine(views_ex, exec_mode=exec_mode)
    for _ in range(3):
        x = np.random.rand(4, 8).astype(np.float32)
        b, cd = vm["reuse"](x)
        np.testing.assert_allclose(b, x.sum(axis=1), rtol=1e-5)
        np.testing.assert_allclose(cd, 5 * x.sum(axis=1, keepdims=True), rtol=1e-5)


def test_no_kernel_for_reshape_or_shape_of(views_ex, exec_mode):
    ops = [op_name for rec in views_ex.kernels.values() for op_name in rec.name.split("_")]
    assert "reshape" not in ops and "of" not in ops
    vm = rvm.VirtualMachine(views_ex, exec_mode=exec_mode)
    got = vm["shape"](np.zeros((5, 6), np.float32))
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, [5, 6])
    if exec_mode == "native":
        report = dict(vm.native_report().functions)
        assert report["flat"] is None and report["shape"] is None and report["rows"] is None


def test_views_and_shapes_need_no_result_check(views_ex):
    from rvm.runtime.result_proof import proved_results

    proved = dict(zip([f.name for f in views_ex.functions], proved_results(views_ex)))
    assert proved["flat"] and proved["rows"] and proved["reuse"]
