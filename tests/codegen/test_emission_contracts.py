"""The facts the compiler knows reach the bytecode as instructions.

A tail call is an instruction of its own (TAIL_INVOKE / TAIL_INVOKE_CLOSURE), so no exec mode
recognises it from the order of the emitted code. This test checks the compiler's side: every
call the `tail_call` pass marks is emitted as one, and nothing else is. Were one lost, deep
tail recursion would silently grow the VM stack instead of failing here.
"""

from __future__ import annotations

import pytest

import rvm
from rvm.runtime.bytecode import TAIL_OPCODES, Opcode
from rvm.testing.programs import PROGRAMS
from rvm.transform import run_pipeline


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.name)
def test_every_marked_tail_call_is_a_tail_call_instruction(program) -> None:
    lowered = run_pipeline(program.mod)
    ex = rvm.compile(program.mod, kernels="numpy", build_kernels=False)
    marked = 0
    for name, func in lowered.items():
        if func.is_primitive or name not in ex:
            continue
        code = ex.get_function(name).instructions
        found = sum(ins[0] in TAIL_OPCODES for ins in code)
        assert found == func.attrs.get("num_tail_calls", 0), name
        marked += found
    if program.name in ("factorial", "tail_sum_100k", "adt_list", "rnn"):
        assert marked > 0  # the programs that have tail calls: the check is not vacuous


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.name)
def test_blocks_of_one_tensor_are_new_tensor_instructions(program) -> None:
    """A storage block made, viewed once at offset 0 and killed is one NEW_TENSOR: the
    compiler never emits that three-instruction pattern for a mode to recognise."""
    ex = rvm.compile(program.mod, kernels="numpy", build_kernels=False)
    for fn in ex.functions:
        code = fn.instructions
        for pc, ins in enumerate(code[:-2]):
            if ins[0] != Opcode.ALLOC_STORAGE:
                continue
            views = [i for i in code if i[0] != Opcode.ALLOC_STORAGE and ins[1] in i[2:3]]
            assert len(views) > 1, f"@{fn.name} pc={pc}: a block with one view: {views}"
