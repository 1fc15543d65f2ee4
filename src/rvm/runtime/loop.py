"""The bytecode exec mode: one dispatch loop over the decoded instructions.

The loop follows clox: the current function's code, its registers and the pc are locals;
instructions were decoded once into int-led tuples (`decode.py`); the commonest opcodes are
tested first; calls push `(code, regs, return_pc, dst, func_index)` on an explicit frame stack,
so VM recursion never recurses in Python, and tail calls reuse the frame. Packed calls go
through the context's `packed` table, read once per run, so instrumentation costs the plain
path nothing.

A failure raises the context's `VMStackError` carrying the VM stack (`in @main pc=7:
invoke_packed fused_add_exp`), chained to the original exception. All loop state is local, so
the next call starts clean.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rvm.errors import VMError
from rvm.runtime.bytecode import Opcode
from rvm.runtime.decode import ALLOC_STATIC, IF_CONST, TAIL_INVOKE, TAIL_INVOKE_CLOSURE
from rvm.runtime.exec_mode import ExecContext, Fatal
from rvm.runtime.objects import ADT, Closure

__all__ = ["BytecodeMode", "MAX_CALL_DEPTH"]

MAX_CALL_DEPTH = 500_000

_MOVE = Opcode.MOVE.value
_RET = Opcode.RET.value
_FATAL = Opcode.FATAL.value
_INVOKE_PACKED = Opcode.INVOKE_PACKED.value
_CALL_PACKED = Opcode.CALL_PACKED.value
_ALLOC_STORAGE = Opcode.ALLOC_STORAGE.value
_ALLOC_TENSOR = Opcode.ALLOC_TENSOR.value
_ALLOC_TENSOR_REG = Opcode.ALLOC_TENSOR_REG.value
_ALLOC_ADT = Opcode.ALLOC_ADT.value
_ALLOC_CLOSURE = Opcode.ALLOC_CLOSURE.value
_GET_FIELD = Opcode.GET_FIELD.value
_GET_TAG = Opcode.GET_TAG.value
_IF = Opcode.IF.value
_GOTO = Opcode.GOTO.value
_INVOKE = Opcode.INVOKE.value
_INVOKE_CLOSURE = Opcode.INVOKE_CLOSURE.value
_LOAD_CONST = Opcode.LOAD_CONST.value
_LOAD_CONSTI = Opcode.LOAD_CONSTI.value
_SHAPE_OF = Opcode.SHAPE_OF.value
_RESHAPE_TENSOR = Opcode.RESHAPE_TENSOR.value
_KILL_REGISTER = Opcode.KILL_REGISTER.value


class BytecodeMode:
    """The bytecode loop over `context` (an `ExecMode`)."""

    def __init__(self, context: ExecContext) -> None:
        self.context = context

    def run(self, fidx: int, args: list[Any]) -> Any:
        """Runs function `fidx` on VM values `args`; the dispatch loop."""
        context = self.context
        funcs = context.functions
        packed = context.packed
        alloc = context.allocator.alloc
        ndarray = np.ndarray
        empty = np.empty
        int64 = np.int64
        frames: list[tuple] = []
        code, pad, _ = funcs[fidx]
        regs = list(args)
        regs += pad
        pc = 0
        try:
            while True:
                ins = code[pc]
                op = ins[0]
                if op == _INVOKE_PACKED:
                    packed[ins[1]](*ins[2](regs))
                    pc += 1
                elif op == _CALL_PACKED:
                    regs[ins[1]] = packed[ins[2]](*ins[3](regs))
                    pc += 1
                elif op == ALLOC_STATIC:
                    regs[ins[1]] = ins[2]
                    if ins[9]:  # a tiny tensor (`memory.is_tiny`, decided by decode)
                        regs[ins[5]] = empty(ins[7], ins[8])
                    else:
                        regs[ins[5]] = ndarray(ins[7], ins[8], alloc(ins[3], ins[4]).buffer, ins[6])
                    pc += 4
                elif op == IF_CONST:
                    regs[ins[2]] = ins[3]
                    test = regs[ins[1]]
                    if type(test) is ndarray:
                        test = test.item()
                    pc = ins[5] if test == ins[4] else ins[6]
                elif op == _KILL_REGISTER:
                    regs[ins[1]] = None
                    pc += 1
                elif op == _MOVE:
                    regs[ins[1]] = regs[ins[2]]
                    pc += 1
                elif op == _LOAD_CONST or op == _LOAD_CONSTI:
                    regs[ins[1]] = ins[2]
                    pc += 1
                elif op == _RET:
                    value = regs[ins[1]]
                    if not frames:
                        return value
                    code, regs, pc, dst, fidx = frames.pop()
                    regs[dst] = value
                elif op == TAIL_INVOKE:
                    fidx = ins[1]
                    code, pad, _ = funcs[fidx]
                    regs = [*ins[2](regs), *pad]
                    pc = 0
                elif op == _INVOKE:
                    frames.append((code, regs, pc + 1, ins[1], fidx))
                    if len(frames) > MAX_CALL_DEPTH:
                        raise VMError(f"call depth exceeds {MAX_CALL_DEPTH} (infinite recursion?)")
                    fidx = ins[2]
                    code, pad, _ = funcs[fidx]
                    regs = [*ins[3](regs), *pad]
                    pc = 0
                elif op == _ALLOC_TENSOR:
                    regs[ins[1]] = ndarray(ins[4], ins[5], regs[ins[2]].buffer, ins[3])
                    pc += 1
                elif op == _ALLOC_STORAGE:
                    regs[ins[1]] = alloc(regs[ins[2]], ins[3])
                    pc += 1
                elif op == _IF:
                    pc = ins[3] if regs[ins[1]] == regs[ins[2]] else ins[4]
                elif op == _GOTO:
                    pc = ins[1]
                elif op == _GET_FIELD:
                    obj = regs[ins[2]]
                    regs[ins[1]] = obj.fields[ins[3]] if type(obj) is ADT else obj[ins[3]]
                    pc += 1
                elif op == _GET_TAG:
                    regs[ins[1]] = regs[ins[2]].tag
                    pc += 1
                elif op == _ALLOC_ADT:
                    fields = tuple(ins[3](regs))
                    regs[ins[1]] = fields if ins[2] == -1 else ADT(ins[2], fields, ins[4])
                    pc += 1
                elif op == _INVOKE_CLOSURE or op == TAIL_INVOKE_CLOSURE:
                    tail = op == TAIL_INVOKE_CLOSURE
                    closure = regs[ins[1] if tail else ins[2]]
                    if type(closure) is not Closure:
                        raise VMError(
                            f"invoke_closure on a {type(closure).__name__}, not a closure"
                        )
                    new_code, pad, nparams = funcs[closure.func_index]
                    new_regs = [*closure.free_vars, *ins[-1](regs)]
                    if len(new_regs) != nparams:
                        nargs = len(new_regs) - len(closure.free_vars)
                        raise VMError(
                            f"closure @{closure.name} takes {nparams} values, got "
                            f"{len(closure.free_vars)} free vars + {nargs} args"
                        )
                    new_regs += pad
                    if not tail:
                        frames.append((code, regs, pc + 1, ins[1], fidx))
                        if len(frames) > MAX_CALL_DEPTH:
                            raise VMError(f"call depth exceeds {MAX_CALL_DEPTH}")
                    fidx, code, regs, pc = closure.func_index, new_code, new_regs, 0
                elif op == _ALLOC_CLOSURE:
                    free = tuple(ins[3](regs))
                    regs[ins[1]] = Closure(ins[2], free, ins[4])
                    pc += 1
                elif op == _ALLOC_TENSOR_REG:
                    shape = tuple(regs[ins[4]].tolist())
                    regs[ins[1]] = ndarray(shape, ins[5], regs[ins[2]].buffer, ins[3])
                    pc += 1
                elif op == _SHAPE_OF:
                    regs[ins[1]] = np.array(regs[ins[2]].shape, dtype=int64)
                    pc += 1
                elif op == _RESHAPE_TENSOR:
                    regs[ins[1]] = regs[ins[2]].reshape(tuple(regs[ins[3]].tolist()))
                    pc += 1
                elif op == _FATAL:
                    raise Fatal(ins[1])
                else:  # unreachable for a validated executable
                    raise VMError(f"unknown decoded opcode {op}")
        except Exception as e:
            stack = [(f[4], f[2] - 1) for f in frames] + [(fidx, pc)]
            # Drop the registers now: the traceback keeps this frame's locals alive.
            frames.clear()
            regs = code = None  # noqa: F841
            raise context.error(e, stack) from (None if isinstance(e, Fatal) else e)
