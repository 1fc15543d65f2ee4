"""Native functions calling a jit kernel by symbol: its loaded object code, not its LLVM IR.

A native function calling a kernel's dispatcher (``k3(a, b, out)``) makes Numba link the
kernel's LLVM IR (and every library function below it) into the native function's module and
optimize and generate it all again, though the kernel's object code is compiled and loaded
already: BERT's native function took 17 CPU-s of such work. A kernel bound ``by_symbol``
(`native_codegen` writes ``k3 = _by_symbol(k3)`` for the kernels it does not inline) is typed
as its dispatcher is (the same overload, compiled or loaded for the call's types), but the call
is a declaration of a symbol named by the kernel and the overload's types (`symbol_name`:
never Numba's mangled name, which numbers functions per process), registered with llvmlite at
the loaded overload's address, as `rvm.kernels.entry` registers the library's C entry points.
The call keeps Numba's calling convention (its status, a kernel's exception propagated as from
an inlined call); LLVM inlines nothing across it.

Numba's cache of a native function holds its object code with the symbol unresolved. Binding
a kernel ``by_symbol`` (when its native file runs, before any of the file's functions is
compiled or loaded) registers the symbols of every overload its dispatcher has (a jit kernel
is compiled for its signature when loaded, and compiles nothing else), so a cached function,
or one that linked a cached function calling kernels, finds them. Each call also adds a reload
step to its function's cache entry (Numba's ``reload_init``, run before the object code is
linked) registering its overload's symbol from the same dispatcher. Addresses come only from
dispatchers native files bound in this process (the kernels rvm's loader loaded, or a compile
server's replay of them): a reload step naming another kernel fails the load (a Numba error:
the function runs compiled) and links nothing.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import threading
from typing import Any

from llvmlite import binding as llvm
from numba.core import types
from numba.core.datamodel import models
from numba.core.imputils import user_function
from numba.extending import register_model, typeof_impl

__all__ = ["KernelSymbol", "by_symbol", "symbol_name"]

_lock = threading.Lock()
# (module, qualified name) -> the dispatcher a native file bound by symbol in this process
_bound: dict[tuple[str, str], Any] = {}
# registered symbol -> the overload whose address it holds (kept alive: its code is called)
_registered: dict[str, Any] = {}
_PREFIX = "rvm_kernel_"


class KernelSymbol:
    """A jit kernel's dispatcher, for native code to call by symbol (`by_symbol`)."""

    __slots__ = ("dispatcher", "key")

    def __init__(self, dispatcher: Any) -> None:
        self.dispatcher = dispatcher
        func = dispatcher.py_func
        self.key = (func.__module__, func.__qualname__)

    def __call__(self, *args: Any) -> Any:
        """Calls the kernel from Python (as its dispatcher)."""
        return self.dispatcher(*args)


def by_symbol(dispatcher: Any) -> KernelSymbol:
    """``dispatcher`` (a jit kernel's) bound for native code to call by symbol: the symbols of
    its overloads registered, and it recorded as the dispatcher a cached native function's
    call of it reloads its address from."""
    found = KernelSymbol(dispatcher)
    with _lock:
        _bound[found.key] = dispatcher
    for cres in list(dispatcher.overloads.values()):
        _register(found.key, cres)
    return found


def symbol_name(key: tuple[str, str], args: tuple) -> str:
    """The symbol native code calls kernel ``key`` (module, qualified name) by, for the
    argument types ``args``: the same in every process (a kernel's module is named by the hash
    of its source)."""
    digest = hashlib.sha256(repr(tuple(str(a) for a in args)).encode()).hexdigest()[:16]
    return f"{_PREFIX}{key[0]}.{key[1]}.{digest}"


def _register(key: tuple[str, str], cres: Any) -> str:
    """Registers the symbol of overload ``cres`` of kernel ``key`` at its loaded address; its
    name."""
    name = symbol_name(key, tuple(cres.signature.args))
    with _lock:
        if _registered.get(name) is not cres:
            address = cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name)
            if not address:
                raise RuntimeError(f"kernel overload {cres.fndesc.qualname} has no address")
            llvm.add_symbol(name, address)
            _registered[name] = cres
    return name


def _overload(dispatcher: Any, args: tuple) -> Any:
    """The compile result of ``dispatcher`` for ``args`` (loaded or compiled if needed)."""
    cres = dispatcher.overloads.get(args)
    if cres is None:
        dispatcher.compile(args)
        cres = dispatcher.overloads[args]
    return cres


def reload_symbol(module: str, qualname: str, args: tuple) -> None:
    """Registers the symbol of kernel ``module.qualname``'s overload for ``args`` (a cached
    native function's reload step, before its object code is linked).

    Raises:
        RuntimeError: No native file of this process bound that kernel `by_symbol`.
    """
    dispatcher = _bound.get((module, qualname))
    if dispatcher is None:
        raise RuntimeError(
            f"native code calls kernel {module}.{qualname} by symbol, but no native file of "
            "this process bound it"
        )
    _register((module, qualname), _overload(dispatcher, args))


class KernelSymbolType(types.Dispatcher):
    """The Numba type of a `KernelSymbol`: typed as its dispatcher, called by symbol."""

    def __init__(self, symbol: KernelSymbol) -> None:
        self._store_object(symbol.dispatcher)
        self._key = symbol.key
        types.Callable.__init__(self, f"kernel_symbol({symbol.key[0]}.{symbol.key[1]})")

    def get_impl_key(self, sig: Any) -> Any:
        key = ("rvm_kernel_symbol", self._key, tuple(sig.args))
        context = self.dispatcher.targetctx
        if key not in context._defns:  # the call's lowering, made at its first use
            cres = _overload(self.dispatcher, tuple(sig.args))
            context._defns[key].append(_lowering(cres, self._key), tuple(cres.fndesc.argtypes))
        return key


def _lowering(cres: Any, key: tuple[str, str]) -> Any:
    """The lowering of a call of overload ``cres`` (of kernel ``key``) by its symbol."""
    fndesc = copy.copy(cres.fndesc)
    fndesc.mangled_name = symbol_name(key, tuple(cres.signature.args))
    call = user_function(fndesc, ())  # Numba's call of a jitted function, no library linked
    reload = functools.partial(reload_symbol, key[0], key[1], tuple(cres.signature.args))

    def lower(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        _register(key, cres)
        context.active_code_library._reload_init.add(reload)
        return call(context, builder, sig, args)

    lower.signature = call.signature  # type: ignore[attr-defined]
    lower.libs = ()  # type: ignore[attr-defined]
    return lower


register_model(KernelSymbolType)(models.OpaqueModel)  # a value of no data, as a dispatcher's


@typeof_impl.register(KernelSymbol)
def _typeof(value: KernelSymbol, c: Any) -> KernelSymbolType:
    return KernelSymbolType(value)
