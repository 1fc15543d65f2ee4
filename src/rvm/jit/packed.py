"""The anchor stage of ``dense_packed`` (`rvm.op.packed`): a product with a packed weight.

It calls `rvm.kernels.packed.dense` on a 2-d view of the input, writing straight into the
stage's array, so a fused epilogue (bias, activation) is one pass over the output in the
same kernel, as for the other float32 anchors (`rvm.jit.stages`).
"""

from __future__ import annotations

from rvm.jit.compute import compute
from rvm.jit.kernel import KernelBuilder
from rvm.jit.te import Tensor, Unsupported, shape_tuple
from rvm.op import ops


def _view(kb: KernelBuilder, name: str, dims: tuple, to: tuple) -> str:
    """``name`` reshaped from ``dims`` to ``to`` (itself when they are equal)."""
    if tuple(dims) == tuple(to):
        return name
    view = kb.fresh("w")
    kb.root.lines.append(f"{view} = {name}.reshape({shape_tuple(to)})")
    return view


def _dense(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
    x, w = args
    if out != "float32" or x.dtype != "float32" or w.dtype != "float32":
        raise Unsupported(f"{kb.op} of {x.dtype} and {w.dtype} to {out}")
    units = attrs["units"]
    rows = kb.dim(" * ".join(x.dims[:-1]) or "1")
    dims = (*x.dims[:-1], str(units))
    t = Tensor(dims, out, kind="anchor")

    def fill() -> None:
        t.array = kb.buffer(dims, out, t.array)
        xv = _view(kb, kb.materialize(x, out), x.dims, (rows, x.dims[-1]))
        wv = kb.materialize(w)
        ov = _view(kb, t.array, dims, (rows, str(units)))
        kb.imports.add(("rvm.kernels.packed", "dense", "packed_dense"))
        kb.root.lines.append(f"packed_dense({xv}, {wv}, {ov}, {units})")

    t.fill = fill
    return t


compute[ops.dense_packed] = _dense
