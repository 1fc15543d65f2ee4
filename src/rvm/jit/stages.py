"""Anchor stages: matmul, dense, conv1d/conv2d (BLAS) and the window pools.

Float matmul and dense call `rvm.runtime.native.blas.matmul` inside the kernel (NumPy's BLAS, with
the GEMV, GEMM or row loop that costs least for the shape; ``np.dot`` when NumPy's BLAS is not
reachable), one call per batch matrix, writing straight into the stage's array; the lowering points
that array at the kernel's output when the epilogue (bias, activation) can run in place, so the
epilogue is one pass over the output in the same kernel. Float stride-1 convolutions with at least
`SHIFT_MIN_CHANNELS` input channels per group run one GEMM per kernel tap on row-strided windows of
the zero-padded input, accumulated in place by NumPy's BLAS: no column matrix at all. Other float
convolutions pack the input windows of each (image, group) into a column matrix (im2col, with the
padding as zero runs and unit-stride copies in between) and multiply it by the weight with one
GEMM. Integer matmul and convolution, and the pools, are reduce loops inlined into their consumer.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rvm.jit.compute import compute
from rvm.jit.kernel import KernelBuilder
from rvm.jit.scalar import convert, lit
from rvm.jit.te import Body, Scalar, Tensor, deps_of, idx, shape_tuple
from rvm.op import ops
from rvm.runtime.native import blas

BLAS_DTYPES = ("float32", "float64")
CONV_BLOCK = 1024  # output positions per im2col block, fewer past COL_BYTES (64 at least)
COL_BYTES = 1 << 21  # an im2col block's bytes at most: it stays in cache


def _matmul_dims(kb: KernelBuilder, a: Tensor, b: Tensor, dense: bool):
    """(a as >= 2-d dims, b as >= 2-d dims in (k, n) order, batch dims, result dims)."""
    a2 = a.dims if a.ndim >= 2 else ("1",) + a.dims
    if dense:
        b2 = (b.dims[1], b.dims[0])
    else:
        b2 = b.dims if b.ndim >= 2 else b.dims + ("1",)
    k1, k2 = a2[-1], b2[-2]
    if k1 != k2:
        kb.check(f"{k1} != {k2}", f"{kb.kernel}: {kb.op}: inner dimensions differ")
    batch = kb.broadcast_dims([a2[:-2], b2[:-2] if not dense else ()])
    full = tuple(batch) + (a2[-2], b2[-1])
    res = list(full)
    if not dense and b.ndim == 1:
        res.pop(-1)
    if a.ndim == 1:
        res.pop(-2 if (dense or b.ndim > 1) else -1)
    return a2, b2, tuple(batch), full, tuple(res)


def _matmul(dense: bool):
    def lower(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
        a, b = args
        a2, b2, batch, full, res = _matmul_dims(kb, a, b, dense)
        if out not in BLAS_DTYPES:
            return _dot_loops(kb, a, b, a2, b2, batch, res, out, dense)
        t = Tensor(res, out, kind="anchor")

        def fill() -> None:
            target = kb.buffer(res, out, t.array)
            t.array = target
            av = _view(kb, kb.materialize(a, out), a.dims, a2)
            bv = _view(kb, kb.materialize(b, out), b.dims, b.dims if dense else b2)
            ov = _view(kb, target, res, full)
            _emit_dots(kb, av, bv, ov, a2, b2, batch, full, dense)

        t.fill = fill
        return t

    return lower


def _view(kb: KernelBuilder, name: str, dims: Sequence[str], to: Sequence[str]) -> str:
    if tuple(dims) == tuple(to):
        return name
    view = kb.fresh("w")
    kb.root.lines.append(f"{view} = {name}.reshape({shape_tuple(to)})")
    return view


def _emit_dots(kb, av, bv, ov, a2, b2, batch, full, dense) -> None:
    m, k, n = full[-2], a2[-1], full[-1]
    kb.root.lines.append(f"if {k} == 0:")
    kb.root.lines.append(f"    {ov}[...] = 0")
    loop = Body(kb.root, None, f"elif {m} > 0 and {n} > 0:")

    if blas.AVAILABLE:
        kb.imports.add("from rvm.runtime.native.blas import matmul")

    def emit(body: Body, index: list[Scalar]) -> None:
        ai = kb.broadcast_index(a2[:-2], batch, index)
        bi = kb.broadcast_index(b2[:-2], batch, index) if not dense else []
        aref, bref, oref = _sub(av, ai), _sub(bv, bi), _sub(ov, index)
        if blas.AVAILABLE:
            body.lines.append(f"matmul({aref}, {bref}, {oref}, {dense})")
        else:
            body.lines.append(f"np.dot({aref}, {bref + '.T' if dense else bref}, {oref})")

    kb.loop_nest(loop, batch, emit)
    kb.root.lines.append(loop.header)
    kb.root.lines.extend(loop.render(1) or ["    pass"])


def _sub(name: str, index: Sequence[Scalar]) -> str:
    return f"{name}[{', '.join(i.code for i in index)}]" if index else name


def _dot_loops(kb, a, b, a2, b2, batch, res, out, dense) -> Tensor:
    """Integer (non-BLAS) matmul as an inlined reduce loop over k."""
    nb = len(batch)

    def loader(body: Body, index: Sequence[Scalar]) -> Scalar:
        full = list(index)
        if a.ndim == 1:
            full.insert(nb, idx(0))
        if not dense and b.ndim == 1:
            full.append(idx(0))
        i, j = full[nb], full[nb + 1]
        home = body.home(deps_of(*full))
        acc = kb.fresh("acc")
        home.lines.append(f"{acc} = {lit(0, out)}")
        inner = kb.open_loop(home, a2[-1])
        kk = idx(inner.var, inner.var)
        ai = kb.broadcast_index(a2[:-2], batch, full[:nb]) + [i, kk]
        bi = [j, kk] if dense else kb.broadcast_index(b2[:-2], batch, full[:nb]) + [kk, j]
        av = convert(kb.load(a, inner, ai[-a.ndim :]), out)
        bv = convert(kb.load(b, inner, bi[-b.ndim :]), out)
        inner.lines.append(f"{acc} += {av.code} * {bv.code}")
        kb.close_loop(inner)
        return Scalar(f"np.{out}({acc})", deps_of(*full), out)

    return Tensor(res, out, loader)


# -- convolution ---------------------------------------------------------------------------


def _conv_geometry(kb: KernelBuilder, attrs: dict, x: Tensor, w: Tensor, nsp: int):
    pads = attrs["padding"]
    geo = []
    for s in range(nsp):
        size, kern = x.dims[2 + s], w.dims[2 + s]
        st, dil = attrs["strides"][s], attrs["dilation"][s]
        lo, hi = pads[s], pads[s + nsp]
        span = kb.dim(f"{size} + {lo + hi} - {dil} * ({kern} - 1) - 1")
        kb.check(f"{span} < 0", f"{kb.kernel}: {kb.op}: the kernel is larger than the input")
        geo.append((size, kern, st, dil, lo, kb.dim(f"{span} // {st} + 1")))
    return geo


def _conv(nsp: int):
    def lower(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
        x, w = args
        groups = attrs["groups"]
        kb.check(
            f"{x.dims[1]} != {w.dims[1]} * {groups}",
            f"{kb.kernel}: {kb.op}: input channels do not match the weight and groups",
        )
        kb.check(
            f"{w.dims[0]} % {groups} != 0",
            f"{kb.kernel}: {kb.op}: output channels do not divide into groups",
        )
        geo = _conv_geometry(kb, attrs, x, w, nsp)
        dims = (x.dims[0], w.dims[0], *(g[5] for g in geo))
        if out not in BLAS_DTYPES:
            return _conv_loops(kb, x, w, geo, groups, dims, out)
        t = Tensor(dims, out, kind="anchor")

        def fill() -> None:
            t.array = kb.buffer(dims, out, t.array)
            xv, wv = kb.materialize(x, out), kb.materialize(w, out)
            if nsp == 1:
                xv = _view(kb, xv, x.dims, (x.dims[0], x.dims[1], "1", x.dims[2]))
                wv = _view(kb, wv, w.dims, (w.dims[0], w.dims[1], "1", w.dims[2]))
                g2 = [("1", "1", 1, 1, 0, "1"), *geo]
            else:
                g2 = geo
            args = (kb, xv, wv, t.array, x.dims[0], x.dims[1], w.dims[0], groups, g2, out)
            unit = all(st == 1 for st in attrs["strides"]) and min(attrs["padding"]) >= 0
            if blas.AVAILABLE and unit:
                _emit_shifted_gemms(*args)
            else:
                _emit_im2col(*args)

        t.fill = fill
        return t

    return lower


_IM2COL = """\
{K} = {cg} * {kh} * {kw}
{P} = {oh} * {ow}
{og} = {o} // {groups}
{wm} = {w}.reshape(({o}, {K}))
{y} = {out}.reshape(({n}, {o}, {P}))
{B} = min(max(64, {col_items} // {K}), {blk}, {P})
{col} = np.empty(({K}, {B}), dtype=np.{dt})
for n_ in range({n}):
    for g_ in range({groups}):
        for pb_ in range(0, {P}, {B}):
            pe_ = min(pb_ + {B}, {P})
            for c_ in range({cg}):
                for kh_ in range({kh}):
                    for kw_ in range({kw}):
                        r_ = (c_ * {kh} + kh_) * {kw} + kw_
                        off_ = kw_ * {dw} - {pl}
                        lo_ = min(max(0, -(off_ // {sw})), {ow})
                        hi_ = min(max(lo_, ({iw} - 1 - off_) // {sw} + 1), {ow})
                        p_ = pb_
                        while p_ < pe_:
                            oh_ = p_ // {ow}
                            w0_ = p_ - oh_ * {ow}
                            w1_ = min({ow}, w0_ + pe_ - p_)
                            b_ = p_ - pb_ - w0_
                            ih_ = oh_ * {sh} - {pt} + kh_ * {dh}
                            if ih_ < 0 or ih_ >= {ih}:
                                for q_ in range(w0_, w1_):
                                    {col}[r_, b_ + q_] = 0
                            else:
                                a_ = max(w0_, min(lo_, w1_))
                                z_ = max(a_, min(hi_, w1_))
                                for q_ in range(w0_, a_):
                                    {col}[r_, b_ + q_] = 0
                                ch_ = g_ * {cg} + c_
                                for q_ in range(a_, z_):
                                    {col}[r_, b_ + q_] = {x}[n_, ch_, ih_, q_ * {sw} + off_]
                                for q_ in range(z_, w1_):
                                    {col}[r_, b_ + q_] = 0
                            p_ += w1_ - w0_
{product}"""

# The block's product straight into the output's columns (row stride P), by NumPy's BLAS.
_IM2COL_GEMM = """\
            gemm(
                {wm}, g_ * {og} * {K}, {K}, {col}, 0, {col}.shape[1],
                {y}, (n_ * {o} + g_ * {og}) * {P} + pb_, {P}, {og}, pe_ - pb_, {K}, 0.0,
            )
"""

# Without it: np.dot of contiguous operands into a temporary, copied into the output.
_IM2COL_DOT = """\
            {tmp} = np.empty(({og}, pe_ - pb_), dtype=np.{dt})
            np.dot({wm}[g_ * {og}:(g_ + 1) * {og}], {col}[:, :pe_ - pb_].copy(), {tmp})
            for o_ in range({og}):
                for q_ in range(pe_ - pb_):
                    {y}[n_, g_ * {og} + o_, pb_ + q_] = {tmp}[o_, q_]
"""


def _conv_fields(x, w, out, n, c, o, groups, geo, dt) -> dict[str, object]:
    """The format fields the convolution templates share: operands, sizes and geometry."""
    (ih, kh, sh, dh, pt, oh), (iw, kw, sw, dw, pl, ow) = geo
    return dict(
        x=x, w=w, out=out, n=n, c=c, o=o, groups=groups, dt=dt,
        ih=ih, kh=kh, sh=sh, dh=dh, pt=pt, oh=oh, iw=iw, kw=kw, sw=sw, dw=dw, pl=pl, ow=ow,
    )  # fmt: skip


def _emit_im2col(kb, x, w, out, n, c, o, groups, geo, dt, into: list[str] | None = None) -> None:
    (_, kh, _, _, _, oh), (_, kw, _, _, _, ow) = geo
    names = {k: kb.fresh(k) for k in ("K", "P", "B", "wm", "y", "col", "og", "tmp")}
    cg = kb.dim(f"{c} // {groups}")
    fields = _conv_fields(x, w, out, n, c, o, groups, geo, dt)
    if blas.AVAILABLE:
        kb.imports.add("from rvm.runtime.native.blas import gemm")
    product = (_IM2COL_GEMM if blas.AVAILABLE else _IM2COL_DOT).format(**names, **fields)
    src = _IM2COL.format(
        **names,
        **fields,
        cg=cg,
        blk=CONV_BLOCK,
        col_items=COL_BYTES // np.dtype(dt).itemsize,
        product=product,
    )
    body = src.splitlines()
    # Skip the work for empty outputs or empty reductions (BLAS needs positive sizes).
    lines = kb.root.lines if into is None else into
    lines.append(f"if {n} * {o} * {oh} * {ow} > 0 and {c} * {kh} * {kw} == 0:")
    lines.append(f"    {out}[...] = 0")
    lines.append(f"elif {n} * {o} * {oh} * {ow} > 0:")
    lines.extend("    " + line for line in body)


# Stride-1 convolution as one GEMM per kernel tap (kh x kw GEMMs of depth cg), accumulated in
# place (beta = 1) by BLAS: output position p = oh * Wp + ow of the zero-padded input, flattened
# with its padded row width Wp, reads input position p + i * dh * Wp + j * dw for tap (i, j),
# so each tap's input matrix is a row-strided window of the padded input and needs no copy.
# Row p's last Wp - ow columns are wrap-around garbage, dropped when the result is copied out.
# Few input channels per group make shallow GEMMs: below SHIFT_MIN_CHANNELS, im2col instead.
SHIFT_MIN_CHANNELS = 16
_SHIFTED = """\
{cg} = {c} // {groups}
{og} = {o} // {groups}
if {cg} >= {min_c}:
    {Wp} = {ow} + {dw} * ({kw} - 1)
    {Hp} = {oh} + {dh} * ({kh} - 1)
    {L} = {Hp} * {Wp} + {dw} * ({kw} - 1)
    {P} = {oh} * {Wp}
    {wt} = np.empty(({kh}, {kw}, {o}, {cg}), dtype=np.{dt})
    for o_ in range({o}):
        for c_ in range({cg}):
            for i_ in range({kh}):
                for j_ in range({kw}):
                    {wt}[i_, j_, o_, c_] = {w}[o_, c_, i_, j_]
    {xp} = np.zeros(({cg}, {L}), dtype=np.{dt})
    {tmp} = np.empty(({og}, {P}), dtype=np.{dt})
    {y} = {out}.reshape(({n}, {o}, {oh}, {ow}))
    for n_ in range({n}):
        for g_ in range({groups}):
            for c_ in range({cg}):
                for h_ in range({ih}):
                    r_ = (h_ + {pt}) * {Wp} + {pl}
                    for q_ in range({iw}):
                        {xp}[c_, r_ + q_] = {x}[n_, g_ * {cg} + c_, h_, q_]
            for i_ in range({kh}):
                for j_ in range({kw}):
                    gemm(
                        {wt}, ((i_ * {kw} + j_) * {o} + g_ * {og}) * {cg}, {cg},
                        {xp}, i_ * {dh} * {Wp} + j_ * {dw}, {L},
                        {tmp}, 0, {P}, {og}, {P}, {cg}, 0.0 if i_ + j_ == 0 else 1.0,
                    )
            for o_ in range({og}):
                for h_ in range({oh}):
                    for q_ in range({ow}):
                        {y}[n_, g_ * {og} + o_, h_, q_] = {tmp}[o_, h_ * {Wp} + q_]
else:
"""


def _emit_shifted_gemms(kb, x, w, out, n, c, o, groups, geo, dt) -> None:
    """Stride-1 float convolution by shifted GEMMs, with im2col for shallow groups."""
    kb.imports.add("from rvm.runtime.native.blas import gemm")
    names = {k: kb.fresh(k) for k in ("cg", "og", "Wp", "Hp", "L", "P", "wt", "xp", "tmp", "y")}
    fields = _conv_fields(x, w, out, n, c, o, groups, geo, dt)
    src = _SHIFTED.format(**names, **fields, min_c=SHIFT_MIN_CHANNELS)
    lines = src.splitlines()
    body: list[str] = []
    _emit_im2col(kb, x, w, out, n, c, o, groups, geo, dt, into=body)
    kb.root.lines.extend(lines + ["    " + line for line in body])


def _conv_loops(kb, x, w, geo, groups, dims, out) -> Tensor:
    """Integer convolution as an inlined reduce loop over (channel, window)."""

    def loader(body: Body, index: Sequence[Scalar]) -> Scalar:
        n, o, sp = index[0], index[1], index[2:]
        home = body.home(deps_of(*index))
        acc = kb.fresh("acc")
        home.lines.append(f"{acc} = {lit(0, out)}")
        cg = kb.dim(f"{w.dims[1]}")
        og = kb.dim(f"{w.dims[0]} // {groups}")
        loop = kb.open_loop(home, cg)
        c = idx(f"({o.code} // {og}) * {cg} + {loop.var}", o, loop.var)
        inner, pos = loop, []
        for s, (size, kern, st, dil, lo, _) in enumerate(geo):
            inner = kb.open_loop(inner, kern)
            pos.append(
                (
                    inner.var,
                    idx(f"{sp[s].code} * {st} - {lo} + {inner.var} * {dil}", sp[s], inner.var),
                    size,
                )
            )
        conds = " and ".join(f"0 <= {p.code} < {size}" for _, p, size in pos)
        xv = convert(kb.load(x, inner, [n, c, *(p for _, p, _ in pos)]), out)
        widx = [o, idx(loop.var, loop.var), *(idx(v, v) for v, _, _ in pos)]
        wv = convert(kb.load(w, inner, widx), out)
        inner.lines.insert(0, f"if not ({conds}):")
        inner.lines.insert(1, "    continue")
        inner.lines.append(f"{acc} += {xv.code} * {wv.code}")
        for b in reversed(_chain(inner, home)):
            kb.close_loop(b)
        return Scalar(f"np.{out}({acc})", deps_of(*index), out)

    return Tensor(dims, out, loader)


def _chain(inner: Body, stop: Body) -> list[Body]:
    out = []
    b: Body | None = inner
    while b is not None and b is not stop:
        out.append(b)
        b = b.parent
    return list(reversed(out))


compute[ops.matmul] = _matmul(False)
compute[ops.dense] = _matmul(True)
compute[ops.conv1d] = _conv(1)
compute[ops.conv2d] = _conv(2)
