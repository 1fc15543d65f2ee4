"""Compiled programs in the native exec mode: what the generated Numba source looks like, and
random programs (`rvm.testing.random_programs`) agreeing in the three modes and with
`rvm.interpret` while running natively.

Each new random program compiles its kernels and its native function (about a second on two
cores), so the property test takes few examples; both are cached on disk by source.
"""

from __future__ import annotations

import re
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings

import rvm
from rvm.runtime.modes.native_codegen import render_module
from rvm.testing import assert_values_close
from rvm.testing.programs import MLP
from rvm.testing.random_programs import RandomProgram, random_programs

TOL = {"rtol": 1e-4, "atol": 1e-5}
MODES = ("bytecode", "compiled", "native")

RNN = rvm.script.parse(
    textwrap.dedent(
        """
        @module
        class RNN:
            @func
            def main(h: T[(1, 8), "float32"], w: T[(8, 8), "float32"], steps: T[(), "int64"]):
                i = rvm.const(0, "int64")
                while i < steps:
                    h = op.tanh(op.matmul(h, w))
                    i = i + 1
                return h
        """
    )
)


def _source(ex: rvm.Executable) -> str:
    module = render_module(ex, ["jit"] * len(ex.primitive_names))
    assert module.reasons == {}
    return module.source


def test_a_loop_is_a_native_loop_with_kernels_called_directly() -> None:
    ex = rvm.compile(RNN)
    src = _source(ex)
    assert "while True:" in src and "_pc = 0" in src  # the self tail call: a loop
    assert "k1(r" in src  # kernels called njit to njit
    assert "_empty((1, 8), dt_float32)" in src  # allocation in native code
    vm = rvm.VirtualMachine(ex, exec_mode="native")
    args = (np.ones((1, 8), "float32"), np.eye(8, dtype="float32") * 0.5, np.array(4))
    want = rvm.interpret(RNN, "main", *args)
    assert_values_close(vm["main"](*args), want, **TOL)
    assert vm.native_report().fallbacks == {}


def test_the_loop_counter_and_compare_are_machine_scalars() -> None:
    ex = rvm.compile(RNN)  # benchmarks/exec_modes.py's RNN loop, H=8
    src = _source(ex)
    scalar = [i for i, n in enumerate(ex.primitive_names) if "scalar" in ex.kernels[n].meta]
    assert len(scalar) == 2  # i < steps, i + 1
    for k in scalar:
        assert f"k{k}(" not in src and f"= ks{k}(s" in src  # a scalar call, no kernel call
        rec = ex.kernels[ex.primitive_names[k]]
        assert f"out0[()] = {rec.meta['scalar']}(p0[()]" in rec.source  # the kernel calls it
    assert "scalar" not in ex.kernels[ex.primitive_names[1]].meta  # the matmul's kernel
    loop = src[src.index("while True:") : src.index("elif _pc == 8:")]  # the loop's blocks
    assert "_empty((), " not in src and "_full0" not in loop  # no 0-d array in the loop
    assert re.search(r"_pc = 3 if s\d+ == 1 else 8", loop)  # the test reads a scalar local
    assert re.search(r"r2, s3 = r\d+, s\d+", loop)  # the counter carried as a scalar


SCALARS = """
@module
class Scalars:
    @func
    def main(
        a: T[(), "int32"],
        b: T[(), "int32"],
        x: T[(), "float32"],
        v: T[(3,), "float32"],
        n: T[(), "int64"],
    ):
        i = rvm.const(0, "int64")
        acc = rvm.const(0, "int32")
        t = rvm.const(0.5, "float32")
        while i < n:
            acc = acc + a * b
            t = t * x + rvm.const(1.0, "float32")
            i = i + 1
        c = a < b
        if c:
            y = x * rvm.const(2.0, "float32")
        else:
            y = x - rvm.const(1.0, "float32")
        w = v * y
        d = op.logical_and(c, x > rvm.const(0.0, "float32"))
        return (acc, y, w, c, i, t, d, count(n))

    @func
    def count(n: T[(), "int64"]):
        if n == 0:
            return n
        else:
            return count(n - 1)
"""


@pytest.mark.parametrize(
    "a, b, x, n", [(3, 4, 1.5, 5), (7, -4, -2.5, 0), (-2, -2, 0.25, 1), (2**30, 3, 3.0, 3)]
)
def test_scalar_ops_agree_in_every_mode(a: int, b: int, x: float, n: int) -> None:
    mod = rvm.script.parse(SCALARS)
    ex = rvm.compile(mod)
    src = _source(ex)
    assert "_empty((), " not in src  # every 0-d result is a scalar local
    args = (
        np.array(a, "int32"),
        np.array(b, "int32"),
        np.array(x, "float32"),
        np.arange(3, dtype="float32"),
        np.array(n, "int64"),
    )
    want = rvm.interpret(mod, "main", *args)
    for mode in MODES:
        vm = rvm.VirtualMachine(ex, exec_mode=mode)
        got = vm["main"](*args)
        assert_values_close(got, want, rtol=0, atol=0)
        assert [g.dtype for g in got] == [w.dtype for w in want]
        assert [g.shape for g in got] == [w.shape for w in want]
        if mode == "native":
            assert vm.native_report().fallbacks == {}


def test_symbolic_shapes_are_checked_and_built_inline() -> None:
    src = _source(rvm.compile(MLP))
    assert "_s = r0.shape + _PAD2" in src  # match_shape: the dims compared as ints
    assert "= (r5[0], 128)" in src  # make_shape: a tuple of ints
    assert "    if not (r0.shape[1] == 784 and r1.shape[0] == 784" in src  # the entry's dims


def test_the_native_module_is_the_same_text_for_the_same_program() -> None:
    assert _source(rvm.compile(MLP)) == _source(rvm.compile(MLP))


_EXECUTABLES: dict[str, rvm.Executable] = {}


@settings(max_examples=8, deadline=None)
@given(program=random_programs())
def test_random_programs_agree_in_every_mode_and_run_natively(program: RandomProgram) -> None:
    text = program.mod.script()
    if text not in _EXECUTABLES:
        _EXECUTABLES[text] = rvm.compile(program.mod)
    ex = _EXECUTABLES[text]
    args = program.args()
    want = rvm.interpret(program.mod, program.fname, *args)
    for mode in MODES:
        vm = rvm.VirtualMachine(ex, exec_mode=mode)
        assert_values_close(vm[program.fname](*args), want, path=mode, **TOL)
        if mode == "native":
            report = vm.native_report()  # after the call: typing errors show once compiled
            assert report.fallbacks == {}, str(report)
