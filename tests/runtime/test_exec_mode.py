"""The exec-mode interface: what a mode sees of its VM (`ExecContext`) and how one plugs in."""

from __future__ import annotations

from typing import Any

import numpy as np
import rt_helpers as h

from rvm.runtime import ExecContext, NaiveAllocator, VirtualMachine, VMStackError
from rvm.runtime import vm as vm_module
from rvm.runtime.executable import EXEC_MODES


class Tracing:
    """A new mode: records each call, runs it in the bytecode loop."""

    def __init__(self, context: ExecContext) -> None:
        self.context = context
        self.calls: list[tuple[int, int]] = []
        modes.append(self)

    def run(self, fidx: int, args: list[Any]) -> Any:
        self.calls.append((fidx, len(args)))
        return self.context.run_bytecode(fidx, args)


modes: list[Tracing] = []


def test_every_exec_mode_has_a_factory() -> None:
    assert tuple(vm_module.EXEC_MODE_FACTORIES) == EXEC_MODES


def test_a_new_mode_plugs_in_through_the_factory_table(monkeypatch) -> None:
    monkeypatch.setitem(vm_module.EXEC_MODE_FACTORIES, "tracing", Tracing)
    modes.clear()
    ex = h.symbolic_program()
    x = np.ones((3, 4), "float32")
    vm = VirtualMachine(ex, exec_mode="tracing")
    assert isinstance(modes[0], Tracing)
    got = vm["main"](x, x)
    want = VirtualMachine(ex, exec_mode="bytecode")["main"](x, x)
    np.testing.assert_array_equal(got, want)
    assert modes[0].calls == [(0, 2)]
    assert modes[0].context is vm.context and vm.context.executable is ex


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
