"""Run an imported PyTorch program on rvm and compare with eager PyTorch."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

import rvm


def as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (tuple, list)) else [value]


def check_eager(
    model: Any,
    mod: rvm.IRModule,
    inputs: Sequence[Sequence[Any]],
    exec_mode: str,
    kernels: str = "jit",
    rtol: float = 1e-4,
) -> None:
    """``mod`` on each input tuple in ``exec_mode`` matches ``model`` run eagerly: the error
    relative to the largest reference value is at most ``rtol``; shapes and dtypes agree."""
    import torch

    vm = rvm.VirtualMachine(rvm.compile(mod, kernels=kernels), exec_mode=exec_mode)
    for args in inputs:
        with torch.no_grad():
            ref = [r.numpy() for r in as_list(model(*args))]
        got = as_list(vm["main"](*[a.numpy() for a in args]))
        assert len(got) == len(ref)
        for g, r in zip(got, ref):
            g = np.asarray(g)
            assert g.shape == r.shape and g.dtype == r.dtype, (g.shape, g.dtype, r.shape, r.dtype)
            scale = max(float(np.abs(r).max(initial=0.0)), 1e-30)
            assert float(np.abs(g - r).max(initial=0.0)) / scale <= rtol
