"""Helpers for tests: structural comparison, value comparison, random programs."""

from rvm.ir.structural import assert_structural_equal
from rvm.testing.values import assert_values_close

__all__ = ["assert_structural_equal", "assert_values_close"]
