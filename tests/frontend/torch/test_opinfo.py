"""A fast sample of the OpInfo conformance run (`rvm.testing.torch_opinfo`): a few OpInfos
across categories, each sample compared with eager PyTorch in every exec mode."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("expecttest")
from rvm.testing import torch_direct, torch_opinfo  # noqa: E402

SAMPLE = ("softmax", "nn.functional.relu", "matmul", "sum", "cat", "where", "nn.functional.conv2d")


@pytest.mark.parametrize("name", SAMPLE)
def test_opinfo_samples_pass(name: str) -> None:
    counted = []
    for info, k, sample in torch_opinfo.samples([name], per_op=2):
        if info.name != name:
            continue
        result = torch_opinfo.run_sample(info, k, sample, "jit")
        if result is not None:
            counted.append(result)
    assert counted, f"no sample of {name} exported"
    failed = [(r.index, r.status, r.reason) for r in counted if r.status != "pass"]
    assert not failed


def test_per_overload_blames_only_the_named_overload() -> None:
    R = torch_opinfo.SampleResult
    results = [
        R("a", 0, "pass", ["aten.add.Tensor"]),
        R("b", 0, "import", ["aten.add.Tensor", "aten.i0.default"], "no", ["aten.i0.default"]),
        R("c", 0, "mismatch", ["aten.mul.Tensor", "aten.add.Tensor"], "off"),
    ]
    table = torch_opinfo.per_overload(results)
    assert table["aten.add.Tensor"]["status"] == "partly"
    assert (table["aten.add.Tensor"]["passed"], table["aten.add.Tensor"]["total"]) == (1, 2)
    assert table["aten.i0.default"]["status"] == "fail"
    assert table["aten.mul.Tensor"]["reason"] == "c[0] mismatch: off"


def test_opinfos_without_float32_take_integer_samples() -> None:
    import torch
    from torch.testing._internal.common_methods_invocations import op_db

    by_name = {info.name: info for info in op_db}
    assert torch_opinfo.sample_dtype(by_name["bitwise_and"]) == torch.int64
    assert torch_opinfo.sample_dtype(by_name["add"]) == torch.float32


def test_undefined_values_compare_shapes_and_dtypes_only() -> None:
    import numpy as np

    got, expected = [np.ones((2, 3), np.float32)], [np.zeros((2, 3), np.float32)]
    assert torch_opinfo._compare(got, expected) == "output 0 differs by 1"
    assert torch_opinfo._compare(got, expected, values=False) == ""
    wrong = [np.zeros((3, 2), np.float32)]
    assert "shape" in torch_opinfo._compare(wrong, expected, values=False)


def test_a_rerun_without_anchor_keeps_the_earlier_tvm_result(tmp_path) -> None:
    import json

    R = torch_opinfo.SampleResult
    first = R("a", 0, "import", ["aten.add.Tensor"], anchor=["pass", ""])
    again = R("a", 0, "pass", ["aten.add.Tensor"])
    for name, r in (("1.jsonl", first), ("2.jsonl", again)):
        (tmp_path / name).write_text(json.dumps(vars(r)) + "\n")
    (merged,) = torch_opinfo._read_logs([str(tmp_path / "1.jsonl"), str(tmp_path / "2.jsonl")])
    assert (merged.status, merged.anchor) == ("pass", ["pass", ""])
    figures = torch_opinfo.summary([merged])
    assert (figures["tvm_samples_passed"], figures["samples_passed"]) == (1, 1)


def test_tvm_anchor_runs_an_exported_program() -> None:
    pytest.importorskip("tvm")
    import torch

    from rvm.testing import tvm_anchor

    class Add(torch.nn.Module):
        def forward(self, x, y):
            return torch.add(x, y).sum(1)

    x, y = torch.randn(3, 4), torch.randn(4)
    ep = torch.export.export(Add(), (x, y))
    expected = [(x + y).sum(1).numpy()]
    inputs = [x.numpy(), y.numpy()]
    assert tvm_anchor.check(ep, inputs, expected, torch_opinfo._compare) == ("pass", "")
    status, reason = tvm_anchor.check(ep, inputs, [expected[0] + 1], torch_opinfo._compare)
    assert (status, reason) == ("mismatch", "output 0 differs by 1")


# The direct samples run on NumPy kernels by default (the import, the overload reached and
# every exec mode); on jit kernels, each a Numba compile of seconds, with -m slow.
@pytest.mark.parametrize("kernels", ["numpy", pytest.param("jit", marks=pytest.mark.slow)])
@pytest.mark.parametrize("name", torch_direct.overloads())
def test_direct_samples_reach_their_overload_and_pass(name: str, kernels: str) -> None:
    results = [
        torch_opinfo.run_sample(info, k, sample, kernels)
        for info, k, sample in torch_direct.samples([name])
        if info.name == name
    ]
    assert results and all(r is not None for r in results)
    assert [(r.index, r.status, r.reason) for r in results if r.status != "pass"] == []
    assert all(name in r.overloads for r in results), [r.overloads for r in results]


def test_direct_samples_follow_the_opinfo_samples() -> None:
    found = list(torch_opinfo.samples(["aten.squeeze.dim"], per_op=1))
    assert [(info.name, k) for info, k, _ in found] == [("aten.squeeze.dim", 0)]
    assert not list(torch_opinfo.samples(["aten.squeeze.dim"], per_op=1, stop=10))


def test_expected_failures_are_a_current_record() -> None:
    """The expected-failures file (`torch_opinfo --report --write`) names real ATen overloads;
    an overload it lists as unsupported still has no converter (else the file is stale and
    must be regenerated); every Core ATen overload with no converter is listed; and the
    Core ATen overloads it does not list (they pass every sample) meet the goal of 170."""
    import torch

    from rvm.frontend.torch import converters  # noqa: F401 - fills the registry
    from rvm.frontend.torch.registry import supported

    expected = torch_opinfo.read_expected()
    assert expected
    for name in expected:
        _, packet, overload = name.split(".")
        assert hasattr(getattr(torch.ops.aten, packet), overload), name
    converted = set(supported())
    stale = [n for n, why in expected.items() if "unsupported op" in why and f"{n}:" in why]
    assert sorted(set(stale) & converted) == []
    core = torch_opinfo.core_overloads()
    assert sorted(set(core) - converted - set(expected)) == []
    assert len(set(core) - set(expected)) >= 170
