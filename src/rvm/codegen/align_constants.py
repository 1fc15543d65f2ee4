"""align_constants: the constants the compiler made, each on a cache line.

Needs: a lowered module (`rvm.compile` runs it after the pipeline), and the module it was
lowered from.

Guarantees: the same program, where every constant of more than `rvm.runtime.weights.ALIGN`
bytes that the passes made (packed, converted to bf16 or int8, folded) starts at a multiple of
`ALIGN` (a copy, `rvm.runtime.weights.aligned`, where it did not). A constant that views the
memory of one of the given module's constants (the user's weights, or an imported file's bytes)
is kept as it is: a model's weights are held once (`rvm.ir.expr.Constant`).

Why: NumPy gives an array's data 16-byte alignment, so three in four derived weights lay off a
cache line, and the kernels load their rows whole: every AMX tile row of a bf16 weight, every
512-bit vector of a packed float32 one spanned two lines. Aligned, bf16 resnet50's 1 x 1
layers took 0.7-0.9x the time, the model 0.84x, BERT-base 0.88x (session 75).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rvm.ir import expr as E
from rvm.ir.functor import ExprMutator, ExprVisitor
from rvm.ir.module import IRModule
from rvm.runtime.weights import ALIGN, aligned

__all__ = ["align_constants"]


def _root(a: np.ndarray) -> Any:
    """The object whose memory ``a`` views: the last ``base`` of its chain (an array that owns
    its data, or a buffer such as bytes or an mmap)."""
    while isinstance(a, np.ndarray) and a.base is not None:
        a = a.base
    return a


class _Roots(ExprVisitor):
    """The roots (`_root`) of a module's constants, by id."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[int] = set()

    def visit_constant(self, c: E.Constant) -> None:
        self.ids.add(id(_root(c.data)))


class _Align(ExprMutator):
    def __init__(self, given: set[int]) -> None:
        super().__init__()
        self.given = given

    def visit_constant(self, c: E.Constant) -> E.Expr:
        data = c.data
        if data.nbytes <= ALIGN or data.ctypes.data % ALIGN == 0 or data.dtype.hasobject:
            return c
        if id(_root(data)) in self.given:
            return c
        return E.Constant(aligned(data))


def align_constants(mod: IRModule, given: IRModule) -> IRModule:
    """``mod`` with the constants its passes made on cache lines; ``given``: the module they
    ran on, whose constants' memory is kept as it is."""
    roots = _Roots()
    for _, func in given.items():
        roots.visit(func)
    mutator = _Align(roots.ids)
    replaced = {}
    for name, func in mod.items():
        new = mutator.visit(func)
        if new is not func:
            replaced[name] = new
    return mod.with_functions(replaced) if replaced else mod
