"""The first run on a new machine: rvm's own library not built yet, every cache empty.

Run: ``python benchmarks/first_run.py [--repeat 1] [--only quickstart,onnx_quickstart,compile]``.

Each measurement is a new process with ``RVM_CACHE_DIR`` and ``NUMBA_CACHE_DIR`` set to new
empty folders (so rvm's kernel library, `rvm.kernels`, compiles in it as on a fresh clone):

- ``quickstart``: ``python examples/quickstart.py`` (goal <= 5 s);
- ``onnx_quickstart``: ``python examples/onnx_quickstart.py``, squeezenet (goal <= 15 s);
- ``compile``: ``rvm.from_onnx`` + ``rvm.compile`` of squeezenet (random weights), timed
  around the compile alone (its CPU with its helper processes'), in a new process (goal
  <= 10 s); the first call after it is timed too (``first_call_s``): the library's
  methods a model's shapes take are built when first run (`rvm.kernels.parfor.caller`);

and the same command once more with the caches it filled (``warm``). A failing command (an
example checks its own results) fails the run. Wall time is what the goals name; CPU time
(user + system of the process and of any helper processes it waited for) is stated beside it
because the machine may be shared: the load average before and after each run is recorded.
On Linux the CPU includes every helper the command started, those it left running too (this
process adopts and reaps them: `_adopt_helpers`); elsewhere only the helpers it waited for.
The table gives medians over ``--repeat`` cold runs; writes ``benchmarks/results/first_run.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from common import ROOT, machine, machine_line, write_results

GOALS = {"quickstart": 5.0, "onnx_quickstart": 15.0, "compile": 10.0}

COMPILE_CHILD = textwrap.dedent(
    """
    import json, resource, sys, time
    import onnx
    import rvm
    from rvm.testing.onnx_models import light_model_path, randomize_weights
    model = randomize_weights(onnx.load(light_model_path("squeezenet")), seed=0)
    mod = rvm.from_onnx(model)
    def helpers():  # CPU of the helper processes that compiled kernels (waited for)
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime
    wall, cpu, cpu_helpers = time.perf_counter(), time.process_time(), helpers()
    ex = rvm.compile(mod)
    cpu = time.process_time() - cpu + helpers() - cpu_helpers
    row = {"wall_s": time.perf_counter() - wall, "cpu_s": cpu}
    # The first call builds the library's methods its convolutions and pools take.
    import numpy as np
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype("float32")
    wall, cpu = time.perf_counter(), time.process_time()
    rvm.VirtualMachine(ex)["main"](x)
    row["first_call_s"] = time.perf_counter() - wall
    row["first_call_cpu_s"] = time.process_time() - cpu
    print(json.dumps(row))
    """
)


def _command(what: str) -> list[str]:
    if what == "compile":
        return [sys.executable, "-c", COMPILE_CHILD]
    return [sys.executable, str(ROOT / "examples" / f"{what}.py")]


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _adopt_helpers() -> bool:
    """Make this process the reaper of its descendants' orphans (Linux's
    ``PR_SET_CHILD_SUBREAPER``): helpers a command leaves running (rvm's background builds, its
    compile server) then end as this process's children, so their CPU counts in
    ``RUSAGE_CHILDREN`` once reaped (`_reap`). False where that is not available (the CPU
    column then misses them)."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


ADOPTED = _adopt_helpers()
REAP_WAIT_S = 120.0  # at most, for the helpers a command left to end (they end with it)


def _reap() -> None:
    """Wait for the descendants a command left behind (adopted: `_adopt_helpers`), so that
    their CPU is counted; gives up after `REAP_WAIT_S`."""
    end = time.monotonic() + REAP_WAIT_S
    while ADOPTED and time.monotonic() < end:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.05)


def _run(what: str, caches: Path) -> dict:
    """One process of ``what`` with its caches in ``caches``: wall and CPU seconds (the whole
    process, and for ``compile`` the compile alone), the load average around it."""
    env = dict(os.environ)
    env["RVM_CACHE_DIR"] = str(caches / "rvm")
    env["NUMBA_CACHE_DIR"] = str(caches / "numba")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    load_before = os.getloadavg()[0]
    cpu0, wall0 = _children_cpu(), time.perf_counter()
    proc = subprocess.run(_command(what), env=env, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - wall0
    _reap()
    cpu = _children_cpu() - cpu0
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    row = {"process_wall_s": wall, "process_cpu_s": cpu, "wall_s": wall, "cpu_s": cpu}
    if what == "compile":  # the goal is the compile's own time
        row.update(json.loads(proc.stdout.strip().splitlines()[-1]))
    row["load_before"], row["load_after"] = load_before, os.getloadavg()[0]
    return row


def _median(rows: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def bench(what: str, repeat: int, work: Path) -> dict:
    """``repeat`` cold runs of ``what`` (each with new caches), then one warm run with the
    last cold run's caches."""
    colds = []
    for k in range(repeat):
        caches = work / f"{what}_{k}"
        colds.append(_run(what, caches))
        print(f"{what}: first run {colds[-1]['wall_s']:.1f} s", file=sys.stderr, flush=True)
    warm = _run(what, caches)
    return {
        "first_s": _median(colds, "wall_s"),
        "first_cpu_s": _median(colds, "cpu_s"),
        "first_process_s": _median(colds, "process_wall_s"),
        "warm_s": warm["wall_s"],
        "warm_cpu_s": warm["cpu_s"],
        "goal_s": GOALS[what],
        "load": [max(r["load_before"], r["load_after"]) for r in colds],
        "runs": colds,
        "warm": warm,
    }


def _table(rows: dict[str, dict]) -> str:
    head = f"{'run':<17}{'first s':>9}{'cpu s':>8}{'warm s':>8}{'cpu s':>8}{'goal s':>8}  load"
    lines = [head, "-" * len(head)]
    for name, r in rows.items():
        met = "ok" if r["first_s"] <= r["goal_s"] else "MISS"
        load = "/".join(f"{x:.1f}" for x in r["load"])
        lines.append(
            f"{name:<17}{r['first_s']:>9.2f}{r['first_cpu_s']:>8.2f}{r['warm_s']:>8.2f}"
            f"{r['warm_cpu_s']:>8.2f}{r['goal_s']:>7.0f} {met:<4} {load}"
        )
    lines.append(
        " first: empty RVM_CACHE_DIR and NUMBA_CACHE_DIR (rvm's library builds too); warm: the"
    )
    lines.append(
        " same caches again. cpu: user + system seconds of the process and its helpers"
        + ("" if ADOPTED else " (those it waited for)")
        + "; load:"
    )
    lines.append(f" the 1-minute load average during each first run, on {os.cpu_count()} cores.")
    if "compile" in rows:
        call = statistics.median(r["first_call_s"] for r in rows["compile"]["runs"])
        lines.append(f" compile: then its first call took {call:.2f} s (library methods built).")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="cold runs per figure")
    parser.add_argument("--only", default=",".join(GOALS), help="comma-separated runs")
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n]
    unknown = sorted(set(names) - set(GOALS))
    if unknown:
        parser.error(f"unknown runs {unknown}: choose from {', '.join(GOALS)}")
    rows = {}
    with tempfile.TemporaryDirectory(prefix="rvm-first-run-") as tmp:
        for name in names:
            rows[name] = bench(name, args.repeat, Path(tmp))
    # After the runs: naming the machine imports rvm here, which the cold processes must not find
    print(machine_line())
    print(_table(rows))
    payload = {
        "machine": machine(),
        "platform": platform.platform(),
        "command": "python benchmarks/first_run.py " + " ".join(sys.argv[1:]),
        "results": rows,
    }
    write_results("first_run", payload)
    print(
        json.dumps(
            {k: {m: r[m] for m in ("first_s", "first_cpu_s", "warm_s")} for k, r in rows.items()}
        )
    )


if __name__ == "__main__":
    main()
