"""A max pool between bf16 convolutions runs on their pair planes (``max_pool2d_pairs``,
`rvm.kernels.bf16pool`, decided by `rvm.transform.bf16_joins.pair_planes`): the convolution
before it writes a plane, the pool reads it and writes the next convolution's. A maximum of
bf16 values is one of them and rounding keeps order, so the outputs are those of the float32
pool between the same convolutions, bit for bit. The kernel is checked against the NumPy
reference on windows of every kind (padded, strided, dilated, ceil mode, a plane too narrow
for its windows), values of both signs (compared as keys) and a ReLU's (compared as bits, in
place); the programs in every exec mode and kernel backend."""

from __future__ import annotations

import numpy as np
import pytest
from bf16_checks import bindings_of, converted, near_both

import rvm
from rvm import op
from rvm.errors import IRError
from rvm.ir import Builder, Tuple, Var, const, tensor
from rvm.kernels.bf16pool import max_pool2d_pairs as pool_kernel
from rvm.kernels.reference.bf16 import _round_bf16, pair_plane, plane_image
from rvm.kernels.reference.pool import max_pool2d
from rvm.transform import bf16_joins
from rvm.transform import to_bf16 as to_bf16_module

F32 = "float32"

# (n, c, h, w, window, stride, padding, dilation, ceil mode, the plane's padding top and left,
# its columns past the image)
CASES = {
    "resnet50_stem": (1, 64, 28, 28, 3, 2, 1, 1, False, 1, 1, 1),
    "squeezenet": (1, 16, 27, 27, 3, 2, 0, 1, False, 0, 0, 0),
    "ceil_overhang": (1, 12, 56, 56, 3, 2, 0, 1, True, 0, 0, 0),  # inception's
    "odd_channels": (2, 5, 13, 11, 2, 2, 0, 1, False, 1, 2, 1),
    "stride_1": (1, 7, 9, 10, 3, 1, 1, 1, False, 1, 1, 1),
    "dilated": (1, 3, 9, 10, 3, 2, 1, 2, False, 1, 1, 1),
    "wider_than_the_room": (1, 4, 8, 8, 5, 1, 2, 1, False, 1, 1, 1),  # copied, padded
    "one_by_one": (2, 6, 7, 9, 1, 1, 0, 1, False, 0, 0, 0),
}


def _image(rng, shape, signed: bool) -> np.ndarray:
    """Random bf16 values (as float32); with ``signed``, of both signs and with -0, +-inf and
    NaNs of both signs (which win); else a ReLU's (no value below +0)."""
    x = _round_bf16(rng.standard_normal(shape).astype(np.float32))
    if not signed:
        return np.maximum(x, 0)
    flat = x.reshape(-1)
    flat[::7] = -0.0
    flat[3::97] = -np.inf
    flat[5::101] = np.inf
    flat[11::211] = np.nan
    flat[13::223] = -np.nan  # x86's default NaN: its sign bit set
    return x


@pytest.mark.parametrize("planed", [False, True], ids=["float32_out", "plane_out"])
@pytest.mark.parametrize("signed", [True, False], ids=["signed", "relu"])
@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_the_kernel_against_the_reference(case: str, signed: bool, planed: bool) -> None:
    n, c, h, w, k, s, pad, d, ceil, spt, spl, room = CASES[case]
    image = _image(np.random.default_rng(len(case)), (n, c, h, w), signed)
    plane = pair_plane(image, spt, spl, spt + h + 1, spl + w + room)
    want = max_pool2d(image, (k, k), (s, s), (pad,) * 4, (d, d), ceil)
    oh, ow = want.shape[2:]
    args = (c, h, w, spt, spl, k, k, s, s, d, d, pad, pad, oh, ow)
    if planed:
        out = np.full((n, (c + 1) // 2, oh + 3, ow + 2), 7, np.int32)
        pool_kernel(plane.view(np.float32), out.view(np.float32), *args, 1, 1, signed)
        np.testing.assert_array_equal(plane_image(out, c, oh, ow, 1, 1), want)
        outside = pair_plane(np.ones_like(want), 1, 1, oh + 3, ow + 2) == 0
        assert not out[outside].any()  # the words around the image are 0
    else:
        out = np.full((n, c, oh, ow), 7, np.float32)
        pool_kernel(plane.view(np.float32), out, *args, -1, 0, signed)
        np.testing.assert_array_equal(out, want)


def test_the_kernel_names_what_does_not_fit() -> None:
    plane = np.zeros((1, 2, 6, 6), np.float32)
    out = np.zeros((1, 4, 2, 2), np.float32)
    with pytest.raises(ValueError, match="does not hold the image"):
        pool_kernel(plane, out, 5, 4, 4, 1, 1, 3, 3, 2, 2, 1, 1, 0, 0, 2, 2, -1, 0, True)
    with pytest.raises(ValueError, match="not \\(n, c, oh, ow\\)"):
        pool_kernel(plane, out, 4, 4, 4, 1, 1, 3, 3, 2, 2, 1, 1, 0, 0, 1, 1, -1, 0, True)
    with pytest.raises(ValueError, match="pair plane out does not hold"):
        pool_kernel(plane, np.zeros((1, 2, 2, 2), np.float32), 4, 4, 4, 1, 1, 3, 3, 2, 2, 1, 1,
                    0, 0, 2, 2, 1, 1, True)  # fmt: skip


def test_the_type_rule() -> None:
    x = Var("x", tensor((2, 3, 12, 14), "int32"))
    pooled = op.max_pool2d_pairs(x, (6, 9, 11), (1, 2), 3, 2, 1)
    assert rvm.ir.infer.infer_type(pooled) == tensor((2, 6, 5, 6), F32)
    planed = op.max_pool2d_pairs(x, (6, 9, 11), (1, 2), 3, 2, 1, plane=(1, 1, 7, 7))
    assert rvm.ir.infer.infer_type(planed) == tensor((2, 3, 7, 7), "int32")
    with pytest.raises(IRError, match="int32 pair plane of a"):
        rvm.ir.infer.infer_type(op.max_pool2d_pairs(Var("f", tensor((2, 3, 12, 14), F32)),
                                                    (6, 9, 11), (1, 2), 3, 2, 1))  # fmt: skip
    with pytest.raises(IRError, match="does not fit the pair plane"):
        rvm.ir.infer.infer_type(op.max_pool2d_pairs(x, (6, 9, 11), (1, 2), 3, 2, 1,
                                                    plane=(1, 1, 5, 7)))  # fmt: skip
    with pytest.raises(IRError, match="source is"):
        op.max_pool2d_pairs(x, (6, 9), (1, 2))


def _pooled(n: int) -> rvm.IRModule:
    """main(img): a 3 x 3 convolution with a ReLU, its max pool (3 x 3, 2 apart, padded by 1:
    resnet50's) read by a 1 x 1; one without a ReLU, pooled 2 x 2 and read by a 3 x 3; and a
    1 x 1 whose pool is the program's output (which stays a float32 pool). Their windows
    differ, so that no two are merged into one product (`rvm.transform.merge_products`)."""
    rng = np.random.default_rng(n)
    img = Var("img", tensor((n, 16, 15, 15), F32))

    def conv(bb, x, c, o, k, relu=True):  # type: ignore[no-untyped-def]
        w = const((rng.standard_normal((o, c, k, k)) / np.sqrt(c * k * k)).astype(F32))
        y = bb.emit(op.conv2d(x, w, padding=k // 2))
        y = bb.emit(op.add(y, const(rng.standard_normal((o, 1, 1)).astype(F32) / 4)))
        return bb.emit(op.relu(y)) if relu else y

    bb = Builder()
    with bb.function("main", [img]):
        a = bb.emit(op.max_pool2d(conv(bb, img, 16, 32, 3), pool_size=3, strides=2, padding=1))
        b = bb.emit(op.max_pool2d(conv(bb, img, 16, 32, 3, relu=False), pool_size=2, strides=2))
        c = bb.emit(op.max_pool2d(conv(bb, img, 16, 32, 1), pool_size=3, strides=2))
        bb.emit_output(Tuple((conv(bb, a, 32, 24, 1), conv(bb, b, 32, 8, 3), c)))
    return bb.get()


def test_a_pool_between_convolutions_reads_and_writes_pair_planes() -> None:
    bf16 = converted(_pooled(1))
    relu_pool, signed_pool = (b.value for b in bindings_of(bf16, "max_pool2d_pairs"))
    (output_pool,) = (b.value for b in bindings_of(bf16, "max_pool2d"))  # an output: float32
    convs = [b.value for b in bindings_of(bf16, "conv2d_bf16")]
    first, second, third, after_relu, after_signed = convs
    # the ReLU's pool: its padding not the plane's (a 1 x 1's: whole rows), so read through
    # a copy; written as the 1 x 1's
    assert first.attrs["plane"] == (0, 0, 16, 15) and relu_pool.attrs["source_at"] == (0, 0)
    assert relu_pool.attrs["signed"] is False and relu_pool.attrs["plane"] == (0, 0, 9, 8)
    assert after_relu.attrs["source"] == (32, 8, 8)
    # the other: its values compared as keys, written as the 3 x 3's
    assert second.attrs["plane"] == (0, 0, 16, 15) and signed_pool.attrs["signed"] is True
    assert signed_pool.attrs["plane"] == (1, 1, 10, 8)
    assert after_signed.attrs["source"] == (32, 7, 7)
    assert third.attrs["plane"] == () and output_pool.args[0].type.dtype == F32
    assert third.attrs["kernel"] == (1, 1)


@pytest.fixture(scope="module", params=[1, 2], ids=["batch1", "batch2"])
def pooled(request):
    """The program at batch 1 and 2, compiled in bf16 by both kernel backends on any CPU,
    with the pools on pair planes and, to compare, without."""
    mod = _pooled(request.param)
    compiled = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(to_bf16_module, "native_way", lambda: "bf16")
        for k in ("jit", "numpy"):
            compiled[k] = rvm.compile(mod, precision="bf16", kernels=k)
        patch.setattr(bf16_joins, "_pools", lambda value: False)
        for k in ("jit", "numpy"):
            compiled[f"{k}_float32_pools"] = rvm.compile(mod, precision="bf16", kernels=k)
    return mod, compiled


def test_pools_on_planes_in_every_exec_mode(pooled, exec_mode: str, kernels: str) -> None:
    mod, compiled = pooled
    n = mod["main"].params[0].type.shape[0]
    vm = rvm.VirtualMachine(compiled[kernels], exec_mode=exec_mode)
    before = rvm.VirtualMachine(compiled[f"{kernels}_float32_pools"], exec_mode=exec_mode)
    rng = np.random.default_rng(11)
    inputs = [rng.standard_normal((n, 16, 15, 15)).astype(F32) for _ in range(2)]
    results = [vm["main"](x) for x in inputs]  # a later call leaves the earlier results be
    for x, got in zip(inputs, results):
        near_both(got, rvm.interpret(converted(mod), "main", x), rvm.interpret(mod, "main", x))
        for g, b in zip(got, before["main"](x)):  # the float32 pool's, bit for bit
            np.testing.assert_array_equal(np.asarray(g), np.asarray(b))


def test_pools_on_planes_saved_and_loaded(pooled, tmp_path) -> None:
    """A saved executable with pools on pair planes loads and runs as it ran, in the bytecode
    and native modes (the pool's entry point, `rvm.kernels.bf16pool`, linked at load)."""
    mod, compiled = pooled
    n = mod["main"].params[0].type.shape[0]
    path = tmp_path / "pooled.rvmx"
    compiled["jit"].save(str(path))
    loaded = rvm.load_executable(str(path))
    x = np.random.default_rng(4).standard_normal((n, 16, 15, 15)).astype(F32)
    want = rvm.VirtualMachine(compiled["jit"])["main"](x)
    for mode in ("bytecode", "native"):
        got = rvm.VirtualMachine(loaded, exec_mode=mode)["main"](x)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)
