"""Transformer ops: attention, rms_norm, rope.

Part of the NumPy reference kernels (`rvm.kernels.reference`).
"""

import numpy as np

from rvm.kernels.reference.bf16 import _round_bf16
from rvm.kernels.reference.common import _like


def attention(
    q, k, v, mask, scale=1.0, mask_kind="add", fill=0.0, masked_row=0.0, precision="fp32",
    heads=(), merge_heads=False,
):  # fmt: skip
    """softmax(scale * q @ k^T, masked) @ v; rows whose scores are all -inf give
    ``masked_row``. ``precision="bf16"`` (float32): q, k, p and v rounded to bf16 first.
    ``heads=(h, d, dv, q_at, k_at, v_at)``: q, k, v 3-d, their heads read from columns.
    ``merge_heads``: the result (b, s, h * dv), each row its heads side by side."""
    if heads:
        h, d, dv, *at = heads
        q, k, v = (
            x[:, :, a : a + h * w].reshape(x.shape[0], x.shape[1], h, w).transpose(0, 2, 1, 3)
            for x, a, w in ((q, at[0], d), (k, at[1], d), (v, at[2], dv))
        )
    bf16 = precision == "bf16" and q.dtype == np.float32
    if bf16:
        q, k, v = _round_bf16(q), _round_bf16(k), _round_bf16(v)
    s = _like(np.matmul(q, np.swapaxes(k, -1, -2)) * scale, q.dtype)
    s = s + mask if mask_kind == "add" else np.where(mask, s, np.asarray(fill, q.dtype))
    top = np.max(s, axis=-1, keepdims=True, initial=-np.inf)
    empty = top == -np.inf
    with np.errstate(invalid="ignore", divide="ignore"):
        e = np.exp(s - np.where(empty, 0, top))
        p = e / np.sum(e, axis=-1, keepdims=True)
    p = np.where(empty, 0, p)
    if bf16:
        p = _round_bf16(_like(p, q.dtype))
    out = np.matmul(_like(p, q.dtype), v)
    out = _like(np.where(empty, np.asarray(masked_row, q.dtype), out), q.dtype)
    if merge_heads:
        b, h, s, dv = out.shape
        out = np.ascontiguousarray(out.transpose(0, 2, 1, 3)).reshape(b, s, h * dv)
    return out


def rms_norm(x, gamma, axes=(-1,), epsilon=1e-6):
    """x / sqrt(mean(x * x, axes) + epsilon) * gamma."""
    ms = np.mean(x * x, axis=tuple(axes), keepdims=True)
    return _like(x / np.sqrt(ms + np.asarray(epsilon, x.dtype)) * gamma, x.dtype)


def rope(x, cos, sin):
    """x * cos + rotate_half(x) * sin, rotate_half(x) = concat(-x2, x1) of the last axis's
    halves."""
    half = x.shape[-1] // 2
    rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return _like(x * cos + rotated * sin, x.dtype)


__all__ = ["attention", "rms_norm", "rope"]
