"""einsum: its equation parsing and type rule, its results against np.einsum, and the VM."""

from __future__ import annotations

import numpy as np
import pytest
from op_testing import check, rand, var

import rvm
from rvm import op
from rvm.errors import IRError
from rvm.ir import assert_structural_equal, infer_type, tensor
from rvm.script import T, func, module

CASES = [
    ("ij,jk->ik", [(2, 3), (3, 4)]),
    ("ij,jk", [(2, 3), (3, 4)]),  # implicit: the once-seen letters in order
    ("ba,c", [(2, 3), (4,)]),  # implicit output is sorted: (a, b, c)
    ("bA,c", [(2, 3), (4,)]),  # upper case sorts before lower case
    ("ii->i", [(4, 4)]),  # a diagonal
    ("ii", [(4, 4)]),  # the trace
    ("iij->ij", [(3, 3, 2)]),
    ("ij->", [(2, 3)]),
    ("i,i", [(5,), (5,)]),
    ("i,i->i", [(3,), (1,)]),  # a size-1 axis broadcasts, as in NumPy
    (",ij->ij", [(), (2, 3)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("...ij,...jk", [(2, 1, 3, 4), (5, 4, 2)]),  # the ellipsis axes broadcast
    ("...ii->...i", [(2, 3, 3)]),
    ("i...->i", [(2,)]),  # an ellipsis of no axes may be left out
    ("a...c,c", [(2, 3, 4), (4,)]),
    ("i,j,k->ijk", [(2,), (3,), (4,)]),
    (" ij , jk -> ki ", [(2, 3), (3, 4)]),
]


@pytest.mark.parametrize("equation,shapes", CASES, ids=[c[0] for c in CASES])
def test_einsum_matches_numpy(equation, shapes):
    xs = [var(f"x{i}", s) for i, s in enumerate(shapes)]
    arrays = [rand(s) for s in shapes]
    out = check(op.einsum(equation, *xs), dict(zip(xs, arrays)))
    want = np.einsum(equation, *arrays)
    assert out.shape == want.shape
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_einsum_types():
    a, b = var("a", ("n", 3)), var("b", (3, "m"), "float64")
    assert infer_type(op.einsum("ij,jk->ik", a, b)) == tensor(("n", "m"), "float64")
    assert infer_type(op.einsum("ij,jk->ki", a, b)) == tensor(("m", "n"), "float64")
    i = var("i", ("n", "n"), "int32")
    assert infer_type(op.einsum("ii->i", i)) == tensor(("n",), "int32")
    assert infer_type(op.einsum("ii", i)) == tensor((), "int32")
    c, d = var("c", (2, 1, 5, 5)), var("d", ("k", 5, 5))
    assert infer_type(op.einsum("...ij,...jk", c, d)) == tensor((2, "k", 5, 5), "float32")
    u = var("u", None)
    assert infer_type(op.einsum("...i->...", u)) == tensor(None, "float32")
    assert infer_type(op.einsum("ij,jk->ik", u, b)) == tensor((None, "m"), "float64")
    assert infer_type(op.einsum("ij,jk->ik", a, var("w", (1, 4)))) == tensor(("n", 4), "float32")


@pytest.mark.parametrize(
    "equation,shapes,message",
    [
        ("ij,jk->ikk", [(2, 3), (3, 4)], "the output names 'k' more than once"),
        ("ij,jk->iz", [(2, 3), (3, 4)], "the output names 'z' but no input has it"),
        ("ij->...", [(2, 3)], "the output names '...' but no input has '...'"),
        ("ij", [(2, 3), (3, 4)], r"it names 1 operand\(s\) but 2 were given"),
        ("i1", [(2,)], "term 'i1' has '1'; only letters and one '...' may appear"),
        ("i..j....", [(2,)], "term 'i..j....' has a '.' outside one '...'"),
        ("i->j->i", [(2,)], "it has more than one '->'"),
        ("ijk", [(2, 3)], "operand 0 has rank 2 but its term wants 3"),
        ("ij...k", [(2, 3)], "operand 0 has rank 2 but its term wants at least 3"),
        ("i...->i", [(2, 3)], r"the '...' axes \(3,\) are missing from the output"),
        ("ij,ij", [(2, 3), (2, 4)], "'j' names axes of sizes 3 and 4"),
        ("...i,...i", [(2, 3), (4, 3)], r"the '...' axes \(2,\) and \(4,\) do not broadcast"),
    ],
)
def test_einsum_errors_name_the_equation(equation, shapes, message):
    xs = [var(f"x{i}", s) for i, s in enumerate(shapes)]
    with pytest.raises(IRError, match=rf"einsum: bad equation {equation!r}: {message}"):
        infer_type(op.einsum(equation, *xs))


def test_einsum_builder_errors_and_dtypes():
    with pytest.raises(IRError, match="einsum: the equation must be a string, got None"):
        op.einsum(var("x", (2,)))
    with pytest.raises(IRError, match="einsum: equation 'i' has no operands"):
        op.einsum("i")
    with pytest.raises(IRError, match="no implicit promotion between bfloat16 and float32"):
        infer_type(op.einsum("i,i", var("h", (2,), "bfloat16"), var("f", (2,))))
    x, y = var("x", (3, 4), "int8"), var("y", (4,), "int32")
    a, b = rand((3, 4), "int8", -5, 5), rand((4,), "int32", -5, 5)
    out = check(op.einsum("ij,j->i", x, y), {x: a, y: b}, tensor((3,), "int32"))
    np.testing.assert_array_equal(out, a.astype(np.int32) @ b)
    h = var("h", (2, 3), "bfloat16")
    hb = rand((2, 3)).astype(h.type.dtype)  # type: ignore[union-attr]
    out = check(op.einsum("ij->j", h), {h: hb}, tensor((3,), "bfloat16"))
    np.testing.assert_allclose(out.astype(np.float32), hb.astype(np.float32).sum(0), rtol=1e-2)


@module
class Contractions:
    @func
    def main(a: T[("n", 3, 4), "float32"], b: T[(4, 5), "float32"]):
        c = op.einsum("bij,jk->bik", op.relu(a), b)
        return (
            op.einsum("...ii->...i", op.einsum("bik,bjk->bij", c, c)) + 1.0,
            op.einsum("bij->", a),
        )


def test_einsum_runs_in_the_vm(exec_mode, kernels):
    a, b = rand((2, 3, 4)), rand((4, 5))
    ex = rvm.compile(Contractions, kernels=kernels)
    diag, total = rvm.VirtualMachine(ex, exec_mode=exec_mode)["main"](a, b)
    c = np.maximum(a, 0) @ b
    np.testing.assert_allclose(diag, np.einsum("bii->bi", c @ c.transpose(0, 2, 1)) + 1, rtol=1e-5)
    np.testing.assert_allclose(total, a.sum(), rtol=1e-5)


def test_einsum_round_trips_through_the_script_printer():
    text = Contractions.script()
    assert 'equation="bij,jk->bik"' in text
    assert_structural_equal(rvm.script.parse(text), Contractions)
