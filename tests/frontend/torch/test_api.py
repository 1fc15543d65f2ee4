"""rvm.from_torch: the API, names and types of main, params, errors."""

from __future__ import annotations

import numpy as np
import pytest

import rvm
from rvm.ir import TensorType

torch = pytest.importorskip("torch")
from torch.export import Dim  # noqa: E402
from torch_helpers import check_eager  # noqa: E402


class Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(torch.nn.functional.gelu(self.fc1(x)))


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return Mlp().eval()


def test_from_torch_is_a_lazy_export_of_rvm() -> None:
    from rvm.frontend.torch import from_torch

    assert rvm.from_torch is from_torch
    assert "from_torch" in dir(rvm) and "TorchImportError" in dir(rvm)
    assert issubclass(rvm.TorchImportError, rvm.IRError)


def test_module_and_exported_program_give_main_with_user_inputs(exec_mode: str) -> None:
    model = _mlp()
    x = torch.randn(2, 8)
    for mod in (
        rvm.from_torch(model, args=(x,)),
        rvm.from_torch(torch.export.export(model, (x,))),
    ):
        (param,) = mod["main"].params
        assert param.name == "x" and param.type == TensorType((2, 8), "float32")
        check_eager(model, mod, [(x,)], exec_mode)


def test_dims_keep_their_names_and_ranges(exec_mode: str) -> None:
    model = _mlp()
    shapes = {"x": {0: Dim("batch", min=1, max=32)}}
    mod = rvm.from_torch(model, args=(torch.randn(2, 8),), dynamic_shapes=shapes)
    assert mod["main"].params[0].type == TensorType(("batch", 8), "float32")
    assert mod.attrs["torch_dim_ranges"] == {"batch": (1, 32)}
    check_eager(model, mod, [(torch.randn(b, 8),) for b in (1, 3, 7)], exec_mode)
    # an exported program keeps only torch's symbols; dynamic_shapes names them
    ep = torch.export.export(model, (torch.randn(2, 8),), dynamic_shapes=shapes)
    named = rvm.from_torch(ep, dynamic_shapes=shapes)
    assert named["main"].params[0].type.shape[0] == "batch"


def test_params_inputs_lets_weights_be_swapped(exec_mode: str) -> None:
    model = _mlp()
    x = torch.randn(3, 8)
    mod = rvm.from_torch(model, args=(x,), params="inputs")
    names = [p.name for p in mod["main"].params]
    assert names == ["x", "fc1_weight", "fc1_bias", "fc2_weight", "fc2_bias"]
    vm = rvm.VirtualMachine(rvm.compile(mod), exec_mode=exec_mode)
    other = _mlp()
    with torch.no_grad():
        for p in other.parameters():
            p.mul_(-0.5)
        ref = other(x).numpy()
    weights = [p.detach().numpy() for p in other.parameters()]
    np.testing.assert_allclose(vm["main"](x.numpy(), *weights), ref, rtol=1e-5, atol=1e-6)


def test_outputs_are_flattened_as_torch_export_flattens_them(exec_mode: str) -> None:
    class Tree(torch.nn.Module):
        def forward(self, x):
            return {"a": x + 1, "b": [x * 2, (x - 1, x.sum())]}

    x = torch.randn(2, 3)
    mod = rvm.from_torch(Tree(), args=(x,))
    vm = rvm.VirtualMachine(rvm.compile(mod), exec_mode=exec_mode)
    got = vm["main"](x.numpy())
    ref = torch.utils._pytree.tree_leaves(Tree()(x))
    assert isinstance(got, tuple) and len(got) == 4
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g, r.numpy(), rtol=1e-6)


def test_every_unsupported_overload_is_listed_with_its_nodes() -> None:
    class Odd(torch.nn.Module):
        def forward(self, x):
            return torch.fft.rfft(x).abs() + torch.special.i0(x)[..., :5]

    with pytest.raises(rvm.TorchImportError) as err:
        rvm.from_torch(Odd(), args=(torch.randn(2, 8),))
    text = str(err.value)
    assert "unsupported op(s)" in text
    assert "aten._fft_r2c.default: _fft_r2c" in text
    assert "aten.i0.default: i0" in text


def test_mutated_buffers_are_refused_with_advice() -> None:
    bn = torch.nn.BatchNorm1d(4).train()
    with pytest.raises(rvm.TorchImportError, match=r"writes buffer 'running_mean'.*eval mode"):
        rvm.from_torch(bn, args=(torch.randn(3, 4),))


def test_batch_norm_in_eval_mode_converts(exec_mode: str) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4)).eval()
    model[1].running_mean.uniform_(-1, 1)
    model[1].running_var.uniform_(0.5, 2)
    x = torch.randn(2, 3, 8, 8)
    check_eager(model, rvm.from_torch(model, args=(x,)), [(x,)], exec_mode)


def test_mutated_inputs_are_refused() -> None:
    class Inplace(torch.nn.Module):
        def forward(self, x):
            x.add_(1)
            return x * 2

    with pytest.raises(rvm.TorchImportError, match=r"writes input 'x' in place"):
        rvm.from_torch(Inplace(), args=(torch.randn(3),))


def test_bad_arguments_are_refused() -> None:
    model = _mlp()
    x = torch.randn(2, 8)
    with pytest.raises(ValueError, match="params must be one of"):
        rvm.from_torch(model, args=(x,), params="weights")
    with pytest.raises(ValueError, match="needs args"):
        rvm.from_torch(model)
    with pytest.raises(ValueError, match="args are for an nn.Module"):
        rvm.from_torch(torch.export.export(model, (x,)), args=(x,))
    with pytest.raises(TypeError, match="ExportedProgram or an nn.Module, got str"):
        rvm.from_torch("model.pt")


def test_export_failures_become_torch_import_errors() -> None:
    class DataDependent(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return x
            return -x

    with pytest.raises(rvm.TorchImportError, match="torch.export could not export"):
        rvm.from_torch(DataDependent(), args=(torch.randn(3),))


def test_integer_promotion_follows_torch(exec_mode: str) -> None:
    class Mixed(torch.nn.Module):
        def forward(self, i, x):
            return i / 2, i * 2.5, i + x, i // 3, x.to(torch.int32) % 3

    i = torch.arange(-6, 6).reshape(3, 4)
    x = torch.randn(3, 4) * 10
    check_eager(Mixed(), rvm.from_torch(Mixed(), args=(i, x)), [(i, x)], exec_mode, rtol=1e-6)


def test_dim_ranges_are_checked_at_entry_and_survive_save(exec_mode: str, tmp_path) -> None:
    model = torch.nn.Linear(4, 2)
    shapes = {"input": {0: Dim("batch", min=2, max=8)}}
    mod = rvm.from_torch(model, args=(torch.randn(3, 4),), dynamic_shapes=shapes)
    ex = rvm.compile(mod)
    ex.save(str(tmp_path / "m.rvmx"))
    for e in (ex, rvm.load_executable(str(tmp_path / "m.rvmx"))):
        vm = rvm.VirtualMachine(e, exec_mode=exec_mode)
        assert vm["main"](np.ones((8, 4), np.float32)).shape == (8, 2)
        for batch in (1, 9):
            with pytest.raises(
                rvm.ShapeError,
                match=rf"main: argument 0 'input' has batch = {batch}, outside the range "
                r"2 <= batch <= 8",
            ):
                vm["main"](np.ones((batch, 4), np.float32))
            for batch in (2, 8):  # the bounds are in range; a refused call leaves no trace
                assert vm["main"](np.ones((batch, 4), np.float32)).shape == (batch, 2)


def test_one_sided_dim_ranges(exec_mode: str) -> None:
    """A range with no upper bound checks its lower one, a max alone (torch.export's min is
    then 0) its upper one; the native mode's fast path checks them in its entry, the message
    is the VM's own."""
    model = torch.nn.Linear(4, 2)
    x = torch.randn(3, 4, 5)
    for dim, bad, bounds in [
        (Dim("rows", min=3), 2, "3 <= rows"),
        (Dim("rows", max=6), 7, "0 <= rows <= 6"),
    ]:
        mod = rvm.from_torch(
            torch.nn.Sequential(torch.nn.Flatten(0, 1), model),
            args=(x.transpose(1, 2),),
            dynamic_shapes={"input": {0: dim}},
        )
        vm = rvm.VirtualMachine(rvm.compile(mod), exec_mode=exec_mode)
        for _ in range(2):
            assert vm["main"](np.ones((4, 5, 4), np.float32)).shape == (20, 2)
            with pytest.raises(rvm.ShapeError, match=rf"has rows = {bad}, outside the range "):
                vm["main"](np.ones((bad, 5, 4), np.float32))
        with pytest.raises(rvm.ShapeError, match=rf"outside the range {bounds}$"):
            vm["main"](np.ones((bad, 5, 4), np.float32))


class _Precise(torch.nn.Module):
    def forward(self, x, y):
        return torch.log1p(x), torch.expm1(x), torch.logaddexp(x * 1e9, y)


def test_log1p_expm1_logaddexp_keep_their_precision(exec_mode: str) -> None:
    """They map to rvm's ops, not ``log(1 + x)``, ``exp(x) - 1`` (which give 0 for tiny x in
    float32) or ``log(exp(a) + exp(b))`` (which overflows)."""
    x = torch.tensor([1e-8, -3e-9, 2e-7, 1e-10])
    y = torch.tensor([100.0, -1e4, 0.0, float("-inf")])
    model = _Precise().eval()
    check_eager(model, rvm.from_torch(model, args=(x, y)), [(x, y)], exec_mode, rtol=1e-6)
