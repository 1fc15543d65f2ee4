"""rvm.dask.map_batches: blocks, chunks and dtype from the signature, one VM per worker thread,
on the threaded and process schedulers and on a real two-process distributed cluster."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import rvm
from rvm import op
from rvm.script import T, Tuple, func, module
from rvm.testing.programs import MLP, _mlp_args, _mlp_ref

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")
rvm_dask = pytest.importorskip("rvm.dask")


@module
class Shapes:
    @func
    def widen(x: T[("n", "k"), "float32"], w: T[("k", "m"), "float32"]):
        return op.matmul(x, w)

    @func
    def total(x: T[("n", 4), "float32"]):
        return op.sum(x)

    @func
    def pair(x: T[("n", 4), "float32"]):
        return (op.exp(x), op.sum(x, axis=1))

    @func
    def nested(x: T[("n", 4), "float32"]):
        return (x, (x, x))

    @func
    def shifted(x: T[("n", 4), "float32"], t: Tuple[T[(4,), "float32"], T[(), "float32"]]):
        a, b = t
        return x + a * b


@pytest.fixture(scope="module")
def mlp_ex():
    return rvm.compile(MLP)


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=2, processes=True, host="127.0.0.1", dashboard_address=None
    )
    client = distributed.Client(cluster)
    yield client
    client.close()
    cluster.close()


def mlp_inputs(rows: int):
    args = _mlp_args(np.random.default_rng(0), rows)
    return args, _mlp_ref(*args)


@pytest.mark.parametrize("scheduler", ["threads", "processes"])
def test_map_batches_on_local_schedulers(mlp_ex, scheduler):
    args, expected = mlp_inputs(100)
    x = da.from_array(args[0], chunks=(30, 784))
    y = rvm_dask.map_batches(mlp_ex, x, *args[1:])
    assert y.shape == (100, 10) and y.dtype == np.float32
    assert y.chunks == ((30, 30, 30, 10), (10,))
    np.testing.assert_allclose(y.compute(scheduler=scheduler), expected, rtol=1e-5, atol=1e-6)


def test_map_batches_on_a_distributed_cluster(mlp_ex, client):
    args, expected = mlp_inputs(256)
    x = da.from_array(args[0], chunks=(32, 784))
    y = rvm_dask.map_batches(mlp_ex, x, *args[1:], exec_mode="compiled")
    np.testing.assert_allclose(client.compute(y).result(), expected, rtol=1e-5, atol=1e-6)
    # Each worker thread made at most one VM and reused it for its other blocks.
    made = client.run(_vms_made_here)
    assert len(made) == 2 and all(n <= 2 for n in made.values()), made  # 2 threads each


def _vms_made_here() -> int:
    import gc

    from rvm.runtime.vm import VirtualMachine

    return sum(1 for o in gc.get_objects() if isinstance(o, VirtualMachine))


def test_same_thread_reuses_its_vm(mlp_ex):
    first = rvm_dask.worker_vm(mlp_ex)
    assert rvm_dask.worker_vm(mlp_ex) is first
    assert rvm_dask.worker_vm(mlp_ex, "compiled") is not first
    # An equal executable (same bytes) shares the cache entry: keyed by content, not identity.
    again = rvm.Executable.from_bytes(mlp_ex.to_bytes())
    assert rvm_dask.worker_vm(again) is first


def test_other_axes_are_rechunked_and_symbolic_dims_come_from_the_arguments():
    ex = rvm.compile(Shapes, kernels="numpy")
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((10, 6), "float32"), rng.standard_normal((6, 3), "float32")
    y = rvm_dask.map_batches(ex, da.from_array(x, chunks=(4, 2)), w, fname="widen")
    assert y.chunks == ((4, 4, 2), (3,))
    np.testing.assert_allclose(y.compute(scheduler="sync"), x @ w, rtol=1e-5)


def test_a_tuple_result_gives_a_tuple_of_arrays():
    ex = rvm.compile(Shapes, kernels="numpy")
    x = np.random.default_rng(2).standard_normal((9, 4)).astype("float32")
    e, s = rvm_dask.map_batches(ex, da.from_array(x, chunks=4), fname="pair")
    assert e.chunks == ((4, 4, 1), (4,)) and s.chunks == ((4, 4, 1),)
    got_e, got_s = da.compute(e, s, scheduler="processes")
    np.testing.assert_allclose(got_e, np.exp(x), rtol=1e-5)
    np.testing.assert_allclose(got_s, x.sum(axis=1), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "fname, message",
    [
        ("total", "whose first dimension is not the batch dimension 'n'"),
        ("nested", "returns a tuple; map_batches needs a tensor of known rank and dtype, or a"),
    ],
)
def test_results_without_a_block_layout_are_refused(fname, message):
    ex = rvm.compile(Shapes, kernels="numpy")
    with pytest.raises(ValueError, match=message):
        rvm_dask.map_batches(ex, da.zeros((8, 4), chunks=4, dtype="float32"), fname=fname)


def test_an_output_dim_known_only_at_run_time_is_refused():
    from rvm.runtime import ExecBuilder, Opcode, ParamSpec

    def built(result):
        b = ExecBuilder()
        x = ParamSpec("x", "tensor", "float32", ("n", 4))
        b.function("main", ("x",), [x], result=result).emit(Opcode.RET, 0)
        return b.build()

    x = da.zeros((8, 4), chunks=4, dtype="float32")
    unbound = ParamSpec("result", "tensor", "float32", ("n", "m"))
    with pytest.raises(ValueError, match="dimension 'm' is known only when it runs"):
        rvm_dask.map_batches(built(unbound), x)
    with pytest.raises(ValueError, match="has no result type in this executable"):
        rvm_dask.map_batches(built(None), x)


def test_bad_calls_are_refused(mlp_ex):
    args, _ = mlp_inputs(8)
    with pytest.raises(TypeError, match="x must be a dask array"):
        rvm_dask.map_batches(mlp_ex, args[0], *args[1:])
    with pytest.raises(TypeError, match="takes 5 arguments"):
        rvm_dask.map_batches(mlp_ex, da.from_array(args[0]), args[1])
    with pytest.raises(rvm.FunctionNotFoundError):
        rvm_dask.map_batches(mlp_ex, da.from_array(args[0]), *args[1:], fname="nope")


def test_a_tuple_argument_is_checked_field_by_field():
    ex = rvm.compile(Shapes, kernels="numpy")
    x = da.from_array(np.ones((6, 4), np.float32), chunks=3)
    t = (np.arange(4, dtype=np.float32), np.float32(2))
    got = rvm_dask.map_batches(ex, x, t, fname="shifted").compute(scheduler="threads")
    np.testing.assert_array_equal(got, 1 + 2 * np.arange(4, dtype=np.float32)[None].repeat(6, 0))
    bad = rvm_dask.map_batches(ex, x, (np.ones(5, np.float32), np.float32(2)), fname="shifted")
    with pytest.raises(rvm.ShapeError, match=r"shifted: argument 1 't' field 0 has shape \(5,\)"):
        bad.compute(scheduler="threads")


def test_import_rvm_does_not_import_dask():
    code = "import sys, rvm; rvm.VirtualMachine; assert 'dask' not in sys.modules, 'dask'"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
