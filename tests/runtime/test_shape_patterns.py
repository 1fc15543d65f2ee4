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


def test_decode_reads_an_expression_and_its_program() -> None:
    # (b, past + seq): b stored in slot 0, then slot 1 + slot 2 computed
    pattern = np.array([1, 0, 4, 3, 1, 1, 1, 2, 2, 0], np.int64)
    program = ((1, 1), (1, 2), (2, 0))
    assert sp.decode(pattern, sp.MATCH_KINDS, 3) == [(1, 0), (4, program)]
    assert sp.evaluate(program, [0, 5, 7]) == 12
    assert sp.render(program, lambda slot: f"h[{slot}]") == "(h[1] + h[2])"


@pytest.mark.parametrize(
    ("numbers", "message"),
    [
        ([4, 3, 1, 0, 1, 0], "an expression of 3 ops past its end"),
        ([4, 1, 1, 5], "a heap slot out of range"),
        ([4, 2, 1, 0, 2, 0], "an expression op 2 it cannot run"),
        ([4, 2, 1, 0, 1, 0], "leaves no single value"),
        ([4, 1, 9, 0], "an expression op 9 it cannot run"),
    ],
)
def test_decode_refuses_a_malformed_expression(numbers, message) -> None:
    with pytest.raises(sp.PatternError, match=message):
        sp.decode(np.array(numbers, np.int64), sp.MATCH_KINDS, 2)


@pytest.mark.parametrize(
    ("text", "sizes"),
    [
        ("2*n - 1", {"n": 4}),
        ("(n + 1) // 2 * k", {"n": 6, "k": 3}),
        ("n % k + n", {"n": 7, "k": 3}),
    ],
)
def test_evaluate_and_render_agree_with_the_ir(text, sizes) -> None:
    from rvm.codegen.patterns import expr_pairs
    from rvm.ir import dims as D

    d = D.parse_dim(text)
    slots = {name: i for i, name in enumerate(sorted(sizes))}
    heap = [sizes[name] for name in sorted(sizes)]
    ((kind, program),) = sp.decode(np.array(expr_pairs(d, slots)), sp.MAKE_KINDS, len(heap))
    assert kind == sp.EXPR
    assert sp.evaluate(program, heap) == D.evaluate(d, sizes)
    assert eval(sp.render(program, lambda slot: f"heap[{slot}]")) == D.evaluate(d, sizes)


def test_the_builtins_compute_expressions() -> None:
    from rvm.errors import ShapeError
    from rvm.runtime.builtins import make_shape, match_shape

    heap = np.array([3, 4, 0], np.int64)
    past_plus_seq = [4, 3, 1, 0, 1, 1, 2, 0]
    x = np.zeros((2, 7))
    assert match_shape(x, heap, np.array([1, 2, *past_plus_seq])) is x and heap[2] == 2
    np.testing.assert_array_equal(make_shape(heap, np.array([*past_plus_seq, 0, 5])), [7, 5])
    with pytest.raises(ShapeError, match=r"^ctx: shape \(2, 6\) has 6 at axis 1, expected 7$"):
        match_shape(np.zeros((2, 6)), heap, np.array([1, 2, *past_plus_seq]), "ctx")
    with pytest.raises(ShapeError, match="expected a 1-d tensor, got shape"):
        match_shape(x, heap, np.array(past_plus_seq))
    with pytest.raises(ShapeError, match="divides by a dimension that is 0"):
        make_shape(np.array([3, 0, 0], np.int64), np.array([4, 3, 1, 0, 1, 1, 4, 0]))


@pytest.mark.parametrize(
    ("text", "name", "solvable"),
    [
        ("seq + steps", "steps", True),
        ("seq + steps", "seq", True),
        ("past + seq + 1", "seq", True),
        ("2*steps + seq", "steps", False),
        ("seq - steps", "steps", False),
        ("steps*steps + seq", "steps", False),
        ("(steps + 1) // 2 + seq", "steps", False),
        ("seq*k + steps", "steps", True),
    ],
)
def test_solvable_says_whether_a_name_is_added_once(text, name, solvable) -> None:
    from rvm.codegen.patterns import spec_dim
    from rvm.ir import dims as D

    d = spec_dim(D.parse_dim(text))
    assert sp.solvable(d.program, d.names.index(name)) is solvable


def test_a_signature_expression_is_its_text_with_its_program() -> None:
    import pickle

    from rvm.codegen.patterns import spec_dim
    from rvm.ir import dims as D

    d = spec_dim(D.parse_dim("(n + 1) // 2 * k"))
    assert isinstance(d, sp.DimProgram) and d == str(D.parse_dim("(n + 1) // 2 * k"))
    assert d.names == ("k", "n") and d.value({"n": 6, "k": 3}) == 9 and d.value({"n": 6}) is None
    for again in (pickle.loads(pickle.dumps(d)), eval(repr(d), {"DimProgram": sp.DimProgram})):
        assert (again, again.names, again.program) == (d, d.names, d.program)
    assert spec_dim("n") == "n" and not isinstance(spec_dim("n"), sp.DimProgram)
    assert sp.is_name("n") and not sp.is_name(d) and not sp.is_name(3)
    with pytest.raises(sp.PatternError, match="heap slot out of range"):
        sp.DimProgram.checked("a + b", ("a",), ((1, 0), (1, 1), (2, 0)))
    with pytest.raises(sp.PatternError, match="leaves no single value"):
        sp.DimProgram.checked("a", ("a",), ((1, 0), (1, 0)))
