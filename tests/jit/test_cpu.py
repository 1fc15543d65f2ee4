"""The CPU facts the kernel library tunes by (`rvm.kernels.cpu`), the tuning derived from them,
and the AVX2 path of the CNN kernels: the same answers when Numba compiles for an AVX2 CPU
(``NUMBA_CPU_NAME``/``NUMBA_CPU_FEATURES`` in a subprocess) on this one."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
from jit_helpers import HASWELL, host_has

from rvm.kernels import cpu, gemmshape, im2col, sgemm


def _cache_dir(root: Path, levels: list[tuple[int, str, str]]) -> Path:
    """A ``cpuN/cache`` folder as Linux's sysfs has it: one ``indexK`` per (level, type,
    size)."""
    for k, (level, kind, size) in enumerate(levels):
        index = root / f"index{k}"
        index.mkdir(parents=True)
        (index / "level").write_text(f"{level}\n")
        (index / "type").write_text(f"{kind}\n")
        (index / "size").write_text(f"{size}\n")
    return root


def test_caches_read_from_sysfs(tmp_path) -> None:
    levels = [(1, "Data", "48K"), (1, "Instruction", "32K"), (2, "Unified", "1024K")]
    root = _cache_dir(tmp_path, [*levels, (3, "Unified", "32768K")])
    assert cpu.read_caches(root) == ((48 << 10, 1 << 20, 32 << 20), "sysfs")


def test_a_missing_level_takes_the_size_below(tmp_path) -> None:
    root = _cache_dir(tmp_path, [(1, "Data", "32K"), (2, "Unified", "2M")])
    assert cpu.read_caches(root) == ((32 << 10, 2 << 20, 2 << 20), "sysfs")


def test_the_cache_line_is_read_from_sysfs(tmp_path, monkeypatch) -> None:
    root = _cache_dir(tmp_path, [(1, "Instruction", "32K"), (1, "Data", "48K")])
    for index in root.glob("index*"):
        (index / "coherency_line_size").write_text("128\n")
    assert cpu.read_line(root) == 128
    monkeypatch.setattr(os, "sysconf", lambda name: 0)
    assert cpu.read_line(tmp_path / "none") == cpu.DEFAULT_LINE


def test_the_l1d_span_is_its_sets_times_its_line(tmp_path, monkeypatch) -> None:
    """The bytes after which L1d's sets repeat (`cpu.read_l1d_span`): its sets times its line
    from sysfs (not L1i's, not L2's), else the page size."""
    root = _cache_dir(
        tmp_path, [(1, "Instruction", "32K"), (1, "Data", "48K"), (2, "Unified", "2M")]
    )
    for index, sets in zip(sorted(root.glob("index*")), (32, 64, 2048)):
        (index / "number_of_sets").write_text(f"{sets}\n")
        (index / "coherency_line_size").write_text("64\n")
    assert cpu.read_l1d_span(root) == 64 * 64
    monkeypatch.setattr(os, "sysconf", lambda name: 16384 if name == "SC_PAGE_SIZE" else 0)
    assert cpu.read_l1d_span(tmp_path / "none") == 16384


def test_caches_without_sysfs_or_sysconf_are_the_defaults(tmp_path, monkeypatch) -> None:
    def no_sysconf(name: str) -> int:
        raise ValueError(name)

    monkeypatch.setattr(os, "sysconf", no_sysconf)
    assert cpu.read_caches(tmp_path / "none") == (cpu.DEFAULT_CACHES, "default")


@pytest.mark.skipif(not Path("/sys/devices/system/cpu/cpu0/cache").is_dir(), reason="no sysfs")
def test_this_cpu_facts() -> None:
    facts = cpu.cpu()
    assert (facts.l1d, facts.l2, facts.l3) == cpu.read_caches()[0]
    assert facts.l1d <= facts.l2 <= facts.l3
    assert facts.vector_bits == 32 * sgemm.LANES
    assert f"l2={facts.l2}" in cpu.tuning_key()
    assert facts.line == cpu.read_line() and f"line={facts.line}" in cpu.tuning_key()
    assert facts.l1d_span == cpu.read_l1d_span() and f"span={facts.l1d_span}" in cpu.tuning_key()


def _facts(l1d: int, l2: int, bits: int = 512) -> cpu.Cpu:
    return dataclasses.replace(cpu.cpu(), l1d=l1d, l2=l2, vector_bits=bits)


@pytest.mark.parametrize(
    ("l1d", "rows", "kc"),
    [(48 << 10, 8, 512), (32 << 10, 8, 512), (32 << 10, 6, 512), (64 << 10, 8, 1024),
     (16 << 10, 8, 256), (4 << 10, 8, 128), (1 << 20, 6, 1024)],
)  # fmt: skip
def test_depth_block_follows_l1d(l1d: int, rows: int, kc: int) -> None:
    """A band of A (rows x KC floats) takes half of L1d, a power of two from 128 to 1024."""
    assert gemmshape.depth_block(_facts(l1d, 1 << 20), rows) == kc


@pytest.mark.parametrize(("l2", "block"), [(1 << 20, 1 << 19), (256 << 10, 128 << 10),
                                           (2 << 20, 1 << 20), (64 << 10, 64 << 10)])  # fmt: skip
def test_column_block_follows_l2(l2: int, block: int) -> None:
    assert gemmshape.block_bytes(_facts(32 << 10, l2)) == block


@pytest.mark.parametrize(
    ("l2", "block"),
    [(1 << 20, 256 << 10), (256 << 10, 64 << 10), (2 << 20, 512 << 10), (128 << 10, 64 << 10)],
)
def test_gemm_column_block_is_a_quarter_of_l2(l2: int, block: int) -> None:
    """The packed GEMM's block of B (`gemmshape.COLUMN_BYTES`): a quarter of L2, 64 KB at least."""
    assert gemmshape.column_bytes(_facts(32 << 10, l2)) == block


@pytest.mark.parametrize(
    ("l1d", "width", "steps"),
    [(48 << 10, 48, 16), (32 << 10, 16, 32), (32 << 10, 48, 10), (1 << 10, 48, 1)],
)
def test_panel_prefetch_distance_follows_l1d(l1d: int, width: int, steps: int) -> None:
    """A panel's rows (``width`` floats) prefetched a sixteenth of L1d on, a step at least."""
    assert gemmshape.panel_ahead(_facts(l1d, 1 << 20), width) == steps


@pytest.mark.parametrize(
    ("l2", "rows", "in_place"),
    [(512 << 10, 6, 128), (1 << 20, 8, 256), (256 << 10, 6, 64), (64 << 10, 6, 6),
     (2 << 20, 6, 512)],
)  # fmt: skip
def test_in_place_rows_follow_the_l2_that_bs_block_leaves(l2: int, rows: int, in_place: int):
    """A's depth block (rows x KC floats, KC 512 with a 32 KB L1d) in the half of L2 that B's
    block leaves; at least one band."""
    facts = _facts(32 << 10, l2)
    depth = gemmshape.depth_block(facts, rows)
    assert gemmshape.in_place_rows(facts, depth, gemmshape.block_bytes(facts), rows) == in_place


def test_this_machine_tuning_comes_from_its_facts() -> None:
    facts = cpu.cpu()
    assert gemmshape.KC == gemmshape.depth_block(facts, gemmshape.MR)
    assert gemmshape.BLOCK_BYTES == gemmshape.block_bytes(facts)
    assert gemmshape.COLUMN_BYTES == gemmshape.column_bytes(facts)
    assert gemmshape.PANEL_AHEAD == gemmshape.panel_ahead(facts, gemmshape.NR)
    rows = gemmshape.in_place_rows(facts, gemmshape.KC, gemmshape.BLOCK_BYTES, gemmshape.MR)
    assert gemmshape.IN_PLACE_ROWS == rows
    assert im2col.COL_BYTES == 2 * facts.l2


# In the subprocess: the convolution and pool cases of the library's own tests (their case
# lists, run by their own checks; the direct method's with its panels and AVX-512's;
# Winograd's tiles, its rule at 8 lanes and its weights transformed at build time), on one
# thread and two, an ONNX model whose 3x3 layers take Winograd in every exec mode, and GEMMs
# around the tile edges. By default every convolution method and
# the direct one, one pool of each kind; every case (the split GEMMs' large convolutions,
# every model's pool) with -m slow: each new method is seconds of compiling for Haswell.
_SCRIPT = """
import sys
sys.path.insert(0, {tests!r})
import numpy as np
import rvm
from rvm.kernels import cpu, direct, sgemm
assert cpu.cpu().vector_bits == 256 and sgemm.LANES == 8, (cpu.cpu(), sgemm.LANES)
import test_conv, test_direct, test_pool, test_sgemm, test_winograd
every = {every!r}
convs = test_conv.CASES + (test_conv.SPLIT_CASES if every else [])
pools = test_pool.MODEL_POOLS if every else test_pool.MODEL_POOLS[3:4]
for threads in (1, 2):
    rvm.set_num_threads(threads)
    for case in convs:
        test_conv.test_conv2d_matches_reference(case, "float32")
    for case in test_direct.CASES:
        test_direct.test_packed_convolution_matches_reference(case, direct.NB)
        test_direct.test_packed_convolution_matches_reference(case, 48)  # AVX-512's panels
    for case in test_direct.CHANNELS_CASES:
        test_direct.test_library_convolution_takes_the_direct_method(case)
    for shape, k, s, pads, ceil in pools:
        for kind, include in (("max", False), ("avg", False), ("avg", True)):
            test_pool._check_pool(kind, include, shape, k, s, pads, ceil)
    for shape in test_winograd.SHAPES:  # Winograd at 8 lanes: its tiles and rule
        test_winograd.test_winograd_matches_reference(threads, shape)
    for shape in test_winograd.TAKEN:
        test_winograd.test_conv2d_takes_winograd(threads, shape)
    test_winograd.test_winograd_fused_epilogue(threads, True)
    test_winograd.test_pack_transforms_winograd_weights(threads)
    test_pool.test_pools_three_columns_wide_match_reference_with_nan("float32")
    test_pool.test_padded_pools_of_narrow_maps_by_channel_match_reference_with_nan()
    if every:  # pools 1 apart on maps narrower than 8 lanes: a method of their own
        test_pool.test_pools_of_small_maps_stacked_match_reference_with_nan("float32")
for mode in ("bytecode", "compiled", "native"):  # a model through the build-time transform
    for n, h, w in test_winograd.MODEL_MAPS:
        test_winograd.test_onnx_model_against_onnxruntime(mode, n, h, w)
for m in test_sgemm.SIZES_M:
    for n in test_sgemm.SIZES_N:
        test_sgemm._run(m, n, sgemm.KC + 3, True)
print("ok")
"""


@pytest.mark.parametrize("every", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_avx2_path_gives_the_same_answers(haswell_caches, every: bool) -> None:
    """The convolutions, pools and GEMM compiled for Haswell (AVX2, 8 lanes) on an AVX-512
    machine: the same answers as the references. Skipped where the host cannot run AVX2 code,
    and where AVX2 is the widest it runs: there every test runs the AVX2 path natively (and
    `test_avx512_path_compiles` takes the other target)."""
    if not host_has("avx2"):
        pytest.skip("the host has no AVX2")
    if not host_has("avx512f"):
        pytest.skip("the host runs the AVX2 path natively: every test covers it")
    tests = str(Path(__file__).parent)
    env = dict(os.environ, NUMBA_CPU_NAME="haswell", NUMBA_CPU_FEATURES=HASWELL)
    env.update(haswell_caches)
    run = subprocess.run(
        [sys.executable, "-c", _SCRIPT.format(tests=tests, every=every)],
        env=env,
        capture_output=True,
        text=True,
        timeout=840,
    )
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stderr[-3000:]


# Zen 4's target: AVX-512 with VNNI and BF16 (the wide tiles, ``vpdpbusd``, ``vdpbf16ps``).
AVX512 = HASWELL + ",+avx512f,+avx512bw,+avx512dq,+avx512vl,+avx512cd,+avx512vnni,+avx512bf16"

_COMPILE_512 = """
from numba import types as nt
from rvm.kernels import bf16gemm, cpu, gemv, qtile, sgemm
assert cpu.cpu().vector_bits == 512 and sgemm.LANES == gemv.LANES == 16, cpu.cpu()
assert qtile.VNNI and bf16gemm.DPBF16 and bf16gemm.LANES == 16
# Compiled, never run (this host cannot): the float32 GEMM's tiles (its in-place path's, a
# task of its own that `sgemm.sgemm` calls) and the bf16 GEMM on zmm registers.
f32 = (nt.int64,) * 14
bf16 = (nt.int64,) * 8 + (nt.boolean,)
for kernel, sig, op in ((sgemm.band_tiles, f32, "vfmadd"), (bf16gemm.gemm_bf16, bf16, "vdpbf16ps")):
    kernel.compile(sig)
    asm = kernel.inspect_asm(sig)
    assert "zmm" in asm and op in asm, (kernel, op)
print("ok")
"""


def test_avx512_path_compiles(tmp_path) -> None:
    """Where the host runs no AVX-512 code, the kernels compiled for Zen 4's AVX-512 (with
    VNNI and BF16; `NUMBA_CPU_NAME`/`NUMBA_CPU_FEATURES` in a subprocess) take its tiles (16
    lanes, the VNNI and BF16 paths) and their GEMMs compile to zmm code: compiled only, as
    this CPU cannot run it. On an AVX-512 host every test runs that path natively."""
    if host_has("avx512f"):
        pytest.skip("the host runs the AVX-512 path natively: every test covers it")
    env = dict(os.environ, NUMBA_CPU_NAME="znver4", NUMBA_CPU_FEATURES=AVX512)
    env.update(NUMBA_CACHE_DIR=str(tmp_path / "numba"), RVM_CACHE_DIR=str(tmp_path / "rvm"))
    # Compiled in this process, not apart (`rvm.kernels.apart`): code loaded from the cache has
    # no assembly to inspect.
    env["RVM_JIT_ISOLATE"] = "0"
    env["NUMBA_OPT"] = str(cpu.DEFAULT_OPT)  # the code users get, whatever NUMBA_OPT the run has
    run = subprocess.run(
        [sys.executable, "-c", _COMPILE_512],
        env=env,
        capture_output=True,
        text=True,
        timeout=840,
    )
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stderr[-3000:]


_WIDE = """
import re
import numba
from llvmlite import binding as llvm
{before}
from rvm.kernels import cpu
host = llvm.get_host_cpu_features().flatten()
wide = {explicit} is None and {before_flag} is False and "+avx512f" in host.split(",")
features = cpu.target_features()
assert features == (host + "," + cpu.WIDE_VECTORS if wide else {explicit} or host), features

@numba.njit(fastmath=True)
def axpy(a, x, y):
    for i in range(y.size):
        y[i] += a * x[i]

import numpy as np
x = np.ones(1000, np.float32)
axpy(np.float32(2), x, x)
asm = "".join(axpy.inspect_asm().values())
if wide:  # a loop LLVM vectorizes takes 512-bit vectors, whatever its tuning for the CPU
    assert re.search(r"%zmm", asm), "no zmm in the vectorized loop"
print("ok")
"""


@pytest.mark.parametrize("case", ["host", "explicit", "numba_first"])
def test_loops_vectorize_at_the_hosts_full_width(tmp_path, case: str) -> None:
    """`cpu.wide_vectors`: on an AVX-512 host with no ``NUMBA_CPU_NAME``/``NUMBA_CPU_FEATURES``,
    Numba compiles for the host's features and ``-prefer-256-bit``, so loops it vectorizes take
    zmm registers on Intel's cores too (LLVM's tuning there prefers 256 bits). Features a user
    set stay theirs, and so does a code generator Numba made before rvm's first use; on another
    host nothing is added."""
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES")}
    env.update(NUMBA_CACHE_DIR=str(tmp_path / "numba"), RVM_CACHE_DIR=str(tmp_path / "rvm"))
    env["NUMBA_OPT"] = str(cpu.DEFAULT_OPT)
    explicit = None
    if case == "explicit":
        explicit = env["NUMBA_CPU_FEATURES"] = HASWELL
    before = "numba.njit(lambda: 1)()" if case == "numba_first" else ""
    script = _WIDE.format(before=before, explicit=repr(explicit), before_flag=case == "numba_first")
    run = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stderr[-3000:]
