"""rvm quickstart: write a model in rvm script, compile it, run it on the VM, check it.

Run: python examples/quickstart.py
"""

import tempfile

import numpy as np

import rvm
from rvm import op
from rvm.script import T, func, module


@module
class Model:
    @func
    def main(x: T[("n", 784), "float32"], w: T[(784, 128), "float32"], b: T[(128,), "float32"]):
        return op.relu(op.matmul(x, w) + b)


def main() -> None:
    print(Model)  # the module as rvm script; rvm.script.parse(text) gives it back

    ex = rvm.compile(Model)  # native kernels through Numba (kernels="numpy" for the reference)
    print(ex.as_text())

    rng = np.random.default_rng(0)
    w = rng.standard_normal((784, 128)).astype("float32") * 0.05
    b = rng.standard_normal(128).astype("float32")
    vm = rvm.VirtualMachine(ex)
    for batch in (1, 8):  # one executable serves every batch size
        x = rng.standard_normal((batch, 784)).astype("float32")
        y = vm["main"](x, w, b)
        ref = rvm.interpret(Model, "main", x, w, b)
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)
        print(f"batch {batch}: output {y.shape} {y.dtype}, matches rvm.interpret")

    with tempfile.TemporaryDirectory() as tmp:  # save, load, run without recompiling
        path = f"{tmp}/model.rvmx"
        ex.save(path)
        y2 = rvm.VirtualMachine(rvm.load_executable(path))["main"](x, w, b)
        np.testing.assert_array_equal(y, y2)
        print(f"saved and loaded {path}: same result")

    try:
        vm["main"](x, w[:100], b)
    except rvm.ShapeError as err:
        print(f"bad input gives a clear error: {err}")

    t = vm.time_evaluator("main", number=100, repeat=5)(x, w, b)
    print(f"median time per call: {t.median * 1e6:.1f} us")


if __name__ == "__main__":
    main()
