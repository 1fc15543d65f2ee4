"""The storage a function's memory plan allocates, read from its instructions (`ex.stats()`).

A block of a constant size (ALLOC_STORAGE of a LOAD_CONSTI register) and a tensor of a constant
shape in a block of its own (NEW_TENSOR) count their bytes; one whose size is known only at run
time (a symbolic shape: ALLOC_STORAGE of a computed size, NEW_TENSOR_REG) is counted apart.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

from rvm.dtypes import numpy_dtype
from rvm.runtime.bytecode import Opcode

if TYPE_CHECKING:
    from rvm.runtime.executable import VMFunction

__all__ = ["PlannedStorage", "planned_storage"]


class PlannedStorage(NamedTuple):
    """What a function's code allocates each call (kills and reuse already planned).

    Attributes:
        nbytes: The bytes of the allocations of constant size.
        dynamic: How many allocations have a size known only at run time.
    """

    nbytes: int
    dynamic: int


def planned_storage(fn: VMFunction) -> PlannedStorage:
    """The storage `fn`'s instructions allocate (each allocation counted once, as written)."""
    immediates: dict[int, int] = {}
    writes: dict[int, int] = {}
    for ins in fn.instructions:
        if ins[0] == Opcode.LOAD_CONSTI:
            immediates[ins[1]] = ins[2]
            writes[ins[1]] = writes.get(ins[1], 0) + 1
    nbytes = dynamic = 0
    for ins in fn.instructions:
        op = ins[0]
        if op == Opcode.ALLOC_STORAGE:
            size = ins[2]
            if size in immediates and writes[size] == 1:
                nbytes += immediates[size]
            else:
                dynamic += 1
        elif op == Opcode.NEW_TENSOR:
            nbytes += math.prod(ins[2]) * numpy_dtype(ins[3]).itemsize
        elif op == Opcode.NEW_TENSOR_REG:
            dynamic += 1
    return PlannedStorage(nbytes, dynamic)
