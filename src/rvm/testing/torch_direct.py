"""Samples that call Core ATen overloads directly, for the OpInfo conformance run.

Some Core ATen overloads are never in the graph of any OpInfo sample after
``run_decompositions()``: PyTorch's public functions reach them only through other overloads
(``torch.var`` exports as ``var.correction``, not ``var.dim``), or only in training, or only
with a scalar where the OpInfo samples pass a tensor. Each `DIRECT` entry calls
``torch.ops.aten.<name>.<overload>`` itself on small inputs, so the run (`torch_opinfo`)
exports, imports and compares it with eager PyTorch like any OpInfo sample. Each entry is
labelled ``aten.<name>.<overload>`` in the results.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DirectInfo:
    """Stands in for an OpInfo: what `torch_opinfo.run_sample` reads of one."""

    name: str
    op: Callable[..., Any]
    variant_test_name: str = ""


def _aten(name: str) -> Callable[..., Any]:
    import torch

    packet, overload = name.split(".")
    return getattr(getattr(torch.ops.aten, packet), overload)


def _cases() -> dict[str, list[tuple[tuple[Any, ...], dict[str, Any]]]]:
    """Per overload (``name.overload``), its samples as (positional, keyword) arguments; the
    first positional argument is the sample's input."""
    import torch

    g = torch.Generator().manual_seed(0)

    def f(*shape: int) -> Any:
        return torch.randn(*shape, generator=g)

    def i(*shape: int) -> Any:
        return torch.randint(-50, 50, shape, generator=g)

    c, w, b = 3, f(3), f(3)
    mean, var = f(3), f(3).abs() + 0.5
    index = torch.tensor([[0, 2, 1], [1, 0, 3]])
    return {
        **_backward_cases(f),
        "_native_batch_norm_legit.no_stats": [((f(2, c, 4, 5), w, b, True, 0.1, 1e-5), {})],
        "_native_batch_norm_legit_no_training.default": [
            ((f(2, c, 4, 5), w, b, mean, var, 0.1, 1e-5), {}),
            ((f(4, c), None, None, mean, var, 0.1, 1e-3), {}),
        ],
        "bitwise_and.Scalar": [((i(3, 4), 6), {})],
        "bitwise_or.Scalar": [((i(3, 4), 5), {})],
        "bitwise_xor.Scalar": [((i(3, 4), 9), {})],
        "div.Scalar_mode": [
            ((f(3, 4) * 5, 1.5), {"rounding_mode": "floor"}),
            ((f(3, 4) * 5, -1.5), {"rounding_mode": "trunc"}),
        ],
        "embedding_dense_backward.default": [
            ((f(2, 3, 4), torch.tensor([[0, 2, 2], [5, 2, 0]]), 7, 2, False), {}),
            ((f(2, 3, 4), torch.tensor([[0, 2, 2], [5, 2, 0]]), 7, -1, True), {}),
            ((f(5, 4), torch.tensor([1, 1, 3, 0, 1]), 4, 0, True), {}),
        ],
        "fill.Scalar": [((f(3, 4), 2.5), {})],
        "native_dropout.default": [((f(3, 4), 0.5, False), {})],
        "prod.dim_int": [((f(3, 4), 1), {}), ((f(2, 3, 4), 0, True), {})],
        "reflection_pad1d.default": [((f(2, 3, 6), [2, 1]), {})],
        "reflection_pad2d.default": [((f(2, 3, 5, 6), [1, 2, 2, 1]), {})],
        "reflection_pad3d.default": [((f(1, 2, 4, 5, 6), [1, 2, 0, 1, 2, 1]), {})],
        "replication_pad2d.default": [((f(2, 3, 5, 6), [1, 2, 3, 0]), {})],
        "replication_pad3d.default": [((f(1, 2, 4, 5, 6), [2, 0, 1, 1, 0, 3]), {})],
        "scatter.value": [((f(2, 5), 1, index, 2.5), {})],
        "select_scatter.default": [((f(3, 4, 5), f(3, 5), 1, 2), {})],
        "squeeze.dim": [((f(3, 1, 4), 1), {}), ((f(3, 1, 4), -2), {})],
        "upsample_nearest2d.vec": [
            ((f(2, 3, 4, 5), [8, 7], None), {}),
            ((f(2, 3, 4, 5), None, [2.0, 3.0]), {}),
        ],
        "var.dim": [((f(3, 4, 5), [1]), {}), ((f(3, 4, 5), [0, 2], False, True), {})],
    }


def _backward_cases(f: Callable[..., Any]) -> dict[str, list]:
    """Backward overloads, each given an output gradient of the forward op's output shape."""
    import torch

    aten, fn = torch.ops.aten, torch.nn.functional

    def avg(x: Any, *args: Any) -> tuple:
        return (f(*fn.avg_pool2d(x, *args[:5], divisor_override=args[5]).shape), x, *args)

    def peak(x: Any, *args: Any) -> tuple:
        out, indices = aten.max_pool2d_with_indices.default(x, *args)
        return (f(*out.shape), x, *args, indices)

    def conv(x: Any, w: Any, s: list, p: list, d: list, g: int, mask: list) -> tuple:
        grad = f(*fn.conv2d(x, w, None, s, p, d, g).shape)
        return (grad, x, w, [w.shape[0]], s, p, d, False, [0, 0], g, mask)

    return {
        "_adaptive_avg_pool2d_backward.default": [
            ((f(2, 3, 2, 3), f(2, 3, 5, 7)), {}),
            ((f(1, 2, 3, 3), f(1, 2, 7, 6)), {}),
        ],
        "avg_pool2d_backward.default": [
            (avg(f(2, 3, 6, 7), [3, 2], [2, 2], [1, 1], False, True, None), {}),
            (avg(f(2, 3, 6, 7), [3, 2], [2, 2], [1, 1], True, False, None), {}),
            (avg(f(1, 2, 5, 4), [2, 2], [1, 2], [0, 1], False, True, 3), {}),
        ],
        "convolution_backward.default": [
            ((conv(f(2, 3, 7, 8), f(4, 3, 3, 2), [2, 1], [1, 0], [1, 2], 1, [True] * 3)), {}),
            ((conv(f(1, 4, 6, 6), f(6, 2, 3, 3), [1, 1], [1, 1], [1, 1], 2, [True] * 3)), {}),
        ],
        "max_pool2d_with_indices_backward.default": [
            (peak(f(2, 3, 6, 7), [3, 2], [2, 2], [1, 1], [1, 1], False), {}),
            (peak(f(1, 2, 5, 5), [2, 2], [2, 2], [0, 0], [1, 1], True), {}),
        ],
    }


def overloads() -> list[str]:
    """The labels of the direct samples' overloads (``aten.var.dim``...)."""
    return [f"aten.{name}" for name in _cases()]


def samples(names: list[str] | None) -> Iterator[tuple[DirectInfo, int, Any]]:
    """(info, index, sample) for the direct samples whose overload name contains one of
    ``names`` (all when ``names`` is empty or None)."""
    from torch.testing._internal.opinfo.core import SampleInput

    for name, calls in _cases().items():
        label = f"aten.{name}"
        if names and not any(n in label for n in names):
            continue
        info = DirectInfo(label, _aten(name))
        for k, (args, kwargs) in enumerate(calls):
            yield info, k, SampleInput(args[0], args=args[1:], kwargs=kwargs)
