"""A float32 convolution's epilogue, run by the library on each piece of the output it computes.

ONNX Runtime folds a convolution's bias, activation and residual add into the convolution; a
separate pass over the output after the library call cost about as much as squeezenet's first
convolution itself. So the kernel passes them to the library as data (`rvm.kernels.conv`,
`rvm.kernels.direct`), and each method applies them to each block of the output right after
computing it, in the thread that computed it, while the block is in cache
(`rvm.kernels.sgemm.epilogue_rows`).

An epilogue is a tuple ``(bias, act, res, res_first)``: the address of the bias (one float32
an output channel) or 0, an index of ``ACTIVATIONS`` (`rvm.kernels.reference.packed`, the
packed GEMM's: "none" or "relu" here), the address of the residual (laid out as the output)
or 0, and whether the residual is added before the activation (a ResNet block's
``relu(conv + bias + x)``) or after it. `NO_EPILOGUE` is none; only float32 has one.

- `entry_epilogue(...)`: an entry point's epilogue from its bias and residual arrays, checked
  against the output (`rvm.kernels.entry`: the bias (1, 1, 1, o), the residual as the output);
- `block_epilogue(out, at, ch, rows, ldc, cols, epi)`: on a block of ``rows`` channels;
- `whole_epilogue(out, epi)`: on the whole output;
- `epilogue_arrays(out, epi, channels)`: the bias and residual as arrays, for
  `rvm.kernels.blas.gemm_segments`, whose pieces run the epilogue themselves.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from rvm.kernels import parfor, sgemm
from rvm.kernels.jitting import jit

__all__ = [
    "NO_EPILOGUE",
    "block_epilogue",
    "entry_epilogue",
    "epilogue_arrays",
    "whole_epilogue",
]

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)

NO_EPILOGUE = (0, 0, 0, False)
"""No epilogue: (bias address, activation, residual address, residual first)."""
_BAD = (0, -1, 0, False)  # `entry_epilogue`'s answer to an epilogue it refuses


@jit(**_OPTS)
def block_epilogue(out, at, ch, rows, ldc, cols, epi):  # type: ignore[no-untyped-def]
    """The epilogue ``epi`` on ``rows`` output channels from ``ch`` (``ldc`` elements apart),
    ``cols`` positions each, from flat element ``at`` of ``out``: float32 only (other dtypes
    have none)."""
    bias, act, res, first = epi
    if not sgemm.applies(out) or (bias == 0 and act == 0 and res == 0):
        return
    at_bias = bias + 4 * ch if bias != 0 else 0
    at_res = res + 4 * at if res != 0 else 0
    sgemm.epilogue_rows(parfor.address(out) + 4 * at, ldc, rows, cols, at_bias, act, at_res,
                        first)  # fmt: skip


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
    if not sgemm.applies(d) or (act != 0 and act != sgemm.RELU) or res_mode < 0 or res_mode > 2:
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
