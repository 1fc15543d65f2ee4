"""Dimension expressions (``past + seq``) in VM programs: parameters checked against them,
results allocated from them, one compile for every size, in every exec mode and kernel
backend, through a saved executable too."""

from __future__ import annotations

import numpy as np
import pytest

import rvm
from rvm.errors import ShapeError
from rvm.ir import infer_type

TEXT = """
@module
class Cache:
    @func
    def main(
        past: T[("b", "past"), "float32"],
        new: T[("b", "seq"), "float32"],
        bias: T[("b", "past + seq"), "float32"],
    ):
        kv = op.concat([past, new], axis=1)
        return op.exp(kv) + bias

    @func
    def doubled(x: T[("b", "2*n + 1"), "float32"], y: T[("b", "n"), "float32"]):
        return op.concat([x, y, y], axis=1)
"""

_EXECUTABLES: dict[str, rvm.Executable] = {}


def _vm(kernels: str, exec_mode: str) -> rvm.VirtualMachine:
    if kernels not in _EXECUTABLES:
        _EXECUTABLES[kernels] = rvm.compile(rvm.script.parse(TEXT), kernels=kernels)
    return rvm.VirtualMachine(_EXECUTABLES[kernels], exec_mode=exec_mode)


def test_types_carry_the_sums() -> None:
    mod = rvm.script.parse(TEXT)
    ret = {name: infer_type(mod[name]).ret for name in ("main", "doubled")}
    assert ret["main"].shape == ("b", "past + seq")
    assert ret["doubled"].shape == ("b", "4*n + 1")
    again = rvm.script.parse(str(mod))
    assert infer_type(again["main"]).ret == ret["main"]


def _inputs(b: int, past: int, seq: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(past * 10 + seq)
    return tuple(rng.standard_normal((b, n)).astype(np.float32) for n in (past, seq, past + seq))


def test_expressions_every_size(kernels, exec_mode) -> None:
    vm = _vm(kernels, exec_mode)
    mod = rvm.script.parse(TEXT)
    for b, past, seq in ((2, 3, 4), (1, 0, 5), (3, 7, 1)):
        args = _inputs(b, past, seq)
        out = vm["main"](*args)
        np.testing.assert_allclose(out, rvm.interpret(mod, "main", *args), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(
            out, np.exp(np.concatenate(args[:2], axis=1)) + args[2], rtol=1e-5, atol=1e-6
        )
        x, y = np.ones((b, 2 * seq + 1), np.float32), np.zeros((b, seq), np.float32)
        assert vm["doubled"](x, y).shape == (b, 4 * seq + 1)


def test_the_native_mode_runs_expressions_natively() -> None:
    vm = _vm("jit", "native")
    vm["main"](*_inputs(2, 3, 4))
    report = vm.native_report()
    assert report.fallbacks == {} and sorted(report.native) == ["doubled", "main"]


BIAS_ERROR = (
    r"main: argument 2 'bias' has shape \(2, 6\), but axis 1 is past \+ seq = 7 \(past = 3 "
    r"from argument 0 'past', seq = 4 from argument 1 'new'\)"
)


def test_a_size_that_contradicts_an_expression_is_an_error(kernels, exec_mode) -> None:
    vm = _vm(kernels, exec_mode)
    past, new, _ = _inputs(2, 3, 4)
    with pytest.raises(ShapeError, match=f"^{BIAS_ERROR}$"):
        vm["main"](past, new, np.zeros((2, 6), np.float32))
    want = (
        r"^doubled: argument 0 'x' has shape \(1, 6\), but axis 1 is 2\*n \+ 1 = 7 \(n = 3 "
        r"from argument 1 'y'\)$"
    )
    with pytest.raises(ShapeError, match=want):
        vm["doubled"](np.ones((1, 6), np.float32), np.zeros((1, 3), np.float32))


def test_a_saved_executable_keeps_its_expressions(tmp_path, exec_mode) -> None:
    path = tmp_path / "cache.rvmx"
    rvm.compile(rvm.script.parse(TEXT)).save(path)
    vm = rvm.VirtualMachine(rvm.load_executable(path), exec_mode=exec_mode)
    args = _inputs(2, 5, 2)
    np.testing.assert_allclose(
        vm["main"](*args), np.exp(np.concatenate(args[:2], axis=1)) + args[2], rtol=1e-5, atol=1e-6
    )
    assert vm.executable.functions[0].param_specs[2].shape[1].names == ("past", "seq")
    with pytest.raises(ShapeError, match=r"axis 1 is past \+ seq = 7 \(past = 5 from"):
        vm["main"](*args[:2], np.zeros((2, 8), np.float32))


def test_the_interpreter_checks_expressions_too() -> None:
    mod = rvm.script.parse(TEXT)
    past, new, _ = _inputs(2, 3, 4)
    with pytest.raises(ShapeError, match=f"^{BIAS_ERROR}$"):  # the VM's words
        rvm.interpret(mod, "main", past, new, np.zeros((2, 6), np.float32))


def _results_module() -> rvm.IRModule:
    """Functions whose results' lengths come from data (``m``), declared as expressions of
    the argument's ``n``: the VM checks them at the boundary."""
    from rvm import op
    from rvm.ir import Builder, Var, scalar, tensor
    from rvm.ir import dims as D

    bb = Builder()
    for name, dim in (("grow", D.add("n", "steps")), ("plus_one", D.add("n", 1))):
        x, m = Var("x", tensor(("n",), "int64")), Var("m", scalar("int64"))
        with bb.function(name, [x, m], ret_type=tensor((dim,), "int64")):
            one = op.const(1, "int64")
            bb.emit_output(bb.emit(op.dynamic_arange(op.const(0, "int64"), m, one, "int64")))
    return bb.get()


@pytest.fixture(scope="module")
def results_executable() -> rvm.Executable:
    return rvm.compile(_results_module())


def test_results_are_checked_against_their_expressions(results_executable, exec_mode) -> None:
    vm = rvm.VirtualMachine(results_executable, exec_mode=exec_mode)
    x = np.zeros(3, np.int64)
    for m in (3, 5):  # steps = 0, 2
        np.testing.assert_array_equal(vm["grow"](x, np.int64(m)), np.arange(m))
    assert vm["plus_one"](x, np.int64(4)).shape == (4,)
    want = (
        r"^grow: result has shape \(2,\), but axis 0 is n \+ steps, which needs steps = -1: a "
        r"size is never negative \(n = 3 from argument 0 'x'\)$"
    )
    with pytest.raises(ShapeError, match=want):
        vm["grow"](x, np.int64(2))
    want = r"^plus_one: result has shape \(5,\), but axis 0 is n \+ 1 = 4 \(n = 3 from argument 0"
    with pytest.raises(ShapeError, match=want):
        vm["plus_one"](x, np.int64(5))


def test_a_loaded_executable_checks_results_and_arguments_alike(
    results_executable, tmp_path, exec_mode
) -> None:
    path = tmp_path / "results.rvmx"
    results_executable.save(path)
    vm = rvm.VirtualMachine(rvm.load_executable(path, trusted=True), exec_mode=exec_mode)
    x = np.zeros(3, np.int64)
    assert vm["grow"](x, np.int64(4)).shape == (4,)
    with pytest.raises(ShapeError, match="needs steps = -1"):
        vm["grow"](x, np.int64(2))
    with pytest.raises(ShapeError, match=r"n \+ 1 = 4 \(n = 3 from argument 0 'x'\)"):
        vm["plus_one"](x, np.int64(6))


def test_the_command_line_sizes_an_expression_from_its_names(tmp_path, capsys) -> None:
    from rvm.cli import main

    path = str(tmp_path / "cache.rvmx")
    rvm.compile(rvm.script.parse(TEXT), kernels="numpy").save(path)
    assert main(["run", path, "--dim", "b=2", "--dim", "past=3", "--dim", "seq=4"]) == 0
    assert "(2, 7)" in capsys.readouterr().out
    assert main(["run", path, "--dim", "b=2", "--dim", "past=3"]) == 1
    err = capsys.readouterr().err
    assert "parameter 'new' has the symbolic dimension 'seq': give its size with --dim seq" in err
