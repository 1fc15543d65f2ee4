"""The allocators: pooled reuse by reference counts, `alloc_view`, statistics."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import rvm
from rvm.runtime.memory import (
    PROBES,
    NaiveAllocator,
    PooledAllocator,
    alloc_tensor,
    alloc_view_of,
    size_class,
)
from rvm.testing.programs import MLP

F32 = np.dtype(np.float32)


def test_a_dropped_block_comes_back_and_a_held_one_does_not() -> None:
    pool = PooledAllocator()
    a = pool.alloc(100)
    first = id(a)
    del a
    b = pool.alloc(100)
    assert id(b) == first and pool.pool_hits == 1 and pool.allocations == 1
    t = alloc_tensor(b, 0, (25,), F32)
    del b  # the tensor keeps the block busy through its base
    c = pool.alloc(100)
    assert id(c) != first and pool.allocations == 2
    assert t.shape == (25,)


def test_size_classes_and_bad_sizes() -> None:
    assert size_class(1) == 64 and size_class(4096) == 4096 and size_class(5000) == 5120
    pool = PooledAllocator()
    assert pool.alloc(np.int64(10)).nbytes == 64  # numpy ints are sizes too
    with pytest.raises(ValueError, match="negative"):
        pool.alloc(-1)


def test_alloc_view_reuses_the_tensor_object_when_nothing_holds_it() -> None:
    pool = PooledAllocator()
    t = pool.alloc_view(512, 64, (1, 128), F32)
    first = id(t)
    t[...] = 1
    del t
    u = pool.alloc_view(512, 64, (1, 128), F32)
    assert id(u) == first and u.shape == (1, 128) and u.dtype == F32
    assert pool.allocations == 1 and pool.pool_hits == 1


def test_alloc_view_never_hands_out_a_held_tensor() -> None:
    pool = PooledAllocator()
    held = pool.alloc_view(512, 64, (1, 128), F32)
    held[...] = 7
    other = pool.alloc_view(512, 64, (1, 128), F32)
    other[...] = 3
    assert other is not held and np.all(held == 7) and pool.allocations == 2
    part = other[0, :4]  # a view of the view keeps the block busy
    del other
    again = pool.alloc_view(512, 64, (1, 128), F32)
    again[...] = 5
    assert np.all(part == 3) and np.all(held == 7)


def test_alloc_view_with_a_new_shape_makes_a_new_view() -> None:
    pool = PooledAllocator()
    t = pool.alloc_view(512, 64, (1, 128), F32)
    del t
    u = pool.alloc_view(512, 64, (2, 64), F32)
    assert u.shape == (2, 64) and pool.allocations == 1
    del u
    v = pool.alloc_view(512, 64, (2, 64), F32)
    assert v.shape == (2, 64) and pool.allocations == 1 and pool.pool_hits == 2


def test_alloc_view_counts_like_alloc_then_view() -> None:
    """The same requests through both paths give the same statistics (the exec modes agree)."""
    sizes = [512, 40, 512, 4096, 40, 512, 512, 70000]

    def run(view: bool) -> tuple[int, int, int]:
        pool, keep = PooledAllocator(), []
        for i, n in enumerate(sizes):
            shape = (n // 4,)
            if view:
                t = pool.alloc_view(n, 64, shape, F32)
            else:
                t = alloc_tensor(pool.alloc(n, 64), 0, shape, F32)
            if i % 3 == 0:
                keep.append(t)
            del t
        return pool.allocations, pool.pool_hits, pool.current_bytes

    assert run(True) == run(False)


def test_the_pool_checks_a_bounded_number_of_blocks() -> None:
    pool = PooledAllocator()
    held = [pool.alloc(64) for _ in range(PROBES + 3)]
    pool.alloc(64)  # every probed block is held: a new one, after PROBES checks
    assert pool.allocations == PROBES + 4
    assert pool.current_bytes == 64 * (PROBES + 3)
    del held


def test_naive_allocator_views() -> None:
    naive = NaiveAllocator()
    t = alloc_view_of(naive)(512, 64, (1, 128), F32)
    assert t.shape == (1, 128) and t.ctypes.data % 64 == 0 and naive.allocations == 1


def test_symbolic_shapes_keep_memory_flat_and_results_intact(exec_mode, kernels) -> None:
    """The MLP with changing batch sizes: reused blocks and tensors, held results untouched."""
    vm = rvm.VirtualMachine(rvm.compile(MLP, kernels=kernels), exec_mode=exec_mode)
    rng = np.random.default_rng(0)
    shapes = [(784, 128), (128,), (128, 10), (10,)]
    weights = [rng.standard_normal(s).astype(np.float32) * 0.1 for s in shapes]
    inputs = {n: rng.standard_normal((n, 784)).astype(np.float32) for n in (1, 3, 8)}
    wants = {n: rvm.interpret(MLP, "main", x, *weights) for n, x in inputs.items()}
    held = {n: vm["main"](x, *weights) for n, x in inputs.items()}
    for _ in range(100):
        for x in inputs.values():
            vm["main"](x, *weights)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(500):
            for x in inputs.values():
                vm["main"](x, *weights)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 64 * 1024, f"memory grew by {grown} bytes"
    for n, got in held.items():  # results held from the first calls were never reused
        np.testing.assert_allclose(got, wants[n], rtol=1e-4, atol=1e-6)
