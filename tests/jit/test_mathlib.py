"""rvm.kernels.mathlib's float32 functions against float64 references: erf within 3 ulp of
math.erf, exp, tanh and sigmoid within a few ulp of NumPy's, GELU within 3 ulp above 0 and
float32's cancellation of ``1 + erf`` below; special values exact."""

from __future__ import annotations

import math

import numba as nb
import numpy as np
import pytest
from jit_helpers import check, prim, var
from numba.core.errors import TypingError

from rvm import op
from rvm.kernels.mathlib import erf32, exp32, gelu32, gelu_tanh32, sigmoid32, tanh32


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


@nb.njit(error_model="numpy", fastmath={"nsz", "arcp", "contract", "afn"})
def _gelu_all(xs, out, tanh):  # type: ignore[no-untyped-def]
    for i in range(xs.size):
        out[i] = gelu_tanh32(xs[i]) if tanh else gelu32(xs[i])


def _gelu64(v: float, tanh: bool) -> float:
    if tanh:
        return 0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3)))
    return 0.5 * v * (1 + math.erf(v / math.sqrt(2)))


@pytest.mark.parametrize("tanh", [False, True], ids=["erf", "tanh"])
def test_gelu32_against_the_float64_gelu(tanh: bool) -> None:
    """GELU's rational erf and tanh (`mathlib.ERF_FAST`, `TANH_FAST`): within 3 ulp where
    x > 0; below 0, where ``1 + erf`` (``1 + tanh``) cancels, within 8 ulp plus 3e-7 |x|
    (erf's 5 ulp near -1, times x / 2)."""
    tiny = np.logspace(-38, 1.5, 20001)
    xs = np.concatenate([np.linspace(-12, 12, 480001), tiny, -tiny]).astype(np.float32)
    out = np.empty_like(xs)
    _gelu_all(xs, out, tanh)
    want = np.array([_gelu64(float(v), tanh) for v in xs])
    ulp = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    err = np.abs(out.astype(np.float64) - want)
    above = xs > 0
    assert (err[above] <= 3 * ulp[above]).all(), (err / ulp)[above].max()
    assert (err <= 8 * ulp + 3e-7 * np.abs(xs)).all()
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 6.0, -6.0], np.float32)
    got = np.empty_like(special)
    _gelu_all(special, got, tanh)
    # -inf * (1 + erf(-inf)) is NaN, as the reference's
    np.testing.assert_array_equal(got[:5], np.array([0.0, -0.0, np.inf, np.nan, np.nan]))
    assert np.signbit(got[1]) and got[5] == np.float32(6.0) and -1e-6 < got[6] <= 0


def test_gelu_and_erf_kernels_over_a_wide_range() -> None:
    x = var("x", ("n",))
    xs = np.linspace(-9, 9, 4001).astype(np.float32)
    check(prim([x], op.gelu(x)), xs)
    check(prim([x], op.erf(x)), xs)


@nb.njit(error_model="numpy", fastmath={"nsz", "arcp", "contract", "afn"})
def _others(xs, out):  # type: ignore[no-untyped-def]
    for i in range(xs.size):
        out[0, i] = exp32(xs[i])
        out[1, i] = tanh32(xs[i])
        out[2, i] = sigmoid32(xs[i])


@nb.njit(error_model="numpy")  # no fastmath: the functions' own flags hold in any caller
def _others_plain(xs, out):  # type: ignore[no-untyped-def]
    for i in range(xs.size):
        out[0, i] = exp32(xs[i])
        out[1, i] = tanh32(xs[i])
        out[2, i] = sigmoid32(xs[i])


def _run(kernel, xs: np.ndarray) -> np.ndarray:  # type: ignore[no-untyped-def]
    out = np.empty((3, xs.size), np.float32)
    kernel(xs, out)
    return out


def test_exp_tanh_sigmoid_within_a_few_ulp_in_any_caller() -> None:
    xs = np.concatenate([np.linspace(-100, 88, 200001), np.logspace(-30, 1, 2001)])
    xs = np.concatenate([xs, -xs]).astype(np.float32)
    x64 = xs.astype(np.float64)
    want = np.stack([np.exp(x64), np.tanh(x64), 1 / (1 + np.exp(-x64))])
    got = _run(_others, xs)
    # the functions' IR carries their own fastmath flags: a caller without them gets the bits
    np.testing.assert_array_equal(_run(_others_plain, xs).view(np.int32), got.view(np.int32))
    # float32's normal range (exp's denormals and overflows: `test_..._special_values`)
    f32 = np.finfo(np.float32)
    normal = (np.abs(want) >= f32.tiny) & (np.abs(want) <= f32.max)
    ulp = np.spacing(np.abs(np.where(normal, want, 1.0)).astype(np.float32)).astype(np.float64)
    err = np.where(normal, np.abs(got.astype(np.float64) - want) / ulp, 0.0)
    assert (err.max(axis=1) <= 3.0).all(), err.max(axis=1)


def test_exp_tanh_sigmoid_special_values() -> None:
    xs = np.array([0.0, -0.0, np.inf, -np.inf, 100.0, -200.0, np.nan], np.float32)
    exp, tanh, sigmoid = _run(_others, xs)
    np.testing.assert_array_equal(exp[:6], [1.0, 1.0, np.inf, 0.0, np.inf, 0.0])
    np.testing.assert_array_equal(tanh[:6], [0.0, 0.0, 1.0, -1.0, 1.0, -1.0])
    np.testing.assert_array_equal(sigmoid[:6], [0.5, 0.5, 1.0, 0.0, 1.0, 0.0])
    assert np.isnan([exp[6], tanh[6], sigmoid[6]]).all()


def test_the_functions_take_float32_only() -> None:
    @nb.njit
    def twice(x):  # type: ignore[no-untyped-def]
        return exp32(x) * 2

    assert abs(twice(np.float32(1.0)) - 2 * math.e) < 1e-5
    with pytest.raises(TypingError):
        twice(1.0)  # float64: np.exp is the float64 form (`rvm.jit.scalar`)
