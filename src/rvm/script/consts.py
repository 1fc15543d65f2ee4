"""Constants in rvm script: exact literals for small ones, base64 for large ones.

A constant prints as ``rvm.const(value, "dtype")`` with ``value`` a Python literal (nested lists
for arrays) when it has at most `MAX_LITERAL` elements and the literal reproduces its bytes
exactly; otherwise as ``rvm.script.const_b64("...", "dtype", shape)``, the raw little-endian
bytes in base64. Floats use the shortest decimal that reads back to the same value in the
constant's dtype; inf and nan print as ``float("inf")`` and ``float("nan")``.
"""

from __future__ import annotations

import ast
import base64
import math
from collections.abc import Sequence

import numpy as np

from rvm.dtypes import numpy_dtype
from rvm.errors import IRError
from rvm.ir.expr import Constant
from rvm.ir.types import check_dtype

MAX_LITERAL = 32


def const_b64(data: str, dtype: str, shape: Sequence[int]) -> Constant:
    """The constant whose raw little-endian bytes are ``data`` (base64), of ``dtype`` and shape."""
    raw = base64.b64decode(data.encode("ascii"))
    dt = numpy_dtype(check_dtype(dtype)).newbyteorder("<")
    arr = np.frombuffer(raw, dtype=dt).astype(dt.newbyteorder("="))
    return Constant(arr.reshape(tuple(shape)))


def _float_text(x: float, dtype: str) -> tuple[str, float]:
    """The shortest text for ``x`` that reads back to the same ``dtype`` value, and that value."""
    if math.isnan(x):
        return 'float("nan")', float("nan")
    if math.isinf(x):
        return ('float("inf")', x) if x > 0 else ('float("-inf")', x)
    short = str(np.dtype(dtype).type(x))
    try:
        value = float(short)
    except ValueError:
        value = math.nan
    if np.dtype(dtype).type(value) == np.dtype(dtype).type(x):
        return repr(value), value
    return repr(x), x


def _literal(values: object, dtype: str) -> tuple[str, object]:
    """Text of a nested list of Python scalars, and the values it reads back as."""
    if isinstance(values, list):
        parts = [_literal(v, dtype) for v in values]
        return "[" + ", ".join(p[0] for p in parts) + "]", [p[1] for p in parts]
    if isinstance(values, float):
        return _float_text(values, dtype)
    return repr(values), values


def const_text(c: Constant) -> str:
    """The script spelling of constant ``c``."""
    data = c.data
    dtype = data.dtype.name
    if data.size <= MAX_LITERAL and (data.size > 0 or data.ndim == 1):
        text, values = _literal(data.tolist(), dtype)
        back = np.asarray(values, dtype=dtype)
        if back.shape == data.shape and back.tobytes() == data.tobytes():
            return f'rvm.const({text}, "{dtype}")'
    raw = np.ascontiguousarray(data).astype(data.dtype.newbyteorder("<")).tobytes()
    b64 = base64.b64encode(raw).decode("ascii")
    shape = f"({data.shape[0]},)" if data.ndim == 1 else str(tuple(data.shape))
    return f'rvm.script.const_b64("{b64}", "{dtype}", {shape})'


def literal_value(node: ast.expr) -> object:
    """Evaluate a literal written in script: numbers, bools, None, strings, lists, tuples,
    unary minus, and ``float("inf")``-style calls."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple)):
        items = [literal_value(e) for e in node.elts]
        return items if isinstance(node, ast.List) else tuple(items)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = literal_value(node.operand)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return -v if isinstance(node.op, ast.USub) else v
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("float", "int", "bool")
        and len(node.args) == 1
        and not node.keywords
    ):
        arg = literal_value(node.args[0])
        if isinstance(arg, (str, int, float)):
            return {"float": float, "int": int, "bool": bool}[node.func.id](arg)
    raise IRError(f"expected a literal value, got {ast.unparse(node)}")
