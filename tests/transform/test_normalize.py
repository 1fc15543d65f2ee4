"""normalize: A-normal form, evaluation order, flat bodies, idempotence, deep expressions."""

from __future__ import annotations

import numpy as np

from rvm import op
from rvm.interp import interpret
from rvm.ir import (
    Builder,
    Call,
    Clause,
    Constant,
    Constructor,
    Function,
    GlobalVar,
    If,
    IRModule,
    Match,
    PatternConstructor,
    PatternVar,
    PatternWildcard,
    SeqExpr,
    Tuple,
    TupleGetItem,
    Var,
    VarBinding,
    assert_structural_equal,
    const,
    scalar,
    seq,
    tensor,
    verify,
)
from rvm.ir.types import ADTType
from rvm.transform.normalize import is_atom, normalize

F32 = "float32"
VEC = tensor((4,), F32)


def x_var(name: str = "x") -> Var:
    return Var(name, VEC)


def assert_anf(mod: IRModule) -> None:
    """Every operand is an atom, every body a SeqExpr, functions only bound to their var."""
    stack: list[object] = [f for _, f in mod.items()]
    while stack:
        node = stack.pop()
        if isinstance(node, Function):
            assert isinstance(node.body, SeqExpr)
            stack.append(node.body)
        elif isinstance(node, SeqExpr):
            assert is_atom(node.body) or isinstance(node.body, (If, Match))
            for b in node.bindings:
                assert not isinstance(b.value, SeqExpr)
                stack.append(b.value)
        elif isinstance(node, If):
            assert is_atom(node.cond)
            assert isinstance(node.true_branch, SeqExpr)
            assert isinstance(node.false_branch, SeqExpr)
            stack.extend((node.true_branch, node.false_branch))
        elif isinstance(node, Match):
            assert is_atom(node.data)
            for c in node.clauses:
                assert isinstance(c.body, SeqExpr)
                stack.append(c.body)
        elif isinstance(node, Call):
            assert is_atom(node.callee) or not isinstance(node.callee, Function)
            assert all(is_atom(a) for a in node.args)
        elif isinstance(node, Tuple):
            assert all(is_atom(f) for f in node.fields)
        elif isinstance(node, TupleGetItem):
            assert is_atom(node.tuple_value)


def check(before: IRModule, expected: IRModule) -> IRModule:
    after = normalize(before)
    assert_structural_equal(after, expected)
    assert_anf(after)
    verify(after)
    assert_structural_equal(normalize(after), after)  # idempotent
    return after


def test_nested_calls_bound_in_evaluation_order():
    x = x_var()
    before = IRModule({"main": Function((x,), op.exp(op.relu(x) + op.tanh(x)))})

    bb = Builder()
    x = x_var()
    with bb.function("main", [x]):
        a = bb.emit(op.relu(x))
        b = bb.emit(op.tanh(x))
        c = bb.emit(a + b)
        bb.emit_output(bb.emit(op.exp(c)))
    after = check(before, bb.get())
    names = [b.var.name for b in after["main"].body.bindings]
    assert names == ["lv0", "lv1", "lv2", "lv3"]


def test_if_condition_atom_and_branches_seqs():
    x = x_var()
    before = IRModule({"main": Function((x,), If(op.sum(x) > 0.0, op.relu(x), x))})

    x = x_var()
    s, c, r = Var("s"), Var("c"), Var("r")
    then = seq([VarBinding(r, op.relu(x))], r)
    body = seq(
        [VarBinding(s, op.sum(x)), VarBinding(c, Call(op.ops.greater, (s, const(0.0))))],
        If(c, then, seq([], x)),
    )
    check(before, IRModule({"main": Function((x,), body)}))


def test_function_literal_bound_to_its_own_var():
    x, y = x_var(), x_var("y")
    inner = Function((y,), op.relu(y) * x)
    before = IRModule({"main": Function((x,), Call(inner, (x + 1.0,)))})

    x, y = x_var(), x_var("y")
    f, a, t, r, out = Var("f"), Var("a"), Var("t"), Var("r"), Var("out")
    inner = Function((y,), seq([VarBinding(t, op.relu(y)), VarBinding(r, t * x)], r))
    body = seq([VarBinding(f, inner), VarBinding(a, x + 1.0), VarBinding(out, Call(f, (a,)))], out)
    check(before, IRModule({"main": Function((x,), body)}))


def test_nested_seq_in_binding_is_flattened():
    x = x_var()
    a, b, c = Var("a"), Var("b"), Var("c")
    inner = seq([VarBinding(a, op.relu(x))], a * 2.0)
    before = IRModule({"main": Function((x,), seq([VarBinding(b, inner)], op.exp(b)))})

    x = x_var()
    a, b, c = Var("a"), Var("b"), Var("c")
    body = seq([VarBinding(a, op.relu(x)), VarBinding(b, a * 2.0), VarBinding(c, op.exp(b))], c)
    check(before, IRModule({"main": Function((x,), body)}))


def test_tuples_and_getitem_operands():
    x = x_var()
    before = IRModule({"main": Function((x,), op.exp(Tuple((op.relu(x), x))[0]))})

    x = x_var()
    a, t, g, e = Var("a"), Var("t"), Var("g"), Var("e")
    body = seq(
        [
            VarBinding(a, op.relu(x)),
            VarBinding(t, Tuple((a, x))),
            VarBinding(g, TupleGetItem(t, 0)),
            VarBinding(e, op.exp(g)),
        ],
        e,
    )
    check(before, IRModule({"main": Function((x,), body)}))


def list_adt(bb: Builder) -> tuple[Constructor, Constructor]:
    adt = bb.add_adt("List", [("Nil", []), ("Cons", [VEC, ADTType("List")])])
    return adt.constructors[0], adt.constructors[1]


def test_match_data_atom_and_clause_bodies_seqs():
    bb = Builder()
    nil, cons = list_adt(bb)
    x = x_var()
    h = Var("h", VEC)
    data = Call(cons, (op.relu(x), Call(nil, ())))
    clauses = (
        Clause(PatternConstructor(cons, (PatternVar(h), PatternWildcard())), op.exp(h)),
        Clause(PatternWildcard(), x),
    )
    bb.add_function("main", Function((x,), Match(data, clauses)))
    before = bb.get()

    bb = Builder()
    nil, cons = list_adt(bb)
    x, h = x_var(), Var("h", VEC)
    a, n, d, e = Var("a"), Var("n"), Var("d"), Var("e")
    clauses = (
        Clause(
            PatternConstructor(cons, (PatternVar(h), PatternWildcard())),
            seq([VarBinding(e, op.exp(h))], e),
        ),
        Clause(PatternWildcard(), seq([], x)),
    )
    body = seq(
        [
            VarBinding(a, op.relu(x)),
            VarBinding(n, Call(nil, ())),
            VarBinding(d, Call(cons, (a, n))),
        ],
        Match(d, clauses),
    )
    bb.add_function("main", Function((x,), body))
    after = check(before, bb.get())
    arg = np.arange(4, dtype=F32) - 1.5
    np.testing.assert_allclose(interpret(after, "main", arg), interpret(before, "main", arg))


def test_shared_subexpression_bound_once():
    x = x_var()
    r = op.relu(x)
    before = IRModule({"main": Function((x,), r * r)})
    after = normalize(before)
    assert len(list(after["main"].body.bindings)) == 2


def test_fresh_names_avoid_existing_names():
    x = x_var()
    lv0 = Var("lv0")
    before = IRModule({"main": Function((x,), seq([VarBinding(lv0, op.relu(op.exp(x)))], lv0))})
    after = normalize(before)
    names = [b.var.name for b in after["main"].body.bindings]
    assert len(set(names)) == len(names) == 2


def test_call_of_module_function_and_constants():
    x = x_var()
    g = GlobalVar("g")
    y = x_var("y")
    before = IRModule(
        {"g": Function((y,), y + 1.0), "main": Function((x,), Call(g, (op.relu(x),)) * 2.0)},
        global_vars={"g": g},
    )
    after = normalize(before)
    assert_anf(after)
    verify(after)
    arg = np.arange(4, dtype=F32) - 2.0
    np.testing.assert_allclose(interpret(after, "main", arg), interpret(before, "main", arg))


def test_deep_operator_chain_does_not_overflow():
    x = x_var()
    e = x
    for _ in range(2000):
        e = e + 1.0
    before = IRModule({"main": Function((x,), e)})
    after = normalize(before)
    assert len(list(after["main"].body.bindings)) == 2000
    assert_anf(after)
    assert_structural_equal(normalize(after), after)
    arg = np.zeros(4, dtype=F32)
    np.testing.assert_allclose(interpret(after, "main", arg), np.full(4, 2000.0, F32))


def test_long_binding_list_is_a_loop():
    x = x_var()
    bindings, prev = [], x
    for i in range(5000):
        v = Var(f"v{i}")
        bindings.append(VarBinding(v, prev + 1.0))
        prev = v
    before = IRModule({"main": Function((x,), seq(bindings, prev))})
    assert_structural_equal(normalize(before), before)


def test_constant_body_and_atom_branches():
    c = Var("c", scalar("bool"))
    before = IRModule({"main": Function((c,), If(c, Constant(np.float32(1)), const(2.0)))})
    after = normalize(before)
    body = after["main"].body
    assert isinstance(body, SeqExpr) and isinstance(body.body, If)
    assert isinstance(body.body.true_branch, SeqExpr)
    assert float(interpret(after, "main", np.bool_(False))) == 2.0
