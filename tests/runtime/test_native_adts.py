"""Values of non-recursive data types in native code (`rvm.runtime.modes.native_adts`): built,
matched, passed in from Python and returned to it, read the same in every exec mode; recursive
data types and files without field types run compiled, saying why."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import rvm
from rvm.runtime import ADT, Executable, VirtualMachine
from rvm.testing.programs import PROGRAMS, DataTypes, Lists

PROGRAMS_HERE = {p.name: p for p in PROGRAMS if p.mod is DataTypes}
TAGS = {"Nothing": 0, "Some": 1, "Circle": 2, "Rect": 3, "Label": 4}


@pytest.fixture(scope="module")
def ex() -> Executable:
    out = rvm.compile(DataTypes)
    names = {c: tag for info in out.adts for c, tag, _ in info.constructors}
    assert names == TAGS
    return out


def _all_native(vm: VirtualMachine) -> None:
    report = vm.native_report()
    assert report.fallbacks == {} and len(report.native) == len(report.functions), str(report)


def _same(got: object, want: object) -> None:
    """Equal values: tensors by value, `ADT` by constructor and fields, tuples field-wise."""
    if isinstance(want, ADT):
        assert isinstance(got, ADT) and (got.tag, got.name) == (want.tag, want.name)
        assert len(got.fields) == len(want.fields)
        for g, w in zip(got.fields, want.fields):
            _same(g, w)
    else:
        assert isinstance(got, np.ndarray) and got.dtype == np.asarray(want).dtype
        np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("name", sorted(PROGRAMS_HERE))
def test_data_type_programs_agree_with_numpy_in_every_mode(ex, exec_mode, name) -> None:
    program = PROGRAMS_HERE[name]
    vm = VirtualMachine(ex, exec_mode=exec_mode)
    for seed in range(3):
        args = program.args(seed)
        _same(vm[program.fname](*args), program.numpy_ref(*args))
    if exec_mode == "native":
        _all_native(vm)


def test_an_option_returned_to_python_is_the_vms_value(ex, exec_mode) -> None:
    vm = VirtualMachine(ex, exec_mode=exec_mode)
    x = np.arange(4, dtype=np.float32) + 1
    _same(vm["find"](x), ADT(TAGS["Some"], (x * 2,), "Some"))
    _same(vm["find"](-x), ADT(TAGS["Nothing"], (), "Nothing"))
    assert repr(vm["find"](-x)) == "Nothing()"
    # by keyword and from a strided view: the checked call, not the native handle's entry
    _same(vm["find"](x=x), ADT(TAGS["Some"], (x * 2,), "Some"))
    strided = np.arange(8, dtype=np.float32)[::2] + 1
    _same(vm["find"](strided), ADT(TAGS["Some"], (strided * 2,), "Some"))
    with pytest.raises(TypeError, match="float32"):
        vm["find"](x.astype(np.float64))
    if exec_mode == "native":
        _all_native(vm)
        assert vm.executable.function_index("find") in vm._mode.plan.module.entries


def test_a_three_constructor_type_of_different_dtypes_round_trips(ex, exec_mode) -> None:
    vm = VirtualMachine(ex, exec_mode=exec_mode)
    x = np.array([1.5, -2.0], np.float32)
    y = np.array([3.0, 4.0, 5.0], np.float32)
    want = {
        0: ADT(TAGS["Circle"], (np.array(x.sum(), np.float32),), "Circle"),
        4: ADT(TAGS["Rect"], (x, np.array(y.sum(), np.float64)), "Rect"),
        8: ADT(TAGS["Label"], (y.astype(np.int64),), "Label"),
    }
    for k, value in want.items():
        made = vm["make"](np.array(k), x, y)
        _same(made, value)
        again = vm["area"](made)  # the VM's value passed back in
        _same(again, vm["area"](value))  # and one Python built
    if exec_mode == "native":
        _all_native(vm)


def test_data_type_values_from_python_are_checked_and_converted(ex, exec_mode) -> None:
    vm = VirtualMachine(ex, exec_mode=exec_mode)
    d = np.zeros(4, np.float32)
    v = np.linspace(0, 1, 4, dtype=np.float32)
    _same(vm["get_or"](ADT(TAGS["Some"], (v,), "Some"), d), v)
    _same(vm["get_or"](ADT(TAGS["Nothing"], (), "Nothing"), d), d)
    strided = np.linspace(0, 1, 4, dtype=np.float32)[::-1]  # not C-contiguous: copied
    _same(vm["get_or"](ADT(TAGS["Some"], (strided,), "Some"), d), strided)
    rect = ADT(TAGS["Rect"], (np.ones(2, np.float32), np.array(2.5)), "Rect")
    _same(vm["area"](rect), np.array(5.0, np.float32))
    if exec_mode == "native":
        _all_native(vm)


def test_a_recursive_data_type_runs_compiled_and_says_why() -> None:
    vm = VirtualMachine(rvm.compile(Lists), exec_mode="native")
    reasons = vm.native_report().fallbacks
    assert reasons["total"].startswith("parameter 'xs': recursive data type List")
    assert reasons["build"].startswith("parameter 'xs': recursive data type List")
    assert reasons["main"].startswith("recursive data type List (pc ")  # it builds Nil()
    np.testing.assert_array_equal(vm["main"](np.array(4)), np.full(2, 10.0, np.float32))


def test_a_saved_executable_runs_its_data_types_natively(ex, tmp_path: Path) -> None:
    path = tmp_path / "adts.rvmx"
    ex.save(path)
    vm = VirtualMachine(rvm.load_executable(path), exec_mode="native")
    program = PROGRAMS_HERE["adt_match_loop"]
    args = program.args(1)
    _same(vm["total"](*args), program.numpy_ref(*args))
    _same(vm["find"](np.ones(4, np.float32)), ADT(TAGS["Some"], (np.full(4, 2.0, "f4"),), "Some"))
    _all_native(vm)


def test_a_file_without_field_types_runs_its_data_types_compiled(ex) -> None:
    from test_serialize import _rename_section

    data = _rename_section(ex.to_bytes(), b"ADTF", b"ZZZZ")  # as a reader before ADTF saw it
    vm = VirtualMachine(Executable.from_bytes(data, trusted=True), exec_mode="native")
    reasons = vm.native_report().fallbacks
    assert reasons["get_or"] == "parameter 'o': data type Opt has no recorded field types"
    x = np.ones(4, np.float32)
    _same(vm["main"](x, x), x * 2)


NESTED = """
@rvm.script.adt
class Shape:
    Circle: (T[(), "float32"],)
    Label: (T[(3,), "int64"],)

@rvm.script.adt
class Tagged:
    Plain: (T[(2,), "float32"],)
    Pair: ("Shape", Tuple[T[(2,), "float32"], T[(), "int64"]])

@module
class Nested:
    @func
    def wrap(x: T[(2,), "float32"], n: T[(), "int64"]):
        if n > 0:
            return Pair(Circle(op.sum(x)), (x, n))
        else:
            return Plain(x)

    @func
    def score(t: Tagged):
        match t:
            case Pair(Circle(r), (v, n)):
                return op.sum(v) * r + op.cast(n, "float32")
            case Pair(Label(ids), (v, n)):
                return op.cast(op.sum(ids), "float32")
            case Plain(v):
                return op.sum(v)
"""


def test_nested_data_types_and_tuple_fields_round_trip(exec_mode) -> None:
    mod = rvm.script.parse(NESTED)
    vm = VirtualMachine(rvm.compile(mod), exec_mode=exec_mode)
    tags = {c: tag for info in vm.executable.adts for c, tag, _ in info.constructors}
    x = np.array([1.0, 2.0], np.float32)
    made = vm["wrap"](x, np.array(3))
    circle = ADT(tags["Circle"], (np.array(3.0, np.float32),), "Circle")
    assert made.name == "Pair" and isinstance(made.fields[1], tuple)
    _same(made.fields[0], circle)
    np.testing.assert_array_equal(made.fields[1][0], x)
    _same(vm["score"](made), np.array(12.0, np.float32))
    label = ADT(tags["Label"], (np.arange(3),), "Label")
    given = ADT(tags["Pair"], (label, (x, np.array(1))), "Pair")
    _same(vm["score"](given), np.array(3.0, np.float32))
    _same(vm["score"](vm["wrap"](x, np.array(0))), np.array(3.0, np.float32))
    for seed in range(2):
        v = np.random.default_rng(seed).standard_normal(2).astype(np.float32)
        want = rvm.interpret(mod, "score", rvm.interpret(mod, "wrap", v, np.array(2)))
        _same(vm["score"](vm["wrap"](v, np.array(2))), want)
    if exec_mode == "native":
        _all_native(vm)
