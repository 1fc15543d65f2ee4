"""Analyses of a VM function's bytecode for the generated exec modes (compiled and native).

Everything here reads the raw instructions of one `VMFunction` and the operand kinds of
`OPCODE_INFO`, never the decoded form, so the generated modes depend only on the executable:

- the control-flow successors of every pc (IF / IF_IMM / GOTO made absolute; RET, FATAL and
  the tail calls, TAIL_INVOKE / TAIL_INVOKE_CLOSURE, end a path);
- which registers every instruction reads and writes (`dst` operands are written, KILL_REGISTER
  writes None, every other `reg` / `regs` operand is read);
- two forward dataflow problems over int bitsets: the registers *surely assigned* before each
  pc (a register read where it may be unassigned is set to None at entry, as the bytecode
  loop's register file starts), and the registers that *may hold memory* (assigned by anything
  but a constant load and not killed since), which a self tail call clears so that memory
  returns to the allocator as early as when the bytecode loop drops the frame;
- a tiny type lattice: registers written only by tensor allocations of dtype bool, only by
  GET_TAG, or only by one LOAD_CONSTI, which lets IF_IMM compile to `if r7:` instead of a 0-d
  array comparison (for a bool tensor `x == 1` and `bool(x)` agree);
- the shape instructions written inline, and their statements (`ShapePlan`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rvm.runtime import shape_patterns
from rvm.runtime.bytecode import OPCODE_INFO, TAIL_OPCODES, Opcode

__all__ = ["FlowInfo", "ShapePlan"]

_CONST_LOADS = (Opcode.LOAD_CONST, Opcode.LOAD_CONSTI, Opcode.KILL_REGISTER)
_DTYPE_AT = {
    op: 1 + [kind for _, kind in OPCODE_INFO[op].operands].index("dtype")
    for op in (
        Opcode.ALLOC_TENSOR,
        Opcode.ALLOC_TENSOR_REG,
        Opcode.NEW_TENSOR,
        Opcode.NEW_TENSOR_REG,
    )
}
"""The tensor allocations, each with the position of its dtype operand."""


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
        for pc, ins in enumerate(code):
            if ins[0] in TAIL_OPCODES:
                self.tails.add(pc)
                if ins[0] == Opcode.TAIL_INVOKE and ins[1] == index:
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
        self.must = self._must_assigned()
        self.may_hold = self._may_hold()
        init = 0
        for pc, (reads, _) in enumerate(self.rw):
            init |= _mask(reads) & ~self.must[pc]
        self.needs_init = sorted(r for r in range(init.bit_length()) if init >> r & 1)
        back = any(s <= pc for pc, succ in enumerate(self.succ) for s in succ)
        self.loops = bool(self.self_tails) or back

    def leaders(self) -> list[int]:
        """The first pc of every basic block, ascending: 0, every jump target, and every pc
        after a jump."""
        leaders = {0}
        for pc, succ in enumerate(self.succ):
            if succ != [pc + 1]:
                leaders.update(succ)
                leaders.add(pc + 1)
        return sorted(p for p in leaders if p < len(self.code))

    def _successors(self, pc: int) -> list[int]:
        ins = self.code[pc]
        op = ins[0]
        if op == Opcode.IF or op == Opcode.IF_IMM:
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
        load = self.const_load(reg, pc)
        return load[2] if load is not None and load[0] == Opcode.LOAD_CONSTI else None

    def const_load(self, reg: int, pc: int) -> tuple | None:
        """The LOAD_CONST / LOAD_CONSTI of `reg` if it is its only write and it ran by `pc`."""
        found = self._only_written_by(reg, (Opcode.LOAD_CONST, Opcode.LOAD_CONSTI))
        if len(found) == 1 and self.must[pc] >> reg & 1:
            return found[0]
        return None

    def assigned(self, reg: int, pc: int) -> bool:
        """Whether `reg` is surely assigned before `pc` runs."""
        return bool(self.must[pc] >> reg & 1)

    def is_bool_tensor(self, reg: int, pc: int) -> bool:
        """Whether `reg` surely holds a bool tensor at `pc`."""
        found = self._only_written_by(reg, tuple(_DTYPE_AT))
        return (
            bool(found)
            and all(ins[_DTYPE_AT[ins[0]]] == "bool" for ins in found)
            and bool(self.must[pc] >> reg & 1)
        )

    def is_tag(self, reg: int, pc: int) -> bool:
        """Whether `reg` surely holds an ADT tag (a Python int) at `pc`."""
        return bool(self._only_written_by(reg, (Opcode.GET_TAG,))) and bool(
            self.must[pc] >> reg & 1
        )

    def clear_at_self_tail(self, pc: int) -> list[int]:
        """Registers to set to None when the self tail call at `pc` restarts the function."""
        held = (self.may_hold[pc] | _mask(self.needs_init)) & ~_mask(self.code[pc][2])
        return [r for r in range(self.nparams, held.bit_length()) if held >> r & 1]


class ShapePlan:
    """The shape instructions a function's generated code runs inline.

    A heap of ALLOC_SHAPE_HEAP becomes a Python list of `size` zeros when it is written only
    there and every reader is a MATCH_SHAPE / MAKE_SHAPE reading it as the heap, with a valid
    pattern whose slots are in range (the same values as the int64 array: ints read back). Then:

    - those MATCH_SHAPE compare the dims with plain ints (an unknown dim, kind 3, only counts
      toward the rank); on any mismatch (or a value that is not an ndarray) they run their
      template, the builtin, which raises its own error;
    - those MAKE_SHAPE results are Python tuples of ints when every reader takes a tuple (the
      shape of NEW_TENSOR_REG, ALLOC_TENSOR_REG or RESHAPE_TENSOR, KILL_REGISTER), else fresh
      1-d int64 arrays as the builtin makes.

    Attributes:
        heaps: Heap register -> its size, for heaps held as lists.
        tuples: Shape registers held as tuples.
        pairs: pc -> the (kind, value) pairs of an inline MATCH_SHAPE / MAKE_SHAPE.
    """

    def __init__(self, flow: FlowInfo, constants: list) -> None:
        self.heaps: dict[int, int] = {}
        self.tuples: set[int] = set()
        self.pairs: dict[int, list[tuple[int, int]]] = {}
        self._flow = flow
        self._constants = constants
        for pc, ins in enumerate(flow.code):
            if ins[0] == Opcode.ALLOC_SHAPE_HEAP:
                self._plan_heap(pc)
        for pc in list(self.pairs):
            if flow.code[pc][0] == Opcode.MAKE_SHAPE:
                self._plan_tuple(flow.code[pc][1])

    def inline(self, pc: int) -> bool:
        """Whether the instruction at `pc` is written inline (`lines`)."""
        return pc in self.pairs or self._flow.code[pc][1] in self.heaps

    def _pattern(self, const: int, kinds: tuple[int, ...], size: int) -> list | None:
        """The (kind, value) pairs of pattern constant `const`, if valid with slots in range."""
        try:
            return shape_patterns.decode(self._constants[const], kinds, size)
        except shape_patterns.PatternError:
            return None

    def _plan_heap(self, pc: int) -> None:
        flow = self._flow
        heap, size = flow.code[pc][1], flow.code[pc][2]
        writers = [w for w in flow.writers[heap] if flow.code[w][0] != Opcode.KILL_REGISTER]
        if heap < flow.nparams or writers != [pc]:
            return
        uses: dict[int, list] = {}
        for r in flow.readers.get(heap, []):
            use = flow.code[r]
            if use[0] == Opcode.KILL_REGISTER:
                continue
            if use[0] == Opcode.MATCH_SHAPE and use[1] != heap:
                pairs = self._pattern(use[3], shape_patterns.MATCH_KINDS, size)
            elif use[0] == Opcode.MAKE_SHAPE:
                pairs = self._pattern(use[3], shape_patterns.MAKE_KINDS, size)
            else:
                return
            if pairs is None or not flow.assigned(heap, r):
                return
            uses[r] = pairs
        self.heaps[heap] = size
        self.pairs.update(uses)

    def _plan_tuple(self, reg: int) -> None:
        flow = self._flow
        if reg in self.tuples or reg < flow.nparams:
            return
        for w in flow.writers[reg]:
            if flow.code[w][0] != Opcode.KILL_REGISTER and w not in self.pairs:
                return
        for r in flow.readers.get(reg, []):
            use = flow.code[r]
            op = use[0]
            if op == Opcode.KILL_REGISTER:
                continue
            if not flow.assigned(reg, r):
                return
            takes_tuple = (
                (op == Opcode.NEW_TENSOR_REG and use[2] == reg)
                or (op == Opcode.ALLOC_TENSOR_REG and use[4] == reg and use[2] != reg)
                or (op == Opcode.RESHAPE_TENSOR and use[3] == reg and use[2] != reg)
            )
            if not takes_tuple:
                return
        self.tuples.add(reg)

    # -- the inline code -------------------------------------------------------------------

    def lines(self, pc: int, fallback: str) -> list[tuple[int, str]]:
        """The inline statements of the shape instruction at `pc` as (extra indent, text)
        pairs; `fallback` is its template rendered (what a failed match runs)."""
        ins = self._flow.code[pc]
        op = ins[0]
        if op == Opcode.ALLOC_SHAPE_HEAP:
            size, dst = ins[2], f"r{ins[1]}"
            return [(0, f"{dst} = {[0] * size!r}" if size <= 8 else f"{dst} = [0] * {size}")]
        if op == Opcode.MAKE_SHAPE:
            heap, dst = f"r{ins[2]}", f"r{ins[1]}"
            dims = [self._dim(k, v, heap, {}) for k, v in self.pairs[pc]]
            tup = f"({', '.join(dims)}{',' if len(dims) == 1 else ''})"
            return [(0, f"{dst} = {tup if ins[1] in self.tuples else f'_array({tup}, _int64)'}")]
        return self._match(pc, fallback)

    @staticmethod
    def _dim(kind: int, value: Any, heap: str, set_at: dict[int, int]) -> str:
        """A LITERAL / slot / EXPR dim as source; a slot this pattern sets reads its axis."""

        def slot(v: int) -> str:
            return f"_s[{set_at[v]}]" if v in set_at else f"{heap}[{v}]"

        if kind == shape_patterns.LITERAL:
            return str(value)
        if kind == shape_patterns.EXPR:
            return shape_patterns.render(value, slot)
        return slot(value)

    def _match(self, pc: int, fallback: str) -> list[tuple[int, str]]:
        """MATCH_SHAPE: the dims compared as ints, stored on success; on any mismatch the
        builtin runs from the same heap and raises its own error."""
        ins = self._flow.code[pc]
        tensor, heap = f"r{ins[1]}", f"r{ins[2]}"
        pairs = self.pairs[pc]
        test = [f"type({tensor}) is _ndarray", f"len(_s := {tensor}.shape) == {len(pairs)}"]
        stores: list[str] = []
        set_at: dict[int, int] = {}  # heap slot -> the axis of this pattern that set it
        for axis, (k, v) in enumerate(pairs):
            if k == 0:
                test.append(f"_s[{axis}] == {v}")
            elif k == 1:
                set_at[v] = axis
                stores.append(f"{heap}[{v}] = _s[{axis}]")
            elif k in (2, shape_patterns.EXPR):
                test.append(f"_s[{axis}] == {self._dim(k, v, heap, set_at)}")
            # kind 3, an unknown dim, tests nothing: the rank test covers its axis
        if stores:
            head = [(0, f"if {' and '.join(test)}:"), *((1, st) for st in stores), (0, "else:")]
        else:
            head = [(0, f"if not ({' and '.join(test)}):")]
        return [*head, (1, fallback)]
