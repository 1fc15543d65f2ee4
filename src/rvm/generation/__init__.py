"""Decoding loops over an imported decoder, built as rvm functions that run inside the VM.

mod = rvm.from_onnx("decoder_with_past.onnx")
gen = rvm.generation.greedy(mod, eos_token_id=50256)
tokens = rvm.VirtualMachine(rvm.compile(gen))["generate"](input_ids, np.int64(32))
"""

from __future__ import annotations

from rvm.generation.greedy import greedy
from rvm.generation.layout import EXPECTED, DecoderLayout, decoder_layout

__all__ = ["EXPECTED", "DecoderLayout", "decoder_layout", "greedy"]
