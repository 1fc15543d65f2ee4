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
