"""fuse_norms: RMSNorm and LayerNorm written as arithmetic become rms_norm and layer_norm.

Needs: an inlined module in A-normal form whose op calls are not yet legalized (run before
`legalize`).

Guarantees: the same program, where over the last axis (``axis=(-1,)`` or the last axis's
number, ``keepdims=True``), with scalar constants ``eps`` and every intermediate used only by
the chain,

    RMSNorm:    ms = mean(x * x | power(x, 2))
                y = x / sqrt(ms + eps) | x * rsqrt(ms + eps) | x * (1 / sqrt(ms + eps))
                z = y * gamma | gamma * y
    LayerNorm:  d = x - mean(x)
                y = d / sqrt(mean(d * d | power(d, 2)) + eps)
                z = y * gamma + beta  (either order of each)

are ``z = rms_norm(x, gamma, (-1,), eps)`` and ``z = layer_norm(x, gamma, beta, (-1,),
eps)`` when gamma (and beta) have the shape of the last axis. Each is then one row-wise
kernel (`rvm.jit.compute`) where the chain was two reductions and their epilogues.

Algorithm: one walk over each straight-line region; each ``multiply`` or ``add`` is tried as
the end of a chain, matched backwards through single-use bindings (`rvm.transform.pattern`).
"""

from __future__ import annotations

from rvm import op
from rvm.ir import expr as E
from rvm.ir.module import IRModule
from rvm.op import ops
from rvm.transform.pattern import Region, fuse_chains, operands, rank


def fuse_norms(mod: IRModule) -> IRModule:
    """Rewrite every RMSNorm and LayerNorm chain of ``mod`` into one op call."""
    return fuse_chains(
        mod, "fuse_norms", {ops.multiply: (_rms_norm,), ops.add: (_layer_norm,)}, "normalizations"
    )


def _last_axis_mean(r: Region, e: E.Expr, uses: int = 1) -> E.Expr | None:
    """``x`` of ``mean(x, last axis, keepdims=True)``."""
    mean = r.call(e, ops.mean, uses=uses)
    if mean is None or not mean.attrs["keepdims"] or mean.attrs["axis"] is None:
        return None
    n = rank(mean.args[0])
    if n is None or tuple(a % n for a in mean.attrs["axis"]) != (n - 1,):
        return None
    return mean.args[0]


def _square_of(r: Region, e: E.Expr, x: E.Expr | None = None) -> E.Expr | None:
    """``x`` of ``x * x`` or ``power(x, 2)`` (it must be ``x`` when given)."""
    mark = len(r.matched)
    sq = r.call(e, ops.multiply, ops.power)
    if sq is None:
        return None
    a, b = sq.args
    base = a if (sq.callee is ops.multiply and a is b) or r.scalar(b) == 2.0 else None
    if base is None or (x is not None and base is not x):
        del r.matched[mark:]
        return None
    return base


def _inverse_root(r: Region, y: E.Call) -> tuple[E.Expr, E.Expr] | None:
    """``(x, v)`` of ``x / sqrt(v)``, ``x * rsqrt(v)`` or ``x * (1 / sqrt(v))``."""
    mark = len(r.matched)
    if y.callee is ops.divide:
        root = r.call(y.args[1], ops.sqrt)
        if root is not None:
            return y.args[0], root.args[0]
    elif y.callee is ops.multiply:
        for x, inv in operands(y):
            rs = r.call(inv, ops.rsqrt)
            if rs is not None:
                return x, rs.args[0]
            one = r.call(inv, ops.divide)
            if one is not None and r.scalar(one.args[0]) == 1.0:
                root = r.call(one.args[1], ops.sqrt)
                if root is not None:
                    return x, root.args[0]
            del r.matched[mark:]
    del r.matched[mark:]
    return None


def _plus_eps(r: Region, e: E.Expr) -> tuple[E.Expr, float] | None:
    """``(v, eps)`` of ``v + eps``."""
    add = r.call(e, ops.add)
    if add is not None:
        for v, c in operands(add):
            eps = r.scalar(c)
            if eps is not None:
                return v, eps
    return None


def _normalized(r: Region, e: E.Expr) -> tuple[E.Expr, E.Expr, float] | None:
    """``(x, variance expression, eps)`` of ``x / sqrt(var + eps)`` in its spellings."""
    y = r.call(e, ops.divide, ops.multiply)
    if y is None:
        return None
    found = _inverse_root(r, y)
    if found is None:
        return None
    x, v = found
    inner = _plus_eps(r, v)
    if inner is None:
        return None
    return x, inner[0], inner[1]


def _centered(r: Region, x: E.Expr) -> bool:
    """Whether ``x`` is ``x0 - mean(x0)`` (then the chain is a LayerNorm's, left to
    `_layer_norm` at its final add)."""
    i = r.index.get(x) if isinstance(x, E.Var) else None
    b = r.bindings[i] if i is not None else None
    if b is None or not isinstance(b.value, E.Call) or b.value.callee is not ops.subtract:
        return False
    x0, m = b.value.args
    j = r.index.get(m) if isinstance(m, E.Var) else None
    mb = r.bindings[j] if j is not None else None
    return (
        mb is not None
        and isinstance(mb.value, E.Call)
        and mb.value.callee is ops.mean
        and (mb.value.args[0] is x0)
    )


def _rms_norm(r: Region, z: E.Call) -> E.Call | None:
    for y, gamma in operands(z):
        mark = len(r.matched)
        found = _normalized(r, y)
        if found is not None and _gamma_fits(gamma, found[0]) and not _centered(r, found[0]):
            x, ms, eps = found
            sq = _last_axis_mean(r, ms)
            if sq is not None and _square_of(r, sq, x) is x:
                return op.rms_norm(x, gamma, axes=(-1,), epsilon=eps)
        del r.matched[mark:]
    return None


def _layer_norm(r: Region, z: E.Call) -> E.Call | None:
    for scaled, beta in operands(z):
        mark = len(r.matched)
        mul = r.call(scaled, ops.multiply)
        for y, gamma in operands(mul) if mul is not None else []:
            inner = len(r.matched)
            found = _normalized(r, y)
            if found is not None:
                d, var, eps = found
                sub = r.call(d, ops.subtract, uses=2)
                if sub is None:  # d * d counts d twice
                    sub = r.call(d, ops.subtract, uses=3)
                sq = _last_axis_mean(r, var)
                if sub is not None and sq is not None and _square_of(r, sq, d) is d:
                    x, mean = sub.args
                    if (
                        _last_axis_mean(r, mean) is x
                        and _gamma_fits(gamma, x)
                        and _gamma_fits(beta, x)
                    ):
                        return op.layer_norm(x, gamma, beta, axes=(-1,), epsilon=eps)
            del r.matched[inner:]
        del r.matched[mark:]
    return None


def _gamma_fits(p: E.Expr, x: E.Expr) -> bool:
    """Whether ``p`` is a 1-d tensor as long as ``x``'s last axis."""
    pt, xt = getattr(p, "type", None), getattr(x, "type", None)
    shape = getattr(pt, "shape", None)
    xs = getattr(xt, "shape", None)
    return (
        shape is not None
        and xs is not None
        and len(shape) == 1
        and len(xs) >= 1
        and shape[0] == xs[-1]
        and getattr(pt, "dtype", None) == getattr(xt, "dtype", None)
    )
