"""The emission contracts the exec modes rely on hold for the compiler's output.

Both modes recognise a tail call as INVOKE (or INVOKE_CLOSURE) directly followed by RET of
its result (`rvm.runtime.bytecode.is_tail_call`), a rule the codegen promises to keep. If the
codegen ever emitted tail calls otherwise, the modes would not fail: they would silently run
them as ordinary calls, and deep tail recursion would grow the VM stack. This test makes that
a failure: every call the `tail_call` pass marks is one the runtime's rule recognises.
"""

from __future__ import annotations

import pytest

import rvm
from rvm.runtime.bytecode import is_tail_call
from rvm.testing.programs import PROGRAMS
from rvm.transform import run_pipeline


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.name)
def test_every_marked_tail_call_is_recognised_by_the_runtime(program) -> None:
    lowered = run_pipeline(program.mod)
    ex = rvm.compile(program.mod, kernels="numpy", build_kernels=False)
    marked = 0
    for name, func in lowered.items():
        if func.is_primitive or name not in ex:
            continue
        code = ex.get_function(name).instructions
        found = sum(is_tail_call(code, pc) for pc in range(len(code)))
        assert found == func.attrs.get("num_tail_calls", 0), name
        marked += found
    if program.name in ("factorial", "tail_sum_100k", "adt_list", "rnn"):
        assert marked > 0  # the programs that have tail calls: the check is not vacuous
