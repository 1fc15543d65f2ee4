"""gather_nd and the scatters against NumPy loops, with their type rules' errors."""

from __future__ import annotations

import numpy as np
import pytest
from op_testing import check, rand, var

from rvm import op
from rvm.errors import IRError
from rvm.ir import infer_type, tensor

RNG = np.random.default_rng(3)


@pytest.mark.parametrize(
    "xshape, ishape, batch_dims, out",
    [
        ((3, 5), (4, 2), 0, (4,)),
        ((3, 5, 2), (4, 1), 0, (4, 5, 2)),
        ((2, 3, 5), (2, 4, 1), 1, (2, 4, 5)),
        ((2, 3, 5), (2, 1, 2), 1, (2, 1)),
    ],
)
def test_gather_nd(xshape, ishape, batch_dims, out):
    x, i = var("x", xshape), var("i", ishape, "int64")
    a = rand(xshape)
    depth = ishape[-1]
    dims = xshape[batch_dims : batch_dims + depth]
    idx = np.stack([RNG.integers(-d, d, ishape[:-1]) for d in dims], axis=-1)
    got = check(op.gather_nd(x, i, batch_dims), {x: a, i: idx}, tensor(out, "float32"))
    flat_i = idx.reshape(-1, depth)
    rows = a.reshape((-1,) + xshape[batch_dims:]) if batch_dims else a[None]
    per_batch = len(flat_i) // len(rows)
    want = [rows[n // per_batch][tuple(t)] for n, t in enumerate(flat_i)]
    np.testing.assert_array_equal(got.reshape(-1), np.asarray(want).reshape(-1))


def test_gather_nd_rule_errors():
    x = var("x", (3, 5))
    with pytest.raises(IRError, match=r"gather_nd: index tuples of length 3 .* do not fit"):
        infer_type(op.gather_nd(x, var("i", (4, 3), "int64")))
    with pytest.raises(IRError, match="gather_nd: indices must be an integer tensor"):
        infer_type(op.gather_nd(x, var("f", (4, 1))))
    assert infer_type(op.gather_nd(var("s", ("n", 5)), var("i", ("k", 1), "int32"))) == tensor(
        ("k", 5), "float32"
    )


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_scatter_elements(reduction, axis):
    x, i, u = var("x", (4, 5)), var("i", (3, 2), "int64"), var("u", (3, 2))
    a, upd = rand((4, 5)), rand((3, 2))
    n = a.shape[axis]
    if reduction == "none":  # distinct targets per column / row: the result is well defined
        idx = np.stack([RNG.permutation(n)[:2] for _ in range(3)]) if axis != 0 else None
        idx = idx if idx is not None else np.stack([RNG.permutation(n)[:3] for _ in range(2)], 1)
    else:
        idx = RNG.integers(-n, n, (3, 2))
    call = op.scatter_elements(x, i, u, axis=axis, reduction=reduction)
    got = check(call, {x: a, i: idx, u: upd}, tensor((4, 5), "float32"))
    want = a.copy()
    combine = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}
    for r in range(3):
        for c in range(2):
            pos = [r, c]
            pos[axis] = idx[r, c] % n
            t = tuple(pos)
            want[t] = upd[r, c] if reduction == "none" else combine[reduction](want[t], upd[r, c])
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("reduction", ["none", "add", "mul"])
def test_scatter_nd(reduction):
    x, i, u = var("x", (4, 3, 2)), var("i", (2, 2), "int64"), var("u", (2, 2))
    a, upd = rand((4, 3, 2)), rand((2, 2))
    idx = np.array([[0, 1], [3, -1]])
    got = check(op.scatter_nd(x, i, u, reduction), {x: a, i: idx, u: upd})
    want = a.copy()
    for row, t in zip(upd, idx):
        if reduction == "none":
            want[tuple(t)] = row
        elif reduction == "add":
            want[tuple(t)] += row
        else:
            want[tuple(t)] *= row
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_scatter_rule_errors():
    x = var("x", (4, 3))
    with pytest.raises(
        IRError, match=r"scatter_nd: updates have shape \(2, 5\), expected \(2, 3\)"
    ):
        infer_type(op.scatter_nd(x, var("i", (2, 1), "int64"), var("u", (2, 5))))
    with pytest.raises(IRError, match="scatter_elements: updates have dtype int32, x has float32"):
        infer_type(op.scatter_elements(x, var("i", (2, 3), "int64"), var("u", (2, 3), "int32")))
    with pytest.raises(IRError, match="scatter_elements: indices .* must have the rank of x"):
        infer_type(op.scatter_elements(x, var("i", (2,), "int64"), var("u", (2,))))
    with pytest.raises(IRError, match="scatter_nd: reduction must be one of"):
        op.scatter_nd(x, var("i", (2, 1), "int64"), var("u", (2, 3)), reduction="sum")
