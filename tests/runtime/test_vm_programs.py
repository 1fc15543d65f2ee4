"""Running hand-built executables: control flow, recursion, closures, ADTs, shapes, memory."""

from __future__ import annotations

import threading
import tracemalloc

import numpy as np
import pytest
import rt_helpers as h

from rvm.runtime import ADT, Closure, ExecBuilder, VirtualMachine, register_func
from rvm.runtime import Opcode as O


def f32(*xs: float) -> np.ndarray:
    return np.array(xs, dtype=np.float32)


def test_straight_line_kernels(exec_mode):
    vm = VirtualMachine(h.straight_line(), exec_mode=exec_mode)
    x, y = f32(0, 1, 2, 3), f32(1, 1, 1, 1)
    np.testing.assert_allclose(vm["main"](x, y), np.exp(x + y), rtol=1e-6)
    np.testing.assert_allclose(vm.invoke("main", x, y), np.exp(x + y), rtol=1e-6)


def test_if_else_and_tail_recursion_100k_deep(exec_mode):
    vm = VirtualMachine(h.counting_loop(), exec_mode=exec_mode)
    out = vm["loop"](np.int64(0), np.int64(100_000), np.float32(0))
    assert float(out) == pytest.approx(150_000.0, rel=1e-3)
    assert float(vm["loop"](np.int64(5), np.int64(5), np.float32(2))) == 2.0


def test_non_tail_recursion_10k_deep(exec_mode):
    vm = VirtualMachine(h.recursive_sum(), exec_mode=exec_mode)
    assert int(vm["total"](np.int64(10_000))) == 10_000 * 10_001 // 2
    assert int(vm["total"](np.int64(20_000))) == 20_000 * 20_001 // 2


def test_closures_free_vars_come_first(exec_mode):
    vm = VirtualMachine(h.closure_program(), exec_mode=exec_mode)
    x, k = f32(1, 2), f32(10, 20)
    np.testing.assert_array_equal(vm["main"](x, k), x + k)
    clo = vm["make"](k)
    assert isinstance(clo, Closure) and "add_k" in repr(clo)
    np.testing.assert_array_equal(vm["apply"](clo, x), x + k)


def test_adt_get_tag_get_field_and_repr(exec_mode):
    vm = VirtualMachine(h.list_program(), exec_mode=exec_mode)
    x, y = f32(1, 2), f32(3, 4)
    xs = vm["make"](x, y)
    assert isinstance(xs, ADT) and xs.name == "Cons" and len(xs) == 2
    assert repr(xs).startswith("Cons(array([1., 2.], dtype=float32), Cons(")
    assert repr(xs).endswith("Nil()))")
    np.testing.assert_array_equal(vm["total"](xs, np.zeros(2, np.float32)), x + y)


def test_tuples_are_python_tuples(exec_mode):
    vm = VirtualMachine(h.list_program(), exec_mode=exec_mode)
    x, y = f32(1), f32(2)
    out = vm["pair"](x, y)
    assert type(out) is tuple and out[0] is not None
    np.testing.assert_array_equal(out[0], y)
    np.testing.assert_array_equal(out[1], x)


def test_symbolic_shapes_with_heap_builtins(exec_mode):
    vm = VirtualMachine(h.symbolic_program(), exec_mode=exec_mode)
    for n in (1, 3, 7):
        x = np.random.rand(n, 4).astype(np.float32)
        np.testing.assert_allclose(vm["main"](x, x), np.exp(x), rtol=1e-6)


def test_every_opcode_runs(exec_mode):
    vm = VirtualMachine(h.every_opcode_program(), exec_mode=exec_mode)
    x = np.ones((2, 3), np.float32)
    a, tag, b = vm["main"](x)
    assert tag == 7
    np.testing.assert_allclose(a, np.exp(x), rtol=1e-6)
    np.testing.assert_allclose(b, np.exp(x), rtol=1e-6)
    with pytest.raises(Exception, match="boom!"):
        vm["boom"]()


def test_pooled_reuse_keeps_results_the_caller_holds(exec_mode):
    # 64 floats: tensors of at most 64 bytes are plain numpy arrays, not pooled blocks
    vm = VirtualMachine(h.straight_line(n=64), exec_mode=exec_mode, allocator="pooled")
    x = np.arange(64, dtype=np.float32) / 64
    first = vm["main"](x, x)
    kept = first.copy()
    for _ in range(5):
        vm["main"](x + 1, x)
    np.testing.assert_array_equal(first, kept)  # never overwritten while held
    assert vm.allocator.pool_hits > 0
    # The killed intermediate and the dropped results come back: the pool stays small.
    assert vm.allocator.allocations <= 4


def test_naive_allocator_runs(exec_mode):
    vm = VirtualMachine(h.straight_line(n=64), exec_mode=exec_mode, allocator="naive")
    x = np.arange(64, dtype=np.float32) / 64
    np.testing.assert_allclose(vm["main"](x, x), np.exp(2 * x), rtol=1e-6)
    assert vm.allocator.allocations == 2 and vm.allocator.pool_hits == 0


def test_memory_stays_flat_over_thousands_of_calls(exec_mode):
    vm = VirtualMachine(h.straight_line(), exec_mode=exec_mode)
    x = f32(0, 1, 2, 3)
    for _ in range(200):
        vm["main"](x, x)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(3000):
            vm["main"](x, x)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 64 * 1024, f"memory grew by {grown} bytes"
    assert vm.allocator.allocations <= 4


def test_threads_each_with_its_own_vm(exec_mode):
    ex = h.recursive_sum()
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        try:
            vm = VirtualMachine(ex, exec_mode=exec_mode)
            for n in range(seed, seed + 30):
                assert int(vm["total"](np.int64(n))) == n * (n + 1) // 2
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i * 50,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_registered_global_function_via_call_packed(exec_mode):
    register_func("test.runtime.double", lambda a: a * 2, override=True)
    b = ExecBuilder()
    f = b.function("main", ("x",))
    r = f.new_register()
    f.emit(O.CALL_PACKED, r, "test.runtime.double", (0,))
    f.emit(O.RET, r)
    vm = VirtualMachine(b.build(), exec_mode=exec_mode)
    np.testing.assert_array_equal(vm["main"](f32(1, 2)), f32(2, 4))


def test_unknown_primitive_is_reported_at_construction(exec_mode):
    b = ExecBuilder()
    f = b.function("main", ("x",))
    f.emit(O.CALL_PACKED, 0, "no.such.function", (0,))
    f.emit(O.RET, 0)
    with pytest.raises(Exception, match="unknown packed function 'no.such.function'"):
        VirtualMachine(b.build(), exec_mode=exec_mode)


def test_exec_mode_choices():
    ex = h.straight_line()
    assert VirtualMachine(ex).exec_mode == ex.default_exec_mode == "bytecode"
    assert VirtualMachine(ex, exec_mode="compiled").exec_mode == "compiled"
    assert VirtualMachine(ex.with_exec_mode("compiled")).exec_mode == "compiled"
    with pytest.raises(ValueError, match="bytecode"):
        VirtualMachine(ex, exec_mode="fast")
    with pytest.raises(ValueError, match="pooled"):
        VirtualMachine(ex, allocator="magic")
