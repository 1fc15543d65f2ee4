"""commute_pool_projection: an average pool and a 1x1 convolution next to each other run in
the order that costs less.

Needs: an inlined module in A-normal form whose op calls are not yet legalized, types
inferred (run after `fold_batch_norm`, before the weight-packing passes and `legalize`).

Guarantees: the same values (up to rounding), where ``p = avg_pool2d(x)`` whose one use is
``y = conv2d(p, W)``, or ``c = conv2d(x, W)`` whose one use is ``y = avg_pool2d(c)``, ``W`` a
(O, C, 1, 1) weight, strides 1, no padding, one group, static spatial sizes, runs in the other
order when that costs fewer multiply-adds and pool taps (`_cost`). Both are linear and act on
different axes: the convolution mixes channels at each position, the pool mixes positions with
the same weights in every channel, and a zero (the padding) stays zero through a convolution
without bias; so they commute, for any window, stride, padding and divisor. A bias add after
the convolution stays where it is. So inception_v2's pool branches pool the 32 to 128
channels of their projections instead of the 192 to 1024 of their inputs (the pools took about
2.5 times ONNX Runtime's time, one core of a Zen 4), and densenet121's transitions pool
before their 1x1 convolutions, which then run on a quarter of the positions.

Algorithm: one walk over each straight-line region (`map_regions`), remembering the average
pools and the 1x1 convolutions with one use; the second of a pair takes the first's place
when the other order is cheaper.
"""

from __future__ import annotations

import logging
import math

from rvm.ir import expr as E
from rvm.ir.infer import infer_type
from rvm.ir.module import IRModule
from rvm.op import ops
from rvm.transform.legalize import (
    Namer,
    count_uses,
    map_function_regions,
    map_functions,
    replace_changed,
)

logger = logging.getLogger("rvm.transform")

_FLOATS = ("float16", "bfloat16", "float32", "float64")


def commute_pool_projection(mod: IRModule) -> IRModule:
    """Run each adjacent average pool and 1x1 convolution in the cheaper order."""
    moved = 0

    def rewrite(name: str, func: E.Function) -> E.Function:
        uses, namer = count_uses(func.body), Namer(func)

        def region(bindings: list[E.VarBinding], body: E.Expr, depth: int):
            nonlocal moved
            out = [[b] for b in bindings]  # per binding, what replaces it
            firsts: dict[E.Var, int] = {}  # pools and projections with one use
            for i, b in enumerate(bindings):
                value = b.value
                if not isinstance(value, E.Call) or not isinstance(value.callee, E.Op):
                    continue
                is_pool = value.callee is ops.avg_pool2d and _float(value)
                if not (is_pool or _projection(value)):
                    continue
                at = firsts.pop(value.args[0], None) if isinstance(value.args[0], E.Var) else None
                if (
                    at is not None
                    and out[at]
                    and _projection(value) != _projection(bindings[at].value)
                ):
                    swapped = _swap(bindings[at], b, namer)
                    if swapped is not None:
                        out[at], out[i] = [], swapped
                        moved += 1
                        continue
                if uses.get(b.var) == 1:
                    firsts[b.var] = i
            return [b for group in out for b in group], body

        return map_function_regions(func, region)

    funcs = map_functions(mod, rewrite)
    if not moved:
        return mod
    logger.debug("commute_pool_projection: %d average pools moved past projections", moved)
    return replace_changed(mod, funcs)


def _shape(value: E.Expr) -> tuple | None:
    shape = getattr(value.type, "shape", None)
    return tuple(shape) if shape is not None else None


def _float(pool: E.Call) -> bool:
    return getattr(pool.type, "dtype", None) in _FLOATS


def _projection(value: E.Call) -> bool:
    """Whether ``value`` is a 1x1 convolution 1 apart, unpadded, of one group."""
    if value.callee is not ops.conv2d:
        return False
    w, attrs = _shape(value.args[1]), value.attrs
    if w is None or len(w) != 4 or w[2:] != (1, 1) or attrs["groups"] != 1:
        return False
    return all(s == 1 for s in attrs["strides"]) and all(p == 0 for p in attrs["padding"])


def _cost(w: tuple, taps: int, pool_first: bool, big: int, small: int) -> int:
    """Multiply-adds and pool taps of a pool (``taps`` a window, ``big`` positions in,
    ``small`` out) and a projection by a (O, C, 1, 1) weight ``w``, in either order."""
    o, c = w[0], w[1]
    if pool_first:
        return c * small * taps + o * c * small
    return o * c * big + o * small * taps


def _swap(first: E.VarBinding, second: E.VarBinding, namer: Namer):  # type: ignore[no-untyped-def]
    """The bindings computing ``second`` (a pool of a projection, or a projection of a pool)
    in the other order, when that costs less; else None."""
    pool_first = first.value.callee is ops.avg_pool2d
    pool, conv = (first.value, second.value) if pool_first else (second.value, first.value)
    x = first.value.args[0]
    big, small = _shape(pool.args[0]), _shape(pool)
    if big is None or small is None or not all(isinstance(d, int) for d in big[2:] + small[2:]):
        return None
    w, taps = _shape(conv.args[1]), math.prod(pool.attrs["pool_size"])
    sizes = (math.prod(big[2:]), math.prod(small[2:]))
    if _cost(w, taps, not pool_first, *sizes) >= _cost(w, taps, pool_first, *sizes):
        return None
    if pool_first:  # the projection of x, then the pool of it
        head = E.Call(conv.callee, (x, conv.args[1]), conv.attrs)
        tail = lambda t: E.Call(pool.callee, (t,), pool.attrs)  # noqa: E731
    else:  # the pool of x, then the projection of it
        head = E.Call(pool.callee, (x,), pool.attrs)
        tail = lambda t: E.Call(conv.callee, (t, conv.args[1]), conv.attrs)  # noqa: E731
    t = E.Var(namer(f"{first.var.name}_first"), infer_type(head))
    last = tail(t)
    infer_type(last)
    return [E.VarBinding(t, head), E.VarBinding(second.var, last)]
