"""rvm's own float32 GEMM (`rvm.kernels.sgemm`): every tile shape the micro-kernel
has -- full and masked last vectors, rows past the band, depths across blocks -- against NumPy
in float64, writing and accumulating, on windows of larger matrices."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jit_helpers import HASWELL, host_has, run_warm

from rvm.kernels import gemmshape, sgemm

# Around the tile edges: one row, a band, a band and one; one lane, a vector, a tile, a tile
# and one, a tile and the widest tail on half vectors; depths around the depth block.
SIZES_M = [1, sgemm.MR - 1, sgemm.MR, sgemm.MR + 1, 3 * sgemm.MR + 5]
SIZES_N = [1, sgemm.LANES - 1, sgemm.LANES, sgemm.NR - 1, sgemm.NR, sgemm.NR + 1]
SIZES_N += [sgemm.NR + max(1, gemmshape.HALF), 169]
SIZES_K = [1, 7, sgemm.KC, sgemm.KC + 3]


def _run(m: int, n: int, k: int, accumulate: bool, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    # Windows inside larger matrices: the row strides exceed the widths, and a canary
    # border around C's window shows any write outside it.
    a = rng.standard_normal((m, k + 3)).astype(np.float32)
    b = rng.standard_normal((k, n + 5)).astype(np.float32)
    c = rng.standard_normal((m + 2, n + 7)).astype(np.float32)
    want = c.astype(np.float64)
    product = a[:, 1 : k + 1].astype(np.float64) @ b[:, 2 : n + 2]
    want[1 : m + 1, 3 : n + 3] = product + (want[1 : m + 1, 3 : n + 3] if accumulate else 0)
    sgemm.sgemm(
        a.ctypes.data + 4 * 1, k + 3, b.ctypes.data + 4 * 2, n + 5,
        c.ctypes.data + 4 * (n + 7 + 3), n + 7, m, n, k, accumulate,
    )  # fmt: skip
    np.testing.assert_allclose(c, want, rtol=2e-5, atol=2e-5 * np.sqrt(k))


@pytest.mark.parametrize("m", SIZES_M)
@pytest.mark.parametrize("n", SIZES_N)
@pytest.mark.parametrize("k", SIZES_K)
def test_tile_edges_write(m: int, n: int, k: int) -> None:
    _run(m, n, k, accumulate=False)


@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (sgemm.MR + 1, sgemm.NR + 1, sgemm.KC + 3)])
def test_accumulates(m: int, n: int, k: int) -> None:
    _run(m, n, k, accumulate=True)


@pytest.mark.parametrize("accumulate", [False, True])
def test_wide_products_in_column_blocks(accumulate: bool) -> None:
    """A product wider than a column block (`COLUMN_BYTES` of B's rows) runs block by block,
    the last one partial."""
    k = sgemm.KC + 8
    block = gemmshape.COLUMN_BYTES // (4 * sgemm.KC) // sgemm.NR * sgemm.NR
    _run(sgemm.MR + 3, 4 * block + 7, k, accumulate)


def test_empty_depth_writes_zeros_or_keeps() -> None:
    c = np.full((3, 4), 5.0, np.float32)
    sgemm.sgemm(0, 0, 0, 4, c.ctypes.data, 4, 3, 4, 0, True)
    np.testing.assert_array_equal(c, 5.0)
    sgemm.sgemm(0, 0, 0, 4, c.ctypes.data, 4, 3, 4, 0, False)
    np.testing.assert_array_equal(c, 0.0)


def test_non_finite_values_propagate() -> None:
    a = np.ones((2, 3), np.float32)
    b = np.ones((3, 20), np.float32)
    b[1, 17] = np.inf
    b[2, 0] = np.nan
    c = np.empty((2, 20), np.float32)
    sgemm.sgemm(a.ctypes.data, 3, b.ctypes.data, 20, c.ctypes.data, 20, 2, 20, 3, False)
    assert np.isinf(c[:, 17]).all() and np.isnan(c[:, 0]).all()
    np.testing.assert_array_equal(np.delete(c, [0, 17], axis=1), 3.0)


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 40), st.integers(1, 120), st.integers(1, 300), st.booleans(), st.integers(0, 9)
)
def test_property_against_numpy(m: int, n: int, k: int, accumulate: bool, seed: int) -> None:
    _run(m, n, k, accumulate, seed)


@pytest.mark.parametrize("m", [2 * sgemm.MR, 2 * sgemm.MR + 1, 4 * sgemm.MR - 1])
@pytest.mark.parametrize("n", [sgemm.NR - 1, 2 * sgemm.NR + 3, 7 * sgemm.NR])
def test_next_band_prefetched_from_any_tile_count(m: int, n: int) -> None:
    """Each band's tiles prefetch A's next band a row or more a tile (`sgemm._row_into_l2`):
    fewer tiles than rows, more, a last band of fewer rows, two depth blocks; the products
    match NumPy's."""
    _run(m, n, sgemm.KC + 9, accumulate=False)


@pytest.mark.parametrize("n", [sgemm.NR + 3, 2 * sgemm.NR])
def test_columns_beside_the_window_stay_out(n: int) -> None:
    """Bands of A across a packed B (`sgemm.PACK_B`, the AVX2 path) or B in place: B's columns
    just past the window (infinities here) never reach C, a NaN inside it does."""
    m, k = 3 * sgemm.MR + 1, sgemm.KC + 5
    rng = np.random.default_rng(1)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n + 9)).astype(np.float32)
    b[:, n:] = np.inf
    b[3, 1] = np.nan
    c = np.empty((m, n), np.float32)
    sgemm.sgemm(a.ctypes.data, k, b.ctypes.data, n + 9, c.ctypes.data, n, m, n, k, False)
    want = a.astype(np.float64) @ b[:, :n]
    assert np.isnan(c[:, 1]).all()
    np.testing.assert_allclose(c, want, rtol=2e-5, atol=2e-5 * np.sqrt(k))


def test_scratch_outlives_its_use_in_a_warm_process() -> None:
    """A plain GEMM (B packed per call where `sgemm.PACK_B`: its panels are a scratch array the
    micro-kernel reaches only through its address) in a second process loading its code from
    Numba's cache, allocations from 4 KB on mapped apart (``MALLOC_MMAP_THRESHOLD_``) so that
    a free unmaps them: the scratch must outlive the code that reads it
    (`rvm.kernels.jitting.alive`). `_packed_blocks`' panels did not (s38): the README's first
    program crashed in a warm process on AVX2."""
    _run(9, 40, sgemm.KC + 3, False)  # the signature the process loads, cached here if not yet
    script = (
        "import numpy as np\n"
        "from rvm.kernels import sgemm\n"
        "rng = np.random.default_rng(0)\n"
        "for m, n, k in ((8, 128, 784), (9, 40, 2 * sgemm.KC + 3), (1, 1000, 512)):\n"
        "    a = rng.standard_normal((m, k)).astype(np.float32)\n"
        "    b = rng.standard_normal((k, n)).astype(np.float32)\n"
        "    c = np.empty((m, n), np.float32)\n"
        "    sgemm.sgemm(a.ctypes.data, k, b.ctypes.data, n, c.ctypes.data, n, m, n, k, False)\n"
        "    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)\n"
    )
    run_warm(script)


@pytest.mark.parametrize("m,n,k", [(1, sgemm.NR + 1, 7), (sgemm.MR + 1, 169, sgemm.KC + 3),
                                   (3 * sgemm.MR + 5, sgemm.LANES - 1, 5)])  # fmt: skip
@pytest.mark.parametrize("bias", ["rows", "one", "none"])
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("act", [0, 1])
def test_epilogue_in_the_store(m: int, n: int, k: int, bias: str, residual: bool, act: int) -> None:
    """`sgemm.sgemm_segments`' epilogue where it applies one (`sgemm.fuses`, the AVX2 path):
    C = act(A @ B + bias + residual) on a window of C (a canary border), the residual of C's
    layout elsewhere, a bias a row or one for all or none, across depth blocks; a NaN of the
    residual stays NaN through the ReLU, as in the pass (`rvm.kernels.epipass`)."""
    if not sgemm.fuses(1, n, n, 0, k):
        pytest.skip("this CPU's GEMM leaves the epilogue to the pass (sgemm.FUSED_EPILOGUE)")
    rng = np.random.default_rng(m + n + k)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = np.full((m + 2, n + 7), 7.0, np.float32)
    r = rng.standard_normal((m + 2, n + 7)).astype(np.float32)
    r[m // 2 + 1, 3 + n // 2] = np.nan
    biases = rng.standard_normal(m if bias == "rows" else 1).astype(np.float32)
    want = c.astype(np.float64)
    value = a.astype(np.float64) @ b + (biases[:, None] if bias != "none" else 0)
    value = value + (r[1 : m + 1, 3 : n + 3] if residual else 0)
    want[1 : m + 1, 3 : n + 3] = np.where(value < 0, 0, value) if act else value
    at_c = c.ctypes.data + 4 * (n + 7 + 3)
    epilogue = (
        biases.ctypes.data if bias != "none" else 0,
        1 if bias == "rows" else 0,
        act,
        (r.ctypes.data - c.ctypes.data) // 4 if residual else 0,
    )
    sgemm.sgemm_segments(a.ctypes.data, k, b.ctypes.data, n, 0, at_c, n + 7, m, k, 1, n, 0, 0,
                         False, 0, 0, 0, epilogue)  # fmt: skip
    np.testing.assert_allclose(c, want, rtol=2e-5, atol=2e-5 * np.sqrt(k))
    assert np.isnan(c[m // 2 + 1, 3 + n // 2]) == residual


# C's columns the float64 reference of a wide product takes at a time (`_check_by_columns`).
REFERENCE_COLUMNS = 4096


def _check_by_columns(c: np.ndarray, expected: Callable[[int, int], np.ndarray], k: int) -> None:
    """``c`` against ``expected(lo, hi)``, the float64 reference of its columns ``lo:hi``, a
    block of `REFERENCE_COLUMNS` at a time, as one `assert_allclose` of the whole would: a
    product one column block wide at a small depth (`sgemm.column_step`: 29 088 columns at
    depth 9 on a 2 MB L2) by `sgemm.IN_PLACE_ROWS` rows would have a whole reference and its
    temporaries of hundreds of MB (a worker's peak grew by 0.84 GB in such a test), and a
    machine's blocks may be wider than this one's."""
    for lo in range(0, c.shape[1], REFERENCE_COLUMNS):
        hi = min(lo + REFERENCE_COLUMNS, c.shape[1])
        np.testing.assert_allclose(c[:, lo:hi], expected(lo, hi), rtol=2e-5, atol=2e-5 * np.sqrt(k))


# Depths: one depth block (`sgemm.KC` - 3) and two (KC + 3). A column block is then a few
# hundred columns (`sgemm.column_step`: 480 at KC 512 on a 2 MB L2), where a small depth's is
# tens of thousands (29 088 at depth 9) by `sgemm.IN_PLACE_ROWS` rows: seconds of data a test
# for the same walk over blocks. Small depths on the packed path: `test_last_columns_as_dots`.
@pytest.mark.parametrize(
    "m", [sgemm.MR, sgemm.MR + 1, sgemm.IN_PLACE_ROWS, sgemm.IN_PLACE_ROWS + 1]
)
@pytest.mark.parametrize("n", [2 * sgemm.NR, 3 * sgemm.NR + 5])
@pytest.mark.parametrize("k", [sgemm.KC - 3, sgemm.KC + 3])
@pytest.mark.parametrize("accumulate", [False, True])
def test_packed_in_the_first_band_or_before(m: int, n: int, k: int, accumulate: bool) -> None:
    """The packed path with few rows (`sgemm.packs_in_place`: the first band reads B's whole
    panels in place and writes them for the other bands; one band writes none) and with
    more (a pass packs B first), whole panels and a last partial one, across depth blocks
    and column blocks (B's rows of more than `sgemm.column_step` columns), B a window of a
    wider matrix, a bias a row and a ReLU: every band's rows right, the canary border kept."""
    assert sgemm.packs_in_place(m) == (m <= sgemm.IN_PLACE_ROWS)
    if not sgemm.fuses(1, n, n, 0, k):
        pytest.skip("this CPU's GEMM does not pack B (sgemm.PACK_B)")
    rng = np.random.default_rng(m + n + k)
    width = n + sgemm.one_block(k)  # more than one block of C's columns (`sgemm.column_step`)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, width + 6), np.float32)  # drawn as float32: no float64 copy
    c = rng.standard_normal((m + 2, width + 7), np.float32)
    biases = rng.standard_normal(m).astype(np.float32)
    before = c.copy()
    sgemm.sgemm_segments(a.ctypes.data, k, b.ctypes.data + 4 * 2, width + 6, 0,
                         c.ctypes.data + 4 * (width + 7 + 3), width + 7, m, k, 1, width, 0, 0,
                         accumulate, 0, 0, 0, (biases.ctypes.data, 1, 1, 0))  # fmt: skip

    def expected(lo: int, hi: int) -> np.ndarray:  # C's columns lo:hi; B's column j is C's j + 1
        want = before[:, lo:hi].astype(np.float64)
        x0, x1 = max(lo, 3), min(hi, width + 3)  # the product's columns among them
        if x0 < x1:
            value = a.astype(np.float64) @ b[:, x0 - 1 : x1 - 1] + biases[:, None]
            value = value + (want[1 : m + 1, x0 - lo : x1 - lo] if accumulate else 0)
            want[1 : m + 1, x0 - lo : x1 - lo] = np.maximum(value, 0)
        return want

    _check_by_columns(c, expected, k)


# The tail in the first column block at depth 5 (less than a vector) and at KC + 3 (two depth
# blocks); alone in the last column block at one depth block's KC - 3 and at KC + 3, whose
# column blocks are a few hundred columns (depth 5's: 52 416 on a 2 MB L2, by 512 rows).
@pytest.mark.parametrize("m", [sgemm.MR + 1, sgemm.IN_PLACE_ROWS, sgemm.IN_PLACE_ROWS + 5])
@pytest.mark.parametrize("tail", [1, sgemm.TAIL_DOTS, sgemm.TAIL_DOTS + 1])
@pytest.mark.parametrize(
    ("k", "blocks"), [(5, 1), (sgemm.KC + 3, 1), (sgemm.KC - 3, 2), (sgemm.KC + 3, 2)]
)
@pytest.mark.parametrize("accumulate", [False, True])
def test_last_columns_as_dots(m: int, tail: int, k: int, blocks: int, accumulate: bool) -> None:
    """A packed product's last panel of at most `sgemm.TAIL_DOTS` columns (a quarter of a
    vector's lanes) runs as dot products along the depth (`microkernel.tail_dots`), one more
    column in a tile: with the first band packing B or a pass before it, across depth
    blocks, the tail after whole panels of its column block or alone in the last block,
    writing or adding, a bias a row, the residual (a NaN of it stays NaN through the ReLU)
    and a ReLU: every column right, the canary border kept."""
    assert sgemm.TAIL_DOTS == sgemm.LANES // 4
    if not sgemm.fuses(1, sgemm.NR, sgemm.NR, 0, k):
        pytest.skip("this CPU's GEMM does not pack B (sgemm.PACK_B)")
    wide = sgemm.one_block(k) + sgemm.NR  # more than one block (`sgemm.column_step`)
    step = sgemm.column_step(k, wide)
    n = (2 * sgemm.NR if blocks == 1 else -(-wide // step) * step) + tail
    rng = np.random.default_rng(m + n + k)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n + 6), np.float32)  # drawn as float32: no float64 copy
    c = rng.standard_normal((m + 2, n + 7), np.float32)
    r = rng.standard_normal((m + 2, n + 7), np.float32)
    r[m, n + 2] = np.nan  # the last row's last column: a dot's
    biases = rng.standard_normal(m).astype(np.float32)
    before = c.copy()
    epilogue = (biases.ctypes.data, 1, 1, (r.ctypes.data - c.ctypes.data) // 4)
    sgemm.sgemm_segments(a.ctypes.data, k, b.ctypes.data + 4 * 2, n + 6, 0,
                         c.ctypes.data + 4 * (n + 7 + 3), n + 7, m, k, 1, n, 0, 0, accumulate,
                         0, 0, 0, epilogue)  # fmt: skip

    def expected(lo: int, hi: int) -> np.ndarray:  # C's columns lo:hi; B's column j is C's j + 1
        want = before[:, lo:hi].astype(np.float64)
        x0, x1 = max(lo, 3), min(hi, n + 3)  # the product's columns among them
        if x0 < x1:
            value = a.astype(np.float64) @ b[:, x0 - 1 : x1 - 1] + biases[:, None]
            value = value + r[1 : m + 1, x0:x1]
            value = value + (want[1 : m + 1, x0 - lo : x1 - lo] if accumulate else 0)
            want[1 : m + 1, x0 - lo : x1 - lo] = np.where(value < 0, 0, value)
        return want

    _check_by_columns(c, expected, k)
    assert np.isnan(c[m, n + 2])


def test_applies_to_float32_only() -> None:
    assert sgemm.applies(np.zeros(1, np.float32))
    assert not sgemm.applies(np.zeros(1, np.float64))


@pytest.mark.parametrize("width", [1, 5, sgemm.LANES - 1, sgemm.LANES, sgemm.NR + 3])
@pytest.mark.parametrize("segments", [1, 2, sgemm.MR // 2 * 3 + 1])
@pytest.mark.parametrize("indexed", [False, True])
def test_segments(width: int, segments: int, indexed: bool) -> None:
    """Runs of columns: B's run s at s * b_step, C's at s * c_step, B's rows by stride or by
    a table (a convolution's taps in place); narrow runs share a tile, one per vector."""
    rng = np.random.default_rng(width * 100 + segments)
    m, k = 2 * sgemm.MR + 3, sgemm.KC + 9
    b_step, c_step = width + 3, width + 1
    a = rng.standard_normal((m, k)).astype(np.float32)
    span = (segments - 1) * b_step + width
    order = rng.permutation(k)  # the table's rows: a shuffled stack of B's
    b = rng.standard_normal(k * span + 11).astype(np.float32)
    c = np.full((m, segments * c_step + 2), 9.0, np.float32)
    starts = order * span + 7 if indexed else np.arange(k) * span
    b_at = b.ctypes.data + (0 if indexed else 4 * 7)
    table = starts.astype(np.int64)
    sgemm.sgemm_segments(
        a.ctypes.data, k, b_at, span, table.ctypes.data if indexed else 0,
        c.ctypes.data, c.shape[1], m, k, segments, width, b_step, c_step, False, 0, 0, 0,
        sgemm.NO_EPILOGUE,
    )  # fmt: skip
    want = np.full(c.shape, 9.0)
    for s in range(segments):
        rows = np.stack([b[st + 7 * (not indexed) + s * b_step :][:width] for st in starts])
        want[:, s * c_step : s * c_step + width] = a.astype(np.float64) @ rows
    np.testing.assert_allclose(c, want, rtol=2e-5, atol=2e-4)


@pytest.mark.parametrize("width", [3, sgemm.LANES + 1, sgemm.NR, 2 * sgemm.NR + 5])
@pytest.mark.parametrize("indexed", [False, True])
@pytest.mark.parametrize("epilogue", [False, True])
def test_runs_end_to_end_in_c(width: int, indexed: bool, epilogue: bool) -> None:
    """Runs of B (``b_step`` apart, their rows by stride or through a table) whose C runs lie
    end to end (``c_step == width``: a convolution's output rows): where the GEMM packs B
    (`sgemm.packs`) its panels take pieces of several runs (a panel across runs, several runs
    a panel when they are narrow) and the epilogue applies (`sgemm.fuses`); elsewhere the
    runs read in place. Across depth blocks, with a last partial panel."""
    if epilogue and not sgemm.fuses(7, width, width, 0, 1):
        pytest.skip("this CPU's GEMM leaves the epilogue to the pass (sgemm.FUSED_EPILOGUE)")
    assert sgemm.packs(7, width, width, 0) == sgemm.PACK_B
    assert not sgemm.packs(7, width, width + 1, 0) and not sgemm.packs(1, width, 0, 9)
    rng = np.random.default_rng(width + 10 * indexed)
    m, k, segments, b_step = 2 * sgemm.MR + 1, sgemm.KC + 5, 7, width + 2
    a = rng.standard_normal((m, k)).astype(np.float32)
    span = (segments - 1) * b_step + width
    order = rng.permutation(k)
    b = rng.standard_normal(k * span + 3).astype(np.float32)
    starts = order * span + 3 if indexed else np.arange(k) * span
    table = starts.astype(np.int64)
    n = segments * width
    c = np.full((m, n + 4), 5.0, np.float32)
    r = rng.standard_normal((m, n + 4)).astype(np.float32)
    biases = rng.standard_normal(m).astype(np.float32)
    rows = np.stack([np.concatenate([b[st + s * b_step :][:width] for s in range(segments)])
                     for st in starts])  # fmt: skip
    want = np.full(c.shape, 5.0)
    value = a.astype(np.float64) @ rows
    if epilogue:
        value = np.maximum(value + biases[:, None] + r[:, :n], 0)
    want[:, :n] = value
    sgemm.sgemm_segments(
        a.ctypes.data, k, b.ctypes.data, span, table.ctypes.data if indexed else 0,
        c.ctypes.data, c.shape[1], m, k, segments, width, b_step, width, False, 0, 0, 0,
        (biases.ctypes.data, 1, 1, (r.ctypes.data - c.ctypes.data) // 4) if epilogue
        else sgemm.NO_EPILOGUE,
    )  # fmt: skip
    np.testing.assert_allclose(c, want, rtol=2e-5, atol=2e-4)


@pytest.mark.parametrize(
    "cpu,features,lanes",
    [
        pytest.param("haswell", HASWELL, 8, id="haswell"),
        # Numba's generic CPU has no features: SSE's lanes, no FMA. A second cold process
        # building the library for another CPU (seconds of LLVM): with -m slow.
        pytest.param("generic", None, 4, marks=pytest.mark.slow, id="generic"),
    ],
)
def test_other_vector_widths(
    tmp_path, haswell_caches, cpu: str, features: str | None, lanes: int
) -> None:
    """The kernel's tile follows the CPU Numba compiles for (`NUMBA_CPU_NAME` and
    `NUMBA_CPU_FEATURES`): AVX2 and plain SSE give the same products as AVX-512, and so does
    the one-row product (`rvm.kernels.gemv`). Skipped at the host's own lanes (every test
    runs those) and where the host cannot run the target's code."""
    if lanes == sgemm.LANES:
        pytest.skip("the host's own vector width: every test covers it")
    if cpu == "haswell" and not host_has("avx2"):
        pytest.skip("the host has no AVX2")

    script = (
        "import numpy as np\n"
        "from rvm.kernels import sgemm\n"
        f"assert sgemm.LANES == {lanes}, sgemm.LANES\n"
        "rng = np.random.default_rng(0)\n"
        "for m, n, k in [(1, 1, 1), (7, 17, 3), (13, 40, 600), (25, 9, 70)]:\n"
        "    a = rng.standard_normal((m, k)).astype(np.float32)\n"
        "    b = rng.standard_normal((k, n)).astype(np.float32)\n"
        "    c = np.empty((m, n), np.float32)\n"
        "    sgemm.sgemm(a.ctypes.data, k, b.ctypes.data, n, c.ctypes.data, n, m, n, k, False)\n"
        "    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)\n"
        "from rvm.kernels import gemv\n"  # the one-row product's tiles, at the same lanes
        f"assert gemv.LANES == {lanes}\n"
        "for k, n in [(1, 1), (5, 3), (9, 8 * gemv.LANES + 3), (600, 40)]:\n"
        "    x = rng.standard_normal(k).astype(np.float32)\n"
        "    b = rng.standard_normal((k, n)).astype(np.float32)\n"
        "    c = np.empty(n, np.float32)\n"
        "    gemv.row(k, x.ctypes.data, b.ctypes.data, n, c.ctypes.data, n)\n"
        "    np.testing.assert_allclose(c, x.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)\n"
    )
    env = dict(os.environ, NUMBA_CPU_NAME=cpu, NUMBA_CACHE_DIR=str(tmp_path))
    env.pop("NUMBA_CPU_FEATURES", None)
    if features:
        env["NUMBA_CPU_FEATURES"] = features
    if cpu == "haswell":  # its GEMMs the AVX2 path's test builds too (test_cpu)
        env.update(haswell_caches)
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]


@pytest.mark.parametrize("run", [1, 3, sgemm.LANES + 1, sgemm.NR - 1, sgemm.NR + 5, 111])
@pytest.mark.parametrize("indexed", [False, True])
def test_pack_moves_each_piece_and_zeros_past_the_columns(run: int, indexed: bool) -> None:
    """`sgemm._pack`'s panels hold B's columns bit for bit, pieces of several runs (``b_step``
    apart) in a panel, the last panel's columns past ``cols`` zero and nothing written past
    the panels, from a column ``j0`` inside a run, rows by stride or through a table."""
    rng = np.random.default_rng(run + 1000 * indexed)
    kc, p0, b_step, runs = 5, 2, run + 4, 9
    span = runs * b_step
    b = rng.standard_normal((p0 + kc) * span + 16).astype(np.float32)
    starts = rng.permutation(p0 + kc) * span if indexed else np.arange(p0 + kc) * span
    table = starts.astype(np.int64)
    j0 = run // 2 + run
    cols = runs * run - j0 - 1
    columns = [(q // run) * b_step + q % run for q in range(j0, j0 + cols)]
    want = np.zeros((-(-cols // sgemm.NR), kc, sgemm.NR), np.float32)
    for r in range(kc):
        for i, at in enumerate(columns):
            want[i // sgemm.NR, r, i % sgemm.NR] = b[starts[p0 + r] + at]
    into = np.full(want.size + 16, np.nan, np.float32)
    sgemm._pack(b.ctypes.data, span, table.ctypes.data if indexed else 0, p0, kc, j0, cols, run,
                b_step, into.ctypes.data)  # fmt: skip
    assert np.array_equal(into[: want.size].view(np.int32), want.ravel().view(np.int32))
    assert np.isnan(into[want.size :]).all()
