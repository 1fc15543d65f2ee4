"""The compiled mode's analyses (`compiled_flow.FlowInfo`) and control-flow recovery: facts
checked on small hand-built functions, and the recovered code run against the bytecode loop."""

from __future__ import annotations

import numpy as np
import pytest
import rt_helpers as h

from rvm.runtime import ExecBuilder, Executable, Opcode, VirtualMachine
from rvm.runtime.modes.compiled_codegen import Names, generate_source
from rvm.runtime.modes.lowering.flow import FlowInfo

O = Opcode


def _flow(ex: Executable, index: int = 0) -> FlowInfo:
    fn = ex.functions[index]
    return FlowInfo(fn.instructions, len(fn.params), index)


def _structured(ex: Executable, index: int = 0) -> bool:
    return generate_source(ex, index, Names(ex)).structured


def test_self_tail_call_loop():
    flow = _flow(h.counting_loop())
    code = flow.code
    (tail,) = flow.tails
    assert code[tail][0] == O.TAIL_INVOKE and flow.self_tails == {tail}
    assert flow.succ[0] == [code[0][3], code[0][4]]  # IF: both targets
    assert flow.succ[tail] == []  # a tail call ends the path, as RET does
    assert flow.loops


def test_a_plain_call_is_not_a_tail_call_and_constants_are_known():
    ex = h.recursive_sum()
    flow = _flow(ex)
    assert not flow.tails and not flow.loops
    assert flow.succ[0] == [flow.code[0][3], 0 + flow.code[0][4]]  # IF_IMM: both targets
    zero = flow.code[1][1]
    assert flow.const_int(zero, 2) == 0  # LOAD_CONSTI at pc 1 ran before the RET
    assert flow.const_int(zero, 1) is None  # ...but not before itself
    assert _structured(ex)


def _maybe_unassigned() -> Executable:
    """pick(x): r = c0 on one branch only, then RET r: r may be read unassigned."""
    b = ExecBuilder()
    b.add_constant(np.float32(2.5))
    f = b.function("pick", ("x",), (h.tensor("x", (), "int64"),))
    one, r = f.new_register(), f.new_register()
    then, join = f.label(), f.label()
    f.emit(O.LOAD_CONSTI, one, 1)
    f.emit(O.IF, 0, one, then, join)
    f.place(then)
    f.emit(O.LOAD_CONST, r, 0)
    f.place(join)
    f.emit(O.RET, r)
    return b.build()


def test_registers_read_where_they_may_be_unassigned_start_as_none():
    ex = _maybe_unassigned()
    flow = _flow(ex)
    one, r = flow.code[0][1], flow.code[-1][1]
    assert flow.needs_init == [r]
    assert flow.assigned(one, 1) and not flow.assigned(r, 3)  # pc 3 joins a path without r
    vm = VirtualMachine(ex, exec_mode="compiled")
    assert vm["pick"](np.array(1, np.int64)) == np.float32(2.5)
    assert vm["pick"](np.array(0, np.int64)) is None  # as in the bytecode loop


def _loop_with_garbage() -> Executable:
    """spin(i, n): tmp = i + i (never used), then loop(i + 1, n) until i == n."""
    b = ExecBuilder()
    add = b.add_kernel(h.ADD_RET)
    specs = (h.tensor("i", (), "int64"), h.tensor("n", (), "int64"))
    f = b.function("spin", ("i", "n"), specs)
    done, body = f.label(), f.label()
    f.emit(O.IF, 0, 1, done, body)
    f.place(body)
    one, tmp, nxt = (f.new_register() for _ in range(3))
    f.emit(O.LOAD_CONSTI, one, 1)
    f.emit(O.CALL_PACKED, tmp, add, (0, 0))
    f.emit(O.CALL_PACKED, nxt, add, (0, one))
    f.emit(O.TAIL_INVOKE, "spin", (nxt, 1))
    f.place(done)
    f.emit(O.RET, 0)
    return b.build()


def test_a_self_tail_call_clears_what_may_hold_memory():
    ex = _loop_with_garbage()
    flow = _flow(ex)
    (tail,) = flow.self_tails
    one, tmp, nxt = flow.code[tail - 3][1], flow.code[tail - 2][1], flow.code[tail - 1][1]
    cleared = flow.clear_at_self_tail(tail)
    assert tmp in cleared  # a kernel's result nothing reads again
    assert nxt not in cleared  # it becomes the parameter `i`
    assert one not in cleared  # a constant load holds no memory of the run
    vm = VirtualMachine(ex, exec_mode="compiled")
    assert vm["spin"](np.array(0, np.int64), np.array(50, np.int64)) == 50


def test_a_backward_jump_falls_back_to_the_block_state_machine():
    ex = h.count_down()
    flow = _flow(ex)
    assert flow.loops and not flow.self_tails
    assert not _structured(ex)
    args = (np.array(6, np.int64), np.array(1, np.int64))
    for mode in ("bytecode", "compiled"):
        assert VirtualMachine(ex, exec_mode=mode)["count"](*args) == 7


@pytest.mark.parametrize("depth", [3, 70])
def test_nested_ifs_are_recovered_as_structured_code_up_to_the_parser_limit(depth):
    """f(x) = depth nested `if x == k` tests; past Python's nesting limit the state machine
    runs it, with the same result."""
    b = ExecBuilder()
    b.add_constant(np.float32(1.0))
    f = b.function("nest", ("x",), (h.tensor("x", (), "int64"),))
    k, r = f.new_register(), f.new_register()
    end = f.label()
    f.emit(O.LOAD_CONST, r, 0)
    for i in range(depth):
        inner = f.label()
        f.emit(O.LOAD_CONSTI, k, i)
        f.emit(O.IF, 0, k, end, inner)
        f.place(inner)
    f.place(end)
    f.emit(O.RET, r)
    ex = b.build()
    assert _structured(ex) == (depth < 50)
    for mode in ("bytecode", "compiled"):
        assert VirtualMachine(ex, exec_mode=mode)["nest"](np.array(2, np.int64)) == 1.0
