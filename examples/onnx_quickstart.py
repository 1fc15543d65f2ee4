"""Import an ONNX model into rvm, compile it, run it, and compare with ONNX Runtime.

Loads squeezenet from the onnx package's light models (or builds a small CNN with
onnx.helper when the file is missing), gives it random weights, imports it with
`rvm.from_onnx`, and runs it on the VM. Random weights saturate the final Softmax (every
probability 0 or 1), so the model also returns the logits before it, and those are compared.

Run: python examples/onnx_quickstart.py [--kernels jit|numpy]
(jit kernels compile through Numba: the first run of squeezenet takes a few minutes, later
runs load the kernels from the on-disk cache.)
"""

import argparse
import os
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import rvm
from rvm.testing.onnx_models import (
    expose_logits,
    light_model_path,
    random_inputs,
    randomize_weights,
)


def small_cnn() -> onnx.ModelProto:
    """Conv -> Relu -> MaxPool -> Flatten -> Gemm -> Softmax with a symbolic batch "N"."""
    rng = np.random.default_rng(0)
    weights = {
        "w": rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3,
        "fc": rng.standard_normal((10, 8 * 4 * 4)).astype(np.float32) * 0.1,
    }
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "fc"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["prob"]),
    ]
    graph = helper.make_graph(
        nodes,
        "small_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("prob", TensorProto.FLOAT, ["N", 10])],
        [numpy_helper.from_array(v, k) for k, v in weights.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def load() -> onnx.ModelProto:
    path = light_model_path("squeezenet")
    if os.path.exists(path):
        print(f"loading {path}")
        return randomize_weights(onnx.load(path), seed=0)  # the file's weights are all 0.02
    print("squeezenet is not shipped with this onnx; building a small CNN with onnx.helper")
    return small_cnn()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kernels", default="jit", choices=("jit", "numpy"))
    args = parser.parse_args()

    model = expose_logits(load())  # main returns (probabilities, logits)
    t0 = time.perf_counter()
    mod = rvm.from_onnx(model)
    t1 = time.perf_counter()
    text = mod.script().splitlines()
    print(f"imported in {t1 - t0:.2f} s: {len(text)} lines of rvm script; the first 12:")
    for line in text[:12]:  # weights print as base64 constants: clip the long lines
        print(line if len(line) <= 100 else line[:96] + " ...")

    ex = rvm.compile(mod, kernels=args.kernels, progress=True)
    print(f"compiled with {args.kernels} kernels in {time.perf_counter() - t1:.1f} s")

    inputs = random_inputs(model, seed=1)
    vm = rvm.VirtualMachine(ex, exec_mode="compiled")
    prob, logits = vm["main"](*inputs)
    print(f"output {prob.shape}, top-1 class {int(np.argmax(prob))}")

    try:
        from rvm.testing.onnx_models import compare, run_ort

        expected = run_ort(model, inputs)[-1]
    except ImportError:
        print("onnxruntime is not installed: no comparison")
        return
    print(f"logits against ONNX Runtime: {compare(logits, expected)}")


if __name__ == "__main__":
    main()
