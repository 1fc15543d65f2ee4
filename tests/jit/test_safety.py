"""Shape checks at a kernel's start, fallbacks, and compile errors."""

from __future__ import annotations

import numpy as np
import pytest
from jit_helpers import Jit, check, prim, rand, var

from rvm import op
from rvm.errors import JITError
from rvm.jit import jit_kernel, load_kernel
from rvm.jit.compute import _elementwise, compute
from rvm.jit.scalar import scalar_compute
from rvm.op import ops


def test_symbolic_dims_must_agree() -> None:
    x, y = var("x", ("n", 4)), var("y", ("n", 4))
    k = Jit(prim([x, y], x + y))
    with pytest.raises(ValueError, match="disagrees on dimension 'n'"):
        k(rand((3, 4)), rand((2, 4)))
    with pytest.raises(ValueError, match=r"input 1 \('y'\) at axis 1 must equal input 0"):
        k(rand((3, 4)), rand((3, 5)))


def test_fixed_dims_are_generic_unless_asked() -> None:
    """By default a fixed size other than 1 is read at run time (one kernel serves every
    layer of a pattern); generic=False checks it against the type."""
    x, b = var("x", (2, 4)), var("b", (4, 1))
    func = prim([x, b], op.relu(x) + op.transpose(b, (1, 0)))
    check(func, rand((2, 4)), rand((4, 1), seed=1))
    wide = Jit(func)
    got = wide(rand((3, 6)), rand((6, 1), seed=1))
    want = np.maximum(rand((3, 6)), 0) + rand((6, 1), seed=1).reshape(1, 6)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    with pytest.raises(ValueError, match="must have 1 at axis 1"):
        wide(rand((2, 4)), rand((4, 2)))
    fixed = Jit(func, generic=False)
    with pytest.raises(ValueError, match="must have 4 at axis 1"):
        fixed(rand((2, 5)), rand((5, 1)))


def test_generic_kernels_of_one_pattern_share_source_and_code() -> None:
    """Layers differing only in sizes get one source (no ``_<n>`` suffix in it), hence one
    compiled dispatcher."""
    recs = []
    for k, (c, hw) in enumerate(((8, 9), (16, 5))):
        img, w = var("img", (1, c, hw, hw)), var("w", (2 * c, c, 3, 3))
        bias = var("bias", (2 * c, 1, 1))
        func = prim([img, w, bias], op.relu(op.conv2d(img, w, padding=1) + bias))
        recs.append(jit_kernel(f"fused_conv2d_add_relu_{k + 1}", func, "dps"))
    assert recs[0].source == recs[1].source and recs[0].entry == "fused_conv2d_add_relu"
    assert "_1" not in recs[0].source.split("def ")[1].split("(")[0]
    assert load_kernel(recs[0]) is load_kernel(recs[1])


def _shared(funcs, shapes) -> None:
    """The functions' kernels have one source, and it computes each function right."""
    sources = {jit_kernel(f"fused_k_{i}", f, "return").source for i, f in enumerate(funcs)}
    assert len(sources) == 1
    for f, shape in zip(funcs, shapes):
        inputs = [rand(s, seed=k) for k, s in enumerate(shape)]
        check(f, *inputs, rtol=1e-4, atol=1e-4)


def test_depthwise_convolutions_of_any_width_share_a_kernel() -> None:
    """groups equal to the channels reads the channels at run time, not the literal."""
    funcs, shapes = [], []
    for c, hw, stride in ((8, 9, 2), (12, 7, 2)):
        img, w = var("img", (1, c, hw, hw)), var("w", (c, 1, 3, 3))
        funcs.append(prim([img, w], op.conv2d(img, w, strides=stride, padding=1, groups=c)))
        shapes.append([(1, c, hw, hw), (c, 1, 3, 3)])
    _shared(funcs, shapes)


def test_channel_shuffles_of_any_width_share_a_kernel() -> None:
    """A reshape's one size that is no input size is inferred from the input's size."""
    funcs, shapes = [], []
    for c, hw in ((12, 5), (24, 7)):
        x = var("x", (1, c, hw, hw))
        y = op.reshape(x, (1, 3, c // 3, hw, hw))
        z = op.reshape(op.transpose(y, (0, 2, 1, 3, 4)), (1, c, hw, hw))
        funcs.append(prim([x], z))
        shapes.append([(1, c, hw, hw)])
    _shared(funcs, shapes)


def test_broadcast_mismatch_and_output_shape() -> None:
    x, y = var("x", ("n", "m")), var("y", ("k",))
    k = Jit(prim([x, y], x * y), style="dps")
    with pytest.raises(ValueError, match="do not broadcast"):
        k(rand((2, 3)), rand((4,)), np.empty((2, 3), np.float32))
    with pytest.raises(ValueError, match="output 0"):
        k(rand((2, 3)), rand((3,)), np.empty((3, 3), np.float32))
    out = np.empty((2, 3), np.float32)
    k(rand((2, 3)), rand((1,)), out)


def test_matmul_inner_dims_and_take_bounds() -> None:
    a, b = var("a", ("m", "k")), var("b", ("k2", "n"))
    k = Jit(prim([a, b], op.matmul(a, b)))
    with pytest.raises(ValueError, match="inner dimensions differ"):
        k(rand((2, 3)), rand((4, 2)))
    x, i = var("x", ("n",)), var("i", (2,), "int64")
    t = Jit(prim([x, i], op.take(x, i)))
    with pytest.raises(IndexError, match="out of range"):
        t(rand((3,)), np.array([0, 3]))
    np.testing.assert_array_equal(t(np.arange(3, dtype=np.float32), np.array([-3, 2])), [0, 2])


def test_fallback_to_numpy() -> None:
    x = var("x", (1, 4, 3, 3))
    rec = jit_kernel("fused_fmod", prim([x], op.fmod(x, x)), "dps")
    assert rec.backend == "numpy"
    assert "fmod" in rec.meta["jit_fallback"]


def test_compile_error_names_kernel_and_line(monkeypatch) -> None:
    monkeypatch.setitem(scalar_compute, ops.exp, lambda attrs, t, a: f"no_such_function({a})")
    monkeypatch.setitem(compute, ops.exp, _elementwise(ops.exp))
    x = var("x", ("n",))
    rec = jit_kernel("fused_broken_exp", prim([x], op.exp(x) + 1.0), "dps")
    with pytest.raises(JITError) as info:
        load_kernel(rec)
    message = str(info.value)
    assert "fused_broken_exp" in message and "exp" in message
    assert "no_such_function" in message and "generated source line" in message


def test_the_library_assigns_no_array_to_a_slice() -> None:
    """tests/conftest.py fails the compile of an `rvm.kernels` function that assigns an array to
    a slice (Numba's shape-mismatch message, seconds of LLVM in it and in every caller); a
    scalar to a slice, or an array to a slice outside the library, compiles."""
    import numba as nb

    code = "def put(a, b):\n    a[1:3] = b\n"
    library, other = {"__name__": "rvm.kernels._probe"}, {"__name__": "probe"}
    exec(code, library)
    exec(code, other)
    with pytest.raises(Exception, match="assigns an array to a slice"):
        nb.njit(library["put"])(np.zeros(4), np.ones(2))
    a = np.zeros(4)
    nb.njit(library["put"])(a, 1.0)
    nb.njit(other["put"])(a[::-1], np.full(2, 2.0))
    assert a.tolist() == [0.0, 2.0, 2.0, 0.0]
