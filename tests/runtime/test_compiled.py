"""The compiled exec mode: same results and observations as the bytecode loop."""

from __future__ import annotations

import linecache

import numpy as np
import pytest
import rt_helpers as h

import rvm
from rvm.errors import ExecutableFormatError, VMError
from rvm.runtime import ExecBuilder, Executable, VirtualMachine, load_executable
from rvm.runtime import Opcode as O
from rvm.runtime.modes.compiled import compiled_functions
from rvm.runtime.serialize import META, encode
from rvm.testing import assert_values_close
from rvm.testing.programs import PROGRAMS

MODES = ("bytecode", "compiled")


@pytest.mark.parametrize("prog", PROGRAMS, ids=[p.name for p in PROGRAMS])
def test_programs_agree_with_bytecode_and_interpreter(prog):
    ex = rvm.compile(prog.mod, kernels="numpy")
    args = prog.args()
    results = {mode: VirtualMachine(ex, exec_mode=mode)[prog.fname](*args) for mode in MODES}
    assert_values_close(results["compiled"], results["bytecode"])
    if "slow_interp" not in prog.tags:
        assert_values_close(results["compiled"], rvm.interpret(prog.mod, prog.fname, *args))
    if prog.numpy_ref is not None:
        assert_values_close(results["compiled"], prog.numpy_ref(*args), rtol=1e-4, atol=1e-5)


def test_saved_once_loaded_in_each_mode(tmp_path):
    prog = next(p for p in PROGRAMS if p.name == "adt_list")
    path = str(tmp_path / "lists.rvmx")
    rvm.compile(prog.mod, kernels="numpy", exec_mode="compiled").save(path)
    ex = load_executable(path)
    assert ex.default_exec_mode == "compiled"
    assert VirtualMachine(ex).exec_mode == "compiled"
    out = {m: VirtualMachine(ex, exec_mode=m)[prog.fname](*prog.args()) for m in MODES}
    assert_values_close(out["compiled"], out["bytecode"])
    assert_values_close(out["compiled"], prog.numpy_ref(*prog.args()))


def test_default_exec_mode_and_previous_minor_version():
    ex = h.straight_line()
    assert ex.default_exec_mode == "bytecode"
    data = ex.with_exec_mode("compiled").to_bytes()
    assert Executable.from_bytes(data).default_exec_mode == "compiled"
    # A version 1.0 file: no META section, minor 0 (from the 1.6 layout: format 2 moved CONS's
    # bytes to WGHT).
    data = encode(ex.with_exec_mode("compiled"), version=(1, 6))
    cut = data.rindex(META)  # the first optional section: its header starts with its tag
    old = bytearray(data[:cut])
    old[6:8] = (0).to_bytes(2, "little")
    old[8:12] = (5).to_bytes(4, "little")
    again = Executable.from_bytes(bytes(old))
    assert again.default_exec_mode == "bytecode" and again.functions == ex.functions
    with pytest.raises(ValueError, match="exec_mode must be one of"):
        ex.with_exec_mode("fast")
    with pytest.raises(ExecutableFormatError, match="default exec mode 'fast'"):
        Executable(
            ex.functions, ex.constants, ex.primitive_names, ex.kernels, default_exec_mode="fast"
        )


def test_compiled_source_is_visible_and_in_linecache():
    ex = h.counting_loop()
    vm = VirtualMachine(ex, exec_mode="compiled")
    src = vm.compiled_source("loop")
    assert src.startswith("def f_loop(r0, r1, r2, _d):")
    # its form (the self tail call a loop...) is pinned in test_compiled_golden.py
    _, functions = compiled_functions(ex)
    f = functions[0]
    assert f.filename.startswith("<rvm-compiled @loop #")
    assert linecache.getline(f.filename, 1) == src.splitlines(True)[0]
    assert VirtualMachine(ex).compiled_source("loop") == src  # visible in bytecode mode too


def _failing_program() -> Executable:
    b = ExecBuilder()
    bad = b.add_kernel(h.BAD)
    f = b.function("helper", ("x",))
    t = h.alloc(f, (2,))
    f.emit(O.INVOKE_PACKED, bad, 3, 1, (0, 0, t))
    f.emit(O.RET, t)
    f = b.function("tail", ("x",))
    f.emit(O.TAIL_INVOKE, "helper", (0,))
    f = b.function("main", ("x",))
    r = f.new_register()
    f.emit(O.INVOKE, r, "tail", (0,))
    f.emit(O.MOVE, 0, r)
    f.emit(O.RET, 0)
    return b.build()


def test_error_in_compiled_code_carries_function_and_pc():
    ex = _failing_program()
    messages = {}
    for mode in MODES:
        with pytest.raises(VMError) as info:
            VirtualMachine(ex, exec_mode=mode)["main"](np.ones(2, np.float32))
        messages[mode] = str(info.value)
        assert isinstance(info.value.__cause__, ValueError)
    assert messages["compiled"] == messages["bytecode"]
    # the tail call's frame is gone, as in the bytecode loop
    assert (
        "in @main pc=0: invoke @tail\n  in @helper pc=3: invoke_packed fused_add_exp"
        in (messages["compiled"])
    )


def test_fatal_and_closure_errors_match_bytecode():
    b = ExecBuilder()
    b.add_constant(np.array("no case applies"))
    f = b.function("boom", ("x",))
    f.emit(O.FATAL, 0)
    f = b.function("call", ("c", "x"))
    r = f.new_register()
    f.emit(O.INVOKE_CLOSURE, r, 0, (1,))
    f.emit(O.RET, r)
    ex = b.build()
    x = np.ones(2, np.float32)
    for fname, args in (("boom", (x,)), ("call", (x, x))):
        texts = []
        for mode in MODES:
            with pytest.raises(VMError) as info:
                VirtualMachine(ex, exec_mode=mode)[fname](*args)
            texts.append(str(info.value))
        assert texts[0] == texts[1]


def test_instrumentation_counts_and_profile_equal_in_both_modes():
    prog = next(p for p in PROGRAMS if p.name == "fib")
    ex = rvm.compile(prog.mod, kernels="numpy")
    counts, rows = {}, {}
    for mode in MODES:
        vm = VirtualMachine(ex, exec_mode=mode)
        seen: dict[str, int] = {}

        def cb(name, args, before, seen=seen):
            if before:
                seen[name] = seen.get(name, 0) + 1

        vm.set_instrument(cb)
        vm["fib"](*prog.args())
        vm.set_instrument(None)
        counts[mode] = seen
        report = vm.profile("fib", *prog.args())
        rows[mode] = {r["name"]: r["calls"] for r in report.rows}
    assert counts["compiled"] == counts["bytecode"] and sum(counts["bytecode"].values()) > 100
    assert rows["compiled"] == rows["bytecode"] == counts["bytecode"]


def test_deep_recursion_both_kinds_and_no_global_change():
    import sys

    limit = sys.getrecursionlimit()
    vm = VirtualMachine(h.recursive_sum(), exec_mode="compiled")
    assert int(vm["total"](np.int64(30_000))) == 30_000 * 30_001 // 2
    loop = VirtualMachine(h.counting_loop(), exec_mode="compiled")
    assert float(loop["loop"](np.int64(0), np.int64(100_000), np.float32(0))) == pytest.approx(
        150_000.0, rel=1e-3
    )
    prog = next(p for p in PROGRAMS if p.name == "tail_sum_100k")
    ex = rvm.compile(prog.mod, kernels="numpy")
    out = VirtualMachine(ex, exec_mode="compiled")[prog.fname](*prog.args())
    assert_values_close(out, prog.numpy_ref(*prog.args()))
    assert sys.getrecursionlimit() == limit


def test_deep_recursion_error_keeps_the_whole_vm_stack():
    b = ExecBuilder()
    sub = b.add_kernel(h.SUB_RET)
    f = b.function("down", ("n",))
    zero, one, m, r = (f.new_register() for _ in range(4))
    base, rec = f.label(), f.label()
    f.emit(O.LOAD_CONSTI, zero, 0)
    f.emit(O.IF, 0, zero, base, rec)
    f.place(base)
    f.emit(O.FATAL, b.add_constant(np.array("bottom")))
    f.place(rec)
    f.emit(O.LOAD_CONSTI, one, 1)
    f.emit(O.CALL_PACKED, m, sub, (0, one))
    f.emit(O.INVOKE, r, "down", (m,))
    f.emit(O.RET, r)  # a tail call: one frame in both modes
    ex = b.build()
    texts = []
    for mode in MODES:
        with pytest.raises(VMError) as info:
            VirtualMachine(ex, exec_mode=mode)["down"](np.int64(500))
        texts.append(str(info.value))
    assert texts[0] == texts[1]


def test_unstructured_control_flow_uses_the_state_machine():
    """A backward GOTO loop: sum 1..n with an explicit counter (no tail call)."""
    ex = h.triangle()
    vm = VirtualMachine(ex, exec_mode="compiled")
    assert int(vm["tri"](np.int64(100))) == 5050
    assert not compiled_functions(ex)[1][0].structured


def test_kill_register_returns_memory_as_early_as_bytecode():
    stats = {}
    for mode in MODES:
        for alloc in ("pooled", "naive"):
            # 64 floats: above the size that both modes give plain numpy arrays instead
            vm = VirtualMachine(h.straight_line(n=64), exec_mode=mode, allocator=alloc)
            x = np.ones(64, np.float32)
            for _ in range(5):
                vm["main"](x, x)
            stats[mode, alloc] = (vm.allocator.allocations, vm.allocator.pool_hits)
    assert stats["compiled", "pooled"] == stats["bytecode", "pooled"]
    assert stats["compiled", "naive"] == stats["bytecode", "naive"]


def test_recycled_tiny_tensors_never_overwrite_a_held_value():
    """A loop's tiny tensors come from per-site slots, reused only when nothing holds them."""
    from rvm.testing.programs import RNN

    ex = rvm.compile(RNN, kernels="numpy")
    rng = np.random.default_rng(0)
    h0 = rng.standard_normal((1, 16)).astype(np.float32)
    w = (rng.standard_normal((16, 16)) * 0.3).astype(np.float32)
    steps = np.array(12, np.int64)
    want = VirtualMachine(ex, exec_mode="bytecode")["main"](h0, w, steps)
    vm = VirtualMachine(ex, exec_mode="compiled")
    held: list[tuple[np.ndarray, np.ndarray]] = []

    def keep_outputs(name, args, before):
        if not before:
            held.append((args[-1], args[-1].copy()))  # the output, and its value then

    vm.set_instrument(keep_outputs)
    assert_values_close(vm["main"](h0, w, steps), want)
    assert len(held) == 3 * 12 + 1
    for obj, value in held:
        np.testing.assert_array_equal(obj, value)  # never reused while the callback holds it
    vm.set_instrument(None)
    first = vm["main"](h0, w, steps)
    kept = first.copy()
    assert_values_close(vm["main"](h0 + 1, w, steps), VirtualMachine(ex)["main"](h0 + 1, w, steps))
    np.testing.assert_array_equal(first, kept)
    np.testing.assert_array_equal(h0, h0.copy())


def test_small_blocks_are_one_tensor_in_straight_line_code():
    """Tensors the memory plan puts in one small block are that block's one array, as they
    share its memory in the bytecode loop; the results agree."""
    head = ["@module", "class Chain:", "    @func"]
    head.append('    def main(h: T[(1, 8), "float32"], w: T[(8, 8), "float32"]):')
    text = "\n".join(head + ["        h = op.tanh(op.matmul(h, w))"] * 6 + ["        return h"])
    ex = rvm.compile(rvm.script.parse(text), kernels="numpy")
    # Two blocks alternate for five steps; the result gets its own (test_compiled_golden.py).
    rng = np.random.default_rng(1)
    h0 = rng.standard_normal((1, 8)).astype(np.float32)
    w = (rng.standard_normal((8, 8)) * 0.3).astype(np.float32)
    out = {m: VirtualMachine(ex, exec_mode=m)["main"](h0, w) for m in MODES}
    assert_values_close(out["compiled"], out["bytecode"])


def test_api_in_compiled_mode():
    vm = VirtualMachine(h.straight_line(), exec_mode="compiled")
    x, y = np.ones(4, np.float32), np.full(4, 2.0, np.float32)
    vm.set_input("main", x, y=y)
    vm.invoke_stateful("main")
    np.testing.assert_allclose(vm.get_outputs("main"), np.exp(x + y), rtol=1e-6)
    vm.save_function("main", "bound", x, y)
    np.testing.assert_allclose(vm["bound"](), np.exp(x + y), rtol=1e-6)
    assert vm.time_evaluator("bound", number=3, repeat=2)().median > 0
    assert "compiled" in repr(vm)
