"""The anchor stage of ``dense_packed`` (`rvm.op.packed`): a product with a packed weight.

It calls `rvm.kernels.packed.dense` on a 2-d view of the input, writing straight into the
stage's array. The op's own bias and activation run inside that call, per tile on the
threads that computed it; any further epilogue fused into the kernel (a residual add) is one
pass over the output in the same kernel, as for the other float32 anchors (`rvm.jit.stages`).
"""

from __future__ import annotations

from rvm.jit.compute import compute
from rvm.jit.kernel import KernelBuilder
from rvm.jit.te import Tensor, Unsupported
from rvm.jit.views import array_view
from rvm.kernels.reference.packed import ACTIVATIONS
from rvm.op import ops


def _dense(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
    x, w = args[:2]
    if out != "float32" or any(a.dtype != "float32" for a in args):
        raise Unsupported(f"{kb.op} of {', '.join(a.dtype for a in args)} to {out}")
    act = ACTIVATIONS.index(attrs["activation"])
    units = attrs["units"]
    rows = kb.dim(" * ".join(x.dims[:-1]) or "1")
    dims = (*x.dims[:-1], str(units))
    t = Tensor(dims, out, kind="anchor")

    def fill() -> None:
        t.array = kb.buffer(dims, out, t.array)
        xv = array_view(kb, kb.materialize(x, out), x.dims, (rows, x.dims[-1]))
        wv = kb.materialize(w)
        bias = kb.materialize(args[2]) if len(args) == 3 else "np.empty(0, np.float32)"
        ov = array_view(kb, t.array, dims, (rows, str(units)))
        kb.imports.add(("rvm.kernels.packed", "dense", "packed_dense"))
        kb.root.lines.append(f"packed_dense({xv}, {wv}, {ov}, {units}, {bias}, {act})")

    t.fill = fill
    return t


compute[ops.dense_packed] = _dense
