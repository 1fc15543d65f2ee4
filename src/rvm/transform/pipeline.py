"""The compilation pipeline: an ordered, visible list of passes, each ``IRModule -> IRModule``.

Each pass: what it needs → what it guarantees.

- normalize: any module → A-normal form: call args, tuple fields, If conditions, Match data
  and tuple-index sources are atoms (Var, Constant, GlobalVar, Constructor); bodies and
  branches are SeqExprs.
- infer_shapes: normal form → every expression has its type recorded; shapes provably wrong
  raise IRError.
- lambda_lift: normal form → no nested Function: local functions are module functions taking
  their captured variables first; known calls are direct calls, escaping functions are
  ``vm.make_closure``, calls of closure values are ``vm.invoke_closure``.
- inline: lifted → calls of small non-recursive module functions are replaced by their bodies.
- fold_batch_norm: inlined → a batch norm of a convolution with constant weights and
  statistics is folded into the weights and a per-channel bias add.
- commute_pool_projection: batch norms folded → an average pool and a 1x1 convolution, the
  first used only by the second, run in the order that costs fewer multiply-adds and taps.
- merge_convs: batch norms folded → conv2d calls of one region sharing their input (one
  image), geometry and bias-and-activation chain are one convolution of their weights one after
  the other, each member a channel ``strided_slice`` of its result (inception's branch heads),
  which the memory plan makes a view.
- shuffle_after_depthwise: inlined → a channel shuffle whose one use is a depthwise
  convolution with a constant weight that shrinks the map runs after it, on the smaller map.
- fuse_attention: inlined → a scaled dot-product attention chain (matmul, scale, mask,
  softmax, matmul) is one ``attention`` call.
- fuse_norms: inlined → RMSNorm and decomposed LayerNorm chains are ``rms_norm`` and
  ``layer_norm`` calls.
- fuse_activations: inlined → GELU (erf and tanh forms) and SiLU chains are ``gelu`` and
  ``silu`` calls.
- fuse_rope: inlined → rotary-embedding chains (halves, negation, concat, products) are
  ``rope`` calls.
- to_bf16 (only with ``rvm.compile(..., precision="bf16")``, which inserts it here): inlined,
  batch norms folded → float32 dense/matmul/conv2d with constant weights are
  ``dense_packed_bf16`` (more than a few rows: the weight in pair panels), ``dense_bf16`` /
  ``conv2d_bf16`` with the weights converted to bf16 once (on a CPU without a bf16 dot
  product: the float32 ops on weights rounded to bf16, but ``dense_bf16``).
- pack_weights (only with jit kernels, which `rvm.compile` inserts here): inlined → float32
  dense/matmul with a constant 2-d weight are ``dense_packed`` with the weight packed once in
  the GEMM's column panels.
- merge_products (with pack_weights): packed → ``dense_packed`` calls of one region sharing
  their input, activation and bias-or-not are one product of their weights side by side,
  each member a ``strided_slice`` of its result (attention's query, key and value).
- pack_conv_weights (only with jit kernels, which ``rvm.compile`` inserts here): inlined, batch
  norms folded → float32 conv2d with constant weights that the direct convolution serves
  (`rvm.kernels.direct`) are ``conv2d_packed`` with the weights packed once in panels; int8
  qconv2d of small maps take their weights turned once (``weight_layout="turned"``), other
  int8 qconv2d and qdense weights widened to int16 once where the CPU's integer kernels take
  16-bit values (AVX2 without VNNI), or kept int8 there with ``weight_pairs="int16"`` where
  their pairs fit 16 bits (7-bit weights: the ``vpmaddubsw`` tiles).
- concat_images: inlined, batch norms folded, weights packed (the passes ``rvm.compile``
  inserts come before it) → a channel concatenation of a batch of images whose pieces are
  per-image chains (a convolution or pool, its bias and activation) runs the chains image by
  image and joins each image's pieces, then the images: every piece one contiguous run of
  the result, which the memory plan writes in place.
- legalize: lifted → every op call is a call of a primitive function (``attrs["primitive"]``)
  holding that op; 0-d constants move into it; an avg_pool2d whose one window is its whole
  static map holds ``global_avg_pool2d``.
- fuse_ops: legalized → chains of primitive calls merged by pattern kind (elementwise,
  broadcast and injective chains; reductions absorb elementwise inputs and epilogue;
  matmul/conv absorb an elementwise epilogue).
- fold_constant: fused → primitive calls on constants are evaluated into constants.
- dead_code: any → unused pure bindings and unreferenced private functions removed.
- tail_call: any → calls in tail position carry ``attrs["tail"] = True``.
- memory_plan: fused → primitive calls become ``vm.alloc_storage`` / ``vm.alloc_tensor`` /
  ``vm.call_dps`` (``vm.call_alloc`` where the output shape depends on data); storage is
  reused between non-overlapping static tensors; concatenations of kernels' results are written
  in place and slices that are runs of one are views.
- kill: planned → ``vm.kill(x)`` after the last use of every tensor not used later (never
  between a tail call and its return).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence

from rvm.ir import IRModule
from rvm.ir.verify import verify as verify_module

logger = logging.getLogger("rvm.transform")

Pass = Callable[[IRModule], IRModule]


def default_passes() -> list[tuple[str, Pass]]:
    """The passes of `rvm.compile`, in order."""
    from rvm.transform.commute_pool_projection import commute_pool_projection
    from rvm.transform.concat_images import concat_images
    from rvm.transform.dead_code import dead_code
    from rvm.transform.fold_batch_norm import fold_batch_norm
    from rvm.transform.fold_constant import fold_constant
    from rvm.transform.fuse_activations import fuse_activations
    from rvm.transform.fuse_attention import fuse_attention
    from rvm.transform.fuse_norms import fuse_norms
    from rvm.transform.fuse_ops import fuse_ops
    from rvm.transform.fuse_rope import fuse_rope
    from rvm.transform.infer_shapes import infer_shapes
    from rvm.transform.inline import inline
    from rvm.transform.kill import kill
    from rvm.transform.lambda_lift import lambda_lift
    from rvm.transform.legalize import legalize
    from rvm.transform.memory_plan import memory_plan
    from rvm.transform.merge_convs import merge_convs
    from rvm.transform.normalize import normalize
    from rvm.transform.shuffle_after_depthwise import shuffle_after_depthwise
    from rvm.transform.tail_call import tail_call

    return [
        ("normalize", normalize),
        ("infer_shapes", infer_shapes),
        ("lambda_lift", lambda_lift),
        ("inline", inline),
        ("fold_batch_norm", fold_batch_norm),
        ("commute_pool_projection", commute_pool_projection),
        ("merge_convs", merge_convs),
        ("shuffle_after_depthwise", shuffle_after_depthwise),
        ("fuse_attention", fuse_attention),
        ("fuse_norms", fuse_norms),
        ("fuse_activations", fuse_activations),
        ("fuse_rope", fuse_rope),
        ("concat_images", concat_images),
        ("legalize", legalize),
        ("fuse_ops", fuse_ops),
        ("fold_constant", fold_constant),
        ("dead_code", dead_code),
        ("tail_call", tail_call),
        ("memory_plan", memory_plan),
        ("kill", kill),
    ]


def run_pipeline(
    mod: IRModule,
    passes: Sequence[tuple[str, Pass]] | None = None,
    *,
    verify: bool = False,
    dump_dir: str | os.PathLike | None = None,
) -> IRModule:
    """Run ``passes`` (default: `default_passes`) over ``mod``.

    Args:
        mod: the module to compile.
        passes: ``(name, pass)`` pairs; defaults to the full pipeline.
        verify: run the verifier after every pass (an error names the pass).
        dump_dir: write the module as rvm script after every pass, as
            ``NN_<pass>.py`` in this directory.
    """
    passes = default_passes() if passes is None else list(passes)
    if dump_dir is not None:
        os.makedirs(dump_dir, exist_ok=True)
        _dump(dump_dir, 0, "input", mod)
    for index, (name, fn) in enumerate(passes, start=1):
        mod = fn(mod)
        if verify:
            try:
                verify_module(mod)
            except Exception as err:
                raise type(err)(f"after pass {name}: {err}") from err
        if dump_dir is not None:
            _dump(dump_dir, index, name, mod)
    return mod


def _dump(dump_dir: str | os.PathLike, index: int, name: str, mod: IRModule) -> None:
    path = os.path.join(dump_dir, f"{index:02d}_{name}.py")
    with open(path, "w", encoding="utf-8") as f:
        f.write(mod.script())
