"""memory_plan: explicit allocation for kernel calls, storage reuse for non-escaping tensors."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import rvm
from rvm import op
from rvm.ir import (
    Builder,
    Call,
    GlobalVar,
    If,
    Tuple,
    Var,
    assert_structural_equal,
    scalar,
    tensor,
    verify,
)
from rvm.transform import vm_ops
from rvm.transform.legalize import legalize
from rvm.transform.memory_plan import memory_plan

F32 = "float32"


def legalized(params, body):
    bb = Builder()
    with bb.function("main", params):
        bb.emit_output(body(bb, *params))
    return legalize(bb.get())


def chain(n: int):
    def body(bb, x):
        for _ in range(n):
            x = bb.emit(op.exp(x))
        return x

    return body


def vm_calls(expr, name: str) -> list[Call]:
    return [b.value for b in expr.bindings if vm_ops.is_vm_op(b.value, _VM[name])]


_VM = {
    "alloc_storage": vm_ops.alloc_storage,
    "alloc_tensor": vm_ops.alloc_tensor,
    "call_dps": vm_ops.call_dps,
    "call_alloc": vm_ops.call_alloc,
    "make_shape": vm_ops.make_shape,
}


def test_static_chain_structure():
    x = Var("x", tensor((2, 3), F32))
    before = legalized([x], chain(2))
    after = memory_plan(before)
    verify(after)

    prim = before.get_global_var("fused_exp")
    bb = Builder(before.without("main"))
    x = Var("x", tensor((2, 3), F32))
    attrs = {"offset": 0, "shape": (2, 3), "dtype": F32}
    with bb.function("main", [x]):
        st0 = bb.emit(Call(vm_ops.alloc_storage, (), {"size": 24, "dtype": F32}))
        y0 = bb.emit(Call(vm_ops.alloc_tensor, (st0,), attrs))
        bb.emit(vm_ops.dps_call(prim, [x], [y0]))
        st1 = bb.emit(Call(vm_ops.alloc_storage, (), {"size": 24, "dtype": F32}))
        y1 = bb.emit(Call(vm_ops.alloc_tensor, (st1,), attrs))  # returned: a block of its own
        bb.emit(vm_ops.dps_call(prim, [y0], [y1]))
        bb.emit_output(y1)
    assert_structural_equal(after, bb.get())


def test_chain_of_five_reuses_storage_but_not_for_the_result(caplog):
    x = Var("x", tensor((64, 64), F32))
    with caplog.at_level(logging.DEBUG, logger="rvm.transform"):
        after = memory_plan(legalized([x], chain(5)))
    verify(after)
    body = after["main"].body
    storages = vm_calls(body, "alloc_storage")
    assert len(storages) <= 3
    result = body.body
    binding = next(b for b in body.bindings if b.var is result)
    own = binding.value.args[0]
    users = [t for t in vm_calls(body, "alloc_tensor") if t.args[0] is own]
    assert len(users) == 1  # the returned tensor shares its storage with nothing
    assert "memory_plan main: storage 0.08 MB -> 0.05 MB (5 tensors, 3 blocks)" in caplog.text
    assert after.attrs["memory_plan"]["main"] == {
        "before": 5 * 16384,
        "after": 3 * 16384,
        "tensors": 5,
        "blocks": 3,
    }


def test_smaller_tensor_takes_a_larger_free_block_of_same_dtype():
    x = Var("x", tensor((8, 8), F32))

    def body(bb, x):
        a = bb.emit(op.exp(x))
        b = bb.emit(op.exp(a))
        s = bb.emit(op.sum(b, axis=1))  # 32 bytes fits in a's 256-byte block
        c = bb.emit(op.cast(s, "int32"))  # another dtype: a new block
        return bb.emit(op.cast(c, F32))

    after = memory_plan(legalized([x], body))
    storages = vm_calls(after["main"].body, "alloc_storage")
    assert [s.attrs["size"] for s in storages] == [256, 256, 32, 32]
    tensors = vm_calls(after["main"].body, "alloc_tensor")
    assert tensors[2].args[0] is tensors[0].args[0]  # the sum reuses a's block


def test_symbolic_and_dynamic_and_tuple_results():
    x = Var("x", tensor(("n", 4), F32))
    d = Var("d", tensor((None, 4), F32))

    def body(bb, x, d):
        r = bb.emit(op.relu(x))
        parts = bb.emit(op.split(r, 2, axis=1))
        e = bb.emit(op.exp(d))
        return bb.emit(Tuple((parts, e)))

    before = legalized([x, d], body)
    after = memory_plan(before)
    verify(after)

    gv = before.get_global_var
    bb = Builder(before.without("main"))
    x, d = Var("x", tensor(("n", 4), F32)), Var("d", tensor((None, 4), F32))
    with bb.function("main", [x, d]):
        s = bb.emit(Call(vm_ops.make_shape, (), {"shape": ("n", 4)}))
        st = bb.emit(Call(vm_ops.alloc_storage, (s,), {"dtype": F32}))
        attrs = {"offset": 0, "shape": ("n", 4), "dtype": F32}
        r = bb.emit(Call(vm_ops.alloc_tensor, (st, s), attrs))
        bb.emit(vm_ops.dps_call(gv("fused_relu"), [x], [r]))
        s2 = bb.emit(Call(vm_ops.make_shape, (), {"shape": ("n", 2)}))
        outs = []
        for _ in range(2):
            st = bb.emit(Call(vm_ops.alloc_storage, (s2,), {"dtype": F32}))
            attrs = {"offset": 0, "shape": ("n", 2), "dtype": F32}
            outs.append(bb.emit(Call(vm_ops.alloc_tensor, (st, s2), attrs)))
        parts = bb.emit(Tuple(tuple(outs)))
        bb.emit(vm_ops.dps_call(gv("fused_split"), [r], outs))
        e = bb.emit(Call(vm_ops.call_alloc, (gv("fused_exp"), d)))
        bb.emit_output(bb.emit(Tuple((parts, e))))
    assert_structural_equal(after, bb.get())


def test_tensor_used_in_a_branch_or_tuple_is_not_reused():
    x, c = Var("x", tensor((4,), F32)), Var("c", scalar("bool"))

    def body(bb, x, c):
        a = bb.emit(op.exp(x))
        b = bb.emit(op.exp(a))  # a escapes (used in the branch below)
        t = bb.emit(Tuple((b,)))  # b escapes into a tuple
        k = bb.emit(op.exp(b))
        bb.begin_scope()
        tb = bb.end_scope(bb.emit(op.exp(a)))
        bb.begin_scope()
        fb = bb.end_scope(k)
        r = bb.emit(If(c, tb, fb))
        return bb.emit(Tuple((r, t)))

    after = memory_plan(legalized([x, c], body))
    verify(after)
    top = after["main"].body
    assert len(vm_calls(top, "alloc_storage")) == 3
    branch = list(top.bindings)[-2].value.true_branch
    assert len(vm_calls(branch, "call_dps")) == 1 and len(vm_calls(branch, "alloc_storage")) == 1


def test_non_primitive_calls_are_untouched():
    bb = Builder()
    x = Var("x", tensor((4,), F32))
    helper = bb.global_var("helper")
    with bb.function("helper", [x]):
        bb.emit_output(x)
    y = Var("y", tensor((4,), F32))
    with bb.function("main", [y]):
        bb.emit_output(bb.emit(Call(helper, (y,))))
    mod = bb.get()
    assert isinstance(helper, GlobalVar)
    assert memory_plan(mod) is mod


def _concat_program(shape, axis, share_piece=False):
    """a = exp(x), b = tanh(x) (or a again when ``share_piece``), c = concat((a, b)), exp(c)."""
    x = Var("x", tensor(shape, F32))

    def body(bb, x):
        a = bb.emit(op.exp(x))
        b = a if share_piece else bb.emit(op.tanh(x))
        t = bb.emit(Tuple((a, b)))
        c = bb.emit(op.concat(t, axis=axis))
        return bb.emit(op.exp(c))

    return memory_plan(legalized([x], body))


def test_concat_of_contiguous_pieces_is_written_in_place():
    after = _concat_program((1, 3, 8, 8), axis=1)
    verify(after)
    top = after["main"].body
    calls = [c.args[0].name for c in vm_calls(top, "call_dps")]
    assert not any("concat" in name for name in calls), calls
    views = vm_calls(top, "alloc_tensor")
    storages = {v.args[0].name for v in views[:3]}
    assert len(storages) == 1  # both pieces and the concat are views of one block
    assert [v.attrs["offset"] for v in views[:3]] == [0, 3 * 64 * 4, 0]
    assert [v.attrs["shape"] for v in views[:3]] == [(1, 3, 8, 8), (1, 3, 8, 8), (1, 6, 8, 8)]
    sizes = [s.attrs["size"] for s in vm_calls(top, "alloc_storage")]
    assert sizes[0] == 6 * 64 * 4
    assert not any(isinstance(b.value, Tuple) for b in top.bindings)  # the tuple is gone


def test_concat_is_copied_when_pieces_are_not_contiguous_shared_or_small():
    cases = (
        ((2, 3, 40), 1, False),  # batch 2: a piece is two runs
        ((1, 3, 100), 2, False),  # along the last axis: a piece is three runs
        ((1, 3, 100), 1, True),  # the same piece twice
        ((1, 3, 4, 4), 1, False),  # small (and tiny blocks' views are separate arrays)
    )
    for shape, axis, share in cases:
        top = _concat_program(shape, axis, share)["main"].body
        calls = [c.args[0].name for c in vm_calls(top, "call_dps")]
        assert any("concat" in name for name in calls), (shape, axis, share)


def _dense_block(layers: int):
    """Densenet's dense block: ``c = concat((c, tanh(sum(c, axis=1))))`` ``layers`` times from
    ``c = exp(x)``, each ``c`` read by the next layer too; then ``z = exp(c)``, ``p = tanh(z)``
    (as large as the block: a reused block would fit it) and ``q = x0 + sum(p)``, which reads
    the first piece after the block's last use."""
    x = Var("x", tensor((1, 4, 8, 8), F32))

    def body(bb, x):
        c = x0 = bb.emit(op.exp(x))
        for _ in range(layers):
            y = bb.emit(op.tanh(bb.emit(op.sum(c, axis=1, keepdims=True))))
            c = bb.emit(op.concat(bb.emit(Tuple((c, y))), axis=1))
        p = bb.emit(op.tanh(bb.emit(op.exp(c))))
        return bb.emit(op.add(x0, bb.emit(op.sum(p, axis=1, keepdims=True))))

    return x, body


def test_dense_block_concats_are_views_of_the_last_ones_storage():
    x, body = _dense_block(3)
    after = memory_plan(legalized([x], body))
    verify(after)
    top = after["main"].body
    calls = [c.args[0].name for c in vm_calls(top, "call_dps")]
    assert not any("concat" in name for name in calls), calls
    views = {
        b.var.name: b.value for b in top.bindings if vm_ops.is_vm_op(b.value, _VM["alloc_tensor"])
    }
    block = [v for v in views.values() if v.attrs["shape"][1] in (4, 5, 6, 7)][:1]
    root = block[0].args[0]  # x0's view, the first piece: the storage is made there
    on_root = {n: v.attrs["offset"] for n, v in views.items() if v.args[0] is root}
    row = 64 * 4  # one channel's bytes
    # x0 at 0, each layer's one new channel after the ones before, each concat a prefix
    assert sorted(on_root.values()) == [0, 0, 0, 0, 4 * row, 5 * row, 6 * row], on_root
    sizes = {
        s.var.name: s.value.attrs["size"]
        for s in top.bindings
        if vm_ops.is_vm_op(s.value, _VM["alloc_storage"])
    }
    assert sizes[root.name] == 7 * row
    # p (as large as the block) comes after the block's last use but before x0's: not on it
    p_view = [v for v in views.values() if v.attrs["shape"] == (1, 7, 8, 8)][-1]
    assert p_view.args[0] is not root


@pytest.fixture(scope="module")
def dense_block():
    x, body = _dense_block(3)
    bb = Builder()
    with bb.function("main", [x]):
        bb.emit_output(body(bb, x))
    return bb.get()


@pytest.mark.parametrize(
    "kernels",
    ["numpy", pytest.param("jit", marks=pytest.mark.slow)],  # jit: 15 s cold
)
def test_dense_block_written_in_place_runs_right(dense_block, compiled, exec_mode, kernels):
    """Every piece written once into the block's storage, read by later layers and after the
    block: results equal NumPy's in every mode, call after call (the storage reused). With
    numpy kernels the native mode runs as compiled; `-m slow` runs jit kernels, natively."""
    vm = rvm.VirtualMachine(compiled(dense_block, kernels), exec_mode=exec_mode)
    x = np.random.default_rng(0).standard_normal((1, 4, 8, 8)).astype(np.float32)
    first = vm["main"](x)
    for scale in (0.5, 1.0):
        c = x0 = np.exp(x * scale)
        for _ in range(3):
            c = np.concatenate([c, np.tanh(c.sum(axis=1, keepdims=True))], axis=1)
        want = x0 + np.tanh(np.exp(c)).sum(axis=1, keepdims=True)
        np.testing.assert_allclose(vm["main"](x * scale), want, rtol=1e-5)
    np.testing.assert_allclose(first, want, rtol=1e-5)  # a held result stays intact
