"""Tuple arguments at the VM's entry: each field is checked as a tensor argument is (dtype,
rank, fixed and symbolic dimensions), as deep as tuples nest, in every exec mode and on every
entry path (calls, saved functions, `set_input`, a saved and loaded executable), with the
reference interpreter's messages."""

from __future__ import annotations

import re

import numpy as np
import pytest

import rvm
from rvm import op
from rvm.errors import DTypeError, ShapeError
from rvm.script import T, Tuple, func, module


@module
class Pair:
    @func
    def main(t: Tuple[T[(2,), "float32"], T[(3,), "float32"]]):
        a, b = t
        return op.sum(a) + op.sum(b)

    @func
    def nested(x: T[("n",), "float32"], t: Tuple[T[("n",), "float32"], Tuple[T[(2,), "int64"]]]):
        a, inner = t
        (b,) = inner
        return (op.sum(x + a), op.sum(b))


def f32(n: int) -> np.ndarray:
    return np.ones(n, np.float32)


BAD = [
    (
        "main",
        ((f32(5), f32(3)),),
        ShapeError,
        "main: argument 0 't' field 0 has shape (5,), but dimension 0 must be 2 "
        "(expected shape (2,))",
    ),
    (
        "main",
        ((np.ones(2), f32(3)),),
        DTypeError,
        "main: argument 0 't' field 0 expects dtype float32, got float64",
    ),
    (
        "main",
        ((f32(2), f32(3), f32(1)),),
        TypeError,
        "main: argument 0 't' expects a tuple of 2 fields, got 3 fields",
    ),
    (
        "main",
        ((f32(2), np.ones((3, 1), np.float32)),),
        ShapeError,
        "main: argument 0 't' field 1 expects rank 1 (shape (3,)), got shape (3, 1)",
    ),
    (
        "nested",
        (f32(4), (f32(3), (np.zeros(2, np.int64),))),
        ShapeError,
        "nested: argument 1 't' field 0 has shape (3,), but n = 4 from argument 0 'x'",
    ),
    (
        "nested",
        (f32(4), (f32(4), (np.zeros(3, np.int64),))),
        ShapeError,
        "nested: argument 1 't' field 1 field 0 has shape (3,), but dimension 0 must be 2 "
        "(expected shape (2,))",
    ),
]


@pytest.fixture(scope="module", params=("numpy", "jit"))
def pair_ex(request) -> rvm.Executable:
    return rvm.compile(Pair, kernels=request.param)


@pytest.mark.parametrize(("fname", "args", "error", "message"), BAD)
def test_bad_tuple_fields_raise_the_interpreters_error(
    pair_ex, exec_mode, fname, args, error, message
):
    with pytest.raises(error, match=re.escape(message) + "$"):
        rvm.interpret(Pair, fname, *args)
    vm = rvm.VirtualMachine(pair_ex, exec_mode=exec_mode)
    with pytest.raises(error, match=re.escape(message) + "$"):
        vm[fname](*args)
    with pytest.raises(error, match=re.escape(message) + "$"):
        vm.save_function(fname, "saved", *args)
    with pytest.raises(error, match=re.escape(message) + "$"):
        vm.set_input(fname, *args)


def test_good_tuples_run_and_a_loaded_executable_checks_them_too(pair_ex, exec_mode, tmp_path):
    path = str(tmp_path / "pair.rvmx")
    pair_ex.save(path)
    for ex in (pair_ex, rvm.load_executable(path)):
        vm = rvm.VirtualMachine(ex, exec_mode=exec_mode)
        assert float(vm["main"]([f32(2), [1.0, 2.0, 3.0]])) == 8.0  # a list is a tuple
        got = vm["nested"](f32(4), (f32(4), (np.arange(2),)))
        assert [float(v) for v in got] == [8.0, 1.0]
        with pytest.raises(ShapeError, match=r"field 0 has shape \(5,\)"):
            vm["main"]((f32(5), f32(3)))
