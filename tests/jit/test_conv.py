"""The convolution library (`rvm.kernels.conv`) against the NumPy reference, and its
own checks.

Every path is covered: 1x1 GEMMs (strided too, on the subsampled input), depthwise loops
(1 to 3 taps a pass), im2col from the input's stride phases by BLAS GEMM and by ``np.dot``,
the GEMM that reads its taps in place (called itself where `convmethod.TAPS_IN_PLACE` is off);
with strides, dilations, groups (depthwise too), asymmetric pads, odd sizes and empty
batches, and the geometries of the model zoo's CNNs. Operands that disagree with the
geometry raise ValueError before any memory is touched.
"""

from __future__ import annotations

import numpy as np
import pytest
from conv_cases import CASES
from jit_helpers import Jit, check, prim, rand, var

from rvm import op
from rvm.kernels import blas, conv, convmethod, direct, im2col, parfor, sgemm
from rvm.op import numpy_ref

slow = pytest.mark.slow


def _operands(case, dtype: str):
    n, c, h, w, o, (kh, kw), _, _, groups, _ = case
    return rand((n, c, h, w), dtype), rand((o, c // groups, kh, kw), dtype, seed=1)


def _reference(case, x, w):
    strides, dilation, groups, pads = case[6], case[7], case[8], case[9]
    return numpy_ref.conv2d(x, w, strides, pads, dilation, groups)


def _args(case) -> tuple[int, ...]:
    (sh, sw), (dh, dw), groups, (pt, pl, pb, pr) = case[6:10]
    return (groups, sh, sw, dh, dw, pt, pl, pb, pr)


def _float64_method(case) -> int:  # type: ignore[no-untyped-def]
    """The method `conv.conv2d` takes for ``case`` in float64 (`convmethod.method`)."""
    _, c, h, w, o, (kh, kw), (sh, sw), (dh, dw), groups, (pt, pl, pb, pr) = case
    oh, ow = (
        conv._out_size.py_func(h, kh, sh, dh, pt, pb),
        conv._out_size.py_func(w, kw, sw, dw, pl, pr),
    )
    unpadded = not any((pt, pl, pb, pr))
    return convmethod.method.py_func(
        c, o, groups, kh, kw, sh, sw, dh, dw, oh, ow, h, w, unpadded, False
    )


# float64 builds each method's task again (seconds each): the default run keeps it on the
# im2col cases (a method tests/jit/test_nn.py's float64 convolutions build too), every case
# with -m slow; float32 takes every case.
@pytest.mark.parametrize(
    ("case", "dtype"),
    [pytest.param(case, "float32", id=f"case{i}-float32") for i, case in enumerate(CASES)]
    + [
        pytest.param(
            case,
            "float64",
            marks=() if _float64_method(case) == convmethod.IM2COL else slow,
            id=f"case{i}-float64",
        )
        for i, case in enumerate(CASES)
    ],
)
def test_conv2d_matches_reference(case, dtype) -> None:
    x, w = _operands(case, dtype)
    want = _reference(case, x, w)
    out = np.full(want.shape, np.nan, dtype=dtype)
    conv.conv2d(x, w, out, *_args(case))
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-3)


# Large enough that their GEMMs are split over two BLAS threads and im2col takes several
# blocks of output rows: stride 1 (odd sizes, asymmetric pads, 2 groups), stride 2
# (dilated), 1x1 with more output channels than positions (split along the channels), a
# batch of 2, and a strided 1x1. The last one's taps run as one run wrapping around the rows
# (`convmethod.wraps_rows`, rows of 33 at any vector width), cut into pieces of columns; on a 13 x
# 13 map (2 groups of 12 vectors of channels) the taps are copied into a column matrix first
# (`convmethod.columns_pay`).
WRAPPED = (1, 16, 30, 33, 24, (3, 3), (1, 1), (1, 1), 1, (1, 1, 1, 1))
COLUMNS = (1, 64, 13, 13, 24 * sgemm.LANES, (3, 3), (1, 1), (1, 1), 2, (1, 1, 1, 1))
SPLIT_CASES = [
    (1, 32, 41, 37, 64, (3, 3), (1, 1), (1, 1), 1, (1, 0, 2, 1)),
    (1, 64, 29, 31, 96, (3, 3), (1, 1), (1, 1), 2, (1, 1, 1, 1)),
    (1, 24, 45, 43, 64, (5, 3), (2, 2), (1, 2), 1, (2, 1, 2, 3)),
    (1, 256, 13, 11, 1000, (1, 1), (1, 1), (1, 1), 1, (0, 0, 0, 0)),
    (2, 16, 57, 55, 48, (3, 3), (2, 1), (1, 1), 1, (0, 1, 1, 1)),
    (1, 128, 57, 53, 32, (3, 3), (1, 1), (1, 1), 1, (1, 1, 1, 1)),
    (1, 64, 29, 27, 96, (1, 1), (2, 2), (1, 1), 1, (0, 0, 0, 0)),
    WRAPPED,
    COLUMNS,
]
# Strided 1x1s whose subsampled input is large enough to be cut by planes over the pool
# (`conv._subsample`) at any vector width (`parfor.MIN_WORK` grows with the lanes): rows and
# columns subsampled alike, and rows only at 3 on a batch of 2.
SUBSAMPLED = [
    (1, 256, 57, 55, 32, (1, 1), (2, 2), (1, 1), 1, (0, 0, 0, 0)),
    (2, 160, 37, 35, 24, (1, 1), (3, 1), (1, 1), 1, (0, 0, 0, 0)),
]


# A 1x1 with more output channels than positions whose input costs more to pack again a band
# than its weight to read again (`blas.packed_cut`): on two threads B's columns in runs (195
# positions: 12 tiles and 3), and bands of the 224 channels.
BAND_COLUMNS = (1, 192, 13, 15, 224, (1, 1), (1, 1), (1, 1), 1, (0, 0, 0, 0))


@pytest.mark.parametrize("case", [*SPLIT_CASES, BAND_COLUMNS, *SUBSAMPLED])
def test_split_gemms_match_reference(blas_threads, case) -> None:
    if case in SUBSAMPLED and blas_threads > 1:  # the subsample goes to the pool
        n, c, h, w_, _, _, (sh, sw) = case[:7]
        size = n * c * (-(-h // sh)) * (-(-w_ // sw))
        assert parfor.chunks(2 * size, n * c) > 1
    if case is WRAPPED:
        assert convmethod.wraps_rows(30, 33, 35) and convmethod.taps_fill(30, 33, 35)
    if case is COLUMNS:
        assert convmethod.columns_pay(12 * sgemm.LANES, 32 * 9, 13, 13, 15)
        assert not convmethod.columns_pay(12 * sgemm.LANES - 1, 32 * 9, 13, 13, 15)
        assert not convmethod.columns_pay(12 * sgemm.LANES, 32 * 9, 14, 14, 16)
    x, w = _operands(case, "float32")
    want = _reference(case, x, w)
    out = np.full(want.shape, np.nan, dtype="float32")
    conv.conv2d(x, w, out, *_args(case))
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=2e-3)


# More output channels than positions: im2col's GEMM split along its rows on two threads.
ALONG_CHANNELS = (1, 32, 8, 8, 128, (3, 3), (1, 1), (1, 1), 1, (1, 1, 1, 1))


def _with_epilogue(case):  # type: ignore[no-untyped-def]
    """A case's float32 operands, the convolution's reference, a bias and a residual, the
    reference with them and a ReLU, and an output of NaNs."""
    x, w = _operands(case, "float32")
    conv_out = _reference(case, x, w)
    bias = rand((conv_out.shape[1],), seed=3)
    res = rand(conv_out.shape, seed=4)
    want = np.maximum(conv_out + bias[None, :, None, None] + res, 0)
    return x, w, conv_out, bias, res, want, np.full(want.shape, np.nan, dtype="float32")


@pytest.mark.parametrize("case", [*SPLIT_CASES[:5], ALONG_CHANNELS, BAND_COLUMNS])
def test_the_epilogue_in_the_gemm_matches_reference(blas_threads, case) -> None:
    """A bias, a residual and a ReLU applied with the convolution (`conv._conv2d_blas`' epilogue:
    in its GEMM's store where `convmethod.fuses_epilogue` holds, 1 back, else 0 and the caller runs
    the pass) on products split over two threads: along the channels (the bias from each
    piece's rows: a 1x1's bands, im2col's rows) and along the positions, in im2col blocks, in
    groups, a batch of 2 (split by images at two threads: each image's job its own residual),
    the direct method (the pass)."""
    from rvm.kernels import epipass

    x, w, conv_out, bias, res, want, out = _with_epilogue(case)
    epilogue = (bias.ctypes.data, 1, 1, res.ctypes.data)
    done = conv._conv2d_blas(x, w, out, *_args(case), epilogue)
    assert done in (0, 1)
    if done == 0:
        epipass.epilogue_rows(out, bias, 1, res)
    n, c, h, wd, o, (kh, kw), (sh, sw), (dh, dw) = case[:8]
    oh, ow = out.shape[2:]
    unpadded = not any(case[9])
    how = convmethod.method.py_func(
        c, o, case[8], kh, kw, sh, sw, dh, dw, oh, ow, h, wd, unpadded, True
    )
    gemm = how in (convmethod.POINTWISE, convmethod.STRIDED, convmethod.IM2COL)
    assert done == (sgemm.FUSED_EPILOGUE and gemm or how == convmethod.WINOGRAD)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=2e-3)


# 1x1s whose cut at two threads has bands of C's rows (`blas.packed_cut`), which then share one
# packing of B (`segments._shared`): resnet50's 1024 to 256 channels on 14 x 14, 256 to 1024
# with a residual, and the same channels on a ragged map (its last panel partial); a depth
# over `sgemm.KC` (depth blocks) and over a column block's (`sgemm.column_step`).
SHARED_B = [
    (1, 1024, 14, 14, 256, (1, 1), (1, 1), (1, 1), 1, (0, 0, 0, 0)),
    (1, 256, 14, 14, 1024, (1, 1), (1, 1), (1, 1), 1, (0, 0, 0, 0)),
    (1, 600, 11, 13, 200, (1, 1), (1, 1), (1, 1), 1, (0, 0, 0, 0)),
]


@pytest.mark.parametrize("case", SHARED_B, ids=[str(c[:5]) for c in SHARED_B])
def test_bands_on_b_packed_once_equal_one_thread(case) -> None:
    """A product whose pieces share B packed once (`segments._shared`) gives one thread's
    bits (the same tiles and sums), with the bias, residual and ReLU in its tiles."""
    import rvm

    x, w, conv_out, bias, res, want, _ = _with_epilogue(case)
    epilogue = (bias.ctypes.data, 1, 1, res.ctypes.data)
    n, c, h, wd, o = case[:5]
    before = rvm.get_num_threads()
    outs = {}
    try:
        for threads in (1, 2):
            rvm.set_num_threads(threads)
            if threads == 2 and sgemm.PACK_B:  # bands: the shared packing is taken
                parts = blas.split_parts(o * c * h * wd, blas.SPLIT_MIN_MNK)
                bands = o // (4 * sgemm.MR)
                m_parts, _ = blas.packed_cut(o, h * wd, c, parts, bands, h * wd // sgemm.NR, 1)
                assert m_parts > 1
            outs[threads] = np.full(want.shape, np.nan, dtype="float32")
            done = conv._conv2d_blas(x, w, outs[threads], *_args(case), epilogue)
            if done == 0:  # no epilogue in the GEMM here (`sgemm.FUSED_EPILOGUE`): the pass
                from rvm.kernels import epipass

                epipass.epilogue_rows(outs[threads], bias, 1, res)
    finally:
        rvm.set_num_threads(before)
    np.testing.assert_array_equal(outs[2], outs[1])
    np.testing.assert_allclose(outs[2], want, rtol=1e-4, atol=2e-3)


# im2col straight into the GEMM's panels (`im2col.im2col_panels`), called itself on every
# machine: the stems' shapes (3x3 s2 unpadded on rows of 111, 7x7 s2 p3 on 112, 11x11 s4),
# rows not a multiple of a panel (panels across rows), rows narrower than a panel (several
# rows a panel), a depth over `sgemm.KC` (depth blocks), groups, a batch, dilation,
# asymmetric pads.
PANEL_CASES = [
    (1, 3, 64, 64, 16, (3, 3), (2, 2), (1, 1), 1, (0, 0, 0, 0)),
    (1, 3, 70, 66, 24, (7, 7), (2, 2), (1, 1), 1, (3, 3, 3, 3)),
    (1, 3, 91, 87, 32, (11, 11), (4, 4), (1, 1), 1, (2, 2, 2, 2)),
    (1, 8, 21, 37, 20, (3, 3), (1, 1), (1, 1), 1, (1, 1, 1, 1)),
    (1, 16, 9, 7, 40, (3, 3), (1, 1), (1, 1), 1, (1, 0, 2, 1)),
    (1, 80, 12, 19, 13, (3, 3), (1, 1), (1, 1), 1, (1, 1, 1, 1)),
    (3, 12, 20, 41, 30, (3, 3), (1, 2), (2, 1), 3, (2, 1, 0, 2)),
    (2, 6, 33, 35, 14, (5, 3), (2, 1), (1, 2), 2, (2, 1, 2, 3)),
]


@pytest.mark.parametrize("fused", [False, True], ids=["pass", "fused"])
@pytest.mark.parametrize("case", PANEL_CASES)
def test_im2col_into_panels_matches_reference(blas_threads, case, fused) -> None:
    """The taps copied into the GEMM's panels from the input's phases (`sgemm._pack` through a
    table, C's runs end to end), with a bias, a residual and a ReLU in the store where the GEMM
    fuses them (`sgemm.fuses`; elsewhere, and ``pass``, the epilogue pass after it), on one
    and two threads (the columns cut first: `segments.gemm_segments`)."""
    from rvm.kernels import epipass

    x, w, conv_out, bias, res, want, out = _with_epilogue(case)
    oh, ow = out.shape[2:]
    fused = fused and sgemm.fuses(oh, ow, ow, 0, w[0].size)
    epilogue = (bias.ctypes.data, 1, 1, res.ctypes.data) if fused else sgemm.NO_EPILOGUE
    (sh, sw), (dh, dw), groups, (pt, pl, _, _) = case[6:10]
    im2col.im2col_panels(x, w, out, groups, sh, sw, dh, dw, pt, pl, epilogue)
    if not fused:
        np.testing.assert_allclose(out, conv_out, rtol=1e-4, atol=2e-3)
        epipass.epilogue_rows(out, bias, 1, res)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=2e-3)


def test_im2col_takes_the_panels_on_rows_wider_than_a_panel() -> None:
    """`convmethod.panels_pay`: where the GEMM packs B, rows wider than a panel; the tasks a first
    run builds follow (`convmethod.first_run_tasks`)."""
    assert convmethod.panels_pay.py_func(sgemm.NR + 1) == sgemm.PACK_B
    assert not convmethod.panels_pay.py_func(sgemm.NR)
    wide = convmethod.first_run_tasks(3, 64, 1, 7, 7, 2, 2, 112, 112, 224, 224, False)
    narrow = convmethod.first_run_tasks(256, 256, 1, 3, 3, 1, 1, 7, 7, 7, 7, False)
    if convmethod.TAPS_IN_PLACE:
        assert wide == convmethod.METHOD_TASKS[convmethod.TAPS]
    elif sgemm.PACK_B:  # into the panels, the GEMM's packed path alone past a band of rows
        assert wide == tuple(t for t in convmethod.PANEL_TASKS if t != "sgemm_block")
    else:
        assert wide == convmethod.METHOD_TASKS[convmethod.IM2COL]
    assert narrow in (
        convmethod.METHOD_TASKS[convmethod.IM2COL],
        convmethod.METHOD_TASKS[convmethod.CHANNELS],
    )


# Batches of small images (4; 2 for the direct method), each taking another method, split an
# image a piece on two threads (`convmethod.by_images`): the taps GEMM, im2col (7 columns), a
# strided 1x1, the direct method (its weight packed at the call, then its images split by
# `rvm.kernels.direct`).
BATCH_CASES = [
    (
        (4, 16, 16, 16, 32, (3, 3), (1, 1), (1, 1), 1, (1, 1, 1, 1)),
        convmethod.TAPS if convmethod.TAPS_IN_PLACE else convmethod.IM2COL,
    ),
    ((4, 32, 7, 7, 64, (3, 3), (1, 1), (1, 1), 1, (1, 1, 1, 1)), convmethod.IM2COL),
    ((4, 64, 28, 28, 96, (1, 1), (2, 2), (1, 1), 1, (0, 0, 0, 0)), convmethod.STRIDED),
    ((2, 64, 32, 33, 128, (5, 5), (1, 1), (1, 1), 1, (2, 2, 2, 2)), convmethod.CHANNELS),
]


def _reads_taps(case) -> bool:  # type: ignore[no-untyped-def]
    """Whether ``case`` is one `convmethod.method` reads its taps in place for where it does
    (`convmethod.TAPS_IN_PLACE`): rows of `convmethod.TAPS_MIN_WIDTH` or more, not 1x1 unpadded, not
    depthwise (the direct method aside)."""
    _, c, _, w, _, (kh, kw), (_, sw), (_, dw), groups, (_, pl, _, pr) = case
    ow = conv._out_size.py_func(w, kw, sw, dw, pl, pr)
    pointwise = kh == kw == 1 and not any(case[9])
    return ow >= convmethod.TAPS_MIN_WIDTH and c // groups > 1 and not pointwise


# The taps GEMM itself on every machine (`convmethod.method` takes it only where
# `convmethod.TAPS_IN_PLACE`): rows, wrapped runs, a column matrix, batches, groups, dilations.
@pytest.mark.parametrize("case", [c for c in CASES + SPLIT_CASES if _reads_taps(c)])
def test_taps_gemm_matches_reference(blas_threads, case) -> None:
    x, w = _operands(case, "float32")
    want = _reference(case, x, w)
    out = np.full(want.shape, np.nan, dtype="float32")
    (sh, sw), (dh, dw), groups, (pt, pl, _, _) = case[6:10]
    conv._taps_gemm(x, w, out, groups, sh, sw, dh, dw, pt, pl)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=2e-3)


@pytest.mark.parametrize(("case", "how"), BATCH_CASES)
def test_batch_split_by_images_matches_reference(blas_threads, case, how) -> None:
    x, w = _operands(case, "float32")
    want = _reference(case, x, w)
    (n, c, ih, iw), (o, cg, kh, kw), (oh, ow) = x.shape, w.shape, want.shape[2:]
    (sh, sw), pads = case[6], case[9]
    assert (
        convmethod.method(c, o, 1, kh, kw, sh, sw, 1, 1, oh, ow, ih, iw, not any(pads), True) == how
    )
    work = n * o * oh * ow * cg * kh * kw
    split = convmethod.by_images(how, n, work, blas_threads) or (
        how == convmethod.CHANNELS and direct.images_pay(n, work, blas_threads)
    )
    assert split == (blas_threads == 2)  # the case tests what it means to
    out = np.full(want.shape, np.nan, dtype="float32")
    conv.conv2d(x, w, out, *_args(case))
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=2e-3)


def _read_only(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    """``arrays``, read-only, as a jit kernel passes its parameters (`rvm.jit.signature`): a
    library function called so shares the kernels' build (`conv.conv2d_dot` with writable
    operands is another Numba signature, seconds of compiling)."""
    for a in arrays:
        a.flags.writeable = False
    return arrays


# A stem's shape: 3 channels at stride 2, rows of 50 (im2col into panels where the GEMM packs B).
STEM = ((4, 3, 101, 101, 32, (3, 3), (2, 2), (1, 1), 1, (0, 0, 0, 0)), convmethod.IM2COL)


@pytest.mark.parametrize(("case", "how"), [*BATCH_CASES[1:3], STEM])
def test_batch_split_by_images_applies_the_epilogue(blas_threads, case, how) -> None:
    """A batch split an image a piece (two threads) by a GEMM method applies its bias,
    residual and ReLU in each image's GEMM (`convmethod.fuses_epilogue`), each image's job
    taking its image's residual: the same values as the pass, at one thread and at two."""
    x, w, _, bias, res, want, out = _with_epilogue(case)
    n, o, oh, ow = want.shape
    c, (kh, kw), (sh, sw) = case[1], case[5], case[6]
    flat = not any(case[9])
    assert convmethod.method(c, o, 1, kh, kw, sh, sw, 1, 1, oh, ow, *case[2:4], flat, True) == how
    assert convmethod.by_images(how, n, n * o * oh * ow * w[0].size, blas_threads) == (
        blas_threads == 2
    )
    done = conv._conv2d_blas(x, w, out, *_args(case), (bias.ctypes.data, 1, 1, res.ctypes.data))
    assert done == int(sgemm.FUSED_EPILOGUE)
    if done == 0:
        from rvm.kernels import epipass

        epipass.epilogue_rows(out, bias, 1, res)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=2e-3)


@pytest.mark.parametrize("case", CASES[:5] + CASES[17:20])
def test_conv2d_dot_matches_reference(case) -> None:
    x, w = _read_only(*_operands(case, "float32"))
    want = _reference(case, x, w)
    out = np.full(want.shape, np.nan, dtype="float32")
    conv.conv2d_dot(x, w, out, *_args(case))
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-3)


# Each disagrees with the case's geometry in one way: output height or width one too many
# or one too few, output channels, batch, input channels for the groups, groups, a stride.
BAD = [
    ("out", (1, 6, 10, 7)),
    ("out", (1, 6, 9, 6)),
    ("out", (1, 6, 9, 8)),
    ("out", (1, 7, 9, 7)),
    ("out", (2, 6, 9, 7)),
    ("x", (1, 15, 9, 7)),
    ("groups", 3),
    ("groups", 0),
    ("sh", 0),
]


@pytest.mark.parametrize("entry", ["conv2d", "conv2d_dot"])
@pytest.mark.parametrize(("what", "value"), BAD)
def test_geometry_disagreements_raise(entry, what, value) -> None:
    """Wrong operands raise before any read or write (no crash, the output untouched)."""
    params = dict(groups=1, sh=1, sw=1, dh=1, dw=1, pt=1, pl=1, pb=1, pr=1)
    x, w = rand((1, 16, 9, 7)), rand((6, 16, 3, 3), seed=1)
    out = np.zeros((1, 6, 9, 7), dtype="float32")
    if what == "out":
        out = np.zeros(value, dtype="float32")
    elif what == "x":
        x = rand(value)
    else:
        params[what] = value
    with pytest.raises(ValueError, match="do not match the geometry"):
        getattr(conv, entry)(*_read_only(x, w), out, *params.values())
    assert not out.any()


@pytest.mark.parametrize(
    "attrs",
    [
        dict(strides=2, padding=1, groups=24),  # shufflenet's depthwise, stride 2
        dict(strides=1, padding=1, groups=24),  # and stride 1
        dict(strides=1, padding=0, groups=3),  # its grouped 1x1
        dict(strides=(2, 1), padding=(0, 1, 1, 0), dilation=(1, 2), groups=2),
    ],
)
def test_grouped_and_depthwise_kernels_with_symbolic_batch(attrs) -> None:
    """Kernels built on the library, for any batch (one kernel, batch 2, 1 and 0)."""
    groups = attrs["groups"]
    kh = 1 if attrs["padding"] == 0 else 3
    img = var("img", ("b", 24, 9, 11))
    k = var("k", (24, 24 // groups, kh, kh))
    cb = var("cb", (24, 1, 1))
    func = prim([img, k, cb], op.relu(op.conv2d(img, k, **attrs) + cb))
    kernel = Jit(func)
    for batch in (2, 1, 0):
        inputs = (rand((batch, 24, 9, 11)), rand((24, 24 // groups, kh, kh), seed=1))
        check(func, *inputs, rand((24, 1, 1), seed=2), rtol=1e-4, atol=1e-4, kernel=kernel)


@pytest.mark.parametrize(("kernel", "pad"), [(1, 0), (3, 1)])
def test_same_size_convolution_adds_its_residual_in_place(kernel, pad) -> None:
    """The output of a stride-1 convolution that keeps the size is known to be the input's
    size: a residual add broadcasts nothing, and the convolution writes the output itself
    (through the library's entry point), also into an output array the caller passes; the
    library adds the residual and applies the ReLU with it (``conv2d_fused``: in the GEMM's
    store, or by its pass `rvm.kernels.epipass`)."""
    img, res = var("img", (1, 16, 7, 7)), var("res", (1, 8, 7, 7))
    k = var("k", (8, 16, kernel, kernel))
    func = prim([img, k, res], op.relu(op.conv2d(img, k, padding=pad) + res))
    jit = Jit(func)
    want = (("conv2d_fused", "_".join(["float32"] * 5)),)
    assert jit.record.requires == want  # the generator's facts
    inputs = (rand((1, 16, 7, 7)), rand((8, 16, kernel, kernel), seed=1), rand((1, 8, 7, 7)))
    check(func, *inputs, rtol=1e-4, atol=1e-4, kernel=jit)
    dps = Jit(func, name="k_dps", style="dps")
    out = np.full((1, 8, 7, 7), np.nan, np.float32)
    assert dps(*inputs, out) is None
    np.testing.assert_allclose(out, jit(*inputs), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="res"):  # a residual of another size is refused
        jit(*inputs[:2], rand((1, 8, 7, 1)))


@pytest.mark.parametrize("bias", ["channels", "one", "none"])
def test_the_epilogue_pass_matches_numpy(blas_threads, bias) -> None:
    """`rvm.kernels.epipass.epilogue_rows`: ``act(out + bias + res)`` in place, with a bias a
    channel, one for all or none, a residual or none, ReLU or none; on 2 threads its pieces
    end within rows (rows of 61 elements, a batch of 2, large enough to split)."""
    from rvm.kernels import epipass

    n, c, h, w = 2, 24, 61, 61
    out, res = rand((n, c, h, w), seed=3), rand((n, c, h, w), seed=4)
    b = {"channels": rand((c,), seed=5), "one": rand((1,), seed=5), "none": rand((0,))}[bias]
    for act in range(len(epipass.ACTIVATIONS)):
        for r in (res, rand((0,))):
            got = out.copy()
            epipass.epilogue_rows(got, b, act, r.reshape(-1))
            want = out + (b.reshape(1, -1, 1, 1) if b.size else 0) + (r if r.size else 0)
            np.testing.assert_allclose(got, np.maximum(want, 0) if act else want, rtol=1e-6)


# Convolutions whose GEMM applies the epilogue as it stores (`rvm.kernels.sgemm.fuses`): 1x1
# ones and im2col's (3 x 3 on a small map): 20 output channels (bands of `sgemm.MR` rows and
# a part), 9 x 11 positions (a masked last vector), a bias a channel or one for all, grouped,
# strided (its output's dims computed, not the residual's: no residual). attrs, bias's shape.
_FUSED = {
    "pointwise": ({}, (20, 1, 1)),
    "one_bias": ({}, (1, 1, 1)),
    "grouped": ({"groups": 2}, (20, 1, 1)),
    "strided": ({"strides": (2, 2)}, (20, 1, 1)),
    "im2col": ({"padding": 1}, (20, 1, 1)),
    "im2col_grouped": ({"padding": 1, "groups": 2}, (20, 1, 1)),
}


@pytest.mark.parametrize("case", ["conv1d", "relu_first", *_FUSED])
def test_a_kernel_hands_its_epilogue_to_the_library_when_it_can(case) -> None:
    """A float32 convolution's bias, residual and ReLU, in that order, go to the library
    with the convolution (``conv2d_fused``: in its GEMM's store where it can, else the pass
    `rvm.kernels.epipass`): a 1-d convolution's too. An epilogue in another order (the ReLU
    before the residual) runs as the kernel's own loop. Both right, for any batch."""
    if case == "conv1d":
        x, res = var("x", ("b", 6, 17)), var("res", ("b", 8, 17))
        k, cb = var("k", (8, 6, 3)), var("cb", (8, 1))
        func = prim([x, k, cb, res], op.relu(op.conv1d(x, k, padding=1) + cb + res))
        shapes = [(6, 17), (8, 6, 3), (8, 1), (8, 17)]
    elif case == "relu_first":
        x, res = var("x", ("b", 6, 9, 9)), var("res", ("b", 8, 9, 9))
        k, cb = var("k", (8, 6, 1, 1)), var("cb", (8, 1, 1))
        func = prim([x, k, cb, res], op.relu(op.conv2d(x, k) + cb) + res)
        shapes = [(6, 9, 9), (8, 6, 1, 1), (8, 1, 1), (8, 9, 9)]
    else:
        attrs, bias = _FUSED[case]
        groups = attrs.get("groups", 1)
        x, res = var("x", ("b", 12, 9, 11)), var("res", ("b", 20, 9, 11))
        taps = 3 if "padding" in attrs else 1
        k, cb = var("k", (20, 12 // groups, taps, taps)), var("cb", bias)
        y = op.conv2d(x, k, **attrs) + cb
        func = prim([x, k, cb], op.relu(y)) if "strides" in attrs else prim(
            [x, k, cb, res], op.relu(y + res))  # fmt: skip
        shapes = [(12, 9, 11), (20, 12 // groups, taps, taps), bias, (20, 9, 11)]
        shapes = shapes[: len(func.params)]
    kernel = Jit(func)
    library = {name for name, _ in kernel.record.requires} & {"conv_epilogue", "conv2d_fused"}
    assert bool(library) == (case != "relu_first")
    for batch in (2, 1):
        sizes = [(batch, *s) if i in (0, 3) else s for i, s in enumerate(shapes)]
        inputs = [rand(s, seed=i) for i, s in enumerate(sizes)]
        check(func, *inputs, rtol=1e-4, atol=1e-4, kernel=kernel)


def test_shared_packing_and_subsample_in_a_model_equal_one_thread(exec_mode) -> None:
    """ResNet's stage-3 entry as an ONNX model (a strided 1x1 whose subsample is cut by
    planes over the pool, `conv._subsample`; 1x1s on 14 x 14 whose bands share B packed once,
    `segments._shared`, with a bias, a ReLU and a residual) in each exec mode: two threads
    give one thread's bits, and ONNX Runtime's results."""
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    import rvm

    shapes = {"w1": (1024, 512, 1, 1), "w2": (256, 1024, 1, 1), "w3": (1024, 256, 1, 1)}
    shapes.update(b1=(1024,), b2=(256,), b3=(1024,))
    inits = [
        numpy_helper.from_array(rand(shape, seed=s) * 0.05, name)
        for s, (name, shape) in enumerate(shapes.items())
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["a0"], strides=[2, 2]),
        helper.make_node("Relu", ["a0"], ["a"]),
        helper.make_node("Conv", ["a", "w2", "b2"], ["b0"]),
        helper.make_node("Relu", ["b0"], ["b"]),
        helper.make_node("Conv", ["b", "w3", "b3"], ["c0"]),
        helper.make_node("Add", ["c0", "a"], ["c1"]),
        helper.make_node("Relu", ["c1"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "stage3", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 512, 28, 28])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1024, 14, 14])], inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    x = rand((1, 512, 28, 28), seed=9)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expect = session.run(None, {"x": x})[0]
    ex = rvm.compile(rvm.from_onnx(model), kernels="jit")
    before = rvm.get_num_threads()
    got = {}
    try:
        for threads in (1, 2):
            rvm.set_num_threads(threads)
            got[threads] = np.asarray(rvm.VirtualMachine(ex, exec_mode=exec_mode)["main"](x))
    finally:
        rvm.set_num_threads(before)
    np.testing.assert_array_equal(got[2], got[1])
    np.testing.assert_allclose(got[2], expect, rtol=1e-4, atol=1e-3)
