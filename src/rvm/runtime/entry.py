"""Entry checks: the arguments of a call from Python, checked against the function's specs.

Everything is checked before any kernel touches memory: the argument count, each argument's
kind, dtype, rank and fixed dimensions, and that symbolic dimensions (a name shared by several
parameters) agree. Errors name the function, the parameter, what was expected and what came:
`main: argument 1 'y' has shape (2, 4), but n = 3 from argument 0 'x'`.

Inputs may be numpy arrays, anything with `__dlpack__` (read with `np.from_dlpack`) or
`__array__`, or Python scalars and lists (converted to the parameter's dtype). Arrays that are
not C-contiguous are copied, because kernels index their inputs as C-contiguous.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rvm.errors import DTypeError, ShapeError
from rvm.runtime.executable import ParamSpec, VMFunction
from rvm.runtime.objects import ADT, Closure

__all__ = ["check_arguments", "to_value"]


def _to_array(x: Any, dtype: str | None) -> np.ndarray:
    if isinstance(x, np.ndarray):
        arr = x
    elif hasattr(x, "__dlpack__"):
        arr = np.from_dlpack(x)
    elif hasattr(x, "__array__"):
        arr = np.asarray(x)
    else:
        # A Python scalar or list has no dtype of its own: give it the parameter's.
        arr = np.asarray(x, dtype=dtype)
    if not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr)
    return arr


def to_value(x: Any) -> Any:
    """A VM value from a Python value: runtime objects and tuples kept, the rest as arrays."""
    if isinstance(x, (ADT, Closure)):
        return x
    if isinstance(x, tuple):
        return tuple(to_value(v) for v in x)
    return _to_array(x, None)


def _shape_text(shape: Sequence[Any]) -> str:
    dims = ["?" if d is None else str(d) for d in shape]
    return "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"


def _check_tensor(
    fn: VMFunction, i: int, spec: ParamSpec, x: Any, dims: dict[str, tuple[int, int, str]]
) -> np.ndarray:
    where = f"{fn.name}: argument {i} '{spec.name}'"
    if isinstance(x, (ADT, Closure, tuple)):
        raise TypeError(f"{where} expects a tensor, got {type(x).__name__}")
    try:
        arr = _to_array(x, spec.dtype)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{where} expects a tensor, got {type(x).__name__} ({e})") from e
    if spec.dtype is not None and arr.dtype != np.dtype(spec.dtype):
        raise DTypeError(f"{where} expects {spec.dtype}, got {arr.dtype}")
    if spec.shape is None:
        return arr
    shape = arr.shape
    if len(shape) != len(spec.shape):
        raise ShapeError(
            f"{where} expects a {len(spec.shape)}-d tensor of shape {_shape_text(spec.shape)}, "
            f"got shape {_shape_text(shape)}"
        )
    for axis, (want, got) in enumerate(zip(spec.shape, shape)):
        if want is None:
            continue
        if isinstance(want, str):
            seen = dims.get(want)
            if seen is None:
                dims[want] = (got, i, spec.name)
            elif seen[0] != got:
                raise ShapeError(
                    f"{where} has shape {_shape_text(shape)}, but {want} = {seen[0]} from "
                    f"argument {seen[1]} '{seen[2]}'"
                )
        elif got != want:
            raise ShapeError(
                f"{where} has shape {_shape_text(shape)}, expected "
                f"{_shape_text(spec.shape)} (axis {axis} must be {want})"
            )
    return arr


def check_arguments(fn: VMFunction, args: Sequence[Any]) -> list[Any]:
    """Checks and converts the arguments of a call of `fn` from Python.

    Returns:
        The arguments as VM values (contiguous numpy arrays, tuples, ADT values, closures).

    Raises:
        TypeError: Wrong argument count or kind.
        DTypeError: A tensor of the wrong dtype.
        ShapeError: A tensor of the wrong rank or dimensions, or disagreeing symbolic dims.
    """
    if len(args) != len(fn.params):
        names = ", ".join(fn.params)
        raise TypeError(
            f"{fn.name} takes {len(fn.params)} argument{'s' * (len(fn.params) != 1)} "
            f"({names}), got {len(args)}"
        )
    dims: dict[str, tuple[int, int, str]] = {}
    out = []
    for i, (spec, x) in enumerate(zip(fn.param_specs, args)):
        kind = spec.kind
        if kind == "tensor":
            out.append(_check_tensor(fn, i, spec, x, dims))
        elif kind == "tuple":
            if not isinstance(x, (tuple, list)):
                raise TypeError(
                    f"{fn.name}: argument {i} '{spec.name}' expects a tuple, got {type(x).__name__}"
                )
            out.append(to_value(tuple(x)))
        elif kind == "adt":
            if not isinstance(x, ADT):
                raise TypeError(
                    f"{fn.name}: argument {i} '{spec.name}' expects an ADT value, got "
                    f"{type(x).__name__}"
                )
            out.append(x)
        else:
            out.append(to_value(x))
    return out
