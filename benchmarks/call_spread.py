"""Where a light CNN's call times spread, rvm's native mode against ONNX Runtime, in one
process: what `models.py`'s medians are made of.

Run: ``python benchmarks/call_spread.py [--only squeezenet] [--batch 1] [--turns 31]``.

Per model (random weights, `common.light_model_files`; rvm's outputs checked against ORT's
first), with default threads on both sides:

- **protocol**: `models.py`'s speed turns (`common.interleaved_medians` with its 0.1 s pause
  and one untimed call before each turn), rvm and ORT alternating, each call timed alone:
  the median of the turns' means (what `models.py` reports), the median by a call's position
  in its turn (a first call after the pause slower than the rest?), the untimed call after
  the pause, and rvm's pool counters a call (`workpool.jobs`, `wakes`, `naps`: jobs that
  found helpers asleep, helpers' and callers' sleeps);
- **back to back**: ``--calls`` calls of each with no pause: min, median, 90th percentile,
  and rvm's calls slower than 1.15 times its median against the others by their wakes (a
  slow call whose helpers sleep at its jobs is a wake-up's latency, not a slow kernel);
- **serial**: one call at a time with `rvm.kernels.poolstate.measure` on (medians over
  ``--calls`` calls): the wall time, the union of the pool's jobs, the caller's time alone
  before the first job, between jobs and after the last one, the callers' wait at jobs'
  ends and the jobs' tails (a thread idle at a job's end): where a call's second thread
  goes unused.

Writes ``benchmarks/results/call_spread.json`` (``--name``).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from common import light_model_files, machine, machine_line, write_results

# isort: split
import numpy as np
from model_child import SETTLE_S, as_outputs, check_outputs

import rvm
from rvm.kernels import poolstate, workpool

SAMPLE_S = 0.05  # a turn's timed calls, as `model_child.speed` takes them


def _counters() -> np.ndarray:
    return np.array((workpool.jobs(), workpool.wakes(), *workpool.naps()), dtype=float)


def protocol(fns: dict[str, Callable[[], object]], turns: int) -> dict:
    """`models.py`'s turns, each call timed (see the module docstring)."""
    number = {}
    for name, fn in fns.items():
        fn()
        once = min(_timed(fn) for _ in range(5))
        number[name] = max(1, min(1000, int(SAMPLE_S / once)))
    times: dict[str, list[list[float]]] = {name: [] for name in fns}
    first: dict[str, list[float]] = {name: [] for name in fns}
    counts = np.zeros(4)
    order = list(fns.items())
    for turn in range(turns):
        for name, fn in order if turn % 2 == 0 else reversed(order):
            time.sleep(SETTLE_S)
            first[name].append(_timed(fn))
            before = _counters()
            times[name].append([_timed(fn) for _ in range(number[name])])
            if name == "rvm":
                counts += _counters() - before
    out = {}
    for name in fns:
        t = np.array(times[name]) * 1e3
        out[name] = {
            "median_ms": float(np.median(t.mean(axis=1))),
            "by_position_ms": [float(v) for v in np.median(t, axis=0)],
            "after_pause_ms": float(np.median(first[name]) * 1e3),
            "calls_a_turn": number[name],
        }
    per_call = counts / (turns * number["rvm"])
    out["rvm"].update(dict(zip(("jobs", "wakes", "helper_naps", "caller_naps"), per_call)))
    return out


def back_to_back(fns: dict[str, Callable[[], object]], calls: int) -> dict:
    """``calls`` calls of each, no pause; rvm's slow calls against the rest by wakes."""
    out = {}
    for name, fn in fns.items():
        ts, wakes = [], []
        for _ in range(calls):
            w = workpool.wakes()
            ts.append(_timed(fn) * 1e3)
            wakes.append(workpool.wakes() - w)
        t, k = np.array(ts), np.array(wakes)
        row = {"min_ms": t.min(), "median_ms": np.median(t), "p90_ms": np.percentile(t, 90)}
        if name == "rvm":
            slow = t > 1.15 * np.median(t)
            row.update(slow_calls=slow.sum(), slow_wakes=k[slow].sum(), other_wakes=k[~slow].sum())
        out[name] = {key: float(v) for key, v in row.items()}
    return out


def serial(fn: Callable[[], object], calls: int) -> dict:
    """rvm's call with the pool measuring: its jobs' union against the wall, in microseconds
    (medians over ``calls``)."""
    rows, per_job = [], []
    for _ in range(calls):
        fn()
        poolstate.measure(True)
        start = time.perf_counter_ns()
        fn()
        end = time.perf_counter_ns()
        edges, log, join = poolstate.job_edges(), poolstate.job_log(), poolstate.join_time()
        poolstate.measure(False)
        if not edges:
            continue
        per_job.append([(r[1], r[3], r[5]) for r in log])
        gaps = [b[0] - a[1] for a, b in zip(edges, edges[1:])]
        rows.append(
            (
                end - start,
                sum(b - a for a, b in edges),
                edges[0][0] - start,
                sum(gaps),
                end - edges[-1][1],
                join,
                sum(r[3] for r in log),
                len(edges),
            )
        )
    keys = ("wall", "jobs", "before_first", "between", "after_last", "join", "tails")
    med = np.median(np.array(rows, dtype=float), axis=0) if rows else np.zeros(len(keys) + 1)
    out = {f"{k}_us": float(v) / 1e3 for k, v in zip(keys, med)}
    jobs = [j for j in per_job if len(j) == len(per_job[0])]  # calls whose jobs all logged
    each = np.median(np.array(jobs, dtype=float), axis=0) if jobs else np.zeros((0, 3))
    out["each_job"] = [{"pieces": int(p), "tail_us": t / 1e3, "us": u / 1e3} for p, t, u in each]
    return {**out, "jobs_a_call": float(med[-1])}


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(name: str, batch: int, turns: int, calls: int) -> dict:
    import onnxruntime as ort

    path, _, _, inputs = light_model_files(name, Path(tempfile.mkdtemp()), batch)
    vm = rvm.VirtualMachine(rvm.compile(rvm.from_onnx(str(path))), exec_mode="native")
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    fns = {
        "rvm": lambda: vm["main"](*inputs),
        "ort": lambda: sess.run(None, dict(zip(names, inputs))),
    }
    check_outputs(name, as_outputs(fns["rvm"]()), as_outputs(fns["ort"]()))
    return {
        "protocol": protocol(fns, turns),
        "back_to_back": back_to_back(fns, calls),
        "serial": serial(fns["rvm"], calls),
    }


def _report(name: str, r: dict) -> str:
    p, b, s = r["protocol"], r["back_to_back"], r["serial"]
    lines = [f"\n{name}: models.py's protocol (ms; each turn {SETTLE_S} s pause + 1 call first)"]
    for who in ("rvm", "ort"):
        pos = " ".join(f"{v:.2f}" for v in p[who]["by_position_ms"])
        lines.append(
            f"  {who}: median {p[who]['median_ms']:.3f}, first call after the pause "
            f"{p[who]['after_pause_ms']:.2f}; by position in a turn {pos}"
        )
    lines.append(
        f"  rvm/ORT {p['rvm']['median_ms'] / p['ort']['median_ms']:.3f}; rvm a call: "
        f"{p['rvm']['jobs']:.0f} jobs, {p['rvm']['wakes']:.2f} wakes, "
        f"{p['rvm']['helper_naps']:.2f} helper naps, "
        f"{p['rvm']['caller_naps']:.2f} caller naps"
    )
    lines.append(
        "back to back (ms): "
        + "; ".join(
            f"{who} min {b[who]['min_ms']:.2f} median {b[who]['median_ms']:.2f} "
            f"p90 {b[who]['p90_ms']:.2f}"
            for who in ("rvm", "ort")
        )
    )
    lines.append(
        f"  rvm's slow calls (> 1.15 x median): {b['rvm']['slow_calls']:.0f}, their "
        f"wakes {b['rvm']['slow_wakes']:.0f}; the other calls' {b['rvm']['other_wakes']:.0f}"
    )
    lines.append(
        f"serial (us, rvm, {s['jobs_a_call']:.0f} jobs a call): wall {s['wall_us']:.0f}, "
        f"jobs {s['jobs_us']:.0f}, alone before the first job {s['before_first_us']:.0f}, "
        f"between jobs {s['between_us']:.0f}, after the last {s['after_last_us']:.0f}; "
        f"callers' join {s['join_us']:.0f}, tails {s['tails_us']:.0f}"
    )
    top = sorted(enumerate(s["each_job"]), key=lambda e: -e[1]["tail_us"])[:6]
    lines.append(
        "  largest tails (job: pieces, tail/time us): "
        + ", ".join(f"{i}: {j['pieces']}, {j['tail_us']:.0f}/{j['us']:.0f}" for i, j in top)
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="squeezenet", help="comma-separated light models")
    parser.add_argument("--batch", type=int, default=1, help="images a call")
    parser.add_argument("--turns", type=int, default=31, help="turns of models.py's protocol")
    parser.add_argument("--calls", type=int, default=60, help="back-to-back and serial calls")
    parser.add_argument("--name", default="call_spread", help="results file name, no suffix")
    args = parser.parse_args()
    print(machine_line())
    models = {}
    for name in args.only.split(","):
        models[name] = measure(name, args.batch, args.turns, args.calls)
        print(_report(name, models[name]), flush=True)
    payload = {"machine": machine(), "batch": args.batch, "turns": args.turns}
    write_results(args.name, {**payload, "calls": args.calls, "models": models})


if __name__ == "__main__":
    main()
