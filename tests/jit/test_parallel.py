"""Missing kernels compiled by helper processes, loaded from the cache by the parent."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from jit_helpers import numpy_run, prim, rand, var

from rvm import op
from rvm.jit import jit_kernel, load_kernel, parallel
from rvm.runtime.loading.cache import has_object_code, kernel_path, write_entry

OPS = (op.tanh, op.sigmoid, op.exp, op.negative)


def _records(tag: str):
    """Four distinct kernels (their names differ by ``tag``, so their sources do)."""
    funcs = []
    for f in OPS:
        x = var("x", ("n",))
        funcs.append(prim([x], f(x) * 2.0))
    recs = [
        jit_kernel(f"k_{tag}_{f.__name__}", fn, "return", generic=False)
        for f, fn in zip(OPS, funcs)
    ]
    return funcs, recs


def _check(funcs, recs) -> None:
    x = rand((5,))
    for fn, rec in zip(funcs, recs):
        np.testing.assert_allclose(load_kernel(rec)(x), numpy_run(fn, x), rtol=1e-5)


def test_helper_compiles_what_it_claims(tmp_path: Path, monkeypatch) -> None:
    """A helper compiles each kernel file it claims first into the cache, and no other."""
    monkeypatch.setenv("RVM_CACHE_DIR", str(tmp_path))
    funcs, recs = _records("claims")
    paths = [kernel_path(r.source, r.imports) for r in recs]
    for path, rec in zip(paths, recs):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(rec.source)
    claims = tmp_path / "claims"
    claims.mkdir()
    assert parallel.claim(claims, paths[0]) and not parallel.claim(claims, paths[0])
    parallel._main([str(claims), json.dumps([[str(p), []] for p in paths])])
    assert [has_object_code(p) for p in paths] == [False, True, True, True]
    _check(funcs, recs)


def test_precompile_with_a_helper(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("RVM_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("RVM_JIT_WORKERS", "1")
    funcs, recs = _records("precompile")
    assert parallel.precompile(recs) == 1
    assert all(has_object_code(kernel_path(r.source, r.imports)) for r in recs)
    _check(funcs, recs)
    assert parallel.precompile(recs) == 0  # nothing missing any more


@pytest.mark.skipif(not parallel.can_fork(), reason="RVM_JIT_ISOLATE needs fork")
def test_isolated_the_parent_compiles_nothing_and_loads_the_helpers_code(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("RVM_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("RVM_JIT_ISOLATE", "1")
    monkeypatch.delenv("RVM_JIT_WORKERS", raising=False)
    funcs, recs = _records("isolated")
    assert parallel.workers(1) == 1  # one missing kernel: a helper compiles it all the same
    assert parallel.precompile(recs[:1]) == 1
    assert parallel.precompile(recs[1:]) >= 1
    for rec in recs:  # what precompile loaded: Numba's cache hits, no compile in this process
        stats = load_kernel(rec).stats
        assert sum(stats.cache_hits.values()) == 1 and not sum(stats.cache_misses.values())
    _check(funcs, recs)


def test_precompile_with_numba_cache_dir(tmp_path: Path, monkeypatch) -> None:
    """With ``NUMBA_CACHE_DIR`` set, Numba keeps the object code there, not beside the kernel
    file: the cache still sees it, so a second compile finds nothing missing."""
    from numba.core import config

    numba_dir = tmp_path / "numba"
    monkeypatch.setenv("RVM_CACHE_DIR", str(tmp_path / "rvm"))
    monkeypatch.setenv("RVM_JIT_WORKERS", "1")
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(numba_dir))  # the helper's
    monkeypatch.setattr(config, "CACHE_DIR", str(numba_dir))  # this process's
    funcs, recs = _records("numba_dir")
    assert parallel.precompile(recs) == 1
    assert all(has_object_code(kernel_path(r.source, r.imports)) for r in recs)
    assert not (tmp_path / "rvm" / "kernels" / "__pycache__").exists()
    stems = {kernel_path(r.source, r.imports).stem for r in recs}
    assert {f.name.split(".")[0] for f in numba_dir.rglob("k_*.nbi")} == stems
    _check(funcs, recs)
    assert parallel.precompile(recs) == 0


def test_a_started_helper_that_fails_changes_nothing(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("RVM_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("RVM_JIT_WORKERS", "1")
    monkeypatch.setenv("RVM_JIT_FORK", "0")
    monkeypatch.setattr(sys, "executable", "/bin/false")
    funcs, recs = _records("failing")
    assert parallel.precompile(recs) == 1
    _check(funcs, recs)


def test_a_forked_helper_that_fails_changes_nothing(tmp_path: Path, monkeypatch) -> None:
    if not parallel.can_fork():
        pytest.skip("helpers are not forked here")
    monkeypatch.setenv("RVM_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("RVM_JIT_WORKERS", "1")

    def broken(*args: object) -> None:
        raise RuntimeError("a helper that dies")

    monkeypatch.setattr(parallel, "_compile_claimed", broken)  # the fork's, not the parent's
    funcs, recs = _records("fork_failing")
    assert parallel.precompile(recs) == 1
    assert all(has_object_code(kernel_path(r.source, r.imports)) for r in recs)
    _check(funcs, recs)


def test_a_forked_helper_compiles_what_a_single_process_does(tmp_path: Path, monkeypatch) -> None:
    """Kernels a forked helper compiled load from the cache (nothing compiled in the parent)
    and give bit-identical results to those compiled in one process; `precompile` with a
    forked helper does too, though this process then compiles again kernels the first helper
    compiled (a fork counts Numba's function ids from its own start, else the same kernel
    compiled here and there would have one symbol and crash when called)."""
    if not parallel.can_fork():
        pytest.skip("helpers are not forked here")
    from rvm.runtime.loading import loader

    funcs, recs = _records("forked")
    x = rand((33,), seed=3)

    def run(how: str) -> list[np.ndarray]:
        monkeypatch.setenv("RVM_CACHE_DIR", str(tmp_path / how))
        monkeypatch.setattr(loader, "_modules", {})
        return [load_kernel(r)(x) for r in recs]

    serial = run("serial")
    monkeypatch.setenv("RVM_CACHE_DIR", str(tmp_path / "forked"))
    records = {kernel_path(r.source, r.imports): r for r in recs}
    for path, rec in records.items():
        write_entry(path, rec.source)
    claims = tmp_path / "claims"
    claims.mkdir()
    parallel.numba_ready()
    helper = parallel._fork(claims, _needs({p: records[p] for p in parallel.balanced(records)}))
    assert helper is not None
    helper.wait()
    assert not helper.running() and os.WIFEXITED(helper.status)
    assert os.WEXITSTATUS(helper.status) == 0
    assert all(has_object_code(p) for p in records)  # the helper compiled every one
    before = loader.kernel_counts()
    forked = run("forked")
    assert loader.kernel_counts()["compiled"] == before["compiled"]  # all loaded
    for a, b in zip(serial, forked):
        np.testing.assert_array_equal(a, b)
    monkeypatch.setenv("RVM_CACHE_DIR", str(tmp_path / "precompiled"))
    monkeypatch.setenv("RVM_JIT_WORKERS", "1")
    monkeypatch.setattr(loader, "_modules", {})
    assert parallel.precompile(recs) == 1
    assert all(has_object_code(kernel_path(r.source, r.imports)) for r in recs)
    for a, b in zip(serial, run("precompiled")):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    ("env", "cpus", "missing", "want"),
    [
        ("", 2, 10, 1),
        ("", 8, 10, 4),
        ("", 2, 2, 0),
        ("", 1, 10, 0),
        ("0", 8, 10, 0),
        ("3", 1, 2, 1),
    ],
)
def test_how_many_helpers(env, cpus, missing, want, monkeypatch) -> None:
    monkeypatch.delenv("RVM_JIT_ISOLATE", raising=False)
    monkeypatch.setenv("RVM_JIT_WORKERS", env)
    monkeypatch.setattr(parallel.os, "cpu_count", lambda: cpus)
    assert parallel.workers(missing) == want


def _conv(tag: str, dtype: str = "float32"):
    x, w = var("x", (1, 2, 5, 5), dtype), var("w", (2, 2, 3, 3), dtype)
    func = prim([x, w], op.conv2d(x, w, padding=1) * 2.0)
    return jit_kernel(f"k_{tag}", func, "return", generic=False)


def _needs(records: dict) -> dict:
    return {path: rec.requires for path, rec in records.items()}


def test_work_builds_entry_points_first_then_kernels_costliest_first(tmp_path) -> None:
    from rvm.kernels import entry

    _, recs = _records("work")
    conv = _conv("work")
    assert conv.requires == (("conv2d", "float32"),) and recs[0].requires == ()
    records = {tmp_path / "tanh.py": recs[0], tmp_path / "conv.py": conv}
    assert parallel.balanced(records) == [tmp_path / "conv.py", tmp_path / "tanh.py"]
    claims = tmp_path / "claims"
    claims.mkdir()
    needs = _needs({p: records[p] for p in parallel.balanced(records)})
    order = list(parallel._work(claims, needs, lambda: False))
    assert order == [tmp_path / "conv.py", tmp_path / "tanh.py"]
    assert (claims / "entry-conv2d-float32.done").exists()
    assert ("conv2d", "float32") in entry.required()


def test_work_puts_off_a_kernel_whose_entry_point_another_process_builds(tmp_path) -> None:
    _, recs = _records("put_off")
    conv, tanh = tmp_path / "conv.py", tmp_path / "tanh.py"
    sources = _needs({conv: _conv("put_off", "float64"), tanh: recs[0]})
    claims = tmp_path / "claims"
    claims.mkdir()
    assert parallel.claim(claims, Path("entry-conv2d-float64"))  # "another process" has it
    work = parallel._work(claims, sources, lambda: True)
    assert next(work) == tanh  # the conv waits for its entry point
    (claims / "entry-conv2d-float64.done").touch()
    assert next(work) == conv


def test_the_generator_sets_the_compile_cost_and_balanced_puts_the_costliest_first() -> None:
    from rvm.jit.lower import compile_cost

    assert compile_cost(4, 2, 0) > compile_cost(4, 0, 1) > compile_cost(4, 0, 0)
    x = var("x", ("n",), "float32")
    plain = jit_kernel("k_cost_neg", prim([x], op.negative(x)), "return", generic=False)
    inlined = jit_kernel("k_cost_tanh", prim([x], op.tanh(x)), "return", generic=False)
    m = var("m", ("n", "k"), "float32")
    rows = jit_kernel("k_cost_sum", prim([m], op.tanh(op.sum(m, axis=1))), "return", False)
    assert rows.cost > inlined.cost > plain.cost > 0
    lines = inlined.source.count("\n")
    assert plain.cost == compile_cost(plain.source.count("\n"), 1, 0)
    assert inlined.cost == compile_cost(lines, 1, 1)
    records = {Path("a.py"): plain, Path("b.py"): rows, Path("c.py"): inlined}
    records[Path("d.py")] = plain
    assert parallel.balanced(records) == [Path(n) for n in ("b.py", "c.py", "a.py", "d.py")]


def test_work_waits_for_an_entry_point_another_process_builds(tmp_path) -> None:
    """A kernel calling an entry point another process claimed is handed out only once that
    process says it is built (a file), not while it is still building it."""
    import threading

    path = tmp_path / "conv.py"
    claims = tmp_path / "claims"
    claims.mkdir()
    assert parallel.claim(claims, Path("entry-conv2d-float64"))  # "another process" has it
    done = claims / "entry-conv2d-float64.done"
    timer = threading.Timer(0.2, done.touch)
    timer.start()
    needs = {path: _conv("wait", "float64").requires}
    work = parallel._work(claims, needs, lambda: True)
    assert next(work) == path and done.exists()
    timer.join()
    # With nobody left to build it, nothing waits.
    other = tmp_path / "other"
    other.mkdir()
    assert parallel.claim(other, Path("entry-conv2d-float64"))
    work = parallel._work(other, needs, lambda: False)
    assert next(work) == path and not (other / "entry-conv2d-float64.done").exists()


def test_frozen_gc_nests_and_unfreezes_at_the_last_exit() -> None:
    import gc

    assert gc.get_freeze_count() == 0
    with parallel.frozen_gc():
        assert gc.get_freeze_count() > 0
        with parallel.frozen_gc():
            pass
        assert gc.get_freeze_count() > 0
        kept = [object()]  # made while frozen: collected as usual
        del kept
    assert gc.get_freeze_count() == 0
