"""Recursion through other functions in the native mode against the compiled mode.

Run: ``python benchmarks/native_cycles.py [--repeat N]``. Before session 57 such functions
fell back to the compiled mode; now each call cycle is one native function
(`rvm.runtime.modes.native_groups`). The programs are those of
``tests/runtime/test_native_cycles.py``:

- ``even1000``: ``even(1000)`` of even/odd calling each other in tail position (1000 calls:
  jumps in the merged function).
- ``descent30``: ``main(x, 30)`` of a recursive descent expr -> term -> factor -> expr on a
  (16,) tensor (60 nested calls, 30 jumps, 5 kernels a level).

Results are checked against the bytecode mode and `native_report()` must show no fallback.
Times are medians of interleaved turns in one process (the bytecode mode's too; the native
mode's time before session 57 was the compiled mode's, plus the fallback's check). Prints a
table with the machine and writes ``benchmarks/results/native_cycles.json``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np
from common import ROOT, interleaved_medians, machine, machine_line, write_results

import rvm

sys.path.insert(0, str(ROOT / "tests" / "runtime"))
from test_native_cycles import DESCENT, MUTUAL  # noqa: E402

MODES = ("bytecode", "compiled", "native")


def _rows(repeat: int) -> list[dict[str, Any]]:
    x = np.linspace(-1, 1, 16).astype("float32")
    programs = [
        ("even1000", MUTUAL, "even", (np.array(1000, "int64"),)),
        ("descent30", DESCENT, "main", (x, np.array(30, "int64"))),
    ]
    rows = []
    for name, mod, fname, args in programs:
        ex = rvm.compile(mod)
        want = rvm.VirtualMachine(ex, exec_mode="bytecode")[fname](*args)
        calls = {}
        for mode in MODES:
            vm = rvm.VirtualMachine(ex, exec_mode=mode)
            np.testing.assert_allclose(vm[fname](*args), want, rtol=1e-5)
            if mode == "native":
                assert not vm.native_report().fallbacks, vm.native_report()
            calls[mode] = lambda f=vm[fname], a=args: f(*a)
        times = interleaved_medians(calls, repeat=repeat)
        row = {"program": name, **{f"{m}_us": times[m] * 1e6 for m in MODES}}
        row["native_over_compiled"] = times["native"] / times["compiled"]
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=101)
    args = parser.parse_args()
    rows = _rows(args.repeat)
    print(machine_line())
    print("| program | bytecode µs | compiled µs | native µs | native / compiled |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['program']} | {r['bytecode_us']:.1f} | {r['compiled_us']:.1f} "
            f"| {r['native_us']:.1f} | {r['native_over_compiled']:.4f} |"
        )
    write_results("native_cycles", {"machine": machine(), "rows": rows})


if __name__ == "__main__":
    main()
