"""rvm as an ONNX backend, and the runner of ONNX's backend node suite.

`RvmBackend` implements ``onnx.backend.base.Backend``: ``prepare`` imports a model with
`rvm.from_onnx` and compiles it, and the returned rep's ``run`` executes it on a
`rvm.VirtualMachine`. ONNX's ``BackendTest`` drives it over the node suite (see
``tests/frontend/onnx/test_node_suite.py``).

rvm takes axes, shapes, pads and the like as static attributes, while the node suite often
feeds them as graph inputs. A shape computed at run time is read at run time (`rvm.op.dynamic`),
but an axis or a pad still has to be known at import. `RvmBackend` feeds every input as ONNX
Runtime does (a *plain* model); `RvmSpecializingBackend` (which the suite uses) binds the
integer graph inputs of a model rvm cannot import that way to the values of each run, as a user
would freeze them, and the report counts the cases that pass only that way.

The same module runs the suite outside pytest, classifies each failure by its cause and
rewrites the expected-failures file the tests read::

    python -m rvm.testing.onnx_backend --report            # counts per failure reason
    python -m rvm.testing.onnx_backend --report --write    # also rewrite the expectations
    python -m rvm.testing.onnx_backend -k loop             # only cases whose name has "loop"
    python -m rvm.testing.onnx_backend --report --plain    # every input fed at run time

The expected-failures file has one case per line, ``test_name  # reason``, grouped by reason
under ``## reason`` headers; blank lines and other ``#`` lines are comments.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from onnx.backend.base import Backend, BackendRep

EXPECTED_FAILURES = os.path.join(
    os.path.dirname(__file__),
    "..",
    "..",
    "..",
    "tests",
    "frontend",
    "onnx",
    "node_suite_expected_failures.txt",
)
# Every case's name, one a line: the test module collects its tests from it, not from ONNX's
# generators (~8 CPU-s in each pytest-xdist worker); rewritten with the expected failures.
CASE_NAMES = os.path.join(os.path.dirname(EXPECTED_FAILURES), "node_suite_cases.txt")


class RvmBackendRep(BackendRep):
    """A compiled model: ``run(inputs)`` returns its outputs in graph output order.

    A *specialized* rep binds the integer graph inputs named in ``frozen`` (axes, shapes,
    pads... that rvm takes as static attributes) to the values of each run, compiling once
    per distinct set of values.
    """

    def __init__(self, model: Any, kernels: str, frozen: Sequence[str] = ()) -> None:
        inits = {t.name for t in model.graph.initializer}
        self.model = model
        self.kernels = kernels
        self.input_names = [i.name for i in model.graph.input if i.name not in inits]
        self.outputs = len(model.graph.output)
        self.frozen = tuple(frozen)
        self._vms: dict[bytes, Any] = {}
        if not self.frozen:
            self._vms[b""] = _compile(model, kernels)

    @property
    def specialized(self) -> bool:
        return bool(self.frozen)

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
        if isinstance(inputs, dict):
            raise TypeError("RvmBackendRep.run takes inputs as a list in graph input order")
        named = dict(zip(self.input_names, inputs))
        bound = {n: np.asarray(named[n]) for n in self.frozen}
        key = b"".join(
            v.dtype.str.encode() + repr(v.shape).encode() + v.tobytes() for v in bound.values()
        )
        vm = self._vms.get(key)
        if vm is None:
            vm = self._vms[key] = _compile(_freeze(self.model, bound), self.kernels)
        args = [v for n, v in named.items() if n not in bound]
        out = vm(*args)
        outs = list(out) if self.outputs > 1 else [out]
        return tuple(_to_python(o) for o in outs)


class RvmBackend(Backend):
    """rvm behind ONNX's backend interface; ``kernels`` picks the kernel backend.

    With ``specialize`` set, a model that rvm cannot import as it is (a value it needs at
    import, such as an axis, is a graph input; or a shape computed from one leaves a rank
    unknown) gets its integer graph inputs bound as constants to the values of each run
    (``RvmBackendRep.frozen``), and so do float inputs that only feed parameter slots
    (Resize's scales and roi, Range's bounds).
    """

    kernels = "numpy"
    specialize = False

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> RvmBackendRep:
        from rvm.errors import OnnxImportError

        try:
            return RvmBackendRep(model, cls.kernels)
        except OnnxImportError:
            frozen = _parameter_inputs(model)
            if not (cls.specialize and frozen):
                raise
        return RvmBackendRep(model, cls.kernels, frozen)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device == "CPU"


class RvmSpecializingBackend(RvmBackend):
    """`RvmBackend` that binds integer graph inputs rvm needs at import to each run's values."""

    specialize = True


class RvmJitBackend(RvmSpecializingBackend):
    """`RvmSpecializingBackend` with native (Numba) kernels."""

    kernels = "jit"


class RvmPlainJitBackend(RvmBackend):
    """`RvmBackend` (every input fed at run time, as ONNX Runtime takes it) with native
    (Numba) kernels."""

    kernels = "jit"


def backend_for(kernels: str = "numpy", plain: bool = False) -> type[RvmBackend]:
    """The backend class for ``kernels`` ("numpy" or "jit"); ``plain``: never bind an input
    as a constant (the model runs as ONNX Runtime runs it)."""
    if plain:
        return RvmPlainJitBackend if kernels == "jit" else RvmBackend
    return RvmJitBackend if kernels == "jit" else RvmSpecializingBackend


def _compile(model: Any, kernels: str) -> Any:
    """The model's ``main`` on a VM: it takes and returns sequences as Python lists and empty
    optionals as None, as ONNX Runtime does (`rvm.runtime.entry`), so nothing converts here."""
    import rvm

    return rvm.VirtualMachine(rvm.compile(rvm.from_onnx(model), kernels=kernels))["main"]


# Float inputs that are parameters rather than data: (op type, input slots).
_FLOAT_PARAMETERS = {
    "Resize": (1, 2),
    "Upsample": (1,),
    "Range": (0, 1, 2),
    "OneHot": (1, 2),
}


def _parameter_inputs(model: Any) -> list[str]:
    """The graph inputs (not initializers) of an integer element type, and the float ones
    that only feed parameter slots such as Resize's scales and roi."""
    import onnx

    ints = {onnx.TensorProto.INT64, onnx.TensorProto.INT32}
    inits = {t.name for t in model.graph.initializer}
    uses: dict[str, set[bool]] = {}
    for node in model.graph.node:
        slots = _FLOAT_PARAMETERS.get(node.op_type, ())
        for i, name in enumerate(node.input):
            uses.setdefault(name, set()).add(i in slots)
    return [
        i.name
        for i in model.graph.input
        if i.name not in inits
        and i.type.HasField("tensor_type")
        and (i.type.tensor_type.elem_type in ints or uses.get(i.name) == {True})
    ]


def _freeze(model: Any, values: dict[str, np.ndarray]) -> Any:
    """A copy of ``model`` whose inputs in ``values`` are initializers of those values."""
    import onnx
    from onnx import numpy_helper

    out = onnx.ModelProto()
    out.CopyFrom(model)
    kept = [i for i in out.graph.input if i.name not in values]
    del out.graph.input[:]
    out.graph.input.extend(kept)
    out.graph.initializer.extend(numpy_helper.from_array(v, n) for n, v in values.items())
    return out


def _to_python(value: Any) -> Any:
    """A VM result as ONNX's runner expects it: arrays (numpy scalars as 0-d arrays), lists of
    them (the VM gives sequences as lists), None for an empty optional."""
    if value is None:
        return None
    if isinstance(value, list):
        return [np.asarray(v) for v in value]
    return np.asarray(value)


# -- the node suite outside pytest --------------------------------------------------------------
@dataclass(frozen=True)
class Outcome:
    """The result of one case: passed, or the reason it failed (one line)."""

    name: str
    passed: bool
    reason: str = ""
    specialized: bool = False  # ran with integer graph inputs bound as constants


def node_cases(pattern: str | None = None) -> list[Any]:
    """ONNX's node suite (generated in memory by onnx, cached there), optionally filtered."""
    import warnings

    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # onnx's generators overflow casts on purpose
        with np.errstate(all="ignore"):
            cases = load_model_tests(kind="node")
    if pattern:
        rx = re.compile(pattern)
        cases = [c for c in cases if rx.search(c.name)]
    return cases


def run_case(case: Any, backend: type[RvmBackend] = RvmSpecializingBackend) -> Outcome:
    """Import, compile and run one node-suite case; compare as ONNX's runner does."""
    from onnx.backend.test.runner import Runner, _normalize_tensor

    stage = "import"
    try:
        rep = backend.prepare(case.model)
        for inputs, expected in case.data_sets:
            inputs = [_normalize_tensor(v) for v in inputs]
            expected = [_normalize_tensor(v) for v in expected]
            stage = "run"
            with np.errstate(all="ignore"):
                outputs = rep.run(inputs)
            stage = "compare"
            Runner.assert_similar_outputs(expected, outputs, rtol=case.rtol, atol=case.atol)
    except Exception as err:
        if stage == "compare" and not _comparable(expected, case):
            return Outcome(case.name, False, "onnx's runner cannot compare the expected output")
        return Outcome(case.name, False, classify(stage, err))
    return Outcome(case.name, True, specialized=rep.specialized)


def _comparable(expected: Any, case: Any) -> bool:
    """Whether ONNX's runner can compare ``expected`` with itself (it cannot, e.g., for a
    sequence holding a 0-d tensor: ``len()`` of an unsized array)."""
    from onnx.backend.test.runner import Runner

    try:
        Runner.assert_similar_outputs(expected, expected, rtol=case.rtol, atol=case.atol)
    except Exception:
        return False
    return True


def classify(stage: str, err: BaseException) -> str:
    """A short failure reason that groups cases failing for the same cause."""
    from rvm.errors import OnnxImportError

    text = str(err).strip()
    if isinstance(err, OnnxImportError):
        stage = "import"  # a specialized rep imports at its first run
    if stage == "compare":
        return "wrong result"
    first = text.splitlines()[0] if text else ""
    m = re.match(r"the model uses ONNX ops rvm cannot import:\s*\n\s*(\S+)", text)
    if m:
        return f"unsupported op {m.group(1)}"
    m = re.match(r"node .*? \((\S+)\): (.*)", first)
    if m:
        first = f"{m.group(1)}: {m.group(2)}"
    first = re.sub(r"'[^']*'", "'…'", first)  # names differ between cases
    first = re.sub(r"\d+", "N", first)
    return f"{stage}: {type(err).__name__}: {first[:110]}"


def read_expected_failures(path: str = EXPECTED_FAILURES) -> dict[str, str]:
    """``{case name: reason}`` from the expected-failures file."""
    out: dict[str, str] = {}
    if not os.path.exists(path):
        return out
    with open(path, encoding="utf-8") as f:
        for line in f:
            body, _, reason = line.partition("#")
            name = body.strip()
            if name:
                out[name] = reason.strip()
    return out


def write_expected_failures(outcomes: Iterable[Outcome], path: str = EXPECTED_FAILURES) -> None:
    """Rewrite the expected-failures file from ``outcomes``, grouped by reason."""
    groups: dict[str, list[str]] = {}
    for o in outcomes:
        if not o.passed:
            groups.setdefault(o.reason, []).append(o.name)
    lines = [
        "# ONNX node-suite cases rvm is expected to fail, grouped by reason.",
        "# Regenerate with: python -m rvm.testing.onnx_backend --report --write",
        "# tests/frontend/onnx/test_node_suite.py fails on a case that passes while listed",
        "# here, and on a case that fails while not listed.",
    ]
    for reason in sorted(groups, key=lambda r: (-len(groups[r]), r)):
        lines += ["", f"## {reason} ({len(groups[reason])})"]
        lines += [f"{name}  # {reason}" for name in sorted(groups[reason])]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def write_case_names(path: str = CASE_NAMES) -> None:
    """Rewrite the file of every case's name (`CASE_NAMES`) from ONNX's generators."""
    names = sorted(c.name for c in node_cases())
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(names) + "\n")


def report(outcomes: Sequence[Outcome], out: Any = sys.stdout) -> None:
    """Print pass/fail counts (all, and as plain models) and the failures per reason."""
    passed = sum(o.passed for o in outcomes)
    bound = sum(o.passed and o.specialized for o in outcomes)
    print(
        f"passed {passed} of {len(outcomes)} ({bound} of them with integer graph inputs "
        f"bound as constants; {passed - bound} as plain models, every input fed at run time)",
        file=out,
    )
    reasons = Counter(o.reason for o in outcomes if not o.passed)
    for reason, count in reasons.most_common():
        print(f"{count:5d}  {reason}", file=out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--report", action="store_true", help="print counts per reason")
    parser.add_argument(
        "--write", action="store_true", help="rewrite the expected failures and the case names"
    )
    parser.add_argument("-k", dest="pattern", default=None, help="regex on case names")
    parser.add_argument("--kernels", default="numpy", choices=("numpy", "jit"))
    parser.add_argument("--failures", action="store_true", help="list each failing case")
    parser.add_argument(
        "--plain", action="store_true", help="never bind an input as a constant (as ORT runs)"
    )
    args = parser.parse_args(argv)
    backend = backend_for(args.kernels, args.plain)
    start = time.perf_counter()
    outcomes = [run_case(c, backend) for c in node_cases(args.pattern)]
    if args.failures:
        for o in outcomes:
            if not o.passed:
                print(f"{o.name}  # {o.reason}")
    report(outcomes)
    print(f"({time.perf_counter() - start:.0f} s)")
    if args.write:
        if args.pattern:
            parser.error("--write needs the whole suite (no -k)")
        write_expected_failures(outcomes)
        write_case_names()
    return 0


if __name__ == "__main__":
    sys.exit(main())
