"""The reference interpreter on programs written in rvm script (the design examples).

No ``from __future__ import annotations`` here: script annotations like ``T[(4,), "float32"]``
are expressions, not quoted types (ruff's UP037 would "fix" them otherwise). Ruff also reads
the strings inside ``T[...]`` as forward references, hence the file-wide F821 exemption.
"""
# ruff: noqa: F821

import re

import numpy as np
import pytest

import rvm
from rvm import op
from rvm.interp import Interpreter, interpret

script = pytest.importorskip("rvm.script")
if not hasattr(script, "module"):
    pytest.skip("rvm.script has no parser yet", allow_module_level=True)

from rvm.script import T, func, module  # noqa: E402

RNG = np.random.default_rng(1)


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype("float32")


@module
class MLP:
    @func
    def main(x: T[("n", 784), "float32"], w: T[(784, 128), "float32"], b: T[(128,), "float32"]):
        return op.relu(op.matmul(x, w) + b)


@pytest.mark.parametrize("batch", [1, 6])
def test_mlp(batch: int) -> None:
    x, w, b = rand(batch, 784), rand(784, 128) * 0.05, rand(128)
    out = interpret(MLP, "main", x, w, b)
    np.testing.assert_allclose(out, np.maximum(x @ w + b, 0), rtol=1e-4, atol=1e-4)


# The design example program (its `List` data type too), shared with the VM tests.
from rvm.testing.programs import Design as Prog  # noqa: E402
from rvm.testing.programs import List  # noqa: E402, F401  (used by the script below)


def _cons_list(items: list[np.ndarray]) -> object:
    from rvm.runtime.objects import ADT

    mod_list = Prog.adts["List"]
    nil, cons = mod_list.constructor("Nil"), mod_list.constructor("Cons")
    value = ADT(nil.tag, (), "Nil")
    for item in reversed(items):
        value = ADT(cons.tag, (item, value), "Cons")
    return value


def test_adt_fold_is_a_loop() -> None:
    """``lv = total(t, ...); return lv`` is a tail call: the fold runs in constant space."""
    items = [np.full(2, 1.0, "float32")] * 30_000
    it = Interpreter(Prog)
    out = it.call("total", _cons_list(items), np.zeros(2, "float32"))
    np.testing.assert_allclose(out, [30_000.0, 30_000.0])
    assert it.max_depth == 0


def test_while_loop() -> None:
    h, w = rand(1, 16), rand(16, 16) * 0.2
    expected = h
    for _ in range(5):
        expected = np.tanh(expected @ w)
    np.testing.assert_allclose(interpret(Prog, "rnn", h, w, 5), expected, rtol=1e-5, atol=1e-6)
    assert interpret(Prog, "rnn", h, w, 20_000).shape == (1, 16)  # a loop, not a recursion


def test_closure_tuple_and_if() -> None:
    x, k = np.ones(4, "float32"), np.full(4, 0.5, "float32")
    np.testing.assert_allclose(interpret(Prog, "main", x, k), x + k)
    np.testing.assert_allclose(interpret(Prog, "main", -x, k), -2 * x)


def test_script_round_trip_runs_the_same() -> None:
    again = rvm.script.parse(Prog.script())
    x, k = np.ones(4, "float32"), np.full(4, 0.5, "float32")
    np.testing.assert_allclose(interpret(again, "main", x, k), interpret(Prog, "main", x, k))


@module
class Rec:
    @func
    def fact(n: T[(), "int64"]):
        if n <= 1:
            return rvm.const(1, "int64")
        else:
            return n * fact(n - 1)

    @func
    def fib(n: T[(), "int64"]):
        if n < 2:
            return n
        return fib(n - 1) + fib(n - 2)

    @func
    def length(xs: List):
        match xs:
            case Cons(_, t):
                return length(t) + rvm.const(1, "int64")
            case Nil():
                return rvm.const(0, "int64")


def test_script_factorial_and_fibonacci() -> None:
    fact = interpret(Rec, "fact", 20)
    assert fact.dtype == np.int64 and int(fact) == 2432902008176640000
    assert int(interpret(Rec, "fib", 15)) == 610


def test_script_non_tail_list_recursion() -> None:
    items = [np.zeros(2, "float32")] * 2000
    assert int(interpret(Rec, "length", _cons_list(items))) == 2000


@module
class Attention:
    @func
    def main(
        x: T[("s", 16), "float32"],
        gamma: T[(16,), "float32"],
        beta: T[(16,), "float32"],
        w_qkv: T[(16, 48), "float32"],
    ):
        h = op.layer_norm(x, gamma, beta, axes=[-1], epsilon=1e-5)
        qkv = op.reshape(op.matmul(h, w_qkv), ("s", 3, 16))
        q, k, v = op.split(qkv, 3, axis=1)
        q = op.reshape(q, ("s", 16))
        k = op.reshape(k, ("s", 16))
        v = op.reshape(v, ("s", 16))
        p = op.softmax(op.matmul(q, op.transpose(k, (1, 0))) * 0.25, axis=-1)
        return op.matmul(p, v) + x, p


@pytest.mark.parametrize("length", [2, 9])
def test_script_attention(length: int) -> None:
    x, gamma, beta, w = rand(length, 16), rand(16), rand(16), rand(16, 48)
    out, probs = interpret(Attention, "main", x, gamma, beta, w)
    ln = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    qkv = (ln * gamma + beta) @ w
    q, k, v = qkv[:, :16], qkv[:, 16:32], qkv[:, 32:]
    s = q @ k.T * 0.25
    e = np.exp(s - s.max(-1, keepdims=True))
    p = e / e.sum(-1, keepdims=True)
    np.testing.assert_allclose(probs, p, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out, p @ v + x, rtol=1e-4, atol=1e-4)
    assert out.shape == (length, 16) and out.dtype == np.float32


@module
class Pair:
    @func
    def main(x: T[("n", 4), "float32"], y: T[("n", 4), "float32"]):
        return x + y


def test_script_errors() -> None:
    x = np.zeros((3, 4), "float32")
    msg = "main: argument 1 'y' has shape (2, 4), but n = 3 from argument 0 'x'"
    with pytest.raises(rvm.ShapeError, match=re.escape(msg)):
        interpret(Pair, "main", x, np.zeros((2, 4), "float32"))
    with pytest.raises(TypeError, match="main takes 2 arguments, got 1"):
        interpret(Pair, "main", x)
    with pytest.raises(rvm.DTypeError, match="argument 1 'y' expects dtype float32, got int64"):
        interpret(Pair, "main", x, np.zeros((3, 4), "int64"))
