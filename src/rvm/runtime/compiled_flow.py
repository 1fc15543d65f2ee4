"""Analyses of a VM function's bytecode for the compiled exec mode (`compiled_codegen.py`).

Everything here reads the raw instructions of one `VMFunction` and the operand kinds of
`OPCODE_INFO`, never the decoded form, so the compiled mode depends only on the executable:

- the control-flow successors of every pc (IF / GOTO made absolute; RET, FATAL and tail calls
  end a path; a tail call is INVOKE / INVOKE_CLOSURE directly followed by RET of its dst, the
  same rule as `decode.py`);
- which registers every instruction reads and writes (`dst` operands are written, KILL_REGISTER
  writes None, every other `reg` / `regs` operand is read);
- two forward dataflow problems over int bitsets: the registers *surely assigned* before each
  pc (a register read where it may be unassigned is set to None at entry, as the bytecode
  loop's register file starts), and the registers that *may hold memory* (assigned by anything
  but a constant load and not killed since), which a self tail call clears so that memory
  returns to the allocator as early as when the bytecode loop drops the frame;
- a tiny type lattice: registers written only by ALLOC_TENSOR(_REG) of dtype bool, only by
  GET_TAG, or only by one LOAD_CONSTI, which lets IF compile to `if r7:` instead of a 0-d array
  comparison (for a bool tensor `x == 1` and `bool(x)` agree);
- small blocks: constant-size storage of at most `SMALL_STORAGE` bytes whose tensors can be
  plain numpy arrays, and whether they are all one view of it (`shared_tensor`).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from rvm.runtime.bytecode import OPCODE_INFO, Opcode

__all__ = ["FlowInfo"]

_CONST_LOADS = (Opcode.LOAD_CONST, Opcode.LOAD_CONSTI, Opcode.KILL_REGISTER)


def _mask(regs: Iterable[int]) -> int:
    out = 0
    for r in regs:
        out |= 1 << r
    return out


def reads_writes(ins: tuple) -> tuple[list[int], list[int]]:
    """The registers instruction `ins` reads and writes, from the opcode table."""
    op = Opcode(ins[0])
    reads: list[int] = []
    writes: list[int] = []
    for (field, kind), v in zip(OPCODE_INFO[op].operands, ins[1:]):
        if kind == "reg":
            (writes if field == "dst" or op == Opcode.KILL_REGISTER else reads).append(v)
        elif kind == "regs":
            reads.extend(v)
    return reads, writes


SMALL_STORAGE = 64
"""Bytes up to which a constant-size storage block is replaced by plain numpy arrays."""


class FlowInfo:
    """Control flow, dataflow and register kinds of one function (see the module docstring).

    Attributes:
        code: The raw instructions.
        nparams: The number of parameters (registers 0..nparams-1).
        index: The function's index in the executable.
        tails: pcs of tail calls (INVOKE / INVOKE_CLOSURE followed by RET of their dst).
        self_tails: The tail calls that invoke the function itself.
        succ: The successors of each pc.
        must: Per pc, the bitset of registers surely assigned before it runs.
        may_hold: Per pc, the bitset of registers that may hold memory before it runs.
        needs_init: Registers read where they may be unassigned (start as None).
        writers: Per register, the pcs that write it.
        readers: Per register, the pcs that read it.
        loops: Whether some pc may run more than once per call (a self tail call or a
            backward jump).
    """

    def __init__(self, code: tuple[tuple, ...], nparams: int, index: int) -> None:
        self.code = code
        self.nparams = nparams
        self.index = index
        self.tails: set[int] = set()
        self.self_tails: set[int] = set()
        for pc, ins in enumerate(code[:-1]):
            nxt = code[pc + 1]
            if (
                ins[0] in (Opcode.INVOKE, Opcode.INVOKE_CLOSURE)
                and nxt[0] == Opcode.RET
                and nxt[1] == ins[1]
            ):
                self.tails.add(pc)
                if ins[0] == Opcode.INVOKE and ins[2] == index:
                    self.self_tails.add(pc)
        self.rw = [reads_writes(ins) for ins in code]
        self.succ = [self._successors(pc) for pc in range(len(code))]
        self.writers: dict[int, list[int]] = {}
        self.readers: dict[int, list[int]] = {}
        for pc, (reads, writes) in enumerate(self.rw):
            for r in writes:
                self.writers.setdefault(r, []).append(pc)
            for r in reads:
                self.readers.setdefault(r, []).append(pc)
        self._shared: dict[int, tuple[tuple[int, ...], str] | None] = {}
        self.must = self._must_assigned()
        self.may_hold = self._may_hold()
        init = 0
        for pc, (reads, _) in enumerate(self.rw):
            init |= _mask(reads) & ~self.must[pc]
        self.needs_init = sorted(r for r in range(init.bit_length()) if init >> r & 1)
        back = any(s <= pc for pc, succ in enumerate(self.succ) for s in succ)
        self.loops = bool(self.self_tails) or back

    def _successors(self, pc: int) -> list[int]:
        ins = self.code[pc]
        op = ins[0]
        if op == Opcode.IF:
            return [pc + ins[3], pc + ins[4]]
        if op == Opcode.GOTO:
            return [pc + ins[1]]
        if op in (Opcode.RET, Opcode.FATAL) or pc in self.tails:
            return []
        return [pc + 1]

    def _solve(
        self, entry: int, top: int, meet_and: bool, transfer: list[tuple[int, int]]
    ) -> list[int]:
        """A forward dataflow fixpoint: out = (in & keep) | gen, met by AND or OR."""
        n = len(self.code)
        state = [top] * n
        state[0] = entry
        work = [0]
        seen = [False] * n
        seen[0] = True
        while work:
            pc = work.pop()
            keep, gen = transfer[pc]
            out = (state[pc] & keep) | gen
            for s in self.succ[pc]:
                new = (state[s] & out) if meet_and else (state[s] | out)
                if s == 0:
                    new = (new & entry) if meet_and else (new | entry)
                if not seen[s] or new != state[s]:
                    seen[s] = True
                    state[s] = new
                    work.append(s)
        return state

    def _must_assigned(self) -> list[int]:
        transfer = [(-1, _mask(writes)) for _, writes in self.rw]
        return self._solve(_mask(range(self.nparams)), -1, True, transfer)

    def _may_hold(self) -> list[int]:
        transfer = []
        for ins, (_, writes) in zip(self.code, self.rw):
            if ins[0] in _CONST_LOADS:
                transfer.append((~_mask(writes), 0))
            else:
                transfer.append((-1, _mask(writes)))
        return self._solve(0, 0, False, transfer)

    # -- register kinds ------------------------------------------------------------------

    def _only_written_by(self, reg: int, ops: tuple[Opcode, ...]) -> list[tuple]:
        pcs = self.writers.get(reg, [])
        if reg < self.nparams or not pcs:
            return []
        found = [self.code[pc] for pc in pcs]
        return found if all(ins[0] in ops for ins in found) else []

    def const_int(self, reg: int, pc: int) -> int | None:
        """The value of `reg` at `pc` if its only write is one LOAD_CONSTI and it ran."""
        found = self._only_written_by(reg, (Opcode.LOAD_CONSTI,))
        if len(found) == 1 and self.must[pc] >> reg & 1:
            return found[0][2]
        return None

    def small_storage(self, reg: int) -> bool:
        """Whether every write of `reg` is an ALLOC_STORAGE of a constant size of at most
        `SMALL_STORAGE` bytes: its tensors are then plain `np.empty` arrays (numpy's allocator
        beats a pool lookup for a few bytes), and the block itself is never needed."""
        pcs = [pc for pc in self.writers.get(reg, []) if self.code[pc][0] != Opcode.KILL_REGISTER]
        if reg < self.nparams or not pcs:
            return False
        for pc in pcs:
            ins = self.code[pc]
            if ins[0] != Opcode.ALLOC_STORAGE:
                return False
            size = self.const_int(ins[2], pc)
            if size is None or size > SMALL_STORAGE:
                return False
        # Only static-shape tensors may be made from it (and the block only killed).
        return all(
            self.code[pc][0] in (Opcode.ALLOC_TENSOR, Opcode.KILL_REGISTER)
            for pc in self.readers.get(reg, [])
        )

    def shared_tensor(self, reg: int) -> tuple[tuple[int, ...], str] | None:
        """The (shape, dtype) of the tensors of small storage `reg` when they are all the same
        view (one offset, shape and dtype that fits every block): the block can then be that
        one tensor, made at ALLOC_STORAGE. The memory plan put them in one block because each
        is dead when the next is made, so they share memory in the bytecode loop too."""
        if reg not in self._shared:
            self._shared[reg] = self._shared_tensor(reg)
        return self._shared[reg]

    def _shared_tensor(self, reg: int) -> tuple[tuple[int, ...], str] | None:
        if not self.small_storage(reg):
            return None
        views = set()
        for pc in self.readers.get(reg, []):
            ins = self.code[pc]
            if ins[0] == Opcode.ALLOC_TENSOR:
                views.add((ins[3], tuple(ins[4]), ins[5]))
        if len(views) != 1:
            return None
        ((offset, shape, dtype),) = views
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        allocs = [pc for pc in self.writers[reg] if self.code[pc][0] == Opcode.ALLOC_STORAGE]
        sizes = [self.const_int(self.code[pc][2], pc) for pc in allocs]
        if offset < 0 or any(size is None or offset + nbytes > size for size in sizes):
            return None
        return shape, dtype

    def is_bool_tensor(self, reg: int, pc: int) -> bool:
        """Whether `reg` surely holds a bool tensor at `pc`."""
        found = self._only_written_by(reg, (Opcode.ALLOC_TENSOR, Opcode.ALLOC_TENSOR_REG))
        return (
            bool(found)
            and all(ins[5] == "bool" for ins in found)
            and bool(self.must[pc] >> reg & 1)
        )

    def is_tag(self, reg: int, pc: int) -> bool:
        """Whether `reg` surely holds an ADT tag (a Python int) at `pc`."""
        return bool(self._only_written_by(reg, (Opcode.GET_TAG,))) and bool(
            self.must[pc] >> reg & 1
        )

    def clear_at_self_tail(self, pc: int) -> list[int]:
        """Registers to set to None when the self tail call at `pc` restarts the function."""
        held = (self.may_hold[pc] | _mask(self.needs_init)) & ~_mask(self.code[pc][3])
        return [r for r in range(self.nparams, held.bit_length()) if held >> r & 1]
