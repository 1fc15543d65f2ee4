"""rvm's time for one model alone and beside ONNX Runtime's and OpenVINO's sessions in the same
process, series by series: whether the other runtimes' presence slows rvm's calls. Session
85: rvm's bf16 BERT-base took 56-58 ms a call in a process of its own, and in one where their
sessions had run fell into two states from one series of calls to the next, near its own
time or 20-30% above it, both threads computing throughout (docs/history.md, session 85).

Run: ``python benchmarks/beside_runtimes.py [--model bert|NAME] [--precision bf16]
[--series 8] [--calls 7]`` (``NAME`` one of the light CNNs).

A series is ``--calls`` calls, each after a 0.1 s pause and one untimed call (as the turns of
`precision.py`), rvm in the native exec mode, default threads. Per series: the median wall
ms; the process's CPU ms a call (all its threads) and the calling thread's; the pool's jobs
and the wake-ups of sleeping helpers a call (`rvm.kernels.workpool`); the host's steal (% of
the CPU time in ``/proc/stat`` over the series) and the process's transparent huge pages
(``AnonHugePages``, MB). First ``--series`` series alone, before either runtime is imported,
then ``--series`` more, each after two calls of ONNX Runtime (float32), OpenVINO's default
and OpenVINO in float32. rvm's output is checked first against its own NumPy kernels in
float32 (ONNX Runtime not imported yet), then against ONNX Runtime's (float32: 1e-3 of the
largest value; bf16: 3e-2, the bound of issue 29). Prints the table and writes
``benchmarks/results/beside_runtimes.json`` (``--name``) with the machine.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
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
    walls, cpus, own = [], [], []
    jobs0, wakes0, stat0 = workpool.jobs(), workpool.wakes(), _steal()
    for _ in range(calls):
        time.sleep(PAUSE_S)
        fn()
        p0, c0, s0 = time.process_time(), time.thread_time(), time.perf_counter()
        fn()
        walls.append(time.perf_counter() - s0)
        own.append(time.thread_time() - c0)
        cpus.append(time.process_time() - p0)
    delta = [b - a for a, b in zip(stat0, _steal(), strict=True)]
    made = 2 * calls  # each pause's untimed call and the timed one
    return {
        "wall_ms": 1e3 * statistics.median(walls),
        "process_cpu_ms": 1e3 * statistics.median(cpus),
        "thread_cpu_ms": 1e3 * statistics.median(own),
        "jobs": (workpool.jobs() - jobs0) / made,
        "wakes": (workpool.wakes() - wakes0) / made,
        "steal_pct": 100 * delta[7] / max(1, sum(delta)) if len(delta) > 7 else float("nan"),
        "huge_pages_mb": _huge_pages_mb(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="bert", help="bert or a light CNN's name")
    parser.add_argument("--precision", default="bf16", choices=("fp32", "bf16"))
    parser.add_argument("--series", type=int, default=8, help="series alone, and as many after")
    parser.add_argument("--calls", type=int, default=7, help="timed calls a series")
    parser.add_argument("--name", default="beside_runtimes")
    a = parser.parse_args()
    work = Path(tempfile.mkdtemp())
    path, inputs, out = _model(a.model, work)
    mod = rvm.from_onnx(str(path))
    fn = rvm.VirtualMachine(
        rvm.compile(mod, precision=a.precision, progress=False), exec_mode="native"
    )["main"]
    got = _output(fn(*inputs), out)
    reference = rvm.VirtualMachine(rvm.compile(mod, kernels="numpy", progress=False))["main"]
    err = _error(got, _output(reference(*inputs), out))
    assert err <= BOUND[a.precision], f"rvm {a.precision} is {err:.1e} off its NumPy kernels"

    def call() -> None:
        fn(*inputs)

    rows = [("alone", series(call, a.calls)) for _ in range(a.series)]
    import onnxruntime as ort
    import openvino as ov

    sess = ort.InferenceSession(str(path))
    names = [i.name for i in sess.get_inputs()]
    err = _error(got, np.asarray(sess.run(None, dict(zip(names, inputs, strict=True)))[out]))
    assert err <= BOUND[a.precision], f"rvm {a.precision} is {err:.1e} off ONNX Runtime's output"
    core = ov.Core()
    requests = [
        core.compile_model(str(path), "CPU", hint).create_infer_request()
        for hint in ({}, {"INFERENCE_PRECISION_HINT": "f32"})
    ]
    feeds = dict(zip(names, inputs, strict=True))
    for _ in range(a.series):
        for _ in range(2):
            sess.run(None, feeds)
            for request in requests:
                request.infer(dict(enumerate(inputs)))
        rows.append(("after the others", series(call, a.calls)))
    head = (
        f"{'series':18s} {'wall ms':>8s} {'proc CPU':>9s} {'own CPU':>8s} {'jobs':>6s} "
        f"{'wakes':>6s} {'steal %':>8s} {'THP MB':>7s}"
    )
    lines = [f"{a.model} {a.precision}, rvm native, error vs ORT {err:.1e}", head]
    for label, r in rows:
        lines.append(
            f"{label:18s} {r['wall_ms']:8.2f} {r['process_cpu_ms']:9.1f} "
            f"{r['thread_cpu_ms']:8.1f} {r['jobs']:6.1f} {r['wakes']:6.2f} "
            f"{r['steal_pct']:8.2f} {r['huge_pages_mb']:7.0f}"
        )
    lines.append(machine_line())
    print("\n".join(lines))
    write_results(
        a.name,
        {
            "machine": machine(),
            "model": a.model,
            "precision": a.precision,
            "calls": a.calls,
            "error_vs_ort": err,
            "series": [{"when": label, **r} for label, r in rows],
        },
    )


if __name__ == "__main__":
    main()
