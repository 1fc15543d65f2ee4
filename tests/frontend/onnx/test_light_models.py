"""The 9 light CNNs shipped with onnx, with random weights, against ONNX Runtime.

Each model's weights (``ConstantOfShape(shape, 0.02)`` in the files) become seeded random
values, and the logits before the final Softmax become an extra output; rvm must match ONNX
Runtime on them within 1e-4 relative error with the same top-1 class, in every exec mode (with
jit kernels the native mode runs them natively, weights bound at load: no fallback).
Numpy and jit kernels run for all nine under ``-m slow`` (the cold jit compiles take minutes on 2
cores, and vgg19's weights alone are 548 MB); the default run keeps a sample, `SAMPLE`.
"""

from __future__ import annotations

import os

import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import rvm  # noqa: E402
from rvm.testing.onnx_models import (  # noqa: E402
    LIGHT_MODELS,
    compare_with_ort,
    expose_logits,
    light_model_path,
    random_inputs,
    randomize_weights,
)


def _check(name: str, kernels: str) -> None:
    path = light_model_path(name)
    if not os.path.exists(path):
        pytest.skip(f"{path} is not shipped with this onnx")
    model = expose_logits(randomize_weights(onnx.load(path), seed=0))
    ex = rvm.compile(rvm.from_onnx(model), kernels=kernels)
    inputs = random_inputs(model, seed=1)
    for mode in ("bytecode", "compiled", "native"):
        vm = rvm.VirtualMachine(ex, exec_mode=mode)
        if mode == "native" and kernels == "jit":
            assert vm.native_report().fallbacks == {}, (name, str(vm.native_report()))
        result = compare_with_ort(vm["main"], model, inputs)
        assert result.rel_err <= 1e-4, (name, kernels, mode, str(result))
        assert result.top1_equal, (name, kernels, mode, str(result))
        probs = compare_with_ort(vm["main"], model, inputs, 0)
        assert probs.rel_err <= 1e-4, (name, kernels, mode, "probabilities", str(probs))


SAMPLE = {"numpy": ("squeezenet", "shufflenet"), "jit": ("squeezenet",)}
"""The models of the default run (the smallest); the others run with ``-m slow``."""


def _models(kernels: str) -> list:
    return [
        pytest.param(name, marks=() if name in SAMPLE[kernels] else pytest.mark.slow)
        for name in LIGHT_MODELS
    ]


@pytest.mark.parametrize("name", _models("numpy"))
def test_light_model_numpy_kernels(name):
    _check(name, "numpy")


@pytest.mark.parametrize("name", _models("jit"))
def test_light_model_jit_kernels(name):
    _check(name, "jit")
