"""A light CNN's layers at one thread and at two, rvm beside ONNX Runtime, taken in turns: where
the second thread's time goes against ORT's, and whether the gap is the second thread's.

Run: ``python benchmarks/thread_layers.py [--only squeezenet,inception_v2] [--runs 20]
[--threads 2] [--batch 1]``.

Per model (random weights, `common.light_model_files`, ``--batch`` images a call), in one
process, rounds of four turns (rvm at one thread and at ``--threads``, ORT at one thread and at
``--threads``), each turn after a 50 ms pause and one untimed call (ORT's pool spins about 30
ms after a call): one plain call timed (the model's wall), then one call timed per layer: rvm's
compiled mode with a callback around each kernel (`VirtualMachine.set_instrument`, the wall
clock), ORT's session with its profiler on (``enable_profiling``, each node's time; a session
of its own, after another pause and one untimed call, as the plain session's pool spins on).
The turns alternate within a few hundred milliseconds because this machine's speed moves by a
third in spells of seconds (memory shared with the host's other guests): a table whose runtimes
ran one after the other compares two spells, not two runtimes.

Layers are paired by geometry, not by name: rvm merges a block's 1x1 convolutions of one input
(`rvm.transform.merge_convs`) and writes concatenations in place, ORT keeps each node and
reorders into its NCHWc layout. A row is a kind (``conv``, ``maxpool``...), the input's channels
and size, the kernel's size and the output's size: its calls' times summed, medians over the
rounds, microseconds; ``n`` the calls a run on each side, ``sp`` one thread's time over the
threads', ``d2`` and ``d1`` rvm's time less ORT's at the threads and at one. Rows of one side
only are what the other does not do (ORT's ``Concat``, rvm's slices of merged results) or does
in another order (rvm runs a pool branch's 1x1 convolution before its pool). Rows sorted by
``d2``, the largest loss first. Writes ``benchmarks/results/thread_layers.json`` (``--name``).
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import light_model_files, machine, machine_line, write_results

# isort: split
import numpy as np
import onnxruntime as ort
from model_child import as_outputs, check_outputs

import rvm
from rvm.testing.onnx_models import run_ort

SETTLE_S = 0.05  # a turn's pause before its untimed call


def rvm_key(kernel: str, shapes: list[tuple[int, ...]]) -> tuple:
    """A kernel call's row: convolutions and pools by geometry, the rest by kernel name."""
    x, out = shapes[0], shapes[-1]
    if "conv2d" in kernel and len(shapes) >= 3:
        # OIHW, Winograd's (16, o, c), packed (g, panels, kh, kw, c, panel), or bf16's
        # (o, taps) of the input's channels (its depth padded even)
        w = shapes[1]
        kh = 3 if len(w) == 3 else w[2] if len(w) > 2 else math.isqrt(max(1, w[1] // x[1]))
        return ("conv", x[1], x[2], kh, out[2])
    if "pool2d" in kernel and "global" not in kernel:
        return (kernel.split("_")[1] + "pool", x[1], x[2], out[2])
    return (kernel.rstrip("_0123456789"),)


def kernel_recorder(
    shape_of: Callable[[Any], tuple] = lambda a: tuple(getattr(a, "shape", ())),
) -> tuple[Callable[[str, tuple, bool], None], list[tuple[str, list, int]]]:
    """(edge, calls): a `VirtualMachine.set_instrument` callback that appends each kernel call
    to ``calls`` as (kernel, its arguments' ``shape_of``, wall nanoseconds)."""
    calls: list[tuple[str, list, int]] = []
    start = [0]

    def edge(kernel: str, args: tuple, before: bool) -> None:
        if before:
            start[0] = time.perf_counter_ns()
            return
        took = time.perf_counter_ns() - start[0]
        calls.append((kernel, [shape_of(a) for a in args], took))

    return edge, calls


def ort_key(args: dict) -> tuple:
    """An ORT node's row (`rvm_key`'s for the same layer)."""
    op = args["op_name"]
    shapes = [next(iter(s.values())) for s in args.get("input_type_shape", [])]
    outs = [next(iter(s.values())) for s in args.get("output_type_shape", [])]
    out_h = outs[0][2] if outs and len(outs[0]) > 2 else 0
    if "Conv" in op and len(shapes) > 1 and len(shapes[1]) == 4:
        return ("conv", shapes[0][1], shapes[0][2], shapes[1][2], out_h)
    if op in ("MaxPool", "AveragePool"):
        return (op[:-4].lower() + "pool", shapes[0][1], shapes[0][2], out_h)
    return (op,)


def _session(path: Path, threads: int, prefix: Path | None) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    if prefix is not None:
        opts.enable_profiling = True
        opts.profile_file_prefix = str(prefix)
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def profile(name: str, runs: int, threads: int, tmp: Path, batch: int = 1) -> dict:
    """Model ``name``'s rows and plain walls (see the module docstring)."""
    path, _, model, inputs = light_model_files(name, tmp, batch)
    vm = rvm.VirtualMachine(rvm.compile(rvm.from_onnx(str(path))), exec_mode="compiled")
    f = vm["main"]
    check_outputs("rvm", as_outputs(f(*inputs)), run_ort(model, inputs))
    counts = (1, threads)
    plain = {(side, t): _session(path, t, None) for side in ("ort",) for t in counts}
    profiled = {t: _session(path, t, tmp / f"{name}_{t}") for t in counts}
    feed = dict(zip([i.name for i in plain["ort", 1].get_inputs()], inputs, strict=True))
    edge, calls = kernel_recorder()
    walls: dict[tuple[str, int], list[float]] = collections.defaultdict(list)
    per_call: dict[int, dict[int, list[int]]] = {t: collections.defaultdict(list) for t in counts}
    turns = [("rvm", t) for t in counts] + [("ort", t) for t in counts]
    try:
        for r in range(runs + 1):  # the first round warms up
            for side, t in turns if r % 2 == 0 else turns[::-1]:
                if side == "rvm":
                    rvm.set_num_threads(t)
                    run = lambda: f(*inputs)  # noqa: E731
                else:
                    run = lambda s=plain["ort", t]: s.run(None, feed)  # noqa: E731
                time.sleep(SETTLE_S)
                run()
                begin = time.perf_counter_ns()
                run()
                wall = time.perf_counter_ns() - begin
                if side == "rvm":
                    calls.clear()
                    vm.set_instrument(edge)
                    f(*inputs)
                    vm.set_instrument(None)
                else:  # the plain session's pool spins on: a pause, one call untimed
                    time.sleep(SETTLE_S)
                    profiled[t].run(None, feed)
                    profiled[t].run(None, feed)
                if r == 0:
                    continue
                walls[side, t].append(wall / 1e6)
                if side == "rvm":
                    for i, (_, _, took) in enumerate(calls):
                        per_call[t][i].append(took)
    finally:
        rvm.set_num_threads(threads)
    rows: dict[tuple, dict] = collections.defaultdict(
        lambda: {"rvm": [0.0, 0.0], "ort": [0.0, 0.0], "rvm_n": 0, "ort_n": 0, "kernels": set()}
    )
    for i, (kernel, shapes, _) in enumerate(calls):
        row = rows[rvm_key(kernel, shapes)]
        row["rvm"] = [row["rvm"][k] + float(np.median(per_call[t][i])) / 1e3
                      for k, t in enumerate(counts)]  # fmt: skip
        row["rvm_n"] += 1
        row["kernels"].add(kernel)
    for k, t in enumerate(counts):
        events = json.loads(Path(profiled[t].end_profiling()).read_text())
        times: dict[str, list[float]] = collections.defaultdict(list)
        keys = {}
        for e in events:
            if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
                times[e["name"]].append(float(e["dur"]))
                keys[e["name"]] = ort_key(e["args"])
        for node, ts in times.items():
            row = rows[keys[node]]
            row["ort"][k] += float(np.median(ts[3::2]))  # the second of each turn's two
            row["ort_n"] += k == 0
    out = []
    for key, row in rows.items():
        d2 = row["rvm"][1] - row["ort"][1]
        d1 = row["rvm"][0] - row["ort"][0]
        out.append({**row, "key": [str(v) for v in key], "kernels": sorted(row["kernels"]),
                    "d2": d2, "d1": d1})  # fmt: skip
    out.sort(key=lambda r: -r["d2"])
    medians = {f"{side}_{t}t_ms": float(np.median(v)) for (side, t), v in walls.items()}
    return {"rows": out, "walls": medians}


def table(name: str, result: dict, threads: int) -> str:
    w = result["walls"]
    r1, r2, o1, o2 = (w[f"{s}_{t}t_ms"] for s in ("rvm", "ort") for t in (1, threads))
    lines = [
        f"\n{name}: plain walls, medians (ms): rvm {r1:.2f} / {r2:.2f}, ORT {o1:.2f} / {o2:.2f} "
        f"(1 / {threads} threads); rvm/ORT {r1 / o1:.3f} / {r2 / o2:.3f}; speedup rvm "
        f"{r1 / r2:.2f}, ORT {o1 / o2:.2f}",
        f"{'row':30s}{'n':>3}{'rvm1':>8}{'rvm' + str(threads):>8}{'sp':>6}{'n':>4}{'ort1':>8}"
        f"{'ort' + str(threads):>8}{'sp':>6}{'d2':>8}{'d1':>8}  rvm kernels",
    ]

    def sp(a: float, b: float) -> float:
        return a / b if b else 0.0

    total = np.zeros(4)
    for r in result["rows"]:
        a, b = r["rvm"], r["ort"]
        lines.append(
            f"{' '.join(r['key'])[:30]:30s}{r['rvm_n']:3d}{a[0]:8.0f}{a[1]:8.0f}{sp(*a):6.2f}"
            f"{r['ort_n']:4d}{b[0]:8.0f}{b[1]:8.0f}{sp(*b):6.2f}{r['d2']:8.0f}{r['d1']:8.0f}  "
            f"{' '.join(r['kernels'])[:60]}"
        )
        total += [a[0], a[1], b[0], b[1]]
    lines.append(
        f"{'sum':30s}{'':3s}{total[0]:8.0f}{total[1]:8.0f}{sp(total[0], total[1]):6.2f}{'':4s}"
        f"{total[2]:8.0f}{total[3]:8.0f}{sp(total[2], total[3]):6.2f}"
        f"{total[1] - total[3]:8.0f}{total[0] - total[2]:8.0f}"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="squeezenet,inception_v2", help="comma-separated models")
    parser.add_argument("--runs", type=int, default=20, help="rounds of the four turns")
    parser.add_argument(
        "--threads", type=int, default=None, help="the thread count against one (rvm's default)"
    )
    parser.add_argument("--batch", type=int, default=1, help="images a call")
    parser.add_argument("--name", default="thread_layers", help="results file name, no suffix")
    args = parser.parse_args()
    args.threads = args.threads or rvm.get_num_threads()
    if args.threads < 2 or min(args.runs, args.batch) < 1:
        parser.error("--threads must be at least 2, --runs and --batch at least 1")
    run_models(args, profile, lambda name, result: table(name, result, args.threads))


def run_models(
    args: argparse.Namespace,
    profile: Callable[[str, int, int, Path, int], dict],
    table: Callable[[str, dict], str],
) -> None:
    """Each model of ``args.only`` profiled (``profile(name, runs, threads, tmp, batch)``) and
    its ``table`` printed, then the results written to ``args.name`` with the machine and
    the arguments: what this script's and `bf16_layers.py`'s ``main`` share."""
    print(machine_line())
    models = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only.split(","):
            models[name] = profile(name, args.runs, args.threads, Path(tmp), args.batch)
            print(table(name, models[name]))
    print(f"load {os.getloadavg()}")
    payload = {"machine": machine(), "runs": args.runs, "threads": args.threads,
               "batch": args.batch}  # fmt: skip
    write_results(args.name, {**payload, "models": models})


if __name__ == "__main__":
    main()
