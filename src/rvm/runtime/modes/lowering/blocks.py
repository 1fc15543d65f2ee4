"""One block state machine: a function's basic blocks as a `while True:` loop on `_pc`.

Both code-generating modes lower control flow they cannot write as structured code this way
(the native mode always does when a function jumps): each basic block (`FlowInfo.leaders`) is a
branch `if _pc == <leader>:` / `elif ...`; IF / IF_IMM set `_pc` to one of their targets by the
mode's test, GOTO to its target, and a block that falls off its end goes on to the next leader.
A statement that ends the path (RET, FATAL, a tail call) is the mode's own (`stmt` returns
True). With constant `_pc` stores, CPython runs one comparison chain per block and LLVM (the
native mode, through Numba) turns the chain into direct branches.
"""

from __future__ import annotations

from collections.abc import Callable

from rvm.runtime.bytecode import Opcode
from rvm.runtime.modes.lowering.flow import FlowInfo
from rvm.runtime.modes.lowering.writer import SourceWriter

__all__ = ["emit_block_machine", "restart"]


def emit_block_machine(
    w: SourceWriter,
    flow: FlowInfo,
    stmt: Callable[[int, int], bool],
    cond: Callable[[int], str],
    otherwise: str,
) -> None:
    """Writes the state machine of `flow`'s function at indent 1 of `w`.

    Args:
        w: The function's writer.
        flow: The function's flow analysis.
        stmt: `stmt(pc, indent)` writes the non-jump instruction at `pc`; True if it ends the
            path.
        cond: `cond(pc)`, the test of the IF / IF_IMM at `pc` (true: its first target).
        otherwise: The statement run if `_pc` names no block (it never does).
    """
    code = flow.code
    leaders = flow.leaders()
    w.line(1, "_pc = 0")
    w.line(1, "while True:")
    for k, start in enumerate(leaders):
        stop = leaders[k + 1] if k + 1 < len(leaders) else len(code)
        w.line(2, f"{'if' if k == 0 else 'elif'} _pc == {start}:")
        _block(w, flow, start, stop, stmt, cond)
    w.line(2, "else:")
    w.line(3, otherwise)


def _block(
    w: SourceWriter,
    flow: FlowInfo,
    pc: int,
    stop: int,
    stmt: Callable[[int, int], bool],
    cond: Callable[[int], str],
) -> None:
    code = flow.code
    while pc < stop:
        ins = code[pc]
        if ins[0] == Opcode.IF or ins[0] == Opcode.IF_IMM:
            w.line(3, f"_pc = {pc + ins[3]} if {cond(pc)} else {pc + ins[4]}", pc)
            w.line(3, "continue", pc)
            return
        if ins[0] == Opcode.GOTO:
            w.line(3, f"_pc = {pc + ins[1]}", pc)
            w.line(3, "continue", pc)
            return
        if stmt(pc, 3):
            return
        pc += 1
    w.line(3, f"_pc = {stop}")  # the chain ends the loop's body: on to the next block


def restart(w: SourceWriter, indent: int, pc: int) -> None:
    """A self tail call at `pc` in the state machine: back to block 0."""
    w.line(indent, "_pc = 0", pc)
    w.line(indent, "continue", pc)
