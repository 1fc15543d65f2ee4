"""Pools whose 2x2 windows tile the input: each element read once, each output written once.

vgg19's and zfnet's max pools and densenet's transition averages (2x2 windows 2 apart, no
padding) take this method (`rvm.kernels.pool`'s tasks ``pool2d_max_tiles`` and
``pool2d_avg_tiles``). The work is a stream: every input element is read once, so the
other methods' scratch (a plane split by the strides, or a line of the window rows' maxima)
is traffic a tiling pool does not need. Each output row is one loop over its columns that
reads the two input rows it covers, the even and odd columns of each (LLVM vectorizes the
stride-2 loads as wide loads and shuffles). Averages sum the four in float64 and multiply by
1/4, as the reference divides (exactly, in binary); a NaN in a window makes its maximum NaN.
"""

from __future__ import annotations

import numpy as np

from rvm.kernels.jitting import jit
from rvm.kernels.planes import U

__all__ = ["by_tiles", "takes"]

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)


@jit(**_OPTS)
def takes(ih, iw, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl):  # type: ignore[no-untyped-def]
    """Whether `by_tiles` takes a pool of this geometry: 2x2 windows 2 apart, undilated, all
    inside the input (no padding; an odd last row or column is left out, as floor mode
    does)."""
    square = kh == 2 and kw == 2 and sh == 2 and sw == 2 and dh == 1 and dw == 1
    return square and pt == 0 and pl == 0 and 2 * oh <= ih and 2 * ow <= iw


@jit(**_OPTS, inline="always")
def by_tiles(x, out, lo, hi, is_max):  # type: ignore[no-untyped-def]
    """Max (``is_max``) or average pools of channels ``lo`` to ``hi`` (flat n * c index)
    that `takes`, output row by output row (see the module docstring)."""
    ih, iw, oh, ow = x.shape[2], x.shape[3], out.shape[2], out.shape[3]
    xf, of = x.reshape(x.size), out.reshape(out.size)
    one, two, row = U(1), U(2), U(iw)  # unsigned indices: no test for wrapping around
    for c in range(lo, hi):
        for p_ in range(oh):
            top = U((c * ih + 2 * p_) * iw)
            low, dst = top + row, U((c * oh + p_) * ow)
            if is_max:
                for q_ in range(U(ow)):
                    at = two * q_
                    m = np.maximum(xf[top + at], xf[top + at + one])
                    of[dst + q_] = np.maximum(m, np.maximum(xf[low + at], xf[low + at + one]))
            else:
                for q_ in range(U(ow)):
                    at = two * q_
                    s = np.float64(xf[top + at]) + np.float64(xf[top + at + one])
                    s += np.float64(xf[low + at]) + np.float64(xf[low + at + one])
                    of[dst + q_] = s * 0.25
