"""bf16 products on AMX tiles (`rvm.kernels.amx`): the walk against NumPy on the same
bf16 operands (float64 sums) at every edge of its tiles and blocks, with B's pair rows at a
stride, through a tap table and in pair panels, accumulating or not, with either epilogue, B
wider than half of L2 (its blocks of columns first); and the permission the kernels ask of
Linux. Skipped where the host has no AMX (the bf16 kernels'
vector path is `test_bf16.py`'s there)."""

from __future__ import annotations

import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

from rvm.kernels import amx, cpu
from rvm.kernels.reference.packed import ACTIVATIONS

pytestmark = pytest.mark.skipif(not amx.AMX, reason="the host has no AMX tiles")

BF16 = ml_dtypes.bfloat16
RTOL = 1e-5


def _words(values: np.ndarray) -> np.ndarray:
    """(..., 2 k2) floats as (..., k2) int32 words of bf16 pairs along the last axis (the
    even value in the low half)."""
    bits = values.astype(BF16).view(np.uint16).astype(np.uint32)
    return (bits[..., 0::2] | (bits[..., 1::2] << 16)).view(np.int32)


def _rounded(x: np.ndarray) -> np.ndarray:
    return x.astype(BF16).astype(np.float64)


@pytest.mark.parametrize("m", [1, 16, 17, 32, 33, 48, 70])
@pytest.mark.parametrize("n", [1, 15, 16, 32, 33, 48, 100])
@pytest.mark.parametrize("k2", [1, 15, 16, 17, 40])
def test_the_walk_at_every_edge(m: int, n: int, k2: int) -> None:
    """Rows [m0, m1) of C (+)= A @ B on B's pair rows at a stride, fresh and accumulating,
    the bias one a row, an activation and a residual (``act(C + bias + R)``)."""
    rng = np.random.default_rng(m * 1000 + n * 10 + k2)
    a = rng.standard_normal((m, 2 * k2)).astype(np.float32)
    b = rng.standard_normal((2 * k2, n)).astype(np.float32)
    wa = np.ascontiguousarray(_words(a))
    wb = np.ascontiguousarray(_words(b.T).T)  # (k2, n) words: pairs along the depth
    want = _rounded(a) @ _rounded(b)
    bias = rng.standard_normal(m).astype(np.float32)
    res = rng.standard_normal((m, n)).astype(np.float32)
    m0 = m // 3
    for acc in (0, 1):
        c = np.full((m, n), 7.0, np.float32)
        before = c.copy()
        amx.walk(wa.ctypes.data, k2, m0, m, wb.ctypes.data, 4, 48, n, 0, c.ctypes.data, n, n,
                 k2, acc, 0, 0, 0, 0, None)  # fmt: skip
        expect = want[m0:] + (before[m0:] if acc else 0)
        np.testing.assert_allclose(c[m0:], expect, rtol=RTOL * k2, atol=RTOL * k2)
        np.testing.assert_array_equal(c[:m0], before[:m0])  # no row outside [m0, m1)
    c = np.empty((m, n), np.float32)
    act = ACTIVATIONS.index("relu")
    amx.walk(wa.ctypes.data, k2, 0, m, wb.ctypes.data, 4, 48, n, 0, c.ctypes.data, n, n, k2, 0,
             bias.ctypes.data, act, res.ctypes.data, 0, None)  # fmt: skip
    expect = np.maximum(want + bias[:, None] + res, 0)
    np.testing.assert_allclose(c, expect, rtol=RTOL * k2, atol=RTOL * k2)


@pytest.mark.parametrize("k2", [23, 32])
@pytest.mark.parametrize("uniform", [False, True])
def test_pair_rows_through_a_table_and_in_panels(k2: int, uniform: bool) -> None:
    """B's pair rows read through an int64 table of word offsets (a convolution's taps, or
    one stride: a 1 x 1's), and B in pair panels of 48 columns (a 32-column block spanning two
    panels), with the bias one a column (``act(C + bias) + R``, the dense layers'); the tiles
    from the operands as they lie where the depth is whole steps (32) and the rows one
    stride, else from packed copies."""
    rng = np.random.default_rng(3)
    m, n = 70, 101
    a = rng.standard_normal((m, 2 * k2)).astype(np.float32)
    b = rng.standard_normal((2 * k2, n)).astype(np.float32)
    wa = np.ascontiguousarray(_words(a))
    wb = np.ascontiguousarray(_words(b.T).T)
    want = _rounded(a) @ _rounded(b)
    # the table: pair row p stored at row order[p] of a taller plane
    order = np.arange(k2) + 2 if uniform else rng.permutation(k2 + 5)[:k2]
    plane = np.zeros((k2 + 5, n), np.int32)
    plane[order] = wb
    table = (order * n).astype(np.int64)
    c = np.empty((m, n), np.float32)
    amx.walk(wa.ctypes.data, k2, 0, m, plane.ctypes.data, 4, 48, table.ctypes.data, 1,
             c.ctypes.data, n, n, k2, 0, 0, 0, 0, 0, None)  # fmt: skip
    np.testing.assert_allclose(c, want, rtol=RTOL * k2, atol=RTOL * k2)
    # panels: (panels, k2, 48) words, panel q's column j at word (q, p, j)
    nr, panels = 48, -(-n // 48)
    padded = np.zeros((k2, panels * nr), np.int32)
    padded[:, :n] = wb
    packed = np.ascontiguousarray(padded.reshape(k2, panels, nr).transpose(1, 0, 2))
    bias = rng.standard_normal(n).astype(np.float32)
    res = rng.standard_normal((m, n)).astype(np.float32)
    act = ACTIVATIONS.index("relu")
    amx.walk(wa.ctypes.data, k2, 0, m, packed.ctypes.data, 4 * k2, nr, nr, 0, c.ctypes.data, n,
             n, k2, 0, bias.ctypes.data, act, res.ctypes.data, 1, None)  # fmt: skip
    expect = np.maximum(want + bias, 0) + res
    np.testing.assert_allclose(c, expect, rtol=RTOL * k2, atol=RTOL * k2)


@pytest.mark.parametrize("m", [16, 33, 70])
@pytest.mark.parametrize("act", ["none", "relu", "gelu"])
@pytest.mark.parametrize("rows", [(56, 56, 56), (29, 31, 27), (9, 9, 7)])
def test_the_walk_rounds_its_blocks_into_a_pair_plane(m: int, act: str, rows: tuple) -> None:
    """With a pair plane out (``to``: `amx.BLOCK_OUT`) each block's sums, plus the bias and
    activated, are rounded from L1 straight into the plane's image words: exactly the bf16
    pairs of the float32 output the same walk writes otherwise (channels ``2 c2`` low, ``2
    c2 + 1`` high, an odd last channel's high half 0), the run's positions past the image's
    width dropped, and no word outside the image written. ``rows``: the run's positions a
    row, the plane's words a row and the image's width: as a 1 x 1's (all one), a 3 x 3's
    wide rows into a padded plane, and rows narrower than a block."""
    wp, wq, ow = rows
    rng = np.random.default_rng(m + wp)
    k2, oh = 24, 5
    n = oh * wp
    a = rng.standard_normal((m, 2 * k2)).astype(np.float32)
    b = rng.standard_normal((2 * k2, n)).astype(np.float32)
    wa = np.ascontiguousarray(_words(a))
    wb = np.ascontiguousarray(_words(b.T).T)
    bias = rng.standard_normal(m).astype(np.float32)
    index = ACTIVATIONS.index(act)
    c = np.empty((m, n), np.float32)
    amx.walk(wa.ctypes.data, k2, 0, m, wb.ctypes.data, 4, 48, n, 0, c.ctypes.data, n, n, k2, 0,
             bias.ctypes.data, index, 0, 0, None)  # fmt: skip
    pt, pl, hq = 1, (wq - ow) // 2, oh + 3
    plane = np.full(((m + 1) // 2, hq, wq), -7, np.int32)
    at = plane.ctypes.data + 4 * (pt * wq + pl)
    record = np.array([0, at, hq * wq, wq, wp, ow, 0, 0, 0, 0], np.int64)  # no residual
    assert record.size == amx.BLOCK_OUT
    amx.walk(wa.ctypes.data, k2, 0, m, wb.ctypes.data, 4, 48, n, 0, 0, n, n, k2, 0,
             bias.ctypes.data, index, 0, 0, record.ctypes.data)  # fmt: skip
    image = c.reshape(m, oh, wp)[:, :, :ow]
    if m % 2:
        image = np.concatenate([image, np.zeros((1, oh, ow), np.float32)])
    want = plane.copy()
    want[:, pt : pt + oh, pl : pl + ow] = _words(image.transpose(1, 2, 0)).transpose(2, 0, 1)
    np.testing.assert_array_equal(plane, want)


def test_the_tiles_are_granted_once_named() -> None:
    """The kernels use the tiles only where the compiled features name AMX-BF16 and Linux
    granted them; features without them never ask."""
    assert cpu.amx_tiles() is True
    assert cpu._tiles_granted("+avx512f,+avx512bf16") is False


@pytest.mark.slow
def test_the_vector_path_where_the_tiles_are_left_out(tmp_path) -> None:
    """The same host compiling without AMX (``NUMBA_CPU_FEATURES`` less its ``amx`` ones: a
    second cold process, -m slow) runs the bf16 products on ``vdpbf16ps`` (the path of
    AVX512-BF16 CPUs without tiles), with the same results: a GEMM on pair panels and a 3 x 3
    convolution, direct and turned around."""
    features = ",".join(
        f"-{f[1:]}" if f.startswith("+amx") else f for f in cpu.target_features().split(",")
    )
    script = (
        "import numpy as np, ml_dtypes\n"
        "from rvm.kernels import amx, bf16conv, bf16dense, bf16gemm\n"
        "from rvm.op import numpy_ref\n"
        "from rvm.op.bf16 import bf16_bits, conv_pairs, pack_pairs, turn_pairs\n"
        "assert not amx.AMX and bf16gemm.DPBF16\n"
        "r = lambda a: a.astype(ml_dtypes.bfloat16).astype(np.float64)\n"
        "rng = np.random.default_rng(0)\n"
        "x = rng.standard_normal((37, 70)).astype(np.float32)\n"
        "w = rng.standard_normal((70, 101)).astype(np.float32)\n"
        "out = np.empty((37, 101), np.float32)\n"
        "panels = pack_pairs(w, False, bf16gemm.NR)\n"
        "bf16dense.dense(x, panels, out, 101, np.empty(0, np.float32), 0)\n"
        "np.testing.assert_allclose(out, r(x) @ r(w), rtol=1e-4, atol=1e-4)\n"
        "x = rng.standard_normal((1, 6, 11, 13)).astype(np.float32)\n"
        "w = rng.standard_normal((40, 6, 3, 3)).astype(np.float32)\n"
        "want = numpy_ref.conv2d(r(x), r(w), (1, 1), (1, 1, 1, 1), (1, 1), 1)\n"
        "bits = bf16_bits(conv_pairs(w, 0)).view(np.int16)\n"
        "none, res = np.empty(0, np.float32), np.empty((0, 0, 0, 0), np.float32)\n"
        "tail = ((0, 0, 0, 0), (0, 0, 0), (0, 0), 0)\n"
        "for panel in (0, bf16gemm.NR):\n"
        "    out = np.empty(want.shape, np.float32)\n"
        "    wt = turn_pairs(bits, 1, panel) if panel else bits\n"
        "    bf16conv.conv2d(x, wt, out, 1, 1, 1, 1, 1, 1, 1, 3, 3, none, 0, res, panel, *tail)\n"
        "    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)\n"
    )
    env = dict(os.environ, NUMBA_CPU_FEATURES=features, NUMBA_CACHE_DIR=str(tmp_path))
    env["RVM_CACHE_DIR"] = str(tmp_path / "rvm")
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]


@pytest.mark.parametrize("panels", [False, True])
def test_a_wide_b_walks_its_blocks_of_columns_first(panels: bool) -> None:
    """B wider than half of L2 (`amx.CHUNK_BYTES`), A smaller: each block of columns runs
    across every band (A's rows kept in L2), the next block's pair rows brought in a slice a
    band (`amx._ahead`, `amx.block`'s hints) -- the same sums, to C's last edge column; B at a
    stride and in pair panels of 48 columns."""
    rng = np.random.default_rng(5)
    m, k2 = 70, 64
    n = amx.CHUNK_BYTES // (4 * k2) + 37  # a few blocks past the chunk, a ragged last one
    a = rng.standard_normal((m, 2 * k2)).astype(np.float32)
    b = rng.standard_normal((2 * k2, n)).astype(np.float32)
    wa = np.ascontiguousarray(_words(a))
    wb = np.ascontiguousarray(_words(b.T).T)
    want = _rounded(a) @ _rounded(b)
    c = np.empty((m, n), np.float32)
    if panels:
        nr, count = 48, -(-n // 48)
        padded = np.zeros((k2, count * nr), np.int32)
        padded[:, :n] = wb
        packed = np.ascontiguousarray(padded.reshape(k2, count, nr).transpose(1, 0, 2))
        amx.walk(wa.ctypes.data, k2, 0, m, packed.ctypes.data, 4 * k2, nr, nr, 0,
                 c.ctypes.data, n, n, k2, 0, 0, 0, 0, 1, None)  # fmt: skip
    else:
        amx.walk(wa.ctypes.data, k2, 0, m, wb.ctypes.data, 4, 48, n, 0, c.ctypes.data, n, n,
                 k2, 0, 0, 0, 0, 0, None)  # fmt: skip
    np.testing.assert_allclose(c, want, rtol=RTOL * k2, atol=RTOL * k2)


def test_which_walks_pack_b() -> None:
    """`amx.packs_b`: B is packed where its depth is not whole steps or its pair rows are
    not one stride apart (a 3 x 3 convolution's taps); a 1 x 1's table of one stride is read
    as it lies (the direct convolution then keeps its finer cut by channels)."""
    uniform = np.arange(32, dtype=np.int64) * 100
    taps = uniform.copy()
    taps[5] += 1
    assert not amx.packs_b(uniform.ctypes.data, 1, 32)
    assert amx.packs_b(taps.ctypes.data, 1, 32)
    assert amx.packs_b(uniform.ctypes.data, 1, 24)  # not whole steps of 16 pairs
    assert not amx.packs_b(64, 0, 32)  # pair rows 64 words apart, no table
