"""Dimension arithmetic at import: sums of symbolic dimensions (``past + seq``).

A shape value's element (`rvm.frontend.onnx.context`) is an int, a symbolic name, a `DimSum`
(an integer combination of names plus a constant, such as ``past + seq`` or ``2 * n - 1``), or
None (unknown). Arithmetic on elements stays exact: ``(past + seq) - past`` is ``seq`` again,
so ``Range(past, past + seq)`` has ``seq`` elements and a reshape to ``(b, seq * 0 + 4)`` is
static. A sum the IR cannot carry as a dimension becomes a name only where the model itself
names it: an ONNX ``dim_param`` written as an expression (optimum's
``"past_sequence_length + sequence_length"``) is recorded as an alias of its identifier
(`Dims.alias`), so a computed ``past + seq`` is that dimension; any other sum is None in the
IR (a size read at run time).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DimSum:
    """``sum(coef * name) + const``: terms sorted by name, no zero coefficient."""

    terms: tuple[tuple[str, int], ...]
    const: int = 0

    @property
    def nonnegative(self) -> bool:
        """Whether the value is >= 0 for every size of its dimensions (which are >= 0)."""
        return self.const >= 0 and all(c > 0 for _, c in self.terms)


def _sum(terms: dict[str, int], const: int) -> Any:
    """The simplest element for ``terms`` + ``const``: an int, a name, or a DimSum."""
    kept = tuple(sorted((n, c) for n, c in terms.items() if c))
    if not kept:
        return const
    if len(kept) == 1 and kept[0][1] == 1 and const == 0:
        return kept[0][0]
    return DimSum(kept, const)


class Dims:
    """The arithmetic of shape-value elements, with the model's aliases for sums."""

    def __init__(self) -> None:
        self.aliases: dict[DimSum, str] = {}
        self.expansions: dict[str, DimSum] = {}

    def alias(self, expression: str, name: str, name_of: Any) -> None:
        """Record ``name`` as the dimension ``expression`` (``"past + seq"``) if it is a
        linear expression of identifiers and ints; ``name_of`` maps an identifier in it to its
        IR name."""
        tokens = re.findall(r"\s*([+-])?\s*(?:(\d+)\s*\*\s*)?([A-Za-z_]\w*|\d+)\s*", expression)
        if not tokens or "".join(re.findall(r"\S", expression)) != "".join(
            f"{sign}{coef + '*' if coef else ''}{atom}" for sign, coef, atom in tokens
        ):
            return
        terms: dict[str, int] = {}
        const = 0
        for sign, coef, atom in tokens:
            k = (-1 if sign == "-" else 1) * (int(coef) if coef else 1)
            if atom.isdigit():
                const += k * int(atom)
            else:
                ident = name_of(atom)
                terms[ident] = terms.get(ident, 0) + k
        value = _sum(terms, const)
        if isinstance(value, DimSum):
            self.aliases[value] = name
            self.expansions[name] = value

    def lift(self, x: Any) -> tuple[dict[str, int], int] | None:
        """``x`` as (terms, const); a name that aliases a sum expands to it."""
        if isinstance(x, bool) or x is None:
            return None
        if isinstance(x, int):
            return {}, x
        if isinstance(x, str):
            x = self.expansions.get(x, x)
            if isinstance(x, str):
                return {x: 1}, 0
        if isinstance(x, DimSum):
            return dict(x.terms), x.const
        return None

    def lower(self, terms: dict[str, int], const: int) -> Any:
        value = _sum(terms, const)
        return self.aliases.get(value, value) if isinstance(value, DimSum) else value

    def add(self, a: Any, b: Any, sign: int = 1) -> Any:
        la, lb = self.lift(a), self.lift(b)
        if la is None or lb is None:
            return None
        terms = dict(la[0])
        for n, c in lb[0].items():
            terms[n] = terms.get(n, 0) + sign * c
        return self.lower(terms, la[1] + sign * lb[1])

    def subtract(self, a: Any, b: Any) -> Any:
        return self.add(a, b, -1)

    def multiply(self, a: Any, b: Any) -> Any:
        la, lb = self.lift(a), self.lift(b)
        if la is None or lb is None:
            return None
        if la[0] and lb[0]:
            return None  # a product of dimensions is no sum
        (terms, const), k = (la, lb[1]) if not lb[0] else (lb, la[1])
        return self.lower({n: c * k for n, c in terms.items()}, const * k)

    def divide(self, a: Any, b: Any) -> Any:
        """Exact integer division (ONNX Div truncates; floor and trunc agree when exact)."""
        la, lb = self.lift(a), self.lift(b)
        if la is None or lb is None or lb[0] or lb[1] == 0:
            return None
        k = lb[1]
        if not la[0]:
            q = abs(la[1]) // abs(k)
            return q if (la[1] >= 0) == (k >= 0) else -q
        if la[1] % k or any(c % k for c in la[0].values()):
            return None
        return self.lower({n: c // k for n, c in la[0].items()}, la[1] // k)

    def floor_divide(self, a: Any, b: Any) -> Any:
        la, lb = self.lift(a), self.lift(b)
        if la is not None and lb is not None and not la[0] and not lb[0]:
            return la[1] // lb[1] if lb[1] else None
        return self.divide(a, b)

    def _difference(self, a: Any, b: Any) -> Any:
        """``a - b`` as an int, a name or a DimSum; None when either is not a dimension."""
        la, lb = self.lift(a), self.lift(b)
        if la is None or lb is None:
            return None
        terms = {n: la[0].get(n, 0) - lb[0].get(n, 0) for n in {*la[0], *lb[0]}}
        return _sum(terms, la[1] - lb[1])

    def equal(self, a: Any, b: Any) -> bool | None:
        """``a == b`` where known: equal sums are, and a sum that is never negative is not a
        negative int."""
        diff = self._difference(a, b)
        if diff is None:
            return None
        if isinstance(diff, int):
            return diff == 0
        if isinstance(diff, str):
            return None
        if diff.nonnegative and diff.const > 0:
            return False
        negated = DimSum(tuple((n, -c) for n, c in diff.terms), -diff.const)
        return False if negated.nonnegative and negated.const > 0 else None

    def extreme(self, a: Any, b: Any, larger: bool) -> Any:
        """max (``larger``) or min of two elements where one is provably the larger."""
        diff = self._difference(a, b)
        if diff is None:
            return None
        if isinstance(diff, int):
            a_wins = diff >= 0
        elif isinstance(diff, str) or diff.nonnegative:
            a_wins = True  # a - b >= 0
        elif DimSum(tuple((n, -c) for n, c in diff.terms), -diff.const).nonnegative:
            a_wins = False
        else:
            return None
        return a if a_wins == larger else b

    def dim(self, x: Any) -> Any:
        """``x`` as an IR dimension: an int, a name, or None."""
        if isinstance(x, (int, str)) and not isinstance(x, bool):
            return x
        return None
