"""Compiled programs in the native exec mode: what the generated Numba source looks like, and
random programs (`rvm.testing.random_programs`) agreeing in the three modes and with
`rvm.interpret` while running natively.

Each new random program compiles its kernels and its native function (about a second on two
cores), so the property test takes few examples; both are cached on disk by source.
"""

from __future__ import annotations

import textwrap

import numpy as np
from hypothesis import given, settings

import rvm
from rvm.runtime.native_codegen import render_module
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
    assert "k0(" in src  # kernels called njit to njit
    assert "_empty((1, 8), dt_float32)" in src  # allocation in native code
    vm = rvm.VirtualMachine(ex, exec_mode="native")
    args = (np.ones((1, 8), "float32"), np.eye(8, dtype="float32") * 0.5, np.array(4))
    want = rvm.interpret(RNN, "main", *args)
    assert_values_close(vm["main"](*args), want, **TOL)
    assert vm.native_report().fallbacks == {}


def test_symbolic_shapes_are_checked_and_built_inline() -> None:
    src = _source(rvm.compile(MLP))
    assert "_s = r0.shape + _PAD2" in src  # match_shape: the dims compared as ints
    assert "= (r5[0], 128)" in src  # make_shape: a tuple of ints
    assert "if _d == 0 and not (r0.shape[1] == 784 and r1.shape[0] == 784" in src  # entry


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
