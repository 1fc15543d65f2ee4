"""Random tensor programs with their inputs, for property tests of the compiler and the VM.

`random_programs()` is a hypothesis strategy and `random_program(seed)` a plain seeded
generator; both build a module with `rvm.ir.Builder` in A-normal form (every call emitted to its
own binding, so the printer's output parses back to an equal module). A program is a random DAG
over 1-3 parameters (float32 mostly, int64 some), possibly with a symbolic dim ``"n"``: unary and
binary elementwise ops with broadcasting, comparisons feeding ``where``, ``cast``, ``clip``,
reductions with random axes and keepdims, ``matmul``, ``softmax``, layout ops, constants (0-d
and small arrays), values with several consumers, sometimes an ``If`` on a reduction, a call of
a second module function ``helper`` and a tuple result.

Results must agree between backends to rtol 1e-4 / atol 1e-5, so the generator tracks for each
value a bound on its magnitude and whether it is *exact*: a float value whose every element is a
multiple of ``2**-frac`` small enough that float32 holds it without rounding (inputs are
multiples of 1/4 in [-4, 4]). Sums, products and matmuls of exact values are exact in any order,
so only exact values feed discontinuous ops (comparisons, ``If`` conditions, rounding, argmax,
casts to int); rounded values feed only continuous ones, and are scaled by a power of two (which
keeps relative error) before ops that amplify magnitude. Division is ``a / (abs(b) + 1)`` and
log/sqrt take ``abs(x) + 1``. Reductions that fail or give NaN on an empty axis (max, mean,
argmax, softmax...) never reduce over ``n``, so every program runs for ``n = 0`` too.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from rvm import op
from rvm.ir import Builder, Expr, IRModule, Tuple, Var, tensor
from rvm.testing.random_ops import (
    DIMS,
    OPS,
    SYM,
    Chooser,
    OpGen,
    Shape,
    Val,
    input_data,
)

SIZES = (0, 1, 3, 7)  # values of n the tests run


@dataclass(eq=False)
class RandomProgram:
    """A generated module, the shapes of ``main``'s parameters, and how to make arguments."""

    mod: IRModule
    params: tuple[tuple[Shape, str], ...]
    n: int  # the value of the symbolic dim that `args()` uses by default
    seed: int  # seed of the argument data
    fname: str = "main"

    @property
    def symbolic(self) -> bool:
        return any(SYM in shape for shape, _ in self.params)

    def args(self, n: int | None = None, seed: int | None = None) -> tuple[np.ndarray, ...]:
        """Arguments for ``main``: float32 multiples of 1/4 in [-4, 4], int64 in [-8, 8]."""
        rng = np.random.default_rng(self.seed if seed is None else seed)
        size = self.n if n is None else n
        out = []
        for shape, dtype in self.params:
            concrete = tuple(size if d == SYM else d for d in shape)
            out.append(input_data(rng, concrete, dtype))
        return tuple(out)

    def __repr__(self) -> str:
        return f"RandomProgram(n={self.n}, seed={self.seed}):\n{self.mod.script()}"


def _param_specs(ch: Chooser, symbolic: bool) -> list[tuple[Shape, str]]:
    """1-3 parameter shapes: the first random, the others equal, broadcastable or random."""
    rank = ch.pick((2, 1, 3, 0))
    first = [ch.pick(DIMS) for _ in range(rank)] or ([SYM] if symbolic else [])
    if symbolic:
        first[ch.integer(0, len(first) - 1)] = SYM
    specs = [tuple(first)]
    for _ in range(ch.integer(0, 2)):
        how = ch.integer(0, 2)
        if how == 0:
            specs.append(tuple(first))
        elif how == 1:
            shape = [1 if ch.chance(40) else d for d in first]
            specs.append(tuple(shape[ch.integer(0, len(shape)) :]))
        else:
            specs.append(tuple(ch.pick(DIMS) for _ in range(ch.integer(0, 3))))
    return [(s, "int64" if ch.chance(20) else "float32") for s in specs]


def _input_val(var: Var, shape: Shape, dtype: str) -> Val:
    return Val(
        var, shape, dtype, 4.0 if dtype == "float32" else 8.0, 2 if dtype == "float32" else 0
    )


def _body(g: OpGen, n_ops: int, ops: Sequence[tuple[str, int]]) -> Val:
    """Grow ``g``'s pool by ``n_ops`` emitted ops; the last one emitted."""
    last = None
    made = 0
    for _ in range(n_ops * 4):
        if made == n_ops:
            break
        val = g.step(ops)
        if val is not None:
            last, made = val, made + 1
    if last is None:
        p = g.pool[0]
        last = g.emit(op.abs(p.expr), p.shape, p.dtype, p.mag, p.frac)
    return last


def _helper(
    ch: Chooser, bb: Builder, rng: np.random.Generator, specs: list[tuple[Shape, str]]
) -> tuple:
    """Module function ``helper`` over 1-2 of main's parameter types."""
    chosen = [specs[ch.integer(0, len(specs) - 1)] for _ in range(ch.integer(1, 2))]
    params = [_input_val(Var(f"a{i}", tensor(s, d)), s, d) for i, (s, d) in enumerate(chosen)]
    with bb.function("helper", [p.expr for p in params]):
        g = OpGen(ch, bb, rng)
        g.pool = list(params)
        result = _body(g, ch.integer(1, 3), [o for o in OPS if o[0] not in ("call", "if_")])
        bb.emit_output(result.expr)
    bb.get()  # an IRModule records the function's type on its GlobalVar, for calls to infer
    return bb.global_var("helper"), params, result


def generate(
    ch: Chooser,
    *,
    symbolic: bool | None = None,
    max_ops: int = 8,
    control_flow: bool = True,
    calls: bool = True,
) -> RandomProgram:
    """A random program and its argument data, every decision taken from ``ch``."""
    rng = np.random.default_rng(ch.integer(0, 2**16))
    if symbolic is None:
        symbolic = ch.chance(40)
    specs = _param_specs(ch, symbolic)
    bb = Builder()
    helper = _helper(ch, bb, rng, specs) if calls and ch.chance(30) else None
    ops = [o for o in OPS if (control_flow or o[0] != "if_") and (helper or o[0] != "call")]
    params = [_input_val(Var(f"x{i}", tensor(s, d)), s, d) for i, (s, d) in enumerate(specs)]
    with bb.function("main", [p.expr for p in params]):
        g = OpGen(ch, bb, rng, helper)
        g.pool = list(params)
        out = _body(g, ch.integer(1, max_ops), ops)
        result: Expr = out.expr
        if ch.chance(25):
            fields = [out.expr] + [g.pick().expr for _ in range(ch.integer(1, 2))]
            result = bb.emit(Tuple(tuple(fields)))
        bb.emit_output(result)
    n = ch.pick(SIZES) if symbolic else 0
    return RandomProgram(bb.get(), tuple(specs), n, ch.integer(0, 999))


@st.composite
def random_programs(
    draw: Callable,
    *,
    symbolic: bool | None = None,
    max_ops: int = 8,
    control_flow: bool = True,
    calls: bool = True,
) -> RandomProgram:
    """Hypothesis strategy of `RandomProgram` (options as `generate`)."""
    ch = Chooser(lambda lo, hi: draw(st.integers(lo, hi)))
    return generate(ch, symbolic=symbolic, max_ops=max_ops, control_flow=control_flow, calls=calls)


def random_program(seed: int, **options) -> RandomProgram:
    """The same programs without hypothesis, from a seeded `random.Random`."""
    return generate(Chooser(random.Random(seed).randint), **options)


__all__ = ["Chooser", "RandomProgram", "SIZES", "generate", "random_program", "random_programs"]
