"""What the transformer fusion pass tests share: modules built in A-normal form, the pass run
after normalize and infer_shapes, the op names left, and the numeric check in every mode."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import rvm
from rvm.ir import Builder, Call, Var
from rvm.transform.infer_shapes import infer_shapes
from rvm.transform.normalize import normalize


def build(params: list[Var], body: Callable[[Callable], object]) -> rvm.IRModule:
    """``main(params)`` whose bindings ``body(emit)`` emits; its result is ``body``'s."""
    bb = Builder()
    with bb.function("main", params):
        bb.emit_output(body(bb.emit))
    return bb.get()


def run(mod: rvm.IRModule, fuse) -> rvm.IRModule:  # type: ignore[no-untyped-def]
    return fuse(infer_shapes(normalize(mod)))


def op_names(mod: rvm.IRModule) -> list[str]:
    return [
        b.value.callee.name
        for b in mod["main"].body.bindings
        if isinstance(b.value, Call) and hasattr(b.value.callee, "name")
    ]


def check_numbers(mod: rvm.IRModule, args: list[np.ndarray], exec_mode: str) -> None:
    """The compiled module (which runs the fusion passes) equals the reference interpreter on
    the module as written (no fusion), NaN where it has NaN."""
    want = rvm.interpret(mod, "main", *args)
    got = rvm.VirtualMachine(rvm.compile(mod), exec_mode=exec_mode)["main"](*args)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, equal_nan=True)
