"""Dimension arithmetic at import: shape-value elements such as ``past + seq``.

A shape value's element (`rvm.frontend.onnx.context`) is an int, a symbolic name, a dimension
expression (`rvm.ir.dims`: ``past + seq``, ``heads*seq``, ``2*n - 1``), or None (unknown).
Arithmetic on elements is the IR's (`rvm.ir.dims`), so it stays exact and canonical:
``(past + seq) - past`` is ``seq`` again, ``Range(past, past + seq)`` has ``seq`` elements, and
a reshape to ``(b, seq * heads)`` has that dimension. An ONNX ``dim_param`` written as an
expression (optimum's ``"past_sequence_length + sequence_length"``) is read as
that expression (`Dims.parse`), so a computed ``past + seq`` is the very dimension the model's
inputs and outputs declare.
"""

from __future__ import annotations

from typing import Any

from rvm.errors import IRError
from rvm.ir import dims as D


def _element(x: Any) -> Any:
    """``x`` as a dim the IR's arithmetic takes (an int, a name, a DimExpr), else None."""
    if isinstance(x, bool) or x is None:
        return None
    if isinstance(x, int):
        return int(x)
    return x if isinstance(x, str) else None


def nonnegative(d: Any) -> bool:
    """Whether dim ``d`` is >= 0 for every size of its names (sizes are >= 0): an int >= 0,
    a name, or a sum of products of names with positive coefficients."""
    if isinstance(d, int):
        return d >= 0
    if isinstance(d, D.DimExpr):
        return all(c > 0 and all(isinstance(a, str) for a in m) for m, c in d.terms if m) and (
            dict(d.terms).get((), 0) >= 0
        )
    return isinstance(d, str)


class Dims:
    """The arithmetic of shape-value elements."""

    @staticmethod
    def parse(expression: str, name_of: Any) -> Any:
        """The dimension expression an ONNX ``dim_param`` spells (``"past + seq"``), its
        identifiers mapped to IR names by ``name_of``; None when it is a plain name or no
        expression of identifiers and ints."""
        if expression.isidentifier():
            return None
        try:
            value = D.parse_dim(expression)
        except IRError:
            return None
        if not isinstance(value, D.DimExpr):
            return None
        return D.substitute(value, {n: name_of(n) for n in D.symbols(value)})

    @staticmethod
    def lift(x: Any) -> Any:
        """``x`` as an IR dim (an int, a name, an expression), None when unknown."""
        return _element(x)

    def _apply(self, fn: Any, a: Any, b: Any) -> Any:
        la, lb = self.lift(a), self.lift(b)
        if la is None or lb is None:
            return None
        return fn(la, lb)

    def add(self, a: Any, b: Any) -> Any:
        return self._apply(D.add, a, b)

    def subtract(self, a: Any, b: Any) -> Any:
        return self._apply(D.sub, a, b)

    def multiply(self, a: Any, b: Any) -> Any:
        return self._apply(D.mul, a, b)

    def divide(self, a: Any, b: Any) -> Any:
        """ONNX Div on integers, which truncates: ints compute; a dim divided by a positive
        int stays exact where it divides evenly (floor and trunc agree), else unknown."""
        la, lb = self.lift(a), self.lift(b)
        if la is None or not isinstance(lb, int) or lb == 0:
            return None
        if isinstance(la, int):
            q = abs(la) // abs(lb)
            return q if (la >= 0) == (lb >= 0) else -q
        q = D.floordiv(la, lb)
        return None if q is None or D.mul(q, lb) != la else q

    def floor_divide(self, a: Any, b: Any) -> Any:
        """Floor division: ints compute; a dim that is never negative divided by a positive
        int is ``a // b`` (exact where it divides evenly)."""
        la, lb = self.lift(a), self.lift(b)
        if isinstance(la, int) and isinstance(lb, int):
            return la // lb if lb else None
        if isinstance(lb, int) and lb > 0 and nonnegative(la):
            return D.floordiv(la, lb)
        return self.divide(a, b)

    def equal(self, a: Any, b: Any) -> bool | None:
        """``a == b`` where known: equal dims are, and one that exceeds the other by a
        positive amount for every size is not."""
        diff = self._apply(D.sub, a, b)
        if diff is None:
            return None
        diff = self.lift(diff)
        if isinstance(diff, int):
            return diff == 0
        if _positive(diff) or _positive(D.mul(diff, -1)):
            return False
        return None

    def extreme(self, a: Any, b: Any, larger: bool) -> Any:
        """max (``larger``) or min of two elements where one is provably the larger."""
        diff = self._apply(D.sub, a, b)
        if diff is None:
            return None
        diff = self.lift(diff)
        if nonnegative(diff):
            a_wins = True  # a - b >= 0
        elif nonnegative(D.mul(diff, -1)):
            a_wins = False
        else:
            return None
        return a if a_wins == larger else b

    def dim(self, x: Any) -> Any:
        """``x`` as an IR dimension: an int, a name, an expression, or None."""
        return _element(x)


def _positive(d: Any) -> bool:
    """Whether ``d`` > 0 for every size: never negative, with a positive constant."""
    if isinstance(d, int):
        return d > 0
    return isinstance(d, D.DimExpr) and nonnegative(d) and dict(d.terms).get((), 0) > 0
