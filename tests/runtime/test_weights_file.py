"""Format 2's weights (`rvm.runtime.weights`): the constants' bytes in one WGHT section,
memory-mapped at load and shared with the file; everything that says where they lie is
checked at every load, their bytes against their digest on request; hostile files."""

from __future__ import annotations

import mmap
import os
import pickle
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest

import rvm
from rvm import op
from rvm.errors import ExecutableFormatError, UntrustedExecutableError
from rvm.ir import Builder, Var, const, tensor
from rvm.runtime import Executable
from rvm.runtime import weights as wt
from rvm.runtime.serialize import VERSION, decode, encode

RNG = np.random.default_rng(11)
W = RNG.standard_normal((64, 48)).astype("float32")
B = RNG.standard_normal(48).astype("float32")
IDS = np.arange(300, dtype="int64")
X = RNG.standard_normal((3, 64)).astype("float32")


def _module() -> rvm.IRModule:
    bb = Builder()
    x = Var("x", tensor((3, 64), "float32"))
    with bb.function("main", [x]):
        y = bb.emit(op.add(op.matmul(x, const(W)), const(B)))
        bb.emit_output(bb.emit(op.tanh(y)))
    n = Var("n", tensor((), "int64"))
    with bb.function("ids", [n]):
        bb.emit_output(bb.emit(op.add(const(IDS), n)))
    return bb.get()


@pytest.fixture(scope="module")
def compiled() -> Executable:
    return rvm.compile(_module(), opt_level=0)


@pytest.fixture(autouse=True)
def _config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RVM_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.chdir(tmp_path)


def _check_runs(ex: Executable, exec_mode: str) -> None:
    vm = rvm.VirtualMachine(ex, exec_mode=exec_mode)
    np.testing.assert_allclose(vm["main"](X), np.tanh(X @ W + B), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(vm["ids"](np.array(5, "int64")), IDS + 5)


def _section(data: bytes | bytearray, tag: bytes) -> tuple[int, int]:
    """(payload offset, length) of section ``tag``."""
    pos = 12
    while data[pos : pos + 4] != tag:
        pos += 16 + struct.unpack_from("<Q", data, pos + 4)[0]
    return pos + 16, struct.unpack_from("<Q", data, pos + 4)[0]


def _recrc(data: bytearray, tag: bytes) -> bytes:
    at, n = _section(data, tag)
    struct.pack_into("<I", data, at - 4, zlib.crc32(data[at : at + n]))
    return bytes(data)


def _mapped(a: np.ndarray) -> bool:
    while isinstance(a, np.ndarray):
        a = a.base
    return isinstance(a, memoryview) and isinstance(a.obj, mmap.mmap)


def test_a_saved_file_maps_its_weights_and_runs_in_every_mode(compiled, exec_mode):
    compiled.save("m.rvmx")
    data = Path("m.rvmx").read_bytes()
    assert struct.unpack_from("<HH", data, 4) == VERSION == (2, 1)
    ex = rvm.load_executable("m.rvmx")
    assert ex.trusted
    big = [c for c in ex.constants if c.nbytes >= 1024]
    assert len(big) == 2 and all(_mapped(c) and not c.flags.writeable for c in big)
    assert all(c.ctypes.data % wt.ALIGN == 0 for c in ex.constants if c.nbytes)
    start, _ = _section(data, b"WGHT")
    first = struct.unpack_from("<q", data, _descriptor(data, 0))[0]
    assert (start + first) % wt.PAGE == 0  # the weights start at a page of the file
    _check_runs(ex, exec_mode)


def test_mmap_false_reads_the_file_into_memory(compiled):
    compiled.save("m.rvmx")
    ex = rvm.load_executable("m.rvmx", mmap=False)
    assert ex.trusted and not any(_mapped(c) for c in ex.constants)
    _check_runs(ex, "bytecode")


def test_constants_lie_on_cache_lines_but_the_users_are_held_as_given(compiled):
    """Kernels load rows of weights as vectors and AMX tiles: a constant the compiler made
    (a packed weight) starts at a multiple of `ALIGN`, and so does every constant of a loaded
    file, mapped or read with ``mmap=False``; a user's array is shared as it lies, aligned or
    not (a model's weights are held once), an unaligned copy made aligned."""
    compiled.save("m.rvmx")
    for ex in (rvm.load_executable("m.rvmx", mmap=False), rvm.load_executable("m.rvmx")):
        assert all(c.ctypes.data % wt.ALIGN == 0 for c in ex.constants if c.nbytes > wt.ALIGN)
    raw = np.zeros(4 * 64 * 48 + 2 * wt.ALIGN, np.uint8)
    at = -raw.ctypes.data % wt.ALIGN + 16
    off_line = raw[at : at + 4 * 64 * 48].view(np.float32).reshape(64, 48)
    off_line[...] = W
    bias = W[0].copy()
    bb = Builder()
    x = Var("x", tensor((3, 64), "float32"))
    with bb.function("main", [x]):
        y = bb.emit(op.matmul(x, const(off_line)))  # packed for the GEMM: a new array
        bb.emit_output(bb.emit(op.add(y, const(bias))))
    ex = rvm.compile(bb.get())
    users = [c for c in ex.constants if np.shares_memory(c, raw) or np.shares_memory(c, bias)]
    made = [c for c in ex.constants if c.nbytes > wt.ALIGN and not any(c is u for u in users)]
    assert made and all(c.ctypes.data % wt.ALIGN == 0 for c in made)
    assert any(np.shares_memory(c, bias) for c in users)  # held as given
    shared = const(off_line).data
    assert Executable([], [shared]).constants[0] is shared  # the user's, as it lies
    copy = wt.aligned(off_line)  # writeable: copied, onto a line
    assert copy.ctypes.data % wt.ALIGN == 0 and not copy.flags.writeable
    assert np.array_equal(copy, off_line)
    frozen = wt.aligned(copy)
    assert frozen is copy


def test_the_signature_and_the_crcs_skip_the_weights_the_digest_stands_for_them(compiled):
    """Changed weights with every other byte intact: the load checks where they lie, not
    their bytes (data, never run); check_weights=True checks the digest."""
    data = bytearray(compiled.to_bytes())
    at, n = _section(data, b"WGHT")
    data[at + n - 1] ^= 0x40  # the last byte of the last constant
    ex = Executable.from_bytes(bytes(data))
    assert ex.trusted and not np.array_equal(ex.constants[-1], compiled.constants[-1])
    with pytest.raises(ExecutableFormatError, match="do not match their SHA-256 digest"):
        Executable.from_bytes(bytes(data), check_weights=True)
    Path("w.rvmx").write_bytes(data)
    with pytest.raises(ExecutableFormatError, match="do not match their SHA-256 digest"):
        rvm.load_executable("w.rvmx", check_weights=True)
    assert rvm.load_executable("w.rvmx").trusted  # the default load does not read them
    assert Executable.from_bytes(compiled.to_bytes(), check_weights=True).trusted


def test_tampered_code_with_intact_weights_is_untrusted_and_never_runs(compiled):
    data = bytearray(compiled.to_bytes())
    at, n = _section(data, b"CODE")
    data[at + n - 8] ^= 0x01  # the low byte of the last instruction's register (RET)
    ex = Executable.from_bytes(_recrc(data, b"CODE"))
    assert not ex.trusted
    with pytest.raises(UntrustedExecutableError, match="changed after it was signed"):
        rvm.VirtualMachine(ex)
    # the digest of the weights is signed too: changing it is changing the file
    data = bytearray(compiled.to_bytes())
    at, n = _section(data, b"CONS")
    data[at + n - 1] ^= 0x01
    assert not Executable.from_bytes(_recrc(data, b"CONS")).trusted


def test_truncated_weights_are_refused(compiled):
    data = compiled.to_bytes()
    at, n = _section(data, b"WGHT")
    for cut in (at + n // 2, at + 1, at - 3):
        Path("t.rvmx").write_bytes(data[:cut])
        with pytest.raises(ExecutableFormatError, match="truncated executable"):
            rvm.load_executable("t.rvmx")


def _descriptor(data: bytes | bytearray, index: int) -> int:
    """The file offset of constant ``index``'s (offset, size) pair in CONS."""
    at, _ = _section(data, b"CONS")
    pos = at + 4
    for _ in range(index + 1):
        pos += 4 + struct.unpack_from("<I", data, pos)[0]  # dtype
        pos += 4 + 8 * struct.unpack_from("<I", data, pos)[0] + 16  # shape, offset, size
    return pos - 16


def _set_descriptor(data: bytes, index: int, offset: int | None, nbytes: int | None) -> bytes:
    """``data`` with constant ``index``'s offset and size in CONS replaced, CRC fixed."""
    out = bytearray(data)
    pos = _descriptor(out, index)
    if offset is not None:
        struct.pack_into("<q", out, pos, offset)
    if nbytes is not None:
        struct.pack_into("<q", out, pos + 8, nbytes)
    return _recrc(out, b"CONS")


@pytest.mark.parametrize(
    ("offset", "nbytes", "message"),
    [
        (1 << 40, None, r"constant 0 lies at bytes 1099511627776\.\.\d+ of the weights, outside"),
        (-64, None, r"constant 0 lies at bytes -64\.\."),
        ((1 << 63) - 8, None, "outside the"),
        # constant 0 is the packed weight: its shape follows the CPU's panel width
        (None, 12, r"constant 0 of shape \([\d, ]+\) float32 needs \d+ bytes, has 12"),
        (None, -1, r"needs \d+ bytes, has -1"),
    ],
)
def test_offsets_and_sizes_out_of_bounds_are_refused(compiled, offset, nbytes, message):
    bad = _set_descriptor(compiled.to_bytes(), 0, offset, nbytes)
    with pytest.raises(ExecutableFormatError, match=message):
        Executable.from_bytes(bad)


def test_a_misaligned_offset_loads_a_copy(compiled):
    data = compiled.to_bytes()
    at, n = _section(data, b"WGHT")
    old = decode(data)["constants"][1]  # B, 192 bytes: move it 4 bytes on
    start = struct.unpack_from("<q", data, _descriptor(data, 1))[0]
    moved = bytearray(data)
    moved[at + start + 4 : at + start + 4 + old.nbytes] = old.tobytes()
    ex = Executable.from_bytes(_set_descriptor(bytes(moved), 1, start + 4, None), trusted=True)
    assert ex.constants[1].flags.aligned and np.array_equal(ex.constants[1], B)


def test_a_format_2_file_without_weights_is_refused(compiled):
    data = bytearray(compiled.to_bytes(sign=False))
    at, n = _section(data, b"WGHT")
    data[at - 16 : at - 12] = b"WGHX"  # an unknown section: skipped, so WGHT is missing
    with pytest.raises(ExecutableFormatError, match=r"format 2\.x without WGHT"):
        Executable.from_bytes(_recrc(data, b"WGHX"))


def test_format_1_files_still_load_and_run(compiled, exec_mode):
    old = encode(compiled, sign=None, version=(1, 6))
    assert struct.unpack_from("<HH", old, 4) == (1, 6) and b"WGHT" not in old
    Path("old.rvmx").write_bytes(old)
    ex = rvm.load_executable("old.rvmx", trusted=True)
    _check_runs(ex, exec_mode)
    ex.save("new.rvmx")
    _check_runs(rvm.load_executable("new.rvmx"), exec_mode)


def test_saving_over_a_loaded_file_leaves_the_loaded_executable_intact(compiled):
    compiled.save("m.rvmx")
    ex = rvm.load_executable("m.rvmx")
    other = rvm.compile(_module(), opt_level=0)
    other.save("m.rvmx")  # a new file renamed over the mapped one
    compiled.save("m.rvmx")
    _check_runs(ex, "bytecode")
    assert not [p.name for p in Path().iterdir() if p.name.endswith(".tmp")]


def test_save_writes_through_a_symbolic_link_and_into_a_device(compiled, tmp_path):
    compiled.save("real.rvmx")
    Path("link.rvmx").symlink_to(tmp_path / "real.rvmx")
    ex = rvm.load_executable("link.rvmx")
    compiled.save("link.rvmx")  # replaces the file the link names, not the link
    assert Path("link.rvmx").is_symlink() and rvm.load_executable("link.rvmx").trusted
    _check_runs(ex, "bytecode")
    compiled.save(os.devnull)
    assert Path(os.devnull).is_char_device()


def test_a_mapped_executable_pickles_and_an_empty_file_is_not_one(compiled):
    compiled.save("m.rvmx")
    again = pickle.loads(pickle.dumps(rvm.load_executable("m.rvmx")))
    assert again.trusted
    _check_runs(again, "bytecode")
    Path("empty.rvmx").write_bytes(b"")
    with pytest.raises(ExecutableFormatError, match="not an rvm executable"):
        rvm.load_executable("empty.rvmx")
