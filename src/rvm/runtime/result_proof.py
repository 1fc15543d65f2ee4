"""Which functions' results are what their recorded result types say, proved from the code.

A result check at the VM boundary (`calling.py`) is only needed where the code does not already
guarantee the result's type. The instructions state the facts: a NEW_TENSOR or ALLOC_TENSOR
names its shape and dtype, a MAKE_SHAPE builds its shape from a constant pattern over the shape
heap, whose slots the entry's MATCH_SHAPE filled from the parameters' dims, and a kernel writes
into the tensor it is given (destination-passing) without changing its shape. So every register
gets an abstract value, joined over every instruction that writes it:

- a tensor ``(dtype, dims)``, each dim an int or a parameter's symbolic dim name;
- a tuple of abstract values (ALLOC_ADT of tag -1, GET_FIELD of one);
- unknown (None): anything a Python function or a data-dependent kernel returned (CALL_PACKED),
  a closure call, a reshape to a shape with -1 in it, a field of an ADT value.

A function is proved when the value of every RET is its result type, and every tail call is of
a proved function of the same static result type (a function calling itself is assumed proved
while it is being proved: the greatest fixed point). Calls (INVOKE) take the callee's result
type when the callee is proved and the type is static. A proved function needs no run-time
result check; the others are checked at every call from Python.
"""

from __future__ import annotations

from typing import Any

from rvm.runtime.bytecode import OPCODE_INFO, Opcode
from rvm.runtime.executable import Executable, ParamSpec, VMFunction

__all__ = ["proved_results"]

O = Opcode
_WRITES = frozenset(
    op for op, info in OPCODE_INFO.items() if info.operands[:1] == (("dst", "reg"),)
)


def _of_spec(spec: ParamSpec | None) -> Any:
    """The abstract value a result spec promises (None: nothing provable, e.g. an ADT)."""
    if spec is None:
        return None
    if spec.kind == "tensor" and spec.dtype is not None and spec.shape is not None:
        if all(d is not None for d in spec.shape):
            return ("tensor", spec.dtype, tuple(spec.shape))
        return None
    if spec.kind == "tuple" and spec.fields is not None:
        fields = tuple(_of_spec(f) for f in spec.fields)
        return None if any(f is None for f in fields) else ("tuple", fields)
    return None


def _static(value: Any) -> bool:
    """Whether an abstract value names no symbolic dim (so it means the same in any function)."""
    if value is None:
        return False
    if value[0] == "tensor":
        return all(type(d) is int for d in value[2])
    return all(_static(f) for f in value[1])


class _Function:
    """The abstract values of one function's registers."""

    def __init__(self, prover: _Prover, fn: VMFunction) -> None:
        self.prover = prover
        self.fn = fn
        self.writers: dict[int, list[tuple]] = {}
        self.slots: dict[int, str] = {}  # shape heap slot -> the parameter dim stored there
        nparams = len(fn.params)
        for ins in fn.instructions:
            if ins[0] in _WRITES:
                self.writers.setdefault(ins[1], []).append(ins)
            elif ins[0] == O.MATCH_SHAPE and ins[1] < nparams:
                self._slots(ins, fn.param_specs[ins[1]])
        self.values: dict[int, Any] = {}

    def _slots(self, ins: tuple, spec: ParamSpec) -> None:
        pattern = self.prover.ex.constants[ins[3]].tolist()
        if spec.kind != "tensor" or spec.shape is None or len(pattern) != 2 * len(spec.shape):
            return
        for axis, dim in enumerate(spec.shape):
            if pattern[2 * axis] == 1 and isinstance(dim, str):
                self.slots[pattern[2 * axis + 1]] = dim

    def value(self, reg: int, depth: int = 0) -> Any:
        if reg in self.values:
            return self.values[reg]
        self.values[reg] = None  # a cycle through moves proves nothing
        found: list[Any] = []
        if reg < len(self.fn.params):
            found.append(_of_param(self.fn.param_specs[reg]))
        for ins in self.writers.get(reg, ()):
            found.append(self._written(ins, depth) if depth < 64 else None)
        value = found[0] if found and all(v == found[0] for v in found) else None
        self.values[reg] = value
        return value

    def _written(self, ins: tuple, depth: int) -> Any:  # noqa: C901 - one case per opcode
        op = ins[0]
        if op == O.NEW_TENSOR:
            return ("tensor", ins[3], tuple(ins[2]))
        if op == O.ALLOC_TENSOR:
            return ("tensor", ins[5], tuple(ins[4]))
        if op in (O.NEW_TENSOR_REG, O.ALLOC_TENSOR_REG):
            shape_reg, dtype = (ins[2], ins[3]) if op == O.NEW_TENSOR_REG else (ins[4], ins[5])
            dims = self._shape(shape_reg)
            return None if dims is None else ("tensor", dtype, dims)
        if op == O.MOVE:
            return self.value(ins[2], depth + 1)
        if op == O.ALLOC_ADT and ins[2] == -1:
            fields = tuple(self.value(r, depth + 1) for r in ins[3])
            return None if any(f is None for f in fields) else ("tuple", fields)
        if op == O.GET_FIELD:
            obj = self.value(ins[2], depth + 1)
            if obj is not None and obj[0] == "tuple" and 0 <= ins[3] < len(obj[1]):
                return obj[1][ins[3]]
            return None
        if op == O.INVOKE:
            result = self.prover.result(ins[2])
            return result if _static(result) else None
        if op == O.RESHAPE_TENSOR:  # a view: the input's dtype, the shape it is given
            src, dims = self.value(ins[2], depth + 1), self._shape(ins[3])
            ok = src is not None and src[0] == "tensor" and dims is not None
            return ("tensor", src[1], dims) if ok else None
        if op == O.SHAPE_OF:
            src = self.value(ins[2], depth + 1)
            return ("tensor", "int64", (len(src[2]),)) if src and src[0] == "tensor" else None
        if op == O.LOAD_CONSTI:
            return ("tensor", "int64", ())
        if op == O.LOAD_CONST:
            c = self.prover.ex.constants[ins[2]]
            return ("tensor", c.dtype.name, tuple(c.shape)) if c.dtype.kind in "biuf" else None
        return None

    def _shape(self, reg: int) -> tuple | None:
        """The dims of a shape register every writer of which is the same MAKE_SHAPE pattern."""
        patterns = {ins[3] for ins in self.writers.get(reg, ()) if ins[0] == O.MAKE_SHAPE}
        if len(patterns) != 1 or len(self.writers[reg]) != len(
            [i for i in self.writers[reg] if i[0] == O.MAKE_SHAPE]
        ):
            return None
        pattern = self.prover.ex.constants[patterns.pop()].tolist()
        dims: list[int | str] = []
        for kind, v in zip(pattern[::2], pattern[1::2]):
            if kind == 0 and v >= 0:
                dims.append(v)
            elif kind == 1 and v in self.slots:
                dims.append(self.slots[v])
            else:
                return None
        return tuple(dims)

    def proved(self) -> bool:
        want = _of_spec(self.fn.result)
        if want is None:
            return False
        for ins in self.fn.instructions:
            if ins[0] == O.RET and self.value(ins[1]) != want:
                return False
            if ins[0] == O.TAIL_INVOKE and not (
                _static(want) and self.prover.result(ins[1]) == want
            ):
                return False
            if ins[0] == O.TAIL_INVOKE_CLOSURE:
                return False
        return True


def _of_param(spec: ParamSpec) -> Any:
    if spec.kind == "tensor" and spec.dtype is not None and spec.shape is not None:
        if all(d is not None for d in spec.shape):
            return ("tensor", spec.dtype, tuple(spec.shape))
    return None


class _Prover:
    def __init__(self, ex: Executable) -> None:
        self.ex = ex
        self.state: dict[int, bool | None] = {}  # None: being proved
        self.stack: list[int] = []

    def proved(self, fidx: int) -> bool:
        """Whether `fidx` is proved. A function being proved is assumed so by itself only (a
        mutual recursion is not proved: an assumption that failed would have leaked)."""
        if fidx in self.state:
            done = self.state[fidx]
            return done if done is not None else fidx == self.stack[-1]
        self.state[fidx] = None
        self.stack.append(fidx)
        try:
            ok = _Function(self, self.ex.functions[fidx]).proved()
        finally:
            self.stack.pop()
        self.state[fidx] = ok
        return ok

    def result(self, fidx: int) -> Any:
        """The abstract value function `fidx` returns when proved, else None."""
        if not self.proved(fidx):
            return None
        return _of_spec(self.ex.functions[fidx].result)


def proved_results(ex: Executable) -> list[bool]:
    """Per function of `ex`, whether its code guarantees its recorded result type."""
    prover = _Prover(ex)
    return [prover.proved(i) for i in range(len(ex.functions))]
