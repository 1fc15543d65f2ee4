"""A decode step over a preallocated key/value cache: ``main`` with its cache concats rewritten.

A with-past decoder's ``main`` concatenates each layer's ``past`` with the step's new key and
value (``present = concat(past, new, axis=2)``), so a loop that feeds ``present`` back as the
next ``past`` copies the whole cache at every token. `static_step` rewrites a copy of ``main``
(the function ``generate_step``) for a cache preallocated to its full length ``capacity``:

- each ``past_key_values.N.key/value`` parameter becomes ``cache_N_key/value`` (batch, heads,
  capacity, head_dim), and a parameter ``write_at`` (0-d int64) says where the step's tokens go;
- ``concat(past, new, axis=2)`` becomes ``vm.builtin.write_slice(cache, new, write_at, 2)``:
  the new keys written in place, the value the whole buffer;
- ``shape_of(past)`` becomes the buffer's shape with one token less at axis 2: to the model
  the past is ``capacity - 1`` tokens and the step's one token the last, so every shape it
  computes agrees with the buffer.

The step is called with one token, its position, and an attention mask over the whole buffer
(1 for the tokens written so far and this one, 0 for the rest): the mask hides the slots not
yet written, and with one query the causal mask hides nothing. The cost of a step is then the
same at every length (attention reads the whole buffer, masked), and nothing is copied. This
is the "static cache" of Hugging Face's generation. It applies when ``main`` has an
``attention_mask`` and uses each past only through ``shape_of`` and one such concat (the
exported layouts of optimum do); otherwise `static_step` returns None and `greedy` feeds the
presents back as before.
"""

from __future__ import annotations

from rvm import op
from rvm.generation.layout import DecoderLayout
from rvm.ir import dims
from rvm.ir import expr as E
from rvm.ir.analysis import free_vars
from rvm.ir.functor import ExprMutator
from rvm.ir.module import IRModule
from rvm.ir.types import TensorType, scalar, tensor

__all__ = ["CAPACITY", "STEP", "static_step"]

STEP = "generate_step"
CAPACITY = "capacity"  # the symbolic length of the cache buffers
_SHAPE_OF, _CONCAT = "shape_of", "concat"


def static_step(mod: IRModule, layout: DecoderLayout) -> E.Function | None:
    """``main`` rewritten for one-token steps over preallocated caches (module docstring):
    parameters ``main``'s with each past replaced by its buffer, then ``write_at``; results
    ``main``'s with each present the (updated) buffer. None when ``main`` does not fit."""
    main = mod["main"]
    if "attention_mask" not in layout.roles or not isinstance(main.body, E.SeqExpr):
        return None
    past = {p: role for p, role in zip(main.params, layout.roles) if isinstance(role, tuple)}
    sites = _sites(main.body, past)
    if sites is None:
        return None
    return _Rewrite(main, layout, past, sites).function()


def _past_dims(
    main: E.Function, layout: DecoderLayout, past: dict[E.Var, object]
) -> dict[str, object]:
    """The past's length in the buffer's terms: ``main`` sees a past of ``capacity - seq``
    tokens (`_Rewrite._site`), so its attention mask of ``past + seq`` is the buffer's
    ``capacity``; what the import computed from the past's length (a reshape to
    ``batch*past + batch*seq``) then names only dims the step's parameters bind."""
    names = set()
    for _, layer, kind in past.values():  # type: ignore[misc]
        shape = layout.caches[layer][kind].shape
        if shape is not None and dims.is_symbol(shape[2]):
            names.add(shape[2])
    mask = next(p for p, role in zip(main.params, layout.roles) if role == "attention_mask")
    total = mask.annotation.shape[1] if isinstance(mask.annotation, TensorType) else None
    if len(names) != 1 or not isinstance(total, dims.DimExpr):
        return {}
    (name,) = names
    rest = dims.sub(total, name)  # the step's sequence length
    if name in dims.symbols(rest):
        return {}
    return {name: dims.sub(CAPACITY, rest)}


Site = tuple[E.Var, E.Expr | None]  # the past parameter; the new keys a concat appends


def _sites(body: E.SeqExpr, past: dict[E.Var, object]) -> dict[E.Var, Site] | None:
    """The bindings to rewrite, by variable: ``shape_of(p)`` and ``concat((p, new), axis=2)``
    of a past parameter ``p``; None when a past is used otherwise, or a past is not
    concatenated exactly once."""
    tuples: dict[E.Var, E.Tuple] = {}  # (p, new) tuples
    sites: dict[E.Var, Site] = {}
    concats: dict[E.Var, int] = dict.fromkeys(past, 0)
    for b in body.bindings:
        v = b.value
        if _is_pair(v, past):
            tuples[b.var] = v  # type: ignore[assignment]
            continue
        if isinstance(v, E.Call) and isinstance(v.callee, E.Op) and v.args:
            if v.callee.name == _SHAPE_OF and v.args[0] in past:
                sites[b.var] = (v.args[0], None)  # type: ignore[assignment]
                continue
            pieces = tuples.get(v.args[0], v.args[0])  # type: ignore[call-overload]
            if (
                v.callee.name == _CONCAT
                and _is_pair(pieces, past)
                and v.attrs.get("axis") in (2, -2)
            ):
                p, new = pieces.fields  # type: ignore[union-attr]
                sites[b.var] = (p, new)  # type: ignore[assignment]
                concats[p] += 1  # type: ignore[index]
                continue
        if any(u in past or u in tuples for u in free_vars(v)):
            return None
    if any(n != 1 for n in concats.values()) or any(u in past for u in free_vars(body.body)):
        return None
    return sites


def _is_pair(value: E.Expr, past: dict[E.Var, object]) -> bool:
    """``(p, new)``: a past parameter and something else."""
    return (
        isinstance(value, E.Tuple)
        and len(value.fields) == 2
        and value.fields[0] in past
        and not any(u in past for u in free_vars(value.fields[1]))
    )


class _Rewrite(ExprMutator):
    """A copy of ``main`` with fresh variables and the cache sites rewritten."""

    def __init__(
        self,
        main: E.Function,
        layout: DecoderLayout,
        past: dict[E.Var, object],
        sites: dict[E.Var, Site],
    ) -> None:
        super().__init__()
        self.main = main
        self.params = set(main.params)
        self.sites = sites
        bindings = main.body.bindings  # type: ignore[attr-defined]
        self.pairs = {b.var for b in bindings if _is_pair(b.value, past)}
        self.buffers: dict[E.Var, E.Var] = {}
        for p, (_, layer, kind) in past.items():  # type: ignore[misc]
            ty = layout.caches[layer][kind]
            buf_type = tensor((ty.shape[0], ty.shape[1], CAPACITY, ty.shape[3]), ty.dtype)
            self.buffers[p] = E.Var(f"cache_{layer}_{('key', 'value')[kind]}", buf_type)
        self.write_at = E.Var("write_at", scalar("int64"))
        self.dims = _past_dims(main, layout, past)

    def function(self) -> E.Function:
        params = [
            self.buffers[p] if p in self.buffers else self.visit_var_def(p)
            for p in self.main.params
        ]
        body = self.visit(self.main.body)
        return E.Function((*params, self.write_at), body)

    def visit_var_def(self, v: E.Var) -> E.Var:
        if v in self.var_map:
            return self.var_map[v]  # type: ignore[return-value]
        ann = v.annotation if v in self.params else None
        if isinstance(ann, TensorType) and ann.shape is not None:
            ann = tensor(tuple(self._dim(d) for d in ann.shape), ann.dtype)
        fresh = E.Var(v.name, ann)
        self.var_map[v] = fresh
        return fresh

    def visit_call(self, c: E.Call) -> E.Expr:
        """A call whose attributes name the past's length (a reshape to ``batch*(past +
        seq)``) names it in the buffer's terms."""
        out = super().visit_call(c)
        attrs = {k: self._attr(k, v) for k, v in out.attrs.items()}  # type: ignore[attr-defined]
        if all(attrs[k] is v for k, v in out.attrs.items()):  # type: ignore[attr-defined]
            return out
        return E.Call(out.callee, out.args, attrs)  # type: ignore[attr-defined]

    def _attr(self, key: str, value: object) -> object:
        if key == "dtype":
            return value
        if isinstance(value, tuple) and any(isinstance(d, str) for d in value):
            dims = tuple(self._dim(d) for d in value)
            return value if dims == value else dims
        return self._dim(value) if isinstance(value, str) else value

    def _dim(self, d: object) -> object:
        """``d`` with the past's length in the buffer's terms (`_past_dims`)."""
        if not isinstance(d, str) or not self.dims or not dims.symbols(d) & self.dims.keys():
            return d
        return dims.substitute(d, {**{n: n for n in dims.symbols(d)}, **self.dims})

    def visit_block(self, block: E.BindingBlock) -> list[E.VarBinding]:
        out = []
        for b in block.bindings:
            if b.var in self.sites:
                out.append(E.VarBinding(self.visit_var_def(b.var), self._site(b)))
            elif b.var not in self.pairs:  # a concat's (past, new) goes with the concat
                out.extend(self.visit_binding(b))
        return out

    def _site(self, b: E.VarBinding) -> E.Expr:
        p, new = self.sites[b.var]
        buf = self.buffers[p]
        if new is None:  # shape_of(past)
            return op.subtract(op.shape_of(buf), op.const([0, 0, 1, 0], "int64"))
        ty: TensorType = buf.annotation  # type: ignore[assignment]
        return op.call_packed(
            "vm.builtin.write_slice",
            buf,
            self.visit(new),
            self.write_at,
            op.const(2, "int64"),
            out=ty,
        )
