"""Fixtures for the rvm script tests."""

from __future__ import annotations

import pytest

import rvm.script
from rvm.ir import IRModule, assert_structural_equal, verify


def roundtrip(mod: IRModule) -> str:
    """Check that ``mod`` prints, parses back equal and prints identically; return the text."""
    verify(mod)
    text = mod.script()
    again = rvm.script.parse(text)
    assert_structural_equal(again, mod)
    verify(again)
    assert again.script() == text
    return text


@pytest.fixture(scope="session")
def check():
    """`roundtrip`: print, parse back equal, print identically."""
    return roundtrip
