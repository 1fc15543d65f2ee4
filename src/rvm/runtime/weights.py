"""The weights of a saved executable (format 2): the constants' bytes in one section, WGHT.

Format 1 kept every constant's bytes inside the CONS section, so a load read the whole file,
checked its CRC-32 and its signature over all of it, and copied it: for GPT-2 small, 650 MB
read twice and hashed twice before the first call. Format 2 splits the constants in two:

- CONS holds, per constant, its dtype, shape, and the offset and size of its bytes in WGHT;
  then the SHA-256 digest of WGHT's payload. It is small, CRC-checked and signed like the
  other sections, so everything that says where memory is (dtypes, shapes, offsets, sizes)
  is checked at every load, against the WGHT section's length, before any array exists.
- WGHT holds the bytes: each constant at an offset aligned to `ALIGN`, the first at a page
  boundary of the file (its payload starts with zero padding to it), so a memory-mapped file
  gives aligned, read-only arrays that are views of the file's pages
  (`rvm.runtime.serialize.load_executable`). Its CRC field is 0 and the signature skips its
  payload: the digest in CONS (which the signature covers) stands for it.

Weights are data: no byte of them is ever run, and a bad value changes results, never where
memory is read. So a load does not hash them; ``check_weights=True`` (`load_executable`,
`Executable.from_bytes`) checks the digest, for a file that may have been damaged or
changed after it was written (docs/architecture.md, "Trust").
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from rvm.dtypes import NARROW_DTYPES, numpy_dtype
from rvm.errors import DTypeError, ExecutableFormatError
from rvm.runtime.memory import new_block

__all__ = [
    "ALIGN",
    "DIGEST",
    "DIGEST_BYTES",
    "PAGE",
    "Blob",
    "DIGESTED_BYTES",
    "aligned",
    "check_digest",
    "constant_digest",
    "digest",
    "dtype_of",
    "nbytes_of",
    "read_cons",
]

ALIGN = 64
"""Every constant's address in an executable, and its offset in WGHT: a cache line, so a
vector or an AMX tile row loaded from a constant never spans two lines (`aligned`)."""
PAGE = 4096  # WGHT's first constant starts at a multiple of this in the file
DIGEST = "sha256"
DIGEST_BYTES = 32
DIGESTED_BYTES = 4096
"""Constants bigger than this have their content digest (`constant_digest`) recorded in a
saved file (META ``constant_digests``), so that a process loading it need not hash them."""


class Blob:
    """The constants laid out in a WGHT payload: offsets relative to the first constant,
    which the payload puts after ``lead`` zero bytes (`payload`)."""

    def __init__(self, constants: Iterable[np.ndarray]) -> None:
        self.arrays = [np.asarray(c, order="C") for c in constants]  # keeps 0-d
        self.offsets: list[int] = []
        size = 0
        for a in self.arrays:
            size += -size % ALIGN
            self.offsets.append(size)
            size += a.nbytes
        self.size = size

    def payload(self, lead: int) -> list[Any]:
        """The payload's parts (no copy of any constant): ``lead`` zeros, then the constants
        at their offsets, zeros between them."""
        parts: list[Any] = [bytes(lead)]
        at = 0
        for a, off in zip(self.arrays, self.offsets):
            if off > at:
                parts.append(bytes(off - at))
            parts.append(memoryview(a.reshape(-1).view(np.uint8)) if a.nbytes else b"")
            at = off + a.nbytes
        return parts

    def cons(self, lead: int, digest: bytes) -> bytes:
        """The CONS payload: per constant, its dtype, shape, offset in the payload and size;
        then the digest of the payload."""
        out = [len(self.arrays).to_bytes(4, "little")]
        for a, off in zip(self.arrays, self.offsets):
            out.append(_str(a.dtype.name if a.dtype.name in NARROW_DTYPES else a.dtype.str))
            out.append(len(a.shape).to_bytes(4, "little"))
            out += [int(d).to_bytes(8, "little", signed=True) for d in a.shape]
            out.append((lead + off).to_bytes(8, "little", signed=True))
            out.append(a.nbytes.to_bytes(8, "little", signed=True))
        out.append(_str(DIGEST))
        out.append(digest)
        return b"".join(out)


def aligned(a: np.ndarray) -> np.ndarray:
    """``a`` if it is a read-only, C-contiguous array whose data starts at a multiple of
    `ALIGN` (or holds no more than `ALIGN` bytes), else a read-only copy that is: an
    executable's constant. Weights the kernels read unaligned cost them dearly: bf16
    resnet50's weight rows loaded as AMX tiles from arrays 16 bytes off a cache line took
    1.15-1.5x the time of aligned ones a layer, and the whole model 1.2x (session 75)."""
    small = a.nbytes <= ALIGN or a.dtype.hasobject  # objects: references, not data
    if a.flags.c_contiguous and not a.flags.writeable:
        if small or a.ctypes.data % ALIGN == 0:
            return a
    if small:
        out = np.array(a, copy=True, order="C")
    else:
        out = new_block(a.nbytes, ALIGN)[1].view(a.dtype).reshape(a.shape)
        out[...] = a
    out.flags.writeable = False
    return out


def _str(s: str) -> bytes:
    b = s.encode("utf-8")
    return len(b).to_bytes(4, "little") + b


def digest(parts: Sequence[Any]) -> bytes:
    """The SHA-256 of the concatenated ``parts``."""
    h = hashlib.sha256()
    for p in parts:
        h.update(p)
    return h.digest()


def constant_digest(ex: Any, index: int) -> str:
    """The SHA-256 (hex) of constant ``index`` of executable ``ex``: its dtype, shape and
    bytes; remembered in ``ex.constant_digests``, which a loaded file's recorded ones fill (the
    native mode names the slots of big constants by it, `native_codegen.slot_name`)."""
    found = ex.constant_digests.get(index)
    if found is None:
        data = np.ascontiguousarray(ex.constants[index])
        h = hashlib.sha256(f"{data.dtype.str}{data.shape}".encode())
        h.update(memoryview(data).cast("B"))
        found = ex.constant_digests[index] = h.hexdigest()
    return found


def dtype_of(r: Any, i: int, dtype_str: str) -> np.dtype:
    """The dtype of constant ``i`` named ``dtype_str``; ``r.fail`` (a section reader) when
    rvm has no such constant dtype."""
    try:
        dtype = numpy_dtype(dtype_str)
    except DTypeError:
        raise  # a narrow dtype without ml_dtypes installed: the message says what to do
    except (TypeError, ValueError, SyntaxError):
        r.fail(f"constant {i} has an unknown dtype {dtype_str!r}")
    if dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None:
        r.fail(f"constant {i} has an unsupported dtype {dtype_str!r}")
    return dtype


def nbytes_of(r: Any, i: int, dtype: np.dtype, shape: tuple[int, ...]) -> int:
    """The bytes a constant of ``shape`` and ``dtype`` needs; ``r.fail`` on a negative dim."""
    expect = dtype.itemsize
    for d in shape:
        if d < 0:
            r.fail(f"constant {i} has a negative dimension in {shape}")
        expect *= d
    return expect


def read_cons(r: Any, weights: memoryview, check: bool) -> list[np.ndarray]:
    """The constants a format-2 CONS section (reader ``r``) describes, as read-only views of
    ``weights`` (WGHT's payload); its digest checked when ``check``.

    Raises:
        ExecutableFormatError: A dtype, shape, offset or size is bad or lies outside WGHT,
            or (``check``) WGHT does not match its digest.
    """
    out = []
    for i in range(r.count(4)):
        dtype = dtype_of(r, i, r.str())
        shape = r.ints()
        offset, nbytes = r.int(), r.int()
        expect = nbytes_of(r, i, dtype, shape)
        if expect != nbytes:
            r.fail(f"constant {i} of shape {shape} {dtype} needs {expect} bytes, has {nbytes}")
        if offset < 0 or offset + nbytes > len(weights):
            r.fail(
                f"constant {i} lies at bytes {offset}..{offset + nbytes} of the weights, "
                f"outside the {len(weights)} bytes of section WGHT"
            )
        arr = np.frombuffer(weights[offset : offset + nbytes], dtype=dtype)
        if not arr.flags.aligned:  # kernels take aligned arrays: copy the rare odd one
            arr = np.frombuffer(bytes(weights[offset : offset + nbytes]), dtype=dtype)
        out.append(arr.reshape(shape))
    if r.str() != DIGEST:
        r.fail(f"the weights' digest is not {DIGEST}")
    want = bytes(r.take(DIGEST_BYTES))
    r.end()
    if check:
        check_digest(weights, want)
    return out


def check_digest(weights: memoryview, want: bytes) -> None:
    """Raises `ExecutableFormatError` unless ``weights`` hash to ``want``."""
    if digest((weights,)) != want:
        raise ExecutableFormatError(
            "corrupt executable: the weights (section WGHT) do not match their SHA-256 "
            "digest: the file was damaged or changed after it was written"
        )
