"""Int values as dimensions (`rvm.dim`): bound, checked at run time, used in shapes, in the
interpreter and every exec mode."""

from __future__ import annotations

import re

import numpy as np
import pytest

import rvm
from rvm import op
from rvm.errors import IRError, ShapeError, VMError
from rvm.ir.structural import assert_structural_equal
from rvm.script import T, func, module, parse


@module
class Dims:
    @func
    def main(x: T[("k",), "float32"], steps: T[(), "int64"]):
        n = rvm.dim(steps)
        z = op.zeros((n, 4), "float32")
        y = op.reshape(x, (n, 1))
        return (z, y)

    @func
    def agree(x: T[("n", 2), "float32"], steps: T[(), "int64"]):
        n = rvm.dim(steps)
        return op.ones((n, 3), "float32") + op.sum(x)

    @func
    def twice(a: T[(), "int64"], b: T[(), "int64"]):
        n = rvm.dim(a)
        m = rvm.dim(b, "n")  # the same dimension: checked
        return op.zeros((n, 2), "float32") + op.sum(op.ones((m, 1), "float32"))

    @func
    def loop(steps: T[(), "int64"]):
        i = rvm.const(0, "int64")
        acc = rvm.const(0.0, "float32")
        while i < steps:
            n = rvm.dim(i + 1)  # a new n each step
            acc = acc + op.sum(op.ones((n, 2), "float32"))
            i = i + 1
        return acc


@pytest.fixture(scope="module")
def dims_ex() -> rvm.Executable:
    return rvm.compile(Dims)


@pytest.mark.parametrize("n", [1, 5])
def test_int_parameter_as_dimension(dims_ex, exec_mode, n):
    vm = rvm.VirtualMachine(dims_ex, exec_mode=exec_mode)
    x = np.arange(n, dtype=np.float32)
    z, y = vm["main"](x, np.int64(n))
    want_z, want_y = rvm.interpret(Dims, "main", x, np.int64(n))
    np.testing.assert_array_equal(z, np.zeros((n, 4), np.float32))
    np.testing.assert_array_equal(y, x.reshape(n, 1))
    np.testing.assert_array_equal(want_z, z)
    np.testing.assert_array_equal(want_y, y)
    x2 = np.ones((n, 2), np.float32)
    np.testing.assert_allclose(vm["agree"](x2, np.int64(n)), np.full((n, 3), 1 + 2 * n))
    assert vm["loop"](np.int64(n)) == rvm.interpret(Dims, "loop", np.int64(n)) == n * (n + 1)


def test_dimension_is_checked_at_run_time(dims_ex, exec_mode):
    """The messages say it in the program's words, the same in the interpreter and every
    mode: the binding, its value, and where the earlier value of the dimension came from."""
    vm = rvm.VirtualMachine(dims_ex, exec_mode=exec_mode)
    x = np.ones((2, 2), np.float32)
    cases = [
        ("main", (np.ones(3, np.float32), np.int64(-1)), ShapeError,
         r"^main: n = rvm\.dim\(steps\) is -1, but a dimension must be >= 0$"),
        ("agree", (x, np.int64(3)), ShapeError,
         r"^agree: n = rvm\.dim\(steps\) is 3, but n = 2 from argument 0 'x'$"),
        ("agree", (x, np.int64(-2)), ShapeError,
         r"^agree: n = rvm\.dim\(steps\) is -2, but a dimension must be >= 0$"),
        ("twice", (np.int64(2), np.int64(3)), ShapeError,
         r"^twice: n = rvm\.dim\(b\) is 3, but n = 2 from n = rvm\.dim\(a\)$"),
    ]  # fmt: skip
    for name, args, error, message in cases:
        with pytest.raises(VMError) as raised:
            vm[name](*args)
        assert isinstance(raised.value.__cause__, error)
        assert re.search(message, str(raised.value.__cause__))
        with pytest.raises(error, match=message):
            rvm.interpret(Dims, name, *args)
    np.testing.assert_array_equal(vm["twice"](np.int64(3), np.int64(3)), np.full((3, 2), 3.0))


def test_dim_round_trips_and_checks_its_value():
    assert_structural_equal(parse(Dims.script()), Dims)
    with pytest.raises(IRError, match="dim: the value must be a 0-d integer tensor"):
        parse(
            "import rvm\nfrom rvm.script import T, func, module\n@module\nclass M:\n"
            "    @func\n    def main(x: T[(4,), 'float32']):\n"
            "        n = rvm.dim(x)\n        return x\n"
        )
