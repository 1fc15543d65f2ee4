"""How data types with a Python form cross the VM's boundary (`ADTInfo.python`, set by the
frontend that made the type): a ``"list"`` type (``Nil | Cons(head, tail)``) as a Python list,
an ``"optional"`` type (``Nothing | Some(value)``) as None or the value. The entry checks
(`rvm.runtime.entry`) take arguments in that form and hand results back in it; `to_array`
is how any Python value becomes the array a kernel reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rvm.errors import ExecutableFormatError
from rvm.runtime.executable import ADTInfo, ParamSpec, VMFunction
from rvm.runtime.objects import ADT, Closure

__all__ = ["PythonForms", "to_array"]


def to_array(x: Any, dtype: str | None) -> np.ndarray:
    """``x`` as a C-contiguous numpy array (kernels index their inputs so): an array as it is
    (copied if not contiguous), anything with ``__dlpack__`` or ``__array__`` through numpy, a
    Python scalar or list as ``dtype`` (it has none of its own)."""
    if isinstance(x, np.ndarray):
        arr = x
    elif hasattr(x, "__dlpack__"):
        arr = np.from_dlpack(x)
    elif hasattr(x, "__array__"):
        arr = np.asarray(x)
    else:
        # A Python scalar or list has no dtype of its own: give it the parameter's.
        arr = np.asarray(x, dtype=dtype)
    if not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr)
    return arr


class PythonForms:
    """How the data types with a Python form (`ADTInfo.python`) cross the VM's boundary: a
    Python list for a ``"list"`` type, None or the value for an ``"optional"`` one.

    Raises:
        ExecutableFormatError: A form that does not fit its type's constructors.
    """

    __slots__ = ("_types",)

    def __init__(self, adts: Sequence[ADTInfo]) -> None:
        # name -> (form, empty (tag, name), full (tag, name), inner data type or None)
        self._types: dict[str, tuple[str, tuple[int, str], tuple[int, str], str | None]] = {}
        for info in adts:
            if info.python:
                self._types[info.name] = _form(info)

    def __bool__(self) -> bool:
        return bool(self._types)

    def from_python(self, fname: str, what: str, adt: str, x: Any) -> Any:
        """``x`` as a value of data type ``adt``: itself if an `ADT` or ``adt`` has no form."""
        if isinstance(x, ADT) or adt not in self._types:
            return x
        form, empty, full, inner = self._types[adt]
        if form == "list":
            if not isinstance(x, (list, tuple)):
                raise TypeError(
                    f"{fname}: {what} expects a list (a {adt} value), got {type(x).__name__}"
                )
            out = ADT(empty[0], (), empty[1])
            for item in reversed(x):
                if isinstance(item, (ADT, Closure, tuple, list)):
                    raise TypeError(
                        f"{fname}: {what} expects a list of tensors, got a "
                        f"{type(item).__name__} in it"
                    )
                out = ADT(full[0], (to_array(item, None), out), full[1])
            return out
        if x is None:
            return ADT(empty[0], (), empty[1])
        value = self.from_python(fname, what, inner, x) if inner else to_array(x, None)
        return ADT(full[0], (value,), full[1])

    def to_python(self, value: Any, spec: ParamSpec | None) -> Any:
        """A result as its Python form, by its declared type ``spec`` (tuples field by field)."""
        if spec is None:
            return value
        if spec.kind == "tuple" and spec.fields is not None and isinstance(value, tuple):
            return tuple(self.to_python(v, f) for v, f in zip(value, spec.fields))
        if spec.kind == "adt" and spec.adt in self._types and isinstance(value, ADT):
            return self._adt_to_python(value, spec.adt)
        return value

    def _adt_to_python(self, value: ADT, adt: str) -> Any:
        form, empty, _full, inner = self._types[adt]
        if form == "list":
            out = []
            while value.tag != empty[0]:  # Cons(head, tail) ... Nil, walked without recursion
                out.append(value.fields[0])
                value = value.fields[1]
            return out
        if value.tag == empty[0]:
            return None
        field = value.fields[0]
        return self._adt_to_python(field, inner) if inner and isinstance(field, ADT) else field

    def has_results(self, fn: VMFunction) -> bool:
        """Whether a result of ``fn`` (as its result type declares it) has a Python form."""
        stack = [fn.result] if fn.result is not None else []
        while stack:
            spec = stack.pop()
            if spec.kind == "adt" and spec.adt in self._types:
                return True
            stack.extend(spec.fields or ())
        return False


def _form(info: ADTInfo) -> tuple[str, tuple[int, str], tuple[int, str], str | None]:
    form, _, inner = (info.python or "").partition(":")
    arity = 2 if form == "list" else 1
    empty = [(tag, name) for name, tag, n in info.constructors if n == 0]
    full = [(tag, name) for name, tag, n in info.constructors if n == arity]
    if form not in ("list", "optional") or len(info.constructors) != 2 or not empty or not full:
        raise ExecutableFormatError(
            f"data type {info.name}: Python form {info.python!r} does not fit its constructors "
            f"{[c[0] for c in info.constructors]}"
        )
    return form, empty[0], full[0], inner or None
