"""Executable: builder validation, save/load, the loader fuzz, as_text, as_python, stats."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import numpy as np
import pytest
import rt_helpers as h

import rvm.runtime.text as text_mod
from rvm.errors import ExecutableFormatError
from rvm.runtime import (
    OPCODE_INFO,
    ExecBuilder,
    Executable,
    Opcode,
    VirtualMachine,
    load_executable,
)
from rvm.runtime import Opcode as O
from rvm.runtime.modes.bytecode import loop_source
from rvm.runtime.modes.decode import decode_executable
from rvm.runtime.serialize import SECTIONS, encode

ALL_PROGRAMS = [
    h.straight_line,
    h.counting_loop,
    h.recursive_sum,
    h.list_program,
    h.closure_program,
    h.symbolic_program,
    h.every_opcode_program,
]
SRC = str(Path(__file__).resolve().parents[2] / "src")


def assert_same(a: Executable, b: Executable) -> None:
    assert a.functions == b.functions
    assert len(a.constants) == len(b.constants)
    for x, y in zip(a.constants, b.constants):
        assert x.dtype == y.dtype and x.shape == y.shape
        assert x.tobytes() == y.tobytes()
    assert a.primitive_names == b.primitive_names
    assert dict(a.kernels) == dict(b.kernels)
    assert dict(a.libraries) == dict(b.libraries)
    assert a.adts == b.adts


def test_opcode_table_covers_every_opcode():
    assert set(OPCODE_INFO) == set(Opcode)
    decoded = decode_executable(h.every_opcode_program())  # the VM's decoder takes them all
    source = loop_source()  # ...and the loop dispatches on every decoded opcode
    assert all(f"op == {i[0]}" in source for f in decoded for i in f.code)
    used = {Opcode(i[0]) for f in h.every_opcode_program().functions for i in f.instructions}
    assert used == set(Opcode)  # ...and one program runs them all (test_vm_programs)
    for op, info in OPCODE_INFO.items():  # disassembler templates name every operand
        fields = {f: "x" for f, _ in info.operands}
        info.text.format(**fields)
        assert all("{" + f + "}" in info.text for f, _ in info.operands), op
    # The serializer and as_python round-trip a program that uses every opcode.
    prog = h.every_opcode_program()
    assert_same(Executable.from_bytes(prog.to_bytes()), prog)
    assert_same(_exec_python(prog.as_python()), prog)


@pytest.mark.parametrize("make", ALL_PROGRAMS)
def test_save_load_round_trip(make, tmp_path):
    ex = make()
    path = tmp_path / "prog.rvmx"
    ex.save(str(path))
    again = load_executable(str(path))
    assert_same(again, ex)
    assert again.to_bytes() == ex.to_bytes()
    VirtualMachine(again)  # resolves every kernel


def test_loaded_executable_runs():
    ex = Executable.from_bytes(h.symbolic_program().to_bytes())
    x = np.random.rand(3, 4).astype(np.float32)
    np.testing.assert_allclose(VirtualMachine(ex)["main"](x, x), np.exp(x), rtol=1e-6)


@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn", "int4"])
def test_narrow_constants_round_trip(dtype, exec_mode):
    import ml_dtypes

    ex = h.narrow_constant_program(dtype)
    again = Executable.from_bytes(ex.to_bytes())
    assert_same(again, ex)
    assert again.constants[0].dtype == np.dtype(getattr(ml_dtypes, dtype))
    x = np.array([1.0, 2.0, -3.0, 0.25], np.float32).astype(dtype)
    out = VirtualMachine(again, exec_mode=exec_mode)["main"](x)
    assert out.dtype == x.dtype
    np.testing.assert_array_equal(out.astype(np.float32), (x + ex.constants[0]).astype(np.float32))


def _fresh(code: str) -> subprocess.CompletedProcess:
    env_code = f"import sys; sys.path.insert(0, {SRC!r})\n" + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", env_code], capture_output=True, text=True)


def test_saved_bfloat16_constant_loads_in_a_fresh_process(tmp_path):
    path = tmp_path / "bf16.rvmx"
    h.narrow_constant_program().save(str(path))
    run = _fresh(
        f"""
        import numpy as np
        import rvm
        ex = rvm.load_executable({str(path)!r})  # imports ml_dtypes for the constant
        print(ex.constants[0].dtype, ex.constants[0].astype(np.float32).tolist())
        x = np.ones(4, np.float32).astype(ex.constants[0].dtype)
        print(rvm.VirtualMachine(ex)["main"](x).astype(np.float32).tolist())
        """
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split("\n")[:2] == [
        "bfloat16 [0.5, -1.0, 3.0, 1000.0]",
        "[1.5, 0.0, 4.0, 1000.0]",
    ]


def test_loading_a_narrow_constant_without_ml_dtypes_says_what_to_install(tmp_path):
    path = tmp_path / "bf16.rvmx"
    h.narrow_constant_program().save(str(path))
    run = _fresh(
        f"""
        sys.modules["ml_dtypes"] = None  # as if it were not installed
        import rvm
        try:
            rvm.load_executable({str(path)!r})
        except rvm.DTypeError as err:
            print(err)
        """
    )
    assert run.returncode == 0, run.stderr
    assert "bfloat16" in run.stdout and "pip install ml_dtypes" in run.stdout


def test_format_errors_have_clear_messages():
    data = h.straight_line().to_bytes()
    with pytest.raises(ExecutableFormatError, match="magic"):
        Executable.from_bytes(b"NOPE" + data[4:])
    bumped = data[:4] + (9).to_bytes(2, "little") + data[6:]
    with pytest.raises(ExecutableFormatError, match=r"version 9\.\d+ is not supported"):
        Executable.from_bytes(bumped)
    with pytest.raises(ExecutableFormatError, match="truncated"):
        Executable.from_bytes(data[: len(data) // 2])
    flipped = bytearray(data)
    flipped[-3] ^= 0xFF
    with pytest.raises(ExecutableFormatError, match="CRC32"):
        Executable.from_bytes(bytes(flipped))
    assert [data.find(tag) for tag in SECTIONS] == sorted(data.find(tag) for tag in SECTIONS)


def _with_minor(data: bytes, minor: int) -> bytes:
    return data[:6] + minor.to_bytes(2, "little") + data[8:]


@pytest.mark.parametrize("exec_mode", ["bytecode", "compiled"])
def test_a_format_1_1_file_runs_with_its_tail_calls_as_tail_opcodes(exec_mode):
    data = encode(h.counting_loop(old_style=True), version=(1, 6))
    old = Executable.from_bytes(_with_minor(data, 1), trusted=True)  # unsigned
    ops = [ins[0] for ins in old.functions[0].instructions]
    assert O.TAIL_INVOKE in ops and O.INVOKE not in ops and len(ops) == 8  # no pc moved
    current = Executable.from_bytes(data, trusted=True)  # a 1.2 file runs INVOKE as written
    assert O.INVOKE in [ins[0] for ins in current.functions[0].instructions]
    n = np.array(20_000, np.int64)
    for ex in (old, current):
        out = VirtualMachine(ex, exec_mode=exec_mode)["loop"](np.array(0, np.int64), n, 0)
        assert out == np.float32(30_000)


def _set_first_opcode(data: bytes, opcode: int) -> bytes:
    """`data` with the first instruction's opcode byte replaced, the CODE section's CRC fixed."""
    out = bytearray(data)
    pos = 12
    while out[pos : pos + 4] != b"CODE":
        pos += 16 + int.from_bytes(out[pos + 4 : pos + 12], "little")
    length = int.from_bytes(out[pos + 4 : pos + 12], "little")
    out[pos + 16 + 4] = opcode  # after the u32 instruction count
    crc = zlib.crc32(bytes(out[pos + 16 : pos + 16 + length]))
    out[pos + 12 : pos + 16] = crc.to_bytes(4, "little")
    return bytes(out)


def test_unknown_opcodes_of_a_newer_format_say_which_rvm_to_use():
    data = _set_first_opcode(h.straight_line().to_bytes(), 200)
    with pytest.raises(ExecutableFormatError, match=r"section: unknown opcode 200"):
        Executable.from_bytes(data)
    with pytest.raises(ExecutableFormatError, match=r"format 2\.9\) uses opcode 200"):
        Executable.from_bytes(_with_minor(data, 9))


def test_corrupt_shape_instructions_are_rejected():
    b = ExecBuilder()
    bad = b.add_constant(np.array([1, 0, 0], np.int64))  # not (kind, value) pairs
    context = b.add_constant(np.array("ctx"))
    f = b.function("main", ("x",))
    heap = f.new_register()
    f.emit(O.ALLOC_SHAPE_HEAP, heap, 1)
    f.emit(O.MATCH_SHAPE, 0, heap, bad, context)
    f.emit(O.RET, 0)
    with pytest.raises(ExecutableFormatError, match="pattern constant"):
        b.build()
    b = ExecBuilder()
    f = b.function("main", ())
    f.emit(O.ALLOC_SHAPE_HEAP, f.new_register(), 1 << 40)
    f.emit(O.RET, 0)
    with pytest.raises(ExecutableFormatError, match="shape heap size"):
        b.build()


FUZZ = textwrap.dedent("""
    import random, struct, sys, zlib
    sys.path[:0] = [{src!r}, {here!r}]
    import numpy as np
    import rt_helpers as h
    from rvm.errors import ExecutableFormatError, UntrustedExecutableError
    from rvm.runtime import Executable, VirtualMachine

    def recrc(data):
        # Fix every section's CRC so corruption reaches the bounds-checked section readers.
        pos = 12
        while pos + 16 <= len(data):
            length = struct.unpack_from("<Q", data, pos + 4)[0]
            payload = data[pos + 16 : pos + 16 + length]
            struct.pack_into("<I", data, pos + 12, zlib.crc32(payload))
            pos += 16 + length
        return data

    rng = random.Random(1234)
    from rvm.runtime.loading.artifact import NativeCode, NativeGroup
    from rvm.runtime.serialize import encode
    images = [make().to_bytes() for make in (h.straight_line, h.list_program,
                                             h.symbolic_program, h.every_opcode_program)]
    # A NATV section (native code, format 1.4) of another machine's key: it loads as the
    # image without it, which its to_bytes gives back.
    native = NativeCode("rvm=0 cpu=fuzz", (
        NativeGroup("module", "rvm.kernels.mathlib", 0,
                    (("mathlib.f-1.py311.nbi", b"index"), ("mathlib.f-1.py311.1.nbc", b"da"))),
        NativeGroup("kernel", "k_0123456789abcdef01234567.py", 1 << 60,
                    (("k_0123456789abcdef01234567.f-3.py311.nbi", b"ix"),)),
    ))
    images.append(encode(h.straight_line(), native))
    runnable = images[0]
    x = np.ones(4, np.float32)
    ok = rejected = 0
    for case in range(240):
        data = bytearray(rng.choice(images))
        mode = case % 4
        if mode == 0:
            data = data[: rng.randrange(len(data))]
        else:
            for _ in range(rng.randint(1, 4)):
                pos = rng.randrange(min(len(data), 64)) if mode == 1 else rng.randrange(len(data))
                data[pos] ^= 1 << rng.randrange(8)
            if mode == 3:
                data = recrc(data)
        try:  # re-CRC'd images load without checking the weights: flips there load too
            ex = Executable.from_bytes(bytes(data), check_weights=mode != 3)
        except ExecutableFormatError:
            rejected += 1
            continue
        ok += 1
        try:
            vm = VirtualMachine(ex)
        except UntrustedExecutableError:  # unsigned, or flips in signed bytes
            continue
        except Exception:  # a re-CRC'd image may name a packed function that does not exist
            assert mode == 3
            continue
        if mode != 3:  # the CRCs and the weights' digest passed: the content is the original
            assert ex.to_bytes() in images
            if ex.to_bytes() == runnable:
                vm["main"](x, x)
    print("ok", ok, "rejected", rejected)
""")


def test_loader_fuzz_in_a_subprocess():
    here = str(Path(__file__).parent)
    proc = subprocess.run(
        [sys.executable, "-c", FUZZ.format(src=SRC, here=here)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "rejected" in proc.stdout, proc.stdout


def test_result_specs_round_trip_and_older_files_have_none():
    from rvm.runtime import ParamSpec

    pair = ParamSpec(
        "result",
        "tuple",
        fields=(ParamSpec("result[0]", "tensor", "float32", ("n", 4)), ParamSpec("result[1]")),
    )
    b = ExecBuilder()
    f = b.function("main", ("x",), result=pair)
    f.emit(O.RET, 0)
    ex = b.build()
    assert Executable.from_bytes(ex.to_bytes()).functions[0].result == pair
    assert _exec_python(ex.as_python()).functions[0].result == pair
    assert text_mod.signature(ex.functions[0], result=True) == (
        "@main(x: any) -> Tuple(Tensor((n, 4), float32), any)"
    )
    # A 1.2 writer had no RSLT section: drop it (the last section) and the header's count.
    data = bytearray(encode(ex, version=(1, 6)))
    cut = data.rindex(b"RSLT")
    old = bytes(data[:4]) + (1).to_bytes(2, "little") + (2).to_bytes(2, "little")
    old += (int.from_bytes(data[8:12], "little") - 1).to_bytes(4, "little") + bytes(data[12:cut])
    assert Executable.from_bytes(old).functions[0].result is None


def test_build_validation():
    b = ExecBuilder()
    f = b.function("main", ("x",), register_file_size=1)
    f.emit(O.MOVE, 5, 0)
    f.emit(O.RET, 0)
    with pytest.raises(ExecutableFormatError, match="register below 1"):
        b.build()

    b = ExecBuilder()
    f = b.function("g", ("a", "b"))
    f.emit(O.RET, 0)
    f = b.function("main", ("x",))
    f.emit(O.INVOKE, 1, "g", (0,))
    f.emit(O.RET, 1)
    with pytest.raises(ExecutableFormatError, match="invoke @g with 1 args, it takes 2"):
        b.build()

    b = ExecBuilder()
    f = b.function("main", ("x",))
    f.emit(O.GOTO, 7)
    with pytest.raises(ExecutableFormatError, match="jumps to 7"):
        b.build()

    b = ExecBuilder()
    f = b.function("main", ("x",))
    f.emit(O.LOAD_CONST, 0, 3)
    f.emit(O.RET, 0)
    with pytest.raises(ExecutableFormatError, match="out of range"):
        b.build()

    b = ExecBuilder()
    f = b.function("main", ("x",))
    f.emit(O.MOVE, 0, 0)
    with pytest.raises(ExecutableFormatError, match="fall off"):
        b.build()

    b = ExecBuilder()
    f = b.function("main", ("x",))
    f.emit(O.INVOKE, 0, "nowhere", ())
    f.emit(O.RET, 0)
    with pytest.raises(ExecutableFormatError, match="unknown function 'nowhere'"):
        b.build()


def test_as_text_shows_jump_targets_and_names():
    text = h.counting_loop().as_text()
    assert "@loop(i: Tensor((), int64)" in text
    assert "if                $0 == $1 then -> 6 else -> 1" in text
    assert "tail_invoke       return @loop($5, $1, $6)" in text
    assert "$5 = add_ret($0, $3)" in text
    assert "ret               $2" in text
    assert "c0 (float32[] 1.5)" in text
    every = h.every_opcode_program().as_text()
    assert "goto              -> 30" in every
    assert "exp($0, $9)  outputs: 1 of 2" in every
    assert "c0 ('boom!')" in every


def _exec_python(src: str) -> Executable:
    namespace: dict = {}
    exec(compile(src, "<as_python>", "exec"), namespace)
    return namespace["executable"]


@pytest.mark.parametrize("make", ALL_PROGRAMS)
def test_as_python_rebuilds_an_equal_executable(make):
    ex = make()
    assert_same(_exec_python(ex.as_python()), ex)


def test_stats_summary():
    s = h.symbolic_program().stats()
    assert "functions: 1" in s and "main" in s
    assert "constants: 3" in s
    assert "primitives: 1 (1 kernels, 0 global functions)" in s
    assert "kernels: 1 (1 numpy)" in s
    assert text_mod.describe_value(np.zeros((100, 100), np.float32)) == "float32[100, 100]"
