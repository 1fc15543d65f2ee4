"""Anchor stages of the bf16 products: ``dense_bf16``, ``dense_packed_bf16`` and ``conv2d_bf16``
(`rvm.op.bf16`), and of the ops on their pair planes (`rvm.op.bf16planes`): the max pool,
``max_pool2d_pairs``, and a float32 image rounded into a plane, ``pair_image``.

Each calls the kernel library's bf16 entry (`rvm.kernels.bf16`, `rvm.kernels.bf16conv`: the
activations rounded and packed per call, the weight's bf16 bits as they are, float32 sums;
through their C entry points, `rvm.kernels.bf16entry`, compiled once) on 2-d or NCHW views,
writing straight into the stage's array, so a fused epilogue (bias, activation) is one pass
over the output in the same kernel, as for the float32 anchors (`rvm.jit.stages`).
``dense_packed_bf16`` is `rvm.jit.packed`'s stage calling the bf16 entry
(`rvm.kernels.bf16dense`): its bias, activation and residual run in the GEMM's tiles; so do
``conv2d_bf16``'s bias, residual and activation (`rvm.kernels.bf16conv`).
"""

from __future__ import annotations

from rvm.jit.compute import compute
from rvm.jit.cond import lt, mod, ne
from rvm.jit.kernel import KernelBuilder
from rvm.jit.packed import product
from rvm.jit.te import Tensor, Unsupported
from rvm.jit.views import array_view
from rvm.kernels import entry
from rvm.kernels.reference.packed import ACTIVATIONS
from rvm.op import ops
from rvm.op.bf16 import INPUTS, LAYOUTS, PAIRINGS, PROLOGUES, split_operands
from rvm.op.bf16planes import pooled_size

# The dtypes of the entry points' arrays (`rvm.kernels.bf16entry`): float32 x, the int16 bits
# of the weight, float32 out (and the convolution's float32 bias, residual -- a pair plane's
# words viewed as float32 where it is one -- and prologue's affine).
_VARIANT = ("float32", "int16", "float32", "float32", "float32", "float32")


_NO_RESIDUAL = "np.empty((0, 0, 0, 0), np.float32)"


def _packed(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
    if args[1].dtype != "int32":
        raise Unsupported(f"{kb.op} of a {args[1].dtype} weight (int32 bf16 pairs expected)")
    return product(kb, attrs, args, out, ("rvm.kernels.bf16dense", "dense", "bf16_packed_dense"))


def _check(kb: KernelBuilder, x: Tensor, w: Tensor, out: str) -> None:
    if out != "float32" or x.dtype != "float32" or w.dtype != "int16":
        raise Unsupported(f"{kb.op} of {x.dtype} and {w.dtype} to {out}")


def _dense(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
    x, w = args
    _check(kb, x, w, out)
    rows = kb.dim(" * ".join(x.dims[:-1]) or "1")
    k = x.dims[-1]
    if not k.isdigit():  # a static depth is the type rule's to check; the entry checks none
        depth = kb.dim(f"{k} + {k} % 2")
        kb.check(ne(w.dims[1], depth), f"{kb.kernel}: {kb.op}: the weight's depth is not x's")
    dims = (*x.dims[:-1], w.dims[0])
    t = Tensor(dims, out, kind="anchor")

    def fill() -> None:
        t.array = kb.buffer(dims, out, t.array)
        xv = array_view(kb, kb.materialize(x, out), x.dims, (rows, x.dims[-1]))
        wv = kb.materialize(w)
        ov = array_view(kb, t.array, dims, (rows, w.dims[0]))
        exact = INPUTS.index(attrs.get("input", "bf16"))  # 1: x as it is, not rounded
        kb.call_entry("dense_bf16", (xv, wv, ov), (exact,), entry.variant(_VARIANT[:3]))

    t.fill = fill
    return t


def _conv(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
    x, w = args[:2]
    source, plane = attrs.get("source", ()), attrs.get("plane", ())
    prologue = attrs.get("prologue", "none")
    # a pair plane in or out (`rvm.op.bf16`): int32 words, passed to the entry as float32
    planes = ("int32" if source else "float32", "int32" if plane else "float32")
    if (x.dtype, out) != planes or w.dtype != "int16":
        raise Unsupported(f"{kb.op} of {x.dtype} and {w.dtype} to {out}")
    residual_plane, source_at = attrs.get("residual_plane", ()), attrs.get("source_at", ())
    b, r, a = split_operands(args[2:], prologue)
    if any(t is not None and t.dtype != "float32" for t in (b, a)) or (
        r is not None and r.dtype != ("int32" if residual_plane else "float32")
    ):
        raise Unsupported(f"{kb.op} with a bias or residual of another dtype")
    act = ACTIVATIONS.index(attrs.get("activation", "none"))
    (kh, kw), (sh, sw), (dh, dw) = attrs["kernel"], attrs["strides"], attrs["dilation"]
    pt, pl, pb, pr = attrs["padding"]
    image = (x.dims[1], x.dims[2], x.dims[3]) if not source else tuple(str(v) for v in source)
    spatial = []
    for size, k, s, d, lo, hi in ((image[1], kh, sh, dh, pt, pb), (image[2], kw, sw, dw, pl, pr)):
        span = kb.dim(f"{size} + {lo + hi - 1 - d * (k - 1)}")
        kb.check(lt(span, 0), f"{kb.kernel}: {kb.op}: the kernel is larger than the input")
        spatial.append(kb.dim(f"{span} // {s} + 1"))
    groups = attrs["groups"]
    if groups != 1:
        kb.check(ne(mod(x.dims[1], groups), 0), f"{kb.kernel}: {kb.op}: channels vs groups")
    pairing = PAIRINGS.index(attrs.get("pairing", "channels"))
    if not image[0].isdigit():  # as for dense: in channel pairs (`rvm.op.bf16.pair_depth`)
        cg = kb.dim(f"{image[0]} // {groups}")
        depth = kb.dim(f"({cg} + {cg} % 2) * {kh * kw}")
        if pairing == 1:  # an odd group's last channel: kh * ceil(kw / 2) pairs
            depth = kb.dim(f"({cg} - {cg} % 2) * {kh * kw} + {cg} % 2 * {2 * kh * ((kw + 1) // 2)}")
        kb.check(ne(w.dims[1], depth), f"{kb.kernel}: {kb.op}: the weight's depth is not x's")
    dims = (x.dims[0], w.dims[0], *spatial)
    if plane:
        co = w.dims[0]
        pairs = str((int(co) + 1) // 2) if co.isdigit() else kb.dim(f"({co} + 1) // 2")
        dims = (x.dims[0], pairs, str(plane[2]), str(plane[3]))
        if attrs.get("plane_layout", "channels") == "positions":
            dims = (x.dims[0], str(plane[2]), str(plane[3]), pairs)
    # the planes laid out as positions by channel pairs: bit 0 the input's, bit 1 the output's,
    # bit 2 the residual's
    orders = sum(
        1 << i
        for i, key in enumerate(("source_layout", "plane_layout", "residual_layout"))
        if LAYOUTS.index(attrs.get(key, "channels")) == 1
    )
    t = Tensor(dims, out, kind="anchor")

    def fill() -> None:
        t.array = kb.buffer(dims, out, t.array)
        xv, wv = kb.materialize(x, planes[0]), kb.materialize(w)
        bias = kb.materialize(b) if b is not None else "np.empty(0, np.float32)"
        res = _NO_RESIDUAL
        if r is not None and residual_plane:  # a pair plane's words, as float32
            res = _as_floats(kb, kb.materialize(r, "int32"))
        elif r is not None:
            res = kb.materialize(r, "float32")
        affine = kb.materialize(a) if a is not None else "np.empty((0, 0), np.float32)"
        params = (groups, sh, sw, dh, dw, pt, pl, kh, kw, act, attrs.get("panel", 0))
        params += (*(plane[:2] or (0, 0)), *spatial) if plane else (0, 0, 0, 0)
        params += tuple(source) if source else (0, 0, 0)
        params += (PROLOGUES.index(prologue), pairing)
        params += (1, *residual_plane) if residual_plane else (0, 0, 0)
        params += (1, *source_at) if source_at else (0, 0, 0)
        params += (orders,)
        ov = t.array
        if source:
            xv = _as_floats(kb, xv)
        if plane:
            ov = _as_floats(kb, ov)
        arrays = (xv, wv, ov, bias, res, affine)
        kb.call_entry("conv2d_bf16", arrays, params, entry.variant(_VARIANT))

    t.fill = fill
    return t


def _as_floats(kb: KernelBuilder, array: str) -> str:
    """The int32 pair plane ``array`` viewed as float32 (the entry's dtype; the kernel reads
    its words as bits)."""
    name = kb.fresh("f")
    kb.root.lines.append(f"{name} = np.ascontiguousarray({array}).view(np.float32)")
    return name


def _pool(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
    """``max_pool2d_pairs``: `rvm.kernels.bf16pool` through its entry point, the plane's words
    (and a plane out's) passed as float32 bits."""
    (x,) = args
    source, source_at, plane = attrs["source"], attrs["source_at"], attrs["plane"]
    if x.dtype != "int32" or out != ("int32" if plane else "float32"):
        raise Unsupported(f"{kb.op} of {x.dtype} to {out}")
    (kh, kw), (sh, sw), (dh, dw) = attrs["pool_size"], attrs["strides"], attrs["dilation"]
    oh, ow = pooled_size(attrs)
    c = source[0]
    dims = (x.dims[0], str(c), str(oh), str(ow))
    if plane:
        dims = (x.dims[0], str((c + 1) // 2), str(plane[2]), str(plane[3]))
    t = Tensor(dims, out, kind="anchor")

    def fill() -> None:
        t.array = kb.buffer(dims, out, t.array)
        xv = _as_floats(kb, kb.materialize(x, "int32"))
        ov = _as_floats(kb, t.array) if plane else t.array
        out_at = plane[:2] or (-1, 0)  # -1: float32 NCHW out
        params = (c, source[1], source[2], *source_at, kh, kw, sh, sw, dh, dw,
                  *attrs["padding"][:2], oh, ow, *out_at, int(attrs["signed"]))  # fmt: skip
        kb.call_entry("max_pool2d_pairs", (xv, ov), params, entry.variant(["float32"] * 2))

    t.fill = fill
    return t


def _pair_image(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
    """``pair_image``: `rvm.kernels.bf16planes`' entry point, the plane's words passed as
    float32 bits."""
    (x,) = args
    if x.dtype != "float32" or out != "int32":
        raise Unsupported(f"{kb.op} of {x.dtype} to {out}")
    pt, pl, hq, wq = attrs["plane"]
    dims = (x.dims[0], kb.dim(f"({x.dims[1]} + 1) // 2"), str(hq), str(wq))
    t = Tensor(dims, out, kind="anchor")

    def fill() -> None:
        t.array = kb.buffer(dims, out, t.array)
        xv = kb.materialize(x, "float32")
        kb.call_entry("pair_image", (xv, _as_floats(kb, t.array)), (pt, pl), "float32")

    t.fill = fill
    return t


compute[ops.dense_bf16] = _dense
compute[ops.pair_image] = _pair_image
compute[ops.max_pool2d_pairs] = _pool
compute[ops.conv2d_bf16] = _conv
compute[ops.dense_packed_bf16] = _packed
