"""The fields of RVMX sections (`rvm.runtime.serialize`): the writer and the bounds-checked
reader of ints, counts, strings and flags, and the specs of parameters and results (GLOB, RSLT,
PFLD), dimension expressions (format 2.1) included.

A `Reader` knows the file's format version: what it does not know (`Reader.unknown`) is
corrupt in a file of this rvm's format or older, and a sign of a newer format otherwise.
"""

from __future__ import annotations

import struct
from dataclasses import replace

import numpy as np

from rvm.dtypes import NARROW_DTYPES
from rvm.errors import ExecutableFormatError
from rvm.runtime import shape_patterns as sp
from rvm.runtime.executable import MAX_RESULT_DEPTH, ParamSpec

__all__ = [
    "VERSION",
    "Reader",
    "Writer",
    "newer",
    "read_result",
    "read_spec",
    "write_result",
    "write_spec",
]

VERSION = (2, 1)
"""The format this rvm writes (major, minor); it reads 1.x and 2.x up to it."""
_SPEC_KINDS = ("tensor", "tuple", "adt", "any")


class Writer:
    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def int(self, v: int) -> None:
        self.parts.append(struct.pack("<q", v))

    def count(self, v: int) -> None:
        self.parts.append(struct.pack("<I", v))

    def str(self, s: str) -> None:
        b = s.encode("utf-8")
        self.count(len(b))
        self.parts.append(b)

    def opt_str(self, s: str | None) -> None:
        self.parts.append(b"\x00" if s is None else b"\x01")
        if s is not None:
            self.str(s)

    def ints(self, vs: tuple[int, ...]) -> None:
        self.count(len(vs))
        for v in vs:
            self.int(v)

    def raw(self, b: bytes) -> None:
        self.parts.append(b)

    def getvalue(self) -> bytes:
        return b"".join(self.parts)


class Reader:
    def __init__(self, data: bytes, what: str, version: tuple[int, int] = VERSION) -> None:
        self.data = memoryview(data)
        self.pos = 0
        self.what = what
        self.version = version

    def fail(self, msg: str) -> None:
        raise ExecutableFormatError(f"corrupt executable: {self.what} section: {msg}")

    def unknown(self, thing: str) -> None:
        """Fails on ``thing`` (``dimension tag 7``), which this rvm does not know: as corrupt,
        or in a file of a newer format (which may have added it) as needing a newer rvm."""
        if self.version > VERSION:
            raise ExecutableFormatError(newer(self.version, f"uses {thing}"))
        self.fail(f"unknown {thing}")

    def take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.data):
            left = len(self.data) - self.pos
            self.fail(f"needs {n} bytes at offset {self.pos}, only {left} left")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def int(self) -> int:
        return struct.unpack("<q", self.take(8))[0]

    def count(self, min_item_bytes: int = 1) -> int:
        n = struct.unpack("<I", self.take(4))[0]
        if n * min_item_bytes > len(self.data) - self.pos:
            self.fail(f"a count of {n} items exceeds the {len(self.data) - self.pos} bytes left")
        return n

    def str(self) -> str:
        n = self.count()
        try:
            return bytes(self.take(n)).decode("utf-8")
        except UnicodeDecodeError:
            self.fail("a string is not valid UTF-8")
        raise AssertionError  # unreachable

    def opt_str(self) -> str | None:
        flag = self.take(1)[0]
        if flag > 1:
            self.fail(f"bad optional-string flag {flag}")
        return self.str() if flag else None

    def flag(self) -> bool:
        flag = self.take(1)[0]
        if flag > 1:
            self.fail(f"bad flag byte {flag}")
        return bool(flag)

    def ints(self) -> tuple[int, ...]:
        n = self.count(8)
        return struct.unpack(f"<{n}q", self.take(8 * n))

    def end(self) -> None:
        if self.pos != len(self.data):
            self.fail(f"{len(self.data) - self.pos} unexpected trailing bytes")


def newer(version: tuple[int, int], what: str) -> str:
    """The message for a file of a newer format than this rvm's that uses ``what``."""
    return (
        f"this executable (format {version[0]}.{version[1]}) {what}, which this rvm (format "
        f"{VERSION[0]}.{VERSION[1]}) does not know: load it with the rvm version that saved it "
        "or a newer one"
    )


def write_spec(w: Writer, spec: ParamSpec) -> None:
    w.str(spec.name)
    w.str(spec.kind)
    w.opt_str(spec.adt if spec.kind == "adt" else spec.dtype)  # an adt's name in the dtype slot
    w.raw(b"\x00" if spec.shape is None else b"\x01")
    if spec.shape is not None:
        w.count(len(spec.shape))
        for d in spec.shape:
            if d is None:
                w.raw(b"\x02")
            elif isinstance(d, sp.DimProgram):  # since 2.1
                w.raw(b"\x03")
                w.str(d)
                w.count(len(d.names))
                for name in d.names:
                    w.str(name)
                w.ints(tuple(v for pair in d.program for v in pair))
            elif isinstance(d, str):
                w.raw(b"\x01")
                w.str(d)
            else:
                w.raw(b"\x00")
                w.int(d)


def write_result(w: Writer, spec: ParamSpec) -> None:
    write_spec(w, spec)
    w.raw(b"\x00" if spec.fields is None else b"\x01")
    if spec.fields is not None:
        w.count(len(spec.fields))
        for field in spec.fields:
            write_result(w, field)


def _is_dtype_name(name: str) -> bool:
    """Whether ``name`` names one of rvm's dtypes: a narrow one, or NumPy's bool, ints and
    floats up to 64 bits, spelled as NumPy spells them."""
    if name in NARROW_DTYPES:
        return True
    try:
        dtype = np.dtype(name)
    except TypeError:
        return False
    return dtype.name == name and dtype.kind in "biuf" and dtype.itemsize <= 8


def read_spec(r: Reader) -> ParamSpec:
    sname, skind, dtype = r.str(), r.str(), r.opt_str()
    if skind not in _SPEC_KINDS:
        r.fail(f"parameter kind {skind!r} is not one of {_SPEC_KINDS}")
    if skind == "tensor" and dtype is not None and not _is_dtype_name(dtype):
        r.fail(f"parameter {sname!r} has an unknown dtype {dtype!r}")
    shape: tuple | None = None
    if r.take(1)[0]:
        dims: list[int | str | None] = []
        for _ in range(r.count(1)):
            tag = r.take(1)[0]
            if tag > 3:
                r.unknown(f"dimension tag {tag}")
            dims.append(
                r.int() if tag == 0 else r.str() if tag == 1 else None if tag == 2 else _expr(r)
            )
        shape = tuple(dims)
    if skind == "adt":
        return ParamSpec(sname, skind, None, shape, adt=dtype)
    return ParamSpec(sname, skind, dtype, shape)


def _expr(r: Reader) -> sp.DimProgram:
    """A dimension expression of a spec (tag 3): text, names, program."""
    text = r.str()
    names = [r.str() for _ in range(r.count(4))]
    flat = r.ints()
    if len(flat) % 2:
        r.fail(f"dimension {text!r}: a program of {len(flat)} numbers, not (op, arg) pairs")
    try:
        return sp.DimProgram.checked(text, names, list(zip(flat[::2], flat[1::2])))
    except sp.PatternError as err:
        r.fail(f"dimension {text!r}: the program {err}")
    raise AssertionError  # unreachable


def read_result(r: Reader, depth: int) -> ParamSpec:
    if depth > MAX_RESULT_DEPTH:
        r.fail(f"result tuples nest deeper than {MAX_RESULT_DEPTH}")
    spec = read_spec(r)
    if not r.flag():
        return spec
    fields = tuple(read_result(r, depth + 1) for _ in range(r.count(4)))
    return replace(spec, fields=fields)
