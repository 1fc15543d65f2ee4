"""Thread counts: `rvm.set_num_threads`, `rvm.get_num_threads`, ``RVM_NUM_THREADS``, and
several VMs running at once in several threads."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import numba
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
    rvm.set_num_threads(1)
    assert rvm.get_num_threads() == 1
    assert numba.get_num_threads() == 1
    rvm.set_num_threads(2)
    assert rvm.get_num_threads() == 2
    assert numba.get_num_threads() == min(2, numba.config.NUMBA_NUM_THREADS)
    rvm.set_num_threads(restore_threads)
    assert rvm.get_num_threads() == restore_threads


def test_more_threads_than_numba_allows_caps_numbas_count(restore_threads):
    rvm.set_num_threads(numba.config.NUMBA_NUM_THREADS + 3)
    assert numba.get_num_threads() == numba.config.NUMBA_NUM_THREADS


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
    code = "import rvm, numba; print(rvm.get_num_threads(), numba.get_num_threads())"
    out = _run_with_env("1", code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "1"]


def test_environment_variable_applies_at_the_first_vm():
    code = (
        "import rvm, rvm.runtime.native.threads as t, numba, numpy as np; "
        "from rvm.testing.programs import MLP; "
        "ex = rvm.compile(MLP, kernels='numpy'); rvm.VirtualMachine(ex); "
        "print(t._blas_control()[1](), numba.get_num_threads())"
    )
    out = _run_with_env("1", code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "1"]


def test_bad_environment_variable_names_it():
    out = _run_with_env("two", "import rvm; rvm.get_num_threads()")
    assert out.returncode != 0
    assert "environment variable RVM_NUM_THREADS: expected a positive whole number" in out.stderr
    assert "'two'" in out.stderr


def test_import_leaves_library_thread_counts_alone():
    code = (
        "import rvm.runtime.native.threads as t; before = t._blas_control()[1](); "
        "import rvm; print(before == t._blas_control()[1]())"
    )
    env = {k: v for k, v in os.environ.items() if k != "RVM_NUM_THREADS"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.stdout.strip() == "True", out.stderr


def _run_in_threads(ex, exec_mode: str, args: tuple, expected, rtol: float, atol: float):
    """Four threads, each with its own VM of ``ex``, call main 20 times with two BLAS
    threads; every result matches ``expected``."""
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
    """Convolutions large enough that each GEMM is split over two BLAS threads: stride-1
    3x3 (shifted GEMMs), stride-2 3x3 (im2col) and 1x1 (pointwise)."""

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
    """Each thread's convolutions split their GEMMs over the BLAS's threads at once."""
    ex = rvm.compile(CNN, kernels="jit")
    rng = np.random.default_rng(0)
    shapes = [(1, 32, 40, 40), (64, 32, 3, 3), (64, 64, 3, 3), (128, 64, 1, 1)]
    args = tuple(rng.standard_normal(s).astype("float32") / 8 for s in shapes)
    _run_in_threads(ex, exec_mode, args, _cnn_ref(*args), rtol=1e-4, atol=1e-4)


def test_without_openblas_thread_control_says_so_once_and_sets_numba(
    monkeypatch, caplog, restore_threads
):
    from rvm.runtime.native import threads

    monkeypatch.setattr(threads, "_blas", False)  # look the symbols up again ...
    monkeypatch.setattr(threads, "_SET_NAMES", ("no_such_set_num_threads",))  # ... and miss
    monkeypatch.setattr(threads, "_GET_NAMES", ("no_such_get_num_threads",))
    with caplog.at_level("WARNING", logger="rvm.jit"):
        rvm.set_num_threads(1)
        rvm.set_num_threads(1)
    assert numba.get_num_threads() == 1
    assert rvm.get_num_threads() == 1  # Numba's count stands in
    warnings = [r for r in caplog.records if "no OpenBLAS thread control" in r.getMessage()]
    assert len(warnings) == 1
    monkeypatch.undo()  # the real BLAS again, for the fixture's restore
