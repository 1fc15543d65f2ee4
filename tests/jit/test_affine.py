"""A kernel that is a per-channel affine map and a ReLU (a batch norm, multiplied and shifted by
per-channel arrays: densenet's) runs the library's pass over its output, split over the pool
when large (`rvm.kernels.affine`, `rvm.jit.channel_affine`)."""

from __future__ import annotations

import numpy as np
import pytest
from jit_helpers import Jit, check, prim, rand, var

import rvm
from rvm import op
from rvm.kernels import affine, parfor

C = 6
STATS = [var(f"q{i}", (C,)) for i in range(4)]  # gamma, beta, mean, variance


def _stats() -> list[np.ndarray]:
    return [rand((C,), seed=i) for i in range(3)] + [abs(rand((C,), seed=3)) + 0.5]


def _calls_the_pass(kernel: Jit) -> bool:
    return ("channel_affine", "float32") in kernel.record.requires


def _chains(x, rank: int = 4):  # type: ignore[no-untyped-def]
    """(name, result, extra params, their arrays) of chains the pass takes, on an input of
    ``rank`` dims (the per-channel arrays of shape (C, 1, ...))."""
    each = (C,) + (1,) * (rank - 2)
    sc_, sh_ = var("sc", each), var("sh", each)
    sc, sh = rand(each, seed=7), rand(each, seed=8) + 0.5
    return [
        ("densenet", op.relu(op.batch_norm(x, *STATS) * sc_ + sh_), [*STATS, sc_, sh_],
         [*_stats(), sc, sh]),
        ("bn", op.batch_norm(x, *STATS, epsilon=1e-3), STATS, _stats()),
        ("two_bns", op.relu(op.batch_norm(op.batch_norm(x, *STATS), *STATS, epsilon=0.5)),
         STATS, _stats()),
        ("sub_div", (x - sc_) / sh_, [sc_, sh_], [sc, sh]),
        ("from_shift", op.relu(sh_ - x * 0.5), [sh_], [sh]),
        ("add_relu", op.relu(x + sh_), [sh_], [sh]),
        ("relu", op.relu(x), [], []),
    ]  # fmt: skip


# Each chain on 4-d inputs; on 3-d ones (a conv1d's batch norm) the chains whose lowering
# reads the rank (`rvm.jit.channel_affine`: a batch norm's axis and an operand broadcast to x,
# densenet's; a subtraction and division of operands, and an operand minus x scaled by a
# constant): the others' steps are those same steps (bn, two_bns: densenet's batch norm;
# add_relu: its shift and ReLU; relu: no step), each a kernel of its own (0.5 CPU-s).
RANK_3 = (0, 3, 4)


@pytest.mark.parametrize(
    ("case", "rank"),
    [(case, 4) for case in range(7)] + [(case, 3) for case in RANK_3],
    ids=[f"{case}-4" for case in range(7)] + [f"{case}-3" for case in RANK_3],
)
def test_chains_run_the_pass_and_match_numpy(case: int, rank: int) -> None:
    shape = (2, C, 5, 7) if rank == 4 else (2, C, 9)
    x = var("x", ("n", C, *(f"s{i}" for i in range(rank - 2))))
    name, result, params, arrays = _chains(x, rank)[case]
    func = prim([x, *params], result)
    kernel = Jit(func, name=name)
    assert _calls_the_pass(kernel), kernel.record.source
    check(func, rand(shape), *arrays, rtol=1e-5, atol=1e-5, kernel=kernel)


@pytest.mark.parametrize("blas_threads", [1, 2, 3], indirect=True)
def test_a_large_pass_splits_over_the_pool(blas_threads: int) -> None:
    """Pieces of whole vectors tile the output, whatever the threads (an odd row length)."""
    rows = parfor.MIN_WORK // (2 * 2 * C * 97) + 1  # read and written: splits on any CPU
    shape = (2, C, rows, 97)
    assert affine.splits(int(np.prod(shape)))
    x = var("x", shape)
    _, result, params, arrays = _chains(x)[0]
    func = prim([x, *params], result)
    kernel = Jit(func, name="large")
    assert _calls_the_pass(kernel)
    check(func, rand(shape), *arrays, rtol=1e-5, atol=1e-5, kernel=kernel)
    assert not affine.splits(parfor.MIN_WORK // 2 - 1)


def test_other_chains_keep_their_loops() -> None:
    """Not affine in x on the channels: a division by x, an operand along other axes, a
    second use of x, an integer input."""
    x, sh = var("x", (2, C, 5, 7)), var("sh", (C, 1, 1))
    y, row = var("y", (2, C, 5, 7)), var("row", (7,))
    xi = var("xi", (2, C, 5, 7), "int32")
    for result, params in [
        (sh / x, [sh]),
        (op.relu(x + row), [row]),
        (op.relu(x * x), []),
        (op.relu(x + y), [y]),
        (op.relu(op.batch_norm(x, *STATS) + x), STATS),
    ]:
        kernel = Jit(prim([x, *params], result))
        assert not _calls_the_pass(kernel)
    x = var("x", (2, C, 1, 1))  # every operand per channel: x * bn(x) still is not affine
    bn = op.batch_norm(x, *STATS)
    for result, params in [(op.relu(bn * bn), STATS), (bn * x, STATS), (x - bn, STATS)]:
        kernel = Jit(prim([x, *params], result))
        assert not _calls_the_pass(kernel)
    assert not _calls_the_pass(Jit(prim([xi], op.relu(xi))))


def test_a_model_of_batch_norms_in_every_exec_mode() -> None:
    """A VM function of such kernels, every exec mode, against NumPy."""
    from rvm.ir import Builder

    x, sc_, sh_ = var("x", (1, C, 64, 64)), var("sc", (C, 1, 1)), var("sh", (C, 1, 1))
    b = Builder()
    with b.function("main", [x, *STATS, sc_, sh_]):
        y = b.emit(op.relu(op.batch_norm(x, *STATS) * sc_ + sh_))
        b.emit_output(b.emit(op.batch_norm(y, *STATS)))
    ex = rvm.compile(b.get())
    sc, sh = rand((C, 1, 1), seed=7), rand((C, 1, 1), seed=8)
    xs, stats = rand((1, C, 64, 64)), _stats()
    g, be, m, v = (s.reshape(1, C, 1, 1) for s in stats)
    bn = lambda a: (a - m) / np.sqrt(v + 1e-5) * g + be  # noqa: E731
    want = bn(np.maximum(bn(xs) * sc + sh, 0))
    for mode in ("bytecode", "compiled", "native"):
        got = rvm.VirtualMachine(ex, exec_mode=mode)["main"](xs, *stats, sc, sh)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-4)


def test_a_compile_lists_the_task_of_a_large_pass() -> None:
    """`rvm.jit.first_run`: the pass's task is built while the kernels compile when its
    static shape splits, not for a small map."""
    from rvm.ir import Builder
    from rvm.jit.first_run import library_tasks
    from rvm.transform.pipeline import run_pipeline

    side = int(np.ceil(np.sqrt(parfor.MIN_WORK / (2 * C))))  # splits on any CPU (the lanes')
    for shape, listed in [((1, C, side, side), True), ((1, C, 4, 4), False)]:
        x = var("x", shape)
        b = Builder()
        with b.function("main", [x, *STATS]):
            b.emit_output(b.emit(op.relu(op.batch_norm(x, *STATS))))
        assert affine.splits(int(np.prod(shape))) == listed
        tasks = library_tasks(run_pipeline(b.get()))
        assert (("channel_affine", "float32") in tasks) == listed, tasks


def test_the_pass_in_a_warm_process() -> None:
    """Its coefficients, an array the library reaches by address, outlive the call in a
    process loading the kernels from the caches (`jit_helpers.run_warm`)."""
    from jit_helpers import run_warm

    script = (
        "import numpy as np\n"
        "import rvm\n"
        "from rvm import op\n"
        "from rvm.ir import Builder, TensorType, Var\n"
        "C = 24\n"
        "x = Var('x', TensorType((1, C, 40, 40), 'float32'))\n"
        "ps = [Var(f'q{i}', TensorType((C,), 'float32')) for i in range(4)]\n"
        "b = Builder()\n"
        "with b.function('main', [x, *ps]):\n"
        "    b.emit_output(b.emit(op.relu(op.batch_norm(x, *ps))))\n"
        "f = rvm.VirtualMachine(rvm.compile(b.get()))['main']\n"
        "rng = np.random.default_rng(0)\n"
        "xs = rng.standard_normal((1, C, 40, 40)).astype(np.float32)\n"
        "g, be, m = (rng.standard_normal(C).astype(np.float32) for _ in range(3))\n"
        "v = rng.random(C).astype(np.float32) + 0.5\n"
        "want = np.maximum((xs - m[:, None, None]) / np.sqrt(v[:, None, None] + 1e-5)\n"
        "                  * g[:, None, None] + be[:, None, None], 0)\n"
        "for _ in range(20):\n"
        "    got = np.asarray(f(xs, g, be, m, v))\n"
        "    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)\n"
    )
    exec(script, {})  # compiled here, cached for the warm process
    run_warm(script)


def test_a_row_run_is_the_pass_arithmetic_at_every_length() -> None:
    """`rvm.kernels.epipass.row_run`, the one loop of both passes: ``act(x * scale + shift +
    res)`` on runs of 0 to 2 vectors and more, their whole vectors and their last elements
    alike (7 x 7 and 14 x 14 maps' rows: 49 and 196), in place or not, a NaN kept by the
    ReLU; with a scale of 1 (the epilogue pass's) exactly NumPy's float32 ``x + shift + res``,
    else within a rounding of its float64 value (a fused multiply-add where the CPU has one)."""
    import numba as nb

    from rvm.kernels.epipass import row_run

    @nb.njit
    def run(x, out, n, scale, shift, res, act):  # type: ignore[no-untyped-def]
        at_res = res.ctypes.data if res.size else 0
        row_run(x.ctypes.data, out.ctypes.data, n, scale, shift, at_res, act)

    zero = np.float32(0)
    for n in (0, 1, 7, 8, 9, 16, 17, 49, 196):
        x, res = rand((n,), seed=n), rand((n,), seed=n + 1)
        if n:
            x[n // 2] = np.nan
        for scale, shift in ((np.float32(1), np.float32(0.25)), (np.float32(-1.5), np.float32(3))):
            for r in (res, rand((0,))):
                for act in (0, 1):
                    got = np.full(n, 7.0, np.float32)
                    run(x, got, n, scale, shift, r, act)
                    if scale == 1:
                        want = x + shift + (r if r.size else zero)
                    else:
                        exact = x.astype(np.float64) * scale + shift
                        want = (exact + (r if r.size else 0)).astype(np.float32)
                    want = np.where(want < 0, zero, want) if act else want
                    if scale == 1:
                        np.testing.assert_array_equal(got.view(np.int32), want.view(np.int32))
                    else:
                        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
                    inplace = x.copy()
                    run(inplace, inplace, n, scale, shift, r, act)
                    np.testing.assert_array_equal(inplace.view(np.int32), got.view(np.int32))
