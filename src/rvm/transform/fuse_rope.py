"""fuse_rope: the rotary position embedding written as slices and arithmetic becomes rope.

Needs: an inlined module in A-normal form whose op calls are not yet legalized (run before
`legalize`).

Guarantees: the same program, where with ``x``'s last axis of fixed even length ``n``,
``h = n / 2``, and every intermediate used only by the chain,

    x1 = x[..., :h]          x2 = x[..., h:]           (strided_slice on the last axis)
    rot = concat((-x2, x1), axis=-1)                   (negative, or multiply by -1)
    y = x * cos + rot * sin                            (each product and the sum in either order)

is ``y = rope(x, cos, sin)`` (`rvm.op.rope`). ``fuse_ops`` made the chain three kernels (the
slices, the negation, and the concat with the products); rope is one elementwise pass that
reads the rotated element in place.

Algorithm: one walk over each straight-line region; each ``add`` is tried as the end of a
chain, matched backwards through single-use bindings (`rvm.transform.pattern`).
"""

from __future__ import annotations

from rvm import op
from rvm.ir import expr as E
from rvm.ir.module import IRModule
from rvm.op import ops
from rvm.transform.pattern import Region, fuse_chains, operands, rank


def fuse_rope(mod: IRModule) -> IRModule:
    """Rewrite every rotary-embedding chain of ``mod`` into one `rvm.op.rope` call."""
    return fuse_chains(mod, "fuse_rope", {ops.add: (_rope,)}, "rotary embeddings")


def _rope(r: Region, y: E.Call) -> E.Call | None:
    for direct, rotated in operands(y):
        mark = len(r.matched)
        a = r.call(direct, ops.multiply)
        b = r.call(rotated, ops.multiply) if a is not None else None
        for x, cos in operands(a) if b is not None else []:
            for rot, sin in operands(b):
                inner = len(r.matched)
                if _rotated_half(r, rot, x):
                    return op.rope(x, cos, sin)
                del r.matched[inner:]
        del r.matched[mark:]
    return None


def _rotated_half(r: Region, rot: E.Expr, x: E.Expr) -> bool:
    """Whether ``rot`` is ``concat((-x[..., h:], x[..., :h]), last axis)``."""
    n = _last_dim(x)
    cat = r.call(rot, ops.concat)
    if n is None or n % 2 or cat is None:
        return False
    if cat.attrs["axis"] % rank(x) != rank(x) - 1:  # type: ignore[operator]
        return False
    fields = _tuple_fields(r, cat.args[0])
    if fields is None or len(fields) != 2:
        return False
    neg, first = fields
    second = _negated(r, neg)
    half = n // 2
    return (
        second is not None
        and _half_of(r, second, x, half, n, upper=True)
        and _half_of(r, first, x, half, n, upper=False)
    )


def _tuple_fields(r: Region, e: E.Expr) -> tuple[E.Expr, ...] | None:
    if isinstance(e, E.Tuple):
        return tuple(e.fields)
    if isinstance(e, E.Var) and r.uses.get(e) == 1 and e in r.index:
        b = r.bindings[r.index[e]]
        if b is not None and isinstance(b.value, E.Tuple):
            r.matched.append(e)
            return tuple(b.value.fields)
    return None


def _negated(r: Region, e: E.Expr) -> E.Expr | None:
    mark = len(r.matched)
    neg = r.call(e, ops.negative)
    if neg is not None:
        return neg.args[0]
    mul = r.call(e, ops.multiply)
    for v, c in operands(mul) if mul is not None else []:
        if r.scalar(c) == -1.0:
            return v
    del r.matched[mark:]
    return None


def _half_of(r: Region, e: E.Expr, x: E.Expr, half: int, n: int, upper: bool) -> bool:
    mark = len(r.matched)
    s = r.call(e, ops.strided_slice)
    ok = (
        s is not None
        and s.args[0] is x
        and len(s.attrs["axes"]) == 1
        and s.attrs["axes"][0] % rank(x) == rank(x) - 1  # type: ignore[operator]
        and s.attrs["strides"] == (1,)
        and (s.attrs["begin"][0], min(s.attrs["end"][0], n)) == ((half, n) if upper else (0, half))
    )
    if not ok:
        del r.matched[mark:]
    return ok


def _last_dim(x: E.Expr) -> int | None:
    shape = getattr(getattr(x, "type", None), "shape", None)
    if not shape or not isinstance(shape[-1], int):
        return None
    return shape[-1]
