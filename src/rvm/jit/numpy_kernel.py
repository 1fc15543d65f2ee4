"""Primitive functions to NumPy kernels: Python source calling the op library.

A fused primitive function becomes a Python function over numpy arrays that runs its ops one
by one with the reference implementations of `rvm.kernels.reference`, which its source imports
by name as ``ref`` (`LIBRARY_IMPORT`), the way jit kernels import the kernel library: a saved
executable names the package, carries none of its source, and needs no compiler to run.
Destination-passing kernels write their outputs in place (``out0[...] = t2``); "return"
kernels (outputs whose shape depends on data) return them. Symbolic dimensions that an op's
attributes name (``reshape(x, ("n", 784))``) are read from the input arrays at the kernel's
start.
"""

from __future__ import annotations

import math

import numpy as np

from rvm.dtypes import NARROW_DTYPES, dtype_kind
from rvm.errors import IRError
from rvm.ir import expr as E
from rvm.ir.dims import is_symbol, source, symbols
from rvm.ir.types import TensorType, TupleType
from rvm.kernels import reference as library
from rvm.op import reference
from rvm.op.core import precision_of
from rvm.op.dynamic import DYNAMIC_OPS
from rvm.runtime.executable import KernelRecord

LIBRARY_NAME = "ref"
LIBRARY_MODULE = library.__name__
LIBRARY_IMPORT = f"import {LIBRARY_MODULE} as {LIBRARY_NAME}"
"""The line that starts every numpy kernel's source: the op library, imported by name."""


def literal(value: object) -> str:
    """Python source for an attribute value (exact for floats, inf and nan included)."""
    if isinstance(value, float):
        if math.isnan(value):
            return "float('nan')"
        if math.isinf(value):
            return "float('inf')" if value > 0 else "float('-inf')"
        return repr(value)
    if isinstance(value, tuple):
        inner = ", ".join(literal(v) for v in value)
        return f"({inner}{',' if len(value) == 1 else ''})"
    if value is None or isinstance(value, (bool, int, str)):
        return repr(value)
    raise IRError(f"cannot put attribute value {value!r} into kernel source")


def symbolic_names(value: object) -> set[str]:
    """Identifier strings inside a shape-like attribute (names of symbolic dimensions)."""
    if isinstance(value, tuple):
        out: set[str] = set()
        for v in value:
            out |= symbolic_names(v)
        return out
    return set()


class _KernelSource:
    """Builds the source of one kernel from one primitive function."""

    def __init__(self, name: str, func: E.Function) -> None:
        self.name = name
        self.func = func
        self.lines: list[str] = []
        self.consts: list[str] = []
        self.names: dict[E.Var, str] = {p: f"p{i}" for i, p in enumerate(func.params)}

    def dim_sources(self, style: str) -> dict[str, str]:
        """For each symbolic dimension name, an expression reading it from an input, or from
        an output of a dps kernel (allocated by the VM to the bound size) for a name no input
        has: a reshape to it stays determined when the input is empty."""
        out: dict[str, str] = {}
        places = [(f"p{i}", p.type) for i, p in enumerate(self.func.params)]
        if style == "dps":
            ret = self.func.ret_type or self.func.body.type
            fields = ret.fields if isinstance(ret, TupleType) else (ret,)
            places += [(f"out{i}", ty) for i, ty in enumerate(fields)]
        for name, ty in places:
            if isinstance(ty, TensorType) and ty.shape is not None:
                for axis, d in enumerate(ty.shape):
                    if isinstance(d, str) and d not in out:
                        out[d] = f"{name}.shape[{axis}]"
        return out

    def atom(self, e: E.Expr) -> str:
        if isinstance(e, E.Var):
            return self.names[e]
        if isinstance(e, E.Constant):
            name = f"_c{len(self.consts)}"
            self.consts.append(f"{name} = {_array_source(e.data)}")
            return name
        if isinstance(e, E.Tuple):
            inner = ", ".join(self.atom(f) for f in e.fields)
            return f"({inner}{',' if len(e.fields) == 1 else ''})"
        raise IRError(f"kernel {self.name}: unsupported argument {type(e).__name__}")

    def call(self, call: E.Call, dims: dict[str, str]) -> str:
        op = call.callee
        if not isinstance(op, E.Op):
            raise IRError(f"kernel {self.name}: primitive functions may only call ops")
        fn = reference.get(op)
        if fn is None or fn is not getattr(library, op.name, None):
            raise IRError(
                f"kernel {self.name}: op {op.name} has no implementation in {LIBRARY_MODULE}"
            )
        args = [self.atom(a) for a in call.args]
        attrs = dict(call.attrs)
        if op.name == "reshape":
            attrs["shape"] = _inferred(attrs["shape"], dims)
        for key, value in attrs.items():
            args.append(f"{key}={self._attr(value, dims)}")
        return f"{LIBRARY_NAME}.{op.name}({', '.join(args)})"

    def _attr(self, value: object, dims: dict[str, str]) -> str:
        if isinstance(value, str) and _source(value, dims) is not None:
            return _source(value, dims)  # type: ignore[return-value]
        if isinstance(value, tuple) and any(_source(v, dims) is not None for v in value):
            parts = [_source(v, dims) or literal(v) for v in value]
            return f"({', '.join(parts)}{',' if len(parts) == 1 else ''})"
        return literal(value)

    @staticmethod
    def _run_time_shapes(bindings: list) -> bool:
        """Whether an op reads its result's shape from data at run time (`rvm.op.dynamic`):
        its result must have the shape of the output planned from its type."""
        return any(
            isinstance(b.value, E.Call) and b.value.callee.name in DYNAMIC_OPS for b in bindings
        )

    def build(self, style: str) -> str:
        params = [f"p{i}" for i in range(len(self.func.params))]
        outs = _num_outputs(self.func)
        if style == "dps":
            params += [f"out{i}" for i in range(outs)]
        dims = self.dim_sources(style)
        body = self.func.body
        bindings = list(body.bindings) if isinstance(body, E.SeqExpr) else []
        result = body.body if isinstance(body, E.SeqExpr) else body
        lines = [f"def {self.name}({', '.join(params)}):"]
        used_dims = set()
        for b in bindings:
            for value in b.value.attrs.values() if isinstance(b.value, E.Call) else ():
                used_dims |= symbolic_names(value) | ({value} if isinstance(value, str) else set())
        lines += [f"    {d} = {src}" for d, src in dims.items() if d in used_dims and is_symbol(d)]
        for i, b in enumerate(bindings):
            self.names[b.var] = f"t{i}"
            if not isinstance(b.value, E.Call):
                lines.append(f"    t{i} = {self.atom(b.value)}")
                continue
            lines.append(f"    t{i} = {self.call(b.value, dims)}")
        res = self.atom(result)
        if style == "return":  # C order: a jit kernel may read it next
            lines.append(f"    return {LIBRARY_NAME}._contiguous({res})")
        elif self._run_time_shapes(bindings):  # no silent broadcast into the planned output
            store = f"{LIBRARY_NAME}._store_exact"
            if outs == 1:
                lines.append(f"    {store}(out0, {res})")
            else:
                lines += [f"    {store}(out{i}, {res}[{i}])" for i in range(outs)]
        elif outs == 1:
            lines.append(f"    out0[...] = {res}")
        else:
            lines += [f"    out{i}[...] = {res}[{i}]" for i in range(outs)]
        return "\n".join([LIBRARY_IMPORT, *self.consts, *lines]) + "\n"


def _source(d: object, dims: dict[str, str]) -> str | None:
    """Source reading symbolic dim ``d`` (a name, or an expression computed from its names)
    off the kernel's arrays; None when ``d`` is no symbolic dim or a name it needs is not
    carried by any of them."""
    if not isinstance(d, str):
        return None
    if d in dims:
        return dims[d]
    if is_symbol(d) or not symbols(d) <= dims.keys():
        return None
    return source(d, dims.__getitem__)


def _inferred(shape: tuple, dims: dict[str, str]) -> tuple:
    """A reshape's target with its one dim that no parameter gives (a name the input types do
    not carry once passes re-infer them) left to NumPy to infer, as a -1."""
    missing = [i for i, d in enumerate(shape) if isinstance(d, str) and _source(d, dims) is None]
    if len(missing) == 1 and -1 not in shape:
        return tuple(-1 if i == missing[0] else d for i, d in enumerate(shape))
    return shape


def _array_source(data: np.ndarray) -> str:
    """Source building ``data``. A narrow dtype (bfloat16, int4...) is built by the library's
    cast from float32 or int8, which hold its values exactly: its name means nothing to numpy
    until ml_dtypes is imported, which the library's cast sees to."""
    dtype = data.dtype.name
    if dtype not in NARROW_DTYPES:
        return f"np.array({literal(_py(data.tolist()))}, dtype={dtype!r})"
    wide = "float32" if dtype_kind(dtype) == "f" else "int8"
    values = literal(_py(data.astype(wide).tolist()))
    return f"{LIBRARY_NAME}.cast(np.array({values}, dtype={wide!r}), {dtype!r})"


def _py(value: object) -> object:
    """numpy's tolist() result with nested lists as tuples (for `literal`)."""
    if isinstance(value, list):
        return tuple(_py(v) for v in value)
    return value


def _num_outputs(func: E.Function) -> int:
    ret = func.ret_type or func.body.type
    return len(ret.fields) if isinstance(ret, TupleType) else 1


def numpy_kernel(name: str, func: E.Function, style: str = "dps") -> KernelRecord:
    """The numpy-backend kernel record of primitive function ``func``."""
    source = _KernelSource(name, func).build(style)
    ops = [
        b.value.callee.name
        for b in (func.body.bindings if isinstance(func.body, E.SeqExpr) else ())
        if isinstance(b.value, E.Call) and isinstance(b.value.callee, E.Op)
    ]
    meta = {"ops": ",".join(ops), "precision": precision_of(func)}
    return KernelRecord(name, "numpy", source, name, style, meta, imports=(LIBRARY_MODULE,))


__all__ = ["numpy_kernel", "LIBRARY_IMPORT", "LIBRARY_MODULE", "LIBRARY_NAME", "literal", "np"]
