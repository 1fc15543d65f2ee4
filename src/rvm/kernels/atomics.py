"""Sequentially consistent atomics on the int64 fields of a state array that compiled code
shares with Python: an array registered with llvmlite under a symbol (``llvm.add_symbol``),
declared in each module that reads it. `rvm.kernels.workpool`'s pool and
`rvm.kernels.blocks`' slots are made of them.

`fields(symbol, count, stride)` gives the intrinsics ``(load, store, add, cas)`` on field
``i`` of such an array of ``count`` fields, ``stride`` int64 apart (a cache line each, where
threads write fields apart): ``load(i)``, ``store(i, value)``, ``add(i, value)`` (the value
before) and ``cas(i, old, new)`` (whether the field held ``old`` and now holds ``new``).
`array` and `field` are what an intrinsic of the module's own (another ordering, a field read
in its codegen) builds on; `c_call` calls a C function registered with llvmlite by name.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba import types as nt
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["array", "c_call", "field", "fields"]

_I64 = ir.IntType(64)


def array(builder: ir.IRBuilder, symbol: str, size: int) -> ir.GlobalVariable:
    """The int64 array of ``size`` elements registered as ``symbol``, declared in the module."""
    found = builder.module.globals.get(symbol)
    if found is None:
        found = ir.GlobalVariable(builder.module, ir.ArrayType(_I64, size), symbol)
        found.linkage = "external"
    return found


def c_call(builder: ir.IRBuilder, name: str, ret: ir.Type, args: list[ir.Value]) -> ir.Value:
    """A call of the C function registered as ``name`` (returning ``ret``), declared in the
    module once."""
    fnty = ir.FunctionType(ret, [a.type for a in args])
    return builder.call(cgutils.get_or_insert_function(builder.module, fnty, name), args)


def field(builder: ir.IRBuilder, symbol: str, count: int, stride: int, index: ir.Value) -> Any:
    """A pointer to field ``index`` (an i64 value) of the array ``symbol`` of ``count``
    fields, ``stride`` int64 apart."""
    at = builder.mul(index, _I64(stride)) if stride != 1 else index
    return builder.gep(array(builder, symbol, count * stride), [ir.IntType(32)(0), at])


def fields(symbol: str, count: int, stride: int = 1) -> tuple[Any, Any, Any, Any]:
    """The intrinsics ``(load, store, add, cas)`` on the fields of array ``symbol`` (see the
    module docstring)."""

    def at(builder: ir.IRBuilder, index: ir.Value) -> Any:
        return field(builder, symbol, count, stride, index)

    @intrinsic
    def load(typingctx, index):  # type: ignore[no-untyped-def]
        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            return builder.load_atomic(at(builder, args[0]), "seq_cst", 8)

        return nt.int64(nt.int64), codegen

    @intrinsic
    def store(typingctx, index, value):  # type: ignore[no-untyped-def]
        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            builder.store_atomic(args[1], at(builder, args[0]), "seq_cst", 8)
            return context.get_dummy_value()

        return nt.void(nt.int64, nt.int64), codegen

    @intrinsic
    def add(typingctx, index, value):  # type: ignore[no-untyped-def]
        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            return builder.atomic_rmw("add", at(builder, args[0]), args[1], "seq_cst")

        return nt.int64(nt.int64, nt.int64), codegen

    @intrinsic
    def cas(typingctx, index, old, new):  # type: ignore[no-untyped-def]
        def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
            pair = builder.cmpxchg(at(builder, args[0]), args[1], args[2], "seq_cst", "seq_cst")
            return builder.extract_value(pair, 1)

        return nt.boolean(nt.int64, nt.int64, nt.int64), codegen

    return load, store, add, cas
