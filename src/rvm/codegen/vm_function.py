"""The lowering of one IR function to a VM function's bytecode (`FunctionCodegen`; the module,
its constants, kernels and data types are `vm_codegen.ModuleCodegen`'s). See `vm_codegen` for
what each binding becomes.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from rvm.codegen import patterns
from rvm.codegen.effects import declared_shapes, emit_effect, makes_shapes
from rvm.codegen.vm_specs import dim_ranges, param_spec, result_spec, result_type
from rvm.dtypes import numpy_dtype
from rvm.errors import IRError
from rvm.ir import dims as D
from rvm.ir import expr as E
from rvm.ir.functor import ExprVisitor
from rvm.ir.infer import infer_type
from rvm.ir.types import TensorType, TupleType, Type
from rvm.op import effects
from rvm.runtime.builder import FunctionBuilder, Label
from rvm.runtime.bytecode import Opcode
from rvm.runtime.memory import is_tiny
from rvm.transform import vm_ops

if TYPE_CHECKING:
    from rvm.codegen.vm_codegen import ModuleCodegen

__all__ = ["ALIGNMENT", "FunctionCodegen"]

ALIGNMENT = 64


def _symbolic_tensors(
    ty: Type | None, path: tuple[int, ...], what: str, out: list[tuple[tuple[int, ...], str, tuple]]
) -> None:
    """Append (path, description, shape) of each tensor with a symbolic dim in ``ty``: a
    parameter's index, then field indices into nested tuples."""
    if isinstance(ty, TensorType) and ty.shape and any(isinstance(d, str) for d in ty.shape):
        out.append((path, what, ty.shape))
    elif isinstance(ty, TupleType):
        for j, field in enumerate(ty.fields):
            _symbolic_tensors(field, (*path, j), f"{what} field {j}", out)


class _OwnedBlocks(ExprVisitor):
    """How a function's storage blocks are emitted when the memory plan's facts allow better
    than ALLOC_STORAGE and views of it (`of`).

    - A block the plan gave one tensor (its one use other than kills is an alloc_tensor at
      offset 0) is not emitted: the tensor is NEW_TENSOR.
    - A block whose tensors are all tiny (`is_tiny`) and at offset 0 is not a block: a tiny
      tensor is a plain array in every mode. When they all have one shape and dtype, the plan
      proved each dead before the next is made, so the block is made as that one tensor
      (NEW_TENSOR into the block's register) and each of them is a MOVE of it; otherwise each
      is a NEW_TENSOR of its own. (Views at offset 0 of a block the plan reuses never need to
      share memory, unlike the pieces of a concat written in place, at other offsets.)
    """

    def __init__(self) -> None:
        super().__init__()
        self.uses: dict[E.Var, int] = {}
        self.views: dict[E.Var, list[E.Call]] = {}

    def visit_var(self, v: E.Var) -> None:
        self.uses[v] = self.uses.get(v, 0) + 1

    def visit_call(self, c: E.Call) -> None:
        if c.callee is vm_ops.kill:
            return  # a kill is not a use of the block's memory
        if c.callee is vm_ops.alloc_tensor:
            self.views.setdefault(c.args[0], []).append(c)  # type: ignore[arg-type]
        super().visit_call(c)

    @classmethod
    def of(cls, func: E.Function) -> tuple[set[E.Var], dict[E.Var, tuple[tuple, str]]]:
        """(blocks not emitted, their tensors each NEW_TENSOR; blocks made as their one
        tiny tensor -> its (shape, dtype))."""
        found = cls()
        found.visit(func.body)
        owned: set[E.Var] = set()
        shared: dict[E.Var, tuple[tuple, str]] = {}
        for block, views in found.views.items():
            if found.uses.get(block) != len(views) or any(
                c.attrs.get("offset", 0) != 0 for c in views
            ):
                continue
            kinds = {(tuple(c.attrs["shape"]), c.attrs["dtype"]) for c in views}
            if len(views) == 1:
                owned.add(block)
            elif all(_tiny_view(c) for c in views):
                if len(kinds) == 1:
                    shared[block] = kinds.pop()
                else:
                    owned.add(block)
        return owned, shared


def _tiny_view(c: E.Call) -> bool:
    """Whether alloc_tensor `c` makes a tensor of static shape that is tiny (`is_tiny`)."""
    shape = c.attrs.get("shape")
    if len(c.args) > 1 or shape is None or not all(isinstance(d, int) for d in shape):
        return False
    return is_tiny(math.prod(shape) * numpy_dtype(c.attrs["dtype"]).itemsize)


def _is_expr(d: object) -> bool:
    return isinstance(d, D.DimExpr)


class FunctionCodegen:
    """Emits one VM function."""

    ALIGNMENT = ALIGNMENT  # of the tensors it makes (`rvm.codegen.effects` reads it here)

    def __init__(self, ctx: ModuleCodegen, name: str, func: E.Function) -> None:
        self.ctx = ctx
        self.name = name
        self.func = func
        self.fb: FunctionBuilder = ctx.builder.function(
            name,
            [p.name for p in func.params],
            [param_spec(p) for p in func.params],
            result=result_spec(result_type(func)),
            dim_ranges=dim_ranges(func),
        )
        self.regs: dict[E.Var, int] = {p: i for i, p in enumerate(func.params)}
        self.heap: int | None = None
        self.slots: dict[str, int] = {}
        # dims stored on every path to the code being emitted, each with what stored it
        self.bound: dict[str, str] = {}
        self.owned, self.shared = _OwnedBlocks.of(func)

    # -- prologue: symbolic dimensions ---------------------------------------------------------
    def prologue(self) -> None:
        """Match the symbolic tensors among the parameters (tuple fields included, as the
        interpreter does) into a new shape heap."""
        found: list[tuple[tuple[int, ...], str, tuple]] = []
        for i, p in enumerate(self.func.params):
            _symbolic_tensors(p.type, (i,), f"argument {i} '{p.name}'", found)
        outputs = declared_shapes(self.func)  # packed calls' results, checked (`effect`)
        if not found and not outputs and not makes_shapes(self.func):
            return
        shapes = [s for _, _, s in found] + outputs
        names = {name for shape in shapes for d in shape for name in D.symbols(d)}
        self.heap = self.fb.new_register()
        self.fb.emit(Opcode.ALLOC_SHAPE_HEAP, self.heap, len(names))
        fields: dict[tuple[int, ...], int] = {(i,): i for i in range(len(self.func.params))}
        for path, what, shape in found:  # names first: a dim expression reads any of them
            pattern = self.ctx.int_pattern(self.match_pairs(shape, what, exprs=False))
            context = self.ctx.string(f"{self.name}: {what}")
            self.fb.emit(Opcode.MATCH_SHAPE, self.field(path, fields), self.heap, pattern, context)
        for path, what, shape in found:
            pairs = self.expr_pairs(shape)
            if pairs is not None:
                exprs = ", ".join(f"axis {i} is {d}" for i, d in enumerate(shape) if _is_expr(d))
                context = self.ctx.string(f"{self.name}: {what}, where {exprs}")
                pattern = self.ctx.int_pattern(pairs)
                self.fb.emit(
                    Opcode.MATCH_SHAPE, self.field(path, fields), self.heap, pattern, context
                )

    def field(self, path: tuple[int, ...], fields: dict[tuple[int, ...], int]) -> int:
        """The register of the parameter (tuple field) at ``path``, read once."""
        reg = fields.get(path)
        if reg is None:
            reg = fields[path] = self.fb.new_register()
            self.fb.emit(Opcode.GET_FIELD, reg, self.field(path[:-1], fields), path[-1])
        return reg

    def match_pairs(self, shape: tuple, what: str = "a value", exprs: bool = True) -> list[int]:
        """The `vm.builtin.match_shape` pattern of ``shape``, one (kind, value) pair per dim: a
        fixed dim is checked (0), a symbolic one stored at its first occurrence (1, ``what``
        recorded as its source) and checked after (2), an unknown one (None) only counts
        toward the rank (3), an expression (`rvm.ir.dims`) checked when ``exprs`` and its
        names are bound (4 and its program), else free."""
        pairs: list[int] = []
        for d in shape:
            if d is None:
                pairs += [3, 0]
            elif isinstance(d, int):
                pairs += [0, d]
            elif _is_expr(d):
                bound = {n: self.slots[n] for n in D.symbols(d) if n in self.bound}
                program = patterns.expr_pairs(d, bound) if exprs else None
                pairs += [3, 0] if program is None else program
            elif d in self.bound:
                pairs += [2, self.slots[d]]
            else:  # stored here: first on this path (a branch's dims are not the other's)
                self.bound[d] = what
                pairs += [1, self.slots.setdefault(d, len(self.slots))]
        return pairs

    def expr_pairs(self, shape: tuple) -> list[int] | None:
        """The pattern checking only the expressions of ``shape`` whose names are bound (every
        other dim free); None when there is none."""
        pairs: list[int] = []
        checked = False
        for d in shape:
            bound = {n: self.slots[n] for n in D.symbols(d) if n in self.bound}
            program = patterns.expr_pairs(d, bound) if _is_expr(d) else None
            pairs += [3, 0] if program is None else program
            checked = checked or program is not None
        return pairs if checked else None

    def match_result(self, c: E.Call, dst: int) -> None:
        """Match a kernel result allocated by its kernel (its shape depends on data: a shape
        computed at run time, a nonzero) against the fixed dims and the parameters' symbolic
        dims its type promises: a ShapeError when they disagree, so no later kernel runs on
        shapes its types did not promise. Dims unknown or named by nothing bound are free."""
        if self.heap is None:
            return
        ty = c.type or infer_type(c)
        if not isinstance(ty, TensorType) or ty.shape is None:
            return
        pairs: list[int] = []
        checked = False  # a dim this match checks: else it is not worth emitting
        for d in ty.shape:
            known = self.known_dim(d, 2)
            checked = checked or known is not None
            pairs += [3, 0] if known is None else known
        if not checked:
            return
        pattern = self.ctx.int_pattern(pairs)
        context = self.ctx.string(f"{self.name}: the result of {c.args[0].name}")
        self.fb.emit(Opcode.MATCH_SHAPE, dst, self.heap, pattern, context)

    # -- helpers ------------------------------------------------------------------------------
    def known_dim(self, d: object, slot_kind: int) -> list[int] | None:
        """The pattern pair(s) of a dim whose value is known here: a fixed dim (0), an
        expression of stored names (4 and its program), a stored symbol read from its slot with
        ``slot_kind`` (2 to check against it, 1 to build from it); None when nothing stored
        names it."""
        if isinstance(d, int):
            return [0, d]
        program = patterns.expr_pairs(d, self.slots) if _is_expr(d) else None
        if program is not None:
            return program
        if D.is_symbol(d) and d in self.slots:
            return [slot_kind, self.slots[d]]
        return None

    def const_int(self, value: int) -> int:
        reg = self.fb.new_register()
        self.fb.emit(Opcode.LOAD_CONSTI, reg, int(value))
        return reg

    def load_const(self, index: int) -> int:
        reg = self.fb.new_register()
        self.fb.emit(Opcode.LOAD_CONST, reg, index)
        return reg

    def reg(self, atom: E.Expr) -> int:
        """The register holding ``atom`` (constants and functions are loaded first)."""
        if isinstance(atom, E.Var):
            try:
                return self.regs[atom]
            except KeyError:
                raise IRError(
                    f"codegen {self.name}: variable {atom.name} has no register"
                ) from None
        if isinstance(atom, E.Constant):
            return self.load_const(self.ctx.constant(atom))
        if isinstance(atom, E.GlobalVar):
            reg = self.fb.new_register()
            self.fb.emit(Opcode.ALLOC_CLOSURE, reg, atom.name, [])
            return reg
        reg = self.fb.new_register()
        self.value(atom, reg, tail=False)
        return reg

    def regs_of(self, atoms: tuple[E.Expr, ...]) -> list[int]:
        return [self.reg(a) for a in atoms]

    # -- bodies -------------------------------------------------------------------------------
    def run(self) -> None:
        self.prologue()
        self.value(self.func.body, self.fb.new_register(), tail=True)

    def value(self, e: E.Expr, dst: int, tail: bool) -> None:
        """Emit ``e`` into register ``dst``; in tail position also return it."""
        if isinstance(e, E.SeqExpr):
            bindings = list(e.bindings)
            for i, b in enumerate(bindings):
                if tail and i == len(bindings) - 1 and b.var is e.body:
                    if _marked(b.value):
                        self.tail_call(b.value)  # type: ignore[arg-type]
                        return
                    if isinstance(b.value, (E.If, E.Match)) and b.var not in self.owned:
                        self.value(b.value, dst, tail)  # its branches end in their own Ret
                        return
                self.binding(b)
            self.value(e.body, dst, tail)
            return
        if isinstance(e, E.If):
            self.if_(e, dst, tail)
            return
        if isinstance(e, E.Match):
            self.match(e, dst, tail)
            return
        if tail and isinstance(e, E.Var):
            self.fb.emit(Opcode.RET, self.reg(e))  # no move into a result register first
            return
        self.simple(e, dst)
        if tail:
            self.fb.emit(Opcode.RET, dst)

    def binding(self, b: E.VarBinding) -> None:
        if b.var in self.owned:
            return  # its tensors are each a NEW_TENSOR (`_OwnedBlocks`)
        dst = self.fb.new_register()
        self.regs[b.var] = dst
        if b.var in self.shared:  # the block is made as its one tiny tensor
            self.fb.emit(Opcode.NEW_TENSOR, dst, *self.shared[b.var], ALIGNMENT)
            return
        self.value(b.value, dst, tail=False)

    def simple(self, e: E.Expr, dst: int) -> None:
        fb = self.fb
        if isinstance(e, E.Var):
            fb.emit(Opcode.MOVE, dst, self.reg(e))
        elif isinstance(e, E.Constant):
            fb.emit(Opcode.LOAD_CONST, dst, self.ctx.constant(e))
        elif isinstance(e, E.GlobalVar):
            fb.emit(Opcode.ALLOC_CLOSURE, dst, e.name, [])
        elif isinstance(e, E.Tuple):
            fb.emit(Opcode.ALLOC_ADT, dst, -1, self.regs_of(e.fields))
        elif isinstance(e, E.TupleGetItem):
            fb.emit(Opcode.GET_FIELD, dst, self.reg(e.tuple_value), e.index)
        elif isinstance(e, E.Call):
            self.call(e, dst)
        else:
            raise IRError(f"codegen {self.name}: cannot generate code for {type(e).__name__}")

    def call(self, c: E.Call, dst: int) -> None:
        fb, callee = self.fb, c.callee
        if isinstance(callee, E.Constructor):
            fb.emit(Opcode.ALLOC_ADT, dst, self.ctx.tag(callee), self.regs_of(c.args))
        elif isinstance(callee, E.GlobalVar):
            target = self.ctx.mod[callee.name]
            if target.is_primitive:
                kernel = self.ctx.kernel(callee.name, "return")
                fb.emit(Opcode.CALL_PACKED, dst, kernel, self.regs_of(c.args))
            else:
                fb.emit(Opcode.INVOKE, dst, callee.name, self.regs_of(c.args))
        elif isinstance(callee, E.Op) and callee in effects.EFFECT_OPS:
            emit_effect(self, c, dst)
        elif isinstance(callee, E.Op):
            self.vm_op(c, dst)
        elif isinstance(callee, E.Var):
            fb.emit(Opcode.INVOKE_CLOSURE, dst, self.reg(callee), self.regs_of(c.args))
        else:
            raise IRError(f"codegen {self.name}: cannot call {type(callee).__name__}")

    def tail_call(self, c: E.Call) -> None:
        """A call the `tail_call` pass marked, in tail position: its result is the result."""
        if c.callee is vm_ops.invoke_closure:
            closure, args = self.reg(c.args[0]), self.regs_of(c.args[1:])
            self.fb.emit(Opcode.TAIL_INVOKE_CLOSURE, closure, args)
        else:  # the pass marks nothing else than calls of module functions
            self.fb.emit(Opcode.TAIL_INVOKE, c.callee.name, self.regs_of(c.args))  # type: ignore[union-attr]

    def vm_op(self, c: E.Call, dst: int) -> None:  # noqa: C901 - one case per VM op
        fb, op, a = self.fb, c.callee, c.attrs
        if op is vm_ops.call_dps:
            prim = c.args[0]
            kernel = self.ctx.kernel(prim.name, "dps")
            args = self.regs_of(c.args[1:])
            fb.emit(Opcode.INVOKE_PACKED, kernel, len(args), a["num_outputs"], args)
        elif op is vm_ops.call_alloc:
            kernel = self.ctx.kernel(c.args[0].name, "return")
            fb.emit(Opcode.CALL_PACKED, dst, kernel, self.regs_of(c.args[1:]))
            self.match_result(c, dst)
        elif op is vm_ops.alloc_storage:
            if c.args:
                dtype = self.load_const(self.ctx.string(a["dtype"]))
                size = fb.new_register()
                fb.emit(
                    Opcode.CALL_PACKED,
                    size,
                    "vm.builtin.storage_size",
                    [self.reg(c.args[0]), dtype],
                )
            else:
                size = self.const_int(a["size"])
            fb.emit(Opcode.ALLOC_STORAGE, dst, size, ALIGNMENT, a["dtype"])
        elif op is vm_ops.alloc_tensor:
            if c.args[0] in self.shared:
                fb.emit(Opcode.MOVE, dst, self.reg(c.args[0]))
                return
            if c.args[0] in self.owned:
                shape = self.reg(c.args[1]) if len(c.args) > 1 else a["shape"]
                new = Opcode.NEW_TENSOR_REG if len(c.args) > 1 else Opcode.NEW_TENSOR
                fb.emit(new, dst, shape, a["dtype"], ALIGNMENT)
                return
            storage = self.reg(c.args[0])
            if len(c.args) > 1:
                fb.emit(
                    Opcode.ALLOC_TENSOR_REG,
                    dst,
                    storage,
                    a.get("offset", 0),
                    self.reg(c.args[1]),
                    a["dtype"],
                )
            else:
                fb.emit(
                    Opcode.ALLOC_TENSOR, dst, storage, a.get("offset", 0), a["shape"], a["dtype"]
                )
        elif op is vm_ops.make_shape:
            self.make_shape(a["shape"], dst)
        elif op is vm_ops.shape_of:
            fb.emit(Opcode.SHAPE_OF, dst, self.reg(c.args[0]))
        elif op is vm_ops.reshape_view:
            fb.emit(Opcode.RESHAPE_TENSOR, dst, self.reg(c.args[0]), self.reg(c.args[1]))
        elif op is vm_ops.kill:
            if isinstance(c.args[0], E.Var) and c.args[0] not in self.owned:
                fb.emit(Opcode.KILL_REGISTER, self.reg(c.args[0]))
        elif op is vm_ops.make_closure:
            fb.emit(Opcode.ALLOC_CLOSURE, dst, c.args[0].name, self.regs_of(c.args[1:]))
        elif op is vm_ops.invoke_closure:
            fb.emit(Opcode.INVOKE_CLOSURE, dst, self.reg(c.args[0]), self.regs_of(c.args[1:]))
        else:
            raise IRError(
                f"codegen {self.name}: op {op.name} reached codegen; legalize turns ops into "
                "primitive functions"
            )

    def make_shape(self, shape: tuple, dst: int) -> None:
        pairs: list[int] = []
        for d in shape:
            known = self.known_dim(d, 1)
            if known is None:
                raise IRError(
                    f"codegen {self.name}: dimension {d!r} is not bound by any parameter's shape"
                )
            pairs += known
        self.fb.emit(Opcode.MAKE_SHAPE, dst, self.heap, self.ctx.int_pattern(pairs))

    # -- control flow -------------------------------------------------------------------------
    def if_(self, e: E.If, dst: int, tail: bool) -> None:
        fb = self.fb
        cond = self.reg(e.cond)
        else_label, end = fb.label("else"), fb.label("end")
        fb.emit(Opcode.IF_IMM, cond, 1, 1, else_label)
        bound = dict(self.bound)
        self.value(e.true_branch, dst, tail)
        if not tail:
            fb.emit(Opcode.GOTO, end)
        fb.place(else_label)
        self.bound = dict(bound)
        self.value(e.false_branch, dst, tail)
        self.bound = bound  # what one branch stored, the other may not have
        if not tail:
            fb.place(end)  # a non-tail If is always followed by more code

    def match(self, m: E.Match, dst: int, tail: bool) -> None:
        fb = self.fb
        data = self.reg(m.data)
        end = fb.label("end_match")
        bound = self.bound
        for clause in m.clauses:
            fail = fb.label("next_case")
            self.pattern(clause.pattern, data, fail)
            self.bound = dict(bound)
            self.value(clause.body, dst, tail)
            if not tail:
                fb.emit(Opcode.GOTO, end)
            fb.place(fail)
        self.bound = bound
        message = self.ctx.string(f"{self.name}: no case of the match applies to the value")
        fb.emit(Opcode.FATAL, message)
        if not tail:
            fb.place(end)

    def pattern(self, p: E.Pattern, value: int, fail: Label) -> None:
        fb = self.fb
        if isinstance(p, E.PatternVar):
            self.regs[p.var] = value
        elif isinstance(p, E.PatternConstructor):
            tag = fb.new_register()
            fb.emit(Opcode.GET_TAG, tag, value)
            fb.emit(Opcode.IF_IMM, tag, self.ctx.tag(p.constructor), 1, fail)
            self.fields(p.patterns, value, fail)
        elif isinstance(p, E.PatternTuple):
            self.fields(p.patterns, value, fail)

    def fields(self, patterns: tuple[E.Pattern, ...], value: int, fail: Label) -> None:
        for i, sub in enumerate(patterns):
            if isinstance(sub, E.PatternWildcard):
                continue
            reg = self.fb.new_register()
            self.fb.emit(Opcode.GET_FIELD, reg, value, i)
            self.pattern(sub, reg, fail)


def _marked(value: E.Expr) -> bool:
    """Whether `value` is a call the `tail_call` pass marked."""
    return isinstance(value, E.Call) and bool(value.attrs.get("tail"))
