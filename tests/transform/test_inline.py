"""inline: small non-recursive module functions are replaced by their bodies."""

from __future__ import annotations

import logging

import numpy as np

from rvm import op
from rvm.interp import interpret
from rvm.ir import (
    Call,
    Function,
    GlobalVar,
    If,
    IRModule,
    Var,
    VarBinding,
    assert_structural_equal,
    seq,
    tensor,
    verify,
)
from rvm.transform.inline import inline

F32 = "float32"
VEC = tensor((4,), F32)
ARG = np.arange(4, dtype=F32) - 1.5


def affine(gv_name: str = "affine", attrs: dict | None = None) -> Function:
    """``affine(y, b) = relu(y * 2 + b)``."""
    y, b = Var("y", VEC), Var("b", VEC)
    m, s, r = Var("m"), Var("s"), Var("r")
    body = seq([VarBinding(m, y * 2.0), VarBinding(s, m + b), VarBinding(r, op.relu(s))], r)
    return Function((y, b), body, None, attrs or {})


def caller_module(attrs: dict | None = None) -> IRModule:
    g = GlobalVar("affine")
    x = Var("x", VEC)
    a, out = Var("a"), Var("out")
    main = Function((x,), seq([VarBinding(a, Call(g, (x, x))), VarBinding(out, op.exp(a))], out))
    return IRModule({"affine": affine(attrs=attrs), "main": main}, global_vars={"affine": g})


def test_small_function_is_inlined(caplog):
    before = caller_module()
    with caplog.at_level(logging.DEBUG, logger="rvm.transform"):
        after = inline(before)

    g = GlobalVar("affine")
    x = Var("x", VEC)
    m, s, a, out = Var("m"), Var("s"), Var("a"), Var("out")
    main = Function(
        (x,),
        seq(
            [
                VarBinding(m, x * 2.0),
                VarBinding(s, m + x),
                VarBinding(a, op.relu(s)),
                VarBinding(out, op.exp(a)),
            ],
            out,
        ),
    )
    expected = IRModule({"affine": affine(), "main": main}, global_vars={"affine": g})
    assert_structural_equal(after, expected)
    verify(after)
    np.testing.assert_allclose(interpret(after, "main", ARG), interpret(before, "main", ARG))
    assert "1 calls inlined" in caplog.text

    # fresh variables: nothing is shared with the callee
    callee_vars = {b.var for b in after["affine"].body.bindings}
    assert not callee_vars & {b.var for b in after["main"].body.bindings}


def test_noinline_and_primitive_are_kept():
    for attrs in ({"noinline": True}, {"primitive": True}):
        before = caller_module(attrs)
        assert_structural_equal(inline(before), before)


def test_large_function_is_kept_and_threshold_is_tunable():
    before = caller_module()
    assert_structural_equal(inline(before, max_bindings=2), before)


def test_function_with_if_is_kept():
    y, c, s, r = Var("y", VEC), Var("c"), Var("s"), Var("r")
    body = seq([VarBinding(s, op.sum(y)), VarBinding(c, s > 0.0)], If(c, seq([], y), seq([], y)))
    g, x = GlobalVar("g"), Var("x", VEC)
    main = Function((x,), seq([VarBinding(r, Call(g, (x,)))], r))
    before = IRModule({"g": Function((y,), body), "main": main}, global_vars={"g": g})
    assert_structural_equal(inline(before), before)


def test_recursive_and_mutually_recursive_are_kept():
    # f calls g, g calls f (never run: only the call graph matters), main calls f
    f, g = GlobalVar("f"), GlobalVar("g")
    y, z, x = Var("y", VEC), Var("z", VEC), Var("x", VEC)
    a, b, r = Var("a"), Var("b"), Var("r")
    f_fn = Function((y,), seq([VarBinding(a, Call(g, (y,)))], a), VEC)
    g_fn = Function((z,), seq([VarBinding(b, Call(f, (z,)))], b), VEC)
    main = Function((x,), seq([VarBinding(r, Call(f, (x,)))], r))
    before = IRModule({"f": f_fn, "g": g_fn, "main": main}, global_vars={"f": f, "g": g})
    assert_structural_equal(inline(before), before)


def test_chain_collapses_callees_first():
    inc, twice = GlobalVar("inc"), GlobalVar("twice")
    p, q, x = Var("p", VEC), Var("q", VEC), Var("x", VEC)
    i1, t1, t2, r = Var("i1"), Var("t1"), Var("t2"), Var("r")
    inc_fn = Function((p,), seq([VarBinding(i1, p + 1.0)], i1))
    twice_fn = Function(
        (q,), seq([VarBinding(t1, Call(inc, (q,))), VarBinding(t2, Call(inc, (t1,)))], t2)
    )
    main = Function((x,), seq([VarBinding(r, Call(twice, (x,)))], r))
    before = IRModule(
        {"main": main, "twice": twice_fn, "inc": inc_fn},
        global_vars={"inc": inc, "twice": twice},
    )
    after = inline(before)
    values = [b.value for b in after["main"].body.bindings]
    assert len(values) == 2
    assert all(v.callee is op.ops.add for v in values)
    names = [b.var.name for b in after["main"].body.bindings]
    assert len(set(names)) == len(names)
    verify(after)
    np.testing.assert_allclose(interpret(after, "main", ARG), ARG + 2.0)


def test_result_is_a_parameter():
    ident, x, r, s = GlobalVar("ident"), Var("x", VEC), Var("r"), Var("s")
    p = Var("p", VEC)
    before = IRModule(
        {
            "ident": Function((p,), seq([], p)),
            "main": Function(
                (x,), seq([VarBinding(r, Call(ident, (x,))), VarBinding(s, r * r)], s)
            ),
        },
        global_vars={"ident": ident},
    )
    after = inline(before)
    first = next(iter(after["main"].body.bindings))
    assert first.value is after["main"].params[0]
    np.testing.assert_allclose(interpret(after, "main", ARG), ARG * ARG)
