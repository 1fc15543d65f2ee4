"""Fuzzing the importer: corrupted model bytes, mutated models (graph, attributes, types,
shapes, opsets, external data) and random valid models against ONNX Runtime.

Every case either imports or raises an RVMError, never crashes or hangs; a model that imports
runs to ONNX Runtime's results. The cases run in subprocesses, so a crash (a segfault in a C++
parser or checker) fails the test instead of taking pytest down. ``benchmarks/fuzz.py`` runs
the long version of the mutations and random models.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("onnx")

FUZZ = textwrap.dedent(
    """
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    import rvm

    rng = np.random.default_rng(10)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    s = numpy_helper.from_array(np.array([0, -1], np.int64), "s")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Reshape", ["p", "s"], ["y"], name="flatten"),
    ]
    graph = helper.make_graph(
        nodes, "fuzz", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 64])], [w, s],
    )
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    data = data.SerializeToString()
    rvm.from_onnx(data)  # the intact model imports

    # Where corruption lands: anywhere, or (WEIGHTS) in the bytes the in-place weight reader
    # walks: the 24 bytes before each raw_data payload (its tensor's key, length, dims, type).
    positions = np.arange(len(data))
    if WEIGHTS:
        from rvm.frontend.onnx.weights import split_weights

        cuts = [c for c in split_weights(data)[1] if c is not None]
        positions = np.unique([p for s, e in cuts for p in range(max(s - 24, 0), s + 1)])

    ok = errors = 0
    for case in range(CASES):
        r = np.random.default_rng(case)
        buf = bytearray(data)
        if case % 2 == 0:
            buf = buf[: int(r.choice(positions))]
        else:
            for _ in range(int(r.integers(1, 4))):
                buf[int(r.choice(positions))] ^= 1 << int(r.integers(8))
        try:
            rvm.from_onnx(bytes(buf))
            ok += 1
        except rvm.RVMError:
            errors += 1
        except Exception as err:
            print(f"FAIL case {case}: {type(err).__name__}: {err}")
    print(f"imported {ok}, rejected {errors}")
    """
)


@pytest.mark.parametrize("weights", [False, True], ids=["anywhere", "weight_headers"])
def test_truncated_and_flipped_bytes_import_or_raise_rvm_errors(weights):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    script = FUZZ.replace("CASES", "200").replace("WEIGHTS", str(weights))
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert out.returncode == 0, f"crashed ({out.returncode}):\n{out.stdout}\n{out.stderr}"
    assert "FAIL" not in out.stdout, out.stdout
    assert "imported" in out.stdout and "rejected" in out.stdout


def test_mutated_and_random_models_raise_clear_errors_or_match_onnx_runtime():
    pytest.importorskip("onnxruntime")
    from rvm.testing.onnx_fuzz import ALL_KINDS, OUTCOMES, RANDOM_KINDS, cases, run

    counts, notes = run(cases(ALL_KINDS, 5), timeout=300)
    assert sum(counts[k] for k in OUTCOMES) == 5 * len(ALL_KINDS), counts
    bad = [n for n in notes if n["outcome"] not in ("error", "accepted", "unchecked")]
    bad += [n for n in notes if n["kind"] in RANDOM_KINDS]  # valid: ONNX Runtime runs them
    assert not bad, "\n".join(map(str, bad))
    assert counts["error"] > 0 and counts["ok"] >= 5 * len(RANDOM_KINDS)  # the valid ones matched


def test_what_a_case_prints_leaves_the_workers_records_whole():
    """A fuzz worker's records go through its standard output; anything a case writes there
    (ONNX Runtime's notice of a provider's fallback, from Python or from C) goes to standard
    error instead, so the run reads every record."""
    worker = textwrap.dedent(
        """
        import ctypes, sys
        from rvm.testing import onnx_fuzz

        onnx_fuzz._take_channel()
        print("*** EP Error ***")
        ctypes.CDLL(None).puts(b"from C")
        ctypes.CDLL(None).fflush(None)
        onnx_fuzz._emit({"case": 0, "step": "start"})
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", worker], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout == '{"case": 0, "step": "start"}\n', out.stdout
    assert "EP Error" in out.stderr and "from C" in out.stderr
