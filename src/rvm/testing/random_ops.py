"""The op-level half of the random program generator: choices, tracked values, and `OpGen`,
which emits random ops over tracked values into a Builder (see `rvm.testing.random_programs`
for the rules that keep results comparable across backends)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from rvm import op
from rvm.ir import Builder, Call, Expr, If, const
from rvm.ir.types import TensorType

SYM = "n"
N_MAX = 8  # bound on n used for magnitudes
DIMS = (4, 1, 2, 3, 5, 8)  # simplest first: hypothesis shrinks toward the front
EXACT_BITS = 22  # mag * 2**frac below this many bits: float32 holds the value exactly
AMP_LIMIT = 16.0  # operands of multiply/matmul/sum are scaled below this

Dim = int | str
Shape = tuple[Dim, ...]


class Chooser:
    """Where the generator's decisions come from: a seeded `random.Random` or hypothesis.

    Every decision is an int in a range, so hypothesis shrinks toward 0: the first choice of a
    list and "no" for `chance`.
    """

    def __init__(self, integer: Callable[[int, int], int]) -> None:
        self.integer = integer

    def chance(self, percent: int) -> bool:
        return self.integer(0, 99) >= 100 - percent

    def pick(self, items: Sequence):
        return items[self.integer(0, len(items) - 1)]

    def weighted(self, items: Sequence[tuple[str, int]]) -> str:
        k = self.integer(0, sum(w for _, w in items) - 1)
        for name, w in items:
            if k < w:
                return name
            k -= w
        raise AssertionError("unreachable")


@dataclass(eq=False)
class Val:
    """A value of the program being built, with what the generator knows of it."""

    expr: Expr
    shape: Shape
    dtype: str
    mag: float  # a bound on |element|
    frac: int | None  # exact: every element a multiple of 2**-frac; None: rounded

    @property
    def exact(self) -> bool:
        return self.frac is not None

    @property
    def is_float(self) -> bool:
        return self.dtype == "float32"


def input_data(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    if dtype == "float32":
        return (rng.integers(-16, 17, size=shape) * 0.25).astype("float32")
    return rng.integers(-8, 9, size=shape).astype(dtype)


def broadcast(*shapes: Shape) -> Shape | None:
    """NumPy's broadcast of shapes whose dims are ints or ``"n"``; None if not provably valid."""
    rank = max(len(s) for s in shapes)
    out: list[Dim] = []
    for i in range(rank):
        dims = {s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0} - {1}
        if len(dims) > 1:
            return None
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def _size(shape: Shape) -> int:
    return math.prod(N_MAX if d == SYM else d for d in shape)


class OpGen:
    """Builds one function's body into ``bb``: a pool of values grown op by op."""

    def __init__(self, ch: Chooser, bb: Builder, rng: np.random.Generator, helper=None) -> None:
        self.ch, self.bb, self.rng = ch, bb, rng
        self.pool: list[Val] = []
        self.helper = helper  # (GlobalVar, param Vals, result Val) of a callable function

    # -- emitting --------------------------------------------------------------------------
    def emit(self, value: Expr, shape: Shape, dtype: str, mag: float, frac: int | None) -> Val:
        var = self.bb.emit(value)
        if var.type != TensorType(shape, dtype):
            raise AssertionError(f"generator expected T[{shape}, {dtype}], got {var.type}")
        if dtype == "float32" and frac is not None and mag * 2.0**frac >= 2.0**EXACT_BITS:
            frac = None
        if dtype == "int64":
            frac = 0
        val = Val(var, shape, dtype, float(mag), frac)
        if dtype != "bool":  # conditions are used once, by the op emitted next
            self.pool.append(val)
        return val

    def like(self, value: Expr, v: Val, mag: float | None = None, frac: int | None = -1) -> Val:
        return self.emit(
            value, v.shape, v.dtype, v.mag if mag is None else mag, v.frac if frac == -1 else frac
        )

    def pick(self, pred: Callable[[Val], bool] = lambda v: True) -> Val | None:
        """A pool value satisfying ``pred``, most recent first (shrinks toward deep chains)."""
        found = [v for v in reversed(self.pool) if pred(v)]
        return self.ch.pick(found) if found else None

    def constant(self, shape: Shape, dtype: str) -> Val:
        """A fresh constant (no symbolic dims) of small exact values."""
        data = input_data(self.rng, tuple(shape), dtype)
        mag = 4.0 if dtype == "float32" else 8.0
        val = Val(const(data), tuple(shape), dtype, mag, 2 if dtype == "float32" else 0)
        if self.ch.chance(30):
            self.pool.append(val)  # reused later, and folded by fold_constant
        return val

    def limit(self, v: Val, bound: float) -> Val:
        """``v`` scaled by a power of two (floats) or clipped (ints) to magnitude <= bound."""
        if v.mag <= bound:
            return v
        if not v.is_float:
            return self.like(op.clip(v.expr, -bound, bound), v, mag=bound)
        k = math.ceil(math.log2(v.mag / bound))
        frac = None if v.frac is None else v.frac + k
        return self.like(op.multiply(v.expr, 2.0**-k), v, mag=v.mag / 2**k, frac=frac)

    def to_float(self, v: Val) -> Val:
        if v.is_float:
            return v
        return self.emit(op.cast(v.expr, "float32"), v.shape, "float32", v.mag, 0)

    def partner(self, a: Val, into: bool = False) -> Val:
        """A value broadcasting with ``a`` (onto a's shape when ``into``), of a's dtype."""

        def fits(v: Val) -> bool:
            out = broadcast(a.shape, v.shape)
            return out is not None and (out == a.shape if into else len(out) <= 3)

        kind = self.ch.integer(0, 3)
        if kind == 0:
            found = self.pick(lambda v: v.dtype == a.dtype and fits(v))
            if found is not None:
                return found
        if kind <= 1:
            scalar = self.ch.pick((1.0, 0.5, -2.0, 0.25, 3.0) if a.is_float else (1, 2, -3))
            return Val(
                op.as_expr(scalar, like=a.expr), (), a.dtype, abs(scalar), 2 if a.is_float else 0
            )
        shape = [1 if (d == SYM or self.ch.chance(40)) else d for d in a.shape]
        drop = self.ch.integer(0, len(shape))
        return self.constant(tuple(shape[drop:]), a.dtype)

    # -- ops -------------------------------------------------------------------------------
    def unary(self, v: Val) -> Val | None:
        x = v.expr
        if not v.is_float:
            name = self.ch.pick(("negative", "abs", "relu", "sign"))
            return self.like(getattr(op, name)(x), v, mag=1 if name == "sign" else None)
        names = [
            "tanh",
            "negative",
            "abs",
            "relu",
            "sigmoid",
            "sin",
            "cos",
            "erf",
            "exp",
            "softplus",
            "gelu",
            "silu",
            "leaky_relu",
            "log1p_abs",
            "sqrt1p_abs",
        ]
        if v.exact:
            names += ["floor", "ceil", "round", "sign"]
        name = self.ch.pick(names)
        if name in ("negative", "abs", "relu"):
            return self.like(getattr(op, name)(x), v)
        if name in ("floor", "ceil", "round", "sign"):
            return self.like(getattr(op, name)(x), v, mag=v.mag + 1, frac=0)
        if name in ("tanh", "sigmoid", "sin", "cos", "erf"):
            return self.like(getattr(op, name)(x), v, mag=1, frac=None)
        if name == "exp":
            v = self.limit(v, 4)
            return self.like(op.exp(v.expr), v, mag=math.exp(v.mag), frac=None)
        if name in ("softplus", "gelu", "silu", "leaky_relu"):
            return self.like(getattr(op, name)(x), v, mag=v.mag + 1, frac=None)
        shifted = self.like(op.add(self.like(op.abs(x), v).expr, 1.0), v, mag=v.mag + 1)
        if name == "log1p_abs":
            return self.like(op.log(shifted.expr), v, mag=math.log(v.mag + 1), frac=None)
        return self.like(op.sqrt(shifted.expr), v, mag=math.sqrt(v.mag + 1), frac=None)

    def binary(self, a: Val, into: bool = False) -> Val | None:
        names = ["add", "subtract", "multiply", "maximum", "minimum", "divide"]
        if not a.is_float:
            names += ["floor_divide", "mod"]
        name = self.ch.pick(names)
        if name == "multiply":
            a = self.limit(a, AMP_LIMIT)
        b = self.partner(a, into)
        if name == "multiply":
            b = self.limit(b, AMP_LIMIT)
        shape = broadcast(a.shape, b.shape)
        frac = None if not (a.exact and b.exact) else max(a.frac, b.frac)
        if name in ("add", "subtract"):
            mag = a.mag + b.mag
        elif name in ("maximum", "minimum"):
            mag = max(a.mag, b.mag)
        elif name == "multiply":
            mag, frac = a.mag * b.mag, None if frac is None else a.frac + b.frac
        else:  # divisions by abs(b) + 1
            b = self.emit(op.abs(b.expr), b.shape, b.dtype, b.mag, b.frac)
            b = self.emit(op.add(b.expr, 1), b.shape, b.dtype, b.mag + 1, b.frac)
            mag = b.mag if name == "mod" else a.mag + 1
            frac = 0 if not a.is_float else None
        return self.emit(getattr(op, name)(a.expr, b.expr), shape, a.dtype, mag, frac)

    def compare(self, a: Val) -> Val | None:
        """A comparison of exact values, feeding ``where``, a cast, or logic."""
        if not a.exact:
            return None
        b = self.partner(a)
        if not b.exact:
            return None
        shape = broadcast(a.shape, b.shape)
        name = self.ch.pick(("greater", "less", "equal", "greater_equal", "not_equal"))
        cond = self.emit(getattr(op, name)(a.expr, b.expr), shape, "bool", 1, 0)
        how = self.ch.integer(0, 3)
        if how == 1:
            return self.emit(op.cast(cond.expr, a.dtype), shape, a.dtype, 1, 0)
        if how == 2:
            cond = self.emit(op.logical_not(cond.expr), shape, "bool", 1, 0)
        if how == 3:
            other = self.pick(lambda v: v.dtype == a.dtype and broadcast(shape, v.shape))
            if other is not None:
                b, shape = other, broadcast(shape, other.shape)
        frac = max(a.frac, b.frac) if b.exact else None
        return self.emit(
            op.where(cond.expr, a.expr, b.expr), shape, a.dtype, max(a.mag, b.mag), frac
        )

    def reduce(self, v: Val) -> Val | None:
        names = ["sum", "max", "min", "mean", "argmax", "argmin"]
        if v.is_float:
            names += ["variance", "prod"]
        name = self.ch.pick(names)
        rank = len(v.shape)
        if name.startswith("arg"):
            axes = None if rank == 0 or self.ch.chance(20) else (self.ch.integer(-rank, rank - 1),)
            axis_attr = None if axes is None else axes[0]
        else:
            axes = None
            if rank and not self.ch.chance(25):
                chosen = [a for a in range(rank) if self.ch.chance(50)] or [rank - 1]
                axes = tuple(a - rank if self.ch.chance(30) else a for a in chosen)
            axis_attr = axes
        reduced = range(rank) if axes is None else [a % rank for a in axes]
        if name not in ("sum", "prod") and any(v.shape[a] == SYM for a in reduced):
            return None  # empty at n = 0: max fails, mean gives NaN
        if name.startswith("arg") and not v.exact:
            return None  # near-ties would pick different indices
        keep = self.ch.chance(40)
        shape = tuple(
            1 if i in reduced else d for i, d in enumerate(v.shape) if keep or i not in reduced
        )
        count = _size(tuple(v.shape[a] for a in reduced))
        frac: int | None = None
        if name == "sum":
            v = self.limit(v, AMP_LIMIT)
            mag, frac = v.mag * count, v.frac
        elif name in ("max", "min"):
            mag, frac = v.mag, v.frac
        elif name == "prod":
            v = self.limit(v, 1)
            mag = 1
        elif name == "variance":
            v = self.limit(v, AMP_LIMIT)
            mag = v.mag**2
        else:
            mag = count if name.startswith("arg") else v.mag
        dtype = "int64" if name.startswith("arg") else v.dtype
        call = getattr(op, name)(v.expr, axis=axis_attr, keepdims=keep)
        return self.emit(call, shape, dtype, mag, frac)

    def matmul(self, a: Val) -> Val | None:
        if not a.is_float or not a.shape:
            return None
        a = self.limit(a, 4)
        k = a.shape[-1]
        how = self.ch.integer(0, 2)
        b = None
        if how == 0:
            b = self.pick(
                lambda v: (
                    v.is_float and len(v.shape) >= 1 and _matmul_shape(a.shape, v.shape) is not None
                )
            )
        if b is None and how == 1 and len(a.shape) >= 2:
            axes = [*range(len(a.shape) - 2), len(a.shape) - 1, len(a.shape) - 2]
            t_shape = tuple(a.shape[i] for i in axes)
            b = self.emit(op.transpose(a.expr, axes), t_shape, a.dtype, a.mag, a.frac)
        if b is None:
            if k == SYM:
                return None
            cols = () if self.ch.chance(15) else (self.ch.pick(DIMS),)
            b = self.constant((k, *cols), "float32")
        b = self.limit(b, 4)
        shape = _matmul_shape(a.shape, b.shape)
        frac = a.frac + b.frac if a.exact and b.exact else None
        mag = a.mag * b.mag * (N_MAX if k == SYM else k)
        return self.emit(op.matmul(a.expr, b.expr), shape, "float32", mag, frac)

    def softmax(self, v: Val) -> Val | None:
        axes = [a for a in range(len(v.shape)) if v.shape[a] != SYM]
        if not v.is_float or not axes:
            return None
        axis = self.ch.pick(axes) - (len(v.shape) if self.ch.chance(50) else 0)
        if self.ch.chance(30):
            v = self.limit(v, AMP_LIMIT)
            return self.like(op.log_softmax(v.expr, axis=axis), v, mag=2 * v.mag + 3, frac=None)
        return self.like(op.softmax(v.expr, axis=axis), v, mag=1, frac=None)

    def layout(self, v: Val) -> Val | None:
        rank = len(v.shape)
        name = self.ch.pick(("expand_dims", "transpose", "reshape", "concat", "squeeze"))
        if name == "expand_dims" and rank < 3:
            axis = self.ch.integer(-rank - 1, rank)
            shape = list(v.shape)
            shape.insert(axis % (rank + 1), 1)
            return self.emit(op.expand_dims(v.expr, axis), tuple(shape), v.dtype, v.mag, v.frac)
        if name == "transpose" and rank >= 2:
            perm = list(range(rank))
            while perm == sorted(perm):
                perm = sorted(perm, key=lambda _: self.ch.integer(0, 9))
            shape = tuple(v.shape[i] for i in perm)
            return self.emit(op.transpose(v.expr, perm), shape, v.dtype, v.mag, v.frac)
        if name == "squeeze" and 1 in v.shape:
            axis = v.shape.index(1)
            shape = v.shape[:axis] + v.shape[axis + 1 :]
            return self.emit(op.squeeze(v.expr, axis=axis), shape, v.dtype, v.mag, v.frac)
        if name == "reshape" and rank >= 1 and SYM not in v.shape[1:]:
            lead = v.shape[:1] if v.shape[0] == SYM else ()
            total = _size(v.shape[len(lead) :])
            if total > 64:
                return None
            target = lead + factor_shape(self.ch, total, 3 - len(lead))
            attr = list(target)
            if not lead and self.ch.chance(30):  # -1 beside n: n = 0 leaves it unsolvable
                attr[self.ch.integer(0, len(attr) - 1)] = -1
            return self.emit(op.reshape(v.expr, attr), target, v.dtype, v.mag, v.frac)
        if name == "concat" and rank >= 1:
            axes = [a for a in range(rank) if v.shape[a] != SYM]
            if not axes:
                return None
            axis = self.ch.pick(axes)
            other = self.pick(
                lambda u: (
                    u.dtype == v.dtype
                    and len(u.shape) == rank
                    and u.shape[axis] != SYM
                    and all(u.shape[i] == v.shape[i] for i in range(rank) if i != axis)
                )
            )
            if other is None or self.ch.chance(30):
                shape = list(v.shape)
                shape[axis] = self.ch.pick((1, 2, 3))
                if SYM in shape:
                    other = v  # a constant cannot have the symbolic dim: v twice
                else:
                    other = self.constant(tuple(shape), v.dtype)
            shape = list(v.shape)
            shape[axis] = v.shape[axis] + other.shape[axis]
            frac = max(v.frac, other.frac) if v.exact and other.exact else None
            return self.emit(
                op.concat([v.expr, other.expr], axis=axis),
                tuple(shape),
                v.dtype,
                max(v.mag, other.mag),
                frac,
            )
        return None

    def cast(self, v: Val) -> Val | None:
        if not v.is_float:
            return self.to_float(v)
        if not v.exact:
            return None  # truncation of a rounded value near an integer could go either way
        return self.emit(op.cast(v.expr, "int64"), v.shape, "int64", v.mag, 0)

    def clip(self, v: Val) -> Val | None:
        scale = 2 if v.is_float else 1  # float bounds are multiples of 1/2
        lo = self.ch.integer(-8, 0) / scale
        hi = lo + self.ch.integer(0, 8) / scale
        frac = None if v.frac is None else max(v.frac, 1)
        return self.emit(op.clip(v.expr, lo, hi), v.shape, v.dtype, max(-lo, abs(hi)), frac)

    def call(self, v: Val) -> Val | None:
        """A call of the helper function on pool values of its parameters' types."""
        if self.helper is None:
            return None
        gv, params, result = self.helper
        args = []
        for p in params:
            a = self.pick(
                lambda u, p=p: (
                    u.dtype == p.dtype and u.shape == p.shape and u.exact and u.frac <= p.frac
                )
            )
            if a is None:
                return None
            if a.mag > p.mag:  # clip, not scale: the helper's bounds assume p.frac
                a = self.like(op.clip(a.expr, -p.mag, p.mag), a, mag=p.mag)
            args.append(a.expr)
        return self.emit(Call(gv, tuple(args)), result.shape, result.dtype, result.mag, result.frac)

    def if_(self, v: Val) -> Val | None:
        """``If`` on ``sum(c) > 0`` (c exact) choosing between two sub-DAGs from ``v``."""
        c = self.pick(lambda u: u.exact and u.mag * _size(u.shape) * 2.0**u.frac < 2**EXACT_BITS)
        if c is None:
            return None
        total = self.emit(op.sum(c.expr), (), c.dtype, c.mag * _size(c.shape), c.frac)
        cond = self.emit(op.greater(total.expr, 0), (), "bool", 1, 0)
        branches = []
        for _ in range(2):
            self.bb.begin_scope()
            saved = len(self.pool)
            out = v
            for _ in range(self.ch.integer(0, 2)):
                out = self.binary(out, into=True) if self.ch.chance(50) else self.unary(out)
            del self.pool[saved:]  # values of the branch are out of scope after it
            branches.append((self.bb.end_scope(out.expr), out))
        (then, a), (other, b) = branches
        frac = max(a.frac, b.frac) if a.exact and b.exact else None
        return self.emit(If(cond.expr, then, other), v.shape, v.dtype, max(a.mag, b.mag), frac)

    def step(self, ops: Sequence[tuple[str, int]]) -> Val | None:
        return getattr(self, self.ch.weighted(ops))(self.pick())


OPS = (
    ("unary", 4),
    ("binary", 5),
    ("compare", 2),
    ("reduce", 3),
    ("matmul", 2),
    ("softmax", 1),
    ("layout", 3),
    ("cast", 1),
    ("clip", 1),
    ("call", 2),
    ("if_", 1),
)


def _matmul_shape(a: Shape, b: Shape) -> Shape | None:
    """NumPy's matmul shape, or None unless the inner dims are provably equal."""
    if not a or not b:
        return None
    a2 = (1, *a) if len(a) == 1 else a
    b2 = (*b, 1) if len(b) == 1 else b
    batch = broadcast(a2[:-2], b2[:-2])
    if a2[-1] != b2[-2] or batch is None:
        return None
    out = [*batch, a2[-2], b2[-1]]
    if len(b) == 1:
        out.pop(-1)
    if len(a) == 1:
        out.pop(-2 if len(b) > 1 else -1)
    return tuple(out)


def factor_shape(ch: Chooser, total: int, max_dims: int) -> Shape:
    """Up to ``max_dims`` dims whose product is ``total``."""
    dims = []
    while len(dims) < max_dims - 1 and ch.chance(50):
        d = ch.pick([d for d in range(1, total + 1) if total % d == 0])
        dims.append(d)
        total //= d
    return (*dims, total)


__all__ = [
    "AMP_LIMIT",
    "DIMS",
    "N_MAX",
    "OPS",
    "SYM",
    "Chooser",
    "OpGen",
    "Shape",
    "Val",
    "broadcast",
    "factor_shape",
    "input_data",
]
