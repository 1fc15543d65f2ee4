"""rvm's time for one model alone and beside ONNX Runtime's and OpenVINO's sessions, series by
series: whether the other runtimes slow rvm's calls. Session 85 saw rvm's bf16 BERT-base take
56-58 ms a call in a process of its own and, in one where their sessions had run, fall into two
states from one series of calls to the next, near its own time or 20-30% above it, both
threads computing throughout. Session 86 ran the two in turns in two processes: the slow
state came to both in the same minutes, so it is the host's (docs/history.md, session 86).

Run: ``python benchmarks/beside_runtimes.py [--model bert|NAME] [--precision bf16]
[--series 8] [--calls 7] [--processes 2]`` (``NAME`` one of the light CNNs).

A series is ``--calls`` calls, each after a 0.1 s pause and one untimed call (as the turns of
`precision.py`), rvm in the native exec mode, default threads. Per series: the median wall
ms; the process's CPU ms a call (all its threads) and the calling thread's; the pool's jobs
and the wake-ups of sleeping helpers a call (`rvm.kernels.workpool`); the process's minor page
faults a timed call (median); the host's steal (% of the CPU time in ``/proc/stat`` over the
series) and the process's transparent huge pages (``AnonHugePages``, MB).

- ``--processes 2`` (the default): two processes in turns, one series each at a time while the
  other waits, in the order alone, beside, beside, alone, alone...: in one rvm alone (ONNX
  Runtime and OpenVINO never imported), in the other rvm beside ONNX Runtime's session and
  OpenVINO's default and float32 requests, each series after two calls of each of them. Both
  processes see the host's same spells; adjacent series of the two are paired, and the
  median of their ratios (beside over alone) is printed.
- ``--processes 1``: in this process, ``--series`` series alone, before either runtime is
  imported, then ``--series`` more, each after two calls of each of them. A spell of the
  host's during the second half reads as the others' doing.

rvm's output is checked first against its own NumPy kernels in float32 (before ONNX Runtime
is imported), then against ONNX Runtime's (float32: 1e-3 of the largest value; bf16: 3e-2,
the bound of issue 29). Prints the table and writes
``benchmarks/results/beside_runtimes.json`` (``--name``) with the machine.
"""

from __future__ import annotations

import argparse
import multiprocessing
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import light_model_files, machine, machine_line, write_results

# isort: split
import numpy as np

import rvm
from rvm.kernels import workpool

PAUSE_S = 0.1
BOUND = {"fp32": 1e-3, "bf16": 3e-2}


def _model(name: str, work: Path) -> tuple[Path, list[np.ndarray], int]:
    """(the ONNX file, its inputs, the output compared) of ``name``."""
    if name != "bert":
        path, _, _, inputs = light_model_files(name, work)
        return path, inputs, -1
    from transformer_models import export_bert

    ids = np.random.default_rng(0).integers(0, 30000, (1, 128))
    return export_bert(work), [ids, np.ones_like(ids), np.zeros_like(ids)], 0


def _output(result: Any, index: int) -> np.ndarray:
    """Output ``index`` of a call's result (one array or several)."""
    return np.asarray(result[index] if isinstance(result, (tuple, list)) else result)


def _error(got: np.ndarray, want: np.ndarray) -> float:
    """The largest difference over the largest value of ``want``."""
    return float(np.abs(got - want).max() / np.abs(want).max())


def _steal() -> list[int]:
    """The host's CPU time counters (``/proc/stat``'s first line; zeros where absent)."""
    try:
        with open("/proc/stat") as f:
            return [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return [0] * 10


def _huge_pages_mb() -> float:
    """The process's anonymous memory in transparent huge pages (MB; NaN where unknown)."""
    try:
        with open("/proc/self/smaps_rollup") as f:
            for line in f:
                if line.startswith("AnonHugePages"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def series(fn: Any, calls: int) -> dict[str, float]:
    """One series of ``calls`` timed calls of ``fn`` (see the module docstring)."""
    walls, cpus, own, faults = [], [], [], []
    jobs0, wakes0, stat0 = workpool.jobs(), workpool.wakes(), _steal()
    for _ in range(calls):
        time.sleep(PAUSE_S)
        fn()
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        p0, c0, s0 = time.process_time(), time.thread_time(), time.perf_counter()
        fn()
        walls.append(time.perf_counter() - s0)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
        own.append(time.thread_time() - c0)
        cpus.append(time.process_time() - p0)
    delta = [b - a for a, b in zip(stat0, _steal(), strict=True)]
    made = 2 * calls  # each pause's untimed call and the timed one
    return {
        "wall_ms": 1e3 * statistics.median(walls),
        "process_cpu_ms": 1e3 * statistics.median(cpus),
        "thread_cpu_ms": 1e3 * statistics.median(own),
        "page_faults": statistics.median(faults),
        "jobs": (workpool.jobs() - jobs0) / made,
        "wakes": (workpool.wakes() - wakes0) / made,
        "steal_pct": 100 * delta[7] / max(1, sum(delta)) if len(delta) > 7 else float("nan"),
        "huge_pages_mb": _huge_pages_mb(),
    }


def _rvm_call(
    path: Path, inputs: list[np.ndarray], out: int, precision: str
) -> tuple[Callable[..., Any], np.ndarray]:
    """rvm's ``main`` for the model (native mode), its output checked against rvm's NumPy
    kernels in float32 (before any other runtime is imported); (the function, its output)."""
    mod = rvm.from_onnx(str(path))
    fn = rvm.VirtualMachine(rvm.compile(mod, precision=precision, progress=False), "native")
    got = _output(fn["main"](*inputs), out)
    reference = rvm.VirtualMachine(rvm.compile(mod, kernels="numpy", progress=False))["main"]
    err = _error(got, _output(reference(*inputs), out))
    assert err <= BOUND[precision], f"rvm {precision} is {err:.1e} off its NumPy kernels"
    return fn["main"], got


def _others(
    path: Path, inputs: list[np.ndarray], out: int, got: np.ndarray, precision: str
) -> tuple[float, Callable[[], None]]:
    """(ONNX Runtime's session, OpenVINO's default and float32 requests) of the model, rvm's
    output ``got`` checked against ONNX Runtime's; returns (error, a function running each
    twice)."""
    import onnxruntime as ort
    import openvino as ov

    sess = ort.InferenceSession(str(path))
    names = [i.name for i in sess.get_inputs()]
    feeds = dict(zip(names, inputs, strict=True))
    err = _error(got, np.asarray(sess.run(None, feeds)[out]))
    assert err <= BOUND[precision], f"rvm {precision} is {err:.1e} off ONNX Runtime's output"
    core = ov.Core()
    requests = [
        core.compile_model(str(path), "CPU", hint).create_infer_request()
        for hint in ({}, {"INFERENCE_PRECISION_HINT": "f32"})
    ]

    def run_others() -> None:
        for _ in range(2):
            sess.run(None, feeds)
            for request in requests:
                request.infer(dict(enumerate(inputs)))

    return err, run_others


def _worker(conn: Any, path: Path, inputs: list, out: int, precision: str, calls: int,
            beside: bool) -> None:  # fmt: skip
    """A process of the two-process mode: rvm alone, or (``beside``) with the other runtimes'
    sessions, each series of ``calls`` after two calls of each of them. Sends its error, then a
    series for each message until None."""
    fn, got = _rvm_call(path, inputs, out, precision)
    err, run_others = _others(path, inputs, out, got, precision) if beside else (0.0, None)
    conn.send(err)
    while conn.recv() is not None:
        if run_others is not None:
            run_others()
        conn.send(series(lambda: fn(*inputs), calls))


def _two_processes(a: argparse.Namespace, path: Path, inputs: list, out: int) -> tuple:
    """(rows, error vs ORT, beside over alone for each pair of adjacent series): series in
    turns of two processes, rvm alone in one (ONNX Runtime and OpenVINO never imported) and
    beside the others in the other, the first of each pair alternating; one process waits
    while the other runs."""
    ctx = multiprocessing.get_context("spawn")
    pipes, procs = [], []
    for beside in (False, True):
        mine, theirs = ctx.Pipe()
        proc = ctx.Process(target=_worker, args=(theirs, path, inputs, out, a.precision,
                                                 a.calls, beside))  # fmt: skip
        proc.start()
        pipes.append(mine)
        procs.append(proc)
    try:
        err = max(pipe.recv() for pipe in pipes)
        rows, ratios = [], []
        for i in range(a.series):  # a pair of adjacent series: alone first, then beside first
            pair = {}
            for which in (i % 2, 1 - i % 2):
                pipes[which].send(True)
                pair[which] = pipes[which].recv()
                rows.append(("beside (own proc)" if which else "alone (own proc)", pair[which]))
            ratios.append(pair[1]["wall_ms"] / pair[0]["wall_ms"])
    finally:
        for pipe, proc in zip(pipes, procs, strict=True):
            if proc.is_alive():
                pipe.send(None)
            proc.join(60)
    return rows, err, ratios


def _one_process(a: argparse.Namespace, path: Path, inputs: list, out: int) -> tuple:
    """(rows, error vs ORT, no pairs): ``--series`` series alone, then as many after the
    others, in this process."""
    fn, got = _rvm_call(path, inputs, out, a.precision)
    rows = [("alone", series(lambda: fn(*inputs), a.calls)) for _ in range(a.series)]
    err, run_others = _others(path, inputs, out, got, a.precision)
    for _ in range(a.series):
        run_others()
        rows.append(("after the others", series(lambda: fn(*inputs), a.calls)))
    return rows, err, []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="bert", help="bert or a light CNN's name")
    parser.add_argument("--precision", default="bf16", choices=("fp32", "bf16"))
    parser.add_argument("--series", type=int, default=8, help="series alone, and as many after")
    parser.add_argument("--calls", type=int, default=7, help="timed calls a series")
    parser.add_argument("--processes", type=int, default=2, choices=(1, 2))
    parser.add_argument("--name", default="beside_runtimes")
    a = parser.parse_args()
    path, inputs, out = _model(a.model, Path(tempfile.mkdtemp()))
    here = str(Path(__file__).resolve().parent)
    if here not in sys.path:  # the export took it off (its transformers.py shadows the
        sys.path.append(here)  # package); the spawned processes import `common` from it
    run = _two_processes if a.processes == 2 else _one_process
    rows, err, ratios = run(a, path, inputs, out)
    head = (
        f"{'series':18s} {'wall ms':>8s} {'proc CPU':>9s} {'own CPU':>8s} {'jobs':>6s} "
        f"{'wakes':>6s} {'faults':>7s} {'steal %':>8s} {'THP MB':>7s}"
    )
    lines = [f"{a.model} {a.precision}, rvm native, error vs ORT {err:.1e}", head]
    for label, r in rows:
        lines.append(
            f"{label:18s} {r['wall_ms']:8.2f} {r['process_cpu_ms']:9.1f} "
            f"{r['thread_cpu_ms']:8.1f} {r['jobs']:6.1f} {r['wakes']:6.2f} {r['page_faults']:7.0f} "
            f"{r['steal_pct']:8.2f} {r['huge_pages_mb']:7.0f}"
        )
    kinds = list(dict.fromkeys(label for label, _ in rows))
    walls = {k: [r["wall_ms"] for label, r in rows if label == k] for k in kinds}
    lines.append(
        "medians of the series: "
        + ", ".join(f"{k} {statistics.median(v):.2f} ms" for k, v in walls.items())
    )
    if ratios:  # two processes: each pair of adjacent series, beside over alone
        each = " ".join(f"{r:.2f}" for r in ratios)
        median = statistics.median(ratios)
        lines.append(f"beside / alone, adjacent series paired: median {median:.3f} ({each})")
    lines.append(machine_line())
    print("\n".join(lines))
    write_results(
        a.name,
        {
            "machine": machine(),
            "model": a.model,
            "precision": a.precision,
            "calls": a.calls,
            "processes": a.processes,
            "error_vs_ort": err,
            "series": [{"when": label, **r} for label, r in rows],
        },
    )


if __name__ == "__main__":
    main()
