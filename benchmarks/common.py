"""What the benchmark scripts share: timing, instruction counting, kernel replay, results.

Importing it puts the checkout's ``src`` first on ``sys.path``: the scripts run from a clone
without installing.
"""

from __future__ import annotations

import json
import os
import platform
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import rvm  # noqa: E402
from rvm.ir import IRModule  # noqa: E402
from rvm.runtime.modes.decode import DecodedFunction  # noqa: E402


def machine() -> dict[str, Any]:
    """The machine a benchmark runs on: CPU model, the CPU and vector width Numba compiles for
    and the caches the kernels' tuning reads (`rvm.kernels.cpu`), cores, and the environment
    that changes the code run (``OPENBLAS_CORETYPE``, ``NUMBA_CPU_NAME``,
    ``NUMBA_CPU_FEATURES``) where set; the matrix and dot-product instructions the kernels
    use (``extensions``: ``amx`` where the bf16 products run on AMX tiles, ``avx512bf16``,
    ``avx512vnni``)."""
    from rvm.kernels.cpu import amx_tiles, cpu, target_features

    model = platform.processor() or platform.machine()
    cpuid = {}
    try:
        with open("/proc/cpuinfo") as f:
            fields = [ln.split(":", 1) for ln in f.read().split("\n\n")[0].splitlines()]
        info = {k.strip(): v.strip() for k, v in (f for f in fields if len(f) == 2)}
        model = info.get("model name", model)
        # A hypervisor may name the CPU vaguely ("AMD EPYC" for a Zen 3 and a Zen 4 alike):
        # its family and model say which it is.
        cpuid = {k: int(info[k]) for k in ("cpu family", "model") if info.get(k, "").isdigit()}
    except OSError:
        pass
    c = cpu()
    env = ("OPENBLAS_CORETYPE", "NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES")
    flags = set(target_features().split(","))
    extensions = ["amx"] if amx_tiles() else []
    extensions += [f for f in ("avx512bf16", "avx512vnni") if f"+{f}" in flags]
    return {
        "cpu": model,
        **({"family_model": [cpuid["cpu family"], cpuid["model"]]} if len(cpuid) == 2 else {}),
        "llvm_cpu": c.name,
        "vector_bits": c.vector_bits,
        "caches_kb": [c.l1d >> 10, c.l2 >> 10, c.l3 >> 10],
        "extensions": extensions,
        "cores": os.cpu_count(),
        "load": round(os.getloadavg()[0], 2),
        **{name: os.environ[name] for name in env if name in os.environ},
    }


def machine_line() -> str:
    """`machine()` as one line for a benchmark's table."""
    m = machine()
    extra = "".join(f", {k}={m[k]}" for k in ("OPENBLAS_CORETYPE", "NUMBA_CPU_NAME") if k in m)
    if "NUMBA_CPU_FEATURES" in m:
        extra += ", NUMBA_CPU_FEATURES set"
    family = "family {} model {}, ".format(*m["family_model"]) if "family_model" in m else ""
    return (
        f"machine: {m['cpu']} ({family}{m['llvm_cpu']}, {m['vector_bits']}-bit vectors"
        f"{''.join(', ' + e for e in m['extensions'])}, "
        f"L1d/L2/L3 {'/'.join(str(k) for k in m['caches_kb'])} KB), "
        f"{m['cores']} cores, load {m['load']}{extra}"
    )


def median_time(fn: Callable[[], object], repeat: int = 9, number: int = 1) -> float:
    """The median seconds per call of ``fn()`` over ``repeat`` runs of ``number`` calls, after
    one warm-up call."""
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - start) / number)
    return sorted(times)[len(times) // 2]


def interleaved_medians(
    fns: dict[str, Callable[[], object]],
    repeat: int = 101,
    sample_s: float = 1e-4,
    settle_s: float = 0.0,
    clock: Callable[[], float] = time.perf_counter,
    warm_s: float = 0.0,
) -> dict[str, float]:
    """The median seconds per call of each ``fns[name]()``, the functions taking turns sample
    by sample, so a slow spell of a shared machine hits them alike.

    A sample is as many calls as take about ``sample_s`` (from the fastest of five timed
    calls after the warm-up one): short samples mostly fit between two preemptions by other
    processes, which the median then ignores. With ``settle_s``, each turn first sleeps that
    long and makes one untimed call: runtimes whose thread pools spin on after a call (ONNX
    Runtime's, about 30 ms here) then do not slow the next one's turn, nor its first, cold
    call count. Every other round runs the functions in reverse order, so none always
    follows the same one (a microsecond call ran ~5% slower right after eager PyTorch's turn
    than after a call of the same VM code, which had warmed the caches for it).

    ``clock``: `time.perf_counter` (wall time) by default; `time.thread_time` measures the CPU
    time of calls that run in the calling thread only (one thread each), which a loaded
    machine's preemptions leave out.

    ``warm_s``: after the settling pause, untimed calls for at least that long (one at least)
    before the turn's timed calls, so each turn times the steady state a model's layers run
    in, back to back. After a pause of 50 ms a single untimed call left the next ones slow on
    a 2-core virtual machine (session 74, an Intel Xeon with AMX): rvm's 1 x 1 and 3 x 3
    layers alone timed 1.1-2.5x their time in the model (squeezenet's 16 -> 64 1 x 1 on 55 x
    55: 0.101 ms against 0.040), whole squeezenet 11% slower (ONNX Runtime's 6%) than after
    10 ms of calls.
    """
    number = {}
    for name, fn in fns.items():
        fn()
        once = []
        for _ in range(5):  # the fastest of a few: one slow call would shrink the sample
            start = time.perf_counter()
            fn()
            once.append(time.perf_counter() - start)
        number[name] = max(1, min(1000, int(sample_s / min(once))))
    times: dict[str, list[float]] = {name: [] for name in fns}
    order = list(fns.items())
    for turn in range(repeat):
        for name, fn in order if turn % 2 == 0 else reversed(order):
            if settle_s > 0:
                time.sleep(settle_s)
                fn()
            if warm_s > 0:
                begin = time.perf_counter()
                while time.perf_counter() - begin < warm_s:
                    fn()
            start = clock()
            for _ in range(number[name]):
                fn()
            times[name].append((clock() - start) / number[name])
    return {name: sorted(ts)[len(ts) // 2] for name, ts in times.items()}


def chain_module(steps: int) -> IRModule:
    """``steps`` x ``h = tanh(matmul(h, w))`` on 1x8, written as rvm script text and parsed:
    matmul is a fusion anchor and tanh its epilogue, so each step is one kernel."""
    lines = [
        "@module",
        "class Chain:",
        "    @func",
        '    def main(h: T[(1, 8), "float32"], w: T[(8, 8), "float32"]):',
    ]
    lines += ["        h = op.tanh(op.matmul(h, w))"] * steps + ["        return h"]
    return rvm.script.parse("\n".join(lines))


class _CountingCode(tuple):
    """A decoded code tuple whose ``code[pc]`` counts the fetch: the bytecode loop fetches
    every executed instruction exactly once that way (a tail call counts once)."""

    fetched = 0

    def __getitem__(self, index: Any) -> Any:
        _CountingCode.fetched += 1  # one decoded tuple per instruction, nothing fused
        return tuple.__getitem__(self, index)


def count_instructions(ex: rvm.Executable, fname: str, args: tuple) -> int:
    """Instructions one call of ``fname`` executes (a counting VM, never used for timing)."""
    vm = rvm.VirtualMachine(ex, exec_mode="bytecode")
    # This VM's own list (the decoded functions are shared by every VM of the executable);
    # the loop reads it from the context at each run.
    vm.context.functions = [
        DecodedFunction(_CountingCode(f.code), f.pad, f.nparams) for f in vm.context.functions
    ]
    _CountingCode.fetched = 0
    vm[fname](*args)
    return _CountingCode.fetched


def kernel_calls(
    vm: rvm.VirtualMachine, fname: str, args: tuple, copy: bool = False
) -> list[tuple[Callable[..., Any], tuple]]:
    """The kernel calls one run of ``fname`` makes, as (callable, arguments) to replay.

    Only the executable's kernels count: the VM's builtins (shape checks, shape arithmetic)
    are VM work. ``copy`` replays on copies of the arrays, so the recording holds none of the
    VM's own tensors (their pooled blocks stay free for the timed runs).
    """
    by_name = dict(zip(vm.executable.primitive_names, vm.context.raw_packed))
    kernels = vm.executable.kernels
    calls: list[tuple[Callable[..., Any], tuple]] = []

    def record(name: str, call_args: tuple, before: bool) -> None:
        if before and name in kernels:
            if copy:
                call_args = tuple(a.copy() if isinstance(a, np.ndarray) else a for a in call_args)
            calls.append((by_name[name], call_args))

    vm.set_instrument(record)
    try:
        vm[fname](*args)
    finally:
        vm.set_instrument(None)
    return calls


def replay(calls: list[tuple[Callable[..., Any], tuple]]) -> Callable[[], None]:
    """The recorded kernel calls made again from a plain Python loop."""

    def run() -> None:
        for f, a in calls:
            f(*a)

    return run


def write_results(name: str, payload: dict[str, Any]) -> Path:
    """Writes ``benchmarks/results/<name>.json`` (with the Python and NumPy versions) and says
    so on stdout. A ``name`` that is a path (``/tmp/run``, ``../x``) is taken as it is, the
    ``.json`` added where it lacks one."""
    out = ROOT / "benchmarks" / "results" / name  # an absolute name replaces the folder
    out = out if out.suffix == ".json" else out.with_name(out.name + ".json")
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"python": platform.python_version(), "numpy": np.__version__}
    out.write_text(json.dumps({**meta, **payload}, indent=2))
    shown = out.relative_to(ROOT) if out.is_relative_to(ROOT) else out
    print(f"\nwrote {shown}")
    return out


def text_table(rows: list[dict[str, Any]], columns: list[tuple[str, str, str]]) -> str:
    """``rows`` as a text table: one column per ``(header, key, spec)``, its cells
    ``format(row[key], spec)`` and its header aligned and padded as the spec says (``"<9"``,
    ``">10.2f"``), a rule under the header."""

    def head(title: str, spec: str) -> str:
        m = re.match(r"([<>^]?)(\d*)", spec)
        return format(title, f"{m.group(1) or '<'}{m.group(2)}")

    header = " ".join(head(title, spec) for title, _, spec in columns)
    lines = [header, "-" * len(header)]
    lines += [" ".join(format(r[key], spec) for _, key, spec in columns) for r in rows]
    return "\n".join(lines)


def with_batch(model: Any, batch: int) -> Any:
    """``model`` (an ONNX CNN of batch 1) at ``batch`` images: the first dimension of its graph
    inputs that are not initializers and of its outputs set to ``batch`` (the inferred shapes
    of values inside dropped), and each Reshape's constant shape that starts with 1 (the batch,
    in the light models) made to start with 0, "as the input's"."""
    from onnx import numpy_helper

    from rvm.testing.onnx_models import graph_inputs

    for value in [*graph_inputs(model), *model.graph.output]:
        dims = value.type.tensor_type.shape.dim
        if dims:
            dims[0].dim_value = batch
    del model.graph.value_info[:]
    inits = {t.name: t for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Reshape" and node.input[1] in inits:
            shape = numpy_helper.to_array(inits[node.input[1]]).copy()
            if shape.ndim == 1 and shape.size > 1 and shape[0] == 1:
                shape[0] = 0
                inits[node.input[1]].CopyFrom(numpy_helper.from_array(shape, node.input[1]))
    return model


def light_model_files(
    name: str, tmp: Path, batch: int = 1
) -> tuple[Path, Path, Any, list[np.ndarray]]:
    """Light ONNX model ``name`` with random weights saved to ``tmp`` (logits exposed) at
    ``batch`` images (`with_batch`), its random inputs saved beside it (`.npz`, read back in
    key order), and both in memory."""
    import onnx

    from rvm.testing.onnx_models import (
        expose_logits,
        light_model_path,
        random_inputs,
        randomize_weights,
    )

    model = expose_logits(randomize_weights(onnx.load(light_model_path(name)), seed=0))
    if batch != 1:
        model = with_batch(model, batch)
    path = tmp / f"{name}.onnx"
    onnx.save(model, path)
    inputs = random_inputs(model, seed=1)
    inputs_path = tmp / f"{name}_inputs.npz"
    np.savez(inputs_path, **{f"x{i:03d}": x for i, x in enumerate(inputs)})
    return path, inputs_path, model, inputs
