"""Einstein summation: ``einsum("ij,jk->ik", a, b)``, NumPy's einsum.

The equation names each axis of each operand by a letter; ``...`` stands for the leading (or
middle) axes an operand has beyond its letters. The ellipsis axes of the operands broadcast
against each other as NumPy broadcasting, and so do the axes one letter names (a size-1 axis
meets any size, as in NumPy). A letter repeated within one operand takes its diagonal. The
output (after ``->``) lists the kept letters in order; letters left out are summed over. With
no ``->`` (the implicit form) the output is the ellipsis axes, then the letters that occur
exactly once, in alphabetical order (upper case before lower case, as NumPy). An explicit
output names ``...`` when the operands' ellipses cover any axis, as NumPy requires.
"""

from __future__ import annotations

from dataclasses import dataclass

from rvm.errors import IRError
from rvm.ir.expr import Call
from rvm.ir.op import OpPattern
from rvm.ir.types import Dim, Shape, TensorType, Type, promote_dtypes
from rvm.op import ops
from rvm.op.core import ExprLike, as_expr, call, define_op
from rvm.op.shapes import broadcast_dim, broadcast_shapes, fmt, rule

__all__ = ["einsum"]

# The ops of this module (`rvm.op.core.define_op`).
define_op("einsum", OpPattern.OPAQUE)  # variadic: the operands of its equation

ELLIPSIS = "..."


@dataclass(frozen=True)
class Equation:
    """A parsed einsum equation: one term per operand and the output term.

    A term is a tuple of letters where ``...`` (one item) may stand once for the ellipsis.
    """

    text: str
    inputs: tuple[tuple[str, ...], ...]
    output: tuple[str, ...]


def parse_equation(equation: str, num_operands: int) -> Equation:
    """``equation`` parsed and checked against the number of operands.

    Raises:
        IRError: the equation is malformed, names another number of operands, or its output
            repeats a letter or names one no input has.
    """
    text = equation.replace(" ", "")
    lhs, arrow, rhs = text.partition("->")
    if "->" in rhs:
        raise _error(equation, "it has more than one '->'")
    inputs = tuple(_term(equation, t) for t in lhs.split(","))
    if len(inputs) != num_operands:
        raise _error(equation, f"it names {len(inputs)} operand(s) but {num_operands} were given")
    if arrow:
        output = _term(equation, rhs)
        _check_output(equation, inputs, output)
    else:
        output = _implicit_output(inputs)
    return Equation(text, inputs, output)


def _error(equation: str, what: str) -> IRError:
    return IRError(f"einsum: bad equation {equation!r}: {what}")


def _term(equation: str, term: str) -> tuple[str, ...]:
    """The letters of one term, with ``...`` as one item."""
    before, dots, after = term.partition(ELLIPSIS)
    if "." in before + after:
        raise _error(equation, f"term {term!r} has a '.' outside one '...'")
    for ch in before + after:
        if not ("a" <= ch <= "z" or "A" <= ch <= "Z"):
            raise _error(
                equation, f"term {term!r} has {ch!r}; only letters and one '...' may appear"
            )
    return (*before, *((ELLIPSIS,) if dots else ()), *after)


def _check_output(equation: str, inputs: tuple[tuple[str, ...], ...], output: tuple[str, ...]):
    seen = {label for term in inputs for label in term}
    for label in output:
        if output.count(label) > 1:
            raise _error(equation, f"the output names {label!r} more than once")
        if label not in seen:
            where = "no input has '...'" if label == ELLIPSIS else "no input has it"
            raise _error(equation, f"the output names {label!r} but {where}")


def _implicit_output(inputs: tuple[tuple[str, ...], ...]) -> tuple[str, ...]:
    labels = [label for term in inputs for label in term if label != ELLIPSIS]
    once = sorted(label for label in set(labels) if labels.count(label) == 1)
    has_ellipsis = any(ELLIPSIS in term for term in inputs)
    return ((ELLIPSIS,) if has_ellipsis else ()) + tuple(once)


def _bind(eq: Equation, shapes: list[Shape | None]) -> tuple[dict[str, Dim], Shape | None]:
    """The size of each letter and the broadcast ellipsis shape (None when unknown)."""
    sizes: dict[str, Dim] = {}
    ellipses: list[Shape | None] = []
    for i, (term, shape) in enumerate(zip(eq.inputs, shapes)):
        letters = [label for label in term if label != ELLIPSIS]
        if shape is None:
            for label in letters:
                sizes[label] = _meet(eq, label, sizes.get(label, 1), None)
            ellipses.append(None if ELLIPSIS in term else ())
            continue
        fits = len(shape) >= len(letters) if ELLIPSIS in term else len(shape) == len(letters)
        if not fits:
            want = f"at least {len(letters)}" if ELLIPSIS in term else f"{len(letters)}"
            raise _error(eq.text, f"operand {i} has rank {len(shape)} but its term wants {want}")
        start = term.index(ELLIPSIS) if ELLIPSIS in term else len(term)
        extra = len(shape) - len(letters)
        ellipses.append(tuple(shape[start : start + extra]))
        dims = shape[:start] + shape[start + extra :]
        for label, dim in zip(letters, dims):
            sizes[label] = _meet(eq, label, sizes.get(label, 1), dim)
    if any(e is None for e in ellipses):
        return sizes, None
    try:
        return sizes, broadcast_shapes("einsum", *ellipses)
    except IRError:
        listed = " and ".join(fmt(e) for e in ellipses)
        raise _error(eq.text, f"the '...' axes {listed} do not broadcast") from None


def _meet(eq: Equation, label: str, a: Dim, b: Dim) -> Dim:
    """Two sizes of one letter, broadcast as NumPy's einsum does (1 meets any size)."""
    try:
        return broadcast_dim(a, b)
    except ValueError:
        raise _error(eq.text, f"{label!r} names axes of sizes {a} and {b}") from None


@rule(ops.einsum)
def _infer_einsum(call_: Call, args: list[TensorType]) -> Type:
    eq = parse_equation(call_.attrs["equation"], len(args))
    dtype = args[0].dtype
    for a in args[1:]:
        dtype = promote_dtypes(dtype, a.dtype)
    sizes, ellipsis = _bind(eq, [a.shape for a in args])
    if ELLIPSIS in eq.output and ellipsis is None:
        return TensorType(None, dtype)
    if ELLIPSIS not in eq.output and ellipsis:
        raise _error(eq.text, f"the '...' axes {fmt(ellipsis)} are missing from the output")
    out: list[Dim] = []
    for label in eq.output:
        out.extend(ellipsis if label == ELLIPSIS else (sizes[label],))  # type: ignore[arg-type]
    return TensorType(tuple(out), dtype)


def einsum(*args: str | ExprLike, equation: str | None = None) -> Call:
    """Einstein summation of the operands as ``equation`` says (NumPy's einsum).

    Written ``einsum("ij,jk->ik", a, b)``, the equation first as in NumPy, or
    ``einsum(a, b, equation="ij,jk->ik")``, the form the script printer writes. The result's
    dtype is the operands' promoted dtype.

    Raises:
        IRError: no equation is given, or it is not a string.
    """
    operands = list(args)
    if equation is None and operands and isinstance(operands[0], str):
        equation = operands.pop(0)
    if not isinstance(equation, str):
        raise IRError(f"einsum: the equation must be a string, got {equation!r}")
    if not operands:
        raise IRError(f"einsum: equation {equation!r} has no operands")
    parse_equation(equation, len(operands))  # fail where the user wrote it
    exprs = [as_expr(o) for o in operands]  # type: ignore[arg-type]
    return call(ops.einsum, *exprs, equation=equation)
