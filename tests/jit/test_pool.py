"""The pooling library (`rvm.kernels.pool`) against the NumPy reference, and the
kernels using it.

Max and average pools with every stride, dilation, asymmetric pad, ceil mode and
count_include_pad combination on odd sizes, windows of 2 to 9 taps (three a pass, the rest
one or two), inputs wide enough for the separable path, and the model zoo's geometries;
disagreeing operands raise before any memory is touched; kernels call the library without
literal arguments (each literal would compile the library function again).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from jit_helpers import Jit, check, prim, rand, var

from rvm import op
from rvm.kernels import maxrows, pool
from rvm.op import numpy_ref

GEOMETRIES = [
    (k, s, d, pads, ceil)
    for k, s, d, pads, ceil in itertools.product(
        [(3, 3), (2, 3), (2, 2), (1, 2)],
        [(1, 1), (2, 2), (3, 2)],
        [(1, 1), (2, 1)],
        [(0, 0, 0, 0), (1, 0, 2, 1)],
        [False, True],
    )  # fmt: skip
    if max(pads[0], pads[2]) < k[0] and max(pads[1], pads[3]) < k[1]
]


# float64 compiles every method again (seconds each): the default run keeps it on the rows,
# tiles and stacked methods (the float64 cases below, which skip a geometry another method
# takes: `_other_method`), every method with -m slow.
@pytest.mark.parametrize("dtype", ["float32", pytest.param("float64", marks=pytest.mark.slow)])
@pytest.mark.parametrize(("kind", "include"), [("max", False), ("avg", False), ("avg", True)])
def test_pool2d_matches_reference(kind, include, dtype) -> None:
    for shape in ((2, 3, 7, 9), (1, 2, 10, 5), (1, 2, 23, 31), (1, 150, 6, 5), (1, 2, 9, 101)):
        x = rand(shape, dtype)
        for k, s, d, pads, ceil in GEOMETRIES:
            if kind == "max":
                want = numpy_ref.max_pool2d(x, k, s, pads, d, ceil)
            else:
                want = numpy_ref.avg_pool2d(x, k, s, pads, d, ceil, include)
            out = np.full(want.shape, np.nan, dtype=dtype)
            flags = (int(kind == "max"), *k, *s, *d, *pads)
            pool.pool2d(x, out, *flags, int(ceil), int(include))
            np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6, err_msg=str(flags))


# The models' pools: squeezenet and inception_v1 (3x3 s2 ceil, wide), resnet50 (3x3 s2 p1,
# wide), inception's stride-1 3x3 (p1, avg with and without the padding), densenet's 2x2 s2,
# shufflenet's 3x3 s2 p1 average, inception_v2's 3x3 s2 padded on the bottom and right.
MODEL_POOLS = [
    ((1, 3, 111, 111), (3, 3), (2, 2), (0, 0, 0, 0), True),
    ((1, 2, 55, 55), (3, 3), (2, 2), (0, 0, 0, 0), True),
    ((1, 3, 112, 112), (3, 3), (2, 2), (1, 1, 1, 1), False),
    ((1, 5, 13, 13), (3, 3), (1, 1), (1, 1, 1, 1), False),
    ((1, 4, 28, 28), (2, 2), (2, 2), (0, 0, 0, 0), False),
    ((1, 3, 57, 57), (3, 3), (2, 2), (1, 1, 1, 1), False),
    ((2, 3, 15, 15), (3, 3), (2, 2), (1, 1, 1, 1), True),
    ((2, 5, 112, 112), (3, 3), (2, 2), (0, 0, 1, 1), False),  # an overhang on the right
]


@pytest.mark.parametrize(("kind", "include"), [("max", False), ("avg", False), ("avg", True)])
@pytest.mark.parametrize(("shape", "k", "s", "pads", "ceil"), MODEL_POOLS)
def test_model_pools_match_reference(kind, include, shape, k, s, pads, ceil) -> None:
    _check_pool(kind, include, shape, k, s, pads, ceil)


def _check_pool(kind, include, shape, k, s, pads, ceil) -> None:  # type: ignore[no-untyped-def]
    """`pool.pool2d` on a random input against the NumPy reference."""
    x = rand(shape)
    if kind == "max":
        want = numpy_ref.max_pool2d(x, k, s, pads, (1, 1), ceil)
    else:
        want = numpy_ref.avg_pool2d(x, k, s, pads, (1, 1), ceil, include)
    out = np.full(want.shape, np.nan, dtype="float32")
    pool.pool2d(x, out, int(kind == "max"), *k, *s, 1, 1, *pads, int(ceil), int(include))
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6, err_msg=str((shape, k, s)))


@pytest.mark.parametrize("bad", [(1, 3, 3, 4), (1, 3, 4, 3), (2, 3, 3, 3), (1, 2, 3, 3)])
def test_pool2d_geometry_disagreement_raises(bad) -> None:
    x, out = rand((1, 3, 7, 7)), np.zeros(bad, dtype="float32")  # right: (1, 3, 3, 3)
    with pytest.raises(ValueError, match="do not match the geometry"):
        pool.pool2d(x, out, 1, 3, 3, 2, 2, 1, 1, 0, 0, 0, 0, 0, 0)
    assert not out.any()


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_float_pool_kernels_call_the_library_entry_point_with_plain_ints(
    kind, tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("RVM_CACHE_DIR", str(tmp_path))  # kernels compiled here, not loaded
    for size, stride in ((3, 2), (2, 1)):
        x = var("x", ("n", 5, 11, 8))
        pooled = getattr(op, f"{kind}_pool2d")(x, pool_size=size, strides=stride, padding=1)
        func = prim([x], op.relu(pooled))
        kernel = Jit(func)
        call = next(ln for ln in kernel.record.source.splitlines() if "pool2d_entry((" in ln)
        params = call.split("), (", 1)[1]
        # 13 plain ints (nothing to type per value): the library's entry point is one C
        # function per dtype, compiled once whatever the values (`rvm.kernels.entry`)
        assert "np.int64(" not in params and params.count(",") == 13, call
        check(func, rand((2, 5, 11, 8)), kernel=kernel)


@pytest.mark.parametrize("strides", [(1, 1), (2, 2), (1, 2)])
def test_max_pool2d_propagates_nan_as_the_reference(strides) -> None:
    x = rand((1, 2, 9, 11))
    x[0, 0, 4, 5] = np.nan
    want = numpy_ref.max_pool2d(x, (3, 3), strides, (1, 1, 1, 1), (1, 1), False)
    out = np.zeros(want.shape, dtype="float32")
    pool.pool2d(x, out, 1, 3, 3, *strides, 1, 1, 1, 1, 1, 1, 0, 0)
    assert np.isnan(want).any()
    np.testing.assert_array_equal(np.isnan(out), np.isnan(want))
    np.testing.assert_allclose(out, want)


@pytest.mark.parametrize(("kind", "include"), [("max", False), ("avg", False), ("avg", True)])
def test_pools_keeping_few_of_their_positions_match_reference(kind, include) -> None:
    # Windows as large as the input (global-like) and large strides: the window-by-window path.
    cases = [((2, 5, 6, 5), (6, 5), (1, 1), (0, 0, 0, 0), False),
             ((1, 3, 8, 8), (7, 7), (1, 1), (1, 0, 0, 1), False),
             ((1, 4, 9, 9), (2, 2), (4, 4), (0, 0, 0, 0), True)]  # fmt: skip
    for shape, k, s, pads, ceil in cases:
        _check_pool(kind, include, shape, k, s, pads, ceil)


def _other_method(x, want, is_max, k, s, d, pads, *kept) -> bool:  # type: ignore[no-untyped-def]
    """True when ``x`` is float64 and its pool (output ``want``) goes by none of the methods
    ``kept`` (`pool._method`): float64 builds each method's task again, and the default run
    keeps float64 on the rows, tiles and stacked methods (every method with -m slow)."""
    ih, iw = x.shape[2:]
    how = pool._method.py_func(is_max, iw, *want.shape[2:], *k, *s, *d, ih, *pads[:2], x.itemsize)
    return x.dtype == np.float64 and how not in kept


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_pools_three_columns_wide_match_reference_with_nan(dtype) -> None:
    """`rvm.kernels.maxrows` (3 columns 1 apart, 1 or 2 apart between windows): 1 to 5 window
    rows (the fourth and fifth a second pass), whole vectors and a masked last one, padding,
    ceil mode and row dilation; a NaN in a window makes it NaN, as in the reference. The
    same for `rvm.kernels.avgrows`' averages, with and without the padding counted."""
    x = rand((1, 3, 21, 75), dtype)
    x[0, 1, 6, 40] = x[0, 2, 20, 74] = np.nan
    for kind, kh, (sh, sw), dh, pads, ceil in itertools.product(
        ["max", "avg", "avg_pad"], [1, 2, 4, 5], [(1, 1), (2, 2), (3, 2)], [1, 2],
        [(0, 0, 0, 0), (1, 1, 2, 1)], [0, 1]
    ):  # fmt: skip
        geometry = ((kh, 3), (sh, sw), pads, (dh, 1), bool(ceil))
        if kind == "max":
            want = numpy_ref.max_pool2d(x, *geometry)
        else:
            want = numpy_ref.avg_pool2d(x, *geometry, kind == "avg_pad")
        if _other_method(x, want, kind == "max", (kh, 3), (sh, sw), (dh, 1), pads, pool.ROWS):
            continue  # averages 1 apart: the phased method
        out = np.zeros(want.shape, dtype=dtype)
        flags = (kind == "max", kh, 3, sh, sw, dh, 1, *pads, ceil, kind == "avg_pad")
        pool.pool2d(x, out, *map(int, flags))
        np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6, err_msg=str(flags))


@pytest.mark.parametrize(
    ("is_max", "k", "s", "d", "method"),
    [(1, (3, 3), (2, 2), (1, 1), pool.ROWS), (1, (3, 3), (1, 1), (1, 1), pool.ROWS),
     (1, (2, 2), (2, 2), (2, 1), pool.FLAT), (1, (3, 3), (2, 2), (1, 2), pool.FLAT),
     (1, (2, 2), (2, 2), (1, 1), pool.TILES), (1, (1, 1), (1, 1), (1, 1), pool.PHASED),
     (0, (3, 3), (2, 2), (1, 1), pool.ROWS), (0, (2, 2), (2, 2), (1, 1), pool.TILES),
     (0, (3, 3), (1, 1), (1, 1), pool.PHASED)],
)  # fmt: skip
def test_max_pools_with_overlapping_windows_are_separable_over_whole_channels(
    is_max, k, s, d, method
) -> None:
    """`rvm.kernels.maxflat` takes max pools whose windows overlap (dilated ones whose span
    does), not those whose windows tile the input, nor averages; max pools 3 columns wide
    1 or 2 apart, and averages 2 apart, go by rows; 2x2 windows 2 apart by tiles, unless
    padded (on a 112-wide input)."""
    oh, ow = (112 - d[0] * (k[0] - 1) - 1) // s[0] + 1, (112 - d[1] * (k[1] - 1) - 1) // s[1] + 1
    assert pool._method(is_max, 112, oh, ow, *k, *s, *d, 112, 0, 0, 4) == method
    if method == pool.TILES:  # padded: the separable method
        assert pool._method(is_max, 112, oh + 1, ow + 1, *k, *s, *d, 112, 1, 1, 4) != method


@pytest.mark.parametrize(
    ("shape", "k", "s", "pads", "ceil"),
    [((2, 40, 57, 57), (3, 3), (2, 2), (0, 0, 0, 0), True),
     ((1, 64, 56, 56), (3, 3), (2, 2), (1, 1, 1, 1), False),
     ((1, 48, 28, 28), (3, 3), (1, 1), (1, 1, 1, 1), False)],
)  # fmt: skip
def test_max_pools_split_over_threads_match_reference(blas_threads, shape, k, s, pads, ceil):
    """Channels in chunks on the pool (large enough to split), each chunk its own scratch."""
    _check_pool("max", False, shape, k, s, pads, ceil)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_tiling_pools_match_reference_with_nan(blas_threads, dtype) -> None:
    """`rvm.kernels.tiles` (2x2 windows 2 apart): odd sizes (the last row and column left
    out), a NaN wins a max and makes an average NaN, channels split over threads when
    large (a 64 x 56 x 56 input)."""
    for shape in ((2, 3, 9, 7), (1, 64, 56, 56)):
        x = rand(shape, dtype)
        x[0, 1, 4, 5] = np.nan
        for kind in ("max", "avg"):
            geometry = ((2, 2), (2, 2), (0, 0, 0, 0), (1, 1), False)
            if kind == "max":
                want = numpy_ref.max_pool2d(x, *geometry)
            else:
                want = numpy_ref.avg_pool2d(x, *geometry, False)
            if _other_method(x, want, kind == "max", (2, 2), (2, 2), (1, 1), (0,) * 4, pool.TILES):
                continue  # the max of a 9 x 7 map: `rvm.kernels.narrow`
            out = np.full(want.shape, 7.0, dtype=dtype)
            pool.pool2d(x, out, int(kind == "max"), 2, 2, 2, 2, 1, 1, 0, 0, 0, 0, 0, 0)
            assert np.isnan(out[0, 1, 2, 2]) and np.isnan(out).sum() == 1
            np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6, err_msg=kind)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_pools_of_small_maps_stacked_match_reference_with_nan(dtype) -> None:
    """`rvm.kernels.stacked` (windows 1 apart on maps narrower than a vector): groups of
    channels (90 channels of 7 x 7: two whole groups and a part), the first and last
    channels' edge rows (reads that would leave the input), windows 1 to 5 taps wide (a
    second pass), row dilation and asymmetric padding; a NaN in a window makes
    its max or average NaN and never leaks into a window without it."""
    x = rand((1, 90, 7, 7), dtype)
    x[0, 0, 0, 0] = x[0, 45, 3, 6] = x[0, 89, 6, 6] = np.nan
    for kind, k, dh, pads in itertools.product(
        ["max", "avg", "avg_pad"], [(3, 3), (2, 1), (1, 5), (4, 4)], [1, 2],
        [(1, 1, 1, 1), (1, 0, 2, 1)]
    ):  # fmt: skip
        geometry = (k, (1, 1), pads, (dh, 1), False)
        if kind == "max":
            want = numpy_ref.max_pool2d(x, *geometry)
        else:
            want = numpy_ref.avg_pool2d(x, *geometry, kind == "avg_pad")
        oh, ow = want.shape[2:]
        method = pool._method.py_func(
            kind == "max", 7, oh, ow, *k, 1, 1, dh, 1, 7, pads[0], pads[1], x.itemsize
        )
        fits = oh <= 7 and ow <= 7  # else the rows or columns past the map: another method
        fits = fits and not (k == (3, 3) and pads[:2] == (1, 1) and (oh, ow) == (7, 7))  # rows
        assert (method == pool.STACKED) == fits or pool.STACKED_WIDTH <= 7, geometry
        if dtype == "float64" and method not in (pool.STACKED, pool.ROWS):
            continue  # the phased or flat method: float64 keeps to the methods above
        out = np.full(want.shape, 7.0, dtype=dtype)
        flags = (kind == "max", *k, 1, 1, dh, 1, *pads, 0, kind == "avg_pad")
        pool.pool2d(x, out, *map(int, flags))
        np.testing.assert_array_equal(np.isnan(out), np.isnan(want), err_msg=str(flags))
        np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6, err_msg=str(flags))


def test_pools_of_small_maps_split_over_threads_match_reference(blas_threads) -> None:
    """Inception's 3x3 pools 1 apart on 7 x 7 maps, large enough to split (`maxrows` and
    `avgrows`, groups of channels in one run)."""
    for kind, include in (("max", False), ("avg", False), ("avg", True)):
        _check_pool(kind, include, (1, 1024, 7, 7), (3, 3), (1, 1), (1, 1, 1, 1), False)


def test_padded_pools_of_narrow_maps_by_channel_match_reference_with_nan() -> None:
    """`rvm.kernels.maxrows` and `avgrows` over whole channels on maps narrower than
    `CHANNEL_WIDTH`: a row and a column of padding on top and on the left, an overhang on
    the bottom and the right (the first and last columns again), strides 1 and 2, row
    dilation; NaN wins a max and makes an average NaN, and only in its windows. Padded 1
    apart, the output as large as the input, 40 channels are groups (five of 7 and 5 with a
    32 KB L1d) reduced in one run each (`maxrows.planes_at_once`): NaN at the groups' edges
    stays in its channel. On rows narrower than a vector (9 x 7 maps, 100 channels), the
    padding is taken by masks in runs over groups of channels (`maxrows.centres_at_once`);
    2 apart there, an output row from its window rows loaded whole (`rvm.kernels.narrow`),
    and on the 20 columns (two vectors on AVX-512, four on AVX2) too."""
    for shape in ((1, 40, 13, 20), (1, 100, 9, 7)):
        ih, iw = shape[2:]
        x = rand(shape)
        m = maxrows.planes_at_once.py_func(ih, iw, ih, iw, 1, 1, shape[1])  # 7, 32 (32 KB L1d)
        assert 1 < m < shape[1]
        x[0, 0, 0, 0] = x[0, 1, ih - 1, iw - 1] = x[0, 2, 6, 5] = np.nan
        x[0, m - 1, ih - 1, iw - 1] = x[0, m, 0, 0] = x[0, -1, ih - 1, 0] = np.nan
        for kind, (sh, sw), dh, pads, ceil in itertools.product(
            ["max", "avg", "avg_pad"], [(1, 1), (2, 2), (2, 1)], [1, 2],
            [(0, 0, 1, 1), (1, 1, 1, 1), (1, 0, 2, 1)], [0, 1]
        ):  # fmt: skip
            geometry = ((3, 3), (sh, sw), pads, (dh, 1), bool(ceil))
            if kind == "max":
                want = numpy_ref.max_pool2d(x, *geometry)
            else:
                want = numpy_ref.avg_pool2d(x, *geometry, kind == "avg_pad")
            out = np.full(want.shape, 7.0, dtype="float32")
            flags = (kind == "max", 3, 3, sh, sw, dh, 1, *pads, ceil, kind == "avg_pad")
            method = pool._method.py_func(kind == "max", iw, *want.shape[2:], 3, 3, sh, sw, dh,
                                          1, ih, pads[0], pads[1], 4)  # fmt: skip
            wide = (want.shape[3] - 1) * 2 + 3 > 4 * pool.STACKED_WIDTH  # past four vectors
            assert (method == pool.NARROW) == (sw == 2 and dh == 1 and not wide), geometry
            pool.pool2d(x, out, *map(int, flags))
            np.testing.assert_array_equal(np.isnan(out), np.isnan(want), err_msg=str(geometry))
            np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6, err_msg=str(geometry))


@pytest.mark.parametrize(
    ("shape", "k", "pads", "ceil"),
    [((2, 41, 27, 27), (3, 3), (0, 0, 0, 0), True), ((3, 37, 14, 14), (3, 3), (1, 1, 1, 1), False),
     ((2, 45, 12, 13), (2, 2), (0, 0, 1, 1), True), ((2, 50, 28, 28), (2, 3), (1, 1, 1, 0), True)],
)  # fmt: skip
def test_narrow_pools_split_over_threads_match_reference_with_nan(blas_threads, shape, k, pads,
                                                                 ceil):  # fmt: skip
    """`rvm.kernels.narrow` (windows 2 apart, an output row from its window rows loaded
    whole) on the models' 12 x 12 to 28 x 28 maps: batches whose channels split over threads
    at odd counts (a chunk's rows stored whole over its next rows, never past its last),
    padding, ceil mode, windows of 2 or 3 rows; a NaN wins a max and makes an average NaN,
    at the first and last elements of chunks' planes too."""
    x = rand(shape)
    n, c, ih, iw = shape
    for at in ((0, 0, 0, 0), (0, c - 1, ih - 1, iw - 1), (1, 0, ih - 1, 0), (1, c // 2, 3, 5)):
        x[at] = np.nan
    for kind, include in (("max", False), ("avg", False), ("avg", True)):
        if kind == "avg" and k[1] == 2:
            continue  # 2 columns: averages take the tiles or phased methods
        geometry = (k, (2, 2), pads, (1, 1), ceil)
        if kind == "max":
            want = numpy_ref.max_pool2d(x, *geometry)
        else:
            want = numpy_ref.avg_pool2d(x, *geometry, include)
        method = pool._method.py_func(kind == "max", iw, *want.shape[2:], *k, 2, 2, 1, 1, ih,
                                      pads[0], pads[1], 4)  # fmt: skip
        assert method == pool.NARROW, geometry
        out = np.full(want.shape, 7.0, dtype="float32")
        pool.pool2d(x, out, int(kind == "max"), *k, 2, 2, 1, 1, *pads, int(ceil), int(include))
        np.testing.assert_array_equal(np.isnan(out), np.isnan(want), err_msg=str(geometry))
        np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6, err_msg=str(geometry))
