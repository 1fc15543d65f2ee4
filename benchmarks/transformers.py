"""Transformers against ONNX Runtime: BERT-base, a GPT-2 small decode step, generation.

Run: ``python benchmarks/transformers.py [--only bert,decode,generate,compile,rss,chart]
[--workdir DIR] [--tiny] [--threads N]``. Needs torch (CPU), transformers and optimum-onnx (the
``export`` extra) to export the models: random-weight ``transformers`` defaults
(`transformer_models`), kept in ``--workdir``. ``--tiny`` uses 2-layer, width-64 versions (a
quick check of the script). Prints a table, writes ``benchmarks/results/transformers.json`` and
a chart of time per token against sequence length (``transformers.png``). Parts (issue 23's
goals in brackets):

- **bert**: BERT-base, batch 1, seq 128, one call [rvm <= 1.0x ORT].
- **decode**: GPT-2 small with past, one decode step at past length 128 [<= 1.0x ORT].
- **generate**: GPT-2 small, a 32-token prompt and 32 new tokens in one ``vm["generate"]``
  call against the greedy Python loop over ORT (`rvm.testing.ort_greedy`) [<= 0.9x].
- **generate-tiny**: the same with rvm's 2-layer test decoder (`rvm.testing.tiny_decoder`,
  width 16), where the loop's own cost (control, argmax, mask, calls) is most of the time.
- **compile**: cold ``from_onnx`` + ``compile`` of GPT-2 small in a fresh process with an
  empty kernel cache (rvm's library already built) [<= 10 s]; warm: ``rvm.compile_onnx`` + the
  first call in a new process with its compile cache filled (each exec mode) [<= 1 s], the
  same without it (``from_onnx`` + ``compile``, kernels cached), and ``load_executable`` of
  the saved file + the first call (each exec mode) [<= 1 s].
- **rss**: peak RSS of a process running the decode step with rvm, and with ORT [<= 1.5x].
- **chart**: milliseconds per decode step at past lengths 16 to 512, rvm's exec modes and ORT
  (each step concatenating its past, as a Python loop over ORT runs it), and the step that
  ``vm["generate"]`` runs (``generate_step``, compiled mode) over a cache preallocated to
  the longest length: it writes the new keys in place and reads the slots written so far.

Every speed figure is a median of interleaved turns in one process, default threads on both
sides (``--threads N`` gives both N: one thread keeps the ratio steadier on a loaded machine),
after checking rvm's outputs against ORT's (relative error <= 1e-4 of the largest output;
generated tokens equal). rvm imports each model with symbolic dimensions; where the importer
cannot yet (run-time shape computations, issue 23 item 1) it falls back to ``shape_dict``
fixing every dimension, says so in the table, and skips what needs symbolic shapes (generate).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import ROOT, interleaved_medians, write_results

# isort: split
import numpy as np
import onnxruntime as ort
from model_child import peak_rss_mb
from transformer_models import export_bert, export_gpt2

import rvm
from rvm.testing.ort_greedy import ort_greedy
from rvm.testing.tiny_decoder import tiny_decoder

# This script's name shadows the `transformers` package: with the helpers beside it imported,
# its folder leaves sys.path so that the export (`transformer_models`) finds the package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent]

MODES = ("bytecode", "compiled", "native")
TINY = {"n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 256}
TINY_BERT = {
    "num_hidden_layers": 2,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "intermediate_size": 128,
    "vocab_size": 256,
}
SETTLE_S = 0.1  # ORT's pool threads spin ~30 ms after a call (see benchmarks/models.py)


def machine() -> str:
    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{name}, {os.cpu_count()} CPUs, rvm threads {rvm.get_num_threads()}"


THREADS: list[int | None] = [None]  # --threads: both sides' threads (None: their defaults)


def session(model: Path | str | bytes) -> ort.InferenceSession:
    """An ORT session of ``model`` with `THREADS` intra-op threads (its default when None)."""
    options = ort.SessionOptions()
    if THREADS[0] is not None:
        options.intra_op_num_threads = THREADS[0]
    return ort.InferenceSession(model if isinstance(model, bytes) else str(model), options)


def _dims(sess: ort.InferenceSession, values: dict[str, int]) -> dict[str, tuple[int, ...]]:
    """Every input's shape with its symbolic dims given by ``values`` (ORT's dim names)."""
    out = {}
    for i in sess.get_inputs():
        out[i.name] = tuple(values[d] if isinstance(d, str) else d for d in i.shape)
    return out


def load(path: Path, fixed: dict[str, tuple[int, ...]]) -> tuple[rvm.IRModule, str]:
    """The module imported with symbolic dimensions, else with ``fixed`` shapes; and how."""
    try:
        return rvm.from_onnx(str(path)), "symbolic"
    except rvm.OnnxImportError as err:
        reason = str(err).splitlines()[0][:100]
        return rvm.from_onnx(str(path), shape_dict=fixed), f"fixed shapes ({reason})"


def _check(name: str, got: Any, want: list[np.ndarray]) -> float:
    got = list(got) if isinstance(got, (tuple, list)) else [got]
    worst = 0.0
    for g, w in zip(got, want):
        err = float(np.max(np.abs(np.asarray(g) - w)) / max(1e-30, float(np.max(np.abs(w)))))
        worst = max(worst, err)
    if worst > 1e-4:
        raise SystemExit(f"{name}: rvm's outputs differ from ORT's (relative error {worst:.2e})")
    return worst


def speed(path: Path, feed: dict[str, np.ndarray], repeat: int) -> dict[str, Any]:
    """ms per call of rvm in each exec mode and ORT on ``feed``, after checking outputs."""
    sess = session(path)
    names = [i.name for i in sess.get_inputs()]
    args = [feed[n] for n in names]
    mod, how = load(path, {n: v.shape for n, v in feed.items()})
    start = time.perf_counter()
    ex = rvm.compile(mod)
    compile_s = time.perf_counter() - start
    want = sess.run(None, feed)
    calls = {"ort": lambda: sess.run(None, feed)}
    err = 0.0
    for mode in MODES:
        f = rvm.VirtualMachine(ex, exec_mode=mode)["main"]
        err = max(err, _check(mode, f(*args), want))
        calls[mode] = lambda f=f: f(*args)
    ms = {k: 1e3 * v for k, v in interleaved_medians(calls, repeat, 0.05, SETTLE_S).items()}
    return {"import": how, "compile_s": compile_s, "rel_err": err, "ms": ms}


def gpt2_feed(sess: ort.InferenceSession, past: int, seq: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    shapes = _dims(
        sess,
        {
            "batch_size": 1,
            "sequence_length": seq,
            "past_sequence_length": past,
            "past_sequence_length + sequence_length": past + seq,
            "past_sequence_length + 1": past + 1,
        },
    )
    feed = {}
    for name, shape in shapes.items():
        if name == "input_ids":
            feed[name] = rng.integers(0, 200, shape)
        elif name == "attention_mask":
            feed[name] = np.ones(shape, np.int64)
        elif name == "position_ids":
            feed[name] = np.arange(past, past + seq)[None, :]
        else:
            feed[name] = rng.standard_normal(shape).astype(np.float32)
    return feed


def bench_bert(model: Path, repeat: int) -> dict[str, Any]:
    sess = ort.InferenceSession(str(model))
    shapes = _dims(sess, {"batch_size": 1, "sequence_length": 128})
    rng = np.random.default_rng(0)
    feed = {
        "input_ids": rng.integers(0, 200, shapes["input_ids"]),
        "attention_mask": np.ones(shapes["attention_mask"], np.int64),
        "token_type_ids": np.zeros(shapes["token_type_ids"], np.int64),
    }
    return speed(model, {k: v for k, v in feed.items() if k in shapes}, repeat)


def bench_generate(model: Path | bytes, prompt: int = 32, new: int = 32) -> dict[str, Any]:
    source = str(model) if isinstance(model, Path) else model
    try:
        mod = rvm.from_onnx(source)
    except rvm.OnnxImportError as err:
        return {"skipped": f"needs symbolic shapes in the importer: {str(err)[:120]}"}
    ex = rvm.compile(rvm.generation.greedy(mod))
    sess = session(source)
    vocab = sess.get_outputs()[0].shape[-1]
    ids = np.random.default_rng(0).integers(0, min(200, vocab), (1, prompt))
    want = ort_greedy(sess, ids, new)
    calls = {"ort_loop": lambda: ort_greedy(sess, ids, new)}
    for mode in MODES:
        f = rvm.VirtualMachine(ex, exec_mode=mode)["generate"]
        if not np.array_equal(f(ids, np.int64(new)), want):
            raise SystemExit(f"generate ({mode}): tokens differ from the ORT loop's")
        calls[mode] = lambda f=f: f(ids, np.int64(new))
    ms = {k: 1e3 * v for k, v in interleaved_medians(calls, 5, 0.0, SETTLE_S).items()}
    return {"ms": ms, "ms_per_token": {k: v / new for k, v in ms.items()}}


CHILD_CODE = r"""
import json, statistics, sys, time
start = time.perf_counter()
import numpy as np, rvm
what, path, fixed, saved = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
mode = sys.argv[6] if len(sys.argv) > 6 else None
sys.path.insert(0, sys.argv[5])
from model_child import peak_rss_mb
feed = {k: np.zeros(v, np.int64 if k in ("input_ids", "attention_mask", "position_ids")
        else np.float32) for k, v in fixed.items()}
out = {"import_s": time.perf_counter() - start}
t0 = time.perf_counter()
if what == "ort":
    import onnxruntime as ort
    s = ort.InferenceSession(path)
    s.run(None, feed)
elif what == "load":
    ex = rvm.load_executable(saved)
    out["load_s"] = time.perf_counter() - t0
    vm = rvm.VirtualMachine(ex, exec_mode=mode)
    out["vm_s"] = time.perf_counter() - t0 - out["load_s"]
    vm["main"](*feed.values())
    out["compiled_in_process"] = rvm.runtime.loading.loader.kernel_counts()["compiled"]
    out["default_exec_mode"] = ex.default_exec_mode
elif what == "compile_onnx":  # through the compile cache (rvm.compile_cache)
    try:
        ex = rvm.compile_onnx(path)
    except rvm.OnnxImportError:
        ex = rvm.compile_onnx(path, shape_dict={k: tuple(v) for k, v in fixed.items()})
    out["compile_s"] = time.perf_counter() - t0
    rvm.VirtualMachine(ex, exec_mode=mode)["main"](*feed.values())
    out["compiled_in_process"] = rvm.runtime.loading.loader.kernel_counts()["compiled"]
else:
    try:
        mod = rvm.from_onnx(path)
    except rvm.OnnxImportError:
        mod = rvm.from_onnx(path, shape_dict={k: tuple(v) for k, v in fixed.items()})
    out["from_onnx_s"] = time.perf_counter() - t0
    t = time.perf_counter()
    ex = rvm.compile(mod)
    out["compile_s"] = time.perf_counter() - t
    rvm.VirtualMachine(ex, exec_mode=mode)["main"](*feed.values())
    if saved != "-":
        ex.save(saved)
out["work_s"] = time.perf_counter() - t0  # what the process did after its imports
out["total_s"] = time.perf_counter() - start
out["peak_rss_mb"] = peak_rss_mb()
print(json.dumps(out))
"""


def _child(
    what: str, model: Path, fixed: dict, saved: str, cache: Path, mode: str | None = None
) -> dict[str, Any]:
    env = {**os.environ, "RVM_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT / "src")}
    args = [sys.executable, "-c", CHILD_CODE, what, str(model), json.dumps(fixed), saved]
    args += [str(Path(__file__).parent), *([mode] if mode else [])]
    done = subprocess.run(args, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"child {what} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _medians(runs: list[dict[str, Any]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0] if k.endswith("_s")}


def bench_processes(model: Path, feed: dict[str, np.ndarray], repeat: int = 3) -> dict[str, Any]:
    """Cold and warm compiles, loading the saved executable (each exec mode), and ONNX
    Runtime's session, each in a fresh process (``repeat`` of each but the cold compile,
    interleaved; medians), with peak RSS; the input order is the model's. A figure's
    ``work_s`` is the process's time after ``import numpy, rvm`` (``import_s``)."""
    sess = ort.InferenceSession(str(model))
    fixed = {i.name: list(feed[i.name].shape) for i in sess.get_inputs()}
    with tempfile.TemporaryDirectory() as tmp:
        cache, saved = Path(tmp) / "cache", str(Path(tmp) / "gpt2.rvmx")
        cold = _child("compile", model, fixed, saved, cache)
        # fills the compile cache, and the native functions' cache for the native rows
        first = _child("compile_onnx", model, fixed, "-", cache, "native")
        runs: dict[str, list[dict[str, Any]]] = {}
        for _ in range(repeat):
            for mode in MODES:
                runs.setdefault(f"cached_{mode}", []).append(
                    _child("compile_onnx", model, fixed, "-", cache, mode)
                )
            for mode in MODES:
                runs.setdefault(f"load_{mode}", []).append(
                    _child("load", model, fixed, saved, cache, mode)
                )
            runs.setdefault("warm", []).append(_child("compile", model, fixed, "-", cache))
            runs.setdefault("ort", []).append(_child("ort", model, fixed, "-", cache))
    default = runs["load_bytecode"][0]["default_exec_mode"]
    out = {k: _medians(v) for k, v in runs.items()}
    return {
        "cold_compile_s": cold["compile_s"],
        "cold_total_s": cold["total_s"],
        "warm_compile_s": out["warm"]["compile_s"],
        "warm_total_s": out["warm"]["total_s"],
        "first_compile_onnx_s": first["compile_s"],
        "warm_compile_onnx_s": out[f"cached_{default}"]["work_s"],
        "load_and_first_call_s": out[f"load_{default}"]["work_s"],
        "default_exec_mode": default,
        "repeat": repeat,
        "medians": out,
        "compiled_at_load": max(
            r["compiled_in_process"] for k in runs if k.startswith("load") for r in runs[k]
        ),
        "peak_rss_mb": {
            "rvm": runs["warm"][-1]["peak_rss_mb"],
            "ort": runs["ort"][-1]["peak_rss_mb"],
        },
    }


def bench_chart(model: Path, lengths: list[int], repeat: int) -> dict[str, Any]:
    sess = ort.InferenceSession(str(model))
    rows = {}
    for past in lengths:
        rows[past] = speed(model, gpt2_feed(sess, past), repeat)
    steps = bench_steps(model, lengths, repeat)
    for past in lengths:
        rows[past]["ms"]["preallocated"] = steps[past]
    return rows


def bench_steps(model: Path, lengths: list[int], repeat: int) -> dict[int, float]:
    """ms of ``generate_step`` at each past length, in a cache of the longest length + 1
    (a generate call's steps), its logits checked against ORT's step on the same past."""
    sess = session(model)
    gen = rvm.generation.greedy(rvm.from_onnx(str(model)))
    if "generate_step" not in gen.functions:
        raise SystemExit("generate has no preallocated cache for this model")
    step = rvm.VirtualMachine(rvm.compile(gen), exec_mode="compiled")["generate_step"]
    capacity = max(lengths) + 1
    full = gpt2_feed(sess, capacity)  # unwritten slots hold noise the mask hides
    out = {}
    for past in lengths:
        feed = gpt2_feed(sess, past)
        args = []
        for p in gen["generate_step"].params[:-1]:
            name = re.sub(r"^cache_(\d+)_(key|value)$", r"past_key_values.\1.\2", p.name)
            if name == "attention_mask":
                args.append((np.arange(capacity) < past + 1).astype(np.int64)[None])
            elif name.startswith("past_key_values"):
                buf = full[name].copy()
                buf[:, :, :past] = feed[name]
                args.append(buf)
            else:
                args.append(feed[name])
        args.append(np.int64(past))
        _check(f"generate_step at {past}", step(*args)[0], sess.run(None, feed)[:1])
        calls = {
            "step": lambda args=args: step(*args),
            "ort": lambda feed=feed: sess.run(None, feed),
        }
        ms = interleaved_medians(calls, repeat, 0.05, SETTLE_S)
        out[past] = 1e3 * ms["step"]
    return out


def draw(chart: dict[int, dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lengths = sorted(chart)
    fig, ax = plt.subplots(figsize=(6, 4))
    for name in ("ort", *MODES, "preallocated"):
        if all(name in chart[n]["ms"] for n in lengths):
            label = "rvm generate's step (cache in place)" if name == "preallocated" else name
            ax.plot(lengths, [chart[n]["ms"][name] for n in lengths], marker="o", label=label)
    ax.set_xlabel("past length (tokens)")
    ax.set_ylabel("ms per token (one decode step)")
    ax.set_xscale("log", base=2)
    ax.set_title("GPT-2 decode step: rvm exec modes and ONNX Runtime")
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    print(f"wrote {path.relative_to(ROOT)}")


def table(results: dict[str, Any]) -> str:
    lines = [f"machine: {results['machine']}", ""]
    head = f"{'case':<26}{'import':<12}" + "".join(f"{m:>11}" for m in ("ort", *MODES))
    lines.append(head + f"{'best/ort':>10}")
    for case in ("bert", "decode"):
        r = results.get(case)
        if not r:
            continue
        best = min(r["ms"][m] for m in MODES)
        row = f"{case:<26}{r['import'].split(' ')[0]:<12}"
        row += "".join(f"{r['ms'][m]:>9.2f}ms" for m in ("ort", *MODES))
        lines.append(row + f"{best / r['ms']['ort']:>10.2f}")
    for key, case in (("generate", "generate 32+32"), ("generate_tiny", "tiny decoder 32+32")):
        g = results.get(key)
        if g and "ms" in g:
            best = min(g["ms"][m] for m in MODES)
            row = f"{case:<26}{'symbolic':<12}"
            row += "".join(f"{g['ms'][m]:>9.1f}ms" for m in ("ort_loop", *MODES))
            lines.append(row + f"{best / g['ms']['ort_loop']:>10.2f}")
        elif g:
            lines.append(f"{case:<26}skipped: {g['skipped'][:70]}")
    p = results.get("processes")
    if p:
        lines += ["", *process_lines(p)]
    return "\n".join(lines)


def process_lines(p: dict[str, Any]) -> list[str]:
    """The new-process figures: compiles, loads by exec mode, ORT's session, peak RSS."""
    m = p["medians"]
    w = m["warm"]
    lines = [
        f"GPT-2 small in new processes (medians of {p['repeat']}; import numpy+rvm "
        f"{w['import_s']:.2f} s, not counted below):",
        f"  cold from_onnx + compile {p['cold_compile_s']:.1f} s (process "
        f"{p['cold_total_s']:.1f} s)  [goal <= 10 s]",
        f"  warm from_onnx {w['from_onnx_s']:.2f} s + compile {w['compile_s']:.2f} s + first "
        f"call: {w['work_s']:.2f} s (kernels cached, no compile cache)",
    ]
    lines.append(
        f"  first compile_onnx (kernels cached, compile cache empty: import, compile, digest "
        f"and save the entry) {p['first_compile_onnx_s']:.1f} s"
    )
    for mode in MODES:
        r = m[f"cached_{mode}"]
        mark = "  [goal <= 1 s]" if mode == p["default_exec_mode"] else ""
        lines.append(
            f"  warm compile_onnx + first call, {mode:<8}: {r['work_s']:.2f} s (compile_onnx "
            f"{r['compile_s']:.2f} s){mark}"
        )
    for mode in MODES:
        r = m[f"load_{mode}"]
        mark = "  [goal <= 1 s]"
        lines.append(
            f"  load_executable + first call, {mode:<8}: {r['work_s']:.2f} s (load "
            f"{r['load_s']:.2f} s, VM {r['vm_s']:.2f} s, call "
            f"{r['work_s'] - r['load_s'] - r['vm_s']:.2f} s){mark}"
        )
    lines.append(
        f"  ONNX Runtime session + first run: {m['ort']['work_s']:.2f} s; kernels compiled "
        f"by the loads: {p['compiled_at_load']}"
    )
    rss = p["peak_rss_mb"]
    lines.append(
        f"peak RSS: rvm {rss['rvm']:.0f} MB, ORT {rss['ort']:.0f} MB "
        f"({rss['rvm'] / rss['ort']:.2f}x)"
    )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="bert,decode,generate,generate-tiny,compile,rss,chart")
    ap.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "rvm-transformers"))
    ap.add_argument("--tiny", action="store_true", help="2-layer, width-64 models")
    ap.add_argument("--repeat", type=int, default=21)
    ap.add_argument("--lengths", default="16,32,64,128,256,512")
    ap.add_argument("--name", default="transformers")
    ap.add_argument(
        "--threads",
        type=int,
        help="threads of both rvm and ORT (default: each one's default, as the goals are "
        "stated); 1 gives steadier ratios on a loaded machine",
    )
    a = ap.parse_args()
    if a.threads is not None:
        THREADS[0] = a.threads
        rvm.set_num_threads(a.threads)
    only = set(a.only.split(","))
    work = Path(a.workdir)
    work.mkdir(parents=True, exist_ok=True)
    gpt2 = export_gpt2(work, **(TINY if a.tiny else {}))
    results: dict[str, Any] = {"machine": machine(), "tiny": a.tiny, "threads": a.threads}
    if "bert" in only:
        results["bert"] = bench_bert(export_bert(work, **(TINY_BERT if a.tiny else {})), a.repeat)
    decode_feed = gpt2_feed(ort.InferenceSession(str(gpt2)), 128)
    if "decode" in only:
        results["decode"] = speed(gpt2, decode_feed, a.repeat)
    if "generate" in only:
        results["generate"] = bench_generate(gpt2)
    if "generate-tiny" in only:  # rvm's 2-layer test decoder: imports with symbolic shapes
        results["generate_tiny"] = bench_generate(tiny_decoder(seed=6, positions=128))
    if only & {"compile", "rss"}:
        results["processes"] = bench_processes(gpt2, decode_feed)
    if "chart" in only:
        lengths = [int(n) for n in a.lengths.split(",")]
        results["chart"] = bench_chart(gpt2, lengths, max(5, a.repeat // 3))
        draw(results["chart"], ROOT / "benchmarks" / "results" / f"{a.name}.png")
    if "chart" in results:
        lines = ["", "ms per decode step by past length (ORT, rvm modes, generate's step):"]
        for n, row in sorted(results["chart"].items()):
            lines.append(f"{n:>6}" + "".join(f"{k}={v:.2f} " for k, v in row["ms"].items()))
        print("\n".join(lines))
    print(table(results))
    print(f"this process: peak RSS {peak_rss_mb():.0f} MB")
    write_results(a.name, results)


if __name__ == "__main__":
    main()
