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

__all__ = ["CHECK", "FAILED", "RUN", "SLOW", "WORD", "handle"]

RUN, WORD, FAILED, SLOW, CHECK = range(5)  # the items of a handle's state list

_API = {  # the C API the handle calls: name -> (result, arguments), "p" a pointer, "n" ssize_t
    "PyTuple_Size": ("n", "p"),
    "PyTuple_New": ("p", "n"),
    "PyTuple_GetItem": ("p", "pn"),
    "PyTuple_SetItem": ("i", "pnp"),
    "PyList_GetItem": ("p", "pn"),
    "PyDict_Size": ("n", "p"),
    "Py_IncRef": ("v", "p"),
    "Py_DecRef": ("v", "p"),
    "PyObject_Call": ("p", "ppp"),
    "PyErr_ExceptionMatches": ("i", "p"),
    "PyErr_Clear": ("v", ""),
    "PyObject_CallNoArgs": ("p", "p"),
}
_NAME = "rvm_native_handle"


class _MethodDef(ctypes.Structure):
    _fields_ = [
        ("ml_name", ctypes.c_char_p),
        ("ml_meth", ctypes.c_void_p),
        ("ml_flags", ctypes.c_int),
        ("ml_doc", ctypes.c_char_p),
    ]


_METH_VARARGS, _METH_KEYWORDS = 0x0001, 0x0002
_lock = threading.Lock()
_made: list[Any] = []  # [method def, engine]: made once, kept for the process's life


def _ir() -> str:
    """The handle's C function as LLVM IR: ``PyObject *(PyObject *state, PyObject *args,
    PyObject *kwargs)``."""
    p, n, i32 = ir.IntType(8).as_pointer(), ir.IntType(64), ir.IntType(32)
    kinds = {"p": p, "n": n, "i": i32, "v": ir.VoidType()}
    module = ir.Module(_NAME)
    api = {
        name: ir.Function(module, ir.FunctionType(kinds[r], [kinds[a] for a in args]), name)
        for name, (r, args) in _API.items()
    }
    exception = ir.GlobalVariable(module, p, "PyExc_Exception")
    exception.linkage = "external"
    none_struct = ir.GlobalVariable(module, ir.IntType(8), "_Py_NoneStruct")
    none_struct.linkage = "external"
    fn = ir.Function(module, ir.FunctionType(p, [p, p, p]), _NAME)
    state, args, kwargs = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    none = b.bitcast(none_struct, p)

    def item(k: int) -> ir.Value:
        return b.call(api["PyList_GetItem"], [state, n(k)])

    def slow() -> None:
        b.ret(b.call(api["PyObject_Call"], [item(SLOW), args, kwargs]))

    positional, by_keyword = fn.append_basic_block("positional"), fn.append_basic_block("kw")
    no_kwargs = b.icmp_unsigned("==", kwargs, ir.Constant(p, None))
    test_kwargs = fn.append_basic_block("test_kwargs")
    b.cbranch(no_kwargs, positional, test_kwargs)
    b.position_at_end(test_kwargs)
    empty = b.icmp_signed("==", b.call(api["PyDict_Size"], [kwargs]), n(0))
    b.cbranch(empty, positional, by_keyword)
    b.position_at_end(by_keyword)
    slow()

    b.position_at_end(positional)
    count = b.call(api["PyTuple_Size"], [args])
    full = b.call(api["PyTuple_New"], [b.add(count, n(1))])
    made, no_memory = fn.append_basic_block("made"), fn.append_basic_block("no_memory")
    b.cbranch(b.icmp_unsigned("!=", full, ir.Constant(p, None)), made, no_memory)
    b.position_at_end(no_memory)
    b.ret(ir.Constant(p, None))
    b.position_at_end(made)
    word = item(WORD)
    b.call(api["Py_IncRef"], [word])
    b.call(api["PyTuple_SetItem"], [full, n(0), word])
    loop, body, done = (fn.append_basic_block(x) for x in ("loop", "body", "done"))
    start = b.block
    b.branch(loop)
    b.position_at_end(loop)
    at = b.phi(n)
    at.add_incoming(n(0), start)
    b.cbranch(b.icmp_signed("<", at, count), body, done)
    b.position_at_end(body)
    value = b.call(api["PyTuple_GetItem"], [args, at])
    b.call(api["Py_IncRef"], [value])
    b.call(api["PyTuple_SetItem"], [full, b.add(at, n(1)), value])
    at.add_incoming(b.add(at, n(1)), body)
    b.branch(loop)
    b.position_at_end(done)
    result = b.call(api["PyObject_Call"], [item(RUN), full, ir.Constant(p, None)])
    b.call(api["Py_DecRef"], [full])
    ran, failed = fn.append_basic_block("ran"), fn.append_basic_block("failed")
    b.cbranch(b.icmp_unsigned("!=", result, ir.Constant(p, None)), ran, failed)
    b.position_at_end(ran)
    check = item(CHECK)
    unchecked, checking = fn.append_basic_block("unchecked"), fn.append_basic_block("checking")
    b.cbranch(b.icmp_unsigned("==", check, none), unchecked, checking)
    b.position_at_end(unchecked)
    b.ret(result)
    b.position_at_end(checking)  # check(result, args): its error raised, the result dropped
    pair = b.call(api["PyTuple_New"], [n(2)])
    paired, no_pair = fn.append_basic_block("paired"), fn.append_basic_block("no_pair")
    b.cbranch(b.icmp_unsigned("!=", pair, ir.Constant(p, None)), paired, no_pair)
    b.position_at_end(paired)
    for k, value in enumerate((result, args)):
        b.call(api["Py_IncRef"], [value])
        b.call(api["PyTuple_SetItem"], [pair, n(k), value])
    checked = b.call(api["PyObject_Call"], [check, pair, ir.Constant(p, None)])
    b.call(api["Py_DecRef"], [pair])
    passed = fn.append_basic_block("passed")
    b.cbranch(b.icmp_unsigned("!=", checked, ir.Constant(p, None)), passed, no_pair)
    b.position_at_end(passed)
    b.call(api["Py_DecRef"], [checked])
    b.ret(result)
    b.position_at_end(no_pair)
    b.call(api["Py_DecRef"], [result])
    b.ret(ir.Constant(p, None))
    b.position_at_end(failed)
    matches = b.call(api["PyErr_ExceptionMatches"], [b.load(exception)])
    rerun, propagate = fn.append_basic_block("rerun"), fn.append_basic_block("propagate")
    b.cbranch(b.icmp_signed("!=", matches, i32(0)), rerun, propagate)
    b.position_at_end(propagate)  # not an Exception (KeyboardInterrupt...): raised as it is
    b.ret(ir.Constant(p, None))
    b.position_at_end(rerun)
    b.call(api["PyErr_Clear"], [])
    given = b.call(api["PyObject_CallNoArgs"], [item(FAILED)])
    back, broke = fn.append_basic_block("back"), fn.append_basic_block("broke")
    b.cbranch(b.icmp_unsigned("!=", given, ir.Constant(p, None)), back, broke)
    b.position_at_end(broke)
    b.ret(ir.Constant(p, None))
    b.position_at_end(back)
    b.call(api["Py_DecRef"], [given])
    slow()
    return str(module)


def _method() -> _MethodDef:
    """The method definition of the handle's C function, compiled at the first use."""
    with _lock:
        if not _made:
            for name in (*_API, "PyExc_Exception", "_Py_NoneStruct"):  # variables' too
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
                _METH_VARARGS | _METH_KEYWORDS,
                None,
            )
            _made.extend([method, engine])
        return _made[0]


_new = ctypes.pythonapi.PyCFunction_NewEx
_new.restype = ctypes.py_object
_new.argtypes = [ctypes.c_void_p, ctypes.py_object, ctypes.c_void_p]


def handle(state: list[Any]) -> Any:
    """The handle over ``state`` (``[run, word, failed, slow, check]``: the module docstring)."""
    return _new(ctypes.addressof(_method()), state, None)
