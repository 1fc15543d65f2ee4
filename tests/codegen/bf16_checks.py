"""The check the bf16 program tests share: each output of an executable near the NumPy
reference of the same bf16 program and within the issue's bound of the float32 one."""

from __future__ import annotations

import numpy as np

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
