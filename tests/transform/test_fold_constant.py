"""fold_constant: primitive calls on constants become constants; tuple fields fold."""

from __future__ import annotations

import numpy as np

from rvm import op
from rvm.interp import interpret
from rvm.ir import (
    Builder,
    Call,
    Constant,
    Tuple,
    Var,
    assert_structural_equal,
    const,
    tensor,
    verify,
)
from rvm.ir.op import OpPattern
from rvm.testing.builders import add_prim
from rvm.transform.fold_constant import evaluate_primitive, fold_constant
from rvm.transform.fuse_ops import fuse_ops
from rvm.transform.legalize import legalize

F32 = "float32"
VEC = tensor((4,), F32)


def exp_mul(b, p0):
    return b.emit(op.multiply(b.emit(op.exp(p0)), const(2.0, F32)))


def test_call_on_constants_becomes_a_constant():
    c = const(np.arange(4, dtype=F32))
    folded = const(np.exp(np.arange(4, dtype=F32)) * 2)

    def module(first, second_args):
        bb = Builder()
        f = add_prim(
            bb,
            "fused_exp_multiply",
            [Var("p0", VEC)],
            exp_mul,
            OpPattern.BROADCAST,
            ["exp", "multiply"],
        )
        g = add_prim(
            bb,
            "fused_add",
            [Var("p0", VEC), Var("p1", VEC)],
            lambda b, p0, p1: b.emit(op.add(p0, p1)),
            OpPattern.BROADCAST,
            ["add"],
        )
        x = Var("x", VEC)
        with bb.function("main", [x]):
            y = bb.emit(first(f))
            bb.emit_output(bb.emit(Call(g, second_args(x, y))))
        return bb.get()

    before = module(lambda f: Call(f, (c,)), lambda x, y: (x, y))
    after = fold_constant(before)
    expected = module(lambda f: folded, lambda x, y: (x, folded))
    verify(after)
    assert_structural_equal(after, expected)
    xa = np.ones(4, dtype=F32)
    np.testing.assert_allclose(interpret(after, "main", xa), interpret(before, "main", xa))


def test_tuple_fields_of_constants_fold():
    c = const(np.arange(4, dtype=F32))
    bb = Builder()
    x = Var("x", tensor((2,), F32))
    with bb.function("main", [x]):
        parts = bb.emit(op.split(c, 2))
        second = bb.emit(parts[1])
        t = bb.emit(Tuple((second, c)))
        first = bb.emit(t[0])
        bb.emit_output(bb.emit(op.add(x, first)))
    before = legalize(bb.get())
    after = fold_constant(before)
    verify(after)
    bindings = list(after["main"].body.bindings)
    assert isinstance(bindings[0].value, Tuple)
    assert all(isinstance(f, Constant) for f in bindings[0].value.fields)
    assert isinstance(bindings[1].value, Constant) and isinstance(bindings[3].value, Constant)
    add_call = bindings[4].value
    np.testing.assert_array_equal(add_call.args[1].data, [2.0, 3.0])
    xa = np.ones(2, dtype=F32)
    np.testing.assert_allclose(interpret(after, "main", xa), interpret(before, "main", xa))


def test_small_creation_folds_large_creation_is_kept():
    bb = Builder()
    x, big = Var("x", VEC), Var("big", tensor((512, 512), F32))
    with bb.function("main", [x, big]):
        z = bb.emit(op.zeros((4,), F32))
        e = bb.emit(op.exp(const(1.0, F32)))  # legalize moves the 0-d constant inside
        o = bb.emit(op.ones((512, 512), F32))
        y = bb.emit(op.add(big, o))
        bb.emit_output(bb.emit(Tuple((bb.emit(op.add(bb.emit(op.add(x, z)), e)), y))))
    before = fuse_ops(legalize(bb.get()), opt_level=0)
    after = fold_constant(before)
    verify(after)
    values = [b.value for b in after["main"].body.bindings]
    assert isinstance(values[0], Constant) and isinstance(values[1], Constant)
    assert values[2].callee.name == "fused_ones"
    xa, ba = np.ones(4, dtype=F32), np.ones((512, 512), dtype=F32)
    for got, want in zip(interpret(after, "main", xa, ba), interpret(before, "main", xa, ba)):
        np.testing.assert_allclose(got, want)


def test_fused_chain_folds_through_constant_variables():
    bb = Builder()
    x = Var("x", VEC)
    with bb.function("main", [x]):
        c = bb.emit(const(np.full(4, 0.5, dtype=F32)))
        e = bb.emit(op.exp(c))
        s = bb.emit(op.sum(e))
        bb.emit_output(bb.emit(op.multiply(x, s)))
    before = fuse_ops(legalize(bb.get()))
    after = fold_constant(before)
    verify(after)
    names = [b.value.callee.name for b in after["main"].body.bindings if isinstance(b.value, Call)]
    assert names == ["fused_multiply"]
    xa = np.arange(4, dtype=F32)
    np.testing.assert_allclose(
        interpret(after, "main", xa), interpret(before, "main", xa), rtol=1e-6
    )


def test_evaluate_primitive_runs_the_body():
    bb = Builder()
    add_prim(bb, "f", [Var("p0", VEC)], exp_mul, OpPattern.BROADCAST, ["exp", "multiply"])
    func = bb._funcs["f"]
    out = evaluate_primitive(func, [np.zeros(4, dtype=F32)])
    np.testing.assert_array_equal(out, np.full(4, 2.0, dtype=F32))
    assert out.dtype == np.float32
