"""kill: vm.kill after each tensor's and storage's last use, never after a tail call."""

from __future__ import annotations

from rvm import op
from rvm.ir import Builder, Call, If, Var, assert_structural_equal, scalar, tensor, verify
from rvm.transform import vm_ops
from rvm.transform.kill import kill
from rvm.transform.legalize import legalize
from rvm.transform.memory_plan import memory_plan

F32 = "float32"
VEC = tensor((4,), F32)
ATTRS = {"offset": 0, "shape": (4,), "dtype": F32}


def planned_chain(with_kills: bool):
    """Two exp kernels on x, planned by hand; ``with_kills``: the expected result of `kill`."""
    src = Builder()
    p = Var("p", VEC)
    with src.function("exp", [p], attrs={"primitive": True}):
        src.emit_output(src.emit(op.exp(p)))
    bb = Builder(src.get())
    prim = bb.global_var("exp")
    x = Var("x", VEC)

    def killed(v):
        if with_kills:
            bb.emit(Call(vm_ops.kill, (v,)))

    with bb.function("main", [x]):
        st0 = bb.emit(Call(vm_ops.alloc_storage, (), {"size": 16, "dtype": F32}))
        a = bb.emit(Call(vm_ops.alloc_tensor, (st0,), ATTRS))
        bb.emit(vm_ops.dps_call(prim, [x], [a]))
        killed(x)
        st1 = bb.emit(Call(vm_ops.alloc_storage, (), {"size": 16, "dtype": F32}))
        b = bb.emit(Call(vm_ops.alloc_tensor, (st1,), ATTRS))
        killed(st1)
        bb.emit(vm_ops.dps_call(prim, [a], [b]))
        killed(a)
        c = bb.emit(Call(vm_ops.alloc_tensor, (st0,), ATTRS))  # reuses a's block
        killed(st0)
        bb.emit(vm_ops.dps_call(prim, [b], [c]))
        killed(b)
        bb.emit_output(c)
    return bb.get()


def test_kills_after_last_uses():
    after = kill(planned_chain(False))
    verify(after)
    assert_structural_equal(after, planned_chain(True))


def test_idempotent():
    once = kill(planned_chain(False))
    assert kill(once) is once


def test_branch_uses_count_at_the_if_and_result_is_not_killed():
    bb = Builder()
    x, c = Var("x", VEC), Var("c", scalar("bool"))
    with bb.function("main", [x, c]):
        a = bb.emit(op.exp(x))
        bb.begin_scope()
        t = bb.end_scope(bb.emit(op.negative(a)))
        bb.begin_scope()
        f = bb.end_scope(x)
        r = bb.emit(If(c, t, f))
        bb.emit_output(bb.emit(op.exp(r)))
    after = kill(memory_plan(legalize(bb.get())))
    verify(after)
    top = list(after["main"].body.bindings)
    killed = [b.value.args[0] for b in top if vm_ops.is_vm_op(b.value, vm_ops.kill)]
    if_index = next(i for i, b in enumerate(top) if isinstance(b.value, If))
    after_if = [b.value.args[0] for b in top[if_index + 1 : if_index + 4]]
    assert len(after_if) == 3 and all(u is v for u, v in zip(after_if, [x, c, a]))
    assert after["main"].body.body not in set(killed)
    branch = top[if_index].value.true_branch
    branch_kills = [
        b.value.args[0] for b in branch.bindings if vm_ops.is_vm_op(b.value, vm_ops.kill)
    ]
    assert x not in set(branch_kills) and a not in set(branch_kills)  # outer vars: outer kills


def test_nothing_after_a_tail_call():
    bb = Builder()
    loop = bb.global_var("loop")
    x, c = Var("x", VEC), Var("c", scalar("bool"))
    with bb.function("loop", [x, c]):
        y = bb.emit(op.exp(x))
        z = bb.emit(op.exp(y))
        r = bb.emit(Call(loop, (z, c), {"tail": True}))
        bb.emit_output(r)
    after = kill(memory_plan(legalize(bb.get())))
    verify(after)
    bindings = list(after["loop"].body.bindings)
    assert bindings[-1].value.attrs.get("tail") is True
    killed = {b.value.args[0] for b in bindings if vm_ops.is_vm_op(b.value, vm_ops.kill)}
    assert x in killed and y in killed and z not in killed and c not in killed
