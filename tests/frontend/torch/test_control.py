"""torch.cond and torch.while_loop."""

from __future__ import annotations

import numpy as np
import pytest

import rvm

torch = pytest.importorskip("torch")
from torch.export import Dim  # noqa: E402
from torch_helpers import check_eager  # noqa: E402


class Branches(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4, 4))

    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda x: (x @ self.w).relu(), lambda x: x - 1.0, (x,))


def test_cond_runs_the_branch_the_data_picks(exec_mode: str) -> None:
    torch.manual_seed(0)
    model = Branches()
    x = torch.randn(3, 4)
    mod = rvm.from_torch(model, args=(x,), dynamic_shapes={"x": {0: Dim("n")}})
    check_eager(model, mod, [(x.abs(),), (-x.abs(),), (torch.randn(5, 4).abs(),)], exec_mode)


def test_cond_on_a_symbolic_size(exec_mode: str) -> None:
    class BySize(torch.nn.Module):
        def forward(self, x):
            return torch.cond(x.shape[0] > 4, lambda x: x * 2.0, lambda x: x + 1.0, (x,))

    x = torch.randn(3, 2)
    mod = rvm.from_torch(BySize(), args=(x,), dynamic_shapes={"x": {0: Dim("n")}})
    check_eager(BySize(), mod, [(torch.randn(n, 2),) for n in (2, 5, 9)], exec_mode)


class Count(torch.nn.Module):
    def forward(self, x, n):
        def cond(i, acc):
            return i < n

        def body(i, acc):
            return i + 1, acc * 0.5 + 1.0

        return torch.while_loop(cond, body, (torch.zeros((), dtype=torch.int64), x))


def test_while_loop_carries_values(exec_mode: str) -> None:
    x = torch.randn(2, 3)
    mod = rvm.from_torch(Count(), args=(x, torch.tensor(4)))
    check_eager(Count(), mod, [(x, torch.tensor(n)) for n in (0, 1, 7)], exec_mode, rtol=1e-6)


def test_while_loop_of_100000_iterations_runs_in_constant_stack(exec_mode: str) -> None:
    x = torch.zeros(())
    mod = rvm.from_torch(Count(), args=(x, torch.tensor(3)))
    vm = rvm.VirtualMachine(rvm.compile(mod), exec_mode=exec_mode)
    i, acc = vm["main"](np.float32(0.0), np.int64(100_000))
    assert int(i) == 100_000 and float(acc) == pytest.approx(2.0)
