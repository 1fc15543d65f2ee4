"""Shared fixtures: the exec modes and kernel backends every VM test runs under, programs
compiled once per session (`compiled`), and a checker for the HTML of `_repr_html_`."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from html.parser import HTMLParser

import pytest
from hypothesis import settings

# The suite compiles at Numba's default LLVM level (3), what users run: level 1 took 8-20% less
# CPU a cold file (session 40), but it leaves LLVM's vectorizer and alias-based rewrites
# untested, where a fused-kernel compiler's wrong in-place or aliasing assumption shows. A
# developer may still set NUMBA_OPT: code built at another level is keyed by it in every cache
# (`rvm.kernels.cpu.opt_key`), so a process at the default never loads it.
import rvm
from rvm.ir import IRModule
from rvm.kernels import numba_cache
from rvm.runtime.executable import EXEC_MODES  # every mode the VM has runs every VM test

KERNELS = ("numpy", "jit")
# pytest-xdist workers for ``-n auto``: each grows to 1-1.5 GB over the suite, and the
# suite's long tail (a few model-level tests of 20-40 s) leaves more workers idle at the end.
MAX_WORKERS = 4

# The longest test files, weighed by seconds (only the order matters): xdist starts them first
# (`pytest_collection_modifyitems`). A file missing here goes after them, by its count of tests.
# Session 99, on a 2-core Intel Xeon (Sapphire Rapids class, AVX-512 and AMX): each file's
# summed test durations in a clean clone's two-worker run from empty caches
# (`scripts/longest_files.py`; session 64's table, from a Zen 4, had test_conv, test_cpu,
# test_quantized and test_pool first, each 81-107, test_bf16 sixth at 61). On an AVX-512 host
# tests/jit/test_cpu.py's AVX2-path test builds a Haswell library in a subprocess, which an AVX2
# host does not (there it weighs about 11); on a host without AMX test_bf16 weighs less. Measured
# data that ages: after a change to what the suite compiles, regenerate it.
LONGEST_FILES = {
    "tests/jit/test_bf16.py": 100,
    "tests/jit/test_conv.py": 66,
    "tests/jit/test_cpu.py": 61,
    "tests/jit/test_quantized.py": 42,
    "tests/codegen/test_precision.py": 38,
    "tests/frontend/onnx/test_transformers.py": 36,
    "tests/jit/test_pool.py": 35,
    "tests/generation/test_greedy.py": 29,
    "tests/frontend/onnx/test_node_suite.py": 28,
    "tests/runtime/test_native_cycles.py": 18,
    "tests/frontend/torch/test_api.py": 18,
    "tests/codegen/test_random_programs.py": 17,
    "tests/codegen/test_deploy.py": 16,
    "tests/jit/test_ops.py": 16,
    "tests/examples/test_notebooks.py": 15,
    "tests/frontend/torch/test_models.py": 15,
    "tests/runtime/test_trust.py": 15,
    "tests/codegen/test_bf16_pool_planes.py": 15,
    "tests/frontend/torch/test_converters.py": 15,
    "tests/runtime/test_parallel_kernels.py": 14,
    "tests/jit/test_nn.py": 14,
    "tests/jit/test_first_run.py": 13,
    "tests/codegen/test_programs.py": 13,
    "tests/jit/test_numba_cache.py": 11,
    "tests/frontend/torch/test_control.py": 11,
    "tests/frontend/onnx/test_quantize.py": 11,
    "tests/jit/test_matmul.py": 11,
    "tests/jit/test_cache.py": 10,
    "tests/generation/test_exported.py": 9,
    "tests/frontend/onnx/test_qdq.py": 9,
    "tests/codegen/test_bf16_concat_planes.py": 9,
    "tests/jit/test_affine.py": 9,
    "tests/examples/test_torch_quickstart.py": 8,
    "tests/codegen/test_native.py": 8,
    "tests/runtime/test_native_mode.py": 8,
    "tests/runtime/test_release_file.py": 8,
    "tests/frontend/onnx/test_einsum.py": 8,
    "tests/runtime/test_vm_api.py": 8,
    "tests/jit/test_attention.py": 7,
    "tests/jit/test_safety.py": 7,
    "tests/transform/test_fuse_attention.py": 7,
    "tests/frontend/onnx/test_control.py": 7,
    "tests/jit/test_direct.py": 7,
    "tests/runtime/test_semantics.py": 6,
    "tests/runtime/test_fuzz_executables.py": 6,
}

# Everything Numba compiles (kernels, rvm's library, native functions) compiles in forked
# helpers and this process loads the object code: a Numba compile keeps its memory in the
# process for good (~2 MB a kernel, tens of MB for a library function), a load a tenth of it,
# and the suite compiles thousands (`rvm.kernels.apart`, `rvm.jit.parallel`). Subprocesses
# of tests inherit it.
os.environ.setdefault("RVM_JIT_ISOLATE", "1")
numba_cache.install()  # compiles apart, before a test calls a library function


def _forbid_arrays_assigned_to_slices_in_the_library() -> None:
    """Fail the compile of a function of `rvm.kernels` that assigns an array to a slice
    (``a[i:j] = b``): Numba lowers each such assignment with its formatted shape-mismatch
    message, 1.2-2.6 CPU-s of LLVM in the function and again in every caller linking it (see
    `rvm.kernels.planes.copy`). Every library function the suite builds is checked as Numba
    lowers it, here and in the compile helpers forked from this process; a scalar assigned to a
    slice is left alone (`tests/jit/test_safety.py`)."""
    from numba.core import types
    from numba.np import arrayobj

    plain = arrayobj.fancy_setslice  # what setitem_array calls for a slice, looked up per call

    def checked(context, builder, sig, args, index_types, indices):  # type: ignore[no-untyped-def]
        if isinstance(sig.args[2], types.Buffer) and "3rvm7kernels" in builder.function.name:
            raise TypeError(
                f"rvm.kernels assigns an array to a slice ({sig.args[0]}[...] = {sig.args[2]}) "
                "in a library function: copy it by loops (rvm.kernels.planes.copy)"
            )
        return plain(context, builder, sig, args, index_types, indices)

    arrayobj.fancy_setslice = checked


_forbid_arrays_assigned_to_slices_in_the_library()

# Hypothesis draws the same examples in every run (derandomize: a test's seed comes from its
# own source), so a failure shows again on the next run, and a test parametrized by exec mode
# or kernel backend draws the same programs for each, which then share their compiled
# executables (`test_random_programs`). ``pytest --hypothesis-profile=explore`` draws fresh
# examples each run, keeping failing ones in the ``.hypothesis`` database.
settings.register_profile("suite", derandomize=True, database=None, deadline=None)
settings.register_profile("explore", deadline=None)
settings.load_profile("suite")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """What ``-n auto`` (pyproject's addopts) starts: a worker per core this process may use,
    at most `MAX_WORKERS`. The workers share the caches (``RVM_CACHE_DIR``, Numba's), whose
    writes are atomic, so a kernel one compiles the other loads."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(cores or 1, MAX_WORKERS))


@pytest.hookimpl(trylast=True)  # after ``-m``/``-k`` deselect
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest test files first, the rest as xdist orders them (most tests first): with
    ``--dist loadscope`` (pyproject's addopts, with ``--no-loadscope-reorder``) a worker takes
    a file's tests as one unit in this order, so a long file started last cannot keep one
    worker busy while the others idle. A file's own tests keep their order."""
    counts = Counter(item.nodeid.split("::", 1)[0] for item in items)

    def rank(item: pytest.Item) -> tuple[int, int]:
        path = item.nodeid.split("::", 1)[0]
        return -LONGEST_FILES.get(path, 0), -counts[path]

    items.sort(key=rank)  # stable: a file's tests stay in their order, and together


@pytest.fixture(params=EXEC_MODES)
def exec_mode(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(params=KERNELS)
def kernels(request: pytest.FixtureRequest) -> str:
    return request.param


class _Balance(HTMLParser):
    """Checks that every element is closed in order; collects tags, attributes and text."""

    VOID = {"br", "hr", "img", "meta", "input", "col", "wbr"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.stream: list[tuple[str, str]] = []  # ("start" | "end" | "data", tag or text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self.stream.append(("start", tag))
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes {self.stack[-1:]}"
        self.stack.pop()
        self.stream.append(("end", tag))

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        self.stream.append(("data", data))


@pytest.fixture
def parse_html() -> Callable[[str], _Balance]:
    """`parse_html(text)`: asserts the HTML's tags are balanced; returns the parser with its
    `tags` (name, attributes), `text` (the data between tags, unescaped) and `stream` (both
    in document order)."""

    def parse(text: str) -> _Balance:
        assert isinstance(text, str) and text
        parser = _Balance()
        parser.feed(text)
        parser.close()
        assert parser.stack == [], f"unclosed: {parser.stack}"
        return parser

    return parse


@pytest.fixture(scope="session")
def compiled() -> Callable[[IRModule, str], rvm.Executable]:
    """``compiled(mod, kernels)``: ``rvm.compile(mod, kernels=kernels)``, once per session."""
    cache: dict[tuple[int, str], tuple[IRModule, rvm.Executable]] = {}  # keeps mod alive

    def compile_once(mod: IRModule, kernels: str) -> rvm.Executable:
        key = (id(mod), kernels)  # an id is unique while its module lives: the cache keeps it
        if key not in cache:
            cache[key] = (mod, rvm.compile(mod, kernels=kernels))
        return cache[key][1]

    return compile_once
