"""The int8 rows of `precision.py`: rvm f32 and int8 against ONNX Runtime, batch 1.

`precision.py` runs these rows after its f32/bf16 ones (``--int8``); alone: ``python
benchmarks/precision_int8.py [--only squeezenet,resnet50] [--inputs 20] [--repeat 31]
[--threads N] [--reduce-range auto|on|off] [--name NAME]``, which writes
``benchmarks/results/NAME.json`` (``precision_int8.json`` by default). Per model (random
weights, logits exposed, as `benchmarks/models.py`):

- **int8**: the float model quantized by ONNX Runtime's ``quantize_static`` (QDQ format, uint8
  activations per tensor, int8 weights per output channel, min/max calibration on 8 random
  inputs: `rvm.testing.quantized_models`), its weights in 8 bits, or in 7 with
  ``--reduce-range on`` (ORT's ``reduce_range``, its advice for CPUs without VNNI, whose
  ``vpmaddubsw`` products of 8-bit weights saturate: ``auto``, the default, takes 7 bits
  where ORT's products saturate, `rvm.testing.quantized_models.ort_saturates`; rvm multiplies
  7-bit weights by ``vpmaddubsw`` too there, exactly). rvm imports the same QDQ file (its
  chains become integer kernels: `rvm.frontend.onnx.qdq`) and runs it in native mode; ORT
  runs it with its default session options, or ``--threads N`` (both runtimes; one thread:
  each sample's thread CPU time, `time.thread_time`, which other processes' load leaves out).
- **outputs first**: on ``--inputs`` random inputs, rvm int8's logits against ORT int8's
  (top-1 agreement, largest error relative to the largest logit) and against f32's; a model
  whose rvm int8 top-1 agrees with ORT's on fewer than 99% of the inputs fails the run.
- **speed**: interleaved medians in one process (`common.interleaved_medians`, default
  threads, a 0.1 s pause before each turn for ORT's spinning threads) of rvm f32, rvm int8,
  ORT f32 and ORT int8, each sample as many calls as take 50 ms, as `precision.py` and
  `models.py` time them. Goals (issue 29): rvm int8 at least 1.8x faster than rvm f32, and at
  most 1.0x ORT int8's time.
- **after idle** (``int8/ORT idle``): rvm int8 against ORT int8 timed one call at a time, each
  after the 0.1 s pause and one untimed call: a server's request after a quiet spell, when
  the threads of both runtimes' pools have gone to sleep. (Until 2026-11-29 this was the
  only figure; it is not the goal's.)
- **pool wake-ups** (``wakes/call``): jobs of one rvm int8 call that found the pool's helpers
  asleep (`rvm.kernels.workpool.wakes`), back to back and after the pause: each waits a
  wake-up's latency for its helpers.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from common import interleaved_medians, light_model_files, machine, machine_line, write_results

# isort: split
import numpy as np

import rvm
from rvm.kernels import workpool
from rvm.testing.onnx_models import random_inputs
from rvm.testing.quantized_models import ort_saturates, quantize_with_ort

MODELS = ("squeezenet", "resnet50")
INT8_SPEEDUP_GOAL = 1.8  # rvm f32 / rvm int8 at least
INT8_ORT_GOAL = 1.0  # rvm int8 / ORT int8 at most
SAMPLE_S = 0.05  # calls a timed sample takes, as `precision.py`'s
SETTLE_S = 0.1  # ORT's pool threads spin ~30 ms after a call (see benchmarks/models.py)
WAKE_CALLS = 11  # calls the wake-up counts are the mean of


def _wakes_per_call(fn, pause_s: float) -> float:  # type: ignore[no-untyped-def]
    """Mean pool wake-ups per call of ``fn``, each call after ``pause_s`` (0: back to back)."""
    fn()
    total = 0
    for _ in range(WAKE_CALLS):
        if pause_s:
            time.sleep(pause_s)
        before = workpool.wakes()
        fn()
        total += workpool.wakes() - before
    return total / WAKE_CALLS


THREADS = 0  # --threads: 0 is each runtime's default
WARM_S = 0.0  # untimed calls after each turn's pause (`precision.py --warm-ms`; 0: one call)


def _session(model):  # type: ignore[no-untyped-def]
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    return ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


def _runner(sess, inputs):  # type: ignore[no-untyped-def]
    feed = dict(zip([i.name for i in sess.get_inputs()], inputs))
    return lambda: sess.run(None, feed)


def _last(out):  # type: ignore[no-untyped-def]
    return np.asarray(out[-1] if isinstance(out, (tuple, list)) else out)


def reduced(choice: str) -> bool:
    """Whether ``--reduce-range`` ``choice`` quantizes weights to 7 bits on this host."""
    return ort_saturates() if choice == "auto" else choice == "on"


def measure(name: str, n_inputs: int, repeat: int, reduce_range: bool = False) -> dict:
    """The row of model ``name``: errors first, then the interleaved medians."""
    with tempfile.TemporaryDirectory() as tmp:
        _, _, model, inputs = light_model_files(name, Path(tmp))
    qmodel = quantize_with_ort(model, reduce_range=reduce_range)
    f32_vm = rvm.VirtualMachine(rvm.compile(rvm.from_onnx(model)), exec_mode="native")
    int8_vm = rvm.VirtualMachine(rvm.compile(rvm.from_onnx(qmodel)), exec_mode="native")
    ort_f32, ort_int8 = _session(model), _session(qmodel)
    agree_ort = agree_f32 = 0
    err_ort = err_f32 = 0.0
    for i in range(n_inputs):
        xs = random_inputs(model, seed=1000 + i)
        mine = _last(int8_vm["main"](*xs))
        theirs = _last(_runner(ort_int8, xs)())
        exact = _last(_runner(ort_f32, xs)())
        agree_ort += int(np.argmax(mine) == np.argmax(theirs))
        agree_f32 += int(np.argmax(mine) == np.argmax(exact))
        err_ort = max(err_ort, float(np.abs(mine - theirs).max() / np.abs(theirs).max()))
        err_f32 = max(err_f32, float(np.abs(mine - exact).max() / np.abs(exact).max()))
    if agree_ort < 0.99 * n_inputs:
        raise SystemExit(f"{name}: rvm int8 top-1 agrees with ORT int8 on {agree_ort}/{n_inputs}")
    times = interleaved_medians(
        {
            "rvm_f32": lambda: f32_vm["main"](*inputs),
            "rvm_int8": lambda: int8_vm["main"](*inputs),
            "ort_f32": _runner(ort_f32, inputs),
            "ort_int8": _runner(ort_int8, inputs),
        },
        repeat=repeat,
        sample_s=SAMPLE_S,
        settle_s=SETTLE_S,
        clock=time.thread_time if THREADS == 1 else time.perf_counter,
        warm_s=WARM_S,
    )
    idle = interleaved_medians(
        {"rvm_int8": lambda: int8_vm["main"](*inputs), "ort_int8": _runner(ort_int8, inputs)},
        repeat=repeat,
        sample_s=0.0,
        settle_s=SETTLE_S,
    )
    ms = {k: v * 1e3 for k, v in times.items()}
    rvm_int8 = lambda: int8_vm["main"](*inputs)  # noqa: E731
    return {
        "model": name,
        "weight_bits": 7 if reduce_range else 8,
        "threads": THREADS or "default",
        "ms": ms,
        "int8_vs_f32_speedup": ms["rvm_f32"] / ms["rvm_int8"],
        "int8_vs_ort_int8": ms["rvm_int8"] / ms["ort_int8"],
        "idle_ms": {k: v * 1e3 for k, v in idle.items()},
        "idle_int8_vs_ort_int8": idle["rvm_int8"] / idle["ort_int8"],
        "top1_vs_ort_int8": agree_ort / n_inputs,
        "top1_vs_f32": agree_f32 / n_inputs,
        "logit_rel_err_vs_ort_int8": err_ort,
        "logit_rel_err_vs_f32": err_f32,
        "wakes_per_call": _wakes_per_call(rvm_int8, 0.0),
        "idle_wakes_per_call": _wakes_per_call(rvm_int8, SETTLE_S),
    }


def int8_table(rows: list[dict]) -> str:
    head = (
        f"{'model':<12}{'rvm f32':>9}{'rvm int8':>10}{'ORT f32':>9}{'ORT int8':>10}"
        f"{'f32/int8':>10}{'int8/ORT':>10}{'top1 ORT':>10}{'err ORT':>9}{'top1 f32':>10}"
        f"{'err f32':>9}{'int8/ORT idle':>15}{'wakes/call':>12}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        ms = r["ms"]
        model = f"{r['model']} w{r.get('weight_bits', 8)}"
        lines.append(
            f"{model:<12}{ms['rvm_f32']:>9.2f}{ms['rvm_int8']:>10.2f}{ms['ort_f32']:>9.2f}"
            f"{ms['ort_int8']:>10.2f}{r['int8_vs_f32_speedup']:>9.2f}x"
            f"{r['int8_vs_ort_int8']:>9.2f}x{r['top1_vs_ort_int8']:>10.0%}"
            f"{r['logit_rel_err_vs_ort_int8']:>9.1e}{r['top1_vs_f32']:>10.0%}"
            f"{r['logit_rel_err_vs_f32']:>9.1e}{r['idle_int8_vs_ort_int8']:>14.2f}x"
            f"{r['wakes_per_call']:>5.1f}/{r['idle_wakes_per_call']:<5.1f}"
        )
    lines.append(
        f"goals: f32/int8 >= {INT8_SPEEDUP_GOAL}x, int8/ORT <= {INT8_ORT_GOAL}x; ms are "
        "medians of interleaved turns of 50 ms samples, batch 1, default threads (one thread: "
        "thread CPU time); w7/w8: the weights' bits; idle: one "
        "call after a 0.1 s pause; wakes/call: rvm int8 jobs finding pool helpers asleep, "
        "back to back / after the pause"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(MODELS))
    parser.add_argument("--inputs", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=31)
    parser.add_argument("--threads", type=int, default=0, help="of both runtimes (0: default)")
    parser.add_argument("--reduce-range", choices=("auto", "on", "off"), default="auto")
    parser.add_argument("--name", default="precision_int8", help="of the results file")
    args = parser.parse_args()
    global THREADS
    THREADS = args.threads
    if args.threads:
        rvm.set_num_threads(args.threads)
    bits = reduced(args.reduce_range)
    rows = [measure(name, args.inputs, args.repeat, bits) for name in args.only.split(",")]
    load = os.getloadavg()
    print(machine_line())
    print(int8_table(rows))
    write_results(args.name, {"rows": rows, "load": load, "machine": machine()})


if __name__ == "__main__":
    main()
