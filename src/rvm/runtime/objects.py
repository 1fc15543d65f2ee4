"""Runtime values that are not tensors: algebraic data type values and closures.

Both are plain `__slots__` classes, shared by the virtual machine and the reference interpreter.
Tuples are plain Python tuples and tensors are numpy arrays, so neither needs a class here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["ADT", "Closure"]


class ADT:
    """A value of an algebraic data type: a constructor tag and its fields.

    Attributes:
        tag: The constructor's tag (an int, unique among the constructors of an executable).
        fields: The constructor's arguments, a tuple.
        name: The constructor's name for printing, or None when unknown.
    """

    __slots__ = ("tag", "fields", "name")

    def __init__(self, tag: int, fields: tuple = (), name: str | None = None) -> None:
        self.tag = tag
        self.fields = tuple(fields)
        self.name = name

    def __getitem__(self, index: int) -> Any:
        return self.fields[index]

    def __len__(self) -> int:
        return len(self.fields)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.fields)

    def __repr__(self) -> str:
        # Iterative so that a 100 000-long list prints without RecursionError.
        parts: list[str] = []
        stack: list[Any] = [self]
        while stack:
            item = stack.pop()
            if isinstance(item, str) and item in _PUNCT:
                parts.append(item)
            elif isinstance(item, ADT):
                head = item.name if item.name is not None else f"ADT[{item.tag}]"
                parts.append(head + "(")
                stack.append(")")
                for i in range(len(item.fields) - 1, -1, -1):
                    stack.append(item.fields[i])
                    if i:
                        stack.append(", ")
            else:
                parts.append(repr(item))
        return "".join(parts)


_PUNCT = frozenset([")", ", "])


class Closure:
    """A function value: a VM function and the values it captured.

    When called, the closure's function receives the free variables first, then the call's
    arguments (`func(free_vars..., args...)`, the Relay VM convention).

    A closure a VM call returned to Python is bound to that VM (and keeps it alive):
    `clo(*args)` is `vm.invoke_closure(clo, *args)`, with the same entry checks.

    Attributes:
        func_index: Index of the function in the executable's function table.
        free_vars: The captured values, a tuple.
        name: The function's name, for printing.
    """

    __slots__ = ("func_index", "free_vars", "name", "_vm")

    def __init__(self, func_index: int, free_vars: tuple = (), name: str = "") -> None:
        self.func_index = func_index
        self.free_vars = tuple(free_vars)
        self.name = name

    def __repr__(self) -> str:
        label = self.name or f"#{self.func_index}"
        return f"Closure(@{label}, {len(self.free_vars)} free vars)"

    def __call__(self, *args: Any) -> Any:
        """Runs the closure on the VM that returned it (`VirtualMachine.invoke_closure`).

        Raises:
            TypeError: The closure did not come out of a VM call (one made by the interpreter,
                or by hand): call `vm.invoke_closure(closure, *args)`.
        """
        vm = getattr(self, "_vm", None)
        if vm is None:
            raise TypeError(
                f"{self!r} was not returned by a VirtualMachine call, so it has no VM to run "
                "on: call vm.invoke_closure(closure, *args)"
            )
        return vm.invoke_closure(self, *args)
