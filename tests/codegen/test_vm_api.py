"""The VM's Python API on compiled programs: errors, state, instrumentation, profiling,
threads and memory, in every exec mode and with every kernel backend."""

from __future__ import annotations

import gc
import json
import threading
import tracemalloc

import numpy as np
import pytest

import rvm
from rvm.testing import assert_values_close
from rvm.testing.programs import MLP, PROGRAMS, Recursion


@pytest.fixture
def mlp_vm(exec_mode, kernels, compiled):
    return rvm.VirtualMachine(compiled(MLP, kernels), exec_mode=exec_mode)


def mlp_args(n: int = 3) -> list[np.ndarray]:
    args = list(PROGRAMS[0].args())
    args[0] = np.random.default_rng(n).standard_normal((n, 784)).astype("float32")
    return args


def test_wrong_arity_dtype_and_shape(mlp_vm):
    x, w1, b1, w2, b2 = mlp_args()
    with pytest.raises(TypeError, match=r"main takes 5 arguments \(x, w1, b1, w2, b2\), got 4"):
        mlp_vm["main"](x, w1, b1, w2)
    with pytest.raises(TypeError, match="main: argument 1 'w1' expects float32, got float64"):
        mlp_vm["main"](x, w1.astype("float64"), b1, w2, b2)
    with pytest.raises(rvm.ShapeError, match=r"argument 0 'x' expects a 2-d tensor"):
        mlp_vm["main"](x[0], w1, b1, w2, b2)
    with pytest.raises(rvm.ShapeError, match=r"argument 2 'b1' has shape \(127,\), expected"):
        mlp_vm["main"](x, w1, b1[:127], w2, b2)
    # a bad call leaves the VM usable
    out = mlp_vm["main"](x, w1, b1, w2, b2)
    assert_values_close(out, PROGRAMS[0].numpy_ref(x, w1, b1, w2, b2), rtol=1e-4, atol=1e-5)


def test_symbolic_dimension_disagreement_names_both_arguments(exec_mode, kernels):
    from rvm.testing.programs import Attention  # noqa: F401  (one symbolic dim, one param)

    mod = rvm.script.parse(
        """
from rvm import op
from rvm.script import T, module, func

@module
class M:
    @func
    def main(x: T[("n", 4), "float32"], y: T[("n", 4), "float32"]):
        return x + y
"""
    )
    vm = rvm.VirtualMachine(rvm.compile(mod, kernels=kernels), exec_mode=exec_mode)
    x, y = np.ones((3, 4), "float32"), np.ones((2, 4), "float32")
    with pytest.raises(
        rvm.ShapeError, match=r"main: argument 1 'y' has shape \(2, 4\), but n = 3 from argument 0"
    ):
        vm["main"](x, y)
    np.testing.assert_array_equal(vm["main"](x, x), x + x)


def test_dlpack_and_array_like_inputs(mlp_vm):
    x, w1, b1, w2, b2 = mlp_args()

    class ArrayLike:
        def __init__(self, a):
            self.a = a

        def __array__(self, dtype=None, copy=None):
            return self.a

    out = mlp_vm["main"](ArrayLike(x), w1, b1, w2, b2)
    assert isinstance(out, np.ndarray)
    # numpy arrays export __dlpack__; a non-contiguous view is made contiguous
    xt = np.asfortranarray(x)
    assert_values_close(mlp_vm["main"](xt, w1, b1, w2, b2), out)


def test_stateful_api_by_name_and_position(mlp_vm):
    x, w1, b1, w2, b2 = mlp_args()
    expected = mlp_vm["main"](x, w1, b1, w2, b2)
    mlp_vm.set_input("main", x, w1, b1, w2=w2, b2=b2)
    mlp_vm.invoke_stateful("main")
    assert_values_close(mlp_vm.get_outputs("main"), expected)
    mlp_vm.save_function("main", "main_bound", x, w1, b1, w2, b2)
    assert_values_close(mlp_vm["main_bound"](), expected)


def test_time_evaluator_and_profile(mlp_vm):
    args = mlp_args()
    t = mlp_vm.time_evaluator("main", number=3, repeat=2)(*args)
    assert len(t.results) == 2 and t.mean > 0 and t.median > 0 and t.std >= 0
    x, w1, b1, w2, b2 = args
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
            vm = rvm.VirtualMachine(compiled(MLP, kernels), exec_mode=mode)
            report = vm.profile("main", *args, repeat=2)
            doc = json.loads(report.json())
            rows = tuple(sorted((r["name"], r["calls"], tuple(r["shapes"])) for r in report.rows))
            shapes.add((tuple(doc), tuple(tuple(r) for r in doc["rows"]), rows))
    assert len(shapes) == 1, shapes


def test_instrument_counts_and_skip_run(exec_mode, kernels, compiled):
    vm = rvm.VirtualMachine(compiled(Recursion, kernels), exec_mode=exec_mode)
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
    vm = rvm.VirtualMachine(compiled(MLP, kernels), exec_mode=exec_mode)
    seen: list[str] = []

    def skip_kernels(name, args, before):
        if before and name.startswith("fused"):
            seen.append(name)
            return rvm.SKIP_RUN
        return None

    vm.set_instrument(skip_kernels)
    out = vm["main"](*mlp_args())  # kernels skipped: the output holds whatever memory it got
    assert out.shape == (3, 10) and len(seen) == 3  # matmul+add+relu, matmul+add, softmax
    vm.set_instrument(None)
    args = mlp_args()
    assert_values_close(vm["main"](*args), PROGRAMS[0].numpy_ref(*args), rtol=1e-4, atol=1e-5)


def test_runtime_error_carries_vm_stack(exec_mode, kernels, compiled):
    vm = rvm.VirtualMachine(compiled(Recursion, kernels), exec_mode=exec_mode)

    def boom(name, args, before):
        if before and "subtract" in name:
            raise RuntimeError("injected")

    vm.set_instrument(boom)
    with pytest.raises(rvm.VMError, match=r"in @fib pc=\d+"):
        vm["fib"](np.int64(5))
    vm.set_instrument(None)
    assert int(vm["fib"](np.int64(5))) == 5


def test_threads_each_with_own_vm(exec_mode, kernels, compiled):
    ex = compiled(MLP, kernels)
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        try:
            vm = rvm.VirtualMachine(ex, exec_mode=exec_mode)
            for n in (1, 4, 2):
                args = mlp_args(n + seed)
                assert_values_close(
                    vm["main"](*args), PROGRAMS[0].numpy_ref(*args), rtol=1e-4, atol=1e-5
                )
        except BaseException as err:  # noqa: BLE001 - reported by the main thread
            errors.append(err)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


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
