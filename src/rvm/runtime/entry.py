"""Entry checks: the arguments of a call from Python, checked against the function's specs.

Everything is checked before any kernel touches memory: the argument count, each argument's
kind, dtype, rank and fixed dimensions, and that symbolic dimensions (a name shared by several
parameters) agree. Errors name the function, the parameter, what was expected and what came:
`main: argument 1 'y' has shape (2, 4), but n = 3 from argument 0 'x'`.

Inputs may be numpy arrays, anything with `__dlpack__` (read with `np.from_dlpack`) or
`__array__`, or Python scalars and lists (converted to the parameter's dtype). Arrays that are
not C-contiguous are copied, because kernels index their inputs as C-contiguous. Arguments may
also be given by parameter name (`bind_arguments`, with Python's own rules).

`vm["main"]` is a `BoundFunction`: a callable that keeps the function's index and signature, so
a call does the entry checks and runs, with no lookup by name; its repr and
`inspect.signature` show the parameters.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from rvm.errors import DTypeError, ShapeError
from rvm.runtime.executable import ParamSpec, VMFunction
from rvm.runtime.objects import ADT, Closure
from rvm.runtime.text import signature

__all__ = [
    "NOT_RUN",
    "BoundFunction",
    "SavedFunction",
    "bind_arguments",
    "check_arguments",
    "to_value",
]

NOT_RUN: Any = object()
"""What a `BoundFunction`'s fast path returns when it did not run the call (see there)."""


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


def _where(fn: VMFunction, i: int, spec: ParamSpec) -> str:
    """The argument an entry error is about (made only for a message: a call costs less)."""
    return f"{fn.name}: argument {i} '{spec.name}'"


def _check_tensor(
    fn: VMFunction, i: int, spec: ParamSpec, x: Any, dims: dict[str, tuple[int, int, str]]
) -> np.ndarray:
    if isinstance(x, (ADT, Closure, tuple)):
        raise TypeError(f"{_where(fn, i, spec)} expects a tensor, got {type(x).__name__}")
    try:
        arr = _to_array(x, spec.dtype)
    except (TypeError, ValueError) as e:
        raise TypeError(
            f"{_where(fn, i, spec)} expects a tensor, got {type(x).__name__} ({e})"
        ) from e
    if spec.dtype is not None and arr.dtype != spec.dtype:
        raise DTypeError(f"{_where(fn, i, spec)} expects {spec.dtype}, got {arr.dtype}")
    if spec.shape is None:
        return arr
    shape = arr.shape
    if len(shape) != len(spec.shape):
        raise ShapeError(
            f"{_where(fn, i, spec)} expects a {len(spec.shape)}-d tensor of shape "
            f"{_shape_text(spec.shape)}, got shape {_shape_text(shape)}"
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
                    f"{_where(fn, i, spec)} has shape {_shape_text(shape)}, but {want} = "
                    f"{seen[0]} from argument {seen[1]} '{seen[2]}'"
                )
        elif got != want:
            raise ShapeError(
                f"{_where(fn, i, spec)} has shape {_shape_text(shape)}, expected "
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
    for name, lo, hi in fn.dim_ranges:
        if name in dims:
            _check_range(fn, name, lo, hi, dims[name])
    return out


def _check_range(
    fn: VMFunction, name: str, lo: int | None, hi: int | None, found: tuple[int, int, str]
) -> None:
    value, i, pname = found
    if (lo is None or value >= lo) and (hi is None or value <= hi):
        return
    bounds = f"{'' if lo is None else f'{lo} <= '}{name}{'' if hi is None else f' <= {hi}'}"
    raise ShapeError(
        f"{fn.name}: argument {i} '{pname}' has {name} = {value}, outside the range {bounds}"
    )


def bind_arguments(fn: VMFunction, args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple:
    """`args` followed by `kwargs` placed by parameter name, as Python binds a call.

    Raises:
        TypeError: A name that is no parameter of `fn`, a parameter given both by position
            and by name, or parameters given neither way; the message names `fn` and them.
    """
    rest = fn.params[len(args) :]
    if len(kwargs) == len(rest) and len(args) <= len(fn.params):
        try:  # every parameter after the positional ones named, so no name is wrong or twice
            return (*args, *map(kwargs.__getitem__, rest))
        except KeyError:
            pass
    raise _binding_error(fn, args, kwargs)


def _binding_error(fn: VMFunction, args: Sequence[Any], kwargs: Mapping[str, Any]) -> TypeError:
    """What is wrong with a call of `fn` that `bind_arguments` cannot bind."""
    params = fn.params
    if len(args) > len(params):
        return TypeError(
            f"{fn.name} takes {len(params)} argument{'s' * (len(params) != 1)} "
            f"({', '.join(params)}), got {len(args)} by position and {len(kwargs)} by name"
        )
    for key in kwargs:
        if key not in params:
            return TypeError(
                f"{fn.name} has no parameter {key!r} (parameters: {', '.join(params)})"
            )
        if params.index(key) < len(args):
            return TypeError(f"{fn.name}: parameter {key!r} given twice, by position and by name")
    missing = [repr(p) for p in params[len(args) :] if p not in kwargs]
    plural = "s" * (len(missing) > 1)
    return TypeError(f"{fn.name}: missing argument{plural} {', '.join(missing)}")


class BoundFunction:
    """A function of one VM as a Python callable: `vm["main"](x, w, b=b)`.

    Arguments go by position or by parameter name and pass the entry checks; `run(index,
    values)` (the VM's entry) runs the function. The lookup by name happened once, when the
    object was made, so a positional call costs the checks and the run only.

    An exec mode may offer a fast path (`fast(args)`, the native mode's): it runs a positional
    call only when the arguments already are what the checks would pass unchanged, checking
    them its own cheaper way, and returns `NOT_RUN` otherwise; the checks and `run` then take
    the call as usual, so every error reads the same.

    Attributes:
        function: The `VMFunction` called.
        index: Its index in the executable's function table.
    """

    __slots__ = ("function", "index", "_run", "_owner", "_fast")

    def __init__(
        self,
        function: VMFunction,
        index: int,
        run: Callable[[int, list], Any],
        owner: str,
        fast: Callable[[tuple], Any] | None = None,
    ) -> None:
        self.function = function
        self.index = index
        self._run = run
        self._owner = owner
        self._fast = fast

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs:
            args = bind_arguments(self.function, args, kwargs)
        elif self._fast is not None:
            out = self._fast(args)
            if out is not NOT_RUN:
                return out
        return self._run(self.index, check_arguments(self.function, args))

    @property
    def __signature__(self) -> inspect.Signature | None:
        """The parameters by name, for `inspect.signature` and IDEs (None if a name is not a
        Python identifier: then nothing can pass it by keyword anyway)."""
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
        try:
            return inspect.Signature([inspect.Parameter(p, kind) for p in self.function.params])
        except ValueError:
            return None

    def __repr__(self) -> str:
        return f"<function {signature(self.function)} of {self._owner}>"


class SavedFunction(BoundFunction):
    """A function saved with its checked arguments (`VirtualMachine.save_function`): calling it
    takes no arguments and runs the function on those."""

    __slots__ = ("name", "values")

    def __init__(
        self,
        name: str,
        function: VMFunction,
        index: int,
        values: list[Any],
        run: Callable[[int, list], Any],
        owner: str,
    ) -> None:
        super().__init__(function, index, run, owner)
        self.name = name
        self.values = values

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if args or kwargs:
            raise TypeError(f"{self.name} was saved with its arguments and takes none")
        return self._run(self.index, self.values)

    @property
    def __signature__(self) -> inspect.Signature:
        return inspect.Signature([])

    def __repr__(self) -> str:
        bound = f"{signature(self.function)} with saved arguments"
        return f"<function {self.name}: {bound} of {self._owner}>"
