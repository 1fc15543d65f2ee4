"""Property tests on random programs (`rvm.testing.random_programs`): compiled and run on the VM
they give the interpreter's result in every exec mode with every kernel backend; a program with
a symbolic dim runs at every size with one executable; and it prints and parses back equal.

With ``kernels="jit"`` each new program compiles its Numba kernels (about 0.5 s a program on
two cores), so the jit runs take fewer examples; kernels are cached on disk by source, so a
failing example replayed from hypothesis' database compiles fast.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings

import rvm
from rvm import op
from rvm.ir import Builder, Var, assert_structural_equal, tensor, verify
from rvm.testing import assert_values_close
from rvm.testing.random_programs import SIZES, RandomProgram, random_program, random_programs

TOL = {"rtol": 1e-4, "atol": 1e-5}
EXAMPLES = {"numpy": 25, "jit": 20}
SYMBOLIC_EXAMPLES = {"numpy": 10, "jit": 8}
# The exec_mode and kernels fixtures do not change between a test's examples.
FIXTURES_OK = [HealthCheck.function_scoped_fixture]

_EXECUTABLES: dict[tuple[str, str], rvm.Executable] = {}


def executable(program: RandomProgram, kernels: str) -> rvm.Executable:
    """One executable per program text and backend, shared by the exec modes (and by
    hypothesis' replays while it shrinks)."""
    key = (program.mod.script(), kernels)
    if key not in _EXECUTABLES:
        _EXECUTABLES[key] = rvm.compile(program.mod, kernels=kernels)
    return _EXECUTABLES[key]


def check_sizes(program: RandomProgram, vm: rvm.VirtualMachine, sizes: tuple[int, ...]) -> None:
    for n in sizes:
        args = program.args(n=n)
        expected = rvm.interpret(program.mod, program.fname, *args)
        assert_values_close(vm[program.fname](*args), expected, path=f"n={n}", **TOL)


def test_vm_matches_interpreter(exec_mode: str, kernels: str) -> None:
    @settings(max_examples=EXAMPLES[kernels], deadline=None, suppress_health_check=FIXTURES_OK)
    @given(program=random_programs())
    def check(program: RandomProgram) -> None:
        vm = rvm.VirtualMachine(executable(program, kernels), exec_mode=exec_mode)
        check_sizes(program, vm, (program.n,))

    check()


def test_symbolic_dims_share_one_executable(exec_mode: str, kernels: str) -> None:
    @settings(
        max_examples=SYMBOLIC_EXAMPLES[kernels], deadline=None, suppress_health_check=FIXTURES_OK
    )
    @given(program=random_programs(symbolic=True))
    def check(program: RandomProgram) -> None:
        assert program.symbolic
        vm = rvm.VirtualMachine(executable(program, kernels), exec_mode=exec_mode)
        check_sizes(program, vm, SIZES)  # n = 0, 1 and more, one VM

    check()


@settings(max_examples=60, deadline=None)
@given(program=random_programs())
def test_print_parse_round_trip(program: RandomProgram) -> None:
    verify(program.mod)
    text = program.mod.script()
    again = rvm.script.parse(text)
    assert_structural_equal(again, program.mod)
    assert again.script() == text


def test_seeded_generator_is_deterministic() -> None:
    for seed in range(20):
        a, b = random_program(seed), random_program(seed)
        assert a.mod.script() == b.mod.script()
        for x, y in zip(a.args(), b.args()):
            np.testing.assert_array_equal(x, y)
    assert len({random_program(seed).mod.script() for seed in range(20)}) > 15


def test_reshape_solves_minus_one_beside_an_empty_symbolic_dim() -> None:
    bb = Builder()
    x = Var("x", tensor(("n", 4), "float32"))
    with bb.function("main", [x]):
        bb.emit_output(bb.emit(op.reshape(x, ("n", -1, 2))))
    out = rvm.interpret(bb.get(), "main", np.zeros((0, 4), "float32"))
    assert out.shape == (0, 2, 2)


def test_reshape_beside_an_empty_symbolic_dim_in_a_fused_kernel(
    exec_mode: str, kernels: str
) -> None:
    """Hypothesis' example: a fused tanh/reshape/sum whose reshape keeps ``n`` and regroups the
    fixed dims. A generic jit kernel inferred the fixed size as -1, undetermined at n = 0."""
    for target in (("n", 2, 8), ("n", 16), ("n", 4, 4)):
        bb = Builder()
        x = Var("x", tensor(("n", 4, 4), "float32"))
        with bb.function("main", [x]):
            t = bb.emit(op.tanh(x))
            r = bb.emit(op.reshape(t, target))
            bb.emit_output(bb.emit(op.sum(r, axis=1)))
        mod = bb.get()
        vm = rvm.VirtualMachine(rvm.compile(mod, kernels=kernels), exec_mode=exec_mode)
        for n in (0, 3, 0):
            a = np.random.default_rng(180).standard_normal((n, 4, 4)).astype("float32")
            expected = np.tanh(a).reshape(n, *target[1:]).sum(axis=1)
            assert_values_close(vm["main"](a), expected, path=f"{target} n={n}", **TOL)
            assert_values_close(rvm.interpret(mod, "main", a), expected, **TOL)
