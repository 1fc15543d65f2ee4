"""The CPU the kernels run on: the one place its facts are read, at run time.

Tuning parameters of the kernel library (GEMM tiles and blocks, im2col blocks, when work is
split) come from these facts, never from constants tuned on one machine:

- the vector ISA Numba compiles for (`target_features`): ``NUMBA_CPU_FEATURES`` when set (a
  generic or cross-CPU build), else the host's, as Numba's own codegen reads them; from it the
  vector width (`Cpu.vector_bits`) and whether there is a fused multiply-add;
- the data caches of one core (L1d, L2) and the last level (L3, shared), in bytes, from Linux's
  ``/sys/devices/system/cpu/cpu0/cache``, else ``sysconf`` (glibc's ``_SC_LEVEL*``), else
  conservative defaults (`DEFAULT_CACHES`) on a system that tells neither; likewise the
  cache line (`read_line`: what one prefetch brings), else `DEFAULT_LINE`, and the bytes after
  which L1d's sets repeat (`read_l1d_span`), else the page size.

`cpu()` reads them once per process. `tuning_key()` names the facts tuning depends on that the
CPU name and features do not: rvm's caches of compiled code include it (`rvm.kernels.numba_cache`,
`rvm.runtime.loading`), so code tuned for one machine's caches is never loaded on another's.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "DEFAULT_CACHES",
    "DEFAULT_LINE",
    "WIDE_VECTORS",
    "Cpu",
    "amx_tiles",
    "cpu",
    "read_caches",
    "read_l1d_span",
    "read_line",
    "target_features",
    "tuning_key",
    "wide_vectors",
]

# (L1d, L2, L3) bytes where the system names none: a small core's, so blocks still fit.
DEFAULT_CACHES = (32 << 10, 256 << 10, 8 << 20)
DEFAULT_LINE = 64  # bytes of a cache line where the system names none (x86-64's)
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
        line: bytes of an L1d cache line (`read_line`).
        l1d_span: bytes after which L1d's sets repeat (`read_l1d_span`): addresses this
            far apart share a set, so rows of a matrix this many bytes apart crowd its ways.
    """

    name: str
    features: frozenset[str]
    vector_bits: int
    fma: bool
    l1d: int
    l2: int
    l3: int
    caches_from: str
    line: int = DEFAULT_LINE
    l1d_span: int = 4096

    @property
    def lanes(self) -> int:
        """float32 lanes of a vector."""
        return self.vector_bits // 32

    @property
    def mask_registers(self) -> bool:
        """Whether masks have registers of their own (AVX-512's k registers). Without them
        (AVX2) a masked load or store takes its mask in a vector register and costs several
        plain ones, so kernels give whole vectors loops of their own."""
        return "avx512f" in self.features

    @property
    def vector_registers(self) -> int:
        """Vector registers a kernel's tile can keep: 32 zmm with AVX-512, else 16."""
        return 32 if "avx512f" in self.features else 16


WIDE_VECTORS = "-prefer-256-bit"
"""The feature `wide_vectors` adds: LLVM's tuning for Intel's AVX-512 cores (Skylake-SP to
Emerald Rapids) has its loop and SLP vectorizers use 256-bit vectors (``prefer-256-bit``), half
the width the kernels' tiles and blocks are tuned for (`Cpu.lanes`); AMD's keep 512 bits.
Written vector code (the GEMM micro-kernels) is not affected, but every loop LLVM vectorizes
is: squeezenet's call on an Emerald Rapids, 6.31 -> 5.36 ms (session 54)."""


def wide_vectors() -> None:
    """Has Numba vectorize loops with the widest vectors the host has: where the host has
    AVX-512 and neither ``NUMBA_CPU_NAME`` nor ``NUMBA_CPU_FEATURES`` is set, sets Numba's
    config of the latter to the host's features and `WIDE_VECTORS` (the environment is left
    alone: a child process decides the same itself). Only before Numba has made its code
    generator, whose target machine keeps the features it was made with: after that (Numba
    code compiled before rvm's first use), nothing changes and `target_features` stays what
    that generator compiles for. Idempotent; every reader of the features calls it."""
    from numba.core import config, registry

    if config.CPU_NAME is not None or config.CPU_FEATURES is not None:
        return
    if "_toplevel_target_context" in vars(registry.cpu_target):  # the generator exists
        return
    host = _host_features()
    if "+avx512f" not in host.split(","):
        return
    if not _tiles_granted(host):  # no code that needs them: it would die on its first tile
        host = ",".join(f"-{f[1:]}" if f.startswith("+amx") else f for f in host.split(","))
    config.CPU_FEATURES = f"{host},{WIDE_VECTORS}"


_AMX = ("+amx-tile", "+amx-bf16")
_ARCH_PRCTL, _REQ_XCOMP_PERM, _XTILEDATA = 158, 0x1023, 18  # Linux x86-64's numbers


@functools.cache
def _tiles_granted(features: str) -> bool:
    """Whether this process may use AMX's tile registers: the features name AMX and Linux
    grants the tile data's state to the process (``arch_prctl(ARCH_REQ_XCOMP_PERM,
    XFEATURE_XTILEDATA)``, Linux 5.16 and later; asked once, for every thread). Without the
    grant the first tile instruction kills the process."""
    import ctypes
    import platform

    flags = set(features.split(","))
    if not all(f in flags for f in _AMX):
        return False
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.syscall(_ARCH_PRCTL, _REQ_XCOMP_PERM, _XTILEDATA) == 0)
    except (OSError, AttributeError):
        return False


def amx_tiles() -> bool:
    """Whether the kernels compile bf16 products for AMX tiles (`rvm.kernels.amx`): the
    features Numba compiles for name AMX-BF16 and the OS granted this process the tiles."""
    return _tiles_granted(target_features())


def target_features() -> str:
    """The CPU features Numba compiles for, as its codegen reads them: ``NUMBA_CPU_FEATURES``
    (empty by default when ``NUMBA_CPU_NAME`` is ``generic``; see `wide_vectors`), else the
    host's."""
    from numba.core import config

    wide_vectors()
    if config.CPU_FEATURES is not None:
        return config.CPU_FEATURES
    return _host_features()


def _host_features() -> str:
    from llvmlite import binding as llvm

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


def _data_caches(root: Path) -> Iterator[tuple[int, Path]]:
    """(level, folder) of each data or unified cache of a ``cpuN/cache`` folder, in index
    order (the instruction caches and unreadable entries left out)."""
    for index in sorted(root.glob("index*")):
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
        except (OSError, ValueError):
            continue
        if kind in ("Data", "Unified"):
            yield level, index


def _number(index: Path, name: str) -> int:
    """The count in a cache folder's file ``name``, 0 where it is missing or unreadable."""
    try:
        return int((index / name).read_text())
    except (OSError, ValueError):
        return 0


def _sysfs_caches(root: Path) -> tuple[int, int, int] | None:
    """(L1d, L2, L3) bytes from a ``cpuN/cache`` folder, None without one; a level it lacks
    is 0."""
    sizes = {1: 0, 2: 0, 3: 0}
    found = False
    for level, index in _data_caches(root):
        try:
            size = _size((index / "size").read_text())
        except (OSError, ValueError):
            continue
        if level in sizes:
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


def read_line(root: Path = _SYSFS) -> int:
    """Bytes of a data cache line: the L1d's ``coherency_line_size`` in ``root``, else
    ``sysconf``'s, else `DEFAULT_LINE`."""
    for _, index in _data_caches(root):
        line = _number(index, "coherency_line_size")
        if line > 0:
            return line
    try:
        line = os.sysconf("SC_LEVEL1_DCACHE_LINESIZE")
    except (ValueError, OSError, AttributeError):
        line = 0
    return line if line > 0 else DEFAULT_LINE


def read_l1d_span(root: Path = _SYSFS) -> int:
    """Bytes after which L1d's sets repeat: its sets times its line, from ``root`` (the L1d's
    ``number_of_sets`` and ``coherency_line_size``), else the page size (an L1d indexed within
    the page offset, as x86-64's are: 32 KB of 8 ways and 48 KB of 12 are both 4 KB a way)."""
    for level, index in _data_caches(root):
        sets, line = _number(index, "number_of_sets"), _number(index, "coherency_line_size")
        if level == 1 and sets > 0 and line > 0:
            return sets * line
    try:
        return max(1, os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 4096


def _vector_bits(features: frozenset[str]) -> int:
    if "avx512f" in features:
        return 512
    if features & {"avx", "avx2"}:
        return 256
    return 128


@functools.lru_cache(maxsize=1)
def cpu() -> Cpu:
    """The facts of the CPU this process compiles for (read once)."""
    flags = frozenset(f[1:] for f in target_features().split(",") if f.startswith("+"))
    (l1d, l2, l3), source = read_caches()
    return Cpu(
        name=_target_name(),
        features=flags,
        vector_bits=_vector_bits(flags),
        fma="fma" in flags or "avx512f" in flags,
        l1d=l1d,
        l2=l2,
        l3=l3,
        caches_from=source,
        line=read_line(),
        l1d_span=read_l1d_span(),
    )


def tuning_key() -> str:
    """The facts tuning depends on beyond the target's CPU name and features (which Numba's
    cache and rvm's keys hold already): the cache sizes, and whether the code runs AMX tiles
    (`amx_tiles`: features naming AMX compile without them where Linux refused the tiles), as
    one line for cache keys. It does not change with ``NUMBA_CPU_NAME``, so a process
    compiling for another CPU (a test of the AVX2 path) does not make the library's code
    stale for the host's."""
    c = cpu()
    return f"l1d={c.l1d} l2={c.l2} l3={c.l3} line={c.line} span={c.l1d_span} amx={int(amx_tiles())}"


DEFAULT_OPT = 3
"""Numba's default LLVM optimization level (``NUMBA_OPT`` unset), which keys as before."""


def opt_key() -> str:
    """LLVM's optimization level Numba compiles at (``NUMBA_OPT``), as a key field, or ""
    at Numba's default (`DEFAULT_OPT`). Numba's cache keys leave it out, so code built at
    another level (the test suite builds at 1) would be loaded by a process at the default:
    rvm's keys (`rvm.runtime.loading.cache.target_key`) and Numba's cache index
    (`rvm.kernels.numba_cache.install`) hold this field. Read per call: Numba reads the
    variable at import."""
    from numba.core import config

    level = getattr(config.OPT, "_raw_value", config.OPT)  # 0-3, or "max"
    return "" if level == DEFAULT_OPT else f"opt={level}"
