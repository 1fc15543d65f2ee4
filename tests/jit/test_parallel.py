"""Missing kernels compiled by helper processes, loaded from the cache by the parent."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from jit_helpers import numpy_run, prim, rand, var

from rvm import op
from rvm.jit import jit_kernel, load_kernel, parallel
from rvm.runtime.native.cache import has_object_code, kernel_path

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
    paths = [kernel_path(r.source) for r in recs]
    for path, rec in zip(paths, recs):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(rec.source)
    claims = tmp_path / "claims"
    claims.mkdir()
    assert parallel.claim(claims, paths[0]) and not parallel.claim(claims, paths[0])
    parallel._main([str(claims), *map(str, paths)])
    assert [has_object_code(p) for p in paths] == [False, True, True, True]
    _check(funcs, recs)


def test_precompile_with_a_helper(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("RVM_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("RVM_JIT_WORKERS", "1")
    funcs, recs = _records("precompile")
    assert parallel.precompile(recs) == 1
    assert all(has_object_code(kernel_path(r.source)) for r in recs)
    _check(funcs, recs)
    assert parallel.precompile(recs) == 0  # nothing missing any more


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
    assert all(has_object_code(kernel_path(r.source)) for r in recs)
    assert not (tmp_path / "rvm" / "kernels" / "__pycache__").exists()
    stems = {kernel_path(r.source).stem for r in recs}
    assert {f.name.split(".")[0] for f in numba_dir.rglob("k_*.nbi")} == stems
    _check(funcs, recs)
    assert parallel.precompile(recs) == 0


def test_a_helper_that_fails_changes_nothing(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("RVM_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("RVM_JIT_WORKERS", "1")
    monkeypatch.setattr(sys, "executable", "/bin/false")
    funcs, recs = _records("failing")
    assert parallel.precompile(recs) == 1
    _check(funcs, recs)


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
    monkeypatch.setenv("RVM_JIT_WORKERS", env)
    monkeypatch.setattr(parallel.os, "cpu_count", lambda: cpus)
    assert parallel.workers(missing) == want
