"""Thread counts: `rvm.set_num_threads`, `rvm.get_num_threads`, ``RVM_NUM_THREADS``, OpenBLAS
on one thread from the first VM, and several VMs running at once in several threads."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import numpy as np
import pytest

import rvm
from rvm import op
from rvm.op import numpy_ref
from rvm.script import T, func, module
from rvm.testing.programs import MLP
from rvm.testing.threads import run_in_threads


@pytest.fixture
def restore_threads() -> Iterator[int]:
    """The thread count before the test, set back after it."""
    before = rvm.get_num_threads()
    yield before
    rvm.set_num_threads(before)


def test_set_then_get_roundtrips_and_restores(restore_threads):
    from rvm.kernels import workpool

    rvm.set_num_threads(1)
    assert rvm.get_num_threads() == 1
    assert workpool.helpers() == 0
    rvm.set_num_threads(3)
    assert rvm.get_num_threads() == 3
    assert workpool.helpers() == 2
    rvm.set_num_threads(restore_threads)
    assert rvm.get_num_threads() == restore_threads


@pytest.mark.parametrize("bad", [0, -2, 1.5, "2", True, None])
def test_bad_counts_raise_value_error(restore_threads, bad):
    with pytest.raises(ValueError, match=r"rvm.set_num_threads: expected a positive whole number"):
        rvm.set_num_threads(bad)
    assert rvm.get_num_threads() == restore_threads


def _run_with_env(value: str, code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RVM_NUM_THREADS": value}
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )


def test_environment_variable_sets_the_count_at_first_use():
    out = _run_with_env("1", "import rvm; print(rvm.get_num_threads())")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1"]


def test_default_is_every_cpu_this_process_may_use():
    env = {k: v for k, v in os.environ.items() if k != "RVM_NUM_THREADS"}
    code = "import os, rvm; print(rvm.get_num_threads() == len(os.sched_getaffinity(0)))"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.stdout.strip() == "True", out.stderr


FIRST_VM = (
    "import sys, rvm, rvm.kernels.threads as t; "
    "from rvm.testing.programs import MLP; "
    "ex = rvm.compile(MLP, kernels='{kernels}'); before = t.openblas_threads(); "
    "rvm.VirtualMachine(ex); "
    "pool = sys.modules.get('rvm.kernels.workpool'); "
    "print(before, t.openblas_threads(), pool.helpers() if pool else None)"
)


def test_first_vm_with_jit_kernels_starts_the_pool_and_sets_openblas_to_one_thread():
    out = _run_with_env("3", FIRST_VM.format(kernels="jit"))
    assert out.returncode == 0, out.stderr
    before, after, helpers = out.stdout.split()
    assert after == "1" and helpers == "2"


def test_first_vm_with_numpy_kernels_loads_no_pool():
    out = _run_with_env("3", FIRST_VM.format(kernels="numpy"))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[1:] == ["1", "None"]


NO_LAYER = """
import numba, numpy as np, rvm

M = rvm.script.parse('''
from rvm import op
from rvm.script import T, module, func

@module
class M:
    @func
    def main(x: T[(1, 32, 40, 40), "float32"], w: T[(64, 32, 3, 3), "float32"]):
        h = op.relu(op.conv2d(x, w, padding=1))
        return op.max_pool2d(h, pool_size=3, strides=2), op.lrn(h, size=5)
''')
ex = rvm.compile(M, kernels="jit")
rng = np.random.default_rng(0)
args = [rng.standard_normal(s, "float32") for s in [(1, 32, 40, 40), (64, 32, 3, 3)]]
for _ in range(3):
    rvm.VirtualMachine(ex)["main"](*args)
try:
    print(numba.threading_layer())
except ValueError:
    print("no threading layer")
"""


def test_parallel_kernels_never_start_numbas_threading_layer():
    """Split GEMMs, pools and lrn run on rvm's pool: Numba's threading layer (whose workqueue
    layer aborts when several threads enter it) is never launched."""
    out = _run_with_env("2", NO_LAYER)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "no threading layer"


def test_bad_environment_variable_names_it():
    out = _run_with_env("two", "import rvm; rvm.get_num_threads()")
    assert out.returncode != 0
    assert "environment variable RVM_NUM_THREADS: expected a positive whole number" in out.stderr
    assert "'two'" in out.stderr


def test_import_leaves_library_thread_counts_alone():
    code = (
        "import rvm.kernels.threads as t; before = t.openblas_threads(); "
        "import rvm, sys; print(before == t.openblas_threads(), "
        "'rvm.kernels.workpool' in sys.modules)"
    )
    env = {k: v for k, v in os.environ.items() if k != "RVM_NUM_THREADS"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.stdout.split() == ["True", "False"], out.stderr


def _run_in_threads(ex, exec_mode: str, args: tuple, expected, rtol: float, atol: float):
    """Four threads, each with its own VM of ``ex``, call main 20 times with two rvm
    threads (the four share one pool helper); every result matches ``expected``."""
    rvm.set_num_threads(2)
    results: dict[int, list[np.ndarray]] = {}

    def work(i: int) -> None:
        vm = rvm.VirtualMachine(ex, exec_mode=exec_mode)
        results[i] = [vm["main"](*args) for _ in range(20)]

    run_in_threads(work, 4)
    assert sorted(results) == [0, 1, 2, 3]
    for outs in results.values():
        for out in outs:
            np.testing.assert_allclose(out, expected, rtol=rtol, atol=atol)


def test_four_threads_with_their_own_vms_match_one_thread(exec_mode, restore_threads):
    ex = rvm.compile(MLP, kernels="jit")
    rng = np.random.default_rng(0)
    # Eight rows: past the small-row path, so matmul runs as a BLAS GEMM.
    args = (
        rng.standard_normal((8, 784)).astype("float32"),
        rng.standard_normal((784, 128)).astype("float32") * 0.05,
        rng.standard_normal(128).astype("float32"),
        rng.standard_normal((128, 10)).astype("float32") * 0.1,
        rng.standard_normal(10).astype("float32"),
    )
    rvm.set_num_threads(1)
    expected = rvm.VirtualMachine(ex, exec_mode=exec_mode)["main"](*args)
    _run_in_threads(ex, exec_mode, args, expected, rtol=1e-5, atol=1e-6)


@module
class CNN:
    """Convolutions large enough that each GEMM is split over two threads: stride-1 3x3
    and stride-2 3x3 (im2col) and 1x1 (pointwise)."""

    @func
    def main(
        x: T[(1, 32, 40, 40), "float32"],
        w1: T[(64, 32, 3, 3), "float32"],
        w2: T[(64, 64, 3, 3), "float32"],
        w3: T[(128, 64, 1, 1), "float32"],
    ):
        h = op.relu(op.conv2d(x, w1, padding=1))
        h = op.relu(op.conv2d(h, w2, strides=2, padding=1))
        return op.conv2d(h, w3)


def _cnn_ref(x, w1, w2, w3):
    h = np.maximum(numpy_ref.conv2d(x, w1, (1, 1), (1, 1, 1, 1), (1, 1), 1), 0)
    h = np.maximum(numpy_ref.conv2d(h, w2, (2, 2), (1, 1, 1, 1), (1, 1), 1), 0)
    return numpy_ref.conv2d(h, w3, (1, 1), (0, 0, 0, 0), (1, 1), 1)


def test_four_threads_running_convolutions_match_numpy(exec_mode, restore_threads):
    """Each thread's convolutions split their GEMMs over the pool, or run them whole while
    another thread's job holds it."""
    ex = rvm.compile(CNN, kernels="jit")
    rng = np.random.default_rng(0)
    shapes = [(1, 32, 40, 40), (64, 32, 3, 3), (64, 64, 3, 3), (128, 64, 1, 1)]
    args = tuple(rng.standard_normal(s).astype("float32") / 8 for s in shapes)
    _run_in_threads(ex, exec_mode, args, _cnn_ref(*args), rtol=1e-4, atol=1e-4)


def test_without_openblas_thread_control_the_first_vm_still_works(monkeypatch):
    from rvm.kernels import threads

    monkeypatch.setattr(threads, "_openblas_set", False)
    monkeypatch.setattr(threads, "_openblas_control", lambda: None)
    threads.apply_environment()  # sets nothing in the BLAS, raises nothing
    assert threads._openblas_set
