"""`rvm.compile`: an IRModule through the pipeline and codegen to an `Executable`."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from rvm.codegen.align_constants import align_constants
from rvm.codegen.vm_codegen import vm_codegen
from rvm.errors import IRError
from rvm.ir import IRModule
from rvm.jit.numpy_kernel import numpy_kernel
from rvm.op.core import computes_in
from rvm.runtime.executable import EXEC_MODES, PRECISIONS, Executable, KernelRecord
from rvm.runtime.kernels import build_kernels as build
from rvm.transform.pipeline import default_passes, run_pipeline

logger = logging.getLogger("rvm.codegen")

KERNEL_BACKENDS = ("jit", "numpy")


def _kernel_factory(kernels: str) -> Callable[..., KernelRecord]:
    if kernels == "numpy":
        return numpy_kernel
    from rvm.jit.lower import jit_kernel

    return jit_kernel


def _with_precision(passes: list, precision: str, kernels: str) -> list:
    """``passes`` with the passes that convert products before legalize: to ``precision``
    (`rvm.transform.to_bf16`), then, for jit kernels, to packed constant weights: the GEMM's
    (`rvm.transform.pack_weights`, then `rvm.transform.merge_products`: those of one input
    as one) and the direct convolution's (`rvm.transform.pack_conv_weights`); attention then
    reads its heads in place (`rvm.transform.fuse_attention.attention_heads`); all before
    `rvm.transform.concat_images`, whose per-image calls read the packed weights."""
    extra = []
    if precision == "bf16":
        from rvm.transform.to_bf16 import to_bf16

        extra.append(("to_bf16", to_bf16))
    if kernels == "jit":
        from rvm.transform.fuse_attention import attention_heads
        from rvm.transform.merge_products import merge_products
        from rvm.transform.pack_conv_weights import pack_conv_weights
        from rvm.transform.pack_weights import pack_weights

        extra += [
            ("pack_weights", pack_weights),
            ("merge_products", merge_products),
            ("pack_conv_weights", pack_conv_weights),
            ("attention_heads", attention_heads),
        ]
    at = [name for name, _ in passes].index("concat_images")
    return [*passes[:at], *extra, *passes[at:]]


def compile(  # noqa: A001 - the public name users expect, as tvm.compile
    mod: IRModule,
    *,
    kernels: str = "jit",
    opt_level: int = 2,
    verify: bool = False,
    dump_dir: str | os.PathLike | None = None,
    exec_mode: str = "bytecode",
    build_kernels: bool = True,
    progress: bool = True,
    precision: str = "fp32",
) -> Executable:
    """Compile ``mod`` to an executable for `rvm.VirtualMachine`.

    Args:
        mod: the module (from rvm script, the Builder or a frontend).
        kernels: ``"jit"`` (native kernels through Numba) or ``"numpy"`` (the reference
            implementations, for comparisons).
        opt_level: 0 disables operator fusion; 2 (default) fuses.
        verify: run the IR verifier after every pass.
        dump_dir: write the module after every pass into this directory.
        exec_mode: the executable's ``default_exec_mode``, which ``rvm.VirtualMachine(ex)``
            uses when given none: ``"bytecode"``, ``"compiled"`` or ``"native"``.
        build_kernels: build the kernels now (jit: compile them through Numba, the missing
            ones in several processes at once (`rvm.jit.parallel`), or load them from the
            on-disk cache), so a `rvm.JITError` surfaces here and a saved executable finds
            them cached in the next process; False defers it to the first VM.
        progress: show the progress of long kernel builds (`rvm.progress`: a line on
            a terminal's stderr, a bar in a notebook, else one INFO log line); False: never.
        precision: what GEMMs and convolutions compute in. ``"fp32"`` (default);
            ``"bf16"``: float32 dense, matmul and conv2d with constant weights take bf16
            operands and sum in float32, their weights converted once, here
            (`rvm.transform.to_bf16`), and attention's two products; elementwise ops,
            norms and softmax stay float32, inputs and outputs keep their types; on a CPU
            without a bf16 dot product (AVX512-BF16), float32 kernels on weights rounded to
            bf16 instead (`rvm.transform.to_bf16`'s ``"rounded"`` way, said once in the log).
            Recorded as the executable's ``precision`` and saved with it.
    """
    if not isinstance(mod, IRModule):
        raise TypeError(f"rvm.compile expects an IRModule, got {type(mod).__name__}")
    if kernels not in KERNEL_BACKENDS:
        raise ValueError(f"kernels must be one of {KERNEL_BACKENDS}, got {kernels!r}")
    if exec_mode not in EXEC_MODES:
        raise ValueError(f"exec_mode must be one of {EXEC_MODES}, got {exec_mode!r}")
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if precision == "int8" and not computes_in(mod, "int8"):
        raise ValueError(
            "precision='int8' needs an int8 model: quantize it first (rvm.quantize) or "
            "import a quantized ONNX model"
        )
    passes = _with_precision(default_passes(), precision, kernels)
    if opt_level < 2:
        from rvm.transform.fuse_ops import fuse_ops

        passes = [
            (n, (lambda m: fuse_ops(m, opt_level=opt_level)) if n == "fuse_ops" else p)
            for n, p in passes
        ]
    lowered = align_constants(run_pipeline(mod, passes, verify=verify, dump_dir=dump_dir), mod)
    factory = _kernel_factory(kernels)
    try:
        ex = vm_codegen(lowered, factory)
    except IRError as err:
        raise IRError(f"codegen: {err}") from None
    ex.precision = precision
    logger.debug("compiled %d functions, %d kernels", len(ex.functions), len(ex.kernels))
    if build_kernels:
        if kernels == "jit":  # missing kernels compile in several processes at once first
            from rvm.jit.first_run import library_tasks
            from rvm.jit.parallel import frozen_gc, precompile

            with frozen_gc():
                precompile(list(ex.kernels.values()), library_tasks(lowered, ex.kernels))
                build(ex, progress=progress)
        else:
            build(ex, progress=progress)
    return ex if exec_mode == ex.default_exec_mode else ex.with_exec_mode(exec_mode)
