"""A light CNN's two-thread cuts from its pieces' CPU times: what a loaded machine can measure.

Run: ``python benchmarks/cut_tails.py [--only resnet50] [--batch 1] [--runs 6] [--threads N]
[--wake 0] [--precision bf16]``.

Per model (random weights, `common.light_model_files`), in one process, rvm's compiled mode
(``--precision``; its outputs first checked against ONNX Runtime's) runs alternately on one
thread (each kernel's CPU time, ``T1``: `time.thread_time` of the calling thread around it,
`VirtualMachine.set_instrument`) and on ``--threads`` with
`rvm.kernels.poolstate.measure` on: every pool job (`poolstate.job_log`) and the CPU time of
each of its pieces (`poolstate.piece_log`). Each job's pieces are scheduled again in their
claim order on ``--threads`` threads that start together (the helpers ``--wake``
microseconds late), each taking the next piece as it is free: the job's ``span``, against
``half`` (its pieces' CPU over the threads). Per kernel (its calls in a call summed, medians
over ``--runs``, microseconds):

- ``T1``: its CPU at one thread (its serial work included);
- ``pieces``: its pool jobs' pieces' CPU at the threads: beside ``T1``, the work a cut adds
  (a band packing B again, a column run reading A again) or two cores sharing caches make
  slower;
- ``span``, ``half`` and ``tail`` = ``span - half``: what the cut's imbalance costs in wall
  time, were every piece as long as its CPU time and the threads all free;
- ``unpooled``: pieces of jobs run in one thread (one piece, or nested in another job's
  piece, whose CPU they are part of too): not in ``span``.

Wall clocks at two threads on a machine loaded by other jobs measure the scheduler (`two_threads.py`
prints them beside these counters); CPU times of pieces do not, so ``tail`` and ``pieces``
compare cuts where timing whole calls cannot. What they leave out: wake-ups (``--wake``), the
caller's serial work between jobs, and contention a load changes. Writes
``benchmarks/results/cut_tails.json`` (``--name``).
"""

from __future__ import annotations

import argparse
import collections
import heapq
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from common import light_model_files, machine, machine_line, write_results
from model_child import as_outputs, check_outputs, check_rounded

# isort: split
import numpy as np

import rvm
from rvm.kernels import poolstate
from rvm.testing.onnx_models import run_ort

COLUMNS = ("T1", "pieces", "span", "half", "tail", "unpooled")


def makespan(times: list[float], threads: int, wake: float) -> float:
    """When the last of pieces of ``times`` (in claim order) ends on ``threads`` threads, each
    taking the next piece as it is free, the helpers starting ``wake`` late."""
    free = [0.0] + [wake] * (threads - 1)
    heapq.heapify(free)
    for t in times:
        heapq.heappush(free, heapq.heappop(free) + t)
    return max(free)


def _jobs_of(pieces: list, jobs: list) -> tuple[list[list[float]], float]:
    """The pieces' CPU (us) of each pool job in ``jobs`` (`poolstate.job_log`'s records), in
    claim order, matched in ``pieces`` (`poolstate.piece_log`'s, in end order) by function;
    and the CPU of the pieces no pool job took."""
    used = [False] * len(pieces)
    out, i = [], 0
    for fn, n, *_ in jobs:
        got = []
        while i < len(pieces) and len(got) < n:
            if pieces[i][0] == fn and not used[i]:
                got.append(pieces[i])
                used[i] = True
            i += 1
        out.append([p[3] / 1e3 for p in sorted(got, key=lambda p: p[1])])
    rest = sum(p[3] / 1e3 for p, u in zip(pieces, used) if not u)
    return out, rest


def profile(name: str, batch: int, runs: int, threads: int, wake: float, precision: str) -> dict:
    path, _, model, inputs = light_model_files(name, Path(tempfile.mkdtemp()), batch)
    exe = rvm.compile(rvm.from_onnx(str(path)), precision=precision)
    vm = rvm.VirtualMachine(exe, exec_mode="compiled")
    f = vm["main"]
    check = check_rounded if precision == "bf16" else check_outputs
    check(name, as_outputs(f(*inputs)), run_ort(model, inputs))
    state, line = poolstate.state, poolstate.LINE
    edges: list[tuple[str, int, int]] = []
    cpu: dict[str, float] = collections.defaultdict(float)
    started = [0]

    def timed(kernel: str, args: tuple, before: bool) -> None:
        if before:
            started[0] = time.thread_time_ns()
        else:
            cpu[kernel] += (time.thread_time_ns() - started[0]) / 1e3

    def logged(kernel: str, args: tuple, before: bool) -> None:
        if not before:
            at = (int(state[poolstate.PIECES_LOGGED * line]), int(state[poolstate.LOGGED * line]))
            edges.append((kernel, *at))

    def run(count: int, instrument: Callable[[str, tuple, bool], None], logs: bool) -> None:
        rvm.set_num_threads(count)
        f(*inputs)  # settled on this count
        if logs:  # the logs from the instrumented call only
            edges.clear()
            poolstate.measure(True)
        vm.set_instrument(instrument)
        f(*inputs)
        vm.set_instrument(None)

    per: dict[str, list[list[float]]] = collections.defaultdict(list)
    try:
        for r in range(runs + 1):
            cpu.clear()
            run(1, timed, False)
            run(threads, logged, True)
            pieces, jobs = poolstate.piece_log(), poolstate.job_log()
            poolstate.measure(False)
            if r == 0:  # warm-up
                continue
            sums: dict[str, list[float]] = collections.defaultdict(lambda: [0.0] * len(COLUMNS))
            at_piece = at_job = 0
            for kernel, piece_end, job_end in edges:
                row = sums[kernel]
                found, rest = _jobs_of(pieces[at_piece:piece_end], jobs[at_job:job_end])
                for times in found:
                    span, half = makespan(times, threads, wake), sum(times) / threads
                    row[1] += sum(times)
                    row[2] += span
                    row[3] += half
                    row[4] += span - half
                row[5] += rest
                at_piece, at_job = piece_end, job_end
            for kernel, row in sums.items():
                row[0] = cpu.get(kernel, 0.0)
                per[kernel].append(row)
    finally:
        poolstate.measure(False)
        rvm.set_num_threads(threads)
    rows = [
        {"kernel": k, **dict(zip(COLUMNS, np.median(np.array(v), axis=0).tolist()))}
        for k, v in per.items()
    ]
    rows.sort(key=lambda r: -r["tail"])
    total = {c: sum(r[c] for r in rows) for c in COLUMNS}
    return {"kernels": rows, "total": total}


def lines_of(name: str, result: dict, top: int) -> list[str]:
    out = [f"{name}: per kernel (us a call, medians)", f"{'kernel':44}" + "".join(
        f"{c:>10}" for c in COLUMNS)]  # fmt: skip
    for r in result["kernels"][:top] + [{"kernel": "sum", **result["total"]}]:
        out.append(f"{r['kernel']:44}" + "".join(f"{r[c]:10.0f}" for c in COLUMNS))
    t = result["total"]
    out.append(
        f"pieces/T1 {t['pieces'] / max(t['T1'], 1e-9):.3f}; span {t['span'] / 1e3:.1f} ms against"
        f" half {t['half'] / 1e3:.1f} (tails {t['tail'] / 1e3:.2f} ms)"
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="resnet50", help="comma-separated models")
    parser.add_argument("--batch", type=int, default=1, help="images a call")
    parser.add_argument("--runs", type=int, default=6, help="calls at each thread count")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2,
                        help="threads of the cut (default: every CPU, as rvm's)")  # fmt: skip
    parser.add_argument("--wake", type=float, default=0.0, help="helpers' late start (us)")
    parser.add_argument("--top", type=int, default=30, help="kernels listed")
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16"),
                        help="rvm.compile's")  # fmt: skip
    parser.add_argument("--name", default="cut_tails", help="results file name, no suffix")
    args = parser.parse_args()
    head = f"threads {args.threads}; batch {args.batch}; {args.precision}"
    results, lines = {}, [machine_line(), head]
    for name in args.only.split(","):
        results[name] = profile(
            name, args.batch, args.runs, args.threads, args.wake, args.precision
        )
        lines += lines_of(name, results[name], args.top)
    print("\n".join(lines))
    write_results(
        args.name,
        {"machine": machine(), "threads": args.threads, "batch": args.batch,
         "wake_us": args.wake, "precision": args.precision, "models": results},
    )  # fmt: skip


if __name__ == "__main__":
    main()
