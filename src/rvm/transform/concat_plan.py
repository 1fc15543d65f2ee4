"""Concatenations written in place: which concat kernels the memory plan can drop.

A kernel that only concatenates copies every input into its output. When each input is the
result of a kernel of the same region, used by nothing but this concatenation, and is one
contiguous piece of the output (every axis before the joined one has size 1: NCHW channels
with batch 1), the memory plan gives those kernels views of the output's storage at the
pieces' offsets instead, and the concatenation is nothing but the output's view (squeezenet's
fire modules, inception's branches).

`concat_sites(bindings, funcs, uses)` finds them: for each such concat binding, the pieces'
variables and byte offsets. `rvm.transform.memory_plan` does the rewrite.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rvm.dtypes import numpy_dtype
from rvm.ir import expr as E
from rvm.ir.types import TensorType
from rvm.op import ops
from rvm.transform.legalize import primitive_callee

MIN_BYTES = 1024
"""The smallest output written in place. Far above the runtime's tiny tensors (64 bytes,
`rvm.runtime.memory.is_tiny`), whose views of one block are separate arrays, so they could
not share it; and below it a copy costs next to nothing."""


@dataclass(frozen=True)
class ConcatSite:
    """A concat binding written in place.

    Attributes:
        out: The concat's result variable.
        tuple_var: The variable of the tuple of pieces (bound only for the concat).
        pieces: The pieces' variables with their byte offsets in the output.
    """

    out: E.Var
    tuple_var: E.Var
    pieces: tuple[tuple[E.Var, int], ...]


def concat_axis(func: E.Function) -> int | None:
    """The axis of a primitive function that is one concat of its one (tuple) parameter."""
    body = func.body
    if len(func.params) != 1 or not isinstance(body, E.SeqExpr):
        return None
    bindings = list(body.bindings)
    if len(bindings) != 1 or body.body is not bindings[0].var:
        return None
    call = bindings[0].value
    if not (isinstance(call, E.Call) and call.callee is ops.concat):
        return None
    if len(call.args) != 1 or call.args[0] is not func.params[0]:
        return None
    return int(call.attrs["axis"])


def _static(ty: object) -> TensorType | None:
    if isinstance(ty, TensorType) and ty.is_static and ty.dtype is not None:
        return ty
    return None


def concat_sites(
    bindings: list[E.VarBinding], funcs: dict[str, E.Function], uses: dict[E.Var, int]
) -> dict[E.Var, ConcatSite]:
    """The concat bindings of one region that can be written in place, by result variable
    (see the module docstring)."""
    producers = {b.var: b for b in bindings if primitive_callee(b.value, funcs) is not None}
    tuples = {b.var: b.value for b in bindings if isinstance(b.value, E.Tuple)}
    sites: dict[E.Var, ConcatSite] = {}
    for b in bindings:
        func = primitive_callee(b.value, funcs)
        axis = concat_axis(func) if func is not None else None
        out = _static(b.var.type)
        if axis is None or out is None:
            continue
        (arg,) = b.value.args  # type: ignore[attr-defined]
        fields = tuples.get(arg) if isinstance(arg, E.Var) else None
        if fields is None or uses.get(arg, 0) != 1:
            continue
        pieces = _pieces(fields.fields, axis % len(out.shape), out, producers, uses)
        # A piece that is itself a concat written in place would need views of views.
        if pieces is not None and not any(p in sites for p, _ in pieces):
            sites[b.var] = ConcatSite(b.var, arg, pieces)  # type: ignore[arg-type]
    return sites


def _pieces(
    fields: tuple[E.Expr, ...],
    axis: int,
    out: TensorType,
    producers: dict[E.Var, E.VarBinding],
    uses: dict[E.Var, int],
) -> tuple[tuple[E.Var, int], ...] | None:
    """The pieces with their byte offsets, or None when one cannot be written in place."""
    if any(d != 1 for d in out.shape[:axis]):  # type: ignore[union-attr]
        return None  # a piece would not be one contiguous run of the output
    itemsize = numpy_dtype(out.dtype).itemsize  # type: ignore[arg-type]
    if int(np.prod(out.shape, dtype=np.int64)) * itemsize < MIN_BYTES:
        return None
    pieces, offset = [], 0
    for f in fields:
        ty = _static(f.type)
        if not isinstance(f, E.Var) or f not in producers or uses.get(f, 0) != 1:
            return None
        if ty is None or ty.dtype != out.dtype or any(p is f for p, _ in pieces):
            return None  # (a piece twice would need two places)
        pieces.append((f, offset))
        offset += int(np.prod(ty.shape, dtype=np.int64)) * itemsize
    return tuple(pieces)
