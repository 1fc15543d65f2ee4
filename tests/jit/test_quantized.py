"""Quantized kernels: jit `rvm.op.qconv2d` / `rvm.op.qdense` (through `rvm.kernels.qgemm`,
VNNI where the CPU has it) equal their NumPy references exactly, over strides, padding,
dilation, groups, depths that are not multiples of 4, batches, uint8 and int8 inputs, ReLU
clamps and int8 outputs, products split on the pool or not; uint8 and int8 max pools
(through `rvm.kernels.qpool`, in the integers) and requantized sums (`rvm.op.qadd`, through
`rvm.kernels.qadd`) too."""

from __future__ import annotations

import numpy as np
import pytest
from jit_helpers import check, host_has, prim, var

from rvm import op
from rvm.ir.infer import infer_type
from rvm.kernels import entry, parfor, qconv, qentry, qgemm, qpool, qsplit, qtile, qturned, workpool
from rvm.op import numpy_ref

RNG = np.random.default_rng(7)


def _ints(shape, dtype):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max + 1, shape).astype(dtype)


CONVS = [
    # x shape, weight shape, strides, padding, dilation, groups
    ((1, 3, 9, 9), (8, 3, 3, 3), 1, 1, 1, 1),
    ((2, 6, 11, 7), (6, 3, 3, 3), 2, (1, 0, 2, 1), 1, 2),
    ((1, 5, 10, 10), (40, 5, 1, 1), 1, 0, 1, 1),
    ((1, 4, 13, 13), (7, 4, 3, 3), 1, 2, 2, 1),
    ((1, 3, 20, 20), (16, 3, 7, 7), 2, 3, 1, 1),
    ((1, 8, 6, 6), (8, 1, 3, 3), 1, 1, 1, 8),
    # strided rows read through the image split by column phase: odd widths, short phases
    ((1, 8, 12, 11), (16, 8, 1, 1), 2, 0, 1, 1),
    ((2, 4, 9, 14), (5, 4, 3, 3), (1, 3), (1, 2, 0, 1), (1, 2), 1),
]


KINDS = [  # input and output dtypes, ReLU clamp, weight layout
    (x_dtype, y_dtype, relu, layout)
    for layout in ("OIHW", "OHWI")
    for x_dtype, y_dtype, relu in (("uint8", "uint8", True), ("int8", "int8", False))
]


def _conv_cases() -> list:
    """Every shape with every kind; by default the last four shapes (groups, strides, dilation,
    uneven padding, odd widths), each with one kind, the kinds taken in turn, the rest under
    ``-m slow``: each case compiles its own kernel (seconds)."""
    cases = []
    for i, conv in enumerate(CONVS):
        for j, kind in enumerate(KINDS):
            default = i >= len(CONVS) - len(KINDS) and j == i % len(KINDS)
            marks = () if default else pytest.mark.slow
            cases.append(pytest.param(*conv, *kind, marks=marks))
    return cases


@pytest.mark.parametrize(
    ("xs", "ws", "strides", "padding", "dilation", "groups", "x_dtype", "y_dtype", "relu",
     "layout"),
    _conv_cases(),
)  # fmt: skip
def test_qconv2d_kernel_equals_reference(xs, ws, strides, padding, dilation, groups, x_dtype,
                                         y_dtype, relu, layout):  # fmt: skip
    """Either weight layout (OHWI: as importers store it, read in place by the kernel)."""
    o = ws[0]
    wshape = (ws[0], ws[2], ws[3], ws[1]) if layout == "OHWI" else ws
    x, w = var("x", xs, x_dtype), var("w", wshape, "int8")
    b, s = var("b", (o,), "int32"), var("s", (o,), "float32")
    y_zero = 9 if y_dtype == "uint8" else -3
    call = op.qconv2d(
        x,
        w,
        b,
        s,
        x_zero=4,
        y_zero=y_zero,
        dtype=y_dtype,
        relu=relu,
        strides=strides,
        padding=padding,
        dilation=dilation,
        groups=groups,
        weight_layout=layout,
    )
    scale = RNG.uniform(2e-4, 2e-3, o).astype(np.float32)
    bias = RNG.integers(-3000, 3000, o).astype(np.int32)
    check(prim([x, w, b, s], call), _ints(xs, x_dtype), _ints(wshape, "int8"), bias, scale)


@pytest.mark.parametrize(("m", "k", "n"), [(1, 2048, 1000), (3, 37, 5), (40, 64, 33)])
def test_qdense_kernel_equals_reference(m, k, n):
    x, w = var("x", (m, k), "uint8"), var("w", (n, k), "int8")
    b, s = var("b", (n,), "int32"), var("s", (n,), "float32")
    call = op.qdense(x, w, b, s, x_zero=128, y_zero=100)
    scale = RNG.uniform(1e-4, 1e-3, n).astype(np.float32)
    bias = RNG.integers(-3000, 3000, n).astype(np.int32)
    check(prim([x, w, b, s], call), _ints((m, k), "uint8"), _ints((n, k), "int8"), bias, scale)
    # the kernel called the library's entry point (compiled once), not a copy of its own
    assert ("qdense", "uint8_int8_int32_float32_uint8") in entry.required()


def test_library_without_kernel_matches_reference():
    """The library called directly (as a kernel calls it), output prefilled so a missed
    element fails. A product too small to split runs the pieces of its task (``qgemm``, or
    ``qgemm_wide`` for int16 weight rows) in the calling thread (the GEMM built once, in the
    task, not into each entry point)."""
    x, w = _ints((1, 6, 8, 8), "uint8"), _ints((12, 6, 3, 3), "int8")
    bias, scale = np.arange(12, dtype=np.int32), np.full(12, 1e-3, np.float32)
    want = numpy_ref.qconv2d(x, w, bias, scale, 3, 1, 0, 255, "uint8", (1, 1), (1, 1, 1, 1),
                             (1, 1), 1)  # fmt: skip
    out = np.full(want.shape, 77, np.uint8)  # hwc given, as a kernel gives it: one compile
    qentry.qconv2d(x, w, bias, scale, out, 3, 1, 0, 255, 1, 1, 1, 1, 1, 1, 1, False)
    np.testing.assert_array_equal(out, want)
    (task,) = qgemm.first_run_tasks(False)  # a weight not known to fit pairs: its rows' task
    assert (task, "float32") in parfor.required_tasks()


def test_int8_products_run_on_the_uint8_build():
    """int8 inputs and outputs go to the entry points as bytes, their signs a parameter
    (`entry.BYTES`): one build of each product serves every sign."""
    assert entry.variant(["int8", "int8", "int32", "float32", "int8"], "qdense") == (
        "uint8_int8_int32_float32_uint8"
    )
    assert [entry.signs("qdense", [x, "int8", "int32", "float32", y]) for x, y in
            [("uint8", "uint8"), ("int8", "uint8"), ("uint8", "int8"), ("int8", "int8")]] == [
        0, 1, 2, 3
    ]  # fmt: skip
    x, w = _ints((5, 37), "int8"), _ints((9, 37), "int8")
    bias = RNG.integers(-3000, 3000, 9).astype(np.int32)
    scale = RNG.uniform(1e-3, 1e-2, 9).astype(np.float32)
    for y_dtype, y_zero, low, high in [("int8", -2, -128, 127), ("uint8", 100, 0, 255)]:
        want = numpy_ref.qdense(x, w, bias, scale, -5, y_zero, low, high, y_dtype)
        out = np.full(want.shape, 77, y_dtype)
        qentry.qdense(x, w, bias, scale, out, -5, y_zero, low, high)
        np.testing.assert_array_equal(out, want)
    assert ("qdense", "uint8_int8_int32_float32_uint8") in entry.required()
    assert all(entry.variant(v.split("_"), name) == v for name, v in entry.required())


POOLS = [
    # x shape, pool size, strides, padding (top, left, bottom, right), dilation, ceil mode
    ((1, 4, 11, 11), (3, 3), (2, 2), (1, 1, 0, 0), (1, 1), True),
    ((2, 3, 9, 12), (2, 3), (1, 2), (0, 1, 1, 1), (1, 1), False),
    ((1, 5, 13, 10), (3, 2), (2, 3), (1, 0, 1, 0), (2, 2), True),
    ((1, 2, 7, 7), (7, 7), (1, 1), (0, 0, 0, 0), (1, 1), False),
    # windows inside the input (whole planes as runs): the last row and column unused
    ((1, 3, 12, 12), (3, 3), (2, 2), (0, 0, 0, 0), (1, 1), False),
    ((2, 3, 13, 17), (2, 3), (3, 2), (0, 0, 0, 0), (2, 1), False),
    ((1, 2, 9, 8), (2, 2), (1, 3), (0, 0, 0, 0), (1, 2), True),
    # the padded copy: padding as wide as the window less one, on every side
    ((1, 3, 5, 6), (3, 3), (1, 3), (2, 2, 2, 2), (1, 1), False),
]
DEFAULT_POOLS = (0, 2, 5, 7)
SLOW = pytest.mark.slow


@pytest.mark.parametrize(
    ("dtype", "xs", "size", "strides", "padding", "dilation", "ceil"),
    [  # every pool in both dtypes; by default four (ceil mode, dilation, windows inside the
        # input, the padded copy), two of each dtype: each compiles its own kernel
        pytest.param(dtype, *pool, marks=() if j == i % 2 and i in DEFAULT_POOLS else SLOW)
        for i, pool in enumerate(POOLS)
        for j, dtype in enumerate(("uint8", "int8"))
    ],
)
def test_integer_max_pool_kernel(dtype, xs, size, strides, padding, dilation, ceil):
    """In the integers (`rvm.kernels.qpool`): padding and ceil-mode overhangs never win."""
    x = var("x", xs, dtype)
    call = op.max_pool2d(x, pool_size=size, strides=strides, padding=padding,
                         dilation=dilation, ceil_mode=ceil)  # fmt: skip
    check(prim([x], call), _ints(xs, dtype))


@pytest.mark.parametrize("blas_threads", [1, 2], indirect=True)
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("padding", [(1, 0, 1, 1), (0, 0, 0, 0)])
def test_split_integer_max_pool_equals_reference(blas_threads, dtype, padding):
    """A pool large enough to be split by planes on the pool, called as a kernel calls it
    (padded, or its windows inside the input); the output prefilled so a plane no piece
    wrote fails."""
    x = _ints((2, 48, 61, 61), dtype)
    ceil = padding[0] > 0
    want = numpy_ref.max_pool2d(x, (3, 3), (2, 2), padding, (1, 1), ceil)
    out = np.full(want.shape, 77, dtype)
    low = np.iinfo(dtype).min
    qpool.max_pool2d(x, out, low, 3, 3, 2, 2, 1, 1, padding[0], padding[1])
    np.testing.assert_array_equal(out, want)


PAIR_POOLS = [
    # x shape, pool size, strides, padding (top, left): 3 taps at stride 2 in a row take each
    # output row from 16-bit pairs (odd and even widths, padded, overhanging); a row stride
    # of 1 with an odd width (the pairs would straddle rows) takes the runs
    ((1, 3, 109, 109), (3, 3), (2, 2), (0, 0)),
    ((2, 2, 14, 15), (3, 3), (2, 2), (1, 1)),
    # rows shorter than `qpool.FLAT_PAIRS` take the pairs of a plane's whole run at once
    # (squeezenet's 27 -> 13, a one-row output)
    ((2, 5, 27, 27), (3, 3), (2, 2), (0, 0)),
    ((1, 2, 3, 8), (3, 3), (2, 2), (0, 0)),
    ((1, 2, 8, 10), (2, 3), (3, 2), (0, 1)),
    ((1, 2, 7, 9), (3, 3), (1, 2), (1, 0)),
]


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize(("xs", "size", "strides", "pads"), PAIR_POOLS)
def test_stride_two_pools_equal_reference(dtype, xs, size, strides, pads):
    """`rvm.kernels.qpool` called as a kernel calls it, the extremes of the dtype included
    (int8 compared through the flipped pairs), ceil mode where the last window overhangs;
    the output prefilled so a missed element fails."""
    x = _ints(xs, dtype)
    x.reshape(-1)[:2] = (np.iinfo(dtype).min, np.iinfo(dtype).max)
    ceil = (xs[3] + 2 * pads[1] - size[1]) % strides[1] != 0
    padding = (pads[0], pads[1], pads[0], pads[1])
    want = numpy_ref.max_pool2d(x, size, strides, padding, (1, 1), ceil)
    out = np.full(want.shape, 77, dtype)
    low = np.iinfo(dtype).min
    qpool.max_pool2d(x, out, low, *size, *strides, 1, 1, *pads)
    np.testing.assert_array_equal(out, want)


SPLIT_CASES = [
    # x shape, weight shape, padding, groups, x dtype, output dtype: products large enough to
    # be cut into pieces of columns on the pool (positions not a multiple of the panel width);
    # panels by words (more positions than channels) and by bytes (more channels)
    ((1, 16, 47, 47), (64, 16, 3, 3), 1, 1, "uint8", "uint8"),
    ((2, 32, 29, 29), (96, 16, 3, 3), 0, 2, "int8", "int8"),
    ((1, 62, 12, 12), (256, 62, 3, 3), 1, 1, "uint8", "int8"),
]


@pytest.mark.parametrize(("xs", "ws", "padding", "groups", "x_dtype", "y_dtype"), SPLIT_CASES)
def test_split_qconv2d_equals_reference(blas_threads, xs, ws, padding, groups, x_dtype, y_dtype):
    """Each piece's sums and requantized columns, on one thread or two, equal the reference
    exactly; the output is prefilled so a column no piece wrote fails."""
    x, w = _ints(xs, x_dtype), _ints(ws, "int8")
    o = ws[0]
    bias = RNG.integers(-3000, 3000, o).astype(np.int32)
    scale = RNG.uniform(2e-4, 2e-3, o).astype(np.float32)
    y_zero, (low, high) = (5, (5, 255)) if y_dtype == "uint8" else (-7, (-128, 127))
    pads = (padding,) * 4
    want = numpy_ref.qconv2d(x, w, bias, scale, 3, y_zero, low, high, y_dtype, (1, 1), pads,
                             (1, 1), groups)  # fmt: skip
    out = np.full(want.shape, 77, y_dtype)
    qentry.qconv2d(x, w, bias, scale, out, 3, y_zero, low, high, groups, 1, 1, 1, 1, padding,
                  padding, False)  # fmt: skip
    np.testing.assert_array_equal(out, want)
    out[:] = 77  # the same weight in OHWI (tap-major, read in place)
    ohwi = np.ascontiguousarray(w.transpose(0, 2, 3, 1))
    qentry.qconv2d(x, ohwi, bias, scale, out, 3, y_zero, low, high, groups, 1, 1, 1, 1, padding,
                  padding, True)  # fmt: skip
    np.testing.assert_array_equal(out, want)
    if blas_threads == 2:
        (task,) = qgemm.first_run_tasks(False)
        assert (task, "float32") in parfor.required_tasks()


DIRECT_CASES = [
    # x shape, weight shape (O, C / groups, KH, KW), padding (top, left, bottom, right),
    # dilation, groups: unit stride, the taps read in place from one image (positions 1, 7,
    # 49, 50; rows whose margins the product computes and drops)
    ((1, 8, 1, 1), (16, 8, 1, 1), (0, 0, 0, 0), 1, 1),
    ((1, 12, 1, 7), (8, 12, 1, 3), (0, 1, 0, 1), 1, 1),
    ((1, 64, 7, 7), (40, 64, 3, 3), (1, 1, 1, 1), 1, 1),
    ((1, 20, 5, 10), (24, 20, 3, 3), (1, 1, 1, 1), 1, 1),
    ((2, 6, 9, 12), (6, 3, 3, 3), (2, 0, 1, 1), 2, 2),
    ((1, 5, 14, 14), (9, 5, 3, 3), (1, 1, 1, 1), 1, 1),
    ((1, 8, 6, 6), (8, 1, 3, 3), (1, 1, 1, 1), 1, 8),
    ((1, 16, 12, 12), (8, 16, 2, 2), (0, 0, 0, 0), 1, 1),
    ((1, 32, 47, 47), (64, 32, 3, 3), (1, 1, 1, 1), 1, 1),  # split on the pool
    # few positions, many channels: split on the pool by rows (the last piece shorter)
    ((1, 64, 7, 7), (256, 64, 3, 3), (1, 1, 1, 1), 1, 1),
    ((1, 256, 14, 14), (100, 256, 1, 1), (0, 0, 0, 0), 1, 1),
]


TILE_CASES = [
    # x shape, weight shape: 7 x 7's 49 positions in a tile of 3 vectors and one dot (a
    # depth of 256 and of 128 with more channels than a block of sums holds, so the last
    # columns join the block before them), 14 x 14's 196 in tiles and four dots (a depth
    # not a multiple of 64: the dots' plain remainder)
    ((1, 256, 7, 7), (40, 256, 1, 1)),
    ((1, 128, 7, 7), (1032, 128, 1, 1)),
    ((1, 644, 14, 14), (24, 644, 1, 1)),
]


@pytest.mark.parametrize(("xs", "ws"), TILE_CASES)
@pytest.mark.parametrize("x_dtype", ["uint8", "int8"])
def test_wide_tiles_and_dots_equal_reference(blas_threads, xs, ws, x_dtype):
    """A product's last columns: a wide tile where 3 vectors are left, dots for the few
    past the last vector; split on the pool or not."""
    _check_library_conv(_ints(xs, x_dtype), _ints(ws, "int8"), 1, (0, 0, 0, 0), 1, "uint8")


def test_dense_rows_in_a_wide_tile_and_a_dot():
    """`qconv.qdense` of 49 rows (positions): a wide tile and one dot, depth 300 (the dot's
    plain remainder: 44)."""
    x, w = _ints((49, 300), "uint8"), _ints((20, 300), "int8")
    bias, scale = np.arange(20, dtype=np.int32), np.full(20, 2e-4, np.float32)
    want = numpy_ref.qdense(x, w, bias, scale, 128, 3, 0, 255, "uint8")
    out = np.full(want.shape, 77, np.uint8)
    qentry.qdense(x, w, bias, scale, out, 128, 3, 0, 255)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize(("m", "k", "n"), [(1, 2048, 1000), (49, 300, 20), (3, 37, 5)])
def test_widened_weights_equal_reference(m, k, n):
    """int16 weights holding int8 values (`rvm.op.quantized.widen_weight`; read in place by the
    ``vpmaddwd`` kernels, narrowed per call with VNNI): `qconv.qdense` (a one-row product's
    column by dots, 49 rows: tiles and a dot) and `qconv.qconv2d` in both layouts (channels
    not a multiple of 4: rows padded in the weight's type) equal the int8 weights' reference."""
    x, w = _ints((m, k), "uint8"), _ints((n, k), "int8")
    bias, scale = np.arange(n, dtype=np.int32), np.full(n, 2e-4, np.float32)
    want = numpy_ref.qdense(x, w, bias, scale, 128, 3, 0, 255, "uint8")
    out = np.full(want.shape, 77, np.uint8)
    qentry.qdense(x, w.astype(np.int16), bias, scale, out, 128, 3, 0, 255)
    np.testing.assert_array_equal(out, want)
    x, w = _ints((1, 6, 7, 9), "uint8"), _ints((n, 6, 3, 3), "int8")
    want = numpy_ref.qconv2d(x, w, bias, scale, 3, 5, 0, 255, "uint8", (1, 1), (1, 1, 1, 1),
                             (1, 1), 1)  # fmt: skip
    for hwc, weight in ((False, w), (True, w.transpose(0, 2, 3, 1))):
        out = np.full(want.shape, 77, np.uint8)
        qentry.qconv2d(x, np.ascontiguousarray(weight, np.int16), bias, scale, out, 3, 5, 0, 255,
                       1, 1, 1, 1, 1, 1, 1, hwc)  # fmt: skip
        np.testing.assert_array_equal(out, want, err_msg=f"hwc={hwc}")


def _bias_and_scale(channels):
    """A quantized op's bias and scale constants for ``channels`` output channels."""
    import rvm

    bias = RNG.integers(-3000, 3000, channels).astype(np.int32)
    return rvm.const(bias), rvm.const(RNG.uniform(2e-4, 2e-3, channels).astype(np.float32))


def _packed_calls(mod):
    """The quantized op calls of ``mod``'s main after `pack_conv_weights`."""
    from rvm.ir import expr as E
    from rvm.transform.infer_shapes import infer_shapes
    from rvm.transform.pack_conv_weights import pack_conv_weights

    return [
        bind.value
        for block in pack_conv_weights(infer_shapes(mod))["main"].body.blocks
        for bind in block.bindings
        if isinstance(bind.value, E.Call) and bind.value.callee in (op.ops.qconv2d, op.ops.qdense)
    ]


def _check_saved(mod, xv, tmp_path):
    """``mod`` compiled (jit kernels), saved and loaded: every exec mode of both equals the
    reference interpreter on ``xv``."""
    import rvm

    want = rvm.interpret(mod, "main", xv)
    ex = rvm.compile(mod)
    ex.save(tmp_path / "module.rvmx")
    for loaded in (ex, rvm.load_executable(tmp_path / "module.rvmx")):
        for mode in ("bytecode", "compiled", "native"):
            got = rvm.VirtualMachine(loaded, exec_mode=mode)["main"](xv)
            np.testing.assert_array_equal(got, want)


def _conv_then_dense(w1, w2):
    """A (1, 6, 9, 9) uint8 input through a qconv2d by ``w1`` (16, 6, 3, 3) and a qdense by
    ``w2`` (10, 784), both int8 constants, requantized with ReLU."""
    import rvm
    from rvm.ir import Builder, TensorType, Var

    x = Var("x", TensorType((1, 6, 9, 9), "uint8"))
    quant = {"x_zero": 3, "y_zero": 5, "relu": True}
    consts = [_bias_and_scale(o) for o in (16, 10)]
    b = Builder()
    with b.function("main", [x]):
        h = b.emit(op.qconv2d(x, rvm.const(w1), *consts[0], **quant))
        h = b.emit(op.reshape(h, (1, 16 * 7 * 7)))
        h = b.emit(op.qdense(h, rvm.const(w2), *consts[1], **quant))
        b.emit_output(h)
    return b.get()


def test_compile_widens_constant_weights_where_the_kernels_take_int16(tmp_path):
    """`rvm.compile` (jit kernels) gives the qconv2d and qdense of constant int8 weights int16
    ones where this CPU's kernels multiply 16-bit values (`qtile.MADD16`), int8 elsewhere;
    every exec mode equals the reference interpreter, saved and loaded too."""
    w1, w2 = _ints((16, 6, 3, 3), "int8"), _ints((10, 16 * 7 * 7), "int8")
    mod = _conv_then_dense(w1, w2)
    weights = [call.args[1] for call in _packed_calls(mod)]
    wide = "int16" if qtile.MADD16 else "int8"
    assert [str(w.data.dtype) for w in weights] == [wide, wide]
    assert all(np.array_equal(w.data, v) for w, v in zip(weights, (w1, w2), strict=True))
    _check_saved(mod, _ints((1, 6, 9, 9), "uint8"), tmp_path)


def test_compile_keeps_int8_weights_whose_pairs_fit(tmp_path):
    """Constant 7-bit weights (`qtile.pairs_fit`) stay int8 where this CPU's kernels have no
    VNNI, the calls saying so (``weight_pairs="int16"``: the ``vpmaddubsw`` tiles read them
    in place); with VNNI nothing changes. Every exec mode equals the reference interpreter,
    saved and loaded too."""
    w1, w2 = _small_pairs((16, 6, 3, 3)), _small_pairs((10, 16 * 7 * 7))
    mod = _conv_then_dense(w1, w2)
    calls = _packed_calls(mod)
    assert [str(c.args[1].data.dtype) for c in calls] == ["int8", "int8"]
    pairs = "int16" if qtile.MADD16 else None
    assert [c.attrs.get("weight_pairs") for c in calls] == [pairs, pairs]
    _check_saved(mod, _ints((1, 6, 9, 9), "uint8"), tmp_path)


def _check_library_conv(x, w, groups, pads, dilation, y_dtype):
    """`qconv.qconv2d` called as a kernel calls it, in both weight layouts, output prefilled
    so an element no piece wrote fails: equal to the NumPy reference."""
    o = w.shape[0]
    bias = RNG.integers(-3000, 3000, o).astype(np.int32)
    scale = RNG.uniform(2e-4, 2e-3, o).astype(np.float32)
    y_zero, (low, high) = (5, (5, 255)) if y_dtype == "uint8" else (-7, (-128, 127))
    want = numpy_ref.qconv2d(x, w, bias, scale, 3, y_zero, low, high, y_dtype, (1, 1), pads,
                             (dilation,) * 2, groups)  # fmt: skip
    for hwc, weight in ((False, w), (True, np.ascontiguousarray(w.transpose(0, 2, 3, 1)))):
        out = np.full(want.shape, 77, y_dtype)
        qentry.qconv2d(x, weight, bias, scale, out, 3, y_zero, low, high, groups, 1, 1, dilation,
                      dilation, pads[0], pads[1], hwc)  # fmt: skip
        np.testing.assert_array_equal(out, want, err_msg=f"hwc={hwc}")


@pytest.mark.parametrize(("xs", "ws", "pads", "dilation", "groups"), DIRECT_CASES)
def test_direct_qconv2d_equals_reference(blas_threads, xs, ws, pads, dilation, groups):
    """Unit-stride convolutions take the image read in place (`qconv.direct_pitch`), on one
    thread or two, uint8 and int8 inputs in turn."""
    oh = xs[2] + pads[0] + pads[2] - dilation * (ws[2] - 1)
    ow = xs[3] + pads[1] + pads[3] - dilation * (ws[3] - 1)
    assert qconv.direct_pitch(oh, ow, ws[3], 1, dilation) == ow + dilation * (ws[3] - 1)
    x_dtype = "int8" if xs[1] % 2 else "uint8"
    _check_library_conv(_ints(xs, x_dtype), _ints(ws, "int8"), groups, pads, dilation, x_dtype)


def test_wide_shifts_requantize_after_the_tiles():
    """A bias past 2 ** 30 leaves the micro-kernels' fused epilogue (its int32 arithmetic)
    for the int64 pass after them; channels whose shift fits and those whose does not, in
    one product, equal the reference (a row margin to drop, the last columns past a tile)."""
    x, w = _ints((1, 8, 9, 9), "uint8"), _ints((12, 8, 3, 3), "int8")
    bias = RNG.integers(-3000, 3000, 12).astype(np.int32)
    bias[::3] = np.int32(2**30 + 5), np.int32(-(2**30) - 5), np.int32(2**31 - 1), 7
    scale = RNG.uniform(2e-10, 2e-9, 12).astype(np.float32)
    want = numpy_ref.qconv2d(x, w, bias, scale, 3, 5, 5, 255, "uint8", (1, 1), (1, 1, 1, 1),
                             (1, 1), 1)  # fmt: skip
    out = np.full(want.shape, 77, np.uint8)
    qentry.qconv2d(x, w, bias, scale, out, 3, 5, 5, 255, 1, 1, 1, 1, 1, 1, 1)
    np.testing.assert_array_equal(out, want)
    assert len(set(want.reshape(12, -1)[::3, 0])) > 1  # the wide shifts reach the outputs


def test_direct_pitch_falls_back_to_im2col():
    """Rows whose margins would add too many columns use im2col; strides split the image
    by phase, so their rows' margins are narrower."""
    assert qconv.direct_pitch(7, 7, 7, 1, 1) == 0  # 85 columns of 13-word rows for 49
    assert qconv.direct_pitch(14, 14, 3, 1, 1) == 16
    assert qconv.direct_pitch(112, 112, 7, 2, 1) == 115  # resnet's stem: 4 phases


STRIDED_CASES = [
    # x shape, weight shape, strides, padding (top, left, bottom, right), dilation, groups:
    # the image split by phase of the strides (a stem, downsampling 1 x 1s and 3 x 3s,
    # unequal strides, odd sizes whose last phase is shorter, dilation across phases)
    ((1, 3, 23, 23), (8, 3, 7, 7), (2, 2), (3, 3, 3, 3), 1, 1),
    ((1, 16, 13, 13), (12, 16, 1, 1), (2, 2), (0, 0, 0, 0), 1, 1),
    ((1, 8, 15, 14), (16, 8, 3, 3), (2, 2), (1, 1, 1, 1), 1, 1),
    ((2, 6, 11, 12), (6, 3, 3, 3), (1, 3), (1, 2, 0, 1), (2, 1), 2),
    ((1, 5, 17, 9), (7, 5, 3, 2), (3, 2), (2, 0, 1, 1), (1, 2), 1),
    ((1, 32, 56, 56), (64, 32, 3, 3), (2, 2), (1, 1, 1, 1), 1, 1),  # split on the pool
]


@pytest.mark.parametrize(("xs", "ws", "strides", "pads", "dilation", "groups"), STRIDED_CASES)
def test_strided_direct_qconv2d_equals_reference(blas_threads, xs, ws, strides, pads, dilation,
                                                 groups):  # fmt: skip
    dh, dw = dilation if isinstance(dilation, tuple) else (dilation, dilation)
    sh, sw = strides
    oh = (xs[2] + pads[0] + pads[2] - dh * (ws[2] - 1) - 1) // sh + 1
    ow = (xs[3] + pads[1] + pads[3] - dw * (ws[3] - 1) - 1) // sw + 1
    assert qconv.direct_pitch(oh, ow, ws[3], sw, dw) > 0
    x_dtype = "int8" if xs[1] % 2 else "uint8"
    x, w = _ints(xs, x_dtype), _ints(ws, "int8")
    o = w.shape[0]
    bias = RNG.integers(-3000, 3000, o).astype(np.int32)
    scale = RNG.uniform(2e-4, 2e-3, o).astype(np.float32)
    want = numpy_ref.qconv2d(x, w, bias, scale, 3, 5, 5, 255, "uint8", strides, pads, (dh, dw),
                             groups)  # fmt: skip
    for hwc, weight in ((False, w), (True, np.ascontiguousarray(w.transpose(0, 2, 3, 1)))):
        out = np.full(want.shape, 77, np.uint8)
        qentry.qconv2d(x, weight, bias, scale, out, 3, 5, 5, 255, groups, sh, sw, dh, dw,
                      pads[0], pads[1], hwc)  # fmt: skip
        np.testing.assert_array_equal(out, want, err_msg=f"hwc={hwc}")


def _check_worst_case():
    """255 x -128 (and 255 x 127) at every depth of deep reductions, through `qentry`: int16
    pair sums would saturate (``vpmaddubsw``: 2 x 255 x 128 > 32767); the products stay exact
    and equal the NumPy reference (int64 sums)."""
    k = 4 * 1024 + 3  # deep, not a multiple of 4
    x = np.full((3, k), 255, np.uint8)
    x[2] = _ints((k,), "uint8")
    w = np.full((7, k), -128, np.int8)
    w[1], w[2] = 127, _ints((k,), "int8")
    bias, scale = np.arange(7, dtype=np.int32), np.full(7, 5e-7, np.float32)
    want = numpy_ref.qdense(x, w, bias, scale, 0, 0, -128, 127, "int8")
    assert want.min() > -128 and want.max() < 127  # not clipped: the sums show
    out = np.full(want.shape, 77, np.int8)
    qentry.qdense(x, w, bias, scale, out, 0, 0, -128, 127)
    np.testing.assert_array_equal(out, want)
    xc = np.full((1, 512, 7, 7), 255, np.uint8)  # a 3 x 3 convolution of depth 4608
    wc = np.full((24, 3, 3, 512), -128, np.int8)
    wc[::2] = 127
    bias, scale = np.zeros(24, np.int32), np.full(24, 2e-7, np.float32)
    want = numpy_ref.qconv2d(xc, wc, bias, scale, 0, 0, -128, 127, "int8", (1, 1), (1, 1, 1, 1),
                             (1, 1), 1, "OHWI")  # fmt: skip
    assert want.min() > -128 and want.max() < 127
    out = np.full(want.shape, 77, np.int8)
    qentry.qconv2d(xc, wc, bias, scale, out, 0, 0, -128, 127, 1, 1, 1, 1, 1, 1, 1, True)
    np.testing.assert_array_equal(out, want)


def test_worst_case_products_stay_exact():
    _check_worst_case()


def _small_pairs(shape):
    """int8 weights whose pairs fit 16 bits (`qtile.pairs_fit`): 7-bit values (ONNX Runtime's
    ``reduce_range``: -64..64), channel 0 all -64, channel 1 one -128 among zeros, channel 2
    one 127 among ones (every pair at `qtile.PAIR_BOUND`)."""
    w = RNG.integers(-64, 65, shape).astype(np.int8)
    flat = w.reshape(shape[0], -1)
    flat[0] = -64
    flat[1], flat[1, flat.shape[1] // 2] = 0, -128
    flat[2], flat[2, 1] = 1, 127
    assert qtile.pairs_fit(w)
    return w


def _check_pairs_conv(x, w, groups, strides, pads, dilation):
    """`qentry.qconv2d` on weights whose pairs fit 16 bits (``pairs``), both layouts, output
    prefilled: equal to the NumPy reference."""
    o, (sh, sw), (dh, dw) = w.shape[0], strides, dilation
    bias = RNG.integers(-3000, 3000, o).astype(np.int32)
    scale = RNG.uniform(2e-5, 2e-4, o).astype(np.float32)
    want = numpy_ref.qconv2d(x, w, bias, scale, 3, 5, 5, 255, "uint8", strides, pads,
                             dilation, groups)  # fmt: skip
    for hwc, weight in ((False, w), (True, np.ascontiguousarray(w.transpose(0, 2, 3, 1)))):
        out = np.full(want.shape, 77, np.uint8)
        qentry.qconv2d(x, weight, bias, scale, out, 3, 5, 5, 255, groups, sh, sw, dh, dw,
                      pads[0], pads[1], hwc, True)  # fmt: skip
        np.testing.assert_array_equal(out, want, err_msg=f"hwc={hwc}")


def _check_small_pairs():
    """Weights whose pairs fit 16 bits through the ``vpmaddubsw`` tiles where the CPU has
    no VNNI (``pairs``; with VNNI it changes nothing): 255 at every depth by pairs at the
    bound, deep (a dense product's tiles, a row's dots), and convolutions whose taps are
    read in place or gathered by words or by bytes, uint8 and int8 inputs: equal the NumPy
    reference."""
    k = 4 * 1024 + 3
    x = np.full((3, k), 255, np.uint8)
    x[2] = _ints((k,), "uint8")
    w = _small_pairs((7, k))
    assert not qtile.pairs_fit(_ints((7, k), "int8"))  # full 8-bit weights
    bias, scale = np.arange(7, dtype=np.int32), np.full(7, 1e-6, np.float32)
    for rows in (x, x[:1]):  # tiles; one row: dots
        want = numpy_ref.qdense(rows, w, bias, scale, 0, 0, -128, 127, "int8")
        assert want.min() > -128 and want.max() < 127  # not clipped: the sums show
        out = np.full(want.shape, 77, np.int8)
        qentry.qdense(np.ascontiguousarray(rows), w, bias, scale, out, 0, 0, -128, 127, True)
        np.testing.assert_array_equal(out, want)
    xc = np.full((1, 64, 7, 7), 255, np.uint8)
    _check_pairs_conv(xc, _small_pairs((40, 64, 3, 3)), 1, (1, 1), (1, 1, 1, 1), (1, 1))
    _check_pairs_conv(_ints((2, 6, 9, 12), "int8"), _small_pairs((6, 3, 3, 3)), 2, (1, 1),
                      (2, 0, 1, 1), (2, 2))  # fmt: skip
    _check_pairs_conv(_ints((1, 5, 17, 9), "uint8"), _small_pairs((7, 5, 3, 2)), 1, (3, 2),
                      (2, 0, 1, 1), (1, 2))  # fmt: skip
    _check_pairs_conv(_ints((1, 6, 4, 4), "int8"), _small_pairs((40, 6, 3, 3)), 1, (1, 1),
                      (1, 1, 1, 1), (1, 1))  # more channels than positions  # fmt: skip


def test_small_pairs_equal_reference(blas_threads):
    """`_check_small_pairs` on one thread or two, and products split on the pool by columns
    and by rows."""
    _check_small_pairs()
    _check_pairs_conv(_ints((1, 32, 47, 47), "uint8"), _small_pairs((64, 32, 3, 3)), 1, (1, 1),
                      (1, 1, 1, 1), (1, 1))  # fmt: skip
    _check_pairs_conv(_ints((1, 64, 7, 7), "int8"), _small_pairs((256, 64, 3, 3)), 1, (1, 1),
                      (1, 1, 1, 1), (1, 1))  # fmt: skip


def test_without_vnni_small_maps_gather_their_taps(blas_threads):
    """Without VNNI a convolution whose image rows' margins would cost the tiles more than
    copying its taps' words gathers them into an im2col panel (`qconv._gathers`): 7 x 7 and
    14 x 14 outputs (also from a stride of 2), not a 1 x 1 kernel (no margins); with VNNI
    never. Gathered convolutions, strided, dilated, grouped and batched, split on the pool
    or not, equal the NumPy reference."""
    assert qconv._gathers(512, 7, 7, 9, 9 * 128) == qtile.MADD16
    assert qconv._gathers(256, 14, 14, 16, 9 * 64) == qtile.MADD16
    assert qconv._gathers(512, 7, 7, 8, 9 * 128) == qtile.MADD16  # 3 x 3 / 2 from 14 x 14
    assert not qconv._gathers(2048, 7, 7, 7, 128)
    assert not qconv._gathers(4, 56, 56, 58, 9)  # few channels: the copies cost more
    cases = [  # x, w, groups, strides, pads, dilation
        (_ints((1, 64, 14, 14), "uint8"), (256, 64, 3, 3), 1, (2, 2), (1, 1, 1, 1), (1, 1)),
        (_ints((2, 8, 9, 9), "int8"), (48, 4, 3, 3), 2, (1, 1), (2, 2, 2, 2), (2, 2)),
        (_ints((1, 12, 13, 13), "uint8"), (96, 12, 5, 5), 1, (1, 1), (2, 2, 2, 2), (1, 1)),
    ]
    for x, shape, groups, strides, pads, dilation in cases:
        oh = (x.shape[2] + pads[0] + pads[2] - dilation[0] * (shape[2] - 1) - 1) // strides[0] + 1
        ow = (x.shape[3] + pads[1] + pads[3] - dilation[1] * (shape[3] - 1) - 1) // strides[1] + 1
        pitch = qconv.direct_pitch(oh, ow, shape[3], strides[1], dilation[1])
        quads = shape[2] * shape[3] * -(-shape[1] // 4)
        assert qconv._gathers(shape[0] // groups, oh, ow, pitch, quads) == qtile.MADD16
        _check_pairs_conv(x, _small_pairs(shape), groups, strides, pads, dilation)


OPERAND_CASES = [
    # x dtype and shape, weight shape (OIHW), groups, strides, padding: products split at two
    # threads whose pieces make the panel's operand first, a share of its quads each
    # (`qsplit.prepare`): a 16-channel 1 x 1 at 55 x 55 (split for its tiles' fixed cost,
    # `qsplit.TILE_DEPTHS_FIXED`); padded 3 x 3s (their image gathered into a panel without
    # VNNI) of 5 quads (uneven shares) and strided (the image's phases); a 7 x 7 on a small
    # map (an im2col panel: by words with the OHWI weight, by bytes with the OIHW one); groups
    # and a batch (an operand per image and group)
    ("uint8", (1, 16, 55, 55), (64, 16, 1, 1), 1, (1, 1), (0, 0, 0, 0)),
    ("int8", (1, 20, 27, 27), (48, 20, 3, 3), 1, (1, 1), (1, 1, 1, 1)),
    ("uint8", (1, 16, 41, 41), (64, 16, 3, 3), 1, (2, 2), (1, 1, 1, 1)),
    ("int8", (1, 64, 12, 12), (256, 64, 7, 7), 1, (1, 1), (0, 0, 0, 0)),
    ("uint8", (2, 32, 23, 23), (96, 16, 3, 3), 2, (1, 1), (1, 1, 1, 1)),
]


@pytest.mark.parametrize(("x_dtype", "xs", "ws", "groups", "strides", "pads"), OPERAND_CASES)
def test_split_products_make_their_operand_in_pieces(blas_threads, x_dtype, xs, ws, groups,
                                                     strides, pads):  # fmt: skip
    """Products whose pieces make their image, gathered panel or im2col panel (at two
    threads, on the pool) equal the NumPy reference exactly, as on one thread."""
    before = workpool.jobs()
    _check_pairs_conv(_ints(xs, x_dtype), _small_pairs(ws), groups, strides, pads, (1, 1))
    if blas_threads == 2:
        assert workpool.jobs() > before


QADD_CASES = [
    # a's and b's dtypes, the output's, ReLU, shape: a resnet50 residual (large enough to be
    # cut over the pool at two threads, `rvm.kernels.epipass.sweep_pieces`), mixed signs on
    # an odd shape (one piece), int8 out of a 2-d pair
    ("uint8", "uint8", "uint8", True, (1, 64, 56, 56)),
    ("int8", "uint8", "int8", False, (2, 3, 5, 7)),
    ("uint8", "int8", "uint8", False, (1, 256, 14, 14)),
    ("int8", "int8", "int8", True, (300, 257)),
]


@pytest.mark.parametrize(("a_dtype", "b_dtype", "y_dtype", "relu", "shape"), QADD_CASES)
def test_qadd_kernel_equals_reference(blas_threads, a_dtype, b_dtype, y_dtype, relu, shape):
    """`rvm.op.qadd` through the library (`rvm.kernels.qadd`) equals its NumPy reference
    exactly, on one thread and cut over the pool at two; the scales make rounding ties and
    both ends of the range."""
    a, b = var("a", shape, a_dtype), var("b", shape, b_dtype)
    zeros = {"uint8": (3, 131, 7), "int8": (-4, 5, -9)}
    call = op.qadd(a, b, a_scale=0.0412, b_scale=0.0733, y_scale=0.0625,
                   a_zero=zeros[a_dtype][0], b_zero=zeros[b_dtype][1], y_zero=zeros[y_dtype][2],
                   dtype=y_dtype, relu=relu)  # fmt: skip
    before = workpool.jobs()
    check(prim([a, b], call), _ints(shape, a_dtype), _ints(shape, b_dtype))
    if blas_threads == 2 and shape[-1] == 56:
        assert workpool.jobs() > before


def test_qadd_rejects_inputs_of_other_shapes_or_dtypes():
    with pytest.raises(Exception, match="differ in shape"):
        infer_type(op.qadd(var("a", (2, 3), "uint8"), var("b", (3, 2), "uint8"), a_scale=1.0,
                           b_scale=1.0, y_scale=1.0))  # fmt: skip
    with pytest.raises(Exception, match="uint8 or int8"):
        infer_type(op.qadd(var("a", (2, 3)), var("b", (2, 3), "uint8"), a_scale=1.0,
                           b_scale=1.0, y_scale=1.0))  # fmt: skip


def test_pairs_fit_reads_the_two_largest_of_a_channel():
    """`qtile.pairs_fit`: any two values of one output channel within `qtile.PAIR_BOUND`."""
    w = np.zeros((3, 8), np.int8)
    w[:, :2] = 64
    assert qtile.pairs_fit(w)
    w[1, 5] = 1  # 64 + 64 + 1 in one channel: its two largest still fit
    assert qtile.pairs_fit(w)
    w[1, 5] = -65  # 65 + 64
    assert not qtile.pairs_fit(w)
    assert qtile.pairs_fit(np.array([[-128, 0], [0, 0]], np.int8))
    assert not qtile.pairs_fit(np.array([[-128, 1]], np.int8))
    assert not qtile.pairs_fit(w.astype(np.int16))  # only int8 weights


# In a subprocess compiled for a CPU without AVX-512 VNNI: the ``vpmaddwd`` kernels
# (`qtile.MADD16`, AVX2 or AVX-512 without VNNI).
_NO_VNNI = """
import sys
sys.path.insert(0, {tests!r})
import numpy as np
from rvm.kernels import qconv, qgemm
assert not qgemm.VNNI and qgemm.MADD16
import test_quantized as t
t._check_worst_case()
t._check_small_pairs()
t._check_library_conv(t._ints((1, 6, 7, 9), "uint8"), t._ints((5, 6, 3, 3), "int8"), 1,
                      (1, 1, 1, 1), 1, "uint8")
t._check_library_conv(t._ints((1, 3, 11, 11), "int8"), t._ints((4, 3, 3, 3), "int8"), 1,
                      (1, 0, 0, 1), 2, "int8")
x, w = t._ints((5, 37), "uint8"), t._ints((9, 37), "int8")
bias, scale = np.arange(9, dtype=np.int32), np.full(9, 1e-3, np.float32)
want = t.numpy_ref.qdense(x, w, bias, scale, 128, 3, 0, 255, "uint8")
out = np.empty_like(want)
qconv.qdense(x, w, bias, scale, out, 128, 3, 0, 255)
np.testing.assert_array_equal(out, want)
x, w = t._ints((1, 300), "uint8"), t._ints((9, 300), "int8")  # one row: dots; int16 weights
want = t.numpy_ref.qdense(x, w, bias, scale, 128, 3, 0, 255, "uint8")
out = np.empty_like(want)
qconv.qdense(x, w.astype(np.int16), bias, scale, out, 128, 3, 0, 255)
np.testing.assert_array_equal(out, want)
out = np.empty((1, 7, 5, 5), np.uint8)  # strided: an im2col panel
x, w = t._ints((1, 4, 10, 10), "uint8"), t._ints((7, 4, 3, 3), "int8")
bias, scale = np.arange(7, dtype=np.int32), np.full(7, 1e-3, np.float32)
qconv.qconv2d(x, w, bias, scale, out, 3, 5, 0, 255, 1, 2, 2, 1, 1, 1, 1)
want = t.numpy_ref.qconv2d(x, w, bias, scale, 3, 5, 0, 255, "uint8", (2, 2), (1, 1, 1, 1),
                           (1, 1), 1)
np.testing.assert_array_equal(out, want)
from rvm.kernels import qturned  # turned around: the plain loop's sums, requantized after
x, w = t._ints((1, 20, 9, 9), "uint8"), t._ints((40, 3, 3, 20), "int8")
bias, scale = np.arange(40, dtype=np.int32), np.full(40, 1e-3, np.float32)
want = t.numpy_ref.qconv2d(x, w, bias, scale, 3, 5, 0, 255, "uint8", (1, 1), (1, 1, 1, 1),
                           (1, 1), 1, "OHWI")
out = np.empty_like(want)
qturned.qconv2d_turned(x, qturned.turn_weight(w), bias, scale, out, 3, 5, 0, 255, 1, 1, 1, 1, 1,
                       1, 3, 3)
np.testing.assert_array_equal(out, want)
print("ok")
"""


_BASE_FEATURES = "+64bit,+avx,+avx2,+fma,+sse,+sse2,+sse3,+sse4.1,+sse4.2,+ssse3,+cmov,"
NO_VNNI_TARGETS = {
    "skylake-avx512": _BASE_FEATURES
    + "+avx512f,+avx512bw,+avx512dq,+avx512vl,+avx512cd,-avx512vnni",
    "haswell": _BASE_FEATURES + "-avx512f,-avx512vnni",
}


@pytest.mark.slow  # a cold build of the integer library for another CPU: about a minute
@pytest.mark.parametrize("target", sorted(NO_VNNI_TARGETS))
def test_without_vnni_the_pmaddwd_kernels_give_the_same_answers(tmp_path, target):
    """Compiled for Skylake-X (AVX-512 without VNNI: 32 registers) or Haswell (AVX2: 16)
    through `NUMBA_CPU_NAME`/`NUMBA_CPU_FEATURES`, the products take the ``vpmaddwd``
    kernels: the same exact results, the worst-case values too."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    needs = "avx512f" if target == "skylake-avx512" else "avx2"
    if not host_has(needs):
        pytest.skip(f"the host has no {needs}")
    env = dict(os.environ, NUMBA_CPU_NAME=target, NUMBA_CACHE_DIR=str(tmp_path))
    env["NUMBA_CPU_FEATURES"] = NO_VNNI_TARGETS[target]
    script = _NO_VNNI.format(tests=str(Path(__file__).parent))
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=840)  # fmt: skip
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stderr[-3000:]


def test_split_plan_cuts_along_the_axis_that_evens_out_the_threads():
    """(axis, step, pieces): columns for many positions, rows (output channels) for few."""
    nr, mr = qgemm.NR, qgemm.MR
    axis, step, pieces = qsplit.split_plan(1000, 512, 6 * nr, 2)  # 13 x 13: 6 column tiles
    assert (axis, step, pieces) == (0, nr, 6)
    # 64 tiles of rows (512 channels with VNNI's 8-row tiles) by 2 column tiles (7 x 7)
    axis, step, pieces = qsplit.split_plan(64 * mr, 2048, 2 * nr, 2)
    assert axis == 1 and pieces == 8 and step == 64 * mr // 8
    axis, step, pieces = qsplit.split_plan(32 * mr, 1024, 7 * nr, 2)  # 14 x 14: 7 column tiles
    assert axis == 1 and pieces * step == 32 * mr and step % mr == 0
    assert qsplit.split_plan(1000, 2048, nr, 2)[0] == 1  # a dense product of one row
    assert qsplit.split_plan(16, 64, 2 * nr, 2)[2] == 1  # too little work a piece
    # a shallow product (a 16-channel 1 x 1 at 55 x 55, 3.1M multiply-adds): its tiles' fixed
    # cost counted, split, in pieces a multiple of the threads (by columns with AVX2's tiles;
    # with VNNI's 8-row tiles its 64 channels, 8 tiles, share out as evenly by rows)
    axis, step, pieces = qsplit.split_plan(64, 16, 3040, 2)
    assert pieces >= 2 and pieces % 2 == 0
    assert step * pieces == 64 if axis == 1 else step * pieces >= 3040
    assert qsplit.split_plan(512, 2048, 2 * nr, 1)[2] == 1  # one thread


@pytest.mark.parametrize(
    ("og", "depth", "cols"),
    [(16, 64, 3025), (16, 128, 3025), (32, 256, 729), (48, 256, 169), (192, 48, 169),
     (256, 64, 169), (1000, 512, 169), (256, 2304, 196), (1024, 256, 196), (2048, 512, 49)],
)  # fmt: skip
def test_split_plan_counts_a_last_partial_tile(og, depth, cols):
    """Squeezenet's and resnet50's int8 products at two threads: the pieces taken in turn, the
    first thread (which takes the most) does at most a tenth more than half of the product. A
    last band of fewer than `MR` rows (16 rows: 6 + 6 + 4) or a last tile of a few columns, a
    piece of its own, had left one thread 6 + 4 of 16 rows (0.625) and 80 + 9 of 169 columns.
    A product of less than two pieces' least work (`SPLIT_MIN`, more multiply-adds where the
    vectors are wider: AVX-512's squeezenet products) is one piece."""
    axis, step, pieces = qsplit.split_plan(og, depth, cols, 2)
    if og * cols * (depth + qsplit.TILE_DEPTHS_FIXED) < 2 * qsplit.SPLIT_MIN:
        assert (axis, step, pieces) == (0, cols, 1)
        return
    size = og if axis else cols
    assert pieces == -(-size // step) >= 2
    first = sum(min(step, size - i * step) for i in range(0, pieces, 2))
    assert first <= 1.1 * size / 2, (axis, step, pieces, first, size)


@pytest.mark.parametrize(("x_dtype", "x_zero"), [("uint8", 0), ("int8", -128)])
def test_zero_input_zero_point_products_equal_reference(x_dtype, x_zero):
    """An input zero point of 0 as the kernels see it (uint8 at 0; int8 at -128, its bytes
    shifted into uint8): the weight's row sums are not made, padded taps still add nothing;
    runs of the image long and short (`qcolumns.BYTE_RUN`), convolutions and a dense product."""
    y_zero, low, high = 5, 5, 255
    for xs, ws, pad in [
        ((1, 16, 47, 47), (24, 16, 3, 3), 1),  # padded: rows of 47 words
        ((1, 32, 30, 30), (20, 32, 1, 1), 0),  # one run of 900 words
        ((1, 12, 9, 9), (8, 12, 3, 3), 0),  # one run of 81
    ]:
        x, w = _ints(xs, x_dtype), _ints(ws, "int8")
        bias = RNG.integers(-3000, 3000, ws[0]).astype(np.int32)
        scale = RNG.uniform(2e-4, 2e-3, ws[0]).astype(np.float32)
        want = numpy_ref.qconv2d(x, w, bias, scale, x_zero, y_zero, low, high, "uint8", (1, 1),
                                 (pad,) * 4, (1, 1), 1)  # fmt: skip
        ohwi = np.ascontiguousarray(w.transpose(0, 2, 3, 1))
        out = np.full(want.shape, 77, np.uint8)
        qentry.qconv2d(x, ohwi, bias, scale, out, x_zero, y_zero, low, high, 1, 1, 1, 1, 1, pad,
                      pad, True)  # fmt: skip
        np.testing.assert_array_equal(out, want, err_msg=str(xs))
    x, w = _ints((37, 300), x_dtype), _ints((45, 300), "int8")
    bias = RNG.integers(-3000, 3000, 45).astype(np.int32)
    scale = RNG.uniform(1e-4, 1e-3, 45).astype(np.float32)
    want = numpy_ref.qdense(x, w, bias, scale, x_zero, y_zero, low, high, "uint8")
    out = np.full(want.shape, 77, np.uint8)
    qentry.qdense(x, w, bias, scale, out, x_zero, y_zero, low, high)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("y_dtype", ["uint8", "int8"])
@pytest.mark.parametrize(("m", "k", "n"), [(300, 200, 96), (1, 2048, 1000)])
def test_split_qdense_equals_reference(blas_threads, y_dtype, m, k, n):
    """A dense product split by its rows (the panel's columns), or for one row by its output
    channels: the transposed output."""
    x, w = _ints((m, k), "uint8"), _ints((n, k), "int8")
    bias = RNG.integers(-3000, 3000, n).astype(np.int32)
    scale = RNG.uniform(1e-4, 1e-3, n).astype(np.float32)
    y_zero, (low, high) = (100, (0, 255)) if y_dtype == "uint8" else (-2, (-128, 127))
    want = numpy_ref.qdense(x, w, bias, scale, 128, y_zero, low, high, y_dtype)
    out = np.full(want.shape, 77, y_dtype)
    qentry.qdense(x, w, bias, scale, out, 128, y_zero, low, high)
    np.testing.assert_array_equal(out, want)


def test_qconv2d_weight_layout_is_checked():
    x, w = var("x", (1, 4, 8, 8), "uint8"), var("w", (6, 3, 3, 4), "int8")
    b, s = var("b", (6,), "int32"), var("s", (6,), "float32")
    with pytest.raises(Exception, match="weight_layout must be OIHW, OHWI or turned, got 'HWIO'"):
        op.qconv2d(x, w, b, s, weight_layout="HWIO")
    with pytest.raises(Exception, match="a turned weight needs its weight_shape"):
        op.qconv2d(x, w, b, s, weight_layout="turned")
    turned = op.qconv2d(x, var("t", (1, 10, 32, 4), "int8"), b, s, weight_layout="turned",
                        weight_shape=(6, 3, 3, 4))  # fmt: skip
    assert infer_type(turned).shape == (1, 6, 6, 6)
    wrong = op.qconv2d(x, var("t", (1, 9, 32, 4), "int8"), b, s, weight_layout="turned",
                       weight_shape=(6, 3, 3, 4))  # fmt: skip
    with pytest.raises(Exception, match=r"is \(panels, 10, width, 4\)"):
        infer_type(wrong)
    call = op.qconv2d(x, w, b, s, padding=1, weight_layout="OHWI")
    assert call.attrs["weight_layout"] == "OHWI"
    assert "weight_layout" not in op.qconv2d(x, var("v", (6, 4, 3, 3), "int8"), b, s).attrs


TURNED_CASES = [
    # x shape, OHWI weight shape, strides, padding (top, left, bottom, right), dilation,
    # input and output dtypes: 81 positions in tiles of 8 and of 7; 40 channels (a panel and
    # 8 lanes of the next), 33; strides, dilation, uneven padding; 64 channels on 7 x 7
    # whose two panels split on the pool (two dtype variants: each compiles the entry point)
    ((2, 20, 9, 9), (40, 3, 3, 20), (1, 1), (1, 1, 1, 1), 1, "uint8", "uint8"),
    ((1, 13, 11, 10), (33, 3, 3, 13), (2, 1), (1, 0, 1, 2), 2, "int8", "int8"),
    ((1, 256, 7, 7), (64, 3, 3, 256), (1, 1), (1, 1, 1, 1), 1, "uint8", "uint8"),
]


@pytest.mark.parametrize(("xs", "ws", "strides", "pads", "dilation", "x_dtype", "y_dtype"),
                         TURNED_CASES)  # fmt: skip
def test_turned_qconv2d_equals_reference(blas_threads, xs, ws, strides, pads, dilation,
                                         x_dtype, y_dtype):  # fmt: skip
    """The convolution turned around (`rvm.kernels.qturned`: output channels along the
    lanes) on its turned weight: equal to the reference on the OHWI weight and on the
    turned one, its requantizing in registers and, with scales of 1/2 or more, after the
    sums (the output prefilled, so an element no tile wrote fails)."""
    x, w = _ints(xs, x_dtype), _ints(ws, "int8")
    o, kh, kw = ws[0], ws[1], ws[2]
    turned = qturned.turn_weight(w)
    assert turned.shape[2] == qturned.NR and turned.shape[0] * qturned.NR >= o
    bias = RNG.integers(-3000, 3000, o).astype(np.int32)
    y_zero, (low, high) = (5, (5, 255)) if y_dtype == "uint8" else (-7, (-128, 127))
    for scale in (RNG.uniform(2e-4, 2e-3, o), RNG.uniform(0.5, 0.6, o)):
        scale = scale.astype(np.float32)
        want = numpy_ref.qconv2d(x, w, bias, scale, 3, y_zero, low, high, y_dtype, strides,
                                 pads, (dilation,) * 2, 1, "OHWI")  # fmt: skip
        again = numpy_ref.qconv2d(x, turned, bias, scale, 3, y_zero, low, high, y_dtype,
                                  strides, pads, (dilation,) * 2, 1, "turned", ws)  # fmt: skip
        np.testing.assert_array_equal(again, want)
        out = np.full(want.shape, 77, y_dtype)
        qentry.qconv2d_turned(x, turned, bias, scale, out, 3, y_zero, low, high, *strides,
                              dilation, dilation, pads[0], pads[1], kh, kw)  # fmt: skip
        np.testing.assert_array_equal(out, want)


def test_compile_turns_the_convolutions_of_small_maps(tmp_path):
    """`rvm.compile` (jit kernels) gives a qconv2d of a small map a turned weight where this
    CPU's rule says so (`rvm.kernels.qturned.turned`: with VNNI) and keeps the direct method
    for 16 channels; every exec mode equals the reference interpreter, saved and loaded too."""
    import rvm
    from rvm.ir import Builder, TensorType, Var

    x = Var("x", TensorType((1, 64, 7, 7), "uint8"))
    w1, w2 = _ints((64, 3, 3, 64), "int8"), _ints((16, 1, 1, 64), "int8")
    quant = {"x_zero": 3, "y_zero": 5, "relu": True}
    consts = [_bias_and_scale(o) for o in (64, 16)]
    b = Builder()
    with b.function("main", [x]):
        h = b.emit(op.qconv2d(x, rvm.const(w1), *consts[0], padding=1, weight_layout="OHWI",
                              **quant))  # fmt: skip
        h = b.emit(op.qconv2d(h, rvm.const(w2), *consts[1], weight_layout="OHWI", **quant))
        b.emit_output(h)
    mod = b.get()
    layouts = [call.attrs.get("weight_layout") for call in _packed_calls(mod)]
    # 7 x 7 by 64: turned where this CPU has the turned kernel (VNNI); 16 channels: direct
    turned = "turned" if qturned.turned(64, 7, 7, 9, 1) else "OHWI"
    assert layouts == [turned, "OHWI"]
    _check_saved(mod, _ints((1, 64, 7, 7), "uint8"), tmp_path)
