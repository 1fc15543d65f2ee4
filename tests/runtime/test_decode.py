"""Decoding (`rvm.runtime.decode`): what the bytecode loop's tuples hold, where tail calls and
superinstructions are formed and where not, and that a jump into a fused run still works."""

from __future__ import annotations

import numpy as np
import pytest
import rt_helpers as h

from rvm.runtime import ExecBuilder, Executable, Opcode, VirtualMachine
from rvm.runtime import decode as d

O = Opcode


def _ops(ex: Executable, name: str) -> list[int]:
    return [ins[0] for ins in d.decode_function(ex, ex.function_index(name)).code]


def test_operands_are_decoded_by_kind_at_their_positions():
    ex = h.every_opcode_program()
    main = ex.functions[ex.function_index("main")]
    code = d.decode_function(ex, ex.function_index("main")).code
    by_op = {}
    for raw, dec in zip(main.instructions, code):
        by_op.setdefault(raw[0], (raw, dec))
    raw, dec = by_op[O.LOAD_CONSTI]  # the immediate becomes its shared read-only 0-d array
    assert dec[2].shape == () and dec[2].dtype == np.int64 and dec[2] == raw[2]
    assert not dec[2].flags.writeable
    raw, dec = by_op[O.LOAD_CONST]
    assert dec[2] is ex.constants[raw[2]]
    raw, dec = by_op[O.ALLOC_TENSOR]
    assert dec[4] == (2, 3) and dec[5] == np.dtype("float32")
    raw, dec = by_op[O.INVOKE_PACKED]  # args: a getter of the register values
    regs = list(range(100, 200))
    assert list(dec[4](regs)) == [regs[r] for r in raw[4]]
    raw, dec = by_op[O.ALLOC_CLOSURE]  # the function's name is appended
    assert dec[-1] == "ident"
    raw, dec = by_op[O.IF]  # jump targets are absolute
    pc = main.instructions.index(raw)
    assert dec[3:] == (pc + raw[3], pc + raw[4])
    boom = d.decode_function(ex, ex.function_index("boom")).code
    assert boom[0][-1] == "boom!"  # FATAL's message text


def test_alloc_adt_of_tag_minus_one_is_its_own_decoded_opcode():
    ex = h.every_opcode_program()
    ops = _ops(ex, "main")
    assert d.ALLOC_TUPLE in ops and O.ALLOC_ADT in ops


def test_tail_calls_are_marked_and_other_calls_are_not():
    assert d.TAIL_INVOKE in _ops(h.counting_loop(), "loop")
    ops = _ops(h.recursive_sum(), "total")
    assert O.INVOKE in ops and d.TAIL_INVOKE not in ops


def test_a_constant_feeding_an_if_is_one_superinstruction():
    ex = h.recursive_sum()
    first = d.decode_function(ex, 0).code[0]
    assert first[0] == d.IF_CONST and first[-1] == 2  # covers LOAD_CONSTI and IF
    raw_if = ex.functions[0].instructions[1]
    assert first[5:7] == (1 + raw_if[3], 1 + raw_if[4])


def _allocs(kill: bool, nbytes: int) -> Executable:
    b = ExecBuilder()
    f = b.function("main", ())
    size, st, t = (f.new_register() for _ in range(3))
    f.emit(O.LOAD_CONSTI, size, nbytes)
    f.emit(O.ALLOC_STORAGE, st, size, 64, "float32")
    f.emit(O.ALLOC_TENSOR, t, st, 0, (nbytes // 4,), "float32")
    if kill:
        f.emit(O.KILL_REGISTER, st)
    f.emit(O.RET, t)
    return b.build()


@pytest.mark.parametrize(("nbytes", "tiny"), [(16, True), (4096, False)])
def test_made_viewed_killed_is_one_superinstruction(nbytes, tiny):
    ex = _allocs(True, nbytes)
    fused = d.decode_function(ex, 0).code[0]
    assert fused[0] == d.ALLOC_STATIC and fused[-1] == 4 and fused[9] is tiny
    out = VirtualMachine(ex, exec_mode="bytecode")["main"]()
    assert out.shape == (nbytes // 4,) and out.dtype == np.float32


def test_a_block_kept_alive_is_not_fused():
    ops = _ops(_allocs(False, 16), "main")
    assert ops[:3] == [O.LOAD_CONSTI, O.ALLOC_STORAGE, O.ALLOC_TENSOR]


@pytest.mark.parametrize("exec_mode", ["bytecode", "compiled"])
def test_a_jump_into_a_superinstruction_runs_its_later_instructions(exec_mode):
    ex = h.count_down()
    assert d.decode_function(ex, 0).code[1][0] == d.IF_CONST
    vm = VirtualMachine(ex, exec_mode=exec_mode)
    assert vm["count"](np.array(4, np.int64), np.array(10, np.int64)) == 14


def test_the_single_view_block_rule_is_shared_by_both_modes():
    """`bytecode.is_single_view_block` decides both the loop's ALLOC_STATIC and the compiled
    mode's one-call allocation: a kept block is neither."""
    from rvm.runtime.bytecode import is_single_view_block

    assert is_single_view_block(_allocs(True, 4096).functions[0].instructions, 1)
    kept = _allocs(False, 4096)
    assert not is_single_view_block(kept.functions[0].instructions, 1)
    vm = VirtualMachine(kept, exec_mode="compiled")
    assert "_alloc_view" not in vm.compiled_source("main")
    assert "_alloc_view" in VirtualMachine(_allocs(True, 4096)).compiled_source("main")
