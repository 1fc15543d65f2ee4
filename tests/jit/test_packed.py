"""Products with constant weights packed in column panels (`rvm.kernels.packed`,
`rvm.transform.pack_weights`, the ``dense_packed`` op): the kernel's tile and panel edges
against NumPy (float64 sums), panels of another machine's width, splits over the pool, the
pass on dense, matmul and Gemm in every exec mode, a saved and reloaded executable, and the
executable holding the packed weight only."""

from __future__ import annotations

import math

import numba as nb
import numpy as np
import pytest

import rvm
from rvm import op
from rvm.errors import IRError
from rvm.ir import Builder, Call, IRModule, Var, tensor
from rvm.kernels import gemmcut, gemmshape, packed, parfor, sgemm
from rvm.kernels.threads import get_num_threads, set_num_threads
from rvm.transform.pack_weights import pack_weights

F32 = np.float32


def _check(
    m: int, k: int, n: int, panel: int, seed: int = 0, bias: bool = False, act: str = "none"
) -> None:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = rng.standard_normal(n if bias else 0).astype(np.float32)
    out = np.full((m, n), np.nan, np.float32)
    packed.dense(x, packed.pack(b, False, panel), out, n, c, packed.ACTIVATIONS.index(act))
    want = x.astype(np.float64) @ b + (c if bias else 0)
    if act == "relu":
        want = np.maximum(want, 0)
    elif act == "gelu":
        want = 0.5 * want * (1 + np.vectorize(math.erf)(want / np.sqrt(2)))
    elif act == "gelu_tanh":
        want = 0.5 * want * (1 + np.tanh(np.sqrt(2 / np.pi) * (want + 0.044715 * want**3)))
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5 * np.sqrt(k) * 4)


SIZES_M = [1, 2, packed.SMALL_ROWS, sgemm.MR - 1, sgemm.MR + 1, 3 * sgemm.MR + 5]
# up to a group of panels a one-row product streams at once, and past it (`packed.GEMV_GROUP`)
SIZES_N = [1, sgemm.LANES - 1, sgemm.NR, sgemm.NR + 1, 2 * sgemm.NR + sgemm.LANES + 3,
           (packed.GEMV_GROUP + 1) * sgemm.NR + 3]  # fmt: skip
SIZES_K = [1, 7, sgemm.KC, sgemm.KC + 3, packed.DEPTH + 5]  # the last: two equal blocks


@pytest.mark.parametrize("m", SIZES_M)
@pytest.mark.parametrize("n", SIZES_N)
@pytest.mark.parametrize("k", SIZES_K)
def test_tile_and_panel_edges(m: int, n: int, k: int) -> None:
    _check(m, k, n, packed.panel_width())


@pytest.mark.parametrize("m", [sgemm.MR - 1, 3 * sgemm.MR + 5])
def test_panels_and_general_tiles_give_the_same_bits(m: int) -> None:
    """Panels of this CPU's tile width run the panels' micro-kernel (`micro_panel`), a panel of
    another width the GEMM's general tiles (`sgemm.band_tiles`): the same sums in the same
    order, bit for bit, with the epilogue, over two depth blocks."""
    rng = np.random.default_rng(m)
    k, n = packed.DEPTH + 5, 2 * sgemm.NR + 3
    x = rng.standard_normal((m, k)).astype(F32)
    b = rng.standard_normal((k, n)).astype(F32)
    c = rng.standard_normal(n).astype(F32)
    outs = []
    for panel in (packed.panel_width(), 2 * sgemm.NR + 5):
        out = np.full((m, n), np.nan, F32)
        packed.dense(x, packed.pack(b, False, panel), out, n, c, packed.ACTIVATIONS.index("gelu"))
        outs.append(out)
    np.testing.assert_array_equal(outs[0], outs[1])


@pytest.mark.parametrize("panel", [1, sgemm.LANES, 2 * sgemm.NR + 5])
def test_panels_of_another_width(panel: int) -> None:
    """A weight packed for another CPU's tile (its panel width in its shape) multiplies
    right in this CPU's tiles."""
    for m in (1, 3, sgemm.MR + 3):
        _check(m, 37, 3 * panel + 2, panel)


@pytest.mark.parametrize("act", packed.ACTIVATIONS)
@pytest.mark.parametrize("m", [1, 3, sgemm.MR + 3])
def test_epilogue_on_each_tile(m: int, act: str) -> None:
    """The bias and activation, applied to each tile after its last depth block (two depth
    blocks here) and to each row's panel on the few-rows path."""
    _check(m, sgemm.KC + 5, 2 * sgemm.NR + 3, packed.panel_width(), bias=True, act=act)
    _check(m, 9, sgemm.NR + 1, packed.panel_width(), bias=False, act=act)


def test_split_over_the_pool() -> None:
    """Products large enough to split along the panels, and along C's rows when the panels
    are fewer than the pieces."""
    before = get_num_threads()
    set_num_threads(2)
    try:
        width = packed.panel_width()
        _check(130, 300, 3 * sgemm.NR + 7, width, bias=True, act="gelu")  # along the rows
        _check(67, 260, 40 * sgemm.NR + 1, width, bias=True, act="relu")  # along the panels
        _check(2, 1000, 30 * sgemm.NR, width, bias=True, act="gelu")  # few rows, panels
        _check(1, 1000, 30 * sgemm.NR + 5, width, bias=True, act="gelu")  # one row, panels
    finally:
        set_num_threads(before)


def test_pack_layout_and_transposed() -> None:
    w = np.arange(5 * 7, dtype=np.float32).reshape(5, 7)  # (k, n)
    p = packed.pack(w, False, 3)
    assert p.shape == packed.packed_shape(5, 7, 3) == (3, 5, 3)
    np.testing.assert_array_equal(p[1], w[:, 3:6])
    np.testing.assert_array_equal(p[2], np.pad(w[:, 6:], ((0, 0), (0, 2))))
    np.testing.assert_array_equal(packed.pack(w.T.copy(), True, 3), p)
    with pytest.raises(ValueError, match="expects a 2-d weight and panel > 0"):
        packed.pack(w[None], False, 3)


def test_dense_refuses_mismatched_shapes() -> None:
    p = packed.pack(np.ones((8, 20), np.float32), False, 16)
    x, out, none = np.ones((3, 8), np.float32), np.empty((3, 20), np.float32), np.ones(0, F32)
    with pytest.raises(ValueError, match=r"expected x \(m, k\), the packed weight"):
        packed.dense(np.ones((3, 9), np.float32), p, out, 20, none, 0)
    with pytest.raises(ValueError, match="panels do not cover n columns"):
        packed.dense(x, p, np.empty((3, 40), np.float32), 40, none, 0)
    with pytest.raises(ValueError, match="the bias must have n values"):
        packed.dense(x, p, out, 20, np.ones(7, F32), 0)
    with pytest.raises(ValueError, match="unknown activation index"):
        packed.dense(x, p, out, 20, none, len(packed.ACTIVATIONS))


@nb.njit
def _entry(x, w, out, bias, res, n, act, with_res):  # type: ignore[no-untyped-def]
    return packed.dense_packed_call((x, w, out, bias, res), (n, act, with_res))


def test_the_entry_point_is_dense() -> None:
    """`packed.dense_packed_call` (what kernels call) writes what `packed.dense` does, with
    and without a bias and a residual, and on operands `dense` refuses returns 1 and writes
    nothing."""
    rng = np.random.default_rng(5)
    relu = packed.ACTIVATIONS.index("relu")
    for m, k, n in ((1, 9, 20), (3, 40, 7), (sgemm.MR + 2, 70, 3 * sgemm.NR + 5)):
        x, b = rng.standard_normal((m, k)).astype(F32), rng.standard_normal((k, n)).astype(F32)
        w = packed.pack(b, False, packed.panel_width())
        bias, res = rng.standard_normal(n).astype(F32), rng.standard_normal((m, n)).astype(F32)
        for c, r in ((np.ones(0, F32), None), (bias, None), (bias, res)):
            got, want = np.full((m, n), np.nan, F32), np.full((m, n), np.nan, F32)
            assert _entry(x, w, got, c, got if r is None else r, n, relu, int(r is not None)) == 0
            packed.dense(x, w, want, n, c, relu, r)
            np.testing.assert_array_equal(got, want)
    p = packed.pack(np.ones((8, 20), F32), False, 16)
    x, out, none = np.ones((3, 8), F32), np.zeros((3, 20), F32), np.ones(0, F32)
    assert _entry(np.ones((3, 9), F32), p, out, none, out, 20, 0, 0) == 1
    assert _entry(x, p, out, np.ones(7, F32), out, 20, 0, 0) == 1
    assert _entry(x, p, out, none, out, 20, len(packed.ACTIVATIONS), 0) == 1
    assert _entry(x, p, out, none, np.ones((3, 19), F32), 20, 0, 1) == 1
    np.testing.assert_array_equal(out, 0)


def test_op_type_rule_errors() -> None:
    x = rvm.const(np.ones((2, 8), np.float32))
    w = rvm.const(np.ones((2, 8, 16), np.float32))
    with pytest.raises(IRError, match="40 units need 3 panels of 16, the weight .* has 2"):
        _infer(op.dense_packed(x, w, units=40))
    with pytest.raises(IRError, match="input .* has 9 features"):
        _infer(op.dense_packed(rvm.const(np.ones((2, 9), np.float32)), w, units=30))
    with pytest.raises(IRError, match="must be 3-d"):
        _infer(op.dense_packed(x, rvm.const(np.ones((8, 16), np.float32)), units=16))
    r = rvm.const(np.ones((2, 30), np.int32))
    with pytest.raises(IRError, match="the residual must be float32, got int32"):
        _infer(op.dense_packed(x, w, None, r, units=30))
    with pytest.raises(IRError, match="cannot broadcast shapes"):
        _infer(op.dense_packed(x, w, None, rvm.const(np.ones((3, 30), F32)), units=30))


def _infer(call):  # type: ignore[no-untyped-def]
    from rvm.ir.infer import infer_type

    return infer_type(call)


RNG = np.random.default_rng(1)
W_MATMUL = RNG.standard_normal((70, 3 * sgemm.NR + 5)).astype(np.float32)  # (k, n)
W_DENSE = RNG.standard_normal((61, W_MATMUL.shape[1])).astype(np.float32)  # (units, k)
BIAS = RNG.standard_normal(61).astype(np.float32)


def _model() -> IRModule:
    """x (batch, seq, 70) -> gelu(x @ W1) @ W2.T + b: a matmul and a dense (Gemm transB) of
    constant weights, with odd widths and depths."""
    x = Var("x", tensor(("batch", "seq", 70), "float32"))
    bb = Builder()
    with bb.function("main", [x]):
        h = bb.emit(op.gelu(bb.emit(op.matmul(x, rvm.const(W_MATMUL)))))
        y = bb.emit(op.add(bb.emit(op.dense(h, rvm.const(W_DENSE))), rvm.const(BIAS)))
        bb.emit_output(y)
    return bb.get()


def _ops(mod: IRModule) -> list[str]:
    return [
        b.value.callee.name
        for b in mod["main"].body.bindings
        if isinstance(b.value, Call) and hasattr(b.value.callee, "name")
    ]


def _want(x: np.ndarray) -> np.ndarray:
    return rvm.interpret(_model(), "main", x)


@pytest.fixture(scope="module")
def executable() -> rvm.Executable:
    return rvm.compile(_model())


def test_pass_packs_each_constant_weight_and_joins_epilogues() -> None:
    mod = pack_weights(_model(), panel=16)
    assert _ops(mod) == ["dense_packed", "dense_packed"]
    first, second = (b.value for b in mod["main"].body.bindings)
    n = W_MATMUL.shape[1]
    np.testing.assert_array_equal(first.args[1].data, packed.pack(W_MATMUL, False, 16))
    np.testing.assert_array_equal(second.args[1].data, packed.pack(W_DENSE, True, 16))
    np.testing.assert_array_equal(second.args[2].data, BIAS)
    assert (first.attrs["units"], first.attrs["activation"], len(first.args)) == (n, "gelu", 2)
    assert (second.attrs["units"], second.attrs["activation"]) == (61, "none")


def test_epilogue_stays_when_the_product_has_other_uses() -> None:
    """A product read twice keeps its add; a bias that broadcasts along other axes, and a
    computed one, stay adds."""
    x = Var("x", tensor(("n", 70), "float32"))
    r = Var("r", tensor((61,), "float32"))
    bb = Builder()
    with bb.function("main", [x, r]):
        w = rvm.const(RNG.standard_normal((70, 61)).astype(F32))  # (k, units)
        p = bb.emit(op.dense(x, rvm.const(w.data.T.copy())))
        q = bb.emit(op.relu(p))
        s = bb.emit(op.add(p, q))
        d = bb.emit(op.matmul(x, w))
        e = bb.emit(op.add(d, rvm.const(np.ones((3, 61), F32))))
        g = bb.emit(op.matmul(x, w))
        h = bb.emit(op.add(g, r))
        bb.emit_output(rvm.ir.Tuple((s, e, h)))
    mod = pack_weights(bb.get(), panel=16)
    want = ["dense_packed", "relu", "add", "dense_packed", "add", "dense_packed", "add"]
    assert _ops(mod) == want


def test_executable_holds_the_packed_weights_only() -> None:
    ex = rvm.compile(_model(), build_kernels=False)
    shapes = sorted(c.shape for c in ex.constants if c.ndim >= 2)
    n, width = W_MATMUL.shape[1], packed.panel_width()
    assert shapes == sorted([packed.packed_shape(70, n, width), packed.packed_shape(n, 61, width)])


@pytest.mark.parametrize("shape", [(1, 1), (2, 3), (3, 37)])
def test_model_in_every_exec_mode(executable, exec_mode: str, shape: tuple[int, int]) -> None:
    x = np.random.default_rng(2).standard_normal((*shape, 70)).astype(np.float32)
    got = rvm.VirtualMachine(executable, exec_mode=exec_mode)["main"](x)
    np.testing.assert_allclose(got, _want(x), rtol=1e-4, atol=1e-4)


def test_saved_and_reloaded(executable, exec_mode: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "packed.rvmx"
    executable.save(path)
    back = rvm.load_executable(path)
    x = np.random.default_rng(3).standard_normal((2, 5, 70)).astype(np.float32)
    got = rvm.VirtualMachine(back, exec_mode=exec_mode)["main"](x)
    np.testing.assert_allclose(got, _want(x), rtol=1e-4, atol=1e-4)


def test_numpy_kernels_keep_the_plain_products() -> None:
    ex = rvm.compile(_model(), kernels="numpy")
    assert all(c.ndim <= 2 for c in ex.constants)
    x = np.random.default_rng(4).standard_normal((2, 3, 70)).astype(np.float32)
    np.testing.assert_allclose(rvm.VirtualMachine(ex)["main"](x), _want(x), rtol=1e-4, atol=1e-4)


def test_rows_that_crowd_l1d_are_copied_first() -> None:
    """x's rows a multiple of `gemmshape.L1_SPAN` apart crowd L1d's sets (`gemmcut.crowded`):
    `dense` copies them to rows that do not (`gemmcut.uncrowded`) before the pieces run, along
    the panels and along C's rows, with the bits of the product on x where it lies."""
    k = gemmshape.L1_SPAN // 4  # rows 4 KB apart
    assert gemmcut.crowded(k, sgemm.MR) and gemmcut.crowded(3 * k, sgemm.MR)
    assert not gemmcut.crowded(gemmcut.uncrowded(k, sgemm.MR), sgemm.MR)
    assert not gemmcut.crowded(gemmcut.uncrowded(3 * k // 4, sgemm.MR), sgemm.MR)
    rng = np.random.default_rng(7)
    before = get_num_threads()
    try:
        for threads, m, n in ((1, 2 * sgemm.MR + 1, 3 * sgemm.NR + 5), (2, 67, 40 * sgemm.NR + 1),
                              (2, 130, 3 * sgemm.NR + 7)):  # fmt: skip
            set_num_threads(threads)
            x = rng.standard_normal((m, k)).astype(F32)
            b = rng.standard_normal((k, n)).astype(F32)
            c = rng.standard_normal(n).astype(F32)
            r = rng.standard_normal((m, n)).astype(F32)
            w = packed.pack(b, False, packed.panel_width())
            out, relu = np.full((m, n), np.nan, F32), packed.ACTIVATIONS.index("relu")
            packed.dense(x, w, out, n, c, relu, r)
            where = np.full((m, n), np.nan, F32)  # the same tiles on x's rows where they lie
            packed._panels(x.ctypes.data, k, w.ctypes.data, k, w.shape[2], where.ctypes.data,
                           n, m, n, 0, w.shape[0], c.ctypes.data, relu, r.ctypes.data)  # fmt: skip
            np.testing.assert_array_equal(out, where)
            want = np.maximum(x.astype(np.float64) @ b + c, 0) + r
            np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5 * np.sqrt(k) * 4)
    finally:
        set_num_threads(before)


@pytest.mark.parametrize("m", [1, 3, sgemm.MR + 3, 130])
@pytest.mark.parametrize("k", [0, 9, sgemm.KC + 5])
def test_residual_in_the_epilogue(m: int, k: int) -> None:
    """``act(x @ B + bias) + residual`` on each tile (rows and panels splits on the pool, the
    few-rows path, an empty depth), against NumPy."""
    rng = np.random.default_rng(m + k)
    n = 3 * sgemm.NR + 7
    x = rng.standard_normal((m, k)).astype(F32)
    b = rng.standard_normal((k, n)).astype(F32)
    c = rng.standard_normal(n).astype(F32)
    r = rng.standard_normal((m, n)).astype(F32)
    out = np.full((m, n), np.nan, F32)
    width = packed.panel_width()
    w = packed.pack(b, False, width) if k else np.zeros(packed.packed_shape(0, n, width), F32)
    before = get_num_threads()
    set_num_threads(2)
    try:
        packed.dense(x, w, out, n, c, packed.ACTIVATIONS.index("relu"), r)
    finally:
        set_num_threads(before)
    want = np.maximum(x.astype(np.float64) @ b + c, 0) + r
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5 * np.sqrt(k + 1) * 4)
    with pytest.raises(ValueError, match="the residual must have out's shape"):
        packed.dense(x, w, out, n, c, 0, r[:, 1:].copy())


W_RES = RNG.standard_normal((70, 61)).astype(F32)  # (k, units)


def _residual_model() -> IRModule:
    """x (n, 70), r (k, 61): gelu(x @ W + b) + r, a residual whose rows broadcast at run time
    (n or k of 1), and x @ W + x2 (no bias, the residual of the product's very shape)."""
    x = Var("x", tensor(("n", 70), "float32"))
    r = Var("r", tensor(("k", 61), "float32"))
    bb = Builder()
    with bb.function("main", [x, r]):
        p = bb.emit(op.add(bb.emit(op.matmul(x, rvm.const(W_RES))), rvm.const(BIAS)))
        y = bb.emit(op.add(r, bb.emit(op.gelu(p))))
        q = bb.emit(op.matmul(x, rvm.const(W_RES)))
        z = bb.emit(op.add(q, bb.emit(op.tanh(q))))  # q read twice: stays an add
        s = bb.emit(op.add(bb.emit(op.matmul(x, rvm.const(W_RES))), bb.emit(op.exp(z))))
        bb.emit_output(rvm.ir.Tuple((y, s)))
    return bb.get()


def test_pass_joins_the_residual_last() -> None:
    mod = pack_weights(_residual_model(), panel=16)
    assert _ops(mod) == ["dense_packed", "dense_packed", "tanh", "add", "exp", "dense_packed"]
    calls = [b.value for b in mod["main"].body.bindings if _ops_of(b) == "dense_packed"]
    first, last = calls[0], calls[2]
    assert (first.attrs["activation"], len(first.args)) == ("gelu", 4)
    np.testing.assert_array_equal(first.args[2].data, BIAS)
    np.testing.assert_array_equal(last.args[2].data, np.zeros(61, F32))  # zeros: no bias
    assert len(calls[1].args) == 2


def _ops_of(binding) -> str:  # type: ignore[no-untyped-def]
    value = binding.value
    return value.callee.name if isinstance(value, Call) and hasattr(value.callee, "name") else ""


@pytest.mark.parametrize("n, k", [(5, 5), (1, 4), (4, 1)])
def test_residual_in_every_exec_mode(exec_mode: str, n: int, k: int) -> None:
    """The residual in the GEMM (same shape) and broadcast after it (n or k of 1)."""
    ex = _residual_executable()
    rng = np.random.default_rng(n * 10 + k)
    x = rng.standard_normal((n, 70)).astype(F32)
    r = rng.standard_normal((k, 61)).astype(F32)
    got = rvm.VirtualMachine(ex, exec_mode=exec_mode)["main"](x, r)
    want = rvm.interpret(_residual_model(), "main", x, r)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


_RESIDUAL: list[rvm.Executable] = []


def _residual_executable() -> rvm.Executable:
    if not _RESIDUAL:
        _RESIDUAL.append(rvm.compile(_residual_model()))
    return _RESIDUAL[0]


@pytest.mark.parametrize("parts", [3, 5, 7])
def test_a_product_cut_along_panels_takes_a_multiple_of_the_threads(parts) -> None:
    """`packed._cut` rounds its pieces to a multiple of the threads where there are as many
    (`blas.even`): 3 pieces on 2 threads left one thread idle a third of the time."""
    before = get_num_threads()
    set_num_threads(2)
    try:
        m, k, panel = 64, 256, 16
        n = parts * packed.SPLIT_MIN_MNK // (m * k)  # work // SPLIT_MIN_MNK == parts
        pieces, step, along_n = packed._cut(m, k, n, panel)
        assert along_n and pieces == parts - 1 and step == pieces
        # each piece an equal share of the panels: the two threads' shares differ by a
        # piece's rounding at most (14 panels in 6: not 3, 3, 3, 3, 2)
        panels = -(-n // panel)
        shares = [hi - lo for lo, hi in (parfor.piece_range(p, pieces, panels, 1)
                                         for p in range(pieces))]  # fmt: skip
        assert sum(shares) == panels and max(shares) - min(shares) <= 1
    finally:
        set_num_threads(before)
