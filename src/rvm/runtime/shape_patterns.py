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

The same programs spell the dimension expressions of function signatures
(`ParamSpec.shape`, `VMFunction.result`): a `DimProgram` is such a dim, its program's slots
indexing the names it reads, so the entry and result checks (`rvm.runtime.entry`,
`rvm.runtime.calling`) compute ``past + seq`` from the sizes the call bound, with the same ops.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "ANY",
    "CHECK",
    "DimProgram",
    "EXPR",
    "LITERAL",
    "MAKE_KINDS",
    "MATCH_KINDS",
    "PatternError",
    "STORE",
    "decode",
    "evaluate",
    "is_name",
    "pairs_flat",
    "render",
    "solvable",
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


def solvable(program: Program, slot: int) -> bool:
    """Whether the value of ``program`` is ``heap[slot] + rest``, ``rest`` not reading the
    slot: the slot is read once, and only additions lie between it and the result. Then a
    size the program must equal gives the slot's value (``size - rest``)."""
    stack: list[tuple[int, bool]] = []  # per value: reads of the slot, and by additions only
    for op, arg in program:
        if op in (PUSH_INT, PUSH_SLOT):
            stack.append((int(op == PUSH_SLOT and arg == slot), True))
        else:
            b, a = stack.pop(), stack.pop()
            reads = a[0] + b[0]
            stack.append((reads, reads == 0 or (op == ADD and a[1] and b[1])))
    return stack[0] == (1, True)


def is_name(d: object) -> bool:
    """Whether signature dim ``d`` is a symbolic name (bound by the first size it meets), not
    an int, an unknown (None) or an expression (`DimProgram`)."""
    return isinstance(d, str) and not isinstance(d, DimProgram)


class DimProgram(str):
    """A dimension expression of a signature (``past + seq``): a ``str`` whose text is the
    expression's canonical spelling (`rvm.ir.dims.DimExpr`), so it prints and compares as
    that text, with the names it reads and its `EXPR` program, whose `PUSH_SLOT` args index
    ``names``. Made by the compiler (`rvm.codegen.patterns.spec_dim`) and the executable
    reader, through `checked`.
    """

    names: tuple[str, ...]
    program: Program

    def __new__(cls, text: str, names: tuple[str, ...], program: Program) -> DimProgram:
        self = super().__new__(cls, text)
        self.names = tuple(names)
        self.program = tuple((int(op), int(arg)) for op, arg in program)
        return self

    @classmethod
    def checked(
        cls, text: str, names: Sequence[str], program: Sequence[Sequence[int]]
    ) -> DimProgram:
        """A `DimProgram`, its program checked by `decode` to compute one value from its names.

        Raises:
            PatternError: A malformed program, or one reading a name it does not have.
        """
        flat = [EXPR, len(program)] + [int(v) for pair in program for v in pair]
        ((_, checked),) = decode(np.array(flat, np.int64), (EXPR,), len(names))
        return cls(text, tuple(names), checked)

    def __repr__(self) -> str:
        return f"DimProgram({str(self)!r}, {self.names!r}, {self.program!r})"

    def __reduce__(self) -> tuple:
        return (DimProgram, (str(self), self.names, self.program))

    def value(self, sizes: Mapping[str, int]) -> int | None:
        """The expression's value given ``sizes`` by name; None when a name is not there.

        Raises:
            ZeroDivisionError: A ``//`` or ``%`` by 0.
        """
        heap = [sizes.get(n) for n in self.names]
        if any(v is None for v in heap):
            return None
        return evaluate(self.program, heap)  # type: ignore[arg-type]
