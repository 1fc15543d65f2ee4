"""Pre-decoding: an executable's instructions turned once into the tuples the VM loop runs.

The decoded form keeps one tuple per original instruction (so a pc means the same in both and
VM stack traces can describe the original instruction), `(opcode, *operands, *derived)` with
every operand at its own position, decoded by its kind in `OPCODE_INFO` (the loop renders the
templates of `semantics.py` over these positions):

- jump offsets made absolute (IF, GOTO);
- dtype names made `np.dtype` objects, constants the arrays they are, the immediate of
  LOAD_CONSTI the 0-d array it loads (`semantics.consti`), shapes tuples;
- the operands `semantics.DERIVED` names appended (a FATAL's text, a constructor's name);
- ALLOC_ADT of tag -1 and a tiny NEW_TENSOR given numbers of their own, ALLOC_TUPLE and
  NEW_TINY (`semantics.VARIANTS`);
- register lists (args, fields, free vars) made `fetch(regs) -> sequence` getters built from
  `operator.itemgetter`, which run in C (a list comprehension costs ~300 ns on CPython 3.11);

Nothing is recognised from the order in which instructions happen to be emitted: the facts
the compiler knows (tail calls, blocks of one tensor, tiny tensors, constant branch targets)
are instructions of their own (`bytecode.py`).

The result depends only on the executable, so it is cached on it and shared by every VM.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import TYPE_CHECKING, Any, NamedTuple

from rvm.dtypes import numpy_dtype
from rvm.runtime.bytecode import OPCODE_INFO, Opcode
from rvm.runtime.derived import Derived
from rvm.runtime.semantics import DERIVED, SEMANTICS, VARIANTS, consti, fields, template

if TYPE_CHECKING:
    from rvm.runtime.executable import Executable

__all__ = [
    "ALLOC_TUPLE",
    "DecodedFunction",
    "NEW_TINY",
    "decode_executable",
    "decode_function",
    "decode_instruction",
]

ALLOC_TUPLE = 104
"""ALLOC_ADT of tag -1 (`semantics.VARIANTS`): a Python tuple."""
NEW_TINY = 105
_DECODED: Derived[list[DecodedFunction]] = Derived("the bytecode loop's decoded functions")
"""NEW_TENSOR of a tiny block (`semantics.VARIANTS`): a plain numpy array."""
VARIANT_CODES = {(Opcode.ALLOC_ADT, "tuple"): ALLOC_TUPLE, (Opcode.NEW_TENSOR, "tiny"): NEW_TINY}
"""(opcode, variant) -> the number the loop dispatches that variant on."""


class DecodedFunction(NamedTuple):
    """A function as the loop sees it: code, the None padding after its params, param count."""

    code: tuple[tuple, ...]
    pad: list
    nparams: int


def fetcher(regs: Sequence[int]) -> Callable[[list], Sequence[Any]]:
    """A C-level getter returning the values of registers `regs` as a tuple or list."""
    if len(regs) >= 2:
        return itemgetter(*regs)
    if len(regs) == 1:
        return itemgetter(slice(regs[0], regs[0] + 1))
    return itemgetter(slice(0, 0))


def decoded_opcode(ins: tuple) -> int:
    """The number the loop dispatches raw instruction `ins` on: its opcode's, or its
    variant's (`semantics.VARIANTS`)."""
    op = Opcode(ins[0])
    variant = template(ins)[0] if op in VARIANTS else ""
    return VARIANT_CODES[(op, variant)] if variant else ins[0]


def _decode_operand(ex: Executable, kind: str, form: str, value: Any, pc: int) -> Any:
    if kind == "regs":
        return fetcher(value)
    if kind == "const":
        return ex.constants[value]
    if kind == "offset":
        return pc + value
    if kind == "dtype":
        return numpy_dtype(value)
    if kind == "shape":
        return tuple(value)
    if form == "consti":
        return consti(value)
    return value


def decode_instruction(ex: Executable, ins: tuple, pc: int) -> tuple:
    """`ins` as the loop runs it: `(decoded opcode, *operands, *derived operands)`, each operand
    at its own position, decoded by its kind and the form its template reads it in."""
    op = Opcode(ins[0])
    forms = dict(fields(template(ins)[1])) if op in SEMANTICS else {}
    out = [decoded_opcode(ins)]
    for (field, kind), value in zip(OPCODE_INFO[op].operands, ins[1:]):
        out.append(_decode_operand(ex, kind, forms.get(field, ""), value, pc))
    if op in DERIVED:
        out.append(DERIVED[op][1](ex, ins))
    return tuple(out)


def decode_function(ex: Executable, index: int) -> DecodedFunction:
    """Decodes function `index` of `ex` (see the module docstring)."""
    fn = ex.functions[index]
    code = tuple(decode_instruction(ex, ins, pc) for pc, ins in enumerate(fn.instructions))
    pad = [None] * (fn.register_file_size - len(fn.params))
    return DecodedFunction(code, pad, len(fn.params))


def decode_executable(ex: Executable) -> list[DecodedFunction]:
    """Every function of `ex` decoded; cached on `ex` and shared by its VMs."""
    return _DECODED.get(ex, lambda: [decode_function(ex, i) for i in range(len(ex.functions))])
