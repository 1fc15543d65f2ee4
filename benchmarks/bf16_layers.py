"""A light CNN's layers in bf16, rvm beside OpenVINO's default precision, taken in turns: which
layers make ``precision="bf16"`` slower than OpenVINO (issue 29's speed goal).

Run: ``python benchmarks/bf16_layers.py [--only resnet50,inception_v2] [--runs 20]
[--threads N] [--batch 1]`` (OpenVINO: ``pip install rvm[bench]``).

Per model (random weights, `common.light_model_files`, ``--batch`` images a call), in one
process, rounds of two turns (rvm, OpenVINO; their order alternating), each turn after a 50 ms
pause and one untimed call: one plain call timed (the model's wall), then calls timed per
layer, back to back, the first dropped (right after a pause a model's first layers find the
other thread asleep and their input out of cache): rvm's ``rvm.compile(mod,
precision="bf16")`` in the compiled mode with a callback around each kernel
(`VirtualMachine.set_instrument`, the wall clock), three calls; OpenVINO's default precision
(bf16 where the CPU has AVX512-BF16) in a compiled model of its own with its counters on
(``PERF_COUNT``; each node's ``real_time``), two calls. Both at default threads, or
``--threads N`` for both (rvm's `set_num_threads`, OpenVINO's ``INFERENCE_NUM_THREADS``).
Outputs are checked first: rvm bf16 and OpenVINO within 5e-2 of ONNX Runtime's f32 logits.

Layers are paired by geometry (`thread_layers.rvm_key`; OpenVINO's node by its runtime
model's input and weight shapes): a row is a kind, the input's channels and size, the kernel's
size and the output's size, its calls' times summed (microseconds, medians over the rounds),
``n`` the calls a run on each side, ``d`` rvm's time less OpenVINO's, ``r`` their ratio, and
OpenVINO's kernels (``exec_type``: ``brgconv_avx512_1x1_bf16``...). Rows of one side only are
what the other does not do or fuses (or a geometry read wrong: rvm's convolutions that pass
activations in bf16 pair planes are keyed by the image a plane holds, `image_shape`):
OpenVINO's reorders into its blocked layouts, its
activations fused into convolutions (not run), rvm's slices of merged 1x1 convolutions. Rows
sorted by ``d``, the largest loss first. Writes ``benchmarks/results/bf16_layers.json``
(``--name``).
"""

from __future__ import annotations

import argparse
import collections
import time
from pathlib import Path
from typing import Any

from common import light_model_files
from thread_layers import kernel_recorder, run_models, rvm_key

# isort: split
import numpy as np
from model_child import as_outputs, check_rounded

import rvm
from rvm.testing.onnx_models import run_ort

SETTLE_S = 0.05  # a turn's pause before its untimed call
INSTRUMENTED = 3  # rvm's instrumented calls a turn, back to back; the first is dropped


def image_shape(a: Any) -> tuple[int, ...]:
    """An rvm kernel argument's shape, a bf16 pair plane's as the image it holds: ``(n, c2, hp,
    wp)`` int32 words, channel pairs of a square image of size ``s`` padded by ``p`` for a
    stride-1 convolution, is ``hp = s + 2 p + 1`` rows (one more the kernel over-reads) of ``wp
    = s + p`` words (`rvm.kernels.bf16planes`: a row borrows the next one's left padding), so
    ``s = 2 wp - hp + 1``. A plane laid out as positions by channel pairs, ``(n, hp, wp, c2)``
    (`rvm.op.bf16.LAYOUTS`: channels in 32s, what AMX's turned walk reads and writes), is told
    apart by its shape: its rows and words 1 to 4 apart (``p + 1``) where a pair plane's are
    not, its pairs a multiple of 16."""
    shape = tuple(getattr(a, "shape", ()))
    if getattr(a, "dtype", None) != np.int32 or len(shape) != 4:
        return shape
    n, c2, hp, wp = shape
    if 1 <= c2 - hp <= 4 and not 1 <= hp - wp <= 4 and wp % 16 == 0:  # positions
        n, hp, wp, c2 = shape
    return (n, 2 * c2, 2 * wp - hp + 1, 2 * wp - hp + 1)


def ov_key(node: Any) -> tuple:
    """An OpenVINO runtime node's row (`thread_layers.rvm_key`'s for the same layer)."""
    kind = node.get_rt_info()["layerType"].astype(str)
    shapes = [node.input(i).get_partial_shape() for i in range(node.get_input_size())]
    shapes = [tuple(d.get_length() for d in s) if s.is_static else () for s in shapes]
    out = node.get_output_partial_shape(0) if node.get_output_size() else None
    out_h = out[2].get_length() if out is not None and out.is_static and len(out) > 2 else 0
    if kind == "Convolution" and len(shapes) > 1 and len(shapes[1]) >= 4:
        x, w = shapes[0], shapes[1]
        return ("conv", x[1], x[2], w[-2], out_h)
    if kind == "Pooling" and shapes and len(shapes[0]) == 4:
        return ("pool", shapes[0][1], shapes[0][2], out_h)
    return (kind,)


def profile(name: str, runs: int, threads: int, tmp: Path, batch: int = 1) -> dict:
    """Model ``name``'s rows and plain walls (see the module docstring)."""
    import openvino as ov

    path, _, model, inputs = light_model_files(name, tmp, batch)
    vm = rvm.VirtualMachine(
        rvm.compile(rvm.from_onnx(str(path)), precision="bf16"), exec_mode="compiled"
    )
    f = vm["main"]
    core = ov.Core()
    config = {"INFERENCE_NUM_THREADS": threads} if threads else {}
    plain = core.compile_model(str(path), "CPU", config).create_infer_request()
    counted_model = core.compile_model(str(path), "CPU", {**config, "PERF_COUNT": "YES"})
    counted = counted_model.create_infer_request()
    want = run_ort(model, inputs)[-1]
    for side, got in (("rvm bf16", as_outputs(f(*inputs))[-1]),
                      ("OpenVINO", list(plain.infer(inputs).values())[-1])):  # fmt: skip
        check_rounded(f"{name} ({side})", [got], [want])
    keys = {n.get_friendly_name(): ov_key(n) for n in counted_model.get_runtime_model().get_ops()}
    edge, calls = kernel_recorder(image_shape)
    walls: dict[str, list[float]] = collections.defaultdict(list)
    per_call: dict[int, list[int]] = collections.defaultdict(list)
    per_node: dict[str, list[float]] = collections.defaultdict(list)
    node_info: dict[str, tuple[tuple, str]] = {}
    turns = ["rvm", "ov"]
    if threads:
        rvm.set_num_threads(threads)
    for r in range(runs + 1):  # the first round warms up
        for side in turns if r % 2 == 0 else turns[::-1]:
            run = (lambda: f(*inputs)) if side == "rvm" else (lambda: plain.infer(inputs))
            time.sleep(SETTLE_S)
            run()
            begin = time.perf_counter_ns()
            run()
            wall = time.perf_counter_ns() - begin
            if side == "rvm":  # back to back, as OpenVINO's two counted calls
                vm.set_instrument(edge)
                taken = []
                for _ in range(INSTRUMENTED):
                    calls.clear()
                    f(*inputs)
                    taken.append([took for _, _, took in calls])
                vm.set_instrument(None)
            else:  # the plain request's threads may spin on: a pause, one call untimed
                time.sleep(SETTLE_S)
                counted.infer(inputs)
                counted.infer(inputs)
            if r == 0:
                continue
            walls[side].append(wall / 1e6)
            if side == "rvm":
                for run in taken[1:]:  # the first after a pause, as OpenVINO's
                    for i, took in enumerate(run):
                        per_call[i].append(took)
            else:
                for p in counted.get_profiling_info():
                    if p.status.name == "EXECUTED":
                        per_node[p.node_name].append(p.real_time.total_seconds() * 1e6)
                        key = keys.get(p.node_name, (p.node_type,))
                        node_info[p.node_name] = (key, p.exec_type)
    rows: dict[tuple, dict] = collections.defaultdict(
        lambda: {
            "rvm": 0.0,
            "ov": 0.0,
            "rvm_n": 0,
            "ov_n": 0,
            "kernels": set(),
            "ov_kernels": set(),
        }  # fmt: skip
    )
    for i, (kernel, shapes, _) in enumerate(calls):
        key = rvm_key(kernel, shapes)
        row = rows[("pool", *key[1:]) if key[0] in ("maxpool", "avgpool") else key]
        row["rvm"] += float(np.median(per_call[i])) / 1e3
        row["rvm_n"] += 1
        row["kernels"].add(kernel)
    for node, ts in per_node.items():
        key, exec_type = node_info[node]
        row = rows[key]
        row["ov"] += float(np.median(ts))
        row["ov_n"] += 1
        row["ov_kernels"].add(exec_type)
    out = []
    for key, row in rows.items():
        named = {"key": [str(v) for v in key], "kernels": sorted(row["kernels"]),
                 "ov_kernels": sorted(row["ov_kernels"])}  # fmt: skip
        out.append({**row, **named, "d": row["rvm"] - row["ov"]})
    out.sort(key=lambda r: -r["d"])
    medians = {f"{side}_ms": float(np.median(v)) for side, v in walls.items()}
    return {"rows": out, "walls": medians}


def table(name: str, result: dict) -> str:
    w = result["walls"]
    lines = [
        f"\n{name}: plain walls, medians (ms): rvm bf16 {w['rvm_ms']:.2f}, OpenVINO default "
        f"{w['ov_ms']:.2f}; rvm/OpenVINO {w['rvm_ms'] / w['ov_ms']:.3f}",
        f"{'row':28s}{'n':>3}{'rvm':>8}{'n':>4}{'ov':>8}{'d':>8}{'r':>6}  rvm kernels | OpenVINO's",
    ]
    total = np.zeros(2)
    for r in result["rows"]:
        ratio = f"{r['rvm'] / r['ov']:6.2f}" if r["ov"] and r["rvm"] else f"{'':6s}"
        lines.append(
            f"{' '.join(r['key'])[:28]:28s}{r['rvm_n']:3d}{r['rvm']:8.0f}{r['ov_n']:4d}"
            f"{r['ov']:8.0f}{r['d']:8.0f}{ratio}  {' '.join(r['kernels'])[:40]} | "
            f"{' '.join(r['ov_kernels'])[:40]}"
        )
        total += [r["rvm"], r["ov"]]
    lines.append(
        f"{'sum':28s}{'':3s}{total[0]:8.0f}{'':4s}{total[1]:8.0f}{total[0] - total[1]:8.0f}"
        f"{total[0] / total[1]:6.2f}"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="resnet50,inception_v2", help="comma-separated models")
    parser.add_argument("--runs", type=int, default=20, help="rounds of the two turns")
    parser.add_argument("--threads", type=int, default=0, help="threads for both (0: defaults)")
    parser.add_argument("--batch", type=int, default=1, help="images a call")
    parser.add_argument("--name", default="bf16_layers", help="results file name, no suffix")
    args = parser.parse_args()
    if min(args.runs, args.batch) < 1 or args.threads < 0:
        parser.error("--runs and --batch must be at least 1, --threads at least 0")
    run_models(args, profile, table)


if __name__ == "__main__":
    main()
