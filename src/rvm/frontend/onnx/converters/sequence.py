"""ONNX sequences: SequenceConstruct/Empty/Insert/Erase/At/Length, ConcatFromSequence,
SplitToSequence and SequenceMap.

An ONNX sequence's length is a run-time value in general (a graph input, or grown in a Loop),
so a sequence is an rvm *list*: a value of the algebraic data type ``Sequence_<dtype>``, one
per element dtype, declared in the module when first needed::

    Sequence_float32 = Nil | Cons(head: T[?, float32], tail: Sequence_float32)

Elements are tensors of unknown shape (ONNX lets a sequence's tensors differ in shape). The
operations are small local recursive functions emitted where they are used: ``length`` is
tail-recursive (constant stack); ``at`` walks to the position, ``insert`` and ``erase``
rebuild the list up to it. Sequences are short in practice, so walking is cheap. A position
outside the list matches no clause, which the VM reports as an error. Graph inputs and outputs
of sequence type are these lists, declared with the Python form ``"list"``
(``IRModule.attrs["python_forms"]``): the VM takes and returns them as Python lists, as ONNX
Runtime does (`rvm.runtime.entry`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rvm import op
from rvm.frontend.onnx.context import NodeContext, Scope
from rvm.frontend.onnx.converters.subgraph import as_scalar, block, convert_graph, tail_loop
from rvm.frontend.onnx.registry import converter
from rvm.frontend.onnx.weights import np_dtype
from rvm.ir import (
    ADTType,
    Call,
    Clause,
    Constructor,
    Expr,
    Function,
    FuncType,
    If,
    Match,
    PatternConstructor,
    PatternVar,
    PatternWildcard,
    TensorType,
    Var,
    const,
    infer_type,
)
from rvm.ir.types import Type

_INT64 = TensorType((), "int64")
_PREFIX = "Sequence_"


def sequence_type(dtype: str) -> ADTType:
    """The IR type of an ONNX sequence of ``dtype`` tensors."""
    return ADTType(_PREFIX + dtype)


def element_type(dtype: str) -> TensorType:
    return TensorType(None, dtype)


def _dtype(ctx: NodeContext, seq: Expr) -> str:
    ty = infer_type(seq)
    if not isinstance(ty, ADTType) or not ty.name.startswith(_PREFIX):
        ctx.fail(f"expects a sequence, got {ty}")
    return ty.name[len(_PREFIX) :]


def constructors(importer: Any, dtype: str) -> tuple[Constructor, Constructor]:
    """Nil and Cons of ``dtype`` sequences, declared in the module on first use."""
    adt = importer.declare_adt(
        _PREFIX + dtype,
        [("Nil", []), ("Cons", [element_type(dtype), sequence_type(dtype)])],
        python="list",  # a Python list at the VM's boundary, as ONNX Runtime takes and gives
    )
    return adt.constructors[0], adt.constructors[1]


def build_list(ctx: NodeContext, dtype: str, items: list[Expr]) -> Expr:
    """The sequence of ``items`` (tensors of ``dtype``)."""
    nil, cons = constructors(ctx.importer, dtype)
    out = ctx.emit(Call(nil, ()))
    for item in reversed(items):
        out = ctx.emitter.builder.emit(Call(cons, (item, out)))
    return out


# -- the list functions ------------------------------------------------------------------------
def _function(
    ctx: NodeContext, hint: str, params: list[Type], ret: Type, body: Callable[..., Expr]
) -> Var:
    """A local recursive function ``body(self, *params)``, bound in the current scope."""
    names = ctx.importer.names
    args = [Var(names(f"{hint}_arg"), t) for t in params]
    fvar = Var(names(hint), FuncType(tuple(params), ret))
    func = Function(tuple(args), block(ctx, lambda: body(fvar, *args)), ret)
    ctx.emitter.builder.bind(fvar, func)
    return fvar


def _on_cons(
    ctx: NodeContext, dtype: str, xs: Expr, then: Callable[[Var, Var], Expr], nil: Expr | None
) -> Expr:
    """``match xs: Cons(h, t) -> then(h, t) | Nil -> nil`` (no Nil clause when ``nil`` is None:
    matching Nil then fails at run time)."""
    nil_c, cons = constructors(ctx.importer, dtype)
    names = ctx.importer.names
    h, t = Var(names("head"), element_type(dtype)), Var(names("tail"), sequence_type(dtype))
    pattern = PatternConstructor(cons, (PatternVar(h), PatternVar(t)))
    clauses = [Clause(pattern, block(ctx, lambda: then(h, t)))]
    if nil is not None:
        clauses.append(Clause(PatternConstructor(nil_c, ()), block(ctx, lambda: nil)))
    return ctx.emitter.builder.emit(Match(xs, tuple(clauses)))


def _is_zero(ctx: NodeContext, i: Expr) -> Expr:
    return ctx.emit(op.equal(i, const(0, "int64")))


def _minus_one(ctx: NodeContext, i: Expr) -> Expr:
    return ctx.emit(op.subtract(i, const(1, "int64")))


def length(ctx: NodeContext, xs: Expr) -> Expr:
    """The number of elements of ``xs`` (an int64 scalar)."""
    dtype = _dtype(ctx, xs)

    def body(self: Var, ys: Var, n: Var) -> Expr:
        def step(_h: Var, t: Var) -> Expr:
            return ctx.emitter.builder.emit(Call(self, (t, ctx.emit(op.add(n, const(1, "int64"))))))

        return _on_cons(ctx, dtype, ys, step, n)

    fn = _function(ctx, "seq_length", [sequence_type(dtype), _INT64], _INT64, body)
    return ctx.emitter.builder.emit(Call(fn, (xs, const(0, "int64"))))


def _position(ctx: NodeContext, xs: Expr, i: Expr) -> Expr:
    """Position input ``i`` as an int64 scalar; negative counts from the end."""
    i = as_scalar(ctx, i, "int64")
    size = length(ctx, xs)
    return ctx.emit(op.where(op.less(i, const(0, "int64")), op.add(i, size), i))


def at(ctx: NodeContext, xs: Expr, i: Expr) -> Expr:
    """Element ``i`` (an int64 scalar, 0 <= i < length) of ``xs``."""
    dtype = _dtype(ctx, xs)

    def body(self: Var, ys: Var, k: Var) -> Expr:
        def step(h: Var, t: Var) -> Expr:
            later = block(
                ctx, lambda: ctx.emitter.builder.emit(Call(self, (t, _minus_one(ctx, k))))
            )
            return ctx.emitter.builder.emit(If(_is_zero(ctx, k), block(ctx, lambda: h), later))

        return _on_cons(ctx, dtype, ys, step, None)

    fn = _function(ctx, "seq_at", [sequence_type(dtype), _INT64], element_type(dtype), body)
    return ctx.emitter.builder.emit(Call(fn, (xs, i)))


def _rebuild(ctx: NodeContext, xs: Expr, i: Expr, hint: str, here: Callable[[Var], Expr]) -> Expr:
    """``xs`` with its tail from position ``i`` replaced by ``here(tail)``."""
    dtype = _dtype(ctx, xs)
    _nil, cons = constructors(ctx.importer, dtype)
    seq_t = sequence_type(dtype)

    def body(self: Var, ys: Var, k: Var) -> Expr:
        def step(h: Var, t: Var) -> Expr:
            rest = ctx.emitter.builder.emit(Call(self, (t, _minus_one(ctx, k))))
            return ctx.emitter.builder.emit(Call(cons, (h, rest)))

        later = block(ctx, lambda: _on_cons(ctx, dtype, ys, step, None))
        return ctx.emitter.builder.emit(If(_is_zero(ctx, k), block(ctx, lambda: here(ys)), later))

    fn = _function(ctx, hint, [seq_t, _INT64], seq_t, body)
    return ctx.emitter.builder.emit(Call(fn, (xs, i)))


def insert(ctx: NodeContext, xs: Expr, i: Expr, value: Expr) -> Expr:
    """``xs`` with ``value`` inserted before position ``i`` (0 <= i <= length)."""
    _nil, cons = constructors(ctx.importer, _dtype(ctx, xs))
    return _rebuild(
        ctx, xs, i, "seq_insert", lambda ys: ctx.emitter.builder.emit(Call(cons, (value, ys)))
    )


def erase(ctx: NodeContext, xs: Expr, i: Expr) -> Expr:
    """``xs`` without its element ``i`` (0 <= i < length)."""
    dtype = _dtype(ctx, xs)
    return _rebuild(ctx, xs, i, "seq_erase", lambda ys: _on_cons(ctx, dtype, ys, _tail, None))


def _tail(_h: Var, t: Var) -> Expr:
    return t


# -- converters ---------------------------------------------------------------------------------
def _check_dtype(ctx: NodeContext, dtype: str, value: Expr) -> None:
    got = ctx.type(value).dtype
    if got != dtype:
        ctx.fail(f"a sequence of {dtype} tensors cannot hold a {got} tensor")


@converter("SequenceConstruct", since=11)
def _sequence_construct(ctx: NodeContext) -> Expr:
    items = [ctx.input(k) for k in range(len(ctx.inputs))]
    dtype = ctx.type(items[0]).dtype
    for item in items[1:]:
        _check_dtype(ctx, dtype, item)
    return build_list(ctx, dtype, items)


@converter("SequenceEmpty", since=11)
def _sequence_empty(ctx: NodeContext) -> Expr:
    dtype = np_dtype(ctx.attr("dtype", 1), f"node {ctx.name!r}: the dtype attribute")
    return build_list(ctx, dtype, [])


@converter("SequenceLength", since=11)
def _sequence_length(ctx: NodeContext) -> Expr:
    return length(ctx, ctx.input(0))


@converter("SequenceAt", since=11)
def _sequence_at(ctx: NodeContext) -> Expr:
    xs = ctx.input(0)
    return at(ctx, xs, _position(ctx, xs, ctx.input(1)))


@converter("SequenceInsert", since=11)
def _sequence_insert(ctx: NodeContext) -> Expr:
    xs, value = ctx.input(0), ctx.input(1)
    _check_dtype(ctx, _dtype(ctx, xs), value)
    pos = ctx.optional(2)
    i = length(ctx, xs) if pos is None else _position(ctx, xs, pos)
    return insert(ctx, xs, i, value)


@converter("SequenceErase", since=11)
def _sequence_erase(ctx: NodeContext) -> Expr:
    xs = ctx.input(0)
    pos = ctx.optional(1)
    i = _minus_one(ctx, length(ctx, xs)) if pos is None else _position(ctx, xs, pos)
    return erase(ctx, xs, i)


@converter("ConcatFromSequence", since=11)
def _concat_from_sequence(ctx: NodeContext) -> Expr:
    xs = ctx.input(0)
    dtype = _dtype(ctx, xs)
    axis, new_axis = ctx.attr("axis"), bool(ctx.attr("new_axis", 0))
    nil, _cons = constructors(ctx.importer, dtype)
    builder = ctx.emitter.builder

    def prepare(h: Expr) -> Expr:
        return ctx.emit(op.expand_dims(h, axis)) if new_axis else h

    def body(self: Var, ys: Var) -> Expr:
        def step(h: Var, t: Var) -> Expr:
            def more() -> Expr:
                rest = builder.emit(Call(self, (t,)))
                return ctx.emit(op.concat([prepare(h), rest], axis=axis))

            last = Clause(PatternConstructor(nil, ()), block(ctx, lambda: prepare(h)))
            return builder.emit(Match(t, (last, Clause(PatternWildcard(), block(ctx, more)))))

        return _on_cons(ctx, dtype, ys, step, None)

    fn = _function(ctx, "seq_concat", [sequence_type(dtype)], element_type(dtype), body)
    return builder.emit(Call(fn, (xs,)))


@converter("SplitToSequence", since=(11, 24))
def _split_to_sequence(ctx: NodeContext) -> Expr:
    x = ctx.input(0)
    ty = ctx.type(x)
    shape = ctx.shape(x)
    axis = ctx.attr("axis", 0) % len(shape)
    size = shape[axis]
    split = ctx.ints(1, "split")
    if not isinstance(size, int):
        ctx.fail(f"needs a static size along axis {axis}, got shape {tuple(shape)}")
    if split is None:
        sizes = [1] * size
    elif len(split) == 1 and ctx.type(ctx.input(1)).shape == ():
        sizes = [split[0]] * (size // split[0]) + ([size % split[0]] if size % split[0] else [])
    else:
        sizes = split
    if sum(sizes) != size:
        ctx.fail(f"split sizes {sizes} do not add up to {size}, the size of axis {axis}")
    starts = [sum(sizes[:k]) for k in range(len(sizes))]
    parts = [
        ctx.emit(op.strided_slice(x, [s], [s + n], [1], [axis])) for s, n in zip(starts, sizes)
    ]
    if split is None and not ctx.attr("keepdims", 1):
        parts = [ctx.emit(op.squeeze(p, axis)) for p in parts]
    return build_list(ctx, ty.dtype, parts)


@converter("SequenceMap", since=17)
def _sequence_map(ctx: NodeContext) -> list[Expr]:
    body = ctx.attr("body")
    args = [ctx.input(k) for k in range(len(ctx.inputs))]
    is_seq = [isinstance(infer_type(a), ADTType) for a in args]
    if not is_seq[0]:
        ctx.fail("the first input must be a sequence")
    out_dtypes = [
        np_dtype(o.type.tensor_type.elem_type, f"output {o.name!r} of the body")
        for o in body.output
    ]
    names = [i.name for i in body.input]
    outs = [build_list(ctx, d, []) for d in out_dtypes]

    def step(i: Expr, _cond: Expr | None, carried: list[Expr]):
        scope = Scope(ctx.scope)
        for name, a, s in zip(names, args, is_seq):
            scope.bind(name, at(ctx, a, i) if s else a)
        results = convert_graph(ctx, body, scope)
        grown = [insert(ctx, c, length(ctx, c), r) for c, r in zip(carried, results)]
        return None, grown, []

    return tail_loop(ctx, length(ctx, args[0]), None, outs, 0, step)
