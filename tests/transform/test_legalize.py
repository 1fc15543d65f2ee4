"""legalize: op calls become calls of shared primitive functions; 0-d constants move inside."""

from __future__ import annotations

import numpy as np

from rvm import op
from rvm.interp import interpret
from rvm.ir import (
    Builder,
    Call,
    GlobalVar,
    If,
    Var,
    assert_structural_equal,
    const,
    scalar,
    tensor,
    verify,
)
from rvm.ir.op import OpPattern
from rvm.testing.builders import add_prim
from rvm.transform.legalize import legalize

F32 = "float32"


def mlp_before():
    bb = Builder()
    x, w = Var("x", tensor(("n", 4), F32)), Var("w", tensor((4, 8), F32))
    with bb.function("main", [x, w]):
        y = bb.emit(op.matmul(x, w))
        z = bb.emit(op.relu(y))
        s = bb.emit(op.multiply(z, 2.0))
        bb.emit_output(bb.emit(op.relu(s)))
    return bb.get()


def test_each_op_call_becomes_a_primitive_call():
    bb = Builder()
    n8 = tensor(("n", 8), F32)
    mm = add_prim(
        bb,
        "fused_matmul",
        [Var("p0", tensor(("n", 4), F32)), Var("p1", tensor((4, 8), F32))],
        lambda b, p0, p1: b.emit(op.matmul(p0, p1)),
        OpPattern.OUT_ELEMWISE_FUSABLE,
        ["matmul"],
    )
    relu = add_prim(
        bb,
        "fused_relu",
        [Var("p0", n8)],
        lambda b, p0: b.emit(op.relu(p0)),
        OpPattern.ELEMWISE,
        ["relu"],
    )
    mul = add_prim(
        bb,
        "fused_multiply",
        [Var("p0", n8)],
        lambda b, p0: b.emit(op.multiply(p0, const(2.0, F32))),
        OpPattern.BROADCAST,
        ["multiply"],
    )
    x, w = Var("x", tensor(("n", 4), F32)), Var("w", tensor((4, 8), F32))
    with bb.function("main", [x, w]):
        y = bb.emit(Call(mm, (x, w)))
        z = bb.emit(Call(relu, (y,)))
        s = bb.emit(Call(mul, (z,)))
        bb.emit_output(bb.emit(Call(relu, (s,))))
    expected = bb.get()

    after = legalize(mlp_before())
    verify(after)
    assert_structural_equal(after, expected)


def test_identical_primitives_are_shared():
    after = legalize(mlp_before())
    prims = sorted(n for n, f in after.items() if f.is_primitive)
    assert prims == ["fused_matmul", "fused_multiply", "fused_relu"]


def test_results_unchanged():
    before = mlp_before()
    after = legalize(before)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 4)).astype(F32)
    w = rng.standard_normal((4, 8)).astype(F32)
    np.testing.assert_allclose(interpret(after, "main", x, w), interpret(before, "main", x, w))


def test_an_average_pool_over_the_whole_map_is_a_global_average():
    bb = Builder()
    x = Var("x", tensor((2, 3, 4, 5), F32))
    y = Var("y", tensor((2, 3, "h", 5), F32))
    z = Var("z", tensor((2, 3, 6, 6), F32))
    with bb.function("main", [x, y, z]):
        whole = bb.emit(op.avg_pool2d(x, (4, 5), strides=2, ceil_mode=True))
        padded = bb.emit(op.avg_pool2d(x, (4, 5), padding=(0, 0, 0, 1)))
        symbolic = bb.emit(op.avg_pool2d(y, (4, 5)))
        # one window over the map, padding that does not count (inception_v1's last pool)
        over = bb.emit(op.avg_pool2d(z, 7, padding=(0, 0, 1, 1)))
        counted = bb.emit(op.avg_pool2d(z, 7, padding=(0, 0, 1, 1), count_include_pad=True))
        total = op.add(op.add(whole, padded), symbolic)
        bb.emit_output(bb.emit(op.add(total, op.add(over, counted))))
    before = bb.get()
    after = legalize(before)
    verify(after)
    ops = [f.attrs["ops"][0] for _, f in after.items() if f.is_primitive]
    pools = sorted(o for o in ops if "pool" in o)
    # padded, symbolic, counted; whole, over
    assert pools == ["avg_pool2d"] * 3 + ["global_avg_pool2d"] * 2
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 3, 4, 5)).astype(F32)
    b = rng.standard_normal((2, 3, 4, 5)).astype(F32)
    c = rng.standard_normal((2, 3, 6, 6)).astype(F32)
    np.testing.assert_allclose(
        interpret(after, "main", a, b, c), interpret(before, "main", a, b, c), rtol=1e-6
    )


def test_tensor_constants_stay_arguments_and_repeated_args_are_one_param():
    c = const(np.arange(4, dtype=F32))
    bb = Builder()
    x = Var("x", tensor((4,), F32))
    with bb.function("main", [x]):
        y = bb.emit(op.add(x, c))
        bb.emit_output(bb.emit(op.multiply(y, y)))
    after = legalize(bb.get())

    bb = Builder()
    vec = tensor((4,), F32)
    add = add_prim(
        bb,
        "fused_add",
        [Var("p0", vec), Var("p1", vec)],
        lambda b, p0, p1: b.emit(op.add(p0, p1)),
        OpPattern.BROADCAST,
        ["add"],
    )
    mul = add_prim(
        bb,
        "fused_multiply",
        [Var("p0", vec)],
        lambda b, p0: b.emit(op.multiply(p0, p0)),
        OpPattern.BROADCAST,
        ["multiply"],
    )
    x = Var("x", vec)
    with bb.function("main", [x]):
        y = bb.emit(Call(add, (x, c)))
        bb.emit_output(bb.emit(Call(mul, (y,))))
    assert_structural_equal(after, bb.get())


def test_branches_are_legalized_and_vm_ops_kept():
    bb = Builder()
    x, c = Var("x", tensor((4,), F32)), Var("c", scalar("bool"))
    with bb.function("main", [x, c]):
        bb.begin_scope()
        t = bb.end_scope(x)
        bb.begin_scope()
        e = bb.emit(op.exp(x))
        f = bb.end_scope(e)
        r = bb.emit(If(c, t, f))
        bb.emit_output(bb.emit(op.negative(r)))
    before = bb.get()
    after = legalize(before)
    verify(after)
    main = after["main"]
    branch = list(main.body.bindings)[0].value.false_branch
    call = list(branch.bindings)[0].value
    assert isinstance(call.callee, GlobalVar) and call.callee.name == "fused_exp"
    xa = np.arange(4, dtype=F32)
    for flag in (True, False):
        np.testing.assert_allclose(
            interpret(after, "main", xa, np.bool_(flag)), interpret(before, "main", xa, flag)
        )


def test_op_call_in_result_position_is_bound():
    from rvm.ir import Function as Fn
    from rvm.ir import IRModule, seq

    x = Var("x", tensor((4,), F32))
    mod = IRModule({"main": Fn((x,), seq([], op.relu(x)))})
    after = legalize(mod)
    verify(after)
    body = after["main"].body
    assert len(list(body.bindings)) == 1 and isinstance(body.body, Var)
