"""Writes tour.ipynb beside this file (without outputs): `python examples/notebooks/make_tour.py`.

The notebook is kept as this script so its cells are reviewed as code; the test suite runs the
written notebook on a real Jupyter kernel.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

CELLS: list[tuple[str, str]] = [
    (
        "md",
        """# A tour of rvm in a notebook

rvm compiles tensor programs with control flow, recursion and data types to register bytecode,
runs them on a virtual machine and compiles the fused kernels to native code. This notebook
defines a model in cells, compiles it, runs it in both exec modes, checks it against the
reference interpreter and the NumPy kernels, and looks at the profile and the bytecode.""",
    ),
    (
        "code",
        """import time

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

import rvm
from rvm import op
from rvm.script import T, adt, func, module""",
    ),
    (
        "md",
        """## A data type and a model with a loop

`List` is an algebraic data type. `main` turns the first `steps` rows of `x` into a `List`
(recursion), folds it into one row with a tail-recursive `match`, then runs `steps` steps of a
small RNN from that row with a `while` loop, which becomes a tail-recursive local function.""",
    ),
    (
        "code",
        """@adt
class List:
    Nil: ()
    Cons: (T[(16,), "float32"], "List")""",
    ),
    (
        "code",
        """@module
class Model:
    @func
    def build(x: T[("n", 16), "float32"], i: T[(), "int64"], xs: List):
        if i == 0:
            return xs
        else:
            return build(x, i - 1, Cons(op.take(x, i - 1, axis=0), xs))

    @func
    def total(xs: List, acc: T[(16,), "float32"]):
        match xs:
            case Cons(h, t):
                return total(t, acc + h)
            case Nil():
                return acc

    @func
    def main(x: T[("n", 16), "float32"], w: T[(16, 16), "float32"], steps: T[(), "int64"]):
        h = op.reshape(total(build(x, steps, Nil()), op.zeros((16,), "float32")), [1, 16])
        i = rvm.const(0, "int64")
        while i < steps:
            h = op.tanh(op.matmul(h, w))
            i = i + 1
        return h


Model""",
    ),
    (
        "md",
        """## Compile, and run in both exec modes

`rvm.compile` runs the passes, emits bytecode and builds the kernels (`kernels="jit"`, the
default, compiles them with Numba; `kernels="numpy"` runs NumPy references).""",
    ),
    (
        "code",
        """rng = np.random.default_rng(0)
x = rng.standard_normal((8, 16), dtype=np.float32)
w = rng.standard_normal((16, 16), dtype=np.float32) * 0.3
steps = np.array(8, dtype=np.int64)

ex = rvm.compile(Model)
ex_numpy = rvm.compile(Model, kernels="numpy")
ex""",
    ),
    (
        "code",
        """ref = rvm.interpret(Model, "main", x, w, steps)
results = {}
for mode in ("bytecode", "compiled"):
    for name, executable in (("jit", ex), ("numpy", ex_numpy)):
        vm = rvm.VirtualMachine(executable, exec_mode=mode)
        y = vm["main"](x, w=w, steps=steps)
        np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)
        results[(mode, name)] = y
print("all four agree with rvm.interpret:", sorted(results))""",
    ),
    (
        "md",
        """## Timing: the jit kernels against the interpreter and the NumPy kernels""",
    ),
    (
        "code",
        """def median_us(run, repeat=15):
    run()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return 1e6 * float(np.median(times))


vm_jit = rvm.VirtualMachine(ex, exec_mode="compiled")
vm_np = rvm.VirtualMachine(ex_numpy, exec_mode="compiled")
timings = {
    "interpret": median_us(lambda: rvm.interpret(Model, "main", x, w, steps)),
    "numpy kernels": median_us(lambda: vm_np["main"](x, w, steps)),
    "jit kernels": median_us(lambda: vm_jit["main"](x, w, steps)),
}
fig, ax = plt.subplots(figsize=(6, 2.5))
ax.barh(list(timings), list(timings.values()), color=["#999", "#69c", "#e73"])
ax.set_xlabel("µs per call (median)")
ax.set_xscale("log")
# plain numbers at fewer ticks the more decades the bars span, none on the minor ticks (by
# default those are labelled too when the bars span a decade or less, and overlap)
decades = np.log10(max(timings.values()) / min(timings.values()))
subs = np.arange(1, 10) if decades <= 1 else (1, 2, 5) if decades <= 2.5 else (1,)
ax.xaxis.set_major_locator(LogLocator(base=10, subs=subs))
ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
ax.xaxis.set_minor_formatter(NullFormatter())
fig.tight_layout()
timings""",
    ),
    (
        "md",
        """## Where the time goes

`vm.profile` warms up, then times `repeat` runs and reports medians per kernel; the rest is the
VM's own work (dispatch, allocation, entry checks).""",
    ),
    (
        "code",
        """vm_jit.profile("main", x, w, steps, warmup=1, repeat=10)""",
    ),
    (
        "code",
        """vm_jit.time_evaluator("main", number=20, repeat=5)(x, w, steps)""",
    ),
    (
        "md",
        """## The bytecode

Registers, calls to kernels in destination-passing style, allocations, tail calls.""",
    ),
    (
        "code",
        """print(ex.as_text())""",
    ),
    (
        "md",
        """## From PyTorch

`rvm.from_torch` reads a `torch.export` program: here an `nn.Module` with a symbolic batch
size, compared with eager PyTorch in every exec mode (skipped when torch is not installed).""",
    ),
    (
        "code",
        """try:
    import torch
except ImportError:
    torch = None
    print(
        "torch is not installed: pip install torch --index-url https://download.pytorch.org/whl/cpu"
    )
if torch is not None:
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(8, 4),
    ).eval()
    batch = torch.export.Dim("batch", min=1, max=32)
    tmod = rvm.from_torch(
        net, args=(torch.randn(2, 3, 16, 16),), dynamic_shapes={"input": {0: batch}}
    )
    tex = rvm.compile(tmod)
    images = torch.randn(5, 3, 16, 16)
    with torch.no_grad():
        expected = net(images).numpy()
    for mode in ("bytecode", "compiled", "native"):
        got = rvm.VirtualMachine(tex, exec_mode=mode)["main"](images.numpy())
        print(f"{mode:9} max abs error {np.abs(got - expected).max():.1e}")
        assert np.allclose(got, expected, rtol=1e-4, atol=1e-5)
    print("all exec modes match eager PyTorch")""",
    ),
]


def build() -> nbformat.NotebookNode:
    nb = new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.cells = [
        new_markdown_cell(src) if kind == "md" else new_code_cell(src) for kind, src in CELLS
    ]
    return nb


if __name__ == "__main__":
    path = Path(__file__).with_name("tour.ipynb")
    nbformat.write(build(), path)
    print(f"wrote {path}")
