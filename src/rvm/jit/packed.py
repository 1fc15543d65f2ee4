"""The anchor stage of ``dense_packed`` (`rvm.op.packed`): a product with a packed weight.

It calls `rvm.kernels.packed.dense` through its entry point (`rvm.kernels.entry`, compiled
once for all kernels) on a 2-d view of the input, writing straight into the stage's array.
The op's own bias, activation and residual run inside that call, per tile on the threads
that computed it. A residual of the product's shape is read there; one that
broadcasts (a shape known only at run time may) is added by broadcasting loops after the
product, into the output of the broadcast shape. Any further epilogue fused into the kernel
is one pass over the output in the same kernel, as for the other float32 anchors
(`rvm.jit.stages`).
"""

from __future__ import annotations

from collections.abc import Callable

from rvm.jit.compute import compute
from rvm.jit.kernel import KernelBuilder
from rvm.jit.te import Body, Scalar, Tensor, Unsupported, shape_tuple
from rvm.jit.views import array_view
from rvm.kernels.reference.packed import ACTIVATIONS
from rvm.op import ops


def _dense(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
    return product(kb, attrs, args, out, "dense_packed")


def product(
    kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str, entry: str | tuple[str, str, str]
) -> Tensor:
    """The stage of a product on a packed weight, its epilogue in ``attrs``: a call of the
    kernel library's ``entry`` taking ``(x, w, out, units, bias, act[, residual])`` as
    `rvm.kernels.packed.dense` does: an entry point's name (`rvm.kernels.entry`: its arrays
    ``(x, w, out, bias, residual or out)``, its parameters ``(units, act, with residual)``),
    or a function's (module, function, local name), compiled into the kernel; the weight's
    dtype is the entry's to check (float32 panels, or int32 bf16 pairs: `rvm.jit.bf16`)."""
    x, w = args[:2]
    if out != "float32" or any(a.dtype != "float32" for a in args if a is not w):
        raise Unsupported(f"{kb.op} of {', '.join(a.dtype for a in args)} to {out}")
    act = ACTIVATIONS.index(attrs["activation"])
    units = attrs["units"]
    rows = kb.dim(" * ".join(x.dims[:-1]) or "1")
    product = (*x.dims[:-1], str(units))
    residual = args[3] if len(args) == 4 else None
    dims = product if residual is None else kb.broadcast_dims([product, residual.dims])
    t = Tensor(dims, out, kind="anchor")

    def fill() -> None:
        t.array = kb.buffer(dims, out, t.array)
        xv = array_view(kb, kb.materialize(x, out), x.dims, (rows, x.dims[-1]))
        wv = kb.materialize(w)
        bias = kb.materialize(args[2]) if len(args) >= 3 else "np.empty(0, np.float32)"

        def call(body: Body, ov: str, rv: str | None) -> None:
            """The product into ``ov`` (2-d), adding the residual ``rv`` (2-d) if any."""
            if isinstance(entry, str):
                arrays = (xv, wv, ov, bias, rv or ov)
                variant = "_".join(("float32", w.dtype, "float32", "float32", "float32"))
                kb.call_entry(entry, arrays, (units, act, int(rv is not None)), variant, body)
                return
            kb.imports.add(entry)
            body.lines.append(f"{entry[2]}({xv}, {wv}, {ov}, {units}, {bias}, {act}"
                              f"{'' if rv is None else f', {rv}'})")  # fmt: skip

        if residual is None:
            ov = array_view(kb, t.array, dims, (rows, str(units)))
            call(kb.root, ov, None)
            return
        r = kb.materialize(residual)
        if tuple(residual.dims) == tuple(dims) == product:
            ov = array_view(kb, t.array, dims, (rows, str(units)))
            rv = array_view(kb, r, dims, (rows, str(units)))
            call(kb.root, ov, rv)
            return
        _broadcast_residual(kb, call, t.array, r, product, residual.dims, dims, rows, units)

    t.fill = fill
    return t


def _broadcast_residual(
    kb: KernelBuilder,
    call: Callable[[Body, str, str | None], None],
    out: str,
    r: str,
    product: tuple,
    rdims: tuple,
    dims: tuple,
    rows: str,
    units: int,
) -> None:
    """The product with a residual whose shape is known only at run time: in the GEMM's
    epilogue when it is the product's (and the output's), else added by broadcasting in
    loops of the kernel's own, as `KernelBuilder.elemwise` broadcasts (Numba's ``np.add`` on
    arrays, used before, took a 3-d kernel's compile from 1.5 to 3.7 CPU-s, and ran 3-5x
    slower). ``product``, ``rdims`` and ``dims`` are the product's, the residual's and the
    output's shapes, ``rows`` x ``units`` the product's as a matrix."""
    shape, two_d = shape_tuple(product), shape_tuple((rows, str(units)))
    tmp = kb.fresh("p")
    whole, broadcast = Body(kb.root, None), Body(kb.root, None)
    call(whole, f"{out}.reshape({two_d})", f"{r}.reshape({two_d})")
    broadcast.lines.append(f"{tmp} = np.empty({shape}, dtype=np.float32)")
    call(broadcast, f"{tmp}.reshape({two_d})", None)

    def add(body: Body, index: list[Scalar]) -> None:
        a = kb.ref(tmp, kb.broadcast_index(product, dims, index))
        b = kb.ref(r, kb.broadcast_index(rdims, dims, index))
        body.lines.append(f"{kb.ref(out, index)} = {a} + {b}")

    kb.loop_nest(broadcast, dims, add)
    kb.root.lines += [
        f"if {r}.shape == {shape} and {out}.shape == {shape}:",
        *whole.render(1),
        "else:",
        *broadcast.render(1),
    ]


compute[ops.dense_packed] = _dense
