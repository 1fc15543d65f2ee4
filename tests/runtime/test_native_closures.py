"""Closures passed to another function in native code (`rvm.runtime.modes.native_closures`):
a switch over the targets the program passes there, the captured values in a tuple; closures
returned to Python stay VM objects (compiled mode), and ones Python passes in are converted."""

from __future__ import annotations

import numpy as np
import pytest

import rvm
from rvm.runtime import Closure, Executable, VirtualMachine
from rvm.testing.programs import PROGRAMS, HigherOrder

(PROGRAM,) = [p for p in PROGRAMS if p.name == "closure_passed"]


@pytest.fixture(scope="module")
def ex() -> Executable:
    return rvm.compile(HigherOrder)


def test_closures_passed_to_a_loop_agree_with_numpy_in_every_mode(ex, exec_mode) -> None:
    vm = VirtualMachine(ex, exec_mode=exec_mode)
    for seed in range(3):
        args = PROGRAM.args(seed)
        np.testing.assert_allclose(vm["main"](*args), PROGRAM.numpy_ref(*args), rtol=1e-6)
    if exec_mode == "native":
        reasons = vm.native_report().fallbacks
        assert reasons == {"make": "returns a closure (a VM object where its caller is Python)"}


def test_a_closure_from_python_is_called_natively(ex, exec_mode) -> None:
    vm = VirtualMachine(ex, exec_mode=exec_mode)
    k = np.array([1, 2, 3, 4], np.float32)
    shift = vm["make"](k)
    assert isinstance(shift, Closure)
    x = np.zeros(4, np.float32)
    np.testing.assert_array_equal(vm["apply_n"](shift, x, np.array(3)), x - 3 * k)
    np.testing.assert_array_equal(shift(x), -k)  # still a VM object Python can call
    if exec_mode == "native":
        assert "apply_n" in vm.native_report().native


def test_a_closure_of_unknown_origin_runs_compiled_and_says_why() -> None:
    from rvm.runtime import ExecBuilder, Opcode

    b = ExecBuilder()
    f = b.function("ident", ("y",))
    f.emit(Opcode.RET, 0)
    f = b.function("box", ("x",))  # a closure put in a tuple
    f.emit(Opcode.ALLOC_CLOSURE, 1, "ident", ())
    f.emit(Opcode.ALLOC_ADT, 2, -1, (1,))
    f.emit(Opcode.RET, 2)
    f = b.function("main", ("x",))  # read back and called
    f.emit(Opcode.INVOKE, 1, "box", (0,))
    f.emit(Opcode.GET_FIELD, 2, 1, 0)
    f.emit(Opcode.INVOKE_CLOSURE, 3, 2, (0,))
    f.emit(Opcode.RET, 3)
    vm = VirtualMachine(b.build(), exec_mode="native")
    x = np.ones(2, np.float32)
    np.testing.assert_array_equal(vm["main"](x), x)
    reasons = vm.native_report().fallbacks
    assert reasons["box"].startswith("a closure in a tuple or data type value (pc 1: alloc_adt")
    assert reasons["main"].startswith("a call of a closure of unknown origin (read from a tuple")
