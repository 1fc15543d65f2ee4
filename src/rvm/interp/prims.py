"""The interpreter's primitive steps: tuple fields, pattern matching, op results and attributes.

None of these evaluate expressions; they work on values the interpreter already computed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rvm.dtypes import numpy_dtype
from rvm.errors import RVMError, ShapeError, is_shape_error
from rvm.interp.values import Env, InterpError, describe
from rvm.ir import expr as E
from rvm.ir.dims import DimExpr
from rvm.ir.types import DTYPES, TensorType, TupleType
from rvm.runtime.objects import ADT


def get_item(value: Any, index: int, env: Env) -> Any:
    """Field ``index`` of a tuple (or of an ADT value's fields)."""
    if not isinstance(value, (tuple, ADT)):
        raise InterpError(f"{env.where()}: cannot take field {index} of {describe(value)}")
    fields = value if isinstance(value, tuple) else value.fields
    if not 0 <= index < len(fields):
        raise InterpError(f"{env.where()}: field {index} is out of range for {describe(value)}")
    return fields[index]


def match_pattern(pattern: E.Pattern, value: Any) -> dict[E.Var, Any] | None:
    """The variables ``pattern`` binds when it matches ``value``, else None (no recursion).

    Constructor patterns compare tags, as the VM's GetTag does.
    """
    bound: dict[E.Var, Any] = {}
    stack: list[tuple[E.Pattern, Any]] = [(pattern, value)]
    while stack:
        p, v = stack.pop()
        kind = type(p)
        if kind is E.PatternVar:
            bound[p.var] = v  # type: ignore[attr-defined]
        elif kind is E.PatternConstructor:
            ctor, pats = p.constructor, p.patterns  # type: ignore[attr-defined]
            if not isinstance(v, ADT) or v.tag != ctor.tag or len(v.fields) != len(pats):
                return None
            stack.extend(zip(pats, v.fields))
        elif kind is E.PatternTuple:
            pats = p.patterns  # type: ignore[attr-defined]
            if not isinstance(v, tuple) or len(v) != len(pats):
                return None
            stack.extend(zip(pats, v))
    return bound


def as_typed(out: Any, ty: Any) -> Any:
    """An op's result as arrays of the dtype its IR type says (NumPy scalars become arrays)."""
    if isinstance(out, (tuple, list)):
        fields = ty.fields if isinstance(ty, TupleType) else (None,) * len(out)
        return tuple(as_typed(o, t) for o, t in zip(out, fields))
    arr = out if type(out) is np.ndarray else np.asarray(out)
    if type(ty) is TensorType and ty.dtype is not None and arr.dtype != numpy_dtype(ty.dtype):
        arr = arr.astype(ty.dtype)
    return arr


def run_reference(ref: Any, op: E.Op, args: list[Any], attrs: Any, env: Env) -> Any:
    """``ref(*args, **attrs)``; a failure becomes an error naming the function and binding."""
    try:
        return ref(*args, **attrs)
    except RVMError as err:
        raise with_context(err, f"{env.where()}: op.{op.name}: {err}") from err
    except Exception as err:  # any failure of a reference names the op
        if is_shape_error(err):
            raise ShapeError(f"{env.where()}: op.{op.name}: {err}") from err
        inputs = ", ".join(describe(a) for a in args)
        raise InterpError(
            f"{env.where()}: op.{op.name} failed on {inputs}: {type(err).__name__}: {err}"
        ) from err


def is_expr(value: Any) -> bool:
    """Whether ``value`` is a dimension expression (``past + seq``, `rvm.ir.dims`)."""
    return isinstance(value, DimExpr)


def names_dims(key: str, value: Any) -> bool:
    """Whether attribute ``key`` = ``value`` may name a symbolic dimension."""
    if isinstance(value, tuple):
        return any(isinstance(v, str) or names_dims(key, v) for v in value)
    return isinstance(value, str) and key != "dtype" and (value.isidentifier() or is_expr(value))


def resolve_attr(key: str, value: Any, env: Env, op_name: str, nested: bool = False) -> Any:
    """Symbolic names in an attribute value replaced by the dimensions bound in ``env``.

    A name inside a tuple (a shape) that nothing binds is an error; a bare string attribute
    that is not a bound dimension is left alone (a mode, a layout).
    """
    if isinstance(value, tuple):
        return tuple(resolve_attr(key, v, env, op_name, True) for v in value)
    if not isinstance(value, str) or key == "dtype":
        return value
    dim = env.dim(value)
    if dim is not None:
        return dim
    if nested and (value.isidentifier() or is_expr(value)) and value not in DTYPES:
        raise ShapeError(
            f"{env.where()}: op.{op_name} attribute {key} uses the symbolic dimension "
            f"{value!r}, which no parameter or annotation of {env.name} binds"
        )
    return value


def with_context(err: Exception, message: str) -> Exception:
    """``err``'s class with ``message`` (the class of an rvm error is part of its meaning)."""
    try:
        return type(err)(message)
    except Exception:  # an exotic constructor: keep the original error
        return err
