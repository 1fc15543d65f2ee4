"""A compile request: what names a function for another process to compile
(`rvm.kernels.compile_server`), by reference, never by object.

A function by its module's name and file, qualified name and first line, and the signature
(`Request`, `describe`); a C callback made at run time from a module's plain function (the
library's tasks and entry points) by that function, with the callback's signature, options
and locals (`describe_cfunc`); a file rvm generated and ran by its text's hash and the values
bound into it before it ran (`replayable`, `binding`: a module-level object by reference, an
array or a scalar pickled). The server rebuilds each as its own; what cannot be described is
None, and the caller compiles the usual way.
"""

from __future__ import annotations

import dataclasses
import hashlib
import pickle
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

__all__ = [
    "MAX_DATA_BYTES",
    "Binding",
    "Replay",
    "Request",
    "attribute",
    "binding",
    "describe",
    "describe_cfunc",
    "replayable",
]

MAX_DATA_BYTES = 1 << 20  # a bound value sent as data at most (each request carries it)
# A binding of a generated file's global, as data (`binding`): ("ref", module, qualified name,
# that module's replay or None, its file or None) for a module-level object, ("data", pickle)
# for an array or a scalar.
Binding = tuple
# How a server runs a generated file again: (file, sha256 of its text, its globals bound
# before it ran: ((name, `Binding`), ...) sorted by name).
Replay = tuple[str, str, tuple[tuple[str, Binding], ...]]
_replayable: dict[str, Replay] = {}  # module name -> its replay
_DATA = (bool, int, float, complex, str, bytes, type(None))


def replayable(
    name: str, path: Path, text: str | bytes, namespace: dict[str, Any] | None = None
) -> None:
    """Record that module ``name`` is the generated file ``path`` (``text``: what ran) with
    ``namespace`` bound as its globals before it ran, so a server may run it again, the same
    values bound, to compile its functions; nothing is recorded (and a module of that name
    recorded before is forgotten) when a bound value cannot be described (`binding`)."""
    data = text.encode() if isinstance(text, str) else text
    bound = []
    for key, value in sorted((namespace or {}).items()):
        described = binding(value)
        if described is None:
            _replayable.pop(name, None)
            return
        bound.append((key, described))
    _replayable[name] = (str(path), hashlib.sha256(data).hexdigest(), tuple(bound))


def binding(value: Any) -> Binding | None:
    """``value`` as data a server rebuilds it from: a module-level object (a Numba function, a
    class, a function) by its module and qualified name, that module run again as the parent
    ran it (`replayable`) or imported from the same file; a NumPy array, dtype or scalar, or a
    Python scalar, pickled (at most `MAX_DATA_BYTES`; plain values only, never an array of
    Python objects, whose pickle would rebuild them by their own code). None: neither (a
    closure, an object of no module, a big or object array...)."""
    if isinstance(value, (np.ndarray, np.generic, np.dtype, *_DATA)):
        dtype = value if isinstance(value, np.dtype) else getattr(value, "dtype", None)
        if dtype is not None and dtype.hasobject:
            return None  # Python objects inside: their pickle would run their own code
        try:
            data = pickle.dumps(value)
        except Exception:  # noqa: BLE001 - not picklable: not describable
            return None
        return ("data", data) if len(data) <= MAX_DATA_BYTES else None
    func = getattr(value, "py_func", None) or getattr(value, "_pyfunc", None) or value
    module_name = getattr(func, "__module__", None)
    qualname = getattr(func, "__qualname__", "")
    module = sys.modules.get(module_name or "")
    if module is None or not qualname or "<" in qualname:
        return None
    if attribute(module, qualname) is not value:
        return None
    replay = _replayable.get(module_name)
    file = getattr(module, "__file__", None)
    if replay is None and file is None:
        return None
    return ("ref", module_name, qualname, replay, file)


def attribute(module: ModuleType, qualname: str) -> Any:
    found: Any = module
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return found


@dataclass(frozen=True)
class Request:
    """A function to compile, by reference (see the module docstring)."""

    module: str
    qualname: str
    file: str
    line: int
    signature: bytes | None  # a pickled Numba signature; None: a C callback's own
    cache_path: str  # the folder of Numba's cache the parent loads from
    cache_dir: str | None  # Numba's ``config.CACHE_DIR`` in the parent
    replay: Replay | None  # how to run it again, when the module is a generated file
    # A C callback made at run time from the module's plain function (`describe_cfunc`):
    # its (signature, options, locals), pickled; None: the module's attribute is the function
    made: bytes | None = None


def describe(py_func: Any, signature: Any, cache: Any) -> Request | None:
    """The request compiling ``py_func`` for ``signature`` (None for a C callback's own) into
    Numba's ``cache``, or None when a server cannot rebuild it (not its module's own, a
    closure, a signature that does not pickle, no disk cache)."""
    code = getattr(py_func, "__code__", None)
    qualname = getattr(py_func, "__qualname__", "")
    module = getattr(py_func, "__module__", None)
    if code is None or not module or "<" in qualname or getattr(py_func, "__closure__", None):
        return None
    from numba.core import config

    try:
        sig = None if signature is None else pickle.dumps(signature)
        cache_path = str(cache._cache_path)
    except Exception:  # noqa: BLE001 - not sendable: the parent's usual way
        return None
    return Request(
        module,
        qualname,
        code.co_filename,
        code.co_firstlineno,
        sig,
        cache_path,
        config.CACHE_DIR or None,
        _replayable.get(module),
    )


def describe_cfunc(cfunc: Any) -> Request | None:
    """The request compiling the C callback ``cfunc`` (a `numba.core.ccallback.CFunc`) into
    Numba's cache: by its module's attribute, which is the callback itself (made by a
    decorator) or the plain function the callback was made from at run time, as the library's
    tasks and entry points are (`rvm.kernels.parfor.require_task`, `rvm.kernels.entry.require`):
    the server then makes it again from that function, with the same signature, options and
    locals (None: `describe` cannot, or they do not pickle, or it has a pipeline of its own)."""
    from numba.core.compiler import Compiler

    request = describe(cfunc._pyfunc, None, cfunc._cache)
    compiler = cfunc._compiler
    if request is None or compiler.pipeline_class is not Compiler:
        return None
    try:
        made = pickle.dumps((cfunc._sig, dict(compiler.targetoptions), dict(compiler.locals)))
    except Exception:  # noqa: BLE001 - not sendable: the parent's usual way
        return None
    return dataclasses.replace(request, made=made)
