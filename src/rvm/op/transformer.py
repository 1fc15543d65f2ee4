"""Ops that exported transformer graphs spell as chains: attention and rms_norm.

``attention(q, k, v, mask, scale, mask_kind, fill, masked_row)`` is scaled dot-product
attention over 4-d (batch, heads, seq, dim) tensors: ``softmax(scale * q @ k^T, masked) @ v``
per (batch, head), with k and v (batch, heads, kv_seq, dim). ``mask`` broadcasts to the
scores (batch, heads, seq, kv_seq): ``mask_kind="add"`` adds it (a float bias, ``-inf``
hiding a key), ``"select"`` keeps a score where the bool mask holds and puts ``fill``
elsewhere. A row whose every score is ``-inf`` gives ``masked_row`` (0.0 as exporters guard
softmax with ``where(p != p, 0, p)``, NaN as plain softmax gives). With ``heads=(h, d, dv,
q_at, k_at, v_at)``, q, k and v are 3-d (batch, seq, columns) tensors whose heads are read in
place: head i of q is ``q[:, :, q_at + i*d : q_at + (i+1)*d]``, of k likewise from ``k_at``,
of v ``dv`` columns each from ``v_at`` (one merged QKV product can be all three). With
``merge_heads``, the result is (batch, seq, heads * vdim), each row its heads side by side
(``reshape(transpose(o, (0, 2, 1, 3)), ...)`` of the 4-d one, as exporters join the heads
before the output projection), written so in place. The jit
runs it as one kernel that never holds more than one head's scores (`rvm.jit.attention`).

``rms_norm(x, gamma, axes, epsilon)`` is ``x / sqrt(mean(x * x, axes) + epsilon) * gamma``
(Llama's RMSNorm; gamma has the shape of the normalized axes).

``rope(x, cos, sin)`` is the rotary position embedding of Llama-style models:
``x * cos + rotate_half(x) * sin``, ``rotate_half(x)`` being ``concat(-x2, x1)`` of the two
halves of the last axis; cos and sin broadcast to x.

`rvm.transform.fuse_attention`, `rvm.transform.fuse_norms` and `rvm.transform.fuse_rope` find
their primitive spellings.
"""

from __future__ import annotations

from collections.abc import Sequence

from rvm.errors import IRError
from rvm.ir.expr import Call
from rvm.ir.op import OpPattern
from rvm.ir.types import FLOAT_DTYPES, TensorType, Type
from rvm.op import ops
from rvm.op.core import (
    ExprLike,
    as_expr,
    call,
    check_axes,
    check_choice,
    check_float,
    check_ints,
    define_op,
)
from rvm.op.shapes import broadcast_shapes, fmt, normalize_axes, rule

__all__ = ["attention", "rms_norm", "rope"]

define_op("attention", OpPattern.OPAQUE, 4)
define_op("rms_norm", OpPattern.OPAQUE, 2)
define_op("rope", OpPattern.INJECTIVE, 3)


def _same(a: object, b: object) -> bool:
    return not (isinstance(a, int) and isinstance(b, int) and a != b)


@rule(ops.attention)
def _infer_attention(call_: Call, args: list[TensorType]) -> Type:
    q, k, v, mask = args
    heads = call_.attrs.get("heads") or ()
    if heads:
        q, k, v = _split_heads(heads, q, k, v)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dtype is not None and t.dtype not in FLOAT_DTYPES:
            raise IRError(f"attention: {name} must be a float tensor, got {t.dtype}")
        if t.shape is not None and len(t.shape) != 4:
            raise IRError(
                f"attention: {name} must be 4-d (batch, heads, seq, dim), got {fmt(t.shape)}"
            )
    if q.shape is None or k.shape is None or v.shape is None:
        return TensorType(None, q.dtype)
    qs, ks, vs = q.shape, k.shape, v.shape
    if not all(_same(a, b) for a, b in zip(qs[:2] + qs[3:], ks[:2] + ks[3:])) or not all(
        _same(a, b) for a, b in zip(ks[:3], vs[:3])
    ):
        raise IRError(
            f"attention: q {fmt(qs)}, k {fmt(ks)} and v {fmt(vs)} do not agree: expected "
            "q (b, h, s, d), k (b, h, t, d), v (b, h, t, e)"
        )
    scores = (qs[0], qs[1], qs[2], ks[2])
    if mask.shape is not None and (
        len(mask.shape) != 4 or not all(m == 1 or _same(m, s) for m, s in zip(mask.shape, scores))
    ):
        raise IRError(
            f"attention: the mask {fmt(mask.shape)} does not broadcast to the scores {fmt(scores)}"
        )
    kind = call_.attrs["mask_kind"]
    if kind == "select" and mask.dtype not in (None, "bool"):
        raise IRError(f"attention: a select mask must be bool, got {mask.dtype}")
    if kind == "add" and mask.dtype is not None and mask.dtype not in FLOAT_DTYPES:
        raise IRError(f"attention: an additive mask must be float, got {mask.dtype}")
    if call_.attrs.get("merge_heads"):
        h, dv = qs[1], vs[3]
        width = h * dv if isinstance(h, int) and isinstance(dv, int) else None
        return TensorType((qs[0], qs[2], width), q.dtype)
    return TensorType((qs[0], qs[1], qs[2], vs[3]), q.dtype)


def _split_heads(
    heads: tuple[int, ...], q: TensorType, k: TensorType, v: TensorType
) -> tuple[TensorType, TensorType, TensorType]:
    """q, k and v's (batch, heads, seq, dim) types as ``heads`` reads them from 3-d ones."""
    h, d, dv, *at = heads
    out = []
    for name, t, width, start in (("q", q, d, at[0]), ("k", k, d, at[1]), ("v", v, dv, at[2])):
        if t.shape is None:
            out.append(TensorType(None, t.dtype))
            continue
        if len(t.shape) != 3:
            raise IRError(f"attention: with heads, {name} must be 3-d, got {fmt(t.shape)}")
        columns = t.shape[2]
        if isinstance(columns, int) and start + h * width > columns:
            raise IRError(
                f"attention: {name}'s heads (columns {start} to {start + h * width}) do not fit "
                f"its {columns} columns"
            )
        out.append(TensorType((t.shape[0], h, t.shape[1], width), t.dtype))
    return out[0], out[1], out[2]


@rule(ops.rms_norm)
def _infer_rms_norm(call_: Call, args: list[TensorType]) -> Type:
    x, gamma = args
    if x.dtype is not None and x.dtype not in FLOAT_DTYPES:
        raise IRError(f"rms_norm: expects a float tensor, got {x.dtype} {fmt(x.shape)}")
    if x.shape is None or gamma.shape is None:
        return x
    axes = sorted(normalize_axes("rms_norm", call_.attrs["axes"], len(x.shape), what="axes"))
    expected = tuple(x.shape[a] for a in axes)
    if len(gamma.shape) != len(expected) or not all(map(_same, gamma.shape, expected)):
        raise IRError(
            f"rms_norm: gamma has shape {fmt(gamma.shape)}, expected {fmt(expected)} for input "
            f"{fmt(x.shape)}"
        )
    return x


@rule(ops.rope)
def _infer_rope(call_: Call, args: list[TensorType]) -> Type:
    x, cos, sin = args
    for name, t in (("x", x), ("cos", cos), ("sin", sin)):
        if t.dtype is not None and t.dtype not in FLOAT_DTYPES:
            raise IRError(f"rope: {name} must be a float tensor, got {t.dtype}")
    if x.shape is None:
        return x
    last = x.shape[-1] if x.shape else None
    if not x.shape or (isinstance(last, int) and last % 2):
        raise IRError(f"rope: x's last axis must have an even length, got {fmt(x.shape)}")
    for name, t in (("cos", cos), ("sin", sin)):
        if t.shape is None:
            continue
        out = broadcast_shapes("rope", x.shape, t.shape)
        if out is not None and len(out) != len(x.shape):
            raise IRError(f"rope: {name} {fmt(t.shape)} has more axes than x {fmt(x.shape)}")
        if out is not None and not all(map(_same, out, x.shape)):
            raise IRError(f"rope: {name} {fmt(t.shape)} does not broadcast to x {fmt(x.shape)}")
    return x


def rope(x: ExprLike, cos: ExprLike, sin: ExprLike) -> Call:
    """``x * cos + rotate_half(x) * sin`` (rotary embedding; halves of the last axis)."""
    return call(ops.rope, as_expr(x), as_expr(cos), as_expr(sin))


def attention(
    q: ExprLike,
    k: ExprLike,
    v: ExprLike,
    mask: ExprLike,
    scale: float = 1.0,
    mask_kind: str = "add",
    fill: float = 0.0,
    masked_row: float = 0.0,
    precision: str = "fp32",
    heads: Sequence[int] = (),
    merge_heads: bool = False,
) -> Call:
    """``softmax(scale * q @ k^T masked by mask) @ v`` over (batch, heads, seq, dim) tensors.

    Args:
        q: (batch, heads, seq, dim) queries.
        k: (batch, heads, kv_seq, dim) keys (not transposed).
        v: (batch, heads, kv_seq, vdim) values.
        mask: 4-d, broadcast to (batch, heads, seq, kv_seq): added to the scaled scores
            (``mask_kind="add"``), or a bool tensor keeping the scores where it holds and
            putting ``fill`` elsewhere (``"select"``).
        scale: Multiplies ``q @ k^T``.
        masked_row: What a row gives when all its scores are ``-inf``.
        precision: ``"bf16"``: the two products take bf16 operands (q, k; the softmax's p,
            v) and sum in float32 (`rvm.transform.to_bf16` sets it); the scores and softmax
            stay float32.
        heads: ``(h, d, dv, q_at, k_at, v_at)``: q, k and v are 3-d (batch, seq, columns)
            and their heads are read in place (the module docstring); ``()``: 4-d.
        merge_heads: The result is (batch, seq, heads * vdim), the heads side by side in
            each row, rather than (batch, heads, seq, vdim).
    """
    kind = check_choice("attention", "mask_kind", mask_kind, ("add", "select"))
    split = check_ints("attention", "heads", heads)
    if split and (len(split) != 6 or min(split) < 0 or min(split[:3]) < 1):
        raise IRError(f"attention: heads must be (h, d, dv, q_at, k_at, v_at), got {heads!r}")
    return call(
        ops.attention,
        as_expr(q),
        as_expr(k),
        as_expr(v),
        as_expr(mask),
        scale=check_float("attention", "scale", scale),
        mask_kind=kind,
        fill=check_float("attention", "fill", fill),
        masked_row=check_float("attention", "masked_row", masked_row),
        precision=check_choice("attention", "precision", precision, ("fp32", "bf16")),
        heads=split,
        merge_heads=bool(merge_heads),
    )


def rms_norm(
    x: ExprLike, gamma: ExprLike, axes: int | Sequence[int] = (-1,), epsilon: float = 1e-6
) -> Call:
    """``x / sqrt(mean(x * x, axes) + epsilon) * gamma`` (RMSNorm)."""
    return call(
        ops.rms_norm,
        as_expr(x),
        as_expr(gamma),
        axes=check_axes("rms_norm", axes, name="axes", allow_none=False),
        epsilon=check_float("rms_norm", "epsilon", epsilon),
    )
