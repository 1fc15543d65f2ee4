"""Checking run-time values against IR types, binding symbolic dimensions on the way.

`check_value` is what the interpreter runs on each argument at function entry (and on
annotated bindings): kind (tensor, tuple, data type, function), dtype, rank, fixed dimensions
and symbolic dimensions, which are bound by their first occurrence and compared afterwards.
With ``convert`` (arguments from the caller of `rvm.interpret`), Python scalars and lists become
arrays of the annotated dtype, and `__dlpack__` / `__array__` / buffer objects become numpy arrays;
numpy arrays of another dtype are an error, never cast.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rvm.dtypes import dtype_kind, numpy_dtype
from rvm.errors import DTypeError, ShapeError
from rvm.interp.values import Closure, Env, describe
from rvm.ir import dims as D
from rvm.ir import expr as E
from rvm.ir.module import IRModule
from rvm.ir.types import DTYPES, ADTType, FuncType, ShapeType, TensorType, TupleType, Type
from rvm.runtime.entry import check_shape, expr_mismatch, tuple_arity_error
from rvm.runtime.objects import ADT

# Which Python-value kinds (numpy dtype kinds) may become which dtype kinds.
_SAFE_KINDS = {"b": "b", "i": "iu", "u": "iu", "f": "iuf"}


def check_value(
    mod: IRModule, ty: Type | None, value: Any, env: Env, what: str, *, convert: bool
) -> Any:
    """Check ``value`` against ``ty`` and return it (converted when ``convert``).

    Args:
        mod: The module (for data type declarations).
        ty: The expected type; None or `AnyType` accepts anything.
        value: The run-time value.
        env: The invocation whose symbolic dimensions are bound and compared.
        what: The value in the user's words, ``argument 1 'y'``.
        convert: Accept Python scalars, lists and array-like objects for tensors.

    Raises:
        TypeError: a value of the wrong kind.
        DTypeError: a tensor of the wrong dtype.
        ShapeError: a tensor of the wrong rank or dimensions, or a symbolic dimension that
            disagrees with its earlier binding.
    """
    if isinstance(ty, TensorType):
        return _check_tensor(ty, value, env, what, convert)
    if isinstance(ty, TupleType):
        return _check_tuple(mod, ty, value, env, what, convert)
    if isinstance(ty, ADTType):
        _check_adt(mod, ty, value, env, what)
        return value
    if isinstance(ty, FuncType):
        if not isinstance(value, (Closure, E.Constructor)):
            raise TypeError(f"{env.name}: {what} expects a function, got {describe(value)}")
        return value
    if isinstance(ty, ShapeType):
        return _check_shape_value(ty, value, env, what)
    if convert and not isinstance(value, (np.ndarray, tuple, ADT, Closure)):
        return _to_array(value, None, env, what)
    return value


def check_dim_exprs(env: Env, values: list[tuple[Type | None, Any, str]]) -> None:
    """Checks the tensors among ``values`` ((type, value, what) of each argument, after
    `check_value` bound the names) against the dimension expressions (``past + seq``) of their
    types whose names are bound: the VM entry's message (`rvm.runtime.entry.expr_mismatch`).

    Raises:
        ShapeError: a size that differs from its expression's value.
    """
    stack = list(values)
    while stack:
        ty, value, what = stack.pop()
        if isinstance(ty, TupleType) and isinstance(value, tuple):
            stack += [(f, v, f"{what} field {i}") for i, (f, v) in enumerate(zip(ty.fields, value))]
        if not isinstance(ty, TensorType) or ty.shape is None:
            continue
        exprs = [(i, d) for i, d in enumerate(ty.shape) if isinstance(d, D.DimExpr)]
        for axis, d in exprs:
            names = {n: env.dim(n) for n in D.symbols(d)}
            if any(v is None for v in names.values()):
                continue  # a name nothing bound: the expression is a size of its own
            want, got = D.evaluate(d, names), value.shape[axis]  # type: ignore[arg-type]
            if got != want:
                bound = [(n, names[n], _source(env, n)) for n in sorted(names)]
                raise expr_mismatch(env.name, what, value.shape, axis, d, want, bound)


def _source(env: Env, name: str) -> str:
    """The value that bound symbolic dimension ``name`` here or in an enclosing environment."""
    scope: Env | None = env
    while scope is not None and name not in scope.sources:
        scope = scope.parent
    return "an enclosing function" if scope is None else scope.sources[name]


def _check_tensor(ty: TensorType, value: Any, env: Env, what: str, convert: bool) -> np.ndarray:
    arr = value
    if not isinstance(arr, np.ndarray):
        if not convert or isinstance(value, (tuple, ADT, Closure, E.Constructor)):
            raise TypeError(f"{env.name}: {what} expects a tensor {ty}, got {describe(value)}")
        arr = _to_array(value, ty.dtype, env, what)
    if ty.dtype is not None and arr.dtype != numpy_dtype(ty.dtype):
        if not (convert and arr.dtype.name == ty.dtype):  # a byte-swapped array is converted
            raise DTypeError(f"{env.name}: {what} expects dtype {ty.dtype}, got {arr.dtype.name}")
        arr = arr.astype(numpy_dtype(ty.dtype))
    if ty.shape is not None:  # expressions: by `check_dim_exprs`, once every name is bound
        want = tuple(None if isinstance(d, D.DimExpr) else d for d in ty.shape)
        check_shape(env.name, what, want, arr.shape, env.dims, env.sources)
    return arr


def _check_tuple(
    mod: IRModule, ty: TupleType, value: Any, env: Env, what: str, convert: bool
) -> tuple:
    if convert and isinstance(value, list):
        value = tuple(value)
    if not isinstance(value, tuple):
        raise TypeError(f"{env.name}: {what} expects a tuple {ty}, got {describe(value)}")
    if len(value) != len(ty.fields):
        raise tuple_arity_error(env.name, what, len(ty.fields), len(value))
    return tuple(
        check_value(mod, fty, v, env, f"{what} field {i}", convert=convert)
        for i, (fty, v) in enumerate(zip(ty.fields, value))
    )


def _check_adt(mod: IRModule, ty: ADTType, value: Any, env: Env, what: str) -> None:
    """A shallow check (the constructor only): a deep one would make folds quadratic."""
    if not isinstance(value, ADT):
        raise TypeError(f"{env.name}: {what} expects a {ty.name} value, got {describe(value)}")
    adt = mod.adts.get(ty.name)
    if adt is None:
        return
    names = [c.name for c in adt.constructors]
    ok = 0 <= value.tag < len(names) and value.name in (None, names[value.tag])
    if not ok:
        raise TypeError(
            f"{env.name}: {what} expects a {ty.name} value ({' | '.join(names)}), "
            f"got {describe(value)}"
        )


def _check_shape_value(ty: ShapeType, value: Any, env: Env, what: str) -> np.ndarray:
    try:
        arr = np.asarray(value)
    except Exception:  # any failure means "not a shape"
        arr = None
    if arr is None or arr.ndim != 1 or arr.dtype.kind not in "iu":
        raise TypeError(f"{env.name}: {what} expects a shape, got {describe(value)}")
    if ty.ndim is not None and arr.shape[0] != ty.ndim:
        raise ShapeError(f"{env.name}: {what} expects a shape of {ty.ndim} dimensions, got {arr}")
    return arr.astype(np.int64, copy=False)


def _to_array(value: Any, dtype: str | None, env: Env, what: str) -> np.ndarray:
    """A numpy array from a Python scalar or list (of ``dtype``) or an array-like object."""
    if isinstance(value, np.generic):
        return np.asarray(value)
    if isinstance(value, (bool, int, float, list, tuple)):
        return _from_python(value, dtype, env, what)
    if hasattr(value, "__dlpack__"):
        try:
            return np.from_dlpack(value)
        except (TypeError, RuntimeError, BufferError):
            pass  # e.g. a device array: fall back to __array__
    if hasattr(value, "__array__") or isinstance(value, memoryview):
        arr = np.asarray(value)
        if arr.dtype.kind in "biuf" or arr.dtype.name in DTYPES:  # ml_dtypes' are kind "V"
            return arr
    raise TypeError(f"{env.name}: {what} expects a tensor, got {describe(value)}")


def _from_python(value: Any, dtype: str | None, env: Env, what: str) -> np.ndarray:
    try:
        natural = np.asarray(value)
    except (ValueError, TypeError):
        natural = np.asarray(None, dtype=object)
    if natural.dtype.kind not in "biuf":
        raise TypeError(f"{env.name}: {what} expects a tensor, got {describe(value)}")
    if dtype is None:
        return natural
    target, kind = numpy_dtype(dtype), dtype_kind(dtype)
    if natural.dtype.kind not in _SAFE_KINDS[kind]:
        raise DTypeError(
            f"{env.name}: {what} expects dtype {dtype}, got a Python value of kind "
            f"{natural.dtype.name}"
        )
    try:
        arr = np.asarray(value, dtype=target)
    except OverflowError:
        arr = None
    if arr is None or (kind in "iu" and not np.array_equal(arr, natural)):
        raise DTypeError(f"{env.name}: {what} expects dtype {dtype}; {value!r} does not fit")
    return arr
