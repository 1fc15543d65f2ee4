"""Which float32 convolution epilogues the library's pass runs (`rvm.kernels.epipass`).

`channel_ops` matches, after a convolution a jit kernel computes into its output, a per-channel
bias ``add``, a residual ``add`` and a ``relu``, each optional but in that order; `rvm.jit.lower`
then calls the pass instead of emitting its own loop, and `rvm.jit.first_run` lists the pass's
task for a primitive function with such a convolution (`CONVS`).
"""

from __future__ import annotations

from rvm.ir import expr as E
from rvm.jit.te import Tensor
from rvm.op import ops

__all__ = ["CONVS", "channel_ops"]


CONVS = (ops.conv1d, ops.conv2d, ops.conv2d_packed, ops.conv2d_winograd)
"""The convolutions whose epilogue the pass can take (float32 ones)."""


def channel_ops(
    conv: E.VarBinding, rest: list[E.VarBinding], env: dict, target: Tensor
) -> tuple[Tensor | None, Tensor | None, int] | None:
    """(bias, residual, activation) when ``conv`` is a float32 convolution whose value
    reaches ``target`` through ``add`` of a per-channel bias (an array broadcast along the
    channels only), then ``add`` of a residual (an array of ``target``'s dims), then ``relu``
    (an index of `rvm.kernels.epipass.ACTIVATIONS`), each optional but in that order, one
    after the other: the epilogue `rvm.kernels.epipass` runs; else None."""
    v = conv.value
    if not (isinstance(v, E.Call) and v.callee in CONVS):
        return None
    if target.dtype != "float32" or target.ndim not in (3, 4):
        return None
    chain, cur = {conv.var}, conv.var
    bias = res = None
    stage, act = 0, 0
    for b in rest:
        v = b.value
        args = v.args if isinstance(v, E.Call) else (v,)
        if not any(isinstance(a, E.Var) and a in chain for a in args):
            continue
        if not (isinstance(v, E.Call) and any(a is cur for a in args)):
            return None
        if v.callee is ops.add and len(args) == 2:
            other = args[1] if args[0] is cur else args[0]
            t = env.get(other) if isinstance(other, E.Var) and other not in chain else None
            if not (isinstance(t, Tensor) and t.kind == "array" and t.loader is None):
                return None
            if t.array is None or t.dtype != "float32" or t.ndim > target.ndim:
                return None
            dims = ("1",) * (target.ndim - t.ndim) + t.dims
            if stage < 1 and all(d == "1" for a, d in enumerate(dims) if a != 1):
                bias, stage = t, 1
            elif stage < 2 and t.dims == target.dims:
                res, stage = t, 2
            else:
                return None
        elif v.callee is ops.relu and stage < 3:
            act, stage = 1, 3
        else:
            return None
        chain.add(b.var)
        cur = b.var
    if stage == 0 or env.get(cur) is not target:
        return None
    return bias, res, act
