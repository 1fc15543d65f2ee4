"""Per convolution layer of a light CNN, rvm against ONNX Runtime: where rvm's convs lose.

Run: ``python benchmarks/conv_layers.py [--only resnet50,vgg19,inception_v2] [--top 10]
[--repeat 30] [--threads 0] [--batch 1]``.

Per model (random weights, `common.light_model_files`), in one process: rvm's compiled mode
profiled per kernel (`VirtualMachine.profile`, its outputs first checked against ORT's) and ORT
(default session options) profiled per node (``enable_profiling``). rvm's kernels are
deduplicated (one kernel serves every layer of its shapes), so layers are matched by their
shapes: input, output and weight (kernel size, input channels per group); each side's time of
a layer is the minimum over ``--repeat`` runs of the kernel's (the node's) time, summed over
the layers of that shape (ORT's ``Conv`` and ``FusedConv`` nodes; rvm's kernels that call a
convolution). Prints the ``--top`` layers by absolute loss (rvm - ORT): shapes, how many,
rvm's method (`rvm.kernels.convmethod.method`; ``direct-packed`` for a weight packed at build time,
`rvm.op.conv2d_packed`; ``winograd-U`` for one transformed at build time,
`rvm.op.conv2d_winograd`), microseconds and GFLOP/s of both; then the models' conv totals.
Writes ``benchmarks/results/conv_layers.json`` (``--name``).
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
from pathlib import Path

from common import light_model_files, machine, machine_line, write_results

# isort: split
from op_kinds import ort_profile, rvm_profile

import rvm
from rvm.kernels import convmethod
from rvm.testing.onnx_models import run_ort

METHODS = ("pointwise", "strided", "depthwise", "direct", "taps", "im2col", "winograd")
"""`rvm.kernels.convmethod.method`'s results by value (`convmethod.POINTWISE`...)."""

_SHAPE = re.compile(r"float32\[([0-9, ]*)\]")


def _dims(text: str) -> list[tuple[int, ...]]:
    """The array shapes in a profile row's shape text, ``(float32[1, 64, 56, 56], ...)``."""
    return [tuple(int(d) for d in m.split(",")) for m in _SHAPE.findall(text)]


def rvm_layers(path: Path, inputs: list, repeat: int, want: list) -> dict[tuple, dict]:
    """rvm's compiled mode on ``path``: per layer shape (x, out, kh, kw, cg) its summed
    minimum kernel time (us), calls, kernel names and method."""
    report, best = rvm_profile(path, inputs, repeat, want)
    layers: dict[tuple, dict] = {}
    for row in report.rows:
        if "conv2d" not in row["name"] or not row["shapes"]:
            continue
        x, w, *rest = _dims(row["shapes"][0])
        if len(x) != 4:
            continue  # conv1d
        packed = "conv2d_packed" in row["name"]
        transformed = len(w) == 3  # Winograd's weight transformed at build time, (16, o, c)
        if transformed:
            kh, kw, cg = 3, 3, w[2]
        else:
            kh, kw, cg = (w[2], w[3], w[4]) if packed else (w[2], w[3], w[1])
        out = rest[-1]
        key = (x, out, kh, kw, cg)
        layer = layers.setdefault(key, {"us": 0.0, "calls": 0, "kernels": []})
        layer["us"] += best[row["name"]]
        layer["calls"] += row["calls"]
        layer["kernels"].append(row["name"])
        layer["method"] = (
            "direct-packed" if packed else "winograd-U" if transformed else _method(key)
        )
    return layers


def _method(key: tuple) -> str:
    """The method `rvm.kernels.conv` takes for a layer of shape ``key`` (a 1x1 layer is taken
    as unpadded: the models' are)."""
    (_, c, ih, iw), (_, o, oh, ow), kh, kw, cg = key
    sh, sw = max(1, ih // oh), max(1, iw // ow)
    unpadded = kh * kw == 1
    how = convmethod.method.py_func(
        c, o, c // cg, kh, kw, sh, sw, 1, 1, oh, ow, ih, iw, unpadded, True
    )
    return METHODS[how]


def ort_layers(path: Path, inputs: list, repeat: int, threads: int | None) -> dict[tuple, dict]:
    """ORT on ``path``: per layer shape its summed minimum Conv node time (us) and nodes."""
    events, best = ort_profile(path, inputs, repeat, threads)
    key_of: dict[str, tuple] = {}
    for e in events:
        args = e.get("args", {})
        if e.get("name") not in best or args.get("op_name") not in ("Conv", "FusedConv"):
            continue
        x, w = (tuple(next(iter(s.values()))) for s in args["input_type_shape"][:2])
        out = tuple(next(iter(args["output_type_shape"][0].values())))
        if len(x) == 4:
            key_of[e["name"]] = (x, out, w[2], w[3], w[1])
    layers: dict[tuple, dict] = {}
    for node, key in key_of.items():
        layer = layers.setdefault(key, {"us": 0.0, "nodes": 0})
        layer["us"] += best[node]
        layer["nodes"] += 1
    return layers


def gflop(key: tuple, calls: int) -> float:
    """The GFLOP of ``calls`` convolutions of shape ``key`` (a multiply-add is 2)."""
    (n, _, _, _), (_, o, oh, ow), kh, kw, cg = key
    return 2.0 * calls * n * o * oh * ow * cg * kh * kw / 1e9


def compare(model: str, mine: dict, theirs: dict) -> list[dict]:
    """The layers of ``model`` found on both sides, each with both times and rates."""
    rows = []
    for key in mine.keys() & theirs.keys():
        a, b = mine[key], theirs[key]
        work = gflop(key, b["nodes"])
        (_, c, ih, iw), (_, o, oh, ow), kh, kw, cg = key
        rows.append({
            "model": model,
            "layer": f"{c}x{ih}x{iw} -> {o}x{oh}x{ow} k{kh}x{kw} g{c // cg}",
            "count": b["nodes"],
            "method": a["method"],
            "rvm_us": a["us"],
            "ort_us": b["us"],
            "loss_us": a["us"] - b["us"],
            "rvm_gflops": work / (a["us"] / 1e6) if a["us"] else 0.0,
            "ort_gflops": work / (b["us"] / 1e6) if b["us"] else 0.0,
            "kernels": a["kernels"],
        })  # fmt: skip
    return rows


def lines_of(rows: list[dict], top: int) -> list[str]:
    """The table of the ``top`` layers by loss."""
    head = (f"{'model':13}{'layer':36}{'n':>3} {'method':14}{'rvm us':>9}{'ORT us':>9}"
            f"{'loss':>8}{'rvm GF/s':>10}{'ORT GF/s':>10}")  # fmt: skip
    out = [head]
    for r in sorted(rows, key=lambda r: -r["loss_us"])[:top]:
        out.append(
            f"{r['model']:13}{r['layer']:36}{r['count']:>3} {r['method']:14}{r['rvm_us']:>9.0f}"
            f"{r['ort_us']:>9.0f}{r['loss_us']:>8.0f}{r['rvm_gflops']:>10.1f}"
            f"{r['ort_gflops']:>10.1f}"
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="resnet50,vgg19,inception_v2", help="models")
    parser.add_argument("--threads", type=int, default=0, help="threads of both (0: defaults)")
    parser.add_argument("--repeat", type=int, default=30, help="profiled runs of each")
    parser.add_argument("--batch", type=int, default=1, help="images a call")
    parser.add_argument("--top", type=int, default=10, help="layers listed")
    parser.add_argument("--name", default="conv_layers", help="results file name, no suffix")
    args = parser.parse_args()
    if args.threads:
        rvm.set_num_threads(args.threads)
    lines = [machine_line(), f"threads: {args.threads or 'defaults'}; batch {args.batch}"]
    rows: list[dict] = []
    totals = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only.split(","):
            path, _, model, inputs = light_model_files(name, Path(tmp), args.batch)
            mine = rvm_layers(path, inputs, args.repeat, run_ort(model, inputs))
            theirs = ort_layers(path, inputs, args.repeat, args.threads or None)
            rows += compare(name, mine, theirs)
            unmatched = len(mine.keys() ^ theirs.keys())
            rvm_us = sum(v["us"] for v in mine.values())
            ort_us = sum(v["us"] for v in theirs.values())
            totals.append(f"{name}: conv rvm {rvm_us:.0f} us, ORT {ort_us:.0f} us "
                          f"({rvm_us / ort_us:.2f}x); unmatched shapes {unmatched}")  # fmt: skip
    lines += lines_of(rows, args.top) + totals + [f"load {os.getloadavg()}"]
    print("\n".join(lines))
    write_results(args.name, {"machine": machine(), "threads": args.threads,
                              "batch": args.batch, "layers": rows})  # fmt: skip


if __name__ == "__main__":
    main()
