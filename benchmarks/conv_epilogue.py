"""Convolution epilogues in the library or in the kernel: light CNNs before/after, in one process.

Run: ``python benchmarks/conv_epilogue.py [--only vgg19,resnet50,inception_v2] [--rounds 3]
[--repeat 31]``.

Each model (random weights, `common.light_model_files`) is compiled twice in one process:
*after*, as rvm compiles it (a float32 convolution's per-channel bias and activation applied
by the library in each piece on its pool: `rvm.jit.conv_epilogue`), and *before*, with that
finder made to find nothing, so each kernel runs its epilogue as one serial loop over the output
after the library's call (rvm before the change). Both VMs' outputs are checked against ONNX
Runtime's first. Then, interleaved: on one thread, the convolution kernels' summed per-kernel
minimum (``vm.profile``, ``--rounds`` alternating rounds) and the model's median CPU time
(``time.thread_time``); on two threads, the model's median wall time. Prints a table and
writes ``benchmarks/results/conv_epilogue.json``. On a loaded machine only the one-thread
figures mean much: take the two-thread ones quiet.
"""

from __future__ import annotations

import argparse
import collections
import tempfile
import time
from pathlib import Path

from common import interleaved_medians, light_model_files, machine, machine_line, write_results

# isort: split
from model_child import as_outputs, check_outputs

import rvm
import rvm.jit.lower as lower
from rvm.testing.onnx_models import run_ort


def _compile_both(path: Path) -> dict[str, rvm.Executable]:
    """The model compiled with the library's epilogues (after) and without (before)."""
    after = rvm.compile(rvm.from_onnx(str(path)))
    found = lower.conv_epilogues
    lower.conv_epilogues = lambda *args: {}
    try:
        before = rvm.compile(rvm.from_onnx(str(path)))
    finally:
        lower.conv_epilogues = found
    return {"before": before, "after": after}


def _conv_us(vms: dict, inputs: list, rounds: int) -> dict[str, float]:
    """Each VM's convolution kernels' summed per-kernel minimum (us), rounds alternating."""
    best = {k: collections.defaultdict(lambda: float("inf")) for k in vms}
    for r in range(rounds):
        for k in list(vms) if r % 2 == 0 else list(vms)[::-1]:
            report = vms[k].profile("main", *inputs, warmup=2, repeat=10)
            for _, per in report.runs:
                for name, (_, ns) in per.items():
                    best[k][name] = min(best[k][name], ns / 1e3)
    return {k: sum(v for n, v in best[k].items() if "conv2d" in n) for k in vms}


def measure(name: str, tmp: Path, rounds: int, repeat: int) -> dict:
    path, _, model, inputs = light_model_files(name, tmp)
    want = run_ort(model, inputs)
    exes = _compile_both(path)
    vms = {k: rvm.VirtualMachine(ex, exec_mode="compiled") for k, ex in exes.items()}
    for k, vm in vms.items():
        check_outputs(f"rvm {k}", as_outputs(vm["main"](*inputs)), want)
    calls = {k: (lambda vm=vm: vm["main"](*inputs)) for k, vm in vms.items()}
    threads = rvm.get_num_threads()
    try:
        rvm.set_num_threads(1)
        conv_us = _conv_us(vms, inputs, rounds)
        one = interleaved_medians(calls, repeat=repeat, sample_s=0.05, clock=time.thread_time)
        rvm.set_num_threads(2)
        two = interleaved_medians(calls, repeat=repeat, sample_s=0.05)
    finally:
        rvm.set_num_threads(threads)
    fused = sum(1 for r in exes["after"].kernels.values() if r.meta.get("conv_epilogues"))
    return {
        "fused_kernels": fused,
        "conv_kernels_1t_us": conv_us,
        "model_1t_cpu_ms": {k: v * 1e3 for k, v in one.items()},
        "model_2t_ms": {k: v * 1e3 for k, v in two.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="vgg19,resnet50,inception_v2", help="models")
    parser.add_argument("--rounds", type=int, default=3, help="profiled rounds of each")
    parser.add_argument("--repeat", type=int, default=31, help="interleaved samples")
    args = parser.parse_args()
    print(machine_line())
    print(f"{'model':14s} {'fused':>5s} {'conv 1t us':>21s} {'model 1t cpu ms':>21s} "
          f"{'model 2t ms':>21s}  (before -> after, after/before)")  # fmt: skip
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only.split(","):
            r = results[name] = measure(name, Path(tmp), args.rounds, args.repeat)
            cells = []
            for key in ("conv_kernels_1t_us", "model_1t_cpu_ms", "model_2t_ms"):
                b, a = r[key]["before"], r[key]["after"]
                cells.append(f"{b:8.1f} -> {a:8.1f} {a / b:5.3f}")
            print(f"{name:14s} {r['fused_kernels']:5d} " + "  ".join(cells), flush=True)
    write_results("conv_epilogue", {"machine": machine(), "models": results})


if __name__ == "__main__":
    main()
