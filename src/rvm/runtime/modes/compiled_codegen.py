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

import builtins
import keyword
import re
from typing import TYPE_CHECKING

from rvm.runtime import semantics as sem
from rvm.runtime.bytecode import Opcode
from rvm.runtime.modes.flow import FlowInfo, ShapePlan
from rvm.runtime.semantics import DERIVED, operand_kinds
from rvm.runtime.text import describe_instruction

if TYPE_CHECKING:
    from rvm.runtime.executable import Executable

__all__ = ["Names", "FunctionSource", "generate_source", "ring_lines", "ring_probe_source"]

O = Opcode
_RESERVED = re.compile(r"^(r\d+|c\d+|i_?m?\d+|f_.*|dt_.*|_.*)$")
MAX_NESTING = 60  # Python's parser allows 100 indentation levels
_LOADS = (O.LOAD_CONST, O.LOAD_CONSTI)
_SHAPE_OPS = (O.ALLOC_SHAPE_HEAP, O.MATCH_SHAPE, O.MAKE_SHAPE)


def _ident(name: str) -> str:
    return re.sub(r"\W", "_", name) or "_"


class Names:
    """The Python names of an executable's packed functions, functions and dtypes."""

    def __init__(self, ex: Executable) -> None:
        used: set[str] = set()
        self.packed = []
        for i, name in enumerate(ex.primitive_names):
            ident = _ident(name)
            self.packed.append(self._unique(ident, f"p{i}_{ident}", used))
        self.funcs = [
            self._unique(f"f_{_ident(fn.name)}", f"f{i}_{_ident(fn.name)}", used)
            for i, fn in enumerate(ex.functions)
        ]

    @staticmethod
    def _unique(name: str, fallback: str, used: set[str]) -> str:
        if (
            name in used
            or keyword.iskeyword(name)
            or hasattr(builtins, name)
            or not name.isidentifier()
            or (_RESERVED.match(name) and name[:2] != "f_")
        ):
            name = fallback
        while name in used:
            name += "_"
        used.add(name)
        return name

    @staticmethod
    def immediate(value: int) -> str:
        """The name of the 0-d int64 constant LOAD_CONSTI `value` loads."""
        return f"i{value}" if value >= 0 else f"i_m{-value}"

    @staticmethod
    def dtype(name: str) -> str:
        """The name of a numpy dtype object in the namespace."""
        return "dt_" + _ident(name)


class _Unstructured(Exception):
    """The control flow does not nest as structured code; use the block state machine."""


def _tiny(ins: tuple) -> bool:
    """Whether NEW_TENSOR `ins` is the tiny variant (a plain array, `semantics.VARIANTS`)."""
    return sem.template(ins)[0] == "tiny"


def _r(reg: int) -> str:
    return f"r{reg}"


def _tuple(regs: tuple[int, ...]) -> str:
    if len(regs) == 1:
        return f"({_r(regs[0])},)"
    return "(" + ", ".join(_r(r) for r in regs) + ")"


def _args(regs: tuple[int, ...], extra: str) -> str:
    return ", ".join([_r(r) for r in regs] + [extra])


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
        self._dead = self._dead_constants()
        self._rings = self._ring_sites()
        self.tails = frozenset(self._flow.tails)
        self._lines: list[tuple[int, str, int | None]] = []
        try:
            self.structured = True
            self._emit_function(self._emit_structured)
        except _Unstructured:
            self.structured = False
            self._lines = []
            self._emit_function(self._emit_state_machine)
        self.source = "".join("    " * ind + text + "\n" for ind, text, _ in self._lines)
        self.line_pcs = tuple(pc for _, _, pc in self._lines)

    # -- lines -----------------------------------------------------------------------------

    def _line(self, indent: int, text: str, pc: int | None = None) -> None:
        if pc is not None:
            ins = self._flow.code[pc]
            text = f"{text}  # pc {pc}: {describe_instruction(self._ex, ins)}"
        self._lines.append((indent, text, pc))

    def _emit_function(self, body: object) -> None:
        fn = self._ex.functions[self.index]
        params = [_r(i) for i in range(len(fn.params))]
        kind = "structured" if self.structured else "block state machine"
        self._line(0, f"def {self.pyname}({', '.join(params + ['_d'])}):")
        self._line(1, f'"""@{fn.name}: {len(fn.instructions)} instructions, {kind}."""')
        self._line(1, "if _d > _MAX_DEPTH:")
        self._line(2, f"return _deep({self.index}, {_tuple(tuple(range(len(params))))})")
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
        """Template `text` (`semantics.py`) over the operands of `ins` as this mode names them:
        registers as locals, immediates as literals, constants, dtypes and packed functions by
        their names in the namespace; `given` names some operands otherwise."""
        op = Opcode(ins[0])
        kinds = operand_kinds(op)
        n = self._names

        def operand(field: str, form: str) -> str:
            if given and field in given:
                return given[field]
            pos, kind = kinds[field]
            if kind == "derived":
                return repr(DERIVED[op][1](self._ex, ins))
            v = ins[pos]
            if kind == "reg":
                return self._shape_tuple(v) if form == "dims" else _r(v)
            if kind == "regs":
                if form == "splat":
                    return ", ".join(_r(r) for r in v)
                return _tuple(v) if v else "()"
            if kind == "const":
                return f"c{v}"
            if kind == "packed":
                return n.packed[v]
            if kind == "dtype":
                return n.dtype(v)
            if kind == "shape":
                return repr(tuple(v))
            return n.immediate(v) if form == "consti" else repr(v)

        return sem.render(text, operand)

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
        return f"_call_closure({_r(target)}, {_tuple(args) if args else '()'}, _d)"

    def _shape_tuple(self, reg: int) -> str:
        """A shape register as a tuple of ints (a 1-d int64 array unless the plan made it one)."""
        return _r(reg) if reg in self._shapes.tuples else f"tuple({_r(reg)}.tolist())"

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
            self._line(indent, "_pc = 0", pc)
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
        code = self._flow.code
        leaders = self._flow.leaders()
        self._line(1, "_pc = 0")
        self._line(1, "while True:")
        for k, start in enumerate(leaders):
            stop = leaders[k + 1] if k + 1 < len(leaders) else len(code)
            self._line(2, f"{'if' if k == 0 else 'elif'} _pc == {start}:")
            self._block(start, stop)
        self._line(2, "else:")
        self._line(3, "raise AssertionError(_pc)")

    def _block(self, pc: int, stop: int) -> None:
        code = self._flow.code
        while pc < stop:
            op = code[pc][0]
            if op == O.IF or op == O.IF_IMM:
                t, f = pc + code[pc][3], pc + code[pc][4]
                self._line(3, f"_pc = {t} if {self._cond(pc, False)} else {f}", pc)
                self._line(3, "continue", pc)
                return
            if op == O.GOTO:
                self._line(3, f"_pc = {pc + code[pc][1]}", pc)
                self._line(3, "continue", pc)
                return
            if self._stmt(pc, 3):
                return
            pc += 1
        self._line(3, f"_pc = {stop}")


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
