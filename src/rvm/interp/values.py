"""Values and environments of the reference interpreter.

Run-time values are numpy arrays (tensors), Python tuples, `rvm.runtime.objects.ADT` (shared
with the VM so that results compare) and this module's `Closure` (a function expression and the
environment it captured). An `Env` is one function invocation's variables and symbolic
dimensions; its ``parent`` is the environment a closure captured, so lookups walk outwards.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rvm.errors import IRError, RVMError
from rvm.ir import expr as E
from rvm.ir.dims import DimExpr, evaluate, symbols
from rvm.runtime.objects import ADT


class InterpError(RVMError, RuntimeError):
    """A failure while the reference interpreter runs a program (a failing op, no match clause,
    a condition that is not a 0-d bool tensor); the message names the function."""


class Closure:
    """A function value of the interpreter: a `Function` and the environment it captured.

    Attributes:
        func: The function expression.
        env: The captured environment (None for a module function used as a value).
        name: A name for messages: ``main.loop`` for a local function bound to ``loop``.
    """

    __slots__ = ("func", "env", "name")

    def __init__(self, func: E.Function, env: Env | None, name: str) -> None:
        self.func = func
        self.env = env
        self.name = name

    def __repr__(self) -> str:
        return f"Closure(@{self.name}, {len(self.func.params)} params)"


class Env:
    """The variables and symbolic dimensions of one function invocation.

    Attributes:
        vars: Values by `Var` (identity-hashed).
        dims: Symbolic dimension values bound by this invocation's parameters and annotations.
        sources: For each dimension in ``dims``, where it was bound (``argument 0 'x'``).
        parent: The captured environment of a closure, None for a module function.
        name: The function's name, for messages.
        binding: The variable whose value is being computed, for messages.
    """

    __slots__ = ("vars", "dims", "sources", "parent", "name", "binding")

    def __init__(self, name: str, parent: Env | None = None) -> None:
        self.vars: dict[E.Var, Any] = {}
        self.dims: dict[str, int] = {}
        self.sources: dict[str, str] = {}
        self.parent = parent
        self.name = name
        self.binding: E.Var | None = None

    def lookup(self, var: E.Var) -> Any:
        """The value of ``var`` here or in an enclosing environment."""
        env: Env | None = self
        while env is not None:
            value = env.vars.get(var, _MISSING)
            if value is not _MISSING:
                return value
            env = env.parent
        raise IRError(f"{self.name}: variable '{var.name}' is used but not bound")

    def dim(self, name: str) -> int | None:
        """The value of symbolic dimension ``name`` here or in an enclosing environment; a
        dimension expression (``past + seq``) is computed from its names when they are bound
        and no value bound it whole."""
        env: Env | None = self
        while env is not None:
            value = env.dims.get(name)
            if value is not None:
                return value
            env = env.parent
        if isinstance(name, DimExpr):
            sizes = {n: self.dim(n) for n in symbols(name)}
            if all(v is not None for v in sizes.values()):
                return evaluate(name, sizes)  # type: ignore[arg-type]
        return None

    def where(self) -> str:
        """``main`` or ``main, binding 'lv3'``: where an error happened."""
        if self.binding is None:
            return self.name
        return f"{self.name}, binding '{self.binding.name}'"


_MISSING = object()


def describe(value: Any) -> str:
    """A short description of a run-time value for error messages (never a whole array)."""
    if isinstance(value, np.ndarray):
        return f"a tensor of shape {value.shape} and dtype {value.dtype.name}"
    if isinstance(value, tuple):
        return f"a tuple of {len(value)} fields"
    if isinstance(value, Closure):
        return f"the function {value.name}"
    if isinstance(value, E.Constructor):
        return f"the constructor {value.name}"
    if isinstance(value, ADT):
        head = value.name if value.name is not None else f"ADT[{value.tag}]"
        return f"{head}({', '.join('...' for _ in value.fields)})"
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"
