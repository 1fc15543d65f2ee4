"""Sample programs shared by the interpreter, VM, JIT and exec-mode tests and the benchmarks.

Each `Program` holds a module, the function to call, and a function making its arguments; the
expected result comes from NumPy (``numpy_ref``) where a closed form is handy, and always from
`rvm.interpret`.
"""

# ruff: noqa: F821
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import rvm
from rvm import op
from rvm.ir import IRModule
from rvm.runtime.objects import ADT
from rvm.script import Callable as Fn
from rvm.script import T, adt, func, module


@dataclass
class Program:
    """A named sample program with inputs and an optional NumPy reference."""

    name: str
    mod: IRModule
    fname: str
    make_args: Callable[[np.random.Generator], tuple]
    numpy_ref: Callable[..., Any] | None = None
    tags: tuple[str, ...] = field(default_factory=tuple)

    def args(self, seed: int = 0) -> tuple:
        return self.make_args(np.random.default_rng(seed))


def _f32(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype("float32")


@module
class MLP:
    @func
    def main(
        x: T[("n", 784), "float32"],
        w1: T[(784, 128), "float32"],
        b1: T[(128,), "float32"],
        w2: T[(128, 10), "float32"],
        b2: T[(10,), "float32"],
    ):
        h = op.relu(op.matmul(x, w1) + b1)
        return op.softmax(op.matmul(h, w2) + b2, axis=-1)


def _mlp_ref(x, w1, b1, w2, b2):
    h = np.maximum(x @ w1 + b1, 0)
    z = h @ w2 + b2
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)).astype("float32")


@module
class Recursion:
    @func
    def factorial(n: T[(), "int64"]):
        if n <= 1:
            return rvm.const(1, "int64")
        else:
            return n * factorial(n - 1)

    @func
    def fib(n: T[(), "int64"]):
        if n < 2:
            return n
        else:
            return fib(n - 1) + fib(n - 2)

    @func
    def tail_sum(n: T[(), "int64"], acc: T[(), "int64"]):
        if n == 0:
            return acc
        else:
            return tail_sum(n - 1, acc + n)


@module
class Mutual:
    """even and odd call each other in tail position (the native mode merges the cycle)."""

    @func
    def even(n: T[(), "int64"]):
        if n == 0:
            return rvm.const(1, "int64")
        else:
            return odd(n - 1)

    @func
    def odd(n: T[(), "int64"]):
        if n == 0:
            return rvm.const(0, "int64")
        else:
            return even(n - 1)


@module
class Closures:
    @func
    def main(x: T[(4,), "float32"], k: T[(4,), "float32"]):
        def add_k(y: T[(4,), "float32"]):
            return y + k

        scale = lambda y: y * 2.0  # noqa: E731
        a, b = (add_k(x), scale(x))
        if op.sum(a) > 0.0:
            return a
        else:
            return b


@adt
class List:
    Nil: ()
    Cons: (T[(2,), "float32"], "List")


@module
class Lists:
    @func
    def total(xs: List, acc: T[(2,), "float32"]):
        match xs:
            case Cons(h, t):
                return total(t, acc + h)
            case Nil():
                return acc

    @func
    def build(n: T[(), "int64"], xs: List):
        if n == 0:
            return xs
        else:
            return build(n - 1, Cons(op.full((2,), 1.0, "float32") * op.cast(n, "float32"), xs))

    @func
    def sum_nt(xs: List):
        match xs:
            case Cons(h, t):
                return h + sum_nt(t)  # not a tail call: the VM's frame stack grows
            case Nil():
                return op.zeros((2,), "float32")

    @func
    def main(n: T[(), "int64"]):
        xs = build(n, Nil())
        return total(xs, op.zeros((2,), "float32"))

    @func
    def main_nt(n: T[(), "int64"]):
        return sum_nt(build(n, Nil()))


@adt
class Opt:
    Nothing: ()
    Some: (T[(4,), "float32"],)


@adt
class Shape:
    """Three constructors whose fields differ in dtype and rank at the same position."""

    Circle: (T[(), "float32"],)
    Rect: (T[(2,), "float32"], T[(), "float64"])
    Label: (T[(3,), "int64"],)


@module
class DataTypes:
    """Non-recursive data types: built, matched (in a loop too), passed in and returned."""

    @func
    def find(x: T[(4,), "float32"]):
        if op.sum(x) > 0.0:
            return Some(x * 2.0)
        else:
            return Nothing()

    @func
    def get_or(o: Opt, d: T[(4,), "float32"]):
        match o:
            case Some(v):
                return v
            case Nothing():
                return d

    @func
    def main(x: T[(4,), "float32"], d: T[(4,), "float32"]):
        return get_or(find(x), d)

    @func
    def make(k: T[(), "int64"], x: T[(2,), "float32"], y: T[(3,), "float32"]):
        if k < 3:
            return Circle(op.sum(x))
        else:
            if k < 6:
                return Rect(x, op.cast(op.sum(y), "float64"))
            else:
                return Label(op.cast(y, "int64"))

    @func
    def area(s: Shape):
        match s:
            case Circle(r):
                return r * r * 3.0
            case Rect(wh, k):
                return op.sum(wh) * op.cast(k, "float32")
            case Label(ids):
                return op.cast(op.sum(ids), "float32")

    @func
    def total(n: T[(), "int64"], x: T[(2,), "float32"], y: T[(3,), "float32"]):
        i = rvm.const(0, "int64")
        acc = rvm.const(0.0, "float32")
        while i < n:
            acc = acc + area(make(i - (i // 9) * 9, x, y))
            i = i + 1
        return acc


def _area_ref(k: int, x: np.ndarray, y: np.ndarray) -> np.float32:
    if k < 3:
        return np.float32(x.sum() * x.sum() * 3)
    if k < 6:
        return np.float32(x.sum() * np.float32(y.astype("float64").sum()))
    return np.float32(y.astype("int64").sum())


def _total_ref(n: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    acc = np.float32(0)
    for i in range(int(n)):
        acc = np.float32(acc + _area_ref(i % 9, x, y))
    return np.array(acc, "float32")


_F4 = Fn[[T[(4,), "float32"]], T[(4,), "float32"]]


@module
class HigherOrder:
    """Closures passed to another function, which calls them in a loop; one returned."""

    @func
    def apply_n(f: _F4, x: T[(4,), "float32"], n: T[(), "int64"]):
        i = rvm.const(0, "int64")
        while i < n:
            x = f(x)
            i = i + 1
        return x

    @func
    def main(x: T[(4,), "float32"], k: T[(4,), "float32"], n: T[(), "int64"]):
        def add_k(y: T[(4,), "float32"]):
            return y * 0.5 + k

        def scale(y: T[(4,), "float32"]):
            return y * 0.9

        return apply_n(scale, apply_n(add_k, x, n), n)

    @func
    def make(k: T[(4,), "float32"]):
        def shift(y: T[(4,), "float32"]):
            return y - k

        return shift


def _higher_order_ref(x: np.ndarray, k: np.ndarray, n: np.ndarray) -> np.ndarray:
    for _ in range(int(n)):
        x = x * np.float32(0.5) + k
    for _ in range(int(n)):
        x = x * np.float32(0.9)
    return x


@module
class Design:
    """The project's design example: a data-type fold, a while-loop RNN and a closure."""

    @func
    def total(xs: List, acc: T[(2,), "float32"]):
        match xs:
            case Cons(h, t):
                return total(t, acc + h)  # recursion by name, a tail call
            case Nil():
                return acc

    @func
    def rnn(h: T[(1, 16), "float32"], w: T[(16, 16), "float32"], steps: T[(), "int64"]):
        i = rvm.const(0, "int64")
        while i < steps:  # becomes a tail-recursive local function
            h = op.tanh(op.matmul(h, w))
            i = i + 1
        return h

    @func
    def main(x: T[(4,), "float32"], k: T[(4,), "float32"]):
        def add_k(y: T[(4,), "float32"]):  # a closure capturing k
            return y + k

        a, b = (add_k(x), x * 2.0)  # tuples build and unpack
        if op.sum(a) > 0.0:
            return a
        else:
            return b


@module
class RNN:
    @func
    def main(h: T[(1, 16), "float32"], w: T[(16, 16), "float32"], steps: T[(), "int64"]):
        i = rvm.const(0, "int64")
        while i < steps:
            h = op.tanh(op.matmul(h, w))
            i = i + 1
        return h


def _rnn_ref(h, w, steps):
    for _ in range(int(steps)):
        h = np.tanh(h @ w)
    return h


@module
class Tuples:
    @func
    def stats(x: T[("n", 8), "float32"]):
        return (op.mean(x, axis=1), op.max(x, axis=1))

    @func
    def main(x: T[("n", 8), "float32"]):
        m, mx = stats(x)
        return (mx - m, m)


@module
class Attention:
    @func
    def main(
        x: T[("s", 32), "float32"],
        gamma: T[(32,), "float32"],
        beta: T[(32,), "float32"],
        wq: T[(32, 32), "float32"],
        wk: T[(32, 32), "float32"],
        wv: T[(32, 32), "float32"],
    ):
        h = op.layer_norm(x, gamma, beta, axes=[-1], epsilon=1e-5)
        q = op.matmul(h, wq)
        k = op.matmul(h, wk)
        v = op.matmul(h, wv)
        scores = op.matmul(q, op.transpose(k, axes=[1, 0])) * 0.17677669
        return op.matmul(op.softmax(scores, axis=-1), v) + x


def _attention_ref(x, gamma, beta, wq, wk, wv):
    mu = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    h = (x - mu) / np.sqrt(var + 1e-5) * gamma + beta
    q, k, v = h @ wq, h @ wk, h @ wv
    s = (q @ k.T) * np.float32(0.17677669)
    e = np.exp(s - s.max(-1, keepdims=True))
    return ((e / e.sum(-1, keepdims=True)) @ v + x).astype("float32")


def _i64(v: int) -> np.ndarray:
    return np.array(v, dtype="int64")


def _mlp_args(r: np.random.Generator, batch: int) -> tuple:
    return (
        _f32(r, batch, 784),
        _f32(r, 784, 128) * 0.05,
        _f32(r, 128),
        _f32(r, 128, 10) * 0.1,
        _f32(r, 10),
    )


def _attention_args(r: np.random.Generator, seq: int) -> tuple:
    x, gamma, beta = _f32(r, seq, 32), _f32(r, 32), _f32(r, 32)
    return (x, gamma, beta, *(_f32(r, 32, 32) * 0.2 for _ in range(3)))


PROGRAMS: list[Program] = [
    Program("mlp_batch3", MLP, "main", lambda r: _mlp_args(r, 3), _mlp_ref),
    Program("mlp_batch1", MLP, "main", lambda r: _mlp_args(r, 1), _mlp_ref),
    Program(
        "factorial", Recursion, "factorial", lambda r: (_i64(15),), lambda n: _i64(1307674368000)
    ),
    Program("fib", Recursion, "fib", lambda r: (_i64(12),), lambda n: _i64(144)),
    Program(
        "tail_sum_100k",
        Recursion,
        "tail_sum",
        lambda r: (_i64(100_000), _i64(0)),
        lambda n, a: _i64(100_000 * 100_001 // 2),
        tags=("slow_interp",),
    ),
    Program(
        "closures",
        Closures,
        "main",
        lambda r: (_f32(r, 4), _f32(r, 4)),
        lambda x, k: (x + k) if (x + k).sum() > 0 else x * np.float32(2.0),
    ),
    Program(
        "adt_list",
        Lists,
        "main",
        lambda r: (_i64(50),),
        lambda n: np.full(2, 50 * 51 / 2, dtype="float32"),
    ),
    Program(
        "adt_option",
        DataTypes,
        "main",
        lambda r: (_f32(r, 4), _f32(r, 4)),
        lambda x, d: x * np.float32(2) if x.sum() > 0 else d,
    ),
    Program(
        "adt_match_loop",
        DataTypes,
        "total",
        lambda r: (_i64(20), _f32(r, 2), _f32(r, 3) * 4),
        _total_ref,
    ),
    Program(
        "closure_passed",
        HigherOrder,
        "main",
        lambda r: (_f32(r, 4), _f32(r, 4), _i64(6)),
        _higher_order_ref,
    ),
    Program(
        "rnn", RNN, "main", lambda r: (_f32(r, 1, 16), _f32(r, 16, 16) * 0.3, _i64(20)), _rnn_ref
    ),
    Program(
        "tuples",
        Tuples,
        "main",
        lambda r: (_f32(r, 5, 8),),
        lambda x: (x.max(1) - x.mean(1), x.mean(1)),
    ),
    Program("attention_s7", Attention, "main", lambda r: _attention_args(r, 7), _attention_ref),
    Program("attention_s13", Attention, "main", lambda r: _attention_args(r, 13), _attention_ref),
]

__all__ = [
    "ADT",
    "PROGRAMS",
    "DataTypes",
    "Design",
    "HigherOrder",
    "List",
    "Mutual",
    "Opt",
    "Program",
    "Shape",
]
