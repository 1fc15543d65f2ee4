"""The native exec mode: which functions are native and why not, fallback to the compiled mode,
errors and entry checks in the other modes' words, deep recursion, and the disk cache."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import rt_helpers as h

import rvm
from rvm.errors import VMError
from rvm.runtime import ExecBuilder, Opcode, VirtualMachine, register_func
from rvm.testing import assert_values_close
from rvm.testing.programs import MLP, Closures, Lists, Mutual, Recursion

MODES = ("bytecode", "compiled", "native")


def _parse(text: str) -> rvm.IRModule:
    return rvm.script.parse(textwrap.dedent(text))


RNN = _parse(
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

MUTUAL = Mutual


def _f32(*shape: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal(shape).astype("float32")


def _rows(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((2, 784)).astype("float32")


def _i64(v: int) -> np.ndarray:
    return np.array(v, "int64")


def _mlp_args(n: int = 2) -> tuple:
    return (_f32(n, 784), _f32(784, 128) * 0.05, _f32(128), _f32(128, 10) * 0.1, _f32(10))


def _report(ex: rvm.Executable) -> dict[str, str | None]:
    return dict(VirtualMachine(ex, exec_mode="native").native_report().functions)


def test_straight_line_loops_and_self_recursion_are_native() -> None:
    assert _report(rvm.compile(MLP)) == {"main": None}
    assert set(_report(rvm.compile(RNN)).values()) == {None}
    vm = VirtualMachine(rvm.compile(Recursion), exec_mode="native")
    assert int(vm["fib"](_i64(10))) == 55
    assert int(vm["factorial"](_i64(5))) == 120
    assert int(vm["tail_sum"](_i64(10), _i64(0))) == 55
    report = dict(vm.native_report().functions)  # typing errors show once compiled
    assert report == {"factorial": None, "fib": None, "tail_sum": None}


def test_the_report_says_why_a_function_is_not_native() -> None:
    why = "a closure of @add_k captures a value of no fixed type (pc "
    assert why in "".join(str(v) for v in _report(h.closure_program()).values())
    assert "recursive data type List" in "".join(
        str(v) for v in _report(rvm.compile(Lists)).values()
    )
    assert "numpy (non-jit) kernel" in _report(rvm.compile(MLP, kernels="numpy"))["main"]
    # recursion through other functions is native (`test_native_cycles`)
    assert _report(rvm.compile(MUTUAL)) == {"even": None, "odd": None}


UNKNOWN_DIM = _parse(
    """
    @module
    class Unknown:
        @func
        def main(x: T[(None, 4), "float32"]):
            return op.exp(x) * 2.0
    """
)


@pytest.mark.parametrize("mode", MODES)
def test_jit_kernels_that_allocate_their_outputs_run_natively(mode: str) -> None:
    ex = rvm.compile(UNKNOWN_DIM)
    assert any(ins[0] == Opcode.CALL_PACKED for ins in ex.functions[0].instructions)
    vm = VirtualMachine(ex, exec_mode=mode)
    x = _f32(3, 4)
    np.testing.assert_allclose(vm["main"](x), np.exp(x) * 2, rtol=1e-6)
    if mode == "native":
        assert vm.native_report().fallbacks == {}


def test_python_builtins_are_not_native() -> None:
    register_func("test.native.double", lambda a: a * 2, override=True)
    b = ExecBuilder()
    f = b.function("main", ("x",))
    r = f.new_register()
    f.emit(Opcode.CALL_PACKED, r, "test.native.double", (0,))
    f.emit(Opcode.RET, r)
    ex = b.build()
    assert "registered Python function test.native.double (pc 0: call_packed" in _report(ex)["main"]
    out = VirtualMachine(ex, exec_mode="native")["main"](np.ones(3, "float32"))
    np.testing.assert_array_equal(out, np.full(3, 2, "float32"))


@pytest.mark.parametrize(
    "mod, fname, args",
    [
        (Closures, "main", (_f32(4), _f32(4))),
        (Lists, "main", (_i64(20),)),
        (MUTUAL, "even", (_i64(7),)),
        (MLP, "main", _mlp_args()),
    ],
)
def test_fallbacks_and_native_functions_agree_with_the_interpreter(mod, fname, args) -> None:
    ex = rvm.compile(mod)
    want = rvm.interpret(mod, fname, *args)
    assert_values_close(VirtualMachine(ex, exec_mode="native")[fname](*args), want, rtol=1e-5)


def test_deep_tail_recursion_runs_natively() -> None:
    vm = VirtualMachine(rvm.compile(Recursion), exec_mode="native")
    assert int(vm["tail_sum"](_i64(100_000), _i64(0))) == 100_000 * 100_001 // 2
    assert vm.native_report().fallbacks == {}


def test_deep_non_tail_recursion_hands_over_to_the_compiled_mode() -> None:
    vm = VirtualMachine(rvm.compile(Recursion), exec_mode="native")
    # deeper than native code nests (native_codegen.MAX_DEPTH): rerun compiled, same result
    assert int(vm["factorial"](_i64(3000))) == 0  # int64 wraps to 0 past 66!
    assert int(vm["fib"](_i64(15))) == 610


def test_bad_input_reads_the_same_in_every_mode() -> None:
    ex = rvm.compile(MLP)
    good = _mlp_args()
    bad_inputs = [
        good[:4],
        (good[0].astype("float64"), *good[1:]),
        (good[0][:, :100], *good[1:]),
        (good[0], good[1], _f32(2, 128), *good[3:]),
        ([1.0, 2.0], *good[1:]),
        ("text", *good[1:]),
        (good[0][None], *good[1:]),
    ]
    for args in bad_inputs:
        messages = set()
        for mode in MODES:
            with pytest.raises((TypeError, ValueError)) as info:
                VirtualMachine(ex, exec_mode=mode)["main"](*args)
            messages.add(f"{type(info.value).__name__}: {info.value}")
        assert len(messages) == 1, messages


def test_symbolic_dims_that_disagree_read_the_same_in_every_mode() -> None:
    text = """
    @module
    class Sym:
        @func
        def main(x: T[("n", 4), "float32"], y: T[("n", 4), "float32"]):
            return x + y
    """
    ex = rvm.compile(_parse(text))
    messages = set()
    for mode in MODES:
        vm = VirtualMachine(ex, exec_mode=mode)
        np.testing.assert_array_equal(vm["main"](_f32(3, 4), _f32(3, 4)), 2 * _f32(3, 4))
        with pytest.raises(rvm.ShapeError) as info:
            vm["main"](_f32(3, 4), _f32(2, 4))
        messages.add(str(info.value))
    assert len(messages) == 1 and "n = 3 from argument 0 'x'" in messages.pop()


def test_arguments_the_checks_convert_still_run() -> None:
    ex = rvm.compile(MLP)
    vm = VirtualMachine(ex, exec_mode="native")
    args = _mlp_args()
    want = vm["main"](*args)
    w1 = np.asfortranarray(args[1])  # not C-contiguous: the checks copy it
    readonly = args[0].copy()
    readonly.flags.writeable = False
    np.testing.assert_array_equal(vm["main"](readonly, w1, *args[2:]), want)
    # By keyword the call takes the checked path (`NativeMode.run`); bit for bit the same
    # (`test_results_do_not_depend_on_where_malloc_puts_buffers`).
    np.testing.assert_array_equal(
        vm["main"](x=args[0], w1=args[1], b1=args[2], w2=args[3], b2=args[4]), want
    )


def test_results_do_not_depend_on_where_malloc_puts_buffers() -> None:
    """The softmax's row sum once took LLVM's scalar loop, summing in another order, when its
    row buffer lay just after its input row (the vectorized loop's run-time overlap check):
    1 ulp on a row of the MLP, only in a CI worker whose heap hundreds of tests had shuffled.
    Native code allocates with malloc; shuffling malloc's free chunks between calls must not
    change a bit."""
    import ctypes

    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    vm = VirtualMachine(rvm.compile(MLP), exec_mode="native")
    rng = np.random.default_rng(1)
    weights = _mlp_args()[1:]
    inputs = [(_rows(k), *weights) for k in range(40)]
    first = [vm["main"](*args) for args in inputs]
    held: list[int] = []
    try:
        for i in range(2000):
            held.append(libc.malloc(int(rng.integers(16, 400))))
            if len(held) > 50:
                libc.free(held.pop(int(rng.integers(0, len(held)))))
            k = i % len(inputs)
            np.testing.assert_array_equal(vm["main"](*inputs[k]), first[k], err_msg=f"call {i}")
    finally:
        for at in held:
            libc.free(at)


def test_errors_inside_native_code_read_as_in_the_compiled_mode() -> None:
    # A run that skips the VM's entry checks meets the function's own shape check natively;
    # the compiled mode reruns it and raises the builtin's error with the VM stack.
    from rvm.runtime.modes.compiled import CompiledMode
    from rvm.runtime.modes.native import NativeMode

    ex = rvm.compile(MLP)
    bad = [_f32(2, 700), *_mlp_args()[1:]]
    messages = set()
    for mode in ("compiled", "native"):
        vm = VirtualMachine(ex, exec_mode=mode)
        run = (NativeMode if mode == "native" else CompiledMode)(vm.context).run
        with pytest.raises(VMError) as info:
            run(0, bad)
        messages.add(str(info.value))
    assert len(messages) == 1 and "match_shape" in messages.pop()


def test_instrument_and_profile_run_in_the_compiled_mode() -> None:
    vm = VirtualMachine(rvm.compile(RNN), exec_mode="native")
    args = (_f32(1, 8), _f32(8, 8) * 0.3, _i64(3))
    want = vm["main"](*args)
    seen: list[str] = []
    vm.set_instrument(lambda name, a, before: seen.append(name) if before else None)
    np.testing.assert_array_equal(vm["main"](*args), want)
    assert seen.count("fused_matmul_tanh") == 3
    vm.set_instrument(None)
    report = vm.profile("main", *args, repeat=2)
    assert "fused_matmul_tanh" in str(report)
    np.testing.assert_array_equal(vm["main"](*args), want)


def test_stateful_saved_and_timed_calls_work() -> None:
    vm = VirtualMachine(rvm.compile(MLP), exec_mode="native")
    args = _mlp_args()
    want = vm["main"](*args)
    vm.set_input("main", *args)
    vm.invoke_stateful("main")
    np.testing.assert_array_equal(vm.get_outputs("main"), want)
    vm.save_function("main", "bound", *args)
    np.testing.assert_array_equal(vm["bound"](), want)
    # The timed calls run the native function: one untimed warm-up, then repeat x number
    # calls, each calling the MLP's kernels and leaving its result as before.
    kernels: list[str] = []
    vm.set_instrument(lambda name, a, before: kernels.append(name) if before else None)
    timed = vm.time_evaluator("main", number=2, repeat=3)(*args)
    vm.set_instrument(None)
    per_call = len(kernels) // (1 + 2 * 3)
    assert per_call > 0 and len(kernels) == per_call * (1 + 2 * 3)
    assert timed.number == 2 and len(timed.results) == 3
    assert timed.min <= timed.median <= timed.max
    np.testing.assert_array_equal(vm["main"](*args), want)


def test_native_report_needs_the_native_mode() -> None:
    vm = VirtualMachine(rvm.compile(MLP), exec_mode="compiled")
    with pytest.raises(VMError, match="runs in the compiled mode, not native"):
        vm.native_report()
    text = str(VirtualMachine(rvm.compile(Lists), exec_mode="native").native_report())
    assert (
        text.startswith("native functions (0 of")
        and "compiled mode: parameter 'xs': recursive data type List" in text
    )


_CHILD = """
import numpy as np, rvm
from rvm.testing.programs import MLP, Recursion
# recursive functions compile in every process (Numba cannot cache them); they still run
fib = rvm.VirtualMachine(rvm.compile(Recursion), exec_mode="native")["fib"]
assert int(fib(np.array(10))) == 55
vm = rvm.VirtualMachine(rvm.compile(MLP), exec_mode="native")
out = vm["main"](*[np.ones(s, "float32") for s in [(1, 784), (784, 128), 128, (128, 10), 10]])
assert out.shape == (1, 10)
report = vm.native_report()
print(report.path, report.compiled, report.loaded)
"""


def test_a_second_process_compiles_nothing(tmp_path: Path) -> None:
    # rvm's cache of its own (the native files counted); Numba's is the suite's, whose cached
    # library a new user would compile first (seconds, nothing the test observes)
    env = dict(os.environ, RVM_CACHE_DIR=str(tmp_path / "rvm"))
    env["PYTHONPATH"] = os.pathsep.join([str(Path(rvm.__file__).parents[1]), *sys.path])
    env["RVM_JIT_ISOLATE"] = "0"  # the first process compiles itself (a helper's would load)
    runs = []
    for _ in range(2):
        out = subprocess.run(
            [sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, check=True
        )
        runs.append(out.stdout.split())
    (path1, compiled1, _), (path2, compiled2, loaded2) = runs
    assert path1 == path2 and Path(path1).parent == tmp_path / "rvm" / "native"
    assert int(compiled1) >= 1
    assert int(compiled2) == 0 and int(loaded2) >= 1


def test_native_is_a_default_exec_mode_a_saved_executable_keeps(tmp_path: Path) -> None:
    ex = rvm.compile(MLP, exec_mode="native")
    path = tmp_path / "mlp.rvmx"
    ex.save(path)
    again = rvm.load_executable(path)
    vm = VirtualMachine(again)
    assert vm.exec_mode == "native" and vm.native_report().native == ["main"]
    args = _mlp_args(1)
    np.testing.assert_allclose(vm["main"](*args), rvm.interpret(MLP, "main", *args), rtol=1e-5)


def test_threads_each_with_a_native_vm_over_one_executable() -> None:
    import threading

    ex = rvm.compile(RNN)
    args = (_f32(1, 8), _f32(8, 8) * 0.3, _i64(50))
    want = VirtualMachine(ex, exec_mode="native")["main"](*args)
    errors: list[BaseException] = []

    def work() -> None:
        vm = VirtualMachine(ex, exec_mode="native")
        try:
            for _ in range(50):
                np.testing.assert_array_equal(vm["main"](*args), want)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_the_native_fast_path_keeps_the_vms_thread_guard() -> None:
    """A call from Python taking the native entry (`fast_call`) while another thread holds the
    VM raises the busy error naming that thread; from the holding thread it runs (the guard is
    reentrant); after the release it runs anywhere, and the guard is free between calls."""
    import threading

    ex = rvm.compile(RNN)
    args = (_f32(1, 8), _f32(8, 8) * 0.3, _i64(5))
    vm = VirtualMachine(ex, exec_mode="native")
    want = vm["main"](*args)  # compiled and cached: the next calls take the fast path
    held, release = threading.Event(), threading.Event()
    inner: list = []

    def hold() -> None:
        guard = vm.context.guard
        assert guard.enter() is True
        try:
            inner.append(vm["main"](*args))
            held.set()
            assert release.wait(30)
        finally:
            guard.leave()

    worker = threading.Thread(target=hold, name="holder-B")
    worker.start()
    try:
        assert held.wait(30)
        with pytest.raises(VMError, match="already running in thread 'holder-B'"):
            vm["main"](*args)
    finally:
        release.set()
        worker.join()
    np.testing.assert_array_equal(inner[0], want)
    np.testing.assert_array_equal(vm["main"](*args), want)
    assert vm.context.guard.owner is None and not vm.context.guard.held


def test_the_thread_guard_is_free_after_every_kind_of_call() -> None:
    """The guard's token is back after a fast call, a call the fast path hands on (bad input:
    its error raised by the checks), a call by keyword and a failure inside native code; a
    function whose handle has no fast path (the native entry takes arrays only) too."""
    from rvm.runtime.modes.native import NativeMode

    ex = rvm.compile(MLP)
    for mode in MODES:
        vm = VirtualMachine(ex, exec_mode=mode)
        guard, args = vm.context.guard, _mlp_args()
        want = vm["main"](*args)
        np.testing.assert_array_equal(vm["main"](*args), want)
        with pytest.raises(TypeError, match="float32"):
            vm["main"](args[0].astype("float64"), *args[1:])
        # By keyword the call takes the checked path, not the fast one: the same bits.
        np.testing.assert_array_equal(vm["main"](x=args[0], w1=args[1], b1=args[2],
                                                 w2=args[3], b2=args[4]), want)  # fmt: skip
        if mode == "native":
            with pytest.raises(VMError, match="match_shape"):
                NativeMode(vm.context).run(0, [_f32(2, 700), *args[1:]])
        assert not guard.held and guard.owner is None, mode


def test_the_fast_path_checks_a_result_the_code_does_not_prove() -> None:
    """Where a function's result is checked at run time, a call the native fast path runs is
    checked too, with its arguments, after the guard is given back; a failed check raises its
    own error (not a rerun in the compiled mode)."""
    ex = rvm.compile(MLP)
    vm = VirtualMachine(ex, exec_mode="native")
    seen: list = []

    def check(result, args, owner):  # type: ignore[no-untyped-def]
        seen.append((result, args, not owner.context.guard.held))
        if len(seen) > 1:
            raise ValueError("the recorded result type says no")

    vm._results = [check]  # before its handles are made (as `exec_modes` forces checks)
    args = _mlp_args()
    out = vm["main"](*args)
    assert len(seen) == 1 and seen[0][0] is out and seen[0][1] == args and seen[0][2]
    assert not vm.native_report().fallbacks
    with pytest.raises(ValueError, match="the recorded result type says no"):
        vm["main"](*args)
    assert len(seen) == 2 and not vm.context.guard.held


def test_a_function_numba_cannot_type_runs_compiled_and_says_why() -> None:
    # pick(c, x, y) returns a 1-d or a 2-d tensor: one Numba function cannot return both
    b = ExecBuilder()
    specs = (h.tensor("c", (), "bool"), h.tensor("x", (3,)), h.tensor("y", (1, 3)))
    f = b.function("pick", ("c", "x", "y"), specs)
    one, two = f.label(), f.label()
    f.emit(Opcode.IF_IMM, 0, 1, one, two)
    f.place(one)
    f.emit(Opcode.RET, 1)
    f.place(two)
    f.emit(Opcode.RET, 2)
    vm = VirtualMachine(b.build(), exec_mode="native")
    assert vm.native_report().fallbacks == {}  # known only once it compiles
    x, y = np.ones(3, "float32"), np.zeros((1, 3), "float32")
    assert vm["pick"](np.array(True), x, y) is x
    assert vm["pick"](np.array(False), x, y) is y
    assert vm.native_report().fallbacks["pick"].startswith("Numba typing error: ")


def test_an_unwritable_cache_means_compiled_mode_with_the_reason(tmp_path, monkeypatch) -> None:
    from rvm.runtime.modes import native as native_mode

    ex = rvm.compile(RNN)  # its kernels load now, from the usual cache
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    monkeypatch.setattr(native_mode.native_cache, "cache_dir", lambda: blocked)
    vm = VirtualMachine(ex, exec_mode="native")
    args = (_f32(1, 8), _f32(8, 8) * 0.3, _i64(3))
    assert_values_close(vm["main"](*args), rvm.interpret(RNN, "main", *args), rtol=1e-5)
    assert "the native module did not load" in vm.native_report().fallbacks["main"]
