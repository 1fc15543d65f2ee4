"""The two kernel backends side by side, notebook style: kernels="numpy" and kernels="jit".

    PYTHONPATH=src python examples/jit_vs_numpy.py

Both compile the same fused primitive functions; "numpy" runs each as a few NumPy calls (the
reference), "jit" lowers each to a loop nest compiled through Numba/LLVM (cached on disk, so a
second run compiles nothing). Sections: the model, compile both, check both against
`rvm.interpret`, time both, read one fused kernel's source and LLVM IR, profile both.
"""

from __future__ import annotations

import os
import time

# One BLAS thread: on a small shared machine, OpenBLAS's thread pool can make NumPy's 32x128x256
# matmul take milliseconds instead of tens of microseconds, which would make this comparison
# about thread contention. Set OPENBLAS_NUM_THREADS yourself to override.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import rvm  # noqa: E402
from rvm import op  # noqa: E402
from rvm.script import T, func, module  # noqa: E402


def section(title: str) -> None:
    print(f"\n{'=' * 8} {title} {'=' * (80 - len(title))}")


# %% 1. The model -------------------------------------------------------------------------
# A classifier head: layer_norm, a hidden layer, logits, softmax; symbolic batch "n".
section("1. the model")


@module
class Head:
    @func
    def main(
        x: T[("n", 128), "float32"],
        gamma: T[(128,), "float32"],
        beta: T[(128,), "float32"],
        w1: T[(128, 256), "float32"],
        b1: T[(256,), "float32"],
        w2: T[(256, 16), "float32"],
        b2: T[(16,), "float32"],
    ):
        h = op.layer_norm(x, gamma, beta, axes=[-1], epsilon=1e-5)
        h = op.relu(op.matmul(h, w1) + b1)
        return op.softmax(op.matmul(h, w2) + b2, axis=-1)


print(Head)

rng = np.random.default_rng(0)
args = (
    rng.standard_normal((32, 128)).astype("float32"),
    (1 + 0.1 * rng.standard_normal(128)).astype("float32"),
    (0.1 * rng.standard_normal(128)).astype("float32"),
    (rng.standard_normal((128, 256)) * 0.08).astype("float32"),
    (0.1 * rng.standard_normal(256)).astype("float32"),
    (rng.standard_normal((256, 16)) * 0.06).astype("float32"),
    (0.1 * rng.standard_normal(16)).astype("float32"),
)

# %% 2. Compile with both backends ----------------------------------------------------------
# Same bytecode, different kernel section. The first jit compile of a kernel takes a moment;
# later runs load it from the on-disk cache.
section("2. compile")
executables = {}
for backend in ("numpy", "jit"):
    start = time.perf_counter()
    executables[backend] = rvm.compile(Head, kernels=backend)
    print(
        f"kernels={backend:<6} compiled in {time.perf_counter() - start:.2f} s; kernels: "
        f"{', '.join(sorted(executables[backend].kernels))}"
    )

vms = {b: rvm.VirtualMachine(ex, exec_mode="bytecode") for b, ex in executables.items()}

# %% 3. Both agree with the interpreter -----------------------------------------------------
section("3. check against rvm.interpret")
ref = rvm.interpret(Head, "main", *args)
for backend, vm in vms.items():
    y = vm["main"](*args)
    err = float(np.abs(y - ref).max())
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)
    print(f"kernels={backend:<6} max |vm - interpret| = {err:.2e}  ok")

# %% 4. Time both -------------------------------------------------------------------------
section("4. time_evaluator (batch 32)")
medians = {}
for backend, vm in vms.items():
    t = vm.time_evaluator("main", number=50, repeat=7)(*args)
    medians[backend] = t.median
    print(f"kernels={backend:<6} {t}")
print(
    f"jit is {medians['numpy'] / medians['jit']:.2f}x the speed of numpy kernels "
    "(medians; the machine may be shared)"
)

# %% 5. One fused kernel: its source and its LLVM IR ----------------------------------------
# The jit kernel is destination-passing: the output array is the last parameter.
ex_jit = executables["jit"]
name = next(n for n in sorted(ex_jit.kernels) if "relu" in n)
section(f"5. kernel {name}: source")
print(ex_jit.kernel_source(name))
print(f"--- numpy backend, same kernel ---\n{executables['numpy'].kernel_source(name)}")

section(f"5. kernel {name}: LLVM IR (a few lines)")
llvm = ex_jit.kernel_llvm(name).splitlines()
defines = [i for i, line in enumerate(llvm) if line.startswith("define")]
first = defines[0] if defines else 0
print("\n".join(llvm[first : first + 12]))
vector_ops = [line.strip() for line in llvm if "<8 x float>" in line or "<4 x float>" in line]
print(f"... {len(llvm)} lines in all; {len(vector_ops)} use float vectors, e.g.:")
for line in vector_ops[:4]:
    print("   ", line[:110])

# %% 6. Per-kernel profiles ---------------------------------------------------------------
# Medians of 10 timed runs after one warmup run; compare the kernels row by row.
for backend, vm in vms.items():
    section(f"6. profile, kernels={backend}")
    print(vm.profile("main", *args, warmup=1, repeat=10))
