"""Benchmark of the cost of calling a VM function from Python: the calling API, not the loop.

Run: ``PYTHONPATH=src python benchmarks/call_overhead.py``. Prints nanoseconds per call (the
fastest of repeats that take turns between the cases, in thread CPU time: the least disturbed
figure on a shared machine) of an identity function
``main(x)`` on a 0-d float32 tensor, in both exec modes, called as:

- ``vm["main"](x)``: the lookup and the call, as most user code writes it;
- ``f(x)`` with ``f = vm["main"]`` fetched once;
- ``f(x=x)``: by keyword;
- ``vm.invoke("main", x)``;
- ``vm["bound"]()``: a function saved with its argument (no entry checks): what is left is
  the VM's entry (including its thread guard) and the run of one ``RET``;
- ``vm._enter(0, [x])`` and ``vm._run(0, [x])``: the VM's entry with and without its thread
  guard (`EntryGuard`, which every call from Python takes); their difference is its cost.
"""

from __future__ import annotations

import time
from collections.abc import Callable

# isort: split
import common  # noqa: F401  (puts the checkout's src first on sys.path)

# isort: split
import numpy as np

import rvm
from rvm.script import T, func, module


@module
class Identity:
    @func
    def main(x: T[(), "float32"]):
        return x


def ns_per_call(cases: dict[str, Callable[[], object]], number: int = 5000, repeat: int = 15):
    """The fewest thread CPU nanoseconds per call of each case, the cases taking turns."""
    for fn in cases.values():
        for _ in range(1000):
            fn()
    best = dict.fromkeys(cases, float("inf"))
    for _ in range(repeat):
        for label, fn in cases.items():
            start = time.thread_time_ns()
            for _ in range(number):
                fn()
            best[label] = min(best[label], (time.thread_time_ns() - start) / number)
    return best


def cases(vm: rvm.VirtualMachine, x: np.ndarray) -> dict[str, Callable[[], object]]:
    """The calls timed, on ``vm`` (with ``main`` saved as ``bound`` on ``x``)."""
    f = vm["main"]
    vm.save_function("main", "bound", x)
    return {
        'vm["main"](x)': lambda: vm["main"](x),
        "f(x)": lambda: f(x),
        "f(x=x)": lambda: f(x=x),
        'vm.invoke("main", x)': lambda: vm.invoke("main", x),
        'vm["bound"]()': lambda: vm["bound"](),
        "vm._enter(0, [x])": lambda: vm._enter(0, [x]),
        "vm._run(0, [x])": lambda: vm._run(0, [x]),
    }


def main() -> None:
    ex = rvm.compile(Identity, kernels="numpy")
    x = np.ones((), np.float32)
    for mode in ("bytecode", "compiled"):
        vm = rvm.VirtualMachine(ex, exec_mode=mode)
        times = ns_per_call(cases(vm, x))
        for label, ns in times.items():
            print(f"{mode:<9} {label:<22} {ns:8.0f} ns")
        guard = times["vm._enter(0, [x])"] - times["vm._run(0, [x])"]
        print(f"{mode:<9} {'thread guard':<22} {guard:8.0f} ns")


if __name__ == "__main__":
    main()
