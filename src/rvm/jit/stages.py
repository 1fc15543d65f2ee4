"""Anchor stages: matmul, dense, conv1d/conv2d (BLAS) and the window pools.

Float matmul and dense call `rvm.kernels.blas.matmul` inside the kernel through its entry
point (`rvm.kernels.entry`: NumPy's BLAS, with the GEMV, GEMM or row loop that costs least
for the shape, compiled once for all kernels; ``np.dot`` when NumPy's BLAS is not
reachable), one call per batch matrix, writing straight into the stage's array; the
lowering points that array at the kernel's output when the epilogue (bias, activation) can
run in place, so the epilogue is one pass over the output in the same kernel. Float
convolutions call `rvm.kernels.conv.conv2d` (1x1 GEMMs, depthwise loops or im2col),
compiled once for all kernels rather than into each: a kernel only checks shapes, makes the
call and runs its epilogue. Integer matmul and convolution are reduce loops inlined
into their consumer.
"""

from __future__ import annotations

from collections.abc import Sequence

from rvm.jit.compute import compute
from rvm.jit.cond import lt, mod, mul, ne
from rvm.jit.kernel import KernelBuilder
from rvm.jit.scalar import convert, lit
from rvm.jit.te import (
    Body,
    Scalar,
    Tensor,
    Unsupported,
    deps_of,
    idx,
    int_args,
    is_int,
)
from rvm.jit.views import array_view
from rvm.kernels import cblas, entry
from rvm.op import ops

BLAS_DTYPES = ("float32", "float64")


def _matmul_dims(kb: KernelBuilder, a: Tensor, b: Tensor, dense: bool):
    """(a as >= 2-d dims, b as >= 2-d dims in (k, n) order, batch dims, result dims)."""
    a2 = a.dims if a.ndim >= 2 else ("1",) + a.dims
    if dense:
        b2 = (b.dims[1], b.dims[0])
    else:
        b2 = b.dims if b.ndim >= 2 else b.dims + ("1",)
    k1, k2 = a2[-1], b2[-2]
    if k1 != k2:
        kb.check(ne(k1, k2), f"{kb.kernel}: {kb.op}: inner dimensions differ")
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
            av = array_view(kb, kb.materialize(a, out), a.dims, a2)
            bv = array_view(kb, kb.materialize(b, out), b.dims, b.dims if dense else b2)
            ov = array_view(kb, target, res, full)
            _emit_dots(kb, av, bv, ov, a2, b2, batch, full, dense, out)

        t.fill = fill
        return t

    return lower


def _emit_dots(kb, av, bv, ov, a2, b2, batch, full, dense, dtype) -> None:
    m, k, n = full[-2], a2[-1], full[-1]
    kb.root.lines.append(f"if {k} == 0:")
    kb.root.lines.append(f"    {ov}[...] = 0")
    # not an elif: the loop nest may emit broadcast flags at the root before its header
    loop = Body(kb.root, None, f"if {k} != 0 and {m} > 0 and {n} > 0:")

    def emit(body: Body, index: list[Scalar]) -> None:
        ai = kb.broadcast_index(a2[:-2], batch, index)
        bi = kb.broadcast_index(b2[:-2], batch, index) if not dense else []
        aref, bref, oref = _sub(av, ai), _sub(bv, bi), _sub(ov, index)
        if cblas.AVAILABLE:  # `rvm.kernels.blas.matmul` through its entry point
            variant = entry.variant([dtype] * 3)
            kb.call_entry("matmul", (aref, bref, oref), (int(dense),), variant, body)
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


def _plus(dim: str, c: int) -> str:
    """Source of ``dim + c`` (``dim`` itself for 0): fewer statements to compile, and equal
    sizes stay one name (a residual add after a same-size convolution broadcasts nothing)."""
    return f"{dim} + {c}" if c > 0 else f"{dim} - {-c}" if c < 0 else dim


def _conv_geometry(kb: KernelBuilder, attrs: dict, x: Tensor, w: Tensor, nsp: int):
    pads = attrs["padding"]
    geo = []
    for s in range(nsp):
        size, kern = x.dims[2 + s], w.dims[2 + s]
        st, dil = attrs["strides"][s], attrs["dilation"][s]
        lo, hi = pads[s], pads[s + nsp]
        if is_int(kern):  # folded: a same-size convolution's output is its input's size
            span = _plus(size, lo + hi - 1 - dil * (int(kern) - 1))
        else:
            span = _plus(f"{size} - {dil} * ({kern} - 1)", lo + hi - 1)
        kb.check(lt(span, 0), f"{kb.kernel}: {kb.op}: the kernel is larger than the input")
        out = _plus(size, lo + hi - dil * (int(kern) - 1)) if st == 1 and is_int(kern) else None
        out = kb.dim(out or f"({span}) // {st} + 1")
        geo.append((size, kern, st, dil, (lo, hi), out))
    return geo


def _conv(nsp: int):
    def lower(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
        x, w = args
        groups = kb.resolve(attrs["groups"])  # depthwise: the channels' size
        if groups != "1" or x.dims[1] != w.dims[1]:
            kb.check(
                ne(x.dims[1], mul(w.dims[1], groups)),
                f"{kb.kernel}: {kb.op}: input channels do not match the weight and groups",
            )
        if groups != "1":
            kb.check(
                ne(mod(w.dims[0], groups), 0),
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
                xv = array_view(kb, xv, x.dims, (x.dims[0], x.dims[1], "1", x.dims[2]))
                wv = array_view(kb, wv, w.dims, (w.dims[0], w.dims[1], "1", w.dims[2]))
                g2 = [("1", "1", 1, 1, (0, 0), "1"), *geo]
            else:
                g2 = geo
            ov = t.array
            if nsp == 1:
                ov = array_view(kb, ov, dims, (dims[0], dims[1], "1", dims[2]))
            t.info["fused"] = _emit_conv(kb, xv, wv, ov, groups, g2, out, t.info.get("epilogue"))

        t.fill = fill
        return t

    return lower


def _emit_conv(kb, x, w, out, groups, geo, dtype: str, epilogue=None) -> bool:
    """A call of the convolution library (`rvm.kernels.conv`) on 4-d views of ``dtype``, and
    of its ``epilogue`` when one is given (`rvm.jit.lower`: the 4-d views of the bias and the
    residual, each ``out`` when absent, and the pass's flags) and the library takes it with
    the convolution (float32: ``conv2d_fused``): whether it did."""
    (_, _, sh, dh, (pt, pb), _), (_, _, sw, dw, (pl, pr), _) = geo
    params = (groups, sh, sw, dh, dw, pt, pl, pb, pr)
    if cblas.AVAILABLE and epilogue is not None and dtype == "float32":
        bias, res, flags = epilogue
        arrays = (x, w, out, bias, res)
        kb.call_entry("conv2d_fused", arrays, (*params, *flags), entry.variant([dtype] * 5))
        return True
    if cblas.AVAILABLE:
        kb.call_entry("conv2d", (x, w, out), params, dtype)
    else:
        call = f"{x}, {w}, {out}, {int_args(groups, sh, sw, dh, dw, pt, pl, pb, pr)}"
        kb.imports.add(("rvm.kernels.conv", "conv2d_dot", None))
        kb.root.lines.append(f"conv2d_dot({call})")
    return False


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
        for s, (size, kern, st, dil, (lo, _), _) in enumerate(geo):
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


def _conv_packed(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
    """conv2d on a weight packed in panels (`rvm.op.conv2d_packed`): the library's direct
    convolution (`rvm.kernels.direct`), its weight viewed 4-d (groups * panels, kh, kw,
    c / groups * panel) for the entry point, which checks the whole geometry again; with
    the kernel's epilogue (``info["epilogue"]``, `rvm.jit.lower`) through
    ``conv2d_packed_fused``, which applies it."""
    x, w = args
    if out != "float32" or x.dtype != "float32" or w.dtype != "float32" or x.ndim != 4:
        raise Unsupported(f"conv2d_packed of {x.dtype} by {w.dtype} weights")
    groups = kb.resolve(attrs["groups"])
    kb.check(
        ne(x.dims[1], mul(w.dims[4], groups)),
        f"{kb.kernel}: {kb.op}: input channels do not match the weight and groups",
    )
    oihw = Tensor((str(attrs["channels"]), w.dims[4], w.dims[2], w.dims[3]), w.dtype)
    geo = _conv_geometry(kb, attrs, x, oihw, 2)
    dims = (x.dims[0], str(attrs["channels"]), *(g[5] for g in geo))
    t = Tensor(dims, out, kind="anchor")

    def fill() -> None:
        t.array = kb.buffer(dims, out, t.array)
        xv, wv = kb.materialize(x, out), kb.materialize(w, out)
        wide = (mul(w.dims[0], w.dims[1]).code, mul(w.dims[4], w.dims[5]).code)
        flat = (wide[0], w.dims[2], w.dims[3], wide[1])
        w4 = array_view(kb, wv, w.dims, flat)
        (_, _, sh, dh, (pt, pb), _), (_, _, sw, dw, (pl, pr), _) = geo
        params = (groups, sh, sw, dh, dw, pt, pl, pb, pr, w.dims[5])
        epilogue = t.info.get("epilogue")  # `rvm.jit.lower`'s, applied in the tiles' registers
        if epilogue is None:
            kb.call_entry("conv2d_packed", (xv, w4, t.array), params, out)
            return
        bias, res, flags = epilogue
        arrays = (xv, w4, t.array, bias, res)
        kb.call_entry("conv2d_packed_fused", arrays, (*params, *flags), entry.variant([out] * 5))
        t.info["fused"] = True

    t.fill = fill
    return t


compute[ops.conv2d_packed] = _conv_packed


def _conv_winograd(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
    """conv2d by Winograd's F(2x2, 3x3) on a weight transformed at build time
    (`rvm.op.conv2d_winograd`): the library's entry point ``conv2d_winograd``
    (`rvm.kernels.conv`), the weight viewed (16, o, c, 1) (float32) or (16, o, ceil(c / 2), 1)
    (int32 words of bf16 pairs, `rvm.kernels.winograd.transform_bf16`: its GEMMs in bf16),
    which checks the whole geometry again, with the kernel's epilogue (``info["epilogue"]``,
    `rvm.jit.lower`) applied in its output transform."""
    x, u = args
    pairs = attrs.get("precision") == "bf16"  # U of bf16 pairs: `winograd.transform_bf16`
    if out != "float32" or x.dtype != "float32" or u.dtype != ("int32" if pairs else out):
        raise Unsupported(f"conv2d_winograd of {x.dtype} by {u.dtype} weights")
    if x.ndim != 4:
        raise Unsupported(f"conv2d_winograd of a {x.ndim}-d input")
    if not pairs:
        kb.check(
            ne(x.dims[1], u.dims[2]),
            f"{kb.kernel}: {kb.op}: input channels do not match the weight",
        )
    oihw = Tensor((u.dims[1], x.dims[1], "3", "3"), out)  # U's depth: c, or its pairs
    full = {**attrs, "strides": (1, 1), "dilation": (1, 1)}
    geo = _conv_geometry(kb, full, x, oihw, 2)
    dims = (x.dims[0], u.dims[1], *(g[5] for g in geo))
    t = Tensor(dims, out, kind="anchor")

    def fill() -> None:
        t.array = kb.buffer(dims, out, t.array)
        xv, uv = kb.materialize(x, out), kb.materialize(u, u.dtype)
        u4 = array_view(kb, uv, u.dims, (*u.dims, "1"))
        (_, _, _, _, (pt, pb), _), (_, _, _, _, (pl, pr), _) = geo
        bias, res, flags = t.info.get("epilogue") or (t.array, t.array, (0, 0, 0))
        arrays = (xv, u4, t.array, bias, res)
        variant = entry.variant([out, u.dtype, out, out, out])
        params = (pt, pl, pb, pr, *flags, int(pairs))
        kb.call_entry("conv2d_winograd", arrays, params, variant)
        t.info["fused"] = True

    t.fill = fill
    return t


compute[ops.conv2d_winograd] = _conv_winograd
