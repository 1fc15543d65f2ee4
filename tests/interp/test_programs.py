"""The reference interpreter on whole programs built with the Builder, checked against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

from rvm import op
from rvm.interp import Closure, interpret
from rvm.ir import (
    Builder,
    Call,
    Function,
    If,
    IRModule,
    Tuple,
    TupleGetItem,
    Var,
    VarBinding,
    const,
    scalar,
    seq,
    tensor,
)

RNG = np.random.default_rng(0)


def rand(*shape: int, dtype: str = "float32") -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def mlp_module() -> IRModule:
    bb = Builder()
    x = Var("x", tensor(("n", 8), "float32"))
    w1 = Var("w1", tensor((8, 16), "float32"))
    b1 = Var("b1", tensor((16,), "float32"))
    w2 = Var("w2", tensor((16, 4), "float32"))
    with bb.function("main", [x, w1, b1, w2]):
        h = bb.emit(op.relu(op.matmul(x, w1) + b1))  # nested: evaluated through the driver
        y = bb.emit(op.matmul(h, w2))
        bb.emit_output(op.softmax(y, axis=-1))
    return bb.get()


@pytest.mark.parametrize("batch", [1, 7])
def test_mlp_symbolic_batch(batch: int) -> None:
    mod = mlp_module()
    x, w1, b1, w2 = rand(batch, 8), rand(8, 16), rand(16), rand(16, 4)
    out = interpret(mod, "main", x, w1, b1, w2)
    h = np.maximum(x @ w1 + b1, 0) @ w2
    e = np.exp(h - h.max(-1, keepdims=True))
    expected = e / e.sum(-1, keepdims=True)
    assert out.dtype == np.float32 and out.shape == (batch, 4)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


def test_symbolic_attrs_resolved() -> None:
    bb = Builder()
    x = Var("x", tensor(("n", 2, 3), "float32"))
    with bb.function("main", [x]):
        flat = bb.emit(op.reshape(x, ("n", 6)))
        z = bb.emit(op.zeros(("n", 6), "float32"))
        bb.emit_output(flat + z + 1.0)
    mod = bb.get()
    for n in (2, 5):
        xv = rand(n, 2, 3)
        out = interpret(mod, "main", xv)
        np.testing.assert_allclose(out, xv.reshape(n, 6) + 1.0)
        assert out.dtype == np.float32


def test_tuples_returned_and_unpacked() -> None:
    bb = Builder()
    a = Var("a", tensor((3,), "float32"))
    with bb.function("split2", [a]):
        bb.emit_output(Tuple((a + 1.0, a * 2.0)))
    x = Var("x", tensor((3,), "float32"))
    with bb.function("main", [x]):
        t = bb.emit(Call(bb.global_var("split2"), (x,)))
        p = bb.emit(TupleGetItem(t, 0))
        q = bb.emit(TupleGetItem(t, 1))
        bb.emit_output(Tuple((q - p, Tuple((p,)))))
    mod = bb.get()
    xv = rand(3)
    diff, (p_val,) = interpret(mod, "main", xv)
    np.testing.assert_allclose(diff, xv * 2 - (xv + 1), rtol=1e-6)
    np.testing.assert_allclose(p_val, xv + 1)


def test_tuple_argument() -> None:
    bb = Builder()
    from rvm.ir import TupleType

    pair = Var("pair", TupleType((tensor(("n",), "float32"), tensor(("n",), "float32"))))
    with bb.function("main", [pair]):
        bb.emit_output(TupleGetItem(pair, 0) * TupleGetItem(pair, 1))
    xv, yv = rand(4), rand(4)
    np.testing.assert_allclose(interpret(bb.get(), "main", (xv, yv)), xv * yv)


def test_closure_captures_tensor() -> None:
    x = Var("x", tensor((4,), "float32"))
    k = Var("k", tensor((4,), "float32"))
    y = Var("y", tensor((4,), "float32"))
    add_k = Var("add_k")
    r1, r2 = Var("r1"), Var("r2")
    body = seq(
        [
            VarBinding(add_k, Function((y,), y + k)),
            VarBinding(r1, Call(add_k, (x,))),
            VarBinding(r2, Call(add_k, (r1,))),
        ],
        Tuple((r2, add_k)),
    )
    mod = IRModule({"main": Function((x, k), body)})
    xv, kv = rand(4), rand(4)
    out, fn = interpret(mod, "main", xv, kv)
    np.testing.assert_allclose(out, xv + 2 * kv, rtol=1e-6)
    assert isinstance(fn, Closure) and fn.name == "main.add_k"


def test_function_literal_called_directly_and_if() -> None:
    x = Var("x", tensor((4,), "float32"))
    y = Var("y", tensor((4,), "float32"))
    doubled = Call(Function((y,), y * 2.0), (x,))
    cond = op.sum(x) > 0.0
    mod = IRModule({"main": Function((x,), If(cond, doubled, op.negative(x)))})
    pos = np.abs(rand(4)) + 0.1
    np.testing.assert_allclose(interpret(mod, "main", pos), pos * 2)
    np.testing.assert_allclose(interpret(mod, "main", -pos), pos)


def rnn_module() -> IRModule:
    """``while i < steps: h = tanh(h @ w); i = i + 1`` as a tail-recursive local function."""
    h0 = Var("h0", tensor((1, 8), "float32"))
    w = Var("w", tensor((8, 8), "float32"))
    steps = Var("steps", scalar("int64"))
    h = Var("h", tensor((1, 8), "float32"))
    i = Var("i", scalar("int64"))
    loop = Var("loop")
    h2, i2 = Var("h2"), Var("i2")
    step = seq(
        [VarBinding(h2, op.tanh(op.matmul(h, w))), VarBinding(i2, i + 1)],
        Call(loop, (h2, i2)),
    )
    loop_fn = Function((h, i), If(i < steps, step, h))
    body = seq([VarBinding(loop, loop_fn)], Call(loop, (h0, const(0, "int64"))))
    return IRModule({"rnn": Function((h0, w, steps), body)})


@pytest.mark.parametrize("steps", [0, 3, 2000])
def test_while_loop_rnn(steps: int) -> None:
    h, w = rand(1, 8), rand(8, 8) * 0.3
    out = interpret(rnn_module(), "rnn", h, w, steps)
    expected = h
    for _ in range(steps):
        expected = np.tanh(expected @ w)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)


def attention_module() -> IRModule:
    bb = Builder()
    x = Var("x", tensor(("s", 16), "float32"))
    gamma = Var("gamma", tensor((16,), "float32"))
    beta = Var("beta", tensor((16,), "float32"))
    wq, wk, wv = (Var(n, tensor((16, 16), "float32")) for n in ("wq", "wk", "wv"))
    with bb.function("attention", [x, gamma, beta, wq, wk, wv]):
        ln = bb.emit(op.layer_norm(x, gamma, beta, axes=[-1], epsilon=1e-5))
        q = bb.emit(op.matmul(ln, wq))
        k = bb.emit(op.matmul(ln, wk))
        v = bb.emit(op.matmul(ln, wv))
        kt = bb.emit(op.transpose(k, (1, 0)))
        scores = bb.emit(op.matmul(q, kt) * 0.25)
        p = bb.emit(op.softmax(scores, axis=-1))
        bb.emit_output(op.matmul(p, v) + x)
    return bb.get()


@pytest.mark.parametrize("length", [3, 11])
def test_attention_symbolic_length(length: int) -> None:
    x, gamma, beta = rand(length, 16), rand(16), rand(16)
    wq, wk, wv = rand(16, 16), rand(16, 16), rand(16, 16)
    out = interpret(attention_module(), "attention", x, gamma, beta, wq, wk, wv)
    mu = x.mean(-1, keepdims=True)
    ln = (x - mu) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * gamma + beta
    q, k, v = ln @ wq, ln @ wk, ln @ wv
    s = q @ k.T * 0.25
    e = np.exp(s - s.max(-1, keepdims=True))
    expected = e / e.sum(-1, keepdims=True) @ v + x
    assert out.shape == (length, 16) and out.dtype == np.float32
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


def test_python_scalars_take_the_annotated_dtype() -> None:
    bb = Builder()
    a = Var("a", scalar("float32"))
    b = Var("b", tensor((3,), "int32"))
    with bb.function("main", [a, b]):
        bb.emit_output(Tuple((a * 2.0, b + b)))
    x, y = interpret(bb.get(), "main", 1.5, [1, 2, 3])
    assert x.dtype == np.float32 and float(x) == 3.0
    assert y.dtype == np.int32 and y.tolist() == [2, 4, 6]


def test_array_like_inputs() -> None:
    class ArrayLike:
        def __init__(self, data: np.ndarray) -> None:
            self.data = data

        def __array__(self, dtype: object = None, copy: object = None) -> np.ndarray:
            return self.data

    bb = Builder()
    a = Var("a", tensor((2,), "float32"))
    with bb.function("main", [a]):
        bb.emit_output(a + a)
    mod = bb.get()

    class DLPackOnly:
        def __init__(self, data: np.ndarray) -> None:
            self.data = data

        def __dlpack__(self, **kwargs: object) -> object:
            return self.data.__dlpack__(**kwargs)

        def __dlpack_device__(self) -> tuple[int, int]:
            return self.data.__dlpack_device__()

    data = rand(2)
    np.testing.assert_allclose(interpret(mod, "main", ArrayLike(data)), data * 2)
    np.testing.assert_allclose(interpret(mod, "main", memoryview(data)), data * 2)
    np.testing.assert_allclose(interpret(mod, "main", DLPackOnly(data)), data * 2)
    swapped = data.astype(">f4")
    np.testing.assert_allclose(interpret(mod, "main", swapped), data * 2)


def test_returning_a_constant_and_a_global_function() -> None:
    bb = Builder()
    a = Var("a", tensor((2,), "float32"))
    with bb.function("inc", [a]):
        bb.emit_output(a + 1.0)
    with bb.function("main", []):
        bb.emit_output(Tuple((const(np.arange(3, dtype="int64")), bb.global_var("inc"))))
    arr, fn = interpret(bb.get(), "main")
    assert arr.tolist() == [0, 1, 2] and arr.dtype == np.int64
    assert isinstance(fn, Closure) and fn.name == "inc"


def test_concat_and_stack_take_a_tuple() -> None:
    bb = Builder()
    a = Var("a", tensor(("n", 2), "float32"))
    b = Var("b", tensor(("m", 2), "float32"))
    with bb.function("main", [a, b]):
        c = bb.emit(op.concat([a, b], axis=0))
        s = bb.emit(op.stack([a, a], axis=0))
        bb.emit_output(Tuple((c, s)))
    av, bv = rand(3, 2), rand(5, 2)
    c, s = interpret(bb.get(), "main", av, bv)
    np.testing.assert_array_equal(c, np.concatenate([av, bv]))
    np.testing.assert_array_equal(s, np.stack([av, av]))


def test_higher_order_function_and_non_tail_closure_call() -> None:
    from rvm.ir import FuncType

    vec = tensor((3,), "float32")
    f = Var("f", FuncType((vec,), vec))
    v = Var("v", vec)
    twice_body = seq([VarBinding(once := Var("once"), Call(f, (v,)))], Call(f, (once,)))
    twice = Function((f, v), twice_body)
    x, y = Var("x", vec), Var("y", vec)
    inc, r = Var("inc"), Var("r")
    main_body = seq(
        [
            VarBinding(inc, Function((y,), y + x)),  # captures x
            VarBinding(r, Call(twice_gv := __import__("rvm").ir.GlobalVar("twice"), (inc, x))),
        ],
        r * 2.0,
    )
    mod = IRModule(
        {"twice": twice, "main": Function((x,), main_body)}, global_vars={"twice": twice_gv}
    )
    xv = rand(3)
    np.testing.assert_allclose(interpret(mod, "main", xv), 6 * xv, rtol=1e-6)


def test_closure_resolves_outer_symbolic_dims() -> None:
    x = Var("x", tensor(("n", 4), "float32"))
    y = Var("y", tensor(None, "float32"))
    flatten = Var("flatten")
    fn = Function((y,), op.reshape(y, ("n", 2, 2)))
    body = seq([VarBinding(flatten, fn)], Call(flatten, (x,)))
    mod = IRModule({"main": Function((x,), body)})
    for n in (1, 3):
        xv = rand(n, 4)
        np.testing.assert_array_equal(interpret(mod, "main", xv), xv.reshape(n, 2, 2))


def test_annotated_binding_binds_a_new_dim() -> None:
    bb = Builder()
    x = Var("x", tensor(("n",), "float32"))
    with bb.function("main", [x]):
        # `m` is bound by the annotation (a match_cast), then used by an attribute.
        y = bb.emit(op.concat([x, x]), name="y", annotation=tensor(("m",), "float32"))
        bb.emit_output(Tuple((op.reshape(y, (2, "n")), op.zeros(("m",), "int32"))))
    xv = rand(3)
    folded, zeros = interpret(bb.get(), "main", xv)
    np.testing.assert_array_equal(folded, np.stack([xv, xv]))
    assert zeros.shape == (6,) and zeros.dtype == np.int32


def test_deeply_nested_expression() -> None:
    """A 5000-deep expression built with Python operators, evaluated without recursion."""
    x = Var("x", tensor((2,), "float32"))
    e = x
    for _ in range(5000):
        e = e + x
    mod = IRModule({"main": Function((x,), e)})
    xv = np.ones(2, "float32")
    np.testing.assert_array_equal(interpret(mod, "main", xv), xv * 5001)


def test_mutual_tail_recursion() -> None:
    bb = Builder()
    n = Var("n", scalar("int64"))
    m = Var("m", scalar("int64"))
    with bb.function("is_even", [n]):
        c = bb.emit(n == 0)
        bb.emit_output(If(c, const(True), Call(bb.global_var("is_odd"), (n - 1,))))
    with bb.function("is_odd", [m]):
        c = bb.emit(m == 0)
        bb.emit_output(If(c, const(False), Call(bb.global_var("is_even"), (m - 1,))))
    mod = bb.get()
    assert bool(interpret(mod, "is_even", 20_001)) is False
    assert bool(interpret(mod, "is_odd", 20_001)) is True
