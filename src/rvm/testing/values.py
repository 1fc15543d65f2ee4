"""Comparing run-time values: arrays, tuples, ADT values (by constructor name and fields)."""

from __future__ import annotations

from typing import Any

import numpy as np

from rvm.runtime.objects import ADT


def assert_values_close(
    actual: Any, expected: Any, *, rtol: float = 1e-5, atol: float = 1e-6, path: str = "result"
) -> None:
    """Assert two results are equal up to float tolerance, dtype and shape included.

    Tuples compare field by field, ADT values by constructor name (or tag when unnamed) and
    fields; the traversal is iterative so long ADT lists compare without recursion.
    """
    stack = [(actual, expected, path)]
    while stack:
        a, e, where = stack.pop()
        if isinstance(e, ADT):
            if not isinstance(a, ADT):
                raise AssertionError(f"{where}: expected an ADT value, got {type(a).__name__}")
            if (a.name or a.tag) != (e.name or e.tag) or len(a.fields) != len(e.fields):
                raise AssertionError(f"{where}: expected constructor {e.name}, got {a.name}")
            stack.extend((x, y, f"{where}.{i}") for i, (x, y) in enumerate(zip(a, e)))
        elif isinstance(e, tuple):
            if not isinstance(a, tuple) or len(a) != len(e):
                raise AssertionError(f"{where}: expected a {len(e)}-tuple, got {a!r:.80}")
            stack.extend((x, y, f"{where}[{i}]") for i, (x, y) in enumerate(zip(a, e)))
        else:
            a_arr, e_arr = np.asarray(a), np.asarray(e)
            if a_arr.dtype != e_arr.dtype:
                raise AssertionError(f"{where}: dtype {a_arr.dtype}, expected {e_arr.dtype}")
            if a_arr.shape != e_arr.shape:
                raise AssertionError(f"{where}: shape {a_arr.shape}, expected {e_arr.shape}")
            if np.issubdtype(e_arr.dtype, np.floating):
                np.testing.assert_allclose(a_arr, e_arr, rtol=rtol, atol=atol, err_msg=where)
            else:
                np.testing.assert_array_equal(a_arr, e_arr, err_msg=where)
