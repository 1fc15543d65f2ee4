"""Smaller pieces of syntax: operators, conditional expressions, nested loops, tuple types."""

from __future__ import annotations

import rvm
from rvm import ir, op
from rvm.ir import Call, Function, If
from rvm.script import T, Tuple, func, module


def test_python_operators(check):
    @module
    class Ops:
        @func
        def main(x: T[(3,), "float32"], y: T[(3,), "float32"], i: T[(3,), "int32"]):
            a = (x + y - x * y / y) ** 2.0
            b = i // 2 + i % 3
            c = (x < y) and (x >= 0.0) or not (x == y)
            d = -x if op.sum(x) != 0.0 else +y
            return (a, b, c, d)

    names = [
        b.value.callee.name
        for b in Ops["main"].body.bindings
        if isinstance(b.value, Call) and isinstance(b.value.callee, ir.Op)
    ]
    for expected in (
        "power",
        "floor_divide",
        "mod",
        "logical_and",
        "logical_or",
        "logical_not",
        "not_equal",
    ):
        assert expected in names
    b = next(b for b in Ops["main"].body.bindings if b.var.name == "b")
    assert b.var.type == ir.tensor((3,), "int32")  # the literals took i's dtype
    d = next(b for b in Ops["main"].body.bindings if b.var.name == "d")
    assert isinstance(d.value, If)
    check(Ops)


def test_augmented_assignment_negative_index_and_tuple_types(check):
    @module
    class Aug:
        @func
        def main(p: Tuple[T[(2,), "float32"], T[(), "int64"]]) -> T[(2,), "float32"]:
            x = p[0]
            x += 1.0
            x *= op.cast(p[-1], "float32")
            return x

    assert Aug["main"].params[0].annotation == ir.TupleType(
        (ir.tensor((2,), "float32"), ir.scalar("int64"))
    )
    check(Aug)


def test_nested_loops_and_if_in_loop(check):
    @module
    class Nested:
        @func
        def main(x: T[(2,), "float32"], n: T[(), "int64"]):
            i = rvm.const(0, "int64")
            acc = x
            while i < n:
                j = rvm.const(0, "int64")
                while j < i:
                    acc = acc + x
                    j = j + 1
                if op.sum(acc) > 100.0:
                    acc = acc * 0.5
                i = i + 1
            return acc

    loops = [b for b in Nested["main"].body.bindings if isinstance(b.value, Function)]
    assert len(loops) == 1
    inner = [
        b for b in loops[0].value.body.body.true_branch.bindings if isinstance(b.value, Function)
    ]
    assert len(inner) == 1
    check(Nested)


def test_loop_widens_changing_shapes(check):
    @module
    class Grow:
        @func
        def main(x: T[(1,), "float32"], n: T[(), "int64"]):
            i = rvm.const(0, "int64")
            while i < n:
                x = op.concat((x, x), axis=0)
                i = i + 1
            return x

    loop = next(b for b in Grow["main"].body.bindings if isinstance(b.value, Function))
    assert loop.value.params[0].annotation == ir.tensor((None,), "float32")
    check(Grow)


def test_statement_if_with_several_results(check):
    @module
    class Multi:
        @func
        def main(x: T[(2,), "float32"], c: T[(), "bool"]):
            if c:
                a = x + 1.0
                b = x * 2.0
            else:
                a = x
                b = x - 1.0
            return a * b

    first = next(iter(Multi["main"].body.bindings))
    assert isinstance(first.value, If)
    assert isinstance(first.value.true_branch.body, ir.Tuple)
    check(Multi)


def test_printed_script_is_valid_python():
    @module
    class Small:
        @func
        def main(x: T[(2,), "float32"]):
            return op.relu(x) + 1.0

    compile(Small.script(), "<script>", "exec")
