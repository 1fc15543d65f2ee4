"""The native mode against the compiled mode on the transformer test models.

Run: ``python benchmarks/native_transformers.py [--repeat N] [--new N]``. Needs onnxruntime,
not torch: the models are the tiny random-weight exports committed under
``tests/data/transformers`` (2 layers, width 64: the VM's dispatch is most of their time).
For each model, ``main`` at one prompt (batch 1, 16 tokens; the with-past decoders one token
after a past of 32) in the compiled and native modes and ONNX Runtime; for the with-past
decoders also ``vm["generate"]`` (`rvm.generation.greedy`) of an 8-token prompt and ``--new``
tokens. Outputs are checked first (every mode against ORT, relative error <= 1e-4; generated
tokens equal in both modes and to a greedy loop over ORT), and `native_report()` must show no
fallback. Times are medians of interleaved turns in one process, default threads, each turn
after a pause (ORT's pool threads spin on after its calls, slowing whatever runs next).
Prints a table with the machine and writes ``benchmarks/results/native_transformers.json``.
Issue 27's goal: native <= compiled time on every row. GPT-2 small and BERT-base are in
`benchmarks/transformers.py` (a column per exec mode).
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
from common import ROOT, interleaved_medians, machine, machine_line, write_results

import rvm
from rvm.testing.ort_greedy import ort_greedy

DATA = ROOT / "tests" / "data" / "transformers"
MODELS = ("gpt2_dynamo", "bert_dynamo", "gpt2_with_past", "llama_with_past")
MODES = ("compiled", "native")
SETTLE_S = 0.1  # ORT's pool threads spin ~30 ms after a call (see benchmarks/models.py)


def _feeds(sess: Any, past: int, seq: int) -> dict[str, np.ndarray]:
    """Random tokens, a full mask, positions and caches for one call (batch 1)."""
    rng = np.random.default_rng(0)
    out: dict[str, np.ndarray] = {}
    for i in sess.get_inputs():
        if i.name in ("input_ids", "token_type_ids"):
            out[i.name] = rng.integers(0, 2 if i.name == "token_type_ids" else 256, (1, seq))
        elif i.name == "attention_mask":
            out[i.name] = np.ones((1, past + seq), np.int64)
        elif i.name == "position_ids":
            out[i.name] = np.arange(past, past + seq, dtype=np.int64)[None]
        else:
            shape = (1, i.shape[1], past, i.shape[3])
            out[i.name] = rng.standard_normal(shape).astype(np.float32)
    return out


def _native(ex: rvm.Executable) -> None:
    report = rvm.VirtualMachine(ex, exec_mode="native").native_report()
    if report.fallbacks:
        raise SystemExit(f"the native mode falls back:\n{report}")


def bench_main(name: str, repeat: int) -> dict[str, float]:
    import onnxruntime as ort

    path = DATA / f"{name}.onnx"
    sess = ort.InferenceSession(str(path))
    feed = _feeds(sess, 32, 1) if "with_past" in name else _feeds(sess, 0, 16)
    args = [feed[i.name] for i in sess.get_inputs()]
    want = sess.run(None, feed)
    ex = rvm.compile(rvm.from_onnx(str(path)))
    calls = {"ort": lambda: sess.run(None, feed)}
    for mode in MODES:
        f = rvm.VirtualMachine(ex, exec_mode=mode)["main"]
        got = f(*args)
        for g, w in zip(got if isinstance(got, tuple) else (got,), want):
            err = float(np.max(np.abs(g - w)) / max(1e-30, float(np.max(np.abs(w)))))
            if err > 1e-4:
                raise SystemExit(f"{name} ({mode}): outputs differ from ORT's ({err:.1e})")
        calls[mode] = lambda f=f: f(*args)
    _native(ex)
    return {k: 1e3 * v for k, v in interleaved_medians(calls, repeat, 2e-3, SETTLE_S).items()}


def bench_generate(name: str, new: int, repeat: int) -> dict[str, float]:
    import onnxruntime as ort

    path = DATA / f"{name}.onnx"
    sess = ort.InferenceSession(str(path))
    ex = rvm.compile(rvm.generation.greedy(rvm.from_onnx(str(path))))
    ids = np.random.default_rng(0).integers(0, 256, (1, 8))
    want = ort_greedy(sess, ids, new)
    calls = {"ort_loop": lambda: ort_greedy(sess, ids, new)}
    for mode in MODES:
        f = rvm.VirtualMachine(ex, exec_mode=mode)["generate"]
        if not np.array_equal(f(ids, np.int64(new)), want):
            raise SystemExit(f"{name} generate ({mode}): tokens differ from the ORT loop's")
        calls[mode] = lambda f=f: f(ids, np.int64(new))
    _native(ex)
    return {k: 1e3 * v for k, v in interleaved_medians(calls, repeat, 0.0, SETTLE_S).items()}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=31)
    ap.add_argument("--new", type=int, default=16, help="tokens generate makes")
    a = ap.parse_args(argv)
    rows: dict[str, dict[str, float]] = {}
    for name in MODELS:
        rows[f"{name} main"] = bench_main(name, a.repeat)
        if "with_past" in name:
            rows[f"{name} generate 8+{a.new}"] = bench_generate(name, a.new, max(5, a.repeat // 3))
    print(machine_line())
    print(f"\n{'case':<34}{'ORT':>11}{'compiled':>11}{'native':>11}  native/compiled")
    for case, ms in rows.items():
        ort_ms = ms.get("ort", ms.get("ort_loop", float("nan")))
        ratio = ms["native"] / ms["compiled"]
        print(
            f"{case:<34}{ort_ms:>9.3f}ms{ms['compiled']:>9.3f}ms{ms['native']:>9.3f}ms  {ratio:.2f}"
        )
    write_results("native_transformers", {"machine": machine(), "ms": rows})


if __name__ == "__main__":
    main()
