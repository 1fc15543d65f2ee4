"""Ops on bf16 pair planes, the int32 layout in which activations stay bf16 between two
``conv2d_bf16`` calls (`rvm.op.bf16`): a max pool on them, and a float32 image rounded into one.

- ``max_pool2d_pairs(x, source, source_at, pool_size, strides, padding, dilation, ceil_mode,
  plane, signed)``: `rvm.op.max_pool2d` of the ``source`` ``(c, h, w)`` image whose int32 pair
  plane (its padding ``source_at``) ``x`` is: float32 NCHW, or with ``plane`` the next
  convolution's pair plane. A maximum of bf16 values is one of them and rounding keeps
  order, so a max pool between bf16 convolutions may stay on their planes and the result is
  the same, bit for bit (`rvm.kernels.bf16pool`); ``signed`` False says the values are no
  less than +0 (a ReLU's), which lets the kernel compare their bits as they are.
- ``pair_image(x, plane)``: float32 ``x`` (NCHW) rounded to bf16 (to nearest even) into the
  pair plane ``plane`` ``(pt, pl, hq, wq)`` that convolutions read (`rvm.op.bf16`'s
  ``plane``): int32 ``(n, (c + 1) // 2, hq, wq)``, its padding's words 0. What a value that
  is no convolution's takes to be a piece of a concatenation that convolutions read as a
  pair plane (`rvm.transform.bf16_joins.pair_planes`): an average pool's, a slice's, a
  float32 convolution's; each reader then reads the plane, where it would have rounded the
  float32 concatenation into a plane of its own at each call. Rounding is the readers' own,
  so they read the same words.
"""

from __future__ import annotations

from collections.abc import Sequence

from rvm.errors import IRError
from rvm.ir.expr import Call
from rvm.ir.op import OpPattern
from rvm.ir.types import TensorType, Type
from rvm.op import ops
from rvm.op.bf16 import _check_plane, _ints
from rvm.op.conv import normalize_padding, pad_pairs, positive_ints
from rvm.op.core import OP_PRECISION, ExprLike, as_expr, call, check_bool, define_op
from rvm.op.shapes import fmt, rule, window_out_dim

__all__ = ["max_pool2d_pairs", "pair_image"]

define_op("max_pool2d_pairs", OpPattern.OUT_ELEMWISE_FUSABLE, 1)
define_op("pair_image", OpPattern.OPAQUE, 1)
OP_PRECISION.update(max_pool2d_pairs="bf16", pair_image="bf16")


def pooled_size(attrs: dict) -> tuple[int, int]:
    """The output's height and width of a ``max_pool2d_pairs`` (its ``attrs``), written once
    for its type rule and its jit stage."""
    windows = zip(attrs["source"][1:], attrs["pool_size"], attrs["strides"],
                  pad_pairs(attrs["padding"], 2), attrs["dilation"])  # fmt: skip
    h, w = (window_out_dim("max_pool2d_pairs", *win, attrs["ceil_mode"]) for win in windows)
    return h, w


@rule(ops.max_pool2d_pairs)
def _infer_pool(call_: Call, args: list[TensorType]) -> Type:
    name = "max_pool2d_pairs"
    (x,) = args
    a = call_.attrs
    source, plane = a["source"], a["plane"]
    n = x.shape[0] if x.shape is not None and len(x.shape) == 4 else None
    _check_plane(x, (n, *source), a["source_at"], "input", name)
    spatial = pooled_size(a)
    if not plane:
        return TensorType((n, source[0], *spatial), "float32")
    if plane[2] < plane[0] + spatial[0] or plane[3] < plane[1] + spatial[1]:
        raise IRError(
            f"{name}: a {spatial[0]} x {spatial[1]} output does not fit the pair plane "
            f"(padding {plane[:2]}, {plane[2]} x {plane[3]})"
        )
    return TensorType((n, (source[0] + 1) // 2, plane[2], plane[3]), "int32")


def max_pool2d_pairs(
    x: ExprLike,
    source: Sequence[int],
    source_at: Sequence[int],
    pool_size: int | Sequence[int] = 1,
    strides: int | Sequence[int] = 1,
    padding: int | Sequence[int] = 0,
    dilation: int | Sequence[int] = 1,
    ceil_mode: bool = False,
    plane: Sequence[int] = (),
    signed: bool = True,
) -> Call:
    """`rvm.op.max_pool2d` (its window attributes, normalized as there) of the ``source``
    ``(c, h, w)`` image whose int32 pair plane ``x`` is, with padding ``source_at`` ``(pt,
    pl)``: float32 NCHW, or with ``plane`` ``(pt, pl, hq, wq)`` the next convolution's pair
    plane; ``signed`` False: the values are no less than +0 (a ReLU's output)."""
    name = "max_pool2d_pairs"
    if len(source) != 3 or len(source_at) != 2:
        raise IRError(f"{name}: source is (c, h, w) and source_at (pt, pl), got "
                      f"{tuple(source)!r} and {tuple(source_at)!r}")  # fmt: skip
    return call(
        ops.max_pool2d_pairs,
        as_expr(x),
        pool_size=positive_ints(name, "pool_size", pool_size, 2),
        strides=positive_ints(name, "strides", strides, 2),
        padding=normalize_padding(name, padding, 2),
        dilation=positive_ints(name, "dilation", dilation, 2),
        ceil_mode=check_bool(name, "ceil_mode", ceil_mode),
        source=_ints(name, "source", source, 3, 1),
        source_at=_ints(name, "source_at", source_at, 2, 0),
        plane=_ints(name, "plane", plane, 4, 0),
        signed=check_bool(name, "signed", signed),
    )


@rule(ops.pair_image)
def _infer_pair_image(call_: Call, args: list[TensorType]) -> Type:
    (x,) = args
    pt, pl, hq, wq = call_.attrs["plane"]
    shape = x.shape
    ok = x.dtype in (None, "float32") and (shape is None or len(shape) == 4)
    if not ok:
        raise IRError(f"pair_image: expects a float32 NCHW image, got {x.dtype} {fmt(shape)}")
    if shape is None:
        return TensorType(None, "int32")
    n, c, h, w = shape
    for size, pad, room, axis in ((h, pt, hq, "height"), (w, pl, wq, "width")):
        if isinstance(size, int) and pad + size > room:
            raise IRError(
                f"pair_image: a {fmt(shape)} image with padding ({pt}, {pl}) does not fit the "
                f"plane's {axis} of {room}"
            )
    pairs = (c + 1) // 2 if isinstance(c, int) else None
    return TensorType((n, pairs, hq, wq), "int32")


def pair_image(x: ExprLike, plane: Sequence[int]) -> Call:
    """float32 NCHW ``x`` rounded to bf16 into the pair plane ``plane`` ``(pt, pl, hq, wq)``
    (the module's docstring)."""
    if len(plane) != 4:  # a plane is no option here: `_ints` takes none too
        raise IRError(f"pair_image: plane must have 4 values, got {tuple(plane)!r}")
    return call(ops.pair_image, as_expr(x), plane=_ints("pair_image", "plane", plane, 4, 0))
