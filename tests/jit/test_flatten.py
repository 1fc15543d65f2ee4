"""Merged trailing axes of elementwise writes (`rvm.jit.flatten`).

Kernel tests build the jit kernel of a primitive function and compare it with the numpy
kernel; the loop count they check is the builder's (`Emitter.loops`), a fact, not source text.
Program tests run in every exec mode against `rvm.interpret`.
"""

from __future__ import annotations

import numpy as np
import pytest
from jit_helpers import Jit, check, prim, rand, var

import rvm
from rvm import op
from rvm.ir import Builder, IRModule, Var, tensor
from rvm.jit.lower import _KernelLowering


def _loops(func) -> int:  # type: ignore[no-untyped-def]
    """The loops the jit opens for ``func``."""
    lowering = _KernelLowering("k", func, "return", True)
    lowering.build()
    return lowering.kb.loops


def _affine(x, scale, shift):  # type: ignore[no-untyped-def]
    # tanh last, not relu: a per-channel affine map and ReLU is the library's pass
    # (`rvm.jit.channel_affine`), whose kernel opens no loop over the output
    return op.tanh(op.add(op.multiply(x, scale), shift))


@pytest.mark.parametrize(
    ("x_shape", "s_shape", "loops"),
    [
        ((2, 3, 7, 7), (2, 3, 7, 7), 1),  # every axis: one flat loop
        ((1, 3, 7, 7), (1, 3, 1, 1), 2),  # per channel: channel, then H*W
        ((2, 3, 7, 7), (3, 1, 1), 3),  # lower rank: batch, channel, H*W
        ((2, 3, 7, 5), (7, 5), 3),  # same trailing shape, broadcast before: merges H, W
        ((2, 3, 7, 5), (7, 1), 4),  # broadcast along W only: no merge
        ((2, 3, 7, 5), (3, 7, 1), 4),
        ((2, 3, 7, 5), (1, 1, 1, 1), 1),  # broadcast everywhere: one flat loop
        ((4, 1, 5), (4, 1, 5), 1),  # a size-1 axis inside the merged ones
    ],
)
def test_merged_kernel_equals_numpy(x_shape, s_shape, loops):  # type: ignore[no-untyped-def]
    x, s = var("x", x_shape), var("s", s_shape)
    func = prim([x, s], _affine(x, s, rvm.const(np.float32(0.25))))
    assert _loops(func) == loops
    check(func, rand(x_shape, seed=1), rand(s_shape, seed=2))


def test_symbolic_dims_merge_and_take_any_size():
    x, s = var("x", ("n", "c", "h", "w")), var("s", (1, "c", 1, 1))
    func = prim([x, s], _affine(x, s, s))
    assert _loops(func) == 3
    k = Jit(func)
    for shape in [(1, 3, 7, 7), (2, 4, 5, 3), (1, 1, 1, 1), (2, 3, 0, 4), (0, 3, 2, 2)]:
        check(func, rand(shape, seed=3), rand((1, shape[1], 1, 1), seed=4), kernel=k)


def test_runtime_broadcast_of_a_leading_axis():
    """Symbols that may be 1 at run time broadcast on the axes left out of the merge."""
    x, y = var("x", ("n", "h", "w")), var("y", ("m", "h", "w"))
    func = prim([x, y], op.subtract(x, y))
    assert _loops(func) == 2
    k = Jit(func)
    for n, m in [(3, 3), (3, 1), (1, 4)]:
        check(func, rand((n, 5, 6), seed=5), rand((m, 5, 6), seed=6), kernel=k)
    with pytest.raises(ValueError, match="shapes do not broadcast at axis 0"):
        k(rand((3, 5, 6)), rand((2, 5, 6)))


def test_different_symbols_do_not_merge():
    """``h`` and ``w`` against ``h2`` and ``w2``: equal only if the run time says so."""
    x, y = var("x", ("c", "h", "w")), var("y", ("c", "h2", "w2"))
    func = prim([x, y], op.add(x, y))
    k = Jit(func)
    check(func, rand((2, 3, 4), seed=7), rand((2, 3, 4), seed=8), kernel=k)
    check(func, rand((2, 3, 4), seed=7), rand((2, 1, 4), seed=8), kernel=k)
    check(func, rand((2, 3, 4), seed=7), rand((2, 3, 1), seed=8), kernel=k)


def test_integer_requantize_is_exact():
    """A QDQ residual: two uint8 tensors dequantized, added, rectified and quantized again."""
    a, b = var("a", (1, 8, 7, 7), "uint8"), var("b", (1, 8, 7, 7), "uint8")

    def dq(t, zero, scale):  # type: ignore[no-untyped-def]
        f = op.cast(t, "float32")
        return op.multiply(op.subtract(f, rvm.const(np.float32(zero))), rvm.const(scale))

    y = op.relu(op.add(dq(a, 120, np.float32(0.05)), dq(b, 3, np.float32(0.02))))
    q = op.add(op.round(op.divide(y, rvm.const(np.float32(0.07)))), rvm.const(np.float32(5)))
    func = prim([a, b], op.cast(op.clip(q, a_min=0.0, a_max=255.0), "uint8"))
    assert _loops(func) == 1
    check(func, rand((1, 8, 7, 7), "uint8", 9, high=256), rand((1, 8, 7, 7), "uint8", 10, high=256))


def test_reduction_rows_broadcast_into_the_merged_axes():
    """A per-channel mean (a reduce loop, not an array) broadcast over H*W."""
    x = var("x", (2, 3, 5, 4))
    m = op.mean(x, axis=(2, 3), keepdims=True)
    func = prim([x], op.subtract(x, m))
    check(func, rand((2, 3, 5, 4), seed=11))


def test_index_maps_keep_the_full_nest():
    x = var("x", (3, 4, 5))
    func = prim([x], op.add(op.transpose(x, axes=(0, 2, 1)), rvm.const(np.float32(1))))
    assert _loops(func) == 3
    check(func, rand((3, 4, 5), seed=12))


def test_transposes_keeping_trailing_axes_write_them_merged():
    """A transpose that keeps its last axes in place, written whole (a channel shuffle: the
    reshape around it writes it straight into the output, values checked in
    tests/jit/test_ops.py), loops over them as one axis; one that moves the last axis keeps
    the full nest. Values as the reference at batch 1 and 2 (one kernel, written whole)."""
    x = var("x", ("n", 6, 5, 3))
    for axes, loops in [((0, 2, 1, 3, 4), 4), ((1, 0, 2, 3, 4), 3), ((0, 1, 2, 4, 3), 5),
                        ((2, 1, 0, 3, 4), 4)]:  # fmt: skip
        moved = op.transpose(op.reshape(x, (-1, 2, 3, 5, 3)), axes)
        func = prim([x], op.reshape(moved, (-1, 6, 5, 3)) if axes[0] == 0 else moved)
        assert _loops(func) == loops, axes
    kernel = Jit(func)
    for batch in (1, 2):
        check(func, rand((batch, 6, 5, 3), seed=batch), kernel=kernel)


def test_transposes_keeping_trailing_axes_fused_further_keep_the_nest():
    """Read by elementwise work, such a transpose is an index map as any other (no buffer)."""
    x = var("x", (2, 3, 5, 4))
    func = prim([x], op.relu(op.transpose(x, axes=(1, 0, 2, 3))))
    assert _loops(func) == 4
    check(func, rand((2, 3, 5, 4), seed=13))


# -- programs in every exec mode ------------------------------------------------------------

SCALE = np.random.default_rng(0).standard_normal((1, 6, 1, 1)).astype(np.float32)
WEIGHT = np.random.default_rng(1).standard_normal((6, 4, 3, 3)).astype(np.float32)


def _program() -> IRModule:
    """A conv whose epilogue (bias, relu) runs in place over the output, then a per-channel
    affine map and a residual add: elementwise kernels over (n, 6, h, w)."""
    x = Var("x", tensor(("n", 4, "h", "w"), "float32"))
    bb = Builder()
    with bb.function("main", [x]):
        c = bb.emit(op.conv2d(x, rvm.const(WEIGHT), padding=(1, 1)))
        c = bb.emit(op.relu(op.add(c, rvm.const(SCALE))))
        y = bb.emit(op.add(op.multiply(c, rvm.const(SCALE)), rvm.const(np.float32(0.5))))
        bb.emit_output(op.add(y, c))
    return bb.get()


@pytest.fixture(scope="module")
def executable() -> rvm.Executable:
    return rvm.compile(_program())


@pytest.mark.parametrize("shape", [(1, 4, 7, 7), (2, 4, 5, 3), (1, 4, 1, 1), (0, 4, 5, 3)])
def test_program_in_every_exec_mode(executable, exec_mode: str, shape) -> None:  # type: ignore[no-untyped-def]
    x = rand(shape, seed=13)
    got = rvm.VirtualMachine(executable, exec_mode=exec_mode)["main"](x)
    want = rvm.interpret(_program(), "main", x)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_program_takes_non_contiguous_inputs(executable, exec_mode: str) -> None:
    x = rand((1, 4, 9, 14), seed=14)[:, :, ::2, 1::2]
    got = rvm.VirtualMachine(executable, exec_mode=exec_mode)["main"](x)
    want = rvm.interpret(_program(), "main", np.ascontiguousarray(x))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
