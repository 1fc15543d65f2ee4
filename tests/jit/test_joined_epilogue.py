"""A concat (or stack) and its elementwise epilogue written in one pass, piece by piece
(`rvm.jit.assemble.write_joined`): the epilogue runs on each piece's elements as they are
stored, so the output is not filled and then read and written again.

Kernel tests compare the jit kernel with the numpy kernel; the loop count they check is the
builder's (`Emitter.loops`), a fact, not source text. Program tests run in every exec mode
against `rvm.interpret` and NumPy.
"""

from __future__ import annotations

import numpy as np
import pytest
from jit_helpers import Jit, check, prim, rand, var

import rvm
from rvm import op
from rvm.ir import Builder, IRModule, Tuple, Var, tensor
from rvm.jit.lower import _KernelLowering


def _loops(func) -> int:  # type: ignore[no-untyped-def]
    """The loops the jit opens for ``func``."""
    lowering = _KernelLowering("k", func, "return", True)
    lowering.build()
    return lowering.kb.loops


a = var("a", ("n", 3, 5, 4))
b = var("b", ("n", 2, 5, 4))
A, B = rand((2, 3, 5, 4), seed=1), rand((2, 2, 5, 4), seed=2)

CASES = {
    "relu": ([a, b], lambda: op.relu(op.concat([a, b], axis=1)), (A, B)),
    "affine": (
        [a, b],
        lambda: op.relu(op.add(op.multiply(op.concat([a, b], axis=1), 0.5), -0.25)),
        (A, B),
    ),
    "last_axis": (
        [a],
        lambda: op.tanh(op.concat([a, op.exp(a), a], axis=-1)),
        (A,),
    ),
    "stack": ([a], lambda: op.sigmoid(op.stack([a, op.negative(a)], axis=1)), (A,)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_joined_epilogue_equals_numpy(case: str) -> None:
    params, body, inputs = CASES[case]
    check(prim(params, body()), *inputs)


@pytest.mark.parametrize("case", sorted(CASES))
def test_joined_epilogue_has_no_pass_of_its_own(case: str) -> None:
    """One loop nest per piece and nothing more: the epilogue's pass over the output is gone
    (the pieces' nests are as deep as the output)."""
    params, body, _ = CASES[case]
    func = prim(params, body())
    pieces = 3 if case == "last_axis" else 2
    assert _loops(func) == pieces * 4


def test_empty_piece_and_zero_batch() -> None:
    e = var("e", ("n", 0, 5, 4))
    func = prim([a, e, b], op.relu(op.concat([a, e, b], axis=1)))
    check(func, A, np.zeros((2, 0, 5, 4), np.float32), B)
    check(func, A[:0], np.zeros((0, 0, 5, 4), np.float32), B[:0])


def test_jit_kernel_runs() -> None:
    """The kernel the jit builds for a joined epilogue is the jit's (not the numpy fallback)."""
    params, body, inputs = CASES["affine"]
    kernel = Jit(prim(params, body()))
    got = kernel(*inputs)
    want = np.maximum(np.concatenate([A, B], axis=1) * np.float32(0.5) - np.float32(0.25), 0)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


# -- programs in every exec mode ------------------------------------------------------------


def _program() -> IRModule:
    """Two pieces made by kernels of their own, their concat at batch n (not runs of the
    output, so copied: `rvm.transform.concat_plan`) and an affine map and ReLU after it."""
    x = Var("x", tensor(("n", 6, 9, 9), "float32"))
    bb = Builder()
    with bb.function("main", [x]):
        p = bb.emit(op.exp(op.multiply(x, rvm.const(np.float32(0.1)))))
        q = bb.emit(op.tanh(x))
        c = bb.emit(op.concat(bb.emit(Tuple((p, q))), axis=1))
        bb.emit_output(op.relu(op.add(op.multiply(c, 2.0), -0.5)))
    return bb.get()


@pytest.fixture(scope="module")
def executable() -> rvm.Executable:
    return rvm.compile(_program())


@pytest.mark.parametrize("shape", [(1, 6, 9, 9), (3, 6, 9, 9), (0, 6, 9, 9)])
def test_program_in_every_exec_mode(executable, exec_mode: str, shape) -> None:  # type: ignore[no-untyped-def]
    x = rand(shape, seed=13)
    got = rvm.VirtualMachine(executable, exec_mode=exec_mode)["main"](x)
    want = rvm.interpret(_program(), "main", x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    c = np.concatenate([np.exp(x * np.float32(0.1)), np.tanh(x)], axis=1)
    np.testing.assert_allclose(got, np.maximum(c * 2 - 0.5, 0), rtol=1e-5, atol=1e-5)
