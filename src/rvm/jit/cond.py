"""Run-time checks of a kernel as a small expression tree, decided at lowering time when they can.

A check's condition (`Emitter.check`) is a `Cond`: a comparison of two int expressions
(`Compare`), or several conditions joined by ``or`` / ``and`` (`AnyOf`, `AllOf`). An int
expression (`Int`) is its source and, when known while lowering (a literal, or arithmetic on
literals folded by `mul` and `mod`), its value. `Cond.known` says whether the condition is
decided already: a false one adds no statement to the kernel (each costs Numba compile time).
Nothing here parses or evaluates source text.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "Int",
    "Compare",
    "AnyOf",
    "AllOf",
    "Cond",
    "term",
    "mul",
    "mod",
    "eq",
    "ne",
    "lt",
    "gt",
    "any_of",
    "all_of",
]

_OPS: dict[str, Callable[[int, int], bool]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    ">": operator.gt,
}


@dataclass(frozen=True, slots=True)
class Int:
    """An int expression of generated code: its source, and its value when known now."""

    code: str
    value: int | None = None

    def atom(self) -> str:
        """The source, parenthesized unless it is a name, a literal or an attribute."""
        simple = self.code.replace(".", "").replace("_", "a").isalnum()
        return self.code if simple or self.value is not None else f"({self.code})"


def term(x: Int | str | int) -> Int:
    """``x`` as an `Int`: an int, or source that is an int literal (valued) or not."""
    if isinstance(x, Int):
        return x
    if isinstance(x, int):
        return Int(str(x), x)
    text = x.strip()
    digits = text[1:] if text.startswith("-") else text
    return Int(text, int(text)) if digits.isdigit() else Int(text)


def mul(a: Int | str | int, b: Int | str | int) -> Int:
    """``a * b``, folded when both are known."""
    a, b = term(a), term(b)
    if a.value is not None and b.value is not None:
        return term(a.value * b.value)
    if b.value == 1:
        return a
    return Int(f"{a.atom()} * {b.atom()}")


def mod(a: Int | str | int, b: Int | str | int) -> Int:
    """``a % b``, folded when both are known (and ``b`` is not 0)."""
    a, b = term(a), term(b)
    if a.value is not None and b.value:
        return term(a.value % b.value)
    return Int(f"{a.atom()} % {b.atom()}")


@dataclass(frozen=True, slots=True)
class Compare:
    """``left op right`` on two int expressions (``op``: ``==``, ``!=``, ``<``, ``>``)."""

    op: str
    left: Int
    right: Int

    def known(self) -> bool | None:
        """The condition's value when decided at lowering time, else None."""
        if self.left.value is not None and self.right.value is not None:
            return _OPS[self.op](self.left.value, self.right.value)
        if self.left.code == self.right.code:  # the same value (the code has no side effects)
            return self.op == "=="
        return None

    def source(self) -> str:
        return f"{self.left.code} {self.op} {self.right.code}"


@dataclass(frozen=True, slots=True)
class AnyOf:
    """Whether any of ``terms`` holds."""

    terms: tuple[Cond, ...]

    def known(self) -> bool | None:
        values = [t.known() for t in self.terms]
        if any(v is True for v in values):
            return True
        return False if all(v is False for v in values) else None

    def source(self) -> str:
        return " or ".join(_part(t) for t in self.terms if t.known() is not False)


@dataclass(frozen=True, slots=True)
class AllOf:
    """Whether every one of ``terms`` holds."""

    terms: tuple[Cond, ...]

    def known(self) -> bool | None:
        values = [t.known() for t in self.terms]
        if any(v is False for v in values):
            return False
        return True if all(v is True for v in values) else None

    def source(self) -> str:
        return " and ".join(_part(t) for t in self.terms if t.known() is not True)


Cond = Compare | AnyOf | AllOf


def _part(c: Cond) -> str:
    return c.source() if isinstance(c, Compare) else f"({c.source()})"


def _compare(op: str) -> Callable[[Int | str | int, Int | str | int], Compare]:
    def make(a: Int | str | int, b: Int | str | int) -> Compare:
        return Compare(op, term(a), term(b))

    make.__doc__ = f"The condition ``a {op} b``."
    return make


eq = _compare("==")
ne = _compare("!=")
lt = _compare("<")
gt = _compare(">")


def any_of(*terms: Cond) -> AnyOf:
    """The condition that any of ``terms`` holds."""
    return AnyOf(tuple(terms))


def all_of(*terms: Cond) -> AllOf:
    """The condition that every one of ``terms`` holds."""
    return AllOf(tuple(terms))
