"""Where a light CNN's second thread goes: per kernel, what a call costs at two threads
against one, from counters a loaded machine distorts least.

Run: ``python benchmarks/two_threads.py [--only squeezenet,inception_v2] [--runs 40]
[--threads 2] [--int8] [--batch 1]``.

Per model (random weights, `common.light_model_files`; with ``--int8`` the model quantized by
ONNX Runtime as `precision_int8.py` quantizes it, its outputs checked against ORT's int8 run
of it by top-1 and `INT8_TOLERANCE`), in one process, rvm's compiled mode
with a callback around each kernel (`VirtualMachine.set_instrument`), runs on one thread and
on ``--threads`` alternated run by run (`rvm.set_num_threads`). Around each kernel call, and
between calls (the VM's own work, row ``vm``), it reads: the wall clock, the calling thread's
CPU time, the first helper's CPU time (``pthread_getcpuclockid``), each thread's CPU time
inside the pool's pieces (`rvm.kernels.poolstate.measure`), the pool's jobs, the jobs that
found helpers asleep (`workpool.wakes`), the helpers' and the callers' sleeps
(`workpool.naps`) and the callers' wait at jobs' ends (`poolstate.join_time`). Per kernel
(its calls in a run summed, medians over runs, microseconds):

- ``wall`` at the threads, ``T1`` its thread CPU at one thread (the whole work);
- ``pieces``: the CPU inside pieces at the threads (all threads): beside ``T1``, what is done
  twice (a product packing B again a piece) or slower when two cores share memory;
- ``serial``: the caller's CPU outside pieces at the threads (copies, fills, job set-up, the
  kernel run unsplit, and its spin at jobs' ends);
- ``join``: the caller's wait at jobs' ends (wall); ``idle``: the helper's CPU outside pieces
  (its spin while the caller works alone); ``lost`` = threads x wall - T1, what the kernel's
  window costs beyond the work (with the helper spinning, about its CPU at the threads);
- ``jobs``, ``pieces_n``, ``wakes``, ``naps`` (helpers'), ``join_naps`` (callers') a run.

Rows sorted by ``lost``, the largest loss first; totals per call (the instrumented runs and
plain ones). The ``vm`` row holds the probe's own cost (a read of the counters is a few
microseconds, two a kernel): beside the table, the VM's work alone, a call with every kernel
skipped (`rvm.SKIP_RUN`), plain and under the probe; their difference is what the probe adds
to the ``vm`` row. Writes ``benchmarks/results/two_threads.json`` (``--name``).
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
import onnx
from model_child import as_outputs, check_outputs

import rvm
from rvm.kernels import poolstate, workpool
from rvm.testing.onnx_models import compare, run_ort
from rvm.testing.quantized_models import ort_saturates, quantize_with_ort

INT8_TOLERANCE = 5e-2  # rvm int8's logits against ORT int8's, relative to the largest

# Read at each kernel's edge, in this order.
FIELDS = ("wall", "cpu", "helper", "in_caller", "n_caller", "in_helper", "n_helper", "jobs",
          "wakes", "naps", "join_naps", "join")  # fmt: skip
COLUMNS = ("wall", "T1", "pieces", "serial", "join", "idle", "lost", "jobs", "pieces_n",
           "wakes", "naps", "join_naps")  # fmt: skip


Edge = Callable[[str, tuple, bool], None]


class Probe:
    """The counters of `FIELDS`, read cheaply (no /proc, no Python allocation beyond a tuple)."""

    def __init__(self) -> None:
        self.clock: int | None = None

    def threads(self, count: int) -> None:
        rvm.set_num_threads(count)
        helpers = workpool._helpers  # the first helper's CPU clock
        self.clock = time.pthread_getcpuclockid(helpers[0].ident) if helpers else None

    def read(self) -> tuple[int, ...]:
        stats, line = poolstate.piece_times(), workpool.naps()
        caller, helper = stats[0], stats[1] if len(stats) > 1 else (0, 0)
        return (
            time.perf_counter_ns(),
            time.thread_time_ns(),
            time.clock_gettime_ns(self.clock) if self.clock is not None else 0,
            caller[0], caller[1], helper[0], helper[1],
            workpool.jobs(), workpool.wakes(), line[0], line[1], poolstate.join_time(),
        )  # fmt: skip


def profile(name: str, runs: int, threads: int, int8: bool = False, batch: int = 1) -> dict:
    path, _, model, inputs = light_model_files(name, Path(tempfile.mkdtemp()), batch)
    if int8:  # as `precision_int8.py` quantizes it (7-bit weights where ORT's saturate)
        model = quantize_with_ort(model, reduce_range=ort_saturates())
        onnx.save(model, path)
    vm = rvm.VirtualMachine(rvm.compile(rvm.from_onnx(str(path))), exec_mode="compiled")
    f = vm["main"]
    # outputs first: a wrong model fails the run before anything is timed
    got, want = as_outputs(f(*inputs)), run_ort(onnx.load(str(path)), inputs)
    if int8:
        result = compare(got[-1], want[-1])
        if result.rel_err > INT8_TOLERANCE or not result.top1_equal:
            raise AssertionError(f"rvm int8: the logits differ from ORT int8's: {result}")
    else:
        check_outputs("rvm", got, want)
    probe = Probe()
    items: list[tuple[str, tuple[int, ...]]] = []
    last: list[tuple[int, ...] | None] = [None]

    def edge(kernel: str, args: tuple, before: bool) -> None:
        now = probe.read()
        if last[0] is not None:
            items.append(("vm" if before else kernel, tuple(a - b for a, b in zip(now, last[0]))))
        last[0] = now

    per: dict[int, list[list[tuple[str, tuple[int, ...]]]]] = {1: [], threads: []}
    plain: dict[int, list[tuple[int, ...]]] = {1: [], threads: []}
    poolstate.measure(True)
    try:
        for r in range(2 * runs + 4):
            count = (1, threads)[r % 2]
            probe.threads(count)
            for _ in range(2):
                f(*inputs)  # settled on this count
            start = probe.read()
            f(*inputs)
            end = probe.read()
            vm.set_instrument(edge)
            items.clear()
            last[0] = None
            f(*inputs)
            vm.set_instrument(None)
            if r >= 4:  # the first two of each count warm up
                per[count].append(list(items))
                plain[count].append(tuple(b - a for a, b in zip(start, end)))
    finally:
        poolstate.measure(False)
        rvm.set_num_threads(threads)
    result = summarize(per, plain, threads)
    result["vm_alone"] = vm_alone(f, inputs, vm, edge)
    items.clear()
    return result


def vm_alone(f: Callable[..., object], inputs: list, vm: rvm.VirtualMachine, edge: Edge) -> dict:
    """The VM's own work a call (microseconds, medians of 100 calls): every kernel skipped
    (`rvm.SKIP_RUN`) by a callback that does nothing else (``plain``), and by the probe's
    callback (``probed``, the ``edge`` the table's runs take): ``probed - plain`` is what the
    probe adds to the ``vm`` row."""

    def skip(kernel: str, args: tuple, before: bool) -> object:
        return rvm.SKIP_RUN if before else None

    def probed(kernel: str, args: tuple, before: bool) -> object:
        edge(kernel, args, before)
        return rvm.SKIP_RUN if before else None

    medians = {}
    for key, callback in (("plain", skip), ("probed", probed)):
        vm.set_instrument(callback)
        times = []
        for _ in range(100):
            start = time.perf_counter_ns()
            f(*inputs)
            times.append(time.perf_counter_ns() - start)
        vm.set_instrument(None)
        medians[key] = float(np.median(times)) * 1e-3
    return medians


def summarize(per: dict, plain: dict, threads: int) -> dict:
    """Per kernel name (its calls in a run summed) the medians of `COLUMNS`, and per call."""
    at = {f: i for i, f in enumerate(FIELDS)}

    def grouped(runs: list) -> dict[str, np.ndarray]:
        out: dict[str, list[np.ndarray]] = collections.defaultdict(list)
        for run in runs:
            sums: dict[str, np.ndarray] = collections.defaultdict(lambda: np.zeros(len(FIELDS)))
            for kernel, d in run:
                sums[kernel] += d
            for kernel, v in sums.items():
                out[kernel].append(v)
        return {k: np.array(v) for k, v in out.items()}

    one, two = grouped(per[1]), grouped(per[threads])
    rows = []
    for kernel, v in two.items():
        if kernel not in one:
            continue

        def med(field: str, scale: float = 1e-3, a: np.ndarray = v) -> float:
            return float(np.median(a[:, at[field]])) * scale

        wall, t1 = med("wall"), float(np.median(one[kernel][:, at["cpu"]])) * 1e-3
        pieces = med("in_caller") + med("in_helper")
        row = {
            "kernel": kernel, "wall": wall, "T1": t1, "pieces": pieces,
            "serial": med("cpu") - med("in_caller"), "join": med("join"),
            "idle": med("helper") - med("in_helper"), "lost": threads * wall - t1,
            "jobs": med("jobs", 1), "pieces_n": med("n_caller", 1) + med("n_helper", 1),
            "wakes": float(v[:, at["wakes"]].mean()), "naps": float(v[:, at["naps"]].mean()),
            "join_naps": float(v[:, at["join_naps"]].mean()),
        }  # fmt: skip
        rows.append(row)
    rows.sort(key=lambda r: -r["lost"])
    calls = {}
    for count in (1, threads):
        p = np.array(plain[count], dtype=float)
        calls[str(count)] = {
            "wall_min_ms": float(p[:, at["wall"]].min()) * 1e-6,
            "wall_median_ms": float(np.median(p[:, at["wall"]])) * 1e-6,
            "cpu_ms": float(np.median(p[:, at["cpu"]] + p[:, at["helper"]])) * 1e-6,
            "jobs": float(p[:, at["jobs"]].mean()),
            "wakes": float(p[:, at["wakes"]].mean()),
            "naps": float(p[:, at["naps"]].mean()),
            "join_naps": float(p[:, at["join_naps"]].mean()),
        }
    return {"rows": rows, "calls": calls}


def table(name: str, result: dict, threads: int) -> str:
    lines = [f"\n{name}: per call (plain runs, medians; CPU = caller + first helper)"]
    for count, c in result["calls"].items():
        lines.append(
            f"  {count} thread(s): wall min {c['wall_min_ms']:.2f} median "
            f"{c['wall_median_ms']:.2f} ms, CPU {c['cpu_ms']:.2f} ms, jobs {c['jobs']:.0f}, "
            f"wakes {c['wakes']:.1f}, naps {c['naps']:.1f}, join naps {c['join_naps']:.2f}"
        )
    lines.append(f"per kernel at {threads} threads against 1 (us a run, medians; counts a run):")
    head = f"{'kernel':42s}" + "".join(f"{c:>10s}" for c in COLUMNS)
    lines.append(head)
    total = collections.Counter()
    for r in result["rows"]:
        cells = "".join(
            f"{r[c]:10.0f}" if c not in ("wakes", "naps", "join_naps") else f"{r[c]:10.2f}"
            for c in COLUMNS
        )
        lines.append(f"{r['kernel'][:42]:42s}{cells}")
        total.update({c: r[c] for c in COLUMNS})
    lines.append(f"{'sum':42s}" + "".join(f"{total[c]:10.0f}" for c in COLUMNS))
    alone = result["vm_alone"]
    lines.append(
        f"the VM alone, every kernel skipped: {alone['plain']:.0f} us a call; under the probe "
        f"{alone['probed']:.0f} us (the probe's share of the vm row: "
        f"{alone['probed'] - alone['plain']:.0f} us)"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="squeezenet,inception_v2", help="comma-separated models")
    parser.add_argument("--runs", type=int, default=40, help="runs at each thread count")
    parser.add_argument("--threads", type=int, default=2, help="the thread count against one")
    parser.add_argument("--name", default="two_threads", help="results file name, no suffix")
    parser.add_argument("--batch", type=int, default=1, help="images a call")
    parser.add_argument("--int8", action="store_true", help="the models quantized by ORT (QDQ)")
    args = parser.parse_args()
    if args.threads < 2 or args.runs < 1:
        parser.error("--threads must be at least 2 and --runs at least 1")
    print(machine_line())
    print(f"load {os.getloadavg()[0]:.2f}: wall columns are the scheduler's above ~1.5")
    models = {}
    for name in args.only.split(","):
        models[name] = profile(name, args.runs, args.threads, args.int8, args.batch)
        print(table(name, models[name], args.threads))
    payload = {"machine": machine(), "runs": args.runs, "threads": args.threads, "int8": args.int8,
               "batch": args.batch}  # fmt: skip
    write_results(args.name, {**payload, "models": models})


if __name__ == "__main__":
    main()
