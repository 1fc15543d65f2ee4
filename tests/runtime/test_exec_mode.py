"""The exec-mode interface: what a mode sees of its VM (`ExecContext`) and how one plugs in.

The real modes are run here with no VM at all, over a context that exposes only the
documented attributes and refuses writes, so a mode that reached past the interface (into
the VM, or into the context's internals) fails these tests.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import rt_helpers as h

from rvm.errors import VMError
from rvm.runtime import ExecContext, NaiveAllocator, VirtualMachine, VMStackError
from rvm.runtime import vm as vm_module
from rvm.runtime.executable import EXEC_MODES, Executable
from rvm.runtime.kernels import resolve_primitives
from rvm.runtime.modes.bytecode import BytecodeMode
from rvm.runtime.modes.compiled import CompiledMode
from rvm.runtime.modes.decode import decode_executable
from rvm.runtime.modes.native import NativeMode

# The attributes `ExecContext` documents: all a mode may read.
INTERFACE = frozenset(
    {"executable", "functions", "raw_packed", "packed", "allocator", "fatal", "run_bytecode"}
    | {"error", "guard"}
)
REAL_MODES: dict[str, Callable[[Any], Any]] = {
    "bytecode": BytecodeMode,
    "compiled": CompiledMode,
    "native": NativeMode,
}


class Restricted:
    """An `ExecContext` seen only through `INTERFACE`, read-only; records what was read."""

    def __init__(self, context: ExecContext) -> None:
        object.__setattr__(self, "_context", context)
        object.__setattr__(self, "read", set())

    def __getattr__(self, name: str) -> Any:
        if name not in INTERFACE:
            raise AttributeError(f"an exec mode read ExecContext.{name}, not in the interface")
        self.read.add(name)
        return getattr(self._context, name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"an exec mode wrote ExecContext.{name}; modes only read it")


def standalone(ex: Executable, mode: str, allocator: Any = None) -> tuple[Any, ExecContext]:
    """Mode `mode` over a context of `ex` that no VM owns, and the context (to swap tables)."""
    allocator = allocator or NaiveAllocator()
    context = ExecContext(ex, decode_executable(ex), resolve_primitives(ex), allocator)
    view = Restricted(context)
    context.run_bytecode = BytecodeMode(view).run
    return REAL_MODES[mode](view), context


def _int(v: int) -> np.ndarray:
    return np.array(v, dtype=np.int64)


def _cons_list(ex: Executable) -> Any:
    """[1.0, 2.0] built by the program's own `make`, in the bytecode mode."""
    make, _ = standalone(ex, "bytecode")
    return make.run(ex.function_index("make"), [np.float32(1.0), np.float32(2.0)])


X24 = np.arange(8, dtype=np.float32).reshape(2, 4) / 8
# (program, function, args, expected result)
CASES: list[tuple[Callable[[], Executable], str, Callable[[Executable], list], Any]] = [
    (h.straight_line, "main", lambda ex: [np.ones(4, "float32")] * 2, np.exp(np.full(4, 2.0))),
    (h.symbolic_program, "main", lambda ex: [X24, X24], np.exp(X24)),
    (h.recursive_sum, "total", lambda ex: [_int(10)], 55),
    (h.counting_loop, "loop", lambda ex: [_int(0), _int(6), np.float32(0)], 9.0),
    (h.closure_program, "main", lambda ex: [np.float32(2), np.float32(3)], 5.0),
    (h.list_program, "total", lambda ex: [_cons_list(ex), np.float32(0)], 3.0),
]


@pytest.mark.parametrize("mode", sorted(REAL_MODES))
@pytest.mark.parametrize("case", CASES, ids=[f"{c[0].__name__}-{c[1]}" for c in CASES])
def test_the_real_modes_run_through_the_interface_alone(mode: str, case: tuple) -> None:
    program, name, make_args, want = case
    ex = program()
    run, context = standalone(ex, mode)
    got = run.run(ex.function_index(name), make_args(ex))
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)
    assert run.context.read <= INTERFACE and {"functions", "packed"} & run.context.read


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0].__name__}-{c[1]}" for c in CASES])
def test_both_modes_agree_with_the_vm(case: tuple) -> None:
    program, name, make_args, _ = case
    ex = program()
    results = [standalone(ex, m)[0].run(ex.function_index(name), make_args(ex)) for m in REAL_MODES]
    results += [VirtualMachine(ex, exec_mode=m)[name](*make_args(ex)) for m in REAL_MODES]
    for other in results[1:]:
        np.testing.assert_array_equal(np.asarray(other), np.asarray(results[0]))


@pytest.mark.parametrize("mode", sorted(REAL_MODES))
def test_a_mode_calls_the_table_the_context_holds_at_each_run(mode: str) -> None:
    ex = h.straight_line(n=64)  # 256-byte tensors: past the tiny rule, so the allocator runs
    allocator = NaiveAllocator()
    run, context = standalone(ex, mode, allocator)
    x = np.ones(64, "float32")
    plain = run.run(0, [x, x])
    calls: list[str] = []

    def counted(name: str, f: Callable[..., Any]) -> Callable[..., Any]:
        return lambda *a: calls.append(name) or f(*a)

    context.packed = [counted(n, f) for n, f in zip(ex.primitive_names, context.raw_packed)]
    np.testing.assert_array_equal(run.run(0, [x, x]), plain)
    assert calls == ["add", "exp"]
    context.packed = context.raw_packed
    np.testing.assert_array_equal(run.run(0, [x, x]), plain)
    assert calls == ["add", "exp"] and allocator.allocations >= 3


def test_failures_read_the_same_in_both_modes() -> None:
    ex = h.straight_line(bad=True)
    messages = []
    for mode in REAL_MODES:
        run, _ = standalone(ex, mode)
        with pytest.raises(VMStackError) as info:
            run.run(0, [np.ones(4, "float32")] * 2)
        assert info.value.stack == [(0, 3)] and isinstance(info.value.cause, ValueError)
        messages.append(str(info.value))
    assert messages[0] == messages[1] == messages[2]
    assert messages[0].startswith("invoke_packed fused_add_exp failed: ValueError: kernel explo")


def test_a_context_without_a_bytecode_loop_says_so() -> None:
    ex = h.straight_line()
    context = ExecContext(ex, decode_executable(ex), resolve_primitives(ex), NaiveAllocator())
    with pytest.raises(VMError, match="no bytecode loop bound"):
        context.run_bytecode(0, [])


def test_every_exec_mode_has_a_factory() -> None:
    assert tuple(vm_module.EXEC_MODE_FACTORIES) == EXEC_MODES


def test_a_new_mode_plugs_in_through_the_factory_table(monkeypatch) -> None:
    made: list[Any] = []

    class Tracing:
        """A new mode: records each call, hands it to the bytecode loop."""

        def __init__(self, context: ExecContext) -> None:
            self.context = context
            self.calls: list[tuple[int, int]] = []
            made.append(self)

        def run(self, fidx: int, args: list[Any]) -> Any:
            self.calls.append((fidx, len(args)))
            return self.context.run_bytecode(fidx, args)

    monkeypatch.setitem(vm_module.EXEC_MODE_FACTORIES, "tracing", Tracing)
    ex = h.symbolic_program()
    x = np.ones((3, 4), "float32")
    vm = VirtualMachine(ex, exec_mode="tracing")
    got = vm["main"](x, x)
    want = VirtualMachine(ex, exec_mode="bytecode")["main"](x, x)
    np.testing.assert_array_equal(got, want)
    assert [m.calls for m in made] == [[(0, 2)]]
    assert made[0].context is vm.context and vm.context.executable is ex


def test_the_context_follows_instrumentation_and_the_allocator(exec_mode) -> None:
    vm = VirtualMachine(h.symbolic_program(), exec_mode=exec_mode)
    ctx = vm.context
    assert ctx.packed is ctx.raw_packed
    seen: list[str] = []
    vm.set_instrument(lambda name, args, before: seen.append(name) if before else None)
    assert ctx.packed is not ctx.raw_packed and len(ctx.packed) == len(ctx.raw_packed)
    first = vm["main"](*[np.ones((2, 4), "float32")] * 2)
    assert seen
    vm.set_instrument(None)
    assert ctx.packed is ctx.raw_packed
    vm.allocator = NaiveAllocator()
    assert ctx.allocator is vm.allocator
    np.testing.assert_array_equal(vm["main"](*[np.ones((2, 4), "float32")] * 2), first)


def test_failures_in_every_mode_are_vm_stack_errors(exec_mode) -> None:
    vm = VirtualMachine(h.symbolic_program(), exec_mode=exec_mode)
    ctx = vm.context
    err = ctx.error(ctx.fatal("boom"), [(0, 0)])
    assert isinstance(err, VMStackError) and err.stack == [(0, 0)]
    assert str(err).startswith("fatal: boom\nVM stack (most recent call last):\n  in @main pc=0:")
