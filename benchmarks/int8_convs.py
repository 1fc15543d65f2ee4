"""Single int8 convolutions: rvm's kernel against ONNX Runtime's ``QLinearConv`` node.

Run: ``python benchmarks/int8_convs.py [--reps 100] [--threads N] [--name int8_convs]`` (default
threads: rvm's default, as a user's; session 57's figures: ``--threads 1`` and 2).

For each of resnet50's int8 convolution classes where `int8_layers.py` finds rvm behind ORT
(3 x 3 at 56 x 56 and 14 x 14, 1 x 1 at 7, 14 and 56), one convolution alone, on the same
random operands in one process: rvm's `rvm.kernels.qconv.qconv2d` (uint8 input with zero point
3, int8 weights of 7 bits whose pairs fit 16 bits, as ORT's ``reduce_range`` quantizes, in the
importer's OHWI layout, an int32 bias, per-channel scales, uint8 output) and ORT's one-node
``QLinearConv`` model of the same tensors, outputs compared first (they are equal: both exact
integer sums, the same rounding), then timed interleaved (``--reps`` rounds, thread CPU at one
thread, wall clock at more, ORT's threads not spinning between runs): medians, least times and
GMAC/s from the least. A convolution alone has its operands in cache; in the model the figures
are `int8_layers.py`'s.
Writes ``benchmarks/results/NAME.json``.
"""

from __future__ import annotations

import argparse
import time

from common import machine, machine_line, write_results

# isort: split
import numpy as np

import rvm
from rvm.kernels import qconv

# name, input channels, map, output channels, kernel, stride
SHAPES = (
    ("3x3 64@56", 64, 56, 64, 3, 1),
    ("3x3 256@14", 256, 14, 256, 3, 1),
    ("1x1 512->2048 @7", 512, 7, 2048, 1, 1),
    ("1x1 1024->256 @14", 1024, 14, 256, 1, 1),
    ("1x1 256->64 @56", 256, 56, 64, 1, 1),
)
X_ZERO, Y_ZERO = 3, 7


def _ort_conv(x, w, bias, x_scale, w_scales, y_scale, k, p, s, out_shape):  # type: ignore[no-untyped-def]
    """ORT's session of one ``QLinearConv`` node on these tensors, and its run of ``x``."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    consts = {
        "xs": np.array(x_scale, np.float32), "xz": np.array(X_ZERO, np.uint8), "w": w,
        "ws": w_scales, "wz": np.zeros(w.shape[0], np.int8), "ys": np.array(y_scale, np.float32),
        "yz": np.array(Y_ZERO, np.uint8), "b": bias,
    }  # fmt: skip
    node = helper.make_node(
        "QLinearConv", ["x", *consts], ["y"], kernel_shape=[k, k], pads=[p] * 4, strides=[s, s]
    )
    graph = helper.make_graph(
        [node], "conv",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, out_shape)],
        [numpy_helper.from_array(v, n) for n, v in consts.items()],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = rvm.get_num_threads()
    # Its pool's threads would spin after each run, taking the core rvm's helper runs on next.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return lambda: session.run(None, {"x": x})[0]


def measure(shape: tuple, reps: int, rng: np.random.Generator) -> dict:
    """One convolution's row: rvm against ORT, outputs compared, then timed."""
    _, c, hw, o, k, s = shape
    p = k // 2
    oh = (hw + 2 * p - k) // s + 1
    x = rng.integers(0, 256, (1, c, hw, hw), dtype=np.uint8)
    w = rng.integers(-64, 65, (o, c, k, k), dtype=np.int8)
    bias = rng.integers(-1000, 1000, o, dtype=np.int32)
    x_scale, y_scale = np.float32(0.02), np.float32(0.05)
    w_scales = (rng.random(o, dtype=np.float32) * 0.01 + 0.001).astype(np.float32)
    scale = (x_scale * w_scales / y_scale).astype(np.float32)
    out = np.empty((1, o, oh, oh), np.uint8)
    ohwi = np.ascontiguousarray(w.transpose(0, 2, 3, 1))

    def mine() -> np.ndarray:
        qconv.qconv2d(x, ohwi, bias, scale, out, X_ZERO, Y_ZERO, 0, 255, 1, s, s, 1, 1, p, p,
                      True, True)  # fmt: skip
        return out

    theirs = _ort_conv(x, w, bias, x_scale, w_scales, y_scale, k, p, s, out.shape)
    diff = int(np.abs(mine().astype(np.int32) - theirs().astype(np.int32)).max())
    if diff:
        raise SystemExit(f"{shape[0]}: rvm's output differs from ORT's by {diff}")
    clock = time.thread_time_ns if rvm.get_num_threads() == 1 else time.perf_counter_ns
    times: dict[str, list[int]] = {"rvm": [], "ort": []}
    for _ in range(reps):
        for name, run in (("rvm", mine), ("ort", theirs)):
            start = clock()
            run()
            times[name].append(clock() - start)
    macs = o * oh * oh * c * k * k
    row = {"conv": shape[0], "macs": macs}
    for name, t in times.items():
        row[f"{name}_us"] = float(np.median(t)) / 1e3
        row[f"{name}_min_us"] = min(t) / 1e3
        row[f"{name}_gmacs"] = macs / min(t)
    row["rvm_vs_ort"] = row["rvm_us"] / row["ort_us"]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=100, help="interleaved rounds")
    parser.add_argument("--threads", type=int, default=rvm.get_num_threads(), help="both runtimes'")
    parser.add_argument("--name", default="int8_convs", help="results file name, no suffix")
    args = parser.parse_args()
    rvm.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    rows = [measure(shape, args.reps, rng) for shape in SHAPES]
    print(f"{machine_line()}\n")
    print(f"{'conv':20s} {'rvm us':>8s} {'ORT us':>8s} {'rvm/ORT':>8s} {'rvm GMAC/s':>11s} "
          f"{'ORT GMAC/s':>11s}")  # fmt: skip
    for r in rows:
        print(f"{r['conv']:20s} {r['rvm_us']:8.1f} {r['ort_us']:8.1f} {r['rvm_vs_ort']:8.2f} "
              f"{r['rvm_gmacs']:11.1f} {r['ort_gmacs']:11.1f}")  # fmt: skip
    write_results(args.name, {"machine": machine(), "threads": args.threads, "reps": args.reps,
                              "rows": rows})  # fmt: skip


if __name__ == "__main__":
    main()
