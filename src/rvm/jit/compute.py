"""Per-op compute definitions of the jit: ``compute[op](kb, call, args) -> Tensor``.

Elementwise and broadcast ops are scalar expressions (`rvm.jit.scalar`) mapped over their
broadcast operands; layout ops are index maps; reductions are reduce loops (`rvm.jit.reduce`);
softmax, log_softmax, layer_norm, batch_norm and variance are compositions of those, which
the loop builder schedules row by row (each row's statistics are hoisted to the row's loop).
Anchors (matmul, dense, convolutions) and ops that fill arrays (concat, pad) live in
`rvm.jit.stages`. An op missing from ``compute`` makes its kernel fall back to numpy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from rvm.ir.expr import Op
from rvm.ir.types import promote_dtypes
from rvm.jit.cond import mod, ne
from rvm.jit.kernel import KernelBuilder
from rvm.jit.reduce import reduce_tensor
from rvm.jit.scalar import exp_source, lit, scalar_compute
from rvm.jit.te import Body, Scalar, Tensor, Unsupported, deps_of, idx, product
from rvm.kernels import entry
from rvm.op import ops
from rvm.op.declare import ELEMENTWISE

Compute = Callable[..., Any]
compute: dict[Op, Compute] = {}
"""Per op: ``f(kb, attrs, args, out_dtype) -> Tensor`` (a list of Tensors for split)."""


def _norm(axis: int, ndim: int) -> int:
    return axis % ndim if ndim else 0


# -- elementwise ---------------------------------------------------------------------------


def _elementwise(op: Op) -> Compute:
    """The compute of a declared elementwise op (`rvm.op.declare.Elementwise`): its scalar form
    over operands converted to the result's dtype (its ``compute`` "result"), to the inputs'
    promoted dtype ("inputs": comparisons and logic) or to bool then the result's ("select")."""
    fn = scalar_compute[op]
    kind = ELEMENTWISE[op].compute

    def lower(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
        ct = out
        if kind == "inputs":
            ct = args[0].dtype
            for a in args[1:]:
                ct = promote_dtypes(ct, a.dtype) or ct

        def f(*xs: str) -> str:
            return fn(attrs, ct, *xs)

        if kind == "inputs":
            return kb.elemwise(f, out, args, compute_dtype=ct)
        if kind == "select":
            return kb.elemwise(f, out, args, arg_dtypes=["bool", out, out])
        return kb.elemwise(f, out, args)

    return lower


for _op in ELEMENTWISE:
    if _op in scalar_compute:
        compute[_op] = _elementwise(_op)


def _const_fill(v: int) -> Compute:
    def lower(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
        dims = tuple(kb.resolve(d) for d in attrs["shape"])
        value = attrs.get("fill_value", v)
        code = lit(value, out)
        return Tensor(dims, out, lambda body, index: Scalar(code, frozenset(), out))

    return lower


compute[ops.zeros] = _const_fill(0)
compute[ops.ones] = _const_fill(1)
compute[ops.full] = _const_fill(0)


# -- reductions ----------------------------------------------------------------------------


def _reduction(kind: str) -> Compute:
    def lower(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
        return reduce_tensor(kb, kind, args[0], attrs["axis"], attrs["keepdims"], out)

    return lower


for _name in ("sum", "prod", "max", "min", "mean"):
    compute[getattr(ops, _name)] = _reduction(_name)


def _arg_reduction(kind: str) -> Compute:
    def lower(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
        axis = attrs["axis"]
        axes = None if axis is None else (axis,)
        return reduce_tensor(kb, kind, args[0], axes, attrs["keepdims"], out)

    return lower


compute[ops.argmax] = _arg_reduction("argmax")
compute[ops.argmin] = _arg_reduction("argmin")


def variance(kb: KernelBuilder, x: Tensor, axes: Any, keepdims: bool) -> Tensor:
    """Population variance as NumPy computes it: mean((x - mean(x)) ** 2)."""
    t = x.dtype
    m = reduce_tensor(kb, "mean", x, axes, True, t)
    d = kb.elemwise(lambda a, b: f"({a} - {b})", t, [x, m])
    sq = kb.elemwise(lambda a: f"({a} * {a})", t, [d])
    return reduce_tensor(kb, "mean", sq, axes, keepdims, t)


compute[ops.variance] = lambda kb, attrs, args, out: variance(
    kb, args[0], attrs["axis"], attrs["keepdims"]
)


# -- normalizations ------------------------------------------------------------------------


def _softmax(log: bool) -> Compute:
    def lower(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
        (x,) = args
        t = x.dtype
        axes = (_norm(attrs["axis"], x.ndim),)
        if not log and x.ndim and axes[0] == x.ndim - 1:
            return _row_softmax(kb, x)
        m = reduce_tensor(kb, "fmax", x, axes, True, t)
        s = kb.elemwise(lambda a, b: f"({a} - {b})", t, [x, m])
        e = kb.elemwise(lambda a: exp_source(t, a), t, [s])
        total = reduce_tensor(kb, "sum", e, axes, True, t)
        if log:
            return kb.elemwise(lambda a, b: f"({a} - np.log({b}))", t, [s, total])
        return kb.elemwise(lambda a, b: f"({a} / {b})", t, [e, total])

    return lower


def _row_softmax(kb: KernelBuilder, x: Tensor) -> Tensor:
    """Softmax over the last axis through a row buffer: the max's loop copies the row into it,
    the sum's loop replaces each element by its exp in place, and the output divides the
    buffer by the sum (each exp computed once).

    No loop that sums stores anywhere but where it loads: a loop that stores and sums with
    reassociation is vectorized behind LLVM's run-time check that the store does not overlap
    the loads, and falls back to a scalar loop, which sums in another order, when the store's
    array starts within a few vectors after the loads' (a check on their distance, not on
    overlap). With the row's exps stored to a buffer while summing the input's, the sum's
    last bit depended on where malloc had put the buffer: 1 ulp in the MLP's softmax, seen
    only after hundreds of tests had shuffled the heap. The max's loop may take either path:
    a max and a copy are exact in any order."""
    t = x.dtype
    axes = (x.ndim - 1,)
    row = kb.buffer((x.dims[-1],), t)
    m = reduce_tensor(kb, "fmax", _stored(kb, x, row), axes, True, t)
    # Each reduction first, then the buffer's read: the reduction's row loop fills the buffer
    # before the loop that reads it. A row of one element has no loop: its statements go in
    # emission order into one body, and a read loaded before its reduction read the buffer
    # before the row was stored (a softmax over an axis of 1 gave NaN for 1, found by
    # `benchmarks/fuzz.py`'s random model 13).
    s = kb.elemwise(lambda b, a: f"({a} - {b})", t, [m, _read(kb, x, row)])
    e = kb.elemwise(lambda a: exp_source(t, a), t, [s])
    total = reduce_tensor(kb, "sum", _stored(kb, e, row), axes, True, t)
    return kb.elemwise(lambda b, a: f"({a} / {b})", t, [total, _read(kb, x, row)])


def _stored(kb: KernelBuilder, x: Tensor, row: str) -> Tensor:
    """``x`` (last axis a row), each element also stored in the row buffer ``row`` where it
    is computed."""

    def fill(body: Body, index: Sequence[Scalar]) -> Scalar:
        v = kb.let(body, kb.load(x, body, index))
        body.home(v.deps).lines.append(f"{kb.ref(row, index[-1:])} = {v.code}")
        return v

    return Tensor(x.dims, x.dtype, fill)


def _read(kb: KernelBuilder, x: Tensor, row: str) -> Tensor:
    """A tensor of ``x``'s shape reading the row buffer ``row`` (what was last stored there in
    the element's row: every read depends on the whole index, so it stays inside the row)."""

    def read(body: Body, index: Sequence[Scalar]) -> Scalar:
        return Scalar(kb.ref(row, index[-1:]), deps_of(*index), x.dtype)

    return Tensor(x.dims, x.dtype, read)


compute[ops.softmax] = _softmax(False)
compute[ops.log_softmax] = _softmax(True)


def _layer_norm(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
    x, gamma, beta = args
    t = x.dtype
    axes = tuple(sorted(_norm(a, x.ndim) for a in attrs["axes"]))
    for p, what in ((gamma, "gamma"), (beta, "beta")):
        for k, a in enumerate(axes):
            if p.dims[k] != x.dims[a]:
                kb.check(
                    ne(p.dims[k], x.dims[a]),
                    f"{kb.kernel}: layer_norm: {what} "
                    f"does not match the normalized axes of the input",
                )
    library = _library_norm(kb, x, (gamma, beta), axes, attrs["epsilon"])
    if library is not None:
        return library
    m = reduce_tensor(kb, "mean", x, axes, True, t)
    d = kb.elemwise(lambda a, b: f"({a} - {b})", t, [x, m])
    sq = kb.elemwise(lambda a: f"({a} * {a})", t, [d])
    v = reduce_tensor(kb, "mean", sq, axes, True, t)
    eps = lit(attrs["epsilon"], t)
    den = kb.elemwise(lambda a: f"np.sqrt({a} + {eps})", t, [v])
    y = kb.elemwise(lambda a, b: f"({a} / {b})", t, [d, den])

    def params(body: Body, index: Sequence[Scalar]) -> Sequence[Scalar]:
        return [index[a] for a in axes]

    g = kb.index_map(gamma, x.dims, params)
    b = kb.index_map(beta, x.dims, params)
    return kb.elemwise(lambda a, s, c: f"({a} * {s} + {c})", t, [y, g, b])


compute[ops.layer_norm] = _layer_norm


def _rms_norm(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
    x, gamma = args
    t = x.dtype
    axes = tuple(sorted(_norm(a, x.ndim) for a in attrs["axes"]))
    for k, a in enumerate(axes):
        if gamma.dims[k] != x.dims[a]:
            kb.check(
                f"{gamma.dims[k]} != {x.dims[a]}",
                f"{kb.kernel}: rms_norm: gamma does not match the normalized axes of the input",
            )
    library = _library_norm(kb, x, (gamma,), axes, attrs["epsilon"])
    if library is not None:
        return library
    sq = kb.elemwise(lambda a: f"({a} * {a})", t, [x])
    ms = reduce_tensor(kb, "mean", sq, axes, True, t)
    eps = lit(attrs["epsilon"], t)
    den = kb.elemwise(lambda a: f"np.sqrt({a} + {eps})", t, [ms])

    def params(body: Body, index: Sequence[Scalar]) -> Sequence[Scalar]:
        return [index[a] for a in axes]

    g = kb.index_map(gamma, x.dims, params)
    return kb.elemwise(lambda a, s, c: f"({a} / {s} * {c})", t, [x, den, g])


compute[ops.rms_norm] = _rms_norm


def _library_norm(
    kb: KernelBuilder, x: Tensor, params: Sequence[Tensor], axes: tuple[int, ...], eps: float
) -> Tensor | None:
    """A float32 or float64 layer norm (``params`` gamma, beta) or RMS norm (gamma) over the
    trailing axes as a call of the library's ``norm_rows`` (`rvm.kernels.norms`: rows on the
    pool when large) filling an array; None for the loops above (other dtypes and axes)."""
    from rvm.kernels.lrn import float_bits
    from rvm.kernels.norms import over_rows

    if x.dtype not in entry.MIXED_DTYPES_OF["norm_rows"] or not over_rows(x.ndim, axes):
        return None
    if any(p.dtype != x.dtype for p in params):
        return None
    k = len(axes)
    t = Tensor(x.dims, x.dtype, kind="anchor")
    rms = len(params) == 1

    def fill() -> None:
        t.array = kb.buffer(x.dims, x.dtype, t.array)
        rows, n = kb.dim(product(x.dims[: x.ndim - k])), kb.dim(product(x.dims[x.ndim - k :]))
        flat = [f"{kb.materialize(p)}.reshape(({n},))" for p in params]
        arrays = (
            f"{kb.materialize(x)}.reshape(({rows}, {n}))",
            *(flat if not rms else flat * 2),  # RMS: beta not read
            f"{t.array}.reshape(({rows}, {n}))",
        )
        dtype = entry.variant([x.dtype] * 4)
        kb.call_entry("norm_rows", arrays, (float_bits(float(eps)), int(rms)), dtype)

    t.fill = fill
    return t


def _rope(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
    """``x * cos + rotate_half(x) * sin``: the rotated element read in place, its sign from
    the index (no halves, negation or concat materialized)."""
    x, cos, sin = args
    n = x.dims[-1]
    half = kb.dim(f"{n} // 2", "h")
    kb.check(ne(mod(n, 2), 0), f"{kb.kernel}: rope: the last axis must have an even length")

    def partner(body: Body, index: Sequence[Scalar]) -> Sequence[Scalar]:
        i = index[-1]
        j = idx(f"({i.code} + {half} if {i.code} < {half} else {i.code} - {half})", i)
        return [*index[:-1], j]

    other = kb.index_map(x, x.dims, partner)

    def sign_of(body: Body, index: Sequence[Scalar]) -> Scalar:
        i = index[-1]
        return Scalar(f"({lit(-1, out)} if {i.code} < {half} else {lit(1, out)})", i.deps, out)

    sign = Tensor(x.dims, out, sign_of)
    return kb.elemwise(
        lambda a, c, o, g, s: f"({a} * {c} + {g} * {o} * {s})", out, [x, cos, other, sign, sin]
    )


compute[ops.rope] = _rope


def _batch_norm(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
    x, gamma, beta, mean, var = args
    t = x.dtype
    axis = _norm(attrs["axis"], x.ndim)
    for p in (gamma, beta, mean, var):
        if p.dims[0] != x.dims[axis]:
            kb.check(
                ne(p.dims[0], x.dims[axis]),
                f"{kb.kernel}: batch_norm: a parameter does not match the channel axis",
            )

    def channel(body: Body, index: Sequence[Scalar]) -> Sequence[Scalar]:
        return [index[axis]]

    g, b, m, v = (kb.index_map(p, x.dims, channel) for p in (gamma, beta, mean, var))
    eps = lit(attrs["epsilon"], t)
    scale = kb.elemwise(lambda a, c: f"({a} / np.sqrt({c} + {eps}))", t, [g, v])
    return kb.elemwise(lambda a, c, s, d: f"(({a} - {c}) * {s} + {d})", t, [x, m, scale, b])


compute[ops.batch_norm] = _batch_norm


# -- global pools --------------------------------------------------------------------------

compute[ops.global_avg_pool2d] = lambda kb, attrs, args, out: reduce_tensor(
    kb, "mean", args[0], (2, 3), True, out
)
compute[ops.global_max_pool2d] = lambda kb, attrs, args, out: reduce_tensor(
    kb, "max", args[0], (2, 3), True, out
)


def literal_int(v: Any) -> str:
    """An int attribute as source."""
    return str(int(np.int64(v)))


__all__ = ["compute", "variance", "literal_int", "idx", "Unsupported"]
