"""The instruction set: one opcode table for the VM, the disassembler, the serializer, as_python.

An instruction is a plain tuple `(opcode, *operands)`. `OPCODE_INFO` lists, for every opcode,
its text name, its operands as `(field, kind)` pairs and the template `as_text` fills in.
Operand kinds:

| kind | value | shown as |
|---|---|---|
| reg | a register index | `$3` |
| regs | a tuple of register indices (variadic, always last) | `$1, $2` |
| imm | an integer immediate | `64` |
| const | an index into the constant pool | `c2 (float32[4, 4])` |
| func | an index into the function table | `@main` |
| packed | an index into the primitive names | `fused_add_exp` |
| offset | a pc offset relative to this instruction | `-> 12` (the target) |
| dtype | a numpy dtype name | `float32` |
| str | a free string (a dtype hint) | `float32` |
| shape | a tuple of ints | `(2, 3)` |

Operand layouts (see docs/architecture.md; CALL_PACKED is an addition, as the Relax VM's `Call`):

- MOVE dst, src: dst = src, a reference, never a copy.
- RET result.
- FATAL const: raise VMError with the string constant as message.
- INVOKE_PACKED packed, arity, output_size, args: destination passing; the last `output_size`
  args are preallocated outputs written in place; the callee returns None.
- CALL_PACKED dst, packed, args: dst = packed(*args) (builtins, data-dependent kernels).
- ALLOC_STORAGE dst, size, alignment, dtype_hint: `size` is a register holding a byte count.
- ALLOC_TENSOR dst, storage, offset, shape, dtype; ALLOC_TENSOR_REG the same with a register
  holding a 1-d int64 shape.
- ALLOC_ADT dst, tag, fields: tag -1 builds a Python tuple, other tags an `ADT`.
- ALLOC_CLOSURE dst, func, free_vars.
- GET_FIELD dst, obj, index (ADT or tuple); GET_TAG dst, obj (a Python int).
- IF test, target, true_offset, false_offset: jump by `test == target`.
- GOTO offset.
- INVOKE dst, func, args; INVOKE_CLOSURE dst, closure, args: the closure's function receives
  the free variables first, then the args: `func(free_vars..., args...)` (the Relay VM's
  convention; lambda lifting puts captured variables first).
- LOAD_CONST dst, const; LOAD_CONSTI dst, value (a 0-d int64 array).
- SHAPE_OF dst, tensor (1-d int64); RESHAPE_TENSOR dst, tensor, shape (a view).
- KILL_REGISTER reg: the register becomes None so memory returns to the allocator early.

Since format 1.2, facts the compiler knows are instructions of their own, so no mode has to
recognise them in the order code happens to be emitted:

- TAIL_INVOKE func, args; TAIL_INVOKE_CLOSURE closure, args: a call in tail position (as
  `rvm.transform.tail_call` marks it): its result is the caller's result, and a mode may run it
  in the caller's frame (`TAIL_OPCODES`).
- NEW_TENSOR dst, shape, dtype, alignment: a tensor in a block of its own, which no other tensor
  shares (ALLOC_STORAGE of its bytes, then ALLOC_TENSOR at offset 0, the block never named);
  NEW_TENSOR_REG the same with a register holding a 1-d int64 shape. A static one of at most
  `memory.TINY_TENSOR_BYTES` is a plain numpy array in every mode.
- IF_IMM test, value, true_offset, false_offset: IF against an integer immediate (a branch
  on a bool or a constructor tag).
- ALLOC_SHAPE_HEAP dst, size: a zeroed heap of `size` int64 slots for a function's symbolic
  dimensions; MATCH_SHAPE tensor, heap, pattern, context: check the tensor's shape against a
  constant pattern, storing dimensions into the heap (`vm.builtin.match_shape`); MAKE_SHAPE
  dst, heap, pattern: a 1-d int64 shape from a constant pattern (`vm.builtin.make_shape`).
"""

from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple

__all__ = ["Opcode", "OpInfo", "OPCODE_INFO", "OPERAND_KINDS", "JUMP_OPCODES", "TAIL_OPCODES"]


class Opcode(IntEnum):
    """The VM's opcodes; their values are the serialized encoding, so never renumber them."""

    MOVE = 0
    RET = 1
    FATAL = 2
    INVOKE_PACKED = 3
    CALL_PACKED = 4
    ALLOC_STORAGE = 5
    ALLOC_TENSOR = 6
    ALLOC_TENSOR_REG = 7
    ALLOC_ADT = 8
    ALLOC_CLOSURE = 9
    GET_FIELD = 10
    GET_TAG = 11
    IF = 12
    GOTO = 13
    INVOKE = 14
    INVOKE_CLOSURE = 15
    LOAD_CONST = 16
    LOAD_CONSTI = 17
    SHAPE_OF = 18
    RESHAPE_TENSOR = 19
    KILL_REGISTER = 20
    TAIL_INVOKE = 21
    TAIL_INVOKE_CLOSURE = 22
    NEW_TENSOR = 23
    NEW_TENSOR_REG = 24
    ALLOC_SHAPE_HEAP = 25
    MATCH_SHAPE = 26
    MAKE_SHAPE = 27
    IF_IMM = 28


OPERAND_KINDS = frozenset(
    ["reg", "regs", "imm", "const", "func", "packed", "offset", "dtype", "str", "shape"]
)


class OpInfo(NamedTuple):
    """What the table knows about one opcode.

    Attributes:
        name: The text name used by `as_text`, e.g. `"invoke_packed"`.
        operands: `(field, kind)` pairs in operand order.
        text: The `as_text` template, formatted with the rendered operands by field name.
    """

    name: str
    operands: tuple[tuple[str, str], ...]
    text: str

    @property
    def kinds(self) -> tuple[str, ...]:
        """The operand kinds in order."""
        return tuple(kind for _, kind in self.operands)


OPCODE_INFO: dict[Opcode, OpInfo] = {
    Opcode.MOVE: OpInfo("move", (("dst", "reg"), ("src", "reg")), "{dst} = {src}"),
    Opcode.RET: OpInfo("ret", (("result", "reg"),), "{result}"),
    Opcode.FATAL: OpInfo("fatal", (("message", "const"),), "{message}"),
    Opcode.INVOKE_PACKED: OpInfo(
        "invoke_packed",
        (("packed", "packed"), ("arity", "imm"), ("output_size", "imm"), ("args", "regs")),
        "{packed}({args})  outputs: {output_size} of {arity}",
    ),
    Opcode.CALL_PACKED: OpInfo(
        "call_packed",
        (("dst", "reg"), ("packed", "packed"), ("args", "regs")),
        "{dst} = {packed}({args})",
    ),
    Opcode.ALLOC_STORAGE: OpInfo(
        "alloc_storage",
        (("dst", "reg"), ("size", "reg"), ("alignment", "imm"), ("dtype_hint", "str")),
        "{dst} = storage(size={size}, alignment={alignment}, hint={dtype_hint})",
    ),
    Opcode.ALLOC_TENSOR: OpInfo(
        "alloc_tensor",
        (
            ("dst", "reg"),
            ("storage", "reg"),
            ("offset", "imm"),
            ("shape", "shape"),
            ("dtype", "dtype"),
        ),
        "{dst} = tensor({storage}, offset={offset}, shape={shape}, {dtype})",
    ),
    Opcode.ALLOC_TENSOR_REG: OpInfo(
        "alloc_tensor_reg",
        (
            ("dst", "reg"),
            ("storage", "reg"),
            ("offset", "imm"),
            ("shape", "reg"),
            ("dtype", "dtype"),
        ),
        "{dst} = tensor({storage}, offset={offset}, shape={shape}, {dtype})",
    ),
    Opcode.ALLOC_ADT: OpInfo(
        "alloc_adt",
        (("dst", "reg"), ("tag", "imm"), ("fields", "regs")),
        "{dst} = adt(tag={tag}, [{fields}])",
    ),
    Opcode.ALLOC_CLOSURE: OpInfo(
        "alloc_closure",
        (("dst", "reg"), ("func", "func"), ("free_vars", "regs")),
        "{dst} = closure({func}, [{free_vars}])",
    ),
    Opcode.GET_FIELD: OpInfo(
        "get_field",
        (("dst", "reg"), ("obj", "reg"), ("index", "imm")),
        "{dst} = {obj}[{index}]",
    ),
    Opcode.GET_TAG: OpInfo("get_tag", (("dst", "reg"), ("obj", "reg")), "{dst} = tag({obj})"),
    Opcode.IF: OpInfo(
        "if",
        (("test", "reg"), ("target", "reg"), ("true_offset", "offset"), ("false_offset", "offset")),
        "{test} == {target} then {true_offset} else {false_offset}",
    ),
    Opcode.GOTO: OpInfo("goto", (("offset", "offset"),), "{offset}"),
    Opcode.INVOKE: OpInfo(
        "invoke", (("dst", "reg"), ("func", "func"), ("args", "regs")), "{dst} = {func}({args})"
    ),
    Opcode.INVOKE_CLOSURE: OpInfo(
        "invoke_closure",
        (("dst", "reg"), ("closure", "reg"), ("args", "regs")),
        "{dst} = {closure}({args})",
    ),
    Opcode.LOAD_CONST: OpInfo(
        "load_const", (("dst", "reg"), ("const", "const")), "{dst} = {const}"
    ),
    Opcode.LOAD_CONSTI: OpInfo(
        "load_consti", (("dst", "reg"), ("value", "imm")), "{dst} = {value}"
    ),
    Opcode.SHAPE_OF: OpInfo(
        "shape_of", (("dst", "reg"), ("tensor", "reg")), "{dst} = shape_of({tensor})"
    ),
    Opcode.RESHAPE_TENSOR: OpInfo(
        "reshape_tensor",
        (("dst", "reg"), ("tensor", "reg"), ("shape", "reg")),
        "{dst} = reshape({tensor}, {shape})",
    ),
    Opcode.KILL_REGISTER: OpInfo("kill_register", (("reg", "reg"),), "{reg}"),
    Opcode.TAIL_INVOKE: OpInfo(
        "tail_invoke", (("func", "func"), ("args", "regs")), "return {func}({args})"
    ),
    Opcode.TAIL_INVOKE_CLOSURE: OpInfo(
        "tail_invoke_closure",
        (("closure", "reg"), ("args", "regs")),
        "return {closure}({args})",
    ),
    Opcode.NEW_TENSOR: OpInfo(
        "new_tensor",
        (("dst", "reg"), ("shape", "shape"), ("dtype", "dtype"), ("alignment", "imm")),
        "{dst} = new_tensor({shape}, {dtype}, alignment={alignment})",
    ),
    Opcode.NEW_TENSOR_REG: OpInfo(
        "new_tensor_reg",
        (("dst", "reg"), ("shape", "reg"), ("dtype", "dtype"), ("alignment", "imm")),
        "{dst} = new_tensor({shape}, {dtype}, alignment={alignment})",
    ),
    Opcode.ALLOC_SHAPE_HEAP: OpInfo(
        "alloc_shape_heap", (("dst", "reg"), ("size", "imm")), "{dst} = shape_heap({size})"
    ),
    Opcode.MATCH_SHAPE: OpInfo(
        "match_shape",
        (("tensor", "reg"), ("heap", "reg"), ("pattern", "const"), ("context", "const")),
        "{tensor} against {pattern} into {heap}  ({context})",
    ),
    Opcode.MAKE_SHAPE: OpInfo(
        "make_shape",
        (("dst", "reg"), ("heap", "reg"), ("pattern", "const")),
        "{dst} = shape({pattern}, {heap})",
    ),
    Opcode.IF_IMM: OpInfo(
        "if_imm",
        (("test", "reg"), ("value", "imm"), ("true_offset", "offset"), ("false_offset", "offset")),
        "{test} == {value} then {true_offset} else {false_offset}",
    ),
}

JUMP_OPCODES = frozenset(op for op, info in OPCODE_INFO.items() if "offset" in info.kinds)
TAIL_OPCODES = {
    Opcode.TAIL_INVOKE: Opcode.INVOKE,
    Opcode.TAIL_INVOKE_CLOSURE: Opcode.INVOKE_CLOSURE,
}
"""Each tail call opcode and the call it is in tail position: the same call, whose result is
the caller's result, so a mode may run it in the caller's frame (which then vanishes from the
VM stack). The compiler emits one for every call `rvm.transform.tail_call` marks."""
