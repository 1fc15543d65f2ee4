"""Merging a loop nest's contiguous trailing axes: `merged_write`.

An elementwise tensor written to a C-contiguous array loops over every axis of its shape, so
at a 7x7 feature map its inner loop runs 7 times and never vectorizes. When every array it
reads either has the written shape on the trailing axes or is broadcast along all of them
(a per-channel scale ``(1, C, 1, 1)`` against ``(N, C, H, W)``), those axes index the same
elements as one axis of their product: the write loops over reshaped views with the trailing
axes merged (one inner loop of ``H * W``, or one flat loop when every operand has the full
shape).

The decision reads the lowering's facts, never source: each tensor's dims (symbolic sizes
compare by their name, so two sizes merge only when the kernel knows them equal) and the
recipe of an elementwise map, which `KernelBuilder.elemwise` records as data
(``info["elemwise"]``). A map is rebuilt over its merged operands; an operand broadcast along
the merged axes (a reduction's row statistics, a reshaped vector, a constant) is read at index
0 there, whatever computes it; arrays (parameters, constants, filled buffers such as an
anchor's output) are viewed reshaped. Anything else (an index map, a reduction with the full
shape) keeps the full nest.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rvm.jit.te import Body, Scalar, Tensor, idx, product, shape_tuple

if TYPE_CHECKING:
    from rvm.jit.kernel import KernelBuilder


def merged_write(kb: KernelBuilder, x: Tensor, name: str) -> tuple[Tensor, str] | None:
    """``x`` and the array ``name`` of its shape, both with the most trailing axes merged
    that every operand allows (at least two), as views; None when no two axes merge."""
    dims = x.dims
    if "elemwise" not in x.info:
        return None
    for m in range(len(dims), 1, -1):
        if sum(d != "1" for d in dims[-m:]) < 2 or not _mergeable(x, dims, m):
            continue
        out_dims = (*dims[:-m], kb.dim(product(dims[-m:]), "n"))
        # One view per array and shape: an epilogue updating its anchor's output in place
        # then reads and writes one view, which LLVM sees cannot overlap another.
        views: dict[tuple[str, tuple[str, ...]], str] = {}
        view = _view(kb, name, out_dims, views)
        return _merge(kb, x, dims, m, out_dims, views), view
    return None


def _view(kb: KernelBuilder, src: str, dims: tuple[str, ...], views: dict) -> str:
    """The array ``src`` reshaped to ``dims`` (made once per merge)."""
    key = (src, dims)
    if key not in views:
        views[key] = kb.fresh("w")
        kb.root.lines.append(f"{views[key]} = {src}.reshape({shape_tuple(dims)})")
    return views[key]


def _suffix(t: Tensor, dims: Sequence[str], m: int) -> str | None:
    """How ``t`` (aligned to ``dims`` by its last axes) covers their last ``m``: "full" (the
    same sizes), "broadcast" (size 1 or absent on all of them) or None (mixed)."""
    full = broadcast = True
    for k in range(1, m + 1):
        want = dims[-k]
        have = t.dims[-k] if k <= t.ndim else "1"
        if want == "1":
            continue
        full = full and have == want
        broadcast = broadcast and have == "1"
    return "full" if full else "broadcast" if broadcast else None


def _mergeable(t: Tensor, dims: Sequence[str], m: int) -> bool:
    kind = _suffix(t, dims, m)
    if kind == "broadcast":
        return True
    if kind != "full":
        return False
    recipe = t.info.get("elemwise")
    if recipe is not None:
        return all(_mergeable(a, dims, m) for a in recipe[1])
    return t.loader is None  # an array, or a buffer its stage fills


def _merge(
    kb: KernelBuilder, t: Tensor, dims: Sequence[str], m: int, out: Sequence[str], views: dict
) -> Tensor:
    """``t`` over the merged axes (`_mergeable` said it is)."""
    if _suffix(t, dims, m) == "broadcast":
        return _broadcast_view(kb, t, m)
    recipe = t.info.get("elemwise")
    if recipe is None:
        lead = t.dims[: max(t.ndim - m, 0)]
        new = (*lead, out[-1])
        view = _view(kb, kb.materialize(t), new, views)
        return Tensor(new, t.dtype, array=view, kind="array")
    fn, args, compute_dtype, arg_dtypes = recipe
    merged = [_merge(kb, a, dims, m, out, views) for a in args]
    return kb.elemwise(fn, t.dtype, merged, compute_dtype, arg_dtypes)


def _broadcast_view(kb: KernelBuilder, t: Tensor, m: int) -> Tensor:
    """``t``, size 1 on the merged axes, as a tensor with one size-1 axis in their place
    (none when it has no axis before them): its element at index 0 there."""
    keep = max(t.ndim - m, 0)
    new = (*t.dims[:keep], "1") if t.ndim > m else ()
    zeros = [idx(0)] * (t.ndim - keep)

    def loader(body: Body, index: Sequence[Scalar]) -> Scalar:
        return kb.load(t, body, [*index[:keep], *zeros])

    return Tensor(new, t.dtype, loader)
