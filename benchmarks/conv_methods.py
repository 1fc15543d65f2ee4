"""Each distinct float32 convolution layer of the 9 light CNNs: the direct method (vectors of
output channels, `rvm.kernels.direct`, on a weight packed beforehand) against the library's
GEMM methods (`rvm.kernels.conv`, on the OIHW weight), Winograd's (`rvm.kernels.winograd`, on
3x3 stride-1 layers) and ONNX Runtime's Conv.

Run: ``python benchmarks/conv_methods.py [--only vgg19,densenet121] [--repeat 21]
[--threads 2] [--batch 8]``. The
layers' shapes come from the models' graphs (ONNX shape inference); depthwise layers are
left out (the direct method is not theirs; 1x1 ones are in: deep ones on 7 x 7 maps take
it). Per layer: milliseconds of each, interleaved medians in one process after checking
the outputs agree, GEMM/direct, direct/ORT, GFLOP/s of
each, and whether the rule (`rvm.kernels.convmethod.channels_pay` with the weight packed at
build time) picks the direct method; on 3x3 stride-1 layers Winograd's time with its weight
transformed at the call (``wino ms``) and beforehand (``wino U``: a constant weight's,
transformed at build time), the direct method's over the latter (``d/wU``) and whether its
rule (`rvm.kernels.convmethod.winograd_pays`) picks it: the tables to check and re-tune the rules
on another machine. ``gemm`` is the library's choice on the OIHW weight: Winograd's
(transformed at the call) where its rule picks it (then compare it with main's table of the
GEMMs). Both runtimes on ``--threads`` threads (`rvm.set_num_threads`, ORT's
``intra_op_num_threads``), one by default:
the per-core efficiency of the methods, which a loaded machine distorts least (one thread
each runs in the calling thread: its CPU time is what is timed, `time.thread_time`, so other
processes' preemptions are left out); ``--threads 0``
leaves both at their defaults (every core), where splitting small layers costs. With more
than one thread each turn starts after a pause (ORT's threads stop spinning) and `WARM_S` of
untimed calls: the steady state a model's layers run in; a layer's weight then stays in cache
from call to call, where a deep model's later layers read theirs from memory (resnet50's
7 x 7 layers ran 10-20% faster alone). Prints the
machine, writes ``benchmarks/results/conv_methods.json`` (``conv_methods_t2.json``... for
other thread counts, ``conv_methods_b8.json``... for ``--batch`` images a call: the rule's
choice may change with the batch, as the GEMM's rows grow with it).
"""

from __future__ import annotations

import argparse
import time

from common import interleaved_medians, machine, machine_line, write_results

# isort: split
import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper, shape_inference

import rvm
from rvm.kernels import conv, convmethod, direct, sgemm, winograd
from rvm.testing.onnx_models import LIGHT_MODELS, light_model_path


def layers(models: list[str], batch: int = 1) -> dict[tuple, dict]:
    """The distinct convolutions of ``models`` at ``batch`` images: by (input shape, out
    channels, kernel, strides, pads, groups, dilations), with how many each model has."""
    found: dict[tuple, dict] = {}
    for name in models:
        graph = shape_inference.infer_shapes(onnx.load(light_model_path(name))).graph
        dims = {
            v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
            for v in [*graph.value_info, *graph.input, *graph.output]
        }
        for node in graph.node:
            if node.op_type != "Conv":
                continue
            a = {x.name: helper.get_attribute_value(x) for x in node.attribute}
            x, y = dims[node.input[0]], dims[node.output[0]]
            x, y = [batch, *x[1:]], [batch, *y[1:]]
            key = (tuple(x), y[1], tuple(a["kernel_shape"]), tuple(a.get("strides", (1, 1))),
                   tuple(a.get("pads", (0,) * 4)), a.get("group", 1),
                   tuple(a.get("dilations", (1, 1))))  # fmt: skip
            entry = found.setdefault(key, {"out": y, "models": {}})
            entry["models"][name] = entry["models"].get(name, 0) + 1
    return found


def _ort(key: tuple, out: list[int], w: np.ndarray, threads: int):  # type: ignore[no-untyped-def]
    x, _, kernel, strides, pads, groups, dil = key
    node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=kernel, strides=strides,
                            pads=pads, group=groups, dilations=dil)  # fmt: skip
    graph = helper.make_graph(
        [node], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)],
        [numpy_helper.from_array(w, "w")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    opts = ort.SessionOptions()
    if threads:
        opts.intra_op_num_threads = opts.inter_op_num_threads = threads
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


WARM_S = 0.01
"""Seconds of untimed calls after a turn's pause (`common.interleaved_medians`' ``warm_s``):
after the pause and one call, rvm's layers ran 1.1-2.5x their time in the model (session 74)."""


def measure(key: tuple, out_shape: list[int], repeat: int, threads: int = 1) -> dict:
    (n, c, ih, iw), o, (kh, kw), (sh, sw), pads, groups, (dh, dw) = key
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, ih, iw)).astype(np.float32)
    w = rng.standard_normal((o, c // groups, kh, kw)).astype(np.float32)
    packed = direct.pack(w, groups)
    by_gemm, by_direct = np.empty(out_shape, np.float32), np.empty(out_shape, np.float32)
    by_wino = np.empty(out_shape, np.float32)
    session = _ort(key, out_shape, w, threads)
    pt, pl, pb, pr = pads
    wino_shape = (kh, kw, sh, sw, dh, dw, groups) == (3, 3, 1, 1, 1, 1, 1)

    def gemm() -> None:
        conv.conv2d(x, w, by_gemm, groups, sh, sw, dh, dw, pt, pl, pb, pr)

    def channels() -> None:
        direct.conv2d_packed(x, packed, by_direct, sh, sw, dh, dw, pt, pl)

    def onnxruntime() -> None:
        session.run(None, {"x": x})

    def wino() -> None:
        winograd.conv2d(x, w, by_wino, pt, pl, sgemm.NO_EPILOGUE)

    u = winograd.transform(w) if wino_shape else None
    by_u = np.empty(out_shape, np.float32)

    def wino_u() -> None:
        winograd.conv2d_transformed(x, u, by_u, pt, pl, sgemm.NO_EPILOGUE)

    gemm(), channels()
    want = session.run(None, {"x": x})[0]
    checked = (by_gemm, by_direct)
    if wino_shape:
        wino(), wino_u()
        checked += (by_wino, by_u)
    for got in checked:
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-2)
    # ORT's pool threads spin after its calls (more than one thread): each turn settles first,
    # then runs untimed for `WARM_S`, so it times the layer as a model runs it, back to back.
    settle = 0.0 if threads == 1 else 0.05
    fns = {"gemm": gemm, "direct": channels, "ort": onnxruntime}
    if wino_shape:
        fns["winograd"], fns["winograd_u"] = wino, wino_u
    # One thread each runs in the calling thread: its CPU time, which preemptions by other
    # processes on a loaded machine leave out; more threads, wall time.
    clock = time.thread_time if threads == 1 else time.perf_counter
    t = interleaved_medians(fns, repeat, settle_s=settle, clock=clock,
                            warm_s=WARM_S if settle else 0.0)  # fmt: skip
    oh, ow = out_shape[2], out_shape[3]
    picks = bool(convmethod.channels_pay(c, o, groups, kh, kw, sh, sw, oh, ow, ih, iw, True))
    wino_picks = bool(convmethod.winograd_pays(c, o, groups, kh, kw, sh, sw, dh, dw, oh, ow))
    times = {k: v * 1e3 for k, v in t.items()}
    return {**times, "picks_direct": picks, "picks_winograd": wino_picks}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(LIGHT_MODELS), help="comma-separated models")
    parser.add_argument("--repeat", type=int, default=21, help="interleaved samples per layer")
    parser.add_argument(
        "--threads", type=int, default=1, help="threads of both runtimes (0: their defaults)"
    )
    parser.add_argument("--batch", type=int, default=1, help="images a call")
    args = parser.parse_args()
    if args.batch < 1:
        parser.error(f"--batch takes a positive count of images; not {args.batch}")
    if args.threads:
        rvm.set_num_threads(args.threads)
    print(machine_line(), f"threads: {args.threads or 'default'}; batch {args.batch}")
    rows = []
    found = layers(args.only.split(","), args.batch)
    head = f"{'layer':58} {'gemm ms':>8} {'direct':>8} {'ort':>8} {'g/d':>5} {'d/ort':>5} rule"
    wino_head = f"{'wino ms':>8} {'wino U':>8} {'d/wU':>5} rule"
    print(f"{head}  GFLOP/s: {'gemm':>5} {'direct':>6} {'ort':>5}  {wino_head}")
    for key, info in found.items():
        (n, c, ih, iw), o, kernel, strides, _, groups, _ = key
        if groups == c and c > 1:
            continue  # depthwise: not the direct method's
        t = measure(key, info["out"], args.repeat, args.threads)
        oh, ow = info["out"][2:]
        name = f"{c}x{ih}x{iw} -> {o}x{oh}x{ow} k{kernel[0]}x{kernel[1]} s{strides[0]} g{groups}"
        rule = "direct" if t["picks_direct"] else "gemm"
        ratios = f"{t['gemm'] / t['direct']:5.2f} {t['direct'] / t['ort']:5.2f}"
        gflop = 2 * n * o * oh * ow * (c // groups) * kernel[0] * kernel[1] / 1e9
        rates = {k: gflop / (t[k] / 1e3) for k in ("gemm", "direct", "ort")}
        speeds = f"{rates['gemm']:5.0f} {rates['direct']:6.0f} {rates['ort']:5.0f}"
        wino = ""
        if "winograd" in t:
            ratio, takes = t["direct"] / t["winograd_u"], "yes" if t["picks_winograd"] else "no"
            wino = f"  {t['winograd']:8.3f} {t['winograd_u']:8.3f} {ratio:5.2f} {takes}"
        print(f"{name:58} {t['gemm']:8.3f} {t['direct']:8.3f} {t['ort']:8.3f} {ratios} {rule:6} "
              f"          {speeds}{wino}")  # fmt: skip
        gflops = {f"{k}_gflops": v for k, v in rates.items()}
        rows.append({"layer": name, "models": info["models"], **t, **gflops})
    name = "conv_methods" if args.threads == 1 else f"conv_methods_t{args.threads}"
    name += "" if args.batch == 1 else f"_b{args.batch}"
    payload = {"machine": machine(), "threads": args.threads, "batch": args.batch}
    write_results(name, {**payload, "layers": rows})


if __name__ == "__main__":
    main()
