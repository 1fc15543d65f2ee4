"""Benchmark of the 9 light ONNX CNNs (random weights) with jit kernels: compile times.

Run: ``PYTHONPATH=src python benchmarks/models.py [--only squeezenet,vgg19] [--runs 3]``.
Prints a table and writes ``benchmarks/results/models.json``. Per model:

- **cold**: ``rvm.from_onnx`` + ``rvm.compile`` (kernels built) in a fresh process with an
  empty kernel cache (its own ``RVM_CACHE_DIR``), wall and CPU seconds, the median of
  ``--runs`` processes. CPU seconds are what a loaded, shared machine distorts least. rvm's
  own library code (``rvm.jit.conv``, ``rvm.jit.blas``...) is compiled once per install and
  kept in Numba's cache beside it, as any prebuilt runtime library; the first run after an
  install pays for it.
- **warm**: ``import rvm`` + ``from_onnx`` + ``compile`` + the first call, in a fresh process
  with the cache the cold run filled.
- the TVM build time the issue sets as the goal for the cold compile.

BLAS runs one thread unless ``OPENBLAS_NUM_THREADS`` says otherwise (as in
``benchmarks/kernels.py``: threaded BLAS on a busy shared machine made squeezenet's first call
take 1.4 s instead of 0.05 s).

Before any figure is posted, the model's outputs (logits and probabilities) are checked
against ONNX Runtime: a wrong model fails the run. Later sections (rvm against ORT per call,
peak memory) add columns to the same rows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

# Before numpy loads (see above); the child processes inherit it.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

# isort: split
from common import ROOT, write_results

# isort: split
import numpy as np

from rvm.testing.onnx_models import (
    LIGHT_MODELS,
    compare_with_ort,
    expose_logits,
    light_model_path,
    random_inputs,
    randomize_weights,
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
TOLERANCE = 1e-4

# The child process of one measurement: prints {"wall_s", "cpu_s"} as JSON. The model and
# its inputs are prepared by the parent, so the child times rvm's work only.
_CHILD = """
import json, sys, time
wall, cpu = time.perf_counter(), time.process_time()
import rvm
mod = rvm.from_onnx({model!r})
ex = rvm.compile(mod)
if {first_call!r}:
    import numpy as np
    data = np.load({inputs!r})
    rvm.VirtualMachine(ex)["main"](*[data[k] for k in sorted(data.files)])
print(json.dumps({{"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu}}))
"""


def _child(model: Path, inputs: Path, cache: Path, first_call: bool) -> dict:
    """One fresh-process measurement (see `_CHILD`); a failing child fails the run."""
    script = _CHILD.format(model=str(model), inputs=str(inputs), first_call=first_call)
    env = {**os.environ, "RVM_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"measurement of {model.name} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _median(rows: list[dict], key: str) -> float:
    return float(np.median([r[key] for r in rows]))


def _check_against_ort(name: str, model, path: Path, inputs: list[np.ndarray]) -> dict:
    """Logits and probabilities of rvm (jit kernels, cache filled) against ONNX Runtime."""
    import rvm

    vm = rvm.VirtualMachine(rvm.compile(rvm.from_onnx(str(path))))
    errors = {}
    for what, output in (("logits", -1), ("probabilities", 0)):
        result = compare_with_ort(vm["main"], model, inputs, output)
        if result.rel_err > TOLERANCE or not result.top1_equal:
            raise AssertionError(f"{name}: rvm's {what} differ from ONNX Runtime's: {result}")
        errors[what] = result.rel_err
    return errors


def bench_model(name: str, runs: int, work: Path) -> dict:
    """The compile-time row of light model ``name`` (see the module docstring)."""
    import onnx

    model = expose_logits(randomize_weights(onnx.load(light_model_path(name)), seed=0))
    path = work / f"{name}.onnx"
    onnx.save(model, path)
    inputs = random_inputs(model, seed=1)
    npz = work / f"{name}_inputs.npz"
    np.savez(npz, **{f"x{i:03d}": x for i, x in enumerate(inputs)})
    colds = []
    for k in range(runs):
        cache = work / f"{name}_cache_{k}"
        colds.append(_child(path, npz, cache, first_call=False))
    warms = [_child(path, npz, cache, first_call=True) for _ in range(runs)]
    os.environ["RVM_CACHE_DIR"] = str(cache)  # the filled cache: no compile here
    errors = _check_against_ort(name, model, path, inputs)
    return {
        "cold_s": _median(colds, "wall_s"),
        "cold_cpu_s": _median(colds, "cpu_s"),
        "tvm_build_s": TVM_BUILD_S[name],
        "warm_s": _median(warms, "wall_s"),
        "warm_cpu_s": _median(warms, "cpu_s"),
        "rel_err_vs_ort": errors,
        "runs": runs,
    }


def _warm_goal(name: str, seconds: float) -> str:
    goal = WARM_GOAL_S.get(name)
    return "" if goal is None else ("ok" if seconds <= goal else "MISS")


def _table(rows: dict[str, dict]) -> str:
    head = f"{'model':<14}{'cold s':>9}{'cpu s':>8}{'TVM s':>8}{'goal':>6}{'warm s':>9}{'goal':>6}"
    lines = [head, "-" * len(head)]
    for name, r in rows.items():
        ok = "ok" if r["cold_s"] <= r["tvm_build_s"] else "MISS"
        lines.append(
            f"{name:<14}{r['cold_s']:>9.2f}{r['cold_cpu_s']:>8.2f}{r['tvm_build_s']:>8.1f}"
            f"{ok:>6}{r['warm_s']:>9.2f}{_warm_goal(name, r['warm_s']):>6}"
        )
    return "\n".join(lines)


def main() -> None:
    """Runs the models named by ``--only`` (default: all nine) ``--runs`` times each."""
    names = list(LIGHT_MODELS)
    if "--only" in sys.argv:
        names = sys.argv[sys.argv.index("--only") + 1].split(",")
        unknown = set(names) - set(LIGHT_MODELS)
        if unknown:
            raise SystemExit(f"--only takes some of {', '.join(LIGHT_MODELS)}; not {unknown}")
    runs = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else 1
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            rows[name] = bench_model(name, runs, Path(tmp))
            print(f"{name}: cold {rows[name]['cold_s']:.2f} s", file=sys.stderr, flush=True)
    print(_table(rows))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    write_results("models", {"load_average": load, "cpus": os.cpu_count(), "models": rows})


if __name__ == "__main__":
    main()
