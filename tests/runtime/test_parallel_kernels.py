"""Library loops split over threads (`rvm.kernels.parfor`): large pools and lrn run on
rvm's thread pool, give the reference's results from several VMs in several threads at once,
on one thread when `rvm.set_num_threads(1)` says so, in a forked process, and unsplit with
``RVM_SPLIT_LOOPS=0``."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import rvm
from rvm.kernels import parfor, pool
from rvm.op import numpy_ref
from rvm.testing import assert_values_close
from rvm.testing.threads import run_in_threads

SOURCE = """
from rvm import op
from rvm.script import T, module, func

@module
class M:
    @func
    def main(x: T[(1, 64, 57, 59), "float32"]):
        m = op.max_pool2d(x, pool_size=3, strides=2, padding=(1, 0, 1, 1), ceil_mode=True)
        a = op.avg_pool2d(x, pool_size=2, strides=2, count_include_pad=True)
        s = op.max_pool2d(x, pool_size=3, strides=1, padding=1)
        n = op.lrn(x, size=5, alpha=0.001, beta=0.75, bias=1.0)
        return op.relu(m), a, s, n
"""


def reference(x: np.ndarray) -> tuple[np.ndarray, ...]:
    m = numpy_ref.max_pool2d(x, (3, 3), (2, 2), (1, 0, 1, 1), (1, 1), True)
    a = numpy_ref.avg_pool2d(x, (2, 2), (2, 2), (0, 0, 0, 0), (1, 1), False, True)
    s = numpy_ref.max_pool2d(x, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), False)
    n = numpy_ref.lrn(x, size=5, axis=1, alpha=0.001, beta=0.75, bias=1.0)
    return np.maximum(m, 0), a, s, n


@pytest.fixture
def restore_threads() -> Iterator[int]:
    before = rvm.get_num_threads()
    yield before
    rvm.set_num_threads(before)


def test_the_models_pools_are_large_enough_to_split() -> None:
    n, c, ih, iw, oh, ow = 1, 64, 57, 59, 29, 30
    assert n * c * (ih * iw + oh * ow * 9) >= parfor.MIN_WORK


def test_one_thread_gives_the_same_pools(restore_threads) -> None:
    rvm.set_num_threads(1)
    x = np.random.default_rng(0).standard_normal((1, 64, 57, 59)).astype("float32")
    out = np.empty((1, 64, 29, 30), dtype="float32")
    pool.pool2d(x, out, 1, 3, 3, 2, 2, 1, 1, 1, 0, 1, 1, 1, 0)  # one thread: not split
    want = numpy_ref.max_pool2d(x, (3, 3), (2, 2), (1, 0, 1, 1), (1, 1), True)
    np.testing.assert_allclose(out, want)


@pytest.mark.parametrize("count", [1, 2, 3, 4])
def test_a_large_loop_is_cut_in_even_chunks_a_few_a_thread(restore_threads, count) -> None:
    """`parfor.chunks`: one below `MIN_WORK` or on one thread; else a multiple of the threads
    (where the items allow as many), at most `PIECES_PER_THREAD` a thread and one an item, of
    ``MIN_WORK // PIECES_PER_THREAD`` elements at least: a late helper leaves its caller a
    chunk, not half the loop."""
    rvm.set_num_threads(count)
    chunks = parfor.chunks.py_func
    most = parfor.PIECES_PER_THREAD * count
    assert chunks(parfor.MIN_WORK - 1, 1000) == 1
    for work in (parfor.MIN_WORK, 3 * parfor.MIN_WORK, 100 * parfor.MIN_WORK):
        for items in (1, count, 5, 7, 64, 1000):
            k = chunks(work, items)
            assert 1 <= k <= min(items, most)
            assert k == 1 if count == 1 else k >= min(items, count)
            assert k % count == 0 or items < count
            assert k == count or work // k >= parfor.MIN_WORK // parfor.PIECES_PER_THREAD
    assert chunks(100 * parfor.MIN_WORK, 1000) == (1 if count == 1 else most)


@pytest.mark.parametrize("channels", [3, 5, 13, 64])
def test_pools_cut_in_chunks_of_uneven_channels_match_the_reference(
    restore_threads, channels
) -> None:
    """Channels not a multiple of the chunks: each chunk's range of them, every one once."""
    rvm.set_num_threads(2)
    # rows enough that the pool splits on any CPU (`parfor.MIN_WORK` is the lanes')
    h = 121 * -(-parfor.MIN_WORK // (channels * (121 * 117 + 60 * 58 * 9)))
    oh = (h - 3) // 2 + 1
    x = np.random.default_rng(channels).standard_normal((1, channels, h, 117)).astype("float32")
    assert parfor.chunks(channels * (h * 117 + oh * 58 * 9), channels) > 1
    out = np.full((1, channels, oh, 58), np.nan, dtype="float32")
    pool.pool2d(x, out, 1, 3, 3, 2, 2, 1, 1, 0, 0, 0, 0, 0, 0)
    want = numpy_ref.max_pool2d(x, (3, 3), (2, 2), (0, 0, 0, 0), (1, 1), False)
    np.testing.assert_allclose(out, want)


def test_split_loops_are_on_by_default() -> None:
    assert parfor.enabled()


@pytest.mark.parametrize("count", [2, 3])
def test_vms_in_threads_at_once_match_reference(exec_mode, kernels, restore_threads, count):
    """Three VMs in three threads, each splitting its loops over the pool or, while another's
    job holds it, running them whole."""
    rvm.set_num_threads(count)
    ex = rvm.compile(rvm.script.parse(SOURCE), kernels=kernels)
    start = threading.Barrier(3)

    def work(seed: int) -> None:
        vm = rvm.VirtualMachine(ex, exec_mode=exec_mode)
        rng = np.random.default_rng(seed)
        start.wait()
        for _ in range(5):
            x = rng.standard_normal((1, 64, 57, 59)).astype("float32")
            for got, want in zip(vm["main"](x), reference(x), strict=True):
                assert_values_close(got, want, rtol=1e-5, atol=1e-6)

    run_in_threads(work, 3)


FORKED = """
import multiprocessing as mp
import numpy as np
from rvm.kernels import pool

def run(seed):
    x = np.random.default_rng(seed).standard_normal((1, 64, 57, 59)).astype("float32")
    out = np.empty((1, 64, 28, 29), dtype="float32")
    pool.pool2d(x, out, 1, 3, 3, 2, 2, 1, 1, 0, 0, 0, 0, 0, 0)
    return float(out.sum())

if __name__ == "__main__":
    import rvm
    rvm.set_num_threads(2)
    parent = run(0)  # runs on this process's pool
    with mp.get_context("fork").Pool(1) as workers:
        assert workers.apply(run, (0,)) == parent
    print("ok")
"""


def test_a_forked_process_runs_split_loops(tmp_path) -> None:
    # GNU OpenMP (Numba's omp layer) terminated a forked child that entered its parent's pool.
    script = tmp_path / "forked.py"
    script.write_text(FORKED)
    done = subprocess.run(
        [sys.executable, str(script)], env=_env(), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


SPLIT_ENV = """
import numpy as np
import rvm
from rvm.kernels import parfor, pool
from rvm.op import numpy_ref

rvm.set_num_threads(2)
x = np.random.default_rng(0).standard_normal((1, 64, 57, 59)).astype("float32")
out = np.empty((1, 64, 28, 29), dtype="float32")
pool.pool2d(x, out, 1, 3, 3, 2, 2, 1, 1, 0, 0, 0, 0, 0, 0)
want = numpy_ref.max_pool2d(x, (3, 3), (2, 2), (0, 0, 0, 0), (1, 1), False)
np.testing.assert_allclose(out, want)
print(parfor.enabled())
"""


def _env(**extra: str) -> dict[str, str]:
    """This process's environment, with this checkout's rvm first on the path."""
    src = str(Path(rvm.__file__).resolve().parents[1])
    path = os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, **extra}


@pytest.mark.parametrize("value, enabled", [("0", "False"), ("1", "True"), ("", "True")])
def test_split_loops_environment_variable(value: str, enabled: str) -> None:
    env = _env(RVM_SPLIT_LOOPS=value)
    done = subprocess.run(
        [sys.executable, "-c", SPLIT_ENV], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == enabled


def test_bad_split_loops_value_names_the_variable() -> None:
    env = _env(RVM_SPLIT_LOOPS="yes")
    code = "import rvm.kernels.parfor"
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode != 0
    assert "environment variable RVM_SPLIT_LOOPS: expected 0 or 1, got 'yes'" in done.stderr
