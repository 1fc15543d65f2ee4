"""Python source from bytecode: one function per VM function, for the compiled exec mode.

Registers become locals `r0, r1, ...` (the first k are the parameters), instructions become
statements rendered from their opcode's template in `semantics.py` (the bytecode loop renders
the same ones), each followed by a `# pc N: ...` comment, and a table maps every generated line to
its pc, so a failure in generated code is reported with the same VM stack as the bytecode loop.

Control flow is recovered from IF / GOTO when every jump is forward and nests: an IF whose
first branch starts right after it and ends by falling through, returning or `goto join`
becomes `if` / `if-else`; a GOTO to the current region's join ends the branch. A self tail call
(TAIL_INVOKE of the function itself) wraps the body in `while True:` and becomes
"rebind the parameters, clear the registers that may hold memory, continue". Anything else
(a backward jump, a jump out of a nested branch) falls back to a `while True:` loop over basic
blocks dispatched on a `_pc` local, which runs every control flow the bytecode loop runs.

Every generated function takes a hidden last parameter `_d`, the compiled call depth. Calls
pass `_d + 1`; past `_MAX_DEPTH` a function runs the call in the bytecode loop instead
(`_deep`), whose frame stack has no Python recursion, so recursion of any depth works without
raising Python's recursion limit (see `compiled.py`).

Names the generated code uses, bound once per VM in its namespace (`compiled.py`): packed
functions by their sanitized names, `f_<name>` for VM functions, `c<i>` for constants,
`i<v>` / `i_m<v>` for LOAD_CONSTI immediates, `dt_<name>` for dtypes, and `_alloc`,
`_ndarray`, `_empty`, `_ADT`, `_Closure`, `_Fatal`, `_array`, `_int64`, `_prod`,
`_call_closure`, `_deep`, `_MAX_DEPTH`, `_rc`, `_FREE`. Locals `_a<pc>` / `_b<pc>` are the two
slots of the tiny tensor allocation at `pc` in a loop (`ring_lines`); `_s` is the shape an
inline `match_shape` checks.

Shape instructions (`ShapePlan`): a heap only MATCH_SHAPE / MAKE_SHAPE read is a Python list,
MATCH_SHAPE compares ints (and runs its template, the builtin, on any mismatch, so the error is
the builtin's own), MAKE_SHAPE builds a tuple where every reader takes one.

Tiny tensors: a tiny NEW_TENSOR is a plain array by its template's variant; in a loop it
takes the array of two iterations before when nothing else refers to it (`ring_lines`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rvm.runtime import semantics as sem
from rvm.runtime.bytecode import Opcode
from rvm.runtime.modes.lowering.blocks import emit_block_machine, restart
from rvm.runtime.modes.lowering.flow import FlowInfo, ShapePlan
from rvm.runtime.modes.lowering.operands import Names, Operand, OperandRenderer, reg_tuple
from rvm.runtime.modes.lowering.writer import SourceWriter
from rvm.runtime.text import describe_instruction

if TYPE_CHECKING:
    from rvm.runtime.executable import Executable

__all__ = ["Names", "FunctionSource", "generate_source", "ring_lines", "ring_probe_source"]

O = Opcode
MAX_NESTING = 60  # Python's parser allows 100 indentation levels
_LOADS = (O.LOAD_CONST, O.LOAD_CONSTI)
_SHAPE_OPS = (O.ALLOC_SHAPE_HEAP, O.MATCH_SHAPE, O.MAKE_SHAPE)


class _Unstructured(Exception):
    """The control flow does not nest as structured code; use the block state machine."""


def _tiny(ins: tuple) -> bool:
    """Whether NEW_TENSOR `ins` is the tiny variant (a plain array, `semantics.VARIANTS`)."""
    return sem.template(ins)[0] == "tiny"


def _r(reg: int) -> str:
    return f"r{reg}"


def _args(regs: tuple[int, ...], extra: str) -> str:
    return ", ".join([_r(r) for r in regs] + [extra])


class _Operands(OperandRenderer):
    """The compiled mode's operands: `OperandRenderer`'s names, and a shape register read as
    dims is a tuple of ints (the one `ShapePlan` made, else the array's `tolist()`)."""

    def __init__(self, ex: Executable, names: Names, shapes: ShapePlan) -> None:
        super().__init__(ex, names)
        self._shapes = shapes

    def reg(self, o: Operand) -> str:
        if o.form == "dims" and o.value not in self._shapes.tuples:
            return f"tuple({_r(o.value)}.tolist())"
        return _r(o.value)


class FunctionSource:
    """The generated source of one VM function and its line -> pc table.

    Attributes:
        index: The function's index in the executable.
        pyname: The Python name of the generated function.
        source: The generated source text.
        line_pcs: Per line (index = line number - 1), the pc it runs, or None.
        tails: The pcs of tail calls (their frames vanish from the VM stack).
        structured: False when the block state machine was used.
    """

    def __init__(self, ex: Executable, index: int, names: Names) -> None:
        fn = ex.functions[index]
        self.index = index
        self.pyname = names.funcs[index]
        self._ex = ex
        self._names = names
        self._flow = FlowInfo(fn.instructions, len(fn.params), index)
        self._shapes = ShapePlan(self._flow, ex.constants)
        self._operands = _Operands(ex, names, self._shapes)
        self._dead = self._dead_constants()
        self._rings = self._ring_sites()
        self.tails = frozenset(self._flow.tails)
        self._w = SourceWriter(lambda pc: describe_instruction(ex, self._flow.code[pc]))
        try:
            self.structured = True
            self._emit_function(self._emit_structured)
        except _Unstructured:
            self.structured = False
            self._w.reset()
            self._emit_function(self._emit_state_machine)
        self.source = self._w.source
        self.line_pcs = self._w.line_pcs

    # -- lines -----------------------------------------------------------------------------

    def _line(self, indent: int, text: str, pc: int | None = None) -> None:
        self._w.line(indent, text, pc)

    def _emit_function(self, body: object) -> None:
        fn = self._ex.functions[self.index]
        params = [_r(i) for i in range(len(fn.params))]
        kind = "structured" if self.structured else "block state machine"
        self._line(0, f"def {self.pyname}({', '.join(params + ['_d'])}):")
        self._line(1, f'"""@{fn.name}: {len(fn.instructions)} instructions, {kind}."""')
        self._line(1, "if _d > _MAX_DEPTH:")
        self._line(2, f"return _deep({self.index}, {reg_tuple(tuple(range(len(params))))})")
        for reg in self._flow.needs_init:
            self._line(1, f"{_r(reg)} = None")
        for pc in sorted(self._rings):
            self._line(1, f"_a{pc} = _b{pc} = None")
        body()  # type: ignore[operator]

    # -- statements --------------------------------------------------------------------------

    def _stmt(self, pc: int, indent: int) -> bool:
        """Emits the statement(s) of a non-jump instruction; True if it ends the path."""
        ins = self._flow.code[pc]
        op = ins[0]
        if pc in self._flow.tails:
            self._tail_call(pc, indent)
            return True
        if op == O.RET:
            self._line(indent, f"return {_r(ins[1])}", pc)
            return True
        if op == O.FATAL:
            self._line(indent, self._render(sem.SEMANTICS[O.FATAL], ins), pc)
            return True
        if pc in self._rings:
            for text in self._ring(pc, ins):
                self._line(indent, text, pc)
        elif op in _SHAPE_OPS and self._shapes.inline(pc):
            fallback = self._render(sem.template(ins)[1], ins)
            for extra, text in self._shapes.lines(pc, fallback):
                self._line(indent + extra, text, pc)
        elif pc not in self._dead:
            self._line(indent, self._expr_stmt(pc, ins), pc)
        return False

    def _render(self, text: str, ins: tuple, given: dict[str, str] | None = None) -> str:
        """Template `text` (`semantics.py`) over the operands of `ins` as this mode names them
        (`_Operands`); `given` names some operands otherwise."""
        return self._operands.render(text, ins, given=given)

    def _expr_stmt(self, pc: int, ins: tuple) -> str:
        """The statement of a non-control instruction: its template, with a block's constant
        size inlined where `FlowInfo` knows it."""
        op, dst = ins[0], _r(ins[1])
        if op == O.INVOKE or op == O.INVOKE_CLOSURE:
            return f"{dst} = {self._call(op, ins[2], ins[3])}"
        given: dict[str, str] = {}
        if op == O.ALLOC_STORAGE and (size := self._flow.const_int(ins[2], pc)) is not None:
            given["size"] = str(size)
        return self._render(sem.template(ins)[1], ins, given)

    def _call(self, op: int, target: int, args: tuple[int, ...]) -> str:
        """A call of function `target` (INVOKE, TAIL_INVOKE): a direct call of the generated
        function (one deeper), or of the closure in register `target` through
        `_call_closure`."""
        if op == O.INVOKE or op == O.TAIL_INVOKE:
            return f"{self._names.funcs[target]}({_args(args, '_d + 1')})"
        return f"_call_closure({_r(target)}, {reg_tuple(args)}, _d)"

    def _ring(self, pc: int, ins: tuple) -> list[str]:
        """A tiny NEW_TENSOR in a loop: the array made two runs ago if nothing refers to it
        any more (only its slot), else a new one by its template (see `ring_lines`)."""
        dst, _, new = self._render(sem.template(ins)[1], ins).partition(" = ")
        return ring_lines(dst, pc, new)

    def _ring_sites(self) -> set[int]:
        """pcs of tiny NEW_TENSOR in a function with a loop."""
        if not self._flow.loops:
            return set()
        code = self._flow.code
        return {pc for pc, ins in enumerate(code) if ins[0] == O.NEW_TENSOR and _tiny(ins)}

    def _tail_call(self, pc: int, indent: int) -> None:
        ins = self._flow.code[pc]
        if pc not in self._flow.self_tails:
            self._line(indent, f"return {self._call(ins[0], ins[1], ins[2])}", pc)
            return
        moved = [(i, r) for i, r in enumerate(ins[2]) if i != r]  # r0 = r0 is a no-op
        if moved:
            params = ", ".join(_r(i) for i, _ in moved)
            self._line(indent, f"{params} = {', '.join(_r(r) for _, r in moved)}", pc)
        cleared = self._flow.clear_at_self_tail(pc)
        if cleared:
            self._line(indent, " = ".join(_r(r) for r in cleared) + " = None", pc)
        if not self.structured:
            restart(self._w, indent, pc)
        else:
            self._line(indent, "continue", pc)

    def _cond(self, pc: int, negate: bool) -> str:
        """The test of IF (`semantics.IF_EQUAL`) or IF_IMM (`IF_INT`) at `pc`; for IF_IMM its
        cheaper forms where the kinds are known: `IF_BOOL` for a bool tensor against 0 or 1,
        `IF_EQUAL` of plain ints for a tag."""
        ins = self._flow.code[pc]
        test, flow = ins[1], self._flow
        given = {"test": _r(test), "target": _r(ins[2]) if ins[0] == O.IF else str(ins[2])}
        given["value"] = given["target"]
        text = sem.IF_EQUAL if ins[0] == O.IF else sem.IF_INT
        if ins[0] == O.IF_IMM and ins[2] in (0, 1) and flow.is_bool_tensor(test, pc):
            text, negate = sem.IF_BOOL, negate == (ins[2] == 1)
        elif ins[0] == O.IF_IMM and flow.is_tag(test, pc):
            text = sem.IF_EQUAL
        cond = sem.render(text, lambda field, _: given[field])
        return f"not ({cond})" if negate else cond

    def _dead_constants(self) -> set[int]:
        """pcs of LOAD_CONST(I) whose register is only read where its value is inlined."""
        flow, dead = self._flow, set()
        for reg, pcs in flow.writers.items():
            if len(pcs) != 1 or flow.code[pcs[0]][0] not in _LOADS or reg < flow.nparams:
                continue
            for pc in flow.readers.get(reg, []):
                ins = flow.code[pc]
                if ins[0] != O.ALLOC_STORAGE or flow.const_int(reg, pc) is None:
                    break
            else:
                dead.add(pcs[0])
        return dead

    # -- structured control flow -------------------------------------------------------------

    def _emit_structured(self) -> None:
        code = self._flow.code
        loop = bool(self._flow.self_tails)
        if loop:
            self._line(1, "while True:")
        self._region(0, len(code), frozenset([len(code)]), 2 if loop else 1)

    def _region(self, pc: int, end: int, exits: frozenset[int], indent: int) -> None:
        """Emits pcs [pc, end); a jump to a pc in `exits` leaves the region (falls off)."""
        if indent > MAX_NESTING:
            raise _Unstructured
        code = self._flow.code
        while pc < end:
            op = code[pc][0]
            if op == O.IF or op == O.IF_IMM:
                nxt = self._if(pc, end, exits, indent)
                if nxt is None:
                    return
                pc = nxt
            elif op == O.GOTO:
                target = pc + code[pc][1]
                if target in exits:
                    return
                if target != pc + 1:
                    raise _Unstructured
                pc += 1
            elif self._stmt(pc, indent):
                return
            else:
                pc += 1

    def _if(self, pc: int, end: int, exits: frozenset[int], indent: int) -> int | None:
        """Emits the IF at `pc` and its branches; returns where the region goes on, or None."""
        ins = self._flow.code[pc]
        t, f = pc + ins[3], pc + ins[4]
        if t == f:
            return t if t not in exits else None
        lo, hi = min(t, f), max(t, f)
        if lo != pc + 1 or not (hi <= end or hi in exits):
            raise _Unstructured
        self._line(indent, f"if {self._cond(pc, negate=t != lo)}:", pc)
        if hi in exits:  # the other branch leaves the region: only one branch here
            self._region(lo, end, exits, indent + 1)
            return None
        last = self._flow.code[hi - 1]
        join = hi - 1 + last[1] if last[0] == O.GOTO else hi
        if join > hi and (join <= end or join in exits):
            inner = frozenset([join]) | (exits if join in exits else frozenset())
            self._region(lo, hi - 1, inner, indent + 1)
            self._line(indent, "else:", pc)
            self._region(hi, min(join, end), inner, indent + 1)
            return None if join in exits else join
        self._region(lo, hi, frozenset([hi]), indent + 1)
        return hi

    # -- the fallback: a state machine over basic blocks -------------------------------------

    def _emit_state_machine(self) -> None:
        cond = lambda pc: self._cond(pc, False)  # noqa: E731
        emit_block_machine(self._w, self._flow, self._stmt, cond, "raise AssertionError(_pc)")


def ring_lines(dst: str, pc: int, new: str) -> list[str]:
    """Statements giving `dst` a tiny tensor from the two-slot ring of allocation site `pc`.

    The slots `_a<pc>` (made last run) and `_b<pc>` (the run before) are the frame's locals.
    `_b<pc>` is reused when `_rc` (`sys.getrefcount`) finds no reference but its slot, which
    is `_FREE` (measured by `ring_probe_source` in the same code shape): a tensor a register,
    a caller, an ADT or an instrument callback still holds is never overwritten. Two slots
    cover a loop-carried value (made in one iteration, read in the next); it is dropped at
    the following back edge, as in the bytecode loop.
    """
    return [
        f"{dst} = _b{pc} if _rc(_b{pc}) == _FREE else {new}",
        f"_b{pc} = _a{pc}",
        f"_a{pc} = {dst}",
    ]


def ring_probe_source() -> str:
    """A function `_probe()` returning what `_rc` gives for a ring slot nothing else holds."""
    return "def _probe():\n    _b0 = _new()\n    return _rc(_b0)\n"


def generate_source(ex: Executable, index: int, names: Names) -> FunctionSource:
    """The generated source of function `index` of `ex` (see the module docstring)."""
    return FunctionSource(ex, index, names)
