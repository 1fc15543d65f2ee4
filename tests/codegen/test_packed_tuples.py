"""`rvm.call_packed` with a tuple output, ``out=(T[...], T[...])``: a registered function
returning several tensors, each field checked, in the interpreter and every exec mode."""

from __future__ import annotations

import re

import numpy as np
import pytest

import rvm
from rvm import op
from rvm.errors import DTypeError, IRError, ShapeError, VMError
from rvm.ir.structural import assert_structural_equal
from rvm.script import T, func, module, parse


def _split(x: np.ndarray) -> tuple:
    return x[x > 0], x[x <= 0]


rvm.register_func("test_tuples.minmax", lambda x: (x.min(axis=1), x.max(axis=1)), override=True)
rvm.register_func("test_tuples.split", _split, override=True)
rvm.register_func("test_tuples.as_list", lambda x: [x + 1.0, x * 2.0], override=True)
rvm.register_func("test_tuples.one", lambda x: x, override=True)
rvm.register_func("test_tuples.three", lambda x: (x, x, x), override=True)
rvm.register_func("test_tuples.wide", lambda x: (x, x.astype(np.float64)), override=True)
rvm.register_func("test_tuples.short", lambda x: (x, x[:-1]), override=True)


@module
class Tuples:
    @func
    def minmax(x: T[("n", 4), "float32"]):
        # both fields are checked against n, bound by the parameter
        lo, hi = rvm.call_packed(
            "test_tuples.minmax", x, out=(T[("n",), "float32"], T[("n",), "float32"])
        )
        return hi - lo

    @func
    def split(x: T[(6,), "float32"]):
        # each field binds its own dim, which later code uses
        pos, rest = rvm.call_packed(
            "test_tuples.split", x, out=(T[("p",), "float32"], T[("q",), "float32"])
        )
        return (op.zeros(("p",), "float32") + pos, op.zeros(("q",), "float32") + rest)

    @func
    def as_list(x: T[(3,), "float32"]):
        r = rvm.call_packed("test_tuples.as_list", x, out=(T[(3,), "float32"], T[(3,), "float32"]))
        return r[0] + r[1]

    @func
    def same(x: T[(3,), "float32"]):
        # a dim bound by field 0 is checked in field 1
        return rvm.call_packed(
            "test_tuples.short", x, out=(T[("m",), "float32"], T[("m",), "float32"])
        )

    @func
    def one(x: T[(3,), "float32"]):
        return rvm.call_packed("test_tuples.one", x, out=(T[(3,), "float32"], T[(3,), "float32"]))

    @func
    def three(x: T[(3,), "float32"]):
        return rvm.call_packed("test_tuples.three", x, out=(T[(3,), "float32"], T[(3,), "float32"]))

    @func
    def wide(x: T[(3,), "float32"]):
        return rvm.call_packed("test_tuples.wide", x, out=(T[(3,), "float32"], T[(3,), "float32"]))


@pytest.fixture(scope="module")
def tuples_ex() -> rvm.Executable:
    return rvm.compile(Tuples)


def test_tuple_results_match_the_interpreter(tuples_ex, exec_mode):
    vm = rvm.VirtualMachine(tuples_ex, exec_mode=exec_mode)
    for n in (1, 3):
        x = np.random.rand(n, 4).astype(np.float32)
        want = x.max(axis=1) - x.min(axis=1)
        np.testing.assert_allclose(rvm.interpret(Tuples, "minmax", x), want)
        np.testing.assert_allclose(vm["minmax"](x), want)
    x = np.array([1, -2, 3, 0, 5, -6], np.float32)
    for got in (vm["split"](x), rvm.interpret(Tuples, "split", x)):
        np.testing.assert_array_equal(got[0], [1, 3, 5])
        np.testing.assert_array_equal(got[1], [-2, 0, -6])
    x3 = np.arange(3, dtype=np.float32)
    np.testing.assert_allclose(vm["as_list"](x3), x3 + 1 + x3 * 2)
    np.testing.assert_allclose(rvm.interpret(Tuples, "as_list", x3), x3 + 1 + x3 * 2)


@pytest.mark.parametrize(
    ("name", "error", "message"),
    [
        ("one", DTypeError, "expected a tuple of 2 tensors, got a tensor of shape (3,)"),
        ("three", DTypeError, "expected a tuple of 2 tensors, got a tuple of 3"),
        ("wide", DTypeError, "the result of test_tuples.wide field 1: expected dtype float32"),
        ("same", ShapeError, "the result of test_tuples.short field 1: shape (2,) has 2 at axis 0"),
    ],
)
def test_each_field_is_checked(tuples_ex, exec_mode, name, error, message):
    vm = rvm.VirtualMachine(tuples_ex, exec_mode=exec_mode)
    x = np.arange(3, dtype=np.float32)
    with pytest.raises(VMError) as raised:
        vm[name](x)
    assert isinstance(raised.value.__cause__, error)
    assert str(raised.value.__cause__).startswith(f"{name}: ")
    assert message in str(raised.value.__cause__)
    with pytest.raises(error, match=re.escape(message)):
        rvm.interpret(Tuples, name, x)


def test_tuple_out_round_trips_and_is_checked():
    assert_structural_equal(parse(Tuples.script()), Tuples)
    call = rvm.op.effects.call_packed(
        "f", rvm.const(1.0), out=rvm.ir.types.TupleType((T[(), "float32"],))
    )
    assert call.attrs["fields"] == (((), "float32"),)
    with pytest.raises(IRError, match="a tuple out must hold tensor types with dtypes"):
        rvm.op.effects.call_packed("f", rvm.const(1.0), out=(T[(), "float32"], "x"))
    with pytest.raises(IRError, match="a tuple out must hold tensor types"):
        rvm.op.effects.call_packed("f", rvm.const(1.0), out=())
