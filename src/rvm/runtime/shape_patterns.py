"""The shape-pattern constants of MATCH_SHAPE and MAKE_SHAPE, decoded in one place.

A pattern is a 1-d int array of (kind, value) pairs, one per dimension (`rvm.runtime.builtins`):

| kind | MATCH_SHAPE | MAKE_SHAPE |
|---|---|---|
| `LITERAL` (0) | the dim must equal ``value`` | the dim is ``value`` |
| `STORE` (1) | the dim is stored in heap slot ``value`` | the dim is heap slot ``value`` |
| `CHECK` (2) | the dim must equal heap slot ``value`` | - |
| `ANY` (3) | any dim | - |
| `EXPR` (4) | the dim must equal the expression | the dim is the expression |

An `EXPR` pair's value is ``n``, the count of (op, arg) pairs after it that spell a dimension
expression (``past + seq``, `rvm.ir.dims`) in postfix over heap slots and ints:

| op | arg | meaning |
|---|---|---|
| `PUSH_INT` (0) | an int | push the int |
| `PUSH_SLOT` (1) | a heap slot | push the slot's value |
| `ADD` (2), `MUL` (3), `FLOORDIV` (4), `MOD` (5) | 0 | pop b, pop a, push a + b (a * b, ...) |

A pattern is therefore (kind, value) pairs throughout, one dimension per pair except that an
expression's program follows its pair. The meaning of the ops is written once, here: `evaluate`
computes a program from a heap (the builtins), `render` spells it as Python source over heap
reads (the compiled and native modes).

`decode` turns a pattern constant into its dims' (kind, value) pairs (an `EXPR`'s value is its
program, a tuple of (op, arg) pairs), checked against the kinds an opcode takes and
the heap's size (a slot out of range is refused: lowered code indexes the heap unchecked). The
lowering of the compiled and native modes reads patterns through it; the run-time builtins
interpret the same kinds (their hot loop reads the flat numbers, `pairs_flat`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = [
    "ANY",
    "CHECK",
    "EXPR",
    "LITERAL",
    "MAKE_KINDS",
    "MATCH_KINDS",
    "PatternError",
    "STORE",
    "decode",
    "evaluate",
    "pairs_flat",
    "render",
]

LITERAL, STORE, CHECK, ANY, EXPR = 0, 1, 2, 3, 4
MATCH_KINDS = (LITERAL, STORE, CHECK, ANY, EXPR)
"""The kinds MATCH_SHAPE takes."""
MAKE_KINDS = (LITERAL, STORE, EXPR)
"""The kinds MAKE_SHAPE takes."""
PUSH_INT, PUSH_SLOT, ADD, MUL, FLOORDIV, MOD = 0, 1, 2, 3, 4, 5
"""The ops of an `EXPR` program."""
BINARY: dict[int, tuple[str, Callable[[int, int], int]]] = {
    ADD: ("+", operator.add),
    MUL: ("*", operator.mul),
    FLOORDIV: ("//", operator.floordiv),
    MOD: ("%", operator.mod),
}
"""A binary op of an `EXPR` program -> its Python operator and function."""
Program = tuple[tuple[int, int], ...]
_SLOT_KINDS = (STORE, CHECK)  # the kinds whose value is a heap slot


class PatternError(ValueError):
    """A shape pattern that is not (kind, value) pairs of the kinds an opcode takes."""


def pairs_flat(flat: list[int]) -> list[int]:
    """``flat`` (a pattern's numbers) checked to be pairs: kind, value, kind, value, ...

    Raises:
        PatternError: An odd count of numbers.
    """
    if len(flat) % 2:
        raise PatternError(f"a shape pattern has (kind, value) pairs, got {len(flat)} numbers")
    return flat


def decode(value: Any, kinds: tuple[int, ...], heap_size: int) -> list[tuple[int, Any]]:
    """The (kind, value) pairs of pattern constant ``value``, one per dimension, read against
    a heap of ``heap_size`` slots; an `EXPR`'s value is its program, checked to compute one
    value from slots in range.

    Raises:
        PatternError: ``value`` is not a 1-d int array of pairs, has a kind not in ``kinds``,
            a heap slot out of range, or a malformed program (the message says which).
    """
    if not isinstance(value, np.ndarray) or value.dtype.kind != "i" or value.ndim != 1:
        raise PatternError("is not a 1-d int array")
    flat = [int(v) for v in value.tolist()]
    if len(flat) % 2:
        raise PatternError("has an odd length")
    pairs = list(zip(flat[::2], flat[1::2]))
    out: list[tuple[int, Any]] = []
    i = 0
    while i < len(pairs):
        k, v = pairs[i]
        i += 1
        if k not in kinds:
            raise PatternError(f"has kind {k}")
        if k in _SLOT_KINDS and not 0 <= v < heap_size:
            raise PatternError("has a heap slot out of range")
        if k == EXPR:
            if not 0 < v <= len(pairs) - i:
                raise PatternError(f"has an expression of {v} ops past its end")
            program = tuple(pairs[i : i + v])
            _check_program(program, heap_size)
            out.append((k, program))
            i += v
        else:
            out.append((k, v))
    return out


def _check_program(program: Program, heap_size: int) -> None:
    depth = 0
    for op, arg in program:
        if op == PUSH_SLOT and not 0 <= arg < heap_size:
            raise PatternError("has a heap slot out of range")
        if op in (PUSH_INT, PUSH_SLOT):
            depth += 1
        elif op in BINARY and depth >= 2:
            depth -= 1
        else:
            raise PatternError(f"has an expression op {op} it cannot run")
    if depth != 1:
        raise PatternError("has an expression that leaves no single value")


def evaluate(program: Program, heap: Sequence[int]) -> int:
    """The value of an `EXPR` program over ``heap`` (a `decode`d, checked program)."""
    stack: list[int] = []
    for op, arg in program:
        if op == PUSH_INT:
            stack.append(arg)
        elif op == PUSH_SLOT:
            stack.append(int(heap[arg]))
        else:
            b = stack.pop()
            stack.append(BINARY[op][1](stack.pop(), b))
    return stack[0]


def render(program: Program, slot: Callable[[int], str]) -> str:
    """An `EXPR` program as a Python expression, each heap slot spelled by ``slot``."""
    stack: list[str] = []
    for op, arg in program:
        if op == PUSH_INT:
            stack.append(str(arg) if arg >= 0 else f"({arg})")
        elif op == PUSH_SLOT:
            stack.append(slot(arg))
        else:
            b = stack.pop()
            stack.append(f"({stack.pop()} {BINARY[op][0]} {b})")
    return stack[0]
