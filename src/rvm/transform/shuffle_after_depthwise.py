"""shuffle_after_depthwise: a channel shuffle before a depthwise convolution that shrinks the
map runs after it instead, on the smaller map.

Needs: an inlined module in A-normal form whose op calls are not yet legalized, types
inferred (run before `legalize`).

Guarantees: the same values, where a channel shuffle ``s = reshape(transpose(reshape(x, (n, g,
c / g, h, w)), (0, 2, 1, 3, 4)), (n, c, h, w))`` (shufflenet's: channel ``k`` of ``s`` is
channel ``perm[k]`` of ``x``), each step used once, whose result is used only by ``y =
conv2d(s, W)``, a depthwise convolution (c groups of one input and one output channel) with a
constant weight and fewer output positions than input positions (strides above 1), is ``u =
conv2d(x, W')`` with ``W'[perm[k]] = W[k]``, then the same shuffle of ``u`` on its (h', w')
map. A depthwise convolution treats every channel alone, so it commutes with any permutation
of them, the weights permuted along. shufflenet's three stride-2 units then shuffle a quarter
of the elements (its 112 x 56 x 56 shuffle, a copy of 1.4 MB, took 60 us on one core of a Zen
4, longer than the convolution after it).

Algorithm: one walk over each straight-line region (`map_regions`), remembering the last step
of each channel shuffle with one use; a depthwise convolution of one takes the shuffle's place
after it.
"""

from __future__ import annotations

import logging

import numpy as np

from rvm import op
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

_SWAP = (0, 2, 1, 3, 4)


def shuffle_after_depthwise(mod: IRModule) -> IRModule:
    """Move every channel shuffle past the strided depthwise convolution that reads it."""
    moved = 0

    def rewrite(name: str, func: E.Function) -> E.Function:
        uses, namer = count_uses(func.body), Namer(func)

        def region(bindings: list[E.VarBinding], body: E.Expr, depth: int):
            nonlocal moved
            out = [[b] for b in bindings]  # per binding, what replaces it
            at: dict[E.Var, int] = {b.var: i for i, b in enumerate(bindings)}
            consts: dict[E.Var, np.ndarray] = {}
            for i, b in enumerate(bindings):
                if isinstance(b.value, E.Constant):
                    consts[b.var] = b.value.data
                steps = _shuffle_of(b.value, bindings, at, uses)
                if steps is None:
                    continue
                new = _moved(b, bindings, steps, consts, namer)
                if new is not None:
                    for k in steps:
                        out[k] = []
                    out[i] = new
                    moved += 1
            return [b for group in out for b in group], body

        return map_function_regions(func, region)

    funcs = map_functions(mod, rewrite)
    if not moved:
        return mod
    logger.debug("shuffle_after_depthwise: %d channel shuffles moved past convolutions", moved)
    return replace_changed(mod, funcs)


def _shape(value: E.Expr) -> tuple | None:
    shape = getattr(value.type, "shape", None)
    if shape is None or not all(isinstance(d, int) for d in shape):
        return None
    return tuple(shape)


def _shuffle_of(value, bindings, at, uses) -> tuple[int, int, int] | None:  # type: ignore[no-untyped-def]
    """The indices of the three steps of the channel shuffle that the convolution ``value``
    reads, each used once, in this region; None when it reads none."""
    if not isinstance(value, E.Call) or value.callee is not ops.conv2d:
        return None
    steps, v = [], value.args[0]
    for callee in (ops.reshape, ops.transpose, ops.reshape):
        k = at.get(v) if isinstance(v, E.Var) else None
        if k is None or uses.get(v) != 1:
            return None
        step = bindings[k].value
        if not isinstance(step, E.Call) or step.callee is not callee:
            return None
        steps.append(k)
        v = step.args[0]
    last, middle, first = (bindings[k].value for k in steps)
    x, shuffled = _shape(first.args[0]), _shape(last)
    split = _shape(first)
    if x is None or split is None or len(x) != 4 or shuffled != x:
        return None
    n, c, h, w = x
    if len(split) != 5 or split[:1] + split[3:] != (n, h, w) or split[1] * split[2] != c:
        return None
    return tuple(steps) if tuple(middle.attrs["axes"]) == _SWAP else None  # type: ignore[return-value]


def _moved(b, bindings, steps, consts, namer):  # type: ignore[no-untyped-def]
    """The bindings computing ``b`` (a convolution of a shuffle) as the convolution of the
    shuffle's input, then the shuffle; None unless it is a strided depthwise convolution of a
    constant weight."""
    conv = b.value
    first = bindings[steps[2]].value
    x, w_arg = first.args[0], conv.args[1]
    weight = w_arg.data if isinstance(w_arg, E.Constant) else consts.get(w_arg)
    n, c, h, w = _shape(x)
    y = _shape(conv)
    if weight is None or y is None or conv.attrs["groups"] != c or weight.shape[:2] != (c, 1):
        return None
    if y[2] * y[3] >= h * w:
        return None
    g = _shape(first)[1]
    perm = np.arange(c).reshape(g, c // g).T.reshape(c)  # channel k of the shuffle: perm[k]
    permuted = np.empty_like(weight)
    permuted[perm] = weight
    head = E.Call(conv.callee, (x, E.Constant(permuted)), conv.attrs)
    u = E.Var(namer(f"{b.var.name}_unshuffled"), infer_type(head))
    split = op.reshape(u, (n, g, c // g, y[2], y[3]))
    s = E.Var(namer(f"{b.var.name}_split"), infer_type(split))
    swap = op.transpose(s, _SWAP)
    t = E.Var(namer(f"{b.var.name}_swapped"), infer_type(swap))
    join = op.reshape(t, y)
    infer_type(join)
    return [E.VarBinding(u, head), E.VarBinding(s, split), E.VarBinding(t, swap),
            E.VarBinding(b.var, join)]  # fmt: skip
