"""Load time of a saved executable in a fresh process with an empty kernel cache.

Run: ``python benchmarks/load_time.py [--repeat 5] [--no-cnn] [--gpt2 [WORKDIR]]``.

For each model (the MLP of ``rvm.testing.programs``, jit kernels, in the default exec mode and
compiled with ``exec_mode="native"``, whose native functions ship too; onnx's light squeezenet
with random weights, imported through ``rvm.from_onnx``; with ``--gpt2``, GPT-2 small with past,
one decode step, exported as ``benchmarks/transformers.py`` does: a 650 MB file, which format
2.0 maps; and the same with ``exec_mode="native"``), the parent compiles it, saves it (with its
kernels' native code, `rvm.runtime.loading.artifact`, signed with this run's own key: the trust
model, README "Security"), and computes the reference output. Then each measurement is a new
subprocess with ``RVM_CACHE_DIR`` set to a new empty folder (no kernel cached) and a
``NUMBA_CACHE_DIR`` shared by the children, where the first child builds the kernel library
(never taken from a file; built once per install), which times

- ``import rvm`` (stated on its own, not part of the goal);
- ``rvm.load_executable`` + ``rvm.VirtualMachine`` + the first call (the goal: <= 0.5 s for
  the MLP, <= 1 s for squeezenet and GPT-2), for each way of trusting the file: *signed* (the
  signature by a trusted key checked; its native code goes into isolated cache entries,
  checked at use), *trusted* (``trusted=True``), and *untrusted* (``load_executable`` +
  ``as_text`` only: the data path; its kernels refuse to run);

checks the output against the parent's reference, and reports how many kernels it loaded and
compiled (`rvm.runtime.loading.loader.kernel_counts`; a compile makes the run fail). The same is
measured for the executable saved without native code (``to_bytes(native=False)``, as before
format 1.4: every kernel compiles), for the same executable saved in format 1.6 (signed, its
weights inside CONS: read, CRC-checked and hashed whole at load), and the time to check a
signature in process. The table
gives medians over ``--repeat`` subprocesses (interleaved); writes
``benchmarks/results/load_time.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from common import ROOT, light_model_files, median_time, write_results

# isort: split
import numpy as np

import rvm
from rvm.runtime.loading import trust
from rvm.runtime.serialize import encode_parts
from rvm.testing.programs import MLP, PROGRAMS

GOALS = {"mlp": 0.5, "mlp_native": 0.5, "squeezenet": 1.0, "gpt2": 1.0, "gpt2_native": 1.0}

CHILD = textwrap.dedent(
    """
    import json, sys, time
    start = time.perf_counter()
    import rvm
    imported = time.perf_counter()
    import numpy as np
    from rvm.runtime.loading.loader import kernel_counts
    args = np.load(sys.argv[2])
    args = [args[k] for k in sorted(args.files)]
    t0 = time.perf_counter()
    if sys.argv[4] == "untrusted":  # the data path: load, print; its kernels never run
        ex = rvm.load_executable(sys.argv[1], keys=())
        assert not ex.trusted and ex.as_text()
        t1 = time.perf_counter()
        print(json.dumps({"import_s": imported - start, "load_first_call_s": t1 - t0,
                          **kernel_counts()}))
        sys.exit()
    ex = rvm.load_executable(sys.argv[1], trusted=sys.argv[4] == "trusted")
    assert ex.trusted
    vm = rvm.VirtualMachine(ex)
    out = vm["main"](*args)
    t1 = time.perf_counter()
    out = out if isinstance(out, tuple) else (out,)
    ref = np.load(sys.argv[3])
    ref = [ref[k] for k in sorted(ref.files)]
    assert len(out) == len(ref), (len(out), len(ref))
    for a, b in zip(out, ref):
        np.testing.assert_allclose(np.asarray(a), b, rtol=1e-4, atol=1e-5)
    counts = kernel_counts()
    if vm.exec_mode == "native":  # native functions compiled count as compiles too
        counts["compiled"] += vm.native_report().compiled
    print(json.dumps({"import_s": imported - start, "load_first_call_s": t1 - t0, **counts}))
    """
)


def _child(rvmx: Path, args: Path, ref: Path, work: Path, how: str = "signed") -> dict:
    """One fresh process with an empty kernel cache (the library's object code, which is
    never taken from a file, built once by the first child): its timings and kernel counts.
    ``how``: "signed" (the file's signature by this user's key makes it trusted),
    "trusted" (``trusted=True``), or "untrusted" (loaded as data and printed)."""
    caches = Path(tempfile.mkdtemp(dir=work))
    env = dict(os.environ)
    env["RVM_CACHE_DIR"] = str(caches / "rvm")
    env["NUMBA_CACHE_DIR"] = str(work / "numba")  # kernels' folders are new: RVM_CACHE_DIR is
    # the parent's key signed the file; an untrusted child has a trust store of its own
    env["RVM_CONFIG_DIR"] = str((caches if how == "untrusted" else work) / "config")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    run = subprocess.run(
        [sys.executable, "-c", CHILD, str(rvmx), str(args), str(ref), how],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    if run.returncode != 0:
        raise RuntimeError(f"child failed on {rvmx.name}:\n{run.stderr[-3000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def _save(name: str, ex: rvm.Executable, args: tuple, work: Path) -> dict[str, Path]:
    """The executable saved with and without native code, its args and its reference
    output (computed here, in the parent)."""
    out = rvm.VirtualMachine(ex)["main"](*args)
    out = out if isinstance(out, tuple) else (out,)
    paths = {"args": work / f"{name}_args.npz", "ref": work / f"{name}_ref.npz"}
    np.savez(paths["args"], **{f"a{i:03d}": a for i, a in enumerate(args)})
    np.savez(paths["ref"], **{f"r{i:03d}": np.asarray(o) for i, o in enumerate(out)})
    paths["native"] = work / f"{name}.rvmx"
    ex.save(str(paths["native"]))  # signed with this user's key (RVM_CONFIG_DIR below)
    paths["source"] = work / f"{name}_source_only.rvmx"
    paths["source"].write_bytes(ex.to_bytes(native=False))
    paths["format_1"] = work / f"{name}_format_1.rvmx"  # before 2.0: weights inside CONS
    with open(paths["format_1"], "wb") as f:
        for part in encode_parts(ex, ex.native_code(), trust.local_key(), version=(1, 6)):
            f.write(part)
    return paths


def _verify_s(path: Path) -> float:
    """Median seconds to check the signature of the file at ``path`` (HMAC-SHA256 over the
    bytes it covers: all but the weights' since format 2)."""
    from rvm.runtime.serialize import decode

    data = memoryview(path.read_bytes())
    ident, mac, ranges = decode(data)["signature"]
    parts = [data[a:b] for a, b in ranges]
    return median_time(lambda: trust.verify(parts, ident, mac), repeat=21)


def _gpt2(workdir: Path) -> tuple[rvm.Executable, tuple]:
    """GPT-2 small with past (transformers' default config, random weights, exported as
    ``benchmarks/transformers.py`` does and cached in ``workdir``), compiled; one decode step
    at past length 8 as its input."""
    from transformer_models import export_gpt2

    path = export_gpt2(workdir)
    mod = rvm.from_onnx(str(path))
    rng = np.random.default_rng(0)
    inputs = {
        "input_ids": np.array([[42]], np.int64),
        "attention_mask": np.ones((1, 9), np.int64),
        "position_ids": np.array([[8]], np.int64),
    }
    args = []
    for p in mod["main"].params:  # the rest: past_key_values_<layer>_<key|value>
        past = rng.standard_normal((1, 12, 8, 64)).astype(np.float32)
        args.append(inputs.get(p.name, past))
    return rvm.compile(mod, progress=True), tuple(args)


def _models(work: Path, cnn: bool, gpt2: Path | None) -> dict[str, tuple[rvm.Executable, tuple]]:
    models = {
        "mlp": (rvm.compile(MLP, kernels="jit"), PROGRAMS[0].args()),
        "mlp_native": (rvm.compile(MLP, kernels="jit", exec_mode="native"), PROGRAMS[0].args()),
    }
    if cnn:
        path, _, _, inputs = light_model_files("squeezenet", work)
        mod = rvm.from_onnx(str(path))
        models["squeezenet"] = (rvm.compile(mod, kernels="jit", progress=True), tuple(inputs))
    if gpt2 is not None:
        models["gpt2"] = _gpt2(gpt2)
        ex, args = models["gpt2"]  # its native functions ship in the file too
        models["gpt2_native"] = (ex.with_exec_mode("native"), args)
    return models


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-cnn", action="store_true", help="the MLP only")
    parser.add_argument("--source-repeat", type=int, default=1, help="runs without native code")
    parser.add_argument(
        "--gpt2",
        nargs="?",
        const=os.path.join(tempfile.gettempdir(), "rvm-transformers"),
        help="also GPT-2 small (exported into this folder, as benchmarks/transformers.py does)",
    )
    opts = parser.parse_args()
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="rvm-load-time-") as tmp:
        work = Path(tmp)
        os.environ["RVM_CONFIG_DIR"] = str(work / "config")  # this run's own signing key
        warm = True
        gpt2 = Path(opts.gpt2) if opts.gpt2 else None
        for name, (ex, args) in _models(work, not opts.no_cnn, gpt2).items():
            paths = _save(name, ex, args, work)
            files = (paths["args"], paths["ref"], work)
            if warm:  # builds the library's object code, shared by the children after it
                _child(paths["native"], *files)
                warm = False
            runs = {"native": [], "trusted": [], "untrusted": [], "source": [], "format_1": []}
            for k in range(opts.repeat):
                runs["native"].append(_child(paths["native"], *files))
                runs["format_1"].append(_child(paths["format_1"], *files))
                runs["trusted"].append(_child(paths["native"], *files, how="trusted"))
                runs["untrusted"].append(_child(paths["native"], *files, how="untrusted"))
                if k < opts.source_repeat and name != "gpt2":  # its kernels compile for 40 s
                    runs["source"].append(_child(paths["source"], *files, how="trusted"))
            bad = [r for w in ("native", "trusted", "format_1") for r in runs[w] if r["compiled"]]
            if bad:
                raise RuntimeError(f"{name}: a load with native code compiled kernels: {bad}")
            results[name] = {
                "kernels": sum(r.backend == "jit" for r in ex.kernels.values()),
                "file_bytes": paths["native"].stat().st_size,
                "source_only_file_bytes": paths["source"].stat().st_size,
                "goal_s": GOALS.get(name),
                "verify_signature_s": _verify_s(paths["native"]),
                **{
                    f"{way}_{what}_median": statistics.median(r[what] for r in rs)
                    for way, rs in runs.items()
                    for what in ("import_s", "load_first_call_s")
                    if rs
                },
                "runs": runs,
            }
    print(
        f"\nload + VirtualMachine + first call, fresh process, empty kernel cache, library "
        f"built (load: {os.getloadavg()[0]:.1f}); medians of {opts.repeat}. signed: the "
        "file's signature by a trusted key checked, its native code used; trusted=True: the "
        "same, unchecked; untrusted: loaded as data and printed (its kernels refuse to run); "
        "no-native: trusted, kernels compiled; format 1.6: signed, the same executable in "
        "the format before 2.0 (its weights read and checked with the rest)"
    )
    print(
        f"{'model':<12}{'kernels':>8}{'MB':>7}{'first run, signed s':>21}{'goal s':>8}"
        f"{'trusted s':>11}"
        f"{'untrusted s':>13}{'no-native s':>13}{'format 1.6 s':>14}{'verify ms':>11}"
        f"{'import rvm s':>14}"
    )
    for name, r in results.items():
        print(
            f"{name:<12}{r['kernels']:>8}{r['file_bytes'] / 1e6:>7.2f}"
            f"{r['native_load_first_call_s_median']:>21.3f}{r['goal_s'] or 0:>8.1f}"
            f"{r['trusted_load_first_call_s_median']:>11.3f}"
            f"{r['untrusted_load_first_call_s_median']:>13.3f}"
            f"{r.get('source_load_first_call_s_median', float('nan')):>13.3f}"
            f"{r['format_1_load_first_call_s_median']:>14.3f}"
            f"{r['verify_signature_s'] * 1e3:>11.3f}{r['native_import_s_median']:>14.3f}"
        )
    print(
        "(every column is a first run: a new process, empty RVM_CACHE_DIR and NUMBA_CACHE_DIR;\n"
        " first run: the file with its native code, rvm's library code included; no-native: the\n"
        " file without it, every kernel and the library functions it calls compiled)"
    )
    write_results("load_time", {"load_average": os.getloadavg()[0], "models": results})


if __name__ == "__main__":
    main()
