"""The oracle of `rvm.generation.greedy`: greedy decoding as a Python loop over ONNX Runtime,
feeding each step's ``present.N.key/value`` back as ``past_key_values.N.key/value`` (what
users write around an exported decoder; the tests, the example and the benchmark compare
``generate`` with it)."""

from __future__ import annotations

from typing import Any

import numpy as np


def ort_greedy(
    sess: Any, input_ids: np.ndarray, max_new_tokens: int, eos: int | None = None
) -> np.ndarray:
    """The prompt followed by up to ``max_new_tokens`` greedy tokens of the decoder that
    ONNX Runtime session ``sess`` runs (optimum's with-past layout); with ``eos``, rows that
    produced it are padded with it and the loop stops once every row has."""
    names = {i.name: i for i in sess.get_inputs()}
    outputs = [o.name for o in sess.get_outputs()]
    batch = input_ids.shape[0]
    past = {}
    for name, info in names.items():
        if name.startswith("past_key_values"):
            _, heads, _, head_dim = info.shape
            past[name] = np.zeros((batch, heads, 0, head_dim), np.float32)
    tokens, current = input_ids, input_ids
    finished = np.zeros(batch, bool)
    for _ in range(max_new_tokens):
        length, s = tokens.shape[1], current.shape[1]
        feed = {
            "input_ids": current,
            "attention_mask": np.ones((batch, length), np.int64),
            "position_ids": np.tile(np.arange(length - s, length), (batch, 1)),
            **past,
        }
        out = sess.run(None, {k: v for k, v in feed.items() if k in names})
        token = out[0][:, -1].argmax(-1)
        if eos is not None:
            token = np.where(finished, eos, token)
            finished |= token == eos
        tokens = np.concatenate([tokens, token[:, None]], axis=1)
        current = token[:, None]
        past = {n.replace("present", "past_key_values"): o for n, o in zip(outputs[1:], out[1:])}
        if eos is not None and finished.all():
            break
    return tokens
