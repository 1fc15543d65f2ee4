"""The strided GEMM and GEMV that jit kernels call (NumPy's BLAS through an LLVM-level call),
whole and split over rvm's thread pool."""

from __future__ import annotations

import numba as nb
import numpy as np
import pytest

import rvm
from rvm.kernels import blas, segments, sgemm

pytestmark = pytest.mark.skipif(not blas.AVAILABLE, reason="NumPy's BLAS has no ILP64 CBLAS")


@nb.njit
def _gemm(a, ia, lda, b, ib, ldb, c, ic, ldc, m, n, k, beta):  # type: ignore[no-untyped-def]
    blas.gemm(a, ia, lda, b, ib, ldb, c, ic, ldc, m, n, k, beta)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("beta", [0.0, 1.0, 0.5])
def test_windows_of_flat_arrays(dtype: str, beta: float) -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((5, 7)).astype(dtype)
    b = rng.standard_normal((9, 11)).astype(dtype)
    c = rng.standard_normal((6, 8)).astype(dtype)
    want = c.copy()
    want[1:4, 2:6] = beta * want[1:4, 2:6] + a[1:4, 3:5] @ b[2:4, 1:5]
    _gemm(a, 1 * 7 + 3, 7, b, 2 * 11 + 1, 11, c, 1 * 8 + 2, 8, 3, 4, 2, beta)
    np.testing.assert_allclose(c, want, rtol=1e-5)


def test_large_and_strided() -> None:
    rng = np.random.default_rng(1)
    a = rng.standard_normal((64, 64)).astype(np.float32)
    b = rng.standard_normal((64, 3366)).astype(np.float32)
    c = np.full((64, 3248), np.nan, np.float32)
    _gemm(a, 0, 64, b, 59, 3366, c, 0, 3248, 64, 3248, 64, 0.0)  # beta 0 ignores NaN in C
    np.testing.assert_allclose(c, a @ b[:, 59 : 59 + 3248], rtol=1e-4, atol=1e-4)


def test_empty_depth_scales_c() -> None:
    a, b = np.zeros((2, 1)), np.zeros((1, 3))
    c = np.full((2, 3), 4.0)
    _gemm(a, 0, 1, b, 0, 3, c, 0, 3, 2, 3, 0, 0.5)
    np.testing.assert_array_equal(c, np.full((2, 3), 2.0))


@pytest.mark.parametrize(
    "args",
    [
        (0, 7, 0, 11, 5 * 8 + 2, 8),  # C window runs past the end
        (-1, 7, 0, 11, 0, 8),  # negative offset
        (0, 1, 0, 11, 0, 8),  # A's row stride shorter than its rows
        (30, 7, 0, 11, 0, 8),  # A window runs past the end
    ],
)
def test_out_of_bounds_windows_raise(args) -> None:
    ia, lda, ib, ldb, ic, ldc = args
    a, b, c = np.ones((5, 7)), np.ones((9, 11)), np.ones((6, 8))
    before = c.copy()
    with pytest.raises(IndexError, match="outside its array"):
        _gemm(a, ia, lda, b, ib, ldb, c, ic, ldc, 3, 4, 2, 1.0)
    np.testing.assert_array_equal(c, before)


@nb.njit
def _gemm_split(a, ia, lda, b, ib, ldb, c, ic, ldc, m, n, k, beta):  # type: ignore[no-untyped-def]
    blas.gemm_split(a, ia, lda, b, ib, ldb, c, ic, ldc, m, n, k, beta)


# (m, n, k): split along n (64 x 3025), along m (1000 rows), odd sizes that leave a short
# last piece, products too small to split, and the sizes around 1e6 multiply-adds where
# OpenBLAS's batched GEMM crashed (rvm never calls it: the pool runs the pieces).
SPLIT_SHAPES = [
    (64, 3025, 144),
    (1000, 169, 512),
    (97, 1013, 61),
    (301, 37, 997),
    (5, 7, 3),
    (100, 100, 100),
    (100, 101, 103),
    (128, 128, 128),
    (1, 4099, 517),
    (4099, 1, 517),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("beta", [0.0, 0.5])
@pytest.mark.parametrize("shape", SPLIT_SHAPES)
def test_split_gemm_matches_numpy_on_windows(blas_threads, shape, beta, dtype) -> None:
    """The pieces of a split product, each one BLAS call on the pool, tile the whole window."""
    m, n, k = shape
    rng = np.random.default_rng(2)
    a = rng.standard_normal((m + 2, k + 3)).astype(dtype)
    b = rng.standard_normal((k + 1, n + 5)).astype(dtype)
    c = rng.standard_normal((m + 1, n + 4)).astype(dtype)
    want = c.copy()
    want[1:, 2 : 2 + n] = beta * want[1:, 2 : 2 + n] + a[2:, 1 : 1 + k] @ b[1:, 3 : 3 + n]
    _gemm_split(a, 2 * (k + 3) + 1, k + 3, b, n + 5 + 3, n + 5, c, n + 4 + 2, n + 4, m, n, k, beta)
    tol = 1e-4 if dtype == "float32" else 1e-10
    np.testing.assert_allclose(c, want, rtol=tol, atol=tol * np.sqrt(k))


def test_split_gemm_checks_its_windows(blas_threads) -> None:
    a, b, c = np.ones((100, 300)), np.ones((300, 400)), np.ones((100, 400))
    with pytest.raises(IndexError, match="outside its array"):
        _gemm_split(a, 0, 300, b, 1, 400, c, 0, 400, 100, 400, 300, 0.0)
    assert (c == 1).all()


@pytest.mark.parametrize("threads", [2, 3, 4])
def test_split_parts_are_a_multiple_of_the_threads(threads: int) -> None:
    """A product is cut into whole rounds of the threads (3 pieces on 2 threads left one of
    them two and the other idle a third of the time); fewer pieces than threads stay."""
    parts = nb.njit(lambda work, least: blas.split_parts(work, least))
    before = rvm.get_num_threads()
    rvm.set_num_threads(threads)
    try:
        for pieces in range(2, blas.PIECES_PER_THREAD * threads + 1):
            got = parts(pieces * 1000 + 999, 1000)  # worth `pieces`
            assert got == (pieces // threads * threads if pieces >= threads else pieces)
        assert parts(10**9, 1000) == blas.PIECES_PER_THREAD * threads
        assert parts(1999, 1000) == 1  # too little work for two pieces
        # A side cut into equal shares of whole steps (`parfor.piece_range`): as many pieces
        # as asked while each keeps a step, still whole rounds of the threads (224 rows in
        # steps of 32 rounded up were 7 pieces); a short side takes fewer.
        pieces = nb.njit(lambda side, work, least: blas._pieces(side, work, least))
        most = blas.PIECES_PER_THREAD * threads
        assert pieces(most * blas.SPLIT_ALIGN, 10**9, 1000) == most
        assert pieces(224, 10**9, 1000) == min(most, 224 // blas.SPLIT_ALIGN // threads * threads)
        short = pieces(3 * blas.SPLIT_ALIGN + 1, 10**9, 1000)
        assert short == (3 // threads * threads if threads <= 3 else 3)
        assert pieces(10**6, 1999, 1000) == 1
    finally:
        rvm.set_num_threads(before)


_packed_cut = nb.njit(lambda m, n, k, parts, mm, nm, b: blas.packed_cut(m, n, k, parts, mm, nm, b))
_moved = nb.njit(lambda m, n, k, mp, np_: sgemm.moved(m, n, k, mp, np_))


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("batches", [1, 3])
@pytest.mark.parametrize(
    "m,n,k,mm,nm",
    [(256, 196, 1024, 10, 12), (4096, 128, 512, 256, 8), (64, 3136, 256, 2, 196),
     (384, 49, 832, 16, 3), (50, 40, 30, 1, 1), (100, 20, 700, 6, 1)],
)  # fmt: skip
def test_packed_cut_moves_the_least_of_the_most_pieces(threads, batches, m, n, k, mm, nm) -> None:
    """`blas.packed_cut` against every cut by brute force: within the bounds and the pieces
    asked, the most pieces that keep the threads even (the batches' pieces a multiple of
    them, or fewer than them; where none does, of all), of those the fewest floats moved
    (`sgemm.moved`)."""
    before = rvm.get_num_threads()
    rvm.set_num_threads(threads)
    try:
        for parts in (1, 2, 3, 8, 12):
            cuts = [(a, c) for a in range(1, min(parts, mm) + 1)
                    for c in range(1, min(nm, parts // a) + 1)]  # fmt: skip
            even = [(a, c) for a, c in cuts
                    if batches * a * c % threads == 0 or batches * a * c < threads]  # fmt: skip
            cuts = even or cuts  # none even (3 batches on 2 threads, one piece each): all
            most = max(a * c for a, c in cuts)
            least = min(_moved(m, n, k, a, c) for a, c in cuts if a * c == most)
            got = _packed_cut(m, n, k, parts, mm, nm, batches)
            assert got in cuts and got[0] * got[1] == most
            assert _moved(m, n, k, *got) == least
    finally:
        rvm.set_num_threads(before)


def test_packed_cut_weighs_packing_b_against_reading_a() -> None:
    """Bands pack all of B again each, column runs read all of A again each (`sgemm.moved`):
    on 8 pieces a deep product with few more rows than columns is cut into both, one with
    32 times the rows into bands only, one with far more columns than rows into columns
    only (two threads: resnet50's 1x1 convolutions on 14 x 14, a tall MatMul, one on 56 x
    56); one thread is one piece. The tall MatMul's columns are at most one block of B
    (`sgemm.one_block`, from the L2's size), so a band reads A once."""
    tall = min(128, sgemm.one_block(512))
    before = rvm.get_num_threads()
    rvm.set_num_threads(2)
    try:
        mixed = _packed_cut(256, 196, 1024, 8, 10, 12, 1)
        assert mixed[0] > 1 and mixed[1] > 1 and mixed[0] * mixed[1] == 8
        assert _packed_cut(4096, tall, 512, 8, 256, 8, 1) == (8, 1)
        assert _packed_cut(64, 3136, 256, 8, 2, 196, 1) == (1, 8)
        a_again = _moved(4096, tall, 512, 1, 8) - _moved(4096, tall, 512, 1, 1)
        assert a_again == 7 * 4096 * 512  # each column run reads A once (<= one block)
        assert _moved(256, 196, 1024, 8, 1) - _moved(256, 196, 1024, 1, 1) == 2 * 7 * 1024 * 196
        rvm.set_num_threads(1)
        assert _packed_cut(256, 196, 1024, 1, 10, 12, 1) == (1, 1)
    finally:
        rvm.set_num_threads(before)


@nb.njit
def _gemm_epilogue(a, b, c, m, n, k, epilogue):  # type: ignore[no-untyped-def]
    blas.gemm_epilogue(a, 0, k, b, 0, n, c, 0, n, m, n, k, epilogue)


@pytest.mark.parametrize(
    "shape,mixed", [((301, 203, 997), True), ((1001, 199, 611), False), ((37, 2051, 129), False)]
)
def test_split_gemm_epilogue_on_bands_and_column_runs(blas_threads, shape, mixed) -> None:
    """A GEMM with a bias, a residual and a ReLU in its store (`blas.gemm_epilogue`, where
    `sgemm.fuses`), cut on two threads into bands by column runs (`blas.packed_cut`: each
    piece's bias from its first row, its C and residual from its first row and column), and
    into column runs only; odd sizes, a depth past the depth block."""
    m, n, k = shape
    if mixed and blas_threads == 2:
        assert min(_packed_cut(m, n, k, 8, m // blas.SPLIT_ALIGN, n // blas.SPLIT_ALIGN, 1)) > 1
    rng = np.random.default_rng(m)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = np.full((m, n), np.nan, np.float32)
    res = rng.standard_normal((m, n)).astype(np.float32)
    bias = rng.standard_normal(m).astype(np.float32)
    want = a.astype(np.float64) @ b
    epilogue = sgemm.NO_EPILOGUE
    if sgemm.fuses(1, n, n, 0, k):
        epilogue = (bias.ctypes.data, 1, 1, (res.ctypes.data - c.ctypes.data) // 4)
        want = np.maximum(want + bias[:, None] + res, 0)
    _gemm_epilogue(a, b, c, m, n, k, epilogue)
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=2e-3)


def test_blas_threads_follow_rvms_count(blas_threads) -> None:
    assert nb.njit(lambda: blas.blas_threads())() == blas_threads


@nb.njit
def _matmul(a, b, out, b_t):  # type: ignore[no-untyped-def]
    blas.matmul(a, b, out, b_t)


# (m, n, k) large enough to split: GEMV of one row (by columns of b, or rows of b.T), of one
# column, and GEMM with b transposed along n and along m, at odd sizes.
MATMUL_SPLITS = [(1, 4097, 301), (1, 33, 9001), (2053, 1, 301), (67, 2051, 133), (2051, 67, 133)]


@pytest.mark.parametrize("b_t", [False, True], ids=["b", "b_t"])
@pytest.mark.parametrize("shape", MATMUL_SPLITS)
def test_split_matmul_matches_numpy(blas_threads, shape, b_t) -> None:
    m, n, k = shape
    rng = np.random.default_rng(3)
    a = rng.standard_normal((m, k)).astype("float32")
    b = rng.standard_normal((k, n)).astype("float32")
    out = np.full((m, n), np.nan, dtype="float32")
    _matmul(a, np.ascontiguousarray(b.T) if b_t else b, out, b_t)
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4 * np.sqrt(k))


@nb.njit
def _segments(
    a, ia, lda, b, ldb, table, c, ic, ldc, m, k, segs, width, bs, cs, batches, groups, ag, bb, cb
):  # type: ignore[no-untyped-def]  # noqa: E501
    segments.gemm_segments(a, ia, lda, b, ldb, table, c, ic, ldc, m, k, segs, width, bs, cs,
                           batches, groups, ag, bb, cb, 0, 0, sgemm.NO_EPILOGUE)  # fmt: skip


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(
    "groups,batches,og,cg,P",
    [(1, 1, 37, 29, 200), (4, 4, 37, 29, 200), (3, 6, 37, 29, 200), (1, 1, 16, 64, 3025)],
)
def test_segments_batched_groups(threads: int, groups: int, batches: int, og, cg, P) -> None:
    """A grouped 1x1 convolution's (image, group) products in one call, cut on the pool:
    each batch's A cycles through the groups, B and C step per batch. The last case
    (squeezenet's 64 -> 16 squeeze at 55x55) has too few rows to cut into bands and one run:
    its columns are cut."""
    import rvm

    before = rvm.get_num_threads()
    rvm.set_num_threads(threads)
    try:
        rng = np.random.default_rng(groups * 10 + batches)
        w = rng.standard_normal(groups * og * cg).astype(np.float32)
        x = rng.standard_normal(batches * cg * P).astype(np.float32)
        out = np.full(batches * og * P, np.nan, np.float32)
        none = np.empty(0, np.int64)
        _segments(w, 0, cg, x, P, none, out, 0, P, og, cg, 1, P, 0, 0, batches, groups,
                  og * cg, cg * P, og * P)  # fmt: skip
        for i in range(batches):
            a = w[(i % groups) * og * cg :][: og * cg].reshape(og, cg).astype(np.float64)
            b = x[i * cg * P :][: cg * P].reshape(cg, P)
            got = out[i * og * P :][: og * P].reshape(og, P)
            np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)
    finally:
        rvm.set_num_threads(before)


def test_segments_window_outside_raises() -> None:
    a, b = np.ones(12, np.float32), np.ones(20, np.float32)
    c = np.ones(12, np.float32)
    none = np.empty(0, np.int64)
    with pytest.raises(IndexError, match="outside"):  # C: 3 rows of 5 in 12 elements
        _segments(a, 0, 4, b, 5, none, c, 0, 5, 3, 4, 1, 5, 0, 0, 1, 1, 0, 0, 0)
    with pytest.raises(IndexError, match="outside"):  # a table row past B's end
        table = np.array([0, 5, 10, 17], np.int64)
        _segments(a, 0, 4, b, 0, table, c, 0, 4, 3, 4, 1, 4, 0, 0, 1, 1, 0, 0, 0)
    with pytest.raises(IndexError, match="short table"):
        _segments(a, 0, 4, b, 0, np.zeros(2, np.int64), c, 0, 4, 3, 4, 1, 4, 0, 0, 1, 1, 0, 0, 0)


@nb.njit
def _segments_epilogue(a, b, table, c, m, k, segs, width, b_step, c_step, epilogue):  # type: ignore[no-untyped-def]  # noqa: E501
    segments.gemm_segments(a, 0, k, b, 0, table, c, 0, segs * c_step, m, k, segs, width, b_step,
                           c_step, 1, 1, 0, 0, 0, 0, 0, epilogue)  # fmt: skip


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("m,segs,width", [(96, 40, 37), (200, 3, 11), (13, 111, 5)])
def test_segments_packed_with_an_epilogue_cut_on_the_pool(threads: int, m, segs, width) -> None:
    """Runs of taps through a table, end to end in C (a convolution's rows; the GEMM packs
    them where it can: `sgemm.packs`), cut on two threads by the floats each cut moves
    (`blas.packed_cut`): along the runs where they outnumber C's rows (each piece packing its
    own), along the rows where not (200 channels of 33 positions), with a bias, a residual
    and a ReLU in the store where `sgemm.fuses`; an epilogue where it does not raises (runs
    not end to end)."""
    import rvm

    before = rvm.get_num_threads()
    rvm.set_num_threads(threads)
    try:
        rng = np.random.default_rng(m + segs)
        k, b_step = 2 * sgemm.KC // 3, width + 4
        span = (segs - 1) * b_step + width
        a = rng.standard_normal(m * k).astype(np.float32)
        b = rng.standard_normal(k + span).astype(np.float32)
        table = rng.permutation(k).astype(np.int64)
        c = np.full(m * segs * width, np.nan, np.float32)
        res = rng.standard_normal(c.size).astype(np.float32)
        bias = rng.standard_normal(m).astype(np.float32)
        rows = np.stack([np.concatenate([b[t + s * b_step :][:width] for s in range(segs)])
                         for t in table])  # fmt: skip
        want = a.reshape(m, k).astype(np.float64) @ rows
        fused = sgemm.fuses(segs, width, width, 0, k)
        epilogue = (bias.ctypes.data, 1, 1, res.ctypes.data) if fused else sgemm.NO_EPILOGUE
        if fused:
            want = np.maximum(want + bias[:, None] + res.reshape(m, -1), 0)
        _segments_epilogue(a, b, table, c, m, k, segs, width, b_step, width, epilogue)
        np.testing.assert_allclose(c.reshape(m, -1), want, rtol=1e-4, atol=1e-3)
        with pytest.raises(ValueError, match="epilogue"):
            one = (bias.ctypes.data, 1, 1, 0)
            c = np.empty(m * segs * (width + 1), np.float32)
            _segments_epilogue(a, b, table, c, m, k, segs, width, b_step, width + 1, one)
    finally:
        rvm.set_num_threads(before)


@nb.njit
def _plain_epilogue(a, b, c, m, k, width, batches, epilogue):  # type: ignore[no-untyped-def]
    none = np.empty(0, np.int64)
    segments.gemm_segments(a, 0, k, b, width, none, c, 0, width, m, k, 1, width, 0, width,
                           batches, 1, 0, k * width, m * width, 0, 0, epilogue)  # fmt: skip


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("batches", [1, 2])
@pytest.mark.parametrize("m,width", [(250, 197), (1030, 49), (64, 3137)])
def test_segments_packed_plain_run_cut_on_the_pool(threads: int, batches: int, m, width) -> None:
    """One plain run of B per batch (a 1x1 convolution's GEMM on its input's rows), packed
    (`sgemm.packs`) and cut on the pool, where C has more columns than rows and where it has
    more rows than columns (resnet50's 1x1 layers on 14 x 14 and 7 x 7 maps), with a bias, a
    residual and a ReLU in the store; rows, columns and depth not multiples of the tile or the
    depth block."""
    import rvm

    before = rvm.get_num_threads()
    rvm.set_num_threads(threads)
    try:
        rng = np.random.default_rng(m + width + batches)
        k = sgemm.KC + 37
        a = rng.standard_normal(m * k).astype(np.float32)
        b = rng.standard_normal(batches * k * width).astype(np.float32)
        c = np.full(batches * m * width, np.nan, np.float32)
        res = rng.standard_normal(c.size).astype(np.float32)
        bias = rng.standard_normal(m).astype(np.float32)
        epilogue = (bias.ctypes.data, 1, 1, res.ctypes.data)
        if not sgemm.fuses(1, width, width, 0, k):
            epilogue = sgemm.NO_EPILOGUE
        _plain_epilogue(a, b, c, m, k, width, batches, epilogue)
        for i in range(batches):
            want = a.reshape(m, k).astype(np.float64) @ b.reshape(batches, k, width)[i]
            if epilogue != sgemm.NO_EPILOGUE:
                want = np.maximum(want + bias[:, None] + res.reshape(batches, m, width)[i], 0)
            got = c.reshape(batches, m, width)[i]
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-3)
    finally:
        rvm.set_num_threads(before)


def test_segments_refuse_float64() -> None:
    a = np.ones(4)
    with pytest.raises(nb.core.errors.TypingError):
        _segments(a, 0, 2, a, 2, np.empty(0, np.int64), a, 0, 2, 2, 2, 1, 2, 0, 0, 1, 1, 0, 0, 0)


@pytest.mark.parametrize(
    "m,segs,width,table",
    [(16, 1, 3025, False), (1000, 1, 169, False), (96, 40, 37, True), (13, 111, 5, True),
     (250, 1, 197, False), (64, 55, 55, True), (96, 1, 49, False), (200, 1, 50, False)],
)  # fmt: skip
def test_segments_equal_bits_at_every_thread_count(m, segs, width, table) -> None:
    """A segmented GEMM cut on the pool, its shares guided (`parfor.guided_range`: along the
    columns of squeezenet's 1x1 squeezes, the rows of its last 512 -> 1000 layer, the runs of
    a tap table; products whose last panel runs as dot products, `sgemm.TAIL_DOTS`), gives the
    very bits it gives unsplit on one thread: the shares start on its tiles' grid."""
    rng = np.random.default_rng(m + segs + width)
    k = 77
    b_step = width + 3 if table else width
    span = (segs - 1) * b_step + width
    a = rng.standard_normal(m * k).astype(np.float32)
    b = rng.standard_normal(k + span if table else k * span).astype(np.float32)
    rows = rng.permutation(k).astype(np.int64) if table else np.empty(0, np.int64)
    ldb = 0 if table else span
    before = rvm.get_num_threads()
    outs = []
    try:
        for threads in (1, 2, 3):
            rvm.set_num_threads(threads)
            c = np.full(m * segs * width, np.nan, np.float32)
            _segments(a, 0, k, b, ldb, rows, c, 0, segs * width, m, k, segs, width, b_step,
                      width, 1, 1, 0, 0, 0)  # fmt: skip
            outs.append(c)
    finally:
        rvm.set_num_threads(before)
    assert not np.isnan(outs[0]).any()
    for c in outs[1:]:
        np.testing.assert_array_equal(c, outs[0])
