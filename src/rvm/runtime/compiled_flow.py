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
- small blocks: constant-size storage that is tiny (`memory.is_tiny`), whose tensors can be
  plain numpy arrays, and whether they are all one view of it (`shared_tensor`);
- the shape builtin calls written inline, and their statements (`ShapePlan`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from rvm.dtypes import numpy_dtype
from rvm.runtime.builtins import as_str
from rvm.runtime.bytecode import OPCODE_INFO, Opcode, is_tail_call
from rvm.runtime.memory import is_tiny

__all__ = ["FlowInfo", "ShapePlan"]

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
        for pc, ins in enumerate(code):
            if is_tail_call(code, pc):
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

    def small_storage(self, reg: int) -> bool:
        """Whether every write of `reg` is an ALLOC_STORAGE of a constant, tiny size
        (`memory.is_tiny`): its tensors are then plain `np.empty` arrays, and the block itself
        is never needed."""
        pcs = [pc for pc in self.writers.get(reg, []) if self.code[pc][0] != Opcode.KILL_REGISTER]
        if reg < self.nparams or not pcs:
            return False
        for pc in pcs:
            ins = self.code[pc]
            if ins[0] != Opcode.ALLOC_STORAGE:
                return False
            size = self.const_int(ins[2], pc)
            if size is None or not is_tiny(size):
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
        nbytes = int(np.prod(shape, dtype=np.int64)) * numpy_dtype(dtype).itemsize
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


class ShapePlan:
    """The calls of the shape builtins a function's generated code runs inline.

    `shape_builtins` maps primitive indices to the shape builtin (`alloc_shape_heap`, `match_shape`,
    `make_shape`, `storage_size`) the VM resolved them to, by identity: a name registered to
    another function is not in it. A call is written inline only where its effect is known when
    the code is generated; every other call stays a call of the builtin:

    - a heap becomes a Python list of `size` zeros when its size is a constant, it is written
      only there, and every reader is a `match_shape` / `make_shape` with a constant, valid
      pattern whose slots are in range (the same values as the int64 array: ints read back);
    - those `match_shape` calls compare the dims with plain ints (an unknown dim, kind 3, only
      counts toward the rank); on any mismatch (or a value that is not an ndarray) they call
      the builtin, which raises its own error;
    - those `make_shape` results are Python tuples of ints when every reader takes a tuple (a
      `storage_size` with a constant dtype, the shape of ALLOC_TENSOR_REG or RESHAPE_TENSOR,
      KILL_REGISTER), else fresh 1-d int64 arrays as the builtin makes;
    - a `storage_size` of such a tuple is the product of its dims times the dtype's itemsize.

    Attributes:
        calls: pc -> the builtin written inline there.
        heaps: Heap register -> its size, for heaps held as lists.
        tuples: Shape registers held as tuples.
        pairs: pc -> the (kind, value) pairs of an inline `match_shape` / `make_shape`.
        itemsize: pc -> the dtype's itemsize of an inline `storage_size`.
        consts: pc -> {register: its LOAD_CONST(I)} for the constant arguments named directly.
    """

    def __init__(self, flow: FlowInfo, constants: list, shape_builtins: dict[int, str]) -> None:
        self.calls: dict[int, str] = {}
        self.heaps: dict[int, int] = {}
        self.tuples: set[int] = set()
        self.pairs: dict[int, list[tuple[int, int]]] = {}
        self.itemsize: dict[int, int] = {}
        self.consts: dict[int, dict[int, tuple]] = {}
        self._flow = flow
        self._constants = constants
        self._kind = {
            pc: shape_builtins[ins[2]]
            for pc, ins in enumerate(flow.code)
            if ins[0] == Opcode.CALL_PACKED and ins[2] in shape_builtins
        }
        for pc, kind in self._kind.items():
            if kind == "alloc_shape_heap":
                self._plan_heap(pc)
        for pc, kind in list(self.calls.items()):
            if kind == "make_shape":
                self._plan_tuple(flow.code[pc][1])

    def _const(self, reg: int, pc: int) -> tuple | None:
        load = self._flow.const_load(reg, pc)
        if load is not None:
            self.consts.setdefault(pc, {})[reg] = load
        return load

    def _pattern(self, reg: int, pc: int, kinds: tuple[int, ...], size: int) -> list | None:
        """The (kind, value) pairs of a constant pattern, if valid with slots in range."""
        load = self._flow.const_load(reg, pc)
        if load is None or load[0] != Opcode.LOAD_CONST:
            return None
        value = self._constants[load[2]]
        if not isinstance(value, np.ndarray) or value.dtype.kind != "i" or value.ndim != 1:
            return None
        flat = value.tolist()
        pairs = list(zip(flat[::2], flat[1::2]))
        slot_kinds = (1, 2)  # the kinds whose value is a heap slot
        if len(flat) % 2 or any(
            k not in kinds or (k in slot_kinds and not 0 <= v < size) for k, v in pairs
        ):
            return None
        return pairs

    def _plan_heap(self, pc: int) -> None:
        flow, ins = self._flow, self._flow.code[pc]
        heap, size_args = ins[1], ins[3]
        load = flow.const_load(size_args[0], pc) if len(size_args) == 1 else None
        size = load[2] if load is not None and load[0] == Opcode.LOAD_CONSTI else -1
        writers = [w for w in flow.writers[heap] if flow.code[w][0] != Opcode.KILL_REGISTER]
        if size < 0 or heap < flow.nparams or writers != [pc]:
            return
        uses: dict[int, tuple[str, list]] = {}
        for r in flow.readers.get(heap, []):
            use = flow.code[r]
            kind = self._kind.get(r)
            if use[0] == Opcode.KILL_REGISTER:
                continue
            if not flow.assigned(heap, r) or kind not in ("match_shape", "make_shape"):
                return
            args = use[3]
            at, nargs, kinds = (
                (1, (3, 4), (0, 1, 2, 3)) if kind == "match_shape" else (0, (2,), (0, 1))
            )
            if len(args) not in nargs or [i for i, a in enumerate(args) if a == heap] != [at]:
                return
            pairs = self._pattern(args[at + 1], r, kinds, size)
            if pairs is None:
                return
            uses[r] = (kind, pairs)
        self.heaps[heap] = size
        self.calls[pc] = "alloc_shape_heap"
        self._const(size_args[0], pc)
        for r, (kind, pairs) in uses.items():
            self.calls[r], self.pairs[r] = kind, pairs
            for a in flow.code[r][3]:
                if a != heap:
                    self._const(a, r)

    def _plan_tuple(self, reg: int) -> None:
        flow = self._flow
        if reg in self.tuples or reg < flow.nparams:
            return
        for w in flow.writers[reg]:
            if flow.code[w][0] != Opcode.KILL_REGISTER and self.calls.get(w) != "make_shape":
                return
        sizes: dict[int, int] = {}
        for r in flow.readers.get(reg, []):
            use = flow.code[r]
            op = use[0]
            if op == Opcode.KILL_REGISTER:
                continue
            if not flow.assigned(reg, r):
                return
            if op == Opcode.ALLOC_TENSOR_REG and use[4] == reg and use[2] != reg:
                continue
            if op == Opcode.RESHAPE_TENSOR and use[3] == reg and use[2] != reg:
                continue
            if self._kind.get(r) != "storage_size" or len(use[3]) != 2 or use[3][1] == reg:
                return
            load = flow.const_load(use[3][1], r)
            if load is None or load[0] != Opcode.LOAD_CONST:
                return
            try:
                sizes[r] = numpy_dtype(as_str(self._constants[load[2]])).itemsize
            except (TypeError, ValueError):
                return
        self.tuples.add(reg)
        for r, itemsize in sizes.items():
            self.calls[r], self.itemsize[r] = "storage_size", itemsize
            self._const(flow.code[r][3][1], r)

    def only_pattern(self, reg: int) -> list[tuple[int, int]] | None:
        """The pattern of the one `make_shape` that writes tuple `reg`, if one does."""
        writers = [w for w in self._flow.writers[reg] if self.calls.get(w) == "make_shape"]
        return self.pairs[writers[0]] if len(writers) == 1 else None

    # -- the inline code -------------------------------------------------------------------

    def lines(self, pc: int, packed: str, arg: Callable[[int], str]) -> list[tuple[int, str]]:
        """The inline statements of the call at `pc` as (extra indent, text) pairs; `packed` is
        the builtin's name in the generated code, `arg(reg)` an argument's expression."""
        ins = self._flow.code[pc]
        kind, dst, args = self.calls[pc], f"r{ins[1]}", ins[3]
        if kind == "alloc_shape_heap":
            size = self.heaps[ins[1]]
            return [(0, f"{dst} = {[0] * size!r}" if size <= 8 else f"{dst} = [0] * {size}")]
        if kind == "storage_size":
            return [(0, f"{dst} = {self._size(pc, f'r{args[0]}', args[0])}")]
        if kind == "make_shape":
            heap = f"r{args[0]}"
            dims = [str(v) if k == 0 else f"{heap}[{v}]" for k, v in self.pairs[pc]]
            tup = f"({', '.join(dims)}{',' if len(dims) == 1 else ''})"
            return [(0, f"{dst} = {tup if ins[1] in self.tuples else f'_array({tup}, _int64)'}")]
        return self._match(pc, packed, arg)

    def _size(self, pc: int, shape: str, reg: int) -> str:
        """storage_size: the symbolic dims of tuple `shape` times the rest, folded."""
        pattern = self.only_pattern(reg)
        if pattern is None:
            return f"_prod({shape}) * {self.itemsize[pc]}"
        factor = self.itemsize[pc]
        for k, v in pattern:
            factor *= v if k == 0 else 1
        dims = [f"{shape}[{axis}]" for axis, (k, _) in enumerate(pattern) if k == 1]
        return " * ".join(dims + [str(factor)])

    def _match(self, pc: int, packed: str, arg: Callable[[int], str]) -> list[tuple[int, str]]:
        """match_shape: the dims compared as ints, stored on success; on any mismatch the
        builtin runs from the same heap and raises its own error."""
        ins = self._flow.code[pc]
        tensor, heap = arg(ins[3][0]), f"r{ins[3][1]}"
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
            elif k == 2:
                test.append(
                    f"_s[{axis}] == {f'_s[{set_at[v]}]' if v in set_at else f'{heap}[{v}]'}"
                )  # kind 3, an unknown dim, tests nothing: the rank test covers its axis
        call = f"{packed}({', '.join(arg(a) for a in ins[3])})"
        if stores:
            head = [(0, f"if {' and '.join(test)}:"), *((1, st) for st in stores), (0, "else:")]
        else:
            head = [(0, f"if not ({' and '.join(test)}):")]
        return [*head, (1, call), (0, f"r{ins[1]} = {tensor}")]
