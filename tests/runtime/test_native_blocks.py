"""Big tensors allocated in compiled code (`rvm.kernels.blocks`): results in every exec mode,
no aliasing between live results, blocks kept and given back."""

from __future__ import annotations

import os
import textwrap
import threading

import numba as nb
import numpy as np
import pytest

import rvm
from rvm.kernels import blocks

N = 1 << 19  # 2 MiB of float32: above blocks.MIN_BYTES
CHAIN = rvm.script.parse(
    textwrap.dedent(
        """
        @module
        class Chain:
            @func
            def main(x: T[("n",), "float32"]):
                t = x * 0.75 + 0.1
                return x + t * op.sigmoid(t * 1.702)
        """
    )
)


def _gelu(x: np.ndarray) -> np.ndarray:
    t = x * np.float32(0.75) + np.float32(0.1)
    return x + t / (1 + np.exp(-t * np.float32(1.702)))


def test_big_tensors_in_every_mode(exec_mode: str) -> None:
    vm = rvm.VirtualMachine(rvm.compile(CHAIN), exec_mode=exec_mode)
    x = np.random.default_rng(0).standard_normal(N).astype("float32")
    first = vm["main"](x)
    kept = np.array(first)
    second = vm["main"](x + 1)  # its memory must not be the live first result's
    np.testing.assert_allclose(first, _gelu(x), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(first, kept)
    np.testing.assert_allclose(second, _gelu(x + 1), rtol=1e-5, atol=1e-6)
    if exec_mode == "native":
        assert not vm.native_report().fallbacks


def test_blocks_are_kept_and_given_back() -> None:
    @nb.njit
    def make(n):  # type: ignore[no-untyped-def]
        out = blocks.empty((n, 3), np.float64)
        out[:] = 1.5
        return out

    blocks.release()
    n = (blocks.MIN_BYTES // 24) + 7
    a = make(n)
    assert a.shape == (n, 3) and a.dtype == np.float64 and a.flags.c_contiguous
    assert a.ctypes.data % blocks.ALIGN == 0
    assert blocks.held() == 0
    address = a.ctypes.data
    del a
    assert blocks.held() == n * 24
    b = make(n)  # the kept block, again
    assert b.ctypes.data == address and blocks.held() == 0
    np.testing.assert_array_equal(b, np.full((n, 3), 1.5))
    c = make(n)  # b is alive: another block
    assert c.ctypes.data != b.ctypes.data
    small = make(3)
    assert small.shape == (3, 3)
    del b, c, small
    assert blocks.release() == 2 * n * 24
    assert blocks.held() == 0


def test_cap_and_threads() -> None:
    @nb.njit(nogil=True)
    def churn(n, rounds):  # type: ignore[no-untyped-def]
        total = 0.0
        for i in range(rounds):
            a = blocks.empty(n + (i % 3) * 1024, np.uint8)
            a[0] = 1
            a[-1] = 2
            total += a[0] + a[-1]
        return total

    blocks.release()
    blocks.set_cap(4 * blocks.MIN_BYTES)
    try:
        results: list[float] = []
        workers = [
            threading.Thread(target=lambda: results.append(churn(blocks.MIN_BYTES, 200)))
            for _ in range(4)
        ]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert results == [600.0] * 4
        assert 0 < blocks.held() <= 4 * blocks.MIN_BYTES + 2 * 1024
    finally:
        blocks.set_cap(1 << 30)
        blocks.release()
    assert blocks.held() == 0


def test_kept_scratch_of_any_size_is_kept() -> None:
    @nb.njit
    def scratch(n):  # type: ignore[no-untyped-def]
        out = blocks.kept(n, np.float32)
        out[:] = 2.5
        return out

    blocks.release()
    n = 1000  # 4000 bytes: far under MIN_BYTES, kept all the same
    a = scratch(n)
    assert a.shape == (n,) and a.dtype == np.float32 and a.ctypes.data % blocks.ALIGN == 0
    address = a.ctypes.data
    del a
    assert blocks.held() == 4 * n
    b = scratch(n)  # the kept block, again
    assert b.ctypes.data == address and blocks.held() == 0
    np.testing.assert_array_equal(b, np.full(n, 2.5, np.float32))
    del b
    assert blocks.release() == 4 * n


@nb.njit(nogil=True)
def _scratch(n):  # type: ignore[no-untyped-def]
    out = blocks.kept(n, np.uint8)
    out[0] = 1
    return out


@nb.njit(nogil=True)
def _tensors(n):  # type: ignore[no-untyped-def]
    """Two big tensors, as a native function's storages."""
    a, b = blocks.empty((n,), np.uint8), blocks.empty((n,), np.uint8)
    a[0], b[-1] = 1, 2
    return a, b


def _kept_sizes() -> list[int]:
    s = blocks._state
    return sorted(s[blocks.SLOTS + i] for i in range(blocks.SLOTS) if s[i] > 1)


def test_scratch_in_every_slot_does_not_crowd_out_big_tensors() -> None:
    """At two threads the kernels' scratch (a block per thread and size) filled every slot, so
    the native mode's big storages were freed and mapped afresh at every call (zfnet512 at
    batch 8: 960 page faults a call). The biggest blocks are kept: a big block coming back to
    full slots takes the smallest one's slot, and the next call takes it again."""
    blocks.release()
    small = [_scratch(4096 * (i + 1)) for i in range(blocks.SLOTS)]  # alive at once: distinct
    small_bytes = sum(a.size for a in small)
    del small
    assert blocks.held() == small_bytes and len(_kept_sizes()) == blocks.SLOTS
    n = 4 * blocks.MIN_BYTES
    pair = _tensors(n)
    del pair  # every slot full: the two smallest scratch blocks give theirs
    assert blocks.held() == small_bytes - 4096 - 8192 + 2 * n
    assert _kept_sizes()[-2:] == [n, n]
    pair = _tensors(n)  # both taken again, nothing new from malloc
    assert blocks.held() == small_bytes - 4096 - 8192 and n not in _kept_sizes()
    del pair

    def calls(thread: int) -> None:  # a native function called again and again beside scratch
        for i in range(50):
            pair = _tensors(n)
            # Each thread its own sizes: two threads taking one size at once keep a block each
            # (a block per thread and size, as kernels need), which the bound below leaves out.
            _scratch(4096 * ((2 * i + thread) % blocks.SLOTS + 1))
            del pair

    try:
        workers = [threading.Thread(target=calls, args=(t,)) for t in range(2)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        # Bounded: the scratch and a pair per thread at most (never a block per call).
        assert blocks.held() <= small_bytes + 4 * n
        assert _kept_sizes().count(n) >= 2
    finally:
        assert blocks.release() > 0
    assert blocks.held() == 0


def test_empty_from_python_says_where_it_works() -> None:
    with pytest.raises(NotImplementedError, match="callable from compiled code only"):
        blocks.empty((4,), np.float32)
    with pytest.raises(NotImplementedError, match="callable from compiled code only"):
        blocks.kept(4, np.float32)


def _vm_flags(address: int) -> list[str]:
    """The VmFlags of the mapping holding ``address`` (/proc/self/smaps)."""
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(v, 16) for v in head.split("-"))
                inside = lo <= address < hi
            elif inside and head == "VmFlags:":
                return line.split()[1:]
    return []


@pytest.mark.skipif(
    not blocks._HUGE or not os.path.exists("/sys/kernel/mm/transparent_hugepage/enabled"),
    reason="transparent huge pages are Linux's",
)
def test_a_big_new_block_is_advised_for_huge_pages() -> None:
    """As NumPy does for its big arrays (the VM's pooled storage), so native code streams big
    tensors through as few TLB entries as the compiled mode does."""

    @nb.njit
    def make(n):  # type: ignore[no-untyped-def]
        return blocks.empty((n,), np.float32)

    blocks.release()  # a new block, not a kept one advised or not
    big = make(blocks.HUGE_BYTES // 4 + 4096)
    assert "hg" in _vm_flags(big.ctypes.data + blocks.HUGE_BYTES // 2)
