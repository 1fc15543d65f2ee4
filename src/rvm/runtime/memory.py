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

`NaiveAllocator` makes a fresh block each time and lets numpy free it.
"""

from __future__ import annotations

import sys
import weakref
from collections import deque
from typing import Any

import numpy as np

__all__ = ["Storage", "NaiveAllocator", "PooledAllocator", "alloc_tensor", "make_allocator"]

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


def alloc_tensor(storage: Storage, offset: int, shape: tuple[int, ...], dtype: np.dtype) -> Any:
    """A C-contiguous tensor viewing `storage` at byte `offset`.

    Raises:
        ValueError: The tensor does not fit in the storage (numpy's message).
    """
    return np.ndarray(shape, dtype, storage.buffer, offset)


def _new_block(nbytes: int, alignment: int) -> tuple[np.ndarray, np.ndarray]:
    raw = np.empty(nbytes + alignment, np.uint8)
    start = (-raw.ctypes.data) % alignment
    return raw, raw[start : start + nbytes]


PROBES = 4
"""How many blocks of a size class an allocation checks before it makes a new one."""

MAX_POOLED_PER_CLASS = 256
"""Blocks a size class keeps; beyond it new blocks are plain (numpy frees them)."""


def _take_free(bucket: deque, probes: int = PROBES) -> Storage | None:
    """A free block of ``bucket``, checking at most ``probes`` of them (oldest first).

    Blocks handed out or found busy go to the back, so the front holds the blocks handed out
    longest ago: the likeliest to be free. The cost stays constant however many blocks of the
    class are alive (an ADT list of 10 000 tensors), where a full scan would make a program
    quadratic.
    """
    for _ in range(min(probes, len(bucket))):
        entry = bucket.popleft()
        bucket.append(entry)
        # Entries are [storage, storage baseline, raw baseline], measured in _alloc_new
        # exactly as checked here: the entry's slot, the local and getrefcount's argument;
        # for the raw buffer the storage's and the aligned view's references.
        storage = entry[0]
        if _getrefcount(storage) == entry[1] and _getrefcount(storage.owner) == entry[2]:
            return storage
    return None


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
        raw, buf = _new_block(nbytes, alignment)
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
        if bucket:
            # The first probe of _take_free, inline: in a steady loop the oldest block is free.
            entry = bucket[0]
            bucket.rotate(-1)
            storage = entry[0]
            if _getrefcount(storage) == entry[1] and _getrefcount(storage.owner) == entry[2]:
                self.pool_hits += 1
                return storage
            storage = _take_free(bucket, PROBES - 1)
            if storage is not None:
                self.pool_hits += 1
                return storage
        return self._alloc_new(nbytes, alignment)

    def _alloc_new(self, nbytes: int, alignment: int) -> Storage:
        if nbytes < 0:
            raise ValueError(f"cannot allocate a negative size ({nbytes} bytes)")
        size = size_class(nbytes)
        bucket = self._buckets.get((size, alignment))
        if bucket is None:
            bucket = self._buckets[(size, alignment)] = deque()
        self._requests[(nbytes, alignment)] = bucket
        storage = _take_free(bucket)  # a block of the class another request size made
        if storage is not None:
            self.pool_hits += 1
            return storage
        raw, buf = _new_block(size, alignment)
        storage = Storage(buf, size, raw)
        del raw, buf
        self.allocations += 1
        if len(bucket) >= MAX_POOLED_PER_CLASS:
            return storage  # so many live blocks of this size: this one is not pooled
        entry = [storage, 0, 0]
        bucket.append(entry)
        # Measured as _take_free checks: with the local `storage` bound.
        entry[1] = _getrefcount(storage)
        entry[2] = _getrefcount(storage.owner)
        self.reserved_bytes += size + alignment
        self.peak_bytes = max(self.peak_bytes, self.reserved_bytes)
        return storage

    @property
    def current_bytes(self) -> int:
        """Bytes of pooled blocks in use right now."""
        used = 0
        for bucket in self._buckets.values():
            for entry in bucket:
                storage = entry[0]
                if _getrefcount(storage) > entry[1] or _getrefcount(storage.owner) > entry[2]:
                    used += storage.nbytes
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


def make_allocator(kind: str) -> NaiveAllocator | PooledAllocator:
    """Returns a new allocator: "pooled" or "naive"."""
    if kind == "pooled":
        return PooledAllocator()
    if kind == "naive":
        return NaiveAllocator()
    raise ValueError(f"allocator must be 'pooled' or 'naive', got {kind!r}")
