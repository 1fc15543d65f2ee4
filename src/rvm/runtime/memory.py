"""Storage blocks and the allocators the VM's ALLOC_STORAGE draws from.

A `Storage` is an aligned uint8 numpy buffer; ALLOC_TENSOR makes C-contiguous views of it
(`alloc_tensor`). Views keep the block's root buffer alive, so CPython's reference count tells
when nothing uses a block any more.

`PooledAllocator` keeps the blocks it made in buckets by size class and, on allocation, reuses a
block of the right class whose root buffer is referenced only by the pool (checked with
`sys.getrefcount`, against a baseline measured when the block was made), checking at most a few
blocks, oldest first, so an allocation costs the same however many blocks are alive. A tensor
the caller still holds keeps its block's count up, so a result is never overwritten by a later
call; a block comes back as soon as its last tensor dies (or its register is killed). Size
classes are multiples of 64 bytes up to 4 KiB, then steps of 1/8 of the power of two above, so
dynamic shapes reuse blocks with at most 12.5 % waste.

`alloc_view(nbytes, alignment, shape, dtype)` is `alloc` plus a view at offset 0 (the compiled
mode's made-viewed-dropped storage): the pool keeps the block's last such view with the block
and hands the same tensor object out again when nothing else refers to it, so a steady loop or
a repeated call makes no numpy views at all. The view counts in the block's freeness check.

`NaiveAllocator` makes a fresh block each time and lets numpy free it; it has no `alloc_view`
of its own, as an allocator object need not have one: `alloc_view_of` makes it from `alloc`.
"""

from __future__ import annotations

import sys
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = [
    "Storage",
    "NaiveAllocator",
    "PooledAllocator",
    "alloc_tensor",
    "alloc_view_of",
    "make_allocator",
    "new_block",
    "NAMED_ALLOCATORS",
]

_getrefcount = sys.getrefcount


class Storage:
    """A block of memory: `buffer` is an aligned, writable uint8 array of `nbytes` bytes.

    Attributes:
        buffer: The aligned uint8 view tensors are made from.
        nbytes: The usable size in bytes (the request, not the size class).
        owner: The root numpy array; its reference count tells the pool when it is free.
    """

    __slots__ = ("buffer", "nbytes", "owner")

    def __init__(self, buffer: np.ndarray, nbytes: int, owner: np.ndarray) -> None:
        self.buffer = buffer
        self.nbytes = nbytes
        self.owner = owner

    def __repr__(self) -> str:
        return f"Storage({self.nbytes} bytes)"


# Blocks of at most this many bytes are plain ``np.empty`` tensors in every exec mode: numpy's
# own allocator beats a pool lookup for a few bytes (`is_tiny`).
TINY_TENSOR_BYTES = 64


def is_tiny(nbytes: int) -> bool:
    """Whether a constant-size block of `nbytes` bytes is a tiny tensor: allocated with
    ``np.empty`` rather than from the VM's allocator, by every exec mode."""
    return nbytes <= TINY_TENSOR_BYTES


def alloc_tensor(storage: Storage, offset: int, shape: tuple[int, ...], dtype: np.dtype) -> Any:
    """A C-contiguous tensor viewing `storage` at byte `offset`.

    Raises:
        ValueError: The tensor does not fit in the storage (numpy's message).
    """
    return np.ndarray(shape, dtype, storage.buffer, offset)


def alloc_view_of(allocator: Any) -> Callable[[Any, int, tuple, np.dtype], Any]:
    """The allocator's `alloc_view`; for one with only `alloc` (the protocol an allocator
    object must follow), the same made from `alloc`: a tensor at offset 0 of a new block.

    The compiled mode calls this once per VM, so its generated code needs one allocator call
    per allocation whatever the allocator.
    """
    alloc_view = getattr(allocator, "alloc_view", None)
    if alloc_view is not None:
        return alloc_view
    alloc = allocator.alloc

    def alloc_then_view(nbytes: Any, alignment: int, shape: tuple, dtype: np.dtype) -> Any:
        return alloc_tensor(alloc(nbytes, alignment), 0, shape, dtype)

    return alloc_then_view


def new_block(nbytes: int, alignment: int) -> tuple[np.ndarray, np.ndarray]:
    """(the raw array, its ``nbytes`` uint8 bytes starting at a multiple of ``alignment``): a
    new block of the allocators, and an executable's aligned constant
    (`rvm.runtime.weights.aligned`)."""
    raw = np.empty(nbytes + alignment, np.uint8)
    start = (-raw.ctypes.data) % alignment
    return raw, raw[start : start + nbytes]


PROBES = 4
"""How many blocks of a size class an allocation checks before it makes a new one."""

MAX_POOLED_PER_CLASS = 256
"""Blocks a size class keeps; beyond it new blocks are plain (numpy frees them)."""


def _take_free(bucket: deque, probes: int = PROBES) -> list | None:
    """The entry of a free block of ``bucket``, checking at most ``probes`` (oldest first).

    Blocks handed out or found busy go to the back, so the front holds the blocks handed out
    longest ago: the likeliest to be free. The cost stays constant however many blocks of the
    class are alive (an ADT list of 10 000 tensors), where a full scan would make a program
    quadratic.
    """
    for _ in range(min(probes, len(bucket))):
        entry = bucket.popleft()
        bucket.append(entry)
        if _is_free(entry):
            return entry
    return None


# A pooled block's entry: [storage, its baseline, the raw buffer's baseline, the cached view or
# None, the view's baseline, the view's (shape, dtype)]. Baselines are reference counts taken
# exactly as _is_free takes them: for the storage the entry's slot, one local and getrefcount's
# argument; for the raw buffer the storage's and the aligned buffer's references (plus the
# cached view's base reference once there is one); for the view the entry's slot and the
# argument. Anything else holding one of them (a register, a result, a view of a view) raises
# its count, and the block is busy.
_STORAGE, _STORAGE_RC, _RAW_RC, _VIEW, _VIEW_RC, _VIEW_KEY = range(6)


def _is_free(entry: list) -> bool:
    storage = entry[_STORAGE]
    return (
        _getrefcount(storage) == entry[_STORAGE_RC]
        and _getrefcount(storage.owner) == entry[_RAW_RC]
        and (entry[_VIEW] is None or _getrefcount(entry[_VIEW]) == entry[_VIEW_RC])
    )


def size_class(nbytes: int) -> int:
    """The size a pooled block of `nbytes` bytes really gets."""
    if nbytes <= 4096:
        return max(64, (nbytes + 63) // 64 * 64)
    step = 1 << (nbytes.bit_length() - 4)  # an eighth of the power of two at or below
    return (nbytes + step - 1) // step * step


class NaiveAllocator:
    """A fresh block per allocation; numpy frees it when its last view dies.

    Attributes:
        allocations: Blocks made.
        pool_hits: Always 0 (there is no pool).
        peak_bytes: The most bytes alive at once, as seen at allocation times.
    """

    name = "naive"

    def __init__(self) -> None:
        self.allocations = 0
        self.pool_hits = 0
        self.peak_bytes = 0
        self._live: list[tuple[weakref.ref, int]] = []

    def alloc(self, nbytes: Any, alignment: int = 64) -> Storage:
        """Returns a new `Storage` of `nbytes` bytes aligned to `alignment`."""
        nbytes = int(nbytes)
        if nbytes < 0:
            raise ValueError(f"cannot allocate a negative size ({nbytes} bytes)")
        raw, buf = new_block(nbytes, alignment)
        self.allocations += 1
        self._live.append((weakref.ref(raw), raw.nbytes))
        if len(self._live) > 64 and self.allocations % 64 == 0:
            self._live = [(r, n) for r, n in self._live if r() is not None]
        self.peak_bytes = max(self.peak_bytes, self.current_bytes)
        return Storage(buf, nbytes, raw)

    @property
    def current_bytes(self) -> int:
        """Bytes of blocks still alive."""
        return sum(n for r, n in self._live if r() is not None)

    def release_all(self) -> None:
        """Forgets the statistics of live blocks (numpy frees them when unused)."""
        self._live.clear()

    def __repr__(self) -> str:
        return f"NaiveAllocator(allocations={self.allocations}, peak_bytes={self.peak_bytes})"


class PooledAllocator:
    """Reuses blocks nothing references any more (see the module docstring).

    A pooled block is handed out as the same `Storage` object each time, so its `nbytes` is
    the block's size class (at least the request). It is free when neither the `Storage` nor
    its root buffer has references beyond the pool's own.

    Attributes:
        allocations: Blocks made (pool misses).
        pool_hits: Allocations served by reusing a block.
        reserved_bytes: Bytes of every block the pool holds.
        peak_bytes: The most bytes the pool ever held.
    """

    name = "pooled"

    def __init__(self) -> None:
        self.allocations = 0
        self.pool_hits = 0
        self.reserved_bytes = 0
        self.peak_bytes = 0
        # (request bytes, alignment) -> the bucket of its size class; (class, alignment) -> it.
        self._requests: dict[tuple[int, int], deque] = {}
        self._buckets: dict[tuple[int, int], deque] = {}

    def alloc(self, nbytes: Any, alignment: int = 64) -> Storage:
        """Returns a `Storage` of at least `nbytes` bytes aligned to `alignment`."""
        if type(nbytes) is not int:
            nbytes = int(nbytes)
        bucket = self._requests.get((nbytes, alignment))
        if bucket:  # the first probe, as _is_free with literal indices: the common case
            entry = bucket[0]
            storage = entry[0]
            if (
                _getrefcount(storage) == entry[1]
                and _getrefcount(storage.owner) == entry[2]
                and (entry[3] is None or _getrefcount(entry[3]) == entry[4])
            ):
                bucket.rotate(-1)
                self.pool_hits += 1
                return storage
        return self._entry(bucket, nbytes, alignment)[_STORAGE]

    def alloc_view(self, nbytes: Any, alignment: int, shape: tuple, dtype: np.dtype) -> Any:
        """``alloc_tensor(self.alloc(nbytes, alignment), 0, shape, dtype)``: the same block by
        the same rule and statistics, but the tensor object itself is reused when the block's
        last view from here had this shape and dtype and nothing refers to it any more.

        For a storage that is made, viewed once and dropped (the compiled mode's common case):
        a reused tensor skips making a numpy view and Numba's typing of a new array.
        """
        if type(nbytes) is not int:
            nbytes = int(nbytes)
        bucket = self._requests.get((nbytes, alignment))
        if bucket:  # alloc's first probe, repeated here: a call would cost a third of the hit
            entry = bucket[0]
            storage = entry[0]
            if (
                _getrefcount(storage) == entry[1]
                and _getrefcount(storage.owner) == entry[2]
                and (entry[3] is None or _getrefcount(entry[3]) == entry[4])
            ):
                bucket.rotate(-1)
                self.pool_hits += 1
                if entry[5] == (shape, dtype):
                    return entry[3]
            else:
                entry = self._entry(bucket, nbytes, alignment)
        else:
            entry = self._entry(bucket, nbytes, alignment)
        if entry[_STORAGE_RC] is None:  # not pooled
            return np.ndarray(shape, dtype, entry[_STORAGE].buffer, 0)
        if entry[_VIEW_KEY] == (shape, dtype):
            return entry[_VIEW]
        if entry[_VIEW] is None:
            entry[_RAW_RC] += 1  # the cached view's base reference
        entry[_VIEW] = np.ndarray(shape, dtype, entry[_STORAGE].buffer, 0)
        entry[_VIEW_KEY] = (shape, dtype)
        entry[_VIEW_RC] = _getrefcount(entry[_VIEW])
        return entry[_VIEW]

    def _entry(self, bucket: deque | None, nbytes: int, alignment: int) -> list:
        """The entry of a free block for a request whose bucket's front block is busy."""
        if bucket:
            entry = _take_free(bucket)  # probes the front once more: still busy, to the back
            if entry is not None:
                self.pool_hits += 1
                return entry
        return self._alloc_new(nbytes, alignment)

    def _alloc_new(self, nbytes: int, alignment: int) -> list:
        if nbytes < 0:
            raise ValueError(f"cannot allocate a negative size ({nbytes} bytes)")
        size = size_class(nbytes)
        bucket = self._buckets.get((size, alignment))
        if bucket is None:
            bucket = self._buckets[(size, alignment)] = deque()
        self._requests[(nbytes, alignment)] = bucket
        entry = _take_free(bucket)  # a block of the class another request size made
        if entry is not None:
            self.pool_hits += 1
            return entry
        raw, buf = new_block(size, alignment)
        storage = Storage(buf, size, raw)
        del raw, buf
        self.allocations += 1
        entry = [storage, None, None, None, None, None]
        if len(bucket) >= MAX_POOLED_PER_CLASS:
            return entry  # so many live blocks of this size: this one is not pooled
        bucket.append(entry)
        # Measured as _is_free checks: with the local `storage` bound.
        entry[_STORAGE_RC] = _getrefcount(storage)
        entry[_RAW_RC] = _getrefcount(storage.owner)
        self.reserved_bytes += size + alignment
        self.peak_bytes = max(self.peak_bytes, self.reserved_bytes)
        return entry

    @property
    def current_bytes(self) -> int:
        """Bytes of pooled blocks in use right now."""
        used = 0
        for bucket in self._buckets.values():
            for entry in bucket:
                if not _is_free(entry):
                    used += entry[_STORAGE].nbytes
        return used

    def release_all(self) -> None:
        """Drops every block from the pool; blocks still in use stay alive with their tensors."""
        self._buckets.clear()
        self._requests.clear()
        self.reserved_bytes = 0

    def __repr__(self) -> str:
        return (
            f"PooledAllocator(reserved_bytes={self.reserved_bytes}, "
            f"allocations={self.allocations}, pool_hits={self.pool_hits})"
        )


# The VM's own allocators by name (a VM made with one of these names can be re-created, and
# the native mode may allocate beside them).
NAMED_ALLOCATORS: dict[str, type[NaiveAllocator] | type[PooledAllocator]] = {
    "pooled": PooledAllocator,
    "naive": NaiveAllocator,
}


def make_allocator(kind: str) -> NaiveAllocator | PooledAllocator:
    """Returns a new allocator: "pooled" or "naive"."""
    cls = NAMED_ALLOCATORS.get(kind)
    if cls is None:
        raise ValueError(f"allocator must be 'pooled' or 'naive', got {kind!r}")
    return cls()
