"""Models quantized by ONNX Runtime's quantizer (``quantize_static``, QDQ format) for tests and
benchmarks: uint8 activations per tensor, int8 weights per output channel, calibrated on
random inputs (min/max), as users bring them. Models older than opset 13 are converted to 13
first (per-channel quantization needs DequantizeLinear's axis)."""

from __future__ import annotations

import os
import tempfile
from typing import Any

import numpy as np

from rvm.testing.onnx_models import graph_inputs, random_inputs


def quantize_with_ort(model: Any, calibration: int = 8, seed: int = 100) -> Any:
    """``model`` (an ONNX ModelProto) quantized by ``onnxruntime.quantization.quantize_static``
    in QDQ format on ``calibration`` random inputs (seeds ``seed``, ``seed + 1``...)."""
    import onnx
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
    if opset < 13:  # per-channel DequantizeLinear (its axis) is opset 13's
        from onnx import version_converter

        model = version_converter.convert_version(model, 13)
        model.ir_version = max(model.ir_version, 7)  # opset 13's IR version
    names = [i.name for i in graph_inputs(model)]
    batches = [random_inputs(model, seed=seed + i) for i in range(calibration)]

    class _Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.rest = iter(batches)

        def get_next(self) -> dict[str, np.ndarray] | None:
            batch = next(self.rest, None)
            return None if batch is None else dict(zip(names, batch))

    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "f32.onnx"), os.path.join(tmp, "int8.onnx")
        onnx.save(model, src)
        quantize_static(
            src,
            dst,
            _Reader(),
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
        )
        quantized = onnx.load(dst)
    inits = {t.name for t in quantized.graph.initializer}  # IR 3 listed them as inputs too
    kept = [i for i in quantized.graph.input if i.name not in inits]
    del quantized.graph.input[:]
    quantized.graph.input.extend(kept)
    return quantized
