"""The VM's Python API: entry checks, VM errors, instrumentation, profiling, timing, state.

Hand-built executables first (every exec mode); then compiled programs with both kernel
backends, for what only real fused kernels show: profile rows, instrumented kernel calls,
threads and memory over many calls."""

from __future__ import annotations

import gc
import json
import tracemalloc

import numpy as np
import pytest
import rt_helpers as h

from rvm.errors import DTypeError, ShapeError, VMError
from rvm.runtime import SKIP_RUN, ExecBuilder, ParamSpec, VirtualMachine
from rvm.runtime import Opcode as O
from rvm.testing import assert_values_close
from rvm.testing.programs import MLP, PROGRAMS, Recursion
from rvm.testing.threads import run_in_threads


def f32(*shape: int) -> np.ndarray:
    return np.random.rand(*shape).astype(np.float32)


@pytest.fixture
def sym_vm(exec_mode) -> VirtualMachine:
    return VirtualMachine(h.symbolic_program(), exec_mode=exec_mode)


def test_symbolic_dimension_mismatch_names_both_arguments(sym_vm):
    with pytest.raises(ShapeError) as info:
        sym_vm["main"](f32(3, 4), f32(2, 4))
    assert str(info.value) == "main: argument 1 'y' has shape (2, 4), but n = 3 from argument 0 'x'"


def test_fixed_dimension_rank_dtype_and_count_errors(sym_vm):
    with pytest.raises(
        ShapeError,
        match=r"main: argument 0 'x' has shape \(3, 5\), but dimension 1 must be 4 "
        r"\(expected shape \(n, 4\)\)",
    ):
        sym_vm["main"](f32(3, 5), f32(3, 4))
    with pytest.raises(
        ShapeError,
        match=r"argument 1 'y' expects rank 2 \(shape \(n, 4\)\), got shape \(4,\)",
    ):
        sym_vm["main"](f32(3, 4), f32(4))
    with pytest.raises(DTypeError, match="main: argument 0 'x' expects dtype float32, got float64"):
        sym_vm["main"](np.zeros((3, 4)), f32(3, 4))
    with pytest.raises(TypeError, match=r"main takes 2 arguments \(x, y\), got 1"):
        sym_vm["main"](f32(3, 4))
    with pytest.raises(TypeError, match="argument 0 'x' expects a tensor, got tuple"):
        sym_vm["main"]((1, 2), f32(3, 4))


def test_inputs_lists_dlpack_and_non_contiguous(sym_vm):
    x = np.asfortranarray(f32(3, 4))
    np.testing.assert_allclose(sym_vm["main"](x, x), np.exp(x), rtol=1e-6)
    lst = [[0.5] * 4] * 2
    np.testing.assert_allclose(sym_vm["main"](lst, lst), np.exp(np.array(lst)), rtol=1e-6)

    class DL:
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, **kw):
            return self.a.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    y = f32(2, 4)
    np.testing.assert_allclose(sym_vm["main"](DL(y), y), np.exp(y), rtol=1e-6)


def test_vm_error_carries_the_vm_stack_and_the_next_call_works(exec_mode):
    b = ExecBuilder()
    bad = b.add_kernel(h.BAD)
    f = b.function("helper", ("x",))
    t = h.alloc(f, (2,))
    f.emit(O.INVOKE_PACKED, bad, 3, 1, (0, 0, t))
    f.emit(O.RET, t)
    f = b.function("main", ("x", "fail"))
    yes, no, r, one = f.label(), f.label(), f.new_register(), f.new_register()
    f.emit(O.LOAD_CONSTI, one, 1)
    f.emit(O.IF, 1, one, yes, no)
    f.place(yes)
    f.emit(O.INVOKE, r, "helper", (0,))
    f.emit(O.MOVE, 0, r)
    f.place(no)
    f.emit(O.RET, 0)
    vm = VirtualMachine(b.build(), exec_mode=exec_mode)
    x = f32(2)
    with pytest.raises(VMError) as info:
        vm["main"](x, np.int64(1))
    msg = str(info.value)
    assert msg.startswith("invoke_packed fused_add_exp failed: ValueError: kernel exploded")
    assert "in @main pc=2: invoke @helper\n  in @helper pc=3: invoke_packed fused_add_exp" in msg
    assert "line 3: raise ValueError('kernel exploded')" in msg  # the generated source line
    assert isinstance(info.value.__cause__, ValueError)
    np.testing.assert_array_equal(vm["main"](x, np.int64(0)), x)  # state was reset


def test_fatal_raises_vm_error_with_message(exec_mode):
    vm = VirtualMachine(h.every_opcode_program(), exec_mode=exec_mode)
    with pytest.raises(VMError, match=r"fatal: boom!\nVM stack.*\n  in @boom pc=0: fatal"):
        vm["boom"]()


def test_instrument_counts_and_skip_run(exec_mode):
    vm = VirtualMachine(h.straight_line(), exec_mode=exec_mode)
    x = np.ones(4, np.float32)
    calls = []

    def cb(name, args, before):
        calls.append((name, before, len(args)))
        return None

    vm.set_instrument(cb)
    vm["main"](x, x)
    assert calls == [("add", True, 3), ("add", False, 3), ("exp", True, 2), ("exp", False, 2)]

    def skip_exp(name, args, before):
        if before and name == "exp":
            args[-1][...] = -1.0  # what the output holds when the call is skipped
            return SKIP_RUN
        return None

    vm.set_instrument(skip_exp)
    np.testing.assert_array_equal(vm["main"](x, x), np.full(4, -1.0, np.float32))
    vm.set_instrument(None)
    np.testing.assert_allclose(vm["main"](x, x), np.exp(2 * x), rtol=1e-6)


def test_profile_report_rows(exec_mode):
    vm = VirtualMachine(h.symbolic_program(), exec_mode=exec_mode)
    x = f32(3, 4)
    report = vm.profile("main", x, x)
    # the shape builtins are VM work: in the VM-overhead line, not rows
    assert [(r["name"], r["calls"]) for r in report.rows] == [("exp", 1)]
    assert report.rows[0]["shapes"] == ["(float32[3, 4], float32[3, 4])"]
    assert report.repeat == 10 and report.warmup == 1
    assert report.total > 0 and report.kernel_total > 0 and report.vm_overhead >= 0
    text = str(report)
    assert "exp" in text and "VM overhead (dispatch, allocation, builtins)" in text
    header = "name,calls_per_run,total_s,mean_s,share,precision,shapes"
    assert report.csv().splitlines()[0] == header
    assert report.rows[0]["precision"] == "fp32"  # the kernel's, from its record
    assert json.loads(report.json())["function"] == "main"
    np.testing.assert_allclose(vm["main"](x, x), np.exp(x), rtol=1e-6)  # unwrapped again


def test_time_evaluator_fields(exec_mode):
    vm = VirtualMachine(h.straight_line(), exec_mode=exec_mode)
    x = np.ones(4, np.float32)
    res = vm.time_evaluator("main", number=5, repeat=3)(x, x)
    assert len(res.results) == 3 and all(t > 0 for t in res.results)
    assert res.mean > 0 and res.median > 0 and res.std >= 0
    res = vm.time_evaluator("main", number=1, repeat=1, min_repeat_ms=2)(x, x)
    assert res.number > 1


def test_set_input_by_name_and_invoke_stateful(exec_mode):
    vm = VirtualMachine(h.straight_line(), exec_mode=exec_mode)
    x, y = f32(4), f32(4)
    vm.set_input("main", x, y=y)
    vm.invoke_stateful("main")
    np.testing.assert_allclose(vm.get_outputs("main"), np.exp(x + y), rtol=1e-6)
    vm.set_input("main", y=y, x=x)
    vm.invoke_stateful("main")
    np.testing.assert_allclose(vm.get_outputs("main"), np.exp(x + y), rtol=1e-6)
    with pytest.raises(TypeError, match="no parameter 'z'"):
        vm.set_input("main", x, z=y)
    with pytest.raises(TypeError, match="main: missing argument 'x'"):
        vm.set_input("main", y=y)


def test_save_function(exec_mode):
    vm = VirtualMachine(h.straight_line(), exec_mode=exec_mode)
    x, y = f32(4), f32(4)
    vm.save_function("main", "main_bound", x, y)
    np.testing.assert_allclose(vm["main_bound"](), np.exp(x + y), rtol=1e-6)
    assert vm.time_evaluator("main_bound", number=2, repeat=1)().mean > 0


def test_unknown_function_name(exec_mode):
    vm = VirtualMachine(h.straight_line(), exec_mode=exec_mode)
    with pytest.raises(KeyError, match="no function 'nope'"):
        vm["nope"]


def test_tuple_and_adt_param_kinds(exec_mode):
    b = ExecBuilder()
    f = b.function("first", ("t",), (ParamSpec("t", "tuple"),))
    f.emit(O.GET_FIELD, 0, 0, 0)
    f.emit(O.RET, 0)
    vm = VirtualMachine(b.build(), exec_mode=exec_mode)
    np.testing.assert_array_equal(vm["first"]((np.ones(2), 3)), np.ones(2))
    with pytest.raises(TypeError, match="argument 0 't' expects a tuple, got ndarray"):
        vm["first"](np.ones(2))


# -- compiled programs with real kernels (jit and numpy), where the kernels matter ------------


@pytest.fixture
def mlp_vm(exec_mode, kernels, compiled):
    return VirtualMachine(compiled(MLP, kernels), exec_mode=exec_mode)


def mlp_args(n: int = 3) -> list[np.ndarray]:
    args = list(PROGRAMS[0].args())
    args[0] = np.random.default_rng(n).standard_normal((n, 784)).astype("float32")
    return args


def test_array_like_inputs(mlp_vm):
    x, w1, b1, w2, b2 = mlp_args()

    class ArrayLike:
        def __init__(self, a):
            self.a = a

        def __array__(self, dtype=None, copy=None):
            return self.a

    out = mlp_vm["main"](ArrayLike(x), w1, b1, w2, b2)
    assert isinstance(out, np.ndarray)
    assert_values_close(out, PROGRAMS[0].numpy_ref(x, w1, b1, w2, b2), rtol=1e-4, atol=1e-5)


def test_profile_of_fused_kernels(mlp_vm):
    x, w1, b1, w2, b2 = mlp_args()
    report = mlp_vm.profile("main", x, w1, b1, w2=w2, b2=b2, warmup=1, repeat=3)
    # one call of each fused kernel per run; the shape builtins are VM work
    assert sorted((r["name"], r["calls"]) for r in report.rows) == [
        ("fused_matmul_add", 1),
        ("fused_matmul_add_relu", 1),
        ("fused_softmax", 1),
    ]
    assert len(report.runs) == 3 and all(len(per) == 3 for _, per in report.runs)
    assert all(r["total"] > 0 and 0 < r["share"] <= 1 for r in report.rows)
    assert 0 <= report.vm_overhead < report.total
    assert "VM overhead" in str(report)
    assert "fused_matmul_add_relu" in report.csv()
    assert json.loads(report.json())["repeat"] == 3


def test_profile_has_one_structure_in_every_mode_and_backend(compiled):
    args = mlp_args(1)
    shapes = set()
    for kernels in ("numpy", "jit"):
        for mode in ("bytecode", "compiled"):
            vm = VirtualMachine(compiled(MLP, kernels), exec_mode=mode)
            report = vm.profile("main", *args, repeat=2)
            doc = json.loads(report.json())
            rows = tuple(sorted((r["name"], r["calls"], tuple(r["shapes"])) for r in report.rows))
            shapes.add((tuple(doc), tuple(tuple(r) for r in doc["rows"]), rows))
    assert len(shapes) == 1, shapes


def test_instrument_counts_kernel_calls_of_a_recursion(exec_mode, kernels, compiled):
    vm = VirtualMachine(compiled(Recursion, kernels), exec_mode=exec_mode)
    calls: dict[str, int] = {}

    def count(name, args, before):
        if before:
            calls[name] = calls.get(name, 0) + 1

    vm.set_instrument(count)
    assert int(vm["fib"](np.int64(10))) == 55
    kernel_calls = {k: v for k, v in calls.items() if not k.startswith("vm.builtin")}
    # fib(10) makes 177 calls: each compares n < 2; the 88 that recurse subtract twice, add once
    assert sum(v for k, v in kernel_calls.items() if "less" in k) == 177
    assert sum(v for k, v in kernel_calls.items() if "subtract" in k) == 2 * 88
    vm.set_instrument(None)
    assert int(vm["fib"](np.int64(10))) == 55


def test_skip_run_skips_kernels(exec_mode, kernels, compiled):
    vm = VirtualMachine(compiled(MLP, kernels), exec_mode=exec_mode)
    seen: list[str] = []

    def skip_kernels(name, args, before):
        if before and name.startswith("fused"):
            seen.append(name)
            return SKIP_RUN
        return None

    vm.set_instrument(skip_kernels)
    out = vm["main"](*mlp_args())  # kernels skipped: the output holds whatever memory it got
    assert out.shape == (3, 10) and len(seen) == 3  # matmul+add+relu, matmul+add, softmax
    vm.set_instrument(None)
    args = mlp_args()
    assert_values_close(vm["main"](*args), PROGRAMS[0].numpy_ref(*args), rtol=1e-4, atol=1e-5)


def test_threads_each_with_own_vm(exec_mode, kernels, compiled):
    ex = compiled(MLP, kernels)

    def work(seed: int) -> None:
        vm = VirtualMachine(ex, exec_mode=exec_mode)
        for n in (1, 4, 2):
            args = mlp_args(n + seed)
            assert_values_close(
                vm["main"](*args), PROGRAMS[0].numpy_ref(*args), rtol=1e-4, atol=1e-5
            )

    run_in_threads(work, 4)


def test_memory_stays_flat_over_many_calls(mlp_vm):
    args = mlp_args(2)
    for _ in range(50):
        mlp_vm["main"](*args)
    gc.collect()
    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        for _ in range(2000):
            mlp_vm["main"](*args)
        gc.collect()
        current, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert current - base < 256 * 1024, f"memory grew by {current - base} bytes"


def test_run_pipeline_dumps_every_pass(tmp_path):
    from rvm.transform import default_passes, run_pipeline

    run_pipeline(MLP, verify=True, dump_dir=tmp_path)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files[0] == "00_input.py" and files[-1].endswith("_kill.py")
    assert "vm.call_dps" in (tmp_path / files[-1]).read_text()
    assert len(files) == len(default_passes()) + 1  # the input, then one file per pass
