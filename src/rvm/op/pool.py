"""Window pools over 1, 2 or 3 spatial axes (NCW, NCHW, NCDHW) and the 2-d global pools.

``max_pool{1,2,3}d`` and ``avg_pool{1,2,3}d`` are separate ops (the jit lowers the 2-d ones
itself, the others run their numpy kernel) sharing one type rule, one builder and one
reference. Attributes are normalized as in `rvm.op.conv`: ``pool_size``, ``strides`` and
``dilation`` one int per spatial axis, ``padding`` (before..., after...). Output sizes follow
``(size + pads - dilation * (pool_size - 1) - 1) // stride + 1``, rounded up with
``ceil_mode`` (a last window starting in the right padding is dropped, as in PyTorch and ONNX).
``max_pool_indices`` gives the argmax of a max pool of any rank.
"""

from __future__ import annotations

from collections.abc import Sequence

from rvm.errors import IRError
from rvm.ir.expr import Call, Op
from rvm.ir.op import OpPattern
from rvm.ir.types import TensorType, Type
from rvm.op import ops
from rvm.op.conv import LAYOUTS, IntOrInts, check_rank, normalize_padding, pad_pairs, positive_ints
from rvm.op.core import ExprLike, as_expr, call, check_bool, define_op
from rvm.op.shapes import rule, window_out_dim

__all__ = [
    "avg_pool1d",
    "avg_pool2d",
    "avg_pool3d",
    "global_avg_pool2d",
    "global_max_pool2d",
    "max_pool1d",
    "max_pool2d",
    "max_pool3d",
    "max_pool_indices",
    "whole_map_average",
]

# The ops of this module (`rvm.op.core.define_op`).
define_op("max_pool1d", OpPattern.OPAQUE, 1)
define_op("max_pool2d", OpPattern.OUT_ELEMWISE_FUSABLE, 1)
define_op("max_pool3d", OpPattern.OPAQUE, 1)
define_op("avg_pool1d", OpPattern.OPAQUE, 1)
define_op("avg_pool2d", OpPattern.OUT_ELEMWISE_FUSABLE, 1)
define_op("avg_pool3d", OpPattern.OPAQUE, 1)
define_op("max_pool_indices", OpPattern.OPAQUE, 1)
define_op("global_avg_pool2d", OpPattern.OUT_ELEMWISE_FUSABLE, 1)
define_op("global_max_pool2d", OpPattern.OUT_ELEMWISE_FUSABLE, 1)


def _pool_rank(call_: Call) -> int:
    return len(call_.attrs["pool_size"])


def _pool_rule(op: Op, dtype: str | None = None) -> None:
    """The rule of a pool (``dtype``: its result's, default the input's)."""

    @rule(op)
    def infer_pool(call_: Call, args: list[TensorType]) -> Type:
        (x,) = args
        nsp = _pool_rank(call_)
        check_rank(op.name, x, 2 + nsp, f"the input ({LAYOUTS[nsp]})")
        out_dtype = dtype or x.dtype
        if x.shape is None:
            return TensorType(None, out_dtype)
        a = call_.attrs
        spatial = [
            window_out_dim(
                op.name,
                x.shape[2 + i],
                a["pool_size"][i],
                a["strides"][i],
                pads,
                a["dilation"][i],
                a["ceil_mode"],
            )
            for i, pads in enumerate(pad_pairs(a["padding"], nsp))
        ]
        return TensorType((*x.shape[:2], *spatial), out_dtype)


def _global_pool_rule(op: Op) -> None:
    @rule(op)
    def infer_global_pool(call_: Call, args: list[TensorType]) -> Type:
        (x,) = args
        check_rank(op.name, x, 4, "the input (NCHW)")
        return TensorType(None if x.shape is None else (*x.shape[:2], 1, 1), x.dtype)


_WINDOW_POOLS = tuple(f"{kind}_pool{n}d" for kind in ("max", "avg") for n in (1, 2, 3))
for _name in _WINDOW_POOLS:
    _pool_rule(getattr(ops, _name))
_pool_rule(ops.max_pool_indices, "int64")
_global_pool_rule(ops.global_avg_pool2d)
_global_pool_rule(ops.global_max_pool2d)


def _pool_attrs(
    op: str,
    nsp: int,
    pool_size: IntOrInts,
    strides: IntOrInts,
    padding: IntOrInts,
    dilation: IntOrInts,
    ceil_mode: bool,
) -> dict:
    return {
        "pool_size": positive_ints(op, "pool_size", pool_size, nsp),
        "strides": positive_ints(op, "strides", strides, nsp),
        "padding": normalize_padding(op, padding, nsp),
        "dilation": positive_ints(op, "dilation", dilation, nsp),
        "ceil_mode": check_bool(op, "ceil_mode", ceil_mode),
    }


def _max_pool(
    nsp: int,
    x: ExprLike,
    pool_size: IntOrInts,
    strides: IntOrInts,
    padding: IntOrInts,
    dilation: IntOrInts,
    ceil_mode: bool,
) -> Call:
    pool = getattr(ops, f"max_pool{nsp}d")
    attrs = _pool_attrs(pool.name, nsp, pool_size, strides, padding, dilation, ceil_mode)
    return call(pool, as_expr(x), **attrs)


def _avg_pool(
    nsp: int,
    x: ExprLike,
    pool_size: IntOrInts,
    strides: IntOrInts,
    padding: IntOrInts,
    dilation: IntOrInts,
    ceil_mode: bool,
    count_include_pad: bool,
) -> Call:
    pool = getattr(ops, f"avg_pool{nsp}d")
    attrs = _pool_attrs(pool.name, nsp, pool_size, strides, padding, dilation, ceil_mode)
    attrs["count_include_pad"] = check_bool(pool.name, "count_include_pad", count_include_pad)
    return call(pool, as_expr(x), **attrs)


def max_pool1d(
    x: ExprLike,
    pool_size: IntOrInts = 1,
    strides: IntOrInts = 1,
    padding: IntOrInts = 0,
    dilation: IntOrInts = 1,
    ceil_mode: bool = False,
) -> Call:
    """The maximum over windows of an NCW tensor (padding never wins)."""
    return _max_pool(1, x, pool_size, strides, padding, dilation, ceil_mode)


def max_pool2d(
    x: ExprLike,
    pool_size: IntOrInts = 1,
    strides: IntOrInts = 1,
    padding: IntOrInts = 0,
    dilation: IntOrInts = 1,
    ceil_mode: bool = False,
) -> Call:
    """The maximum over windows of an NCHW tensor (padding never wins).

    As in TVM, ``strides`` default to 1, not to ``pool_size``.
    """
    return _max_pool(2, x, pool_size, strides, padding, dilation, ceil_mode)


def max_pool3d(
    x: ExprLike,
    pool_size: IntOrInts = 1,
    strides: IntOrInts = 1,
    padding: IntOrInts = 0,
    dilation: IntOrInts = 1,
    ceil_mode: bool = False,
) -> Call:
    """The maximum over windows of an NCDHW tensor (padding never wins)."""
    return _max_pool(3, x, pool_size, strides, padding, dilation, ceil_mode)


def avg_pool1d(
    x: ExprLike,
    pool_size: IntOrInts = 1,
    strides: IntOrInts = 1,
    padding: IntOrInts = 0,
    dilation: IntOrInts = 1,
    ceil_mode: bool = False,
    count_include_pad: bool = False,
) -> Call:
    """The mean over windows of an NCW tensor; see `avg_pool2d`."""
    return _avg_pool(1, x, pool_size, strides, padding, dilation, ceil_mode, count_include_pad)


def avg_pool2d(
    x: ExprLike,
    pool_size: IntOrInts = 1,
    strides: IntOrInts = 1,
    padding: IntOrInts = 0,
    dilation: IntOrInts = 1,
    ceil_mode: bool = False,
    count_include_pad: bool = False,
) -> Call:
    """The mean over windows of an NCHW tensor.

    The divisor counts padding elements only when ``count_include_pad``, and never the
    ceil-mode overhang past the padding.
    """
    return _avg_pool(2, x, pool_size, strides, padding, dilation, ceil_mode, count_include_pad)


def avg_pool3d(
    x: ExprLike,
    pool_size: IntOrInts = 1,
    strides: IntOrInts = 1,
    padding: IntOrInts = 0,
    dilation: IntOrInts = 1,
    ceil_mode: bool = False,
    count_include_pad: bool = False,
) -> Call:
    """The mean over windows of an NCDHW tensor; see `avg_pool2d`."""
    return _avg_pool(3, x, pool_size, strides, padding, dilation, ceil_mode, count_include_pad)


def max_pool_indices(
    x: ExprLike,
    pool_size: Sequence[int],
    strides: IntOrInts = 1,
    padding: IntOrInts = 0,
    dilation: IntOrInts = 1,
    ceil_mode: bool = False,
) -> Call:
    """Where each window of the max pool with these attributes found its maximum (int64).

    The rank follows ``pool_size`` (one int per spatial axis). An index is row-major into
    the spatial plane of its (batch, channel), as PyTorch's ``return_indices``; the first
    maximum in window order wins a tie, and padding never does.
    """
    if not isinstance(pool_size, (list, tuple)) or not 1 <= len(pool_size) <= 3:
        raise IRError(
            f"max_pool_indices: pool_size must have one int per spatial axis (1 to 3), "
            f"got {pool_size!r}"
        )
    nsp = len(pool_size)
    attrs = _pool_attrs("max_pool_indices", nsp, pool_size, strides, padding, dilation, ceil_mode)
    return call(ops.max_pool_indices, as_expr(x), **attrs)


def whole_map_average(call_: Call) -> bool:
    """Whether ``call_`` (typed) is an avg_pool2d whose one window covers its whole static
    map, undilated, with no padding or padding that does not count (resnet50's and
    inception's last pools; inception_v1's 7x7 window on a 6x6 map padded by one at the
    bottom and right): a global average, which `rvm.transform.legalize` makes it."""
    if call_.callee is not ops.avg_pool2d:
        return False
    x, a = call_.args[0].type, call_.attrs
    if not isinstance(x, TensorType) or x.shape is None or tuple(a["dilation"]) != (1, 1):
        return False
    if a["count_include_pad"] and any(a["padding"]):
        return False
    axes = zip(x.shape[2:], a["pool_size"], a["strides"], pad_pairs(a["padding"], 2))
    return all(  # the first window, from -lo, reaches the map's end; no second one
        isinstance(size, int)
        and lo + size <= pool
        and window_out_dim("avg_pool2d", size, pool, stride, (lo, hi), 1, a["ceil_mode"]) == 1
        for size, pool, stride, (lo, hi) in axes
    )


def global_avg_pool2d(x: ExprLike) -> Call:
    """The mean over H and W of an NCHW tensor, giving (N, C, 1, 1)."""
    return call(ops.global_avg_pool2d, as_expr(x))


def global_max_pool2d(x: ExprLike) -> Call:
    """The maximum over H and W of an NCHW tensor, giving (N, C, 1, 1)."""
    return call(ops.global_max_pool2d, as_expr(x))
