"""The bytecode exec mode: one dispatch loop over the decoded instructions, generated.

The loop follows clox: the current function's code, its registers and the pc are locals;
instructions were decoded once into int-led tuples (`decode.py`); the commonest opcodes are
tested first; calls push `(code, regs, return_pc, dst, func_index)` on an explicit frame stack,
so VM recursion never recurses in Python, and tail calls reuse the frame. Packed calls go
through the context's `packed` table, read once per run, so instrumentation costs the plain
path nothing.

The loop's source is generated once, at import, from the opcode templates of `semantics.py`:
an operand becomes a read of the decoded instruction (`ins[3]`) or of the registers
(`regs[ins[1]]`), a register read more than once is read once into a local. Only the control
opcodes (RET, GOTO, the jumps of IF and IF_IMM, INVOKE, INVOKE_CLOSURE and their tail forms)
are written here, as they are this mode's mechanics. `loop_source()` shows the source, which is
registered in `linecache` so tracebacks show its lines.

A failure raises the context's `VMStackError` carrying the VM stack (`in @main pc=7:
invoke_packed fused_add_exp`), chained to the original exception. All loop state is local, so
the next call starts clean.
"""

from __future__ import annotations

import linecache
from collections.abc import Callable
from typing import Any

from rvm.errors import VMError
from rvm.runtime import semantics as sem
from rvm.runtime.bytecode import Opcode
from rvm.runtime.memory import alloc_view_of
from rvm.runtime.modes.base import ExecContext, Fatal
from rvm.runtime.modes.decode import ALLOC_TUPLE, NEW_TINY
from rvm.runtime.modes.lowering.operands import Operand, OperandRenderer, positions

__all__ = ["BytecodeMode", "HOT", "MAX_CALL_DEPTH", "compile_loop", "dispatch_order", "loop_source"]

MAX_CALL_DEPTH = 500_000
O = Opcode
_FILE = "<rvm bytecode loop>"


class _LoopOperands(OperandRenderer):
    """The loop's operands: a template is rendered once per opcode, so an operand is a read at
    its position in the decoded instruction (`ins[3]`, already in the form the template reads,
    see `decode.decode_instruction`), a register a read of the register list
    (`regs[ins[1]]`), or the local `_<field>` a register read more than once was read into."""

    def __init__(self, bound: set[str], target: str) -> None:
        super().__init__(None)
        self._bound = bound
        self._target = target

    def reg(self, o: Operand) -> str:
        if o.field in self._bound and o.field != self._target:
            base = f"_{o.field}"
        else:
            base = f"regs[ins[{o.value}]]"
        return f"tuple({base}.tolist())" if o.form == "dims" else base

    def regs(self, o: Operand) -> str:
        fetched = f"ins[{o.value}](regs)"
        return {"splat": "*" + fetched, "tuple": f"tuple({fetched})"}.get(o.form, fetched)

    def packed(self, o: Operand) -> str:
        return f"packed[ins[{o.value}]]"

    def value(self, o: Operand) -> str:
        return f"ins[{o.value}]"

    derived = const = dtype = shape = value


def _statements(text: str, op: Opcode) -> list[str]:
    """The loop's statements for template `text` of `op`: a register read more than once is
    read into a local `_<field>` first."""
    target = text.startswith("{") and text.split("}", 1)[0][1:]
    reads = [f for f, _ in sem.fields(text)]
    if target:
        reads.remove(target)
    kinds = sem.operand_kinds(op)
    bound = {f for f in reads if kinds[f][1] == "reg" and reads.count(f) > 1}
    out = [f"_{f} = regs[ins[{kinds[f][0]}]]" for f in sorted(bound)]
    out.append(_LoopOperands(bound, target or "").render(text, positions(op)))
    return out


def _if(op: Opcode, test: str) -> list[str]:
    """IF (`test` is `IF_EQUAL`) or IF_IMM (`IF_INT`): the test, then the jump."""
    *pre, cond = _statements(test, op)
    return [*pre, f"pc = ins[3] if {cond} else ins[4]"]


def _call(at: int) -> list[str]:
    """The frame switch of INVOKE (after the frame push) and TAIL_INVOKE (instead of it):
    the callee's index at `ins[at]`, the args' getter after it."""
    return [
        f"fidx = ins[{at}]",
        "code, pad, _ = funcs[fidx]",
        f"regs = [*ins[{at + 1}](regs), *pad]",
        "pc = 0",
    ]


_PUSH = [
    "frames.append((code, regs, pc + 1, ins[1], fidx))",
    "if len(frames) > MAX_CALL_DEPTH:",
    '    raise VMError(f"call depth exceeds {MAX_CALL_DEPTH} (infinite recursion?)")',
]


def _closure(at: int, tail: bool) -> list[str]:
    """INVOKE_CLOSURE (`tail`: TAIL_INVOKE_CLOSURE, in the caller's frame): the closure at
    `ins[at]`, the args' getter after it."""
    return [
        f"closure = regs[ins[{at}]]",
        "if type(closure) is not _Closure:",
        "    raise closure_error(closure, 0, 0)",
        "new_code, pad, nparams = funcs[closure.func_index]",
        f"new_regs = [*closure.free_vars, *ins[{at + 1}](regs)]",
        "if len(new_regs) != nparams:",
        "    raise closure_error(closure, len(new_regs) - len(closure.free_vars), nparams)",
        "new_regs += pad",
        *([] if tail else _PUSH),
        "fidx, code, regs, pc = closure.func_index, new_code, new_regs, 0",
    ]


_RET = [
    "value = regs[ins[1]]",
    "if not frames:",
    "    return value",
    "code, regs, pc, dst, fidx = frames.pop()",
    "regs[dst] = value",
]


def _data(op: Opcode, variant: str = "") -> list[str]:
    """A non-control opcode: its template, then the next pc."""
    text = sem.VARIANTS[op][2] if variant else sem.SEMANTICS[op]
    lines = _statements(text, op)
    return lines if lines[-1].startswith("raise ") else [*lines, "pc += 1"]


_CONTROL: dict[int, Callable[[], list[str]]] = {
    O.IF_IMM: lambda: _if(O.IF_IMM, sem.IF_INT),
    O.IF: lambda: _if(O.IF, sem.IF_EQUAL),
    O.GOTO: lambda: ["pc = ins[1]"],
    O.RET: lambda: _RET,
    O.TAIL_INVOKE: lambda: _call(1),
    O.INVOKE: lambda: [*_PUSH, *_call(2)],
    O.TAIL_INVOKE_CLOSURE: lambda: _closure(1, tail=True),
    O.INVOKE_CLOSURE: lambda: _closure(2, tail=False),
}
"""This mode's mechanics for the control opcodes (`semantics.CONTROL_OPCODES`)."""

_VARIANT_CODES = {NEW_TINY: O.NEW_TENSOR, ALLOC_TUPLE: O.ALLOC_ADT}
"""The decoded opcodes of the table's variants (`semantics.VARIANTS`, `decode.py`)."""

HOT: tuple[int, ...] = (
    O.INVOKE_PACKED,
    O.CALL_PACKED,
    O.NEW_TENSOR,
    NEW_TINY,
    O.IF_IMM,
    O.KILL_REGISTER,
    O.MOVE,
    O.LOAD_CONST,
    O.LOAD_CONSTI,
    O.RET,
    O.TAIL_INVOKE,
    O.INVOKE,
    O.NEW_TENSOR_REG,
    O.MATCH_SHAPE,
    O.MAKE_SHAPE,
    O.ALLOC_SHAPE_HEAP,
    O.ALLOC_TENSOR,
    O.ALLOC_STORAGE,
    O.IF,
    O.GOTO,
    O.GET_FIELD,
    O.GET_TAG,
    ALLOC_TUPLE,
    O.ALLOC_ADT,
    O.TAIL_INVOKE_CLOSURE,
    O.INVOKE_CLOSURE,
    O.ALLOC_CLOSURE,
)
"""The decoded opcodes programs run most, commonest first: the loop tests them in this order,
then every other opcode of the table (`semantics.SEMANTICS`, its variants, the control
opcodes) in the table's order."""


def dispatch_order() -> list[tuple[int, str, Callable[[], list[str]]]]:
    """Every decoded opcode the loop dispatches on, with its label and statements: `HOT`
    first, then the rest of the table."""
    table = [*sem.SEMANTICS, *_VARIANT_CODES, *_CONTROL]
    out = []
    for code in dict.fromkeys([*HOT, *table]):
        if code in _VARIANT_CODES:
            op = _VARIANT_CODES[code]
            variant = sem.VARIANTS[op][0]
            out.append((code, f"{op.name} {variant}", lambda o=op, v=variant: _data(o, v)))
        elif code in _CONTROL:
            out.append((code, O(code).name, _CONTROL[code]))
        else:
            op = O(code)
            out.append((code, op.name, lambda o=op: _data(o)))
    return out


_HEAD = """\
def run(self, fidx, args):
    \"\"\"Runs function `fidx` on VM values `args`; the dispatch loop.\"\"\"
    context = self.context
    funcs = context.functions
    packed = context.packed
    allocator = context.allocator
    _alloc = allocator.alloc
    _alloc_view = _view_of(allocator)
    {names} = _NAMES
    frames = []
    code, pad, _ = funcs[fidx]
    regs = list(args)
    regs += pad
    pc = 0
    try:
        while True:
            ins = code[pc]
            op = ins[0]
"""

_TAIL = """\
            else:  # unreachable for a validated executable
                raise VMError(f"unknown decoded opcode {op}")
    except Exception as e:
        stack = [(f[4], f[2] - 1) for f in frames] + [(fidx, pc)]
        # Drop the registers now: the traceback keeps this frame's locals alive.
        frames.clear()
        regs = code = None
        raise context.error(e, stack) from (None if isinstance(e, _Fatal) else e)
"""


def loop_source() -> str:
    """The source of the dispatch loop, generated from `semantics.py` (see the docstring)."""
    lines = [_HEAD.format(names=", ".join(sem.RUNTIME_NAMES))]
    merged: list[tuple[list[int], list[str], list[str]]] = []
    for code, label, body in dispatch_order():
        lines_ = body()
        if merged and merged[-1][2] == lines_:  # the same statements: one test for both
            merged[-1][0].append(int(code))
            merged[-1][1].append(label)
        else:
            merged.append(([int(code)], [label], lines_))
    for k, (codes, labels, body) in enumerate(merged):
        test = " or ".join(f"op == {c}" for c in codes)
        keyword = "if" if k == 0 else "elif"
        lines.append(f"            {keyword} {test}:  # {', '.join(labels)}\n")
        lines.extend("                " + line + "\n" for line in body)
    lines.append(_TAIL)
    return "".join(lines)


def compile_loop() -> Callable[..., Any]:
    """The dispatch loop compiled from `loop_source()` (a `run(self, fidx, args)` method) over
    the templates as they are now."""
    source = loop_source()
    linecache.cache[_FILE] = (len(source), None, source.splitlines(True), _FILE)
    ns: dict[str, Any] = {
        "_NAMES": tuple(sem.RUNTIME_NAMES.values()),
        "_Fatal": Fatal,
        "VMError": VMError,
        "MAX_CALL_DEPTH": MAX_CALL_DEPTH,
        "closure_error": sem.closure_error,
        "_view_of": alloc_view_of,
    }
    exec(compile(source, _FILE, "exec"), ns)
    return ns["run"]


class BytecodeMode:
    """The bytecode loop over `context` (an `ExecMode`)."""

    def __init__(self, context: ExecContext) -> None:
        self.context = context

    run = compile_loop()
