"""Greedy decoding as an rvm function: `greedy(mod)` adds ``generate`` beside ``main``.

``generate(input_ids, max_new_tokens)`` runs the whole decoding loop inside one VM call:

1. checks its inputs (``max_new_tokens >= 0``, a non-empty prompt that, with the new tokens,
   fits the model's positions) with `rvm.op.check`;
2. the prompt pass: ``main`` on the prompt with an empty cache (past length 0), an
   all-ones attention mask and positions 0..seq-1;
3. the loop, a local function that calls itself in tail position (the VM reuses its frame):
   argmax of the last position's logits, the token appended to the output, then, while
   tokens remain to be made (and, with ``eos_token_id``, some row has not produced it), one
   decode step of ``main`` with the new token, the ``present`` tensors of the previous call
   as its ``past``, the mask of the whole sequence and the token's position.

The cache is preallocated and written in place: when ``main`` fits (`static_step`: it has an
``attention_mask`` and uses its pasts only through ``shape_of`` and the concat with the new
keys, as optimum's exports do), ``greedy`` also adds ``generate_step``, ``main`` rewritten to
write each step's keys and values into buffers of the final length ``seq + max_new_tokens``
(``vm.builtin.write_slice``) and to attend over the whole buffer under a mask hiding the slots
not yet written. The prompt pass runs ``main`` and copies its presents into the buffers once;
each decode step runs ``generate_step``: nothing is copied, and a step costs the same at every
length. Otherwise each step's ``present`` tensors are the next step's ``past``, as a Python
loop over ONNX Runtime passes them, and the model's own concat copies the cache every step.
"""

from __future__ import annotations

from rvm import op
from rvm.errors import IRError
from rvm.generation.layout import DecoderLayout, decoder_layout
from rvm.generation.static_cache import STEP, static_step
from rvm.ir import dims as D
from rvm.ir import expr as E
from rvm.ir.builder import Builder
from rvm.ir.module import IRModule
from rvm.ir.types import FuncType, Type, scalar, tensor

_LAST = 2**62  # strided_slice's end for "to the end of the axis"


def greedy(mod: IRModule, eos_token_id: int | None = None) -> IRModule:
    """``mod`` with a function ``generate`` beside its ``main`` (greedy decoding).

    Args:
        mod: A decoder in the with-past layout (`rvm.generation.layout.EXPECTED`): ``main``
            takes ``input_ids``, optional ``attention_mask`` and ``position_ids``, and
            ``past_key_values.N.key/value``, and returns the logits and
            ``present.N.key/value``.
        eos_token_id: When given, the loop stops once every row has produced this token,
            and rows that finished earlier are padded with it.

    Returns:
        A new module: ``generate(input_ids: int64 (batch, seq), max_new_tokens: int64 0-d)
        -> int64 (batch, seq + steps)``, steps being ``max_new_tokens`` or fewer when every
        row reached ``eos_token_id``. It raises ``ValueError`` at run time for a negative
        ``max_new_tokens``, an empty prompt, or a prompt that with the new tokens needs more
        positions than the model's position table has.

    Raises:
        IRError: ``mod`` is not a decoder in the with-past layout, its sequence or past
            length is fixed, it already has a function ``generate``, or ``eos_token_id`` is
            not an int >= 0.
    """
    layout = decoder_layout(mod)
    fixed = layout.fixed_length(mod)
    if fixed is not None:
        raise IRError(
            f"greedy: {fixed} (imported with shape_dict?); generate calls main on the prompt, "
            "then one token at a time with a growing past, so the sequence and past lengths "
            "must stay symbolic"
        )
    for name in ("generate", STEP):
        if name in mod.functions:
            raise IRError(f"greedy: the module already has a function {name!r}")
    if eos_token_id is not None and (
        isinstance(eos_token_id, bool) or not isinstance(eos_token_id, int) or eos_token_id < 0
    ):
        raise IRError(f"greedy: eos_token_id must be an int >= 0 or None, got {eos_token_id!r}")
    step = static_step(mod, layout)
    bb = Builder(mod)
    if step is not None:
        bb.add_function(STEP, step)
    _Generate(bb, layout, eos_token_id, step is not None).build()
    return bb.get()


class _Generate:
    """Builds ``generate`` and its loop into ``bb``."""

    def __init__(self, bb: Builder, layout: DecoderLayout, eos: int | None, static: bool) -> None:
        self.bb = bb
        self.layout = layout
        self.eos = eos
        self.main = bb.global_var("main")
        self.step = bb.global_var(STEP) if static else None
        self.kv_types = [
            tensor(("batch", t.shape[1], None, t.shape[3]), t.dtype)
            for pair in layout.caches
            for t in pair
        ]
        vocab = layout.logits.shape[2] if layout.logits.shape is not None else None
        self.logits_type = tensor(("batch", None, vocab), layout.logits.dtype)

    def emit(self, value: E.Expr, name: str | None = None) -> E.Var:
        return self.bb.emit(value, name)

    def build(self) -> None:
        bb = self.bb
        ids = E.Var("input_ids", tensor(("batch", "seq"), "int64"))
        n = E.Var("max_new_tokens", scalar("int64"))
        # the prompt and the new tokens, which eos may make fewer than max_new_tokens:
        # ``steps`` is a size of the result's own (checked at run time to be >= 0)
        ret = tensor(("batch", D.add("seq", "steps")), "int64")
        with bb.function("generate", [ids, n], ret_type=ret):
            ids_c, n_c = self.checked(ids, n)
            bb.begin_scope()
            out = self.call_main(
                ids_c, self.empty_caches(), self.emit(op.ones(("batch", "seq"), "int64"))
            )
            loop = self.loop_function()
            fields = [self.emit(E.TupleGetItem(out, i)) for i in range(1 + len(self.kv_types))]
            if self.step is not None:
                fields[1:] = self.buffers(fields[1:], n_c)
            state = [ids_c, *fields]
            if self.eos is not None:
                state.append(self.emit(op.zeros(("batch",), "bool"), "finished"))
            result = self.emit(E.Call(loop, (*state, n_c)))
            run = bb.end_scope(result)
            bb.begin_scope()
            none = bb.end_scope(ids_c)
            bb.emit_output(
                self.emit(E.If(self.emit(op.greater(n_c, op.const(0, "int64"))), run, none))
            )

    def checked(self, ids: E.Var, n: E.Var) -> tuple[E.Var, E.Var]:
        """``ids`` and ``n`` behind the run-time checks of the inputs."""
        seq = self.emit(op.take(op.shape_of(ids), op.const(1, "int64"), axis=0), "seq_len")
        detail = self.emit(op.stack([seq, n]), "detail")
        zero = op.const(0, "int64")
        n = self.emit(
            op.check(
                n,
                op.greater_equal(n, zero),
                detail,
                "generate: max_new_tokens must be >= 0, got {1}",
            )
        )
        ids = self.emit(
            op.check(
                ids,
                op.greater(seq, zero),
                detail,
                "generate: the prompt is empty (input_ids has 0 tokens)",
            )
        )
        positions = self.layout.positions
        if positions is not None:
            limit = op.const(positions, "int64")
            ids = self.emit(
                op.check(
                    ids,
                    op.less_equal(seq, limit),
                    detail,
                    f"generate: the prompt has {{0}} tokens, more than the model's {positions} "
                    "positions",
                )
            )
            ids = self.emit(
                op.check(
                    ids,
                    op.less_equal(op.add(seq, n), limit),
                    detail,
                    f"generate: the prompt's {{0}} tokens and max_new_tokens={{1}} need more than "
                    f"the model's {positions} positions",
                )
            )
        return ids, n

    def empty_caches(self) -> list[E.Var]:
        return [
            self.emit(op.zeros(("batch", t.shape[1], 0, t.shape[3]), t.dtype))
            for pair in self.layout.caches
            for t in pair
        ]

    def buffers(self, presents: list[E.Var], n: E.Var) -> list[E.Var]:
        """Cache buffers of ``seq + n`` tokens: the prompt's ``presents``, then zeros (pure
        ops: ``generate`` keeps its native code; only ``generate_step`` writes in place)."""
        out = []
        keep = op.const([1, 1, 0, 1], "int64")
        grow = op.const([0, 0, 1, 0], "int64")
        for p, t in zip(presents, self.kv_types):
            shape = op.add(op.multiply(op.shape_of(p), keep), op.multiply(grow, n))
            dims = ("batch", t.shape[1], None, t.shape[3])
            zeros = self.emit(op.dynamic_full(shape, 0, t.dtype, dims=dims), "free")
            out.append(self.emit(op.concat([p, zeros], axis=2), "cache"))
        return out

    def call_main(
        self, ids: E.Expr, caches: list[E.Var], mask: E.Var, positions: E.Expr | None = None
    ) -> E.Var:
        """``main`` on ``ids`` (batch, s) after ``caches``; positions default to the last s
        of the mask's length."""
        if positions is None:
            positions = self.emit(op.subtract(op.cumsum(mask, axis=1), op.const(1, "int64")))
        args: list[E.Expr] = []
        for role in self.layout.roles:
            if role == "input_ids":
                args.append(ids)
            elif role == "attention_mask":
                args.append(mask)
            elif role == "position_ids":
                args.append(positions)
            else:
                _, layer, kind = role  # type: ignore[misc]
                args.append(caches[2 * layer + kind])
        return self.emit(E.Call(self.main, tuple(args)), "step")

    def call_step(self, token: E.Var, buffers: list[E.Var], tokens: E.Var, pos: E.Var) -> E.Var:
        """``generate_step`` on ``token`` (batch, 1) written at the last of ``tokens``' length,
        attending over the first ``length`` slots of the ``buffers``."""
        length = self.emit(op.take(op.shape_of(tokens), op.const(1, "int64"), axis=0), "length")
        cap = op.take(op.shape_of(buffers[0]), op.const(2, "int64"), axis=0)
        slots = op.dynamic_arange(op.const(0, "int64"), cap, op.const(1, "int64"), "int64")
        written = op.cast(op.less(slots, length), "int64")  # (capacity,)
        mask = self.emit(op.add(op.multiply(token, op.const(0, "int64")), written), "mask")
        at = self.emit(op.subtract(length, op.const(1, "int64")), "write_at")
        args: list[E.Expr] = []
        for role in self.layout.roles:
            if role == "input_ids":
                args.append(token)
            elif role == "attention_mask":
                args.append(mask)
            elif role == "position_ids":
                args.append(pos)
            else:
                _, layer, kind = role  # type: ignore[misc]
                args.append(buffers[2 * layer + kind])
        return self.emit(E.Call(self.step, (*args, at)), "step")

    def loop_function(self) -> E.Var:
        """The decoding loop, bound to a local variable: (tokens, logits, caches...,
        [finished], remaining) -> tokens, called with ``remaining > 0``."""
        bb = self.bb
        params = [
            E.Var("tokens", tensor(("batch", None), "int64")),
            E.Var("logits", self.logits_type),
        ]
        params += [E.Var(f"cache{i}", t) for i, t in enumerate(self.kv_types)]
        if self.eos is not None:
            params.append(E.Var("finished", tensor(("batch",), "bool")))
        params.append(E.Var("remaining", scalar("int64")))
        ret: Type = tensor(("batch", None), "int64")
        fvar = E.Var("decode", FuncType(tuple(p.annotation for p in params), ret))
        bb.begin_scope()
        tokens, logits, *caches = params[:-1]
        finished = caches.pop() if self.eos is not None else None
        last = op.strided_slice(logits, [-1], [_LAST], axes=[1])
        token = self.emit(op.argmax(last, axis=-1), "token")  # (batch, 1)
        more = self.emit(op.subtract(params[-1], op.const(1, "int64")), "remaining")
        go: E.Expr = op.greater(more, op.const(0, "int64"))
        if finished is not None:
            eos = op.const(self.eos, "int64")
            token = self.emit(op.where(op.expand_dims(finished, 1), eos, token), "token")
            finished = self.emit(
                op.logical_or(finished, op.squeeze(op.equal(token, eos), axis=1)), "finished"
            )
            go = op.logical_and(go, op.logical_not(op.min(finished)))
        tokens = self.emit(op.concat([tokens, token], axis=1), "tokens")
        go = self.emit(go, "go")
        bb.begin_scope()
        mask = self.emit(
            op.add(op.multiply(tokens, op.const(0, "int64")), op.const(1, "int64")), "mask"
        )
        length = op.take(op.shape_of(tokens), op.const(1, "int64"), axis=0)
        pos = self.emit(
            op.add(
                op.multiply(token, op.const(0, "int64")), op.subtract(length, op.const(1, "int64"))
            ),
            "position",
        )
        if self.step is None:
            out = self.call_main(token, caches, mask, pos)
        else:
            out = self.call_step(token, caches, tokens, pos)
        fields = [self.emit(E.TupleGetItem(out, i)) for i in range(1 + len(self.kv_types))]
        state = [tokens, *fields, *([finished] if finished is not None else []), more]
        again = bb.end_scope(self.emit(E.Call(fvar, tuple(state))))
        bb.begin_scope()
        done = bb.end_scope(tokens)
        body = bb.end_scope(self.emit(E.If(go, again, done)))
        bb.bind(fvar, E.Function(tuple(params), body, ret))
        return fvar
