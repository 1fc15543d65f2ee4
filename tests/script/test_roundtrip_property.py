"""Property: random programs built with the IR Builder print and parse back equal."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rvm import op
from rvm.ir import Builder, If, Var, tensor

UNARY = ["relu", "exp", "tanh", "negative", "sigmoid", "abs"]
BINARY = ["add", "subtract", "multiply", "maximum", "minimum"]

FLOATS = st.floats(allow_nan=True, allow_infinity=True, width=32)
STEP = st.one_of(
    st.tuples(st.just("unary"), st.sampled_from(UNARY), st.integers(0, 99)),
    st.tuples(st.just("binary"), st.sampled_from(BINARY), st.integers(0, 99), st.integers(0, 99)),
    st.tuples(st.just("scalar"), st.sampled_from(BINARY), st.integers(0, 99), FLOATS),
    st.tuples(st.just("const"), st.integers(0, 99), st.lists(FLOATS, min_size=3, max_size=3)),
    st.tuples(st.just("if"), st.integers(0, 99), st.integers(0, 99)),
    st.tuples(st.just("tuple"), st.integers(0, 99), st.integers(0, 99)),
)


def build(steps: list[tuple], dims: tuple) -> object:
    bb = Builder()
    x = Var("x", tensor(dims, "float32"))
    y = Var("y", tensor(dims, "float32"))
    with bb.function("main", [x, y]):
        vals = [x, y]
        for step in steps:
            kind, pick = step[0], lambda i: vals[i % len(vals)]  # noqa: E731
            if kind == "unary":
                vals.append(bb.emit(getattr(op, step[1])(pick(step[2]))))
            elif kind == "binary":
                vals.append(bb.emit(getattr(op, step[1])(pick(step[2]), pick(step[3]))))
            elif kind == "scalar":
                vals.append(bb.emit(getattr(op, step[1])(pick(step[2]), step[3])))
            elif kind == "const":
                c = np.asarray(step[2], dtype="float32")
                vals.append(bb.emit(op.add(pick(step[1]), c)))
            elif kind == "if":
                total = bb.emit(op.sum(pick(step[1])))
                cond = bb.emit(op.greater(total, 0.0))
                bb.begin_scope()
                t = bb.emit(op.relu(pick(step[1])))
                then = bb.end_scope(t)
                bb.begin_scope()
                other = bb.end_scope(pick(step[2]))
                vals.append(bb.emit(If(cond, then, other)))
            else:
                pair = bb.emit(op.stack((pick(step[1]), pick(step[2])), axis=0))
                vals.append(bb.emit(op.sum(pair, axis=0)))
        bb.emit_output(vals[-1])
    return bb.get()


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(STEP, min_size=1, max_size=12), dims=st.sampled_from([(3,), ("n", 3), (2, 3)])
)
def test_random_chains_roundtrip(check, steps, dims):
    check(build(steps, dims))
