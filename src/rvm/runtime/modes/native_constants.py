"""Big constants of native code: the executable's own arrays, bound at load, never frozen.

Numba freezes a module-level array into the object code it compiles and caches, so the native
mode writes only small constants into its files (`native_codegen.MAX_CONSTANT_BYTES`). A bigger
one (a model's weights) is read through a slot instead:

- `native_codegen` names the constant's slot by its content (dtype, shape, bytes;
  `NativeModule.bound`): the generated file names it, so the file's hash, and with it the cache
  entry of its object code, covers the weights, and identical weights share a slot;
- `bind(name, value)` (before the file's code is linked: the slot is a symbol registered with
  llvmlite, two int64: the data's address and a Numba MemInfo owning a reference to the
  array) points the slot at the array; it returns the release, which `native._Plan` calls when
  it dies, and the last release of a slot empties it;
- `bound(name, shape, dtype)` (in native code) is the read-only array over the slot's data. It
  holds a reference through the MemInfo, so a result that is a constant keeps its array alive
  after its executable is gone.
- a process that compiles native code reading a slot it never bound (the compile server,
  `rvm.kernels.compile_server`) makes the slot, empty, as it types the read: its code links.

Slots live for the process (16 bytes each); the arrays only while an executable binds them.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
from llvmlite import binding as llvm
from llvmlite import ir
from numba import types as nt
from numba.core import cgutils
from numba.core.runtime import _nrt_python
from numba.extending import intrinsic

from rvm.kernels.blocks import c_array

__all__ = ["bind", "bound"]

_lock = threading.Lock()
_slots: dict[str, Any] = {}  # symbol -> its two int64 (never freed)
_leases: dict[str, list[Any]] = {}  # symbol -> [count, array, meminfo]
_new_meminfo = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.py_object)(
    _nrt_python.c_helpers["meminfo_new_from_pyobject"]
)
_release_meminfo = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)(
    _nrt_python.c_helpers["MemInfo_release"]
)


def bind(name: str, value: np.ndarray) -> Callable[[], None]:
    """Points slot ``name`` at constant ``value`` (see the module docstring); returns the
    release of this binding."""
    with _lock:
        lease = _leases.get(name)
        if lease is None:
            array = np.ascontiguousarray(value)
            array.flags.writeable = False
            slot = _slot(name)
            meminfo = _new_meminfo(array.ctypes.data, array)
            if not meminfo:
                raise MemoryError(f"native constant {name}: no MemInfo")
            slot[0], slot[1] = array.ctypes.data, meminfo
            lease = _leases[name] = [0, array, meminfo]
        lease[0] += 1
    done = [False]

    def release() -> None:
        with _lock:
            if done[0]:
                return
            done[0] = True
            lease[0] -= 1
            if lease[0] == 0 and _leases.get(name) is lease:
                del _leases[name]
                slot = _slots[name]
                slot[0] = slot[1] = 0
                _release_meminfo(lease[2])

    return release


def _slot(name: str) -> Any:
    """Slot ``name``, made (empty) and registered with llvmlite if it is new. Call under
    `_lock`."""
    slot = _slots.get(name)
    if slot is None:
        slot = _slots[name] = (ctypes.c_int64 * 2)()
        llvm.add_symbol(name, ctypes.addressof(slot))
    return slot


@intrinsic
def bound(typingctx, name, shape, dtype):  # type: ignore[no-untyped-def]
    """The read-only C-contiguous array of ``shape`` and ``dtype`` that slot ``name`` (a
    string literal) points at."""
    if not isinstance(name, nt.StringLiteral) or not isinstance(shape, nt.BaseTuple):
        return None
    if len(shape) == 0:  # a 0-d constant is small: written into the file
        return None
    slot_name = name.literal_value
    with _lock:  # a process compiling it without binding it (a compile server) links it too
        _slot(slot_name)
    arrtype = nt.Array(dtype.dtype, len(shape), "C", readonly=True)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        i64 = ir.IntType(64)
        slot = builder.module.globals.get(slot_name)
        if slot is None:
            slot = ir.GlobalVariable(builder.module, ir.ArrayType(i64, 2), slot_name)
            slot.linkage = "external"
        zero = ir.IntType(32)(0)
        address = builder.load(builder.gep(slot, [zero, zero]))
        meminfo = builder.load(builder.gep(slot, [zero, ir.IntType(32)(1)]))
        dims = cgutils.unpack_tuple(builder, args[1])
        i8p = ir.IntType(8).as_pointer()
        data, owner = builder.inttoptr(address, i8p), builder.inttoptr(meminfo, i8p)
        value = c_array(context, builder, arrtype, data, dims, owner)
        context.nrt.incref(builder, arrtype, value)
        return value

    return arrtype(name, shape, dtype), codegen
