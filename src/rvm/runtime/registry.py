"""The packed-function registry: global callables found by name.

Kernels of an executable are resolved from the executable itself; everything else the bytecode
calls (the `vm.builtin.*` functions, user extensions) is looked up here when a
`VirtualMachine` is built.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rvm.errors import VMError

__all__ = ["register_func", "get_global_func", "list_global_func_names"]

_REGISTRY: dict[str, Callable[..., Any]] = {}


def register_func(name: str, f: Callable[..., Any] | None = None, override: bool = False) -> Any:
    """Registers `f` as the packed function `name`; usable as a decorator.

    Args:
        name: The global name, e.g. `"vm.builtin.make_shape"`.
        f: The callable; when omitted, returns a decorator.
        override: Replace an existing registration instead of raising.

    Returns:
        `f`, or a decorator that registers its argument and returns it.

    Raises:
        ValueError: `name` is already registered and `override` is false.
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"register_func: name must be a non-empty str, got {name!r}")

    def register(func: Callable[..., Any]) -> Callable[..., Any]:
        if not callable(func):
            raise TypeError(f"register_func: {name!r} must be callable, got {func!r}")
        if name in _REGISTRY and not override:
            raise ValueError(
                f"packed function {name!r} is already registered; pass override=True to replace it"
            )
        _REGISTRY[name] = func
        return func

    if f is None:
        return register
    return register(f)


def get_global_func(name: str, allow_missing: bool = False) -> Callable[..., Any] | None:
    """Returns the packed function registered as `name`.

    Args:
        name: The global name.
        allow_missing: Return None instead of raising when `name` is unknown.

    Raises:
        VMError: `name` is not registered and `allow_missing` is false.
    """
    func = _REGISTRY.get(name)
    if func is None and not allow_missing:
        raise VMError(f"no packed function is registered as {name!r}")
    return func


def list_global_func_names() -> list[str]:
    """Returns the registered names, sorted."""
    return sorted(_REGISTRY)
