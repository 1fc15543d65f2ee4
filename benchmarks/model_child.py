"""One measurement of `benchmarks/models.py`, in a fresh process of its own.

Run by models.py, never by hand: ``python model_child.py WHAT MODEL INPUTS RESULT [THREADS
[TURNS]]``, with ``PYTHONPATH`` naming the rvm sources to measure and ``RVM_CACHE_DIR`` the
kernel cache (and ``RVM_NUM_THREADS`` rvm's threads). ``THREADS``: ORT's intra-op threads in
place of its default (``models.py --threads``; 0: the default); ``TURNS``: of the speed
figures' interleaved medians (``models.py --turns``, default `TURNS`; the CPU-time figures
take 11 turns, or ``TURNS`` if fewer). WHAT is one of:

- ``cold``: ``rvm.from_onnx`` + ``rvm.compile`` (kernels built);
- ``warm``: ``import rvm`` + ``from_onnx`` + ``compile`` + the first call; the call's outputs
  go to ``RESULT.npz`` for the parent to check against ONNX Runtime;
- ``speed``: rvm with jit kernels in every exec mode, ONNX Runtime with default session
  options (or ``THREADS``) and with one thread: outputs checked against ORT's first, then
  interleaved medians;
- ``ort``: ONNX Runtime alone (default options or ``THREADS``): its peak RSS, and its time
  per call with no rvm in the process (threads rvm leaves spinning after a call would slow
  ORT's interleaved turn in ``speed``).

Wall and CPU seconds (this process's, and its helper processes' that compiled kernels), and
the process's peak RSS, go to ``RESULT`` as JSON.
"""

from __future__ import annotations

import json
import os
import sys
import time

_WALL, _CPU = time.perf_counter(), time.process_time()

# isort: split
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

TOLERANCE = 1e-4  # relative error of every output against ONNX Runtime's
BF16_SANE = 5e-2  # a bf16 output this far off ORT's float32 is wrong, not rounded
SETTLE_S = 0.1  # the pause before each turn of the speed measurement (`interleaved_medians`)
TURNS = 31  # of the speed measurement's interleaved medians


def _inputs(path: str) -> list[np.ndarray]:
    data = np.load(path)
    return [data[k] for k in sorted(data.files)]


def _ort(model: str, threads: int | None):  # type: ignore[no-untyped-def]
    import onnxruntime as ort

    opts = ort.SessionOptions()
    if threads is not None:
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = threads
    sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    return lambda *xs: sess.run(None, dict(zip(names, xs)))


def _rvm_main(model: str):  # type: ignore[no-untyped-def]
    import rvm

    ex = rvm.compile(rvm.from_onnx(model))
    return ex, rvm.VirtualMachine(ex)["main"]


def as_outputs(result) -> list[np.ndarray]:  # type: ignore[no-untyped-def]
    return [np.asarray(r) for r in (result if isinstance(result, (tuple, list)) else [result])]


def check_outputs(name: str, got: list[np.ndarray], want: list[np.ndarray]) -> list[float]:
    """The relative error of each output against ORT's; raises past `TOLERANCE` or when the
    top-1 classes of the last output (the logits, see `expose_logits`) differ. Saturated
    probabilities tie, so their top-1 says nothing."""
    from rvm.testing.onnx_models import compare

    errors = []
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        result = compare(g, w)
        if result.rel_err > TOLERANCE or (k == len(want) - 1 and not result.top1_equal):
            raise AssertionError(f"{name}: output {k} differs from ORT's: {result}")
        errors.append(result.rel_err)
    return errors


def check_rounded(name: str, got: list[np.ndarray], want: list[np.ndarray]) -> None:
    """Raises when an output of a reduced-precision run (bf16) lies more than `BF16_SANE`
    from ORT's float32 one: rounded is expected, wrong is not."""
    from rvm.testing.onnx_models import compare

    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        result = compare(np.asarray(g), w)
        if result.rel_err > BF16_SANE:
            raise AssertionError(f"{name}: output {k} differs from ORT's float32: {result}")


def peak_rss_mb() -> float:
    """This process's peak resident set in MB. Linux's ``ru_maxrss`` keeps the parent's
    high-water mark across fork and exec (a child of a big benchmark process reported the
    parent's peak), so /proc's ``VmHWM`` of this process is read where there is one."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024 if sys.platform == "darwin" else 1024)  # bytes on macOS


def speed(
    model: str, inputs: list[np.ndarray], threads: int | None = None, turns: int = TURNS
) -> dict:
    """Milliseconds per call of rvm (each exec mode) and ORT (default or ``threads``, and 1
    thread), medians of ``turns`` interleaved turns."""
    import rvm

    # After rvm: common.py puts this checkout's src first on sys.path, but the rvm already
    # imported (from PYTHONPATH, the sources measured) is the one its imports see.
    sys.path.insert(0, str(Path(__file__).parent))
    from common import interleaved_medians

    ex, _ = _rvm_main(model)
    native = rvm.VirtualMachine(ex, exec_mode="native")
    fns = {
        "rvm_bytecode": rvm.VirtualMachine(ex, exec_mode="bytecode")["main"],
        "rvm_compiled": rvm.VirtualMachine(ex, exec_mode="compiled")["main"],
        "rvm_native": native["main"],
        "ort": _ort(model, threads),
        "ort_1thread": _ort(model, 1),
    }
    want = as_outputs(fns["ort"](*inputs))
    for name in ("rvm_bytecode", "rvm_compiled", "rvm_native", "ort_1thread"):
        check_outputs(name, as_outputs(fns[name](*inputs)), want)
    if native.native_report().fallbacks:
        raise AssertionError(f"the native mode falls back: {native.native_report().fallbacks}")
    calls = {name: (lambda f=f: f(*inputs)) for name, f in fns.items()}
    # ORT's pool threads spin about 30 ms after its calls: rvm's next calls ran 1.7 times
    # slower for that long (squeezenet), so each turn starts after a settling pause.
    medians = interleaved_medians(calls, repeat=turns, sample_s=0.05, settle_s=SETTLE_S)
    # The native and compiled modes' CPU time too (the process's, its pool's threads'
    # included): on a loaded machine their wall ratio swings by 10% between runs, the CPU
    # ratio says whether native code does more work.
    modes = {name: calls[name] for name in ("rvm_compiled", "rvm_native")}
    cpu_times = interleaved_medians(
        modes, repeat=min(11, turns), sample_s=0.05, clock=time.process_time
    )
    from rvm.kernels.cpu import cpu

    out = {f"{name}_ms": 1e3 * t for name, t in medians.items()}
    out.update({f"{name}_cpu_ms": 1e3 * t for name, t in cpu_times.items()})
    return {**out, "vector_bits": cpu().vector_bits}  # what rvm compiled for


def main() -> None:
    what, model, inputs_path, result = sys.argv[1:5]
    threads = int(sys.argv[5]) if len(sys.argv) > 5 and int(sys.argv[5]) else None
    turns = int(sys.argv[6]) if len(sys.argv) > 6 else TURNS
    out: dict = {}
    if what == "cold":
        _rvm_main(model)
    elif what == "warm":
        _, main_fn = _rvm_main(model)
        outputs = as_outputs(main_fn(*_inputs(inputs_path)))
        np.savez(result + ".npz", *outputs)
    elif what == "speed":
        out = speed(model, _inputs(inputs_path), threads, turns)
    elif what == "ort":
        from common import interleaved_medians

        run, inputs = _ort(model, threads), _inputs(inputs_path)
        np.savez(result + ".npz", *as_outputs(run(*inputs)))  # checked by the parent first
        median = interleaved_medians(
            {"ort": lambda: run(*inputs)}, repeat=turns, sample_s=0.05, settle_s=SETTLE_S
        )
        out["ort_alone_ms"] = 1e3 * median["ort"]
    else:
        raise SystemExit(f"unknown measurement {what!r}")
    out["wall_s"] = time.perf_counter() - _WALL
    out["cpu_s"] = time.process_time() - _CPU
    times = os.times()  # helper processes compiling kernels (rvm.jit.parallel)
    out["cpu_helpers_s"] = times.children_user + times.children_system
    out["peak_rss_mb"] = peak_rss_mb()
    Path(result).write_text(json.dumps(out))


if __name__ == "__main__":
    main()
