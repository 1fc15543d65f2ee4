"""What a VM call hands back to Python, and the callables made from a VM's functions.

- **Result checks.** A function's result is checked against its recorded result type
  (`VMFunction.result`) at the VM boundary, as its parameters are on the way in: a tensor's
  dtype, rank and dims (a symbolic dim against the argument it came from, a dimension
  expression against its value from the arguments' sizes), a tuple's length and fields. A
  result-only name in an expression that adds it (``seq + steps``, `shape_patterns.solvable`)
  takes the size that makes the expression hold, and must not be negative: ``generate``'s
  ``(batch, seq + steps)`` is at least the prompt's length. `result_checks(ex)` builds them
  once per executable, and none where the code itself guarantees the type (`result_proof.py`:
  allocations of the promised shape and dtype that kernels write into), so most calls pay
  nothing; the others (results of registered Python functions, data-dependent kernels,
  closures) pay a shape and a dtype comparison.
- **Closures.** A closure in a result (itself, or anywhere in a result tuple or data type
  value, as deep as they nest) is bound to the VM that made it, so `clo(*args)` runs it there,
  as `vm.invoke_closure(clo, *args)` does. The closure keeps its VM alive (a VM is cheap and
  its executable shared; an error after the VM is gone would surprise more than the memory).
  Data type values are walked only in executables that make closures (`makes_closures`).
- **Bound last arguments.** `BoundLast` is `vm.bind(name, *last)`: the function with its last
  arguments fixed (Relax's `BindLastArgs`), checked with the rest at every call.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from rvm.errors import DTypeError, ShapeError
from rvm.runtime import shape_patterns as sp
from rvm.runtime.bytecode import Opcode
from rvm.runtime.entry import expr_mismatch
from rvm.runtime.executable import Executable, ParamSpec, VMFunction
from rvm.runtime.objects import ADT, Closure
from rvm.runtime.result_proof import proved_results
from rvm.runtime.text import signature

__all__ = ["BoundLast", "ResultCheck", "closure_function", "result_check", "result_checks"]

ResultCheck = Callable[[Any, Sequence[Any], Any], None]
"""`check(result, args, vm)`: raises if `result` is not what the function promised; binds the
closures in it to `vm`."""

_NDARRAY = np.ndarray


def _text(shape: Sequence[Any]) -> str:
    dims = ["?" if d is None else str(d) for d in shape]
    return "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"


def _dim_sources(fn: VMFunction) -> dict[str, tuple[int, int]]:
    """Each symbolic dim of `fn`'s tensor parameters -> (parameter index, axis) of its first
    occurrence: where a result dim of that name is read from at a call."""
    found: dict[str, tuple[int, int]] = {}
    for i, spec in enumerate(fn.param_specs):
        if spec.kind == "tensor" and spec.shape is not None:
            for axis, d in enumerate(spec.shape):
                if sp.is_name(d) and d not in found:
                    found[d] = (i, axis)
    return found


def _dim_text(d: Any, sources: dict[str, tuple[int, int]]) -> str:
    """A dim of a result spec as an expression: an int, or the argument's axis it comes from."""
    if isinstance(d, str):
        p, axis = sources[d]
        return f"a[{p}].shape[{axis}]"
    return str(int(d))


def _free_name(d: sp.DimProgram, sizes: Any) -> str | None:
    """The one name of ``d`` not in ``sizes`` when ``d`` adds it (`shape_patterns.solvable`):
    a size of the result gives its value. None otherwise."""
    free = [i for i, n in enumerate(d.names) if n not in sizes]
    if len(free) == 1 and sp.solvable(d.program, free[0]):
        return d.names[free[0]]
    return None


def _expr_test(axis: int, d: sp.DimProgram, sources: dict, free: set[str]) -> str | None:
    """The fast test of result axis ``axis`` declared as ``d``: equal to its value from the
    arguments, or (one name of its own, added) at least the rest; None for no test, "False"
    for the slow path's (``d`` reads a name another axis of the result binds)."""
    if any(n in free for n in d.names):
        return "False"
    names = [n if n in sources else None for n in d.names]
    if all(names):
        text = sp.render(d.program, lambda s: _dim_text(d.names[s], sources))
        return f"x.shape[{axis}] == {text}"
    name = _free_name(d, sources)
    if name is None:
        return None
    rest = sp.render(
        d.program, lambda s: "0" if d.names[s] == name else _dim_text(d.names[s], sources)
    )
    return f"x.shape[{axis}] >= {rest}"


def _check_result_exprs(
    fn: VMFunction, where: str, pattern: Sequence[Any], shape: tuple, sizes: dict, origins: dict
) -> None:
    """The slow check of the result axes declared as dimension expressions (module docstring):
    ``sizes`` by name, from the arguments and the result's own names (``origins`` says where)."""
    what = f"{fn.name}: {where}"
    for axis, d in enumerate(pattern):
        if not isinstance(d, sp.DimProgram):
            continue
        name = _free_name(d, sizes)
        try:
            if name is not None:  # the size that makes the expression hold
                value = shape[axis] - d.value({**sizes, name: 0})
                if value < 0:
                    bound = ", ".join(
                        f"{n} = {sizes[n]} from {origins[n]}" for n in d.names if n != name
                    )
                    raise ShapeError(
                        f"{what} has shape {_text(shape)}, but axis {axis} is {d}, which needs "
                        f"{name} = {value}: a size is never negative ({bound})"
                    )
                sizes[name], origins[name] = value, f"axis {axis} of the result"
            value = d.value(sizes)
        except ZeroDivisionError:
            raise ShapeError(
                f"{what} has shape {_text(shape)}, but axis {axis} is {d}, which divides by a "
                "size that is 0"
            ) from None
        if value is not None and value != shape[axis]:
            bound = [(n, sizes[n], origins[n]) for n in d.names]
            raise expr_mismatch(fn.name, where, shape, axis, d, value, bound)


def _tensor_check(fn: VMFunction, spec: ParamSpec, where: str, sources: dict) -> ResultCheck:
    dtype = np.dtype(spec.dtype) if spec.dtype is not None else None
    pattern = spec.shape

    def slow(x: Any, args: Sequence[Any]) -> None:
        what = f"{fn.name}: {where}"
        if not isinstance(x, _NDARRAY):
            raise TypeError(f"{what} should be a tensor, got {type(x).__name__}")
        if dtype is not None and x.dtype != dtype:
            raise DTypeError(f"{what} should be {dtype}, got {x.dtype}")
        if pattern is None:
            return
        if x.ndim != len(pattern):
            raise ShapeError(
                f"{what} should be a {len(pattern)}-d tensor of shape {_text(pattern)}, got "
                f"shape {_text(x.shape)}"
            )
        sizes = {d: args[p].shape[pa] for d, (p, pa) in sources.items()}
        origins = {d: f"argument {p} '{fn.params[p]}'" for d, (p, _) in sources.items()}
        for axis, (d, got) in enumerate(zip(pattern, x.shape)):
            if type(d) is int and d != got:
                raise ShapeError(
                    f"{what} has shape {_text(x.shape)}, expected {_text(pattern)} (axis "
                    f"{axis} must be {d})"
                )
            if sp.is_name(d):
                if d not in sizes:
                    sizes[d], origins[d] = got, "an earlier axis of the result"
                if got != sizes[d]:
                    raise ShapeError(
                        f"{what} has shape {_text(x.shape)}, but {d} = {sizes[d]} from {origins[d]}"
                    )
        _check_result_exprs(fn, where, pattern, x.shape, sizes, origins)

    # The fast test as one expression over the result `x` and the arguments `a`, compiled
    # once (generated from the spec, as the compiled mode's code is): the shape compared with a
    # tuple of fixed dims and dims read off the arguments (expressions computed from them),
    # the dtype by identity first.
    free = [d for d in pattern or () if sp.is_name(d) and d not in sources]
    if pattern is None:
        shape_test = "True"
    elif len(free) != len(set(free)):
        shape_test = "False"  # a result-only dim twice: the slow path compares them
    elif any(d is None or d in free or isinstance(d, sp.DimProgram) for d in pattern):
        tests = [f"len(x.shape) == {len(pattern)}"]
        for axis, d in enumerate(pattern):
            if isinstance(d, sp.DimProgram):
                tests.append(_expr_test(axis, d, sources, set(free)) or "True")
            elif d is not None and d not in free:
                tests.append(f"x.shape[{axis}] == {_dim_text(d, sources)}")
        shape_test = " and ".join(t for t in tests if t != "True")
    else:
        dims = ", ".join(_dim_text(d, sources) for d in pattern)
        shape_test = f"x.shape == ({dims}{',' if len(pattern) == 1 else ''})"
    dtype_test = "True" if dtype is None else "(x.dtype is dt or x.dtype == dt)"
    test = eval(  # noqa: S307 - source built above from ints and indices only
        f"lambda x, a: x.__class__ is nd and {dtype_test} and {shape_test}",
        {"nd": _NDARRAY, "dt": dtype},
    )

    def check(x: Any, args: Sequence[Any], vm: Any) -> None:
        try:
            ok = test(x, args)
        except ZeroDivisionError:  # an expression's: the slow path says which
            ok = False
        if not ok:
            slow(x, args)

    return check


def _bind_closure(x: Any, args: Sequence[Any], vm: Any) -> None:
    if x.__class__ is Closure:
        x._vm = vm
    elif x.__class__ is tuple or x.__class__ is ADT:
        _bind_closures(x, args, vm)


def _bind_closures(x: Any, args: Sequence[Any], vm: Any) -> None:
    """Binds every closure in `x`, as deep as tuples and data type values nest (a loop, not a
    recursion: a long list is a deep chain of ADT values)."""
    stack, seen = [x], set()
    while stack:
        x = stack.pop()
        cls = x.__class__
        if cls is Closure:
            x._vm = vm
        elif (cls is tuple or cls is ADT) and id(x) not in seen:
            seen.add(id(x))
            stack.extend(x if cls is tuple else x.fields)


def _check_of(
    fn: VMFunction, spec: ParamSpec, where: str, sources: dict, closures: bool = True
) -> ResultCheck | None:
    """The check of a value of `spec`; `closures`: whether the executable makes closures at
    all (else no data type value can hold one, and none needs a walk)."""
    if spec.kind == "tensor":
        return _tensor_check(fn, spec, where, sources)
    if spec.kind == "tuple" and spec.fields is not None:
        fields = [
            _check_of(fn, f, f"{where}[{i}]", sources, closures) for i, f in enumerate(spec.fields)
        ]
        count = len(fields)
        checks = [(i, c) for i, c in enumerate(fields) if c is not None]

        def check_tuple(x: Any, args: Sequence[Any], vm: Any) -> None:
            if not isinstance(x, tuple) or len(x) != count:
                got = f"{len(x)} fields" if isinstance(x, tuple) else type(x).__name__
                raise TypeError(f"{fn.name}: {where} should be a tuple of {count}, got {got}")
            for i, c in checks:
                c(x[i], args, vm)

        return check_tuple
    if spec.kind == "any":
        return _bind_closure
    # a data type value (its constructor tags are the executable's own) or a tuple of unknown
    # fields: only the closures in it need binding
    return _bind_closures if closures else None


def result_check(fn: VMFunction, closures: bool = True) -> ResultCheck | None:
    """The check of `fn`'s results (None when there is nothing to check); `closures`: whether
    its executable makes closures (`makes_closures`), which a result may hold."""
    if fn.result is None:
        return _bind_closure if closures else None
    return _check_of(fn, fn.result, "result", _dim_sources(fn), closures)


def makes_closures(ex: Executable) -> bool:
    """Whether any function of `ex` makes a closure (ALLOC_CLOSURE)."""
    return any(ins[0] == Opcode.ALLOC_CLOSURE for fn in ex.functions for ins in fn.instructions)


def result_checks(ex: Executable) -> list[ResultCheck | None]:
    """Each function's result check, None where its code already guarantees its recorded
    result type (`result_proof.py`: then a call pays nothing)."""
    proved = proved_results(ex)
    closures = makes_closures(ex)
    return [None if ok else result_check(fn, closures) for fn, ok in zip(ex.functions, proved)]


def closure_function(ex: Any, closure: Closure) -> VMFunction:
    """The signature a call of `closure` from Python is checked against: its function's
    parameters after the captured values.

    Raises:
        TypeError: `closure` is not a Closure of `ex`'s functions.
    """
    if not isinstance(closure, Closure):
        raise TypeError(f"invoke_closure expects a Closure, got {type(closure).__name__}")
    functions = ex.functions
    index = closure.func_index
    if (
        not 0 <= index < len(functions)
        or len(closure.free_vars) > len(functions[index].params)
        or (closure.name and closure.name != functions[index].name)
    ):
        raise TypeError(f"{closure!r} is not a closure of this VM's executable")
    fn = functions[index]
    k = len(closure.free_vars)
    return VMFunction(
        fn.name, fn.params[k:], fn.param_specs[k:], fn.register_file_size, (), fn.kind, fn.result
    )


class BoundLast:
    """`vm.bind(name, *last)`: function `name` of one VM with its last arguments fixed.

    Calling it with the first arguments (by position) calls `vm[name](*first, *last)`, with
    every entry check of that call.
    """

    __slots__ = ("function", "last", "_call", "_owner")

    def __init__(
        self, function: VMFunction, last: tuple, call: Callable[..., Any], owner: str
    ) -> None:
        if len(last) > len(function.params):
            raise TypeError(
                f"bind: {function.name} takes {len(function.params)} arguments, got "
                f"{len(last)} to bind"
            )
        self.function = function
        self.last = last
        self._call = call
        self._owner = owner

    def __call__(self, *first: Any) -> Any:
        return self._call(*first, *self.last)

    @property
    def __signature__(self) -> inspect.Signature | None:
        kind = inspect.Parameter.POSITIONAL_ONLY
        names = self.function.params[: len(self.function.params) - len(self.last)]
        try:
            return inspect.Signature([inspect.Parameter(p, kind) for p in names])
        except ValueError:
            return None

    def __repr__(self) -> str:
        bound = ", ".join(self.function.params[len(self.function.params) - len(self.last) :])
        return f"<function {signature(self.function)} with {bound} bound, of {self._owner}>"
