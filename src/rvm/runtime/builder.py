"""`ExecBuilder`: assemble an `Executable` instruction by instruction.

Operands may be given symbolically and are resolved at `build()`: a function operand by name (so
functions can call ones declared later), a packed operand by name (added to the primitive
names), and a jump offset by `Label` (patched to the relative offset).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from rvm.dtypes import numpy_dtype
from rvm.errors import ExecutableFormatError
from rvm.runtime.bytecode import OPCODE_INFO, Opcode
from rvm.runtime.executable import (
    ADTInfo,
    Executable,
    KernelRecord,
    ParamSpec,
    VMFunction,
)

__all__ = ["ExecBuilder", "FunctionBuilder", "Label"]


class Label:
    """A jump target; `FunctionBuilder.place` binds it to the next instruction's pc."""

    __slots__ = ("pc", "name")

    def __init__(self, name: str = "") -> None:
        self.pc: int | None = None
        self.name = name

    def __repr__(self) -> str:
        return f"Label({self.name!r}, pc={self.pc})"


class FunctionBuilder:
    """Builds one function's bytecode; get one from `ExecBuilder.function`."""

    def __init__(
        self,
        owner: ExecBuilder,
        name: str,
        params: Sequence[str],
        param_specs: Sequence[ParamSpec] | None,
        register_file_size: int | None,
        result: ParamSpec | None = None,
        dim_ranges: Sequence[tuple[str, int | None, int | None]] = (),
    ) -> None:
        self.owner = owner
        self.result = result
        self.dim_ranges = tuple(dim_ranges)
        self.name = name
        self.params = tuple(params)
        specs = param_specs if param_specs is not None else [ParamSpec(p) for p in self.params]
        self.param_specs = tuple(specs)
        self.num_registers = len(self.params)
        self.fixed_size = register_file_size
        self.code: list[list[Any]] = []

    @property
    def pc(self) -> int:
        """The pc the next emitted instruction gets."""
        return len(self.code)

    def param(self, i: int) -> int:
        """The register holding parameter `i` (parameters occupy the first registers)."""
        return i

    def new_register(self) -> int:
        """Returns a fresh register index."""
        self.num_registers += 1
        return self.num_registers - 1

    def label(self, name: str = "") -> Label:
        """Returns a new, unplaced label."""
        return Label(name)

    def place(self, label: Label) -> Label:
        """Binds `label` to the pc of the next emitted instruction."""
        if label.pc is not None:
            raise ValueError(f"{label!r} is already placed")
        label.pc = self.pc
        return label

    def emit(self, opcode: Opcode | int, *operands: Any) -> int:
        """Appends an instruction and returns its pc.

        Operands follow `OPCODE_INFO[opcode]`; variadic operands (args, fields, free vars) and
        shapes are sequences. A func operand may be a function name, a packed operand a
        primitive name, a const operand an int index, an offset an int or a `Label`.
        """
        op = Opcode(opcode)
        info = OPCODE_INFO[op]
        if len(operands) != len(info.operands):
            raise TypeError(
                f"{info.name} takes {len(info.operands)} operands "
                f"({', '.join(f for f, _ in info.operands)}), got {len(operands)}"
            )
        row: list[Any] = [op]
        for (_, kind), v in zip(info.operands, operands):
            if kind in ("regs", "shape"):
                v = tuple(int(x) for x in v)
            elif kind == "packed" and isinstance(v, str):
                v = self.owner.add_primitive(v)
            elif kind in ("dtype", "str"):
                v = _dtype_name(v) if kind == "dtype" else str(v)
            elif kind in ("func", "offset") and isinstance(v, (str, Label)):
                pass  # resolved in finish()
            else:
                v = int(v)
            if kind == "reg":
                self.num_registers = max(self.num_registers, v + 1)
            elif kind == "regs" and v:
                self.num_registers = max(self.num_registers, max(v) + 1)
            row.append(v)
        self.code.append(row)
        return len(self.code) - 1

    def finish(self, func_index: dict[str, int]) -> VMFunction:
        """Resolves names and labels and returns the `VMFunction`."""
        out = []
        for pc, row in enumerate(self.code):
            info = OPCODE_INFO[row[0]]
            ins: list[Any] = [int(row[0])]
            for (fname, kind), v in zip(info.operands, row[1:]):
                if isinstance(v, Label):
                    if v.pc is None:
                        raise ExecutableFormatError(f"@{self.name} pc={pc}: {v!r} never placed")
                    v = v.pc - pc
                elif kind == "func" and isinstance(v, str):
                    if v not in func_index:
                        raise ExecutableFormatError(
                            f"@{self.name} pc={pc}: {info.name} {fname} names unknown "
                            f"function {v!r}"
                        )
                    v = func_index[v]
                ins.append(v)
            out.append(tuple(ins))
        size = self.fixed_size if self.fixed_size is not None else max(1, self.num_registers)
        return VMFunction(
            self.name,
            self.params,
            self.param_specs,
            size,
            tuple(out),
            result=self.result,
            dim_ranges=self.dim_ranges,
        )


class ExecBuilder:
    """Collects functions, constants, primitives, kernels and ADTs, then `build()`s."""

    def __init__(self) -> None:
        self.functions: list[FunctionBuilder] = []
        self.constants: list[np.ndarray] = []
        self.primitive_names: list[str] = []
        self._primitive_index: dict[str, int] = {}
        self.kernels: dict[str, KernelRecord] = {}
        self.libraries: dict[str, str] = {}
        self.adts: list[ADTInfo] = []
        self._next_tag = 0

    def add_constant(self, value: Any) -> int:
        """Adds a constant (any non-object numpy array, or a str / scalar) and returns its index."""
        arr = np.asarray(value)
        if arr.dtype.hasobject:
            raise TypeError(f"constants cannot have object dtype: {value!r}")
        self.constants.append(arr)
        return len(self.constants) - 1

    def add_primitive(self, name: str) -> int:
        """Adds a packed-function name (deduplicated) and returns its index."""
        if name not in self._primitive_index:
            self._primitive_index[name] = len(self.primitive_names)
            self.primitive_names.append(name)
        return self._primitive_index[name]

    def add_kernel(self, record: KernelRecord) -> int:
        """Adds a kernel record and its name as a primitive; returns the primitive index."""
        if record.name in self.kernels and self.kernels[record.name] != record:
            raise ValueError(f"a different kernel named {record.name!r} was already added")
        self.kernels[record.name] = record
        return self.add_primitive(record.name)

    def add_library(self, name: str, source: str) -> None:
        """Adds Python source shared by the numpy kernels, available to them as `name`."""
        self.libraries[name] = source

    def add_adt(
        self,
        name: str,
        constructors: Iterable[Sequence[Any]],
        python: str | None = None,
        fields: Sequence[Sequence[ParamSpec]] | None = None,
    ) -> list[int]:
        """Adds an ADT; constructors are (name, arity) or (name, tag, arity); ``python`` is
        its values' Python form at the boundary (`ADTInfo.python`); ``fields`` the types of
        each constructor's fields, when known (`ADTInfo.fields`).

        Returns:
            The constructors' tags; tags not given are numbered after every tag used so far,
            so tags are unique in the executable.
        """
        rows = []
        for c in constructors:
            if len(c) == 2:
                cname, tag, arity = c[0], self._next_tag, c[1]
            else:
                cname, tag, arity = c
            self._next_tag = max(self._next_tag, int(tag) + 1)
            rows.append((str(cname), int(tag), int(arity)))
        types = None if fields is None else tuple(tuple(f) for f in fields)
        self.adts.append(ADTInfo(name, tuple(rows), python, types))
        return [tag for _, tag, _ in rows]

    def function(
        self,
        name: str,
        params: Sequence[str] = (),
        param_specs: Sequence[ParamSpec] | None = None,
        register_file_size: int | None = None,
        result: ParamSpec | None = None,
        dim_ranges: Sequence[tuple[str, int | None, int | None]] = (),
    ) -> FunctionBuilder:
        """Starts a function; its parameters occupy registers 0..len(params)-1.

        Args:
            name: The function's name.
            params: Parameter names.
            param_specs: Entry checks per parameter (default: kind "any").
            register_file_size: Fix the register count (default: highest register used + 1).
            result: What the function returns (`VMFunction.result`), if known.
            dim_ranges: Bounds of symbolic dimensions checked at entry (`VMFunction`).
        """
        fb = FunctionBuilder(
            self, name, params, param_specs, register_file_size, result, dim_ranges
        )
        self.functions.append(fb)
        return fb

    def build(self) -> Executable:
        """Resolves names and labels, validates everything, returns the `Executable`.

        Raises:
            ExecutableFormatError: An index, register, jump target or arity is wrong.
        """
        index = {fb.name: i for i, fb in enumerate(self.functions)}
        funcs = [fb.finish(index) for fb in self.functions]
        return Executable(
            funcs, self.constants, self.primitive_names, self.kernels, self.libraries, self.adts
        )


def _dtype_name(dtype: Any) -> str:
    """The name of a dtype given as a name or a numpy dtype (``"float32"``, ``"bfloat16"``)."""
    return str(numpy_dtype(dtype) if isinstance(dtype, str) else np.dtype(dtype))
