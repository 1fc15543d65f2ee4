"""Bad input to the reference interpreter: clear errors naming function, parameter, expectation."""

from __future__ import annotations

import re

import numpy as np
import pytest

from rvm import op
from rvm.errors import DTypeError, FunctionNotFoundError, RVMError, ShapeError
from rvm.interp import InterpError, interpret
from rvm.ir import (
    ADTType,
    Builder,
    Call,
    Clause,
    Match,
    PatternConstructor,
    PatternVar,
    Tuple,
    TupleType,
    Var,
    scalar,
    tensor,
)
from rvm.runtime.objects import ADT


def three_arg_module():
    bb = Builder()
    x = Var("x", tensor(("n", 4), "float32"))
    y = Var("y", tensor(("n", 4), "float32"))
    z = Var("z", tensor((4,), "float32"))
    with bb.function("main", [x, y, z]):
        bb.emit_output(x + y + z)
    return bb.get()


F32 = np.float32


def test_wrong_argument_count() -> None:
    with pytest.raises(TypeError, match=re.escape("main takes 3 arguments, got 2")):
        interpret(three_arg_module(), "main", np.zeros((3, 4), F32), np.zeros((3, 4), F32))


def test_wrong_dtype() -> None:
    x = np.zeros((3, 4))
    with pytest.raises(
        DTypeError, match=re.escape("main: argument 0 'x' expects dtype float32, got float64")
    ):
        interpret(three_arg_module(), "main", x, x, np.zeros(4, F32))


def test_dtype_error_is_a_type_error() -> None:
    assert issubclass(DTypeError, TypeError) and issubclass(DTypeError, RVMError)


def test_inconsistent_symbolic_dim() -> None:
    msg = "main: argument 1 'y' has shape (2, 4), but n = 3 from argument 0 'x'"
    with pytest.raises(ShapeError, match=re.escape(msg)):
        interpret(
            three_arg_module(),
            "main",
            np.zeros((3, 4), F32),
            np.zeros((2, 4), F32),
            np.zeros(4, F32),
        )


def test_wrong_fixed_dim_and_rank() -> None:
    mod = three_arg_module()
    x = np.zeros((3, 4), F32)
    with pytest.raises(
        ShapeError, match=r"main: argument 2 'z' has shape \(5,\), but dimension 0 must be 4"
    ):
        interpret(mod, "main", x, x, np.zeros(5, F32))
    with pytest.raises(ShapeError, match=r"main: argument 1 'y' expects rank 2 .*got shape \(4,\)"):
        interpret(mod, "main", x, np.zeros(4, F32), np.zeros(4, F32))


def test_wrong_kind() -> None:
    mod = three_arg_module()
    x = np.zeros((3, 4), F32)
    with pytest.raises(TypeError, match=r"main: argument 2 'z' expects a tensor .* got a tuple"):
        interpret(mod, "main", x, x, (x,))
    with pytest.raises(TypeError, match=r"argument 2 'z' expects a tensor, got str"):
        interpret(mod, "main", x, x, "abc")


def test_python_values_must_fit_the_dtype() -> None:
    bb = Builder()
    i = Var("i", scalar("int64"))
    b = Var("b", scalar("int8"))
    with bb.function("main", [i, b]):
        bb.emit_output(Tuple((i, b)))
    mod = bb.get()
    with pytest.raises(DTypeError, match="main: argument 0 'i' expects dtype int64, got a Python"):
        interpret(mod, "main", 2.5, 1)
    with pytest.raises(
        DTypeError, match="main: argument 1 'b' expects dtype int8; 300 does not fit"
    ):
        interpret(mod, "main", 2, 300)
    with pytest.raises(DTypeError, match="expects dtype int64, got int32"):
        interpret(mod, "main", np.int32(2), 1)


def test_tuple_field_errors_name_the_field() -> None:
    bb = Builder()
    p = Var("p", TupleType((tensor(("n",), "float32"), tensor(("n",), "float32"))))
    with bb.function("main", [p]):
        bb.emit_output(p[0] + p[1])
    mod = bb.get()
    msg = "main: argument 0 'p' field 1 has shape (3,), but n = 2 from argument 0 'p' field 0"
    with pytest.raises(ShapeError, match=re.escape(msg)):
        interpret(mod, "main", (np.zeros(2, F32), np.zeros(3, F32)))
    with pytest.raises(TypeError, match="expects a tuple of 2 fields, got 1 fields"):
        interpret(mod, "main", (np.zeros(2, F32),))


def test_internal_call_is_checked() -> None:
    bb = Builder()
    a = Var("a", tensor((4,), "float32"))
    with bb.function("inner", [a]):
        bb.emit_output(a * 2.0)
    x = Var("x", tensor(("n",), "float32"))
    with bb.function("main", [x]):
        bb.emit_output(Call(bb.global_var("inner"), (x,)))
    mod = bb.get()
    assert interpret(mod, "main", np.ones(4, F32)).tolist() == [2.0] * 4
    with pytest.raises(ShapeError, match=r"inner: argument 0 'a' has shape \(3,\)"):
        interpret(mod, "main", np.ones(3, F32))


def test_no_match_clause() -> None:
    bb = Builder()
    adt = bb.add_adt("List", [("Nil", []), ("Cons", [tensor((), "float32"), ADTType("List")])])
    _, cons = adt.constructors
    xs = Var("xs", ADTType("List"))
    h, t = Var("h"), Var("t")
    with bb.function("head", [xs]):
        clause = Clause(PatternConstructor(cons, (PatternVar(h), PatternVar(t))), h)
        bb.emit_output(Match(xs, (clause,)))
    mod = bb.get()
    with pytest.raises(InterpError, match=r"head: no match clause matches Nil\(\)"):
        interpret(mod, "head", ADT(0, (), "Nil"))
    with pytest.raises(TypeError, match="head: argument 0 'xs' expects a List value"):
        interpret(mod, "head", np.zeros(2, F32))


def test_failing_op_names_function_and_binding() -> None:
    bb = Builder()
    x = Var("x", tensor(("n",), "float32"))
    with bb.function("main", [x]):
        y = bb.emit(op.reshape(x, (2, 3)), name="y")
        bb.emit_output(y)
    mod = bb.get()
    assert interpret(mod, "main", np.zeros(6, F32)).shape == (2, 3)
    with pytest.raises(InterpError, match=r"main, binding 'y': op\.reshape failed"):
        interpret(mod, "main", np.zeros(5, F32))


def test_unknown_function() -> None:
    with pytest.raises(FunctionNotFoundError) as info:
        interpret(three_arg_module(), "nope")
    assert str(info.value) == "no function 'nope' in the module; it has: main"
    assert isinstance(info.value, RVMError) and isinstance(info.value, KeyError)


def test_annotated_binding_is_checked() -> None:
    bb = Builder()
    x = Var("x", tensor(("n",), "float32"))
    with bb.function("main", [x]):
        y = bb.emit(op.concat([x, x]), name="y", annotation=tensor(("n",), "float32"))
        bb.emit_output(y)
    msg = "main: binding 'y' has shape (4,), but n = 2 from argument 0 'x'"
    with pytest.raises(ShapeError, match=re.escape(msg)):
        interpret(bb.get(), "main", np.zeros(2, F32))


def test_if_needs_a_bool_scalar() -> None:
    from rvm.ir import Function, If, IRModule

    c = Var("c", tensor(None, None))
    x = Var("x", tensor((2,), "float32"))
    mod = IRModule({"main": Function((c, x), If(c, x, x * 2.0))})
    assert interpret(mod, "main", np.array(True), np.ones(2, F32)).tolist() == [1.0, 1.0]
    with pytest.raises(DTypeError, match=r"main: `if` needs a 0-d bool tensor, got a tensor"):
        interpret(mod, "main", np.array(1.0), np.ones(2, F32))
    with pytest.raises(ShapeError, match=r"`if` needs a 0-d bool tensor, got a tensor of shape"):
        interpret(mod, "main", np.array([True]), np.ones(2, F32))


def test_unbound_symbolic_dim_in_attribute() -> None:
    from rvm.ir import Function, IRModule

    x = Var("x", tensor(None, "float32"))
    mod = IRModule({"main": Function((x,), op.reshape(x, ("k", 2)))})
    with pytest.raises(
        ShapeError, match="op.reshape attribute shape uses the symbolic dimension 'k'"
    ):
        interpret(mod, "main", np.zeros(4, F32))


def test_bad_input_does_not_corrupt_a_later_call() -> None:
    mod = three_arg_module()
    x = np.ones((2, 4), F32)
    with pytest.raises(ShapeError):
        interpret(mod, "main", x, np.ones((3, 4), F32), np.ones(4, F32))
    np.testing.assert_array_equal(interpret(mod, "main", x, x, np.ones(4, F32)), 3 * x)
