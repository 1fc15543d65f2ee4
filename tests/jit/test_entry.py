"""Library entry points (`rvm.kernels.entry`) built per dtype when first required.

Each case runs in a fresh process: which entry points a process has compiled or loaded is
process state, and a cached kernel must link in a process that has registered nothing yet.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
SRC = HERE.parents[1] / "src"

# A float convolution + max pool kernel of DTYPE, loaded (compiled or from the cache), run and
# checked against the numpy kernel; prints the entry points required before and after.
SCRIPT = """
import json, sys
import numpy as np
from jit_helpers import numpy_run, prim, rand, var
from rvm import op
from rvm.jit import jit_kernel, load_kernel
from rvm.kernels import conv, entry, pool

before = entry.required()
dtype = sys.argv[1]
x, w = var("x", (1, 3, 9, 9), dtype), var("w", (4, 3, 3, 3), dtype)
func = prim([x, w], op.max_pool2d(op.conv2d(x, w, padding=1), pool_size=2, strides=2))
rec = jit_kernel("k_entry_" + dtype, func, "return", generic=False)
args = (rand((1, 3, 9, 9)).astype(dtype), rand((4, 3, 3, 3)).astype(dtype))
got, want = load_kernel(rec)(*args), numpy_run(func, *args)
np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
print(json.dumps({"before": before, "after": entry.required(), "source": rec.source}))
"""


def _run(dtype: str, cache: Path) -> dict:
    env = {
        **os.environ,
        "RVM_CACHE_DIR": str(cache),
        "RVM_JIT_WORKERS": "0",
        "PYTHONPATH": os.pathsep.join([str(SRC), str(HERE)]),
    }
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, dtype], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


# float64 builds the same entry points for the other dtype: two more cold subprocesses (about
# 20 s of a cold suite) for the same code path, so it runs with -m slow.
@pytest.mark.parametrize("dtype", ["float32", pytest.param("float64", marks=pytest.mark.slow)])
def test_a_process_builds_only_the_entry_points_its_kernels_use(dtype, tmp_path) -> None:
    """Importing the library compiles nothing; a kernel requires its own dtype's entry points
    alone (its source says which), and a second process loading the cached kernel registers
    them before linking it (a missing symbol would abort the process)."""
    want = [["conv2d", dtype], ["pool2d", dtype]]
    for _ in range(2):  # compiled, then loaded from the cache
        out = _run(dtype, tmp_path)
        assert out["before"] == []
        assert out["after"] == want
        assert f"require('conv2d', '{dtype}')" in out["source"]
    assert list((tmp_path / "kernels").glob("k_*.py"))


def test_require_checks_its_dtype() -> None:
    from rvm.kernels import entry  # noqa: F401 - conv exports conv2d

    with pytest.raises(ValueError, match="float16"):
        entry.require("conv2d", "float16")


def test_require_checks_a_mixed_variant() -> None:
    from rvm.kernels import entry

    with pytest.raises(ValueError, match="'uint8_int8'.*5 arrays joined by '_'"):
        entry.require("qconv2d", "uint8_int8")
    with pytest.raises(ValueError, match="float64"):
        entry.require("qdense", "uint8_int8_int32_float64_uint8")
    with pytest.raises(ValueError, match="each one of float32, float64"):
        entry.require("matmul", "float32_float16_float32")  # its own dtypes (MIXED_DTYPES_OF)
