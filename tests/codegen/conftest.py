"""Fixtures shared by the VM API tests in this directory."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import rvm
from rvm.ir import IRModule


@pytest.fixture(scope="session")
def compiled() -> Callable[[IRModule, str], rvm.Executable]:
    """``compiled(mod, kernels)``: ``rvm.compile(mod, kernels=kernels)``, once per session."""
    cache: dict[tuple[int, str], rvm.Executable] = {}

    def compile_once(mod: IRModule, kernels: str) -> rvm.Executable:
        key = (id(mod), kernels)
        if key not in cache:
            cache[key] = rvm.compile(mod, kernels=kernels)
        return cache[key]

    return compile_once
