"""Dimension expressions: canonical form, arithmetic, text, and their use in types."""

from __future__ import annotations

import pickle

import pytest

from rvm.errors import IRError
from rvm.ir import dims as D
from rvm.ir.infer import bind_dims, substitute_dims
from rvm.ir.types import TensorType, check_dim


def test_sum_is_canonical():
    a = D.add("past", "seq")
    assert isinstance(a, D.DimExpr)
    assert a == D.add("seq", "past") == "past + seq"
    assert hash(a) == hash(D.add("seq", "past"))


def test_simplifies_to_names_and_ints():
    assert D.sub(D.add("a", 1), 1) == "a" and D.is_symbol(D.sub(D.add("a", 1), 1))
    assert D.sub(D.add("past", "seq"), "past") == "seq"
    assert D.sub("n", "n") == 0
    assert D.mul(D.add("n", 2), 0) == 0
    assert D.add(3, 4) == 7
    assert D.add("n", None) is None and D.mul(None, 2) is None


def test_products_and_coefficients():
    assert D.mul("seq", "heads") == D.mul("heads", "seq") == "heads*seq"
    assert D.sub(D.mul(2, "n"), 1) == "2*n - 1"
    assert D.mul(D.add("n", 1), D.sub("n", 1)) == "n*n - 1"
    assert D.sub(0, "n") == "-n"


def test_floordiv_and_mod():
    assert D.floordiv(D.add(D.mul(4, "n"), 2), 2) == "2*n + 1"
    assert D.mod(D.add(D.mul(4, "n"), 3), 2) == 1
    half = D.floordiv(D.add("n", 1), 2)
    assert half == "(n + 1) // 2" and D.symbols(half) == {"n"}
    assert D.mul(2, half) == "2*((n + 1) // 2)"
    assert D.mod("n", "k") == "n % k"
    assert D.floordiv(7, 2) == 3 and D.mod(-7, 2) == 1
    assert D.floordiv("n", 0) is None


@pytest.mark.parametrize(
    "text",
    ["past + seq", "heads*seq", "2*n - 1", "(n + 1) // 2", "2*((n + 1) // 2) - m", "n % k + 1"],
)
def test_text_round_trips(text):
    d = D.parse_dim(text)
    assert isinstance(d, D.DimExpr) and str(d) == text
    assert D.parse_dim(str(d)) == d
    assert pickle.loads(pickle.dumps(d)) == d


def test_parse_canonicalizes():
    assert D.parse_dim("seq+past") == "past + seq"
    assert D.parse_dim("(a + 1) - 1") == "a"
    assert D.parse_dim("3 * 4") == 12
    with pytest.raises(IRError, match="a dimension must be"):
        D.parse_dim("n ** 2")
    with pytest.raises(IRError, match="a dimension must be"):
        D.parse_dim("f(n)")


def test_evaluate_and_substitute():
    d = D.parse_dim("(n + 1) // 2 * k - 1")
    assert D.evaluate(d, {"n": 4, "k": 3}) == 5
    assert D.substitute(d, {"n": 3, "k": "m"}) == "2*m - 1"
    assert D.substitute(d, {"n": 3}) is None
    assert D.symbols(d) == {"n", "k"}


def test_tensor_types_take_expressions():
    ty = TensorType(("b", "seq + past"), "float32")
    assert ty.shape[1] == D.add("past", "seq") and isinstance(ty.shape[1], D.DimExpr)
    assert ty == TensorType(("b", D.add("seq", "past")), "float32")
    assert check_dim("n * 1") == "n"
    with pytest.raises(IRError, match="must be >= 0"):
        check_dim("2 - 3")


def test_callee_expressions_take_the_callers_dims():
    params = (TensorType(("b", "past"), "float32"), TensorType(("b", "past + 1"), "float32"))
    args = [TensorType((2, "p"), "float32"), TensorType((2, "q"), "float32")]
    dims = bind_dims(params, args)
    assert dims == {"b": 2, "past": "p"}  # an expression binds nothing
    ret = TensorType(("b", "past + seq", "past + 1"), "float32")
    assert substitute_dims(ret, dims) == TensorType((2, None, "p + 1"), "float32")
