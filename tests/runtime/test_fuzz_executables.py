"""The fast version of ``benchmarks/fuzz_executables.py``: mutated untrusted executables
(byte flips with the checksums fixed up, the S2 pickles, canaried kernel source) loaded and run
in worker subprocesses: no crash, hang, wrong result, unclear exception or code execution."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_mutated_untrusted_executables_fail_clearly_and_run_nothing(tmp_path):
    out = tmp_path / "fuzz.json"
    run = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "fuzz_executables.py"),
            "--files",
            "60",
            "--seed",
            "7",
            "--timeout",
            "20",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(out.read_text())
    total = result["total"]
    assert total["inputs"] == 60
    bad = ("crashes", "hangs", "wrong results", "other exceptions", "code executions")
    assert {k: total[k] for k in bad} == dict.fromkeys(bad, 0), result["examples"]
    # a flip may make the program loop forever (a branch to itself): bounded by --timeout
    assert total["clear errors"] + total["ran"] + total["endless programs"] == 60
    assert result["per_seed"]["no kernels"]["inputs"] == 12
    assert result["cache_writes"] == []
