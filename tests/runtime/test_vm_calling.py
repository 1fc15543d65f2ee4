"""Calling VM functions from Python: keywords, `in`, missing names, threads and re-entry."""

from __future__ import annotations

import inspect
import itertools
import threading

import numpy as np
import pytest
import rt_helpers as h

import rvm
from rvm.errors import FunctionNotFoundError, RVMError, VMError
from rvm.runtime import ExecBuilder, VirtualMachine, register_func
from rvm.runtime import Opcode as O


def f32(*shape: int) -> np.ndarray:
    return np.random.rand(*shape).astype(np.float32)


@pytest.fixture
def vm(exec_mode) -> VirtualMachine:
    return VirtualMachine(h.straight_line(), exec_mode=exec_mode)  # main(x, y) = exp(x + y)


def test_keyword_arguments_everywhere(vm):
    x, y = f32(4), f32(4)
    want = np.exp(x + y)
    for out in (
        vm["main"](x, y),
        vm["main"](x, y=y),
        vm["main"](y=y, x=x),
        vm.invoke("main", x, y=y),
        vm.invoke("main", y=y, x=x),
    ):
        np.testing.assert_allclose(out, want, rtol=1e-6)
    vm.save_function("main", "bound", x, y=y)
    np.testing.assert_allclose(vm["bound"](), want, rtol=1e-6)
    assert vm.time_evaluator("main", number=2, repeat=1)(y=y, x=x).mean > 0


def test_keyword_errors_name_the_function_and_parameter(vm):
    x, y = f32(4), f32(4)
    f = vm["main"]
    with pytest.raises(TypeError, match=r"^main has no parameter 'z' \(parameters: x, y\)$"):
        f(x, z=y)
    with pytest.raises(TypeError, match="^main: parameter 'x' given twice, by position and by"):
        f(x, x=x)
    with pytest.raises(TypeError, match="^main: missing argument 'x'$"):
        f(y=y)
    with pytest.raises(TypeError, match=r"main takes 2 arguments \(x, y\), got 3 by position"):
        f(x, y, x, y=y)
    with pytest.raises(TypeError, match="main has no parameter 'z'"):
        vm.invoke("main", x, z=y)
    with pytest.raises(TypeError, match="main: missing argument 'y'"):
        vm.save_function("main", "bound", x=x)
    with pytest.raises(TypeError, match="main: parameter 'y' given twice"):
        vm.time_evaluator("main")(x, y, y=y)
    vm.save_function("main", "bound", x, y)
    with pytest.raises(TypeError, match="bound was saved with its arguments and takes none"):
        vm["bound"](x)
    with pytest.raises(TypeError, match="bound was saved with its arguments and takes none"):
        vm.time_evaluator("bound", number=1, repeat=1)(x=x)


def test_arguments_the_checks_pass_unchanged_skip_them_and_others_are_checked(vm):
    """Fixed-shape tensors take the shortcut (`passes_unchanged`); anything the checks would
    convert or reject goes through them, with the same results and errors."""
    from rvm.runtime.entry import passes_unchanged

    fn = vm.executable.functions[0]
    passes = passes_unchanged(fn)
    x, y = f32(4), f32(4)
    want = np.exp(x + y)
    assert passes((x, y))
    strided = np.repeat(x, 2)[::2]
    others = [(x,), (x, y, y), (strided, y), (x.astype(np.float64), y), (x[:3], y)]
    others += [(x.tolist(), y), (np.ma.masked_array(x), y)]
    for args in others:
        assert not passes(args)
    f = vm["main"]
    np.testing.assert_allclose(f(x, y), want, rtol=1e-6)
    np.testing.assert_allclose(f(strided, y), want, rtol=1e-6)
    np.testing.assert_allclose(f(x.tolist(), y), want, rtol=1e-6)
    with pytest.raises(rvm.DTypeError, match="argument 0 'x' expects dtype float32, got float64"):
        f(x.astype(np.float64), y)
    with pytest.raises(rvm.ShapeError, match=r"argument 0 'x' has shape \(3,\)"):
        f(x[:3], y)
    shared = type(fn)(**{**_fields(fn), "param_specs": (h.tensor("x", ("n", 2)),) * 2})
    passes = passes_unchanged(shared)
    assert passes((f32(3, 2), f32(3, 2)))
    assert not passes((f32(3, 2), f32(4, 2)))  # n = 3 from x, 4 from y
    assert not passes((f32(3, 3), f32(3, 3)))
    assert not passes((f32(3, 2, 1), f32(3, 2)))
    ranged = type(fn)(**{**_fields(fn), "dim_ranges": (("n", 1, 8),)})
    assert passes_unchanged(ranged) is None


def _fields(fn) -> dict:
    return {name: getattr(fn, name) for name in fn.__dataclass_fields__}


def test_a_parameter_called_name_passes_by_keyword(exec_mode):
    b = ExecBuilder()
    f = b.function("ident", ("name",), (h.tensor("name", (2,)),))
    f.emit(O.RET, 0)
    vm = VirtualMachine(b.build(), exec_mode=exec_mode)
    x = f32(2)
    np.testing.assert_array_equal(vm.invoke("ident", name=x), x)
    vm.set_input("ident", name=x)
    vm.invoke_stateful("ident")
    np.testing.assert_array_equal(vm.get_outputs("ident"), x)


def test_the_callable_shows_its_signature(vm):
    f = vm["main"]
    assert list(inspect.signature(f).parameters) == ["x", "y"]
    assert repr(f).startswith(
        "<function @main(x: Tensor((4,), float32), y: Tensor((4,), float32)) of VirtualMachine"
    )
    assert f is vm["main"]  # made once per name
    vm.save_function("main", "bound", f32(4), f32(4))
    assert "bound: @main(" in repr(vm["bound"]) and not inspect.signature(vm["bound"]).parameters


def test_contains(vm):
    ex = vm.executable
    assert "main" in ex and "main" in vm
    assert "nope" not in ex and "nope" not in vm
    assert 0 not in ex and 0 not in vm and ["main"] not in ex and ["main"] not in vm
    vm.save_function("main", "bound", f32(4), f32(4))
    assert "bound" in vm and "bound" not in ex


def test_a_missing_function_is_one_error_naming_those_there_are(vm):
    ex = vm.executable
    message = "no function 'nope' in the executable; it has: main"
    calls = [
        lambda: vm["nope"],
        lambda: vm.invoke("nope"),
        lambda: ex.function_index("nope"),
        lambda: ex.get_function("nope"),
        lambda: vm.set_input("nope"),
        lambda: vm.invoke_stateful("nope"),
        lambda: vm.get_outputs("nope"),
        lambda: vm.save_function("nope", "bound"),
        lambda: vm.time_evaluator("nope"),
        lambda: vm.profile("nope"),
        lambda: vm.compiled_source("nope"),
    ]
    for call in calls:
        with pytest.raises(FunctionNotFoundError) as info:
            call()
        assert str(info.value) == message
        assert isinstance(info.value, KeyError) and isinstance(info.value, RVMError)
    assert rvm.FunctionNotFoundError is FunctionNotFoundError
    vm.save_function("main", "bound", f32(4), f32(4))
    with pytest.raises(KeyError, match="saved on this VM; it has: main, bound$"):
        vm["nope"]


# -- threads and re-entry -------------------------------------------------------------------

_names = itertools.count()


def packed_program(fn) -> tuple[ExecBuilder, str]:
    """f(n: int64) = <packed fn>(n) and g(x: float32[4]) = exp(x + x), with fn registered."""
    name = f"test.calling.{next(_names)}"
    register_func(name, fn)
    b = ExecBuilder()
    prim = b.add_primitive(name)
    f = b.function("f", ("n",), (h.tensor("n", (), "int64"),))
    r = f.new_register()
    f.emit(O.CALL_PACKED, r, prim, (0,))
    f.emit(O.RET, r)
    add, exp = b.add_kernel(h.ADD), b.add_kernel(h.EXP)
    g = b.function("g", ("x",), (h.tensor("x", (4,)),))
    t1 = h.alloc(g, (4,))
    g.emit(O.INVOKE_PACKED, add, 3, 1, (0, 0, t1))
    t2 = h.alloc(g, (4,))
    g.emit(O.INVOKE_PACKED, exp, 2, 1, (t1, t2))
    g.emit(O.RET, t2)
    return b, name


def test_a_packed_function_may_call_back_into_its_vm(exec_mode):
    """Recursion through Python: f(n) = n + f(n - 1) by a packed function calling vm["f"]."""
    holder: dict[str, VirtualMachine] = {}

    def recurse(n):
        if int(n) == 0:
            return np.zeros((), np.int64)
        inner = holder["vm"]["f"](n - 1)
        np.testing.assert_allclose(holder["vm"]["g"](np.ones(4, np.float32)), np.exp(2.0))
        return inner + n

    b, _ = packed_program(recurse)
    vm = holder["vm"] = VirtualMachine(b.build(), exec_mode=exec_mode)
    assert int(vm["f"](np.int64(20))) == 210
    assert int(vm["f"](np.int64(3))) == 6  # the lock was released


def test_a_second_thread_gets_a_clear_error_while_a_call_runs(exec_mode):
    inside, release = threading.Event(), threading.Event()

    def block(n):
        inside.set()
        assert release.wait(30)
        return n

    b, _ = packed_program(block)
    vm = VirtualMachine(b.build(), exec_mode=exec_mode)
    result: list = []
    worker = threading.Thread(target=lambda: result.append(vm["f"](np.int64(7))), name="worker-A")
    worker.start()
    try:
        assert inside.wait(30)
        with pytest.raises(VMError) as info:
            vm["g"](np.ones(4, np.float32))
        assert str(info.value) == (
            "this VirtualMachine is already running in thread 'worker-A' (called from thread "
            "'MainThread'); create one VirtualMachine per thread over the shared Executable"
        )
        with pytest.raises(VMError, match="already running in thread 'worker-A'"):
            vm.time_evaluator("g", number=1, repeat=1)(np.ones(4, np.float32))
    finally:
        release.set()
        worker.join()
    assert int(result[0]) == 7
    np.testing.assert_allclose(vm["g"](np.ones(4, np.float32)), np.exp(2.0), rtol=1e-6)
