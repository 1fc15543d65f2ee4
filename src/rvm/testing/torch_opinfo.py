"""PyTorch's OpInfo database as a conformance suite for `rvm.from_torch`.

For every OpInfo of ``torch.testing._internal.common_methods_invocations.op_db`` (it needs
``expecttest``), each float32 sample input (int64, int32 or bool for the OpInfos without
float32, such as the bitwise ops; see `sample_dtype`) becomes a module calling the op with the
sample's tensors as inputs; after them come the samples of `rvm.testing.torch_direct`, which
call the Core ATen overloads no OpInfo sample reaches. Samples that ``torch.export`` cannot
export, or whose outputs are not tensors, are not counted. The rest are imported with
`rvm.from_torch`, compiled once, and run in every exec mode against eager PyTorch.

Results are reported per ATen overload of the decomposed program: an overload *passes* when
every counted sample whose graph uses it passes, *partly* when some do. A sample that fails to
import because of another overload (the error names it) does not count for this one; a
sample that imports but computes a wrong value counts against every overload it uses. The
report counts the Core ATen overloads (``torch.Tag.core``) that convert and pass::

    python -m rvm.testing.torch_opinfo --report               # counts, failures by reason
    python -m rvm.testing.torch_opinfo --report --write       # rewrite the expectations
    python -m rvm.testing.torch_opinfo -k softmax --samples 2 # a few OpInfos, 2 samples each
    python -m rvm.testing.torch_opinfo --report --json out.json
    python -m rvm.testing.torch_opinfo --report --anchor      # TVM on the same samples too

The expected-failures file (``tests/frontend/torch/opinfo_expected_failures.txt``) lists the
overloads that do not pass, one a line, ``aten.name.overload  # reason``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import rvm

EXEC_MODES = ("bytecode", "compiled", "native")
# OpInfos whose outputs' values are undefined (uninitialized memory): only their shapes and
# dtypes are compared, as PyTorch's own OpInfo tests do.
UNDEFINED_VALUES = frozenset(
    {"empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided"}
)
EXPECTED_FAILURES = os.path.join(
    os.path.dirname(__file__),
    "..",
    "..",
    "..",
    "tests",
    "frontend",
    "torch",
    "opinfo_expected_failures.txt",
)


@dataclass
class SampleResult:
    """One sample of one OpInfo: ``status`` is "pass", "import", "run" or "mismatch"."""

    opinfo: str
    index: int
    status: str
    overloads: list[str]
    reason: str = ""
    blamed: list[str] = field(default_factory=list)  # overloads an import error names
    anchor: list[str] = field(default_factory=list)  # TVM's [status, reason], when it ran


def core_overloads() -> list[str]:
    """Every Core ATen overload of the installed torch (``torch.Tag.core``), from the
    dispatcher's registry (``dir(torch.ops.aten)`` lists only the packets already used)."""
    import torch

    out = set()
    for full in torch._C._dispatch_get_all_op_names():
        name, _, overload = full.removeprefix("aten::").partition(".")
        if not full.startswith("aten::"):
            continue
        try:
            o = getattr(getattr(torch.ops.aten, name), overload or "default")
        except Exception:  # noqa: S112 - not reachable through torch.ops
            continue
        if torch.Tag.core in o.tags:
            out.add(str(o))
    return sorted(out)


class _Call:
    """A module calling ``op`` on a sample whose tensors are the module's inputs."""

    def __new__(cls, op: Any, spec: Any, leaves: list[Any], slots: list[int]) -> Any:
        import torch

        class Sample(torch.nn.Module):
            def forward(self, *tensors: Any) -> Any:
                values = list(leaves)
                for slot, t in zip(slots, tensors):
                    values[slot] = t
                inp, args, kwargs = torch.utils._pytree.tree_unflatten(values, spec)
                return op(inp, *args, **kwargs)

        return Sample()


def samples(
    names: Sequence[str] | None, per_op: int, start: int = 0, stop: int | None = None
) -> Iterator[tuple[Any, int, Any]]:
    """(OpInfo, index, sample) for the float32 samples of the selected OpInfos (by name, and
    by position in ``op_db``: ``start`` to ``stop``), then, when the selection runs to the end
    of ``op_db``, the samples of `rvm.testing.torch_direct` (Core ATen overloads that no
    OpInfo sample reaches, called directly)."""
    from torch.testing._internal.common_methods_invocations import op_db

    from rvm.testing import torch_direct

    for info in op_db[start:stop]:
        if names and not any(n in info.name for n in names):
            continue
        dtype = sample_dtype(info)
        if dtype is None:
            continue
        try:
            found = info.sample_inputs("cpu", dtype, requires_grad=False)
            for k, sample in enumerate(found):
                if k >= per_op:
                    break
                yield info, k, sample
        except Exception:  # noqa: S112 - an OpInfo whose samples cannot be made here
            continue
    if stop is None or stop >= len(op_db):
        for info, k, sample in torch_direct.samples(list(names or [])):
            if k < per_op:
                yield info, k, sample


def sample_dtype(info: Any) -> Any:
    """float32, or for an OpInfo without it (bitwise ops), its first of int64, int32, bool;
    float32 too when the OpInfo lists no CPU dtype at all or only complex ones (its samples
    decide). None when it has only other dtypes (float8, complex-only conversions)."""
    import torch

    supported = info.supported_dtypes("cpu")
    if torch.float32 in supported:
        return torch.float32
    for dtype in (torch.int64, torch.int32, torch.bool):
        if dtype in supported:
            return dtype
    if all(d.is_complex for d in supported):
        return torch.float32
    return None


def _label(info: Any) -> str:
    return f"{info.name}.{info.variant_test_name}" if info.variant_test_name else info.name


def run_sample(
    info: Any, index: int, sample: Any, kernels: str, anchor: bool = False
) -> SampleResult | None:
    """Export, import and run one sample; None when it does not count (see the module).

    With ``anchor``, the same exported program also runs through TVM
    (`rvm.testing.tvm_anchor`); its status and reason go to ``result.anchor``.
    """
    import torch

    from rvm.frontend.torch.program import decompose

    leaves, spec = torch.utils._pytree.tree_flatten((sample.input, sample.args, sample.kwargs))
    slots = [i for i, v in enumerate(leaves) if isinstance(v, torch.Tensor)]
    tensors = tuple(leaves[i] for i in slots)
    module = _Call(info.op, spec, leaves, slots)
    try:
        with torch.no_grad():
            ref = torch.utils._pytree.tree_leaves(module(*tensors))
        if not ref or not all(isinstance(r, torch.Tensor) and not r.is_complex() for r in ref):
            return None
        exported = torch.export.export(module, tensors)
        ep = decompose(exported)
        inputs = [t.numpy() for t in tensors]
        expected = [r.numpy() for r in ref]
    except Exception:  # not exported, or a dtype NumPy does not have (bfloat16)
        return None
    overloads = sorted(
        {
            str(n.target)
            for n in ep.graph_module.graph.nodes
            if n.op == "call_function" and str(n.target).startswith("aten.")
        }
    )
    result = SampleResult(_label(info), index, "pass", overloads)
    values = info.name not in UNDEFINED_VALUES
    if anchor:
        from rvm.testing import tvm_anchor

        compare = _compare if values else _shapes_and_dtypes
        result.anchor = list(tvm_anchor.check(exported, inputs, expected, compare))
    return _run_rvm(result, ep, inputs, expected, kernels, values)


def _run_rvm(
    result: SampleResult,
    ep: Any,
    inputs: list[Any],
    expected: list[Any],
    kernels: str,
    values: bool,
) -> SampleResult:
    try:
        mod = rvm.from_torch(ep)
        ex = rvm.compile(mod, kernels=kernels)
    except rvm.TorchImportError as err:
        return _failed(result, "import", err, list(err.overloads))
    except Exception as err:
        return _failed(result, "import", err)
    for mode in EXEC_MODES:
        try:
            got = rvm.VirtualMachine(ex, exec_mode=mode)["main"](*inputs)
        except Exception as err:
            return _failed(result, "run", err, mode=mode)
        got = list(got) if isinstance(got, tuple) else [got]
        problem = _compare(got, expected, values)
        if problem:
            result.status, result.reason = "mismatch", f"{mode}: {problem}"
            return result
    return result


def _failed(
    result: SampleResult,
    status: str,
    err: BaseException,
    blamed: list[str] | None = None,
    mode: str = "",
) -> SampleResult:
    first = " ".join(str(err).split())[:200]
    result.status = status
    result.reason = f"{mode + ': ' if mode else ''}{type(err).__name__}: {first}"
    result.blamed = blamed or []
    return result


def _compare(got: list[Any], expected: list[np.ndarray], values: bool = True) -> str:
    """What differs between ``got`` and ``expected`` ("" when they match); without
    ``values``, only the count, shapes and dtypes are compared."""
    if len(got) != len(expected):
        return f"{len(got)} outputs, expected {len(expected)}"
    for k, (g, e) in enumerate(zip(got, expected)):
        g = np.asarray(g)
        if g.shape != e.shape:
            return f"output {k} has shape {g.shape}, expected {e.shape}"
        if g.dtype != e.dtype:
            return f"output {k} has dtype {g.dtype}, expected {e.dtype}"
        if not values:
            continue
        if e.dtype.kind in "fc":
            if not np.allclose(g, e, rtol=1e-4, atol=1e-5, equal_nan=True):
                return f"output {k} differs by {float(np.nanmax(np.abs(g - e))):.3g}"
        elif not np.array_equal(g, e):
            return f"output {k} differs"
    return ""


def _shapes_and_dtypes(got: list[Any], expected: list[np.ndarray]) -> str:
    return _compare(got, expected, values=False)


def per_overload(results: list[SampleResult]) -> dict[str, dict[str, Any]]:
    """Per ATen overload: samples passed and counted, its status, and the first reason."""
    table: dict[str, dict[str, Any]] = defaultdict(lambda: {"passed": 0, "total": 0, "reason": ""})
    for r in results:
        if r.status == "import" and not r.blamed and r.reason.startswith("TorchImportError"):
            continue  # the program was refused as a whole (it writes its inputs in place)
        for name in r.overloads:
            if r.blamed and name not in r.blamed:
                continue  # the import failed on another overload: says nothing of this one
            row = table[name]
            row["total"] += 1
            if r.status == "pass":
                row["passed"] += 1
            elif not row["reason"]:
                row["reason"] = f"{r.opinfo}[{r.index}] {r.status}: {r.reason}"
    for row in table.values():
        row["status"] = (
            "pass" if row["passed"] == row["total"] else "partly" if row["passed"] else "fail"
        )
    return dict(sorted(table.items()))


def summary(results: list[SampleResult]) -> dict[str, Any]:
    """The figures of a run: samples, overloads, and the Core ATen counts."""
    from rvm.frontend.torch import converters  # noqa: F401 - fills the registry
    from rvm.frontend.torch.registry import supported

    table = per_overload(results)
    core = core_overloads()
    converted = set(supported())
    status = Counter(r.status for r in results)
    return {
        "samples": len(results),
        "samples_passed": status["pass"],
        "samples_by_status": dict(status),
        **_anchor_figures(results),
        "opinfos": len({r.opinfo for r in results}),
        "overloads_seen": len(table),
        "overloads_passing": sum(row["status"] == "pass" for row in table.values()),
        "core_total": len(core),
        "core_with_converter": len(converted & set(core)),
        "core_seen": sum(c in table for c in core),
        "core_passing": sum(table.get(c, {}).get("status") == "pass" for c in core),
        "core_passing_or_partly": sum(
            table.get(c, {}).get("status") in ("pass", "partly") for c in core
        ),
        "overloads": table,
    }


def _anchor_figures(results: list[SampleResult]) -> dict[str, Any]:
    """TVM's figures on the samples it ran (all of them, when the run had ``--anchor``)."""
    ran = [r for r in results if r.anchor]
    if not ran:
        return {}
    status = Counter(r.anchor[0] for r in ran)
    return {
        "tvm_samples": len(ran),
        "tvm_samples_passed": status["pass"],
        "rvm_samples_passed_of_those": sum(r.status == "pass" for r in ran),
        "tvm_samples_by_status": dict(status),
    }


def write_expected(figures: dict[str, Any], path: str = EXPECTED_FAILURES) -> None:
    """The expected failures of a run (`summary`'s ``figures``): each overload that does not
    pass every sample using it, then each Core ATen overload no sample reaches, with why."""
    import torch

    table = figures["overloads"]
    lines = [
        "# ATen overloads that do not pass every OpInfo sample using them, with a reason; then",
        "# the Core ATen overloads that no sample reaches ('unseen').",
        "# Regenerate with: python -m rvm.testing.torch_opinfo --report --write",
        f"# (this file: --samples {figures.get('samples_per_op', '?')} --kernels "
        f"{figures.get('kernels', '?')}, torch {torch.__version__}, every exec mode;",
        f"# {figures['samples']} counted samples, {figures['samples_passed']} pass; Core ATen: "
        f"{figures['core_passing']} of {figures['core_total']} pass, {figures['core_seen']} "
        "reached by a sample)",
        "",
    ]
    for name, row in table.items():
        if row["status"] != "pass":
            lines.append(
                f"{name}  # {row['status']} {row['passed']}/{row['total']}: {row['reason']}"
            )
    from rvm.frontend.torch.registry import supported

    converted = set(supported())
    for name in core_overloads():
        if name not in table:
            why = "has a converter" if name in converted else "no converter"
            lines.append(f"{name}  # unseen: no sample reaches it (Core ATen, {why})")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def read_expected(path: str = EXPECTED_FAILURES) -> dict[str, str]:
    """The expected failures file as {overload: reason}."""
    out = {}
    with open(path) as f:
        for line in f:
            if line.strip() and not line.startswith("#"):
                name, _, reason = line.partition("#")
                out[name.strip()] = reason.strip()
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rvm.testing.torch_opinfo")
    parser.add_argument("--report", action="store_true", help="print counts and failures")
    parser.add_argument("--write", action="store_true", help="rewrite the expected failures")
    parser.add_argument("-k", action="append", help="only OpInfos whose name has this")
    parser.add_argument("--samples", type=int, default=4, help="samples per OpInfo")
    parser.add_argument("--kernels", default="jit", choices=("jit", "numpy"))
    parser.add_argument("--anchor", action="store_true", help="run each sample on TVM too")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--start", type=int, default=0, help="first op_db index")
    parser.add_argument("--stop", type=int, default=None, help="op_db index to stop before")
    parser.add_argument("--log", help="append each sample's result here (JSON lines)")
    parser.add_argument("--merge", nargs="+", help="report the results of these logs instead")
    opts = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    start = time.time()
    results = [] if not opts.merge else _read_logs(opts.merge)
    log = open(opts.log, "a") if opts.log else None  # noqa: SIM115 - closed below
    for info, k, sample in (
        [] if opts.merge else samples(opts.k, opts.samples, opts.start, opts.stop)
    ):
        r = run_sample(info, k, sample, opts.kernels, opts.anchor)
        if r is not None:
            results.append(r)
            if log is not None:
                log.write(json.dumps(vars(r)) + "\n")
                log.flush()
    if log is not None:
        log.close()
    figures = summary(results)
    figures["seconds"] = round(time.time() - start, 1)
    figures["kernels"] = opts.kernels
    figures["samples_per_op"] = opts.samples
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump({**figures, "results": [vars(r) for r in results]}, f, indent=1)
    if opts.write:
        write_expected(figures)
    if opts.report:
        _print_report(figures)
    return 0


def _read_logs(paths: Sequence[str]) -> list[SampleResult]:
    """The samples of the logs; a sample logged twice counts as its last result (keeping an
    earlier TVM result when the last run had no ``--anchor``)."""
    out: dict[tuple[str, int], SampleResult] = {}
    for path in paths:
        with open(path) as f:
            for line in f:
                if line.strip():
                    r = SampleResult(**json.loads(line))
                    before = out.get((r.opinfo, r.index))
                    if before is not None and not r.anchor:
                        r.anchor = before.anchor
                    out[(r.opinfo, r.index)] = r
    return list(out.values())


def _print_report(figures: dict[str, Any]) -> None:
    table = figures.pop("overloads")
    for name, row in table.items():
        if row["status"] != "pass":
            print(f"{row['status']:6} {row['passed']:3}/{row['total']:<3} {name}  {row['reason']}")
    print()
    for key, value in figures.items():
        print(f"{key:24} {value}")
    figures["overloads"] = table


if __name__ == "__main__":
    sys.exit(main())
