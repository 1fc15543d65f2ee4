"""Jit tests: a persistent kernel cache in the temp dir (repeated runs load, not compile)."""

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
