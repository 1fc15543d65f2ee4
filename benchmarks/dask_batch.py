"""Batch inference on Dask (`rvm.dask.map_batches`) against one process.

Run: ``python benchmarks/dask_batch.py [--repeat 5] [--workers 2] [--no-cnn]``.

The MLP (``rvm.testing.programs.MLP``, jit kernels) over 4096x784 float32 inputs in 16 chunks of
256 rows, run

- in one process: one VM, one call on all 4096 rows, and one call per chunk in a loop;
- on dask's threaded scheduler (one process, ``--workers`` threads, a VM per thread);
- on a ``distributed.LocalCluster`` of ``--workers`` worker processes of one thread each,
  bound to 127.0.0.1, through a ``Client``, the inputs already on the workers
  (``client.persist``: a pipeline's workers load their own data).

Then, if the ONNX importer loads it, onnx's light squeezenet (random weights, batch dimension
made symbolic) over 64 images in 8 chunks, the same ways. Every way's output is checked
against NumPy's (the MLP) or the one-process VM's (the CNN) before anything is timed. The
table gives the median over ``--repeat`` timed runs of the whole batch, after one untimed run
("cold": on the cluster its workers decode the executable, make their VMs and load the
kernels from the kernel cache, which that first run includes, reported on its own).

Thread settings: workers get ``RVM_NUM_THREADS=1`` (each a single BLAS thread, so the
workers do not oversubscribe the cores between them); the one-process runs and the threaded
scheduler take ``RVM_NUM_THREADS`` from the environment (the table's header says it).
Writes ``benchmarks/results/dask_batch.json``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

from common import write_results

# isort: split
import numpy as np

import rvm
from rvm.testing.programs import MLP, _mlp_args, _mlp_ref


def _seconds(run: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    out = run()
    return time.perf_counter() - start, out


def _outputs(value: Any) -> tuple[np.ndarray, ...]:
    return value if isinstance(value, tuple) else (value,)


def _ways(
    ex: rvm.Executable, x: np.ndarray, rest: tuple, chunk: int, client: Any, workers: int
) -> dict[str, Callable[[], tuple[np.ndarray, ...]]]:
    """Each way of running `ex` on `x` (and the whole `rest`) by name; each gives the
    function's outputs as a tuple of arrays."""
    import dask
    import dask.array as da

    import rvm.dask

    vm = rvm.VirtualMachine(ex)
    run = vm["main"]
    xd = da.from_array(x, chunks=(chunk, *x.shape[1:]))
    ys = _outputs(rvm.dask.map_batches(ex, xd, *rest))
    # On the cluster the inputs are loaded first, as a pipeline's workers would load them: the
    # timed runs move the weights and the outputs, not the 12 MB of inputs.
    on_cluster = _outputs(rvm.dask.map_batches(ex, client.persist(xd), *rest))

    def chunk_loop() -> tuple[np.ndarray, ...]:
        parts = [_outputs(run(x[i : i + chunk], *rest)) for i in range(0, len(x), chunk)]
        return tuple(np.concatenate(field) for field in zip(*parts))

    return {
        "one process, one call": lambda: _outputs(run(x, *rest)),
        "one process, chunk loop": chunk_loop,
        f"dask threads x{workers}": lambda: dask.compute(
            *ys, scheduler="threads", num_workers=workers
        ),
        f"distributed {workers} procs": lambda: tuple(
            client.gather(client.compute(list(on_cluster)))
        ),
    }


def _bench(
    label: str,
    ex: rvm.Executable,
    x: np.ndarray,
    rest: tuple,
    chunk: int,
    expected: tuple[np.ndarray, ...],
    tol: float,
    client: Any,
    workers: int,
    repeat: int,
) -> dict[str, dict[str, float]]:
    rows = {}
    print(f"\n{label}: {x.shape[0]} rows in chunks of {chunk}")
    print(f"  {'way':<28} {'cold s':>8} {'median s':>9} {'rows/s':>9}")
    for name, way in _ways(ex, x, rest, chunk, client, workers).items():
        cold, out = _seconds(way)
        assert len(out) == len(expected), (name, len(out))
        for got, want in zip(out, expected):  # before any timing
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
        med = statistics.median(_seconds(way)[0] for _ in range(repeat))
        rows[name] = {"cold_s": cold, "median_s": med, "rows_per_s": x.shape[0] / med}
        print(f"  {name:<28} {cold:>8.3f} {med:>9.4f} {x.shape[0] / med:>9.0f}")
    return rows


def _cnn() -> tuple[rvm.Executable, np.ndarray] | None:
    """Squeezenet with a symbolic batch, and 64 random images; None if it cannot be loaded."""
    try:
        import onnx

        from rvm.testing.onnx_models import (
            expose_logits,
            graph_inputs,
            light_model_path,
            randomize_weights,
        )

        model = expose_logits(randomize_weights(onnx.load(light_model_path("squeezenet")), 0))
    except (ImportError, OSError) as e:
        print(f"\nno CNN: {e}")
        return None
    name = graph_inputs(model)[0].name
    mod = rvm.from_onnx(model, shape_dict={name: ("n", 3, 224, 224)})
    x = np.random.default_rng(1).standard_normal((64, 3, 224, 224)).astype("float32")
    return rvm.compile(mod, progress=True), x


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--no-cnn", action="store_true")
    args = p.parse_args()
    import distributed

    # `client.persist` sends the inputs once, on purpose; distributed warns of any large graph.
    warnings.filterwarnings("ignore", message="Sending large graph")

    ex = rvm.compile(MLP)
    mlp_args = _mlp_args(np.random.default_rng(0), 4096)
    expected = _mlp_ref(*mlp_args)
    cnn = None if args.no_cnn else _cnn()
    threads = os.environ.get("RVM_NUM_THREADS", "unset")
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    print(f"RVM_NUM_THREADS={threads} in this process, 1 in each worker")
    with (
        distributed.LocalCluster(
            n_workers=args.workers,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
            env={"RVM_NUM_THREADS": "1"},
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        results: dict[str, Any] = {
            "workers": args.workers,
            "repeat": args.repeat,
            "load_average": os.getloadavg()[0],
            "rvm_num_threads": threads,
            "mlp": _bench(
                "MLP 784-128-10",
                ex,
                mlp_args[0],
                mlp_args[1:],
                256,
                (expected,),
                1e-5,
                client,
                args.workers,
                args.repeat,
            ),
        }
        if cnn is not None:
            cex, x = cnn
            reference = _outputs(rvm.VirtualMachine(cex)["main"](x))
            results["cnn"] = _bench(
                "squeezenet (light, random weights)",
                cex,
                x,
                (),
                8,
                reference,
                1e-4,
                client,
                args.workers,
                max(1, args.repeat // 2),
            )
    results["load_average_after"] = os.getloadavg()[0]
    print(f"load average {results['load_average_after']:.2f} after")
    write_results("dask_batch", results)


if __name__ == "__main__":
    main()
