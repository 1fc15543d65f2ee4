"""The shape-pattern constants of MATCH_SHAPE and MAKE_SHAPE, decoded in one place.

A pattern is a 1-d int array of (kind, value) pairs, one per dimension (`rvm.runtime.builtins`):

| kind | MATCH_SHAPE | MAKE_SHAPE |
|---|---|---|
| `LITERAL` (0) | the dim must equal ``value`` | the dim is ``value`` |
| `STORE` (1) | the dim is stored in heap slot ``value`` | the dim is heap slot ``value`` |
| `CHECK` (2) | the dim must equal heap slot ``value`` | - |
| `ANY` (3) | any dim | - |

`decode` turns a pattern constant into its pairs, checked against the kinds an opcode takes and
the heap's size (a slot out of range is refused: lowered code indexes the heap unchecked). The
lowering of the compiled and native modes reads patterns through it; the run-time builtins
interpret the same kinds (their hot loop reads the flat numbers, `pairs_flat`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "ANY",
    "CHECK",
    "LITERAL",
    "MAKE_KINDS",
    "MATCH_KINDS",
    "PatternError",
    "STORE",
    "decode",
    "pairs_flat",
]

LITERAL, STORE, CHECK, ANY = 0, 1, 2, 3
MATCH_KINDS = (LITERAL, STORE, CHECK, ANY)
"""The kinds MATCH_SHAPE takes."""
MAKE_KINDS = (LITERAL, STORE)
"""The kinds MAKE_SHAPE takes."""
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


def decode(value: Any, kinds: tuple[int, ...], heap_size: int) -> list[tuple[int, int]]:
    """The (kind, value) pairs of pattern constant ``value``, read against a heap of
    ``heap_size`` slots.

    Raises:
        PatternError: ``value`` is not a 1-d int array of pairs, has a kind not in ``kinds``,
            or a heap slot out of range (the message says which).
    """
    if not isinstance(value, np.ndarray) or value.dtype.kind != "i" or value.ndim != 1:
        raise PatternError("is not a 1-d int array")
    flat = [int(v) for v in value.tolist()]
    if len(flat) % 2:
        raise PatternError("has an odd length")
    pairs = list(zip(flat[::2], flat[1::2]))
    for k, v in pairs:
        if k not in kinds:
            raise PatternError(f"has kind {k}")
        if k in _SLOT_KINDS and not 0 <= v < heap_size:
            raise PatternError("has a heap slot out of range")
    return pairs
