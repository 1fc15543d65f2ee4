"""The attention kernel: scores, scale, mask, softmax and the product with V in one kernel.

Per (batch, head), one head's scores live in an (seq, kv_seq) buffer: ``q @ k^T`` by the
BLAS stage's `matmul` (a GEMV per query row for a decode step, a GEMM for a prompt), then one
pass per row scales, masks and finds the row's maximum, a second takes exponentials and their
sum and a third normalizes, and ``p @ v`` writes the head's output rows in place. The whole
(batch, heads, seq, kv_seq) scores tensor never exists, nor do the scaled, masked and
normalized copies a chain of kernels would write. A row whose scores are all ``-inf`` gives
``masked_row`` (`rvm.op.attention`). Float32 and float64 (BLAS); other dtypes fall back to
numpy.
"""

from __future__ import annotations

from rvm.jit.compute import compute
from rvm.jit.cond import all_of, ne
from rvm.jit.kernel import KernelBuilder
from rvm.jit.scalar import lit
from rvm.jit.stages import BLAS_DTYPES
from rvm.jit.te import Tensor, Unsupported
from rvm.kernels import cblas
from rvm.op import ops


def _attention(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
    q, k, v, mask = args
    if out not in BLAS_DTYPES or k.dtype != out or v.dtype != out:
        raise Unsupported(f"attention of {out}")
    b, h, s, d = q.dims
    t = k.dims[2]
    for what, (x, y) in {
        "k's batch": (k.dims[0], b),
        "k's heads": (k.dims[1], h),
        "k's dim": (k.dims[3], d),
        "v's batch": (v.dims[0], b),
        "v's heads": (v.dims[1], h),
        "v's length": (v.dims[2], t),
    }.items():
        if x != y:
            kb.check(ne(x, y), f"{kb.kernel}: attention: {what} does not match")
    for axis, (m, full) in enumerate(zip(mask.dims, (b, h, s, t))):
        if m != "1" and m != full:
            kb.check(
                all_of(ne(m, 1), ne(m, full)),
                f"{kb.kernel}: attention: mask axis {axis} does not broadcast to the scores",
            )
    dims = (b, h, s, v.dims[3])
    result = Tensor(dims, out, kind="anchor")

    def fill() -> None:
        result.array = kb.buffer(dims, out, result.array)
        qa, ka, va = (kb.materialize(x, out) for x in (q, k, v))
        ma = kb.materialize(mask)
        _emit(kb, attrs, qa, ka, va, ma, result.array, mask.dims, (b, h, s, t), out)

    result.fill = fill
    return result


DEAD = -1e30
"""A mask value at or below this hides its key: its exponential is exactly 0 next to any key
a row keeps (exporters hide keys with -inf or the dtype's lowest value)."""


def _dead(attrs: dict) -> str | None:
    """The test of a mask element that hides its key for certain, None when no element does
    (a select mask whose fill is a real score)."""
    if attrs["mask_kind"] == "add":
        return f"mrow[j] <= {DEAD!r}"
    return "not mrow[j]" if attrs["fill"] <= DEAD else None


def _live_keys(attrs: dict, t: str, ms: str) -> str:
    """Source of ``te``: the keys up to the last one some query row keeps; ``t`` when a row
    keeps none (its result must then be computed over every key) or none can be hidden. The
    keys after it add exact zeros to every row, so they are skipped: a decode step over a
    preallocated cache reads only the slots written so far."""
    dead = _dead(attrs)
    if dead is None:
        return f"te = {t}"
    return f"""\
te = 0
for i in range({ms}):
    mrow = mhead[i]
    last = -1
    for j in range({t} - 1, -1, -1):
        if not ({dead}):
            last = j
            break
    if last < 0:
        te = {t}
        break
    if last + 1 > te:
        te = last + 1"""


def _emit(kb, attrs, q, k, v, mask, o, mdims, dims, dtype) -> None:  # type: ignore[no-untyped-def]
    b, h, s, t = dims
    mb, mh, ms, mt = mdims
    scale = lit(attrs["scale"], dtype)
    empty = lit(attrs["masked_row"], dtype)
    if attrs["mask_kind"] == "add":
        masked = "x + mrow[j * jstep]"
    else:
        masked = f"x if mrow[j * jstep] else {lit(attrs['fill'], dtype)}"
    if cblas.AVAILABLE:
        kb.imports.add(("rvm.kernels.blas", "matmul", None))
        scores = "matmul(q[bi, hi], kh, sc, True)"
        product = "matmul(sc, vh, o[bi, hi], False)"
    else:
        scores = "np.dot(q[bi, hi], kh.T, sc)"
        product = "np.dot(sc, vh, o[bi, hi])"
    live = _live_keys(attrs, str(t), f"min({s}, {ms})").replace("\n", "\n        ")
    lines = f"""\
q, k, v, o, mk = {q}, {k}, {v}, {o}, {mask}
scf = np.empty({s} * {t}, dtype=np.{dtype})
empty_rows = np.zeros({s}, dtype=np.bool_)
jstep = 1 if {mt} != 1 else 0
te = {t}
for bh in range({b} * {h}):
    bi = bh // {h}
    hi = bh - bi * {h}
    if {s} == 0:
        continue
    if {t} == 0:
        o[bi, hi, :, :] = {empty}
        continue
    mhead = mk[min(bi, {mb} - 1), min(hi, {mh} - 1)]
    if jstep == 1 and (hi == 0 or {mh} != 1):
        {live}
    sc = scf[: {s} * te].reshape({s}, te)
    kh = k[bi, hi, :te]
    vh = v[bi, hi, :te]
    {scores}
    for i in range({s}):
        mrow = mhead[min(i, {ms} - 1)]
        top = -np.inf
        for j in range(te):
            x = sc[i, j] * {scale}
            x = {masked}
            sc[i, j] = x
            if x > top:
                top = x
        empty_rows[i] = top == -np.inf
        if empty_rows[i]:
            sc[i, :] = 0
            continue
        total = 0.0
        for j in range(te):
            e = np.exp(sc[i, j] - top)
            sc[i, j] = e
            total += e
        inv = 1.0 / total
        for j in range(te):
            sc[i, j] = sc[i, j] * inv
    {product}
    for i in range({s}):
        if empty_rows[i]:
            o[bi, hi, i, :] = {empty}
"""
    kb.root.lines.extend(lines.splitlines())


compute[ops.attention] = _attention
