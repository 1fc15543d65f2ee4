"""Pre-decoding: an executable's instructions turned once into the tuples the VM loop runs.

The decoded form keeps one tuple per original instruction (so a pc means the same in both and
VM stack traces can describe the original instruction), with:

- jump offsets made absolute (IF, GOTO);
- dtype names made `np.dtype` objects, constants and immediates made the arrays they load;
- packed arity / output counts dropped (the executable was validated);
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

import numpy as np

from rvm.dtypes import numpy_dtype
from rvm.runtime.bytecode import Opcode, is_tail_call
from rvm.runtime.memory import is_tiny

if TYPE_CHECKING:
    from rvm.runtime.executable import Executable

__all__ = [
    "ALLOC_STATIC",
    "DecodedFunction",
    "IF_CONST",
    "SUPERINSTRUCTIONS",
    "TAIL_INVOKE",
    "TAIL_INVOKE_CLOSURE",
    "decode_executable",
]

TAIL_INVOKE = 100
TAIL_INVOKE_CLOSURE = 101
IF_CONST = 102
"""At a LOAD_CONSTI feeding the next IF: load, compare with `.item()`, jump (covers 2)."""
ALLOC_STATIC = 103
"""At a LOAD_CONSTI of a size: storage, tensor, kill of the storage, in one step (covers 4)."""
SUPERINSTRUCTIONS = frozenset({IF_CONST, ALLOC_STATIC})
"""Decoded forms standing for several instructions; their last field is how many."""


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


def _consti(value: int) -> np.ndarray:
    arr = np.array(value, dtype=np.int64)
    arr.flags.writeable = False  # shared by every execution; kernels only write outputs
    return arr


def _decoders(ex: Executable) -> dict[Opcode, Callable[[tuple, int], tuple]]:
    """One decoder per opcode: `(instruction, pc) -> decoded tuple`."""
    names = ex.constructor_names
    fnames = [f.name for f in ex.functions]
    O = Opcode
    return {
        O.MOVE: lambda i, pc: (O.MOVE.value, i[1], i[2]),
        O.RET: lambda i, pc: (O.RET.value, i[1]),
        O.FATAL: lambda i, pc: (O.FATAL.value, str(ex.constants[i[1]].item())),
        O.INVOKE_PACKED: lambda i, pc: (O.INVOKE_PACKED.value, i[1], fetcher(i[4])),
        O.CALL_PACKED: lambda i, pc: (O.CALL_PACKED.value, i[1], i[2], fetcher(i[3])),
        O.ALLOC_STORAGE: lambda i, pc: (O.ALLOC_STORAGE.value, i[1], i[2], i[3]),
        O.ALLOC_TENSOR: lambda i, pc: (
            O.ALLOC_TENSOR.value,
            i[1],
            i[2],
            i[3],
            i[4],
            numpy_dtype(i[5]),
        ),
        O.ALLOC_TENSOR_REG: lambda i, pc: (
            O.ALLOC_TENSOR_REG.value,
            i[1],
            i[2],
            i[3],
            i[4],
            numpy_dtype(i[5]),
        ),
        O.ALLOC_ADT: lambda i, pc: (O.ALLOC_ADT.value, i[1], i[2], fetcher(i[3]), names.get(i[2])),
        O.ALLOC_CLOSURE: lambda i, pc: (
            O.ALLOC_CLOSURE.value,
            i[1],
            i[2],
            fetcher(i[3]),
            fnames[i[2]],
        ),
        O.GET_FIELD: lambda i, pc: (O.GET_FIELD.value, i[1], i[2], i[3]),
        O.GET_TAG: lambda i, pc: (O.GET_TAG.value, i[1], i[2]),
        O.IF: lambda i, pc: (O.IF.value, i[1], i[2], pc + i[3], pc + i[4]),
        O.GOTO: lambda i, pc: (O.GOTO.value, pc + i[1]),
        O.INVOKE: lambda i, pc: (O.INVOKE.value, i[1], i[2], fetcher(i[3])),
        O.INVOKE_CLOSURE: lambda i, pc: (O.INVOKE_CLOSURE.value, i[1], i[2], fetcher(i[3])),
        O.LOAD_CONST: lambda i, pc: (O.LOAD_CONST.value, i[1], ex.constants[i[2]]),
        O.LOAD_CONSTI: lambda i, pc: (O.LOAD_CONSTI.value, i[1], _consti(i[2])),
        O.SHAPE_OF: lambda i, pc: (O.SHAPE_OF.value, i[1], i[2]),
        O.RESHAPE_TENSOR: lambda i, pc: (O.RESHAPE_TENSOR.value, i[1], i[2], i[3]),
        O.KILL_REGISTER: lambda i, pc: (O.KILL_REGISTER.value, i[1]),
    }


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
        return (IF_CONST, nxt[1], reg, _consti(value), value, pc + 1 + nxt[3], pc + 1 + nxt[4], 2)
    if pc + 3 >= len(code) or nxt[0] != Opcode.ALLOC_STORAGE or nxt[2] != reg:
        return None
    tensor, kill = code[pc + 2], code[pc + 3]
    storage = nxt[1]
    if (
        tensor[0] == Opcode.ALLOC_TENSOR
        and tensor[2] == storage
        and kill[0] == Opcode.KILL_REGISTER
        and kill[1] == storage
        and tensor[1] not in (storage, reg)
    ):
        # (op, size reg, size const, size, alignment, tensor reg, offset, shape, dtype, tiny,
        #  covers): `tiny` is `is_tiny(size)`, decided here once
        return (
            ALLOC_STATIC,
            reg,
            _consti(value),
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
    decoders = _decoders(ex)
    code = list(fn.instructions)
    out = []
    for pc, ins in enumerate(code):
        op = Opcode(ins[0])
        is_tail = is_tail_call(code, pc)
        if op == Opcode.INVOKE and is_tail:
            out.append((TAIL_INVOKE, ins[2], fetcher(ins[3])))
        elif op == Opcode.INVOKE_CLOSURE and is_tail:
            out.append((TAIL_INVOKE_CLOSURE, ins[2], fetcher(ins[3])))
        elif op == Opcode.LOAD_CONSTI and (fused := _superinstruction(code, pc)) is not None:
            out.append(fused)
        else:
            out.append(decoders[op](ins, pc))
    pad = [None] * (fn.register_file_size - len(fn.params))
    return DecodedFunction(tuple(out), pad, len(fn.params))


def decode_executable(ex: Executable) -> list[DecodedFunction]:
    """Every function of `ex` decoded; cached on `ex` and shared by its VMs."""
    return ex.cached("decoded", lambda: [decode_function(ex, i) for i in range(len(ex.functions))])
