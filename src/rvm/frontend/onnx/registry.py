"""The converter registry: which ONNX op, at which schema version, becomes which rvm IR.

Each converter declares the schema versions it implements (``since``: the ``since_version`` of
the ONNX operator definitions whose semantics it follows):

    @converter("Softmax", since=(1, 11))     # flattens to 2-D from ``axis``
    def softmax_v1(ctx): ...

    @converter("Softmax", since=13)          # along ``axis`` only
    def softmax_v13(ctx): ...

A node is dispatched by its domain's opset in the model: ONNX resolves that opset to the
operator's schema version in force (Softmax at opset 12 is Softmax-11), and only a converter
declaring exactly that version may convert the node. A version no converter declares is
refused, never given another version's semantics.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

ConvertFn = Callable[[Any], Any]

_table: dict[tuple[str, str], list[Converter]] = {}


@dataclass(frozen=True)
class Converter:
    """A function converting nodes of ``op_type`` at the schema ``versions`` it implements."""

    domain: str
    op_type: str
    versions: frozenset[int]
    fn: ConvertFn


def normalize_domain(domain: str) -> str:
    """``"ai.onnx"`` and ``""`` name the same (default) domain."""
    return "" if domain == "ai.onnx" else domain


def converter(
    op_type: str | Iterable[str], since: int | Iterable[int], domain: str = ""
) -> Callable[[ConvertFn], ConvertFn]:
    """Register the decorated function for ``op_type`` (one name or several) at ``since``."""
    names = [op_type] if isinstance(op_type, str) else list(op_type)
    versions = frozenset([since] if isinstance(since, int) else since)

    def register(fn: ConvertFn) -> ConvertFn:
        for name in names:
            key = (normalize_domain(domain), name)
            for other in _table.get(key, []):
                clash = other.versions & versions
                if clash:
                    raise ValueError(f"{name}: versions {sorted(clash)} registered twice")
            _table.setdefault(key, []).append(
                Converter(normalize_domain(domain), name, versions, fn)
            )
        return fn

    return register


@functools.cache  # asked once per node: thousands of times per model
def schema_version(op_type: str, opset: int, domain: str = "") -> int | None:
    """The ``since_version`` of ``op_type``'s definition in force at ``opset``; None if none."""
    import onnx.defs

    try:
        return onnx.defs.get_schema(op_type, opset, normalize_domain(domain)).since_version
    except onnx.defs.SchemaError:
        return None


def lookup(op_type: str, opset: int, domain: str = "") -> tuple[int | None, Converter | None]:
    """The schema version of ``op_type`` at ``opset`` and the converter implementing it."""
    version = schema_version(op_type, opset, domain)
    if version is None:
        return None, None
    for conv in _table.get((normalize_domain(domain), op_type), []):
        if version in conv.versions:
            return version, conv
    return version, None


def supported() -> dict[str, list[int]]:
    """Every supported op (``domain.op`` outside the default domain) and its versions."""
    out: dict[str, list[int]] = {}
    for (domain, op_type), convs in sorted(_table.items()):
        name = f"{domain}.{op_type}" if domain else op_type
        out[name] = sorted(v for c in convs for v in c.versions)
    return out
