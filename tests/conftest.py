"""Shared fixtures: the exec modes and kernel backends every VM test runs under."""

from __future__ import annotations

import pytest

EXEC_MODES = ("bytecode", "compiled")
KERNELS = ("numpy", "jit")


@pytest.fixture(params=EXEC_MODES)
def exec_mode(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(params=KERNELS)
def kernels(request: pytest.FixtureRequest) -> str:
    return request.param
