"""Quantized anchors: `rvm.op.qconv2d` and `rvm.op.qdense` call `rvm.kernels.qconv` (a
turned weight, ``qconv2d_turned``), `rvm.op.qadd` calls `rvm.kernels.qadd`.

The kernel checks its operands' shapes (the convolution's geometry as `rvm.jit.stages` checks
a float convolution's), makes the call and returns; the integer GEMM (VNNI ``vpdpbusd``
where the CPU has it), the im2col and the requantizing epilogue live in the library, called
through its entry points (`rvm.kernels.qentry`), compiled once per process (or cache) rather
than into every kernel. Both ops
are OPAQUE, so a kernel holds one of them alone. Operands the library does not take (uint8
weights, a 0-d bias or scale) raise `Unsupported`: the kernel runs its NumPy reference.
"""

from __future__ import annotations

from rvm.jit.compute import compute
from rvm.jit.cond import mod, mul, ne
from rvm.jit.kernel import KernelBuilder
from rvm.jit.stages import _conv_geometry
from rvm.jit.te import Tensor, Unsupported
from rvm.kernels import entry
from rvm.op import ops


def _check_operands(kb: KernelBuilder, args: list[Tensor]) -> None:
    x, w, bias, scale = args
    if w.dtype not in ("int8", "int16") or x.dtype not in ("uint8", "int8"):
        raise Unsupported(f"{kb.op} of {x.dtype} by {w.dtype} weights")
    for t in (bias, scale):
        if t.ndim != 1 or (t.dims[0] == "1" and w.dims[0] != "1"):
            raise Unsupported(f"{kb.op} with a bias or scale shared by every channel")
        kb.check(
            ne(t.dims[0], w.dims[0]),
            f"{kb.kernel}: {kb.op}: the bias and scale need one value per output channel",
        )


def _quant_params(attrs: dict) -> tuple[int, ...]:
    return tuple(attrs[k] for k in ("x_zero", "y_zero", "low", "high"))


def _pairs(attrs: dict) -> int:
    """1 where the weight's pairs fit 16 bits (``weight_pairs``, `rvm.op.quantized.widen_weight`:
    the library's ``vpmaddubsw`` tiles read it as it is), else 0."""
    return int(attrs.get("weight_pairs") == "int16")


def _call(
    kb: KernelBuilder, name: str, arrays: list[str], args: list[Tensor], out: str, params: tuple
) -> None:
    """The call of the library's entry point ``name`` on ``arrays`` (the operands ``args``,
    then the output of dtype ``out``): int8 and uint8 ones share a build (`entry.BYTES`)."""
    dtype = entry.variant([*(a.dtype for a in args), out], name)
    kb.call_entry(name, arrays, params, dtype)


def _qconv2d(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
    x, w = args[0], args[1]
    layout = attrs.get("weight_layout", "OIHW")
    hwc = layout == "OHWI"
    if hwc:  # the geometry's view of the weight: (O, C / groups, KH, KW)
        w = Tensor((w.dims[0], w.dims[3], w.dims[1], w.dims[2]), w.dtype)
    elif layout == "turned":  # turned around (`rvm.op.turn_qconv2d`): its weight_shape's
        o, kh, kw, cg = (str(d) for d in attrs["weight_shape"])
        w = Tensor((o, cg, kh, kw), w.dtype)
    _check_operands(kb, [x, w, *args[2:]])
    groups = kb.resolve(attrs["groups"])
    kb.check(
        ne(x.dims[1], mul(w.dims[1], groups)),
        f"{kb.kernel}: {kb.op}: input channels do not match the weight and groups",
    )
    kb.check(
        ne(mod(w.dims[0], groups), 0),
        f"{kb.kernel}: {kb.op}: output channels do not divide into groups",
    )
    geo = _conv_geometry(kb, attrs, x, w, 2)
    dims = (x.dims[0], w.dims[0], *(g[5] for g in geo))
    t = Tensor(dims, out, kind="anchor")

    def fill() -> None:
        t.array = kb.buffer(dims, out, t.array)
        names = [kb.materialize(a) for a in args]
        (_, _, sh, dh, (pt, _), _), (_, _, sw, dw, (pl, _), _) = geo
        if layout == "turned":
            params = (*_quant_params(attrs), sh, sw, dh, dw, pt, pl, w.dims[2], w.dims[3])
            _call(kb, "qconv2d_turned", [*names, t.array], args, out, params)
            return
        params = (*_quant_params(attrs), groups, sh, sw, dh, dw, pt, pl, int(hwc), _pairs(attrs))
        _call(kb, "qconv2d", [*names, t.array], args, out, params)

    t.fill = fill
    return t


def _qdense(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
    _check_operands(kb, args)
    x, w = args[0], args[1]
    if x.ndim < 1:
        raise Unsupported("qdense of a scalar")
    kb.check(ne(x.dims[-1], w.dims[1]), f"{kb.kernel}: {kb.op}: input and weight differ in K")
    dims = (*x.dims[:-1], w.dims[0])
    t = Tensor(dims, out, kind="anchor")

    def fill() -> None:
        t.array = kb.buffer(dims, out, t.array)
        names = [kb.materialize(a) for a in args]
        rows = " * ".join(x.dims[:-1]) or "1"
        x2, o2 = kb.fresh("x2"), kb.fresh("o2")
        kb.root.lines.append(f"{x2} = {names[0]}.reshape(({rows}, {x.dims[-1]}))")
        kb.root.lines.append(f"{o2} = {t.array}.reshape(({rows}, {w.dims[0]}))")
        _call(kb, "qdense", [x2, *names[1:], o2], args, out, (*_quant_params(attrs), _pairs(attrs)))

    t.fill = fill
    return t


def _qadd(kb: KernelBuilder, attrs: dict, args: list[Tensor], out: str) -> Tensor:
    a, b = args
    if a.dtype not in ("uint8", "int8") or b.dtype not in ("uint8", "int8"):
        raise Unsupported(f"{kb.op} of {a.dtype} and {b.dtype}")
    if a.ndim != b.ndim:
        raise Unsupported(f"{kb.op} of ranks {a.ndim} and {b.ndim}")
    for p, q in zip(a.dims, b.dims, strict=True):
        kb.check(ne(p, q), f"{kb.kernel}: {kb.op}: the inputs differ in shape")
    t = Tensor(a.dims, out, kind="anchor")

    def fill() -> None:
        from rvm.kernels.lrn import float_bits

        t.array = kb.buffer(a.dims, out, t.array)
        names = [kb.materialize(x) for x in args]
        size = " * ".join(a.dims) or "1"
        flat = [kb.fresh("f") for _ in range(3)]
        for name, array in zip(flat, [*names, t.array], strict=True):
            kb.root.lines.append(f"{name} = {array}.reshape(({size},))")
        zeros = tuple(attrs[k] for k in ("a_zero", "b_zero", "y_zero", "low", "high"))
        scales = tuple(float_bits(attrs[k]) for k in ("a_scale", "b_scale", "y_scale"))
        _call(kb, "qadd", flat, args, out, (*zeros, *scales))

    t.fill = fill
    return t


compute[ops.qconv2d] = _qconv2d
compute[ops.qdense] = _qdense
compute[ops.qadd] = _qadd
