"""Each script feature: the IR it produces, and printing/parsing back to an equal module."""

from __future__ import annotations

import numpy as np

import rvm
from rvm import ir, op
from rvm.ir import Call, Function, GlobalVar, If, Match, Tuple, TupleGetItem, Var
from rvm.script import T, func, module


def bindings(f: Function) -> list:
    return list(f.body.bindings)


def test_mlp_symbolic_batch(check):
    @module
    class MLP:
        @func
        def main(
            x: T[("n", 784), "float32"],
            w1: T[(784, 128), "float32"],
            b1: T[(128,), "float32"],
            w2: T[(128, 10), "float32"],
        ):
            h = op.relu(op.matmul(x, w1) + b1)
            return op.softmax(op.matmul(h, w2), axis=-1)

    f = MLP["main"]
    ops = [b.value.callee.name for b in bindings(f)]
    assert ops == ["matmul", "add", "relu", "matmul", "softmax"]
    assert f.body.body.type == ir.tensor(("n", 10), "float32")
    assert f.params[0].annotation.shape == ("n", 784)
    text = check(MLP)
    assert "class MLP:" in text
    assert 'lv0 = op.matmul(x, w1)  # T[("n", 128), "float32"]' in text


def test_factorial_and_fibonacci(check):
    @module
    class Rec:
        @func
        def fact(n: T[(), "int64"]) -> T[(), "int64"]:
            if n <= 1:
                return rvm.const(1, "int64")
            else:
                return n * fact(n - 1)

        @func
        def fib(n: T[(), "int64"]) -> T[(), "int64"]:
            if n < 2:
                return n
            return fib(n - 1) + fib(n - 2)

    fact = Rec["fact"]
    assert fact.ret_type == ir.scalar("int64")
    assert isinstance(fact.body.body, If)
    calls = [b.value for b in fact.body.body.true_branch.bindings]
    assert calls == []
    inner = [b.value.callee for b in fact.body.body.false_branch.bindings]
    assert any(isinstance(c, GlobalVar) and c.name == "fact" for c in inner)
    # The early return put the rest of fib into the else branch.
    fib = Rec["fib"]
    assert isinstance(fib.body.body, If)
    assert len(list(fib.body.body.false_branch.bindings)) == 5
    check(Rec)


def test_tail_recursive_sum(check):
    @module
    class Sum:
        @func
        def total(n: T[(), "int64"], acc: T[(), "float32"]):
            if n == 0:
                return acc
            else:
                return total(n - 1, acc + op.cast(n, "float32"))

        @func
        def main(n: T[(), "int64"]):
            return total(n, rvm.const(0.0, "float32"))

    rec = list(Sum["total"].body.body.false_branch.bindings)[-1].value
    assert isinstance(rec.callee, GlobalVar) and rec.callee.name == "total"
    assert Sum.get_global_var("total").type.ret == ir.scalar("float32")
    check(Sum)


def test_forward_reference(check):
    @module
    class Fwd:
        @func
        def main(x: T[(3,), "float32"]):
            y = helper(x)
            return op.exp(y)

        @func
        def helper(x: T[(3,), "float32"]):
            return x * 2.0

    assert bindings(Fwd["main"])[0].var.type == ir.tensor((3,), "float32")
    assert list(Fwd) == ["main", "helper"]
    check(Fwd)


def test_closure_def_and_lambda(check):
    @module
    class Clo:
        @func
        def main(x: T[(4,), "float32"], k: T[(4,), "float32"]):
            def add_k(y: T[(4,), "float32"]) -> T[(4,), "float32"]:
                return op.relu(y + k)

            scale = lambda y: op.tanh(y * k)  # noqa: E731
            return scale(add_k(x))

    bs = bindings(Clo["main"])
    add_k, scale = bs[0].value, bs[1].value
    assert isinstance(add_k, Function) and add_k.params[0].annotation is not None
    assert isinstance(scale, Function) and scale.params[0].annotation is None
    assert scale.params[0].type == ir.tensor((4,), "float32")  # from its first call
    assert [v.name for v in ir.free_vars(scale)] == ["k"]
    text = check(Clo)
    assert "scale = lambda y_1: op.tanh(op.multiply(y_1, k))" in text
    assert 'def add_k(y: T[(4,), "float32"]) -> T[(4,), "float32"]:' in text


def test_local_recursion(check):
    @module
    class LocalRec:
        @func
        def main(x: T[(2,), "float32"], n: T[(), "int64"]):
            def go(v: T[(2,), "float32"], i: T[(), "int64"]) -> T[(2,), "float32"]:
                if i > 0:
                    return go(v + x, i - 1)
                return v

            return go(x, n)

    go = bindings(LocalRec["main"])[0]
    assert any(v is go.var for v in ir.free_vars(go.value))  # recursion
    check(LocalRec)


def test_while_loop_rnn(check):
    @module
    class RNN:
        @func
        def rnn(h: T[(1, 16), "float32"], w: T[(16, 16), "float32"], steps: T[(), "int64"]):
            i = rvm.const(0, "int64")
            while i < steps:
                h = op.tanh(op.matmul(h, w))
                i = i + 1
            return h

    bs = bindings(RNN["rnn"])
    loop = bs[1]
    assert loop.var.name == "_while_loop0" and isinstance(loop.value, Function)
    assert [p.name for p in loop.value.params] == ["h", "i"]
    tail = loop.value.body.body
    assert isinstance(tail, If)
    again = list(tail.true_branch.bindings)[-1].value
    assert isinstance(again, Call) and again.callee is loop.var  # tail-recursive
    assert isinstance(tail.false_branch.body, Tuple)
    assert isinstance(bs[2].value, Call) and isinstance(bs[3].value, TupleGetItem)
    check(RNN)


def test_while_single_carried_var(check):
    @module
    class Loop:
        @func
        def main(x: T[(3,), "float32"], limit: T[(), "float32"]):
            while op.sum(x) < limit:
                x = x * 2.0
            return x

    bs = bindings(Loop["main"])
    assert isinstance(bs[-1].value, Call) and bs[-1].var.name == "x"
    assert isinstance(bs[0].value.body.body.false_branch.body, Var)
    check(Loop)


def test_tuples_return_and_unpack(check):
    @module
    class Tup:
        @func
        def pair(x: T[(2,), "float32"]):
            return (x + 1.0, x * x)

        @func
        def main(x: T[(2,), "float32"]):
            a, b = pair(x)
            t = pair(b)
            c, d = t[1], a
            return (c, d, t[0])

    bs = bindings(Tup["main"])
    assert isinstance(bs[1].value, TupleGetItem) and bs[1].var.name == "a"
    assert Tup["main"].body.body.type == ir.TupleType((ir.tensor((2,), "float32"),) * 3)
    check(Tup)


def test_if_assigning_variables(check):
    @module
    class Branches:
        @func
        def one(x: T[(3,), "float32"], c: T[(), "bool"]):
            if c:
                y = op.relu(x)
            else:
                y = x
            return y + 1.0

        @func
        def two(x: T[(3,), "float32"], c: T[(), "bool"]):
            y = x
            z = x
            if c:
                tmp = op.exp(x)
                y = tmp * 2.0
                z = tmp
            return y + z

        @func
        def chain(x: T[(), "float32"]):
            if x > 1.0:
                y = x * 3.0
            elif x > 0.0:
                y = x * 2.0
            else:
                y = -x
            return y

    one = bindings(Branches["one"])
    assert isinstance(one[0].value, If) and one[0].var.name == "y"
    assert one[0].value.false_branch.body is Branches["one"].params[0]  # `y = x`: no alias
    two = bindings(Branches["two"])
    joined = next(b for b in two if isinstance(b.value, If))
    assert isinstance(joined.value.true_branch.body, Tuple)
    assert isinstance(joined.value.false_branch.body, Tuple)  # old values pass through
    chain = next(b for b in bindings(Branches["chain"]) if isinstance(b.value, If)).value
    assert any(isinstance(b.value, If) for b in chain.false_branch.bindings)
    check(Branches)


def test_design_example(check):
    @rvm.script.adt
    class List:
        Nil: ()
        Cons: (T[(2,), "float32"], "List")

    @module
    class Prog:
        @func
        def total(xs: List, acc: T[(2,), "float32"]):
            match xs:
                case Cons(h, t):
                    return total(t, acc + h)
                case Nil():
                    return acc

        @func
        def rnn(h: T[(1, 16), "float32"], w: T[(16, 16), "float32"], steps: T[(), "int64"]):
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

    assert list(Prog.adts) == ["List"]
    assert [c.name for c in Prog.adts["List"].constructors] == ["Nil", "Cons"]
    assert isinstance(Prog["total"].body.body, Match)
    text = check(Prog)
    assert text.index("class List:") < text.index("class Prog:")
    assert "case Cons(h, t):" in text


def test_adt_build_and_fold(check):
    @rvm.script.adt
    class Vec:
        Nil: ()
        Cons: (T[(2,), "float32"], "Vec")

    @module
    class Fold:
        @func
        def build(x: T[(2,), "float32"]) -> Vec:
            return Cons(x, Cons(x * 2.0, Nil()))

        @func
        def fold(xs: Vec, acc: T[(2,), "float32"]) -> T[(2,), "float32"]:
            match xs:
                case Cons(h, Cons(h2, _)):
                    return acc + h + h2
                case Cons(h, t):
                    return fold(t, acc + h)
                case _:
                    return acc

        @func
        def main(x: T[(2,), "float32"]):
            return fold(build(x), op.zeros((2,), "float32"))

    clauses = Fold["fold"].body.body.clauses
    assert isinstance(clauses[0].pattern.patterns[1], ir.PatternConstructor)
    assert isinstance(clauses[0].pattern.patterns[1].patterns[1], ir.PatternWildcard)
    assert isinstance(clauses[2].pattern, ir.PatternWildcard)
    assert clauses[1].pattern.patterns[1].var.type == ir.ADTType("Vec")
    check(Fold)


def test_match_statement_and_tuple_pattern(check):
    @rvm.script.adt
    class Opt:
        Nothing: ()
        Some: (Tuple[T[(2,), "float32"], T[(2,), "float32"]],)

    @module
    class M:
        @func
        def get(o: Opt, d: T[(2,), "float32"]):
            match o:
                case Some((a, _)):
                    v = a
                case Nothing():
                    v = d * 2.0
            return v + 1.0

    m = bindings(M["get"])[0].value
    assert isinstance(m, Match) and isinstance(m.clauses[0].pattern.patterns[0], ir.PatternTuple)
    check(M)


def test_attention_block(check):
    @module
    class Attention:
        @func
        def main(
            x: T[("s", 64), "float32"],
            wq: T[(64, 64), "float32"],
            wk: T[(64, 64), "float32"],
            wv: T[(64, 64), "float32"],
            gamma: T[(64,), "float32"],
            beta: T[(64,), "float32"],
        ):
            h = op.layer_norm(x, gamma, beta, axes=[-1], epsilon=1e-5)
            q = h @ wq
            k = h @ wk
            v = h @ wv
            scores = op.matmul(q, op.transpose(k, (1, 0))) * 0.125
            p = op.softmax(scores, axis=-1)
            return x + p @ v

    f = Attention["main"]
    assert f.body.body.type == ir.tensor(("s", 64), "float32")
    scores = next(b for b in bindings(f) if b.var.name == "scores")
    assert scores.var.type == ir.tensor(("s", "s"), "float32")
    check(Attention)


def test_func_attrs_and_plain_function(check):
    @func(attrs={"primitive": True, "name_hint": "fused"})
    def kernel(x: T[(4,), "float32"]):
        return op.exp(x) + 1.0

    assert isinstance(kernel, ir.IRModule) and list(kernel) == ["kernel"]
    assert kernel["kernel"].attrs == {"primitive": True, "name_hint": "fused"}
    text = check(kernel)
    assert '@func(attrs={"primitive": True, "name_hint": "fused"})' in text


def test_constants(check):
    big = np.arange(40, dtype="float32").reshape(5, 8) / 7.0

    @module
    class Consts:
        @func
        def main(x: T[(3,), "float32"]):
            a = x + rvm.const([0.1, float("inf"), float("nan")], "float32")
            b = a * rvm.const(-0.0, "float32")
            c = op.cast(x, "float64") + rvm.const(1e-300, "float64")
            d = rvm.const(big)
            e = rvm.const([[True, False]], "bool")
            return (b, c, d, e, rvm.const(7, "int8"))

    text = check(Consts)
    assert 'rvm.const([0.1, float("inf"), float("nan")], "float32")' in text
    assert "rvm.script.const_b64(" in text
    d = bindings(Consts["main"])[-2].value
    assert isinstance(d, ir.Constant) and np.array_equal(d.data, big)


def test_narrow_dtypes_print_and_parse_back(check):
    import ml_dtypes

    big = np.linspace(-2, 2, 40).astype(ml_dtypes.bfloat16)

    @module
    class Narrow:
        @func
        def main(x: T[(4,), "bfloat16"], q: T[("n",), "int4"]):
            a = x * rvm.const([0.1, 1.5, -2.0, 300.7], "bfloat16")
            b = op.cast(q, "float8_e5m2")
            c = rvm.const([448.0, float("nan"), -0.0, 0.5], "float8_e4m3fn")
            return (a, b, c, rvm.const([-8, 7, 3, 0], "int4"), rvm.const(big))

    text = check(Narrow)
    assert 'rvm.const([0.100098, 1.5, -2.0, 300.0], "bfloat16")' in text
    assert 'rvm.const([-8, 7, 3, 0], "int4")' in text
    assert 'rvm.script.const_b64("' in text and '"bfloat16", (40,))' in text
    assert 'def main(x: T[(4,), "bfloat16"], q: T[("n",), "int4"]):' in text


def test_parse_text_and_print_any_node():
    text = """
@func
def main(x: T[(2, "m"), "float16"], s: Shape[2], f: Callable[[T[None, "float32"]], Any]):
    y: T[(2, "m"), "float16"] = op.relu(x)
    return (y, s, f)
"""
    mod = rvm.script.parse(text)
    f = mod["main"]
    assert f.params[1].annotation == ir.ShapeType(2)
    assert isinstance(f.params[2].annotation, ir.FuncType)
    assert bindings(f)[0].var.annotation == ir.tensor((2, "m"), "float16")
    assert 'y: T[(2, "m"), "float16"] = op.relu(x)' in mod.script()
    x = Var("x", ir.tensor((2,), "float32"))
    assert repr(op.relu(x + x)) == "op.relu(op.add(x, x))"
    assert (
        str(ir.TupleType((ir.tensor(None, "float32"),))) == 'Tuple[T[None, "float32"],]'
        or rvm.script.script(ir.TupleType((ir.tensor(None, "float32"),)))
        == 'Tuple[T[None, "float32"]]'
    )
    assert rvm.script.script(ir.tensor((), "int64")) == 'T[(), "int64"]'
    assert "def main" in repr(f)
