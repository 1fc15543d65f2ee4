"""Fuzzing untrusted saved executables: byte flips with the checksums fixed up, in subprocesses.

Run: ``python benchmarks/fuzz_executables.py [--files 600] [--seed 0] [--timeout 60]``.

Seeds (built in this process): an MLP with control flow of jit kernels, saved with its native
section; the same with numpy kernels and their library; the jit one with its native section's
Numba files replaced by pickles that run code (the S2 payload); the jit one signed with a key
the workers do not trust; and a program without kernels (ADTs, closures, tuples, recursion),
which an untrusted file may run. Every kernel and library source of the seeds starts with a
canary line that writes a file when run, so any execution of a file's code shows.

Each mutated file has 1 to 4 bytes changed (anywhere: headers, section headers, payloads,
the signature; half the time inside one section's payload, picked uniformly among the
sections), then every section's CRC32 is recomputed when the section headers still
parse, so the decoder's checks past the CRCs are what is tested. Workers (subprocesses, in a
scratch folder, with ``RVM_CACHE_DIR`` and ``NUMBA_CACHE_DIR`` in it) load each file as
untrusted (`rvm.load_executable(path)`), print it (``as_text``), then make a VM in each exec
mode and call the seed's function. A file is counted as one of:

- code execution: a canary file appeared, or a kernel's source was exec'd or imported;
- crash: the worker died (a signal, an abort); hang: loading or printing the file gave no
  answer within ``--timeout``;
- endless program: the file loaded, and its program ran longer than ``--timeout`` (a flip
  can make a branch jump to itself: bytecode, like an ONNX Loop, may loop forever; bound
  runs of programs you do not trust by time, as any program's);
- wrong result: the exec modes disagree, or a file that decodes to the seed's own program
  gives another result than the seed;
- other exception: an exception that is not an `rvm.errors.RVMError`;
- clear error: an `RVMError` (a format error, the refusal to run untrusted code...);
- ran: loaded and ran in every mode, results agreeing.

Nothing a file carries may reach the cache folders (``cache writes``: files there other
than the native exec mode's module, which rvm generates from the file's bytecode). Prints
the counts table and writes ``benchmarks/results/fuzz_executables.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import queue
import random
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import numpy as np  # noqa: E402

CANARY = "open('CANARY_RAN', 'w').close()\n"
EVIL_PICKLE = b"cbuiltins\nexec\n(V" + CANARY.strip().encode() + b"\ntR."
MODES = ("bytecode", "compiled", "native")
COLUMNS = (
    "inputs",
    "crashes",
    "hangs",
    "endless programs",
    "wrong results",
    "clear errors",
    "other exceptions",
    "code executions",
    "ran",
)

MLP = """
@module
class M:
    @func
    def main(x: T[("n", 8), "float32"], w: T[(8, 4), "float32"], t: T[(), "float32"]):
        y = op.tanh(op.matmul(x, w)) + op.exp(op.negative(op.abs(op.matmul(x, w))))
        s = op.sum(y)
        if s > t:
            return y * s
        return y - s
"""


# -- seeds ------------------------------------------------------------------------------------


def _kernel_free():
    """main(x, y): Cons(x, Cons(y, Nil)) walked by a recursive function, a closure, tuples."""
    from rvm.runtime import ExecBuilder, ParamSpec
    from rvm.runtime import Opcode as O  # noqa: N817

    b = ExecBuilder()
    nil, cons = b.add_adt("List", [("Nil", 0), ("Cons", 2)])
    b.add_constant(np.arange(6, dtype=np.float32).reshape(2, 3))
    f = b.function("last", ("xs", "prev"), (ParamSpec("xs", "adt"), ParamSpec("prev")))
    tag, h, t = (f.new_register() for _ in range(3))
    is_cons, is_nil = f.label(), f.label()
    f.emit(O.GET_TAG, tag, 0)
    f.emit(O.IF_IMM, tag, cons, is_cons, is_nil)
    f.place(is_cons)
    f.emit(O.GET_FIELD, h, 0, 0)
    f.emit(O.GET_FIELD, t, 0, 1)
    f.emit(O.TAIL_INVOKE, "last", (t, h))
    f.place(is_nil)
    f.emit(O.RET, 1)
    f = b.function("pick", ("k", "v"))
    tup = f.new_register()
    f.emit(O.ALLOC_ADT, tup, -1, (1, 0))
    f.emit(O.RET, tup)
    f = b.function("main", ("x", "y"))
    n, c1, c2, last, clo, pair, c = (f.new_register() for _ in range(7))
    f.emit(O.ALLOC_ADT, n, nil, ())
    f.emit(O.ALLOC_ADT, c1, cons, (1, n))
    f.emit(O.ALLOC_ADT, c2, cons, (0, c1))
    f.emit(O.INVOKE, last, "last", (c2, 0))
    f.emit(O.LOAD_CONST, c, 0)
    f.emit(O.ALLOC_CLOSURE, clo, "pick", (c,))
    f.emit(O.INVOKE_CLOSURE, pair, clo, (last,))
    f.emit(O.RET, pair)
    return b.build()


def _canaried(ex):
    """``ex`` with the canary line first in every kernel and library source."""
    from rvm.runtime.executable import Executable

    kernels = {n: replace(r, source=CANARY + r.source) for n, r in ex.kernels.items()}
    libraries = {n: CANARY + s for n, s in ex.libraries.items()}
    return Executable(
        ex.functions,
        ex.constants,
        ex.primitive_names,
        kernels,
        libraries,
        ex.adts,
        ex.default_exec_mode,
    )


def _poisoned(native):
    groups = []
    for g in native.groups:
        files = tuple((n, EVIL_PICKLE if n.endswith((".nbi", ".nbc")) else d) for n, d in g.files)
        groups.append(replace(g, files=files))
    return replace(native, groups=tuple(groups))


def build_seeds(folder: Path) -> dict[str, dict]:
    """Seed files and their calls: {name: {"data", "function", "args" file, "expected"}}."""
    import rvm
    from rvm.runtime.loading import trust
    from rvm.runtime.serialize import encode

    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 8)).astype(np.float32)
    w = (rng.standard_normal((8, 4)) * 0.3).astype(np.float32)
    mlp_args = [x, w, np.float32(0)]
    mod = rvm.script.parse(MLP)
    jit = rvm.compile(mod, kernels="jit", exec_mode="native")
    numpy_ex = rvm.compile(mod, kernels="numpy")
    native = jit.native_code()
    seeds = {
        "jit+native": encode(_canaried(jit), native),
        "numpy+library": encode(_canaried(numpy_ex)),
        "jit+pickles": encode(_canaried(jit), _poisoned(native)),
        "jit signed, unknown key": encode(_canaried(jit), native, trust.new_key()),
    }
    out = {}
    expected = rvm.VirtualMachine(numpy_ex)["main"](*mlp_args)
    for name, data in seeds.items():
        out[name] = {"data": data, "function": "main", "args": mlp_args, "expected": [expected]}
    free = _kernel_free()
    free_args = [np.float32(1.5), np.ones((2, 2), np.float32)]
    got = rvm.VirtualMachine(free)["main"](*free_args)
    out["no kernels"] = {
        "data": encode(free),
        "function": "main",
        "args": free_args,
        "expected": [np.asarray(v) for v in got],
    }
    for k, seed in enumerate(out.values()):
        args_file = folder / f"seed_{k}.npz"
        np.savez(args_file, *seed["args"], *seed["expected"])
        seed["args_file"] = str(args_file)
        seed["nargs"] = len(seed["args"])
        seed["hash"] = rvm.Executable.from_bytes(seed["data"], trusted=True).content_hash()
    return out


# -- mutation ----------------------------------------------------------------------------------


def fix_crcs(data: bytearray) -> None:
    """Recompute every section's CRC32 while the section headers parse."""
    if len(data) < 12:
        return
    nsec = struct.unpack_from("<I", data, 8)[0]
    pos = 12
    for _ in range(nsec):
        if pos + 16 > len(data):
            return
        length = struct.unpack_from("<Q", data, pos + 4)[0]
        if length > len(data) - pos - 16:
            return
        payload = bytes(data[pos + 16 : pos + 16 + length])
        struct.pack_into("<I", data, pos + 12, zlib.crc32(payload))
        pos += 16 + length


def sections(data: bytes) -> list[tuple[int, int]]:
    """(start, end) of every section's payload, while the section headers parse."""
    out = []
    pos = 12
    for _ in range(struct.unpack_from("<I", data, 8)[0] if len(data) >= 12 else 0):
        if pos + 16 > len(data):
            break
        length = struct.unpack_from("<Q", data, pos + 4)[0]
        if length > len(data) - pos - 16:
            break
        out.append((pos + 16, pos + 16 + length))
        pos += 16 + length
    return out


def mutate(data: bytes, rng: random.Random) -> bytes:
    """``data`` with 1 to 4 bytes changed, half the time inside one section's payload (so the
    checks past the section layout see most flips), the CRCs fixed up."""
    out = bytearray(data)
    spans = [(a, b) for a, b in sections(data) if b > a]
    for _ in range(rng.randint(1, 4)):
        if spans and rng.random() < 0.5:
            a, b = rng.choice(spans)
            i = rng.randrange(a, b)
        else:
            i = rng.randrange(len(out))
        if rng.random() < 0.5:
            out[i] ^= 1 << rng.randrange(8)
        else:
            out[i] = rng.randrange(256)
    fix_crcs(out)
    return bytes(out)


# -- the worker (a subprocess) -------------------------------------------------------------------


def _hooks() -> dict[str, int]:
    """Count every exec or import of a file's code in this process."""
    from rvm.runtime import kernels
    from rvm.runtime.loading import loader

    counts = {"exec": 0}

    def wrap(module, name):
        original = getattr(module, name)

        def counted(*args, **kwargs):
            counts["exec"] += 1
            return original(*args, **kwargs)

        setattr(module, name, counted)

    wrap(kernels, "_exec_source")
    wrap(loader, "exec_kernel_file")
    return counts


def _same(a, b) -> bool:
    if isinstance(a, (tuple, list)) or isinstance(b, (tuple, list)):
        if not (isinstance(a, (tuple, list)) and isinstance(b, (tuple, list))):
            return False
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind in "fc":
        return bool(np.allclose(a, b, rtol=1e-4, atol=1e-5, equal_nan=True))
    return bool(np.array_equal(a, b))


def check_file(path: str, job: dict, counts: dict[str, int]) -> tuple[str, str]:
    """(outcome, detail) of loading and running one file (in the worker)."""
    import rvm
    from rvm.errors import RVMError

    before = counts["exec"]
    data = np.load(job["args_file"])
    arrays = [data[f"arr_{i}"] for i in range(len(data.files))]
    args, expected = arrays[: job["nargs"]], arrays[job["nargs"] :]
    results = {}
    outcome, detail = "ran", ""
    try:
        ex = rvm.load_executable(path)
        if ex.trusted:
            return "code executions", "an untrusted file loaded as trusted"
        ex.as_text()
        print(json.dumps({"stage": "loaded"}), flush=True)  # a hang now is the program's
        for mode in MODES:
            try:
                results[mode] = rvm.VirtualMachine(ex, exec_mode=mode)[job["function"]](*args)
            except RVMError as err:
                outcome, detail = "clear errors", f"{type(err).__name__}: {str(err)[:120]}"
        if ex.content_hash() == job["hash"] and results:
            want = expected[0] if len(expected) == 1 else tuple(expected)
            if not all(_same(r, want) for r in results.values()):
                outcome, detail = "wrong results", "the seed's own program gave another result"
    except RVMError as err:
        outcome, detail = "clear errors", f"{type(err).__name__}: {str(err)[:120]}"
    except Exception as err:  # noqa: BLE001 - counted, with its type
        outcome, detail = "other exceptions", f"{type(err).__name__}: {str(err)[:200]}"
    values = list(results.values())
    if len(values) > 1 and not all(_same(v, values[0]) for v in values[1:]):
        outcome, detail = "wrong results", f"exec modes disagree: {sorted(results)}"
    if counts["exec"] != before or Path("CANARY_RAN").exists():
        Path("CANARY_RAN").unlink(missing_ok=True)
        outcome, detail = "code executions", "a file's code ran"
    return outcome, detail


def worker() -> None:
    import rvm  # noqa: F401  (imported before "ready": a slow start is not a hang)

    counts = _hooks()
    print(json.dumps({"stage": "ready"}), flush=True)
    for line in sys.stdin:
        job = json.loads(line)
        outcome, detail = check_file(job["path"], job, counts)
        print(json.dumps({"outcome": outcome, "detail": detail}), flush=True)


# -- the driver ----------------------------------------------------------------------------------


class Pool:
    """One worker subprocess at a time, restarted after a crash or a hang."""

    def __init__(self, scratch: Path, timeout: float) -> None:
        self.scratch, self.timeout = scratch, timeout
        self.env = {
            **os.environ,
            "RVM_CACHE_DIR": str(scratch / "rvm_cache"),
            "NUMBA_CACHE_DIR": str(scratch / "numba_cache"),
            "RVM_CONFIG_DIR": str(scratch / "config"),
            "PYTHONPATH": str(ROOT / "src"),
        }
        self.proc: subprocess.Popen | None = None

    def start(self) -> subprocess.Popen:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = proc = subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), "--worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                cwd=self.scratch / "work",
                env=self.env,
            )
            self.lines: queue.Queue[str] = queue.Queue()
            threading.Thread(target=self._read, args=(proc, self.lines), daemon=True).start()
            if self.lines.get() == "":  # "ready" (imports done), or the worker failed
                raise RuntimeError("the fuzz worker did not start")
        return self.proc

    @staticmethod
    def _read(proc: subprocess.Popen, lines: queue.Queue) -> None:
        for line in proc.stdout:
            lines.put(line)
        lines.put("")  # the worker ended

    def run(self, job: dict) -> tuple[str, str]:
        proc = self.start()
        proc.stdin.write(json.dumps(job) + "\n")
        proc.stdin.flush()
        loaded = False
        while True:
            try:
                line = self.lines.get(timeout=self.timeout)
            except queue.Empty:
                proc.kill()
                proc.wait()
                if loaded:
                    return "endless programs", f"loaded, then ran {self.timeout} s"
                return "hangs", f"no answer in {self.timeout} s"
            if not line:
                code = proc.wait()
                return "crashes", f"worker exited with {code}"
            got = json.loads(line)
            if got.get("stage") == "loaded":
                loaded = True
                continue
            return got["outcome"], got["detail"]

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)


def fuzz(files: int, seed: int, timeout: float, verbose: bool = False) -> dict:
    """Run the fuzzer; returns the counts (total and per seed) and the worst cases."""
    scratch = Path(tempfile.mkdtemp(prefix="rvm-fuzz-"))
    for sub in ("work", "files", "rvm_cache", "numba_cache", "config"):
        (scratch / sub).mkdir()
    seeds = build_seeds(scratch / "files")
    rng = random.Random(seed)
    names = list(seeds)
    total = dict.fromkeys(COLUMNS, 0)
    per_seed = {n: dict.fromkeys(COLUMNS, 0) for n in names}
    examples: dict[str, list] = {}
    pool = Pool(scratch, timeout)
    start = time.perf_counter()
    try:
        for i in range(files):
            name = names[i % len(names)]
            s = seeds[name]
            path = scratch / "files" / f"f{i}.rvmx"
            path.write_bytes(mutate(s["data"], rng))
            job = {k: s[k] for k in ("function", "args_file", "nargs", "hash")}
            outcome, detail = pool.run({**job, "path": str(path)})
            for counts in (total, per_seed[name]):
                counts["inputs"] += 1
                counts[outcome] += 1
            if outcome in ("ran", "clear errors"):
                path.unlink()  # the others stay in the scratch folder, to reproduce
            else:
                examples.setdefault(outcome, []).append([name, path.name, detail])
            if verbose and outcome not in ("ran", "clear errors"):
                print(f"{path.name} ({name}): {outcome}: {detail}", flush=True)
    finally:
        pool.close()
    writes = [  # the native mode's own module, generated by rvm from the bytecode, may be
        str(p.relative_to(scratch))  # cached; nothing a file carries may be
        for sub in ("rvm_cache", "numba_cache")
        for p in (scratch / sub).rglob("*")
        if p.is_file() and not _generated_by_rvm(p)
    ]
    return {
        "total": total,
        "per_seed": per_seed,
        "cache_writes": writes,
        "examples": {k: v[:10] for k, v in examples.items()},
        "seconds": time.perf_counter() - start,
        "scratch": str(scratch),
    }


def _generated_by_rvm(path: Path) -> bool:
    """Whether a cached file is the native exec mode's module (rvm's code generated from the
    file's bytecode; `rvm.runtime.modes.native`) or rvm's own library (`rvm.kernels`, whose
    modules Numba caches under `kernels_<hash>`), compiled here."""
    name = path.name
    return name.startswith(("n_", "native_support.", "rvm-native-library")) or (
        path.parent.name.startswith(("native_", "modes_", "kernels_")) and not name.startswith("k_")
    )


def table(result: dict) -> str:
    rows = [("seed", *COLUMNS)]
    for name, counts in result["per_seed"].items():
        rows.append((name, *(str(counts[c]) for c in COLUMNS)))
    rows.append(("total", *(str(result["total"][c]) for c in COLUMNS)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(row, widths)))
        for row in rows
    ]
    lines.insert(1, "-" * len(lines[0]))
    lines.append(f"cache writes: {len(result['cache_writes'])}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=600)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument(
        "--json", default=str(ROOT / "benchmarks" / "results" / "fuzz_executables.json")
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args()
    if args.worker:
        worker()
        return
    result = fuzz(args.files, args.seed, args.timeout, args.verbose)
    print(
        f"machine: {platform.node()} {platform.machine()} {platform.processor() or ''}, "
        f"python {platform.python_version()}; {result['seconds']:.0f} s"
    )
    print(table(result))
    result["machine"] = {
        "node": platform.node(),
        "machine": platform.machine(),
        "python": platform.python_version(),
    }
    result["command"] = " ".join(["python", "benchmarks/fuzz_executables.py", *sys.argv[1:]])
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=1))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
