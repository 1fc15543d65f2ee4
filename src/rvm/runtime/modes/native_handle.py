"""The native mode's handle of a function, a C function: no Python frame above the entry.

`handle(state)` makes the callable `vm[name]` calls in the native mode (`NativeMode.fast_call`):
a builtin function object whose C code, for a call by position, claims the VM's thread guard
(the int64 words at the address ``state[WORD]``, an int; ``state[KEEP]`` the object that keeps
them alive: `native_guard.NativeGuard`) by `rvm.kernels.guard.compare_and_swap`, calls
``state[RUN]`` (the function's entry dispatcher) on the call's own arguments (or, when each
argument is the very type the entry was compiled for, ``state[COMPILED]``, that compiled
function below the dispatcher's typing: `argument_types`, ``state[TYPES]``), gives the guard
back if it took it, and returns the result, after ``state[CHECK](result, args)`` unless that is
None (a result check, whose error it raises). A call it does not run returns
``state[SLOW](*args, **kwargs)``, the VM's checked call: one with keywords, one finding native
code off for the VM (word `OFF`) or the guard another thread's, and one whose entry raised an
``Exception`` (other argument types, a failure inside), after clearing it; the checked call
reenters, names the holder or reruns the call in the compiled mode. A guard this thread holds
already (the VM called back from its own run) is not claimed again. ``state`` is a list, so
``state[RUN]`` may be replaced (the entry compiled at the first call), ``state[COMPILED]`` and
``state[TYPES]`` set (None and 0 before).

A Python function doing the same cost the MLP's call at batch 1 on a Zen 3 core 0.4-0.6 us
above the dispatcher called directly (a frame, its ``*args`` and ``**kwargs``, the ``try``),
more than the entry's body gains on whole-function Numba; and the guard passed to the entry as
an argument, an array more for Numba's dispatcher to type and unbox, 0.1-0.25 us; the
dispatcher's typing of the arguments, 0.4 us for six arrays. This code costs the tuple the
compiled function takes (Numba's functions have no vectorcall).

The code is LLVM IR compiled once per process by llvmlite, calling CPython's C API by the
addresses ctypes finds, so it needs no C compiler and caches nothing.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
from llvmlite import binding as llvm
from llvmlite import ir

from rvm.kernels.guard import IDENT, OFF, OWNER, compare_and_swap, release

__all__ = ["CHECK", "COMPILED", "KEEP", "RUN", "SLOW", "TYPES", "WORD", "Unavailable"]
__all__ += ["argument_types", "handle"]

RUN, WORD, KEEP, SLOW, CHECK, COMPILED, TYPES = range(7)  # the items of a handle's state list
# argument_types' array: the arguments' count; the offsets of an object's type, an array's
# rank, dtype and flags; the flags each needs; the ndarray type; then (dtype, rank) each
_ARGS, _TYPE, _ND, _DESCR, _FLAGS, _NEED, _NDARRAY, _SPEC = range(8)
_NEEDS = 0x1 | 0x100 | 0x400  # NPY_ARRAY_C_CONTIGUOUS | ALIGNED | WRITEABLE


class _ArrayFields(ctypes.Structure):
    """The head of NumPy's ``PyArrayObject_fields``, to its flags."""

    _fields_ = [
        ("ob_refcnt", ctypes.c_ssize_t),
        ("ob_type", ctypes.c_void_p),
        ("data", ctypes.c_void_p),
        ("nd", ctypes.c_int),
        ("dimensions", ctypes.c_void_p),
        ("strides", ctypes.c_void_p),
        ("base", ctypes.c_void_p),
        ("descr", ctypes.c_void_p),
        ("flags", ctypes.c_int),
    ]


@functools.cache
def _fields_read_right() -> bool:
    """Whether `_ArrayFields` reads this NumPy's arrays right (probed on three arrays, once a
    process: a fact of the NumPy loaded)."""
    for probe in (np.zeros((2, 3), np.float32), np.zeros(5, np.int64)[::2], np.zeros((), np.bool_)):
        seen = _ArrayFields.from_address(id(probe))
        if (seen.ob_type, seen.data, seen.nd, seen.descr, seen.flags) != (
            id(np.ndarray),
            probe.ctypes.data,
            probe.ndim,
            id(probe.dtype),
            probe.flags.num,
        ):
            return False
    return True


def argument_types(params: Sequence[tuple[str, int]]) -> np.ndarray | None:
    """What the handle checks before it calls an entry's compiled function (``state[COMPILED]``)
    in place of its dispatcher (``state[TYPES]`` its address): per parameter (dtype, rank), an
    array of that rank whose dtype is that dtype's own object (NumPy's, for its arrays), C
    contiguous, aligned and writeable, the one type the entry was compiled for. Any other value
    goes to the dispatcher, which types it (Numba's typing of six arrays cost 0.4 us a call on
    a Zen 3 core). None where NumPy's array object does not read as `_ArrayFields` says."""
    if not _fields_read_right():
        return None
    f = _ArrayFields
    head = [len(params), f.ob_type.offset, f.nd.offset, f.descr.offset, f.flags.offset]
    spec = [*head, _NEEDS, id(np.ndarray)]
    for dtype, rank in params:
        spec += [id(np.dtype(dtype)), rank]
    return np.array(spec, np.int64)


_API = {  # the C API the handle calls: name -> (result, arguments): "p" a pointer, "P" an
    # array of them, "n" a Py_ssize_t, "i" an int, "v" void
    "PyTuple_Size": ("n", "p"),
    "PyTuple_New": ("p", "n"),
    "PyTuple_SetItem": ("i", "pnp"),
    "PyList_GetItem": ("p", "pn"),
    "Py_IncRef": ("v", "p"),
    "Py_DecRef": ("v", "p"),
    "PyObject_Call": ("p", "ppp"),
    "PyErr_ExceptionMatches": ("i", "p"),
    "PyErr_Clear": ("v", ""),
    "PyLong_AsVoidPtr": ("p", "p"),
    "PyObject_Vectorcall": ("p", "pPnp"),
}
_NAME = "rvm_native_handle"


class _MethodDef(ctypes.Structure):
    _fields_ = [
        ("ml_name", ctypes.c_char_p),
        ("ml_meth", ctypes.c_void_p),
        ("ml_flags", ctypes.c_int),
        ("ml_doc", ctypes.c_char_p),
    ]


class Unavailable(RuntimeError):
    """This Python does not export a C API function the handle calls (``PyObject_Vectorcall``
    was an inline function of the headers only in older CPythons): the VM's checked call
    serves."""


_METH_FASTCALL, _METH_KEYWORDS = 0x0080, 0x0002
_lock = threading.Lock()
_made: list[Any] = []  # [method def, engine]: made once, kept for the process's life


def _ir() -> str:
    """The handle's C function as LLVM IR, a ``METH_FASTCALL | METH_KEYWORDS`` method:
    ``PyObject *(PyObject *state, PyObject *const *args, Py_ssize_t nargs, PyObject
    *kwnames)``."""
    p, n, i32, i64 = ir.IntType(8).as_pointer(), ir.IntType(64), ir.IntType(32), ir.IntType(64)
    null = ir.Constant(p, None)
    kinds = {"p": p, "P": p.as_pointer(), "n": n, "i": i32, "v": ir.VoidType()}
    module = ir.Module(_NAME)
    api = {
        name: ir.Function(module, ir.FunctionType(kinds[r], [kinds[a] for a in args]), name)
        for name, (r, args) in _API.items()
    }
    exception = ir.GlobalVariable(module, p, "PyExc_Exception")
    exception.linkage = "external"
    none_struct = ir.GlobalVariable(module, ir.IntType(8), "_Py_NoneStruct")
    none_struct.linkage = "external"
    fn = ir.Function(module, ir.FunctionType(p, [p, p.as_pointer(), n, p]), _NAME)
    state, args, count, kwnames = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    none = b.bitcast(none_struct, p)

    def block(name: str) -> ir.Block:
        return fn.append_basic_block(name)

    def item(k: int) -> ir.Value:
        return b.call(api["PyList_GetItem"], [state, n(k)])

    def slow(names: ir.Value) -> None:
        b.ret(b.call(api["PyObject_Vectorcall"], [item(SLOW), args, count, names]))

    def fail_unless(value: ir.Value, then: ir.Block, *drop: ir.Value) -> None:
        """Returns NULL (the error set) when ``value`` is NULL, after dropping ``drop``."""
        broke = block("broke")
        b.cbranch(b.icmp_unsigned("!=", value, null), then, broke)
        b.position_at_end(broke)
        for each in drop:
            b.call(api["Py_DecRef"], [each])
        b.ret(null)
        b.position_at_end(then)

    positional, test_names, by_keyword = block("positional"), block("names"), block("keyword")
    b.cbranch(b.icmp_unsigned("==", kwnames, null), positional, test_names)
    b.position_at_end(test_names)
    empty = b.icmp_signed("==", b.call(api["PyTuple_Size"], [kwnames]), n(0))
    b.cbranch(empty, positional, by_keyword)
    b.position_at_end(by_keyword)
    slow(kwnames)

    b.position_at_end(positional)  # the guard claimed, unless native code is off
    address = b.call(api["PyLong_AsVoidPtr"], [item(WORD)])
    words = b.bitcast(address, i64.as_pointer())
    off = b.load_atomic(b.gep(words, [i64(OFF)]), "monotonic", 8)
    plain, refused = block("plain"), block("refused")
    b.cbranch(b.icmp_signed("==", off, i64(0)), plain, refused)
    b.position_at_end(refused)  # native code off, or another thread's: the checked call
    slow(null)
    b.position_at_end(plain)
    took = compare_and_swap(b, b.gep(words, [i64(OWNER)]))
    claimed = block("claimed")
    b.cbranch(b.icmp_signed(">=", took, i64(0)), claimed, refused)
    b.position_at_end(claimed)  # the compiled function where every argument is its type
    target = b.alloca(p)
    b.store(item(RUN), target)
    compiled = item(COMPILED)
    typed, call = block("typed"), block("call")
    b.cbranch(b.icmp_unsigned("==", compiled, none), call, typed)
    b.position_at_end(typed)
    spec = b.bitcast(b.call(api["PyLong_AsVoidPtr"], [item(TYPES)]), i64.as_pointer())

    def spec_at(k: int | ir.Value) -> ir.Value:
        return b.load(b.gep(spec, [i64(k) if isinstance(k, int) else k]))

    loop, body, next_, matched = block("loop"), block("body"), block("next"), block("matched")
    start = b.block
    b.cbranch(b.icmp_signed("==", spec_at(_ARGS), count), loop, call)
    b.position_at_end(loop)
    at = b.phi(n)
    at.add_incoming(n(0), start)
    b.cbranch(b.icmp_signed("<", at, count), body, matched)
    b.position_at_end(body)
    value = b.load(b.gep(args, [at]))

    def field(k: int, kind: ir.Type) -> ir.Value:  # the field at offset spec[k] of value
        return b.load(b.bitcast(b.gep(value, [spec_at(k)]), kind.as_pointer()))

    an_array = block("array")
    b.cbranch(b.icmp_unsigned("==", field(_TYPE, i64), spec_at(_NDARRAY)), an_array, call)
    b.position_at_end(an_array)  # its other fields read only now
    own = b.add(i64(_SPEC), b.mul(at, i64(2)))
    need = spec_at(_NEED)
    flags = b.sext(field(_FLAGS, i32), i64)
    same = [
        b.icmp_unsigned("==", field(_DESCR, i64), spec_at(own)),
        b.icmp_unsigned("==", b.sext(field(_ND, i32), i64), spec_at(b.add(own, i64(1)))),
        b.icmp_unsigned("==", b.and_(flags, need), need),
    ]
    ok = same[0]
    for each in same[1:]:
        ok = b.and_(ok, each)
    b.cbranch(ok, next_, call)
    b.position_at_end(next_)
    at.add_incoming(b.add(at, n(1)), next_)
    b.branch(loop)
    b.position_at_end(matched)
    b.store(compiled, target)
    b.branch(call)
    b.position_at_end(call)
    result = b.call(api["PyObject_Vectorcall"], [b.load(target), args, count, null])
    with b.if_then(b.icmp_signed("==", took, i64(1))):  # given back as the entry returns
        release(b, b.gep(words, [i64(OWNER)]))
    ran, failed = block("ran"), block("failed")
    b.cbranch(b.icmp_unsigned("!=", result, null), ran, failed)

    b.position_at_end(ran)
    check = item(CHECK)
    unchecked, checking = block("unchecked"), block("checking")
    b.cbranch(b.icmp_unsigned("==", check, none), unchecked, checking)
    b.position_at_end(unchecked)
    b.ret(result)
    b.position_at_end(checking)  # check(result, args): its error raised, the result dropped
    given = b.call(api["PyTuple_New"], [count])
    fail_unless(given, block("made"), result)
    loop, body, done = block("loop"), block("body"), block("done")
    start = b.block
    b.branch(loop)
    b.position_at_end(loop)
    at = b.phi(n)
    at.add_incoming(n(0), start)
    b.cbranch(b.icmp_signed("<", at, count), body, done)
    b.position_at_end(body)
    value = b.load(b.gep(args, [at]))
    b.call(api["Py_IncRef"], [value])
    b.call(api["PyTuple_SetItem"], [given, at, value])
    at.add_incoming(b.add(at, n(1)), body)
    b.branch(loop)
    b.position_at_end(done)
    pair = b.call(api["PyTuple_New"], [n(2)])
    fail_unless(pair, block("paired"), result, given)
    b.call(api["Py_IncRef"], [result])
    b.call(api["PyTuple_SetItem"], [pair, n(0), result])  # stolen, as given below
    b.call(api["PyTuple_SetItem"], [pair, n(1), given])
    checked = b.call(api["PyObject_Call"], [check, pair, null])
    b.call(api["Py_DecRef"], [pair])
    fail_unless(checked, block("passed"), result)
    b.call(api["Py_DecRef"], [checked])
    b.ret(result)

    b.position_at_end(failed)
    matches = b.call(api["PyErr_ExceptionMatches"], [b.load(exception)])
    rerun, propagate = block("rerun"), block("propagate")
    b.cbranch(b.icmp_signed("!=", matches, i32(0)), rerun, propagate)
    b.position_at_end(propagate)  # not an Exception (KeyboardInterrupt...): raised as it is
    b.ret(null)
    b.position_at_end(rerun)
    b.call(api["PyErr_Clear"], [])
    slow(null)
    return str(module)


def _method() -> _MethodDef:
    """The method definition of the handle's C function, compiled at the first use."""
    with _lock:
        if not _made:
            names = (*_API, "PyExc_Exception", "_Py_NoneStruct", IDENT)  # variables' too
            missing = [name for name in names if not hasattr(ctypes.pythonapi, name)]
            if missing:
                raise Unavailable(f"this Python exports no {', '.join(missing)}")
            for name in names:
                address = ctypes.cast(getattr(ctypes.pythonapi, name), ctypes.c_void_p).value
                llvm.add_symbol(name, address)
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            machine = llvm.Target.from_default_triple().create_target_machine(opt=2)
            module = llvm.parse_assembly(_ir())
            module.verify()
            engine = llvm.create_mcjit_compiler(module, machine)
            engine.finalize_object()
            method = _MethodDef(
                _NAME.encode(),
                engine.get_function_address(_NAME),
                _METH_FASTCALL | _METH_KEYWORDS,
                None,
            )
            _made.extend([method, engine])
        return _made[0]


_new = ctypes.pythonapi.PyCFunction_NewEx
_new.restype = ctypes.py_object
_new.argtypes = [ctypes.c_void_p, ctypes.py_object, ctypes.c_void_p]


def handle(state: list[Any]) -> Any:
    """The handle over ``state`` (``[run, word, keep, slow, check, compiled, types]``: the
    module docstring).

    Raises:
        ValueError: ``state`` is not a list of seven items (the C code reads them unchecked),
            its word or types no address.
        Unavailable: This Python lacks a C API function the handle calls.
    """
    if type(state) is not list or len(state) != TYPES + 1:
        raise ValueError(f"a native handle's state is a list of {TYPES + 1} items")
    if type(state[WORD]) is not int or not state[WORD]:  # the C code reads it as an address
        raise ValueError("a native handle's word is the address of its guard's words")
    if state[COMPILED] is not None and (type(state[TYPES]) is not int or not state[TYPES]):
        raise ValueError("a native handle's compiled function comes with its types' address")
    return _new(ctypes.addressof(_method()), state, None)
