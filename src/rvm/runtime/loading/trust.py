"""The trust model of saved executables: signing keys, the trust store, signatures.

A saved executable carries code: its kernels' Python source, and Numba's cache files of their
object code (pickles). rvm runs that code only when the file is *trusted*: signed with a key
the user trusts, or loaded with ``trusted=True``. Everything else in a file (functions,
bytecode, constants, types) is data, decoded with bounds checks.

A signature is an HMAC-SHA256 (stdlib `hmac`) over every byte of the file before it (the
header and every section) but the weights' bytes (section WGHT, format 2), which the SHA-256
digest in the signed CONS section stands for (`rvm.runtime.weights`), in a last section
``SIGN`` that holds the key's id and the MAC (`rvm.runtime.serialize`). Keys are secrets of
at least 16 bytes; whoever holds a key can sign with it, so share one only with people whose
files you would run.

Keys live in the trust store, a folder under rvm's config dir (`config_dir`:
``RVM_CONFIG_DIR``, else ``$XDG_CONFIG_HOME/rvm``, else ``~/.config/rvm``):

- ``local.key``: this user's own key, made at the first save (mode 0600). ``ex.save(path)``
  and ``pickle`` sign with it, so what you save loads on your machine as before.
- ``trusted/<id>.key``: keys you trust (`add_key`), e.g. a colleague's or a CI's.

Keys can also be passed per load: ``rvm.load_executable(path, keys=[key])``.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

from rvm.runtime.loading import user_dir

Buffer = bytes | bytearray | memoryview  # what hmac takes (an mmap too)

__all__ = [
    "MIN_KEY_BYTES",
    "add_key",
    "config_dir",
    "key_id",
    "local_key",
    "new_key",
    "remove_key",
    "sign",
    "trusted_keys",
    "verify",
]

MIN_KEY_BYTES = 16
MAC_BYTES = 32
_lock = threading.Lock()


def config_dir() -> Path:
    """rvm's config directory (from the environment at each call; not created here)."""
    return user_dir("RVM_CONFIG_DIR", "XDG_CONFIG_HOME", ".config")


def _as_key(key: bytes | str) -> bytes:
    """``key`` as bytes: bytes as given, a str as hex (as `new_key().hex()` prints)."""
    if isinstance(key, str):
        try:
            key = bytes.fromhex(key.strip())
        except ValueError:
            raise ValueError("a signing key given as text must be hex digits") from None
    if not isinstance(key, (bytes, bytearray)):
        raise TypeError(f"a signing key is bytes or a hex string, got {type(key).__name__}")
    if len(key) < MIN_KEY_BYTES:
        raise ValueError(f"a signing key needs at least {MIN_KEY_BYTES} bytes, got {len(key)}")
    return bytes(key)


def new_key() -> bytes:
    """A fresh random 32-byte signing key."""
    return secrets.token_bytes(32)


def key_id(key: bytes | str) -> str:
    """The public id of ``key`` (16 hex digits; a file names its signer by it)."""
    return hashlib.sha256(b"rvm-key-id\0" + _as_key(key)).hexdigest()[:16]


def _write_private(path: Path, data: bytes) -> None:
    """Create ``path`` with ``data``, readable by this user only; keep it if it exists."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    try:
        os.link(tmp, path)  # fails when another process made it first: keep theirs
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)


def _read_key(path: Path) -> bytes | None:
    try:
        return _as_key(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def local_key() -> bytes:
    """This user's own signing key (``local.key`` in `config_dir`), made on first use."""
    path = config_dir() / "local.key"
    with _lock:
        key = _read_key(path)
        if key is None:
            _write_private(path, new_key().hex().encode())
            key = _read_key(path)
        if key is None:
            raise OSError(f"cannot read the local signing key {path}")
        return key


def add_key(key: bytes | str) -> str:
    """Trust ``key`` from now on (writes it to the trust store); returns its id."""
    key = _as_key(key)
    ident = key_id(key)
    path = config_dir() / "trusted" / f"{ident}.key"
    if _read_key(path) != key:
        path.unlink(missing_ok=True)
        _write_private(path, key.hex().encode())
    return ident


def remove_key(key: bytes | str) -> bool:
    """Stop trusting ``key`` (a key, or its id); returns whether it was trusted."""
    if isinstance(key, str) and len(key) == 16:
        ident = key
    else:
        ident = key_id(key)
    path = config_dir() / "trusted" / f"{ident}.key"
    existed = path.exists()
    path.unlink(missing_ok=True)
    return existed


def trusted_keys() -> dict[str, bytes]:
    """The keys of the trust store by id: the local key (when made) and those added."""
    out = {}
    local = _read_key(config_dir() / "local.key")
    if local is not None:
        out[key_id(local)] = local
    folder = config_dir() / "trusted"
    if folder.is_dir():
        for f in sorted(folder.glob("*.key")):
            key = _read_key(f)
            if key is not None:
                out[key_id(key)] = key
    return out


def _mac(key: bytes, data: Buffer | Sequence[Buffer]) -> bytes:
    mac = hmac.new(key, digestmod=hashlib.sha256)
    for part in data if isinstance(data, (list, tuple)) else (data,):
        mac.update(part)
    return mac.digest()


def sign(data: Buffer | Sequence[Buffer], key: bytes | str) -> tuple[str, bytes]:
    """(key id, HMAC-SHA256 of ``data`` under ``key``); ``data`` may be a list or tuple of
    parts, signed as if concatenated."""
    key = _as_key(key)
    return key_id(key), _mac(key, data)


def verify(
    data: Buffer | Sequence[Buffer], ident: str, mac: bytes, keys: Iterable[bytes | str] = ()
) -> bool:
    """Whether ``mac`` is the signature of ``data`` (bytes, or a list or tuple of parts) by
    key ``ident``, that key being one of ``keys`` or of the trust store (compared in
    constant time)."""
    candidates = {key_id(k): _as_key(k) for k in keys}
    key = candidates.get(ident)
    if key is None:
        key = trusted_keys().get(ident)
    if key is None or len(mac) != MAC_BYTES:
        return False
    return hmac.compare_digest(_mac(key, data), mac)
