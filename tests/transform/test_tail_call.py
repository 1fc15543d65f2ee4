"""tail_call: calls whose result is the function's result are marked ``tail``."""

from __future__ import annotations

import logging

import numpy as np

from rvm import op
from rvm.interp import interpret
from rvm.ir import (
    Call,
    Clause,
    Function,
    GlobalVar,
    If,
    IRModule,
    Match,
    PatternConstructor,
    PatternVar,
    Var,
    VarBinding,
    assert_structural_equal,
    const,
    scalar,
    seq,
    tensor,
    verify,
)
from rvm.ir.builder import Builder
from rvm.ir.types import ADTType, FuncType
from rvm.runtime.objects import ADT
from rvm.transform.tail_call import tail_call
from rvm.transform.vm_ops import invoke_closure

F32 = "float32"
VEC = tensor((4,), F32)
I64 = scalar("int64")
TAIL = {"tail": True}


def countdown(tail: bool) -> IRModule:
    """``down(i, x) = if i > 0: down(i - 1, x + 1) else x``; ``main(x) = down(3, x) * 2``."""
    down = GlobalVar("down")
    i, x = Var("i", I64), Var("x", VEC)
    c, j, y, r = Var("c"), Var("j"), Var("y"), Var("r")
    rec = Call(down, (j, y), TAIL if tail else {})
    then = seq([VarBinding(j, i - 1), VarBinding(y, x + 1.0), VarBinding(r, rec)], r)
    body = seq([VarBinding(c, i > 0)], If(c, then, seq([], x)))
    attrs = {"num_tail_calls": 1} if tail else {}
    down_fn = Function((i, x), body, None, attrs)
    mx, a, b = Var("x", VEC), Var("a"), Var("b")
    main = Function(
        (mx,),
        seq([VarBinding(a, Call(down, (const(3, "int64"), mx))), VarBinding(b, a * 2.0)], b),
    )
    return IRModule({"down": down_fn, "main": main}, global_vars={"down": down})


def test_recursive_call_in_branch_marked_non_tail_call_not(caplog):
    before = countdown(tail=False)
    with caplog.at_level(logging.DEBUG, logger="rvm.transform"):
        after = tail_call(before)
    assert_structural_equal(after, countdown(tail=True))
    verify(after)
    assert "down has 1 tail call" in caplog.text
    assert "main" not in caplog.text  # its call feeds a multiply: not a tail call
    arg = np.arange(4, dtype=F32)
    np.testing.assert_allclose(interpret(after, "main", arg), interpret(before, "main", arg))
    assert_structural_equal(tail_call(after), after)  # idempotent


def test_invoke_closure_and_if_bound_to_var():
    ft = FuncType((VEC,), VEC)

    def build(tail: bool) -> IRModule:
        f, x, c = Var("f", ft), Var("x", VEC), Var("c", scalar("bool"))
        r, s = Var("r"), Var("s")
        call = Call(invoke_closure, (f, x), TAIL if tail else {})
        branch = If(c, seq([VarBinding(r, call)], r), seq([], x))
        attrs = {"num_tail_calls": 1} if tail else {}
        return IRModule({"main": Function((f, x, c), seq([VarBinding(s, branch)], s), None, attrs)})

    assert_structural_equal(tail_call(build(False)), build(True))


def test_match_clauses_in_tail_position():
    def build(tail: bool) -> IRModule:
        bb = Builder()
        adt = bb.add_adt("List", [("Nil", []), ("Cons", [VEC, ADTType("List")])])
        nil, cons = adt.constructors
        total = bb.global_var("total")
        xs, acc = Var("xs", ADTType("List")), Var("acc", VEC)
        h, t, s, r = Var("h", VEC), Var("t", ADTType("List")), Var("s"), Var("r")
        call = Call(total, (t, s), TAIL if tail else {})
        clauses = (
            Clause(
                PatternConstructor(cons, (PatternVar(h), PatternVar(t))),
                seq([VarBinding(s, acc + h), VarBinding(r, call)], r),
            ),
            Clause(PatternConstructor(nil, ()), seq([], acc)),
        )
        attrs = {"num_tail_calls": 1} if tail else {}
        bb.add_function("total", Function((xs, acc), seq([], Match(xs, clauses)), VEC, attrs))
        return bb.get()

    before = build(False)
    after = tail_call(before)
    assert_structural_equal(after, build(True))
    nil, cons = before.constructor("Nil"), before.constructor("Cons")
    values = ADT(cons.tag, (np.ones(4, F32), ADT(cons.tag, (np.ones(4, F32), ADT(nil.tag, ())))))
    np.testing.assert_allclose(
        interpret(after, "total", values, np.zeros(4, F32)), np.full(4, 2.0, F32)
    )


def test_op_and_primitive_calls_are_not_tail_calls():
    prim = GlobalVar("fused_relu")
    p, q = Var("p", VEC), Var("q")
    prim_fn = Function((p,), seq([VarBinding(q, op.relu(p))], q), None, {"primitive": True})
    x, a, b = Var("x", VEC), Var("a"), Var("b")
    main = Function((x,), seq([VarBinding(a, op.exp(x)), VarBinding(b, Call(prim, (a,)))], b))
    before = IRModule({"fused_relu": prim_fn, "main": main}, global_vars={"fused_relu": prim})
    assert_structural_equal(tail_call(before), before)
