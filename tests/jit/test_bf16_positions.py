"""bf16 convolutions on planes laid out as positions by channel pairs (`rvm.kernels.bf16conv`'s
``orders``; ``source_layout``/``plane_layout`` ``"positions"``, `rvm.op.bf16`): the walk
turned around (`rvm.kernels.amxconv`) reads such a plane's lines as A's rows as they lie and
rounds each position's channels into one line of such a plane out; elsewhere (no AMX, a GELU,
a residual with a plane out) the planes are turned into pair planes first and after. Either
way the words are the pair planes' words turned, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from conv_cases import bf16_conv2d, bf16_direct_case

import rvm
from rvm import op
from rvm.errors import IRError
from rvm.ir import Builder, Var, const, tensor
from rvm.ir.infer import infer_type
from rvm.kernels import convmethod
from rvm.kernels.amx import AMX
from rvm.kernels.reference.bf16 import PAIRINGS, as_positions, conv_pairs
from rvm.kernels.reference.packed import ACTIVATIONS
from rvm.op import ops
from rvm.op.bf16 import bf16_bits
from rvm.transform import to_bf16 as to_bf16_module
from rvm.transform.pipeline import default_passes, run_pipeline
from rvm.transform.to_bf16 import to_bf16

TILES = PAIRINGS.index("tiles")
NONE4 = (0, 0, 0, 0)

CASES = [  # n, c, o, h, w, k, padding, dilation, the plane out's padding
    (1, 64, 96, 28, 28, 3, 1, 1, 1),  # several bands and blocks, an edge block of positions
    (2, 32, 64, 13, 11, 3, 2, 2, 1),  # dilated, two images, not square
    (1, 128, 64, 7, 7, 3, 1, 1, 0),  # a small map: blocks read past the plane's end
    (1, 64, 128, 14, 14, 1, 0, 1, 1),  # a 1 x 1 into a 3 x 3's plane
    (2, 256, 64, 7, 7, 1, 0, 1, 0),  # a 1 x 1 on a small map, two images
    (1, 32, 32, 40, 40, 3, 1, 1, 2),  # rows of 41 words, a plane out padded by 2
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("act", ["relu", "gelu"])  # a GELU: turned into pair planes
def test_positions_bit_for_bit_the_pair_planes(case: tuple, act: str, blas_threads: int) -> None:
    """A plane of positions in gives the pair plane's bits, into float32, a pair plane or a
    plane of positions, with no residual, a float32 one, a pair plane's or a plane of
    positions'."""
    n, c, o, h, w_, k, p, d, q = case
    _, w, bias, (oh, ow), plane_in, res, res_plane = bf16_direct_case(*case[:-1])
    bits = bf16_bits(conv_pairs(w, TILES)).view(np.int16)
    index = ACTIVATIONS.index(act)
    none = np.zeros((0, 0, 0, 0), np.float32)
    out_plane = (q, q, oh, ow)
    shape = (n, o // 2, oh + 2 * q + 1, ow + 2 * q)

    def conv(src: np.ndarray, r: np.ndarray, rof: tuple, to: tuple, orders: int) -> np.ndarray:
        out_shape = shape if to[2] else (n, o, oh, ow)
        if orders & 2:
            out_shape = (n, shape[2], shape[3], shape[1])
        out = np.full(out_shape, np.nan, np.float32)
        bf16_conv2d(src, bits, out, 1, 1, 1, d, d, p, p, k, k, bias, index, r, 0, to,
                    (c, h, w_), (0, 0), TILES, rof, (0, 0, 0), orders)  # fmt: skip
        return out

    for r, rof in ((none, (0, 0, 0)), (res, (0, 0, 0)), (res_plane, (1, 1, 1))):
        # the residual's plane as it is, and (bit 2) as positions
        added = [(r, 0)] + ([(as_positions(r), 4)] if rof[0] else [])
        for to in (NONE4, out_plane):
            want = conv(plane_in, r, rof, to, 0).view(np.int32)
            for r_, bit in added:
                got = conv(as_positions(plane_in), r_, rof, to, 1 | bit).view(np.int32)
                np.testing.assert_array_equal(got, want)
                if to[2]:
                    for src, orders in ((plane_in, 2), (as_positions(plane_in), 3)):
                        got = conv(src, r_, rof, to, orders | bit).view(np.int32)
                        np.testing.assert_array_equal(got, as_positions(want))


def _chain():
    """main(img): 3 x 3 (64 -> 64, ReLU), 3 x 3 (64 -> 64, ReLU), 1 x 1 (64 -> 128, ReLU),
    3 x 3 (128 -> 64), each read only by the next: every plane between them may lie as
    positions."""
    rng = np.random.default_rng(3)
    img = Var("img", tensor((1, 64, 18, 18), "float32"))
    bb = Builder()
    with bb.function("main", [img]):
        y = img
        for o, c, k, relu in ((64, 64, 3, True), (64, 64, 3, True), (128, 64, 1, True),
                              (64, 128, 3, False)):  # fmt: skip
            w = (rng.standard_normal((o, c, k, k)) / np.sqrt(c * k * k)).astype(np.float32)
            y = bb.emit(op.conv2d(y, const(w), padding=k // 2))
            y = bb.emit(op.relu(y)) if relu else y
        bb.emit_output(y)
    return bb.get()


CHAIN = _chain()


@pytest.mark.parametrize("amx", [True, False], ids=["amx", "vectors"])
def test_planes_of_positions_between_turned_convolutions(amx: bool, exec_mode: str,
                                                         monkeypatch) -> None:  # fmt: skip
    """On AMX each plane between convolutions that walk turned around lies as positions (the
    1 x 1 reading one takes its weight in tiles); elsewhere as channel pairs. The program runs
    on any CPU in every exec mode, near the NumPy reference of the same bf16 program and
    within the bound of the float32 one; saved and loaded, it runs as it ran."""
    _as_amx(monkeypatch, amx)
    converted, convs = _converted(CHAIN, monkeypatch)
    lines = "positions" if amx else "channels"
    assert [c.attrs["plane_layout"] for c in convs] == [lines] * 3 + ["channels"]
    assert [c.attrs["source_layout"] for c in convs] == ["channels"] + [lines] * 3
    assert convs[2].attrs["pairing"] == ("tiles" if amx else "channels")
    _runs_as_converted(CHAIN, converted, (1, 64, 18, 18), exec_mode)


def _as_amx(monkeypatch, amx: bool) -> None:  # type: ignore[no-untyped-def]
    """The pass told the CPU has AMX's tiles (``amx``), or not, whatever this one has: with
    them, no convolution runs turned around on vectors (`rvm.kernels.bf16turned.turned_panel`'s
    rule on such a CPU)."""
    monkeypatch.setattr(to_bf16_module, "has_amx_tiles", lambda: amx)
    if amx:
        monkeypatch.setattr(to_bf16_module, "turned_panel", lambda *shape: 0)


def _converted(mod, monkeypatch):  # type: ignore[no-untyped-def]
    """``mod`` after the pipeline's passes up to `to_bf16` (its ``"bf16"`` way, the direct
    convolutions: no Winograd's, which a CPU with bf16 dot products but no AMX takes for some
    3 x 3s), and its bf16 convolutions."""
    monkeypatch.setattr(to_bf16_module, "native_way", lambda: "bf16")
    monkeypatch.setattr(convmethod, "winograd_bf16_pays", lambda *shape: False)
    passes = default_passes()
    converted = to_bf16(run_pipeline(mod, passes[: [n for n, _ in passes].index("legalize")]))
    convs = [b.value for b in converted["main"].body.bindings
             if getattr(b.value, "callee", None) is ops.conv2d_bf16]  # fmt: skip
    return converted, convs


def _runs_as_converted(mod, converted, shape: tuple, exec_mode: str) -> None:  # type: ignore[no-untyped-def]  # noqa: E501
    """``mod`` compiled in bf16 runs in ``exec_mode`` near the NumPy reference of the same
    program (``converted``) and within bf16's bound of float32's."""
    ex = rvm.compile(mod, precision="bf16")
    x = np.random.default_rng(6).standard_normal(shape).astype(np.float32)
    got = np.asarray(rvm.VirtualMachine(ex, exec_mode=exec_mode)["main"](x))
    want = np.asarray(rvm.interpret(converted, "main", x))
    # AMX sums the reference's products in its order; bf16 dot products in another, so a plane
    # between two convolutions may round a word the other way and move later outputs by a bf16
    # step of a few inputs (as `tests/codegen/bf16_checks.near_both` allows)
    atol = 2e-4 if AMX else 1e-2
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=atol * np.abs(want).max())
    exact = np.asarray(rvm.interpret(mod, "main", x))
    assert np.abs(got - exact).max() <= 3e-2 * np.abs(exact).max()


def test_planes_of_positions_saved_and_loaded(tmp_path) -> None:
    """A saved bf16 executable with planes of positions (its shortcuts' too) loads and runs
    as it ran, in every exec mode."""
    ex = rvm.compile(BLOCKS, precision="bf16")
    path = tmp_path / "positions.rvmx"
    ex.save(str(path))
    loaded = rvm.load_executable(str(path))
    x = np.random.default_rng(8).standard_normal((2, 64, 14, 14)).astype(np.float32)
    want = np.asarray(rvm.VirtualMachine(ex)["main"](x))
    for mode in ("bytecode", "compiled", "native"):
        got = np.asarray(rvm.VirtualMachine(loaded, exec_mode=mode)["main"](x))
        np.testing.assert_array_equal(got, want)


def _blocks():
    """main(img): a 3 x 3 stem (64 channels, ReLU) and two bottleneck blocks (1 x 1 to 32,
    3 x 3, 1 x 1 back to 64 adding the block's input, ReLU): the shortcut's planes, read by
    the next block's first convolution and added by its last, lie as positions too."""
    rng = np.random.default_rng(4)
    img = Var("img", tensor((2, 64, 14, 14), "float32"))

    def weight(o: int, c: int, k: int):  # type: ignore[no-untyped-def]
        return const((rng.standard_normal((o, c, k, k)) / np.sqrt(c * k * k)).astype(np.float32))

    bb = Builder()
    with bb.function("main", [img]):
        x = bb.emit(op.relu(bb.emit(op.conv2d(img, weight(64, 64, 3), padding=1))))
        for _ in range(2):
            a = bb.emit(op.relu(bb.emit(op.conv2d(x, weight(32, 64, 1)))))
            b = bb.emit(op.relu(bb.emit(op.conv2d(a, weight(32, 32, 3), padding=1))))
            c = bb.emit(op.conv2d(b, weight(64, 32, 1)))
            x = bb.emit(op.relu(bb.emit(op.add(c, x))))
        bb.emit_output(x)
    return bb.get()


BLOCKS = _blocks()


def test_shortcuts_as_positions(exec_mode: str, monkeypatch) -> None:
    """On AMX the blocks' planes lie as positions, the shortcut's too (written with a residual
    of positions, added as one), the last block's output float32; the program runs near the
    NumPy reference of the same bf16 program, and within bf16's bound of float32's."""
    _as_amx(monkeypatch, True)
    converted, convs = _converted(BLOCKS, monkeypatch)
    layouts = [(c.attrs["source_layout"], c.attrs["plane_layout"], c.attrs["residual_layout"])
               for c in convs]  # fmt: skip
    pos, ch = "positions", "channels"
    assert layouts == [
        (ch, pos, ch),  # the stem
        (pos, pos, ch), (pos, pos, ch), (pos, pos, pos),  # its output added by the first block
        (pos, pos, ch), (pos, pos, ch), (pos, ch, pos),  # the last, float32 out
    ]  # fmt: skip
    assert all(c.attrs["pairing"] == "tiles" for c in convs)
    _runs_as_converted(BLOCKS, converted, (2, 64, 14, 14), exec_mode)


def test_layouts_the_type_rule_refuses() -> None:
    """A plane of positions in is read as it lies (a pair plane's words are copied into
    phases only from channel pairs), and a layout needs the plane it describes."""
    plane = Var("p", tensor((1, 9, 8, 16), "int32"))
    img = Var("x", tensor((1, 32, 6, 6), "float32"))
    attrs = dict(padding=1, kernel=3, pairing="tiles")
    cases = [
        (dict(x=plane, source=(32, 6, 6), source_at=(1, 1), source_layout="positions"),
         "read as it lies"),
        (dict(x=img, plane_layout="positions"), "plane_layout says"),
        (dict(x=img, bias=const(np.zeros(32, np.float32)), residual=img,
              residual_layout="positions"), "residual_layout says"),
    ]  # fmt: skip
    for changes, message in cases:
        call = op.conv2d_bf16(w=const(np.zeros((32, 288), np.int16)), **attrs, **changes)
        with pytest.raises(IRError, match=message):
            infer_type(call)


@pytest.mark.parametrize("rows, cols", [(16, 16), (5, 11), (16, 3), (1, 1)])
def test_word_blocks_turned(rows: int, cols: int) -> None:
    """The two block turns on vectors (`rvm.kernels.vectors.VectorIR.turn`'s shuffles): AMX's
    (`amxconv._turn`, 16 x 16 words written, 0 past the block's) and the turned convolution's
    (`bf16turned._turn_words`, a block of at most `LANES` x `LANES`: nothing past it written).
    Both are plain vector code, run here on any CPU."""
    from numba import njit

    from rvm.kernels.amxconv import _turn
    from rvm.kernels.bf16turned import _turn_words
    from rvm.kernels.bf16words import LANES

    @njit
    def amx_turn(src, dst, rows, cols):  # type: ignore[no-untyped-def]
        _turn(src.ctypes.data, 4 * src.shape[1], rows, cols, dst.ctypes.data, 4 * dst.shape[1])

    @njit
    def words_turn(src, dst, rows, cols):  # type: ignore[no-untyped-def]
        _turn_words(src.ctypes.data, 4 * src.shape[1], rows, cols, dst.ctypes.data,
                    4 * dst.shape[1])  # fmt: skip

    src = np.arange(20 * 20, dtype=np.int32).reshape(20, 20)
    dst = np.full((16, 20), -1, np.int32)
    amx_turn(src, dst, rows, cols)
    want = np.zeros((16, 16), np.int32)
    want[:cols, :rows] = src[:rows, :cols].T
    np.testing.assert_array_equal(dst[:, :16], want)
    rows, cols = min(rows, LANES), min(cols, LANES)
    dst = np.full((LANES, 20), -1, np.int32)
    words_turn(src, dst, rows, cols)
    want = np.full((LANES, 20), -1, np.int32)
    want[:cols, :rows] = src[:rows, :cols].T
    np.testing.assert_array_equal(dst, want)
