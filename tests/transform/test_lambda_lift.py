"""lambda_lift: local functions become module functions; known calls direct, others closures."""

from __future__ import annotations

import numpy as np

from rvm import op
from rvm.interp import interpret
from rvm.ir import (
    Call,
    Function,
    GlobalVar,
    If,
    IRModule,
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
from rvm.ir.types import FuncType
from rvm.script import parse
from rvm.transform.dead_code import dead_code
from rvm.transform.infer_shapes import infer_shapes
from rvm.transform.inline import inline
from rvm.transform.lambda_lift import lambda_lift
from rvm.transform.normalize import normalize
from rvm.transform.pipeline import run_pipeline
from rvm.transform.tail_call import tail_call
from rvm.transform.vm_ops import invoke_closure, make_closure

F32 = "float32"
VEC = tensor((4,), F32)
ROW = tensor((1, 4), F32)
MAT = tensor((4, 4), F32)
I64 = scalar("int64")
LIFTED = {"lifted": True}


def prepare(mod: IRModule) -> IRModule:
    return infer_shapes(normalize(mod))


def lift(mod: IRModule) -> IRModule:
    after = lambda_lift(mod)
    verify(after)
    assert_no_local_functions(after)
    return after


def assert_no_local_functions(mod: IRModule) -> None:
    stack: list[object] = [f.body for _, f in mod.items()]
    while stack:
        node = stack.pop()
        assert not isinstance(node, Function), "a Function literal survived lambda_lift"
        if hasattr(node, "blocks"):
            stack.extend(b.value for b in node.bindings)
            stack.append(node.body)
        elif isinstance(node, If):
            stack.extend((node.true_branch, node.false_branch))
        elif hasattr(node, "clauses"):
            stack.extend(c.body for c in node.clauses)


def while_module() -> IRModule:
    """``rnn``: ``i = 0; while i < steps: h = tanh(h @ w); i = i + 1; return h``."""
    h, w, steps = Var("h", ROW), Var("w", MAT), Var("steps", I64)
    loop = Var("_while_loop0")
    i_p, h_p = Var("i", I64), Var("h", ROW)
    c, m, h1, i1, r = Var("c"), Var("m"), Var("h1"), Var("i1"), Var("r")
    then = seq(
        [
            VarBinding(m, op.matmul(h_p, w)),
            VarBinding(h1, op.tanh(m)),
            VarBinding(i1, i_p + 1),
            VarBinding(r, Call(loop, (i1, h1))),
        ],
        r,
    )
    body = seq([VarBinding(c, i_p < steps)], If(c, then, seq([], h_p)))
    i0, res = Var("i0"), Var("res")
    main = seq(
        [
            VarBinding(i0, const(0, "int64")),
            VarBinding(loop, Function((i_p, h_p), body)),
            VarBinding(res, Call(loop, (i0, h))),
        ],
        res,
    )
    return prepare(IRModule({"rnn": Function((h, w, steps), main)}))


def test_while_loop_becomes_direct_tail_recursion():
    before = while_module()
    after = lift(before)

    gv = GlobalVar("rnn__while_loop0")
    steps_c, w_c = Var("steps", I64), Var("w", MAT)
    i_p, h_p = Var("i", I64), Var("h", ROW)
    c, m, h1, i1, r = Var("c"), Var("m"), Var("h1"), Var("i1"), Var("r")
    then = seq(
        [
            VarBinding(m, op.matmul(h_p, w_c)),
            VarBinding(h1, op.tanh(m)),
            VarBinding(i1, i_p + 1),
            VarBinding(r, Call(gv, (steps_c, w_c, i1, h1))),
        ],
        r,
    )
    loop_body = seq([VarBinding(c, i_p < steps_c)], If(c, then, seq([], h_p)))
    lifted = Function((steps_c, w_c, i_p, h_p), loop_body, None, LIFTED)
    h, w, steps = Var("h", ROW), Var("w", MAT), Var("steps", I64)
    i0, res = Var("i0"), Var("res")
    main = seq(
        [VarBinding(i0, const(0, "int64")), VarBinding(res, Call(gv, (steps, w, i0, h)))], res
    )
    expected = IRModule(
        {"rnn": Function((h, w, steps), main), gv.name: lifted}, global_vars={gv.name: gv}
    )
    assert_structural_equal(after, expected)

    args = (np.full((1, 4), 0.1, F32), np.eye(4, dtype=F32) * 0.9, np.int64(7))
    np.testing.assert_allclose(interpret(after, "rnn", *args), interpret(before, "rnn", *args))


def closure_module(escape: bool) -> IRModule:
    """``main(x, k)``: ``def add_k(y): return y + k``; call it, and maybe return it too."""
    x, k, y = Var("x", VEC), Var("k", VEC), Var("y", VEC)
    f, s, a, out = Var("add_k"), Var("s"), Var("a"), Var("out")
    fn = Function((y,), seq([VarBinding(s, y + k)], s))
    bindings = [VarBinding(f, fn), VarBinding(a, Call(f, (x,)))]
    result: Var = a
    if escape:
        bindings.append(VarBinding(out, Tuple((a, f))))
        result = out
    return prepare(IRModule({"main": Function((x, k), seq(bindings, result))}))


def lifted_add_k(gv: GlobalVar) -> Function:
    k, y, s = Var("k", VEC), Var("y", VEC), Var("s")
    return Function((k, y), seq([VarBinding(s, y + k)], s), None, LIFTED)


def test_known_closure_call_becomes_direct_call():
    before = closure_module(escape=False)
    after = lift(before)

    gv = GlobalVar("main_add_k")
    x, k, a = Var("x", VEC), Var("k", VEC), Var("a")
    main = Function((x, k), seq([VarBinding(a, Call(gv, (k, x)))], a))
    expected = IRModule({"main": main, gv.name: lifted_add_k(gv)}, global_vars={gv.name: gv})
    assert_structural_equal(after, expected)

    args = (np.arange(4, dtype=F32), np.full(4, 3.0, F32))
    np.testing.assert_allclose(interpret(after, "main", *args), interpret(before, "main", *args))


def test_escaping_closure_becomes_make_closure():
    before = closure_module(escape=True)
    after = lift(before)

    gv = GlobalVar("main_add_k")
    x, k = Var("x", VEC), Var("k", VEC)
    f, a, out = Var("add_k"), Var("a"), Var("out")
    ty = FuncType((VEC,), VEC)
    main = seq(
        [
            VarBinding(f, Call(make_closure, (gv, k), {"type": ty})),
            VarBinding(a, Call(gv, (k, x))),
            VarBinding(out, Tuple((a, f))),
        ],
        out,
    )
    expected = IRModule(
        {"main": Function((x, k), main), gv.name: lifted_add_k(gv)}, global_vars={gv.name: gv}
    )
    assert_structural_equal(after, expected)
    assert after["main"].body.body.type.fields[1] == ty


def test_call_of_closure_value_becomes_invoke_closure():
    ft = FuncType((VEC,), VEC)
    g, x, r = Var("g", ft), Var("x", VEC), Var("r")
    before = prepare(IRModule({"main": Function((g, x), seq([VarBinding(r, Call(g, (x,)))], r))}))
    after = lift(before)

    g, x = Var("g", ft), Var("x", VEC)
    expected = IRModule(
        {"main": Function((g, x), seq([VarBinding(r, Call(invoke_closure, (g, x)))], r))}
    )
    assert_structural_equal(after, expected)


def test_capture_free_escaping_function_gets_empty_closure():
    x, y = Var("x", VEC), Var("y", VEC)
    f, s = Var("f"), Var("s")
    fn = Function((y,), seq([VarBinding(s, op.relu(y))], s))
    before = prepare(IRModule({"main": Function((x,), seq([VarBinding(f, fn)], f))}))
    after = lift(before)

    gv = GlobalVar("main_f")
    y, s, f = Var("y", VEC), Var("s"), Var("f")
    lifted = Function((y,), seq([VarBinding(s, op.relu(y))], s), None, LIFTED)
    ty = FuncType((VEC,), VEC)
    main = Function((x,), seq([VarBinding(f, Call(make_closure, (gv,), {"type": ty}))], f))
    expected = IRModule({"main": main, gv.name: lifted}, global_vars={gv.name: gv})
    assert_structural_equal(after, expected)


def nested_module() -> IRModule:
    """main(x, k): def f(y): (def g(z): z + k); g(y) * x;  def h(u): f(u) + u;  h(x)."""
    x, k = Var("x", VEC), Var("k", VEC)
    y, z, u = Var("y", VEC), Var("z", VEC), Var("u", VEC)
    f, g, h = Var("f"), Var("g"), Var("h")
    s, gy, fy, fu, hu, hx = (Var(n) for n in ("s", "gy", "fy", "fu", "hu", "hx"))
    g_fn = Function((z,), seq([VarBinding(s, z + k)], s))
    f_fn = Function(
        (y,), seq([VarBinding(g, g_fn), VarBinding(gy, Call(g, (y,))), VarBinding(fy, gy * x)], fy)
    )
    h_fn = Function((u,), seq([VarBinding(fu, Call(f, (u,))), VarBinding(hu, fu + u)], hu))
    body = seq([VarBinding(f, f_fn), VarBinding(h, h_fn), VarBinding(hx, Call(h, (x,)))], hx)
    return prepare(IRModule({"main": Function((x, k), body)}))


def test_nested_functions_capture_transitively():
    before = nested_module()
    after = lift(before)
    assert set(after) == {"main", "main_f", "main_f_g", "main_h"}
    # captured variables first, in order of first use; calls of known functions are direct
    assert [p.name for p in after["main_f"].params] == ["k", "x", "y"]
    assert [p.name for p in after["main_f_g"].params] == ["k", "z"]
    assert [p.name for p in after["main_h"].params] == ["k", "x", "u"]
    for name in ("main_f", "main_f_g", "main_h"):
        assert after[name].attrs["lifted"] is True

    args = (np.arange(4, dtype=F32), np.full(4, 0.5, F32))
    np.testing.assert_allclose(interpret(after, "main", *args), interpret(before, "main", *args))


def test_recursive_function_used_as_value_inside_itself():
    x, y = Var("x", VEC), Var("y", VEC)
    f, c, t, z, d, r = Var("f"), Var("c"), Var("t"), Var("z"), Var("d"), Var("r")
    body = seq(
        [
            VarBinding(c, op.sum(y) > 0.0),
            VarBinding(t, Tuple((y, f))),
            VarBinding(z, TupleGetItem(t, 0)),
        ],
        If(c, seq([VarBinding(d, z - 1.0), VarBinding(r, Call(f, (d,)))], r), seq([], z)),
    )
    main = seq([VarBinding(f, Function((y,), body)), VarBinding(r := Var("out"), Call(f, (x,)))], r)
    before = prepare(IRModule({"main": Function((x,), main)}))
    after = lift(before)
    first = next(iter(after["main_f"].body.bindings))
    assert first.value.callee is make_closure  # its own closure, rebuilt inside it
    assert first.value.args[0].name == "main_f"


def test_unique_lifted_names():
    x, y = Var("x", VEC), Var("y", VEC)
    f, a = Var("f"), Var("a")
    fn = Function((y,), y)
    main = Function((x,), seq([VarBinding(f, fn), VarBinding(a, Call(f, (x,)))], a))
    other = Function((Var("q", VEC),), const(np.zeros(4, F32)))
    after = lift(prepare(IRModule({"main": main, "main_f": other})))
    assert set(after) == {"main", "main_f", "main_f_1"}
    assert after["main_f_1"].attrs["lifted"] is True


def test_tuple_read_closure_is_invoked():
    x, y = Var("x", VEC), Var("y", VEC)
    f, t, g, r = Var("f"), Var("t"), Var("g"), Var("r")
    fn = Function((y,), y)
    body = seq(
        [
            VarBinding(f, fn),
            VarBinding(t, Tuple((f, x))),
            VarBinding(g, TupleGetItem(t, 0)),
            VarBinding(r, Call(g, (x,))),
        ],
        r,
    )
    after = lift(prepare(IRModule({"main": Function((x,), body)})))
    values = [b.value for b in after["main"].body.bindings]
    assert values[0].callee is make_closure
    assert values[-1].callee is invoke_closure


PROGRAM = """
import rvm
from rvm import op
from rvm.script import T, func, module


@module
class Prog:
    @func
    def rnn(h: T[(1, 4), "float32"], w: T[(4, 4), "float32"], steps: T[(), "int64"]):
        i = rvm.const(0, "int64")
        while i < steps:
            h = op.tanh(op.matmul(h, w))
            i = i + 1
        return h

    @func
    def main(x: T[(4,), "float32"], k: T[(4,), "float32"]):
        def add_k(y: T[(4,), "float32"]):
            return y + k

        a, b = (add_k(x), x * 2.0)
        if op.sum(a) > 0.0:
            return a
        else:
            return b
"""


def test_script_program_through_the_control_passes():
    """The design's example program: closures inlined, the while loop a tail-recursive function."""
    prog = parse(PROGRAM)
    passes = [
        ("normalize", normalize),
        ("infer_shapes", infer_shapes),
        ("lambda_lift", lambda_lift),
        ("inline", inline),
        ("dead_code", dead_code),
        ("tail_call", tail_call),
    ]
    after = run_pipeline(prog, passes, verify=True)
    assert_no_local_functions(after)
    assert set(after) == {"rnn", "main", "rnn__while_loop0"}
    assert after["rnn__while_loop0"].attrs["num_tail_calls"] == 1

    args = (np.full((1, 4), 0.1, F32), np.eye(4, dtype=F32) * 0.9, np.int64(9))
    np.testing.assert_allclose(interpret(after, "rnn", *args), interpret(prog, "rnn", *args))
    for x in (np.arange(4, dtype=F32), -np.arange(4, dtype=F32) - 5.0):
        k = np.ones(4, F32)
        np.testing.assert_allclose(interpret(after, "main", x, k), interpret(prog, "main", x, k))
