"""Where a CNN's time goes, by kind of op, in rvm and in ONNX Runtime, side by side.

Run: ``python benchmarks/op_profile.py [--only squeezenet,resnet50] [--repeat 20] [--threads 1]``.

For each light model (random weights, one image, default threads or ``--threads`` on both
sides: one thread reads truer on a loaded machine), in one process: rvm's
`VirtualMachine.profile` (per kernel) and ONNX Runtime's own profiler (``enable_profiling``:
per node) over the same number of runs, outputs checked against each other first. Each kind's
time is the least over the runs (on a shared machine a run another process interrupted says
nothing of the code), the median of three rounds of both, alternating. Each kernel or node is
put in a kind by what it computes:

- ``conv``: a convolution and what is fused into it (bias, activation, residual: rvm's
  kernel record ``ops``; ORT's ``Conv``/``FusedConv``/``NchwcConv``), split by the
  convolution's kernel: ``1x1``, ``depthwise`` (one input channel a group), ``KxK``;
- ``pool``, ``concat``, ``gemm`` (dense, matmul), ``elementwise`` (what is left unfused:
  relu, add, batch norm...), ``layout`` (reshape, transpose, flatten, channel shuffle, ORT's
  NCHWc reorders);
- ``vm``: rvm's own dispatch (the profile's VM overhead), ORT's time outside its nodes.

Each kind gives milliseconds per run in both and rvm/ORT. Writes
``benchmarks/results/op_profile.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np
from common import light_model_files, machine, machine_line, write_results

import rvm
from rvm.testing.onnx_models import LIGHT_MODELS

DEFAULT = "squeezenet,resnet50,densenet121,inception_v2"
ROUNDS = 3  # each profile, rvm's then ORT's, taken this many times: the medians are reported
_LAYOUT = ("reshape", "transpose", "flatten", "shuffle", "squeeze", "expand_dims", "Reshape",
           "Transpose", "Flatten", "Squeeze", "Unsqueeze")  # fmt: skip


def _conv_kind(x_shape, w_shape) -> str:  # type: ignore[no-untyped-def]
    """``conv 1x1``, ``conv depthwise`` or ``conv KxK`` from the input and weight shapes (the
    kernel at the weight's axes 2 and 3: OIHW, ORT's blocked and rvm's packed weights)."""
    if w_shape is None or len(w_shape) < 4:
        return "conv"
    if x_shape is not None and len(x_shape) == 4 and w_shape[1] == 1 and x_shape[1] > 1:
        return "conv depthwise"
    return f"conv {w_shape[2]}x{w_shape[3]}"


def _kind_of_ops(ops: list[str]) -> str:
    """A kernel's kind from its fused ops (rvm's kernel record)."""
    if any(o.startswith("conv") for o in ops):
        return "conv"
    if any("pool" in o for o in ops):
        return "pool"
    if "concatenate" in ops:
        return "concat"
    if any(o in ("dense", "matmul", "dense_packed") for o in ops):
        return "gemm"
    if all(any(t in o for t in _LAYOUT) for o in ops):
        return "layout"
    return "elementwise"


def _kind_of_node(op: str) -> str:
    """An ONNX Runtime node's kind from its op type."""
    if op in ("Conv", "FusedConv", "NchwcConv"):
        return "conv"
    if "Pool" in op:
        return "pool"
    if op == "Concat":
        return "concat"
    if op in ("Gemm", "MatMul", "FusedGemm", "FusedMatMul"):
        return "gemm"
    if op in _LAYOUT or op in ("ReorderInput", "ReorderOutput"):
        return "layout"
    return "elementwise"


def _rvm_kinds(ex, vm, inputs: list, repeat: int) -> tuple[dict[str, float], float]:  # type: ignore[no-untyped-def]
    """Milliseconds per run by kind, and the whole run's, from `VirtualMachine.profile`: the
    least over the timed runs (a run the machine's other work interrupted counts for none)."""
    report = vm.profile("main", *inputs, warmup=2, repeat=repeat)
    kind_of = {}
    for row in report.rows:
        rec = ex.kernels.get(row["name"])
        ops = rec.meta.get("ops", "").split(",") if rec is not None else [row["name"]]
        kind = _kind_of_ops(ops)
        kind_of[row["name"]] = _rvm_conv_kind(row) if kind == "conv" else kind
    per_run = []
    for wall, per in report.runs:
        kinds: dict[str, float] = defaultdict(float)
        for name, (_, ns) in per.items():
            kinds[kind_of.get(name, "elementwise")] += ns / 1e6
        kinds["vm"] += wall / 1e6 - sum(ns for _, ns in per.values()) / 1e6
        per_run.append(kinds)
    return _least(per_run), min(report.run_times) * 1e3


def _least(per_run: list[dict[str, float]]) -> dict[str, float]:
    """Per kind, the least over runs."""
    return {k: min(r.get(k, 0.0) for r in per_run) for k in {k for r in per_run for k in r}}


def _rvm_conv_kind(row: dict) -> str:
    """A conv kernel's shape kind from its recorded argument shapes (input, weight)."""
    shapes = row["shapes"][0] if row["shapes"] else ""
    dims = [tuple(int(d) for d in m.split(",")) for m in re.findall(r"\[([\d, ]+)\]", shapes)]
    big = [d for d in dims if len(d) >= 4]
    return _conv_kind(big[0], big[1]) if len(big) >= 2 else "conv"


def _options(threads: int | None):  # type: ignore[no-untyped-def]
    """ONNX Runtime's session options: the defaults, or ``threads`` threads."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    if threads:
        opts.intra_op_num_threads = opts.inter_op_num_threads = threads
    return opts


def _ort_kinds(
    path: str, feeds: dict, repeat: int, threads: int | None
) -> tuple[dict[str, float], float]:
    """Milliseconds per run by kind from ONNX Runtime's profiler (``threads``: None for the
    default options), and the median run."""
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as tmp:
        opts = _options(threads)
        opts.enable_profiling = True
        opts.profile_file_prefix = os.path.join(tmp, "ort")
        sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        for _ in range(repeat + 2):
            sess.run(None, feeds)
        events = json.load(open(sess.end_profiling()))
    runs = [e for e in events if e.get("cat") == "Session" and e["name"] == "model_run"]
    nodes = [e for e in events if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
    per_run: list[dict[str, float]] = [defaultdict(float) for _ in runs]
    starts = [r["ts"] for r in runs]
    for e in nodes:
        k = max(i for i, s in enumerate(starts) if s <= e["ts"]) if e["ts"] >= starts[0] else 0
        op = e["args"].get("op_name", "")
        kind = _kind_of_node(op)
        if kind == "conv":
            kind = _ort_conv_kind(e)
        per_run[k][kind] += e["dur"] / 1e3
    per_run, runs = per_run[2:], runs[2:]  # the first runs warm up
    for r, run in zip(per_run, runs):
        r["vm"] = run["dur"] / 1e3 - sum(r.values())
    return _least(per_run), min(r["dur"] / 1e3 for r in runs)


def _ort_conv_kind(event: dict) -> str:
    shapes = event["args"].get("input_type_shape", [])
    dims = [tuple(next(iter(s.values()))) for s in shapes if s]
    return _conv_kind(dims[0], dims[1]) if len(dims) >= 2 else "conv"


def profile_model(name: str, repeat: int, threads: int | None = None) -> dict:
    """The side-by-side profile of one light model (``threads``: None for the defaults)."""
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as tmp:
        path, _, model, inputs = light_model_files(name, Path(tmp))
        ex = rvm.compile(rvm.from_onnx(model))
        vm = rvm.VirtualMachine(ex)
        if threads:
            rvm.set_num_threads(threads)
        sess = ort.InferenceSession(
            str(path), _options(threads), providers=["CPUExecutionProvider"]
        )
        feeds = {i.name: x for i, x in zip(sess.get_inputs(), inputs)}
        want = sess.run(None, feeds)
        got = vm["main"](*inputs)
        got = list(got) if isinstance(got, (list, tuple)) else [got]
        for g, w in zip(got, want):
            np.testing.assert_allclose(np.asarray(g), w, rtol=1e-3, atol=1e-3)
        rounds = [
            (_rvm_kinds(ex, vm, inputs, repeat), _ort_kinds(str(path), feeds, repeat, threads))
            for _ in range(ROUNDS)
        ]
    mine, mine_total = _medians([r[0] for r in rounds])
    theirs, theirs_total = _medians([r[1] for r in rounds])
    kinds = sorted(set(mine) | set(theirs), key=lambda k: -max(mine.get(k, 0), theirs.get(k, 0)))
    rows = {k: {"rvm_ms": mine.get(k, 0.0), "ort_ms": theirs.get(k, 0.0)} for k in kinds}
    return {"kinds": rows, "rvm_ms": mine_total, "ort_ms": theirs_total}


def _medians(rounds: list[tuple[dict[str, float], float]]) -> tuple[dict[str, float], float]:
    """Per kind, and of the whole run, the median over rounds."""
    kinds = {k for r, _ in rounds for k in r}
    return (
        {k: statistics.median(r.get(k, 0.0) for r, _ in rounds) for k in kinds},
        statistics.median(t for _, t in rounds),
    )


def _table(name: str, result: dict) -> str:
    lines = [f"{name}: rvm {result['rvm_ms']:.2f} ms, ORT {result['ort_ms']:.2f} ms a run",
             f"  {'kind':<16} {'rvm ms':>8} {'ORT ms':>8} {'rvm/ORT':>8}"]  # fmt: skip
    for kind, row in result["kinds"].items():
        ratio = row["rvm_ms"] / row["ort_ms"] if row["ort_ms"] > 0 else float("inf")
        lines.append(f"  {kind:<16} {row['rvm_ms']:>8.2f} {row['ort_ms']:>8.2f} {ratio:>8.2f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=DEFAULT, help=f"of {','.join(LIGHT_MODELS)}")
    parser.add_argument("--repeat", type=int, default=20, help="timed runs a profile")
    parser.add_argument("--threads", type=int, default=None, help="threads on both sides")
    args = parser.parse_args()
    results = {}
    for name in args.only.split(","):
        results[name] = profile_model(name, args.repeat, args.threads)
        print(_table(name, results[name]), flush=True)
    load = os.getloadavg()[0]
    print(f"load average {load:.1f}; {machine_line()}")
    payload = {"machine": machine(), "load": load, "threads": args.threads, "models": results}
    write_results("op_profile", payload)


if __name__ == "__main__":
    main()
