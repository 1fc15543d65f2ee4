"""A concatenation's pieces copied by the library (`rvm.kernels.joins`) against NumPy, the
kernels calling it, and a program whose concat they fill in every exec mode.

The library's copy is exact: every test compares bits, at one thread and at two (a piece
large enough to split over the pool, `rvm.kernels.parfor.MIN_WORK`, cut at chunks that do not
fall on its rows' ends)."""

from __future__ import annotations

import numpy as np
import pytest
from jit_helpers import Jit, check, prim, rand, var

import rvm
from rvm import op
from rvm.ir import Builder, IRModule, Tuple, Var, tensor
from rvm.kernels import joins, parfor


@pytest.fixture(params=[1, 2], ids=["1-thread", "2-threads"])
def threads(request):  # type: ignore[no-untyped-def]
    before = rvm.get_num_threads()
    rvm.set_num_threads(request.param)
    yield request.param
    rvm.set_num_threads(before)


CASES = [  # rows, run, width, offset: one row, runs under a vector, a piece at the end, a
    # piece large enough to split, its rows not a multiple of a vector
    (1, 5, 9, 0),
    (3, 7, 10, 3),
    (4, 1, 4, 3),
    (8, 128 * 27 * 27 - 1, 2 * 128 * 27 * 27, 128 * 27 * 27 + 1),
    (parfor.MIN_WORK // 37 + 5, 37, 80, 40),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(("rows", "run", "width", "offset"), CASES)
def test_join_rows_copies_the_piece_and_nothing_else(
    rows: int, run: int, width: int, offset: int, dtype: str, threads: int
) -> None:
    piece = rand((rows, 1, 1, run), dtype, seed=run)
    out = np.full((rows, 1, 1, width), np.nan, dtype=dtype)
    joins.join_rows(piece, out, offset)
    want = np.full_like(out, np.nan)
    want[..., offset : offset + run] = piece
    np.testing.assert_array_equal(out, want)  # NaN where nothing was written


@pytest.mark.parametrize(
    ("piece_shape", "out_shape", "offset"),
    [
        ((2, 1, 1, 5), (3, 1, 1, 9), 0),
        ((2, 1, 1, 5), (2, 1, 1, 9), 5),
        ((2, 1, 1, 5), (2, 1, 1, 9), -1),
        ((2, 2, 1, 5), (2, 1, 1, 20), 0),
    ],
)
def test_join_rows_rejects_a_piece_that_does_not_fit(
    piece_shape: tuple, out_shape: tuple, offset: int
) -> None:
    out = np.zeros(out_shape, dtype="float32")
    with pytest.raises(ValueError, match="do not fit"):
        joins.join_rows(rand(piece_shape), out, offset)
    assert not out.any()


def test_join_rows_task_only_when_large() -> None:
    assert joins.first_run_tasks(100) == ()
    assert joins.first_run_tasks(parfor.MIN_WORK) == ("join_rows",)


# -- kernels ---------------------------------------------------------------------------------


@pytest.mark.parametrize("axis", [0, 1, 2, 3, -1])
def test_concat_of_float_arrays_calls_the_library(axis: int, threads: int) -> None:
    a, b, e = var("a", ("n", 3, 5, 4)), var("b", ("n", 3, 5, 4)), var("e", ("n", 3, 5, 4))
    func = prim([a, e, b], op.concat([a, e, b], axis=axis))
    kernel = Jit(func)
    assert kernel.record.requires == (("join_rows", "float32"),)
    x, y = rand((2, 3, 5, 4), seed=1), rand((2, 3, 5, 4), seed=2)
    check(func, x, rand((2, 3, 5, 4), seed=3), y, kernel=kernel, rtol=0, atol=0)
    check(func, x[:0], x[:0], y[:0], kernel=kernel, rtol=0, atol=0)


def test_concat_of_computed_pieces_or_integers_keeps_its_loops() -> None:
    a = var("a", ("n", 3, 5, 4))
    assert Jit(prim([a], op.concat([a, op.exp(a)], axis=1))).record.requires == ()
    i = var("i", ("n", 3, 5, 4), "int32")
    func = prim([i], op.concat([i, i], axis=1))
    assert Jit(func).record.requires == ()
    check(func, rand((2, 3, 5, 4), "int32"))


# -- programs in every exec mode ------------------------------------------------------------


def _program(batch: int | str = "n", relu: bool = False, side: int = 27) -> IRModule:
    """Two pieces made by kernels of their own and their concat at batch ``batch`` (of maps
    ``side`` wide): not runs of the output (`rvm.transform.concat_plan`), so a kernel copies
    them (with ``relu``, the concat's ReLU in the same kernel: each piece's loops write the
    output, no copy)."""
    x = Var("x", tensor((batch, 64, side, side), "float32"))
    bb = Builder()
    with bb.function("main", [x]):
        p = bb.emit(op.exp(op.multiply(x, rvm.const(np.float32(0.1)))))
        q = bb.emit(op.tanh(x))
        joined = op.concat(bb.emit(Tuple((p, q))), axis=1)
        bb.emit_output(op.relu(bb.emit(joined)) if relu else joined)
    return bb.get()


@pytest.fixture(scope="module")
def executable() -> rvm.Executable:
    exe = rvm.compile(_program())
    assert [k.requires for k in exe.kernels.values() if k.requires] == [(("join_rows", "float32"),)]
    return exe


@pytest.mark.parametrize("images", [1, 8, 0])
def test_program_in_every_exec_mode(
    executable: rvm.Executable, exec_mode: str, images: int, threads: int
) -> None:
    x = rand((images, 64, 27, 27), seed=13)
    got = rvm.VirtualMachine(executable, exec_mode=exec_mode)["main"](x)
    want = rvm.interpret(_program(), "main", x)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    c = np.concatenate([np.exp(x * np.float32(0.1)), np.tanh(x)], axis=1)
    np.testing.assert_allclose(got, c, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    ("batch", "relu", "side"), [(8, False, 27), (2, False, 5), (8, True, 27), ("n", False, 27)]
)
def test_a_compile_builds_the_joins_task_ahead(
    monkeypatch, batch: int | str, relu: bool, side: int
) -> None:
    """A compile hands the background build of a first run's library tasks
    (`rvm.jit.parallel.precompile`, `rvm.jit.first_run.library_tasks`) the copy's task when
    its kernel copies the pieces (its record requires ``join_rows``) and the largest piece's
    static size splits it (`joins.first_run_tasks`): 64 maps of 27 x 27 at batch 8, not of
    5 x 5 at batch 2, nor where the ReLU's loops write the pieces (no copy), nor at a batch
    known at run time only (no static size)."""
    from rvm.jit import parallel

    handed: list[tuple[str, str]] = []

    def precompile(records, tasks=()):  # type: ignore[no-untyped-def]
        handed.extend(tasks)
        return real(records, tasks)

    real = parallel.precompile
    monkeypatch.setattr(parallel, "precompile", precompile)
    exe = rvm.compile(_program(batch, relu, side))
    copies = [k.requires for k in exe.kernels.values() if k.requires]
    assert copies == ([] if relu else [(("join_rows", "float32"),)])
    # the large pieces split on every CPU (`parfor.MIN_WORK`), the small ones on none
    assert joins.first_run_tasks(8 * 64 * 27 * 27) and not joins.first_run_tasks(2 * 64 * 5 * 5)
    assert (("join_rows", "float32") in handed) == (batch == 8 and not relu), handed
