"""Converters whose general cases OpInfo samples reach: adaptive pooling with bins that do not
divide, avg_pool's divisor_override, index_put by several index tensors or a boolean mask,
scatter_reduce without the tensor's own values and with "mean", nonzero of a 0-d tensor; and
the Core ATen ops kept whole through decomposition (pads, select_scatter, var.dim,
squeeze.dim, the 1-d pools), batch norm's empty saved statistics in eval; grid_sample in every
mode and padding; the forms the CNN head and linear take (those from_onnx gets)."""

from __future__ import annotations

import pytest

import rvm

torch = pytest.importorskip("torch")
from torch_helpers import check_eager  # noqa: E402


class Fn(torch.nn.Module):
    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


# Each case's module, exported once for all the exec modes: torch.export is most of a case's
# CPU, and what it makes depends on the function, the values its closure holds and the
# operands' shapes and dtypes (and integer operands' values: indices, masks), not on the
# floats drawn for each mode.
_EXPORTED: dict[tuple, rvm.IRModule] = {}


def _key(a) -> tuple:
    values = None if a.is_floating_point() else repr(a.tolist())
    return (tuple(a.shape), str(a.dtype), values)


def _export(model: Fn, args: tuple) -> rvm.IRModule:
    fn = model.fn
    cells = tuple(repr(c.cell_contents) for c in getattr(fn, "__closure__", None) or ())
    key = (getattr(fn, "__code__", fn), cells, tuple(_key(a) for a in args))
    if key not in _EXPORTED:
        _EXPORTED[key] = rvm.from_torch(model, args=args)
    return _EXPORTED[key]


def _check(fn, args: tuple, exec_mode: str) -> None:
    model = Fn(fn)
    check_eager(model, _export(model, args), [args], exec_mode, kernels="numpy")


@pytest.mark.parametrize("size", [(5, 3), (1, 4), (7, 7)])
def test_adaptive_avg_pool_with_overlapping_bins(size: tuple, exec_mode: str) -> None:
    x = torch.randn(2, 3, 8, 6)
    _check(lambda x: torch.nn.functional.adaptive_avg_pool2d(x, size), (x,), exec_mode)


def test_adaptive_avg_pool3d_unbatched(exec_mode: str) -> None:
    x = torch.randn(2, 5, 6, 7)
    _check(lambda x: torch.nn.functional.adaptive_avg_pool3d(x, (3, 4, 2)), (x,), exec_mode)


@pytest.mark.parametrize("ceil_mode", [False, True])
def test_avg_pool_divisor_override(ceil_mode: bool, exec_mode: str) -> None:
    x = torch.randn(1, 2, 7, 6)

    def pool(x):
        return torch.nn.functional.avg_pool2d(x, 3, 2, 1, ceil_mode, True, divisor_override=5)

    _check(pool, (x,), exec_mode)


def test_index_put_by_two_index_tensors_after_a_slice(exec_mode: str) -> None:
    x, v = torch.randn(3, 5, 4, 2), torch.randn(3, 2, 2, 2)
    i, j = torch.tensor([0, -1]), torch.tensor([[1], [3]])

    def put(x, v, i, j):
        y = x.clone()
        y[:, i, j] = v
        return y

    _check(put, (x, v, i, j), exec_mode)
    _check(put, (x, v[0, 0, 0], i, j), exec_mode)


@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put_by_a_boolean_mask(accumulate: bool, exec_mode: str) -> None:
    x, mask = torch.randn(4, 3), torch.tensor([True, False, True, True])
    rows, one = torch.randn(3), torch.randn(1)
    _check(lambda x, m, v: torch.index_put(x, (m,), v, accumulate), (x, mask, rows), exec_mode)
    _check(lambda x, m, v: torch.index_put(x, (m,), v, accumulate), (x, mask, one), exec_mode)


@pytest.mark.parametrize("reduce", ["sum", "prod", "amax", "amin", "mean"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(reduce: str, include_self: bool, exec_mode: str) -> None:
    x, src = torch.randn(3, 5), torch.randn(3, 4)
    index = torch.tensor([[0, 1, 0, 4], [2, 2, 2, 2], [3, 0, 3, 0]])

    def scatter(x, i, s):
        return torch.scatter_reduce(x, 1, i, s, reduce, include_self=include_self)

    _check(scatter, (x, index, src), exec_mode)


@pytest.mark.parametrize("value", [0.0, 2.5])
def test_nonzero_of_a_0d_tensor(value: float, exec_mode: str) -> None:
    _check(torch.nonzero, (torch.tensor(value),), exec_mode)


@pytest.mark.parametrize(
    ("mode", "pad", "shape"),
    [
        ("reflect", (2, 1), (2, 3, 6)),
        ("reflect", (1, 2, 2, 1), (2, 3, 5, 6)),
        ("reflect", (1, 2, 0, 1, 2, 1), (1, 2, 4, 5, 6)),
        ("replicate", (1, 2, 3, 0), (2, 3, 5, 6)),
        ("replicate", (2, 0, 1, 1, 0, 3), (1, 2, 4, 5, 6)),
    ],
)
def test_reflection_and_replication_pads_convert_whole(
    mode: str, pad: tuple, shape: tuple, exec_mode: str
) -> None:
    x = torch.randn(*shape)
    _check(lambda x: torch.nn.functional.pad(x, pad, mode=mode), (x,), exec_mode)


def test_select_scatter_var_dim_and_squeeze_dim(exec_mode: str) -> None:
    def fn(x, src):
        y = torch.select_scatter(x, src, 1, 2)
        return torch.ops.aten.var.dim(y, [0, 2], True, True), torch.squeeze(y[:, :1], 1)

    _check(fn, (torch.randn(3, 4, 5), torch.randn(3, 5)), exec_mode)


def test_batch_norm_eval_saved_statistics_are_empty(exec_mode: str) -> None:
    def fn(x, w, b, mean, var):
        return torch.ops.aten._native_batch_norm_legit_no_training(x, w, b, mean, var, 0.1, 1e-5)

    args = (torch.randn(2, 3, 4), torch.randn(3), torch.randn(3), torch.randn(3), torch.rand(3))
    _check(fn, args, exec_mode)


@pytest.mark.parametrize(
    "pad", [(0, 0, -2, 3), (2, -3, 0, 0), (-1, -1, -1, -1), (-6, 2, 0, 0), (0, 0, 3, -5)]
)
def test_replication_pad_with_negative_widths_crops(pad: tuple, exec_mode: str) -> None:
    x = torch.randn(2, 3, 5, 6)
    _check(lambda x: torch.nn.functional.pad(x, pad, mode="replicate"), (x,), exec_mode)


def _op_names(mod: rvm.IRModule) -> set[str]:
    from rvm.ir import expr as E
    from rvm.ir.analysis import walk

    calls = [e for e in walk(mod["main"]) if isinstance(e, E.Call)]
    return {c.callee.name for c in calls if isinstance(c.callee, E.Op)}


@pytest.mark.parametrize("keepdim", [True, False])
def test_mean_over_h_and_w_is_a_global_pool(keepdim: bool, exec_mode: str) -> None:
    """A CNN's head (mean over H and W of NCHW) takes the global pool, as from_onnx's does."""
    model = Fn(lambda x: x.mean((-2, 3), keepdim=keepdim) * 2.0)
    x = torch.randn(2, 3, 5, 4)
    mod = _export(model, (x,))
    assert "global_avg_pool2d" in _op_names(mod) and "mean" not in _op_names(mod)
    check_eager(model, mod, [(x,)], exec_mode, kernels="numpy")


def test_linear_of_a_matrix_is_dense_and_of_a_batch_a_matmul(exec_mode: str) -> None:
    """torch.onnx writes linear as Gemm (dense) for a matrix, as MatMul for a batch of them:
    from_torch takes the same forms, so both frontends meet the same kernels."""
    layer = torch.nn.Linear(6, 4)
    for x, form in ((torch.randn(3, 6), "dense"), (torch.randn(2, 3, 6), "matmul")):
        mod = rvm.from_torch(layer.eval(), args=(x,))
        assert form in _op_names(mod)
        check_eager(layer, mod, [(x,)], exec_mode, kernels="numpy")


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_grid_sample_modes_and_paddings(
    mode: str, padding: str, align_corners: bool, exec_mode: str
) -> None:
    """grid_sampler_2d, with grid points outside [-1, 1] so that every padding matters."""
    x = torch.randn(2, 3, 5, 7)
    grid = torch.rand(2, 4, 6, 2) * 2.6 - 1.3

    def fn(x, grid):
        return torch.nn.functional.grid_sample(
            x, grid, mode=mode, padding_mode=padding, align_corners=align_corners
        )

    _check(fn, (x, grid), exec_mode)


def test_grid_sample_refuses_bicubic() -> None:
    x, grid = torch.randn(1, 1, 3, 3), torch.zeros(1, 2, 2, 2)
    model = Fn(lambda x, g: torch.nn.functional.grid_sample(x, g, mode="bicubic"))
    with pytest.raises(rvm.TorchImportError, match="not bicubic"):
        rvm.from_torch(model, args=(x, grid))


def test_one_d_pools_convert_whole(exec_mode: str) -> None:
    def fn(x):
        a = torch.nn.functional.avg_pool1d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False)
        return a, torch.nn.functional.adaptive_avg_pool1d(x, 4)

    x = torch.randn(2, 3, 9)
    assert {"avg_pool1d"} <= _op_names(_export(Fn(fn), (x,)))
    _check(fn, (x,), exec_mode)
