"""The compiled mode's inline shape builtins: same values and errors as the bytecode loop (their
generated form is pinned in test_compiled_golden.py)."""

from __future__ import annotations

import numpy as np
import pytest
import rt_helpers as h

import rvm
from rvm.errors import ShapeError, VMError
from rvm.runtime import ExecBuilder, Executable, Opcode, VirtualMachine
from rvm.runtime import builtins as B
from rvm.runtime.registry import register_func
from rvm.testing.programs import MLP

O = Opcode

MODES = ("bytecode", "compiled")


def _run_both(ex: Executable, *args: np.ndarray) -> dict[str, object]:
    return {mode: VirtualMachine(ex, exec_mode=mode)["main"](*args) for mode in MODES}


def _errors_both(ex: Executable, *args: np.ndarray, instrument: bool = False) -> list[str]:
    texts = []
    for mode in MODES:
        vm = VirtualMachine(ex, exec_mode=mode)
        if instrument:
            vm.set_instrument(lambda name, a, before: None)
        with pytest.raises(VMError) as info:
            vm["main"](*args)
        assert isinstance(info.value.__cause__, ShapeError)
        texts.append(str(info.value))
    assert texts[0] == texts[1]
    return texts


def f32(*shape: int) -> np.ndarray:
    return np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)


@pytest.mark.parametrize("n", [0, 1, 3])
def test_symbolic_dims_agree_with_bytecode(n):
    x, y = f32(n, 4), f32(n, 4) + 1
    for out in ("sum", "shape", "heap", "reshaped"):
        got = _run_both(h.checked_add(out=out), x, y)
        a, b = got["bytecode"], got["compiled"]
        assert type(a) is type(b) is np.ndarray and a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(got["compiled"], (x + y).reshape(4, n))
    mlp = rvm.compile(MLP, kernels="numpy")
    rng = np.random.default_rng(n)
    args = [rng.standard_normal(s).astype(np.float32) for s in MLP_SHAPES(n)]
    got = {mode: VirtualMachine(mlp, exec_mode=mode)["main"](*args) for mode in MODES}
    assert got["compiled"].shape == (n, 10)
    np.testing.assert_array_equal(got["compiled"], got["bytecode"])


def MLP_SHAPES(n: int) -> list[tuple[int, ...]]:
    return [(n, 784), (784, 128), (128,), (128, 10), (10,)]


@pytest.mark.parametrize("instrument", [False, True])
def test_shape_errors_are_those_of_bytecode(instrument):
    ex = h.checked_add()
    cases = [
        ((f32(3), f32(3, 4)), "main: argument 0 'x': expected a 2-d tensor, got shape (3,) (1-d)"),
        ((f32(3, 5), f32(3, 4)), "main: argument 0 'x': shape (3, 5) has 5 at axis 1, expected 4"),
        (
            (f32(3, 4), f32(2, 4)),
            "main: argument 1 'y': shape (2, 4) has 2 at axis 0, but an earlier shape set that "
            "dimension to 3",
        ),
        ((f32(3, 4), f32(3, 4, 1)), "main: argument 1 'y': expected a 2-d tensor"),
    ]
    for args, message in cases:
        text = _errors_both(ex, *args, instrument=instrument)[0]
        assert message in text
        assert "VM stack (most recent call last):\n  in @main pc=" in text


def test_a_dim_bound_and_checked_in_one_pattern():
    ex = h.checked_add(y_pattern=(1, 0, 2, 0))  # y: (n, n), setting n again
    got = _run_both(ex, f32(1, 4), f32(4, 4))  # n = 1, then n = 4: the add broadcasts
    assert got["compiled"].shape == (4, 4)
    np.testing.assert_array_equal(got["compiled"], got["bytecode"])
    text = _errors_both(ex, f32(3, 4), f32(4, 5))[0]
    assert "shape (4, 5) has 5 at axis 1, but an earlier shape set that dimension to 4" in text


def test_an_unknown_dim_counts_for_the_rank_only():
    ex = h.checked_add(y_pattern=(2, 0, 3, 0))  # y: (n, ?)
    got = _run_both(ex, f32(3, 4), f32(3, 1))  # the ? dim takes any size: the add broadcasts
    np.testing.assert_array_equal(got["compiled"], f32(3, 4) + f32(3, 1))
    np.testing.assert_array_equal(got["compiled"], got["bytecode"])
    text = _errors_both(ex, f32(3, 4), f32(3, 4, 1))[0]
    assert "main: argument 1 'y': expected a 2-d tensor, got shape (3, 4, 1) (3-d)" in text
    text = _errors_both(ex, f32(3, 4), f32(2, 4))[0]
    assert "shape (2, 4) has 2 at axis 0, but an earlier shape set that dimension to 3" in text


def _builtin_calls_program() -> Executable:
    """main(x: (n, 4)) = x + x with the shape work as format 1.1 wrote it: CALL_PACKED of the
    `vm.builtin.*` functions (files of that format still run them so)."""
    b = ExecBuilder()
    add = b.add_kernel(h.ADD)
    pattern = b.add_constant(np.array([1, 0, 0, 4], np.int64))
    context = b.add_constant(np.array("main: x"))
    dtype = b.add_constant(np.array("float32"))
    f = b.function("main", ("x",))
    r = [f.new_register() for _ in range(10)]
    f.emit(O.LOAD_CONSTI, r[0], 1)
    f.emit(O.CALL_PACKED, r[1], "vm.builtin.alloc_shape_heap", (r[0],))
    f.emit(O.LOAD_CONST, r[2], pattern)
    f.emit(O.LOAD_CONST, r[3], context)
    f.emit(O.CALL_PACKED, r[4], "vm.builtin.match_shape", (0, r[1], r[2], r[3]))
    f.emit(O.CALL_PACKED, r[5], "vm.builtin.make_shape", (r[1], r[2]))
    f.emit(O.LOAD_CONST, r[6], dtype)
    f.emit(O.CALL_PACKED, r[7], "vm.builtin.storage_size", (r[5], r[6]))
    f.emit(O.ALLOC_STORAGE, r[8], r[7], 64, "float32")
    f.emit(O.ALLOC_TENSOR_REG, r[9], r[8], 0, r[5], "float32")
    f.emit(O.INVOKE_PACKED, add, 3, 1, (0, 0, r[9]))
    f.emit(O.RET, r[9])
    return b.build()


def test_builtin_calls_of_older_files_run_through_the_registry():
    seen = []

    def storage_size(shape, dtype):
        seen.append(type(shape))
        return B.storage_size(shape, dtype)

    ex = _builtin_calls_program()
    register_func("vm.builtin.storage_size", storage_size, override=True)
    try:
        got = _run_both(ex, f32(3, 4))
    finally:
        register_func("vm.builtin.storage_size", B.storage_size, override=True)
    assert seen == [np.ndarray, np.ndarray]  # once per mode, given the int64 shape array
    np.testing.assert_array_equal(got["compiled"], 2 * f32(3, 4))
    np.testing.assert_array_equal(got["bytecode"], got["compiled"])
    assert "expected a 2-d tensor" in _errors_both(ex, f32(3))[0]


def test_instrumented_runs_see_the_same_packed_calls_and_shape_checks_still_run():
    ex = h.checked_add()
    counts = {}
    for mode in MODES:
        vm = VirtualMachine(ex, exec_mode=mode)
        vm["main"](f32(2, 4), f32(2, 4))
        seen: list[str] = []
        vm.set_instrument(lambda name, a, before, seen=seen: seen.append(name) if before else None)
        vm["main"](f32(2, 4), f32(2, 4))
        counts[mode] = seen
        with pytest.raises(VMError, match="main: argument 1 'y'"):
            vm["main"](f32(2, 4), f32(3, 4))
    assert counts["compiled"] == counts["bytecode"] == ["add"]  # shape work is instructions


def test_generic_builtins_keep_their_results_and_errors():
    heap = B.alloc_shape_heap(np.array(2))
    assert heap.dtype == np.int64 and heap.tolist() == [0, 0]
    x = np.zeros((3, 4))
    assert B.match_shape(x, heap, [1, 0, 0, 4, 1, 1][:4], np.array("ctx")) is x
    assert heap.tolist() == [3, 0]
    shape = B.make_shape(heap, np.array([1, 0, 0, 7], np.int32))
    assert shape.dtype == np.int64 and shape.tolist() == [3, 7]
    assert B.storage_size(shape, np.array("float64")) == 168
    assert B.storage_size((2, 3), "int16") == B.storage_size(np.array([[2], [3]]), "int16") == 12
    assert B.storage_size(np.zeros(0, np.int64), "float32") == 4
    with pytest.raises(ShapeError, match=r"^ctx: shape \(3, 4\) has 4 at axis 1, expected 5$"):
        B.match_shape(x, heap, np.array([2, 0, 0, 5]), "ctx")
    with pytest.raises(ShapeError, match=r"^expected a 1-d tensor, got shape \(3, 4\) \(2-d\)$"):
        B.match_shape(x, heap, np.array([2, 0]))
    assert B.match_shape(x, heap, np.array([3, 0, 1, 1]), "ctx") is x  # (?, m): m = 4
    assert heap.tolist() == [3, 4]
    with pytest.raises(ValueError, match="unknown pattern kind 6"):
        B.match_shape(x, heap, np.array([6, 0, 3, 0]))
    with pytest.raises(ValueError, match="an expression of 0 ops past its end"):
        B.match_shape(x, heap, np.array([4, 0, 3, 0]))
    with pytest.raises(ValueError, match="pairs, got 3 numbers"):
        B.make_shape(heap, [0, 1, 2])
    with pytest.raises(ValueError, match="unknown pattern kind 2"):
        B.make_shape(heap, [0, 1, 2, 0])
