"""A stand-in broadcast op so IR tests do not depend on the operator set."""

from __future__ import annotations

import pytest

from rvm.ir.op import OpPattern, infer, register_op

_ADD = register_op("test.ir_add", OpPattern.BROADCAST, 2)
infer[_ADD] = lambda call, types: types[0]


@pytest.fixture
def add_op():
    return _ADD
