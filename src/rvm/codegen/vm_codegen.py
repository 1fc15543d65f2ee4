"""VM codegen: a VM-ready IRModule to register bytecode.

Each non-primitive module function becomes a VM function: parameters in the first registers,
one register per bound variable, one or two instructions per binding (see the table in
`rvm.transform.vm_ops`). If and Match become jumps (IF_IMM against the constant 1 or the
constructor's tag); in tail position every branch ends in its own Ret, and a call the
`tail_call` pass marked becomes TAIL_INVOKE / TAIL_INVOKE_CLOSURE. A storage block that the
memory plan gives one tensor (its one use other than kills is that tensor, at offset 0) is not
emitted: the tensor is NEW_TENSOR (NEW_TENSOR_REG for a run-time shape); a block whose tensors
are all tiny is made as a tiny NEW_TENSOR too (`_OwnedBlocks`). Functions whose
parameters (or tensor fields of tuple parameters) have symbolic dimensions first store those
dimensions in a shape heap (ALLOC_SHAPE_HEAP, MATCH_SHAPE), which also checks the rank and fixed
dimensions of those tensors on every call, internal ones included (an unknown `?` dimension in
the same shape is checked for rank only): no kernel runs on shapes its types did not promise.
Primitive functions become kernels.
"""

from __future__ import annotations

from rvm.codegen.vm_function import ALIGNMENT, FunctionCodegen
from rvm.codegen.vm_specs import dim_ranges, param_spec, result_spec, result_type
from rvm.ir import expr as E
from rvm.ir.module import IRModule
from rvm.runtime.builder import ExecBuilder

__all__ = [
    "ALIGNMENT",
    "FunctionCodegen",
    "ModuleCodegen",
    "dim_ranges",
    "param_spec",
    "result_spec",
    "result_type",
    "vm_codegen",
]


class ModuleCodegen:
    """Emits a whole module: functions, constants, kernels and data types."""

    def __init__(self, mod: IRModule, kernel_factory) -> None:
        self.mod = mod
        self.builder = ExecBuilder()
        self.kernel_factory = kernel_factory
        self._consts: dict[E.Constant, int] = {}
        self._strings: dict[str, int] = {}
        self._patterns: dict[tuple[int, ...], int] = {}
        self._kernels: dict[tuple[str, str], str] = {}
        self._tags: dict[tuple[str, str], int] = {}
        forms = mod.attrs.get("python_forms", {})  # the frontends' (ONNX sequences, optionals)
        for adt in mod.adts.values():
            rows = [(c.name, len(c.field_types)) for c in adt.constructors]
            fields = [
                [result_spec(t, f"{c.name}[{j}]") for j, t in enumerate(c.field_types)]
                for c in adt.constructors
            ]
            tags = self.builder.add_adt(adt.name, rows, forms.get(adt.name), fields)
            for (cname, _), tag in zip(rows, tags):
                self._tags[(adt.name, cname)] = tag

    def constant(self, c: E.Constant) -> int:
        idx = self._consts.get(c)
        if idx is None:
            idx = self._consts[c] = self.builder.add_constant(c.data)
        return idx

    def string(self, s: str) -> int:
        idx = self._strings.get(s)
        if idx is None:
            import numpy as np

            idx = self._strings[s] = self.builder.add_constant(np.array(s))
        return idx

    def int_pattern(self, pairs: list[int]) -> int:
        key = tuple(pairs)
        idx = self._patterns.get(key)
        if idx is None:
            import numpy as np

            idx = self._patterns[key] = self.builder.add_constant(np.array(key, dtype=np.int64))
        return idx

    def tag(self, c: E.Constructor) -> int:
        return self._tags[(c.adt_name, c.name)]

    def kernel(self, prim_name: str, style: str) -> str:
        """The packed name of primitive ``prim_name`` as a kernel of ``style``."""
        key = (prim_name, style)
        name = self._kernels.get(key)
        if name is None:
            name = prim_name if style == "dps" else f"{prim_name}_alloc"
            record = self.kernel_factory(name, self.mod[prim_name], style)
            self.builder.add_kernel(record)
            self._kernels[key] = name
        return name

    def run(self):
        for name, func in self.mod.items():
            if not func.is_primitive:
                FunctionCodegen(self, name, func).run()
        return self.builder.build()


def vm_codegen(mod: IRModule, kernel_factory) -> object:
    """Generate the `Executable` of a VM-ready module.

    Args:
        mod: the module after the pipeline.
        kernel_factory: ``(name, primitive function, style) -> KernelRecord``; its kernels
            import what they call by name (numpy kernels: `rvm.kernels.reference`).
    """
    return ModuleCodegen(mod, kernel_factory).run()
