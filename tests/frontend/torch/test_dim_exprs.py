"""torch.export's sympy sizes as rvm dimension expressions: a ``cat`` of a past and a new
sequence has the dimension ``past + seq``, a ``view`` to ``batch * (past + seq)`` a product,
and the compiled program runs every size in every exec mode against eager PyTorch."""

from __future__ import annotations

import numpy as np
import pytest

import rvm
from rvm.ir import infer_type

torch = pytest.importorskip("torch")


class _Cache(torch.nn.Module):
    def forward(self, past, new):  # noqa: ANN001, ANN201
        kv = torch.cat([past, new], dim=1)
        return kv.reshape(kv.shape[0] * kv.shape[1], 4) * 2.0


@pytest.fixture(scope="module")
def cache_module() -> rvm.IRModule:
    from torch.export import Dim

    batch, past, seq = (Dim(n, min=1, max=64) for n in ("batch", "past", "seq"))
    args = (torch.randn(2, 3, 4), torch.randn(2, 5, 4))
    shapes = ({0: batch, 1: past}, {0: batch, 1: seq})
    return rvm.from_torch(_Cache(), args=args, dynamic_shapes=shapes)


def test_sizes_become_expressions(cache_module) -> None:
    assert infer_type(cache_module["main"]).ret.shape == ("batch*past + batch*seq", 4)


def test_expressions_run_every_size(cache_module, exec_mode) -> None:
    vm = rvm.VirtualMachine(rvm.compile(cache_module), exec_mode=exec_mode)
    for b, p, s in ((2, 3, 5), (1, 7, 2), (3, 1, 1)):
        past, new = torch.randn(b, p, 4), torch.randn(b, s, 4)
        want = _Cache()(past, new).numpy()
        np.testing.assert_allclose(vm["main"](past.numpy(), new.numpy()), want, rtol=1e-6)
