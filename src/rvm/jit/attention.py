"""The attention kernel: scores, scale, mask, softmax and the product with V in one kernel.

The kernel checks the shapes, makes its operands C-contiguous arrays (the mask of the scores'
dtype when added, bool when it selects) and calls the library's `rvm.kernels.attention`,
compiled once for every kernel: per (batch, head) and band of query rows, on rvm's pool, the
band's scores live in a buffer of their own -- ``q @ k^T`` by a GEMM (a dot product per key
for a decode step), one pass per row that scales and masks, the softmax (vectorized), and
``p @ v`` into the output rows. The whole (batch, heads, seq, kv_seq) scores tensor never
exists, nor do the scaled, masked and normalized copies a chain of kernels would write. A row
whose scores are all ``-inf`` gives ``masked_row`` (`rvm.op.attention`). Float32 and float64
(with NumPy's CBLAS); other dtypes fall back to numpy. ``precision="bf16"`` (float32): the
two products run on rvm's bf16 GEMM (`rvm.kernels.bf16gemm`).
"""

from __future__ import annotations

from rvm.jit.compute import compute
from rvm.jit.cond import all_of, ne
from rvm.jit.kernel import KernelBuilder
from rvm.jit.scalar import lit
from rvm.jit.stages import BLAS_DTYPES
from rvm.jit.te import Tensor, Unsupported, product, shape_tuple
from rvm.kernels import cblas
from rvm.op import ops


def _attention(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
    q, k, v, mask = args
    if out not in BLAS_DTYPES or k.dtype != out or v.dtype != out or not cblas.AVAILABLE:
        raise Unsupported(f"attention of {out}" + ("" if cblas.AVAILABLE else " without CBLAS"))
    heads = attrs.get("heads") or ()
    if heads:  # 3-d q, k, v whose heads' columns the kernel reads in place
        b, s = q.dims[:2]
        t, h, dv = k.dims[1], str(heads[0]), str(heads[2])
        checks = {"k's batch": (k.dims[0], b), "v's batch": (v.dims[0], b),
                  "v's length": (v.dims[1], t)}  # fmt: skip
    else:
        b, h, s, d = q.dims
        t, dv = k.dims[2], v.dims[3]
        checks = {
            "k's batch": (k.dims[0], b),
            "k's heads": (k.dims[1], h),
            "k's dim": (k.dims[3], d),
            "v's batch": (v.dims[0], b),
            "v's heads": (v.dims[1], h),
            "v's length": (v.dims[2], t),
        }
    for what, (x, y) in checks.items():
        if x != y:
            kb.check(ne(x, y), f"{kb.kernel}: attention: {what} does not match")
    for axis, (m, full) in enumerate(zip(mask.dims, (b, h, s, t))):
        if m != "1" and m != full:
            kb.check(
                all_of(ne(m, 1), ne(m, full)),
                f"{kb.kernel}: attention: mask axis {axis} does not broadcast to the scores",
            )
    merged = bool(attrs.get("merge_heads"))
    dims = (b, s, kb.dim(product((h, dv)))) if merged else (b, h, s, dv)
    result = Tensor(dims, out, kind="anchor")

    def fill() -> None:
        result.array = kb.buffer(dims, out, result.array)
        o = result.array
        if merged:  # the library writes (b, s, h, dv): the heads side by side in each row
            o = kb.fresh("w")
            kb.root.lines.append(f"{o} = {result.array}.reshape({shape_tuple((b, s, h, dv))})")
        qa, ka, va = (kb.materialize(x, out) for x in (q, k, v))
        ma = kb.materialize(mask, out if attrs["mask_kind"] == "add" else "bool")
        _emit(kb, attrs, qa, ka, va, ma, o, out)

    result.fill = fill
    return result


def _emit(kb, attrs, q, k, v, mask, o, dtype) -> None:  # type: ignore[no-untyped-def]
    kb.imports.add(("rvm.kernels.attention", "attention", None))
    select = attrs["mask_kind"] != "add"
    scale, fill = lit(attrs["scale"], dtype), lit(attrs["fill"], dtype)
    empty = lit(attrs["masked_row"], dtype)
    bf16 = attrs.get("precision") == "bf16" and dtype == "float32"
    args = f"{q}, {k}, {v}, {mask}, {o}, {scale}, {fill}, {empty}, {select}, {bf16}"
    merged = bool(attrs.get("merge_heads"))
    heads = attrs.get("heads") or ()
    if not heads:
        kb.root.lines.append(f"attention({args}, {merged})")
        return
    kb.imports.add(("rvm.kernels.attention", "attention_heads", None))
    _, d, _, *at = heads
    kb.root.lines.append(f"attention_heads({args}, {d}, ({at[0]}, {at[1]}, {at[2]}), {merged})")


compute[ops.attention] = _attention
