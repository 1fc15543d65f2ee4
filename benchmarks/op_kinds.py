"""Where a light CNN's time goes, by op kind: rvm's kernels against ONNX Runtime's nodes.

Run: ``python benchmarks/op_kinds.py [--only squeezenet,shufflenet] [--threads 1] [--repeat 60]
[--int8] [--batch 8]``.

Per model (random weights, `common.light_model_files`), in one process: rvm's compiled mode
profiled per kernel (`VirtualMachine.profile`) and ORT (default session options) profiled per
node (``enable_profiling``), both on ``--threads`` threads (default: each runtime's default),
at ``--batch`` images a call (`common.with_batch`).
Each kernel's and each node's time is its minimum over ``--repeat`` runs (the figure a loaded,
shared machine distorts least), summed by op kind: ORT's op types as they are (its ``Conv``,
``FusedConv``, the ``ReorderInput``/``ReorderOutput`` of its blocked layout...), rvm's kernels
by the first op their name carries (``fused_conv2d_add_relu`` is ``Conv``). Beside them: the
fastest whole run of each, and rvm's VM overhead (run time minus kernel time, the median
over runs; it includes the profiler's own cost of a few hundred ns per kernel). Writes
``benchmarks/results/op_kinds.json`` (``--name``).

``--int8``: both run the model quantized by ONNX Runtime's ``quantize_static`` (the QDQ file
`precision_int8.py` times: `rvm.testing.quantized_models.quantize_with_ort`), rvm's integer
kernels (``fused_qconv2d`` is ``Conv``) against ORT's ``QLinearConv``, ``QLinearConcat``...;
rvm's outputs checked against ORT's int8 ones as `precision_int8.py` checks them (top-1
equal, logits within `INT8_TOLERANCE` of the largest).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import tempfile
from pathlib import Path

from common import light_model_files, machine, machine_line, write_results

# isort: split
import numpy as np
import onnx
from model_child import as_outputs, check_outputs

import rvm
from rvm.testing.onnx_models import run_ort
from rvm.testing.quantized_models import quantize_with_ort

# rvm kernel name fragment -> the ONNX op kind it computes (the first that a name holds).
KINDS = (
    ("conv2d", "Conv"),
    ("max_pool", "MaxPool"),
    ("global_avg_pool", "GlobalAveragePool"),
    ("avg_pool", "AveragePool"),
    ("concat", "Concat"),
    ("softmax", "Softmax"),
    ("transpose", "Transpose"),
    ("dense", "Gemm"),  # qdense too
    ("matmul", "Gemm"),
    ("lrn", "LRN"),
    ("reshape", "Reshape"),
    # a quantized model's float kernels: a residual add, quantizes and dequantizes
    ("add_relu", "Add"),
    ("divide_round_clip", "QuantizeLinear"),
    ("cast_subtract_multiply", "DequantizeLinear"),
)
# ORT's integer nodes -> the op kinds they compute (its residual add of int8 tensors is Sum).
ORT_KINDS = {
    "QLinearConv": "Conv",
    "QLinearConcat": "Concat",
    "NhwcMaxPool": "MaxPool",
    "QGemm": "Gemm",
    "QLinearGlobalAveragePool": "GlobalAveragePool",
    "QLinearAveragePool": "AveragePool",
    "QLinearSoftmax": "Softmax",
    "QLinearAdd": "Add",
    "Sum": "Add",
}


INT8_TOLERANCE = 5e-2  # rvm int8 against ORT int8: roundings differ by a step here and there


def check_int8(got: list, want: list) -> None:
    """rvm's int8 outputs against ORT's int8 ones: the last (the logits) top-1 equal and
    within `INT8_TOLERANCE` of the largest logit."""
    g, w = np.asarray(got[-1], np.float64), np.asarray(want[-1], np.float64)
    err = float(np.abs(g - w).max() / max(1e-30, float(np.abs(w).max())))
    if np.argmax(g) != np.argmax(w) or err > INT8_TOLERANCE:
        raise AssertionError(f"rvm int8 differs from ORT int8: top-1 or relative error {err:.2e}")


def rvm_kind(kernel: str) -> str:
    """The op kind of rvm kernel ``kernel`` (its name when no fragment of `KINDS` is in it)."""
    return next((kind for key, kind in KINDS if key in kernel), kernel)


def rvm_profile(path: Path, inputs: list, repeat: int, want: list, int8: bool = False) -> tuple:
    """rvm's compiled mode on ``path``, its outputs first checked against ORT's (``want``;
    ``int8``: a quantized model's, by `check_int8`): its `vm.profile` report and each
    kernel's least time over the runs (us, by name)."""
    vm = rvm.VirtualMachine(rvm.compile(rvm.from_onnx(str(path))), exec_mode="compiled")
    got = as_outputs(vm["main"](*inputs))
    if int8:
        check_int8(got, want)
    else:
        check_outputs("rvm", got, want)
    report = vm.profile("main", *inputs, warmup=3, repeat=repeat)
    best: dict[str, float] = collections.defaultdict(lambda: float("inf"))
    for _, per in report.runs:
        for name, (_, ns) in per.items():
            best[name] = min(best[name], ns / 1e3)
    return report, best


def profile_rvm(path: Path, inputs: list, repeat: int, want: list, int8: bool = False) -> dict:
    """rvm's compiled mode on ``path``: per op kind the summed minimum kernel times (us),
    after checking its outputs against ORT's (``want``; ``int8``: see `rvm_profile`)."""
    report, best = rvm_profile(path, inputs, repeat, want, int8)
    kinds: dict[str, float] = collections.defaultdict(float)
    for name, us in best.items():
        kinds[rvm_kind(name)] += us
    return {
        "kinds_us": dict(kinds),
        "run_min_us": min(report.run_times) * 1e6,
        "vm_overhead_us": report.vm_overhead * 1e6,
    }


def ort_profile(path: Path, inputs: list, repeat: int, threads: int | None) -> tuple:
    """ORT on ``path`` with its profiler, ``repeat`` runs after 3: the profile's events and
    each node's least kernel time over the runs (us, by event name)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.enable_profiling = True
    opts.profile_file_prefix = str(path.with_suffix(""))
    if threads:
        opts.intra_op_num_threads = threads
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    feed = dict(zip([i.name for i in sess.get_inputs()], inputs, strict=True))
    for _ in range(repeat + 3):
        sess.run(None, feed)
    events = json.loads(Path(sess.end_profiling()).read_text())
    best: dict[str, float] = collections.defaultdict(lambda: float("inf"))
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            best[e["name"]] = min(best[e["name"]], float(e["dur"]))
    return events, best


def profile_ort(path: Path, inputs: list, repeat: int, threads: int | None) -> dict:
    """ORT on ``path``: per op type the summed minimum node times (us), its integer nodes
    as the kinds they compute (`ORT_KINDS`)."""
    events, best = ort_profile(path, inputs, repeat, threads)
    kind_of = {e["name"]: e["args"]["op_name"] for e in events if e.get("name") in best}
    kind_of = {node: ORT_KINDS.get(kind, kind) for node, kind in kind_of.items()}
    kinds: dict[str, float] = collections.defaultdict(float)
    for node, us in best.items():
        kinds[kind_of[node]] += us
    runs = [float(e["dur"]) for e in events if e.get("name") == "model_run"]
    return {"kinds_us": dict(kinds), "run_min_us": min(runs)}


def table(name: str, mine: dict, theirs: dict) -> list[str]:
    """The rows of model ``name``: per op kind rvm's and ORT's summed times."""
    a, b = mine["kinds_us"], theirs["kinds_us"]
    lines = [f"{name}", f"  {'kind':18}{'rvm us':>10}{'ORT us':>10}"]
    for kind in sorted(set(a) | set(b), key=lambda k: -(a.get(k, 0.0) + b.get(k, 0.0))):
        lines.append(f"  {kind:18}{a.get(kind, 0.0):>10.1f}{b.get(kind, 0.0):>10.1f}")
    lines.append(f"  {'sum':18}{sum(a.values()):>10.1f}{sum(b.values()):>10.1f}")
    lines.append(f"  {'fastest run':18}{mine['run_min_us']:>10.1f}{theirs['run_min_us']:>10.1f}")
    lines.append(f"  {'VM overhead':18}{mine['vm_overhead_us']:>10.1f}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="squeezenet,shufflenet", help="comma-separated models")
    parser.add_argument("--threads", type=int, default=0, help="threads of both (0: defaults)")
    parser.add_argument("--repeat", type=int, default=60, help="profiled runs of each")
    parser.add_argument("--batch", type=int, default=1, help="images a call")
    parser.add_argument("--name", default="op_kinds", help="results file name, no suffix")
    parser.add_argument("--int8", action="store_true", help="the models quantized by ORT (QDQ)")
    args = parser.parse_args()
    if args.batch < 1:
        parser.error(f"--batch takes a positive count of images; not {args.batch}")
    if args.threads:
        rvm.set_num_threads(args.threads)
    lines = [
        machine_line(),
        f"threads: {args.threads or 'defaults'}; batch {args.batch}; load {os.getloadavg()}",
    ]
    lines += ["int8: the QDQ models of quantize_static"] if args.int8 else []
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only.split(","):
            path, _, model, inputs = light_model_files(name, Path(tmp), args.batch)
            if args.int8:
                model = quantize_with_ort(model)
                onnx.save(model, path)
            mine = profile_rvm(path, inputs, args.repeat, run_ort(model, inputs), args.int8)
            theirs = profile_ort(path, inputs, args.repeat, args.threads or None)
            rows[name] = {"rvm": mine, "ort": theirs}
            lines += table(name, mine, theirs)
    print("\n".join(lines))
    payload = {"machine": machine(), "threads": args.threads, "batch": args.batch}
    write_results(args.name, {**payload, "int8": args.int8, "models": rows})


if __name__ == "__main__":
    main()
