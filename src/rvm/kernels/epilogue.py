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
- `is_none(epi)`: whether ``epi`` does nothing;
- `epilogue_arrays(out, epi, channels)`: the bias and residual as arrays, for
  `rvm.kernels.blas.gemm_segments`, whose pieces run the epilogue themselves.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from rvm.kernels import parfor, sgemm
from rvm.kernels.jitting import jit
from rvm.kernels.reference.packed import ACTIVATIONS

__all__ = [
    "NO_EPILOGUE",
    "RELU",
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
