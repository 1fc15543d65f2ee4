"""ResNet's shortcut in bf16 (`rvm.transform.bf16_joins.pair_planes` with ``residuals``): the
output of a bottleneck block is read by the next block's first convolution and added by its
last one, so it stays a pair plane between blocks -- the first reads it as its input, the last
adds it as its residual (``residual_plane``) -- and only the last block's output, read by a
strided convolution and returned, is float32. On AMX the walk adds such a residual and rounds
the sums as it stores each block (`rvm.kernels.amx.BLOCK_OUT`), on vectors each tile of a 1 x 1
(`rvm.kernels.bf16direct.vectors_out`); elsewhere the kernels widen it to float32 first, so the
tests force the pass's decisions on any CPU and run every exec mode and kernel backend against
the NumPy reference of the same bf16 program (tight) and of the float32 one (the accuracy bf16
costs)."""

from __future__ import annotations

import numpy as np
import pytest
from bf16_checks import near_both

import rvm
from rvm import op
from rvm.ir import Builder, Tuple, Var, const, tensor
from rvm.transform import to_bf16 as to_bf16_module
from rvm.transform.pipeline import default_passes, run_pipeline
from rvm.transform.to_bf16 import to_bf16

F32 = "float32"


def _resnet() -> rvm.IRModule:
    """main(img): a 1 x 1 stem to 48 channels + ReLU, three bottleneck blocks (1 x 1 to 16, 3 x
    3, 1 x 1 back to 48 + the block's input + ReLU), a strided 3 x 3 of the last block's output
    and that output itself returned."""
    rng = np.random.default_rng(0)
    img = Var("img", tensor((2, 24, 12, 12), F32))

    def conv(bb, x, c, o, k, stride=1):  # type: ignore[no-untyped-def]
        w = const((rng.standard_normal((o, c, k, k)) / np.sqrt(c * k * k)).astype(F32))
        y = bb.emit(op.conv2d(x, w, strides=stride, padding=k // 2))
        return bb.emit(op.add(y, const(rng.standard_normal((o, 1, 1)).astype(F32) / 4)))

    bb = Builder()
    with bb.function("main", [img]):
        x = bb.emit(op.relu(conv(bb, img, 24, 48, 1)))
        for _ in range(3):
            h = bb.emit(op.relu(conv(bb, x, 48, 16, 1)))
            h = bb.emit(op.relu(conv(bb, h, 16, 16, 3)))
            x = bb.emit(op.relu(bb.emit(op.add(conv(bb, h, 16, 48, 1), x))))
        bb.emit_output(Tuple((conv(bb, x, 48, 32, 3, stride=2), x)))
    return bb.get()


RESNET = _resnet()


def _converted(residuals: bool, amx: bool | None = None) -> rvm.IRModule:
    """RESNET converted with the residual planes' decision forced, as on AMX (``amx``, by
    default ``residuals``) or on vectors."""
    passes = default_passes()
    before = passes[: [n for n, _ in passes].index("legalize")]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(to_bf16_module, "has_amx_tiles", lambda: residuals if amx is None else amx)
        patch.setattr(to_bf16_module, "_residual_planes", lambda: residuals)
        return to_bf16(run_pipeline(RESNET, before), "bf16")


def _convs(mod: rvm.IRModule) -> list:
    return [
        b.value
        for b in mod["main"].body.bindings
        if getattr(getattr(b.value, "callee", None), "name", None) == "conv2d_bf16"
    ]


def test_the_shortcut_stays_a_pair_plane_between_blocks() -> None:
    convs = _convs(_converted(residuals=True))
    assert len(convs) == 11
    stem, blocks, strided = convs[0], [convs[1 + 3 * i : 4 + 3 * i] for i in range(3)], convs[10]
    one_by_one = (0, 0, 13, 12)  # a 1 x 1's plane of 12 x 12: one row more
    assert stem.attrs["plane"] == one_by_one
    for i, (first, middle, last) in enumerate(blocks):
        assert first.attrs["source"] == (48, 12, 12) and first.attrs["plane"] == (1, 1, 15, 13)
        assert middle.attrs["source"] == (16, 12, 12) and middle.attrs["plane"] == one_by_one
        assert last.attrs["source"] == (16, 12, 12) and last.attrs["activation"] == "relu"
        # the block's input, a plane, is its residual; its output a plane but the last's
        assert last.attrs["residual_plane"] == (0, 0)
        assert last.args[3].type.dtype == "int32"
        assert last.attrs["plane"] == (one_by_one if i < 2 else ())
    assert strided.attrs["source"] == () and strided.attrs["strides"] == (2, 2)
    # on vectors the same planes (each adder a 1 x 1), laid out as channel pairs
    vectors = _convs(_converted(residuals=True, amx=False))
    for key in ("plane", "source", "residual_plane"):
        assert [c.attrs[key] for c in vectors] == [c.attrs[key] for c in convs]
    assert all(c.attrs.get("plane_layout", "channels") == "channels" for c in vectors)
    # without residual planes the shortcut stays float32
    convs = _convs(_converted(residuals=False))
    assert all(c.attrs["residual_plane"] == () for c in convs)
    assert all(c.attrs["plane"] == () for c in convs[3:10:3])


def test_a_main_path_only_added_is_a_plane() -> None:
    """The first block of a ResNet stage adds its main path to its projection: the main
    path's last convolution, whose one use is that residual, writes a 1 x 1's plane."""
    rng = np.random.default_rng(1)
    img = Var("img", tensor((1, 32, 10, 10), F32))
    bb = Builder()
    with bb.function("main", [img]):
        w1, w2 = (const(rng.standard_normal((64, 32, 1, 1)).astype(F32) / 6) for _ in range(2))
        main_path = bb.emit(op.conv2d(img, w1))
        projection = bb.emit(op.conv2d(img, w2))
        bb.emit_output(bb.emit(op.relu(bb.emit(op.add(main_path, projection)))))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(to_bf16_module, "has_amx_tiles", lambda: True)
        first, second = _convs(to_bf16(bb.get(), "bf16"))
    assert first.attrs["plane"] == (0, 0, 11, 10)
    assert second.attrs["residual_plane"] == (0, 0) and second.attrs["plane"] == ()


@pytest.fixture(
    scope="module",
    params=[(True, True), (True, False), (False, False)],
    ids=["residual-planes-amx", "residual-planes-vectors", "float32"],
)
def resnet_executables(request):
    """RESNET compiled in bf16 with the pass's decisions forced (residual planes, as on AMX
    or not), by both kernel backends: the residual planes run in AMX's walk, or the vector
    walk's tiles (`rvm.kernels.bf16direct.vectors_out`), or widened (AMX's decisions on a
    CPU without it)."""
    residuals, amx = request.param
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(to_bf16_module, "has_amx_tiles", lambda: amx)
        patch.setattr(to_bf16_module, "_residual_planes", lambda: residuals)
        patch.setattr(to_bf16_module, "native_way", lambda: "bf16")
        compiled = {k: rvm.compile(RESNET, precision="bf16", kernels=k) for k in ("jit", "numpy")}
    return request.param, compiled


def test_the_shortcut_in_every_exec_mode(resnet_executables, exec_mode: str, kernels: str) -> None:
    (residuals, amx), compiled = resnet_executables
    x = np.random.default_rng(3).standard_normal((2, 24, 12, 12)).astype(F32)
    got = rvm.VirtualMachine(compiled[kernels], exec_mode=exec_mode)["main"](x)
    exact = rvm.interpret(_converted(residuals, amx), "main", x)
    near_both(got, exact, rvm.interpret(RESNET, "main", x))


def test_the_shortcut_saved_and_loaded(resnet_executables, tmp_path) -> None:
    """A saved executable whose convolutions add pair-plane residuals loads and runs as it
    ran, in the bytecode and native modes (the kernels' entry takes the residual's layout)."""
    _, compiled = resnet_executables
    ex = compiled["jit"]
    path = tmp_path / "resnet.rvmx"
    ex.save(str(path))
    loaded = rvm.load_executable(str(path))
    x = np.random.default_rng(4).standard_normal((2, 24, 12, 12)).astype(F32)
    want = rvm.VirtualMachine(ex)["main"](x)
    for mode in ("bytecode", "native"):
        got = rvm.VirtualMachine(loaded, exec_mode=mode)["main"](x)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)


def _stage_start() -> rvm.IRModule:
    """main(img): a 1 x 1 to 40 channels + ReLU read by a 1 x 1 (stride 1), a 3 x 3 of stride
    2 and a 1 x 1 of stride 2 (a ResNet stage's first block and its projection)."""
    rng = np.random.default_rng(2)
    img = Var("img", tensor((2, 24, 11, 11), F32))

    def w(o, c, k):  # type: ignore[no-untyped-def]
        return const((rng.standard_normal((o, c, k, k)) / np.sqrt(c * k * k)).astype(F32))

    bb = Builder()
    with bb.function("main", [img]):
        x = bb.emit(op.relu(bb.emit(op.conv2d(img, w(40, 24, 1)))))
        a = bb.emit(op.conv2d(x, w(16, 40, 1)))
        b = bb.emit(op.conv2d(x, w(16, 40, 3), strides=2, padding=1))
        c = bb.emit(op.conv2d(x, w(32, 40, 1), strides=2))
        bb.emit_output(Tuple((a, b, c)))
    return bb.get()


STAGE = _stage_start()


def test_strided_readers_copy_the_plane_into_their_phases(
    exec_mode: str, kernels: str, monkeypatch
) -> None:
    """A convolution read by a stride-1 one and by strided ones writes the stride-1 reader's
    plane; the strided ones copy its words into their own phases (``source_at``), on any
    CPU, in every exec mode and kernel backend."""
    passes = default_passes()
    monkeypatch.setattr(to_bf16_module, "native_way", lambda: "bf16")  # on any CPU
    converted = to_bf16(run_pipeline(STAGE, passes[: [n for n, _ in passes].index("legalize")]))
    first, a, b, c = _convs(converted)
    assert first.attrs["plane"] == (0, 0, 12, 11)
    assert a.attrs["source"] == (40, 11, 11) and a.attrs["source_at"] == ()
    for strided in (b, c):
        assert strided.attrs["source"] == (40, 11, 11) and strided.attrs["source_at"] == (0, 0)
    ex = rvm.compile(STAGE, precision="bf16", kernels=kernels)
    x = np.random.default_rng(5).standard_normal((2, 24, 11, 11)).astype(F32)
    got = rvm.VirtualMachine(ex, exec_mode=exec_mode)["main"](x)
    exact = rvm.interpret(converted, "main", x)
    full = rvm.interpret(STAGE, "main", x)
    near_both(got, exact, full)
