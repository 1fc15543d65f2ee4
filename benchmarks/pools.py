"""The light CNNs' pools one by one: rvm against ONNX Runtime, side by side in one process.

Run: ``python benchmarks/pools.py [--only vgg19,densenet121] [--src DIR] [--threads N]``.

Each distinct MaxPool and AveragePool of the 9 light models (`common.light_model_files`'s
models; their shapes at batch 1 from ONNX shape inference) becomes a one-node ONNX model, run
by rvm (compiled mode, jit kernels) and by ORT (default session options), on the same random
input, outputs checked against ORT's first. The figures are interleaved medians
(`common.interleaved_medians`; ORT's turns settle first, its pool threads spin after a call)
in microseconds per call, VM and session overheads included (a few microseconds each).
``--src`` measures the rvm sources of another checkout, so two versions compare through their
ratios to the same ORT. Writes ``benchmarks/results/pools.json`` (``--name``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated model names")
    parser.add_argument("--src", type=Path, default=None, help="rvm sources to measure")
    parser.add_argument("--threads", type=int, default=0, help="0: each runtime's default")
    parser.add_argument("--repeat", type=int, default=31)
    parser.add_argument("--name", default="pools")
    return parser.parse_args()


ARGS = _args()
if ARGS.src is not None:  # before `common` puts this checkout's sources first
    sys.path.insert(0, str(ARGS.src.resolve()))
    import rvm  # noqa: F401

# isort: split
from common import interleaved_medians, machine, machine_line, write_results  # noqa: E402

# isort: split
import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import helper, shape_inference  # noqa: E402

import rvm  # noqa: E402
from rvm.testing.onnx_models import LIGHT_MODELS, light_model_path  # noqa: E402


def model_pools(name: str) -> list[tuple[str, tuple, dict]]:
    """The distinct pools of light model ``name``: (op type, input shape, attributes)."""
    model = shape_inference.infer_shapes(onnx.load(light_model_path(name)))
    graph = model.graph
    shapes = {
        v.name: tuple(d.dim_value for d in v.type.tensor_type.shape.dim)
        for v in (*graph.value_info, *graph.input, *graph.output)
    }
    pools = []
    for node in graph.node:
        if node.op_type not in ("MaxPool", "AveragePool"):
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        entry = (node.op_type, shapes[node.input[0]], attrs)
        if entry not in pools:
            pools.append(entry)
    return pools


def one_node(op_type: str, shape: tuple, attrs: dict) -> onnx.ModelProto:
    """A model of the one pool."""
    node = helper.make_node(op_type, ["x"], ["y"], **attrs)
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, list(shape))
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)
    graph = helper.make_graph([node], "pool", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def label(op_type: str, shape: tuple, attrs: dict) -> str:
    k = "x".join(map(str, attrs["kernel_shape"]))
    s = attrs.get("strides", [1, 1])[0]
    pads = attrs.get("pads", [0, 0, 0, 0])
    kind = "max" if op_type == "MaxPool" else "avg"
    return f"{kind} {k}/{s} p{''.join(map(str, pads))} {shape[1]}x{shape[2]}x{shape[3]}"


def measure(op_type: str, shape: tuple, attrs: dict, threads: int, repeat: int) -> dict:
    import onnxruntime as ort

    model = one_node(op_type, shape, attrs)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    opts = ort.SessionOptions()
    if threads:
        opts.intra_op_num_threads = threads
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    vm = rvm.VirtualMachine(rvm.compile(rvm.from_onnx(model)), exec_mode="compiled")
    want = sess.run(None, {"x": x})[0]
    np.testing.assert_allclose(vm["main"](x), want, rtol=1e-5, atol=1e-6)
    medians = interleaved_medians(
        {"rvm": lambda: vm["main"](x), "ort": lambda: sess.run(None, {"x": x})},
        repeat=repeat,
        settle_s=0.002,
    )
    return {k: v * 1e6 for k, v in medians.items()}


def main() -> None:
    if ARGS.threads:
        rvm.set_num_threads(ARGS.threads)
    names = [n for n in ARGS.only.split(",") if n] or list(LIGHT_MODELS)
    print(f"rvm from {Path(rvm.__file__).parents[1]}")
    print(machine_line())
    print(f"{'model':13s} {'pool':32s} {'rvm us':>8s} {'ORT us':>8s} {'rvm/ORT':>8s}")
    rows = []
    for name in names:
        for op_type, shape, attrs in model_pools(name):
            t = measure(op_type, shape, attrs, ARGS.threads, ARGS.repeat)
            text = label(op_type, shape, attrs)
            ratio = t["rvm"] / t["ort"]
            print(f"{name:13s} {text:32s} {t['rvm']:8.1f} {t['ort']:8.1f} {ratio:8.2f}")
            rows.append({"model": name, "pool": text, "rvm_us": t["rvm"], "ort_us": t["ort"]})
    ratios = [r["rvm_us"] / r["ort_us"] for r in rows]
    print(f"geometric mean rvm/ORT: {float(np.exp(np.mean(np.log(ratios)))):.2f}")
    write_results(ARGS.name, {"machine": machine(), "src": str(ARGS.src or ""), "rows": rows})


if __name__ == "__main__":
    main()
