"""The scalar dataflow: which 0-d registers generated code may hold as machine scalars.

A 0-d register whose definitions are all scalar values (an output of a jit kernel's scalar
form, `executable.SCALAR_META`; a 0-d constant or LOAD_CONSTI; a 0-d tensor parameter; a move
of one) and that no other kernel writes can live as a machine scalar `s<i>` instead of a 0-d
array: a loop's counter and compare then allocate nothing. The native mode lowers those
registers so (`native_codegen`); the analysis reads only the bytecode, the parameter specs and
which kernels have a scalar form.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from rvm.runtime.bytecode import Opcode
from rvm.runtime.modes.lowering.flow import FlowInfo

if TYPE_CHECKING:
    from rvm.runtime.executable import VMFunction

__all__ = ["fixed_parameter", "scalar_constant", "scalar_registers"]

O = Opcode


def scalar_constant(value: object) -> bool:
    """Whether a constant is a 0-d numeric array (a scalar register's value)."""
    return isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "biuf"


def scalar_registers(
    fn: VMFunction,
    flow: FlowInfo,
    constants: list,
    scalar_form: Callable[[int], str | None],
) -> dict[int, str]:
    """The scalar registers of `fn`, each with its dtype (see the module docstring).

    Args:
        fn: The function.
        flow: Its flow analysis.
        constants: The executable's constants.
        scalar_form: Per packed index, the name of its kernel's scalar form, if it has one.
    """
    dtypes: dict[int, set[str]] = {}
    bad: set[int] = set()
    moves: dict[int, list[int]] = {}
    outputs: set[int] = set()  # written by a scalar form
    arrays: set[int] = set()  # outputs of other kernels
    used: set[int] = set()  # read as scalars: scalar forms' inputs, tests, loop values
    made: set[int] = set()  # allocated, or moved: maybe a kernel's output
    for i, spec in enumerate(fn.param_specs):
        if spec.kind == "tensor" and spec.dtype and spec.shape == ():
            dtypes.setdefault(i, set()).add(str(spec.dtype))
        else:
            bad.add(i)
    for pc, ins in enumerate(flow.code):
        op, dst = ins[0], ins[1]
        if op == O.NEW_TENSOR and tuple(ins[2]) == ():
            dtypes.setdefault(dst, set()).add(str(ins[3]))
            made.add(dst)
        elif op == O.ALLOC_TENSOR and tuple(ins[4]) == ():
            dtypes.setdefault(dst, set()).add(str(ins[5]))
            made.add(dst)
        elif op == O.LOAD_CONST and scalar_constant(constants[ins[2]]):
            dtypes.setdefault(dst, set()).add(constants[ins[2]].dtype.name)
        elif op == O.LOAD_CONSTI:
            dtypes.setdefault(dst, set()).add("int64")
        elif op == O.MOVE:
            moves.setdefault(dst, []).append(ins[2])
            made.add(dst)
        elif op == O.INVOKE_PACKED and scalar_form(ins[1]) is not None:
            outputs.add(ins[4][-1])
            used.update(ins[4][:-1])
        elif op == O.INVOKE_PACKED:
            arrays.update(ins[4][len(ins[4]) - ins[3] :])  # another kernel's outputs
        elif op != O.KILL_REGISTER:
            bad.update(flow.rw[pc][1])  # any other write: not a scalar
        if op in (O.IF, O.IF_IMM) or pc in flow.self_tails:
            used.update(flow.rw[pc][0])
    for dst, srcs in moves.items():  # a move's value has its source's dtype
        dtypes.setdefault(dst, set()).update(d for src in srcs for d in dtypes.get(src, {"?"}))
    scalars = {
        r: next(iter(d))
        for r, d in dtypes.items()
        if len(d) == 1
        and "?" not in d
        and r not in bad
        and not (r in made and r in arrays)
        and (r in outputs if r in made and r not in moves else r in used or r in moves)
    }
    return _drop_mixed_moves(scalars, moves)


def _drop_mixed_moves(scalars: dict[int, str], moves: dict[int, list[int]]) -> dict[int, str]:
    """`scalars` less every move target with a source that is not a scalar of its dtype."""
    changed = True
    while changed:
        changed = False
        for dst, srcs in moves.items():
            if dst in scalars and any(s not in scalars or scalars[s] != scalars[dst] for s in srcs):
                del scalars[dst]
                changed = True
    return scalars


def fixed_parameter(flow: FlowInfo, reg: int) -> bool:
    """Whether `reg` is a parameter that holds its argument throughout (never written; every
    self tail call passes it back in place)."""
    if reg >= flow.nparams:
        return False
    code = flow.code
    if any(code[w][0] != O.KILL_REGISTER for w in flow.writers.get(reg, [])):
        return False
    return all(code[pc][2][reg] == reg for pc in flow.self_tails)
