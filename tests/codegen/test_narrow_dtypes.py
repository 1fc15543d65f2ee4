"""Programs on the narrow dtypes (bfloat16, float8, float4, int4...) through the VM.

Numba has no such types, so jit kernels that touch one fall back to numpy kernels, which
compute through ml_dtypes: every result must equal ml_dtypes' own, in both exec modes and with
both kernel backends, and survive save/load into a fresh process.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import ml_dtypes
import numpy as np
import pytest

import rvm
from rvm import op
from rvm.dtypes import NARROW_DTYPES
from rvm.errors import DTypeError
from rvm.ir import Builder, Tuple, Var, tensor

# Exact values, ties of every narrow type, values beyond their ranges, and the special ones.
VALUES = np.array(
    [0.0, -0.0, 0.3, -1.75, 2.5, 3.5, 5.0, 17.0, 240.0, 448.0, 500.0, 6e4, 1e9, -1e9]
    + [np.inf, -np.inf, np.nan, 1e-3, -7.0, 0.5],
    dtype=np.float32,
)


def _func(params: list[Var], body) -> rvm.IRModule:
    bb = Builder()
    with bb.function("main", params):
        out = body(*params)
        bb.emit_output(Tuple(out) if isinstance(out, tuple) else out)
    return bb.get()


def _same(a: np.ndarray, b: np.ndarray) -> None:
    """Equal dtype, shape and bits (NaNs of any payload compare equal through float32)."""
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, b.dtype, a.shape, b.shape)
    if a.dtype.name in NARROW_DTYPES and a.dtype.name.startswith(("float", "bfloat")):
        fa, fb = a.astype(np.float32), b.astype(np.float32)
        np.testing.assert_array_equal(np.isnan(fa), np.isnan(fb))
        a, b = np.where(np.isnan(fa), 0, fa), np.where(np.isnan(fb), 0, fb)
    np.testing.assert_array_equal(a, b)


def _run_all(mod, args, kernels, exec_mode):
    out = rvm.VirtualMachine(rvm.compile(mod, kernels=kernels), exec_mode=exec_mode)["main"](*args)
    return out if isinstance(out, tuple) else (out,)


@pytest.mark.parametrize("dtype", sorted(NARROW_DTYPES))
def test_cast_round_trips_as_ml_dtypes(dtype, kernels, exec_mode):
    x = Var("x", tensor(("n",), "float32"))
    mod = _func([x], lambda x: (op.cast(x, dtype), op.cast(op.cast(x, dtype), "float32")))
    with np.errstate(all="ignore"):
        narrow = VALUES.astype(dtype)
        expected = (narrow, narrow.astype(np.float32))
    for got, want in zip(_run_all(mod, [VALUES], kernels, exec_mode), expected):
        _same(got, want)


@pytest.mark.parametrize("dtype", ["int4", "uint4", "float8_e5m2fnuz", "float4_e2m1fn"])
def test_narrow_parameters_and_results(dtype, kernels, exec_mode):
    q = Var("q", tensor((2, 3), dtype))
    mod = _func([q], lambda q: (op.transpose(q), op.cast(q, "float32"), op.less(q, q)))
    data = np.array([[1, -2, 3], [0, 7, -8]], np.float32).astype(dtype)
    got = _run_all(mod, [data], kernels, exec_mode)
    _same(got[0], data.T)
    _same(got[1], data.astype(np.float32))
    _same(got[2], np.zeros((2, 3), bool))


def _bf16_model() -> rvm.IRModule:
    x, w = Var("x", tensor(("n", 4), "bfloat16")), Var("w", tensor((4, 3), "bfloat16"))
    bias = rvm.const(np.array([0.1, -2.0, 3.3], np.float32).astype(ml_dtypes.bfloat16))

    def body(x, w):
        h = op.relu(op.matmul(x, w) + bias)
        s = op.softmax(h * 0.5, axis=-1)
        return op.concat([s, op.cast(op.sum(x, axis=1, keepdims=True), "bfloat16")], axis=1)

    return _func([x, w], body)


def test_bfloat16_model_matches_the_interpreter(kernels, exec_mode):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 4)).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal((4, 3)).astype(ml_dtypes.bfloat16)
    mod = _bf16_model()
    (got,) = _run_all(mod, [x, w], kernels, exec_mode)
    _same(got, rvm.interpret(mod, "main", x, w))


def test_jit_kernels_touching_a_narrow_dtype_fall_back_to_numpy():
    x = Var("x", tensor((4,), "float32"))
    mod = _func([x], lambda x: op.cast(op.cast(x, "bfloat16") * 3.0, "float32") + x)
    ex = rvm.compile(mod, kernels="jit")
    (rec,) = ex.kernels.values()
    assert rec.backend == "numpy" and "bfloat16" in rec.meta["jit_fallback"]
    data = np.array([0.1, 1.7, -3.3, 1e3], np.float32)
    want = (data.astype(ml_dtypes.bfloat16) * ml_dtypes.bfloat16(3)).astype(np.float32) + data
    _same(rvm.VirtualMachine(ex)["main"](data), want)


def test_a_narrow_argument_must_have_its_dtype(exec_mode):
    x = Var("x", tensor((2,), "bfloat16"))
    vm = rvm.VirtualMachine(rvm.compile(_func([x], op.negative)), exec_mode=exec_mode)
    with pytest.raises(DTypeError, match="bfloat16"):
        vm["main"](np.ones(2, np.float32))


def test_saved_bfloat16_executable_runs_in_a_fresh_process(tmp_path, kernels):
    path = tmp_path / "bf16.rvmx"
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 4)).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal((4, 3)).astype(ml_dtypes.bfloat16)
    ex = rvm.compile(_bf16_model(), kernels=kernels)
    ex.save(str(path))
    expected = rvm.VirtualMachine(ex)["main"](x, w)
    np.save(tmp_path / "expected.npy", expected.view(np.uint16))
    np.save(tmp_path / "x.npy", x.view(np.uint16))
    np.save(tmp_path / "w.npy", w.view(np.uint16))
    script = textwrap.dedent(
        f"""
        import sys
        import numpy as np
        import rvm
        ex = rvm.load_executable({str(path)!r})
        assert "rvm.ir" not in sys.modules
        import ml_dtypes
        x = np.load({str(tmp_path / "x.npy")!r}).view(ml_dtypes.bfloat16)
        w = np.load({str(tmp_path / "w.npy")!r}).view(ml_dtypes.bfloat16)
        out = rvm.VirtualMachine(ex)["main"](x, w)
        assert out.dtype == ml_dtypes.bfloat16, out.dtype
        expected = np.load({str(tmp_path / "expected.npy")!r})
        np.testing.assert_array_equal(out.view(np.uint16), expected)
        print("ok")
        """
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "ok"
