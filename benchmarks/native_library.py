"""Benchmark of the kernel library's pooling on the light ONNX models' shapes.

Run: ``python benchmarks/native_library.py [--src DIR] [--threads 1,2]``. ``--src`` names the
rvm sources to measure (default: this checkout's ``src``), so the same script times another
version. Each row is one pool of a model (max or avg, kernel, stride, pads, ceil mode) on
float32, called from compiled code as the kernels call it; the figure is the minimum and the
median microseconds of 40 samples of 5 calls, per thread count (``rvm.set_num_threads``;
splitting on: `rvm.kernels.parfor.enable`).
Every output is checked against the NumPy reference first. The minimum is what a shared,
busy machine distorts least; the median shows what it costs when the threads are late.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# (model, input shape, max?, kernel, stride, pads (top, left, bottom, right), ceil mode)
POOLS = [
    ("squeezenet", (1, 64, 111, 111), 1, 3, 2, (0, 0, 0, 0), 0),
    ("squeezenet", (1, 128, 55, 55), 1, 3, 2, (0, 0, 0, 0), 0),
    ("squeezenet", (1, 256, 27, 27), 1, 3, 2, (0, 0, 0, 0), 0),
    ("densenet121", (1, 64, 112, 112), 1, 3, 2, (1, 1, 1, 1), 0),
    ("densenet121", (1, 128, 56, 56), 0, 2, 2, (0, 0, 0, 0), 0),
    ("inception_v1", (1, 64, 112, 112), 1, 3, 2, (0, 0, 0, 0), 1),
    ("inception_v1", (1, 192, 28, 28), 1, 3, 1, (1, 1, 1, 1), 0),
    ("inception_v1", (1, 832, 6, 6), 1, 3, 1, (1, 1, 1, 1), 0),
    ("inception_v1", (1, 1024, 6, 6), 0, 6, 1, (0, 0, 0, 0), 0),
    ("bvlc_alexnet", (1, 96, 54, 54), 1, 3, 2, (0, 0, 0, 0), 0),
    ("shufflenet", (1, 544, 7, 7), 0, 7, 1, (0, 0, 0, 0), 0),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path, default=ROOT / "src", help="rvm sources to measure")
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    args = parser.parse_args()
    sys.path.insert(0, str(args.src))
    import numba as nb
    import numpy as np

    import rvm
    from rvm.kernels import parfor
    from rvm.kernels.pool import out_size, pool2d
    from rvm.op import numpy_ref

    if hasattr(parfor, "enable"):
        parfor.enable(True)  # on by default since the pool; off before (older --src)

    @nb.njit(nogil=True)
    def calls(x, out, g, n):  # type: ignore[no-untyped-def]
        for _ in range(n):
            pool2d(x, out, *g)

    counts = [int(t) for t in args.threads.split(",")]
    print(f"rvm from {args.src}; us per pool (min / median) at {counts} threads")
    rng = np.random.default_rng(0)
    for model, shape, is_max, k, s, pads, ceil in POOLS:
        x = rng.standard_normal(shape).astype(np.float32)
        g = (is_max, k, k, s, s, 1, 1, *pads, ceil, 0)
        oh = out_size(shape[2], k, s, 1, pads[0], pads[2], ceil)
        ow = out_size(shape[3], k, s, 1, pads[1], pads[3], ceil)
        out = np.empty((shape[0], shape[1], oh, ow), dtype=np.float32)
        geo = ((k, k), (s, s), pads, (1, 1), bool(ceil))
        want = numpy_ref.max_pool2d(x, *geo) if is_max else numpy_ref.avg_pool2d(x, *geo, False)
        cells = []
        for n in counts:
            rvm.set_num_threads(n)
            calls(x, out, g, 1)
            np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
            times = []
            for _ in range(40):
                start = time.perf_counter()
                calls(x, out, g, 5)
                times.append((time.perf_counter() - start) / 5 * 1e6)
            times.sort()
            cells.append(f"{times[0]:7.0f} / {times[20]:7.0f}")
        kind = "max" if is_max else "avg"
        label = f"{model:13s} {kind} {k}x{k}/{s} {str(shape):19s}"
        print(label, "  ".join(cells))


if __name__ == "__main__":
    main()
