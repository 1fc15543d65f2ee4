"""fuse_ops: producer -> consumer chains of primitive calls merged by pattern kind."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from rvm import op
from rvm.interp import interpret
from rvm.ir import (
    Builder,
    Call,
    If,
    Tuple,
    Var,
    assert_structural_equal,
    scalar,
    tensor,
    verify,
)
from rvm.ir.op import OpPattern
from rvm.testing.builders import add_prim
from rvm.transform.fuse_ops import MAX_GROUP_OPS, fuse_ops
from rvm.transform.legalize import legalize

F32 = "float32"


def build(params, body) -> object:
    """A legalized module whose ``main(*params)`` returns ``body(builder, *params)``."""
    bb = Builder()
    with bb.function("main", params):
        bb.emit_output(body(bb, *params))
    return legalize(bb.get())


def calls(mod, fname: str = "main") -> list[str]:
    """Names of the functions ``fname``'s top region calls, in order."""
    out = []
    for b in mod[fname].body.bindings:
        if isinstance(b.value, Call) and hasattr(b.value.callee, "name"):
            out.append(b.value.callee.name)
    return out


def check_same_results(before, after, *args) -> None:
    verify(after)
    np.testing.assert_allclose(
        interpret(after, "main", *args), interpret(before, "main", *args), rtol=1e-5
    )


def dense_params(xs, ws) -> tuple[Var, Var, Var]:
    return Var("x", tensor(xs, F32)), Var("w", tensor(ws, F32)), Var("b", tensor(ws[1:], F32))


def dense_relu(bb, x, w, b):
    y = bb.emit(op.matmul(x, w))
    z = bb.emit(op.add(y, b))
    return bb.emit(op.relu(z))


def test_matmul_add_relu_is_one_kernel():
    x, w, b = dense_params(("n", 4), (4, 8))
    before = build([x, w, b], dense_relu)
    after = fuse_ops(before)

    bb = Builder()
    ps = [
        Var("p0", tensor(("n", 4), F32)),
        Var("p1", tensor((4, 8), F32)),
        Var("p2", tensor((8,), F32)),
    ]
    fused = add_prim(
        bb,
        "fused_matmul_add_relu",
        ps,
        dense_relu,
        OpPattern.OUT_ELEMWISE_FUSABLE,
        ["matmul", "add", "relu"],
    )
    x, w, b = dense_params(("n", 4), (4, 8))
    with bb.function("main", [x, w, b]):
        bb.emit_output(bb.emit(Call(fused, (x, w, b))))
    assert_structural_equal(after, bb.get())
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s).astype(F32) for s in ((3, 4), (4, 8), (8,))]
    check_same_results(before, after, *args)


def test_exp_sum_is_one_reduction_kernel_with_epilogue():
    x = Var("x", tensor((4, 8), F32))

    def body(bb, x):
        s = bb.emit(op.sum(bb.emit(op.exp(x)), axis=1))
        return bb.emit(op.sqrt(s))

    before = build([x], body)
    after = fuse_ops(before)
    assert calls(after) == ["fused_exp_sum_sqrt"]
    f = after["fused_exp_sum_sqrt"]
    assert f.attrs["pattern"] == OpPattern.REDUCTION and f.attrs["ops"] == ("exp", "sum", "sqrt")
    check_same_results(before, after, np.random.default_rng(1).random((4, 8)).astype(F32))


def test_value_used_twice_is_not_fused():
    x = Var("x", tensor((4, 8), F32))

    def body(bb, x):
        e = bb.emit(op.exp(x))
        s = bb.emit(op.sum(e, axis=1, keepdims=True))
        return bb.emit(op.divide(e, s))  # softmax by hand: e feeds sum and divide

    before = build([x], body)
    after = fuse_ops(before)
    assert calls(after) == ["fused_exp", "fused_sum_divide"]
    check_same_results(before, after, np.random.default_rng(2).random((4, 8)).astype(F32))


def test_matmul_takes_no_prologue_and_reductions_do_not_chain():
    x, w = Var("x", tensor((4, 4), F32)), Var("w", tensor((4, 4), F32))

    def body(bb, x, w):
        r = bb.emit(op.relu(x))
        m = bb.emit(op.matmul(r, w))  # relu stays its own kernel
        s = bb.emit(op.sum(m, axis=0))  # matmul is an anchor: the sum is not its epilogue
        t = bb.emit(op.exp(s))
        return bb.emit(op.max(t))  # the second reduction does not join the first

    before = build([x, w], body)
    after = fuse_ops(before)
    assert calls(after) == ["fused_relu", "fused_matmul", "fused_sum_exp", "fused_max"]
    rng = np.random.default_rng(3)
    check_same_results(before, after, *(rng.random((4, 4)).astype(F32) for _ in range(2)))


def test_opaque_and_argmax_follow_their_patterns():
    x = Var("x", tensor((4, 8), F32))

    def body(bb, x):
        a = bb.emit(op.add(x, 1.0))
        s = bb.emit(op.softmax(a))  # OPAQUE: a kernel of its own
        e = bb.emit(op.exp(s))
        return bb.emit(op.argmax(e, axis=1))  # REDUCTION: absorbs the exp

    before = build([x], body)
    after = fuse_ops(before)
    assert calls(after) == ["fused_add", "fused_softmax", "fused_exp_argmax"]
    check_same_results(before, after, np.random.default_rng(4).random((4, 8)).astype(F32))


def test_injective_chain_and_broadcast_inputs():
    x, y = Var("x", tensor((4, 8), F32)), Var("y", tensor((8, 4), F32))

    def body(bb, x, y):
        t = bb.emit(op.transpose(x, (1, 0)))
        a = bb.emit(op.add(t, bb.emit(op.exp(y))))  # two producers join one consumer
        return bb.emit(op.reshape(a, (32,)))

    before = build([x, y], body)
    after = fuse_ops(before)
    assert calls(after) == ["fused_transpose_exp_add_reshape"]
    rng = np.random.default_rng(5)
    check_same_results(before, after, *(rng.random(s).astype(F32) for s in ((4, 8), (8, 4))))


def test_equal_groups_share_one_function_and_unused_primitives_go():
    x, w, b = dense_params((2, 4), (4, 4))

    def body(bb, x, w, b):
        h = dense_relu(bb, x, w, b)
        return dense_relu(bb, h, w, b)

    after = fuse_ops(build([x, w, b], body))
    assert calls(after) == ["fused_matmul_add_relu", "fused_matmul_add_relu"]
    assert sorted(after) == ["fused_matmul_add_relu", "main"]


def test_values_used_in_branches_or_returned_are_not_fused():
    x, c = Var("x", tensor((4,), F32)), Var("c", scalar("bool"))
    bb = Builder()
    with bb.function("main", [x, c]):
        e = bb.emit(op.exp(x))
        r = bb.emit(op.relu(e))  # e used by relu and inside the branch
        bb.begin_scope()
        t = bb.end_scope(bb.emit(op.negative(e)))
        bb.begin_scope()
        n1 = bb.emit(op.sqrt(r))
        f = bb.end_scope(bb.emit(op.abs(n1)))  # fused inside the branch
        bb.emit_output(bb.emit(If(c, t, f)))
    before = legalize(bb.get())
    after = fuse_ops(before)
    assert calls(after) == ["fused_exp", "fused_relu"]
    branch = list(after["main"].body.bindings)[-1].value.false_branch
    assert [b.value.callee.name for b in branch.bindings] == ["fused_sqrt_abs"]
    xa = np.arange(4, dtype=F32)
    for flag in (True, False):
        np.testing.assert_allclose(
            interpret(after, "main", xa, np.bool_(flag)), interpret(before, "main", xa, flag)
        )


def test_group_size_is_capped():
    x = Var("x", tensor((4,), F32))

    def body(bb, x):
        for _ in range(MAX_GROUP_OPS + 4):
            x = bb.emit(op.tanh(x))
        return x

    after = fuse_ops(build([x], body))
    sizes = [len(after[name].attrs["ops"]) for name in calls(after)]
    assert sizes == [MAX_GROUP_OPS, 4]


def test_opt_level_zero_disables_fusion_and_log_line(caplog):
    x = Var("x", tensor((4,), F32))
    before = build([x], lambda bb, x: bb.emit(op.relu(bb.emit(op.exp(x)))))
    assert fuse_ops(before, opt_level=0) is before
    with caplog.at_level(logging.DEBUG, logger="rvm.transform"):
        fuse_ops(before)
    assert "fuse_ops: 2 kernel calls -> 1" in caplog.text


@pytest.mark.parametrize("n", [1, 5])
def test_symbolic_shapes(n):
    x, b = Var("x", tensor(("n", 3), F32)), Var("b", tensor((3,), F32))
    before = build([x, b], lambda bb, x, b: bb.emit(op.relu(bb.emit(op.add(x, b)))))
    after = fuse_ops(before)
    assert calls(after) == ["fused_add_relu"]
    rng = np.random.default_rng(n)
    check_same_results(
        before, after, rng.standard_normal((n, 3)).astype(F32), rng.standard_normal(3).astype(F32)
    )


@pytest.mark.parametrize(
    ("shape", "apart"),
    [((1, 3, 8, 8), True), ((2, 3, 8, 8), False), ((1, 3, 2, 2), False)],
)
def test_a_concat_written_in_place_joins_no_consumer(shape, apart):
    """A lone concat whose pieces are runs of its output stays a kernel of its own, which the
    memory plan drops (densenet's last concat of a block before a batch norm); at batch 2
    (a piece in two runs) or small, it fuses into its consumer as before."""
    x = Var("x", tensor(shape, F32))

    def body(bb, x):
        a, b = bb.emit(op.exp(x)), bb.emit(op.tanh(x))
        c = bb.emit(op.concat(bb.emit(Tuple((a, b))), axis=1))
        return bb.emit(op.relu(c))

    before = build([x], body)
    after = fuse_ops(before)
    if apart:
        assert calls(after) == ["fused_exp", "fused_tanh", "fused_concat", "fused_relu"]
    else:
        assert calls(after) == ["fused_exp", "fused_tanh", "fused_concat_relu"]
    check_same_results(before, after, np.random.default_rng(6).random(shape).astype(F32) - 0.5)
