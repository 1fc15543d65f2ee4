"""The first run builds only the library code it needs: pool tasks when a loop first splits,
a convolution's and a pool's methods when a shape first takes them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

CHILD = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import rvm
    from rvm import op
    from rvm.kernels import parfor
    from rvm.script import T, func, module

    @module
    class M:
        @func
        def main(x: T[("n", "k"), "float32"], w: T[("k", "m"), "float32"]):
            return op.matmul(x, w)

    import rvm.kernels.blas  # the GEMM's tasks are exported, none built
    seen = {"import": parfor.required_tasks()}
    vm = rvm.VirtualMachine(rvm.compile(M))
    rng = np.random.default_rng(0)
    for n in map(int, sys.argv[1:]):
        x = rng.standard_normal((n, n)).astype("float32")
        w = rng.standard_normal((n, n)).astype("float32")
        np.testing.assert_allclose(vm["main"](x, w), x @ w, rtol=1e-3, atol=1e-3)
        seen[str(n)] = parfor.required_tasks()
    print(json.dumps(seen))
    """
)


def _child(caches: Path, *sizes: int) -> dict:
    """Runs `CHILD` with a kernel cache of its own (``caches``) and the suite's library cache
    (Numba's, inherited): its kernel compiles or loads as ``caches`` has it, and the library's
    tasks load when another test built them (a task loaded counts as built,
    `parfor.required_tasks`); cold ones built the float32 GEMM's tasks twice (20-25 CPU-s)."""
    script = caches.parent / "child.py"  # a file: rvm script reads its classes' source
    script.write_text(CHILD)
    env = dict(os.environ)
    env["RVM_CACHE_DIR"] = str(caches / "rvm")
    env["RVM_NUM_THREADS"] = "2"  # a large product splits even on one CPU
    run = subprocess.run(
        [sys.executable, str(script), *map(str, sizes)],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX process model")
def test_a_pool_task_is_built_when_a_loop_first_splits(tmp_path: Path) -> None:
    """Importing the GEMM builds no task; a product of two rows builds the row loop's task
    alone (no GEMM); a GEMM builds its dtype's task at its first run (the product's code,
    split on the pool or not) and the task of the path its pieces take (`sgemm.gemm_tasks`:
    not the other path's), in a process that compiled the kernel and in one that loaded it
    from the cache (whose object code links without the tasks): the kernel caches are the
    test's own, the library's the suite's (`_child`)."""
    from rvm.kernels import sgemm

    gemm = sorted([["gemm", "float32"]] + [[t, "float32"] for t in sgemm.gemm_tasks(512)])
    rows = [["rows_axpy", "float32"]]
    caches = tmp_path / "caches"
    first = _child(caches, 2, 512)
    assert first == {"import": [], "2": rows, "512": sorted(gemm + rows)}
    again = _child(caches, 512)  # the kernel cached, the task too: loaded at the first split
    assert again == {"import": [], "512": gemm}
    other = tmp_path / "kernel-only" / "caches"
    other.parent.mkdir()
    _child(other, 2)  # caches the kernel, not the task
    assert _child(other, 512) == {"import": [], "512": gemm}  # the task built at its first run


CONV_CHILD = textwrap.dedent(
    """
    import json
    import numpy as np
    from rvm.kernels import conv, convmethod, parfor, pool

    def reference(x, w, stride, pad, groups):
        n, c, h, wd = x.shape
        o, cg, kh, kw = w.shape
        xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
        oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
        out = np.zeros((n, o, oh, ow))
        for oc in range(o):
            g = oc // (o // groups)
            for i in range(kh):
                for j in range(kw):
                    rows = slice(i, i + stride * oh, stride)
                    cols = slice(j, j + stride * ow, stride)
                    win = xp[:, g * cg:(g + 1) * cg, rows, cols]
                    out[:, oc] += np.einsum("nchw,c->nhw", win, w[oc, :, i, j])
        return out

    def pool_reference(x, is_max, k, s, p):
        fill = -np.inf if is_max else 0.0
        xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (p, p), (p, p)), constant_values=fill)
        oh, ow = (xp.shape[2] - k) // s + 1, (xp.shape[3] - k) // s + 1
        out = np.empty(x.shape[:2] + (oh, ow))
        for i in range(oh):
            for j in range(ow):
                win = xp[:, :, i * s:i * s + k, j * s:j * s + k]
                out[:, :, i, j] = win.max(axis=(2, 3)) if is_max else win.mean(axis=(2, 3))
        return out

    def built(prefix):
        return [t for t, _ in parfor.required_tasks() if t.startswith(prefix)]

    rng = np.random.default_rng(0)
    seen = {}
    for name, xs, ws, stride, pad, groups in (
        ("pointwise", (1, 8, 5, 5), (4, 8, 1, 1), 1, 0, 1),
        ("depthwise", (1, 4, 6, 6), (4, 1, 3, 3), 1, 1, 4),
    ):
        x = rng.standard_normal(xs).astype("float32")
        w = rng.standard_normal(ws).astype("float32")
        ref = reference(x, w, stride, pad, groups)
        out = np.empty(ref.shape, dtype=np.float32)
        conv.conv2d(x, w, out, groups, stride, stride, 1, 1, pad, pad, pad, pad)
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
        seen[name] = built("conv2d")
        oh, ow = ref.shape[2:]
        guess = convmethod.first_run_tasks(xs[1], ws[0], groups, ws[2], ws[3], stride, stride,
                                           oh, ow, xs[2], xs[3], pad == 0)
        seen[name + " guessed"] = guess[0]
    for name, shape, is_max, k, s, p in (
        ("max_rows", (1, 2, 70, 70), True, 3, 2, 1),  # max windows that overlap, 3x3
        ("max_whole", (1, 2, 14, 14), True, 3, 1, 1),  # 3x3 on a narrow map: whole channels
        ("avg_separable", (1, 2, 7, 100), False, 2, 2, 1),  # a column stride, a wide input
        ("avg_direct", (1, 3, 6, 6), False, 6, 1, 0),  # a global-like window
        ("max_tiles", (1, 2, 40, 40), True, 2, 2, 0),  # 2x2 windows that tile the input
    ):
        x = rng.standard_normal(shape).astype("float32")
        ref = pool_reference(x, is_max, k, s, p)
        out = np.empty(ref.shape, dtype=np.float32)
        pool.pool2d(x, out, is_max, k, k, s, s, 1, 1, p, p, p, p, False, True)
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)
        seen[name] = built("pool2d")
        guess = pool.first_run_tasks(
            is_max, shape[3], *ref.shape[2:], k, k, s, s, 1, 1, shape[2], p, p
        )
        seen[name + " guessed"] = guess[0]
    print(json.dumps(seen))
    """
)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX process model")
def test_convolutions_and_pools_build_only_the_methods_their_shapes_take(tmp_path: Path) -> None:
    """conv2d's and pool2d's entry points are the checks and the choice of method; each method
    is a task built when a call first takes it: a pointwise convolution builds the pointwise
    method alone, a depthwise one adds its own (never the im2col, strided or taps methods);
    max and average pools by each method are tasks of their own likewise (one process). What
    the library says a call of each shape will build (``first_run_tasks``, for the background
    builds of a compile: `rvm.jit.first_run`) is the method it took. A task loaded from the
    cache counts as built (`parfor.required_tasks`), so the process shares the suite's caches:
    cold ones compiled these entry points and tasks again (20-25 CPU-s)."""
    script = tmp_path / "child.py"
    script.write_text(CONV_CHILD)
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    guessed = {k.removesuffix(" guessed"): seen.pop(k) for k in list(seen) if " " in k}
    assert seen == {
        "pointwise": ["conv2d_pointwise"],
        "depthwise": ["conv2d_depthwise", "conv2d_pointwise"],
        "max_rows": ["pool2d_max_rows"],
        "max_whole": ["pool2d_max_rows", "pool2d_max_whole"],
        "avg_separable": ["pool2d_avg_separable", "pool2d_max_rows", "pool2d_max_whole"],
        "avg_direct": [
            "pool2d_avg_direct",
            "pool2d_avg_separable",
            "pool2d_max_rows",
            "pool2d_max_whole",
        ],
        "max_tiles": [
            "pool2d_avg_direct",
            "pool2d_avg_separable",
            "pool2d_max_rows",
            "pool2d_max_tiles",
            "pool2d_max_whole",
        ],
    }
    assert guessed == {
        "pointwise": "conv2d_pointwise",
        "depthwise": "conv2d_depthwise",
        "max_rows": "pool2d_max_rows",
        "max_whole": "pool2d_max_whole",
        "avg_separable": "pool2d_avg_separable",
        "avg_direct": "pool2d_avg_direct",
        "max_tiles": "pool2d_max_tiles",
    }


def test_a_compile_lists_the_tasks_its_shapes_take() -> None:
    """`rvm.jit.first_run.library_tasks`: the library tasks a module's first run takes, from
    its calls' static shapes, first needed first, each once (what `rvm.compile` builds in
    the background while the kernels compile), a convolution's ReLU the library's pass; a
    small lrn runs unsplit, and an integer convolution runs as loops: no task."""
    from jit_helpers import var

    from rvm import op
    from rvm.ir import Builder, Tuple
    from rvm.jit.first_run import library_tasks
    from rvm.kernels import convmethod
    from rvm.transform.pipeline import run_pipeline

    x, w1, w2 = var("x", (1, 8, 32, 32)), var("w1", (16, 8, 3, 3)), var("w2", (8, 16, 1, 1))
    xi, k = var("xi", (1, 2, 8, 8), "int32"), var("k", (4, 2, 3, 3), "int32")
    b = Builder()
    with b.function("main", [x, w1, w2, xi, k]):
        y = b.emit(op.relu(op.conv2d(x, w1, padding=1)))  # rows of 32: taps (`TAPS_IN_PLACE`)
        y = b.emit(op.max_pool2d(y, pool_size=3, strides=2))  # rows of 32: `kernels.narrow`
        y = b.emit(op.conv2d(y, w2))  # 1x1: a GEMM on the map
        y = b.emit(op.lrn(y, size=3))
        y = b.emit(op.conv2d(op.conv2d(y, w1, padding=1), w2))  # again: listed once
        z = b.emit(op.conv2d(xi, k))
        b.emit_output(b.emit(Tuple([y, z])))
    # Taps in place where they read best, else im2col (`rvm.kernels.convmethod.TAPS_IN_PLACE`),
    # into the GEMM's panels where that pays (`convmethod.panels_pay`).
    # The second 3x3 one is on the pooled 15 x 15 map.
    first = convmethod.first_run_tasks(8, 16, 1, 3, 3, 1, 1, 32, 32, 32, 32, False)
    second = convmethod.first_run_tasks(8, 16, 1, 3, 3, 1, 1, 15, 15, 15, 15, False)
    # The ReLU after it: the library's pass (`rvm.kernels.epipass`) where its method leaves it.
    how = convmethod.method.py_func(8, 16, 1, 3, 3, 1, 1, 1, 1, 32, 32, 32, 32, False, True)
    leaves = not convmethod.fuses_epilogue.py_func(how, 8 * 9, (0, 0, 1, 0))
    want: list[tuple[str, str]] = []
    for task in (
        *first,
        *(("conv_epilogue",) if leaves else ()),
        "pool2d_max_narrow",
        *convmethod.METHOD_TASKS[convmethod.POINTWISE],
        *second,
    ):
        if (task, "float32") not in want:
            want.append((task, "float32"))
    assert library_tasks(run_pipeline(b.get())) == want


def test_a_compile_lists_the_gemm_path_and_pass_its_convolutions_take() -> None:
    """A first run lists the float32 GEMM's path its convolutions' products take, not both:
    past a band of output channels (`sgemm.MR`) a 1x1 convolution, whose B packs, and
    Winograd's 16 GEMMs (each of all the output channels, no epilogue) take the packed one
    (`sgemm_packed`), and the bias and ReLU they apply as they store need no pass
    (`conv_epilogue`); a depthwise convolution leaves its ReLU to the pass. Every light CNN
    listed the in-place path and the pass, and none ran them."""
    from jit_helpers import var

    from rvm import op
    from rvm.jit.first_run import library_tasks
    from rvm.kernels import sgemm
    from rvm.transform.pipeline import run_pipeline

    def tasks(build) -> list[str]:  # type: ignore[no-untyped-def]
        b = Builder()
        with b.function("main", [x, w1, w3, bias, wd]):
            b.emit_output(b.emit(build()))
        return [t for t, _ in library_tasks(run_pipeline(b.get()))]

    from rvm.ir import Builder

    x, bias = var("x", (1, 64, 28, 28)), var("b", (1, 64, 1, 1))
    w1, w3, wd = var("w1", (64, 64, 1, 1)), var("w3", (64, 64, 3, 3)), var("wd", (64, 1, 3, 3))
    pointwise = tasks(lambda: op.relu(op.add(op.conv2d(x, w1), bias)))
    winograd = tasks(lambda: op.relu(op.add(op.conv2d(x, w3, padding=1), bias)))
    depthwise = tasks(lambda: op.relu(op.conv2d(x, wd, padding=1, groups=64)))
    assert sgemm.PACK_B and 64 > sgemm.MR  # on every CPU
    for listed in (pointwise, winograd):
        assert "sgemm_packed" in listed and "sgemm_block" not in listed, listed
        assert ("conv_epilogue" in listed) != sgemm.FUSED_EPILOGUE, listed
    assert "conv2d_winograd" in winograd, winograd
    assert "conv_epilogue" in depthwise, depthwise


def test_a_compile_lists_a_norms_task() -> None:
    """A norm over the trailing axis splits its rows when large, or when a sequence's length
    is known at run time only (`rvm.kernels.norms`); a small one runs unsplit."""
    from jit_helpers import var

    from rvm import op
    from rvm.ir import Builder
    from rvm.jit.first_run import library_tasks
    from rvm.transform.pipeline import run_pipeline

    for shape, want in (((1, "seq", 768), [("norm_rows", "float32")]), ((2, 8), [])):
        x, g = var("x", shape), var("g", (shape[-1],))
        b = Builder()
        with b.function("main", [x, g]):
            b.emit_output(b.emit(op.rms_norm(x, g)))
        assert library_tasks(run_pipeline(b.get())) == want


MATMUL_CHILD = textwrap.dedent(
    """
    import json
    import numpy as np
    from rvm.kernels import blas, parfor

    rng = np.random.default_rng(0)
    seen = []
    for m, k, n, b_t in (
        (1, 16, 8, False),  # a row times a small B: rvm's row kernel
        (1, 784, 1024, False),  # a row times a B larger than any L2's half: BLAS's GEMV
        (2, 8, 8, False),  # the row loop
        (2, 8, 8, True),  # one GEMV per row of a transposed B
        (8, 16, 1, False),  # one column
        (64, 32, 48, False),  # rvm's GEMM and its packed path
        (64, 32, 48, True),  # B transposed: BLAS's GEMM
    ):
        a = rng.standard_normal((m, k)).astype("float32")
        b = rng.standard_normal((n, k) if b_t else (k, n)).astype("float32")
        out = np.empty((m, n), dtype=np.float32)
        before = set(map(tuple, parfor.required_tasks()))
        blas.matmul(a, b, out, b_t)
        np.testing.assert_allclose(out, a @ (b.T if b_t else b), rtol=1e-4, atol=1e-4)
        now = set(map(tuple, parfor.required_tasks()))
        seen.append({
            "new": sorted(t for t, _ in now - before),
            "had": sorted(t for t, _ in now),
            "guessed": list(blas.first_run_tasks(m, k, n, b_t)),
        })
    print(json.dumps(seen))
    """
)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX process model")
def test_a_product_builds_the_tasks_its_method_says(tmp_path: Path) -> None:
    """What the library says a float32 product of each shape will build
    (`blas.first_run_tasks`, from `blas.method`: what a compile builds in the background) is
    what its call builds: every task a call built is one it guessed, and every one guessed
    is built by then (one process, the suite's caches: a task loaded counts as built)."""
    script = tmp_path / "child.py"
    script.write_text(MATMUL_CHILD)
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    for call in seen:
        assert set(call["new"]) <= set(call["guessed"]), call
        assert set(call["guessed"]) <= set(call["had"]), call
    assert [call["guessed"][0] for call in seen] == [
        seen[0]["guessed"][0],  # gemv_row or gemv: by the machine's L2 (`ROW_GEMV_BYTES`)
        "gemv",
        "rows_axpy",
        "gemv",
        "gemv",
        "gemm",
        "gemm",
    ]
    assert seen[-1]["guessed"] == ["gemm"]


def test_a_compile_lists_a_products_tasks() -> None:
    """A float32 matmul whose rows are known at run time only (a batch) lists the tasks of
    one row and of a small batch (`blas.BATCH_GUESS` rows), after the other path of rvm's GEMM
    (`blas.first_run_tasks`: helpers reach it last); a dense layer's B is
    transposed (BLAS's GEMM, no path of rvm's); a float64 product lists none."""
    from jit_helpers import var

    from rvm import op
    from rvm.ir import Builder, Tuple
    from rvm.jit.first_run import library_tasks
    from rvm.kernels import blas, sgemm
    from rvm.transform.pipeline import run_pipeline

    x, w = var("x", ("n", 784)), var("w", (784, 128))
    wd, xd, wf = var("wd", (10, 128)), var("xd", (3, 4), "float64"), var("wf", (4, 3), "float64")
    b = Builder()
    with b.function("main", [x, w, wd, xd, wf]):
        y = b.emit(op.relu(op.matmul(x, w)))
        z = b.emit(op.dense(y, wd))
        b.emit_output(b.emit(Tuple([z, b.emit(op.matmul(xd, wf))])))
    row = blas.METHOD_TASKS[blas.method.py_func(1, 784, 128, False, True)]  # by the L2's size
    likely = sgemm.gemm_tasks(blas.BATCH_GUESS)
    other = tuple(t for t in sgemm.TASKS if t not in likely)  # of a band, or of more rows
    want = list(dict.fromkeys((*other, *row, "gemm", *likely, "gemv")))
    assert [t for t, _ in library_tasks(run_pipeline(b.get()))] == want


def test_a_compile_lists_a_transformers_tasks_at_a_length_known_at_run_time() -> None:
    """A product by a constant weight (packed: `packed_dense`) and attention over a sequence
    whose length is known at run time only list their tasks (attention's: its own, the GEMM's
    and both of its paths, `rvm.kernels.attention.FIRST_RUN_TASKS`): a transformer's first
    run builds them in a helper while its kernels compile, not one after the other in its
    first call (`examples/generate.py`: 35-36 s -> 24.4 s on a Zen 4)."""
    import numpy as np
    from jit_helpers import var

    from rvm import op
    from rvm.codegen.compile import _with_precision
    from rvm.ir import Builder, Constant, Tuple
    from rvm.jit.first_run import library_tasks
    from rvm.kernels import attention, packed
    from rvm.transform.pipeline import default_passes, run_pipeline

    x = var("x", (1, "s", 64))
    q, k, v = var("q", (1, 4, "s", 16)), var("k", (1, 4, "t", 16)), var("v", (1, 4, "t", 16))
    mask = var("mask", (1, 1, "s", "t"))
    w = Constant(np.random.default_rng(0).standard_normal((32, 64)).astype("float32"))
    b = Builder()
    with b.function("main", [x, q, k, v, mask]):
        y = b.emit(op.dense(x, w))
        b.emit_output(b.emit(Tuple([y, b.emit(op.attention(q, k, v, mask, 0.25))])))
    passes = _with_precision(default_passes(), "fp32", "jit")  # rvm.compile's, jit kernels
    tasks = [t for t, _ in library_tasks(run_pipeline(b.get(), passes))]
    assert set(packed.FIRST_RUN_TASKS) <= set(tasks), tasks
    assert set(attention.FIRST_RUN_TASKS) <= set(tasks), tasks


def test_a_compile_lists_an_integer_products_task() -> None:
    """An integer convolution and dense layer list the task their products run
    (`rvm.kernels.qgemm`'s ``qgemm``, or ``qgemm_wide`` for int16 weight rows; a small
    product's in the calling thread): the entry points no longer hold the GEMM, so a first
    run builds it while the kernels compile."""
    import numpy as np
    from jit_helpers import var

    import rvm
    from rvm import op
    from rvm.ir import Builder, Tuple
    from rvm.jit.first_run import library_tasks
    from rvm.kernels import qgemm
    from rvm.transform.infer_shapes import infer_shapes
    from rvm.transform.pack_conv_weights import pack_conv_weights
    from rvm.transform.pipeline import run_pipeline

    x, w = var("x", (1, 8, 10, 10), "uint8"), var("w", (16, 8, 3, 3), "int8")
    bias, scale = var("b", (16,), "int32"), var("s", (16,), "float32")
    xd, wd = var("xd", (2, 40), "uint8"), var("wd", (16, 40), "int8")
    b = Builder()
    with b.function("main", [x, w, bias, scale, xd, wd]):
        y = b.emit(op.qconv2d(x, w, bias, scale, x_zero=3, padding=1))
        z = b.emit(op.qdense(xd, wd, bias, scale, x_zero=3))
        b.emit_output(b.emit(Tuple([y, z])))
    want = [(task, "float32") for task in qgemm.first_run_tasks(False)]  # their rows' task
    assert library_tasks(run_pipeline(b.get())) == want
    # A constant weight whose pairs fit 16 bits, as a compile with jit kernels packs it
    # (`pack_conv_weights`): int8 rows where others are widened (MADD16).
    wc = rvm.const(np.full((16, 8, 3, 3), -64, np.int8))
    b = Builder()
    with b.function("main", [x, bias, scale]):
        b.emit_output(b.emit(op.qconv2d(x, wc, bias, scale, x_zero=3, padding=1)))
    want = [(task, "float32") for task in qgemm.first_run_tasks(True)]
    assert library_tasks(run_pipeline(pack_conv_weights(infer_shapes(b.get())))) == want


USER = textwrap.dedent(
    """
    import sys
    import numba as nb
    import numpy as np
    import rvm
    from rvm.kernels import epipass, parfor

    @nb.njit(nogil=sys.argv[1] == "nogil")
    def user(out, bias, res):
        epipass.epilogue_rows(out, bias, 1, res)  # split on the pool: a task its pieces call
        return out * 2.0

    rvm.set_num_threads(2)  # a helper, even on one CPU
    rng = np.random.default_rng(0)
    out = rng.standard_normal((2, 32, 64, 64)).astype(np.float32)
    bias = rng.standard_normal(32).astype(np.float32)
    res = rng.standard_normal(out.size).astype(np.float32)
    want = 2 * np.maximum(out + bias[:, None, None] + res.reshape(out.shape), 0)
    assert epipass.sweep_pieces(3 * out.size, out.size) > 1  # large enough to split
    np.testing.assert_allclose(user(out, bias, res), want, rtol=1e-6)
    assert ("conv_epilogue", "float32") in parfor.required_tasks(), parfor.required_tasks()
    print("ok")
    """
)


def _user_child(tmp_path: Path, caches: str, gil: str) -> None:
    """`USER` in a new process on the caches under ``tmp_path / caches`` (empty at first):
    its ``@njit`` with or without ``nogil`` (``gil``), right answer and no hang."""
    script = tmp_path / "user.py"
    script.write_text(USER)
    env = dict(os.environ)
    env["RVM_CACHE_DIR"] = str(tmp_path / caches / "rvm")
    env["NUMBA_CACHE_DIR"] = str(tmp_path / caches / "numba")
    run = subprocess.run(
        [sys.executable, str(script), gil], capture_output=True, text=True, env=env, timeout=300
    )
    assert run.returncode == 0 and run.stdout.split() == ["ok"], run.stderr[-3000:]


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX process model")
def test_a_users_own_njit_holding_the_gil_runs_a_split_kernel_on_a_first_run(
    tmp_path: Path,
) -> None:
    """A user's ``@njit`` function without ``nogil`` (it holds the GIL while it runs) calling
    a library kernel that splits on the pool, in a process that has not yet built or loaded
    the task the pieces call: a pool helper resolving that task needs the GIL (`parfor`'s
    ``_resolve`` is a callback into Python) while the caller waits for its pieces. The caller
    lets go of the GIL for the job, so the call finishes with the right answer: with empty
    caches, with warm ones (loading a task takes the GIL too), and with ``nogil``. A hang
    fails by its timeout. The kernel is the convolutions' epilogue pass (`rvm.kernels.epipass`,
    split from 2 * 32 * 64 * 64 elements): any kernel split on the pool resolves its task the
    same way (`parfor`), and each start on empty caches builds its own copy of what it calls
    (its Numba cache is empty too), seconds for a GEMM, a second for the pass. ``nogil`` on
    empty caches is the next test, under -m slow."""
    _user_child(tmp_path, "a", "gil")  # empty caches: the tasks built in this run
    _user_child(tmp_path, "a", "gil")  # warm: loaded from Numba's cache
    _user_child(tmp_path, "a", "nogil")


# A nogil caller whose split task is built at its first run is what every kernel of rvm is (its
# kernels are nogil): `test_a_pool_task_is_built_when_a_loop_first_splits` runs that in CI.
@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="POSIX process model")
def test_a_users_own_nogil_njit_runs_a_split_kernel_on_a_first_run(tmp_path: Path) -> None:
    """The previous test's user function with ``nogil``, on empty caches."""
    _user_child(tmp_path, "b", "nogil")
