"""Concatenations written in place: which concat kernels the memory plan can drop.

A kernel that only concatenates copies every input into its output. When each input is the
result of a kernel of the same region, a piece of no other concatenation, and one contiguous
run of the output (every axis before the joined one has size 1: NCHW channels with batch 1),
the memory plan gives those kernels views of the output's storage at the pieces' offsets
instead, and the concatenation is nothing but the output's view (squeezenet's fire modules,
inception's branches). A piece may have other readers: they read the view, which its kernel
wrote and nothing else writes. A piece may itself be a concatenation written in place: its
pieces are then views of the outer output's storage. Densenet's dense blocks are such chains
(``c1 = concat(x, y1)``, ``c2 = concat(c1, y2)``... each ``ci`` also read by the next layer),
so every layer's new features are written once, straight into the block's last output,
instead of the whole block being copied once a layer.

`concat_sites(bindings, funcs)` finds them: for each such concat binding, the pieces'
variables and byte offsets. `concat_members(sites)` places every piece in the storage of the
outermost concatenation that holds it. `rvm.transform.memory_plan` does the rewrite.
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


def slice_offset(value: E.Expr, funcs: dict[str, E.Function]) -> int | None:
    """The byte offset in its input of the result of ``value`` when it calls a lone
    ``strided_slice`` (one axis, step 1) that is one contiguous run of a static input
    (`placeable`: every axis before the sliced one has size 1), else None: the memory plan
    makes such a slice a view of its input's storage (`rvm.transform.merge_convs`' channel
    slices), and `rvm.transform.fuse_ops` joins it to no consumer."""
    func = primitive_callee(value, funcs)
    if func is None or len(func.params) != 1 or not isinstance(func.body, E.SeqExpr):
        return None
    bindings = list(func.body.bindings)
    if len(bindings) != 1 or func.body.body is not bindings[0].var:
        return None
    call = bindings[0].value
    if not (isinstance(call, E.Call) and call.callee is ops.strided_slice):
        return None
    if call.args[0] is not func.params[0] or not isinstance(value.args[0], E.Var):  # type: ignore[attr-defined]
        return None
    src = _static(value.args[0].type)  # type: ignore[attr-defined]
    axes, strides = call.attrs["axes"], call.attrs["strides"]
    if src is None or len(axes) != 1 or tuple(strides) != (1,):
        return None
    shape: tuple[int, ...] = src.shape  # type: ignore[assignment]
    axis = axes[0] % len(shape)
    begin, end = call.attrs["begin"][0], call.attrs["end"][0]
    begin = min(max(begin + shape[axis] if begin < 0 else begin, 0), shape[axis])
    end = min(max(end + shape[axis] if end < 0 else end, 0), shape[axis])
    if end <= begin or not placeable(src, axis):
        return None
    itemsize = numpy_dtype(src.dtype).itemsize  # type: ignore[arg-type]
    return begin * int(np.prod(shape[axis + 1 :], dtype=np.int64)) * itemsize


def placeable(ty: object, axis: int) -> bool:
    """Whether a concat along ``axis`` with result type ``ty`` has pieces that are contiguous
    runs of it, large enough to be written in place (the pieces' own conditions aside):
    `rvm.transform.fuse_ops` keeps such a concat a kernel of its own, so that the memory plan
    can drop it, rather than fusing it into its consumer (densenet's last concat of each
    block into the next batch norm, which then copies the whole block)."""
    out = _static(ty)
    if out is None:
        return False
    shape: tuple[int, ...] = out.shape  # type: ignore[assignment]
    if any(d != 1 for d in shape[: axis % len(shape)]):
        return False  # a piece would not be one contiguous run of the output
    itemsize = numpy_dtype(out.dtype).itemsize  # type: ignore[arg-type]
    return int(np.prod(shape, dtype=np.int64)) * itemsize >= MIN_BYTES


def _static(ty: object) -> TensorType | None:
    if isinstance(ty, TensorType) and ty.is_static and ty.dtype is not None:
        return ty
    return None


def concat_sites(
    bindings: list[E.VarBinding], funcs: dict[str, E.Function], uses: dict[E.Var, int]
) -> dict[E.Var, ConcatSite]:
    """The concat bindings of one region that can be written in place, by result variable
    (see the module docstring; ``uses`` counts every variable's uses in the function)."""
    producers = {b.var for b in bindings if primitive_callee(b.value, funcs) is not None}
    tuples = {b.var: b.value for b in bindings if isinstance(b.value, E.Tuple)}
    sites: dict[E.Var, ConcatSite] = {}
    claimed: set[E.Var] = set()  # the pieces of the sites so far: each has one place
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
        pieces = _pieces(fields.fields, axis % len(out.shape), out, producers, claimed)
        if pieces is not None:
            sites[b.var] = ConcatSite(b.var, arg, pieces)  # type: ignore[arg-type]
            claimed.update(p for p, _ in pieces)
    return sites


def concat_members(sites: dict[E.Var, ConcatSite]) -> dict[E.Var, tuple[E.Var, int]]:
    """Every site and every piece of ``sites``, by variable: the outermost site that holds it
    (whose storage it is a view of) and its byte offset there."""
    parent = {p: (site.out, offset) for site in sites.values() for p, offset in site.pieces}
    members: dict[E.Var, tuple[E.Var, int]] = {}
    for var in [*sites, *parent]:
        root, offset = var, 0
        while root in parent:  # a chain ends: each piece has one place and comes before
            root, step = parent[root]
            offset += step
        members[var] = (root, offset)
    return members


def _pieces(
    fields: tuple[E.Expr, ...],
    axis: int,
    out: TensorType,
    producers: set[E.Var],
    claimed: set[E.Var],
) -> tuple[tuple[E.Var, int], ...] | None:
    """The pieces with their byte offsets, or None when one cannot be written in place."""
    if not placeable(out, axis):
        return None
    itemsize = numpy_dtype(out.dtype).itemsize  # type: ignore[arg-type]
    pieces, offset = [], 0
    for f in fields:
        ty = _static(f.type)
        if not isinstance(f, E.Var) or f not in producers or f in claimed:
            return None
        if ty is None or ty.dtype != out.dtype or any(p is f for p, _ in pieces):
            return None  # (a piece twice would need two places)
        pieces.append((f, offset))
        offset += int(np.prod(ty.shape, dtype=np.int64)) * itemsize
    return tuple(pieces)
