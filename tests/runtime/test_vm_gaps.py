"""Calls from Python past `vm[name]`: closures returned to Python, bound last arguments,
`ex[name]` / `ex(...)`, result checks at the boundary and `ex.stats()`'s planned storage.
Every test runs in every exec mode."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import rvm
from rvm.errors import DTypeError, ShapeError
from rvm.runtime import ExecBuilder, KernelRecord, Opcode, ParamSpec, VirtualMachine
from rvm.script import Callable, T, func, module
from rvm.testing.programs import MLP


@module
class Closures:
    @func
    def make(k: T[(4,), "float32"]):
        def add_k(y: T[(4,), "float32"]):
            return y + k

        return add_k

    @func
    def pair(k: T[(4,), "float32"]):
        def scale(y: T[(4,), "float32"]):
            return y * k

        return (scale, k)

    @func
    def affine(x: T[("n", 3), "float32"], w: T[(3, 2), "float32"], b: T[(2,), "float32"]):
        return op_matmul_add(x, w, b)

    @func
    def op_matmul_add(x: T[("n", 3), "float32"], w: T[(3, 2), "float32"], b: T[(2,), "float32"]):
        return rvm.op.matmul(x, w) + b

    @func
    def main(x: T[(4,), "float32"]):
        return x * 2.0


@rvm.script.adt
class Fns:
    Done: ()
    More: (Callable[[T[(4,), "float32"]], T[(4,), "float32"]], "Fns")


@module
class Held:
    @func
    def chain(k: T[(4,), "float32"]) -> Fns:
        def add_k(y: T[(4,), "float32"]):
            return y + k

        def scale(y: T[(4,), "float32"]):
            return y * k

        return More(add_k, More(scale, Done()))

    @func
    def nested(k: T[(4,), "float32"]):
        def add_k(y: T[(4,), "float32"]):
            return y + k

        return ((add_k, k), More(add_k, Done()))


def f32(*shape: int) -> np.ndarray:
    return np.random.rand(*shape).astype(np.float32)


@pytest.fixture(scope="module")
def closures_ex() -> rvm.Executable:
    return rvm.compile(Closures)


def test_closure_from_python_is_callable(closures_ex, exec_mode):
    vm = VirtualMachine(closures_ex, exec_mode=exec_mode)
    k, y = f32(4), f32(4)
    clo = vm["make"](k)
    np.testing.assert_allclose(clo(y), y + k, rtol=1e-6)
    np.testing.assert_allclose(vm.invoke_closure(clo, y), y + k, rtol=1e-6)
    scale, _ = vm["pair"](k)  # a closure in a result tuple is bound too
    np.testing.assert_allclose(scale(y), y * k, rtol=1e-6)


def test_closures_in_data_values_and_nested_tuples_are_bound(exec_mode):
    vm = VirtualMachine(rvm.compile(Held), exec_mode=exec_mode)
    k, y = f32(4), f32(4)
    fns = vm["chain"](k)
    assert fns.name == "More" and fns.fields[1].name == "More"
    np.testing.assert_allclose(fns.fields[0](y), y + k, rtol=1e-6)
    np.testing.assert_allclose(fns.fields[1].fields[0](y), y * k, rtol=1e-6)
    (add_k, same_k), more = vm["nested"](k)
    np.testing.assert_array_equal(same_k, k)
    np.testing.assert_allclose(add_k(y), y + k, rtol=1e-6)
    np.testing.assert_allclose(more.fields[0](y), y + k, rtol=1e-6)


def test_data_values_are_walked_only_where_closures_are_made():
    """An executable that makes no closure pays no walk of its data type results."""
    from rvm.runtime.calling import makes_closures, result_checks

    @module
    class NoClosures:
        @func
        def one(k: T[(4,), "float32"]) -> Fns:
            return Done()

    assert makes_closures(rvm.compile(Held))
    assert not makes_closures(rvm.compile(NoClosures))
    assert result_checks(rvm.compile(NoClosures)) == [None]


def test_closure_call_takes_the_entry_checks(closures_ex, exec_mode):
    vm = VirtualMachine(closures_ex, exec_mode=exec_mode)
    clo = vm["make"](f32(4))
    shape_error = r"argument 0 'y' has shape \(3,\), but dimension 0 must be 4"
    with pytest.raises(ShapeError, match=shape_error):
        clo(f32(3))
    with pytest.raises(DTypeError, match="argument 0 'y' expects dtype float32, got float64"):
        vm.invoke_closure(clo, np.zeros(4))
    with pytest.raises(TypeError, match=r"takes 1 argument \(y\), got 2"):
        clo(f32(4), f32(4))
    with pytest.raises(TypeError, match="invoke_closure expects a Closure, got ndarray"):
        vm.invoke_closure(f32(4), f32(4))
    other = rvm.runtime.Closure(clo.func_index, clo.free_vars, "elsewhere")
    with pytest.raises(TypeError, match="is not a closure of this VM's executable"):
        vm.invoke_closure(other, f32(4))


def test_closure_keeps_its_vm_alive(closures_ex, exec_mode):
    vm = VirtualMachine(closures_ex, exec_mode=exec_mode)
    alive = weakref.ref(vm)
    k, y = f32(4), f32(4)
    clo = vm["make"](k)
    del vm
    gc.collect()
    assert alive() is not None
    np.testing.assert_allclose(clo(y), y + k, rtol=1e-6)


def test_closure_not_from_a_vm_says_how_to_call_it():
    clo = rvm.runtime.Closure(0, (), "f")
    with pytest.raises(TypeError, match=r"not returned by a VirtualMachine call.*invoke_closure"):
        clo(f32(4))


def test_bind_last_arguments(closures_ex, exec_mode):
    vm = VirtualMachine(closures_ex, exec_mode=exec_mode)
    w, b = f32(3, 2), f32(2)
    affine = vm.bind("affine", w, b)
    for n in (1, 5):
        x = f32(n, 3)
        np.testing.assert_allclose(affine(x), x @ w + b, rtol=1e-5)
    assert "w, b bound" in repr(affine)
    with pytest.raises(ShapeError, match="argument 0 'x'"):
        affine(f32(2, 4))
    with pytest.raises(TypeError, match="bind: main takes 1 arguments, got 2 to bind"):
        vm.bind("main", f32(4), f32(4))


def test_executable_item_and_call_share_a_default_vm(closures_ex):
    x = f32(4)
    np.testing.assert_allclose(closures_ex["main"](x), x * 2, rtol=1e-6)
    np.testing.assert_allclose(closures_ex(x), x * 2, rtol=1e-6)
    assert closures_ex.default_vm() is closures_ex.default_vm()
    with pytest.raises(rvm.FunctionNotFoundError):
        closures_ex["nope"]


def test_stats_report_planned_storage():
    b = ExecBuilder()
    f = b.function("main", ("x",), (ParamSpec("x", "tensor", "float32", (4,)),))
    size, st, t = f.new_register(), f.new_register(), f.new_register()
    f.emit(Opcode.LOAD_CONSTI, size, 4096)
    f.emit(Opcode.ALLOC_STORAGE, st, size, 64, "float32")
    f.emit(Opcode.ALLOC_TENSOR, t, st, 0, (4,), "float32")
    t2 = f.new_register()
    f.emit(Opcode.NEW_TENSOR, t2, (8, 8), "float64", 64)
    f.emit(Opcode.RET, t)
    stats = b.build().stats()
    assert "main" in stats and "planned storage" in stats
    row = next(line for line in stats.splitlines() if line.strip().startswith("main"))
    assert row.endswith("4.50 KB")  # 4096 + 8 * 8 * 8 bytes
    mlp = rvm.compile(MLP).stats()
    row = next(line for line in mlp.splitlines() if line.strip().startswith("main"))
    assert row.endswith("0 B + 3 sized at run time")


def _wrong_result(kernel_source: str) -> rvm.Executable:
    """main(x: (n,) float32) -> (n,) float32 by its recorded type, computed by `kernel`."""
    b = ExecBuilder()
    k = b.add_kernel(KernelRecord("k", "numpy", kernel_source, "k", "return"))
    spec = ParamSpec("x", "tensor", "float32", ("n",))
    f = b.function("main", ("x",), (spec,), result=ParamSpec("result", "tensor", "float32", ("n",)))
    out = f.new_register()
    f.emit(Opcode.CALL_PACKED, out, k, (0,))
    f.emit(Opcode.RET, out)
    return b.build()


def test_results_are_checked_against_the_recorded_type(exec_mode):
    longer = _wrong_result("def k(a):\n    return np.concatenate([a, a])\n")
    vm = VirtualMachine(longer, exec_mode=exec_mode)
    with pytest.raises(ShapeError, match=r"main: result has shape \(6,\), but n = 3 from argument"):
        vm["main"](f32(3))
    wider = _wrong_result("def k(a):\n    return a.astype(np.float64)\n")
    vm = VirtualMachine(wider, exec_mode=exec_mode)
    with pytest.raises(DTypeError, match="main: result should be float32, got float64"):
        vm["main"](f32(3))
    fine = _wrong_result("def k(a):\n    return a + 1\n")
    x = f32(3)
    np.testing.assert_allclose(VirtualMachine(fine, exec_mode=exec_mode)["main"](x), x + 1)


def test_result_proof_is_sound_on_the_sample_programs():
    """Every function whose result type the code proves (so it is not checked at run time)
    returns values the run-time check passes, for every sample program; the MLP is proved."""
    from rvm.runtime.calling import result_check
    from rvm.runtime.result_proof import proved_results
    from rvm.testing.programs import PROGRAMS

    rng = np.random.default_rng(0)
    proved_any = False
    for prog in PROGRAMS:
        ex = rvm.compile(prog.mod, kernels="numpy")
        fidx = ex.function_index(prog.fname)
        if not proved_results(ex)[fidx]:
            continue
        proved_any = True
        args = prog.make_args(rng)
        vm = VirtualMachine(ex, exec_mode="bytecode")
        out = vm[prog.fname](*args)
        check = result_check(ex.functions[fidx])
        if check is not None:
            check(out, vm._checked(prog.fname, args, {})[1], vm)
    assert proved_any
    assert proved_results(rvm.compile(MLP)) == [True]


def test_results_of_python_functions_are_not_proved():
    from rvm.runtime.result_proof import proved_results

    assert proved_results(_wrong_result("def k(a):\n    return a\n")) == [False]


@pytest.mark.parametrize(
    ("shape", "good", "bad"),
    [
        ((None, 2), (5, 2), (5, 3)),
        (("m", "m"), (3, 3), (3, 4)),
        (("n",), (3,), (4,)),
        ((2,), (2,), (3,)),
    ],
)
def test_result_check_shapes(shape, good, bad):
    from rvm.runtime.calling import result_check
    from rvm.runtime.executable import VMFunction

    x = ParamSpec("x", "tensor", "float32", ("n",))
    fn = VMFunction(
        "f", ("x",), (x,), 1, (), result=ParamSpec("result", "tensor", "float32", shape)
    )
    check = result_check(fn)
    args = [np.zeros(3, np.float32)]
    check(np.zeros(good, np.float32), args, None)
    with pytest.raises(ShapeError, match="f: result"):
        check(np.zeros(bad, np.float32), args, None)
    with pytest.raises(DTypeError, match="f: result should be float32, got int64"):
        check(np.zeros(good, np.int64), args, None)
    with pytest.raises(TypeError, match="f: result should be a tensor, got tuple"):
        check((), args, None)
