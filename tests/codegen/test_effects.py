"""Ops with effects (`rvm.op.effects`) in every exec mode: calls of registered Python functions
(`rvm.call_packed`, `rvm.call_dps_packed`) with their results checked, `rvm.debug_print` and
`assert` in rvm script."""

from __future__ import annotations

import numpy as np
import pytest

import rvm
from rvm import op
from rvm.errors import DTypeError, IRError, ScriptError, ShapeError, VMError
from rvm.ir.structural import assert_structural_equal
from rvm.script import T, func, module, parse


def _fill(x: np.ndarray, out: np.ndarray) -> None:
    out[...] = x + 1


rvm.register_func("test_effects.double", lambda x: x * 2, override=True)
rvm.register_func("test_effects.fill", _fill, override=True)
rvm.register_func("test_effects.twice", lambda x: np.concatenate([x, x]), override=True)
rvm.register_func("test_effects.wide", lambda x: x.astype(np.float64), override=True)
rvm.register_func("test_effects.rows", lambda x: x[x[:, 0] > 0], override=True)
rvm.register_func("test_effects.pos", lambda x: x[x > 0], override=True)
rvm.register_func("test_effects.neg", lambda x: x[x < 0], override=True)


@module
class Effects:
    @func
    def main(x: T[("n", 4), "float32"]):
        y = rvm.call_packed("test_effects.double", x, out=T[("n", 4), "float32"])
        z = rvm.call_dps_packed("test_effects.fill", y, out=T[("n", 4), "float32"])
        rvm.debug_print(z, "z")
        assert op.sum(z) < 1000.0, "z too big"
        return z + 1.0

    @func
    def twice(x: T[(4,), "float32"]):
        return rvm.call_packed("test_effects.twice", x, out=T[(4,), "float32"])

    @func
    def wide(x: T[(4,), "float32"]):
        return rvm.call_packed("test_effects.wide", x, out=T[(4,), "float32"])

    @func
    def rows(x: T[("n", 2), "float32"]):
        # a dim the callback decides ("m") is bound by its result, then used
        kept = rvm.call_packed("test_effects.rows", x, out=T[("m", 2), "float32"])
        return op.zeros(("m", 2), "float32") + kept

    @func
    def branches(x: T[(6,), "float32"], flag: T[(), "bool"]):
        # "m" is bound in each branch by its own call: neither checks it against the other
        if flag:
            y = rvm.call_packed("test_effects.pos", x, out=T[("m",), "float32"])
        else:
            y = rvm.call_packed("test_effects.neg", x, out=T[("m",), "float32"])
        return y * 2.0

    @func
    def plain(x: T[(4,), "float32"]):
        return x * 3.0


@pytest.fixture(scope="module")
def effects_ex() -> rvm.Executable:
    return rvm.compile(Effects)


def test_packed_calls_match_the_interpreter(effects_ex, exec_mode, capsys):
    vm = rvm.VirtualMachine(effects_ex, exec_mode=exec_mode)
    for n in (1, 3):
        x = np.random.rand(n, 4).astype(np.float32)
        want = rvm.interpret(Effects, "main", x)
        np.testing.assert_allclose(want, x * 2 + 2, rtol=1e-6)
        assert capsys.readouterr().out.startswith(f"z: float32[{n}, 4] [[")  # the interpreter's
        np.testing.assert_allclose(vm["main"](x), want, rtol=1e-6)
        printed = capsys.readouterr().out
        assert printed.startswith(f"z: float32[{n}, 4] [[")  # the VM's, through the builtin
        values = printed.split("] ", 1)[1].replace("[", " ").replace("]", " ").split()
        np.testing.assert_allclose(np.array(values, np.float32), (x * 2 + 1).ravel(), rtol=1e-6)
    x = np.array([[1, 2], [-1, 0], [3, 4]], np.float32)
    np.testing.assert_allclose(vm["rows"](x), x[[0, 2]])
    np.testing.assert_allclose(rvm.interpret(Effects, "rows", x), x[[0, 2]])
    x = np.array([1, -2, 3, -4, 5, 6], np.float32)
    for flag, want in ((True, [2, 6, 10, 12]), (False, [-4, -8])):
        np.testing.assert_allclose(vm["branches"](x, np.bool_(flag)), want)
        np.testing.assert_allclose(rvm.interpret(Effects, "branches", x, np.bool_(flag)), want)


def test_packed_results_are_checked(effects_ex, exec_mode):
    vm = rvm.VirtualMachine(effects_ex, exec_mode=exec_mode)
    x = np.ones(4, np.float32)
    with pytest.raises(VMError, match=r"twice: the result of test_effects.twice: shape \(8,\)"):
        vm["twice"](x)
    with pytest.raises(
        VMError, match="wide: the result of test_effects.wide: expected dtype float32"
    ):
        vm["wide"](x)
    with pytest.raises(ShapeError, match="the result of test_effects.twice"):
        rvm.interpret(Effects, "twice", x)
    with pytest.raises(DTypeError, match="the result of test_effects.wide"):
        rvm.interpret(Effects, "wide", x)


def test_assert_is_a_fatal_with_the_message_and_the_vm_stack(effects_ex, exec_mode):
    vm = rvm.VirtualMachine(effects_ex, exec_mode=exec_mode)
    with pytest.raises(VMError, match=r"fatal: z too big\nVM stack.*\n  in @main pc=\d+: fatal"):
        vm["main"](np.full((2, 4), 100, np.float32))
    with pytest.raises(VMError, match="z too big"):
        rvm.interpret(Effects, "main", np.full((2, 4), 100, np.float32))


def test_native_falls_back_only_where_used(effects_ex):
    vm = rvm.VirtualMachine(effects_ex, exec_mode="native")
    vm["plain"](np.ones(4, np.float32))
    report = dict(vm.native_report().functions)
    assert report["plain"] is None
    assert "calls the registered Python function test_effects.double" in report["main"]


def test_an_unregistered_function_fails_at_vm_creation():
    @module
    class Missing:
        @func
        def main(x: T[(4,), "float32"]):
            return rvm.call_packed("test_effects.nobody", x, out=T[(4,), "float32"])

    with pytest.raises(VMError, match="test_effects.nobody"):
        rvm.VirtualMachine(rvm.compile(Missing))


def test_script_round_trip_and_errors():
    assert_structural_equal(parse(Effects.script()), Effects)
    with pytest.raises(ScriptError, match="the function's name first"):
        parse(
            "import rvm\nfrom rvm.script import T, func, module\n@module\nclass M:\n"
            "    @func\n    def main(x: T[(4,), 'float32']):\n"
            "        return rvm.call_packed(x, out=T[(4,), 'float32'])\n"
        )
    with pytest.raises(IRError, match="out=T"):
        rvm.call_dps_packed("f", rvm.const(np.ones(2, np.float32)), out=None)
    with pytest.raises(ScriptError, match="condition must be a 0-d bool"):
        parse(
            "import rvm\nfrom rvm.script import T, func, module\n@module\nclass M:\n"
            "    @func\n    def main(x: T[(4,), 'float32']):\n"
            "        assert x, 'no'\n        return x\n"
        )


def test_a_saved_executable_calls_the_registered_functions(effects_ex, exec_mode, tmp_path):
    path = str(tmp_path / "effects.rvmx")
    effects_ex.save(path)
    vm = rvm.VirtualMachine(rvm.load_executable(path), exec_mode=exec_mode)
    x = np.ones((2, 4), np.float32)
    np.testing.assert_allclose(vm["main"](x), x * 2 + 2)
    with pytest.raises(VMError, match="z too big"):
        vm["main"](np.full((2, 4), 100, np.float32))
