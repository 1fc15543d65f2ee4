"""The long fuzz of the ONNX importer: mutated models and random valid models against ONNX
Runtime, counted.

Run: ``PYTHONPATH=src python benchmarks/fuzz.py [--count 70] [--kinds graph,random,...]
[--exec-modes bytecode,compiled,native] [--kernels numpy|jit] [--timeout 120]``.
Prints the counts table and writes ``benchmarks/results/fuzz.json`` with the counts and every
case that was not a match or a clear error.

``--count`` cases of each kind (`rvm.testing.onnx_fuzz.ALL_KINDS`: seven mutations of small
seed models, ``random`` valid models of elementwise, layout and reduction ops, ``cnn`` valid
CNNs at sizes that take the library's convolution and pool kernels, ``transformer`` valid
attention stacks over a symbolic sequence length) run in worker processes
(`rvm.testing.onnx_fuzz.run`), each imported with `rvm.from_onnx`, compiled and run (exec modes
in turn) and compared with ONNX Runtime. The columns:

- ``inputs``: cases run;
- ``crashes`` and ``hangs``: a worker died or went silent in rvm's import, compile or run;
- ``wrong``: rvm's outputs differ from ONNX Runtime's;
- ``clear errors``: rvm raised an `rvm.RVMError` (an `rvm.OnnxImportError` naming the problem);
  ``of which ORT ran``: those ONNX Runtime ran (what rvm does not support, or refuses where
  ONNX Runtime is lenient);
- ``other exceptions``: rvm raised anything else;
- ``matched``: rvm's outputs equal ONNX Runtime's;
- ``ORT refused``: rvm ran a model (or inputs) that ONNX Runtime refuses;
- ``unchecked``: rvm ran, then ONNX Runtime crashed or hung (nothing to compare).

The goal is 0 in crashes, hangs, wrong and other exceptions.
"""

from __future__ import annotations

import argparse
import platform
import time
from collections import Counter

from common import write_results

from rvm.testing.onnx_fuzz import ALL_KINDS, OUTCOMES, cases, run

COLUMNS = [
    ("inputs", None),
    ("crashes", "crash"),
    ("hangs", "hang"),
    ("wrong", "wrong"),
    ("clear errors", "error"),
    ("of which ORT ran", "error_ort_ran"),
    ("other exceptions", "other"),
    ("matched", "ok"),
    ("ORT refused", "accepted"),
    ("unchecked", "unchecked"),
]


def _row(label: str, counts: Counter) -> str:
    inputs = sum(counts[k] for k in OUTCOMES)
    cells = [str(inputs if key is None else counts[key]) for _, key in COLUMNS]
    return f"{label:<10}" + "".join(f"{c:>{len(n) + 2}}" for c, (n, _) in zip(cells, COLUMNS))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=70, help="cases of each kind")
    parser.add_argument("--start", type=int, default=0, help="the first seed")
    parser.add_argument("--kinds", default=",".join(ALL_KINDS))
    parser.add_argument("--exec-modes", default="bytecode,compiled,native")
    parser.add_argument("--kernels", default="numpy", choices=("numpy", "jit"))
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds without progress")
    parser.add_argument("--show-refusals", action="store_true", help="list errors ORT ran")
    args = parser.parse_args()
    kinds = args.kinds.split(",")
    start = time.perf_counter()
    by_kind: dict[str, Counter] = {}
    notes = []
    for kind in kinds:
        counts, found = run(
            cases([kind], args.count, args.start),
            exec_modes=args.exec_modes.split(","),
            kernels=args.kernels,
            timeout=args.timeout,
        )
        by_kind[kind] = counts
        notes += found
        print(_row(kind, counts), flush=True)
    total = sum(by_kind.values(), Counter())
    print(f"\nONNX importer fuzz on {platform.machine()} {platform.processor() or ''}".rstrip())
    print(f"{'kind':<10}" + "".join(f"{name:>{len(name) + 2}}" for name, _ in COLUMNS))
    for kind, counts in by_kind.items():
        print(_row(kind, counts))
    print(_row("total", total))
    for note in notes:
        if note["outcome"] != "error" or args.show_refusals:
            outcome = "refused, ORT ran" if note["outcome"] == "error" else note["outcome"]
            print(f"  {outcome}: {note['kind']} {note['seed']}: {note.get('what', '')}")
            print(f"    {note.get('detail', '')}")
    seconds = time.perf_counter() - start
    print(f"({seconds:.0f} s)")
    write_results(
        "fuzz",
        {
            "machine": platform.machine(),
            "args": vars(args),
            "seconds": seconds,
            "counts": {k: dict(c) for k, c in by_kind.items()},
            "total": dict(total),
            "notes": notes,
        },
    )


if __name__ == "__main__":
    main()
