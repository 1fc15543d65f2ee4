"""What the bf16 program tests share: each output of an executable near the NumPy reference
of the same bf16 program and within the issue's bound of the float32 one (`near_both`); a
program through the passes to `to_bf16` on any CPU (`converted`); a converted program's
bindings of one op (`bindings_of`)."""

from __future__ import annotations

import numpy as np
import pytest

import rvm
from rvm.transform import to_bf16 as to_bf16_module
from rvm.transform.pipeline import default_passes, run_pipeline
from rvm.transform.to_bf16 import to_bf16

BF16_VS_F32 = 3e-2  # the bound for a model's outputs (test_precision.py)


def near_both(got, exact, full, atol: float = 1e-2) -> None:  # type: ignore[no-untyped-def]
    """Each output float32 of the float32 program's shape, near the reference of the same bf16
    program (``atol`` of its largest value: an activation rounded to bf16 between two
    convolutions may round the other way when its float32 sum differs in the last bits,
    another order, and move later outputs by a bf16 step of a few inputs) and within
    `BF16_VS_F32` of the float32 one."""
    for g, e, f in zip(got, exact, full):
        assert g.dtype == np.float32 and g.shape == f.shape
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=atol * np.abs(e).max())
        assert np.abs(g - f).max() <= BF16_VS_F32 * np.abs(f).max()


def converted(mod: rvm.IRModule) -> rvm.IRModule:
    """``mod`` through the default passes before ``legalize`` and `to_bf16`, as on a CPU with
    bf16 dot products (whatever this one has)."""
    passes = default_passes()
    before = passes[: [n for n, _ in passes].index("legalize")]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(to_bf16_module, "native_way", lambda: "bf16")  # on any CPU
        return to_bf16(run_pipeline(mod, before))


def bindings_of(mod: rvm.IRModule, name: str) -> list:
    """The bindings of ``mod``'s main whose value calls the op ``name``, in order."""
    return [
        b for b in mod["main"].body.bindings
        if getattr(getattr(b.value, "callee", None), "name", None) == name
    ]  # fmt: skip
