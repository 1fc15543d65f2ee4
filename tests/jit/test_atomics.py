"""`rvm.kernels.atomics`: the four atomics on a registered int64 state array, contiguous and
strided, against the array's values as Python reads them, and under two threads."""

from __future__ import annotations

import ctypes
import threading

import numba as nb
from llvmlite import binding as llvm

from rvm.kernels import atomics

COUNT, STRIDE = 4, 8
_flat = (ctypes.c_int64 * COUNT)()
_lines = (ctypes.c_int64 * (COUNT * STRIDE))()
llvm.add_symbol("rvm_test_atomics_flat", ctypes.addressof(_flat))
llvm.add_symbol("rvm_test_atomics_lines", ctypes.addressof(_lines))
flat = atomics.fields("rvm_test_atomics_flat", COUNT)
lines = atomics.fields("rvm_test_atomics_lines", COUNT, STRIDE)


def _ops(fields):  # type: ignore[no-untyped-def]
    load, store, add, cas = fields

    @nb.njit(nogil=True)
    def run(i):  # type: ignore[no-untyped-def]
        store(i, 5)
        before = add(i, 3)
        swapped = cas(i, 8, 20)
        missed = cas(i, 8, 30)
        return before, swapped, missed, load(i)

    @nb.njit(nogil=True)
    def count(i, n):  # type: ignore[no-untyped-def]
        for _ in range(n):
            add(i, 1)

    return run, count


def test_fields_read_and_write_the_array() -> None:
    for fields, array, stride in ((flat, _flat, 1), (lines, _lines, STRIDE)):
        run, _ = _ops(fields)
        for i in range(COUNT):
            assert run(i) == (5, True, False, 20)
            assert array[i * stride] == 20
        # the fields are where the stride puts them: nothing between them written
        written = {i * stride for i in range(COUNT)}
        assert all(array[k] == 0 for k in range(len(array)) if k not in written)


def test_add_is_atomic_across_threads() -> None:
    _, count = _ops(lines)
    _lines[STRIDE], _lines[0] = 0, 7
    n = 200_000
    threads = [threading.Thread(target=count, args=(1, n)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert _lines[STRIDE] == 2 * n
    assert _lines[0] == 7  # the field before it untouched
