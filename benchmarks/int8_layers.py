"""Layer by layer at one thread: where int8 gains less than 1.8x over f32, in rvm and in ORT.

Run: ``python benchmarks/int8_layers.py [--only squeezenet,resnet50] [--runs 20] [--alone 10]
[--reduce-range auto|on|off] [--name int8_layers]``.

Per model (random weights, `common.light_model_files`, quantized by ORT's ``quantize_static``
as `precision_int8.py` does), in one process, at one thread: rvm's f32 and int8 kernels each
in their model (`in_model.rvm_calls`: the calling thread's CPU, least over ``--runs`` calls,
and least alone on the same arguments: loaded, medians swing up to 2x), and ONNX Runtime's
nodes of the f32 and the QDQ model (`op_kinds.ort_profile`, least time over ``--runs``).
Convolutions are paired across the four runs by their geometry (input channels and size,
output channels, kernel size, output size; the n-th of a geometry with the n-th); every other
kernel or node (pools, quantize and dequantize, residual adds, the head) is summed into one
``other`` row per runtime. Per layer: rvm f32 and int8 (in the model), their ratio, ORT's f32
and int8 nodes and their ratio, and ``lost``: the time rvm int8 takes beyond f32 / 1.8 (issue
29's goal), which sorts the table. ORT's own ratio bounds what 1.8x means on the machine.
``--table FILE`` prints a results file's tables again. Writes
``benchmarks/results/NAME.json``.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import tempfile
from pathlib import Path

from common import light_model_files, machine, machine_line, write_results

# isort: split
import onnx
from in_model import rvm_calls
from op_kinds import ort_profile

import rvm
from rvm.testing.onnx_models import compare
from rvm.testing.quantized_models import ort_saturates, quantize_with_ort

GOAL = 1.8  # rvm f32 / rvm int8, issue 29
INT8_TOLERANCE = 5e-2  # rvm int8 logits against ORT int8's, relative to the largest


def _f32_weight(shape: list[int]) -> tuple[int, int] | None:
    """Output channels and kernel height of an f32 convolution's weight operand: OIHW, the
    direct method's packed (1, O / 16, KH, KW, I, 16) or Winograd's (16, O, I) for 3 x 3."""
    if len(shape) == 4:
        return shape[0], shape[2]
    if len(shape) == 6:
        return shape[1] * shape[5], shape[2]
    if len(shape) == 3 and shape[0] == 16:
        return shape[1], 3
    return None


def rvm_layer(row: dict) -> tuple | None:
    """The geometry of a convolution kernel call (None for other kernels)."""
    kernel, shapes = row["kernel"], [s for s in row["shapes"] if s is not None]
    if "conv" not in kernel or len(shapes) < 3:
        return None
    x, w = shapes[0], shapes[1]
    y = [s for s in shapes if len(s) == 4][-1]
    if "qconv" in kernel:  # OHWI
        o, kh = w[0], w[1]
    else:
        got = _f32_weight(w)
        if got is None:
            return None
        o, kh = got
    return (x[1], x[2], o, kh, y[2])


def ort_rows(path: Path, inputs: list, runs: int) -> list[dict]:
    """ORT's nodes at one thread in the order they ran: op, least time, conv geometry."""
    events, best = ort_profile(path, inputs, runs, 1)
    rows: dict[str, dict] = {}
    for e in events:
        name = e.get("name")
        if e.get("cat") != "Node" or name not in best or name in rows:
            continue
        args = e.get("args", {})
        ins = [next(iter(s.values())) for s in args.get("input_type_shape", [])]
        outs = [next(iter(s.values())) for s in args.get("output_type_shape", [])]
        four = [s for s in ins if len(s) == 4]
        layer = None
        if "Conv" in str(args.get("op_name")) and four and outs:
            x, y = four[0], outs[0]
            if len(four) >= 2:  # a float Conv: NCHW, its OIHW weight given
                layer = (x[1], x[2], four[1][0], four[1][2], y[2])
            else:  # QLinearConv: its weight prepacked, so no kernel size (`named`)
                layer = ((x[1], x[2], y[1], y[2]), (x[3], x[1], y[3], y[1]))  # NCHW, NHWC
        rows[name] = {"node": name, "op": args.get("op_name"), "us": best[name], "layer": layer}
    return list(rows.values())


def named(quantized: list[dict], floats: list[dict]) -> None:
    """Gives ORT's QLinearConv nodes the geometry of its float Conv nodes (their weights are
    prepacked, so their profile has no kernel size): the n-th QLinearConv of a class (input
    channels and size, output channels and size, read as NCHW or NHWC) takes the n-th float
    Conv of that class (the two sessions order a block's branches differently); a run of
    consecutive ones of a class (a fire module's 1 x 1 and 3 x 3 expansions, run in either
    order) is paired by time against kernel size, the larger kernel the longer node."""
    pending: dict[tuple, collections.deque] = collections.defaultdict(collections.deque)
    for r in floats:
        if r["layer"] is not None:
            layer = r["layer"]
            pending[(layer[0], layer[1], layer[2], layer[4])].append(layer)

    def of(row: dict) -> tuple | None:
        return next((c for c in row["layer"] if pending.get(c)), None)

    rows = [r for r in quantized if r["layer"] is not None and len(r["layer"]) == 2]
    i = 0
    while i < len(rows):
        cls, end = of(rows[i]), i + 1
        while cls is not None and end < len(rows) and of(rows[end]) == cls:
            end += 1
        window = rows[i:end]
        taken = [pending[cls].popleft() for _ in window if cls is not None and pending[cls]]
        by_time = sorted(window[: len(taken)], key=lambda r: r["us"])
        for r, geometry in zip(by_time, sorted(taken, key=lambda c: c[3]), strict=True):
            r["layer"] = geometry
        for r in window[len(taken) :]:
            r["layer"] = None
        i = end


def _keyed(rows: list[dict], key, time: str) -> tuple[dict, float, dict]:  # type: ignore[no-untyped-def]
    """Conv rows by (geometry, occurrence) -> time; the others' sum and their times by name."""
    seen: collections.Counter = collections.Counter()
    convs, others = {}, collections.defaultdict(float)
    for r in rows:
        layer = key(r)
        if layer is None or isinstance(layer[0], (list, tuple)):  # an unpaired QLinearConv
            others[r.get("kernel") or r.get("op")] += r[time]
            continue
        layer = tuple(layer)  # a list when read back from JSON
        convs[(*layer, seen[layer])] = r[time]
        seen[layer] += 1
    return convs, sum(others.values()), dict(others)


def layers(name: str, runs: int, alone: int, reduce_range: bool, tmp: Path) -> dict:
    path, _, model, inputs = light_model_files(name, tmp)
    qmodel = quantize_with_ort(model, reduce_range=reduce_range)
    qpath = tmp / f"{name}_int8.onnx"
    onnx.save(qmodel, qpath)

    def loose(got: list, want: list) -> None:
        result = compare(got[-1], want[-1])
        if result.rel_err > INT8_TOLERANCE or not result.top1_equal:
            raise AssertionError(f"{name} int8: logits differ from ORT int8's: {result}")

    runs_of = {
        "rvm_f32": rvm_calls(path, model, inputs, runs, alone),
        "rvm_int8": rvm_calls(qpath, qmodel, inputs, runs, alone, check=loose),
        "ort_f32": ort_rows(path, inputs, runs),
        "ort_int8": ort_rows(qpath, inputs, runs),
    }
    named(runs_of["ort_int8"], runs_of["ort_f32"])
    return {**tabulate(runs_of), "runs": runs_of}


def tabulate(runs_of: dict) -> dict:
    """The layer table of one model's four runs (`layers`), sorted by time lost."""
    keyed = {
        k: _keyed(v, rvm_layer, "in_model_min_us") if k.startswith("rvm") else
        _keyed(v, lambda r: r["layer"], "us")
        for k, v in runs_of.items()
    }  # fmt: skip
    alone_int8 = _keyed(runs_of["rvm_int8"], rvm_layer, "alone_min_us")[0]
    table = []
    for layer in keyed["rvm_int8"][0]:
        row = {"layer": list(layer), "rvm_int8_alone_us": alone_int8[layer]}
        for k, (convs, _, _) in keyed.items():
            row[f"{k}_us"] = convs.get(layer)
        table.append(row)
    table.append({"layer": "other", **{f"{k}_us": v[1] for k, v in keyed.items()}})
    for row in table:
        f, q = row["rvm_f32_us"], row["rvm_int8_us"]
        row["rvm_ratio"] = f / q if f and q else None
        row["lost_us"] = q - f / GOAL if f and q else None
        of, oq = row["ort_f32_us"], row["ort_int8_us"]
        row["ort_ratio"] = of / oq if of and oq else None
    table.sort(key=lambda r: -(r["lost_us"] or 0.0))
    totals = {k: sum(r[f"{k}_us"] or 0.0 for r in table) for k in keyed}
    return {"layers": table, "totals_us": totals, "others": {k: v[2] for k, v in keyed.items()}}


def _fmt(v: float | None, spec: str) -> str:
    return format(v, spec) if v is not None else format("-", spec[: spec.index(".")] + "s")


def text(name: str, got: dict) -> str:
    head = (
        f"{'layer (cin, hw, cout, k, hw out, n)':38}{'f32':>8}{'int8':>8}{'ratio':>7}"
        f"{'lost':>8}{'ORT f32':>9}{'ORT int8':>9}{'ratio':>7}{'alone':>8}"
    )
    lines = [f"\n{name}: one thread, CPU us (lost: rvm int8 beyond f32 / {GOAL})", head]
    for r in got["layers"]:
        lines.append(
            f"{str(r['layer']):38}{_fmt(r['rvm_f32_us'], '8.0f')}{_fmt(r['rvm_int8_us'], '8.0f')}"
            f"{_fmt(r['rvm_ratio'], '7.2f')}{_fmt(r['lost_us'], '8.0f')}"
            f"{_fmt(r['ort_f32_us'], '9.0f')}{_fmt(r['ort_int8_us'], '9.0f')}"
            f"{_fmt(r['ort_ratio'], '7.2f')}{_fmt(r.get('rvm_int8_alone_us'), '8.0f')}"
        )
    t = got["totals_us"]
    lines.append(
        f"{'total':38}{t['rvm_f32']:8.0f}{t['rvm_int8']:8.0f}{t['rvm_f32'] / t['rvm_int8']:7.2f}"
        f"{t['rvm_int8'] - t['rvm_f32'] / GOAL:8.0f}{t['ort_f32']:9.0f}{t['ort_int8']:9.0f}"
        f"{t['ort_f32'] / t['ort_int8']:7.2f}"
    )
    for k in ("rvm_int8", "ort_int8"):
        parts = sorted(got["others"][k].items(), key=lambda kv: -kv[1])
        lines.append(f"other {k}: " + ", ".join(f"{n} {us:.0f}" for n, us in parts[:8]))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="squeezenet,resnet50", help="comma-separated models")
    parser.add_argument("--runs", type=int, default=20, help="runs in the model, each runtime")
    parser.add_argument("--alone", type=int, default=10, help="calls of each kernel alone")
    parser.add_argument("--reduce-range", choices=("auto", "on", "off"), default="auto")
    parser.add_argument("--name", default="int8_layers", help="results file name, no suffix")
    parser.add_argument("--table", help="print the tables of this results file, run nothing")
    args = parser.parse_args()
    if args.table:
        saved = json.loads(Path(args.table).read_text())
        for name, got in saved["models"].items():
            print(text(name, {**tabulate(got["runs"]), "runs": got["runs"]}))
        print(f"load {saved.get('load')}")
        return
    if min(args.runs, args.alone) < 1:
        parser.error("--runs and --alone must be at least 1")
    rvm.set_num_threads(1)
    print(machine_line())
    bits = ort_saturates() if args.reduce_range == "auto" else args.reduce_range == "on"
    models = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only.split(","):
            models[name] = layers(name, args.runs, args.alone, bits, Path(tmp))
            print(text(name, models[name]), flush=True)
    load = os.getloadavg()
    print(f"load {load}")
    payload = {"machine": machine(), "threads": 1, "weight_bits": 7 if bits else 8, "load": load}
    write_results(args.name, {**payload, "runs": args.runs, "alone": args.alone, "models": models})


if __name__ == "__main__":
    main()
