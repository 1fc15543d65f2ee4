"""Throughput of one model served from several Python threads: rvm (one VM per thread, jit
kernels) against ONNX Runtime (one session shared by the threads, its default options).

Run: ``python benchmarks/concurrency.py [--model squeezenet] [--threads 1,2,4] [--seconds 3]``.
For each thread count, every thread calls the model back to back for ``--seconds``; the table
gives inferences per second over all threads, and each runtime's figure against its own
single-thread one (1.0: no gain; below 1.0: the threads slow each other down, the
oversubscription collapse the issue rules out). Outputs are checked against ONNX Runtime
first, in every thread. Writes ``benchmarks/results/concurrency.json``.

Thread settings are the user's (``RVM_NUM_THREADS``, ``OPENBLAS_NUM_THREADS``): the table
header says which were set. rvm and ORT run one after the other, never at once.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from common import light_model_files, write_results

# isort: split
from model_child import as_outputs, check_outputs

import rvm
from rvm.testing.onnx_models import LIGHT_MODELS, run_ort


def _throughput(
    make_call: Callable[[], Callable[[], object]], threads: int, seconds: float
) -> float:
    """Calls per second over ``threads`` threads, each running the call ``make_call()`` gave it
    for ``seconds`` (after one warm-up call); a failure in any thread fails the run."""
    calls = [make_call() for _ in range(threads)]
    for call in calls:
        call()
    counts = [0] * threads
    errors: list[BaseException] = []
    start = threading.Barrier(threads + 1)
    deadline = [0.0]

    def work(i: int) -> None:
        start.wait()
        try:
            while time.perf_counter() < deadline[0]:
                calls[i]()
                counts[i] += 1
        except BaseException as err:  # noqa: BLE001 - re-raised by the main thread
            errors.append(err)

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    t0 = time.perf_counter()
    deadline[0] = t0 + seconds
    start.wait()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return sum(counts) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="squeezenet", choices=LIGHT_MODELS)
    parser.add_argument("--threads", default="1,2,4", help="comma-separated thread counts")
    parser.add_argument("--seconds", type=float, default=3.0, help="per figure")
    args = parser.parse_args()
    counts = [int(n) for n in args.threads.split(",")]
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as tmp:
        path, _, model, inputs = light_model_files(args.model, Path(tmp))
        want = run_ort(model, inputs)
        ex = rvm.compile(rvm.from_onnx(str(path)))
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        feed = {i.name: x for i, x in zip(session.get_inputs(), inputs, strict=True)}

        def rvm_call() -> Callable[[], object]:
            fn = rvm.VirtualMachine(ex)["main"]
            check_outputs("rvm", as_outputs(fn(*inputs)), want)
            return lambda: fn(*inputs)

        def ort_call() -> Callable[[], object]:
            check_outputs("ort", session.run(None, feed), want)
            return lambda: session.run(None, feed)

        rows = {}
        for n in counts:
            rows[n] = {
                "rvm_per_s": _throughput(rvm_call, n, args.seconds),
                "ort_per_s": _throughput(ort_call, n, args.seconds),
            }
    base = rows[counts[0]]
    settings = {
        k: os.environ[k] for k in ("RVM_NUM_THREADS", "OPENBLAS_NUM_THREADS") if k in os.environ
    }
    print(
        f"{args.model}, {args.seconds:.0f} s per figure; thread settings: {settings or 'defaults'}"
    )
    head = f"{'threads':>8}{'rvm /s':>10}{'vs 1':>7}{'ORT /s':>10}{'vs 1':>7}{'rvm/ORT':>9}"
    print(head)
    print("-" * len(head))
    for n, r in rows.items():
        r["rvm_scaling"] = r["rvm_per_s"] / base["rvm_per_s"]
        r["ort_scaling"] = r["ort_per_s"] / base["ort_per_s"]
        print(
            f"{n:>8}{r['rvm_per_s']:>10.1f}{r['rvm_scaling']:>7.2f}{r['ort_per_s']:>10.1f}"
            f"{r['ort_scaling']:>7.2f}{r['ort_per_s'] / r['rvm_per_s']:>9.2f}"
        )
    print("(rvm/ORT: time per inference, rvm over ORT, at that thread count)")
    write_results("concurrency", {"model": args.model, "settings": settings, "rows": rows})


if __name__ == "__main__":
    main()
