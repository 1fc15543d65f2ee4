"""The RVMX binary format of an executable. No pickle: every field is read with bounds checks.

Layout (little endian)::

    b"RVMX"  u16 major  u16 minor  u32 section_count
    section*: 4-byte tag  u64 payload_length  u32 crc32(payload)  payload

Sections, in order (docs/architecture.md): GLOB (function table: name, kind, params and their
specs, register-file size, code range; then the ADTs), CONS (constant pool: dtype string -- numpy's
type string, or the name of a narrow dtype such as "bfloat16" -- shape, raw bytes), PRIM (primitive
names), CODE (instructions: u8 opcode, then operands by the kinds of `OPCODE_INFO`), KERN (kernel
records and shared libraries), then, since version 1.1, META (string key/value pairs:
`default_exec_mode`, `precision` when not fp32 (absent: fp32), and since 1.5 `python_forms`,
the data types' `ADTInfo.python` as `name=form;...`), and, since version 1.3, RSLT (per
function, what it returns: a flag, then the
result spec, its tuple fields after it). Readers skip unknown sections of the same major version,
so a 1.0 reader loads a 1.1 file, and a 1.0 file (no META) loads with the defaults; a new major
version means an incompatible layout. Version 1.2 added opcodes (the tail calls, NEW_TENSOR, the
shape instructions, IF_IMM; `bytecode.py`), which older readers reject as unknown opcodes. A file
before 1.3 (no RSLT) loads with every `VMFunction.result` None. Since version 1.5, an optional PFLD
section gives the field specs of tuple parameters (per function, per parameter: a flag, then the
spec as in RSLT), so the entry checks check the fields; without it a tuple parameter is checked as
a tuple only. Since version 1.4, an optional NATV section carries the native code of the jit
kernels (`rvm.runtime.loading.artifact`): the key it was built for, then per group (a kernel file
or an rvm module) its kind, name, modification time and Numba cache files (name, bytes). A file
without it loads as before (its kernels load from the cache or compile). Since version 1.6, a FACT
section carries each kernel's facts, in KERN's order: the entry points it requires ((name, dtype)
pairs), the rvm modules it imports, its compile cost (`KernelRecord`); a jit kernel of an older
file gets them from `rvm.runtime.facts.recovered`. An optional DIMR section, written only when a
function bounds its symbolic dimensions (`VMFunction.dim_ranges`), holds per function a count of
(name, optional min, optional max); readers that skip it load the file without those checks. An
optional last section SIGN (readers before it skip it) holds a signature of every byte before it:
the signing key's id and an HMAC-SHA256 (`rvm.runtime.loading.trust`). A file that is not signed by
a trusted key, nor loaded with ``trusted=True``, loads as data: its functions, constants and text
views are there, its kernels never run (the VM refuses them with `UntrustedExecutableError`) and
its native code is never written anywhere. A 1.0 or 1.1 file loads and runs as written, except that
its tail calls, which those versions emitted as INVOKE / INVOKE_CLOSURE directly followed by RET of
the result, become the tail call opcodes (`_upgrade_tail_calls`), so deep tail recursion still runs
in constant space.

Version 2.0 (a new major version: a 1.x reader refuses it, naming the version; this reader
reads 1.x and 2.x, and `encode` writes 1.6 on request) moves the constants' bytes out of CONS
into a WGHT section before SIGN (`rvm.runtime.weights`): CONS then holds per constant its dtype,
shape, offset in WGHT's payload and size, then the SHA-256 digest of WGHT's payload. WGHT's
first constant starts at a page of the file, each at a multiple of 64 bytes; its CRC field is 0
and SIGN covers every byte before it but WGHT's payload, which the signed digest stands for. A
load maps the file (`load_executable`) and checks every section but WGHT's bytes, and that every
constant lies inside WGHT; the constants are read-only views of the file, and their digest is
checked with ``check_weights=True``.

Version 2.1 adds dimension expressions (``past + seq``): in shape patterns, the kind `EXPR`
and its program (`rvm.runtime.shape_patterns`), and in the specs of parameters and results, the
dimension tag 3, followed by the expression's text, its names (a count and strings) and its
program (i64s, (op, arg) pairs), read as a `shape_patterns.DimProgram`. A 2.0 reader refuses
such a spec (``bad dimension tag 3``); this reader refuses what a newer minor version may add
to a spec, a pattern or the code (an unknown dimension tag, pattern kind or opcode), saying
that the file is newer than this rvm.

Strings are u32 length + UTF-8; ints i64; tuples u32 count + items. Every count is checked
against the bytes left before anything is allocated, so a corrupted file gives
`ExecutableFormatError` and never a crash, a hang or a huge allocation.
"""

from __future__ import annotations

import mmap as _mmap
import struct
import zlib
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import numpy as np

from rvm.dtypes import NARROW_DTYPES
from rvm.errors import DTypeError, ExecutableFormatError
from rvm.runtime import shape_patterns as sp
from rvm.runtime import weights
from rvm.runtime.bytecode import OPCODE_INFO, Opcode
from rvm.runtime.executable import (
    MAX_RESULT_DEPTH,
    ADTInfo,
    Executable,
    KernelRecord,
    ParamSpec,
    VMFunction,
)
from rvm.runtime.facts import recovered
from rvm.runtime.loading import trust
from rvm.runtime.loading.artifact import NativeCode, NativeGroup, check, install

__all__ = ["encode", "decode", "from_bytes", "load_executable", "MAGIC", "VERSION"]

MAGIC = b"RVMX"
VERSION = (2, 1)
SECTIONS = (b"GLOB", b"CONS", b"PRIM", b"CODE", b"KERN")
META = b"META"  # optional (added in 1.1), after SECTIONS
RSLT = b"RSLT"  # optional (added in 1.3): the functions' result specs
NATV = b"NATV"  # optional (added in 1.4): native code of the jit kernels
PFLD = b"PFLD"  # optional (added in 1.5): the field specs of tuple parameters
SIGN = b"SIGN"  # optional, last: the signature of every byte before it (but WGHT's payload)
WGHT = b"WGHT"  # format 2: the constants' bytes (`rvm.runtime.weights`), before SIGN
DIMR = b"DIMR"  # optional: the functions' symbolic-dimension ranges (written when any has one)
FACT = b"FACT"  # optional (added in 1.6): the kernels' facts
_HEADER = struct.Struct("<4sHHI")
_SECTION = struct.Struct("<4sQI")
_SPEC_KINDS = ("tensor", "tuple", "adt", "any")


class _Writer:
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


class _Reader:
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


# -- encode -------------------------------------------------------------------------------


def encode(
    ex: Executable,
    native: NativeCode | None = None,
    sign: bytes | str | None = None,
    version: tuple[int, int] = VERSION,
) -> bytes:
    """The RVMX image of `ex`, with the NATV section of ``native`` when given, signed with
    the key ``sign`` when given (a last SIGN section). ``version`` (1, 6) writes the format
    before the WGHT section (the constants' bytes inside CONS), which rvm before 2.0 reads."""
    return b"".join(encode_parts(ex, native, sign, version))


def encode_parts(
    ex: Executable,
    native: NativeCode | None = None,
    sign: bytes | str | None = None,
    version: tuple[int, int] = VERSION,
) -> list[Any]:
    """`encode`'s image as a list of bytes-like parts (the constants' bytes not copied)."""
    if version not in ((1, 6), VERSION):
        raise ValueError(f"rvm writes format {VERSION[0]}.{VERSION[1]} or 1.6, not {version}")
    if version < (2, 1) and _uses_expressions(ex):
        raise ValueError(
            f"format {version[0]}.{version[1]} has no dimension expressions (past + seq), which "
            f"this executable uses: write format {VERSION[0]}.{VERSION[1]}"
        )
    blob = weights.Blob(ex.constants) if version[0] >= 2 else None
    sections = [_glob(ex), b"" if blob else _cons(ex), _prim(ex), _code(ex), _kern(ex)]
    sections += [_meta(ex), _fact(ex), _rslt(ex)]
    tags = [*SECTIONS, META, FACT, RSLT]
    if any(spec.fields is not None for fn in ex.functions for spec in fn.param_specs):
        sections.append(_pfld(ex))
        tags.append(PFLD)
    if any(fn.dim_ranges for fn in ex.functions):
        sections.append(_dimr(ex))
        tags.append(DIMR)
    if native is not None:
        sections.append(_natv(native))
        tags.append(NATV)
    payload: list[Any] = []
    if blob is not None:  # CONS's size does not depend on the offsets and digest it holds
        sections[1] = blob.cons(0, bytes(weights.DIGEST_BYTES))
        before = _HEADER.size + sum(_SECTION.size + len(p) for p in sections) + _SECTION.size
        lead = -before % weights.PAGE
        payload = blob.payload(lead)
        sections[1] = blob.cons(lead, weights.digest(payload))
    count = len(sections) + (blob is not None) + (sign is not None)
    out: list[Any] = [_HEADER.pack(MAGIC, version[0], version[1], count)]
    for tag, data in zip(tags, sections):
        out.append(_SECTION.pack(tag, len(data), zlib.crc32(data)))
        out.append(data)
    if blob is not None:  # no CRC: CONS's digest (signed) stands for the payload
        out.append(_SECTION.pack(WGHT, sum(len(memoryview(p)) for p in payload), 0))
    if sign is None:
        return out + payload
    ident, mac = trust.sign(out, sign)  # every byte before SIGN but WGHT's payload
    w = _Writer()
    w.str(ident)
    w.raw(mac)
    signature = w.getvalue()
    return [*out, *payload, _SECTION.pack(SIGN, len(signature), zlib.crc32(signature)), signature]


def _glob(ex: Executable) -> bytes:
    w = _Writer()
    w.count(len(ex.functions))
    start = 0
    for fn in ex.functions:
        w.str(fn.name)
        w.str(fn.kind)
        w.int(fn.register_file_size)
        w.count(len(fn.params))
        for p, spec in zip(fn.params, fn.param_specs):
            w.str(p)
            _write_spec(w, spec)
        w.int(start)
        w.int(len(fn.instructions))
        start += len(fn.instructions)
    w.count(len(ex.adts))
    for info in ex.adts:
        w.str(info.name)
        w.count(len(info.constructors))
        for cname, tag, arity in info.constructors:
            w.str(cname)
            w.int(tag)
            w.int(arity)
    return w.getvalue()


def _uses_expressions(ex: Executable) -> bool:
    """Whether a signature or a shape pattern of ``ex`` has a dimension expression."""
    specs = [s for fn in ex.functions for s in (*fn.param_specs, fn.result) if s is not None]
    while specs:
        spec = specs.pop()
        if any(isinstance(d, sp.DimProgram) for d in spec.shape or ()):
            return True
        specs.extend(spec.fields or ())
    shapes = (Opcode.MATCH_SHAPE, Opcode.MAKE_SHAPE)
    patterns = {ins[3] for fn in ex.functions for ins in fn.instructions if ins[0] in shapes}
    return any(sp.EXPR in ex.constants[c][::2].tolist() for c in patterns)


def _write_spec(w: _Writer, spec: ParamSpec) -> None:
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


def _write_result(w: _Writer, spec: ParamSpec) -> None:
    _write_spec(w, spec)
    w.raw(b"\x00" if spec.fields is None else b"\x01")
    if spec.fields is not None:
        w.count(len(spec.fields))
        for field in spec.fields:
            _write_result(w, field)


def _rslt(ex: Executable) -> bytes:
    w = _Writer()
    w.count(len(ex.functions))
    for fn in ex.functions:
        w.raw(b"\x00" if fn.result is None else b"\x01")
        if fn.result is not None:
            _write_result(w, fn.result)
    return w.getvalue()


def _pfld(ex: Executable) -> bytes:
    """Per function, per parameter: a flag, then its spec with its tuple fields (as RSLT)."""
    w = _Writer()
    w.count(len(ex.functions))
    for fn in ex.functions:
        w.count(len(fn.param_specs))
        for spec in fn.param_specs:
            w.raw(b"\x00" if spec.fields is None else b"\x01")
            if spec.fields is not None:
                _write_result(w, spec)
    return w.getvalue()


def _dimr(ex: Executable) -> bytes:
    """Per function: a count of (name, optional min, optional max)."""
    w = _Writer()
    w.count(len(ex.functions))
    for fn in ex.functions:
        w.count(len(fn.dim_ranges))
        for name, lo, hi in fn.dim_ranges:
            w.str(name)
            for bound in (lo, hi):
                w.raw(b"\x00" if bound is None else b"\x01")
                if bound is not None:
                    w.int(bound)
    return w.getvalue()


def _read_dimr(r: _Reader, count: int) -> list[tuple]:
    if r.count(1) != count:
        r.fail(f"{count} functions but another count of dimension ranges")
    out = []
    for _ in range(count):
        ranges = []
        for _ in range(r.count(9)):
            name = r.str()
            lo = r.int() if r.flag() else None
            hi = r.int() if r.flag() else None
            ranges.append((name, lo, hi))
        out.append(tuple(ranges))
    r.end()
    return out


def _cons(ex: Executable) -> bytes:
    w = _Writer()
    w.count(len(ex.constants))
    for c in ex.constants:
        # ml_dtypes' dtypes have no type code of their own (bfloat16's .str is "<V2"): by name
        w.str(c.dtype.name if c.dtype.name in NARROW_DTYPES else c.dtype.str)
        w.ints(tuple(int(d) for d in c.shape))
        data = np.ascontiguousarray(c).tobytes()
        w.int(len(data))
        w.raw(data)
    return w.getvalue()


def _prim(ex: Executable) -> bytes:
    w = _Writer()
    w.count(len(ex.primitive_names))
    for name in ex.primitive_names:
        w.str(name)
    return w.getvalue()


def _code(ex: Executable) -> bytes:
    w = _Writer()
    w.count(sum(len(fn.instructions) for fn in ex.functions))
    for fn in ex.functions:
        for ins in fn.instructions:
            w.raw(bytes([ins[0]]))
            for kind, v in zip(OPCODE_INFO[Opcode(ins[0])].kinds, ins[1:]):
                if kind in ("regs", "shape"):
                    w.ints(v)
                elif kind in ("dtype", "str"):
                    w.str(v)
                else:
                    w.int(v)
    return w.getvalue()


def _kern(ex: Executable) -> bytes:
    w = _Writer()
    w.count(len(ex.kernels))
    for rec in ex.kernels.values():
        for s in (rec.name, rec.backend, rec.source, rec.entry, rec.style):
            w.str(s)
        w.count(len(rec.meta))
        for k, v in rec.meta.items():
            w.str(k)
            w.str(v)
    w.count(len(ex.libraries))
    for name, src in ex.libraries.items():
        w.str(name)
        w.str(src)
    return w.getvalue()


def _fact(ex: Executable) -> bytes:
    w = _Writer()
    w.count(len(ex.kernels))
    for rec in ex.kernels.values():
        w.count(len(rec.requires))
        for name, dtype in rec.requires:
            w.str(name)
            w.str(dtype)
        w.count(len(rec.imports))
        for module in rec.imports:
            w.str(module)
        w.int(rec.cost)
    return w.getvalue()


def _read_fact(r: _Reader, kernels: dict[str, KernelRecord]) -> dict[str, KernelRecord]:
    if r.count(1) != len(kernels):
        r.fail(f"{len(kernels)} kernels but another count of facts")
    out = {}
    for name, rec in kernels.items():
        requires = tuple((r.str(), r.str()) for _ in range(r.count(8)))
        imports = tuple(r.str() for _ in range(r.count(4)))
        out[name] = replace(rec, requires=requires, imports=imports, cost=r.int())
    r.end()
    return out


def _natv(native: NativeCode) -> bytes:
    w = _Writer()
    w.str(native.key)
    w.count(len(native.groups))
    for g in native.groups:
        w.str(g.kind)
        w.str(g.ident)
        w.int(g.mtime_ns)
        w.count(len(g.files))
        for name, data in g.files:
            w.str(name)
            w.int(len(data))
            w.raw(data)
    return w.getvalue()


def _meta(ex: Executable) -> bytes:
    w = _Writer()
    items = {"default_exec_mode": ex.default_exec_mode}
    if ex.precision != "fp32":  # since 1.6: what its products compute in
        items["precision"] = ex.precision
    forms = ";".join(f"{info.name}={info.python}" for info in ex.adts if info.python)
    if forms:  # since 1.5: the data types' Python forms (`ADTInfo.python`)
        items["python_forms"] = forms
    big = [i for i, c in enumerate(ex.constants) if c.nbytes > weights.DIGESTED_BYTES]
    if big:  # since 2.0: big constants' digests, so that a load need not hash them
        items["constant_digests"] = ";".join(f"{i}={weights.constant_digest(ex, i)}" for i in big)
    w.count(len(items))
    for key, value in items.items():
        w.str(key)
        w.str(value)
    return w.getvalue()


# -- load ---------------------------------------------------------------------------------


def from_bytes(
    cls: type[Executable],
    data: bytes,
    *,
    keys: Iterable[bytes | str] = (),
    trusted: bool = False,
    check_weights: bool = False,
) -> Executable:
    """Decodes and validates an RVMX image (`Executable.from_bytes`).

    The executable is trusted (``ex.trusted``) when ``trusted`` is True or the image is
    signed with one of ``keys`` or a key of the trust store (`rvm.runtime.loading.trust`).
    An untrusted one is data: it prints and inspects, and refuses to run its kernels
    (`UntrustedExecutableError`, when a VM is made over it); its native code is ignored.
    A trusted one's native code goes into entries of the kernel cache named by its own
    hash (`rvm.runtime.loading.artifact`) when it was built for this CPU and these library
    versions, so the kernels load without compiling; else they rebuild from source.

    Everything but the weights' bytes is checked (CRC-32, signature, bounds); the weights
    (format 2) are views of ``data``, checked against their digest when ``check_weights``.

    Raises:
        ExecutableFormatError: The image is truncated, corrupted or of another major version,
            or (``check_weights``) its weights do not match their digest.
    """
    args = decode(data, check_weights=check_weights)
    version = tuple(_HEADER.unpack_from(data)[1:3])  # decode checked the header
    native = args.pop("native", None)
    signer = args.pop("signature", None)
    digests = args.pop("constant_digests", {})
    verified, reason, ident = False, "", None
    if signer is not None and not trusted:
        ident, mac, ranges = signer
        view = memoryview(data)
        verified = trust.verify([view[a:b] for a, b in ranges], ident, mac, keys)
        known = ident in {trust.key_id(k) for k in keys} or ident in trust.trusted_keys()
        reason = (
            f"its signature by key {ident} does not match its contents: it was changed after "
            "it was signed"
            if known
            else f"it is signed by key {ident}, which is not trusted"
        )
    try:
        ex = cls(**args)
    except ExecutableFormatError as err:  # a shape pattern kind a newer format added, ...
        if version <= VERSION:
            raise
        raise ExecutableFormatError(
            newer(version, f"does not pass this rvm's checks ({err})")
        ) from None
    ex.constant_digests.update(digests)
    ex._trusted = trusted or verified
    ex._signed_by = ident if verified else None
    if not ex._trusted:
        ex._untrusted_reason = reason or "it is not signed"
    if native is not None and ex._trusted:
        install(native, ex.kernels, ex)
    return ex


def load_executable(
    path: str,
    *,
    keys: Iterable[bytes | str] = (),
    trusted: bool = False,
    check_weights: bool = False,
    mmap: bool = True,
) -> Executable:
    """Reads an executable written by `Executable.save`.

    By default the file is memory-mapped, read-only: its constants (the weights) are views
    of the file's pages, read when a call first touches them and shared by every process
    that loads the file. Do not truncate or rewrite the file in place while a process has it
    loaded: the operating system then ends that process at its next read of a weight (a bus
    error). `Executable.save` and the ``rvm`` command write a new file and rename it over
    the old one, which is safe; for files that others may rewrite in place, pass
    ``mmap=False``.

    Args:
        path: The file.
        keys: Signing keys to trust for this file, besides those of the trust store.
        trusted: Trust the file whoever signed it: its kernels' code may run.
        check_weights: Also check the weights' bytes against their SHA-256 digest (reads
            them all). Everything else (code, metadata, where each weight lies) is always
            checked; the weights are data, which no load ever runs.
        mmap: Map the file (True) or read it into memory (False).

    Raises:
        ExecutableFormatError: The file is truncated, corrupted or of another major version,
            or (``check_weights``) its weights do not match their digest.
    """
    with open(path, "rb") as f:
        data: Any = None
        if mmap:
            try:
                data = _mmap.mmap(f.fileno(), 0, access=_mmap.ACCESS_READ)
            except (OSError, ValueError):  # empty, or a file that cannot be mapped (a pipe)
                pass
        if data is None:
            data = f.read()
    return from_bytes(Executable, data, keys=keys, trusted=trusted, check_weights=check_weights)


# -- decode -------------------------------------------------------------------------------


def decode(data: bytes, *, check_weights: bool = False) -> dict[str, Any]:
    """The `Executable` constructor arguments encoded in `data` (bytes, or a buffer such as
    an mmap: the constants are views of it).

    Raises:
        ExecutableFormatError: Not an RVMX image, another major version, truncated, or corrupt.
    """
    view = memoryview(data).cast("B") if not isinstance(data, bytes) else memoryview(data)
    if len(view) < _HEADER.size or view[:4] != MAGIC:
        raise ExecutableFormatError("not an rvm executable (missing the b'RVMX' magic number)")
    _, major, minor, nsec = _HEADER.unpack_from(view)
    if major not in (1, VERSION[0]):
        raise ExecutableFormatError(
            f"executable format version {major}.{minor} is not supported; this rvm reads "
            f"versions 1.x and {VERSION[0]}.x"
        )
    found, signed = _sections(view, major, nsec)
    order = [t for t in found if t in SECTIONS]
    if order != list(SECTIONS):
        raise ExecutableFormatError(
            f"corrupt executable: sections {order} instead of {list(SECTIONS)}"
        )
    if major >= 2 and WGHT not in found:
        raise ExecutableFormatError(f"corrupt executable: format {major}.x without WGHT")
    try:
        out = _decode_sections(found, (major, minor), check_weights)
        if SIGN in found:
            r = _Reader(found[SIGN], "signature")
            ident, mac = r.str(), bytes(r.take(trust.MAC_BYTES))
            r.end()
            out["signature"] = (ident, mac, signed)
        return out
    except (ExecutableFormatError, DTypeError):  # DTypeError: ml_dtypes is missing
        raise
    except (ValueError, TypeError, OverflowError, struct.error, MemoryError) as e:
        raise ExecutableFormatError(f"corrupt executable: {type(e).__name__}: {e}") from e


def _read_digests(text: str, count: int) -> dict[int, str]:
    """META's ``constant_digests`` (``index=hex;...``) as {index: hex digest}."""
    out: dict[int, str] = {}
    for item in text.split(";"):
        index, _, value = item.partition("=")
        hexed = len(value) == 64 and all(c in "0123456789abcdef" for c in value)
        if not (index.isdigit() and int(index) < count and hexed):
            raise ExecutableFormatError(f"corrupt executable: a constant digest {item[:80]!r}")
        out[int(index)] = value
    return out


def _sections(
    view: memoryview, major: int, nsec: int
) -> tuple[dict[bytes, memoryview], tuple[tuple[int, int], ...]]:
    """The sections' payloads by tag, each CRC-checked but WGHT's (format 2), and the byte
    ranges the signature covers: everything before SIGN but WGHT's payload."""
    pos = _HEADER.size
    found: dict[bytes, memoryview] = {}
    signed = [(0, 0)]
    for i in range(nsec):
        if SIGN in found:
            raise ExecutableFormatError("corrupt executable: a section after the signature")
        signed[-1] = (signed[-1][0], pos)
        if pos + _SECTION.size > len(view):
            raise ExecutableFormatError(f"truncated executable: section {i} header is cut off")
        tag, length, crc = _SECTION.unpack_from(view, pos)
        pos += _SECTION.size
        if length > len(view) - pos:
            raise ExecutableFormatError(
                f"truncated executable: section {tag!r} needs {length} bytes, "
                f"{len(view) - pos} left"
            )
        payload = view[pos : pos + length]  # no copy: a model's weights are most of the file
        if major >= 2 and tag == WGHT:  # its digest is in CONS; checked on request
            signed[-1] = (signed[-1][0], pos)
            signed.append((pos + length, pos + length))
        elif zlib.crc32(payload) != crc:
            raise ExecutableFormatError(f"corrupt executable: section {tag!r} fails its CRC32")
        pos += length
        found[tag] = payload
    if pos != len(view):
        raise ExecutableFormatError(f"corrupt executable: {len(view) - pos} trailing bytes")
    return found, tuple(signed)


def _decode_sections(
    found: dict[bytes, memoryview], version: tuple[int, int], check_weights: bool
) -> dict[str, Any]:
    heads, adts = _read_glob(_Reader(found[b"GLOB"], "globals", version))
    cons = _Reader(found[b"CONS"], "constants")
    if version[0] >= 2:
        constants = weights.read_cons(cons, found[WGHT], check_weights)
    else:
        constants = _read_cons(cons)
    r = _Reader(found[b"PRIM"], "primitive names")
    prims = [r.str() for _ in range(r.count(4))]
    r.end()
    code = _read_code(_Reader(found[b"CODE"], "code", version), version)
    functions = []
    for name, kind, nregs, params, specs, start, length in heads:
        if not (0 <= start and 0 <= length and start + length <= len(code)):
            raise ExecutableFormatError(
                f"corrupt executable: function {name!r} code range {start}+{length} is outside "
                f"the {len(code)} instructions"
            )
        body = code[start : start + length]
        if version < (1, 2):
            body = _upgrade_tail_calls(body)
        functions.append(VMFunction(name, params, specs, nregs, tuple(body), kind))
    kernels, libraries = _read_kern(_Reader(found[b"KERN"], "kernels"))
    if FACT in found:
        kernels = _read_fact(_Reader(found[FACT], "kernel facts"), kernels)
    else:  # before version 1.6
        kernels = {name: recovered(rec) for name, rec in kernels.items()}
    out = {
        "functions": functions,
        "constants": constants,
        "primitive_names": prims,
        "kernels": kernels,
        "libraries": libraries,
        "adts": adts,
    }
    if META in found:  # absent in version 1.0 files
        r = _Reader(found[META], "metadata")
        meta = {r.str(): r.str() for _ in range(r.count(8))}
        r.end()
        if "default_exec_mode" in meta:
            out["default_exec_mode"] = meta["default_exec_mode"]
        if "precision" in meta:
            out["precision"] = meta["precision"]
        if "constant_digests" in meta:
            out["constant_digests"] = _read_digests(meta["constant_digests"], len(constants))
        if "python_forms" in meta:
            forms = dict(item.partition("=")[::2] for item in meta["python_forms"].split(";"))
            out["adts"] = [replace(info, python=forms.get(info.name)) for info in adts]
    if RSLT in found:  # absent before version 1.3
        r = _Reader(found[RSLT], "results", version)
        if r.count(1) != len(functions):
            r.fail(f"{len(functions)} functions but another count of results")
        results = [_read_result(r, 0) if r.flag() else None for _ in functions]
        r.end()
        out["functions"] = [replace(fn, result=res) for fn, res in zip(functions, results)]
    if PFLD in found:  # absent before version 1.5: tuple parameters are then checked shallowly
        out["functions"] = _read_pfld(
            _Reader(found[PFLD], "parameter fields", version), out["functions"]
        )
    if DIMR in found:  # only in executables with symbolic-dimension ranges
        functions = out["functions"]
        ranges = _read_dimr(_Reader(found[DIMR], "dimension ranges"), len(functions))
        out["functions"] = [replace(fn, dim_ranges=d) for fn, d in zip(functions, ranges)]
    if NATV in found:  # absent before version 1.4, and in executables without jit kernels
        out["native"] = _read_natv(_Reader(found[NATV], "native code"))
    return out


def _read_pfld(r: _Reader, functions: list[VMFunction]) -> list[VMFunction]:
    if r.count(1) != len(functions):
        r.fail(f"{len(functions)} functions but another count of parameter lists")
    out = []
    for fn in functions:
        if r.count(1) != len(fn.param_specs):
            r.fail(f"function {fn.name!r} has {len(fn.param_specs)} parameters, not this count")
        specs = [_read_result(r, 0) if r.flag() else spec for spec in fn.param_specs]
        if any(new.name != old.name for new, old in zip(specs, fn.param_specs)):
            r.fail(f"function {fn.name!r}: parameter names differ from the globals section")
        out.append(replace(fn, param_specs=tuple(specs)))
    r.end()
    return out


def _read_natv(r: _Reader) -> NativeCode:
    key = r.str()
    groups = []
    for _ in range(r.count(17)):
        kind, ident, mtime = r.str(), r.str(), r.int()
        files = []
        for _ in range(r.count(12)):
            name = r.str()
            size = r.int()
            files.append((name, bytes(r.take(size))))
        groups.append(NativeGroup(kind, ident, mtime, tuple(files)))
    r.end()
    native = NativeCode(key, tuple(groups))
    problem = check(native)
    if problem is not None:
        r.fail(problem)
    return native


def _read_glob(r: _Reader) -> tuple[list[tuple], list[ADTInfo]]:
    heads = []
    for _ in range(r.count(4)):
        name, kind, nregs = r.str(), r.str(), r.int()
        params, specs = [], []
        for _ in range(r.count(4)):
            params.append(r.str())
            specs.append(_read_spec(r))
        start, length = r.int(), r.int()
        heads.append((name, kind, nregs, tuple(params), tuple(specs), start, length))
    adts = []
    for _ in range(r.count(4)):
        aname = r.str()
        cons = tuple((r.str(), r.int(), r.int()) for _ in range(r.count(20)))
        adts.append(ADTInfo(aname, cons))
    r.end()
    return heads, adts


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


def _read_spec(r: _Reader) -> ParamSpec:
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


def _expr(r: _Reader) -> sp.DimProgram:
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


def _read_result(r: _Reader, depth: int) -> ParamSpec:
    if depth > MAX_RESULT_DEPTH:
        r.fail(f"result tuples nest deeper than {MAX_RESULT_DEPTH}")
    spec = _read_spec(r)
    if not r.flag():
        return spec
    fields = tuple(_read_result(r, depth + 1) for _ in range(r.count(4)))
    return replace(spec, fields=fields)


def _read_cons(r: _Reader) -> list[np.ndarray]:
    """Format 1's constants: each one's bytes inside CONS (format 2: `weights.read_cons`)."""
    out = []
    for i in range(r.count(4)):
        dtype = weights.dtype_of(r, i, r.str())
        shape = r.ints()
        nbytes = r.int()
        expect = weights.nbytes_of(r, i, dtype, shape)
        if expect != nbytes:
            r.fail(f"constant {i} of shape {shape} {dtype} needs {expect} bytes, has {nbytes}")
        raw = r.take(nbytes)  # a view of the file's bytes, read-only as constants must be
        arr = np.frombuffer(raw, dtype=dtype)
        if not arr.flags.aligned:  # kernels take aligned arrays: copy the rare odd one
            arr = np.frombuffer(bytes(raw), dtype=dtype)
        out.append(arr.reshape(shape))
    r.end()
    return out


def _upgrade_tail_calls(code: list[tuple]) -> list[tuple]:
    """A function of a format 1.0 / 1.1 file with its tail calls as the tail call opcodes: an
    INVOKE / INVOKE_CLOSURE directly followed by RET of its result (the rule of those
    versions) becomes TAIL_INVOKE / TAIL_INVOKE_CLOSURE; the RET stays, unreachable, so no pc
    moves."""
    tail = {Opcode.INVOKE: Opcode.TAIL_INVOKE, Opcode.INVOKE_CLOSURE: Opcode.TAIL_INVOKE_CLOSURE}
    out = list(code)
    for pc, ins in enumerate(code[:-1]):
        nxt = code[pc + 1]
        if ins[0] in tail and nxt[0] == Opcode.RET and nxt[1] == ins[1]:
            out[pc] = (tail[Opcode(ins[0])], *ins[2:])
    return out


def _read_code(r: _Reader, version: tuple[int, int]) -> list[tuple]:
    code = []
    for _ in range(r.count(1)):
        op = r.take(1)[0]
        if op not in OPCODE_INFO:
            if version > VERSION:
                raise ExecutableFormatError(newer(version, f"uses opcode {op}"))
            r.fail(f"unknown opcode {op}")
        ins: list[Any] = [op]
        for kind in OPCODE_INFO[Opcode(op)].kinds:
            if kind in ("regs", "shape"):
                ins.append(r.ints())
            elif kind in ("dtype", "str"):
                ins.append(r.str())
            else:
                ins.append(r.int())
        code.append(tuple(ins))
    r.end()
    return code


def _read_kern(r: _Reader) -> tuple[dict[str, KernelRecord], dict[str, str]]:
    kernels = {}
    for _ in range(r.count(24)):
        name, backend, source, entry, style = (r.str() for _ in range(5))
        meta = {r.str(): r.str() for _ in range(r.count(8))}
        kernels[name] = KernelRecord(name, backend, source, entry, style, meta)
    libraries = {r.str(): r.str() for _ in range(r.count(8))}
    r.end()
    return kernels, libraries
