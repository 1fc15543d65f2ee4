"""The one decoder of shape-pattern constants (`rvm.runtime.shape_patterns`)."""

from __future__ import annotations

import numpy as np
import pytest

from rvm.runtime import shape_patterns as sp


def test_decode_gives_the_pairs_of_a_valid_pattern() -> None:
    pattern = np.array([0, 4, 1, 0, 2, 0, 3, 0], np.int64)
    assert sp.decode(pattern, sp.MATCH_KINDS, 1) == [(0, 4), (1, 0), (2, 0), (3, 0)]
    assert sp.decode(np.array([1, 1, 0, 7]), sp.MAKE_KINDS, 2) == [(1, 1), (0, 7)]


@pytest.mark.parametrize(
    ("value", "kinds", "size", "message"),
    [
        ([0, 4], sp.MATCH_KINDS, 1, "is not a 1-d int array"),
        (np.array([0.0, 4.0]), sp.MATCH_KINDS, 1, "is not a 1-d int array"),
        (np.array([0, 4, 1]), sp.MATCH_KINDS, 1, "has an odd length"),
        (np.array([2, 0]), sp.MAKE_KINDS, 1, "has kind 2"),
        (np.array([5, 0]), sp.MATCH_KINDS, 1, "has kind 5"),
        (np.array([1, 3]), sp.MATCH_KINDS, 3, "has a heap slot out of range"),
        (np.array([2, -1]), sp.MATCH_KINDS, 3, "has a heap slot out of range"),
    ],
)
def test_decode_refuses_what_lowered_code_cannot_run(value, kinds, size, message) -> None:
    with pytest.raises(sp.PatternError, match=message):
        sp.decode(value, kinds, size)


def test_the_builtins_read_the_same_pairs() -> None:
    from rvm.runtime.builtins import make_shape, match_shape

    heap = np.zeros(1, np.int64)
    x = np.zeros((2, 5))
    assert match_shape(x, heap, np.array([0, 2, 1, 0])) is x and heap[0] == 5
    np.testing.assert_array_equal(make_shape(heap, np.array([1, 0, 0, 3])), [5, 3])
    with pytest.raises(ValueError, match="pairs, got 3 numbers"):
        make_shape(heap, np.array([1, 0, 0]))
