"""Dimension expressions: ``past + seq``, ``heads * seq``, ``(n + 1) // 2`` as IR dimensions.

A dimension (`rvm.ir.types.Dim`) is an int (known), a name (a symbolic dimension), a `DimExpr`
(an expression over names), or None (unknown). A `DimExpr` is kept in one canonical form, a
sum of products with integer coefficients over atoms, where an atom is a name or a floor
division / modulo that does not simplify (`DivMod`). Equal expressions therefore have one
form: ``past + seq`` is ``seq + past`` and ``(a + 1) - 1`` is ``a`` (a name again, not an
expression). Arithmetic on dims lives here (`add`, `sub`, `mul`, `floordiv`, `mod`), and only
genuine expressions are `DimExpr`: a result that is an int or a lone name is returned as one.

A `DimExpr` is a ``str`` whose text is its canonical spelling (``"past + seq"``): code that
treats a string dimension as symbolic (compared with ``==``, hashed, printed) treats an
expression as one symbolic dimension, which is right everywhere except where a name is
*bound* (a parameter's shape matched at run time, a callee's names unified with a caller's
dims). Those places ask `is_symbol` (a bare name, bindable) and `symbols` (the names an
expression reads), and bind only bare names: an expression is checked once its names are
bound. The structure rides along as data (`DimExpr.terms`), never re-read from the text; the
text is parsed (`parse_dim`) only where a user or the script format wrote it.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from rvm.errors import IRError

__all__ = [
    "DimExpr",
    "DivMod",
    "add",
    "evaluate",
    "floordiv",
    "is_symbol",
    "mod",
    "mul",
    "parse_dim",
    "source",
    "sub",
    "substitute",
    "symbols",
]

Atom = "str | DivMod"
Monomial = tuple  # sorted atoms (a repeated atom is a power)
Poly = dict  # Monomial -> nonzero int coefficient; the monomial () is the constant


@dataclass(frozen=True)
class DivMod:
    """``a // b`` or ``a % b`` (``op``) of dims that does not simplify; an atom of a DimExpr."""

    op: str
    a: object
    b: object

    def __str__(self) -> str:
        return f"{_operand(self.a)} {self.op} {_operand(self.b)}"


def _operand(d: object) -> str:
    """``d`` as an operand of ``//`` / ``%``: a sum or product in parentheses."""
    return f"({d})" if isinstance(d, DimExpr) else str(d)


class DimExpr(str):
    """A dimension that is an expression over symbolic dimensions, in canonical form.

    Made by `add`, `sub`, `mul`, `floordiv`, `mod` and `parse_dim`, never directly: those
    return an int or a name when the expression simplifies to one.
    """

    terms: tuple[tuple[Monomial, int], ...]
    """((atoms, coefficient), ...): the canonical sum of products, constant last."""

    def __new__(cls, terms: tuple[tuple[Monomial, int], ...]) -> DimExpr:
        self = super().__new__(cls, _text(terms))
        self.terms = terms
        return self

    def __repr__(self) -> str:
        return str.__repr__(self)

    def __reduce__(self) -> tuple:
        return (parse_dim, (str(self),))


def _sort_key(m: Monomial) -> tuple:
    return (m == (), tuple(str(a) for a in m))


def _text(terms: tuple[tuple[Monomial, int], ...]) -> str:
    out = ""
    for m, c in terms:
        factors = [_factor(a, len(m) > 1 or abs(c) != 1) for a in m]
        body = "*".join(([str(abs(c))] if abs(c) != 1 or not m else []) + factors)
        if not out:
            out = f"-{body}" if c < 0 else body
        else:
            out += f" - {body}" if c < 0 else f" + {body}"
    return out


def _factor(atom: object, grouped: bool) -> str:
    return f"({atom})" if isinstance(atom, DivMod) and grouped else str(atom)


# ---------------------------------------------------------------------------------------------
# Polynomials


def _poly(d: object) -> Poly | None:
    """``d`` (an int, a name or a DimExpr) as a polynomial; None for an unknown dim."""
    if d is None or isinstance(d, bool):
        return None
    if isinstance(d, DimExpr):
        return dict(d.terms)
    if isinstance(d, int):
        return {(): d} if d else {}
    if isinstance(d, str):
        return {(d,): 1}
    return None


def _dim(p: Poly) -> object:
    """The simplest dim of polynomial ``p``: an int, a name, or a DimExpr."""
    kept = {m: c for m, c in p.items() if c}
    if not kept:
        return 0
    if list(kept) == [()]:
        return kept[()]
    if len(kept) == 1:
        ((m, c),) = kept.items()
        if c == 1 and len(m) == 1 and isinstance(m[0], str):
            return m[0]
    return DimExpr(tuple(sorted(kept.items(), key=lambda mc: _sort_key(mc[0]))))


def _combine(a: object, b: object, sign: int) -> object:
    pa, pb = _poly(a), _poly(b)
    if pa is None or pb is None:
        return None
    for m, c in pb.items():
        pa[m] = pa.get(m, 0) + sign * c
    return _dim(pa)


def add(a: object, b: object) -> object:
    """``a + b`` (None when either is unknown)."""
    return _combine(a, b, 1)


def sub(a: object, b: object) -> object:
    """``a - b`` (None when either is unknown)."""
    return _combine(a, b, -1)


def mul(a: object, b: object) -> object:
    """``a * b`` (None when either is unknown)."""
    pa, pb = _poly(a), _poly(b)
    if pa is None or pb is None:
        return None
    out: Poly = {}
    for ma, ca in pa.items():
        for mb, cb in pb.items():
            m = tuple(sorted(ma + mb, key=str))
            out[m] = out.get(m, 0) + ca * cb
    return _dim(out)


def floordiv(a: object, b: object) -> object:
    """``a // b`` (Python's floor division): exact when every coefficient of ``a`` divides by
    the int ``b``, else an atom ``a // b``; None when either is unknown or ``b`` is 0."""
    return _divmod("//", a, b)


def mod(a: object, b: object) -> object:
    """``a % b`` (Python's modulo), simplified as `floordiv` is."""
    return _divmod("%", a, b)


def _divmod(op: str, a: object, b: object) -> object:
    pa, pb = _poly(a), _poly(b)
    if pa is None or pb is None or not pb:
        return None
    if isinstance(b, int):
        if b == 1:
            return a if op == "//" else 0
        if isinstance(a, int):
            return a // b if op == "//" else a % b
        const = pa.pop((), 0)
        if all(c % b == 0 for c in pa.values()):  # a = b*q + const: exact in the terms
            if op == "%":
                return const % b
            return _dim({**{m: c // b for m, c in pa.items()}, (): const // b})
        pa[()] = const
    return _dim({(DivMod(op, _dim(pa), _dim(pb)),): 1})


# ---------------------------------------------------------------------------------------------
# Names, substitution, evaluation


def is_symbol(d: object) -> bool:
    """Whether ``d`` is a bare symbolic name (bindable from a shape), not an expression."""
    return isinstance(d, str) and not isinstance(d, DimExpr)


def _atoms(d: object) -> Iterator[object]:
    if isinstance(d, DimExpr):
        for m, _ in d.terms:
            yield from m
    elif isinstance(d, DivMod):
        yield d


def symbols(d: object) -> frozenset[str]:
    """The names dim ``d`` reads (a name reads itself; ints and None read none)."""
    if is_symbol(d):
        return frozenset((d,))  # type: ignore[arg-type]
    out: set[str] = set()
    stack = list(_atoms(d))
    while stack:
        atom = stack.pop()
        if isinstance(atom, DivMod):
            for part in (atom.a, atom.b):
                if is_symbol(part):
                    out.add(part)  # type: ignore[arg-type]
                else:
                    stack.extend(_atoms(part))
        else:
            out.add(atom)  # type: ignore[arg-type]
    return frozenset(out)


def fold(d: object, leaf: Callable[[str], object], ops: Mapping[str, Callable]) -> object:
    """``d`` rebuilt bottom-up: each name through ``leaf``, each int as itself, and the
    arithmetic through ``ops`` (``"+"``, ``"*"``, ``"//"``, ``"%"``, binary functions)."""
    if d is None or isinstance(d, int):
        return d
    if is_symbol(d):
        return leaf(d)  # type: ignore[arg-type]
    if isinstance(d, DivMod):
        return ops[d.op](fold(d.a, leaf, ops), fold(d.b, leaf, ops))
    total = None
    for m, c in d.terms:  # type: ignore[attr-defined]
        term = c
        for atom in m:
            value = fold(atom, leaf, ops)
            term = value if term == 1 else ops["*"](term, value)
        total = term if total is None else ops["+"](total, term)
    return total


_DIM_OPS: dict[str, Callable] = {"+": add, "*": mul, "//": floordiv, "%": mod}
_INT_OPS: dict[str, Callable] = {
    "+": lambda a, b: a + b,
    "*": lambda a, b: a * b,
    "//": lambda a, b: a // b,
    "%": lambda a, b: a % b,
}


_SOURCE_OPS: dict[str, Callable] = {
    op: (lambda o: lambda a, b: f"({a} {o} {b})")(op) for op in ("+", "*", "//", "%")
}


def source(d: object, spell: Callable[[str], str]) -> str:
    """Dim ``d`` as a Python expression over ints, each name spelled by ``spell`` (the
    variable a kernel reads it into)."""
    return str(fold(d, spell, _SOURCE_OPS))


def substitute(d: object, dims: Mapping[str, object]) -> object:
    """``d`` with each name replaced by ``dims[name]``, simplified; a name missing from
    ``dims`` (or mapped to None) makes the result unknown (None)."""
    if d is None or isinstance(d, int):
        return d
    if is_symbol(d):
        return dims.get(d)  # type: ignore[call-overload]
    if any(dims.get(n) is None for n in symbols(d)):
        return None
    return fold(d, lambda n: dims[n], _DIM_OPS)


def evaluate(d: object, sizes: Mapping[str, int]) -> int:
    """The int value of dim ``d`` given every name's size.

    Raises:
        KeyError: a name ``d`` reads is not in ``sizes``.
        ZeroDivisionError: a ``//`` or ``%`` by 0.
    """
    if isinstance(d, int):
        return d
    return fold(d, lambda n: sizes[n], _INT_OPS)  # type: ignore[return-value]


# ---------------------------------------------------------------------------------------------
# Text


_BINOPS: dict[type, Callable] = {
    ast.Add: add,
    ast.Sub: sub,
    ast.Mult: mul,
    ast.FloorDiv: floordiv,
    ast.Mod: mod,
}


def parse_dim(text: str) -> object:
    """The dim a text spells: a name (``"n"``), an int, or an expression of names and ints
    with ``+ - * // %`` and parentheses (``"past + seq"``), in canonical form.

    Raises:
        IRError: the text is none of these.
    """
    if text.isidentifier():
        return text
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        tree = None
    out = None if tree is None else _from_ast(tree)
    if out is None:
        raise IRError(
            f"a dimension must be an int, a name or an expression of names and ints with "
            f"+ - * // %, got {text!r}"
        )
    return out


def _from_ast(node: ast.expr) -> object:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = _from_ast(node.operand)
        return None if inner is None else mul(inner, -1 if isinstance(node.op, ast.USub) else 1)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _from_ast(node.left), _from_ast(node.right)
        if left is None or right is None:
            return None
        return _BINOPS[type(node.op)](left, right)
    return None
