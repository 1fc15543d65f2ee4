"""VM codegen of the ops with effects (`rvm.op.effects`): packed calls of registered Python
functions with their results checked, debug prints, asserts and `rvm.dim` dimensions.

- ``call_packed``: CALL_PACKED, then `vm.builtin.check_tensor` (dtype, rank) and MATCH_SHAPE
  (dims: a symbolic dim seen first here is stored in the shape heap, later ones checked); a
  tuple output is first checked by `vm.builtin.check_tuple` (arity), then field by field.
- ``call_dps_packed``: NEW_TENSOR (NEW_TENSOR_REG of a MAKE_SHAPE) for the destination, then
  INVOKE_PACKED of the registered function with it as the output.
- ``debug_print``: CALL_PACKED of `vm.builtin.debug_print` with the label as a constant.
- ``assert``: IF_IMM on the condition over a FATAL with the message.
- ``dim``: CALL_PACKED of `vm.builtin.dim_carrier` (a `(n, 0)` tensor), then MATCH_SHAPE storing
  ``n`` in the heap; an ``n`` bound earlier is checked by `dim_carrier` itself, whose message
  names the earlier binding (``main: n = rvm.dim(steps) is 3, but n = 2 from argument 0 'x'``).

The function's prologue allocates the shape heap with a slot for every dim these bind
(`declared_shapes`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rvm.ir import expr as E
from rvm.ir.analysis import walk
from rvm.op import effects
from rvm.runtime.bytecode import Opcode
from rvm.transform import vm_ops

if TYPE_CHECKING:
    from rvm.codegen.vm_function import FunctionCodegen

__all__ = ["declared_shapes", "emit_effect", "makes_shapes"]


def emit_effect(cg: FunctionCodegen, c: E.Call, dst: int) -> None:
    """An op of `rvm.op.effects`: a packed call of a registered function (its result
    checked against the declared type), a debug print, an assert."""
    fb, op, a = cg.fb, c.callee, c.attrs
    args = cg.regs_of(c.args)
    if op is effects.ASSERT:
        ok = fb.label("assert_ok")
        fb.emit(Opcode.IF_IMM, args[0], 1, ok, 1)
        fb.emit(Opcode.FATAL, cg.ctx.string(a["message"]))
        fb.place(ok)  # an assert's binding is never the last: code follows
    elif op is effects.DEBUG_PRINT:
        label = cg.load_const(cg.ctx.string(a["label"]))
        fb.emit(Opcode.CALL_PACKED, dst, "vm.builtin.debug_print", [*args, label])
    elif op is effects.DIM:
        emit_dim(cg, c, args[0], dst)
    elif op is effects.CALL_PACKED:
        fb.emit(Opcode.CALL_PACKED, dst, a["func"], args)
        if "dtype" in a:
            check_output(cg, dst, a.get("shape"), a["dtype"], f"the result of {a['func']}")
        elif "fields" in a:
            check_fields(cg, dst, a["fields"], a["func"])
    else:  # CALL_DPS_PACKED: the VM allocates the destination
        shape = a["shape"]
        if all(isinstance(d, int) for d in shape):
            fb.emit(Opcode.NEW_TENSOR, dst, shape, a["dtype"], cg.ALIGNMENT)
        else:
            dims = cg.fb.new_register()
            cg.make_shape(shape, dims)
            fb.emit(Opcode.NEW_TENSOR_REG, dst, dims, a["dtype"], cg.ALIGNMENT)
        fb.emit(Opcode.INVOKE_PACKED, a["func"], len(args) + 1, 1, [*args, dst])


def emit_dim(cg: FunctionCodegen, c: E.Call, value: int, dst: int) -> None:
    """``n = rvm.dim(value)``: the carrier, shape ``(n, 0)``. An ``n`` bound earlier on every
    path is checked by `vm.builtin.dim_carrier` (its message names that binding); otherwise
    MATCH_SHAPE stores the carrier's dim in the heap."""
    fb, name = cg.fb, c.attrs["name"]
    binding = f"{name} = rvm.dim({getattr(c.args[0], 'name', 'value')})"
    context = cg.ctx.string(f"{cg.name}: {binding}")
    args = [value, cg.load_const(context)]
    source = cg.bound.get(name)
    if source is not None:
        slot = cg.const_int(cg.slots[name])
        source_reg = cg.load_const(cg.ctx.string(f"{name} = {{}} from {source}"))
        args += [cg.heap, slot, source_reg]
    fb.emit(Opcode.CALL_PACKED, dst, "vm.builtin.dim_carrier", args)
    if source is None:
        pattern = cg.ctx.int_pattern(cg.match_pairs((name, 0), binding))
        fb.emit(Opcode.MATCH_SHAPE, dst, cg.heap, pattern, context)


def check_fields(cg: FunctionCodegen, reg: int, fields: tuple, func: str) -> None:
    """Checks a tuple a registered function returned: a tuple (or list, made a tuple in
    ``reg``) of ``len(fields)`` values (`vm.builtin.check_tuple`), then each field as
    `check_output` checks a tensor."""
    fb, what = cg.fb, f"the result of {func}"
    context = cg.load_const(cg.ctx.string(f"{cg.name}: {what}"))
    fb.emit(
        Opcode.CALL_PACKED, reg, "vm.builtin.check_tuple", [reg, cg.const_int(len(fields)), context]
    )
    for i, (shape, dtype) in enumerate(fields):
        field = fb.new_register()
        fb.emit(Opcode.GET_FIELD, field, reg, i)
        check_output(cg, field, shape, dtype, f"{what} field {i}")


def check_output(cg: FunctionCodegen, reg: int, shape: tuple | None, dtype: str, what: str) -> None:
    """Checks the value a registered function returned against its declared type: dtype
    and rank (`vm.builtin.check_tensor`), then dims (MATCH_SHAPE: a symbolic dim seen
    first here is bound, later ones checked). ``what`` names it: ``the result of f``."""
    fb = cg.fb
    context = cg.ctx.string(f"{cg.name}: {what}")
    ndim = cg.const_int(-1 if shape is None else len(shape))
    check = [reg, ndim, cg.load_const(cg.ctx.string(dtype)), cg.load_const(context)]
    fb.emit(Opcode.CALL_PACKED, fb.new_register(), "vm.builtin.check_tensor", check)
    if shape and any(d is not None for d in shape):
        pattern = cg.ctx.int_pattern(cg.match_pairs(shape, what))
        fb.emit(Opcode.MATCH_SHAPE, reg, cg.heap, pattern, context)


def declared_shapes(func: E.Function) -> list[tuple]:
    """The shapes ``func`` checks values against besides its parameters: the declared outputs
    of its packed calls and the carriers of its `rvm.dim` dimensions (`rvm.op.effects`)."""
    shapes = []
    for node in walk(func.body, into_functions=False):
        if not isinstance(node, E.Call):
            continue
        if node.callee in (effects.CALL_PACKED, effects.CALL_DPS_PACKED):
            if node.attrs.get("shape"):
                shapes.append(node.attrs["shape"])
            shapes += [shape for shape, _ in node.attrs.get("fields", ()) if shape]
        elif node.callee is effects.DIM:
            shapes.append((node.attrs["name"], 0))
    return shapes


def makes_shapes(func: E.Function) -> bool:
    """Whether ``func`` builds a shape value (MAKE_SHAPE reads a heap, maybe an empty one)."""
    return any(
        isinstance(node, E.Call) and node.callee is vm_ops.make_shape
        for node in walk(func.body, into_functions=False)
    )
