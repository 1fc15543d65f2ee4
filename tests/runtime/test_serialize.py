"""The RVMX reader refuses a tampered file at load, not at the first call."""

from __future__ import annotations

import struct
import zlib

import pytest
import rt_helpers as h

from rvm.errors import ExecutableFormatError
from rvm.runtime import Executable


def _replace_in_section(data: bytes, tag: bytes, old: bytes, new: bytes) -> bytes:
    """``data`` with ``old`` replaced by ``new`` (same length) in section ``tag``, its CRC
    fixed up so the change reaches the section's reader."""
    out = bytearray(data)
    pos = 12
    while out[pos : pos + 4] != tag:
        pos += 16 + struct.unpack_from("<Q", out, pos + 4)[0]
    length = struct.unpack_from("<Q", out, pos + 4)[0]
    payload = bytes(out[pos + 16 : pos + 16 + length])
    assert old in payload and len(old) == len(new)
    out[pos + 16 : pos + 16 + length] = payload.replace(old, new)
    struct.pack_into("<I", out, pos + 12, zlib.crc32(out[pos + 16 : pos + 16 + length]))
    return bytes(out)


def test_an_unknown_parameter_dtype_is_refused_at_load():
    data = h.straight_line().to_bytes()
    assert Executable.from_bytes(data) is not None
    bad = _replace_in_section(data, b"GLOB", b"float32", b"flgat32")
    with pytest.raises(ExecutableFormatError, match="parameter 'x' has an unknown dtype 'flgat32'"):
        Executable.from_bytes(bad)
    for other in (b"float_8", b"complex", b"float96"):  # no dtype, or none rvm has
        with pytest.raises(ExecutableFormatError, match=f"unknown dtype '{other.decode()}'"):
            Executable.from_bytes(_replace_in_section(data, b"GLOB", b"float32", other))
    good = Executable.from_bytes(_replace_in_section(data, b"GLOB", b"float32", b"float64"))
    assert good.functions[0].param_specs[0].dtype == "float64"


# -- format 2.1: dimension expressions --------------------------------------------------------

EXPRS = """
@module
class Cache:
    @func
    def main(
        past: T[("b", "past"), "float32"],
        new: T[("b", "seq"), "float32"],
        bias: T[("b", "past + seq"), "float32"],
    ):
        return op.concat([past, new], axis=1) + bias
"""


@pytest.fixture(scope="module")
def with_exprs() -> bytes:
    import rvm

    return rvm.compile(rvm.script.parse(EXPRS), kernels="numpy").to_bytes()


def _with_minor(data: bytes, minor: int) -> bytes:
    return data[:6] + minor.to_bytes(2, "little") + data[8:]


def test_dimension_expressions_load_as_programs_in_format_2_1(with_exprs) -> None:
    from rvm.runtime.serialize import encode
    from rvm.runtime.shape_patterns import DimProgram

    assert struct.unpack_from("<HH", with_exprs, 4) == (2, 1)
    ex = Executable.from_bytes(with_exprs)
    dim = ex.functions[0].param_specs[2].shape[1]
    assert isinstance(dim, DimProgram) and dim == "past + seq"
    assert dim.names == ("past", "seq") and dim.value({"past": 3, "seq": 4}) == 7
    assert isinstance(ex.functions[0].result.shape[1], DimProgram)
    assert Executable.from_bytes(encode(ex)).functions == ex.functions
    with pytest.raises(ValueError, match="format 1.6 has no dimension expressions"):
        encode(ex, version=(1, 6))


def test_an_unknown_dimension_tag_is_corrupt_or_of_a_newer_format(with_exprs) -> None:
    tagged = b"\x03" + struct.pack("<I", 10) + b"past + seq"
    data = _replace_in_section(with_exprs, b"GLOB", tagged, b"\x07" + tagged[1:])
    with pytest.raises(ExecutableFormatError, match="globals section: unknown dimension tag 7"):
        Executable.from_bytes(data)
    newer = r"this executable \(format 2\.9\) uses dimension tag 7, which this rvm \(format 2\.1\)"
    with pytest.raises(ExecutableFormatError, match=newer):
        Executable.from_bytes(_with_minor(data, 9))


def test_a_malformed_expression_program_is_refused(with_exprs) -> None:
    # past + seq is PUSH_SLOT 0, PUSH_SLOT 1, ADD: make the second read slot 2 of 2 names
    program = struct.pack("<I6q", 6, 1, 0, 1, 1, 2, 0)
    bad = struct.pack("<I6q", 6, 1, 0, 1, 2, 2, 0)
    data = _replace_in_section(with_exprs, b"GLOB", program, bad)
    with pytest.raises(ExecutableFormatError, match="'past \\+ seq': the program has a heap slot"):
        Executable.from_bytes(data)


def test_a_shape_pattern_kind_of_a_newer_format_is_refused_at_load(with_exprs) -> None:
    """A pattern is a constant (format 2: among the weights, which a load does not read): in
    this format, a kind it does not know fails the call; in a newer one, the load."""
    import numpy as np

    import rvm

    ex = Executable.from_bytes(with_exprs)
    pattern = next(c for c in ex.constants if c.dtype == np.int64 and 4 in c[::2].tolist())
    changed = pattern.copy()
    changed[2 * pattern[::2].tolist().index(4)] = 7
    data = with_exprs.replace(pattern.tobytes(), changed.tobytes())  # WGHT: no CRC
    vm = rvm.VirtualMachine(Executable.from_bytes(data, trusted=True), exec_mode="bytecode")
    args = [np.zeros((2, n), np.float32) for n in (3, 4, 7)]
    with pytest.raises(
        rvm.VMError, match="match_shape failed: ValueError: shape pattern has kind 7"
    ):
        vm["main"](*args)
    newer = r"format 2\.9\) uses a shape pattern that has kind 7, which this rvm \(format 2\.1\)"
    with pytest.raises(ExecutableFormatError, match=newer):
        Executable.from_bytes(_with_minor(data, 9))


# -- ADTF: the data types' field types ---------------------------------------------------------


def _rename_section(data: bytes, tag: bytes, new: bytes) -> bytes:
    """``data`` with section ``tag`` renamed ``new`` (a reader skips a section it does not
    know, as a reader from before ADTF skips ADTF)."""
    out = bytearray(data)
    pos = 12
    while out[pos : pos + 4] != tag:
        pos += 16 + struct.unpack_from("<Q", out, pos + 4)[0]
    out[pos : pos + 4] = new
    return bytes(out)


def test_field_types_of_data_types_round_trip_and_older_files_have_none() -> None:
    import rvm
    from rvm.testing.programs import Lists

    ex = rvm.compile(Lists, kernels="numpy")
    (info,) = ex.adts
    head, tail = info.fields[1]
    assert info.fields[0] == () and (head.kind, head.dtype, head.shape) == (
        "tensor",
        "float32",
        (2,),
    )
    assert (tail.kind, tail.adt) == ("adt", "List")
    data = ex.to_bytes()
    assert Executable.from_bytes(data).adts == ex.adts
    older = Executable.from_bytes(_rename_section(data, b"ADTF", b"ZZZZ"))
    assert older.adts[0].fields is None and older.adts[0].constructors == info.constructors
    namespace: dict = {}
    exec(compile(ex.as_python(), "<as_python>", "exec"), namespace)  # noqa: S102
    assert namespace["executable"].adts == ex.adts
