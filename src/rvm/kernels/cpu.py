"""The CPU the kernels run on: the one place its facts are read, at run time.

Tuning parameters of the kernel library (GEMM tiles and blocks, im2col blocks, when work is
split) come from these facts, never from constants tuned on one machine:

- the vector ISA Numba compiles for (`target_features`): ``NUMBA_CPU_FEATURES`` when set (a
  generic or cross-CPU build), else the host's, as Numba's own codegen reads them; from it the
  vector width (`Cpu.vector_bits`) and whether there is a fused multiply-add;
- the data caches of one core (L1d, L2) and the last level (L3, shared), in bytes, from Linux's
  ``/sys/devices/system/cpu/cpu0/cache``, else ``sysconf`` (glibc's ``_SC_LEVEL*``), else
  conservative defaults (`DEFAULT_CACHES`) on a system that tells neither;
- whether the core multiplies-adds its widest vectors whole or as two halves (`Cpu.fma_bits`:
  Zen 4 runs its 512-bit FMAs as two 256-bit halves, at half the rate of its 256-bit ones;
  Zen 5 and Intel's two-FMA cores run them whole), which no feature flag tells: measured once
  (`measure_fma_bits`, well under a millisecond) and kept beside the library's object code
  under the host CPU's identity (`host_fma_bits`).

`cpu()` reads them once per process. `tuning_key()` names the facts tuning depends on that the
CPU name and features do not: rvm's caches of compiled code include it (`rvm.kernels.numba_cache`,
`rvm.runtime.loading`), so code tuned for one machine's caches is never loaded on another's.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "DEFAULT_CACHES",
    "Cpu",
    "cpu",
    "host_fma_bits",
    "measure_fma_bits",
    "read_caches",
    "target_features",
    "tuning_key",
]

# (L1d, L2, L3) bytes where the system names none: a small core's, so blocks still fit.
DEFAULT_CACHES = (32 << 10, 256 << 10, 8 << 20)
_SYSFS = Path("/sys/devices/system/cpu/cpu0/cache")
_SYSCONF = ("SC_LEVEL1_DCACHE_SIZE", "SC_LEVEL2_CACHE_SIZE", "SC_LEVEL3_CACHE_SIZE")


@dataclass(frozen=True)
class Cpu:
    """What the kernels' tuning reads of the CPU.

    Attributes:
        name: the CPU name LLVM compiles for (``NUMBA_CPU_NAME`` or the host's).
        features: the enabled target features (``avx2``, ``avx512f``, ``fma``...), no ``+``.
        vector_bits: the widest float vector the features give: 512, 256 or 128.
        fma: whether there is a fused multiply-add.
        l1d: one core's L1 data cache, bytes.
        l2: one core's L2 cache, bytes.
        l3: the last-level cache, bytes (shared by the cores).
        caches_from: where the cache sizes came from: ``sysfs``, ``sysconf`` or ``default``.
        fma_bits: the widest vector whose multiply-adds the core runs whole: `vector_bits`,
            or less where the host runs vectors that wide as two halves (`host_fma_bits`).
    """

    name: str
    features: frozenset[str]
    vector_bits: int
    fma: bool
    l1d: int
    l2: int
    l3: int
    caches_from: str
    fma_bits: int

    @property
    def lanes(self) -> int:
        """float32 lanes of a vector."""
        return self.vector_bits // 32


def target_features() -> str:
    """The CPU features Numba compiles for, as its codegen reads them: ``NUMBA_CPU_FEATURES``
    (empty by default when ``NUMBA_CPU_NAME`` is ``generic``), else the host's."""
    from llvmlite import binding as llvm
    from numba.core import config

    if config.CPU_FEATURES is not None:
        return config.CPU_FEATURES
    return llvm.get_host_cpu_features().flatten()


def _target_name() -> str:
    from llvmlite import binding as llvm
    from numba.core import config

    return config.CPU_NAME or llvm.get_host_cpu_name()


def _size(text: str) -> int:
    """``48K``, ``1024K``, ``32M`` or a plain count of bytes, in bytes."""
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(text.rstrip("KMGB") or 0) * scale


def _sysfs_caches(root: Path) -> tuple[int, int, int] | None:
    """(L1d, L2, L3) bytes from a ``cpuN/cache`` folder, None without one; a level it lacks
    is 0."""
    sizes = {1: 0, 2: 0, 3: 0}
    found = False
    for index in sorted(root.glob("index*")):
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            size = _size((index / "size").read_text())
        except (OSError, ValueError):
            continue
        if kind in ("Data", "Unified") and level in sizes:
            sizes[level], found = max(sizes[level], size), True
    return (sizes[1], sizes[2], sizes[3]) if found else None


def read_caches(root: Path = _SYSFS) -> tuple[tuple[int, int, int], str]:
    """The data caches (L1d, L2, L3) in bytes and where they were read: ``sysfs`` (``root``),
    ``sysconf``, else `DEFAULT_CACHES` (``default``). A level the system leaves out (a CPU
    without an L3) takes the level below's size, so a block sized for it still fits."""
    sizes, source = _sysfs_caches(root), "sysfs"
    if sizes is None or sizes[0] <= 0:
        source = "sysconf"
        try:
            sizes = tuple(max(0, os.sysconf(name)) for name in _SYSCONF)  # type: ignore[assignment]
        except (ValueError, OSError, AttributeError):
            sizes = None
    if sizes is None or sizes[0] <= 0:
        return DEFAULT_CACHES, "default"
    l1, l2, l3 = sizes
    l2 = l2 if l2 > 0 else l1
    return (l1, l2, l3 if l3 > 0 else l2), source


def _vector_bits(features: frozenset[str]) -> int:
    if "avx512f" in features:
        return 512
    if features & {"avx", "avx2"}:
        return 256
    return 128


# The probe: this many multiply-add chains (enough to fill two FMA pipes of 4 to 6 cycles'
# latency) of this many steps (4000: ~15 us of 512-bit FMAs on Zen 4), each width's best of
# this many rounds, the widths taking turns.
_CHAINS, _STEPS, _ROUNDS = 12, 4000, 12


def _probe_ir(widths: tuple[int, ...]) -> str:
    """LLVM IR of ``float fma_probe_<lanes>(i64 steps, float x)`` for each of ``widths``
    (lanes): `_CHAINS` independent chains of ``acc = fma(acc, x, x)`` on ``<lanes x
    float>``, ``steps`` times."""
    from llvmlite import ir

    f32, i64, i32 = ir.FloatType(), ir.IntType(64), ir.IntType(32)
    module = ir.Module(name="fma_probe")
    for lanes in widths:
        vec = ir.VectorType(f32, lanes)
        fn = ir.Function(module, ir.FunctionType(f32, [i64, f32]), name=f"fma_probe_{lanes}")
        fma = ir.Function(module, ir.FunctionType(vec, [vec] * 3), name=f"llvm.fma.v{lanes}f32")
        entry, loop, done = (fn.append_basic_block(name) for name in ("entry", "loop", "done"))
        b = ir.IRBuilder(entry)
        steps, x = fn.args
        one = b.insert_element(ir.Constant(vec, ir.Undefined), x, ir.Constant(i32, 0))
        xs = b.shuffle_vector(one, one, ir.Constant(ir.VectorType(i32, lanes), [0] * lanes))
        b.branch(loop)
        b.position_at_end(loop)
        i, accs = b.phi(i64), [b.phi(vec) for _ in range(_CHAINS)]
        new = [b.call(fma, [acc, xs, xs]) for acc in accs]
        step = b.add(i, ir.Constant(i64, 1))
        i.add_incoming(ir.Constant(i64, 0), entry)
        i.add_incoming(step, loop)
        for acc, value in zip(accs, new):
            acc.add_incoming(xs, entry)
            acc.add_incoming(value, loop)
        b.cbranch(b.icmp_signed("<", step, steps), loop, done)
        b.position_at_end(done)
        total = new[0]
        for value in new[1:]:
            total = b.fadd(total, value)
        b.ret(b.extract_element(total, ir.Constant(i32, 0)))
    return str(module)


def measure_fma_bits() -> int:
    """The widest vector the host's multiply-adds run whole (`host_fma_bits`), measured: the
    same count of FMAs on its widest vectors and on half ones, compiled for the host by
    LLVM, timed in turns, best of `_ROUNDS`. A core that runs the widest vectors whole takes
    about as long for both (twice the work done); one that halves them takes twice as long
    for the wide ones; the line is drawn at 1.5 times. Under 1 ms, plus ~30 ms of
    compiling. The host's widest width where it has no FMA of 256 bits or more."""
    from llvmlite import binding as llvm

    host = _host_flags()
    widest = _vector_bits(host)
    if widest < 256 or "fma" not in host:
        return widest
    widths = (widest // 32, widest // 64)
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    machine = llvm.Target.from_default_triple().create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=2
    )
    module = llvm.parse_assembly(_probe_ir(widths))
    module.triple = llvm.get_process_triple()
    engine = llvm.create_mcjit_compiler(module, machine)
    engine.finalize_object()
    kind = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_int64, ctypes.c_float)
    probes = [kind(engine.get_function_address(f"fma_probe_{lanes}")) for lanes in widths]
    best = [float("inf")] * 2
    for _ in range(_ROUNDS):
        for k, probe in enumerate(probes):
            start = time.perf_counter()
            probe(_STEPS, 1.0)
            best[k] = min(best[k], time.perf_counter() - start)
    return widest if best[0] < 1.5 * best[1] else widest // 2


def _host_flags() -> frozenset[str]:
    """The host's CPU features (``avx512f``...), no ``+``."""
    from llvmlite import binding as llvm

    flags = llvm.get_host_cpu_features().flatten().split(",")
    return frozenset(f[1:] for f in flags if f.startswith("+"))


def _identity() -> str:
    """What the host's FMA width is kept under: its model name (two Xeons of one LLVM name
    may have one 512-bit FMA unit or two) and its LLVM name and features."""
    from llvmlite import binding as llvm

    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            names = [ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")]
        model = names[0] if names else ""
    except OSError:
        pass
    return f"{model} {llvm.get_host_cpu_name()} {llvm.get_host_cpu_features().flatten()}"


# Beside the library's object code (`rvm.kernels.files.object_code_dir`, which its cache keys
# name it in: `tuning_key`): the host's FMA width, in a file named by the host's identity.
FMA_FACT = "rvm-fma-"


@functools.lru_cache(maxsize=1)
def host_fma_bits() -> int:
    """The widest vector the host's multiply-adds run whole: its widest vectors, or half of
    them where it runs those as two halves (Zen 4's 512-bit ones). Kept beside the library's
    object code (`FMA_FACT` and a hash of the host's identity), else measured
    (`measure_fma_bits`, once per machine) and kept; the widest vectors (the tuning as it
    was fitted) if the probe fails."""
    from rvm.kernels.files import object_code_dir, write_atomic

    widest = _vector_bits(_host_flags())
    key = hashlib.sha256(_identity().encode()).hexdigest()[:24]
    path = object_code_dir(Path(__file__)) / f"{FMA_FACT}{key}"
    try:
        bits = int(path.read_text())
        if bits in (widest, widest // 2):
            return bits
    except (OSError, ValueError):
        pass
    try:
        bits = measure_fma_bits()
    except Exception:  # noqa: BLE001 -- a probe that cannot run leaves the tuning as fitted
        return widest
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, str(bits).encode())
    except OSError:
        pass
    return bits


@functools.lru_cache(maxsize=1)
def cpu() -> Cpu:
    """The facts of the CPU this process compiles for (read once)."""
    flags = frozenset(f[1:] for f in target_features().split(",") if f.startswith("+"))
    (l1d, l2, l3), source = read_caches()
    bits = _vector_bits(flags)
    return Cpu(
        name=_target_name(),
        features=flags,
        vector_bits=bits,
        fma="fma" in flags or "avx512f" in flags,
        l1d=l1d,
        l2=l2,
        l3=l3,
        caches_from=source,
        fma_bits=min(bits, host_fma_bits()),
    )


def tuning_key() -> str:
    """The facts tuning depends on beyond the target's CPU name and features (which Numba's
    cache and rvm's keys hold already): the cache sizes and the host's FMA width
    (`host_fma_bits`: with the target's vector width, which the features give, it makes
    `Cpu.fma_bits`), as one line for cache keys. It does not change with
    ``NUMBA_CPU_NAME``, so a process compiling for another CPU (a test of the AVX2 path) does
    not make the library's code stale for the host's."""
    c = cpu()
    return f"l1d={c.l1d} l2={c.l2} l3={c.l3} fma={host_fma_bits()}"
