"""Big blocks for tensors that compiled code allocates: kept and reused across calls.

Numba's arrays take their memory from ``malloc``. A block above glibc's mmap threshold (32 MiB
at most) is mapped fresh at each allocation and unmapped when freed, so a program whose big
tensors are allocated in Numba code (the native exec mode's) pays a page fault per 4 KiB of
each tensor at every call: on 16M float32 elements, several times the work of the kernels that
fill them. The VM's pooled allocator (`rvm.runtime.memory`) keeps its blocks; this module does
the same for compiled code:

- `empty(shape, dtype)` (njit-callable) is ``np.empty`` whose memory comes from here when it
  has at least `MIN_BYTES`: a kept block of exactly that size if there is one, else a new one
  from ``malloc``;
- when Numba frees such an array (its last reference gone, in any thread), its block is kept
  in one of `SLOTS` slots while the kept bytes stay under the cap (`set_cap`; 1 GiB at first),
  else given back to ``malloc``. With every slot full, it takes the slot of the smallest kept
  block if that is smaller (which goes back to ``malloc``): a block costs a page fault per 4
  KiB each time it is mapped again, so the biggest are the ones to keep, and at two threads
  the kernels' scratch (a block per thread and size) must not crowd out the tensors above
  glibc's mmap threshold, which ``malloc`` maps afresh at every call;
- `kept(n, dtype)` (njit-callable) is the same at any size: scratch of one size a kernel
  takes at every call (`rvm.kernels.sgemm`'s packed panels);
- `held()` is the bytes kept, `release()` gives them all back.

On Linux a new block of at least `HUGE_BYTES` is advised to the kernel for transparent huge
pages (``madvise(MADV_HUGEPAGE)``), as NumPy advises its own big arrays (the VM's pooled
storage): streaming 64 MB through 4 KiB pages costs a TLB miss per page, 2-5% of an elementwise
kernel on 16M float32 elements.

The slots are an int64 array registered with llvmlite as ``rvm_blocks_state`` (allocated by
``calloc`` and never freed: an array may die at interpreter exit), claimed by compare-and-swap:
a slot holds 0 (empty), 1 (being filled or emptied by the thread that claimed it) or a block's
address, whose size is in the slot's size field. An array's block has a 16-byte header before
its data (64-byte aligned): the address ``malloc`` gave and the size.
"""

from __future__ import annotations

import ctypes
import os
import sys

from llvmlite import binding as llvm
from llvmlite import ir
from numba import types as nt
from numba.core import cgutils
from numba.core.runtime import _nrt_python
from numba.extending import intrinsic, overload
from numba.np.arrayobj import make_array, populate_array

from rvm.kernels import atomics, numba_cache
from rvm.kernels.jitting import jit

numba_cache.install()  # the functions compiled at import below load sealed object code only

__all__ = [
    "HUGE_BYTES",
    "MIN_BYTES",
    "SLOTS",
    "c_array",
    "empty",
    "held",
    "kept",
    "release",
    "set_cap",
]

MIN_BYTES = 1 << 20
"""Arrays of at least this many bytes take their memory from the kept blocks; smaller ones
are ``malloc``'s (which reuses small blocks itself)."""
HUGE_BYTES = 1 << 22
"""New blocks of at least this many bytes are advised for huge pages (Linux; NumPy's threshold)."""
SLOTS = 64
"""How many blocks are kept at most (the cap bounds their bytes): a model's tensors and its
kernels' scratch, one per thread and size, at every thread count."""
ALIGN = 64
"""The alignment of an array's data."""
_HEADER = 16
# The state's fields: the slots' addresses, their sizes, the kept bytes and the cap.
_SIZES, _HELD, _CAP = SLOTS, 2 * SLOTS, 2 * SLOTS + 1
_FIELDS = 2 * SLOTS + 2
_STATE = "rvm_blocks_state"

_libc = ctypes.CDLL(None)
_libc.calloc.restype = ctypes.c_void_p
_libc.calloc.argtypes = [ctypes.c_size_t, ctypes.c_size_t]
_address = _libc.calloc(_FIELDS, 8)  # never freed (see the module docstring)
if not _address:
    raise MemoryError("rvm.kernels.blocks: calloc of the slots failed")
_state = (ctypes.c_int64 * _FIELDS).from_address(_address)
_state[_CAP] = 1 << 30
llvm.add_symbol(_STATE, _address)
_HUGE = sys.platform.startswith("linux")  # MADV_HUGEPAGE (14) is Linux's
_MADV_HUGEPAGE = 14
_PAGE = os.sysconf("SC_PAGE_SIZE") if _HUGE else 4096  # this machine's page, not x86's
_C_NAMES = {"rvm_blocks_malloc": "malloc", "rvm_blocks_free": "free"}
if _HUGE:
    _C_NAMES["rvm_blocks_madvise"] = "madvise"
for _symbol, _name in _C_NAMES.items():
    llvm.add_symbol(_symbol, ctypes.cast(getattr(_libc, _name), ctypes.c_void_p).value)
_api = ctypes.CFUNCTYPE(ctypes.c_void_p)(_nrt_python.c_helpers["get_api"])()
# NRT_api_functions: allocate, allocate_external, manage_memory, ... (numba's nrt_external.h)
_MANAGE = "rvm_blocks_manage_memory"
_manage = ctypes.c_void_p.from_address(_api + 2 * ctypes.sizeof(ctypes.c_void_p))
llvm.add_symbol(_MANAGE, _manage.value)

_OPTS = {"nogil": True, "cache": True, "error_model": "numpy", "boundscheck": False}
_I64 = ir.IntType(64)


_load, _store, _add, _cas = atomics.fields(_STATE, _FIELDS)
"""The state's fields: the slots' addresses, their sizes, the kept bytes, the cap
(`rvm.kernels.atomics`)."""


@intrinsic
def _malloc(typingctx, nbytes):  # type: ignore[no-untyped-def]
    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        ptr = atomics.c_call(builder, "rvm_blocks_malloc", ir.IntType(8).as_pointer(), [args[0]])
        return builder.ptrtoint(ptr, _I64)

    return nt.int64(nt.int64), codegen


@intrinsic
def _free(typingctx, address):  # type: ignore[no-untyped-def]
    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        ptr = builder.inttoptr(args[0], ir.IntType(8).as_pointer())
        atomics.c_call(builder, "rvm_blocks_free", ir.VoidType(), [ptr])
        return context.get_dummy_value()

    return nt.void(nt.int64), codegen


@intrinsic
def _advise_huge(typingctx, address, nbytes):  # type: ignore[no-untyped-def]
    """``madvise(address, nbytes, MADV_HUGEPAGE)`` (a page-aligned range; its result, a
    mere advice's, is ignored)."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        ptr = builder.inttoptr(args[0], ir.IntType(8).as_pointer())
        advice = ir.IntType(32)(_MADV_HUGEPAGE)
        atomics.c_call(builder, "rvm_blocks_madvise", ir.IntType(32), [ptr, args[1], advice])
        return context.get_dummy_value()

    return nt.void(nt.int64, nt.int64), codegen


@intrinsic
def _peek(typingctx, address):  # type: ignore[no-untyped-def]
    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return builder.load(builder.inttoptr(args[0], _I64.as_pointer()))

    return nt.int64(nt.int64), codegen


@intrinsic
def _poke(typingctx, address, value):  # type: ignore[no-untyped-def]
    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        builder.store(args[1], builder.inttoptr(args[0], _I64.as_pointer()))
        return context.get_dummy_value()

    return nt.void(nt.int64, nt.int64), codegen


@jit(**_OPTS)
def _take(nbytes):  # type: ignore[no-untyped-def]
    """The data address of a block of ``nbytes`` (a kept one if any), or 0 (no memory)."""
    for s in range(SLOTS):
        base = _load(s)
        if base > 1 and _load(_SIZES + s) == nbytes and _cas(s, base, 1):
            if _load(_SIZES + s) != nbytes:  # refilled meanwhile: put it back
                _store(s, base)
                continue
            _store(s, 0)
            _add(_HELD, -nbytes)
            return (base + _HEADER + ALIGN - 1) // ALIGN * ALIGN
    base = _malloc(nbytes + _HEADER + ALIGN)
    if base == 0:
        return 0
    if _HUGE and nbytes >= HUGE_BYTES:  # the whole pages of the block
        first = (base + _PAGE - 1) // _PAGE * _PAGE
        _advise_huge(first, (base + nbytes + _HEADER + ALIGN - first) // _PAGE * _PAGE)
    data = (base + _HEADER + ALIGN - 1) // ALIGN * ALIGN
    _poke(data - 16, base)
    _poke(data - 8, nbytes)
    return data


@numba_cache.cfunc(nt.void(nt.int64), **_OPTS)
def _give(data):  # type: ignore[no-untyped-def]
    """Numba's destructor of a block's array: keeps the block, or frees it."""
    base, nbytes = _peek(data - 16), _peek(data - 8)
    if _add(_HELD, nbytes) + nbytes <= _load(_CAP):
        for s in range(SLOTS):
            if _cas(s, 0, 1):
                _store(_SIZES + s, nbytes)
                _store(s, base)
                return
        # Every slot full: the smallest kept block, if smaller, gives its slot to this one.
        smallest, victim = nbytes, -1
        for s in range(SLOTS):
            size = _load(_SIZES + s)
            if _load(s) > 1 and size < smallest:
                smallest, victim = size, s
        if victim >= 0:
            old = _load(victim)
            if old > 1 and _cas(victim, old, 1):  # claimed: its size field is old's
                size = _load(_SIZES + victim)
                if size < nbytes:
                    _store(_SIZES + victim, nbytes)
                    _store(victim, base)
                    _add(_HELD, -size)
                    _free(old)
                    return
                _store(victim, old)  # refilled meanwhile with a block as big: left there
    _add(_HELD, -nbytes)
    _free(base)


@numba_cache.cfunc(nt.int64(), **_OPTS)
def _release():  # type: ignore[no-untyped-def]
    freed = 0
    for s in range(SLOTS):
        base = _load(s)
        if base > 1 and _cas(s, base, 1):
            nbytes = _load(_SIZES + s)
            _store(s, 0)
            _add(_HELD, -nbytes)
            _free(base)
            freed += nbytes
    return freed


_GIVE = "rvm_blocks_give"
llvm.add_symbol(_GIVE, _give.address)
_release_c = ctypes.CFUNCTYPE(ctypes.c_int64)(_release.address)


@intrinsic
def _array(typingctx, data, shape, dtype):  # type: ignore[no-untyped-def]
    """The C-contiguous array of ``shape`` and ``dtype`` over block ``data`` (`_take`), which
    Numba gives back to `_give` when it frees the array."""
    ndim = len(shape)
    arrtype = nt.Array(dtype.dtype, ndim, "C")

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        address, dims = args[0], cgutils.unpack_tuple(builder, args[1])
        i8p = ir.IntType(8).as_pointer()
        dtor_type = ir.FunctionType(ir.VoidType(), [i8p])
        dtor = cgutils.get_or_insert_function(builder.module, dtor_type, _GIVE)
        manage_type = ir.FunctionType(i8p, [i8p, dtor_type.as_pointer()])
        manage = cgutils.get_or_insert_function(builder.module, manage_type, _MANAGE)
        ptr = builder.inttoptr(address, i8p)
        meminfo = builder.call(manage, [ptr, dtor])
        return c_array(context, builder, arrtype, ptr, dims, meminfo)

    return arrtype(data, shape, dtype), codegen


def c_array(context, builder, arrtype, data, dims, meminfo):  # type: ignore[no-untyped-def]
    """In an intrinsic's codegen: the value of the C-contiguous array type ``arrtype`` over
    ``data`` (a pointer), of shape ``dims`` (intp values), owned by ``meminfo`` (an i8
    pointer). Its strides are the row-major ones, in bytes."""
    itemsize = context.get_abi_sizeof(context.get_data_type(arrtype.dtype))
    strides, step = [], context.get_constant(nt.intp, itemsize)
    for d in reversed(dims[1:]):
        strides.insert(0, step)
        step = builder.mul(step, d)
    strides.insert(0, step)
    intp = context.get_value_type(nt.intp)
    ary = make_array(arrtype)(context, builder)
    populate_array(
        ary,
        data=builder.bitcast(data, context.get_data_type(arrtype.dtype).as_pointer()),
        shape=cgutils.pack_array(builder, dims, ty=intp),
        strides=cgutils.pack_array(builder, strides, ty=intp),
        itemsize=context.get_constant(nt.intp, itemsize),
        meminfo=meminfo,
    )
    return ary._getvalue()


def empty(shape, dtype):  # type: ignore[no-untyped-def]
    """``np.empty(shape, dtype)`` (C order) whose memory, from `MIN_BYTES` on, is a kept
    block (see the module docstring). Callable from compiled code only."""
    raise NotImplementedError("rvm.kernels.blocks.empty is callable from compiled code only")


@overload(empty)
def _empty(shape, dtype):  # type: ignore[no-untyped-def]
    import numpy as np

    itemsize = np.dtype(str(dtype.dtype)).itemsize
    if isinstance(shape, nt.Integer):
        return lambda shape, dtype: empty((shape,), dtype)
    if len(shape) == 0:
        return lambda shape, dtype: np.empty(shape, dtype)

    def impl(shape, dtype):  # type: ignore[no-untyped-def]
        nbytes = itemsize
        for d in shape:
            nbytes *= d
        if nbytes >= MIN_BYTES:
            data = _take(nbytes)
            if data != 0:
                return _array(data, shape, dtype)
        return np.empty(shape, dtype)

    return impl


def kept(n, dtype):  # type: ignore[no-untyped-def]
    """A 1-d `empty` of ``n`` elements whose memory is a kept block at any size: for scratch
    of one size that a kernel takes at every call (`rvm.kernels.sgemm`'s packed panels, 256
    KB), which ``malloc`` would otherwise map fresh, or take from a heap it trimmed, and
    fault in again at every call. Callable from compiled code only."""
    raise NotImplementedError("rvm.kernels.blocks.kept is callable from compiled code only")


@overload(kept)
def _kept(n, dtype):  # type: ignore[no-untyped-def]
    import numpy as np

    itemsize = np.dtype(str(dtype.dtype)).itemsize

    def impl(n, dtype):  # type: ignore[no-untyped-def]
        data = _take(n * itemsize)
        if data != 0:
            return _array(data, (n,), dtype)
        return np.empty(n, dtype)

    return impl


def held() -> int:
    """The bytes of the blocks kept now."""
    return int(_state[_HELD])


def release() -> int:
    """Gives every kept block back to ``malloc``; returns their bytes."""
    return int(_release_c())


def set_cap(nbytes: int) -> None:
    """Keeps at most ``nbytes`` of blocks (kept blocks above it are freed as they come back)."""
    _state[_CAP] = int(nbytes)
