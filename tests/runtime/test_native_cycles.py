"""Functions that recurse through each other in the native mode (`native_groups`): each call
cycle merged into one native function; results, too-deep recursion, errors inside and VM stacks
as in the other modes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import rvm
from rvm.errors import VMError
from rvm.runtime import ExecBuilder, Opcode, VirtualMachine
from rvm.runtime.modes.compiled import CompiledMode
from rvm.testing import assert_values_close
from rvm.testing.programs import Mutual

MODES = ("bytecode", "compiled", "native")


def _parse(text: str) -> rvm.IRModule:
    return rvm.script.parse(textwrap.dedent(text))


# even and odd call each other in tail position: the merged function jumps, at any depth
MUTUAL = Mutual

# A recursive descent: expr -> term -> factor -> expr, with parameters of different types and
# orders, a straight-line member (term), calls that are not tail calls (expr's, term's), a tail
# call (factor's), an assert inside (term's) and a caller outside the cycle (main)
DESCENT = _parse(
    """
    @module
    class Descent:
        @func
        def expr(x: T[("n",), "float32"], w: T[(2, 2), "float32"], depth: T[(), "int64"]):
            if depth <= 0:
                return x
            else:
                return term(x * 0.5, depth - 1, w) + x

        @func
        def term(x: T[("n",), "float32"], depth: T[(), "int64"], w: T[(2, 2), "float32"]):
            assert op.sum(x) < 1000.0, "term: too big"
            y = factor(op.tanh(x), depth)
            return y * op.sum(w)

        @func
        def factor(x: T[("n",), "float32"], depth: T[(), "int64"]):
            if depth == 0:
                return x
            else:
                return expr(x + 1.0, op.full((2, 2), 0.25, "float32"), depth - 1)

        @func
        def main(x: T[("n",), "float32"], depth: T[(), "int64"]):
            return expr(x, op.full((2, 2), 0.5, "float32"), depth) * 2.0
    """
)

# count and grow share no parameter type: each one's function passes an empty array of the
# other's type in the other's parameters of the merged function
APART = _parse(
    """
    @module
    class Apart:
        @func
        def count(n: T[(), "int64"]):
            if n <= 0:
                return op.zeros((3,), "float32")
            else:
                return grow(op.full((3,), 1.0, "float32") * op.cast(n, "float32")) + 1.0

        @func
        def grow(x: T[(3,), "float32"]):
            if op.sum(x) > 10.0:
                return x
            else:
                return count(op.cast(op.sum(x), "int64") - 1)
    """
)


def _i64(v: int) -> np.ndarray:
    return np.array(v, "int64")


def _x(n: int = 5) -> np.ndarray:
    return np.linspace(-1, 1, n).astype("float32")


@pytest.fixture
def reruns(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The functions the compiled mode ran (a native call handed back, or a fallback)."""
    ran: list[int] = []
    run = CompiledMode.run

    def counted(self, fidx, args):  # type: ignore[no-untyped-def]
        ran.append(fidx)
        return run(self, fidx, args)

    monkeypatch.setattr(CompiledMode, "run", counted)
    return ran


@pytest.mark.parametrize("mode", MODES)
def test_mutual_tail_recursion_agrees_with_the_interpreter(mode: str, reruns) -> None:
    vm = VirtualMachine(rvm.compile(MUTUAL), exec_mode=mode)
    for n in (0, 1, 2, 7, 10, 999):
        for fname in ("even", "odd"):
            want = rvm.interpret(MUTUAL, fname, _i64(n))
            assert_values_close(vm[fname](_i64(n)), want)
    if mode == "native":
        assert vm.native_report().fallbacks == {} and reruns == []


def test_deep_mutual_tail_recursion_runs_natively(reruns) -> None:
    vm = VirtualMachine(rvm.compile(MUTUAL), exec_mode="native")
    assert int(vm["even"](_i64(100_001))) == 0  # far deeper than MAX_DEPTH: tail calls jump
    assert int(vm["odd"](_i64(100_001))) == 1
    assert reruns == []
    source = open(vm.native_report().path).read()
    assert "def _g0(_sel, " in source and "_d + 1" not in source  # only jumps: no depth


@pytest.mark.parametrize("mode", MODES)
def test_a_recursive_descent_agrees_with_the_interpreter(mode: str, reruns) -> None:
    ex = rvm.compile(DESCENT)
    vm = VirtualMachine(ex, exec_mode=mode)
    x = _x()
    for depth in (0, 1, 2, 5, 30):
        want = rvm.interpret(DESCENT, "main", x, _i64(depth))
        assert_values_close(vm["main"](x, _i64(depth)), want, rtol=1e-5)
        want = rvm.interpret(DESCENT, "factor", x, _i64(depth))
        assert_values_close(vm["factor"](x, _i64(depth)), want, rtol=1e-5)
    if mode == "native":
        assert vm.native_report().fallbacks == {} and reruns == []


@pytest.mark.parametrize("mode", MODES)
def test_members_that_share_no_parameter_type(mode: str, reruns) -> None:
    vm = VirtualMachine(rvm.compile(APART), exec_mode=mode)
    for n in (0, 1, 3, 12):
        assert_values_close(vm["count"](_i64(n)), rvm.interpret(APART, "count", _i64(n)))
    x = np.full(3, 2.0, "float32")
    assert_values_close(vm["grow"](x), rvm.interpret(APART, "grow", x))
    if mode == "native":
        assert vm.native_report().fallbacks == {} and reruns == []
        source = open(vm.native_report().path).read()
        assert "_np.empty((), dt_int64)" in source and "_np.empty((0,), dt_float32)" in source


def test_too_deep_recursion_through_other_functions_hands_over_to_the_compiled_mode(
    reruns,
) -> None:
    ex = rvm.compile(DESCENT)
    x = _x(3)
    want = VirtualMachine(ex, exec_mode="bytecode")["main"](x, _i64(1500))
    native = VirtualMachine(ex, exec_mode="native")
    assert_values_close(native["main"](x, _i64(1500)), want, rtol=1e-5)
    assert reruns == [ex.function_index("main")]  # deeper than MAX_DEPTH: rerun compiled
    assert native.native_report().fallbacks == {}


def test_an_error_inside_a_cycle_reads_as_in_the_other_modes(reruns) -> None:
    ex = rvm.compile(DESCENT)
    big = np.full(4, 1000, "float32")  # term's assert fails: main -> expr -> term
    messages = set()
    for mode in MODES:
        vm = VirtualMachine(ex, exec_mode=mode)
        reruns.clear()
        with pytest.raises(VMError) as info:
            vm["main"](big, _i64(3))
        messages.add(str(info.value))
    assert len(messages) == 1, messages
    text = messages.pop()
    assert "term: too big" in text and "@expr" in text and "@term" in text
    assert reruns == [ex.function_index("main")]  # the native call handed back once


def test_a_cycle_whose_parameter_has_no_static_type_stays_compiled() -> None:
    b = ExecBuilder()
    f = b.function("ping", ("x",))  # kind "any": the other's call cannot fill it
    f.emit(Opcode.TAIL_INVOKE, "pong", (0,))
    g = b.function("pong", ("x",))
    g.emit(Opcode.TAIL_INVOKE, "ping", (0,))
    report = VirtualMachine(b.build(), exec_mode="native").native_report().fallbacks
    assert "recursion through @ping, @pong" in report["ping"]
    assert "parameter 'x' of @ping has no static type" in report["pong"]


_CHILD = """
import sys
import numpy as np, rvm
sys.path.insert(0, {here!r})
from test_native_cycles import DESCENT, MUTUAL
vm = rvm.VirtualMachine(rvm.compile(MUTUAL), exec_mode="native")
assert int(vm["even"](np.array(10))) == 1
mutual = vm.native_report()
vm = rvm.VirtualMachine(rvm.compile(DESCENT), exec_mode="native")
vm["main"](np.ones(4, "float32"), np.array(3))
descent = vm.native_report()
print(mutual.compiled, mutual.loaded, descent.compiled)
"""


def test_a_cycle_that_only_jumps_is_disk_cached(tmp_path: Path) -> None:
    # even/odd only jump: a second process loads it; the descent recurses, so each process
    # compiles it (as a self-recursive function, numba#6061)
    env = dict(os.environ, RVM_CACHE_DIR=str(tmp_path / "rvm"))
    env["PYTHONPATH"] = os.pathsep.join([str(Path(rvm.__file__).parents[1]), *sys.path])
    env["RVM_JIT_ISOLATE"] = "0"
    child = _CHILD.format(here=str(Path(__file__).parent))
    runs = []
    for _ in range(2):
        out = subprocess.run(
            [sys.executable, "-c", child], env=env, capture_output=True, text=True, check=True
        )
        runs.append([int(v) for v in out.stdout.split()])
    assert runs[0][0] >= 1 and runs[1][:2] == [0, 1]
    assert runs[0][2] >= 1 and runs[1][2] >= 1
