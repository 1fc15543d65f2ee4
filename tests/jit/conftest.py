"""Jit tests: a persistent kernel cache in the temp dir (repeated runs load, not compile), and
the caches of the subprocesses that compile for Haswell."""

from __future__ import annotations

import os
import sys
import tempfile

import pytest

import rvm

sys.path.insert(0, os.path.dirname(__file__))
os.environ.setdefault("RVM_CACHE_DIR", os.path.join(tempfile.gettempdir(), "rvm-test-cache"))


@pytest.fixture(params=[1, 2], ids=["1-thread", "2-threads"])
def blas_threads(request):
    """rvm's thread count for the test (GEMMs split over the pool), set back after it."""
    before = rvm.get_num_threads()
    rvm.set_num_threads(request.param)
    yield request.param
    rvm.set_num_threads(before)


@pytest.fixture(scope="session")
def haswell_caches(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """``NUMBA_CACHE_DIR`` and ``RVM_CACHE_DIR`` for the subprocesses that compile for Haswell
    (`jit_helpers.HASWELL`) on a wider host: one pair for the whole run, its xdist workers'
    too (under their shared temp folder), empty at its start. What one of those tests builds
    for Haswell (the library's GEMMs and convolutions: `test_cpu`'s AVX2 path) another loads
    (`test_sgemm`'s and `test_bf16`'s), as the suite's own caches serve the host's build, the
    workers' writes atomic and each build done once (`rvm.kernels.apart`); code built for
    another CPU stays apart from the suite's caches (Numba's and rvm's keys name the CPU
    too)."""
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    path = root / "haswell"
    path.mkdir(exist_ok=True)  # by each worker that asks
    return {"NUMBA_CACHE_DIR": str(path / "numba"), "RVM_CACHE_DIR": str(path / "rvm")}
