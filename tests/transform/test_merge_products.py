"""merge_products: packed products of one input are one wider product cut by slices
(`rvm.transform.merge_products`): which products merge, the merged weight and bias, and
models against the interpreter in every exec mode, with widths that are not whole panels."""

from __future__ import annotations

import numpy as np
import pytest

import rvm
from rvm import op
from rvm.ir import Builder, Call, IRModule, Var, tensor
from rvm.kernels import packed
from rvm.op.bf16 import default_pair_panel, pack_pairs
from rvm.transform.merge_products import merge_products
from rvm.transform.pack_weights import pack_weights
from rvm.transform.to_bf16 import to_bf16

F32 = np.float32
RNG = np.random.default_rng(5)
K = 40
UNITS = (61, 48, 19)  # not whole panels of 16: the merged weight is packed anew
WEIGHTS = [RNG.standard_normal((K, n)).astype(F32) for n in UNITS]  # (k, units)
BIASES = [RNG.standard_normal(n).astype(F32) for n in UNITS]


def _ops(mod: IRModule) -> list[str]:
    return [
        b.value.callee.name
        for b in mod["main"].body.bindings
        if isinstance(b.value, Call) and hasattr(b.value.callee, "name")
    ]


def _qkv() -> IRModule:
    """x (batch, seq, K): three products of x with biases (a matmul, a dense, a matmul), their
    results read by separate ops; a product of another input and a relu product stay apart."""
    x = Var("x", tensor(("batch", "seq", K), "float32"))
    bb = Builder()
    with bb.function("main", [x]):
        q = bb.emit(op.add(bb.emit(op.matmul(x, rvm.const(WEIGHTS[0]))), rvm.const(BIASES[0])))
        dense_w = rvm.const(WEIGHTS[1].T.copy())
        k = bb.emit(op.add(bb.emit(op.dense(x, dense_w)), rvm.const(BIASES[1])))
        v = bb.emit(op.add(bb.emit(op.matmul(x, rvm.const(WEIGHTS[2]))), rvm.const(BIASES[2])))
        y = bb.emit(op.tanh(x))
        other = bb.emit(op.matmul(y, rvm.const(WEIGHTS[1])))
        act = bb.emit(op.relu(bb.emit(op.matmul(x, rvm.const(WEIGHTS[2])))))
        s = bb.emit(op.sum(q, axis=-1, keepdims=True))
        out = bb.emit(op.add(bb.emit(op.multiply(k, s)), other))
        bb.emit_output(rvm.ir.Tuple((out, bb.emit(op.exp(v)), act)))
    return bb.get()


def test_products_of_one_input_merge() -> None:
    mod = merge_products(pack_weights(_qkv(), panel=16))
    ops = _ops(mod)
    assert ops.count("dense_packed") == 3  # the merged three, the other input's, the relu's
    assert ops.count("strided_slice") == 3
    merged = next(
        b.value
        for b in mod["main"].body.bindings
        if isinstance(b.value, Call) and b.value.attrs.get("units") == sum(UNITS)
    )
    want = packed.pack(np.concatenate(WEIGHTS, axis=1), False, 16)
    np.testing.assert_array_equal(merged.args[1].data, want)
    np.testing.assert_array_equal(merged.args[2].data, np.concatenate(BIASES))
    assert merged.attrs["activation"] == "none"


def test_products_with_and_without_bias_stay_apart() -> None:
    x = Var("x", tensor((3, K), "float32"))
    bb = Builder()
    with bb.function("main", [x]):
        a = bb.emit(op.add(bb.emit(op.matmul(x, rvm.const(WEIGHTS[0]))), rvm.const(BIASES[0])))
        b = bb.emit(op.matmul(x, rvm.const(WEIGHTS[1])))
        bb.emit_output(rvm.ir.Tuple((a, b)))
    mod = merge_products(pack_weights(bb.get(), panel=16))
    assert _ops(mod) == ["dense_packed", "dense_packed"]


@pytest.fixture(scope="module")
def executable() -> rvm.Executable:
    return rvm.compile(_qkv())


@pytest.mark.parametrize("shape", [(1, 1), (2, 3), (1, 37)])
def test_model_in_every_exec_mode(executable, exec_mode: str, shape: tuple[int, int]) -> None:
    x = np.random.default_rng(6).standard_normal((*shape, K)).astype(F32)
    got = rvm.VirtualMachine(executable, exec_mode=exec_mode)["main"](x)
    want = rvm.interpret(_qkv(), "main", x)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


def test_executable_holds_the_merged_weight() -> None:
    ex = rvm.compile(_qkv(), build_kernels=False)
    width = packed.panel_width()
    shapes = sorted(c.shape for c in ex.constants if c.ndim == 3)
    want = [packed.packed_shape(K, sum(UNITS), width)]
    want += [packed.packed_shape(K, UNITS[1], width), packed.packed_shape(K, UNITS[2], width)]
    assert shapes == sorted(want)


def test_bf16_products_of_one_input_merge() -> None:
    """``dense_packed_bf16`` products (`to_bf16`'s) merge as ``dense_packed`` ones: their pair
    panels side by side, their biases joined."""
    mod = merge_products(pack_weights(to_bf16(_qkv(), "bf16")))  # the bf16 ops on any CPU
    ops = _ops(mod)
    assert ops.count("dense_packed_bf16") == 3 and ops.count("strided_slice") == 3
    merged = next(
        b.value
        for b in mod["main"].body.bindings
        if isinstance(b.value, Call) and b.value.attrs.get("units") == sum(UNITS)
    )
    want = pack_pairs(np.concatenate(WEIGHTS, axis=1), False, default_pair_panel())
    np.testing.assert_array_equal(merged.args[1].data, want)
    np.testing.assert_array_equal(merged.args[2].data, np.concatenate(BIASES))
