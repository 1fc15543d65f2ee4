from __future__ import annotations

import numpy as np
import pytest
from op_testing import check, evaluate, rand, var

import rvm
from rvm import op
from rvm.errors import IRError
from rvm.ir import TupleType, Var, infer_type, tensor


def test_reshape():
    x = var("x", (2, 3, 4))
    a = rand((2, 3, 4))
    out = check(op.reshape(x, (6, -1)), {x: a}, tensor((6, 4), "float32"))
    np.testing.assert_array_equal(out, a.reshape(6, 4))
    check(op.reshape(x, [-1]), {x: a}, tensor((24,), "float32"))
    with pytest.raises(IRError, match=r"reshape: cannot reshape \(2, 3, 4\) to \(5, -1\)"):
        infer_type(op.reshape(x, (5, -1)))
    with pytest.raises(IRError, match=r"reshape: cannot reshape \(2, 3, 4\) to \(5, 5\)"):
        infer_type(op.reshape(x, (5, 5)))
    with pytest.raises(IRError, match="reshape: shape .* has more than one -1"):
        op.reshape(x, (-1, -1))


@pytest.mark.parametrize(
    "src,target,out",
    [
        (("n", 28, 28), (-1, 784), ("n", 784)),
        (("n", 784), (-1, 28, 28), ("n", 28, 28)),
        (("n", 784), ("n", 28, -1), ("n", 28, 28)),
        (("n", "m", 4), ("n", -1), ("n", "4*m")),  # a product of dims is a dim expression
        (("n", 4), (-1, 2), ("2*n", 2)),
        (("n", 4), ("m", -1), ("m", None)),
        ((None, 4), (-1,), (None,)),
        (("n", 784), ("n", 28, 28), ("n", 28, 28)),
    ],
)
def test_reshape_symbolic(src, target, out):
    assert infer_type(op.reshape(var("x", src), target)) == tensor(out, "float32")


def test_transpose_expand_squeeze_flatten():
    x = var("x", (2, 3, 4))
    a = rand((2, 3, 4))
    out = check(op.transpose(x), {x: a}, tensor((4, 3, 2), "float32"))
    np.testing.assert_array_equal(out, a.T)
    out = check(op.transpose(x, axes=(1, -1, 0)), {x: a}, tensor((3, 4, 2), "float32"))
    np.testing.assert_array_equal(out, a.transpose(1, 2, 0))
    with pytest.raises(IRError, match="transpose: repeated axes"):
        infer_type(op.transpose(x, (0, 0, 1)))
    with pytest.raises(IRError, match=r"transpose: axes \(0, 1\) do not match"):
        infer_type(op.transpose(x, (0, 1)))
    out = check(op.expand_dims(x, axis=(0, -1)), {x: a}, tensor((1, 2, 3, 4, 1), "float32"))
    np.testing.assert_array_equal(out, a[None, ..., None])
    y = var("y", (1, 3, 1))
    b = rand((1, 3, 1))
    check(op.squeeze(y), {y: b}, tensor((3,), "float32"))
    check(op.squeeze(y, axis=-1), {y: b}, tensor((1, 3), "float32"))
    with pytest.raises(IRError, match=r"squeeze: cannot squeeze axis 1 of size 3 in shape"):
        infer_type(op.squeeze(y, axis=1))
    assert infer_type(op.squeeze(var("z", ("n", 1)))) == tensor(None, "float32")
    assert infer_type(op.squeeze(var("z", ("n", 1)), 1)) == tensor(("n",), "float32")
    out = check(op.flatten(x), {x: a}, tensor((2, 12), "float32"))
    np.testing.assert_array_equal(out, a.reshape(2, 12))
    assert infer_type(op.flatten(var("z", ("n", 3, 4)))) == tensor(("n", 12), "float32")
    assert infer_type(op.flatten(var("z", ("n", "c", 1)))) == tensor(("n", "c"), "float32")


def test_concat_stack_split():
    x, y = var("x", (2, 3)), var("y", (2, 5))
    a, b = rand((2, 3)), rand((2, 5))
    out = check(op.concat([x, y], axis=1), {x: a, y: b}, tensor((2, 8), "float32"))
    np.testing.assert_array_equal(out, np.concatenate([a, b], 1))
    with pytest.raises(IRError, match=r"concat: shapes \(2, 3\) and \(2, 5\) differ outside"):
        infer_type(op.concat([x, y], axis=0))
    n1, n2 = var("n1", ("n", 3)), var("n2", ("n", "k"))
    assert infer_type(op.concat([n1, n1], 0)) == tensor(("2*n", 3), "float32")
    assert infer_type(op.concat([n1, n2], 1)) == tensor(("n", "k + 3"), "float32")
    assert infer_type(op.concat([n1, x], -1)) == tensor((2, 6), "float32")
    out = check(op.stack([x, x], axis=1), {x: a}, tensor((2, 2, 3), "float32"))
    np.testing.assert_array_equal(out, np.stack([a, a], 1))
    with pytest.raises(IRError, match="stack: shapes .* differ"):
        infer_type(op.stack([x, y]))
    z = var("z", (6, 4))
    c = rand((6, 4))
    parts = check(op.split(z, 3), {z: c})
    assert infer_type(op.split(z, 3)) == TupleType((tensor((2, 4), "float32"),) * 3)
    for p, q in zip(parts, np.split(c, 3)):
        np.testing.assert_array_equal(p, q)
    parts = check(op.split(z, [1, 3], axis=1), {z: c})
    assert [p.shape for p in parts] == [(6, 1), (6, 2), (6, 1)]
    with pytest.raises(IRError, match=r"split: axis 0 of shape \(6, 4\) does not divide into 4"):
        infer_type(op.split(z, 4))
    assert infer_type(op.split(var("s", ("n", 4)), 2, axis=1)) == TupleType(
        (tensor(("n", 2), "float32"),) * 2
    )


def test_concat_of_a_tuple_value_and_unknowns():
    from rvm.ir import Tuple

    x = var("x", (2, 3))
    t = Tuple((x, x))
    assert infer_type(op.concat(t)) == tensor((4, 3), "float32")
    assert infer_type(op.concat(Var("u"))) == tensor(None, None)
    with pytest.raises(IRError, match="concat: expects a tuple of tensors"):
        infer_type(op.concat(x))


def test_broadcast_to_pad_tile():
    x = var("x", (3, 1))
    a = rand((3, 1))
    out = check(op.broadcast_to(x, (2, 3, 4)), {x: a}, tensor((2, 3, 4), "float32"))
    np.testing.assert_array_equal(out, np.broadcast_to(a, (2, 3, 4)))
    assert infer_type(op.broadcast_to(x, ("n", 3, "m"))) == tensor(("n", 3, "m"), "float32")
    with pytest.raises(IRError, match=r"broadcast_to: cannot broadcast \(3, 1\) to \(4, 4\)"):
        infer_type(op.broadcast_to(x, (4, 4)))
    out = check(op.pad(x, [(1, 2), (0, 3)], pad_value=7), {x: a}, tensor((6, 4), "float32"))
    np.testing.assert_array_equal(out, np.pad(a, [(1, 2), (0, 3)], constant_values=7))
    with pytest.raises(IRError, match="pad: pad_width has 1 pairs for a tensor of shape"):
        infer_type(op.pad(x, [(1, 1)]))
    with pytest.raises(IRError, match="pad: mode must be one of 'constant', 'edge'"):
        op.pad(x, [(1, 1), (0, 0)], mode="symmetric")
    out = check(op.tile(x, (2, 3)), {x: a}, tensor((6, 3), "float32"))
    np.testing.assert_array_equal(out, np.tile(a, (2, 3)))
    check(op.tile(x, 2), {x: a}, tensor((3, 2), "float32"))
    check(op.tile(x, (2, 1, 1)), {x: a}, tensor((2, 3, 1), "float32"))
    assert infer_type(op.tile(var("s", ("n", 2)), (1, 2))) == tensor(("n", 4), "float32")


def test_strided_slice():
    x = var("x", (5, 6))
    a = rand((5, 6))
    call = op.strided_slice(x, begin=[1], end=[4])
    assert call.attrs == {"begin": (1,), "end": (4,), "strides": (1,), "axes": (0,)}
    out = check(call, {x: a}, tensor((3, 6), "float32"))
    np.testing.assert_array_equal(out, a[1:4])
    out = check(op.strided_slice(x, [-1, 0], [-6, 100], [-2, 2], axes=[1, 0]), {x: a})
    np.testing.assert_array_equal(out, a[0:100:2, -1:-6:-2])
    s = var("s", ("n", 6))
    assert infer_type(op.strided_slice(s, [0], [2**63 - 1])) == tensor(("n", 6), "float32")
    assert infer_type(op.strided_slice(s, [1], [3])) == tensor((None, 6), "float32")
    with pytest.raises(IRError, match="strided_slice: strides must not be 0"):
        op.strided_slice(x, [0], [1], [0])


def test_dynamic_slice():
    x = var("x", (5, 6))
    b, e = var("b", (2,), "int64"), var("e", (2,), "int64")
    a = rand((5, 6))
    bv, ev = np.array([1, -1]), np.array([4, -7])
    call = op.dynamic_slice(x, b, e, axes=[0, 1], strides=[1, -2])
    assert infer_type(call) == tensor((None, None), "float32")  # the bounds are data
    np.testing.assert_array_equal(evaluate(call, {x: a, b: bv, e: ev}), a[1:4, -1:-7:-2])
    one = var("one", (1,), "int64")
    assert infer_type(op.dynamic_slice(x, one, one, axes=[-1])) == tensor((5, None), "float32")
    with pytest.raises(IRError, match="dynamic_slice: begin must be a 1-d tensor of 1 bounds"):
        infer_type(op.dynamic_slice(x, b, one, axes=[0]))
    with pytest.raises(IRError, match="dynamic_slice begin: indices must be an integer"):
        infer_type(op.dynamic_slice(x, x, one, axes=[0]))


def test_take_and_gather():
    x = var("x", (4, 5))
    i = var("i", (2, 3), "int64")
    a = rand((4, 5))
    iv = np.array([[0, 3, -1], [2, 2, 1]])
    out = check(op.take(x, i, axis=0), {x: a, i: iv}, tensor((2, 3, 5), "float32"))
    np.testing.assert_array_equal(out, np.take(a, iv, axis=0))
    out = check(op.take(x, i, axis=1), {x: a, i: iv}, tensor((4, 2, 3), "float32"))
    np.testing.assert_array_equal(out, a[:, iv])
    out = check(op.take(x, i), {x: a, i: iv}, tensor((2, 3), "float32"))
    np.testing.assert_array_equal(out, a.ravel()[iv])
    g = var("g", (4, 2), "int32")
    gv = np.array([[0, 4], [1, 1], [3, 0], [2, 2]], "int32")
    out = check(op.gather(x, g, axis=1), {x: a, g: gv}, tensor((4, 2), "float32"))
    np.testing.assert_array_equal(out, [[a[r, gv[r, c]] for c in range(2)] for r in range(4)])
    with pytest.raises(IRError, match="take: indices must be an integer tensor"):
        infer_type(op.take(x, x))
    with pytest.raises(IRError, match=r"gather: indices \(2, 3, 1\) must have the rank of x"):
        infer_type(op.gather(x, var("j", (2, 3, 1), "int64")))


def test_pad_modes_by_hand():
    x = var("x", (3,), "int32")
    a = np.array([1, 2, 3], np.int32)
    pads = [(4, 2)]
    want = {
        "constant": [9, 9, 9, 9, 1, 2, 3, 9, 9],
        "edge": [1, 1, 1, 1, 1, 2, 3, 3, 3],
        "reflect": [1, 2, 3, 2, 1, 2, 3, 2, 1],  # mirrored about the edge, repeatedly
        "wrap": [3, 1, 2, 3, 1, 2, 3, 1, 2],
    }
    for mode, values in want.items():
        out = check(op.pad(x, pads, 9, mode=mode), {x: a}, tensor((9,), "int32"))
        np.testing.assert_array_equal(out, values)
    y = var("y", (2, 0))
    assert infer_type(op.pad(y, [(1, 0), (1, 1)])) == tensor((3, 2), "float32")
    assert infer_type(op.pad(y, [(1, 0), (0, 0)], mode="edge")) == tensor((3, 0), "float32")
    with pytest.raises(IRError, match=r"pad: mode 'wrap' copies values of the input, but axis 1"):
        infer_type(op.pad(y, [(0, 0), (1, 0)], mode="wrap"))


@rvm.script.module
class Padded:
    @rvm.script.func
    def main(x: rvm.script.T[("n", 3), "float32"]):
        edge = op.pad(x, [(1, 2), (0, 0)], mode="edge")
        wrap = op.pad(x, [(2, 1), (2, 5)], mode="wrap")
        return op.relu(op.pad(edge * 2.0, [(0, 0), (4, 3)], mode="reflect")) + wrap


def test_pad_modes_in_the_vm(exec_mode, kernels):
    a = rand((2, 3))
    ex = rvm.compile(Padded, kernels=kernels)
    got = rvm.VirtualMachine(ex, exec_mode=exec_mode)["main"](a)
    edge = np.pad(a, [(1, 2), (0, 0)], mode="edge")
    want = np.maximum(np.pad(edge * 2, [(0, 0), (4, 3)], mode="reflect"), 0)
    want = want + np.pad(a, [(2, 1), (2, 5)], mode="wrap")
    np.testing.assert_allclose(got, want, rtol=1e-6)
