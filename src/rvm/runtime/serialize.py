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
optional ADTF section, written only when a data type records its constructors' field types
(`ADTInfo.fields`), holds per data type a flag, then per constructor its fields' specs (as in
RSLT); readers that skip it, and files without it, load with no field types (the native exec
mode then runs the functions that hold such values in the compiled mode). An
optional last section SIGN (readers before it skip it) holds a signature of every byte before it:
the signing key's id and an HMAC-SHA256 (`rvm.runtime.loading.trust`). A file that is not signed by
a trusted key, nor loaded with ``trusted=True``, loads as data: its functions, constants and text
views are there, its kernels never run (the VM refuses them with `UntrustedExecutableError`) and
its native code is never written anywhere. A 1.0 or 1.1 file loads and runs as written, except that
its tail calls, which those versions emitted as INVOKE / INVOKE_CLOSURE directly followed by RET of
the result, become the tail call opcodes (`upgrade_tail_calls`), so deep tail recursion still runs
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
a file with such a spec at load (``bad dimension tag 3``); an expression pattern it meets in a
function without one (a kernel's result of size ``past + seq``) fails the call with an error
(a rank or an unknown pattern kind), never a wrong size. This reader refuses what a newer minor
version may add to a spec, a pattern or the code (an unknown dimension tag, pattern kind or
opcode) at load, saying that the file is newer than this rvm.

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

from rvm.errors import DTypeError, ExecutableFormatError
from rvm.runtime import shape_patterns as sp
from rvm.runtime import weights
from rvm.runtime.bytecode import Opcode
from rvm.runtime.executable import MAX_SHAPE_HEAP, Executable, VMFunction
from rvm.runtime.facts import recovered
from rvm.runtime.loading import trust
from rvm.runtime.loading.artifact import NativeCode, install
from rvm.runtime.rvmx_fields import VERSION, Reader, Writer, newer, read_result
from rvm.runtime.rvmx_sections import (
    read_adtf,
    read_code,
    read_cons,
    read_digests,
    read_dimr,
    read_fact,
    read_glob,
    read_kern,
    read_natv,
    read_pfld,
    upgrade_tail_calls,
    uses_expressions,
    write_adtf,
    write_code,
    write_cons,
    write_dimr,
    write_fact,
    write_glob,
    write_kern,
    write_meta,
    write_natv,
    write_pfld,
    write_prim,
    write_rslt,
)

__all__ = ["encode", "decode", "from_bytes", "load_executable", "MAGIC", "VERSION"]

MAGIC = b"RVMX"
SECTIONS = (b"GLOB", b"CONS", b"PRIM", b"CODE", b"KERN")
META = b"META"  # optional (added in 1.1), after SECTIONS
RSLT = b"RSLT"  # optional (added in 1.3): the functions' result specs
NATV = b"NATV"  # optional (added in 1.4): native code of the jit kernels
PFLD = b"PFLD"  # optional (added in 1.5): the field specs of tuple parameters
SIGN = b"SIGN"  # optional, last: the signature of every byte before it (but WGHT's payload)
WGHT = b"WGHT"  # format 2: the constants' bytes (`rvm.runtime.weights`), before SIGN
DIMR = b"DIMR"  # optional: the functions' symbolic-dimension ranges (written when any has one)
FACT = b"FACT"  # optional (added in 1.6): the kernels' facts
ADTF = b"ADTF"  # optional: the data types' field types (written when any has them)
_HEADER = struct.Struct("<4sHHI")
_SECTION = struct.Struct("<4sQI")


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
    if version < (2, 1) and uses_expressions(ex):
        raise ValueError(
            f"format {version[0]}.{version[1]} has no dimension expressions (past + seq), which "
            f"this executable uses: write format {VERSION[0]}.{VERSION[1]}"
        )
    blob = weights.Blob(ex.constants) if version[0] >= 2 else None
    sections = [
        write_glob(ex),
        b"" if blob else write_cons(ex),
        write_prim(ex),
        write_code(ex),
        write_kern(ex),
    ]
    sections += [write_meta(ex), write_fact(ex), write_rslt(ex)]
    tags = [*SECTIONS, META, FACT, RSLT]
    if any(spec.fields is not None for fn in ex.functions for spec in fn.param_specs):
        sections.append(write_pfld(ex))
        tags.append(PFLD)
    if any(fn.dim_ranges for fn in ex.functions):
        sections.append(write_dimr(ex))
        tags.append(DIMR)
    if any(info.fields is not None for info in ex.adts):
        sections.append(write_adtf(ex))
        tags.append(ADTF)
    if native is not None:
        sections.append(write_natv(native))
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
    w = Writer()
    w.str(ident)
    w.raw(mac)
    signature = w.getvalue()
    return [*out, *payload, _SECTION.pack(SIGN, len(signature), zlib.crc32(signature)), signature]


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
    except ExecutableFormatError as err:  # something a newer format added, ...
        if version <= VERSION:
            raise
        raise ExecutableFormatError(
            newer(version, f"does not pass this rvm's checks ({err})")
        ) from None
    if version > VERSION:
        _check_patterns(ex, version)
    ex.constant_digests.update(digests)
    ex._trusted = trusted or verified
    ex._signed_by = ident if verified else None
    if not ex._trusted:
        ex._untrusted_reason = reason or "it is not signed"
    if native is not None and ex._trusted:
        install(native, ex.kernels, ex)
    return ex


def _check_patterns(ex: Executable, version: tuple[int, int]) -> None:
    """Refuses a file of a newer format whose shape patterns use a kind or an expression op
    that format added, at load rather than at the first call. (A file of this format or older
    has its patterns checked where they run: they are constants, in format 2 among the
    weights, which a load does not read.)

    Raises:
        ExecutableFormatError: A shape pattern this rvm cannot read.
    """
    kinds = {Opcode.MATCH_SHAPE: sp.MATCH_KINDS, Opcode.MAKE_SHAPE: sp.MAKE_KINDS}
    for fn in ex.functions:
        for ins in fn.instructions:
            if ins[0] in kinds:
                try:
                    sp.decode(ex.constants[ins[3]], kinds[ins[0]], MAX_SHAPE_HEAP)
                except sp.PatternError as err:
                    raise ExecutableFormatError(
                        newer(version, f"uses a shape pattern that {err}")
                    ) from None


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
            data = _read_on_line(f)
    return from_bytes(Executable, data, keys=keys, trusted=trusted, check_weights=check_weights)


def _read_on_line(f: Any) -> memoryview:
    """The rest of file ``f`` in memory that starts on a cache line (the bytes read, copied
    where they do not): its constants, views of it at multiples of `weights.ALIGN`, then lie
    on lines too, as in a mapped file."""
    return memoryview(weights.aligned(np.frombuffer(f.read(), np.uint8)))


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
            r = Reader(found[SIGN], "signature")
            ident, mac = r.str(), bytes(r.take(trust.MAC_BYTES))
            r.end()
            out["signature"] = (ident, mac, signed)
        return out
    except (ExecutableFormatError, DTypeError):  # DTypeError: ml_dtypes is missing
        raise
    except (ValueError, TypeError, OverflowError, struct.error, MemoryError) as e:
        raise ExecutableFormatError(f"corrupt executable: {type(e).__name__}: {e}") from e


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
    heads, adts = read_glob(Reader(found[b"GLOB"], "globals", version))
    cons = Reader(found[b"CONS"], "constants")
    if version[0] >= 2:
        constants = weights.read_cons(cons, found[WGHT], check_weights)
    else:
        constants = read_cons(cons)
    r = Reader(found[b"PRIM"], "primitive names")
    prims = [r.str() for _ in range(r.count(4))]
    r.end()
    code = read_code(Reader(found[b"CODE"], "code", version), version)
    functions = []
    for name, kind, nregs, params, specs, start, length in heads:
        if not (0 <= start and 0 <= length and start + length <= len(code)):
            raise ExecutableFormatError(
                f"corrupt executable: function {name!r} code range {start}+{length} is outside "
                f"the {len(code)} instructions"
            )
        body = code[start : start + length]
        if version < (1, 2):
            body = upgrade_tail_calls(body)
        functions.append(VMFunction(name, params, specs, nregs, tuple(body), kind))
    kernels, libraries = read_kern(Reader(found[b"KERN"], "kernels"))
    if FACT in found:
        kernels = read_fact(Reader(found[FACT], "kernel facts"), kernels)
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
        r = Reader(found[META], "metadata")
        meta = {r.str(): r.str() for _ in range(r.count(8))}
        r.end()
        if "default_exec_mode" in meta:
            out["default_exec_mode"] = meta["default_exec_mode"]
        if "precision" in meta:
            out["precision"] = meta["precision"]
        if "constant_digests" in meta:
            out["constant_digests"] = read_digests(meta["constant_digests"], len(constants))
        if "python_forms" in meta:
            forms = dict(item.partition("=")[::2] for item in meta["python_forms"].split(";"))
            out["adts"] = [replace(info, python=forms.get(info.name)) for info in adts]
    if RSLT in found:  # absent before version 1.3
        r = Reader(found[RSLT], "results", version)
        if r.count(1) != len(functions):
            r.fail(f"{len(functions)} functions but another count of results")
        results = [read_result(r, 0) if r.flag() else None for _ in functions]
        r.end()
        out["functions"] = [replace(fn, result=res) for fn, res in zip(functions, results)]
    if PFLD in found:  # absent before version 1.5: tuple parameters are then checked shallowly
        out["functions"] = read_pfld(
            Reader(found[PFLD], "parameter fields", version), out["functions"]
        )
    if DIMR in found:  # only in executables with symbolic-dimension ranges
        functions = out["functions"]
        ranges = read_dimr(Reader(found[DIMR], "dimension ranges"), len(functions))
        out["functions"] = [replace(fn, dim_ranges=d) for fn, d in zip(functions, ranges)]
    if ADTF in found:  # only in executables whose data types record their field types
        out["adts"] = read_adtf(Reader(found[ADTF], "field types", version), out["adts"])
    if NATV in found:  # absent before version 1.4, and in executables without jit kernels
        out["native"] = read_natv(Reader(found[NATV], "native code"))
    return out
