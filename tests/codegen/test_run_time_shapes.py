"""Shapes read from data at run time (`rvm.op.dynamic`) inside VM programs with symbolic
dimensions: one compile for every size, and a result that contradicts the dims its type
promises is an error naming both shapes, in every exec mode and kernel backend."""

from __future__ import annotations

import numpy as np
import pytest

import rvm
from rvm import op
from rvm.errors import ShapeError
from rvm.script import T, func, module


@module
class RunTime:
    @func
    def filled(x: T[("n", 3), "float32"], s: T[(2,), "int64"]):
        return op.dynamic_full(s, 1.0, "float32", ("n", 3)) + x

    @func
    def positions(x: T[("n", "m"), "float32"], start: T[(), "int64"]):
        stop = start + op.take(op.shape_of(x), rvm.const(1, "int64"))
        pos = op.dynamic_arange(start, stop, rvm.const(1, "int64"), "int64", "m")
        return x + op.cast(pos, "float32")

    @func
    def flat(x: T[("n", "m"), "float32"], s: T[(1,), "int64"]):
        return op.exp(op.dynamic_reshape(x, s, (None,)))


_EXECUTABLES: dict[str, rvm.Executable] = {}


def _vm(kernels: str, exec_mode: str) -> rvm.VirtualMachine:
    if kernels not in _EXECUTABLES:
        _EXECUTABLES[kernels] = rvm.compile(RunTime, kernels=kernels)
    return rvm.VirtualMachine(_EXECUTABLES[kernels], exec_mode=exec_mode)


def test_run_time_shapes_every_size(kernels, exec_mode):
    vm = _vm(kernels, exec_mode)
    for n, m in ((2, 3), (5, 1), (1, 7)):
        x = np.linspace(-1, 1, n * m, dtype=np.float32).reshape(n, m)
        if m == 3:
            out = vm["filled"](x, np.array([n, 3]))
            np.testing.assert_allclose(out, x + 1)
        out = vm["positions"](x, np.array(4))
        np.testing.assert_allclose(out, x + np.arange(4, 4 + m, dtype=np.float32))
        out = vm["flat"](x, np.array([-1]))
        np.testing.assert_allclose(out, np.exp(x.ravel()), rtol=1e-6)


def test_contradicting_shape_is_an_error(kernels, exec_mode):
    vm = _vm(kernels, exec_mode)
    x = np.zeros((2, 3), np.float32)
    promised = (
        r"\(1, 3\), contradicts the shape the program promised, \(2, 3\) \(axis 0 is 1, expected 2"
    )
    with pytest.raises(ShapeError, match=promised):
        vm["filled"](x, np.array([1, 3]))
    with pytest.raises(ShapeError, match=r"cannot reshape a tensor of shape \(2, 3\) to \(4,\)"):
        vm["flat"](x, np.array([4]))
    np.testing.assert_allclose(vm["filled"](x, np.array([2, 3])), x + 1)  # the VM still works
