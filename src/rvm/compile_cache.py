"""`compile_onnx`: import and compile an ONNX model once, load it from a cache afterwards.

``rvm.compile_onnx(path, ...)`` is ``rvm.compile(rvm.from_onnx(path, ...), ...)`` with a cache:
the executable it builds is saved (format 2.0: the weights memory-mapped when loaded) under
``<cache dir>/compiled/`` (``RVM_CACHE_DIR``, see `rvm.runtime.loading.cache.cache_dir`), and a
later call in any process with the same inputs loads it instead of reading the model and running
the passes. Loading a cached executable imports no compiler code.

**The key** is a SHA-256 of what decides the result: the model's bytes (a path's content digest,
a ``ModelProto``'s serialized bytes, or the bytes given), the import options (``shape_dict``,
``dtype_dict``, ``params``, ``custom_ops``), the compile options that change the executable (all
but ``verify``, ``dump_dir``, ``build_kernels``, ``progress``), the source of every rvm module
(`code_hash`), the versions of Python and onnx, and the CPU and library versions compiled code
is for (`rvm.runtime.loading.cache.target_key`). A path's digest is computed once (a streaming
SHA-256, about 0.5 s for 650 MB) and remembered in ``compiled/sources/`` against the file's
device, inode, size, modification and change times: any write to the file changes its change
time, so a changed file is digested again, never served from a stale entry. The external data
files a model file names are checked at each hit against the digests its entry's manifest
records, beside the model file being compiled (a different one is refused and rebuilt).

**Trust.** A cache entry is code (its kernels' object code runs), so it is treated as a saved
file is (see Trust in docs/architecture.md): each entry is signed with a key derived from this
user's local key and the entry's own cache key, and loads only when that signature verifies;
the remembered digests and each entry's manifest (its external data files' digests) are signed
the same way. A changed, truncated, foreign (another entry's, or any other file, renamed) or
unsigned entry is refused: it is deleted and rebuilt, and one INFO line of the ``rvm.codegen``
logger says why.

**Size.** After each write, the least recently used entries are deleted until the folder holds at
most ``RVM_COMPILE_CACHE_SIZE`` bytes (default 8 GB; ``K``/``M``/``G`` suffixes), the entry just
written excepted. `clear` (or `rvm.runtime.loading.cache.clear_cache`) deletes it all.

**Opt-out.** ``cache=False``, or ``RVM_COMPILE_CACHE=0`` in the environment; a call with
``verify`` or ``dump_dir`` (debugging, whose output a cached load would skip) does not use it.
Files are written to a temporary name and renamed in place, so concurrent processes see a whole
entry or none.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import hmac
import json
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from rvm.runtime import Executable, load_executable
from rvm.runtime.loading import COMPILED_DIR, trust
from rvm.runtime.loading.cache import cache_dir, target_key, write_atomic

logger = logging.getLogger("rvm.codegen")

__all__ = ["COMPILE_OPTIONS", "cache_info", "clear", "code_hash", "compile_onnx", "source_digest"]

COMPILE_OPTIONS: Mapping[str, Any] = MappingProxyType(
    {
        "kernels": "jit",
        "opt_level": 2,
        "verify": False,
        "dump_dir": None,
        "exec_mode": "bytecode",
        "build_kernels": True,
        "progress": True,
        "precision": "fp32",
    }
)
"""The keyword arguments of `rvm.compile` that `compile_onnx` passes on, with their defaults
(an option given its default value keys as if not given; tests check these against
`rvm.compile`'s signature, which this module does not import)."""

_UNKEYED = ("verify", "dump_dir", "build_kernels", "progress")  # do not change the executable
_DEFAULT_SIZE = 8 << 30
_CHUNK = 1 << 22


def compile_onnx(
    model: Any,
    *,
    shape_dict: Mapping[str, Sequence[int | str]] | None = None,
    dtype_dict: Mapping[str, str] | None = None,
    params: str = "constants",
    custom_ops: Mapping[str, Any] | None = None,
    cache: bool | None = None,
    **options: Any,
) -> Executable:
    """Import and compile an ONNX model (`rvm.from_onnx`, then `rvm.compile`), through the
    compile cache (see the module docstring): a second call with the same model and options,
    in this process or another, loads the executable the first one built.

    Args:
        model: an ``onnx.ModelProto``, a path to a ``.onnx`` file, or its serialized bytes.
        shape_dict, dtype_dict, params, custom_ops: passed to `rvm.from_onnx`.
        cache: False: do not read or write the cache; None (default): use it unless the
            environment says ``RVM_COMPILE_CACHE=0``; True: use it.
        **options: passed to `rvm.compile` (`COMPILE_OPTIONS`).

    Returns:
        The executable; when loaded from the cache, ``ex.trusted`` and its default exec mode
        are those of the one built.

    Raises:
        TypeError: an option `rvm.compile` does not take.
        rvm.OnnxImportError, rvm.JITError, ValueError: as `rvm.from_onnx` and `rvm.compile`.
    """
    unknown = sorted(set(options) - set(COMPILE_OPTIONS))
    if unknown:
        raise TypeError(
            f"compile_onnx got options rvm.compile does not take: {', '.join(unknown)} "
            f"(it takes {', '.join(COMPILE_OPTIONS)})"
        )
    imports = {
        "shape_dict": shape_dict,
        "dtype_dict": dtype_dict,
        "params": params,
        "custom_ops": custom_ops,
    }
    if not _enabled(cache, options):
        return _build(model, imports, options)
    before = _stamp(model)
    try:
        key = _key(model, imports, options)
        entry = None if key is None else _folder() / f"{key}.rvmx"
        ex = None if entry is None else _load(entry, key, _base(model))
    except OSError as err:  # an unreadable or unwritable cache or config dir: no cache
        logger.info("compile_onnx: the compile cache is not usable (%s): not cached", err)
        return _build(model, imports, options)
    if ex is not None:
        return ex
    ex = _build(model, imports, options)
    if entry is not None and _stamp(model) == before:  # not changed while it was imported
        try:
            _store(ex, entry, key, _external(model, _base(model)))
        except OSError as err:
            logger.info("compile_onnx: not cached (%s)", err)
    return ex


def _stamp(model: Any) -> tuple[int, ...] | None:
    """A model file's identity and change time (None for a ModelProto or bytes)."""
    if not isinstance(model, (str, os.PathLike)):
        return None
    try:
        st = os.stat(model)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _enabled(cache: bool | None, options: Mapping[str, Any]) -> bool:
    if cache is False or options.get("verify") or options.get("dump_dir") is not None:
        return False
    if cache is None:
        flag = os.environ.get("RVM_COMPILE_CACHE", "1").strip().lower()
        return flag not in ("0", "false", "no", "off")
    return True


def _build(model: Any, imports: dict[str, Any], options: dict[str, Any]) -> Executable:
    from rvm.codegen import compile as compile_module
    from rvm.frontend.onnx import from_onnx

    return compile_module(from_onnx(model, **imports), **options)


# -- keys -----------------------------------------------------------------------------------


@functools.cache
def code_hash() -> str:
    """SHA-256 of the source of every module of the rvm package (read once per process)."""
    root = Path(__file__).parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(f"{path.relative_to(root).as_posix()}\0".encode())
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


@functools.cache
def _importer_versions() -> str:
    """Python's version and the onnx package's (read from its metadata: importing onnx
    would cost a hit a quarter of a second)."""
    from importlib import metadata

    try:
        onnx_version = metadata.version("onnx")
    except metadata.PackageNotFoundError:
        onnx_version = "none"
    return f"python={sys.version} onnx={onnx_version}"


def _key(model: Any, imports: dict[str, Any], options: dict[str, Any]) -> str | None:
    """The cache key of this call, or None when an option cannot be keyed (a custom op's
    type whose text names an object's address)."""
    opts = {**{k: v for k, v in COMPILE_OPTIONS.items() if k not in _UNKEYED}, **options}
    opts = {k: v for k, v in sorted(opts.items()) if k not in _UNKEYED}
    text = json.dumps(
        {
            "model": _model_digest(model),
            "imports": imports,
            "compile": opts,
            "rvm": code_hash(),
            "target": target_key(),
            "importer": _importer_versions(),
        },
        sort_keys=True,
        default=repr,
    )
    if " at 0x" in text:
        logger.info("compile_onnx: an option has no stable text (%s): not cached", text[:200])
        return None
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _model_digest(model: Any) -> str:
    if isinstance(model, (str, os.PathLike)):
        return "file:" + source_digest(model)
    if isinstance(model, (bytes, bytearray, memoryview)):
        return "bytes:" + hashlib.sha256(model).hexdigest()
    serialize = getattr(model, "SerializeToString", None)
    if serialize is None:
        raise TypeError(
            "rvm.compile_onnx expects an onnx.ModelProto, a path or bytes, got "
            f"{type(model).__name__}"
        )
    return "proto:" + hashlib.sha256(serialize(deterministic=True)).hexdigest()


def source_digest(path: str | os.PathLike) -> str:
    """The SHA-256 of the file at ``path``, remembered (signed) in the cache against its
    device, inode, size and times, so that an unchanged file is not read again.

    Raises:
        rvm.OnnxImportError: the file cannot be read.
    """
    real = os.path.realpath(os.fspath(path))
    try:
        st = os.stat(real)
    except OSError as err:
        from rvm.errors import OnnxImportError

        raise OnnxImportError(f"cannot read the ONNX model {os.fspath(path)!r}: {err}") from None
    stamp = [real, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    memo = _folder() / "sources" / f"{hashlib.sha256(real.encode()).hexdigest()[:32]}.json"
    known = _read_signed(memo, "sources")
    if known is not None and known.get("stamp") == stamp:
        return known["digest"]
    digest = hashlib.sha256()
    with open(real, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    value = digest.hexdigest()
    if os.stat(real).st_ctime_ns == st.st_ctime_ns:  # not written while it was read
        try:
            _write_signed(memo, "sources", {"stamp": stamp, "digest": value})
        except OSError as err:  # a read-only cache: digested again next time
            logger.debug("compile_onnx: digest of %s not remembered (%s)", real, err)
    return value


def _base(model: Any) -> str | None:
    """The folder a model file's external data locations are relative to (as the importer
    reads them), or None for a ModelProto or bytes."""
    if not isinstance(model, (str, os.PathLike)):
        return None
    return os.path.dirname(os.path.abspath(os.fspath(model)))


def _external(model: Any, base: str | None) -> dict[str, str]:
    """The external data files a model file names: {location: content digest}, the
    location relative to ``base``, the model's folder."""
    if base is None:
        return {}
    import mmap

    import onnx

    from rvm.frontend.onnx.weights import split_weights

    path = os.path.realpath(os.fspath(model))
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        split = split_weights(data)  # the model without its weights' bytes: cheap to parse
        proto = onnx.ModelProto()
        proto.ParseFromString(split[0] if split is not None else bytes(data))
    names = set()
    for graph in (proto.graph, *(f for f in proto.functions)):
        for tensor in _tensors(graph):
            if onnx.external_data_helper.uses_external_data(tensor):
                names.add(onnx.external_data_helper.ExternalDataInfo(tensor).location)
    return {n: source_digest(os.path.join(base, n)) for n in sorted(names)}


def _tensors(graph: Any) -> Any:
    """Every tensor of a graph (or a function): initializers, and tensors in attributes, its
    subgraphs' included."""
    yield from getattr(graph, "initializer", ())
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                yield from _tensors(sub)


# -- entries --------------------------------------------------------------------------------


def _folder() -> Path:
    return cache_dir() / COMPILED_DIR


def _derived_key(purpose: str) -> bytes:
    """A signing key of its own per purpose (an entry's cache key, or "sources"), made from
    this user's local key, so one signed file cannot stand for another."""
    return hmac.new(trust.local_key(), f"rvm compile cache\0{purpose}".encode(), "sha256").digest()


def _read_signed(path: Path, purpose: str) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text())
        body, mac = json.dumps(doc["body"], sort_keys=True), bytes.fromhex(doc["mac"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    want = hmac.new(_derived_key(purpose), body.encode(), "sha256").digest()
    return doc["body"] if hmac.compare_digest(want, mac) else None


def _write_signed(path: Path, purpose: str, body: dict[str, Any]) -> None:
    text = json.dumps(body, sort_keys=True)
    mac = hmac.new(_derived_key(purpose), text.encode(), "sha256").hexdigest()
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps({"body": body, "mac": mac}).encode())


def _load(entry: Path, key: str, base: str | None) -> Executable | None:
    """The cached executable of ``key``, or None (missing, or refused and deleted)."""
    if not entry.is_file():
        return None
    manifest = _read_signed(entry.with_suffix(".json"), key)
    if manifest is None:
        return _refuse(entry, "its manifest is missing or not signed for this entry")
    for name, digest in manifest.get("external", {}).items():  # beside this model file
        try:
            now = None if base is None else source_digest(os.path.join(base, name))
        except Exception:  # OnnxImportError: the file is gone
            now = None
        if now != digest:
            return _refuse(
                entry, f"its external data file {name!r} is not the one it was built from"
            )
    signer = _derived_key(key)
    try:
        ex = load_executable(str(entry), keys=[signer])
    except Exception as err:  # ExecutableFormatError, or an OSError reading it
        return _refuse(entry, f"it does not load: {err}")
    if not ex.trusted or ex.signed_by != trust.key_id(signer):
        return _refuse(entry, "it is not signed for this entry")
    with contextlib.suppress(OSError):  # a read-only cache: served all the same
        os.utime(entry)  # most recently used
    logger.debug("compile_onnx: loaded %s", entry)
    return ex


def _refuse(entry: Path, why: str) -> None:
    logger.info("compile_onnx: cache entry %s refused (%s): rebuilt", entry.name, why)
    entry.unlink(missing_ok=True)
    entry.with_suffix(".json").unlink(missing_ok=True)
    return None


def _store(ex: Executable, entry: Path, key: str, external: dict[str, str]) -> None:
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        ex.save(str(entry), sign=_derived_key(key))
    except Exception as err:  # an executable that cannot be saved, a full disk
        logger.info("compile_onnx: not cached (%s: %s)", type(err).__name__, err)
        entry.unlink(missing_ok=True)
        return
    _write_signed(entry.with_suffix(".json"), key, {"external": external})
    _trim(_limit(), keep=entry)


# -- size -----------------------------------------------------------------------------------


def _limit() -> int:
    text = os.environ.get("RVM_COMPILE_CACHE_SIZE", "").strip().upper()
    if not text:
        return _DEFAULT_SIZE
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    try:
        return int(float(text.rstrip("KMGB") or "0") * scale)
    except ValueError:
        raise ValueError(
            f"RVM_COMPILE_CACHE_SIZE must be a size in bytes (K, M, G suffixes), got {text!r}"
        ) from None


def _entries() -> list[tuple[float, int, Path]]:
    """(last use, bytes, path) of each entry, least recently used first."""
    out = []
    for path in _folder().glob("*.rvmx"):
        try:
            st = path.stat()
        except OSError:
            continue
        out.append((st.st_mtime, st.st_size, path))
    return sorted(out)


def _trim(limit: int, keep: Path) -> None:
    entries = _entries()
    total = sum(size for _, size, _ in entries)
    for _, size, path in entries:
        if total <= limit:
            break
        if path != keep:
            logger.info("compile_onnx: %s evicted (cache over %d bytes)", path.name, limit)
            path.unlink(missing_ok=True)
            path.with_suffix(".json").unlink(missing_ok=True)
            total -= size


def cache_info() -> dict[str, Any]:
    """The compile cache's folder, number of entries and their bytes, and its size limit."""
    entries = _entries()
    return {
        "dir": str(_folder()),
        "entries": len(entries),
        "bytes": sum(size for _, size, _ in entries),
        "limit": _limit(),
    }


def clear() -> None:
    """Delete every entry of the compile cache (and the remembered digests)."""
    import shutil

    shutil.rmtree(_folder(), ignore_errors=True)
