"""concat_images: a channel concatenation of a batch whose pieces are per-image chains runs
them image by image (`rvm.transform.concat_images`), so the memory plan writes every piece in
place: which concatenations it rewrites, and programs against the interpreter in every exec
mode with no concat kernel left."""

from __future__ import annotations

import math

import numpy as np
import pytest
from fusion_helpers import op_names

import rvm
from rvm import op
from rvm.interp import interpret
from rvm.ir import Builder, IRModule, Var, const, tensor, verify
from rvm.kernels import winograd
from rvm.kernels.winograd import transform
from rvm.transform.concat_images import MAX_DEPTH, concat_images
from rvm.transform.pipeline import default_passes, run_pipeline

F32 = "float32"
RNG = np.random.default_rng(11)
C = 6


def _w(out: int, cin: int, kernel: int) -> np.ndarray:
    return (RNG.standard_normal((out, cin, kernel, kernel)) / np.sqrt(cin * kernel**2)).astype(F32)


def _b(out: int) -> np.ndarray:
    return RNG.standard_normal((out, 1, 1)).astype(F32)


def _fire(batch: int | str = 2, axis: int = 1, twice: bool = False, batch_bias: bool = False,
          pool: bool = True, size: int = 9, squeeze: int = 4,
          pool_x: bool = False, winograd: bool = False) -> IRModule:  # fmt: skip
    """main(x) with x (batch, C, size, size): a squeeze convolution, then squeezenet's fire
    expansion (a 1x1 and a 3x3 convolution of it, each with its bias and ReLU) and a max pool
    of it (``pool``), concatenated along ``axis``, then a 1x1 convolution of that.
    ``twice``: the 1x1 expansion is also returned; ``batch_bias``: the 3x3 one adds a
    constant with an axis of ``batch`` images; ``squeeze``: the squeeze's channels; ``pool_x``:
    the pool is of ``x``; ``winograd``: the 3x3 one is Winograd's (`op.conv2d_winograd`)."""
    x = Var("x", tensor((batch, C, size, size), F32))
    bb = Builder()
    with bb.function("main", [x]):
        s = bb.emit(op.relu(bb.emit(op.conv2d(x, const(_w(squeeze, C, 1))))))
        n1 = 7 if axis == 0 else 5  # along the batch: the pieces' channels agree
        e1 = bb.emit(op.conv2d(s, const(_w(n1, squeeze, 1))))
        e1 = bb.emit(op.relu(bb.emit(op.add(e1, const(_b(n1))))))
        w3 = _w(7, squeeze, 3)
        if winograd:
            e3 = bb.emit(op.conv2d_winograd(s, const(transform(w3)), padding=1))
        else:
            e3 = bb.emit(op.conv2d(s, const(w3), padding=1))
        e3 = bb.emit(op.add(e3, const(_b(7))))
        if batch_bias:
            e3 = bb.emit(op.add(e3, const(RNG.standard_normal((2, 7, 1, 1)).astype(F32))))
        pieces = [e1, bb.emit(op.relu(e3))]
        if pool:
            pieces.append(bb.emit(op.max_pool2d(x if pool_x else s, 3, 1, 1)))
        joined = bb.emit(op.concat(rvm.ir.Tuple(tuple(pieces)), axis=axis))
        channels = 12 + ((C if pool_x else squeeze) if pool else 0)
        out = bb.emit(op.conv2d(joined, const(_w(3, channels, 1))) if axis == 1 else joined)
        bb.emit_output(rvm.ir.Tuple((out, e1)) if twice else out)
    return bb.get()


def _blocks(batch: int, size: int = 10) -> IRModule:
    """main(x): two inception blocks in a row, each a concat of a convolution chain and a
    max pool of the block's input: the second block's images are slices of the first's
    concatenation, itself written in place."""
    x = Var("x", tensor((batch, C, size, size), F32))
    bb = Builder()
    with bb.function("main", [x]):
        y, channels = bb.emit(op.conv2d(x, const(_w(4, C, 1)))), 4
        for out in (3, 5):
            c = bb.emit(op.conv2d(y, const(_w(out, channels, 3)), padding=1))
            c = bb.emit(op.relu(bb.emit(op.add(c, const(_b(out))))))
            p = bb.emit(op.max_pool2d(y, 3, 1, 1))
            y, channels = bb.emit(op.concat(rvm.ir.Tuple((c, p)), axis=1)), channels + out
        bb.emit_output(bb.emit(op.conv2d(y, const(_w(2, channels, 1)))))
    return bb.get()


def _normal(mod: IRModule) -> IRModule:
    """``mod`` after the pipeline's passes before `concat_images` (what it takes)."""
    passes = default_passes()
    return run_pipeline(mod, passes[: [n for n, _ in passes].index("concat_images")])


def _x(batch: int, size: int = 9) -> np.ndarray:
    return RNG.standard_normal((batch, C, size, size)).astype(F32)


@pytest.mark.parametrize("batch", [2, 3])
def test_a_batch_concatenation_runs_image_by_image(batch) -> None:
    mod = _normal(_fire(batch))
    split = concat_images(mod)
    verify(split)
    ops = op_names(split)
    # each image: its slice of the squeeze, the three chains, its concat; then the images'
    image = ["strided_slice"] + ["conv2d", "add", "relu", "conv2d", "add", "relu"]
    image += ["max_pool2d", "concat"]
    assert ops[2:] == [*image * batch, "concat", "conv2d"]
    got = interpret(split, "main", x := _x(batch))
    np.testing.assert_allclose(got, interpret(mod, "main", x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "case",
    [
        dict(batch=1),  # one image: its pieces are runs already
        dict(batch="n"),  # no static batch
        dict(axis=0, pool=False),  # along the batch: its pieces are runs already
        dict(twice=True),  # a piece read elsewhere too
        dict(batch_bias=True),  # a constant with a batch axis: not per image
        dict(squeeze=96, pool=False),  # 544 multiply-adds a float: the copy matters little
        dict(pool_x=True),  # a parameter's slices: copies
    ],
)
def test_what_is_not_per_image_stays(case) -> None:
    mod = _normal(_fire(**case))
    assert concat_images(mod) is mod


def test_a_winograd_piece_runs_image_by_image_where_its_image_keeps_its_phases() -> None:
    """A Winograd 3x3 expansion is a piece's head where one image's call keeps each piece's
    phases together on the threads (`winograd.cut`: blocks of rows on a large map, or one
    thread), not where they would be cut apart (a small map on two threads)."""
    side = 2 * math.isqrt(2 * winograd.ROW_BLOCK_TILES) + 2  # four blocks of rows an image
    before = rvm.get_num_threads()
    try:
        for threads, size, split in ((2, side, True), (2, 9, False), (1, 9, True)):
            rvm.set_num_threads(threads)
            mod = _normal(_fire(winograd=True, size=size))
            got = concat_images(mod)
            assert (got is not mod) == split, (threads, size)
            if split:
                assert op_names(got).count("conv2d_winograd") == 2
                x = _x(2, size)
                want = interpret(mod, "main", x)
                np.testing.assert_allclose(interpret(got, "main", x), want, rtol=1e-5, atol=1e-5)
    finally:
        rvm.set_num_threads(before)


def test_the_depth_bound_is_the_heads_average() -> None:
    """1x1 and 3x3 expansions of ``squeeze`` channels (5 and 7 of them): (5 + 7 * 9) *
    squeeze / 12 multiply-adds a float, split up to `MAX_DEPTH`."""
    for squeeze in (8, 16, 64, 72, 80):
        mod = _normal(_fire(squeeze=squeeze, pool=False))
        split = concat_images(mod) is not mod
        assert split == ((5 + 7 * 9) * squeeze / 12 <= MAX_DEPTH), squeeze


@pytest.mark.parametrize("kernels", ["numpy", "jit"])
def test_compiled_programs_match_the_reference(exec_mode, kernels) -> None:
    """Through rvm.compile (the pass runs in the default pipeline): no concat kernel is left,
    the slices are views (of a concatenation written in place too), and the results are the
    interpreter's in every exec mode."""
    cases = ((_fire(2, size=12), 2), (_fire(3, pool=False, size=12), 3), (_blocks(2, 12), 2))
    for mod, batch in cases:
        planned = run_pipeline(mod).script()
        assert "call_dps(fused_concat" not in planned
        assert "call_dps(fused_strided_slice" not in planned
        ex = rvm.compile(mod, kernels=kernels, exec_mode=exec_mode)
        x = _x(batch, 12)
        got = rvm.VirtualMachine(ex)["main"](x)
        np.testing.assert_allclose(got, interpret(mod, "main", x), rtol=1e-4, atol=1e-4)
