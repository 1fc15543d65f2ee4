"""Reduce stages: sum, prod, max, min, mean, argmax and argmin over axes.

A reduction over the trailing axes (rows: softmax, layer_norm, ``sum(x, -1)``) is inlined: its
loader emits a loop with a scalar accumulator in the body of the consumer's loop that binds
the kept indices, so the epilogue and any broadcast-back use sit in the same loop nest and the
prologue is computed inside the reduction loop (unit stride, vectorized with reassociation).
Several trailing axes of an array are reduced as one flat axis (a reshaped view).
A reduction over leading or inner axes accumulates into a buffer while walking the input in
memory order (vectorized along the kept inner axes); its loader reads the buffer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rvm.jit.cond import eq
from rvm.jit.kernel import KernelBuilder
from rvm.jit.scalar import convert, lit
from rvm.jit.te import Body, Scalar, Tensor, deps_of, idx, product
from rvm.jit.views import reshape_to


def _acc_dtype(kind: str, t: str) -> str:
    if kind in ("sum", "prod") and t == "bool":
        return "int64"
    if kind == "mean" and t not in ("float32", "float64"):
        return "float64"
    return t


def _init(kind: str, t: str) -> str:
    if kind in ("sum", "mean"):
        return lit(0, t)
    if kind == "prod":
        return lit(1, t)
    if t == "bool":
        return "False" if kind in ("max", "argmax", "fmax") else "True"
    if t.startswith("float"):
        return lit(-np.inf if kind in ("max", "argmax", "fmax") else np.inf, t)
    info = np.iinfo(t)
    return lit(info.min if kind in ("max", "argmax") else info.max, t)


def _combine(kind: str, t: str, acc: str, v: str) -> str:
    if kind in ("sum", "mean"):
        return f"{acc} += {v}"
    if kind == "prod":
        return f"{acc} *= {v}"
    if t == "bool":
        return f"{acc} = {acc} | {v}" if kind == "max" else f"{acc} = {acc} & {v}"
    if kind == "fmax":  # ignores NaN (softmax: a NaN still reaches every output via the sum)
        return f"{acc} = {v} if {v} > {acc} else {acc}"
    fn = "np.maximum" if kind == "max" else "np.minimum"
    return f"{acc} = {fn}({acc}, {v})"


def reduce_tensor(
    kb: KernelBuilder, kind: str, x: Tensor, axis: Any, keepdims: bool, out: str
) -> Tensor:
    """The reduction ``kind`` of ``x`` over ``axis`` (None: all axes)."""
    nd = x.ndim
    axes = sorted(range(nd)) if axis is None else sorted({a % nd for a in axis})
    kept = [a for a in range(nd) if a not in axes]
    dims = tuple("1" if (a in axes) else x.dims[a] for a in range(nd) if keepdims or a in kept)
    red_dims = [x.dims[a] for a in axes]
    count = kb.dim(product(red_dims), "cnt")
    if kind in ("argmax", "argmin", "fmax"):  # max and min of nothing are their identities
        kb.check(eq(count, 0), f"{kb.kernel}: {kind}: reduction over a zero-size axis")
    trailing = axes == list(range(nd - len(axes), nd))
    if trailing and len(axes) > 1 and x.array is not None and x.loader is None:
        if kind not in ("argmax", "argmin"):  # (their position is per axis)
            # One flat run instead of a nest of short loops (global pools: 7 x 7, 13 x 13).
            x = reshape_to(kb, x, [x.dims[a] for a in kept] + [count], checked=True)
            axes = [len(kept)]
    if kind in ("argmax", "argmin") or trailing:
        loader = _inline(kb, kind, x, axes, kept, keepdims, count, out)
        return Tensor(dims, out, loader)
    return _buffered(kb, kind, x, axes, kept, keepdims, count, dims, out)


def _kept_index(index: Sequence[Scalar], nd: int, kept: list[int], keepdims: bool):
    if keepdims:
        return [index[a] for a in kept]
    return list(index)


def _full_index(kept_idx: Sequence[Scalar], red_idx: Sequence[Scalar], nd: int, kept: list[int]):
    out: list[Scalar] = []
    ki, ri = iter(kept_idx), iter(red_idx)
    for a in range(nd):
        out.append(next(ki) if a in kept else next(ri))
    return out


def _inline(kb, kind, x, axes, kept, keepdims, count, out):
    nd = x.ndim
    at = _acc_dtype(kind, x.dtype)

    def loader(body: Body, index: Sequence[Scalar]) -> Scalar:
        kidx = _kept_index(index, nd, kept, keepdims)
        home = body.home(deps_of(*kidx))
        acc = kb.fresh("acc")
        home.lines.append(f"{acc} = {_init(kind, at)}")
        pos = kb.fresh("pos") if kind.startswith("arg") else None
        cnt = kb.fresh("k") if pos else None
        if pos:
            home.lines += [f"{pos} = 0", f"{cnt} = 0"]

        def emit(inner: Body, ridx: list[Scalar]) -> None:
            v = kb.load(x, inner, _full_index(kidx, ridx, nd, kept))
            v = kb.let(inner, convert(v, at))
            if pos:
                inner.lines += _arg_update(kind, at, acc, v.code, pos, cnt)
            else:
                inner.lines.append(_combine(kind, at, acc, v.code))

        kb.loop_nest(home, [x.dims[a] for a in axes], emit)
        res = Scalar(pos or acc, deps_of(*kidx), "int64" if pos else at)
        if kind == "mean":
            res = Scalar(f"({acc} / {_count(count, at)})", res.deps, at)
        return convert(kb.let(home, res), out)

    return loader


def _count(count: str, t: str) -> str:
    return f"np.{t}({count})"


def _arg_update(kind: str, t: str, acc: str, v: str, pos: str, cnt: str) -> list[str]:
    cmp = ">" if kind == "argmax" else "<"
    cond = f"{v} {cmp} {acc}"
    if t.startswith("float"):
        cond = f"({cond}) or ({v} != {v} and {acc} == {acc})"
    elif t == "bool":
        cond = f"({v} and not {acc})" if kind == "argmax" else f"({acc} and not {v})"
    return [f"if {cond}:", f"    {acc} = {v}", f"    {pos} = {cnt}", f"{cnt} += 1"]


def _buffered(kb, kind, x, axes, kept, keepdims, count, dims, out):
    nd = x.ndim
    at = _acc_dtype(kind, x.dtype)
    kept_dims = [x.dims[a] for a in kept]
    buf = kb.fresh("acc")

    def fill() -> None:
        kb.root.lines.append(
            f"{buf} = np.empty(({', '.join(kept_dims)}{',' if len(kept) == 1 else ''}), "
            f"dtype=np.{at})"
        )
        init = _init(kind, at)
        kb.loop_nest(kb.root, kept_dims, lambda b, i: b.lines.append(f"{kb.ref(buf, i)} = {init}"))

        def emit(inner: Body, index: list[Scalar]) -> None:
            v = kb.let(inner, convert(kb.load(x, inner, index), at))
            inner.lines.append(_combine(kind, at, kb.ref(buf, [index[a] for a in kept]), v.code))

        kb.loop_nest(kb.root, x.dims, emit)

    def loader(body: Body, index: Sequence[Scalar]) -> Scalar:
        kidx = _kept_index(index, nd, kept, keepdims)
        v = Scalar(kb.ref(buf, kidx), deps_of(*kidx), at)
        if kind == "mean":
            v = Scalar(f"({v.code} / {_count(count, at)})", v.deps, at)
        return convert(v, out)

    return Tensor(dims, out, loader, fill=fill)


__all__ = ["reduce_tensor", "idx"]
