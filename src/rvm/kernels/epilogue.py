"""A float32 convolution's epilogue, run by the library on each piece of the output it computes.

ONNX Runtime folds a convolution's bias, activation and residual add into the convolution; a
separate pass over the output after the library call cost about as much as squeezenet's first
convolution itself. So the kernel passes them to the library as data (`rvm.kernels.conv`,
`rvm.kernels.direct`), and each method applies them to each block of the output right after
computing it, in the thread that computed it, while the block is in cache (`epilogue_rows`);
the direct method applies them to each tile in registers, as it stores it.

Code no program uses is not built: the epilogue's GEMM is a library task of its own
(``gemm_segments_epilogue``: `rvm.kernels.blas.gemm_segments`), which only a convolution with an
epilogue runs, so the plain GEMM task (``gemm``, ``gemm_segments``: `rvm.kernels.blas`) is
the same code with or without this module.

An epilogue is a tuple ``(bias, act, res, res_first)``: the address of the bias (one float32
an output channel) or 0, an index of ``ACTIVATIONS`` (`rvm.kernels.reference.packed`, the
packed GEMM's: "none" or "relu" here), the address of the residual (laid out as the output)
or 0, and whether the residual is added before the activation (a ResNet block's
``relu(conv + bias + x)``) or after it. `NO_EPILOGUE` is none; only float32 has one.

- `entry_epilogue(...)`: an entry point's epilogue from its bias and residual arrays, checked
  against the output (`rvm.kernels.entry`: the bias (1, 1, 1, o), the residual as the output);
- `epilogue_rows(c, ldc, rows, cols, bias, act, res, res_first)`: on rows of C at addresses;
- `block_epilogue(out, at, ch, rows, ldc, cols, epi)`: on a block of ``rows`` channels;
- `whole_epilogue(out, epi)`: on the whole output;
- `TileEpilogue`: the same in LLVM IR, on a micro-kernel's accumulators in registers;
- `is_none(epi)`: whether ``epi`` does nothing;
- `epilogue_arrays(out, epi, channels)`: the bias and residual as arrays, for
  `rvm.kernels.blas.gemm_segments`, whose pieces run the epilogue themselves.
"""

from __future__ import annotations

import numba as nb
import numpy as np
from llvmlite import ir
from numba.core import cgutils

from rvm.kernels import parfor, sgemm
from rvm.kernels.jitting import jit
from rvm.kernels.reference.packed import ACTIVATIONS

__all__ = [
    "NO_EPILOGUE",
    "RELU",
    "TileEpilogue",
    "block_epilogue",
    "entry_epilogue",
    "epilogue_arrays",
    "epilogue_rows",
    "is_none",
    "whole_epilogue",
]

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)
_FAST = {"nsz", "arcp", "contract", "afn"}  # as `rvm.kernels.mathlib`'s: NaN and inf kept
RELU = ACTIVATIONS.index("relu")
"""The epilogue's activation codes are `ACTIVATIONS`' (0 none, this one ReLU)."""

NO_EPILOGUE = (0, 0, 0, False)
"""No epilogue: (bias address, activation, residual address, residual first)."""
_BAD = (0, -1, 0, False)  # `entry_epilogue`'s answer to an epilogue it refuses


@jit(**_OPTS)
def is_none(epi):  # type: ignore[no-untyped-def]
    """Whether the epilogue ``epi`` does nothing."""
    return epi[0] == 0 and epi[1] == 0 and epi[2] == 0


@jit(nogil=True, cache=True, error_model="numpy", boundscheck=False, fastmath=_FAST)
def epilogue_rows(c, ldc, rows, cols, bias, act, res, res_first):  # type: ignore[no-untyped-def]
    """The epilogue on a block of C just computed, while it is in cache: ``C[i, :cols] =
    act(C[i] + bias[i] + R[i])`` for ``i < rows`` (row stride ``ldc``), the residual R added
    after the activation instead unless ``res_first``. ``bias``: the address of ``rows``
    floats, one a row (an output channel), 0 none; ``act``: an index of `ACTIVATIONS`
    ("none" or "relu"); ``res``: R's address, laid out as C, 0 none. float32 at int64
    addresses, no checks."""
    out, b, r = sgemm._floats_at(c), sgemm._floats_at(bias), sgemm._floats_at(res)
    zero = np.float32(0.0)
    relu = act == RELU
    for i in range(rows):  # one pass a row, each case its own loop (each vectorizes)
        at = i * ldc
        add = b[i] if bias != 0 else zero
        if res == 0 and relu:
            for j in range(cols):
                out[at + j] = np.maximum(out[at + j] + add, zero)
        elif res == 0:
            for j in range(cols):
                out[at + j] += add
        elif res_first and relu:
            for j in range(cols):
                out[at + j] = np.maximum(out[at + j] + add + r[at + j], zero)
        elif res_first or not relu:
            for j in range(cols):
                out[at + j] += add + r[at + j]
        else:
            for j in range(cols):
                out[at + j] = np.maximum(out[at + j] + add, zero) + r[at + j]


@jit(**_OPTS)
def block_epilogue(out, at, ch, rows, ldc, cols, epi):  # type: ignore[no-untyped-def]
    """The epilogue ``epi`` on ``rows`` output channels from ``ch`` (``ldc`` elements apart),
    ``cols`` positions each, from flat element ``at`` of ``out``: float32 only (other dtypes
    have none)."""
    bias, act, res, first = epi
    if not sgemm.applies(out) or is_none(epi):
        return
    at_bias = bias + 4 * ch if bias != 0 else 0
    at_res = res + 4 * at if res != 0 else 0
    epilogue_rows(parfor.address(out) + 4 * at, ldc, rows, cols, at_bias, act, at_res, first)


@jit(**_OPTS)
def whole_epilogue(out, epi):  # type: ignore[no-untyped-def]
    """The epilogue ``epi`` over the whole output (n, o, oh, ow), image by image."""
    n, o, oh, ow = out.shape
    for n_ in range(n):
        block_epilogue(out, n_ * o * oh * ow, 0, o, oh * ow, oh * ow, epi)


@jit(**_OPTS)
def epilogue_arrays(out, epi, channels):  # type: ignore[no-untyped-def]
    """``epi``'s bias (``channels`` floats from its address) and residual (as ``out``) as
    float32 arrays, empty for none, for `rvm.kernels.blas.gemm_segments`."""
    bias, _, res, _ = epi
    none = np.empty(0, dtype=np.float32)
    b = nb.carray(sgemm._floats_at(bias), (channels,)) if bias != 0 else none
    r = nb.carray(sgemm._floats_at(res), (out.size,)) if res != 0 else none
    return b, r


@jit(**_OPTS)
def entry_epilogue(d, e, dims, act, has_bias, res_mode):  # type: ignore[no-untyped-def]
    """An entry point's epilogue from its bias (``d``, dims ``dims[12:16]``) and residual
    (``e``, ``dims[16:20]``) pointers, the output's dims at ``dims[8:12]``: the bias when
    ``has_bias``, the activation ``act``, the residual added before it when ``res_mode`` is 1,
    after it when 2, none when 0. An activation of -1 when the bias is not (1, 1, 1, o), the
    residual not of the output's shape, the codes unknown or the dtype not float32."""
    if not has_bias and act == 0 and res_mode == 0:
        return NO_EPILOGUE
    if not sgemm.applies(d) or (act != 0 and act != RELU) or res_mode < 0 or res_mode > 2:
        return _BAD
    bias = res = 0
    if has_bias:
        if dims[12] != 1 or dims[13] != 1 or dims[14] != 1 or dims[15] != dims[9]:
            return _BAD
        bias = parfor.address(nb.carray(d, (dims[15],)))
    if res_mode != 0:
        for i in range(4):
            if dims[16 + i] != dims[8 + i]:
                return _BAD
        res = parfor.address(nb.carray(e, (dims[16] * dims[17] * dims[18] * dims[19],)))
    return (bias, act, res, res_mode == 1)


class TileEpilogue:
    """The IR of the epilogue of a tile in registers, for a micro-kernel's codegen
    (`rvm.kernels.direct`), as `epilogue_rows` computes it: ``act(C + bias + R)`` with the
    residual first, else ``act(C + bias) + R``. ``bias``, ``act``, ``res_mode`` and
    ``res_delta`` are int64 IR values: the address of the tile's first channel's bias (0:
    none), an index of `ACTIVATIONS`, the residual's code (0 none, 1 before the activation, 2
    after it) and its offset from the output in floats."""

    def __init__(self, builder, bias, act, res_mode, res_delta):  # type: ignore[no-untyped-def]
        i64 = ir.IntType(64)
        self.builder, self.res_delta = builder, res_delta
        self.bias = builder.inttoptr(bias, ir.FloatType().as_pointer())
        self.has_bias = builder.icmp_signed("!=", bias, i64(0))
        relu = builder.icmp_signed("==", act, i64(RELU))
        self.first = builder.icmp_signed("==", res_mode, i64(1))
        self.after = builder.icmp_signed("==", res_mode, i64(2))
        self.has_residual = builder.icmp_signed("!=", res_mode, i64(0))
        self.early_relu = builder.and_(relu, builder.not_(self.first))
        self.late_relu = builder.and_(relu, self.first)

    def _relu(self, value, on):  # type: ignore[no-untyped-def]
        """``max(value, 0)`` when ``on`` (NaN kept, as `np.maximum`)."""
        b, zero = self.builder, ir.Constant(value.type, None)
        kept = b.select(b.fcmp_unordered(">", value, zero), value, zero)
        return b.select(on, kept, value)

    def on_channels(self, slots, j, lanes):  # type: ignore[no-untyped-def]
        """The bias of vector ``j``'s channels (`rvm.kernels.sgemm.LANES` a vector, ``lanes``
        the mask of those loaded) and the activation unless a residual goes before it, on the
        accumulators ``slots`` (stack slots of vectors, one a position)."""
        b = self.builder
        vec = slots[0].type.pointee
        off = ir.Constant(ir.IntType(64), j * sgemm.LANES)
        at = b.bitcast(b.gep(self.bias, [off]), vec.as_pointer())
        none = ir.Constant(lanes.type, [0] * sgemm.LANES)
        load = cgutils.get_or_insert_function(
            b.module,
            ir.FunctionType(vec, [vec.as_pointer(), ir.IntType(32), lanes.type, vec]),
            f"llvm.masked.load.v{sgemm.LANES}f32.p0",
        )
        # No bias: no lane loaded (nothing read), zeros added.
        on = b.select(self.has_bias, lanes, none)
        add = b.call(load, [at, ir.IntType(32)(4), on, ir.Constant(vec, None)])
        for slot in slots:
            b.store(self._relu(b.fadd(b.load(slot), add), self.early_relu), slot)

    def store_run(self, run, at, residual):  # type: ignore[no-untyped-def]
        """Store the channel's run ``run`` at the float pointer ``at``, its residual (when
        ``residual``: ``res_delta`` floats on) added before or after the activation."""
        b = self.builder
        ptr = run.type.as_pointer()
        if residual:
            r = b.load(b.bitcast(b.gep(at, [self.res_delta]), ptr), align=4)
            zero = ir.Constant(run.type, None)
            run = self._relu(b.fadd(run, b.select(self.first, r, zero)), self.late_relu)
            run = b.fadd(run, b.select(self.after, r, zero))
        b.store(run, b.bitcast(at, ptr), align=4)
