"""Entry checks of dimensions the model names as sums (``past_sequence_length + sequence_length``).

The IR's dimensions are ints and names, so an input whose ONNX ``dim_param`` is an expression
gets a name of its own (`rvm.frontend.onnx.dims`): the VM's entry check binds it from that
input, but cannot see that it must equal the sum of the other inputs' dims. A caller who feeds
an attention mask one token short would reach a kernel that indexes past its end. `check_sums`
checks each such dimension against its sum where the model's inputs bind every term, before
anything reads the input: a `rvm.ShapeError` naming the input, its size and the sum's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from rvm import op
from rvm.frontend.onnx.dims import Dims
from rvm.ir.expr import Expr, Var
from rvm.ir.types import TensorType

__all__ = ["check_sums"]


def check_sums(
    params: list[Var],
    origin: Mapping[str, str],
    dims: Dims,
    emit: Callable[[Expr], Var],
    bind: Callable[[str, Expr], None],
) -> None:
    """Emit a check for every parameter axis whose dimension aliases a sum of dimensions that
    parameters bind; ``bind(onnx name, checked)`` makes later nodes read the checked input."""
    where: dict[str, tuple[Var, int]] = {}
    for p in params:
        shape = p.annotation.shape if isinstance(p.annotation, TensorType) else None
        for axis, d in enumerate(shape or ()):
            if isinstance(d, str):
                where.setdefault(d, (p, axis))

    shapes: dict[Var, Var] = {}

    def size(p: Var, axis: int) -> Expr:
        if p not in shapes:  # a binding of its own: rvm.generation reads the pasts' shapes
            shapes[p] = emit(op.shape_of(p))
        return op.take(shapes[p], op.const(axis, "int64"), axis=0)

    for p in params:
        shape = p.annotation.shape if isinstance(p.annotation, TensorType) else None
        checked: Expr = p
        for axis, d in enumerate(shape or ()):
            total = dims.expansions.get(d) if isinstance(d, str) else None
            if total is None or not all(n in where for n, _ in total.terms):
                continue
            expected: Expr = op.const(total.const, "int64")
            for n, coef in total.terms:
                term = size(*where[n])
                expected = op.add(expected, term if coef == 1 else op.multiply(term, coef))
            got, want = emit(size(p, axis)), emit(expected)
            checked = emit(
                op.check(
                    checked,
                    op.equal(got, want),
                    op.stack([got, want]),
                    f"input {origin[p.name]!r} has {{0}} at axis {axis}, but that dimension is "
                    f"{_show(total, where, origin)}, which the other inputs make {{1}}",
                    error="shape",
                )
            )
        if checked is not p:
            bind(origin[p.name], checked)


def _show(total, where, origin) -> str:  # type: ignore[no-untyped-def]
    """``past_sequence_length + sequence_length`` as the inputs' axes that bind it."""
    parts = []
    for n, coef in total.terms:
        p, axis = where[n]
        parts.append(f"{'' if coef == 1 else f'{coef} * '}{n} ({origin[p.name]!r} axis {axis})")
    if total.const:
        parts.append(str(total.const))
    return " + ".join(parts)
