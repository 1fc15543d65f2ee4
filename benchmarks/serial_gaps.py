"""Where a light CNN's calling thread works alone at two threads: per kernel, the wall time
before its first pool job, between its jobs and after its last one.

Run: ``python benchmarks/serial_gaps.py [--only squeezenet,inception_v2,resnet50] [--runs 20]
[--threads 2] [--batch 1]``.

Per model (random weights, `common.light_model_files`), rvm's compiled mode at ``--threads``
with `rvm.kernels.poolstate.measure` on and a callback around each kernel
(`VirtualMachine.set_instrument`): each kernel's edges (the monotonic clock) and each pool
job's publishing and end (`workpool`'s job log, the same clock) give, per kernel (its calls
in a run summed, medians over ``--runs``, microseconds): ``wall``, ``jobs`` (the jobs' own
wall time), ``before`` (from the kernel's start to its first job: the kernel's dispatch,
checks, set-up, copies and fills its caller does alone), ``between`` (between its jobs) and
``after`` (from its last job's end to its return); for a kernel with no job, ``before`` is
its whole time. ``vm`` is the time between kernels (the probe's own cost in it). Writes
``benchmarks/results/serial_gaps.json`` (``--name``).
"""

from __future__ import annotations

import argparse
import collections
import tempfile
import time
from pathlib import Path

from common import light_model_files, machine, machine_line, write_results

# isort: split
import numpy as np

import rvm
from rvm.kernels import poolstate

COLUMNS = ("wall", "jobs", "before", "between", "after", "n_jobs", "calls")


def check_against_ort(path: Path, inputs: list[np.ndarray], got: object) -> None:
    """rvm's outputs against ONNX Runtime's on the same inputs, before any timing: a
    ValueError naming the output and its error where they disagree."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    want = sess.run(None, dict(zip(names, inputs)))
    got_list = list(got) if isinstance(got, (tuple, list)) else [got]
    for i, (g, w) in enumerate(zip(got_list, want)):
        g = np.asarray(g)
        if g.shape != w.shape or not np.allclose(g, w, rtol=1e-3, atol=1e-4):
            err = float(np.max(np.abs(g - w))) if g.shape == w.shape else float("nan")
            raise ValueError(
                f"{path.name}: output {i} differs from ONNX Runtime's "
                f"(shape {g.shape} against {w.shape}, max error {err:.3g})"
            )


def profile(name: str, runs: int, threads: int, batch: int = 1) -> dict:
    path, _, _, inputs = light_model_files(name, Path(tempfile.mkdtemp()), batch)
    vm = rvm.VirtualMachine(rvm.compile(rvm.from_onnx(str(path))), exec_mode="compiled")
    f = vm["main"]
    rvm.set_num_threads(threads)
    check_against_ort(path, inputs, f(*inputs))
    edges: list[tuple[str, bool, int]] = []

    def edge(kernel: str, args: tuple, before: bool) -> None:
        edges.append((kernel, before, time.perf_counter_ns()))

    per_run = []
    for r in range(runs + 3):
        for _ in range(2):
            f(*inputs)
        edges.clear()
        poolstate.measure(True)
        vm.set_instrument(edge)
        f(*inputs)
        vm.set_instrument(None)
        jobs = poolstate.job_edges()
        poolstate.measure(False)
        if r < 3:
            continue
        sums: dict[str, np.ndarray] = collections.defaultdict(lambda: np.zeros(len(COLUMNS)))
        k = 0
        last_end = None
        for i in range(0, len(edges) - 1, 2):
            kernel, b0, t0 = edges[i]
            _, b1, t1 = edges[i + 1]
            assert b0 and not b1
            if last_end is not None:
                sums["vm"] += (t0 - last_end, 0, t0 - last_end, 0, 0, 0, 1)
            last_end = t1
            while k < len(jobs) and jobs[k][0] < t0:
                k += 1
            mine = []
            while k < len(jobs) and jobs[k][1] <= t1:
                mine.append(jobs[k])
                k += 1
            if mine:
                before = mine[0][0] - t0
                after = t1 - mine[-1][1]
                between = sum(b[0] - a[1] for a, b in zip(mine, mine[1:]))
                inside = sum(b - a for a, b in mine)
            else:
                before, after, between, inside = t1 - t0, 0, 0, 0
            sums[kernel] += (t1 - t0, inside, before, between, after, len(mine), 1)
        per_run.append(sums)
    kernels = per_run[0].keys()
    rows = []
    for kernel in kernels:
        a = np.array([run[kernel] for run in per_run if kernel in run])
        med = np.median(a, axis=0)
        row = {"kernel": kernel}
        for c, v in zip(COLUMNS, med):
            row[c] = float(v) * (1e-3 if c not in ("n_jobs", "calls") else 1)
        rows.append(row)
    rows.sort(key=lambda r: -(r["before"] + r["between"] + r["after"]))
    return {"rows": rows}


def table(name: str, result: dict) -> str:
    lines = [f"\n{name}: per kernel (us a call, medians)"]
    lines.append(f"{'kernel':42s}" + "".join(f"{c:>9s}" for c in COLUMNS))
    total = collections.Counter()
    for r in result["rows"]:
        lines.append(f"{r['kernel'][:42]:42s}" + "".join(f"{r[c]:9.0f}" for c in COLUMNS))
        total.update({c: r[c] for c in COLUMNS})
    lines.append(f"{'sum':42s}" + "".join(f"{total[c]:9.0f}" for c in COLUMNS))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="squeezenet,inception_v2,resnet50", help="models")
    parser.add_argument("--runs", type=int, default=20, help="measured calls")
    parser.add_argument("--threads", type=int, default=2, help="threads")
    parser.add_argument("--batch", type=int, default=1, help="images a call")
    parser.add_argument("--name", default="serial_gaps", help="results file name, no suffix")
    args = parser.parse_args()
    print(machine_line())
    models = {}
    for name in args.only.split(","):
        models[name] = profile(name, args.runs, args.threads, args.batch)
        print(table(name, models[name]))
    payload = {"machine": machine(), "runs": args.runs, "batch": args.batch}
    write_results(args.name, {**payload, "models": models})


if __name__ == "__main__":
    main()
