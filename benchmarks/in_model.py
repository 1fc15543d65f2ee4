"""Per kernel of a light CNN at one thread: its CPU in the model against alone, beside ONNX
Runtime's nodes, to tell a kernel that is slow from one the model makes slow.

Run: ``python benchmarks/in_model.py [--only squeezenet] [--runs 40] [--alone 30] [--threads 1]
[--batch 1]``.

Per model (random weights, `common.light_model_files`), in one process: rvm's compiled mode
(its outputs first checked against ORT's) with a callback around each kernel call
(`VirtualMachine.set_instrument`) reads the calling thread's CPU time (`time.thread_time_ns`:
other processes' preemptions left out, so a loaded machine distorts it least) over ``--runs``
calls (``in model``: median and minimum a call position), then calls each kernel alone on the
same arguments ``--alone`` times back to back (``alone``: the median; its operands hot in the
caches); then ORT (default session options, ``intra_op_num_threads`` = ``--threads``) profiled
per node (``enable_profiling``; each node's least time over ``--runs`` runs). ``in model``
above ``alone`` is what the model adds to a kernel (its operands cold or written just before,
its weights evicted by the layers between); ``alone`` above ORT's node is the kernel's own
loss. At more than one thread the CPU times are the caller's only (its helpers' pieces left
out). Writes ``benchmarks/results/in_model.json`` (``--name``).
"""

from __future__ import annotations

import argparse
import collections
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from common import light_model_files, machine, machine_line, write_results

# isort: split
import numpy as np
from model_child import as_outputs, check_outputs
from op_kinds import ort_profile

import rvm
from rvm.testing.onnx_models import run_ort


def _shape(value: object) -> list[int] | None:
    shape = getattr(value, "shape", None)
    return None if shape is None else [int(d) for d in shape]


def rvm_calls(
    path: Path, model: object, inputs: list, runs: int, alone: int, check: Callable | None = None
) -> list[dict]:
    """rvm's compiled mode on ``path`` (``model`` loaded: ORT's outputs to check against, by
    ``check(got, want)`` or `check_outputs`): per kernel call of a run, its thread CPU in the
    model (median and minimum over ``runs``) and alone (median of ``alone`` calls),
    microseconds."""
    vm = rvm.VirtualMachine(rvm.compile(rvm.from_onnx(str(path))), exec_mode="compiled")
    f = vm["main"]
    got, want = as_outputs(f(*inputs)), run_ort(model, inputs)
    if check is None:
        check_outputs("rvm", got, want)
    else:
        check(got, want)
    cpu: dict[int, list[int]] = collections.defaultdict(list)
    calls: list[tuple[str, tuple]] = []
    start = [0]

    def edge(kernel: str, args: tuple, before: bool) -> None:
        if before:
            start[0] = time.thread_time_ns()
            return
        cpu[len(calls)].append(time.thread_time_ns() - start[0])
        calls.append((kernel, args))

    for r in range(runs + 3):  # the first three warm up
        calls.clear()
        vm.set_instrument(edge)
        f(*inputs)
        vm.set_instrument(None)
        if r < 3:
            cpu.clear()
    names = vm.executable.primitive_names
    rows = []
    for i, (kernel, args) in enumerate(calls):
        fn = vm.context.raw_packed[names.index(kernel)]
        times = []
        for _ in range(alone + 2):  # two to warm up
            t0 = time.thread_time_ns()
            fn(*args)
            times.append(time.thread_time_ns() - t0)
        rows.append({
            "call": i, "kernel": kernel,
            "in_model_us": float(np.median(cpu[i])) / 1e3,
            "in_model_min_us": float(np.min(cpu[i])) / 1e3,
            "alone_us": float(np.median(times[2:])) / 1e3,
            "alone_min_us": float(np.min(times[2:])) / 1e3,
            "shapes": [_shape(a) for a in args],
        })  # fmt: skip
    return rows


def ort_nodes(path: Path, inputs: list, runs: int, threads: int) -> list[dict]:
    """ORT's nodes on ``path`` in the order they ran: op, least time (us), shapes."""
    events, best = ort_profile(path, inputs, runs, threads)
    rows: dict[str, dict] = {}
    for e in events:
        name = e.get("name")
        if e.get("cat") != "Node" or name not in best or name in rows:
            continue
        args = e.get("args", {})
        shapes = [next(iter(s.values())) for s in args.get("input_type_shape", [])][:2]
        rows[name] = {"node": name, "op": args.get("op_name"), "us": best[name], "shapes": shapes}
    return list(rows.values())


def table(name: str, mine: list[dict], theirs: list[dict]) -> str:
    lines = [f"\n{name}: rvm per kernel call (thread CPU, us)"]
    lines.append(f"{'call':>4} {'kernel':36s}{'model':>9}{'min':>9}{'alone':>9}  shapes")
    for r in mine:
        lines.append(
            f"{r['call']:4d} {r['kernel'][:36]:36s}{r['in_model_us']:9.0f}"
            f"{r['in_model_min_us']:9.0f}{r['alone_us']:9.0f}  {r['shapes'][:2]}"
        )
    sums = [sum(r[k] for r in mine) for k in ("in_model_us", "in_model_min_us", "alone_us")]
    lines.append(f"{'':4} {'sum':36s}" + "".join(f"{s:9.0f}" for s in sums))
    lines.append(f"{name}: ORT per node (least time, us)")
    for r in theirs:
        lines.append(f"     {r['op'][:36]:36s}{r['us']:9.0f}  {r['shapes']}")
    lines.append(f"     {'sum':36s}{sum(r['us'] for r in theirs):9.0f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="squeezenet", help="comma-separated models")
    parser.add_argument("--runs", type=int, default=40, help="runs in the model, each runtime")
    parser.add_argument("--alone", type=int, default=30, help="calls of each kernel alone")
    parser.add_argument("--threads", type=int, default=1, help="threads of both")
    parser.add_argument("--batch", type=int, default=1, help="images a call")
    parser.add_argument("--name", default="in_model", help="results file name, no suffix")
    args = parser.parse_args()
    if min(args.runs, args.alone, args.threads, args.batch) < 1:
        parser.error("--runs, --alone, --threads and --batch must be at least 1")
    rvm.set_num_threads(args.threads)
    print(machine_line())
    models = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only.split(","):
            path, _, model, inputs = light_model_files(name, Path(tmp), args.batch)
            mine = rvm_calls(path, model, inputs, args.runs, args.alone)
            theirs = ort_nodes(path, inputs, args.runs, args.threads)
            models[name] = {"rvm": mine, "ort": theirs}
            print(table(name, mine, theirs))
    print(f"load {os.getloadavg()}")
    payload = {"machine": machine(), "threads": args.threads, "batch": args.batch}
    write_results(args.name, {**payload, "runs": args.runs, "alone": args.alone, "models": models})


if __name__ == "__main__":
    main()
