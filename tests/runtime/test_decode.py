"""Decoding (`rvm.runtime.modes.decode`): what the bytecode loop's tuples hold, the variants chosen
from an instruction's own operands, and that nothing is fused from the order of instructions."""

from __future__ import annotations

import numpy as np
import pytest
import rt_helpers as h

from rvm.runtime import ExecBuilder, Executable, Opcode, VirtualMachine
from rvm.runtime.modes import decode as d

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


def test_tail_calls_are_their_own_opcodes_with_operands_decoded():
    ex = h.counting_loop()
    raw = next(i for i in ex.functions[0].instructions if i[0] == O.TAIL_INVOKE)
    dec = next(i for i in d.decode_function(ex, 0).code if i[0] == O.TAIL_INVOKE)
    regs = list(range(100, 200))
    assert dec[1] == raw[1] == 0 and list(dec[2](regs)) == [regs[r] for r in raw[2]]
    ops = _ops(h.recursive_sum(), "total")  # a call whose result is used is a plain INVOKE
    assert O.INVOKE in ops and O.TAIL_INVOKE not in ops


def test_if_imm_decodes_to_absolute_targets_and_its_int():
    ex = h.every_opcode_program()
    main = ex.functions[ex.function_index("main")]
    pc = next(pc for pc, i in enumerate(main.instructions) if i[0] == O.IF_IMM)
    raw, dec = main.instructions[pc], d.decode_function(ex, ex.function_index("main")).code[pc]
    assert dec == (O.IF_IMM, raw[1], 7, pc + raw[3], pc + raw[4])


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


def _new_tensor(nbytes: int) -> Executable:
    b = ExecBuilder()
    f = b.function("main", ())
    t = f.new_register()
    f.emit(O.NEW_TENSOR, t, (nbytes // 4,), "float32", 64)
    f.emit(O.RET, t)
    return b.build()


@pytest.mark.parametrize(("nbytes", "tiny"), [(16, True), (64, True), (68, False), (4096, False)])
def test_new_tensor_is_tiny_by_its_own_size(nbytes, tiny):
    """The tiny-tensor rule is applied to NEW_TENSOR's own operands: a variant of its own."""
    ex = _new_tensor(nbytes)
    dec = d.decode_function(ex, 0).code[0]
    assert dec[0] == (d.NEW_TINY if tiny else O.NEW_TENSOR)
    assert dec[-1] == nbytes  # the derived block size
    for mode in ("bytecode", "compiled"):
        out = VirtualMachine(ex, exec_mode=mode)["main"]()
        assert out.shape == (nbytes // 4,) and out.dtype == np.float32


@pytest.mark.parametrize("kill", [True, False])
def test_nothing_is_fused_from_the_order_of_instructions(kill):
    """A block made, viewed and killed in a row stays three instructions: only the compiler,
    which emits NEW_TENSOR, says a block serves one tensor."""
    ex = _allocs(kill, 16)
    raw = [i[0] for i in ex.functions[0].instructions]
    assert _ops(ex, "main") == raw
    out = VirtualMachine(ex, exec_mode="compiled")["main"]()
    assert out.shape == (4,) and out.dtype == np.float32


@pytest.mark.parametrize("exec_mode", ["bytecode", "compiled"])
def test_a_backward_jump_to_an_if_runs_in_both_modes(exec_mode):
    vm = VirtualMachine(h.count_down(), exec_mode=exec_mode)
    assert vm["count"](np.array(4, np.int64), np.array(10, np.int64)) == 14
