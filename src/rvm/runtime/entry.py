"""Entry checks: the arguments of a call from Python, checked against the function's specs.

Everything is checked before any kernel touches memory: the argument count, each argument's
kind, dtype, rank and fixed dimensions, and that symbolic dimensions (a name shared by several
parameters) agree; a tuple's fields are checked the same way, as deep as they nest. Errors name
the function, the parameter, what was expected and what came: `main: argument 1 'y' has shape
(2, 4), but n = 3 from argument 0 'x'`. A dimension expression (``past + seq``, a
`shape_patterns.DimProgram`) is checked once every argument has bound the names it reads
(`check_exprs`), with the names' sources in the message; one whose names no argument binds
is a size of its own, as the compiled code takes it.

Inputs may be numpy arrays, anything with `__dlpack__` (read with `np.from_dlpack`) or
`__array__`, or Python scalars and lists (converted to the parameter's dtype). Arrays that are
not C-contiguous are copied, because kernels index their inputs as C-contiguous. Arguments may
also be given by parameter name (`bind_arguments`, with Python's own rules).

Data types cross the boundary in their Python form when the executable declares one
(`ADTInfo.python`, set by the frontend that made the type; the ONNX importer does it for
sequences and optionals, as ONNX Runtime takes and returns them): a parameter of a ``"list"``
type (``Nil | Cons(head, tail)``) takes a Python list or tuple of its elements, one of an
``"optional"`` type (``Nothing | Some(value)``) takes None or the value; `ADT` values are taken
as they are. A result of such a type (as the function's result type declares it, also inside
a tuple) comes back as a Python list, or None / the value. Types without a Python form stay
`ADT` objects both ways.

`vm["main"]` is a `BoundFunction`: a callable that keeps the function's index and signature, so
a call does the entry checks and runs, with no lookup by name; its repr and
`inspect.signature` show the parameters.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from rvm.errors import DTypeError, ShapeError
from rvm.runtime import shape_patterns as sp
from rvm.runtime.executable import ParamSpec, VMFunction
from rvm.runtime.objects import ADT, Closure
from rvm.runtime.python_forms import PythonForms, to_array
from rvm.runtime.text import signature

__all__ = [
    "NOT_RUN",
    "BoundFunction",
    "PythonForms",
    "SavedFunction",
    "bind_arguments",
    "check_arguments",
    "check_exprs",
    "check_shape",
    "passes_unchanged",
    "expr_mismatch",
    "range_probes",
    "to_value",
    "tuple_arity_error",
]

NOT_RUN: Any = object()
"""A mode's mark of a call its fast path did not run (the native mode's, before it hands the
call to the checked path: see `BoundFunction`)."""


def to_value(x: Any) -> Any:
    """A VM value from a Python value: runtime objects and tuples kept, the rest as arrays."""
    if isinstance(x, (ADT, Closure)):
        return x
    if isinstance(x, tuple):
        return tuple(to_value(v) for v in x)
    return to_array(x, None)


def _shape_text(shape: Sequence[Any]) -> str:
    dims = ["?" if d is None else str(d) for d in shape]
    return "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"


def check_shape(
    fname: str,
    what: str,
    want: Sequence[int | str | None],
    shape: tuple[int, ...],
    dims: dict[str, int],
    sources: dict[str, str],
) -> None:
    """Checks a tensor's `shape` against the declared `want`, binding symbolic dimensions.

    The one shape check of values entering a function from Python: the VM's entry checks and
    the reference interpreter's both call it, so their messages are the same.

    Args:
        fname: The function's name, for messages.
        what: The value in the user's words (``argument 0 't' field 1``).
        want: Per dimension an int (fixed), a str (symbolic) or None (any); an expression
            (`shape_patterns.DimProgram`) is left to `check_exprs`, once every name is bound.
        shape: The value's shape.
        dims: Symbolic dimensions bound so far in this call; a new one is added.
        sources: For each dimension in `dims`, the value that bound it.

    Raises:
        ShapeError: Another rank, a fixed dimension that differs, or a symbolic dimension
            that disagrees with its earlier binding.
    """
    if len(shape) != len(want):
        raise ShapeError(
            f"{fname}: {what} expects rank {len(want)} (shape {_shape_text(want)}), "
            f"got shape {_shape_text(shape)}"
        )
    for axis, (dim, size) in enumerate(zip(want, shape)):
        if dim is None or dim == size or isinstance(dim, sp.DimProgram):
            continue
        if type(dim) is int:
            raise ShapeError(
                f"{fname}: {what} has shape {_shape_text(shape)}, but dimension {axis} must be "
                f"{dim} (expected shape {_shape_text(want)})"
            )
        bound = dims.get(dim)  # type: ignore[arg-type]
        if bound is None:
            dims[dim] = size  # type: ignore[index]
            sources[dim] = what  # type: ignore[index]
        elif bound != size:
            raise ShapeError(
                f"{fname}: {what} has shape {_shape_text(shape)}, but {dim} = {bound} from "
                f"{sources[dim]}"  # type: ignore[index]
            )


def check_exprs(
    fname: str,
    what: str,
    want: Sequence[Any],
    shape: tuple[int, ...],
    dims: dict[str, int],
    sources: dict[str, str],
) -> None:
    """Checks the axes of ``shape`` (of a value that passed `check_shape`) whose ``want`` is a
    dimension expression against its value from the sizes in ``dims``; an expression reading
    a name not in ``dims`` is not checked.

    Raises:
        ShapeError: A size other than its expression's value (`expr_mismatch`), or an
            expression that divides by a size that is 0.
    """
    for axis, dim in enumerate(want):
        if not isinstance(dim, sp.DimProgram):
            continue
        try:
            value = dim.value(dims)
        except ZeroDivisionError:
            raise ShapeError(
                f"{fname}: {what} has shape {_shape_text(shape)}, but axis {axis} is {dim}, "
                f"which divides by a size that is 0 ({_bound(dim, dims, sources)})"
            ) from None
        if value is not None and value != shape[axis]:
            bound = [(n, dims[n], sources[n]) for n in dim.names]
            raise expr_mismatch(fname, what, shape, axis, dim, value, bound)


def _bound(dim: sp.DimProgram, dims: dict[str, int], sources: dict[str, str]) -> str:
    return ", ".join(f"{n} = {dims[n]} from {sources[n]}" for n in dim.names if n in dims)


def expr_mismatch(
    fname: str,
    what: str,
    shape: Sequence[int],
    axis: int,
    expr: str,
    value: int,
    bound: Sequence[tuple[str, int, str]],
) -> ShapeError:
    """The error for a size that contradicts its dimension expression (the VM's entry and the
    interpreter's): ``main: argument 5 'attention_mask' has shape (2, 8), but axis 1 is past +
    seq = 7 (past = 4 from argument 1 'past', seq = 3 from argument 0 'input_ids')``.

    Args:
        bound: Per name the expression reads: (name, size, the value that bound it).
    """
    names = ", ".join(f"{n} = {size} from {source}" for n, size, source in bound)
    return ShapeError(
        f"{fname}: {what} has shape {_shape_text(tuple(shape))}, but axis {axis} is {expr} = "
        f"{value} ({names})"
    )


def tuple_arity_error(fname: str, what: str, want: int, got: int) -> TypeError:
    """The error for a tuple of `got` fields where `want` are declared (VM and interpreter)."""
    return TypeError(f"{fname}: {what} expects a tuple of {want} fields, got {got} fields")


class _Call:
    """The symbolic dimensions one call's arguments bind, the function's name for messages,
    and the executable's data types' Python forms."""

    __slots__ = ("name", "dims", "sources", "forms", "exprs")

    def __init__(self, name: str, forms: PythonForms | None) -> None:
        self.name = name
        self.dims: dict[str, int] = {}
        self.sources: dict[str, str] = {}
        self.forms = forms
        # (what, declared shape, shape) of each tensor with a dimension expression: checked
        # once every argument has bound its names
        self.exprs: list[tuple[str, tuple, tuple[int, ...]]] = []


def _check_tensor(call: _Call, what: str, spec: ParamSpec, x: Any) -> np.ndarray:
    if isinstance(x, (ADT, Closure, tuple)):
        raise TypeError(f"{call.name}: {what} expects a tensor, got {type(x).__name__}")
    try:
        arr = to_array(x, spec.dtype)
    except (TypeError, ValueError) as e:
        raise TypeError(
            f"{call.name}: {what} expects a tensor, got {type(x).__name__} ({e})"
        ) from e
    if spec.dtype is not None and arr.dtype != spec.dtype:
        raise DTypeError(f"{call.name}: {what} expects dtype {spec.dtype}, got {arr.dtype}")
    if spec.shape is not None:
        check_shape(call.name, what, spec.shape, arr.shape, call.dims, call.sources)
        if any(isinstance(d, sp.DimProgram) for d in spec.shape):
            call.exprs.append((what, spec.shape, arr.shape))
    return arr


def _check_value(call: _Call, what: str, spec: ParamSpec, x: Any) -> Any:
    """`x` checked against `spec` and converted (tuples field by field, as declared)."""
    kind = spec.kind
    if kind == "tensor":
        return _check_tensor(call, what, spec, x)
    if kind == "tuple":
        if not isinstance(x, (tuple, list)):
            raise TypeError(f"{call.name}: {what} expects a tuple, got {type(x).__name__}")
        fields = spec.fields
        if fields is None:  # field types unknown (built by hand, or saved before format 1.5)
            return to_value(tuple(x))
        if len(x) != len(fields):
            raise tuple_arity_error(call.name, what, len(fields), len(x))
        return tuple(
            _check_value(call, f"{what} field {j}", f, v) for j, (f, v) in enumerate(zip(fields, x))
        )
    if kind == "adt":
        if call.forms and spec.adt is not None:
            x = call.forms.from_python(call.name, what, spec.adt, x)
        if not isinstance(x, ADT):
            raise TypeError(f"{call.name}: {what} expects an ADT value, got {type(x).__name__}")
        return x
    return to_value(x)


def check_arguments(
    fn: VMFunction, args: Sequence[Any], forms: PythonForms | None = None
) -> list[Any]:
    """Checks and converts the arguments of a call of `fn` from Python (data types with a
    Python form in ``forms`` from that form).

    Returns:
        The arguments as VM values (contiguous numpy arrays, tuples, ADT values, closures).

    Raises:
        TypeError: Wrong argument count or kind.
        DTypeError: A tensor of the wrong dtype.
        ShapeError: A tensor of the wrong rank or dimensions, disagreeing symbolic dims, or a
            size that contradicts its dimension expression.
    """
    if len(args) != len(fn.params):
        names = ", ".join(fn.params)
        raise TypeError(
            f"{fn.name} takes {len(fn.params)} argument{'s' * (len(fn.params) != 1)} "
            f"({names}), got {len(args)}"
        )
    call = _Call(fn.name, forms)
    out = []
    for i, (spec, x) in enumerate(zip(fn.param_specs, args)):
        out.append(_check_value(call, f"argument {i} '{spec.name}'", spec, x))
    for what, want, shape in call.exprs:
        check_exprs(call.name, what, want, shape, call.dims, call.sources)
    for name, lo, hi in fn.dim_ranges:
        if name in call.dims:
            _check_range(call, name, lo, hi)
    return out


def _check_range(call: _Call, name: str, lo: int | None, hi: int | None) -> None:
    """Checks a bound symbolic dimension against its declared range (`VMFunction.dim_ranges`)."""
    value = call.dims[name]
    if (lo is None or value >= lo) and (hi is None or value <= hi):
        return
    bounds = f"{'' if lo is None else f'{lo} <= '}{name}{'' if hi is None else f' <= {hi}'}"
    raise ShapeError(
        f"{call.name}: {call.sources[name]} has {name} = {value}, outside the range {bounds}"
    )


RangeProbe = tuple[int, int, int, int]
"""Where a bounded symbolic dimension can be read from the arguments: (parameter, axis, min,
max). An exec mode's fast path checks the range there itself (the native mode in its entry,
`rvm.runtime.modes.native_codegen.entry_checks`); without a probe the VM takes no fast path."""


def range_probes(fn: VMFunction) -> tuple[RangeProbe, ...] | None:
    """Per bounded symbolic dimension of `fn` (`VMFunction.dim_ranges`), the first tensor
    parameter and axis that has it; None when one is not on a tensor parameter's shape."""
    probes = []
    for name, lo, hi in fn.dim_ranges:
        at = next(
            (
                (i, axis)
                for i, spec in enumerate(fn.param_specs)
                if spec.kind == "tensor" and spec.shape
                for axis, dim in enumerate(spec.shape)
                if dim == name
            ),
            None,
        )
        if at is None:
            return None
        probes.append((*at, -1 if lo is None else lo, sys.maxsize if hi is None else hi))
    return tuple(probes)


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


def passes_unchanged(fn: VMFunction) -> Callable[[tuple], bool] | None:
    """For a function whose parameters are all tensors of a known dtype and rank, with fixed
    or symbolic dims (no dimension expression, no range), whether positional arguments are
    what `check_arguments` would pass unchanged: that many numpy arrays (not subclasses),
    each C-contiguous, of its parameter's dtype and rank, fixed dims equal and each symbolic
    dim one size throughout. None for any other function.

    The cheap form of the entry checks that a call from Python takes first (`_caller`): a
    CNN's call from a loop finds the checks' code cold in the caches after the last call's
    kernels, and the full checks took 48 us of squeezenet's call there (4 us warm); this
    takes a few. Anything else (an error included) goes through `check_arguments`.
    """
    if fn.dim_ranges:
        return None
    wants = []
    for spec in fn.param_specs:
        if spec.kind != "tensor" or spec.dtype is None or spec.shape is None:
            return None
        if not all(d is None or type(d) in (int, str) for d in spec.shape):
            return None  # a dimension expression
        try:
            dtype = np.dtype(spec.dtype)
        except TypeError:  # a narrow dtype whose package is not loaded: the checks say so
            return None
        shape = tuple(spec.shape)
        if all(type(d) is int for d in shape):
            wants.append((dtype, shape, (), ()))
            continue
        fixed = tuple((axis, d) for axis, d in enumerate(shape) if type(d) is int)
        names = tuple((axis, d) for axis, d in enumerate(shape) if type(d) is str)
        wants.append((dtype, len(shape), fixed, names))
    count, ndarray = len(wants), np.ndarray

    def passes(args: tuple) -> bool:
        if len(args) != count:
            return False
        dims: dict[str, int] = {}
        for x, (dtype, shape, fixed, names) in zip(args, wants):
            if type(x) is not ndarray or x.dtype != dtype or not x.flags.c_contiguous:
                return False
            if type(shape) is tuple:
                if x.shape != shape:
                    return False
                continue
            sizes = x.shape
            if len(sizes) != shape:
                return False
            for axis, size in fixed:
                if sizes[axis] != size:
                    return False
            for axis, name in names:
                if dims.setdefault(name, sizes[axis]) != sizes[axis]:
                    return False
        return True

    return passes


def _caller(
    function: VMFunction,
    index: int,
    run: Callable[[int, list], Any],
    fast: Callable[[Callable[..., Any]], Any] | None,
    forms: PythonForms | None,
) -> Callable[..., Any]:
    """The call a `BoundFunction` makes (see there)."""
    out = forms if forms and forms.has_results(function) else None
    unchanged = passes_unchanged(function)

    def call(*args: Any, **kwargs: Any) -> Any:
        if kwargs:
            args = bind_arguments(function, args, kwargs)
        elif unchanged is not None and unchanged(args):
            result = run(index, list(args))
            return result if out is None else out.to_python(result, function.result)
        result = run(index, check_arguments(function, args, forms))
        return result if out is None else out.to_python(result, function.result)

    if fast is None or out is not None:  # (a mode's fast path returns no Python form)
        return call
    return fast(call) or call


class BoundFunction(functools.partial):
    """A function of one VM as a Python callable: `vm["main"](x, w, b=b)`.

    Arguments go by position or by parameter name and pass the entry checks; `run(index,
    values)` (the VM's entry) runs the function. The lookup by name happened once, when the
    object was made, so a positional call costs the checks and the run only.

    An exec mode may offer a fast path (the native mode's): ``fast(call)`` makes the handle's
    whole call from its checked one (or returns None), which runs a positional call only when
    the arguments already are what the checks would pass unchanged, checking them its own
    cheaper way, and hands every other call to the checked one, so every error reads the same
    (the native mode's is C code: no Python frame above its dispatcher). A function of
    fixed-shape tensors takes the same shortcut in every mode, checked in Python
    (`passes_unchanged`).

    Data types with a Python form (``forms``) take it in the arguments and the result.

    A `functools.partial` of that call (`_caller`), so that calling it is a call of C code into
    one Python function: a Python class's ``__call__`` costs a call 0.06-0.09 us more, more
    than a tenth of a native call's whole entry.

    Attributes:
        function: The `VMFunction` called.
        index: Its index in the executable's function table.
    """

    __slots__ = ("function", "index", "_owner")

    def __new__(
        cls,
        function: VMFunction,
        index: int,
        run: Callable[[int, list], Any],
        owner: str,
        fast: Callable[[Callable[..., Any]], Any] | None = None,
        forms: PythonForms | None = None,
    ) -> BoundFunction:
        return super().__new__(cls, _caller(function, index, run, fast, forms or None))

    def __init__(
        self,
        function: VMFunction,
        index: int,
        run: Callable[[int, list], Any],
        owner: str,
        fast: Callable[[Callable[..., Any]], Any] | None = None,
        forms: PythonForms | None = None,
    ) -> None:
        self.function = function
        self.index = index
        self._owner = owner

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


def _saved_caller(
    name: str,
    function: VMFunction,
    index: int,
    values: list[Any],
    run: Callable[[int, list], Any],
    forms: PythonForms | None,
) -> Callable[..., Any]:
    """The call a `SavedFunction` makes: the run on its saved values."""
    out = forms if forms and forms.has_results(function) else None

    def call(*args: Any, **kwargs: Any) -> Any:
        if args or kwargs:
            raise TypeError(f"{name} was saved with its arguments and takes none")
        result = run(index, values)
        return result if out is None else out.to_python(result, function.result)

    return call


class SavedFunction(BoundFunction):
    """A function saved with its checked arguments (`VirtualMachine.save_function`): calling it
    takes no arguments and runs the function on those."""

    __slots__ = ("name", "values")

    def __new__(
        cls,
        name: str,
        function: VMFunction,
        index: int,
        values: list[Any],
        run: Callable[[int, list], Any],
        owner: str,
        forms: PythonForms | None = None,
    ) -> SavedFunction:
        call = _saved_caller(name, function, index, values, run, forms or None)
        return functools.partial.__new__(cls, call)

    def __init__(
        self,
        name: str,
        function: VMFunction,
        index: int,
        values: list[Any],
        run: Callable[[int, list], Any],
        owner: str,
        forms: PythonForms | None = None,
    ) -> None:
        self.function = function
        self.index = index
        self._owner = owner
        self.name = name
        self.values = values

    @property
    def __signature__(self) -> inspect.Signature:
        return inspect.Signature([])

    def __repr__(self) -> str:
        bound = f"{signature(self.function)} with saved arguments"
        return f"<function {self.name}: {bound} of {self._owner}>"
