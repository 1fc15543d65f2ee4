from __future__ import annotations

import numpy as np
import pytest

import rvm.ir as ir
from rvm.errors import IRError


def build(add, swap=False, dims=("n", 4)):
    x = ir.Var("x", ir.tensor(dims, "float32"))
    bb = ir.Builder()
    with bb.function("main", [x]):
        y = bb.emit(ir.Call(add, (x, x)))
        z = bb.emit(ir.Call(add, (x, y) if swap else (y, x)))
        bb.emit_output(z)
    return bb.get()


def test_builder_infers_types(add_op):
    mod = build(add_op)
    func = mod["main"]
    assert isinstance(func.body, ir.SeqExpr)
    assert [b.var.type for b in func.body.bindings] == [ir.tensor(("n", 4), "float32")] * 2
    assert mod.get_global_var("main").type == ir.FuncType(
        (ir.tensor(("n", 4), "float32"),), ir.tensor(("n", 4), "float32")
    )


def test_structural_equal_is_alpha_equivalence(add_op):
    a, b = build(add_op), build(add_op)
    assert ir.structural_equal(a, b)
    assert ir.structural_hash(a) == ir.structural_hash(b)
    c = build(add_op, swap=True)
    assert not ir.structural_equal(a, c)
    diff = ir.structural_diff(a, c)
    assert "in function main" in diff
    with pytest.raises(AssertionError, match="not structurally equal"):
        ir.assert_structural_equal(a, c)


def test_structural_equal_distinguishes_types_and_constants(add_op):
    assert not ir.structural_equal(build(add_op), build(add_op, dims=("m", 4)))
    assert ir.structural_equal(ir.const(1.5, "float32"), ir.const(1.5, "float32"))
    assert not ir.structural_equal(ir.const(1.5, "float32"), ir.const(1.5, "float64"))
    assert not ir.structural_equal(ir.const([1, 2], "int64"), ir.const([1, 3], "int64"))


def test_deep_expressions_do_not_recurse(add_op):
    x = ir.Var("x", ir.tensor((2,), "float32"))
    e = x
    for _ in range(5000):
        e = ir.Call(add_op, (e, x))
    assert ir.infer_type(e) == ir.tensor((2,), "float32")
    assert ir.structural_equal(e, e)
    assert isinstance(ir.structural_hash(e), int)


def test_expressions_have_no_truth_value(add_op):
    x = ir.Var("x", ir.tensor((2,), "float32"))
    with pytest.raises(TypeError, match="no Python truth value"):
        bool(x)
    assert {x: 1}[x] == 1  # identity hashing still works


def test_var_call_substitutes_callee_dims(add_op):
    y = ir.Var("y", ir.tensor(("m", 3), "float32"))
    bb = ir.Builder()
    with bb.function("f", [y]):
        bb.emit_output(bb.emit(ir.Call(add_op, (y, y))))
    x = ir.Var("x", ir.tensor(("n", 3), "float32"))
    with bb.function("main", [x]):
        r = bb.emit(ir.Call(bb.global_var("f"), (x,)))
        bb.emit_output(r)
    mod = bb.get()
    assert mod["main"].body.body.type == ir.tensor(("n", 3), "float32")


def test_verify_rejects_unbound_and_twice_defined(add_op):
    x = ir.Var("x", ir.tensor((2,), "float32"))
    stray = ir.Var("stray", ir.tensor((2,), "float32"))
    lv = ir.Var("lv")
    body = ir.seq([ir.VarBinding(lv, ir.Call(add_op, (x, stray)))], lv)
    mod = ir.IRModule({"main": ir.Function((x,), body)})
    with pytest.raises(IRError, match="stray is used outside its scope"):
        ir.verify(mod)
    twice = ir.seq(
        [ir.VarBinding(lv, ir.Call(add_op, (x, x))), ir.VarBinding(lv, ir.Call(add_op, (x, x)))],
        lv,
    )
    with pytest.raises(IRError, match="defined twice"):
        ir.verify(ir.IRModule({"main": ir.Function((x,), twice)}))


def test_verify_rejects_unknown_function_and_arity(add_op):
    x = ir.Var("x", ir.tensor((2,), "float32"))
    lv = ir.Var("lv")
    call = ir.Call(ir.GlobalVar("nowhere"), (x,))
    mod = ir.IRModule({"main": ir.Function((x,), ir.seq([ir.VarBinding(lv, call)], lv))})
    with pytest.raises(IRError, match="unknown function nowhere"):
        ir.verify(mod)


def test_adt_and_match_types(add_op):
    bb = ir.Builder()
    elem = ir.tensor((2,), "float32")
    adt = bb.add_adt("List", [("Nil", ()), ("Cons", (elem, ir.ADTType("List")))])
    nil, cons = adt.constructors
    xs = ir.Var("xs", ir.ADTType("List"))
    h, t = ir.Var("h"), ir.Var("t")
    zero = ir.const(np.zeros(2, "float32"))
    match = ir.Match(
        xs,
        (
            ir.Clause(ir.PatternConstructor(cons, (ir.PatternVar(h), ir.PatternVar(t))), h),
            ir.Clause(ir.PatternConstructor(nil, ()), zero),
        ),
    )
    bb.add_function("head", ir.Function((xs,), ir.seq([], match)))
    mod = bb.get()
    assert mod["head"].type.ret == elem
    assert h.type == elem and t.type == ir.ADTType("List")
    ir.verify(mod)


def test_if_requires_bool_scalar(add_op):
    x = ir.Var("x", ir.tensor((2,), "float32"))
    with pytest.raises(IRError, match="0-d bool"):
        ir.infer_type(ir.If(x, x, x))


def test_join_of_branches_keeps_common_dims():
    a = ir.tensor(("n", 4), "float32")
    b = ir.tensor((3, 4), "float32")
    assert ir.join_types(a, b) == ir.tensor((None, 4), "float32")
    with pytest.raises(IRError):
        ir.join_types(a, ir.tensor((3, 4), "int32"))


def test_an_unknown_dtype_stays_unknown_and_any_gives_way():
    known, unknown = ir.tensor((3, 4), "float32"), ir.tensor((3, 4), None)
    assert ir.join_types(known, unknown) == ir.join_types(unknown, known) == unknown
    assert ir.join_types(ir.AnyType(), known) == ir.join_types(known, ir.AnyType()) == known
    assert ir.promote_dtypes(None, "float32") is None and ir.promote_dtypes("float32", None) is None
    assert ir.promote_dtypes("float16", "float32") == "float32"


def test_recursive_results_keep_the_dtype_of_the_base_case():
    from rvm.testing.programs import Recursion

    for name in ("factorial", "fib"):
        assert Recursion[name].ret_type is None  # inferred, not annotated
        assert Recursion.get_global_var(name).type.ret == ir.tensor((), "int64")


def test_types_validate_dims_and_dtypes():
    with pytest.raises(IRError, match="unsupported dtype"):
        ir.tensor((2,), "complex64")
    with pytest.raises(IRError, match=">= 0"):
        ir.tensor((-1,), "float32")
    assert str(ir.tensor(("n", 3), "float32")) == "T[('n', 3), 'float32']"


def test_constants_share_a_given_array_read_only() -> None:
    big = np.arange(1 << 20, dtype=np.float32).reshape(1024, 1024)
    for c in (ir.const(big), ir.Constant(big), ir.const(big, "float32")):
        assert np.shares_memory(c.data, big) and not c.data.flags.writeable
        assert type(c.data) is np.ndarray and c.type.shape == (1024, 1024)
    assert big.flags.writeable
    c = ir.const(big)
    with pytest.raises(ValueError, match="read-only"):
        c.data[0, 0] = 1.0
    big[0, 0] = -1.0  # documented: the IR holds a view; writing the source array shows
    assert c.data[0, 0] == -1.0


def test_constants_copy_only_what_must_be() -> None:
    base = np.arange(12, dtype=np.float64).reshape(3, 4)
    for given in (base.T, base[:, ::2], base.astype(">f8")):  # strided, byte-swapped
        c = ir.Constant(given)
        assert not np.shares_memory(c.data, base) and not c.data.flags.writeable
        assert c.data.flags.c_contiguous and c.data.dtype == np.float64 and c.data.dtype.isnative
        np.testing.assert_array_equal(c.data, given)
    assert ir.const(1.5).data.dtype == np.float32  # Python floats become float32
    assert ir.Constant([1.0, 2.0]).data.dtype == np.float32
    assert ir.Constant(np.float64(2.0)).data.dtype == np.float32
    assert ir.Constant(np.zeros(2)).data.dtype == np.float64  # an array keeps its dtype
