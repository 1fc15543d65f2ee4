"""Tiny random PyTorch models for tests and benchmarks: transformers models built from small
configs (no download) and modules with ``torch.cond`` and ``torch.while_loop``.

Each `ModelCase` builds the model (seeded), example inputs for a batch and a sequence length,
and the ``dynamic_shapes`` that make batch (and sequence, where the model has one) symbolic:

    case = CASES["gpt2"]
    model = case.build()
    args = case.inputs(batch=2, seq=8)
    mod = rvm.from_torch(model, args=args, dynamic_shapes=case.dynamic_shapes())
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class ModelCase:
    """A model and how to feed it: ``inputs(batch, seq)`` gives the positional inputs."""

    name: str
    build_fn: Callable[[], Any]
    inputs_fn: Callable[[int, int], tuple]
    seq_dims: dict[str, dict[int, str]] = field(default_factory=dict)
    seqs: tuple[int, ...] = (8, 13)
    batches: tuple[int, ...] = (2, 3)
    slow: bool = False

    def build(self) -> Any:
        import torch

        torch.manual_seed(0)
        return self.build_fn().eval()

    def inputs(self, batch: int, seq: int) -> tuple:
        rng = np.random.default_rng(batch * 100 + seq)
        return self.inputs_fn(batch, seq, rng)  # type: ignore[call-arg]

    def dynamic_shapes(self) -> dict[str, dict[int, Any]]:
        from torch.export import Dim

        dims = {"batch": Dim("batch", min=1, max=64), "seq": Dim("seq", min=2, max=128)}
        return {
            arg: ({axis: dims[d] for axis, d in axes.items()} if axes else None)
            for arg, axes in self.seq_dims.items()
        }


def _ids(vocab: int) -> Callable:
    def make(batch: int, seq: int, rng: np.random.Generator) -> tuple:
        import torch

        return (torch.from_numpy(rng.integers(0, vocab, size=(batch, seq))),)

    return make


def _image(channels: int, size: int) -> Callable:
    def make(batch: int, seq: int, rng: np.random.Generator) -> tuple:
        import torch

        return (
            torch.from_numpy(rng.standard_normal((batch, channels, size, size), dtype=np.float32)),
        )

    return make


def _logits(model_cls: Any, config: Any, attr: str = "logits") -> Callable[[], Any]:
    """A module returning one output of a transformers model (no cache, no dict)."""

    def build() -> Any:
        import torch

        class Logits(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.model = model_cls(config())

            def forward(self, x: Any) -> Any:
                return getattr(
                    self.model(x, use_cache=False) if _cache(self.model) else self.model(x), attr
                )

        return Logits()

    return build


def _cache(model: Any) -> bool:
    return hasattr(model.config, "use_cache")


def _gpt2() -> Any:
    from transformers import GPT2Config

    return GPT2Config(
        n_layer=2, n_head=2, n_embd=32, vocab_size=97, n_positions=128, attn_implementation="sdpa"
    )


def _bert() -> Any:
    from transformers import BertConfig

    return BertConfig(
        num_hidden_layers=2,
        num_attention_heads=2,
        hidden_size=32,
        intermediate_size=64,
        vocab_size=97,
        max_position_embeddings=128,
        attn_implementation="sdpa",
    )


def _llama() -> Any:
    from transformers import LlamaConfig

    return LlamaConfig(
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        hidden_size=32,
        intermediate_size=64,
        vocab_size=97,
        max_position_embeddings=128,
        attn_implementation="sdpa",
    )


def _vit() -> Any:
    from transformers import ViTConfig

    return ViTConfig(
        num_hidden_layers=2,
        num_attention_heads=2,
        hidden_size=32,
        intermediate_size=64,
        image_size=32,
        patch_size=8,
        num_labels=10,
        attn_implementation="sdpa",
    )


def _resnet() -> Any:
    from transformers import ResNetConfig

    return ResNetConfig(
        embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], num_labels=10, layer_type="basic"
    )


def _convnext() -> Any:
    from transformers import ConvNextConfig

    return ConvNextConfig(
        hidden_sizes=[16, 32], depths=[1, 1], num_stages=2, num_labels=10, image_size=32
    )


def _whisper_encoder() -> Any:
    import torch
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    config = WhisperConfig(
        encoder_layers=2,
        encoder_attention_heads=2,
        d_model=32,
        encoder_ffn_dim=64,
        num_mel_bins=16,
        max_source_positions=32,
        attn_implementation="sdpa",
    )

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = WhisperEncoder(config)

        def forward(self, features: Any) -> Any:
            return self.encoder(features).last_hidden_state

    return Encoder()


def _mel(batch: int, seq: int, rng: np.random.Generator) -> tuple:
    import torch

    return (torch.from_numpy(rng.standard_normal((batch, 16, 64), dtype=np.float32)),)


def _cond_module() -> Any:
    import torch

    class Gate(torch.nn.Module):
        """Two branches on the sign of a data-dependent sum, each with its own weights."""

        def __init__(self) -> None:
            super().__init__()
            self.up = torch.nn.Linear(8, 8)
            self.down = torch.nn.Linear(8, 8)

        def forward(self, x: Any) -> Any:
            def pos(x: Any) -> Any:
                return torch.relu(self.up(x))

            def neg(x: Any) -> Any:
                return torch.tanh(self.down(x)) - 1.0

            return torch.cond(x.sum() > 0, pos, neg, (x,))

    return Gate()


def _while_module() -> Any:
    import torch

    class Recur(torch.nn.Module):
        """An RNN cell applied until a step count given as an input tensor."""

        def __init__(self) -> None:
            super().__init__()
            self.cell = torch.nn.Linear(8, 8)

        def forward(self, x: Any, steps: Any) -> Any:
            def cond(i: Any, h: Any) -> Any:
                return i < steps

            def body(i: Any, h: Any) -> Any:
                return i + 1, torch.tanh(self.cell(h))

            return torch.while_loop(cond, body, (torch.zeros((), dtype=torch.int64), x))[1]

    return Recur()


def _rows(batch: int, seq: int, rng: np.random.Generator) -> tuple:
    import torch

    return (
        torch.from_numpy(
            rng.standard_normal((batch, 8), dtype=np.float32) * (1 if seq % 2 else -1)
        ),
    )


def _rows_steps(batch: int, seq: int, rng: np.random.Generator) -> tuple:
    import torch

    return (*_rows(batch, seq, rng), torch.tensor(seq))


def _build(config_fn: Callable[[], Any], cls_name: str, attr: str = "logits") -> Callable[[], Any]:
    def model_cls(config: Any) -> Any:
        import transformers

        return getattr(transformers, cls_name)(config)

    return _logits(model_cls, config_fn, attr)


_BATCH_SEQ = {"x": {0: "batch", 1: "seq"}}
CASES: dict[str, ModelCase] = {
    case.name: case
    for case in [
        ModelCase("gpt2", _build(_gpt2, "GPT2LMHeadModel"), _ids(97), _BATCH_SEQ),
        ModelCase("bert", _build(_bert, "BertModel", "last_hidden_state"), _ids(97), _BATCH_SEQ),
        ModelCase("llama", _build(_llama, "LlamaForCausalLM"), _ids(97), _BATCH_SEQ),
        ModelCase(
            "vit",
            _build(_vit, "ViTForImageClassification"),
            _image(3, 32),
            {"x": {0: "batch"}},
            seqs=(0,),
        ),
        ModelCase(
            "resnet",
            _build(_resnet, "ResNetForImageClassification"),
            _image(3, 32),
            {"x": {0: "batch"}},
            seqs=(0,),
        ),
        ModelCase(
            "convnext",
            _build(_convnext, "ConvNextForImageClassification"),
            _image(3, 32),
            {"x": {0: "batch"}},
            seqs=(0,),
        ),
        ModelCase("whisper_encoder", _whisper_encoder, _mel, {"features": {0: "batch"}}, seqs=(0,)),
        ModelCase("cond", _cond_module, _rows, {"x": {0: "batch"}}, seqs=(1, 2)),
        ModelCase(
            "while_loop", _while_module, _rows_steps, {"x": {0: "batch"}, "steps": {}}, seqs=(3, 6)
        ),
    ]
}
