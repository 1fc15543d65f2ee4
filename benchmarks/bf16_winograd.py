"""Each distinct 3x3 stride-1 convolution of the light CNNs in bf16: Winograd's F(2x2, 3x3) with
bf16 products against the direct bf16 convolution, and float32 Winograd beside them: the table
`rvm.kernels.convmethod.winograd_bf16_pays` was read from, to check or re-tune it on another
machine.

Run: ``python benchmarks/bf16_winograd.py [--only resnet50,vgg19] [--repeat 9] [--threads 0]``.

Per layer (shapes from the models' graphs, `conv_methods.layers`), in one process: the layer
alone in a model with its ReLU (random weights), compiled three ways -- float32
(``precision="fp32"``, Winograd's float32 kernel where its rule takes it), bf16 by the direct
convolution (the rule made to say no) and bf16 by Winograd's (made to say yes) -- each on the
native exec mode, its outputs checked against float32 (the bound of
`benchmarks/precision.py`, 3e-2 of the largest), then interleaved medians (`--repeat` turns) of
whole calls at ``--threads`` (rvm's default with 0). Prints, per layer: the milliseconds of
each, Winograd's bf16 time over the direct one's, and whether the rule takes Winograd's;
writes ``benchmarks/results/bf16_winograd.json`` (``--name``). Needs a CPU with bf16 dot
products (`rvm.kernels.bf16gemm.DPBF16`) to mean anything: elsewhere both bf16 forms widen
their pairs to float32 and the rule never takes Winograd's.
"""

from __future__ import annotations

import argparse

from common import interleaved_medians, machine, machine_line, write_results

# isort: split
import numpy as np
from conv_methods import layers
from onnx import TensorProto, helper, numpy_helper

import rvm
from rvm.kernels import bf16gemm, convmethod
from rvm.testing.onnx_models import LIGHT_MODELS

BOUND = 3e-2  # bf16's largest error against float32, of the largest output (the issue's)


def _model(key: tuple, out: list[int], w: np.ndarray):  # type: ignore[no-untyped-def]
    """The layer ``key`` (`conv_methods.layers`') + ReLU as an ONNX model."""
    x, _, kernel, strides, pads, groups, dil = key
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=kernel, strides=strides,
                         pads=pads, group=groups, dilations=dil),
        helper.make_node("Relu", ["c"], ["y"]),
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)],
        [numpy_helper.from_array(w, "w")],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def measure(key: tuple, out: list[int], repeat: int) -> dict:
    """Milliseconds of the layer each way (float32, bf16 direct, bf16 Winograd)."""
    (n, c, ih, iw), o = key[0], key[1]
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((o, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
    x = rng.standard_normal((n, c, ih, iw)).astype(np.float32)
    mod = rvm.from_onnx(_model(key, out, w))
    rule = convmethod.winograd_bf16_pays
    fns, outs = {}, {}
    for name, precision, says in (("f32", "fp32", None), ("direct", "bf16", False),
                                  ("winograd", "bf16", True)):  # fmt: skip
        convmethod.winograd_bf16_pays = rule if says is None else (lambda *a, s=says: s)
        try:
            f = rvm.VirtualMachine(rvm.compile(mod, precision=precision), exec_mode="native")
        finally:
            convmethod.winograd_bf16_pays = rule
        outs[name] = np.asarray(f["main"](x))
        fns[name] = lambda f=f: f["main"](x)
    scale = np.abs(outs["f32"]).max()
    for name in ("direct", "winograd"):
        err = np.abs(outs[name] - outs["f32"]).max() / scale
        if err > BOUND:
            raise AssertionError(f"{key}: bf16 {name} is {err:.2e} off float32's")
    times = {k: v * 1e3 for k, v in interleaved_medians(fns, repeat, sample_s=0.02).items()}
    oh, ow = out[2], out[3]
    takes = rule(c, o, 1, 3, 3, 1, 1, 1, 1, oh, ow)
    return {**times, "ratio": times["winograd"] / times["direct"], "rule": bool(takes)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=",".join(LIGHT_MODELS), help="models")
    parser.add_argument("--repeat", type=int, default=9, help="interleaved turns")
    parser.add_argument("--threads", type=int, default=0, help="rvm's threads (0: default)")
    parser.add_argument("--name", default="bf16_winograd", help="results file name, no suffix")
    args = parser.parse_args()
    if args.threads:
        rvm.set_num_threads(args.threads)
    lines = [machine_line(), f"threads: {args.threads or 'default'}; bf16 dot products: "
             f"{bf16gemm.DPBF16}"]  # fmt: skip
    head = (f"{'layer':32}{'models':28}{'f32 ms':>9}{'direct':>9}{'wino':>9}"
            f"{'w/d':>7}  rule")  # fmt: skip
    lines.append(head)
    print("\n".join(lines), flush=True)
    rows = []
    for key, entry in layers(args.only.split(",")).items():
        (n, c, ih, iw), o, kernel, strides, _, groups, dil = key
        if (kernel, strides, groups, dil) != ((3, 3), (1, 1), 1, (1, 1)):
            continue
        if not convmethod.winograd_pays(c, o, 1, 3, 3, 1, 1, 1, 1, *entry["out"][2:]):
            continue  # float32 Winograd's rule says no: neither bf16 form would be it
        r = measure(key, entry["out"], args.repeat)
        layer = f"{c}x{ih}x{iw} -> {o}x{entry['out'][2]}x{entry['out'][3]}"
        models = ",".join(entry["models"])[:27]
        line = (f"{layer:32}{models:28}{r['f32']:9.3f}{r['direct']:9.3f}{r['winograd']:9.3f}"
                f"{r['ratio']:7.2f}  {'winograd' if r['rule'] else 'direct'}")  # fmt: skip
        print(line, flush=True)
        lines.append(line)
        rows.append({"layer": layer, "models": entry["models"], **r})
    write_results(args.name, {"machine": machine(), "threads": args.threads, "layers": rows})


if __name__ == "__main__":
    main()
