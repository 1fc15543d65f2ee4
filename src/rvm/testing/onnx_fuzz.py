"""Fuzzing the ONNX importer: mutated and random models, each imported, compiled and run in a
worker process beside ONNX Runtime, and what happened counted.

A case is a mutated model (`rvm.testing.onnx_mutants`, kinds ``graph``, ``attribute``...) or a
random valid model (kinds ``random``, `rvm.testing.onnx_random`; ``cnn`` and ``transformer``,
`rvm.testing.onnx_nets`), named by its kind and seed so a worker rebuilds it from those alone.
`run` starts a worker (``python -m rvm.testing.onnx_fuzz --worker``) that works through the cases
and prints one JSON line per step; a worker that dies mid-case is a **crash**, one silent for
``timeout`` seconds a **hang**, and a new worker goes on from the next case. Each case ends as
one outcome:

- ``ok``: rvm's outputs equal ONNX Runtime's (dtype, shape, values to rtol 1e-4);
- ``accepted``: rvm ran a model (or inputs) ONNX Runtime refuses;
- ``error``: rvm raised an `rvm.RVMError` (a clear error, `rvm.OnnxImportError` for a bad model);
  ONNX Runtime then tries the model too, and ``error_ort_ran`` counts those it ran (ops or
  cases rvm does not support, or checks stricter than ONNX Runtime's);
- ``other``: rvm raised anything else;
- ``wrong``: rvm's outputs differ from ONNX Runtime's;
- ``crash`` and ``hang``: in rvm;
- ``unchecked``: rvm ran, then ONNX Runtime crashed or hung, so nothing was compared;
- ``skipped``: the case could not be built (not rvm's outcome).

rvm runs first and its outcome is printed before ONNX Runtime runs, so a crash of ONNX Runtime
(it aborts on some invalid models) is never charged to rvm.
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from rvm.testing.onnx_mutants import KINDS

# The valid models' kinds, and the module of `rvm.testing` and function that build each.
RANDOM_KINDS = {
    "random": ("onnx_random", "random_model"),
    "cnn": ("onnx_nets", "random_cnn"),
    "transformer": ("onnx_nets", "random_transformer"),
}
OUTCOMES = ("ok", "accepted", "error", "other", "wrong", "crash", "hang", "unchecked", "skipped")
MEMORY_LIMIT = 6 << 30  # a worker's address space: a huge allocation fails, not the machine


def _inputs(model: Any, rng: np.random.Generator) -> list[np.ndarray]:
    """Inputs for a mutated model's graph inputs: declared static dims (else 2), its dtype."""
    import onnx

    inits = {t.name for t in model.graph.initializer}
    out = []
    for value in model.graph.input:
        if value.name in inits:
            continue
        tt = value.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else 2 for d in tt.shape.dim]
        dims = [d if 0 <= d <= 64 else 2 for d in dims]
        try:
            dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
        except Exception:
            dtype = np.dtype(np.float32)
        out.append((rng.standard_normal(dims) * 2).astype(dtype))
    return out


def _build(kind: str, seed: int, workdir: str) -> tuple[str, Any, Any, list[np.ndarray]]:
    """The case's description, what rvm imports, the ModelProto (None if unreadable), inputs."""
    import onnx

    if kind in RANDOM_KINDS:
        import importlib

        where, builder = RANDOM_KINDS[kind]
        model, data = getattr(importlib.import_module(f"rvm.testing.{where}"), builder)(seed)
        return f"{kind} model {seed}", model, model, data
    from rvm.testing.onnx_mutants import mutant

    what, source = mutant(kind, seed, workdir)
    model = source
    if isinstance(source, bytes):
        model = onnx.ModelProto()
        try:
            model.ParseFromString(source)
        except Exception:
            model = None
    elif isinstance(source, str):
        model = onnx.load(source, load_external_data=False)
    data = [] if model is None else _inputs(model, np.random.default_rng(seed))
    return what, source, model, data


def _run_rvm(source: Any, data: list[np.ndarray], exec_mode: str, kernels: str) -> Any:
    import rvm

    ex = rvm.compile(rvm.from_onnx(source), kernels=kernels)
    out = rvm.VirtualMachine(ex, exec_mode=exec_mode)["main"](*data)
    return [np.asarray(o) for o in (out if isinstance(out, tuple) else (out,))]


def _run_ort(source: Any, data: list[np.ndarray]) -> list[np.ndarray] | None:
    """ONNX Runtime's outputs, or None if it refuses the model or the inputs.

    A path's external data is loaded by ``onnx.load`` first: ONNX Runtime's shape inference
    cannot read a shape kept in an external file."""
    import onnx
    import onnxruntime

    try:
        if isinstance(source, str):
            source = onnx.load(source)
        model = source if isinstance(source, bytes) else source.SerializeToString()
        opts = onnxruntime.SessionOptions()
        opts.log_severity_level = 4
        sess = onnxruntime.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
        names = [i.name for i in sess.get_inputs()]
        return [np.asarray(o) for o in sess.run(None, dict(zip(names, data)))]
    except Exception:
        return None


def _same(actual: list[np.ndarray], expected: list[np.ndarray]) -> str | None:
    """Why rvm's outputs differ from ONNX Runtime's, or None."""
    if len(actual) != len(expected):
        return f"{len(actual)} outputs, ONNX Runtime {len(expected)}"
    for i, (a, e) in enumerate(zip(actual, expected)):
        if a.dtype != e.dtype or a.shape != e.shape:
            return f"output {i}: {a.dtype}{a.shape}, ONNX Runtime {e.dtype}{e.shape}"
        if e.dtype.kind == "f" and not np.allclose(a, e, rtol=1e-4, atol=1e-5, equal_nan=True):
            return f"output {i}: max difference {np.nanmax(np.abs(a - e))}"
        if e.dtype.kind != "f" and not np.array_equal(a, e):
            return f"output {i}: values differ"
    return None


def _worker(cases: Sequence[tuple[str, int]], exec_modes: Sequence[str], kernels: str) -> None:
    import resource

    import rvm

    _take_channel()
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, hard))
    for n, (kind, seed) in enumerate(cases):
        _emit({"case": n, "step": "start"})
        with tempfile.TemporaryDirectory(prefix="rvmfuzz") as workdir:
            try:
                what, source, model, data = _build(kind, seed, workdir)
            except Exception as err:  # the generator itself failed: not rvm's outcome
                detail = f"{type(err).__name__}: {err}"
                _emit({"case": n, "step": "rvm", "outcome": "skipped", "detail": detail})
                continue
            mode = exec_modes[seed % len(exec_modes)]
            record: dict[str, Any] = {"case": n, "step": "rvm", "what": what, "mode": mode}
            try:
                with np.errstate(all="ignore"):
                    actual = _run_rvm(source, data, mode, kernels)
            except rvm.RVMError as err:
                _emit({**record, "outcome": "error", "detail": str(err)[:300]})
                ran = data is not None and _run_ort(source, data) is not None
                _emit({"case": n, "step": "ort", "outcome": "error", "ort": ran})
                continue
            except Exception as err:
                detail = f"{type(err).__name__}: {err}"[:300]
                _emit({**record, "outcome": "other", "detail": detail})
                continue
            _emit({**record, "outcome": "ran"})
            expected = _run_ort(source, data)
            reason = None if expected is None else _same(actual, expected)
            outcome = "accepted" if expected is None else "wrong" if reason else "ok"
            _emit({"case": n, "step": "ort", "outcome": outcome, "detail": reason})


_channel: list[Any] = []  # the worker's records' stream (`_take_channel`)


def _take_channel() -> None:
    """The worker's standard output becomes its records' channel alone: a copy of it carries
    the records, and the descriptor itself then writes to standard error, so whatever else a
    case prints there (ONNX Runtime's notice of a provider's fallback on a model with bad
    bytes, C code's output) cannot break a record (it did: the run stopped on a line that
    was not JSON)."""
    sys.stdout.flush()
    _channel.append(os.fdopen(os.dup(1), "w"))
    os.dup2(2, 1)


def _emit(record: dict[str, Any]) -> None:
    out = _channel[0] if _channel else sys.stdout
    out.write(json.dumps(record) + "\n")
    out.flush()


def cases(kinds: Iterable[str], count: int, start: int = 0) -> list[tuple[str, int]]:
    """``count`` cases of each kind, seeds from ``start``."""
    return [(k, s) for s in range(start, start + count) for k in kinds]


def run(
    todo: Sequence[tuple[str, int]],
    exec_modes: Sequence[str] = ("bytecode", "compiled"),
    kernels: str = "numpy",
    timeout: float = 60.0,
) -> tuple[Counter, list[dict[str, Any]]]:
    """Run ``todo`` in workers; the outcome counts and one record per case not ``ok``/``error``
    (and each ONNX Runtime crash)."""
    counts: Counter = Counter()
    notes: list[dict[str, Any]] = []
    done = 0
    while done < len(todo):
        results, ended = _run_worker(todo[done:], exec_modes, kernels, timeout)
        for rec in results:
            counts[rec["outcome"]] += 1
            if rec["outcome"] == "error" and rec.get("ort_ran"):
                counts["error_ort_ran"] += 1
            if rec["outcome"] != "ok" and (rec["outcome"] != "error" or rec.get("ort_ran")):
                kind, seed = todo[done + rec["case"]]
                notes.append({**rec, "kind": kind, "seed": seed})
        done += ended
    return counts, notes


def _run_worker(
    todo: Sequence[tuple[str, int]], exec_modes: Sequence[str], kernels: str, timeout: float
) -> tuple[list[dict[str, Any]], int]:
    """One worker over ``todo`` until it finishes or dies: one record per case it ended, and
    how many cases it got through (the one it died on included)."""
    args = [sys.executable, "-m", "rvm.testing.onnx_fuzz", "--worker", json.dumps(list(todo))]
    args += ["--exec-modes", ",".join(exec_modes), "--kernels", kernels]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)  # type: ignore[arg-type]
    results: list[dict[str, Any]] = []
    current: dict[str, Any] = {"case": 0, "step": "rvm"}  # a death before case 0 is its
    buffer = b""
    deadline = time.monotonic() + timeout
    try:
        while True:
            if not sel.select(max(deadline - time.monotonic(), 0)):
                _ended(current, results, "hang", f"no progress in {timeout} s")
                return results, current["case"] + 1
            chunk = os.read(proc.stdout.fileno(), 1 << 16)  # type: ignore[union-attr]
            if not chunk:
                proc.wait()
                if proc.returncode == 0:
                    return results, len(todo)
                stderr = proc.stderr.read().decode(errors="replace")[-300:]  # type: ignore
                _ended(current, results, "crash", f"exit {proc.returncode}: {stderr}")
                return results, current["case"] + 1
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                rec = json.loads(line)
                deadline = time.monotonic() + timeout
                current = _step(rec, current, results)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        sel.close()


def _step(rec: dict[str, Any], current: dict[str, Any], results: list) -> dict[str, Any]:
    """Fold one worker line into the case in progress; return the new state of that case."""
    if rec["step"] == "start":
        return {"case": rec["case"], "step": "rvm"}
    if rec["step"] == "rvm":  # rvm's outcome: ONNX Runtime runs next unless it was skipped
        keys = ("case", "outcome", "what", "detail", "mode")
        results.append({k: rec[k] for k in keys if k in rec})
        return {**current, "step": "ort" if rec["outcome"] != "skipped" else "done"}
    if rec["outcome"] == "error":  # whether ONNX Runtime ran the model rvm refused
        results[-1]["ort_ran"] = rec["ort"]
    else:
        results[-1].update(outcome=rec["outcome"], detail=rec["detail"])
    return {**current, "step": "done"}


def _ended(current: dict[str, Any], results: list, how: str, detail: str) -> None:
    """Record the death of a worker in the case ``current``: rvm's crash or hang, unless rvm
    had finished the case and ONNX Runtime was running."""
    if current["step"] == "rvm":
        results.append({"case": current["case"], "outcome": how, "detail": detail})
    elif current["step"] == "ort" and results[-1]["outcome"] == "ran":
        results[-1].update(outcome="unchecked", detail=f"ONNX Runtime: {how}: {detail}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--worker", required=True, help="the cases, as JSON [[kind, seed]...]")
    parser.add_argument("--exec-modes", default="bytecode,compiled")
    parser.add_argument("--kernels", default="numpy")
    args = parser.parse_args(argv)
    todo = [(k, int(s)) for k, s in json.loads(args.worker)]
    _worker(todo, args.exec_modes.split(","), args.kernels)


ALL_KINDS = (*KINDS, *RANDOM_KINDS)

if __name__ == "__main__":
    main()
