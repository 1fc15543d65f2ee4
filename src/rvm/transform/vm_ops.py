"""Ops of the VM-ready IR: what lowering passes produce and codegen turns into instructions.

After the pipeline a function body holds only these, calls of module functions, constructor
calls, tuples, If and Match. Every op here maps to one or two instructions:

| op | meaning | instruction |
|---|---|---|
| ``vm.call_dps(prim, *ins, *outs)`` | run kernel ``prim`` writing ``outs`` | InvokePacked |
| ``vm.call_alloc(prim, *inputs)`` | run kernel ``prim``, which allocates its result | CallPacked |
| ``vm.alloc_storage(size=, dtype=)`` | a storage block of ``size`` bytes | AllocStorage |
| ``vm.alloc_storage(shape, dtype=)`` | a block sized for a run-time ``shape`` | AllocStorage |
| ``vm.alloc_tensor(storage, offset=, shape=, dtype=)`` | a tensor in storage | AllocTensor |
| ``vm.make_shape(shape=)`` | a shape value from symbolic dims | builtins |
| ``vm.shape_of(x)`` | ``x``'s shape as an int64 tensor | ShapeOf |
| ``vm.reshape(x, shape)`` | a view of ``x`` with a run-time shape | ReshapeTensor |
| ``vm.kill(x)`` | drop the reference held by ``x`` | KillRegister |
| ``vm.make_closure(func, *captured)`` | a closure of module function ``func`` | AllocClosure |
| ``vm.invoke_closure(closure, *args)`` | call a closure | InvokeClosure |
"""

from __future__ import annotations

from collections.abc import Sequence

from rvm.errors import IRError
from rvm.ir import expr as E
from rvm.ir.infer import bind_dims, substitute_dims
from rvm.ir.op import OpPattern, infer, register_op
from rvm.ir.types import AnyType, FuncType, ShapeType, TensorType, TupleType, Type

call_dps = register_op("vm.call_dps", OpPattern.OPAQUE)
call_alloc = register_op("vm.call_alloc", OpPattern.OPAQUE)
alloc_storage = register_op("vm.alloc_storage", OpPattern.OPAQUE)
alloc_tensor = register_op("vm.alloc_tensor", OpPattern.OPAQUE)
make_shape = register_op("vm.make_shape", OpPattern.OPAQUE)
shape_of = register_op("vm.shape_of", OpPattern.OPAQUE, 1)
reshape_view = register_op("vm.reshape", OpPattern.OPAQUE, 2)
kill = register_op("vm.kill", OpPattern.OPAQUE, 1)
make_closure = register_op("vm.make_closure", OpPattern.OPAQUE)
invoke_closure = register_op("vm.invoke_closure", OpPattern.OPAQUE)

UNIT = TupleType(())
STORAGE = AnyType()  # storage blocks are opaque to the type system


def _prim_result(call: E.Call, arg_types: list[Type]) -> Type:
    prim = call.args[0]
    ft = prim.type
    if not isinstance(ft, FuncType):
        return AnyType()
    return substitute_dims(ft.ret, bind_dims(ft.params, arg_types[1:]))


infer[call_dps] = lambda call, types: UNIT
infer[call_alloc] = _prim_result
infer[alloc_storage] = lambda call, types: STORAGE
infer[alloc_tensor] = lambda call, types: TensorType(
    call.attrs["shape"] if call.attrs.get("shape") is not None else None, call.attrs["dtype"]
)
infer[make_shape] = lambda call, types: ShapeType(len(call.attrs["shape"]))
infer[shape_of] = lambda call, types: ShapeType(
    types[0].ndim if isinstance(types[0], TensorType) else None
)
infer[reshape_view] = lambda call, types: TensorType(
    call.attrs.get("shape"), types[0].dtype if isinstance(types[0], TensorType) else None
)
infer[kill] = lambda call, types: UNIT
infer[make_closure] = lambda call, types: call.attrs.get("type", AnyType())


def _invoke_closure_type(call: E.Call, types: list[Type]) -> Type:
    ft = types[0]
    if isinstance(ft, FuncType):
        return substitute_dims(ft.ret, bind_dims(ft.params, types[1:]))
    return AnyType()


infer[invoke_closure] = _invoke_closure_type


def is_vm_op(expr: E.Expr, op: E.Op) -> bool:
    """True when ``expr`` is a call of ``op``."""
    return isinstance(expr, E.Call) and expr.callee is op


def dps_call(prim: E.GlobalVar, inputs: Sequence[E.Expr], outputs: Sequence[E.Expr]) -> E.Call:
    """``vm.call_dps(prim, *inputs, *outputs)``."""
    if not outputs:
        raise IRError(f"vm.call_dps of {prim.name} needs at least one output")
    return E.Call(call_dps, (prim, *inputs, *outputs), {"num_outputs": len(outputs)})
