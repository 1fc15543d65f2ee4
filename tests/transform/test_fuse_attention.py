"""fuse_attention: exported spellings of attention become op.attention, equal in every mode;
a chain with an intermediate used elsewhere stays."""

from __future__ import annotations

import numpy as np
import pytest
from fusion_helpers import build, check_numbers, op_names, run

import rvm
from rvm import op
from rvm.ir import Tuple, Var, assert_structural_equal, const, tensor
from rvm.transform.fuse_attention import attention_heads, fuse_attention

F32 = "float32"
RNG = np.random.default_rng(0)


def _qkv() -> list[Var]:
    return [
        Var("q", tensor(("b", 2, "s", 8), F32)),
        Var("k", tensor(("b", 2, "t", 8), F32)),
        Var("v", tensor(("b", 2, "t", 4), F32)),
    ]


def _gpt2(extra_use: bool = False):
    """GPT-2 as optimum exports it: both operands scaled, an additive -inf mask, softmax
    guarded against fully masked rows."""
    q, k, v = _qkv()
    bias = Var("bias", tensor(("b", 1, 1, "t"), F32))

    def body(emit):
        qs = emit(op.multiply(q, const(np.array([0.5], F32))))
        kt = emit(op.transpose(k, (0, 1, 3, 2)))
        ks = emit(op.multiply(kt, const(np.array([0.7], F32))))
        s = emit(op.matmul(qs, ks))
        s = emit(op.add(s, bias))
        p = emit(op.softmax(s, axis=-1))
        nan = emit(op.not_equal(p, p))
        p2 = emit(op.where(nan, const(np.array([0.0], F32)), p))
        o = emit(op.matmul(p2, v))
        return Tuple((o, s)) if extra_use else o

    return build([q, k, v, bias], body)


def _select(divide: bool = False):
    """The scale after the product (multiply or divide), a bool mask selecting -10000."""
    q, k, v = _qkv()
    mask = Var("mask", tensor(("b", 1, "s", "t"), "bool"))

    def body(emit):
        s = emit(op.matmul(q, emit(op.transpose(k, (0, 1, 3, 2)))))
        if divide:
            s = emit(op.divide(s, const(np.float32(np.sqrt(8.0)))))
        else:
            s = emit(op.multiply(s, const(np.float32(1 / np.sqrt(8.0)))))
        s = emit(op.where(mask, s, const(np.float32(-1e4))))
        return emit(op.matmul(emit(op.softmax(s, axis=3)), v))

    return build([q, k, v, mask], body)


def _bert():
    """BERT as optimum exports it: k^T by one transpose of (batch, seq, heads, dim)."""
    q, _, v = _qkv()
    k4 = Var("k4", tensor(("b", "t", 2, 8), F32))
    bias = Var("bias", tensor(("b", 1, 1, "t"), F32))

    def body(emit):
        kt = emit(op.transpose(k4, (0, 2, 3, 1)))
        qs = emit(op.multiply(q, const(np.array([0.5], F32))))
        ks = emit(op.multiply(kt, const(np.array([0.5], F32))))
        s = emit(op.add(emit(op.matmul(qs, ks)), bias))
        return emit(op.matmul(emit(op.softmax(s, axis=-1)), v))

    return build([q, k4, v, bias], body)


def _merged(join: bool = False, extra_use: bool = False):
    """Heads split by copies from one (batch, seq, q|k|v columns) tensor, BERT's after
    `merge_products`: slices of its last axis, each reshaped to heads and transposed;
    ``join``: the result's heads joined again, (batch, seq, 16), as BERT's before its output
    projection (``extra_use``: the transposed result returned too)."""
    x = Var("x", tensor(("b", "s", 48), F32))
    bias = Var("bias", tensor(("b", 1, 1, "s"), F32))

    def body(emit):
        def heads(at, axes):  # type: ignore[no-untyped-def]
            cut = emit(op.strided_slice(x, [at], [at + 16], axes=[2]))
            return emit(op.transpose(emit(op.reshape(cut, ("b", -1, 2, 8))), axes))

        q, kt, v = heads(0, (0, 2, 1, 3)), heads(16, (0, 2, 3, 1)), heads(32, (0, 2, 1, 3))
        s = emit(op.add(emit(op.multiply(emit(op.matmul(q, kt)), const(0.25, F32))), bias))
        o = emit(op.matmul(emit(op.softmax(s, axis=-1)), v))
        if not join:
            return o
        t = emit(op.transpose(o, (0, 2, 1, 3)))
        joined = emit(op.reshape(t, ("b", "s", 16)))
        return Tuple((joined, t)) if extra_use else joined

    return build([x, bias], body)


def _plain():
    """No mask, no scale, no guard."""
    q, k, v = _qkv()

    def body(emit):
        s = emit(op.matmul(q, emit(op.transpose(k, (0, 1, 3, 2)))))
        return emit(op.matmul(emit(op.softmax(s, axis=-1)), v))

    return build([q, k, v], body)


def test_gpt2_spelling_becomes_one_attention_call() -> None:
    q, k, v = _qkv()
    bias = Var("bias", tensor(("b", 1, 1, "t"), F32))
    expected = build(
        [q, k, v, bias],
        lambda emit: emit(
            op.attention(q, k, v, bias, scale=np.float32(0.5) * np.float32(0.7), masked_row=0.0)
        ),
    )
    assert_structural_equal(run(_gpt2(), fuse_attention), run(expected, lambda m: m))


def test_select_mask_and_scales_after_the_product() -> None:
    for divide in (False, True):
        fused = run(_select(divide), fuse_attention)
        assert op_names(fused) == ["attention"]
        call = fused["main"].body.bindings.__iter__().__next__().value
        assert call.attrs["mask_kind"] == "select"
        assert call.attrs["fill"] == -1e4
        assert np.isnan(call.attrs["masked_row"])
        assert call.attrs["scale"] == pytest.approx(1 / np.sqrt(8.0), rel=1e-6)


def test_bert_spelling_binds_k_in_head_layout() -> None:
    fused = run(_bert(), fuse_attention)
    assert op_names(fused) == ["transpose", "attention"]
    transpose, attention = (b.value for b in fused["main"].body.bindings)
    assert transpose.attrs["axes"] == (0, 2, 1, 3)
    assert attention.args[1] is next(iter(fused["main"].body.bindings)).var
    assert attention.attrs["scale"] == 0.25


def test_heads_split_by_copies_are_read_in_place() -> None:
    fused = run(_merged(), lambda m: attention_heads(fuse_attention(m)))
    assert op_names(fused) == ["attention"]
    call = next(iter(fused["main"].body.bindings)).value
    assert call.attrs["heads"] == (2, 8, 8, 0, 16, 32)
    assert all(a is fused["main"].params[0] for a in call.args[:3])
    x, bias = _data((2, 5, 48)), np.where(RNG.random((2, 1, 1, 5)) < 0.3, -np.inf, 0).astype(F32)
    want = rvm.interpret(_merged(), "main", x, bias)  # the reference reads the heads alike
    np.testing.assert_allclose(rvm.interpret(fused, "main", x, bias), want, rtol=1e-6, atol=1e-6)


def test_heads_joined_by_copies_are_written_in_place() -> None:
    fused = run(_merged(join=True), lambda m: attention_heads(fuse_attention(m)))
    assert op_names(fused) == ["attention"]
    call = next(iter(fused["main"].body.bindings)).value
    assert call.attrs["merge_heads"] and call.attrs["heads"] == (2, 8, 8, 0, 16, 32)
    x, bias = _data((2, 5, 48)), np.where(RNG.random((2, 1, 1, 5)) < 0.3, -np.inf, 0).astype(F32)
    want = rvm.interpret(_merged(join=True), "main", x, bias)
    got = rvm.interpret(fused, "main", x, bias)
    assert got.shape == (2, 5, 16)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    kept = run(_merged(join=True, extra_use=True), lambda m: attention_heads(fuse_attention(m)))
    assert op_names(kept) == ["attention", "transpose", "reshape"]


def test_no_mask_is_a_zero_bias() -> None:
    fused = run(_plain(), fuse_attention)
    assert op_names(fused) == ["attention"]


def test_an_intermediate_used_elsewhere_keeps_the_chain() -> None:
    before = run(_gpt2(extra_use=True), lambda m: m)
    assert_structural_equal(fuse_attention(before), before)


def _data(shape) -> np.ndarray:
    return RNG.standard_normal(shape).astype(F32)


@pytest.mark.parametrize("b, s, t", [(2, 1, 6), (1, 5, 5)])
def test_fused_attention_equals_the_chain(exec_mode, b, s, t) -> None:
    q, k, v = _data((b, 2, s, 8)), _data((b, 2, t, 8)), _data((b, 2, t, 4))
    bias = np.where(RNG.random((b, 1, 1, t)) < 0.3, -np.inf, 0).astype(F32)
    bias[0] = -np.inf  # a fully masked row: the guard makes it 0
    check_numbers(_gpt2(), [q, k, v, bias], exec_mode)
    mask = RNG.random((b, 1, s, t)) < 0.7
    check_numbers(_select(), [q, k, v, mask], exec_mode)
    check_numbers(_plain(), [q, k, v], exec_mode)
    bias[0] = 0
    check_numbers(_bert(), [q, np.ascontiguousarray(k.transpose(0, 2, 1, 3)), v, bias], exec_mode)
    if s == t:  # the heads read in place (`attention_heads`, run by compile for the jit)
        check_numbers(_merged(), [_data((b, s, 48)), bias], exec_mode)
        check_numbers(_merged(join=True), [_data((b, s, 48)), bias], exec_mode)


@pytest.mark.parametrize("hidden", [-np.inf, np.finfo(np.float32).min])
def test_keys_every_row_hides_at_the_end_change_nothing(exec_mode, hidden) -> None:
    """The kernel skips the keys after the last one some row keeps (a decode step over a
    preallocated cache): the result is the chain's, whatever those keys hold; a row that
    keeps no key still sees every key."""
    b, s, t = 3, 4, 9
    q, k, v = _data((b, 2, s, 8)), _data((b, 2, t, 8)), _data((b, 2, t, 4))
    k[:, :, 6:] *= 1e3  # unwritten slots: large values the mask must hide
    v[:, :, 6:] = 1e3
    bias = np.zeros((b, 1, 1, t), F32)
    bias[0, ..., 3:] = hidden  # batch 0 keeps 3 keys, batch 1 six, batch 2 none
    bias[1, ..., 6:] = hidden
    bias[2] = hidden
    check_numbers(_gpt2(), [q, k, v, bias], exec_mode)
    causal = np.arange(t)[None, :] <= np.arange(s)[:, None] + 2  # rows keep 3, 4, 5, 6 keys
    mask = np.broadcast_to(causal, (b, 1, s, t)).copy()
    check_numbers(_select(), [q, k, v, mask], exec_mode)  # fill -1e4: nothing is skipped
