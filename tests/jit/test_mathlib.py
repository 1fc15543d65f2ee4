"""rvm.kernels.mathlib's float32 erf against math.erf: within 3 ulp, special values exact."""

from __future__ import annotations

import math

import numba as nb
import numpy as np
from jit_helpers import check, prim, var

from rvm import op
from rvm.kernels.mathlib import erf32


@nb.njit(error_model="numpy", fastmath={"nsz", "arcp", "contract", "afn"})
def _erf_all(xs, out):  # type: ignore[no-untyped-def]
    for i in range(xs.size):
        out[i] = erf32(xs[i])


def _erf(xs: np.ndarray) -> np.ndarray:
    out = np.empty_like(xs)
    _erf_all(xs, out)
    return out


def test_erf32_within_3_ulp() -> None:
    tiny = np.logspace(-38, 1, 20001)
    xs = np.concatenate([np.linspace(-6, 6, 240001), tiny, -tiny]).astype(np.float32)
    want = np.array([math.erf(float(v)) for v in xs])
    ulp = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    err = np.abs(_erf(xs).astype(np.float64) - want) / ulp
    assert err.max() <= 3.0, (err.max(), xs[np.argmax(err)])


def test_erf32_special_values() -> None:
    xs = np.array([0.0, -0.0, np.inf, -np.inf, 12.0, -12.0, 1e-40], np.float32)
    np.testing.assert_array_equal(_erf(xs)[:6], [0.0, 0.0, 1.0, -1.0, 1.0, -1.0])
    assert abs(_erf(xs)[6] - 2 / math.sqrt(math.pi) * 1e-40) < 1e-44
    assert np.isnan(_erf(np.array([np.nan], np.float32))[0])


def test_gelu_and_erf_kernels_over_a_wide_range() -> None:
    x = var("x", ("n",))
    xs = np.linspace(-9, 9, 4001).astype(np.float32)
    check(prim([x], op.gelu(x)), xs)
    check(prim([x], op.erf(x)), xs)
