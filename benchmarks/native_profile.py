"""Where a light CNN's time goes in the native mode, by compiled function: `perf`'s samples of
the process over a loop of calls, the JIT's functions named.

Run: ``python benchmarks/native_profile.py [--only squeezenet,inception_v2] [--precision bf16]
[--seconds 6] [--top 25]`` (needs ``perf``; a host without hardware counters samples its
software clock).

Numba's compiled code has no symbols perf can read, so before sampling the script writes
``/tmp/perf-<pid>.map``, perf's map of a JIT's functions: the names, offsets and sizes of the
functions in the ELF objects of Numba's cache files (rvm's kernel cache, `cache_dir`, and the
library's, beside its sources or in ``NUMBA_CACHE_DIR``; ``readelf``), each object placed
where the loaded code lies by the addresses the JIT engine gives its global functions (the
base most of them agree on: a function linked into several objects resolves to one of them).
The model's own native module, built in memory, is not in the map (its samples are few: it
only calls kernels).

Per model (random weights, `common.light_model_files`; ``bert``: BERT-base at seq 128,
`transformer_models.export_bert`): rvm's outputs checked against ONNX
Runtime's first (`model_child.check_outputs`, bf16's `check_rounded`), then the call
looped for ``--seconds`` while ``perf record -F 2000 -p <pid>`` samples the process. The table
is each function's share of all samples (both threads), its share of each thread's, and the
calls a second; `rvm.kernels` prefixes and Numba's ABI tags dropped. Writes
``benchmarks/results/native_profile.json`` (``--name``).
"""

from __future__ import annotations

import argparse
import collections
import gc
import os
import re
import shutil
import struct
import subprocess
import tempfile
import time
from pathlib import Path

from common import light_model_files, machine, machine_line, write_results
from model_child import as_outputs, check_outputs, check_rounded

# isort: split
import numba
import numpy as np
from numba.core.codegen import CodeLibrary

import rvm
from rvm.runtime.loading.cache import cache_dir
from rvm.testing.onnx_models import run_ort

FREQUENCY = 2000  # samples a second a thread


def _elves(data: bytes):  # type: ignore[no-untyped-def]
    """The 64-bit little-endian ELF objects inside ``data`` (a pickled cache file)."""
    i = 0
    while (i := data.find(b"\x7fELF\x02\x01", i)) >= 0:
        (shoff,) = struct.unpack_from("<Q", data, i + 0x28)
        shentsize, shnum = struct.unpack_from("<HH", data, i + 0x3A)
        end = i + shoff + shentsize * shnum
        yield data[i:end]
        i = max(end, i + 1)


def _functions(elf: bytes) -> list[tuple[int, int, str, int, str]]:
    """(offset, size, binding, section, name) of each function in the object ``elf``."""
    with tempfile.NamedTemporaryFile(suffix=".o") as f:
        f.write(elf)
        f.flush()
        out = subprocess.run(["readelf", "-sW", f.name], capture_output=True, text=True,
                             check=True).stdout  # fmt: skip
    found = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 8 and parts[3] == "FUNC" and parts[6].isdigit():
            found.append((int(parts[1], 16), int(parts[2], 0), parts[4], int(parts[6]), parts[7]))
    return found


def cache_roots() -> list[Path]:
    """Where Numba's cache files of this process's code lie."""
    roots = [cache_dir()]
    if numba.config.CACHE_DIR:
        roots.append(Path(numba.config.CACHE_DIR))
    roots.append(Path(rvm.__file__).parent)  # the library's, beside its sources
    return roots


def write_perf_map() -> int:
    """Writes ``/tmp/perf-<pid>.map`` for the compiled functions this process has loaded; the
    count of functions named."""
    libraries = [o for o in gc.get_objects() if isinstance(o, CodeLibrary)]
    if not libraries:
        raise RuntimeError("no Numba code is loaded")
    engine = libraries[-1]._codegen._engine
    entries: dict[int, tuple[int, str]] = {}
    for root in cache_roots():
        for path in root.rglob("*.nbc"):
            for elf in _elves(path.read_bytes()):
                functions = _functions(elf)
                votes: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
                for offset, _, binding, section, name in functions:
                    if binding == "GLOBAL":
                        address = engine.get_function_address(name)
                        if address:
                            votes[section][address - offset] += 1
                bases = {s: c.most_common(1)[0][0] for s, c in votes.items()
                         if c.most_common(1)[0][1] >= 2}  # fmt: skip
                for offset, size, _, section, name in functions:
                    if section in bases and size:
                        entries[bases[section] + offset] = (size, name)
    names = [name for _, name in entries.values()]
    plain = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True,
                           check=True).stdout.splitlines()  # fmt: skip
    short = dict(zip(names, plain))
    with open(f"/tmp/perf-{os.getpid()}.map", "w") as f:
        for address, (size, name) in sorted(entries.items()):
            f.write(f"{address:x} {size:x} {_short(short.get(name, name))}\n")
    return len(entries)


def _short(name: str) -> str:
    """A function's name without Numba's ABI tags, argument types or `rvm.kernels.`."""
    name = re.sub(r"\[abi:[^\]]*\]", "", name).split("(")[0]
    return name.replace("rvm::kernels::", "").replace("::", ".")


def profile(vm, inputs: list[np.ndarray], seconds: float) -> tuple[dict, int]:  # type: ignore[no-untyped-def]
    """Samples of this process while ``vm`` runs its main on ``inputs`` for ``seconds``: (per
    function, its samples by thread), and the calls made."""
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "perf.data"
        command = ["perf", "record", "-F", str(FREQUENCY), "-p", str(os.getpid()), "-o",
                   str(data), "--", "sleep", str(seconds)]  # fmt: skip
        sampler = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(0.3)  # perf attaches
        calls = 0
        while sampler.poll() is None:
            vm.invoke("main", *inputs)
            calls += 1
        if sampler.returncode != 0:
            raise RuntimeError(f"perf record failed: {sampler.stderr.read().decode()[-400:]}")
        out = subprocess.run(["perf", "script", "-i", str(data), "-F", "tid,ip,sym"],
                             capture_output=True, text=True, check=True).stdout  # fmt: skip
    samples: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for line in out.splitlines():  # "tid ip symbol"
        parts = line.split(None, 2)
        if len(parts) >= 2 and parts[0].isdigit():
            symbol = parts[2].strip() if len(parts) > 2 else "[unknown]"
            samples[_short(symbol)][int(parts[0])] += 1
    return samples, calls


def _model(name: str, work: Path):  # type: ignore[no-untyped-def]
    """(ONNX path, model, inputs) of a light CNN or of ``bert`` (BERT-base, seq 128,
    `transformer_models.export_bert`)."""
    if name != "bert":
        path, _, model, inputs = light_model_files(name, work)
        return path, model, inputs
    import onnx
    from transformer_models import export_bert

    path = export_bert(work)
    ids = np.random.default_rng(0).integers(0, 30000, (1, 128))
    return path, onnx.load(str(path)), [ids, np.ones_like(ids), np.zeros_like(ids)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="squeezenet", help="comma-separated model names")
    parser.add_argument("--precision", default="bf16", choices=("fp32", "bf16"))
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--name", default="native_profile")
    args = parser.parse_args()
    if shutil.which("perf") is None or shutil.which("readelf") is None:
        raise SystemExit("native_profile.py needs perf and readelf (binutils) on the PATH")
    print(machine_line())
    results: dict = {"machine": machine(), "precision": args.precision, "models": {}}
    tmp = Path(tempfile.mkdtemp())
    for name in args.only.split(","):
        path, model, inputs = _model(name, tmp)
        ex = rvm.compile(rvm.from_onnx(str(path)), precision=args.precision)
        vm = rvm.VirtualMachine(ex, exec_mode="native")
        got, want = as_outputs(vm.invoke("main", *inputs)), run_ort(model, inputs)
        check = check_outputs if args.precision == "fp32" else check_rounded
        check(f"{name} (rvm {args.precision})", got, want)
        for _ in range(20):
            vm.invoke("main", *inputs)
        named = write_perf_map()
        samples, calls = profile(vm, inputs, args.seconds)
        total = sum(sum(c.values()) for c in samples.values())
        threads = collections.Counter()
        for c in samples.values():
            threads.update(c)
        order = [t for t, _ in threads.most_common()]
        rows = sorted(samples.items(), key=lambda kv: -sum(kv[1].values()))
        print(f"\n{name} ({args.precision}, native): {calls / args.seconds:.1f} calls/s, "
              f"{total} samples, {named} functions named")  # fmt: skip
        heads = " ".join(f"thread {k}" for k in range(len(order)))
        print(f"{'function':60s} {'all %':>6s} {heads}")
        table = []
        for function, by in rows[: args.top]:
            share = 100 * sum(by.values()) / total
            each = [100 * by.get(t, 0) / threads[t] for t in order]
            print(f"{function[:60]:60s} {share:6.2f} " + " ".join(f"{e:8.2f}" for e in each))
            table.append({"function": function, "percent": share, "threads": each})
        results["models"][name] = {"calls_per_s": calls / args.seconds, "samples": total,
                                   "named": named, "top": table}  # fmt: skip
    write_results(args.name, results)


if __name__ == "__main__":
    main()
