"""Benchmark of the 9 light ONNX CNNs (random weights) with jit kernels against ONNX Runtime.

Run: ``python benchmarks/models.py [--only squeezenet,vgg19] [--runs 3] [--no-speed] [--no-first]
[--batch 8] [--avx2] [--threads 1] [--src DIR] [--turns 11] [--speed-only]``. ``--batch``
runs every model at that many images a call (the models' batch-1 Reshapes made to follow the
input's batch: `common.with_batch`);
``--avx2`` has rvm compile for an AVX2 CPU (Haswell: ``NUMBA_CPU_NAME``/``NUMBA_CPU_FEATURES``
in the measured processes), to measure that path of the kernels on an AVX-512 machine (ORT
still dispatches on the CPU itself). ``--src`` names the rvm sources the measured processes
import (default: this checkout's ``src``), to measure another version with the same script.
``--turns`` sets the turns of the speed figures' interleaved medians (default 31; the CPU
time's take 11, or as many if fewer), and
``--speed-only`` leaves out the compile figures (cold, first, warm): the speed and ORT-alone
processes compile with the kernel cache of ``RVM_CACHE_DIR`` (warm it with an earlier run). A
big model at batch 8, whose full run takes many minutes, so fits a time limit with the same
speed protocol (outputs checked first, interleaved medians after a settling pause).
Prints a table, writes ``benchmarks/results/models.json`` (``models_b8.json``,
``models_avx2.json``...; ``--name``) and a bar chart of rvm/ORT per model (``models.png``).
Every figure comes from a fresh process (`model_child.py`); per model:

- **cold**: ``rvm.from_onnx`` + ``rvm.compile`` (kernels built) with an empty kernel cache
  (its own ``RVM_CACHE_DIR``), wall and CPU seconds, the median of ``--runs`` processes. CPU
  seconds are what a loaded, shared machine distorts least; ``+help`` is the CPU of the helper
  processes that compiled kernels alongside (`rvm.jit.parallel`). rvm's own library code
  (``rvm.kernels.conv``, ``.pool``, ``.mathlib``...) is compiled once per install and
  kept in Numba's cache beside it, as any prebuilt runtime library (only the entry points and
  dtypes a model uses are built); ``cold`` has it cached: a first child (``warm`` in a cache
  of its own, discarded) builds what the model uses of it, so a library the last edit made
  stale is not built in ``cold`` (nor a task its helpers left unbuilt in ``warm``).
- **first** (unless ``--no-first``): the cold compile of the first run after an install, with
  rvm's library not compiled either: one process whose Numba cache (``NUMBA_CACHE_DIR``) is
  empty too, wall seconds and CPU (this process's and its helpers').
- **warm**: ``import rvm`` + ``from_onnx`` + ``compile`` + the first call, with the cache the
  cold run filled. The first call's outputs (logits and probabilities) are checked against
  ONNX Runtime's: a wrong model fails the run.
- **speed** (unless ``--no-speed``): milliseconds per call of rvm (jit kernels, both exec
  modes) and ORT (default session options, and one thread), interleaved medians in one
  process after checking every output against ORT's; rvm/ORT is against ORT's default. Each
  turn starts after a 0.1 s pause and one untimed call (`common.interleaved_medians`):
  ORT's pool threads spin about 30 ms after its calls, and rvm's calls in that time ran 1.7
  times slower (squeezenet), which 50 ms turns right after ORT's would have counted.
  ``nt/cm``: the native mode over the compiled one, and (``cpu``) the same in the process's
  CPU time, interleaved apart: what a loaded machine distorts least.
- **peak RSS** of the speed process (rvm, ORT, the model twice) and of ORT alone.
- **ORT alone**: ORT's default in a process of its own (``alone``, ``rvm/al``). Threads one
  runtime leaves spinning slow the other's interleaved turn in the speed process (with
  OpenBLAS's threads, which rvm no longer uses, squeezenet's ORT took 12.7 ms there against
  6.5 ms alone; rvm's pool helpers spin about 200 us), so side by side can flatter either;
  ``rvm/al`` compares with ORT undisturbed.
- the TVM build time the issue sets as the goal for the cold compile.

The table names the machine (CPU model, vector width, cores, ``OPENBLAS_CORETYPE`` if set:
`common.machine`). Everything runs with the user's thread settings; the table says which were
in effect (rvm's default: every CPU, `rvm.set_num_threads`). ``--threads N`` runs rvm
(``RVM_NUM_THREADS``) and ORT (``intra_op_num_threads``, in place of its default) on N
threads: one thread against one is the comparison a loaded machine distorts least.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from common import ROOT, light_model_files, machine, machine_line, write_results

# isort: split
import numpy as np
from model_child import check_outputs

from rvm.runtime.loading.cache import cache_dir
from rvm.testing.onnx_models import (
    LIGHT_MODELS,
    run_ort,
)

# The goals: TVM's fused-pipeline build of each model on this machine (seconds).
TVM_BUILD_S = {
    "squeezenet": 6.8,
    "shufflenet": 8.2,
    "bvlc_alexnet": 4.3,
    "zfnet512": 5.7,
    "inception_v1": 21.0,
    "inception_v2": 22.0,
    "resnet50": 8.2,
    "densenet121": 31.0,
    "vgg19": 8.7,
}
WARM_GOAL_S = {"squeezenet": 1.0}
CHILD = Path(__file__).with_name("model_child.py")
# ``--avx2``: what the measured processes compile for (Numba's target, `rvm.kernels.cpu`).
AVX2_ENV = {
    "NUMBA_CPU_NAME": "haswell",
    "NUMBA_CPU_FEATURES": "+64bit,+avx,+avx2,+fma,+f16c,+sse,+sse2,+sse3,+sse4.1,+sse4.2,"
    "+ssse3,+cmov,+popcnt,+bmi,+bmi2,+lzcnt,+movbe",
}


def _child(
    what: str, src: Path, model: Path, inputs: Path, cache: Path, numba_cache: Path | None = None
) -> dict:
    """One fresh-process measurement (see `model_child.py`); a failing child fails the run.
    ``numba_cache``: an empty folder for Numba's cache (rvm's library not compiled yet)."""
    result = model.with_name(f"{cache.name}_{what}.json")  # in the run's work folder
    env = {**os.environ, "RVM_CACHE_DIR": str(cache), "PYTHONPATH": str(src), **_TARGET_ENV}
    if numba_cache is not None:
        env["NUMBA_CACHE_DIR"] = str(numba_cache)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # rvm's modules byte-compiled, as when installed
    cmd = [sys.executable, str(CHILD), what, str(model), str(inputs), str(result)]
    cmd += [str(_THREADS[0] if _THREADS else 0), str(_TURNS[0])]  # ORT's threads (0: default)
    if _THREADS:
        env["RVM_NUM_THREADS"] = str(_THREADS[0])
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{what} measurement of {model.stem} failed:\n{proc.stderr}")
    return {**json.loads(result.read_text()), "result": str(result)}


_TARGET_ENV: dict[str, str] = {}  # the children's Numba target (``--avx2``), else the host's
_THREADS: list[int] = []  # ``--threads``: rvm's and ORT's in the children, else their defaults
_TURNS: list[int] = []  # ``--turns``: of the speed children's interleaved medians


def _median(rows: list[dict], key: str) -> float:
    return float(np.median([r[key] for r in rows]))


def bench_model(name: str, args: argparse.Namespace, work: Path) -> dict:
    """The row of light model ``name`` (see the module docstring)."""

    path, npz, model, inputs = light_model_files(name, work, args.batch)
    run = [args.src, path, npz]
    row: dict = {"tvm_build_s": TVM_BUILD_S[name], "runs": args.runs}
    if args.speed_only:
        cache = cache_dir()  # the user's, warmed (see the docstring)
    else:
        _child("warm", *run, work / f"{name}_library")  # rvm's library built (see the docstring)
        colds = [_child("cold", *run, work / f"{name}_cache_{k}") for k in range(args.runs)]
        cache = work / f"{name}_cache_0"
        warms = [_child("warm", *run, cache) for _ in range(args.runs)]
        got = np.load(warms[-1]["result"] + ".npz")
        row["rel_err_vs_ort"] = check_outputs(
            name, [got[k] for k in got.files], run_ort(model, inputs)
        )
        for key, rows in (("cold", colds), ("warm", warms)):
            row[f"{key}_s"] = _median(rows, "wall_s")
            row[f"{key}_cpu_s"] = _median(rows, "cpu_s")
        row["cold_helpers_cpu_s"] = _median(colds, "cpu_helpers_s")
    if args.first and not args.speed_only:
        first = _child("cold", *run, work / f"{name}_first", numba_cache=work / f"{name}_numba")
        row["first_s"] = first["wall_s"]
        row["first_cpu_s"] = first["cpu_s"] + first["cpu_helpers_s"]
    if args.speed:
        speed = _child("speed", *run, cache)
        row.update({k: v for k, v in speed.items() if k.endswith("_ms")})
        best = min(speed[f"rvm_{mode}_ms"] for mode in ("bytecode", "compiled", "native"))
        row["rvm_over_ort"] = best / speed["ort_ms"]
        row["native_over_compiled"] = speed["rvm_native_ms"] / speed["rvm_compiled_ms"]
        row["native_over_compiled_cpu"] = speed["rvm_native_cpu_ms"] / speed["rvm_compiled_cpu_ms"]
        row["vector_bits"] = speed["vector_bits"]
        row["peak_rss_mb"] = speed["peak_rss_mb"]
        alone = _child("ort", *run, cache)
        got = np.load(alone["result"] + ".npz")
        check_outputs("ORT alone", [got[k] for k in got.files], run_ort(model, inputs))
        row["ort_peak_rss_mb"] = alone["peak_rss_mb"]
        row["ort_alone_ms"] = alone["ort_alone_ms"]
        row["rvm_over_ort_alone"] = best / alone["ort_alone_ms"]
    return row


def _goal(value: float | None, goal: float | None) -> str:
    return "" if goal is None or value is None else ("ok" if value <= goal else "MISS")


def _fmt(value: float | None, width: int) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}.2f}"


def _table(rows: dict[str, dict]) -> str:
    head = (
        f"{'model':<14}{'cold s':>8}{'cpu s':>7}{'+help':>7}{'TVM s':>7}{'':>5}{'first':>7}"
        f"{'cpu s':>7}{'warm s':>8}{'cpu s':>7}"
        f"{'':>5}{'rvm bc':>9}{'rvm cm':>9}{'rvm nt':>9}{'nt/cm':>6}{'cpu':>5}"
        f"{'ORT':>9}{'ORT 1t':>9}{'rvm/ORT':>8}"
        f"{'alone':>9}{'rvm/al':>7}"
        f"{'RSS MB':>8}{'ORT MB':>8}"
    )
    lines = [head, "-" * len(head)]
    for name, r in rows.items():
        line = (
            f"{name:<14}{_fmt(r.get('cold_s'), 8)}{_fmt(r.get('cold_cpu_s'), 7)}"
            f"{_fmt(r.get('cold_helpers_cpu_s'), 7)}{r['tvm_build_s']:>7.1f}"
            f"{_goal(r.get('cold_s'), r['tvm_build_s']):>5}"
            f"{_fmt(r.get('first_s'), 7)}{_fmt(r.get('first_cpu_s'), 7)}"
            f"{_fmt(r.get('warm_s'), 8)}{_fmt(r.get('warm_cpu_s'), 7)}"
            f"{_goal(r.get('warm_s'), WARM_GOAL_S.get(name)):>5}"
        )
        if "ort_ms" in r:
            line += (
                f"{r['rvm_bytecode_ms']:>9.2f}{r['rvm_compiled_ms']:>9.2f}"
                f"{r['rvm_native_ms']:>9.2f}{r['native_over_compiled']:>6.2f}"
                f"{_fmt(r.get('native_over_compiled_cpu'), 5)}{r['ort_ms']:>9.2f}"
                f"{r['ort_1thread_ms']:>9.2f}{r['rvm_over_ort']:>8.2f}"
                f"{r['ort_alone_ms']:>9.2f}{r['rvm_over_ort_alone']:>7.2f}"
                f"{r['peak_rss_mb']:>8.0f}{r['ort_peak_rss_mb']:>8.0f}"
            )
        lines.append(line)
    lines.append("(times in ms per call for rvm bytecode/compiled/native mode and ORT; nt/cm:")
    lines.append(" native over compiled (goal <= 1), cpu: in the process's CPU time; rvm/ORT: the")
    lines.append(" faster rvm mode over ORT with default options, side by side; alone: ORT's")
    lines.append(" default in a process without rvm, whose threads can slow ORT's turn;")
    lines.append(" rvm/al: rvm over that; RSS: the speed process;")
    lines.append(" first: the first run after an install, empty RVM_CACHE_DIR and NUMBA_CACHE_DIR:")
    lines.append(" the cold compile with rvm's library built too, s and cpu s with the helpers')")
    return "\n".join(lines)


def _chart(rows: dict[str, dict], path: Path) -> None:
    """A bar chart of rvm/ORT per model, with the issue's 1.25 geometric-mean goal."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n, r in rows.items() if "rvm_over_ort" in r]
    if not names:
        return
    fig, ax = plt.subplots(figsize=(1 + len(names), 3.5))
    ax.bar(names, [rows[n]["rvm_over_ort"] for n in names])
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.axhline(1.25, color="red", linestyle="--", linewidth=0.8, label="goal (geomean)")
    ax.set_ylabel("rvm / ORT time per call")
    ax.legend()
    plt.setp(ax.get_xticklabels(), rotation=30, ha="right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(LIGHT_MODELS), help="comma-separated models")
    parser.add_argument("--runs", type=int, default=1, help="processes per cold/warm figure")
    parser.add_argument("--no-speed", dest="speed", action="store_false", help="compile only")
    parser.add_argument(
        "--no-first",
        dest="first",
        action="store_false",
        help="skip the first-after-install cold compile (rvm's library compiled too)",
    )
    parser.add_argument("--src", type=Path, default=ROOT / "src", help="rvm sources to measure")
    parser.add_argument(
        "--batch", type=int, default=1, help="images per call (8: where ORT's layouts gain most)"
    )
    parser.add_argument(
        "--avx2",
        action="store_true",
        help="rvm compiles for an AVX2 CPU (Haswell) whatever this one has (NUMBA_CPU_NAME/"
        "NUMBA_CPU_FEATURES in the measured processes)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=0,
        help="rvm's (RVM_NUM_THREADS) and ORT's (intra_op_num_threads) threads (0: defaults)",
    )
    parser.add_argument(
        "--turns",
        type=int,
        default=31,
        help="turns of the speed figures' interleaved medians (fewer: a big model at batch 8 "
        "fits a time limit)",
    )
    parser.add_argument(
        "--speed-only",
        action="store_true",
        help="no compile figures (cold, first, warm): the speed processes compile with the "
        "kernel cache of RVM_CACHE_DIR (warm it with an earlier run)",
    )
    parser.add_argument(
        "--name", default=None, help="results file name, no suffix (models, models_b8...)"
    )
    args = parser.parse_args()
    if args.turns < 1:
        parser.error(f"--turns takes a positive count; not {args.turns}")
    if args.speed_only and not args.speed:
        parser.error("--speed-only and --no-speed leave nothing to measure")
    _TURNS.append(args.turns)
    if args.batch < 1:
        parser.error(f"--batch takes a positive count of images; not {args.batch}")
    if args.threads < 0:
        parser.error(f"--threads takes a count of threads (0: defaults); not {args.threads}")
    if args.threads:
        _THREADS.append(args.threads)
    if args.name is None:
        args.name = "models" + ("" if args.batch == 1 else f"_b{args.batch}")
        args.name += "_avx2" if args.avx2 else ""
        args.name += f"_{args.threads}t" if args.threads else ""
    if args.avx2:
        _TARGET_ENV.update(AVX2_ENV)
    names = args.only.split(",")
    unknown = set(names) - set(LIGHT_MODELS)
    if unknown:
        parser.error(f"--only takes some of {', '.join(LIGHT_MODELS)}; not {sorted(unknown)}")
    args.src = args.src.resolve()
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            rows[name] = bench_model(name, args, Path(tmp))
            if "cold_s" in rows[name]:
                print(f"{name}: cold {rows[name]['cold_s']:.2f} s", file=sys.stderr, flush=True)
    threads = {
        k: os.environ[k] for k in ("RVM_NUM_THREADS", "OPENBLAS_NUM_THREADS") if k in os.environ
    }
    if args.threads:
        threads = {**threads, "RVM_NUM_THREADS": str(args.threads), "ORT": str(args.threads)}
    print(machine_line())
    if args.avx2:
        bits = sorted({r["vector_bits"] for r in rows.values() if "vector_bits" in r})
        print(f"rvm compiled for haswell (AVX2: {bits}-bit vectors measured); ORT for this CPU")
    print(f"threads: {threads or 'defaults (rvm: every CPU)'}; batch {args.batch}")
    print(_table(rows))
    ratios = [r["rvm_over_ort"] for r in rows.values() if "rvm_over_ort" in r]
    if ratios:
        print(f"geometric mean of rvm/ORT: {float(np.exp(np.mean(np.log(ratios)))):.2f}")
        alone = [r["rvm_over_ort_alone"] for r in rows.values() if "rvm_over_ort" in r]
        print(f"geometric mean of rvm/ORT alone: {float(np.exp(np.mean(np.log(alone)))):.2f}")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    payload = {"src": str(args.src), "load_average": load, "cpus": os.cpu_count()}
    payload["batch"] = args.batch
    payload["turns"] = args.turns
    payload["speed_only"] = args.speed_only
    payload["threads"] = args.threads or "defaults"
    payload["rvm_target"] = _TARGET_ENV or "host"
    payload["machine"] = machine()
    out = write_results(args.name, {**payload, "models": rows})
    _chart(rows, out.with_suffix(".png"))


if __name__ == "__main__":
    main()
