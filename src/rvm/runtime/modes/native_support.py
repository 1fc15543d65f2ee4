"""What the native exec mode's generated files import: small njit helpers and constants.

The free names of `semantics.OVERRIDES["native"]` templates that are not numpy's: `empty`
(NEW_TENSOR and its kin: ``np.empty`` whose big tensors' memory is kept and reused across calls,
`rvm.kernels.blocks`, as the VM's pooled allocator does), `storage` (ALLOC_STORAGE, a block of
bytes, from the same blocks), `view` (ALLOC_TENSOR, a tensor over a block's bytes),
`shape_array` (SHAPE_OF), `by_symbol` (a kernel native code calls by symbol, not inlined:
`native_symbols`), `call_begin` and `call_end` (an entry's bookkeeping of the thread
pool, `rvm.kernels.workpool.call`'s, natively), `write_slice`
(`vm.builtin.write_slice`), `full0` (a scalar register where an array is needed), `constant`,
which rebuilds a small constant of the executable from the hex text a generated file holds
(Numba freezes module-level arrays into the code it compiles), and `bound`, a big constant: the
executable's own array, bound at load (`rvm.runtime.modes.native_constants`). A change to this
file or a module it imports changes the hash of every generated file
(`rvm.runtime.loading.cache.source_hash` covers the rvm modules a file imports), so no stale
object code is reused.

The helpers are jitted by `rvm.kernels.jitting.jit`: the constants a generated file passes them
(a block's byte count, a tensor's offset and shape) type as plain ints, so `view` compiles once
per rank and dtype, not once per shape (a test suite's native files built 57 `view`s and 17
`storage`s with Numba's literal typing), and LLVM still folds them where a call is inlined.

Imported only by generated files: importing it imports Numba.
"""

from __future__ import annotations

from pathlib import Path

import numba as nb
import numpy as np
from numba.extending import overload

from rvm.kernels import numba_cache
from rvm.kernels.blocks import empty
from rvm.kernels.jitting import jit
from rvm.kernels.workpool import call_begin as call_begin  # re-exported: native files import it
from rvm.kernels.workpool import call_end as call_end  # re-exported: native files import it
from rvm.runtime.builtins import slice_fits
from rvm.runtime.loading import NATIVE_SUPPORT_NAMES
from rvm.runtime.modes.native_constants import bound as bound  # re-exported: native files import it
from rvm.runtime.modes.native_symbols import by_symbol as by_symbol  # re-exported: native files

__all__ = ["BAIL", *NATIVE_SUPPORT_NAMES]

# The helpers below compile the library in (`empty`'s slots): their cached code goes with it.
numba_cache.drop_stale_user_code(Path(__file__))

BAIL = "rvm native: rerun in compiled mode"
"""The message of the exception native code raises where it hands the call back (a failed
shape check, FATAL, too deep a recursion): the compiled mode reruns the call and reports it."""


def constant(hex_bytes: str, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """A read-only array of `dtype` and `shape` from its bytes written as hex."""
    arr = np.frombuffer(bytes.fromhex(hex_bytes), dtype=np.dtype(dtype)).reshape(shape).copy()
    arr.flags.writeable = False
    return arr


@jit(cache=True, nogil=True)
def storage(nbytes):  # type: ignore[no-untyped-def]
    """A block of `nbytes` bytes (ALLOC_STORAGE; native memory is Numba's)."""
    return empty(nbytes, np.uint8)


def _size(shape: tuple[int, ...]) -> int:
    """The number of elements of `shape` (in native code; an empty tuple has one)."""
    size = 1
    for d in shape:
        size *= d
    return size


@overload(_size)
def _size_native(shape):  # type: ignore[no-untyped-def]
    if len(shape) == 0:  # Numba cannot iterate an empty tuple
        return lambda shape: 1

    def impl(shape):  # type: ignore[no-untyped-def]
        size = 1
        for d in shape:
            size *= d
        return size

    return impl


@jit(cache=True, nogil=True)
def view(block, offset, shape, dtype):  # type: ignore[no-untyped-def]
    """The tensor of `shape` and `dtype` in `block` from byte `offset` (ALLOC_TENSOR)."""
    nbytes = _size(shape) * np.empty(0, dtype).itemsize
    return block[offset : offset + nbytes].view(dtype).reshape(shape)


@jit(cache=True, nogil=True)
def full0(value, dtype):  # type: ignore[no-untyped-def]
    """A new 0-d array of `dtype` holding `value`: a scalar register of native code where an
    array is needed (a kernel's argument, a result, a call's argument, a tuple field)."""
    out = np.empty((), dtype)
    out[()] = value
    return out


@jit(cache=True, nogil=True)
def shape_array(tensor):  # type: ignore[no-untyped-def]
    """The shape of `tensor` as a 1-d int64 array (SHAPE_OF)."""
    out = np.empty(tensor.ndim, np.int64)
    for i in range(tensor.ndim):
        out[i] = tensor.shape[i]
    return out


_fits = nb.njit(cache=True, nogil=True)(slice_fits)


@jit(cache=True, nogil=True)
def write_slice(buffer, value, start, axis):  # type: ignore[no-untyped-def]
    """`vm.builtin.write_slice` in native code: ``value`` written into ``buffer`` in place
    from ``start`` along ``axis`` (0-d int arrays), ``buffer`` returned. Where the builtin
    raises (`builtins.slice_fits` fails), the call is handed back (`BAIL`) before anything
    is written, and the builtin raises its error in the compiled mode."""
    at, n = axis[()], start[()]
    if not _fits(buffer.shape, value.shape, at, n):
        raise RuntimeError(BAIL)
    outer, inner = 1, 1
    for i in range(buffer.ndim):
        if i < at:
            outer *= buffer.shape[i]
        elif i > at:
            inner *= buffer.shape[i]
    rows = np.ascontiguousarray(value).reshape((outer, value.shape[at], inner))
    into = buffer.reshape((outer, buffer.shape[at], inner))
    # By loops, not ``into[:, n:n + k, :] = rows``: Numba compiles that assignment with its
    # shape-mismatch message, seconds of LLVM here and in every native function linking this.
    for o in range(outer):
        for r in range(value.shape[at]):
            for i in range(inner):
                into[o, n + r, i] = rows[o, r, i]
    return buffer
