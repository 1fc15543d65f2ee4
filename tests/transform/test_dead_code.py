"""dead_code: unused pure bindings and unreachable private functions go, effects stay."""

from __future__ import annotations

import numpy as np

from rvm import op
from rvm.interp import interpret
from rvm.ir import (
    BindingBlock,
    Call,
    Function,
    GlobalVar,
    If,
    IRModule,
    SeqExpr,
    Tuple,
    Var,
    VarBinding,
    assert_structural_equal,
    scalar,
    seq,
    tensor,
    verify,
)
from rvm.ir.types import FuncType
from rvm.transform.dead_code import dead_code, has_effect
from rvm.transform.vm_ops import kill, make_closure

F32 = "float32"
VEC = tensor((4,), F32)
ARG = np.arange(4, dtype=F32)


def test_unused_chain_removed_in_one_pass():
    x = Var("x", VEC)
    a, b, c, d, r = Var("a"), Var("b"), Var("c"), Var("d"), Var("r")
    body = seq(
        [
            VarBinding(a, op.exp(x)),
            VarBinding(b, Tuple((a, x))),  # only feeds c, which is dead
            VarBinding(c, b),
            VarBinding(r, op.relu(x)),
            VarBinding(d, op.tanh(r)),
        ],
        r,
    )
    before = IRModule({"main": Function((x,), body)})
    after = dead_code(before)

    x, r = Var("x", VEC), Var("r")
    expected = IRModule({"main": Function((x,), seq([VarBinding(r, op.relu(x))], r))})
    assert_structural_equal(after, expected)
    verify(after)
    np.testing.assert_allclose(interpret(after, "main", ARG), interpret(before, "main", ARG))
    assert_structural_equal(dead_code(after), after)


def test_effects_are_kept():
    x = Var("x", VEC)
    a, k = Var("a"), Var("k")
    body = seq([VarBinding(a, op.exp(x)), VarBinding(k, Call(kill, (a,)))], x)
    before = IRModule({"main": Function((x,), body)})
    assert_structural_equal(dead_code(before), before)
    assert has_effect(Call(kill, (x,)))
    assert not has_effect(op.exp(x))


def test_dead_bindings_in_branches_and_unused_if():
    x, c = Var("x", VEC), Var("c", scalar("bool"))
    a, b, u, r = Var("a"), Var("b"), Var("u"), Var("r")
    then = seq([VarBinding(a, op.exp(x)), VarBinding(b, op.relu(x))], b)
    unused_if = If(c, seq([], x), seq([], x))
    body = seq([VarBinding(u, unused_if), VarBinding(r, If(c, then, seq([], x)))], r)
    before = IRModule({"main": Function((x, c), body)})
    after = dead_code(before)

    x, c = Var("x", VEC), Var("c", scalar("bool"))
    b, r = Var("b"), Var("r")
    then = seq([VarBinding(b, op.relu(x))], b)
    body = seq([VarBinding(r, If(c, then, seq([], x)))], r)
    assert_structural_equal(after, IRModule({"main": Function((x, c), body)}))


def test_empty_blocks_dropped():
    x = Var("x", VEC)
    a = Var("a")
    blocks = (BindingBlock(()), BindingBlock((VarBinding(a, op.exp(x)),)), BindingBlock(()))
    before = IRModule({"main": Function((x,), SeqExpr(blocks, x))})
    after = dead_code(before)
    assert after["main"].body.blocks == ()


def test_unused_recursive_local_function_removed():
    x, y = Var("x", VEC), Var("y", VEC)
    f, r = Var("f"), Var("r")
    fn = Function((y,), seq([VarBinding(r, Call(f, (y,)))], r))
    before = IRModule({"main": Function((x,), seq([VarBinding(f, fn)], x))})
    after = dead_code(before)
    assert list(after["main"].body.bindings) == []


def identity(name: str, attrs: dict | None = None) -> Function:
    p = Var(name, VEC)
    return Function((p,), seq([], p), None, attrs or {})


def test_unreachable_private_functions_removed():
    used = GlobalVar("main_f")
    x, c = Var("x", VEC), Var("c")
    ty = FuncType((VEC,), VEC)
    main = Function((x,), seq([VarBinding(c, Call(make_closure, (used,), {"type": ty}))], c))
    before = IRModule(
        {
            "main": main,
            "main_f": identity("y", {"lifted": True}),  # reached through the closure
            "main_g": identity("w", {"lifted": True}),
            "fused_exp": identity("p", {"primitive": True}),
            "helper": identity("z"),  # public: kept although nothing calls it
        },
        global_vars={"main_f": used},
    )
    after = dead_code(before)
    assert set(after) == {"main", "main_f", "helper"}
    verify(after)
