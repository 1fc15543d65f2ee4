"""A channel concatenation of bf16 convolutions read only by convolutions (squeezenet's fire
modules: two expansions joined, read by the next squeeze) is a concatenation of pair planes
(`rvm.transform.bf16_joins.pair_planes`): each piece writes its channel pairs of the readers'
plane -- at batch 1 straight into the joined plane's storage (`rvm.transform.concat_plan`),
else joined by the concat kernel as int32 -- and the readers read it as it lies. One read by a
pool whose result is the program's output, or with a piece of an odd number of channels,
stays float32 (a pool that only convolutions read reads planes: test_bf16_pool_planes.py).
The tests run every exec mode and kernel backend against the NumPy references of the same bf16
program (tight) and of the float32 one (the accuracy bf16 costs)."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from bf16_checks import bindings_of, converted, near_both

import rvm
from rvm import op
from rvm.errors import IRError
from rvm.ir import Builder, Tuple, Var, const, tensor
from rvm.ir.infer import infer_type
from rvm.kernels.reference.bf16 import pair_plane
from rvm.transform import to_bf16 as to_bf16_module

F32 = "float32"


def _conv_relu(bb, rng, x, c, o, k):  # type: ignore[no-untyped-def]
    """A "same" k x k convolution of ``x`` (``c`` channels) to ``o``, bias and ReLU, emitted;
    random weights of ``rng``."""
    w = const((rng.standard_normal((o, c, k, k)) / np.sqrt(c * k * k)).astype(F32))
    y = bb.emit(op.conv2d(x, w, padding=k // 2))
    bias = const(rng.standard_normal((o, 1, 1)).astype(F32) / 4)
    return bb.emit(op.relu(bb.emit(op.add(y, bias))))


def _fires(n: int) -> rvm.IRModule:
    """main(img): a squeeze (1 x 1 to 16 + ReLU), two expansions (1 x 1 and 3 x 3 to 32 +
    ReLU) joined and squeezed again; then two expansions joined and max-pooled, and a 1 x 1
    of 32 and a 3 x 3 of 33 joined and read by a 1 x 1."""
    rng = np.random.default_rng(n)
    img = Var("img", tensor((n, 24, 14, 14), F32))

    def conv(bb, x, c, o, k):  # type: ignore[no-untyped-def]
        return _conv_relu(bb, rng, x, c, o, k)

    def fire(bb, x, c, o1=32, o3=32):  # type: ignore[no-untyped-def]
        s = conv(bb, x, c, 16, 1)
        return bb.emit(op.concat(Tuple((conv(bb, s, 16, o1, 1), conv(bb, s, 16, o3, 3))), 1))

    bb = Builder()
    with bb.function("main", [img]):
        joined = fire(bb, fire(bb, img, 24), 64)
        pooled = bb.emit(op.max_pool2d(joined, pool_size=3, strides=2))
        odd = fire(bb, img, 24, o3=33)
        bb.emit_output(Tuple((pooled, conv(bb, odd, 65, 8, 1))))
    return bb.get()


def test_a_concatenation_read_by_convolutions_joins_pair_planes() -> None:
    bf16 = converted(_fires(1))
    joined, pooled, odd = bindings_of(bf16, "concat")
    assert joined.var.type.dtype == "int32" and joined.var.type.shape == (1, 32, 15, 14)
    assert pooled.var.type.dtype == odd.var.type.dtype == "float32"
    convs = [b.value for b in bindings_of(bf16, "conv2d_bf16")]
    first_fire, second_squeeze = convs[1:3], convs[3]
    assert all(c.attrs["plane"] == (0, 0, 15, 14) for c in first_fire)
    assert second_squeeze.attrs["source"] == (64, 14, 14)
    assert second_squeeze.args[0] is joined.var
    assert all(c.attrs["plane"] == () for c in convs[4:6] + convs[7:9])


@pytest.fixture(scope="module", params=[1, 2], ids=["batch1", "batch2"])
def fires(request):
    """The fires at batch 1 (the planes joined in place) and 2 (joined by the concat kernel),
    compiled in bf16 by both kernel backends on any CPU."""
    mod = _fires(request.param)
    return mod, _in_bf16(mod)


def _in_bf16(mod: rvm.IRModule) -> dict:
    """``mod`` compiled in bf16 by both kernel backends (by name), on any CPU."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(to_bf16_module, "native_way", lambda: "bf16")
        return {k: rvm.compile(mod, precision="bf16", kernels=k) for k in ("jit", "numpy")}


def _near_references(mod: rvm.IRModule, ex, exec_mode: str, seed: int) -> None:  # type: ignore[no-untyped-def]  # noqa: E501
    """``ex`` (``mod`` in bf16) called on two inputs, each result near the references."""
    vm = rvm.VirtualMachine(ex, exec_mode=exec_mode)
    rng = np.random.default_rng(seed)
    shape = mod["main"].params[0].type.shape
    inputs = [rng.standard_normal(shape).astype(F32) for _ in range(2)]
    results = [vm["main"](x) for x in inputs]  # a later call leaves the earlier results be
    for x, got in zip(inputs, results):
        near_both(got, rvm.interpret(converted(mod), "main", x), rvm.interpret(mod, "main", x))


def test_joined_planes_in_every_exec_mode(fires, exec_mode: str, kernels: str) -> None:
    mod, compiled = fires
    n = mod["main"].params[0].type.shape[0]
    ex = compiled[kernels]
    concats = [name for name in ex.kernels if "concat" in name]
    assert (concats == []) == (n == 1), concats  # at batch 1 every piece is written in place
    _near_references(mod, ex, exec_mode, 7)


def _mixed(n: int, readers: int = 2) -> rvm.IRModule:
    """main(img): the image's average pool and ReLU (no convolution's) joined with a 1 x 1 to
    16 + ReLU, read by ``readers`` convolutions (a 1 x 1 and a 3 x 3 to 8); and the pool and
    ReLU joined alone, read by as many (inception_v2's block input: a slice of a merged 1 x 1,
    an average pool's branch, convolutions)."""
    rng = np.random.default_rng(n + 10 * readers)
    img = Var("img", tensor((n, 24, 10, 12), F32))

    def conv(bb, x, c, o, k):  # type: ignore[no-untyped-def]
        return _conv_relu(bb, rng, x, c, o, k)

    def read(bb, x, c):  # type: ignore[no-untyped-def]
        return [conv(bb, x, c, 8, k) for k in (1, 3)[:readers]]

    bb = Builder()
    with bb.function("main", [img]):
        pooled = bb.emit(op.avg_pool2d(img, pool_size=3, strides=1, padding=1))
        relu = bb.emit(op.relu(img))
        with_conv = bb.emit(op.concat(Tuple((pooled, relu, conv(bb, img, 24, 16, 1))), 1))
        pooled2 = bb.emit(op.avg_pool2d(img, pool_size=3, strides=1, padding=1))
        relu2 = bb.emit(op.relu(img))
        alone = bb.emit(op.concat(Tuple((pooled2, relu2)), 1))
        bb.emit_output(Tuple((*read(bb, with_conv, 64), *read(bb, alone, 48))))
    return bb.get()


@pytest.mark.parametrize("readers", [1, 2])
def test_pieces_no_convolution_writes_are_rounded_into_the_plane(readers: int) -> None:
    bf16 = converted(_mixed(1, readers))
    with_conv, alone = bindings_of(bf16, "concat")
    # the plane the first reader reads, the 1 x 1's: the 3 x 3 copies it into its own
    assert with_conv.var.type.dtype == "int32" and with_conv.var.type.shape == (1, 32, 11, 12)
    rounded = [b.value for b in bindings_of(bf16, "pair_image")]
    # a plane alone for one reader, where it would build one of the float32 concatenation
    assert (alone.var.type.dtype == "int32") == (readers == 2)
    assert len(rounded) == (4 if readers == 2 else 2)
    assert all(r.attrs["plane"] == (0, 0, 11, 12) for r in rounded)


@pytest.fixture(scope="module")
def mixed():
    """`_mixed` at batch 1 (the pieces rounded in place; a batch's planes are joined by the
    concat kernel as the fires' are, and `pair_image` runs on two images below), compiled in
    bf16 by both kernel backends on any CPU."""
    mod = _mixed(1)
    return mod, _in_bf16(mod)


def test_rounded_pieces_in_every_exec_mode(mixed, exec_mode: str, kernels: str) -> None:
    mod, compiled = mixed
    _near_references(mod, compiled[kernels], exec_mode, 3)


@pytest.mark.parametrize(
    "shape, plane",
    [
        ((2, 5, 4, 6), (1, 1, 7, 8)),
        ((1, 64, 14, 14), (0, 0, 15, 14)),
        ((1, 6, 9, 9), (2, 1, 12, 11)),
    ],
    ids=["odd_channels", "unpadded", "padded"],
)
def test_pair_image_is_the_reference_bit_for_bit(shape, plane, exec_mode: str) -> None:
    values = np.random.default_rng(len(shape)).standard_normal(shape).astype(F32)
    values.reshape(-1)[::13] = np.nan
    want = pair_plane(values, *plane)
    got = rvm.VirtualMachine(_rounding(shape, plane), exec_mode=exec_mode)["main"](values)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)


@functools.cache
def _rounding(shape: tuple, plane: tuple) -> rvm.Executable:
    """main(x) = pair_image(x, plane), compiled once for every exec mode."""
    x = Var("x", tensor(shape, F32))
    bb = Builder()
    with bb.function("main", [x]):
        bb.emit_output(bb.emit(op.pair_image(x, plane)))
    return rvm.compile(bb.get())


def test_pair_image_names_what_does_not_fit() -> None:
    with pytest.raises(IRError, match="does not fit the plane's width"):
        infer_type(op.pair_image(Var("x", tensor((1, 4, 6, 6), F32)), (1, 1, 8, 6)))
    with pytest.raises(IRError, match="float32 NCHW"):
        infer_type(op.pair_image(Var("x", tensor((1, 4, 6, 6), "int32")), (1, 1, 8, 8)))
    with pytest.raises(IRError, match="plane must have 4 values"):
        op.pair_image(Var("x", tensor((1, 4, 6, 6), F32)), (1, 1, 8))
