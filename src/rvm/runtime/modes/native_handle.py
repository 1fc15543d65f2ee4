"""The native mode's handle of a function, a C function: no Python frame above the entry.

`handle(state)` makes the callable `vm[name]` calls in the native mode (`NativeMode.fast_call`):
a builtin function object whose C code, for a call by position, calls ``state[RUN]`` (the
function's entry dispatcher, its first argument the VM's guard word ``state[WORD]``:
`native_guard`) and returns its result, after ``state[CHECK](result, args)`` unless that is None
(a result check, whose error it raises); on any ``Exception`` from the entry
(the entry refused, other argument types, a failure inside) it clears the exception, calls
``state[FAILED]()`` (the guard given back if the entry took it) and returns
``state[SLOW](*args, **kwargs)``, the VM's checked call, as it does for a call with keywords.
``state`` is a list, so ``state[RUN]`` may be replaced (the entry compiled at the first call).

A Python function doing the same cost the MLP's call at batch 1 on a Zen 3 core 0.4-0.6 us
above the dispatcher called directly (a frame, its ``*args`` and ``**kwargs``, the ``try``),
more than the entry's body gains on whole-function Numba; this code costs a tuple.

The code is LLVM IR compiled once per process by llvmlite, calling CPython's C API by the
addresses ctypes finds, so it needs no C compiler and caches nothing.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

from llvmlite import binding as llvm
from llvmlite import ir

__all__ = ["CHECK", "FAILED", "RUN", "SLOW", "WORD", "Unavailable", "handle"]

RUN, WORD, FAILED, SLOW, CHECK = range(5)  # the items of a handle's state list

_API = {  # the C API the handle calls: name -> (result, arguments): "p" a pointer, "P" an
    # array of them, "n" a Py_ssize_t, "i" an int, "v" void
    "PyTuple_Size": ("n", "p"),
    "PyTuple_New": ("p", "n"),
    "PyTuple_SetItem": ("i", "pnp"),
    "PyTuple_GetSlice": ("p", "pnn"),
    "PyList_GetItem": ("p", "pn"),
    "Py_IncRef": ("v", "p"),
    "Py_DecRef": ("v", "p"),
    "PyObject_Call": ("p", "ppp"),
    "PyErr_ExceptionMatches": ("i", "p"),
    "PyErr_Clear": ("v", ""),
    "PyObject_CallNoArgs": ("p", "p"),
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
    p, n, i32 = ir.IntType(8).as_pointer(), ir.IntType(64), ir.IntType(32)
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

    def fail_unless(value: ir.Value, then: ir.Block, drop: ir.Value | None = None) -> None:
        """Returns NULL (the error set) when ``value`` is NULL, after dropping ``drop``."""
        broke = block("broke")
        b.cbranch(b.icmp_unsigned("!=", value, null), then, broke)
        b.position_at_end(broke)
        if drop is not None:
            b.call(api["Py_DecRef"], [drop])
        b.ret(null)
        b.position_at_end(then)

    positional, test_names, by_keyword = block("positional"), block("names"), block("keyword")
    b.cbranch(b.icmp_unsigned("==", kwnames, null), positional, test_names)
    b.position_at_end(test_names)
    empty = b.icmp_signed("==", b.call(api["PyTuple_Size"], [kwnames]), n(0))
    b.cbranch(empty, positional, by_keyword)
    b.position_at_end(by_keyword)
    slow(kwnames)

    b.position_at_end(positional)  # full = (word, *args), each a new reference it steals
    full = b.call(api["PyTuple_New"], [b.add(count, n(1))])
    fail_unless(full, block("made"))
    word = item(WORD)
    b.call(api["Py_IncRef"], [word])
    b.call(api["PyTuple_SetItem"], [full, n(0), word])
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
    b.call(api["PyTuple_SetItem"], [full, b.add(at, n(1)), value])
    at.add_incoming(b.add(at, n(1)), body)
    b.branch(loop)
    b.position_at_end(done)
    result = b.call(api["PyObject_Call"], [item(RUN), full, null])
    ran, failed = block("ran"), block("failed")
    b.cbranch(b.icmp_unsigned("!=", result, null), ran, failed)

    b.position_at_end(ran)
    check = item(CHECK)
    unchecked, checking = block("unchecked"), block("checking")
    b.cbranch(b.icmp_unsigned("==", check, none), unchecked, checking)
    b.position_at_end(unchecked)
    b.call(api["Py_DecRef"], [full])
    b.ret(result)
    b.position_at_end(checking)  # check(result, args): its error raised, the result dropped
    given = b.call(api["PyTuple_GetSlice"], [full, n(1), b.add(count, n(1))])
    b.call(api["Py_DecRef"], [full])
    fail_unless(given, block("sliced"), result)
    pair = b.call(api["PyTuple_New"], [n(2)])
    fail_unless(pair, block("paired"), result)
    b.call(api["Py_IncRef"], [result])
    b.call(api["PyTuple_SetItem"], [pair, n(0), result])
    b.call(api["PyTuple_SetItem"], [pair, n(1), given])  # stolen
    checked = b.call(api["PyObject_Call"], [check, pair, null])
    b.call(api["Py_DecRef"], [pair])
    fail_unless(checked, block("passed"), result)
    b.call(api["Py_DecRef"], [checked])
    b.ret(result)

    b.position_at_end(failed)
    b.call(api["Py_DecRef"], [full])
    matches = b.call(api["PyErr_ExceptionMatches"], [b.load(exception)])
    rerun, propagate = block("rerun"), block("propagate")
    b.cbranch(b.icmp_signed("!=", matches, i32(0)), rerun, propagate)
    b.position_at_end(propagate)  # not an Exception (KeyboardInterrupt...): raised as it is
    b.ret(null)
    b.position_at_end(rerun)
    b.call(api["PyErr_Clear"], [])
    given_back = b.call(api["PyObject_CallNoArgs"], [item(FAILED)])
    fail_unless(given_back, block("back"))
    b.call(api["Py_DecRef"], [given_back])
    slow(null)
    return str(module)


def _method() -> _MethodDef:
    """The method definition of the handle's C function, compiled at the first use."""
    with _lock:
        if not _made:
            names = (*_API, "PyExc_Exception", "_Py_NoneStruct")  # variables' too
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
    """The handle over ``state`` (``[run, word, failed, slow, check]``: the module docstring).

    Raises:
        ValueError: ``state`` is not a list of five items (the C code reads them unchecked).
        Unavailable: This Python lacks a C API function the handle calls.
    """
    if type(state) is not list or len(state) != CHECK + 1:
        raise ValueError(f"a native handle's state is a list of {CHECK + 1} items")
    return _new(ctypes.addressof(_method()), state, None)
