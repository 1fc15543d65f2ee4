"""A tour of the rvm virtual machine, notebook style: run it top to bottom.

    PYTHONPATH=src python examples/vm_tour.py

Sections: write a model in rvm script, compile it, read the bytecode, call it, use the stateful
API, bind arguments, time it, profile it, instrument it, save and load the executable, and see
the error a bad input gives.
"""

from __future__ import annotations

import os
import tempfile
from collections import Counter

import numpy as np

import rvm
from rvm import op
from rvm.script import T, func, module


def section(title: str) -> None:
    print(f"\n{'=' * 8} {title} {'=' * (80 - len(title))}")


# %% 1. A model in rvm script ----------------------------------------------------------------
# A two-layer MLP. The batch dimension is the symbol "n": one executable serves every batch
# size, and "n" is checked at run time to be the same wherever it appears.
section("1. the model in rvm script")


@module
class Model:
    @func
    def main(
        x: T[("n", 64), "float32"],
        w1: T[(64, 32), "float32"],
        b1: T[(32,), "float32"],
        w2: T[(32, 10), "float32"],
        b2: T[(10,), "float32"],
    ):
        h = op.relu(op.matmul(x, w1) + b1)
        return op.softmax(op.matmul(h, w2) + b2, axis=-1)


print(Model)  # rvm script text; rvm.script.parse(str(Model)) gives the module back

rng = np.random.default_rng(0)
x = rng.standard_normal((4, 64)).astype("float32")
w1 = (rng.standard_normal((64, 32)) * 0.1).astype("float32")
b1 = rng.standard_normal(32).astype("float32")
w2 = (rng.standard_normal((32, 10)) * 0.1).astype("float32")
b2 = rng.standard_normal(10).astype("float32")
params = (w1, b1, w2, b2)

# %% 2. Compile ---------------------------------------------------------------------------
# The pipeline fuses matmul+add+relu into one kernel, plans memory, and emits register
# bytecode. kernels="numpy" keeps this tour fast to start; kernels="jit" (the default)
# compiles the same kernels to native code (see examples/jit_vs_numpy.py).
section("2. compile: bytecode and stats")
ex = rvm.compile(Model, kernels="numpy")
print(ex.as_text())
print(ex.stats())

# %% 3. Call it ---------------------------------------------------------------------------
section("3. call the VM")
vm = rvm.VirtualMachine(ex, exec_mode="bytecode")
print(vm)
y = vm["main"](x, *params)
ref = rvm.interpret(Model, "main", x, *params)  # the AST interpreter, as a reference
print("output", y.shape, y.dtype, "rows sum to", np.round(y.sum(axis=1), 5))
print("max |vm - interpret| =", float(np.abs(y - ref).max()))
y1 = vm["main"](x[:1], *params)  # another batch size, same executable
print("batch 1 ->", y1.shape)

# %% 4. The stateful API ------------------------------------------------------------------
# Inputs set once (by position or by parameter name), run many times, output read back.
section("4. set_input / invoke_stateful / get_outputs")
vm.set_input("main", x, w1=w1, b1=b1, w2=w2, b2=b2)
vm.invoke_stateful("main")
out = vm.get_outputs("main")
print("stateful result equals the direct call:", bool(np.array_equal(out, y)))

# %% 5. Bind arguments to a new name ------------------------------------------------------
section("5. save_function")
vm.save_function("main", "main_bound", x, *params)
print("vm['main_bound']() equals the direct call:", bool(np.array_equal(vm["main_bound"](), y)))

# %% 6. Time it ---------------------------------------------------------------------------
section("6. time_evaluator")
timing = vm.time_evaluator("main", number=50, repeat=5)(x, *params)
print(timing)
print(f"mean {timing.mean * 1e6:.1f} us, median {timing.median * 1e6:.1f} us per call")

# %% 7. Profile it ------------------------------------------------------------------------
# Time per kernel, the median of `repeat` timed runs after `warmup` untimed ones; the rest
# (dispatch, allocation, shape builtins, and ~0.3 us per kernel call of the profiler's own
# bookkeeping) is the VM-overhead line. In a notebook the report shows as a table with bars.
section("7. profile")
print(vm.profile("main", x, *params))

# %% 8. Instrument it ---------------------------------------------------------------------
# The callback runs before and after every packed call; here it just counts them.
section("8. set_instrument")
calls: Counter[str] = Counter()


def count_calls(name: str, args: tuple, before: bool) -> None:
    if before:
        calls[name] += 1


vm.set_instrument(count_calls)
vm["main"](x, *params)
vm.set_instrument(None)  # back to the plain, uninstrumented loop
for name, n in calls.most_common():
    print(f"  {name:<32} {n} call(s)")

# %% 9. Save and load the executable ------------------------------------------------------
# The file holds the bytecode, constants and kernel sources: a fresh process loads and runs it
# without the compiler.
section("9. save / load")
with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "mlp.rvmx")
    ex.save(path)
    print(f"saved {os.path.getsize(path)} bytes to {os.path.basename(path)}")
    loaded = rvm.load_executable(path)
print(loaded)
y_loaded = rvm.VirtualMachine(loaded)["main"](x, *params)
print("loaded executable gives the same result:", bool(np.array_equal(y_loaded, y)))

# %% 10. A bad input ----------------------------------------------------------------------
# Inputs are checked before any kernel runs; the error names the function, the parameter,
# what was expected and what came.
section("10. a clear error on bad input")
try:
    vm["main"](rng.standard_normal((4, 63)).astype("float32"), *params)
except rvm.ShapeError as e:
    print(f"rvm.ShapeError: {e}")
