"""The with-past layout of a decoder's ``main``, read from its parameters and result type.

optimum's ``text-generation-with-past`` export (and the hubs' ONNX decoders) has the entry
``main(input_ids, [attention_mask], [position_ids], past_key_values.N.key/value...)`` in any
order, returning ``(logits, present.N.key, present.N.value, ...)``. The importer names a
parameter after its ONNX input with ``.`` spelled ``_``; both spellings are accepted.
`decoder_layout(mod)` finds each parameter's place, checks the types, and reads the model's
number of positions from the table its ``position_ids`` index, when it has one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rvm.errors import IRError
from rvm.ir import expr as E
from rvm.ir.infer import infer_type
from rvm.ir.module import IRModule
from rvm.ir.types import FLOAT_DTYPES, TensorType, TupleType

_PAST = re.compile(r"past_key_values[._](\d+)[._](key|value)$")
EXPECTED = (
    "main(input_ids: int64 (batch, seq), [attention_mask: int64 (batch, past + seq)], "
    "[position_ids: int64 (batch, seq)], past_key_values.N.key/value: float (batch, heads, "
    "past, head_dim)...) -> (logits (batch, seq, vocab), present.N.key/value...)"
)


@dataclass(frozen=True)
class DecoderLayout:
    """Where each input of a with-past decoder's ``main`` is, and the cache's types.

    Attributes:
        params: The parameter names of ``main`` in order.
        roles: Per parameter: ``"input_ids"``, ``"attention_mask"``, ``"position_ids"`` or
            ``("past", layer, 0 for key | 1 for value)``.
        caches: Per layer, the (key, value) types of its past.
        logits: The type of main's first result.
        positions: The number of positions of the model's position table, None if unknown.
    """

    params: tuple[str, ...]
    roles: tuple[object, ...]
    caches: tuple[tuple[TensorType, TensorType], ...]
    logits: TensorType
    positions: int | None

    @property
    def layers(self) -> int:
        return len(self.caches)

    def fixed_length(self, mod: IRModule) -> str | None:
        """The first parameter of ``mod["main"]`` whose sequence or past length is a fixed
        number (a model imported with ``shape_dict``), as a message; None if there is none."""
        for p, role in zip(mod["main"].params, self.roles):
            axis = 1 if role == "input_ids" else 2 if isinstance(role, tuple) else None
            if axis is not None and isinstance(p.annotation.shape[axis], int):
                return f"main's parameter {p.name!r} has the fixed shape {p.annotation.shape}"
        return None


def _fail(what: str) -> IRError:
    return IRError(
        f"greedy: the module is not a decoder in the with-past layout: {what}; expected {EXPECTED}"
    )


def decoder_layout(mod: IRModule) -> DecoderLayout:
    """The layout of ``mod["main"]``.

    Raises:
        IRError: ``mod`` has no ``main``, or ``main``'s parameters or results are not the
            with-past layout (the message names what was expected and what came).
    """
    if "main" not in mod.functions:
        raise _fail(f"it has no function 'main' (it has {', '.join(mod.functions) or 'none'})")
    func = mod["main"]
    names = tuple(p.name for p in func.params)
    roles: list[object] = []
    past: dict[tuple[int, int], TensorType] = {}
    for p in func.params:
        ty = p.annotation
        match = _PAST.match(p.name)
        if p.name in ("input_ids", "attention_mask", "position_ids"):
            _int_input(p.name, ty)
            roles.append(p.name)
        elif match:
            layer, kind = int(match.group(1)), 0 if match.group(2) == "key" else 1
            past[(layer, kind)] = _cache_type(p.name, ty)
            roles.append(("past", layer, kind))
        else:
            raise _fail(
                f"main has a parameter {p.name!r} ({_show(ty)}) outside the layout; "
                f"its parameters are {', '.join(names)}"
            )
    if "input_ids" not in roles:
        raise _fail(f"main has no parameter 'input_ids'; its parameters are {', '.join(names)}")
    layers = 1 + max((k[0] for k in past), default=-1)
    missing = [
        f"past_key_values.{i}.{n}"
        for i in range(layers)
        for j, n in enumerate(("key", "value"))
        if (i, j) not in past
    ]
    if not past or missing:
        what = ", ".join(missing) if missing else "any past_key_values.N.key/value"
        raise _fail(f"main has no parameter {what}; its parameters are {', '.join(names)}")
    logits = _logits(func, layers)
    caches = tuple((past[(i, 0)], past[(i, 1)]) for i in range(layers))
    return DecoderLayout(names, tuple(roles), caches, logits, _positions(func))


def _show(ty: object) -> str:
    if isinstance(ty, TensorType):
        return f"{ty.dtype} {ty.shape}"
    return "untyped" if ty is None else type(ty).__name__


def _int_input(name: str, ty: object) -> None:
    if not (
        isinstance(ty, TensorType)
        and ty.dtype == "int64"
        and ty.shape is not None
        and len(ty.shape) == 2
    ):
        raise _fail(f"main's parameter {name!r} is {_show(ty)}, expected a 2-d int64 tensor")


def _cache_type(name: str, ty: object) -> TensorType:
    ok = isinstance(ty, TensorType) and ty.dtype in FLOAT_DTYPES and ty.shape is not None
    if not ok or len(ty.shape) != 4 or not all(isinstance(d, int) for d in ty.shape[1::2]):
        raise _fail(
            f"main's parameter {name!r} is {_show(ty)}, expected a float tensor "
            "(batch, heads, past, head_dim) with fixed heads and head_dim"
        )
    return ty


def _logits(func: E.Function, layers: int) -> TensorType:
    """The logits' type, after checking that ``main`` returns logits and the presents."""
    ret = infer_type(func.body)
    fields = ret.fields if isinstance(ret, TupleType) else (ret,)
    if len(fields) != 1 + 2 * layers or not all(isinstance(f, TensorType) for f in fields):
        raise _fail(
            f"main returns {len(fields)} values, expected logits and {2 * layers} "
            f"present.N.key/value for its {layers} layers"
        )
    logits = fields[0]
    if logits.shape is not None and len(logits.shape) != 3:
        raise _fail(f"main's first result is {_show(logits)}, expected logits (batch, seq, vocab)")
    return logits


def _positions(func: E.Function) -> int | None:
    """The rows of the constant table that ``position_ids`` index (take or gather on it
    directly, or through casts), None when there is no such table."""
    pos = next((p for p in func.params if p.name == "position_ids"), None)
    body = func.body
    if pos is None or not isinstance(body, E.SeqExpr):
        return None
    derived: set[E.Var] = {pos}
    for block in body.blocks:
        for b in block.bindings:
            v = b.value
            if not isinstance(v, E.Call) or not isinstance(v.callee, E.Op):
                continue
            name = v.callee.name
            if name == "cast" and v.args[0] in derived:
                derived.add(b.var)
            elif name in ("take", "gather") and len(v.args) > 1 and v.args[1] in derived:
                table = v.args[0]
                if isinstance(table, E.Constant) and table.data.ndim >= 1:
                    axis = v.attrs.get("axis") or 0
                    return int(table.data.shape[axis])
    return None
