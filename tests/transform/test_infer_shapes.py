"""infer_shapes: types recorded everywhere; provably wrong shapes name function and binding."""

from __future__ import annotations

import pytest

from rvm import op
from rvm.errors import IRError
from rvm.ir import (
    Call,
    Function,
    GlobalVar,
    If,
    IRModule,
    Var,
    VarBinding,
    assert_structural_equal,
    scalar,
    seq,
    tensor,
    verify,
)
from rvm.ir.types import FuncType, TensorType
from rvm.transform.infer_shapes import incompatible, infer_shapes
from rvm.transform.normalize import normalize

F32 = "float32"


def all_typed(mod: IRModule) -> bool:
    stack: list[object] = [f for _, f in mod.items()]
    while stack:
        node = stack.pop()
        if node.type is None:  # type: ignore[attr-defined]
            return False
        if isinstance(node, Function):
            stack.extend(node.params)
            stack.append(node.body)
        elif hasattr(node, "blocks"):
            for b in node.bindings:
                stack.extend((b.var, b.value))
            stack.append(node.body)
        elif isinstance(node, If):
            stack.extend((node.cond, node.true_branch, node.false_branch))
        elif isinstance(node, Call):
            stack.extend(node.args)
    return True


def two_functions() -> tuple[IRModule, GlobalVar]:
    x, y = Var("x", tensor(("n", 4), F32)), Var("y", tensor(("m", 4), F32))
    g = GlobalVar("g")
    a, b, r = Var("a"), Var("b"), Var("r")
    g_fn = Function((y,), seq([VarBinding(a, op.relu(y))], a))
    main = Function((x,), seq([VarBinding(b, Call(g, (x,))), VarBinding(r, b * 2.0)], r))
    return IRModule({"g": g_fn, "main": main}, global_vars={"g": g}), g


def test_types_recorded_and_module_unchanged():
    before, g = two_functions()
    after = infer_shapes(normalize(before))
    assert_structural_equal(after, normalize(before))
    assert all_typed(after)
    assert after.get_global_var("g").type == FuncType(
        (tensor(("m", 4), F32),), tensor(("m", 4), F32)
    )
    # the caller's symbolic dimension flows through the call
    assert after["main"].body.body.type == tensor(("n", 4), F32)
    verify(after)


def test_stale_types_are_refreshed():
    x = Var("x", tensor((2, 4), F32))
    a = Var("a")
    call = op.sum(x, axis=1)
    call.with_type(TensorType((7,), F32))  # a pass left a wrong recorded type behind
    mod = IRModule({"main": Function((x,), seq([VarBinding(a, call)], a))})
    after = infer_shapes(mod)
    assert after["main"].body.body.type == tensor((2,), F32)


def test_incompatible_op_shapes_name_function_and_binding():
    x, w = Var("x", tensor((2, 3), F32)), Var("w", tensor((3, 5), F32))
    a = Var("a")
    mod = IRModule({"main": Function((x, w), seq([VarBinding(a, op.matmul(x, w))], a))})
    # A module cannot be built with wrong shapes (IRModule infers); a pass that records a
    # type in place can still make one, and infer_shapes must catch it.
    w.with_type(tensor((4, 5), F32))
    with pytest.raises(IRError, match=r"function main: .*\n  in binding: "):
        infer_shapes(mod)


def test_call_argument_of_wrong_shape():
    y = Var("y", tensor((3,), F32))
    x = Var("x", tensor((5,), F32))
    g, r = GlobalVar("g"), Var("r")
    mod = IRModule(
        {
            "g": Function((y,), seq([], y)),
            "main": Function((x,), seq([VarBinding(r, Call(g, (x,)))], r)),
        },
        global_vars={"g": g},
    )
    with pytest.raises(IRError, match=r"function main: argument 0 of g has type .*\(5,\)"):
        infer_shapes(mod)


def test_declared_return_type_contradicted():
    x = Var("x", tensor((3,), F32))
    mod = IRModule({"main": Function((x,), seq([], x), tensor((4,), F32))})
    with pytest.raises(IRError, match="function main: declared to return"):
        infer_shapes(mod)


def test_incompatible_is_only_for_proofs():
    assert incompatible(tensor((3,), F32), tensor((4,), F32))
    assert incompatible(tensor((3,), F32), tensor((3,), "int64"))
    assert incompatible(tensor((3,), F32), tensor((3, 1), F32))
    assert not incompatible(tensor(("n",), F32), tensor((4,), F32))
    assert not incompatible(tensor(None, F32), tensor((4, 2), F32))
    assert not incompatible(tensor((3,), None), tensor((3,), F32))
    assert not incompatible(scalar("int64"), tensor(None, None))
