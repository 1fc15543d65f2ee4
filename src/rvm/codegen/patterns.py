"""Dimension expressions as shape-pattern programs (`rvm.runtime.shape_patterns.EXPR`).

A `rvm.ir.dims.DimExpr` in a MATCH_SHAPE or MAKE_SHAPE pattern becomes the pair
``(EXPR, n)`` followed by its postfix program of ``n`` (op, arg) pairs over the heap slots of
its names. The canonical sum of products is spelled as it reads: each term's coefficient and
atoms multiplied, the terms added; a floor division or modulo atom computes its operands first.
A signature's expression (`ParamSpec.shape`) is the same program over the names it reads
(`spec_dim`).
"""

from __future__ import annotations

from collections.abc import Mapping

from rvm.ir import dims as D
from rvm.runtime import shape_patterns as sp

__all__ = ["expr_pairs", "spec_dim", "spec_shape"]

_OPS = {"+": sp.ADD, "*": sp.MUL, "//": sp.FLOORDIV, "%": sp.MOD}


def expr_pairs(d: D.DimExpr, slots: Mapping[str, int]) -> list[int] | None:
    """The pattern numbers of expression ``d`` whose names sit in heap ``slots``; None when a
    name it reads has no slot (nothing bound it)."""
    if not D.symbols(d) <= slots.keys():
        return None

    def program(x: object) -> list[int]:
        return x if isinstance(x, list) else [sp.PUSH_INT, int(x)]  # type: ignore[call-overload]

    def binary(op: str):  # noqa: ANN202 - a fold op
        return lambda a, b: program(a) + program(b) + [_OPS[op], 0]

    code = program(D.fold(d, lambda n: [sp.PUSH_SLOT, slots[n]], {k: binary(k) for k in _OPS}))
    return [sp.EXPR, len(code) // 2, *code]


def spec_dim(d: object) -> object:
    """Dim ``d`` of a signature as the runtime checks it: an expression as a
    `rvm.runtime.shape_patterns.DimProgram` over its names (sorted), any other dim as it is."""
    if not isinstance(d, D.DimExpr):
        return d
    names = tuple(sorted(D.symbols(d)))
    code = expr_pairs(d, {n: i for i, n in enumerate(names)})
    assert code is not None  # every name has a slot
    return sp.DimProgram(str(d), names, tuple(zip(code[2::2], code[3::2])))


def spec_shape(shape: tuple | None) -> tuple | None:
    """``shape`` with its expressions as `spec_dim` makes them."""
    return None if shape is None else tuple(spec_dim(d) for d in shape)
