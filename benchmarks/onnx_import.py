"""Benchmark of the ONNX frontend: import and compile times and peak memory of the light CNNs.

Run: ``PYTHONPATH=src python benchmarks/onnx_import.py [--kernels numpy|jit] [--models a,b]``.
Prints a table and writes ``benchmarks/results/onnx_import.json`` (``onnx_import_jit.json``
with jit kernels).

Each of the 9 light CNNs shipped in the onnx package gets seeded random weights
(`rvm.testing.onnx_models.randomize_weights`: the files carry every weight as
``ConstantOfShape(shape, 0.02)``) and its logits as an extra output, and is saved to a
temporary file. A fresh Python process per model then imports the file with `rvm.from_onnx`,
compiles it, and reports, from its high-water mark of resident memory (``VmHWM`` of
``/proc/self/status``: ``resource.getrusage``'s ``ru_maxrss`` would carry over the parent's
peak across ``exec``):

- ``base_mb``: the process's peak RSS after importing rvm and onnx, before the model;
- ``import_mb``: the peak RSS once `rvm.from_onnx` returned;
- ``peak_mb``: the peak RSS once `rvm.compile` returned (import + compile);
- ``import_s`` and ``compile_s``: one cold run each (``compile_s`` builds the kernels: with
  ``--kernels jit`` that is Numba's compilation, or a load from the on-disk cache when an
  earlier run left the kernels there; run twice to see the warm figure).

Memory goal: the weights held once. The weights of a model file are views of the bytes read
from it (`rvm.frontend.onnx.weights`), and neither the checker, constant folding, the passes,
codegen nor the VM copies them, so ``(peak_mb - base_mb) / weights_mb`` is about 1 for the
models whose weights dominate (a few MB of IR and kernels on top).

For scale, two more fresh processes per model load the same file with ``onnx.load`` alone
(``onnx_load_s``, ``onnx_load_mb``) and create an ONNX Runtime ``InferenceSession`` on it
(``ort_s``, ``ort_mb``); their ``_mb`` is the peak RSS over the process's own base, as
``peak_mb - base_mb`` is for rvm.

Before its figures are reported, every model's logits are checked against ONNX Runtime on
the same model and inputs (`rvm.testing.onnx_models.compare`): relative error <= 1e-4 and
equal top-1, else the benchmark fails.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from common import ROOT, light_model_files, write_results

# isort: split
import numpy as np

MAX_REL_ERR = 1e-4
MB = 2**20


def child(path: str, kernels: str, inputs_path: str, out_path: str) -> None:
    """In a fresh process: import, compile, run; print the figures as JSON on stdout."""
    import time

    import onnx  # noqa: F401 - part of the baseline, as in any user's process

    import rvm

    figures: dict[str, float] = {"base_mb": peak_mb()}
    start = time.perf_counter()
    mod = rvm.from_onnx(path)
    figures["import_s"] = time.perf_counter() - start
    figures["import_mb"] = peak_mb()
    start = time.perf_counter()
    ex = rvm.compile(mod, kernels=kernels)
    figures["compile_s"] = time.perf_counter() - start
    figures["peak_mb"] = peak_mb()
    del mod  # the executable holds the weights now
    with np.load(inputs_path) as data:
        inputs = [data[k] for k in sorted(data.files)]
    out = rvm.VirtualMachine(ex, exec_mode="compiled")["main"](*inputs)
    np.save(out_path, np.asarray(out[-1] if isinstance(out, tuple) else out))
    print(json.dumps(figures))


def baseline_child(tool: str, path: str) -> None:
    """In a fresh process: load ``path`` with ``onnx.load`` or into an ORT session; print the
    seconds and the peak RSS over the process's base as JSON on stdout."""
    import time

    import onnx

    if tool == "ort":
        import onnxruntime as ort
    base = peak_mb()
    start = time.perf_counter()
    if tool == "ort":
        ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    else:
        onnx.load(path)
    print(json.dumps({"s": time.perf_counter() - start, "mb": peak_mb() - base}))


def run_child(args: list[str], what: str) -> dict[str, float]:
    """The JSON figures a fresh process of this script prints with ``args``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run(
        [sys.executable, __file__, *args], capture_output=True, text=True, env=env
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{what}: the measuring process failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def peak_mb() -> float:
    """This process's peak resident memory in MiB (Linux)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    raise RuntimeError("no VmHWM in /proc/self/status: the benchmark needs Linux")


def weights_mb(model: Any) -> float:
    from onnx import numpy_helper

    return sum(numpy_helper.to_array(t).nbytes for t in model.graph.initializer) / MB


def measure(name: str, kernels: str, tmp: Path) -> dict[str, Any]:
    """One model's figures, after its logits matched ONNX Runtime's."""
    from rvm.testing.onnx_models import compare, run_ort

    path, inputs_path, model, inputs = light_model_files(name, tmp)
    out_path = tmp / f"{name}_out.npy"
    args = ["--child", str(path), kernels, str(inputs_path), str(out_path)]
    figures = run_child(args, name)
    for key, tool in (("onnx_load", "onnx"), ("ort", "ort")):
        got = run_child(["--baseline", tool, str(path)], f"{name} ({tool})")
        figures[f"{key}_s"], figures[f"{key}_mb"] = got["s"], got["mb"]
    check = compare(np.load(out_path), run_ort(model, inputs)[-1])
    if not (check.rel_err <= MAX_REL_ERR and check.top1_equal):
        raise AssertionError(f"{name}: rvm's logits differ from ONNX Runtime's: {check}")
    file_mb = path.stat().st_size / MB
    held = figures["peak_mb"] - figures["base_mb"]
    w = weights_mb(model)
    return {
        "model": name,
        "kernels": kernels,
        "weights_mb": w,
        "file_mb": file_mb,
        **figures,
        "held_over_weights": held / w if w else None,
        "rel_err": check.rel_err,
        "top1_equal": check.top1_equal,
        "nodes": len(model.graph.node),
    }


def print_table(rows: list[dict[str, Any]]) -> None:
    head = (
        f"{'model':<14}{'nodes':>6}{'weights MB':>11}{'import s':>10}{'compile s':>11}"
        f"{'held MB':>9}{'held/w':>8}{'onnx.load s':>13}{'MB':>6}{'ORT s':>8}{'MB':>6}"
        f"{'rel err':>10}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        held = r["peak_mb"] - r["base_mb"]
        ratio = f"{r['held_over_weights']:.2f}" if r["held_over_weights"] else "-"
        print(
            f"{r['model']:<14}{r['nodes']:>6}{r['weights_mb']:>11.1f}{r['import_s']:>10.2f}"
            f"{r['compile_s']:>11.2f}{held:>9.0f}{ratio:>8}{r['onnx_load_s']:>13.2f}"
            f"{r['onnx_load_mb']:>6.0f}{r['ort_s']:>8.2f}{r['ort_mb']:>6.0f}{r['rel_err']:>10.1e}"
        )


def main() -> None:
    from rvm.testing.onnx_models import LIGHT_MODELS

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kernels", default="numpy", choices=("numpy", "jit"))
    parser.add_argument("--models", default=",".join(LIGHT_MODELS), help="comma-separated")
    args = parser.parse_args()
    models = [m for m in args.models.split(",") if m]
    unknown = sorted(set(models) - set(LIGHT_MODELS))
    if unknown:
        parser.error(f"unknown models {unknown}; the light models are {list(LIGHT_MODELS)}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="rvm-onnx-bench-") as tmp:
        for name in models:
            rows.append(measure(name, args.kernels, Path(tmp)))
            r = rows[-1]
            print(f"{name}: import {r['import_s']:.2f} s, peak {r['peak_mb']:.0f} MB", flush=True)
    print()
    print_table(rows)
    print(
        f"\nlogits of every model within {MAX_REL_ERR:g} of ONNX Runtime's, top-1 equal.\n"
        "held MB: peak RSS of import + compile over the base; held/w ~ 1: the weights held "
        "once. onnx.load, ORT: the same file loaded alone, an InferenceSession created (fresh "
        "processes, peak RSS over their base)."
    )
    name = "onnx_import" if args.kernels == "numpy" else f"onnx_import_{args.kernels}"
    write_results(name, {"kernels": args.kernels, "models": rows})


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(*sys.argv[2:6])
    elif len(sys.argv) > 1 and sys.argv[1] == "--baseline":
        baseline_child(*sys.argv[2:4])
    else:
        main()
