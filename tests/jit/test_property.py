"""Property tests: random elementwise chains over broadcast shapes, one kernel many shapes."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jit_helpers import Jit, check, prim, rand, var

from rvm import op

FLOAT_OPS = [
    "add",
    "subtract",
    "multiply",
    "maximum",
    "minimum",
    "relu",
    "negative",
    "abs",
    "tanh",
    "sigmoid",
    "exp",
]
INT_OPS = ["add", "subtract", "multiply", "maximum", "minimum", "abs", "negative", "relu"]
UNARY = {"relu", "negative", "abs", "tanh", "sigmoid", "exp"}
OTHER_SHAPES = [("m",), ("n", 1), (1, "m"), ("n", "m"), ()]
SIZES = [(0, 3), (1, 1), (1, 4), (3, 1), (2, 5)]


@st.composite
def chains(draw):
    dtype = draw(st.sampled_from(["float32", "int32", "int64", "float64"]))
    pool = FLOAT_OPS if dtype.startswith("float") else INT_OPS
    steps = draw(st.lists(st.tuples(st.sampled_from(pool), st.booleans()), min_size=1, max_size=6))
    other = draw(st.sampled_from(OTHER_SHAPES))
    return dtype, steps, other


def _build(dtype, steps, other):
    x, y = var("x", ("n", "m"), dtype), var("y", other, dtype)
    v = x
    for name, use_y in steps:
        fn = getattr(op, name)
        if name in UNARY:
            v = fn(v)
        else:
            v = fn(v, y if use_y else x)
    if v is x:
        v = op.add(x, y)
    return prim([x, y], v)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chains())
def test_random_chain_many_shapes(spec) -> None:
    dtype, steps, other = spec
    func = _build(dtype, steps, other)
    kernel = Jit(func)
    for seed, (n, m) in enumerate(SIZES):
        concrete = tuple({"n": n, "m": m}.get(d, d) for d in other)
        xs = rand((n, m), dtype, seed=seed)
        ys = rand(concrete, dtype, seed=seed + 100)
        # exp chains amplify a last-place difference (Numba's exp against NumPy's) by the
        # product of their intermediate values: exp^4 in float32 reaches 2e-5 relative.
        rtol = 1e-4 if dtype == "float32" else 1e-5
        with np.errstate(all="ignore"):
            check(func, xs, ys, kernel=kernel, rtol=rtol, atol=1e-5)
