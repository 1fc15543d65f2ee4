"""Recursion in the reference interpreter: non-tail, tail (constant stack), and ADT folds."""

from __future__ import annotations

import math
import sys

import numpy as np

from rvm import op
from rvm.interp import Interpreter, interpret
from rvm.ir import (
    ADTType,
    Builder,
    Call,
    Clause,
    If,
    IRModule,
    Match,
    PatternConstructor,
    PatternTuple,
    PatternVar,
    PatternWildcard,
    Tuple,
    Var,
    const,
    scalar,
    tensor,
)
from rvm.runtime.objects import ADT


def factorial_module() -> IRModule:
    """fact(n) = 1 if n <= 1 else n * fact(n - 1): the recursive call is not a tail call."""
    bb = Builder()
    n = Var("n", scalar("int64"))
    with bb.function("fact", [n]):
        c = bb.emit(n <= 1)
        bb.begin_scope()
        m = bb.emit(n - 1)
        r = bb.emit(Call(bb.global_var("fact"), (m,)))
        rest = bb.end_scope(n * r)
        bb.emit_output(If(c, const(1, "int64"), rest))
    return bb.get()


def fib_module() -> IRModule:
    bb = Builder()
    n = Var("n", scalar("int64"))
    fib = bb.global_var("fib")
    with bb.function("fib", [n]):
        c = bb.emit(n < 2)
        bb.begin_scope()
        a = bb.emit(Call(fib, (n - 1,)))
        b = bb.emit(Call(fib, (n - 2,)))
        rest = bb.end_scope(a + b)
        bb.emit_output(If(c, n, rest))
    return bb.get()


def test_factorial_int64() -> None:
    out = interpret(factorial_module(), "fact", 20)
    assert out.dtype == np.int64 and int(out) == math.factorial(20)


def test_fibonacci() -> None:
    out = interpret(fib_module(), "fib", np.int64(15))
    assert int(out) == 610 and out.dtype == np.int64


def test_deep_non_tail_recursion() -> None:
    """5000 pending frames, more than Python's recursion limit allows as real recursion."""
    bb = Builder()
    n = Var("n", scalar("int64"))
    with bb.function("count", [n]):
        c = bb.emit(n == 0)
        bb.begin_scope()
        r = bb.emit(Call(bb.global_var("count"), (n - 1,)))
        rest = bb.end_scope(r + 1)
        bb.emit_output(If(c, const(0, "int64"), rest))
    depth = sys.getrecursionlimit() * 5
    assert int(interpret(bb.get(), "count", depth)) == depth


def sum_to_module() -> IRModule:
    bb = Builder()
    i = Var("i", scalar("int64"))
    acc = Var("acc", scalar("int64"))
    with bb.function("sum_to", [i, acc]):
        done = bb.emit(i == 0)
        bb.begin_scope()
        i1 = bb.emit(i - 1)
        a1 = bb.emit(acc + i)
        loop = bb.end_scope(Call(bb.global_var("sum_to"), (i1, a1)))
        bb.emit_output(If(done, acc, loop))
    return bb.get()


def test_tail_recursive_sum_100000_deep() -> None:
    out = interpret(sum_to_module(), "sum_to", 100_000, 0)
    assert int(out) == 100_000 * 100_001 // 2


def test_tail_calls_run_in_constant_space() -> None:
    short, long = Interpreter(sum_to_module()), Interpreter(sum_to_module())
    short.call("sum_to", 10, 0)
    long.call("sum_to", 5000, 0)
    assert long.max_depth == short.max_depth <= 1


def test_non_tail_calls_stack_up() -> None:
    it = Interpreter(factorial_module())
    assert int(it.call("fact", 20)) == math.factorial(20)
    assert it.max_depth >= 19


ELEM = tensor((2,), "float32")


def list_module() -> IRModule:
    """build(n) builds Cons(n*x, ... Cons(1*x, Nil)); total folds it without tail calls."""
    bb = Builder()
    adt = bb.add_adt("List", [("Nil", []), ("Cons", [ELEM, ADTType("List")])])
    nil, cons = adt.constructors
    x = Var("x", ELEM)
    n = Var("n", scalar("int64"))
    acc = Var("acc", ADTType("List"))
    with bb.function("build", [x, n, acc]):
        done = bb.emit(n == 0)
        bb.begin_scope()
        head = bb.emit(x * op.cast(n, "float32"))
        cell = bb.emit(Call(cons, (head, acc)))
        more = bb.end_scope(Call(bb.global_var("build"), (x, n - 1, cell)))
        bb.emit_output(If(done, acc, more))
    xs = Var("xs", ADTType("List"))
    h, t = Var("h", ELEM), Var("t", ADTType("List"))
    with bb.function("total", [xs]):
        bb.begin_scope()
        rest = bb.emit(Call(bb.global_var("total"), (t,)))
        cons_body = bb.end_scope(h + rest)
        clauses = (
            Clause(PatternConstructor(cons, (PatternVar(h), PatternVar(t))), cons_body),
            Clause(PatternConstructor(nil, ()), op.zeros((2,), "float32")),
        )
        bb.emit_output(Match(xs, clauses))
    x2, k = Var("x2", ELEM), Var("k", scalar("int64"))
    with bb.function("main", [x2, k]):
        lst = bb.emit(Call(bb.global_var("build"), (x2, k, Call(nil, ()))))
        bb.emit_output(Call(bb.global_var("total"), (lst,)))
    return bb.get()


def test_adt_list_built_and_folded_2000() -> None:
    x = np.array([1.0, -0.5], dtype="float32")
    out = interpret(list_module(), "main", x, 2000)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, x * (2000 * 2001 / 2), rtol=1e-6)


def test_adt_value_from_python() -> None:
    mod = list_module()
    a, b = np.ones(2, "float32"), np.full(2, 3.0, "float32")
    lst = ADT(1, (a, ADT(1, (b, ADT(0, (), "Nil")), "Cons")), "Cons")
    np.testing.assert_allclose(interpret(mod, "total", lst), a + b)
    built = interpret(mod, "build", a, 2, ADT(0, (), "Nil"))
    assert isinstance(built, ADT) and built.name == "Cons" and repr(built).startswith("Cons(")
    np.testing.assert_allclose(built.fields[0], a)  # the last cell built comes first
    np.testing.assert_allclose(built.fields[1].fields[0], 2 * a)


def test_nested_tuple_and_wildcard_patterns() -> None:
    bb = Builder()
    adt = bb.add_adt("Opt", [("None_", []), ("Some", [ELEM])])
    none, some = adt.constructors
    v = Var("v", ELEM)
    p = Var("p", ADTType("Opt"))
    with bb.function("main", [p, v]):
        a, b = Var("a"), Var("b")
        pat = PatternTuple(
            (
                PatternConstructor(some, (PatternVar(a),)),
                PatternTuple((PatternWildcard(), PatternVar(b))),
            )
        )
        clauses = (
            Clause(pat, a + b),
            Clause(PatternWildcard(), v),
        )
        bb.emit_output(Match(Tuple((p, Tuple((v, v * 2.0)))), clauses))
    mod = bb.get()
    one = np.ones(2, "float32")
    np.testing.assert_allclose(interpret(mod, "main", ADT(1, (one,), "Some"), one), 3 * one)
    np.testing.assert_allclose(interpret(mod, "main", ADT(0, (), "None_"), one), one)
