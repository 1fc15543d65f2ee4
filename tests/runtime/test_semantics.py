"""Each opcode's meaning is written once (`rvm.runtime.semantics`) and every exec mode runs it.

The probe tests rewrite every template of the table to pass its value through `_probe(name,
value)`, rebuild the modes from the rewritten table and run real programs: a mode that wrote
an opcode's meaning itself, instead of rendering the table, would run without the probe and
fail them. The native mode runs the table too, or the override the table states for it
(`OVERRIDES["native"]`); its probe records from Numba code (`_native_probe`, through
`numba.objmode`).
"""

from __future__ import annotations

from typing import Any

import numba as nb
import numpy as np
import pytest
import rt_helpers as h

from rvm.errors import VMError
from rvm.runtime import ExecContext, Executable, NaiveAllocator, Opcode
from rvm.runtime import semantics as sem
from rvm.runtime.kernels import resolve_primitives
from rvm.runtime.modes.bytecode import BytecodeMode, compile_loop
from rvm.runtime.modes.compiled import CompiledMode
from rvm.runtime.modes.decode import decode_executable

O = Opcode
DERIVED_TEMPLATES = ("TINY_TENSOR", "IF_EQUAL", "IF_INT", "IF_BOOL")


def test_every_opcode_has_one_meaning_or_is_control():
    assert set(sem.SEMANTICS) | sem.CONTROL_OPCODES == set(Opcode)
    assert not set(sem.SEMANTICS) & sem.CONTROL_OPCODES
    for op, text in sem.SEMANTICS.items():  # every field names an operand of the opcode
        assert {f for f, _ in sem.fields(text)} <= set(sem.operand_kinds(op)), op


def test_the_loop_dispatches_every_opcode_of_the_table_hot_ones_first():
    from rvm.runtime.modes import bytecode
    from rvm.runtime.modes.decode import ALLOC_TUPLE, NEW_TINY

    order = [code for code, _, _ in bytecode.dispatch_order()]
    assert len(order) == len(set(order))
    assert set(order) == set(sem.SEMANTICS) | sem.CONTROL_OPCODES | {NEW_TINY, ALLOC_TUPLE}
    assert order[: len(bytecode.HOT)] == list(bytecode.HOT)
    labels = [label for _, label, _ in bytecode.dispatch_order()]
    assert "NEW_TENSOR tiny" in labels and "ALLOC_ADT tuple" in labels


def _probed(name: str, text: str) -> str:
    """`text` with its value passed through `_probe(name, value)`."""
    if text.startswith("raise _Fatal("):
        return text.replace("_Fatal(", f"_Fatal(_probe({name!r}, ", 1) + ")"
    if text.startswith("{") and " = " in text:
        target, value = text.split(" = ", 1)
        return f"{target} = _probe({name!r}, {value})"
    return f"_probe({name!r}, {text})"


@pytest.fixture
def probes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every template of the table rewritten to record its name; the names recorded."""
    seen: list[str] = []

    def probe(name: str, value: Any) -> Any:
        seen.append(name)
        return value

    for op, text in list(sem.SEMANTICS.items()):
        monkeypatch.setitem(sem.SEMANTICS, op, _probed(op.name, text))
    for op, (variant, applies, text) in list(sem.VARIANTS.items()):
        probed = _probed(f"{op.name}.{variant}", text)
        monkeypatch.setitem(sem.VARIANTS, op, (variant, applies, probed))
    for name in DERIVED_TEMPLATES:
        monkeypatch.setattr(sem, name, _probed(name, getattr(sem, name)))
    monkeypatch.setitem(sem.RUNTIME_NAMES, "_probe", probe)
    return seen


def _mode(ex: Executable, mode: str) -> Any:
    """Mode `mode` of `ex` built from the templates as they are now."""
    allocator = NaiveAllocator()
    context = ExecContext(ex, decode_executable(ex), resolve_primitives(ex), allocator)

    class Probed(BytecodeMode):
        run = compile_loop()

    context.run_bytecode = Probed(context).run
    return Probed(context) if mode == "bytecode" else CompiledMode(context)


EVERY_OPCODE_RESULT_OPS = {op.name for op in sem.SEMANTICS} | {"ALLOC_ADT.tuple", "NEW_TENSOR.tiny"}
"""The templates `every_opcode_program` runs (its IF's branches coincide: no test runs)."""


@pytest.mark.parametrize("mode", ["bytecode", "compiled"])
def test_both_modes_run_every_meaning_from_the_table(probes, mode):
    ex = h.every_opcode_program()
    run = _mode(ex, mode).run
    x = np.arange(6, dtype=np.float32).reshape(2, 3) / 6
    moved, _, tr = run(ex.function_index("main"), [x])
    np.testing.assert_allclose(moved, np.exp(x))
    np.testing.assert_allclose(tr, np.exp(x))
    with pytest.raises(VMError, match="boom!"):
        run(ex.function_index("boom"), [])
    assert EVERY_OPCODE_RESULT_OPS <= set(probes)  # every meaning, from the table


@pytest.mark.parametrize("mode", ["bytecode", "compiled"])
def test_the_if_tests_are_from_the_table(probes, mode):
    """IF_IMM runs `IF_INT` (`IF_BOOL` on a known bool tensor), IF runs `IF_EQUAL`."""
    assert _mode(h.recursive_sum(), mode).run(0, [np.array(5, np.int64)]) == 15
    assert "IF_INT" in probes and "IF_EQUAL" not in probes
    probes.clear()
    assert _mode(h.count_down(), mode).run(0, [np.array(4), np.array(10)]) == 14
    assert "IF_EQUAL" in probes


# -- the native mode --------------------------------------------------------------------------

PROBED: list[str] = []
"""The templates native code ran (`_native_probe` records them from Numba code)."""


def _record(name: str) -> None:
    PROBED.append(name)


@nb.njit
def _native_probe(name, value):  # type: ignore[no-untyped-def]
    with nb.objmode():
        _record(name)
    return value


def _native_probed(name: str, text: str) -> str:
    if text.startswith("pass"):  # a statement with no value: probe it beside
        return f"_probe({name!r}, 0)" + text[len("pass") :]
    return _probed(name, text)


@pytest.fixture
def native_probes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every template the native mode renders (`semantics.template(ins, "native")` and its
    IF tests) rewritten to record its name from native code; the names recorded."""
    from rvm.runtime.modes import native_codegen, native_support

    for op, text in list(sem.SEMANTICS.items()):
        monkeypatch.setitem(sem.SEMANTICS, op, _native_probed(op.name, text))
    for op, (variant, applies, text) in list(sem.VARIANTS.items()):
        probed = _native_probed(f"{op.name}.{variant}", text)
        monkeypatch.setitem(sem.VARIANTS, op, (variant, applies, probed))
    native = sem.OVERRIDES["native"]
    for op, override in list(native.items()):
        if override.template is not None:
            probed = _native_probed(f"{op.name}.native", override.template)
            monkeypatch.setitem(native, op, sem.Override(override.why, probed))
    for name in ("IF_SCALAR", "IF_SCALARS"):
        monkeypatch.setattr(sem, name, _probed(name, getattr(sem, name)))
    monkeypatch.setattr(native_support, "probe", _native_probe, raising=False)
    names = (*native_codegen.NATIVE_SUPPORT_NAMES, "probe")
    monkeypatch.setattr(native_codegen, "NATIVE_SUPPORT_NAMES", names)
    PROBED.clear()
    return PROBED


NATIVE_PROGRAM = """
@module
class Probe:
    @func
    def main(x: T[("n", 4), "float32"], w: T[(4, 4), "float32"], steps: T[(), "int64"]):
        i = rvm.const(0, "int64")
        h = op.tanh(op.matmul(x, w))
        while i < steps:
            h = op.tanh(op.matmul(h, w))
            i = i + 1
        pair = split(h)
        return op.add(pair[0], op.reshape(pair[1], (-1, 4)))

    @func
    def split(h: T[("n", 4), "float32"]):
        return (op.exp(h), op.negative(h))
"""


STATIC_PROGRAM = """
@module
class Static:
    @func
    def main(h: T[(1, 8), "float32"], w: T[(8, 8), "float32"], steps: T[(), "int64"]):
        i = rvm.const(0, "int64")
        while i < steps:
            g = op.matmul(h, w)
            h = op.tanh(g)
            i = i + 1
        return op.reshape(h, (2, 4))
"""


NATIVE_TEMPLATES = {
    "ALLOC_ADT.tuple",
    "ALLOC_SHAPE_HEAP",
    "GET_FIELD.native",
    "IF_SCALAR",
    "INVOKE_PACKED",
    "KILL_REGISTER.native",
    "LOAD_CONST",
    "NEW_TENSOR.native",
    "NEW_TENSOR_REG.native",
    "RESHAPE_TENSOR",
}
"""The templates the two programs below run natively: from `SEMANTICS`, `VARIANTS` and the
native mode's stated overrides (`.native`)."""


def test_the_native_mode_runs_the_table_or_the_override_it_states(native_probes):
    import rvm

    mod = rvm.script.parse(NATIVE_PROGRAM)
    vm = rvm.VirtualMachine(rvm.compile(mod, kernels="jit"), exec_mode="native")
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    w = np.eye(4, dtype=np.float32) * 0.5
    args = (x, w, np.array(3, np.int64))
    np.testing.assert_allclose(vm["main"](*args), rvm.interpret(mod, "main", *args), rtol=1e-5)
    assert vm.native_report().native == ["main", "main__while_loop0", "split"]

    mod = rvm.script.parse(STATIC_PROGRAM)
    vm = rvm.VirtualMachine(rvm.compile(mod, kernels="jit"), exec_mode="native")
    h = np.linspace(-1, 1, 8, dtype=np.float32).reshape(1, 8)
    args = (h, np.eye(8, dtype=np.float32) * 0.9, np.array(4, np.int64))
    np.testing.assert_allclose(vm["main"](*args), rvm.interpret(mod, "main", *args), rtol=1e-5)
    assert vm.native_report().native == ["main", "main__while_loop0"]
    assert set(native_probes) >= NATIVE_TEMPLATES


def test_each_native_override_states_why_and_the_mode_writes_exactly_the_rest():
    from rvm.runtime.modes.native_codegen import OWN_STATEMENTS

    native = sem.OVERRIDES["native"]
    assert set(native) <= set(sem.SEMANTICS)  # control opcodes are every mode's own anyway
    for op, override in native.items():
        assert len(override.why) > 20, op
        if override.template is not None:
            assert {f for f, _ in sem.fields(override.template)} <= set(sem.operand_kinds(op))
    assert OWN_STATEMENTS == {op for op, o in native.items() if o.template is None}
    fatal = (int(O.FATAL), 0)
    assert sem.template(fatal) == ("", sem.SEMANTICS[O.FATAL])
    with pytest.raises(KeyError, match="native writes FATAL itself: no Python exception"):
        sem.template(fatal, "native")
    kill = (int(O.KILL_REGISTER), 3)
    assert sem.template(kill, "native") == ("native", native[O.KILL_REGISTER].template)
