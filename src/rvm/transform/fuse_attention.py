"""fuse_attention: the primitive spelling of scaled dot-product attention becomes op.attention.

Needs: an inlined module in A-normal form whose op calls are not yet legalized (run before
`legalize`).

Guarantees: the same program, where a chain over 4-d (batch, heads, seq, dim) tensors

    r = matmul(q [* c1], transpose(k [* c2], (0, 1, 3, 2)) [* c2])
        (or transpose(k4, (0, 2, 3, 1)) of k4 (batch, seq, heads, dim), as BERT's: then
        k = transpose(k4, (0, 2, 1, 3)) is bound before the attention call)
    s = r [* c3 | / c3]
    s = s + bias | bias + s | where(mask, s, fill) | s
    p = softmax(s, axis=-1)
    p = where(not_equal(p, p), 0, p) | p          (exporters' guard of fully masked rows)
    o = matmul(p, v)

with scalar constants c1, c2, c3, fill, and every intermediate used only by the chain, is
``o = attention(q, k, v, mask, scale=c1*c2*c3 (or c1*c2/c3), mask_kind, fill, masked_row)``
(`rvm.op.attention`): ``masked_row`` is 0 with the guard and NaN without it, so the result
is the chain's, fully masked rows included. Without a mask the mask is a (1, 1, 1, 1) zero.
The jit runs it as one kernel instead of four to six (`rvm.jit.attention`).

`attention_heads` (after `merge_products`, for the jit) then lets attention read its heads in
place: when q, k and v are each ``transpose(reshape(x, (b, s, h, d)), (0, 2, 1, 3))`` of a 3-d
``x`` (b, s, h*d), or of a unit-step ``strided_slice`` of x's last axis (the slices of a merged
QKV product), single-use, the call takes the 3-d tensors and ``heads=(h, d, dv, q_at, k_at,
v_at)`` (the columns where each head starts): no copy splits the heads. And where an
attention's result is only ``reshape(transpose(o, (0, 2, 1, 3)), (b, s, h*dv))`` (the heads
joined again before the output projection, as BERT's), single-use, the call takes
``merge_heads=True`` and writes that 3-d result itself: no copy joins the heads.

Algorithm: one walk over each straight-line region; each ``matmul`` (``attention``) is tried
as the end of a chain, matched backwards through single-use bindings (`rvm.transform.pattern`).
"""

from __future__ import annotations

import math

import numpy as np

from rvm import op
from rvm.ir import expr as E
from rvm.ir.module import IRModule
from rvm.ir.types import TensorType
from rvm.op import ops
from rvm.transform.dead_code import dead_code
from rvm.transform.pattern import Region, fuse_chains, operands, rank


def fuse_attention(mod: IRModule) -> IRModule:
    """Rewrite every attention chain of ``mod`` into one `rvm.op.attention` call."""
    return fuse_chains(mod, "fuse_attention", {ops.matmul: (_attention,)}, "attention chains")


def attention_heads(mod: IRModule) -> IRModule:
    """Let every attention whose heads are split by copies read them in place (see above);
    dead code goes first (an unused ``shape_of`` of q would keep q's split)."""
    mod = fuse_chains(dead_code(mod), "attention_heads", {ops.attention: (_heads,)}, "splits")
    return fuse_chains(mod, "attention_heads", {ops.reshape: (_merged,)}, "joins")


def _merged(r: Region, call: E.Call) -> E.Call | None:
    """The attention writing ``call`` (a reshape joining its heads) itself, or None."""
    tr = r.call(call.args[0], ops.transpose)
    if tr is None or tuple(tr.attrs["axes"] or ()) != (0, 2, 1, 3):
        return None
    att = r.call(tr.args[0], ops.attention)
    if att is None or att.attrs.get("merge_heads") or rank(tr.args[0]) != 4:
        return None
    b, h, s, dv = tr.args[0].type.shape  # type: ignore[union-attr]
    joined = getattr(call, "type", None)
    if not (isinstance(h, int) and isinstance(dv, int) and isinstance(joined, TensorType)):
        return None
    if joined.shape is None or tuple(joined.shape) != (b, s, h * dv):
        return None
    return op.attention(*att.args, **{**att.attrs, "merge_heads": True})


def _heads(r: Region, call: E.Call) -> E.Call | None:
    """``call`` reading its heads from the 3-d tensors they are split from, or None."""
    if call.attrs.get("heads"):
        return None
    views = [_head_view(r, x) for x in call.args[:3]]
    if any(view is None for view in views):
        return None
    (q, q_at, h, d), (k, k_at, hk, dk), (v, v_at, hv, dv) = views  # type: ignore[misc]
    if not (h == hk == hv and d == dk):
        return None
    return op.attention(
        q, k, v, call.args[3], **{**call.attrs, "heads": (h, d, dv, q_at, k_at, v_at)}
    )


def _head_view(r: Region, x: E.Expr) -> tuple[E.Expr, int, int, int] | None:
    """(the 3-d tensor, the column where head 0 starts, heads, dim) when ``x`` is its heads
    split by ``transpose(reshape(...))`` (of a slice of its last axis), else None."""
    tr = r.call(x, ops.transpose)
    if tr is None or tuple(tr.attrs["axes"] or ()) != (0, 2, 1, 3):
        return None
    rs = r.call(tr.args[0], ops.reshape)
    if rs is None or rank(rs.args[0]) != 3 or rank(tr.args[0]) != 4:
        return None
    (b, s, width), (b2, s2, h, d) = rs.args[0].type.shape, tr.args[0].type.shape  # type: ignore[union-attr]
    if not (isinstance(h, int) and isinstance(d, int) and width == h * d and b2 == b):
        return None
    if s2 != s and s2 is not None:  # None (a -1): the rows left, s
        return None
    source, start = rs.args[0], 0
    cut = r.call(source, ops.strided_slice)
    if cut is not None:
        if len(cut.attrs["begin"]) != 1:
            return None
        (begin,), (end,) = cut.attrs["begin"], cut.attrs["end"]
        axes, strides = tuple(cut.attrs["axes"] or ()), tuple(cut.attrs["strides"] or (1,))
        if rank(cut.args[0]) != 3 or axes not in ((2,), (-1,)) or strides != (1,):
            return None
        columns = cut.args[0].type.shape[2]  # type: ignore[union-attr]
        if not (isinstance(columns, int) and 0 <= begin and begin + width == end <= columns):
            return None
        source, start = cut.args[0], begin
    return source, start, h, d


def _attention(r: Region, out: E.Call) -> E.Call | None:
    """The attention call equal to the chain ending in ``out`` (a matmul), or None."""
    probs, v = out.args
    masked_row = float("nan")
    guard = r.call(probs, ops.where)
    if guard is not None:
        p = _guarded(r, guard)
        if p is None:
            return None
        masked_row = 0.0
    else:
        p = probs
    soft = r.call(p, ops.softmax, uses=3 if guard is not None else 1)
    if soft is None or soft.attrs["axis"] not in (-1, 3) or rank(soft.args[0]) != 4:
        return None
    scores, mask, kind, fill = _masked(r, soft.args[0])
    scaled = _scaled(r, scores)
    if scaled is None:
        return None
    product, scale = scaled
    qk = _qk(r, product)
    if qk is None or rank(v) != 4:
        return None
    q, k, qk_scale = qk
    return op.attention(
        q,
        k,
        v,
        mask,
        scale=scale * qk_scale,
        mask_kind=kind,
        fill=fill,
        masked_row=masked_row,
    )


def _guarded(r: Region, guard: E.Call) -> E.Expr | None:
    """``p`` of ``where(not_equal(p, p), 0, p)``, else None."""
    test, zero, p = guard.args
    ne = r.call(test, ops.not_equal)
    if ne is None or ne.args[0] is not p or ne.args[1] is not p or r.scalar(zero) != 0.0:
        return None
    return p


def _masked(r: Region, s: E.Expr) -> tuple[E.Expr, E.Expr, str, float]:
    """(scores, mask, mask_kind, fill) of the masking step before softmax (none: a zero
    bias)."""
    mark = len(r.matched)
    add = r.call(s, ops.add)
    if add is not None:
        for scores, bias in operands(add):
            if _is_scores(r, scores) and rank(bias) == 4 and r.scalar(bias) is None:
                return scores, bias, "add", 0.0
        del r.matched[mark:]
    where = r.call(s, ops.where)
    if where is not None:
        mask, scores, fill = where.args
        value = r.scalar(fill)
        if value is not None and rank(mask) == 4 and _is_scores(r, scores):
            return scores, mask, "select", value
        del r.matched[mark:]
    return s, E.Constant(np.zeros((1, 1, 1, 1), _dtype(s))), "add", 0.0


def _is_scores(r: Region, s: E.Expr) -> bool:
    """Whether ``s`` is bound to a matmul or a scaling of one (not matched yet)."""
    if not isinstance(s, E.Var) or s not in r.index:
        return False
    value = r.bindings[r.index[s]].value  # type: ignore[union-attr]
    return isinstance(value, E.Call) and value.callee in (ops.matmul, ops.multiply, ops.divide)


def _dtype(e: E.Expr) -> str:
    return e.type.dtype  # type: ignore[union-attr]


def _scaled(r: Region, s: E.Expr) -> tuple[E.Expr, float] | None:
    """(the q @ k^T product, the scale applied after it)."""
    mark = len(r.matched)
    mul = r.call(s, ops.multiply)
    if mul is not None:
        for x, c in operands(mul):
            value = r.scalar(c)
            if value is not None:
                return x, value
        del r.matched[mark:]
    div = r.call(s, ops.divide)
    if div is not None:
        value = r.scalar(div.args[1])
        if value is not None and value != 0:
            return div.args[0], 1.0 / value
        del r.matched[mark:]
    return s, 1.0


def _qk(r: Region, s: E.Expr) -> tuple[E.Expr, E.Expr, float] | None:
    """(q, k, scale) of ``matmul(q [* c1], k^T [* c2])``."""
    mm = r.call(s, ops.matmul)
    if mm is None:
        return None
    q, scale = _times_scalar(r, mm.args[0])
    kt, k_scale = _times_scalar(r, mm.args[1])
    tr = r.call(kt, ops.transpose)
    axes = tuple(tr.attrs["axes"] or ()) if tr is not None else ()
    if axes not in ((0, 1, 3, 2), (0, 2, 3, 1)):
        return None
    k, inner = _times_scalar(r, tr.args[0])
    if axes == (0, 2, 3, 1):  # k^T straight from (batch, seq, heads, dim), as BERT's
        k = r.bind(op.transpose(k, (0, 2, 1, 3)), "k_heads")
    if rank(q) != 4 or rank(k) != 4 or not math.isfinite(scale * k_scale * inner):
        return None
    return q, k, scale * k_scale * inner


def _times_scalar(r: Region, x: E.Expr) -> tuple[E.Expr, float]:
    """``(y, c)`` when ``x = y * c`` for a scalar constant ``c`` of y's rank or less, else
    ``(x, 1.0)``."""
    mark = len(r.matched)
    mul = r.call(x, ops.multiply)
    if mul is not None:
        for y, c in operands(mul):
            value = r.scalar(c)
            if value is not None and rank(y) == 4:
                return y, value
        del r.matched[mark:]
    return x, 1.0
