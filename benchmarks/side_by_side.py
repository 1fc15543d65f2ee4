"""Two rvm trees measured side by side: the same benchmarks, interleaved, in subprocesses.

Run: ``python benchmarks/side_by_side.py OLD [NEW] [--rounds 2] [--only exec,models,load]``
(or ``--old OLD --new NEW``). ``OLD`` and ``NEW`` are checkouts (a folder with ``src/rvm``)
or source folders (a folder with ``rvm/``); ``NEW`` defaults to this checkout.

Each round runs every chosen benchmark once per tree, alternating the trees (old, new, then
new, old in the next round), so both see the same machine load. A tree's benchmarks run from
a copy of its own ``benchmarks/`` folder (each tree's scripts match its own API) beside a link
to its sources, in a subprocess whose ``PYTHONPATH`` is those sources; a script the tree lacks
(or all of them, for a bare source folder) is the new tree's, said so when staged. Results
are read from the JSON the script writes there. Benchmarks:

- ``exec``: ``exec_modes.py --quick`` (call times per program, backend and mode, and the
  native section);
- ``models``: ``models.py --only squeezenet,resnet50 --no-first`` (cold compile CPU seconds,
  warm seconds, ms per call);
- ``load``: ``load_time.py --repeat 3`` (load + first call of saved executables).

The table gives, per timing both trees report, the median over rounds of each and new/old.
The machine is shared: read ratios near 1 within the noise the rounds show (``spread``: the
largest over the smallest of a tree's rounds). Writes ``benchmarks/results/side_by_side.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

BENCHES = {
    "exec": ("exec_modes.py", ["--quick"], ["exec_modes", "exec_modes_native"]),
    "models": (
        "models.py",
        ["--only", "squeezenet,resnet50", "--no-first"],
        ["models"],
    ),
    "load": ("load_time.py", ["--repeat", "3"], ["load_time"]),
}
# The fields naming a row of a list of results (a program, its kernels, its mode...).
_LABELS = ("program", "name", "model", "kernels", "backend", "mode", "exec_mode")
# Leaves that are timings (seconds, milliseconds, microseconds, CPU): the rest are counts.
_TIMING = re.compile(r"(_us|_ms|_s|ms|seconds|cpu|wall|time|median)[^/]*$", re.IGNORECASE)


def _sources(tree: Path) -> Path:
    """The folder holding the ``rvm`` package of ``tree`` (a checkout or a source folder)."""
    for src in (tree / "src", tree):
        if (src / "rvm" / "__init__.py").is_file():
            return src.resolve()
    raise SystemExit(f"{tree} holds neither src/rvm nor rvm: not an rvm tree")


def _stage(tree: Path, tmp: Path, label: str, fallback: Path) -> Path:
    """A folder holding a copy of ``tree``'s benchmarks (the scripts it lacks from
    ``fallback``'s) and a link to its sources."""
    home = tmp / label
    ignore = shutil.ignore_patterns("results", "__pycache__")
    shutil.copytree(fallback / "benchmarks", home / "benchmarks", ignore=ignore)
    src = _sources(tree)
    own = (src.parent if src.name == "src" else src) / "benchmarks"  # a checkout's scripts
    if own.is_dir():
        shutil.copytree(own, home / "benchmarks", ignore=ignore, dirs_exist_ok=True)
    borrowed = [s for s, _, _ in BENCHES.values() if not (own / s).is_file()]
    if borrowed:
        print(f"  {label}: runs the new tree's {', '.join(sorted(set(borrowed)))}", flush=True)
    (home / "src").symlink_to(src)
    return home


def _flatten(value: object, prefix: str = "") -> dict[str, float]:
    if isinstance(value, dict):
        out: dict[str, float] = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}/{k}" if prefix else str(k)))
        return out
    if isinstance(value, list):
        out = {}
        for i, v in enumerate(value):
            label = str(i)
            if isinstance(v, dict):
                keys = [str(v[k]) for k in _LABELS if isinstance(v.get(k), str)]
                label = ":".join(keys) or label
            out.update(_flatten(v, f"{prefix}/{label}"))
        return out
    if isinstance(value, bool) or not isinstance(value, int | float):
        return {}
    return {prefix: float(value)}


def _run(home: Path, bench: str) -> dict[str, float]:
    script, args, results = BENCHES[bench]
    env = {**os.environ, "PYTHONPATH": str(home / "src")}
    cmd = [sys.executable, str(home / "benchmarks" / script), *args]
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=home, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(
            f"{home.name} {script} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
        )
    print(f"  {home.name:4} {bench}: {time.perf_counter() - started:.0f} s", flush=True)
    out: dict[str, float] = {}
    for name in results:
        path = home / "benchmarks" / "results" / f"{name}.json"
        if path.exists():
            flat = _flatten(json.loads(path.read_text()))
            out.update({f"{bench}:{name}/{k}": v for k, v in flat.items() if _TIMING.search(k)})
            path.unlink()
    return out


def _report(runs: dict[str, list[dict[str, float]]], opts: argparse.Namespace) -> None:
    """Prints the table of the rounds so far and writes it (after every round: a run cut
    short keeps what it measured)."""
    keys = sorted(set(runs["old"][0]) & set(runs["new"][0]))
    rows = []
    for k in keys:
        old = [r[k] for r in runs["old"] if k in r]
        new = [r[k] for r in runs["new"] if k in r]
        mo, mn = statistics.median(old), statistics.median(new)
        spread = max(max(old) / min(old), max(new) / min(new)) if min(old + new) > 0 else 0.0
        rows.append(
            {"metric": k, "old": mo, "new": mn, "ratio": mn / mo if mo else 0.0, "spread": spread}
        )
    width = max((len(r["metric"]) for r in rows), default=10)
    print(
        f"\n{_machine()}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs "
        "(shared machine)"
    )
    print(f"{'metric':{width}}  {'old':>10}  {'new':>10}  {'new/old':>7}  {'spread':>6}")
    for r in rows:
        print(
            f"{r['metric']:{width}}  {r['old']:10.4g}  {r['new']:10.4g}  {r['ratio']:7.2f}  "
            f"{r['spread']:6.2f}"
        )
    ratios = [r["ratio"] for r in rows if r["ratio"] > 0]
    if ratios:
        print(
            f"\ngeometric mean of new/old over {len(ratios)} timings: "
            f"{statistics.geometric_mean(ratios):.3f}"
        )
    out = ROOT / "benchmarks" / "results" / "side_by_side.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "old": str(opts.old),
        "new": str(opts.new),
        "rounds": len(runs["old"]),
        "rows": rows,
        "load_average": os.getloadavg()[0],
        "machine": _machine(),
    }
    out.write_text(json.dumps(payload, indent=2))
    print(f"wrote {out}", flush=True)


def _machine() -> str:
    return f"{platform.node()} {platform.machine()} {platform.processor() or platform.system()}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path, nargs="?", help="the tree measured as before")
    parser.add_argument("new", type=Path, nargs="?", help="the tree measured as after")
    parser.add_argument("--old", dest="old_opt", type=Path, help="the same as OLD")
    parser.add_argument("--new", dest="new_opt", type=Path, help="the same as NEW")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--only", default="exec,load,models", help="of " + ",".join(BENCHES))
    opts = parser.parse_args()
    opts.old = opts.old_opt or opts.old
    opts.new = opts.new_opt or opts.new or ROOT
    if opts.old is None:
        parser.error("give the old tree (OLD or --old)")
    benches = opts.only.split(",")
    if set(benches) - set(BENCHES):
        parser.error(f"--only takes some of {', '.join(BENCHES)}; not {benches}")
    runs: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
    with tempfile.TemporaryDirectory(prefix="rvm-side-") as tmp:
        homes = {
            "old": _stage(opts.old, Path(tmp), "old", ROOT),
            "new": _stage(opts.new, Path(tmp), "new", ROOT),
        }
        for r in range(opts.rounds):
            order = ("old", "new") if r % 2 == 0 else ("new", "old")
            print(f"round {r + 1}/{opts.rounds}", flush=True)
            got = {"old": {}, "new": {}}
            for bench in benches:
                for label in order:
                    got[label].update(_run(homes[label], bench))
            for label in got:
                runs[label].append(got[label])
            _report(runs, opts)


if __name__ == "__main__":
    main()
