"""A fast sample of the OpInfo conformance run (`rvm.testing.torch_opinfo`): a few OpInfos
across categories, each sample compared with eager PyTorch in every exec mode."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("expecttest")
from rvm.testing import torch_opinfo  # noqa: E402

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
