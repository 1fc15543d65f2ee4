"""Pre-decoding: an executable's instructions turned once into the tuples the VM loop runs.

The decoded form keeps one tuple per original instruction (so a pc means the same in both and
VM stack traces can describe the original instruction), `(opcode, *operands, *derived)` with
every operand at its own position, decoded by its kind in `OPCODE_INFO` (the loop renders the
templates of `semantics.py` over these positions):

- jump offsets made absolute (IF, GOTO);
- dtype names made `np.dtype` objects, constants the arrays they are, the immediate of
  LOAD_CONSTI the 0-d array it loads (`semantics.consti`), shapes tuples;
- the operands `semantics.DERIVED` names appended (a FATAL's text, a constructor's name);
- ALLOC_ADT of tag -1 given its own number, ALLOC_TUPLE (`semantics.VARIANTS`);
- register lists (args, fields, free vars) made `fetch(regs) -> sequence` getters built from
  `operator.itemgetter`, which run in C (a list comprehension costs ~300 ns on CPython 3.11);
- INVOKE / INVOKE_CLOSURE followed by `RET` of their own destination rewritten to the internal
  TAIL_INVOKE / TAIL_INVOKE_CLOSURE, which reuse the caller's frame, so loops written as tail
  recursion run in constant stack.

The result depends only on the executable, so it is cached on it and shared by every VM.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import TYPE_CHECKING, Any, NamedTuple

from rvm.dtypes import numpy_dtype
from rvm.runtime.bytecode import OPCODE_INFO, Opcode, is_single_view_block, is_tail_call
from rvm.runtime.memory import is_tiny
from rvm.runtime.semantics import DERIVED, SEMANTICS, VARIANTS, consti, fields, template

if TYPE_CHECKING:
    from rvm.runtime.executable import Executable

__all__ = [
    "ALLOC_STATIC",
    "ALLOC_TUPLE",
    "DecodedFunction",
    "IF_CONST",
    "SUPERINSTRUCTIONS",
    "TAIL_INVOKE",
    "TAIL_INVOKE_CLOSURE",
    "decode_executable",
    "decode_function",
    "decode_instruction",
]

TAIL_INVOKE = 100
TAIL_INVOKE_CLOSURE = 101
IF_CONST = 102
"""At a LOAD_CONSTI feeding the next IF: load, compare with `.item()`, jump (covers 2)."""
ALLOC_STATIC = 103
"""At a LOAD_CONSTI of a size: storage, tensor, kill of the storage, in one step (covers 4)."""
SUPERINSTRUCTIONS = frozenset({IF_CONST, ALLOC_STATIC})
"""Decoded forms standing for several instructions; their last field is how many."""
ALLOC_TUPLE = 104
"""ALLOC_ADT of tag -1 (`semantics.VARIANTS`): a Python tuple."""
VARIANT_CODES = {(Opcode.ALLOC_ADT, "tuple"): ALLOC_TUPLE}
"""(opcode, variant) -> the number the loop dispatches that variant on."""
_TAIL_CODES = {Opcode.INVOKE: TAIL_INVOKE, Opcode.INVOKE_CLOSURE: TAIL_INVOKE_CLOSURE}


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


def _superinstruction(code: list[tuple], pc: int) -> tuple | None:
    """A fused form of the run starting at LOAD_CONSTI `pc`, or None.

    The fused form leaves every register as the run would, and the run's later instructions
    stay in place, so a jump into the middle of it still works.
    """
    reg, value = code[pc][1], code[pc][2]
    nxt = code[pc + 1] if pc + 1 < len(code) else None
    if nxt is None:
        return None
    if nxt[0] == Opcode.IF and nxt[2] == reg:
        return (IF_CONST, nxt[1], reg, consti(value), value, pc + 1 + nxt[3], pc + 1 + nxt[4], 2)
    if nxt[0] != Opcode.ALLOC_STORAGE or nxt[2] != reg or not is_single_view_block(code, pc + 1):
        return None
    tensor = code[pc + 2]
    if tensor[0] == Opcode.ALLOC_TENSOR and tensor[1] != reg:
        # (op, size reg, size const, size, alignment, tensor reg, offset, shape, dtype, tiny,
        #  covers): `tiny` is `is_tiny(size)`, decided here once
        return (
            ALLOC_STATIC,
            reg,
            consti(value),
            value,
            nxt[3],
            tensor[1],
            tensor[3],
            tuple(tensor[4]),
            numpy_dtype(tensor[5]),
            is_tiny(value),
            4,
        )
    return None


def decode_function(ex: Executable, index: int) -> DecodedFunction:
    """Decodes function `index` of `ex` (see the module docstring)."""
    fn = ex.functions[index]
    code = list(fn.instructions)
    out = []
    for pc, ins in enumerate(code):
        op = Opcode(ins[0])
        if op in _TAIL_CODES and is_tail_call(code, pc):
            out.append((_TAIL_CODES[op], *decode_instruction(ex, ins, pc)[1:]))
        elif op == Opcode.LOAD_CONSTI and (fused := _superinstruction(code, pc)) is not None:
            out.append(fused)
        else:
            out.append(decode_instruction(ex, ins, pc))
    pad = [None] * (fn.register_file_size - len(fn.params))
    return DecodedFunction(tuple(out), pad, len(fn.params))


def decode_executable(ex: Executable) -> list[DecodedFunction]:
    """Every function of `ex` decoded; cached on `ex` and shared by its VMs."""
    return ex.cached("decoded", lambda: [decode_function(ex, i) for i in range(len(ex.functions))])
