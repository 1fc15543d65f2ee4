"""One operand renderer: a template's operands as one mode names them.

Every mode runs an opcode by rendering its template (`semantics.py`); what differs is how an
operand reads. `OperandRenderer.render` walks the template's fields once and asks one method
per operand kind (`reg`, `regs`, `const`, `packed`, `dtype`, `shape`, `derived`, and `value`
for immediates, function indices, offsets and strings); a mode overrides the kinds it names its
own way:

- the generated modes (`compiled_codegen`, `native_codegen`) take this class's names: registers
  as locals `r3`, constants `c2`, dtypes `dt_float32`, immediates as literals or, for
  `{value:consti}`, the shared 0-d array `i5` (`Names`);
- the bytecode loop (`bytecode.py`) renders a template once for all instructions of an
  opcode, so its operand "values" are positions in the decoded instruction (`ins[3]`,
  `regs[ins[1]]`; `positions`).
"""

from __future__ import annotations

import builtins
import keyword
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rvm.runtime import semantics as sem
from rvm.runtime.bytecode import Opcode
from rvm.runtime.semantics import DERIVED, operand_kinds

if TYPE_CHECKING:
    from rvm.runtime.executable import Executable

__all__ = ["Names", "Operand", "OperandRenderer", "positions", "reg_name", "reg_tuple"]

_RESERVED = re.compile(r"^(r\d+|c\d+|i_?m?\d+|f_.*|dt_.*|_.*)$")


def _ident(name: str) -> str:
    return re.sub(r"\W", "_", name) or "_"


def reg_name(reg: int) -> str:
    """The local of register `reg` in generated code."""
    return f"r{reg}"


def reg_tuple(regs: tuple[int, ...]) -> str:
    """Registers as a tuple display (`(r1,)`, `(r1, r2)`, `()`)."""
    if len(regs) == 1:
        return f"({reg_name(regs[0])},)"
    return "(" + ", ".join(reg_name(r) for r in regs) + ")"


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


@dataclass(frozen=True)
class Operand:
    """One `{field:form}` of a template, as the renderer sees it.

    Attributes:
        field: The operand's name (`OPCODE_INFO`, or the opcode's `DERIVED` one).
        kind: Its kind (`reg`, `regs`, `const`, ..., `derived`).
        value: The instruction's operand (for the bytecode loop: its position).
        form: The form asked for (`splat`, `tuple`, `dims`, `consti`, `scalar`, or "").
        ins: The instruction.
        pc: Its pc (-1 where a template is rendered for no one pc).
    """

    field: str
    kind: str
    value: Any
    form: str
    ins: tuple
    pc: int


def positions(op: Opcode) -> tuple:
    """A stand-in instruction of `op` whose operands are their own positions (derived last)."""
    return (op, *range(1, len(operand_kinds(op)) + 1))


class OperandRenderer:
    """Renders templates over an instruction's operands; subclasses override per kind.

    Args:
        ex: The executable (its constants and names the derived operands read).
        names: The namespace's names of packed functions and dtypes.
    """

    def __init__(self, ex: Executable | None, names: Names | None = None) -> None:
        self.ex = ex
        self.names = names

    def render(
        self, text: str, ins: tuple, pc: int = -1, given: dict[str, str] | None = None
    ) -> str:
        """Template `text` over the operands of `ins`; `given` names some fields otherwise."""
        kinds = operand_kinds(Opcode(ins[0]))

        def operand(field: str, form: str) -> str:
            if given is not None and field in given:
                return given[field]
            pos, kind = kinds[field]
            value = ins[pos] if pos < len(ins) else None
            hook = getattr(self, kind) if kind in _KINDS else self.value
            return hook(Operand(field, kind, value, form, ins, pc))

        return sem.render(text, operand)

    def derived(self, o: Operand) -> str:
        """An operand computed from the executable (`semantics.DERIVED`), as a literal."""
        assert self.ex is not None
        return repr(DERIVED[Opcode(o.ins[0])][1](self.ex, o.ins))

    def reg(self, o: Operand) -> str:
        """A register."""
        return reg_name(o.value)

    def regs(self, o: Operand) -> str:
        """A list of registers: call arguments (`splat`) or a tuple."""
        if o.form == "splat":
            return ", ".join(self.reg(_one(o, r)) for r in o.value)
        if len(o.value) == 1:
            return f"({self.reg(_one(o, o.value[0]))},)"
        return "(" + ", ".join(self.reg(_one(o, r)) for r in o.value) + ")"

    def const(self, o: Operand) -> str:
        """A constant of the executable."""
        return f"c{o.value}"

    def packed(self, o: Operand) -> str:
        """A packed function."""
        assert self.names is not None
        return self.names.packed[o.value]

    def dtype(self, o: Operand) -> str:
        """A dtype name."""
        return Names.dtype(o.value)

    def shape(self, o: Operand) -> str:
        """A static shape."""
        return repr(tuple(o.value))

    def value(self, o: Operand) -> str:
        """An immediate, function index, offset or string; `consti`: the shared 0-d array."""
        return Names.immediate(o.value) if o.form == "consti" else repr(o.value)


_KINDS = frozenset({"derived", "reg", "regs", "const", "packed", "dtype", "shape"})


def _one(o: Operand, reg: int) -> Operand:
    """Register `reg` of a `regs` operand, as a plain register operand."""
    return Operand(o.field, "reg", reg, "", o.ins, o.pc)
