"""Concatenations written in place (`rvm.transform.concat_plan`) and concat kernels (a tuple
parameter) give the same results as the NumPy reference in every exec mode and with every
kernel backend, call after call."""

from __future__ import annotations

import numpy as np

import rvm
from rvm.op import numpy_ref
from rvm.testing import assert_values_close

SOURCE = """
from rvm import op
from rvm.script import T, module, func

@module
class M:
    @func
    def main(x: T[(1, 2, 12, 10), "float32"], w: T[(3, 2, 3, 3), "float32"],
             v: T[(4, 6, 1, 1), "float32"]):
        a = op.relu(op.conv2d(x, w, padding=1))
        b = op.max_pool2d(op.conv2d(x, w, padding=1), pool_size=3, padding=1)
        c = op.concat((a, b), axis=1)
        d = op.conv2d(c, v)
        e = op.concat((op.conv2d(c, v), op.sigmoid(op.conv2d(c, v))), axis=1)
        f = op.concat((e, op.conv2d(c, v)), axis=1)
        g = op.concat((x, d), axis=1)
        return c, d, f, g
"""


def reference(x, w, v):
    conv = numpy_ref.conv2d
    a = np.maximum(conv(x, w, (1, 1), (1, 1, 1, 1), (1, 1), 1), 0)
    b = numpy_ref.max_pool2d(conv(x, w, (1, 1), (1, 1, 1, 1), (1, 1), 1), (3, 3), (1, 1),
                             (1, 1, 1, 1), (1, 1), False)  # fmt: skip
    c = np.concatenate([a, b], axis=1)
    d = conv(c, v, (1, 1), (0, 0, 0, 0), (1, 1), 1)
    e = np.concatenate([d, 1 / (1 + np.exp(-d))], axis=1)
    return c, d, np.concatenate([e, d], axis=1), np.concatenate([x, d], axis=1)


MOD = rvm.script.parse(SOURCE)


def test_concat_in_place_matches_reference(compiled, exec_mode, kernels):
    ex = compiled(MOD, kernels)  # one compile per kernel backend, run in every exec mode
    # c, e and f are written in place (e is a piece of f: views of f's storage); g (one piece
    # is the parameter x) is copied.
    concats = sorted(name for name in ex.kernels if "concat" in name)
    assert len(concats) == 1, concats
    assert ex.kernels[concats[0]].backend == kernels  # a tuple parameter lowers to jit too
    vm = rvm.VirtualMachine(ex, exec_mode=exec_mode)
    rng = np.random.default_rng(0)
    results, wants = [], []
    for _ in range(3):  # later calls must not overwrite earlier results
        args = [rng.standard_normal(s).astype("float32") for s in ((1, 2, 12, 10), (3, 2, 3, 3),
                                                                   (4, 6, 1, 1))]  # fmt: skip
        results.append(vm["main"](*args))
        wants.append(reference(*args))
    for got, want in zip(results, wants):
        for g, w in zip(got, want):
            assert_values_close(g, w, rtol=1e-4, atol=1e-5)
