"""Benchmark of jit kernels against NumPy eager and hand-written Numba, side by side.

Run: ``PYTHONPATH=src python benchmarks/kernels.py [--quick] [--only a,mlp,...]``. Prints a
table and writes ``benchmarks/results/kernels.json`` (``--only`` runs the named sections of
`SECTIONS` and prints their rows). Every figure is the median of repeats; ratios compare
timings taken in the same run. Jit kernels run destination-passing (outputs preallocated, as
the VM's allocator provides them). Every kernel's output is checked against NumPy before it is
timed: a wrong kernel fails the run instead of posting a figure.

BLAS runs one thread unless ``OPENBLAS_NUM_THREADS`` says otherwise: on a machine shared with
other busy processes, OpenBLAS's threaded GEMM on small shapes (the MLP layers from batch 8)
took 50-95 ms a call instead of 40 us, for NumPy and the jit alike.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

# Before numpy loads (see above).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

# isort: split
from common import ROOT, interleaved_medians, kernel_calls, median_time, write_results

# isort: split
import numba as nb
import numpy as np

import rvm
from rvm import op
from rvm.ir import Call, Function, TensorType, Var, VarBinding, infer_type, seq
from rvm.jit import jit_kernel, load_kernel

FAST = {"reassoc", "nsz", "arcp", "contract", "afn"}


def prim(params: list[Var], result: Call) -> Function:
    """A primitive function binding every call of ``result``."""
    bindings: list[VarBinding] = []
    seen: dict[int, Var] = {}

    def visit(e):  # type: ignore[no-untyped-def]
        if not isinstance(e, Call):
            return e
        if id(e) not in seen:
            call = Call(e.callee, tuple(visit(a) for a in e.args), dict(e.attrs))
            v = Var(f"t{len(bindings)}", infer_type(call))
            bindings.append(VarBinding(v, call))
            seen[id(e)] = v
        return seen[id(e)]

    out = visit(result)
    return Function(tuple(params), seq(bindings, out), attrs={"primitive": True})


def jit(params: list[Var], result: Call, name: str) -> Callable[..., None]:
    """The dps jit kernel of the expression."""
    return load_kernel(jit_kernel(name, prim(params, result), "dps"))


def tvar(name: str, shape: tuple, dtype: str = "float32") -> Var:
    return Var(name, TensorType(shape, dtype))


def check(actual: np.ndarray, expected: np.ndarray, what: str, rtol: float = 1e-5) -> None:
    """Fails the run when a kernel's output is not NumPy's (within ``rtol``, and as absolute
    tolerance; dtype and shape included)."""
    try:
        rvm.testing.assert_values_close(actual, expected, rtol=rtol, atol=rtol)
    except AssertionError as err:
        raise AssertionError(f"{what}: the output differs from NumPy's: {err}") from err


@nb.njit(nogil=True, fastmath=FAST)
def _hand_chain(x, out):  # type: ignore[no-untyped-def]
    for i in range(x.shape[0]):
        v = x[i]
        out[i] = max(
            (((v * np.float32(2.0) + np.float32(1.0)) * v - np.float32(0.5)) / np.float32(3.0)),
            np.float32(0.0),
        )


def bench_chain(n: int) -> dict:
    """(a) six arithmetic ops over n float32: jit vs NumPy eager vs a hand-written loop."""
    x = tvar("x", ("n",))
    k = jit([x], op.relu(((x * 2.0 + 1.0) * x - 0.5) / 3.0), "chain6")
    xs = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    out = np.empty_like(xs)
    two, one, half, three = (np.float32(v) for v in (2, 1, 0.5, 3))

    def numpy_eager() -> np.ndarray:
        return np.maximum(((xs * two + one) * xs - half) / three, np.float32(0))

    ref = numpy_eager()
    k(xs, out)
    check(out, ref, "(a) jit chain")
    _hand_chain(xs, out)
    check(out, ref, "(a) hand-written chain")
    t_jit = median_time(lambda: k(xs, out))
    t_np = median_time(numpy_eager)
    t_hand = median_time(lambda: _hand_chain(xs, out))
    return {
        "jit_s": t_jit,
        "numpy_s": t_np,
        "hand_numba_s": t_hand,
        "x_vs_numpy": t_np / t_jit,
        "jit_over_hand": t_jit / t_hand,
    }


def bench_transcendental(n: int) -> dict:
    """(b) sigmoid(tanh(x) + exp(-x * x)) over n float32."""
    x = tvar("x", ("n",))
    k = jit([x], op.sigmoid(op.tanh(x) + op.exp(op.negative(x * x))), "chain_exp")
    xs = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    out = np.empty_like(xs)

    def numpy_eager() -> np.ndarray:
        z = np.tanh(xs) + np.exp(-(xs * xs))
        return 1 / (1 + np.exp(-z))

    k(xs, out)
    check(out, numpy_eager(), "(b) transcendental chain", rtol=1e-4)
    t_jit, t_np = median_time(lambda: k(xs, out)), median_time(numpy_eager)
    return {"jit_s": t_jit, "numpy_s": t_np, "x_vs_numpy": t_np / t_jit}


def bench_rows(rows: int, cols: int) -> dict:
    """(c) row softmax and layer_norm."""
    x, g, b = tvar("x", ("n", cols)), tvar("g", (cols,)), tvar("b", (cols,))
    rng = np.random.default_rng(2)
    xs = rng.standard_normal((rows, cols)).astype(np.float32)
    gs, bs = (
        rng.standard_normal(cols).astype(np.float32),
        rng.standard_normal(cols).astype(np.float32),
    )
    out = np.empty_like(xs)
    soft = jit([x], op.softmax(x), "softmax")
    norm = jit([x, g, b], op.layer_norm(x, g, b), "layer_norm")

    def np_softmax() -> np.ndarray:
        e = np.exp(xs - xs.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    def np_layer_norm() -> np.ndarray:
        m = xs.mean(axis=-1, keepdims=True)
        v = xs.var(axis=-1, keepdims=True)
        return (xs - m) / np.sqrt(v + np.float32(1e-5)) * gs + bs

    res = {}
    for name, kern, args, ref in (
        ("softmax", soft, (xs, out), np_softmax),
        ("layer_norm", norm, (xs, gs, bs, out), np_layer_norm),
    ):
        kern(*args)
        check(out, ref(), f"(c) {name}", rtol=1e-4)
        tj = median_time(lambda kern=kern, args=args: kern(*args))
        tn = median_time(ref)
        res[name] = {"jit_s": tj, "numpy_s": tn, "x_vs_numpy": tn / tj}
    return res


def bench_matmul(n: int) -> dict:
    """(d) matmul + bias + relu, and NumPy's matmul GFLOP/s."""
    a, w, bias = tvar("a", ("m", n)), tvar("w", (n, n)), tvar("bias", (n,))
    k = jit([a, w, bias], op.relu(op.matmul(a, w) + bias), "fused_matmul_add_relu")
    rng = np.random.default_rng(3)
    xs, ws = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
    bs = rng.standard_normal(n).astype(np.float32)
    out = np.empty((n, n), np.float32)
    k(xs, ws, bs, out)
    check(out, np.maximum(xs @ ws + bs, 0), "(d) matmul + bias + relu", rtol=1e-3)
    t_jit = median_time(lambda: k(xs, ws, bs, out))
    t_np = median_time(lambda: np.maximum(xs @ ws + bs, 0))
    t_mm = median_time(lambda: np.matmul(xs, ws, out=out))
    flops = 2.0 * n**3
    return {
        "jit_s": t_jit,
        "numpy_s": t_np,
        "jit_over_numpy": t_jit / t_np,
        "numpy_matmul_gflops": flops / t_mm / 1e9,
        "jit_gflops": flops / t_jit / 1e9,
    }


def conv3x3_relu_ref(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """NumPy's 3x3 convolution (padding 1) + relu: the windows of the zero-padded input
    contracted with the weight."""
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))
    return np.maximum(np.einsum("nchwij,ocij->nohw", win, w, optimize=True), 0)


def bench_conv(matmul_gflops: float) -> dict:
    """(e) 3x3 conv2d 64->64 (padding 1) + relu on 1x64x56x56."""
    x, w = tvar("x", (1, 64, 56, 56)), tvar("w", (64, 64, 3, 3))
    k = jit([x, w], op.relu(op.conv2d(x, w, padding=1)), "fused_conv2d_relu")
    rng = np.random.default_rng(4)
    xs = rng.standard_normal((1, 64, 56, 56)).astype(np.float32)
    ws = rng.standard_normal((64, 64, 3, 3)).astype(np.float32)
    out = np.empty((1, 64, 56, 56), np.float32)
    k(xs, ws, out)
    check(out, conv3x3_relu_ref(xs, ws), "(e) conv2d + relu", rtol=1e-3)
    t = median_time(lambda: k(xs, ws, out))
    gflops = 2.0 * 64 * 64 * 9 * 56 * 56 / t / 1e9
    return {"jit_s": t, "gflops": gflops, "fraction_of_matmul": gflops / matmul_gflops}


# GEMM shapes (m, n, k) of the light ONNX models' convolutions (C = weight @ columns): resnet50's
# 3x3 at 14 x 14 and 1x1 at 7 x 7, squeezenet's last 1x1, a squeeze, inception's 3x3 at 56 x 56.
SGEMM_SHAPES = (
    (256, 196, 2304),
    (512, 49, 4608),
    (1000, 169, 512),
    (16, 3025, 64),
    (64, 3136, 576),
)


def bench_sgemm(repeat: int) -> dict:
    """(g) rvm's float32 GEMM (`rvm.kernels.sgemm`) against NumPy's BLAS (np.matmul),
    both on one thread, in GFLOP/s."""
    from rvm.kernels import sgemm

    res = {}
    rng = np.random.default_rng(5)
    for m, n, k in SGEMM_SHAPES:
        a = (rng.standard_normal((m, k)) / np.sqrt(k)).astype(np.float32)  # outputs ~ N(0, 1)
        b = rng.standard_normal((k, n)).astype(np.float32)
        ours, theirs = np.empty((m, n), np.float32), np.empty((m, n), np.float32)

        def run(a=a, b=b, ours=ours, m=m, n=n, k=k) -> None:
            sgemm.sgemm(a.ctypes.data, k, b.ctypes.data, n, ours.ctypes.data, n, m, n, k, False)

        run()
        want = (a.astype(np.float64) @ b).astype(np.float32)
        check(ours, want, f"(g) sgemm {m}x{n}x{k}", rtol=1e-4)
        t = interleaved_medians(
            {"rvm": run, "numpy": lambda a=a, b=b, out=theirs: np.matmul(a, b, out=out)},
            repeat=repeat,
            sample_s=0.02,
        )
        flops = 2.0 * m * n * k
        res[f"{m}x{n}x{k}"] = {
            "rvm_gflops": flops / t["rvm"] / 1e9,
            "numpy_gflops": flops / t["numpy"] / 1e9,
            "numpy_over_rvm": t["numpy"] / t["rvm"],
        }
    return res


def bench_call_overhead() -> dict:
    """Per-call cost of a tiny kernel called as the VM calls it (dispatcher, dps)."""
    a, b = tvar("a", (4,)), tvar("b", (4,))
    k = jit([a, b], a + b, "tiny_add")
    xs, ys, out = (np.ones(4, np.float32) for _ in range(3))
    k(xs, ys, out)
    check(out, xs + ys, "tiny add")
    number = 20000

    def many() -> None:
        for _ in range(number):
            k(xs, ys, out)

    return {"call_us": median_time(many, 5) / number * 1e6}


_MODEL = """
import sys, time
sys.path.insert(0, {src!r})
from rvm import op
from rvm.ir import TensorType, Var
start = time.perf_counter()
from benchmarks_kernels_model import build
from rvm.jit import load_kernel
records = build()
t0 = time.perf_counter()
for r in records:
    load_kernel(r)
print(time.perf_counter() - t0, time.perf_counter() - start)
"""


def model_records(count: int = 20) -> list:
    """Twenty distinct fused kernels (different ops, constants and shapes)."""
    x = tvar("x", ("n", 64))
    b = tvar("b", (64,))
    unary = [
        op.relu,
        op.tanh,
        op.sigmoid,
        op.exp,
        op.silu,
        op.softplus,
        op.abs,
        op.negative,
        op.sqrt,
        op.gelu,
    ]
    recs = []
    for i in range(count):
        f = unary[i % len(unary)]
        expr = f(x * float(i + 1) + b) if i < 10 else op.softmax(f(op.abs(x) + float(i)))
        recs.append(jit_kernel(f"fused_{i}", prim([x, b], expr), "dps"))
    return recs


def bench_cache(count: int = 20) -> dict:
    """(f) a model of ``count`` kernels: cold compile vs warm cache, each in a new process."""
    with tempfile.TemporaryDirectory() as tmp:
        helper = Path(tmp) / "benchmarks_kernels_model.py"
        helper.write_text(
            f"import sys\nsys.path.insert(0, {str(ROOT / 'benchmarks')!r})\n"
            "from kernels import model_records as build\n"
        )
        env = {
            **os.environ,
            "RVM_CACHE_DIR": str(Path(tmp) / "cache"),
            "PYTHONPATH": f"{tmp}:{ROOT / 'src'}",
        }
        script = _MODEL.format(src=str(ROOT / "src"))
        runs = []
        for _ in range(2):
            out = subprocess.run(
                [sys.executable, "-c", script], env=env, check=True, capture_output=True, text=True
            ).stdout.split()
            runs.append((float(out[0]), float(out[1])))
    (cold, cold_all), (warm, warm_all) = runs
    return {
        "kernels": count,
        "cold_load_s": cold,
        "warm_load_s": warm,
        "speedup": cold / warm,
        "cold_process_s": cold_all,
        "warm_process_s": warm_all,
    }


_LAYER = """
@module
class Layer:
    @func
    def main(x: T[("n", {k}), "float32"], w: T[({k}, {n}), "float32"], b: T[({n},), "float32"]):
        return {result}
"""


def bench_mlp(batches: tuple[int, ...], repeat: int = 201) -> dict:
    """The MLP's two layers (784->128 + bias + relu, 128->10 + bias) at a few batch sizes: the
    fused kernel of ``kernels="jit"`` against that of ``kernels="numpy"`` and NumPy eager,
    interleaved in one process. Each backend's kernel is the one its VM calls (recorded)."""
    out: dict = {}
    rng = np.random.default_rng(6)
    for k, n, relu in ((784, 128, True), (128, 10, False)):
        result = "op.relu(op.matmul(x, w) + b)" if relu else "op.matmul(x, w) + b"
        mod = rvm.script.parse(_LAYER.format(k=k, n=n, result=result))
        exs = {backend: rvm.compile(mod, kernels=backend) for backend in ("jit", "numpy")}
        w = (rng.standard_normal((k, n)) * 0.05).astype(np.float32)
        b = rng.standard_normal(n).astype(np.float32)
        for m in batches:
            x = rng.standard_normal((m, k)).astype(np.float32)

            def numpy_eager(x=x, w=w, b=b, relu=relu) -> np.ndarray:
                y = np.matmul(x, w) + b
                return np.maximum(y, 0) if relu else y

            ref = numpy_eager()
            fns = {}
            for backend, ex in exs.items():
                (f, args), *more = kernel_calls(rvm.VirtualMachine(ex), "main", (x, w, b), True)
                if more:
                    raise AssertionError(f"{backend}: the layer ran {1 + len(more)} kernels")
                f(*args)
                check(args[-1], ref, f"MLP layer {k}->{n} batch {m} ({backend})", rtol=1e-4)
                fns[backend] = lambda f=f, args=args: f(*args)
            fns["numpy_eager"] = numpy_eager
            t = interleaved_medians(fns, repeat)
            out[f"{k}->{n}{' + relu' if relu else ''}, batch {m}"] = {
                "jit_us": t["jit"] * 1e6,
                "numpy_backend_us": t["numpy"] * 1e6,
                "numpy_eager_us": t["numpy_eager"] * 1e6,
                "jit_over_numpy_backend": t["jit"] / t["numpy"],
                "jit_over_numpy_eager": t["jit"] / t["numpy_eager"],
            }
    return out


SECTIONS = ("a", "b", "c", "d", "e", "mlp", "call", "f", "g")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    parser.add_argument(
        "--only",
        type=lambda text: set(text.split(",")),
        default=set(SECTIONS),
        help=f"comma-separated sections to run, of: {','.join(SECTIONS)}",
    )
    args = parser.parse_args()
    quick, only = args.quick, set(args.only)
    if only - set(SECTIONS):
        parser.error(f"--only takes some of {', '.join(SECTIONS)}")
    if "e" in only:
        only.add("d")  # (e) is measured against (d)'s NumPy GFLOP/s
    n = (1 << 20) if quick else 16 * 1024 * 1024
    res: dict = {"numpy": np.__version__, "numba": nb.__version__}
    runs = {
        "a": ("a_chain6", lambda: bench_chain(n)),
        "b": ("b_transcendental", lambda: bench_transcendental(n)),
        "c": ("c_rows", lambda: bench_rows(512 if quick else 4096, 1024)),
        "d": ("d_matmul", lambda: bench_matmul(256 if quick else 1024)),
        "e": ("e_conv2d", lambda: bench_conv(res["d_matmul"]["numpy_matmul_gflops"])),
        "mlp": ("mlp_layers", lambda: bench_mlp((1, 8, 64) if quick else (1, 2, 8, 16, 64))),
        "call": ("call_overhead", bench_call_overhead),
        "f": ("f_cache", bench_cache),
        "g": ("g_sgemm", lambda: bench_sgemm(5 if quick else 21)),
    }
    for section in SECTIONS:
        if section in only:
            key, run = runs[section]
            res[key] = run()
    _print(res)
    write_results("kernels" if only == set(SECTIONS) else "kernels_partial", res)


def _rows(res: dict) -> list[tuple[str, str]]:
    """The printed table: (label, figure) for each section in ``res``."""
    rows = []
    if "a_chain6" in res:
        a = res["a_chain6"]
        rows.append(("(a) 6-op chain vs numpy (goal >= 5x)", f"{a['x_vs_numpy']:.2f}x"))
        rows.append(("(a) jit / hand numba (goal <= 1.10)", f"{a['jit_over_hand']:.3f}"))
    if "b_transcendental" in res:
        b = res["b_transcendental"]
        rows.append(("(b) exp/tanh/sigmoid vs numpy (goal >= 1.5x)", f"{b['x_vs_numpy']:.2f}x"))
    if "c_rows" in res:
        c = res["c_rows"]
        rows.append(("(c) softmax vs numpy (goal >= 2x)", f"{c['softmax']['x_vs_numpy']:.2f}x"))
        rows.append(
            ("(c) layer_norm vs numpy (goal >= 2x)", f"{c['layer_norm']['x_vs_numpy']:.2f}x")
        )
    if "d_matmul" in res:
        d = res["d_matmul"]
        rows.append(
            ("(d) matmul+bias+relu jit / numpy (goal <= 1.10)", f"{d['jit_over_numpy']:.3f}")
        )
    if "e_conv2d" in res:
        e, gflops = res["e_conv2d"], res["d_matmul"]["numpy_matmul_gflops"]
        rows.append(
            (
                "(e) conv2d GFLOP/s / numpy matmul (goal >= 0.5)",
                f"{e['gflops']:.1f} / {gflops:.1f} = {e['fraction_of_matmul']:.2f}",
            )
        )
    if "f_cache" in res:
        f = res["f_cache"]
        rows.append(
            (
                "(f) 20 kernels cold / warm load (goal >= 5x)",
                f"{f['cold_load_s']:.2f} s / {f['warm_load_s']:.2f} s = {f['speedup']:.1f}x",
            )
        )
    if "call_overhead" in res:
        rows.append(("tiny kernel call", f"{res['call_overhead']['call_us']:.2f} us"))
    for shape, g in res.get("g_sgemm", {}).items():
        rows.append(
            (
                f"(g) sgemm {shape} GFLOP/s: rvm / numpy BLAS",
                f"{g['rvm_gflops']:.0f} / {g['numpy_gflops']:.0f} = {g['numpy_over_rvm']:.2f}x",
            )
        )
    for layer, r in res.get("mlp_layers", {}).items():
        rows.append(
            (
                f"MLP layer {layer}: jit / numpy backend / numpy (goal jit <= both)",
                f"{r['jit_us']:.1f} us / {r['numpy_backend_us']:.1f} us / "
                f"{r['numpy_eager_us']:.1f} us",
            )
        )
    return rows


def _print(res: dict) -> None:
    rows = _rows(res)
    width = max(len(r[0]) for r in rows)
    print(f"BLAS threads: OPENBLAS_NUM_THREADS={os.environ['OPENBLAS_NUM_THREADS']} (every row)")
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


if __name__ == "__main__":
    main()
