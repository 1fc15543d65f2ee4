"""Models quantized by ONNX Runtime's quantizer (``quantize_static``, QDQ format) for tests and
benchmarks: uint8 activations per tensor, int8 weights per output channel, calibrated on
random inputs (min/max), after ORT's recommended pre-processing (``quant_pre_process``:
shape inference and graph optimization, which folds batch norms into convolutions), as users
bring them. Models older than opset 13 are converted to 13
first (per-channel quantization needs DequantizeLinear's axis)."""

from __future__ import annotations

import os
import tempfile
from typing import Any

import numpy as np

from rvm.testing.onnx_models import graph_inputs, random_inputs


def ort_saturates() -> bool:
    """Whether ONNX Runtime's uint8 x int8 products saturate on this host: without VNNI
    (AVX-512's or AVX's) its AVX2 kernels sum each pair of products into 16 bits
    (``vpmaddubsw``), so full 8-bit weights are not an exact oracle there; 7-bit ones
    (``reduce_range``) are."""
    from llvmlite import binding as llvm

    features = set(llvm.get_host_cpu_features().flatten().split(","))
    return not features & {"+avx512vnni", "+avxvnni"}


def quantize_with_ort(
    model: Any, calibration: int = 8, seed: int = 100, reduce_range: bool = False
) -> Any:
    """``model`` (an ONNX ModelProto) quantized by ``onnxruntime.quantization.quantize_static``
    in QDQ format on ``calibration`` random inputs (seeds ``seed``, ``seed + 1``...), its
    weights in 7 bits with ``reduce_range`` (see `ort_saturates`)."""
    import onnx
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
    if opset < 13:  # per-channel DequantizeLinear (its axis) is opset 13's
        from onnx import version_converter

        model = version_converter.convert_version(model, 13)
        model.ir_version = max(model.ir_version, 7)  # opset 13's IR version
    model = _constant_initializers(model)
    names = [i.name for i in graph_inputs(model)]
    batches = [random_inputs(model, seed=seed + i) for i in range(calibration)]

    class _Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.rest = iter(batches)

        def get_next(self) -> dict[str, np.ndarray] | None:
            batch = next(self.rest, None)
            return None if batch is None else dict(zip(names, batch))

    with tempfile.TemporaryDirectory() as tmp:
        raw, src = os.path.join(tmp, "raw.onnx"), os.path.join(tmp, "f32.onnx")
        dst = os.path.join(tmp, "int8.onnx")
        onnx.save(model, raw)
        quant_pre_process(raw, src)  # ORT's advice: batch norms folded into convolutions...
        quantize_static(
            src,
            dst,
            _Reader(),
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            reduce_range=reduce_range,
        )
        return _constant_initializers(onnx.load(dst))


def _constant_initializers(model: Any) -> Any:
    """``model`` with its initializers no longer listed as graph inputs (IR 3 listed them so,
    which makes them overridable: ORT neither folds nor fuses them, batch norms included)."""
    inits = {t.name for t in model.graph.initializer}
    kept = [i for i in model.graph.input if i.name not in inits]
    if len(kept) == len(model.graph.input):
        return model
    copy = type(model)()  # the caller's model stays as it is
    copy.CopyFrom(model)
    copy.ir_version = max(copy.ir_version, 4)  # initializers outside the inputs: IR 4
    del copy.graph.input[:]
    copy.graph.input.extend(kept)
    return copy
