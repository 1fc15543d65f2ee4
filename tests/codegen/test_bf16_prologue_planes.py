"""A bf16 convolution with a prologue (densenet's batch norm, scale, shift and ReLU before
its 1 x 1) writes the next convolution's pair plane, turned around or not
(`rvm.transform.bf16_joins.pair_planes`): its prologue's affine is not a residual."""

from __future__ import annotations

import numpy as np
import pytest
from bf16_checks import bindings_of, converted, near_both

import rvm
from rvm import op
from rvm.ir import Builder, Var, const, tensor
from rvm.transform import to_bf16 as to_bf16_module

F32 = "float32"
RNG = np.random.default_rng(85)


def _dense_layer() -> rvm.IRModule:
    """main(img): densenet121's dense layer at 7 x 7 -- batch norm, a scale, a shift and a
    ReLU before a 1 x 1 convolution to 64 channels + bias + ReLU (its batch norm folded),
    then a 3 x 3 one to 32."""
    c = 40
    img = Var("img", tensor((1, c, 7, 7), F32))
    bb = Builder()
    with bb.function("main", [img]):
        stats = [RNG.standard_normal(c).astype(F32) for _ in range(3)]
        var = const(RNG.uniform(0.5, 2.0, c).astype(F32))
        h = bb.emit(op.batch_norm(img, *(const(v) for v in stats), var))
        h = bb.emit(op.multiply(h, const(RNG.uniform(0.5, 1.5, (c, 1, 1)).astype(F32))))
        h = bb.emit(op.relu(bb.emit(op.add(h, const(RNG.standard_normal((c, 1, 1)).astype(F32))))))
        w1 = const((RNG.standard_normal((64, c, 1, 1)) / np.sqrt(c)).astype(F32))
        a = bb.emit(
            op.add(bb.emit(op.conv2d(h, w1)), const(RNG.standard_normal((64, 1, 1)).astype(F32)))
        )
        a = bb.emit(op.relu(a))
        w2 = const((RNG.standard_normal((32, 64, 3, 3)) / 24).astype(F32))
        bb.emit_output(bb.emit(op.conv2d(a, w2, padding=1)))
    return bb.get()


DENSE = _dense_layer()


@pytest.fixture(params=[16, 0], ids=["turned", "direct"])
def panel(request, monkeypatch):
    """Every convolution turned around (in panels of 16 channels) or none."""
    monkeypatch.setattr(to_bf16_module, "turned_panel", lambda *shape: request.param)
    return request.param


def test_a_convolution_with_a_prologue_writes_the_next_ones_plane(panel: int) -> None:
    first, second = (b.value for b in bindings_of(converted(DENSE), "conv2d_bf16"))
    assert first.attrs["prologue"] == "affine_relu" and first.attrs["panel"] == panel
    assert first.attrs["plane"] != () and second.attrs["source"] == (64, 7, 7)


def test_its_plane_in_every_exec_mode(panel: int, exec_mode: str) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(to_bf16_module, "native_way", lambda: "bf16")  # on any CPU
        ex = rvm.compile(DENSE, precision="bf16", progress=False)
    x = np.random.default_rng(2).standard_normal((1, 40, 7, 7)).astype(F32)
    got = rvm.VirtualMachine(ex, exec_mode=exec_mode)["main"](x)
    near_both([got], [rvm.interpret(converted(DENSE), "main", x)],
              [rvm.interpret(DENSE, "main", x)])  # fmt: skip
