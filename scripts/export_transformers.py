"""Export the tiny random-weight transformers that rvm's tests import (tests/data/transformers).

Five models, each 2 layers with random weights (fixed seed), stored with their weights inside
the file (a few hundred kB each); the first four wide 64 with a 256-token vocabulary:

- ``gpt2_dynamo.onnx``: GPT-2 decoder by ``torch.onnx.export(dynamo=True)``, inputs
  ``input_ids``, ``attention_mask`` (batch, seq) -> ``logits``;
- ``bert_dynamo.onnx``: BERT encoder by ``torch.onnx.export(dynamo=True)``, inputs
  ``input_ids``, ``attention_mask``, ``token_type_ids`` -> ``last_hidden_state``,
  ``pooler_output``;
- ``gpt2_with_past.onnx`` and ``llama_with_past.onnx``: optimum's ``text-generation-with-past``
  layout (``input_ids``, ``attention_mask``, [``position_ids``], ``past_key_values.N.key/value``
  -> ``logits``, ``present.N.key/value``); the Llama model has RoPE, RMSNorm, a SiLU MLP and
  grouped-query attention (2 key/value heads for 4 query heads);
- ``llama_dynamo.onnx``: the Llama-style decoder of `rvm.testing.torch_models` (wide 32, a
  97-token vocabulary) by ``torch.onnx.export(dynamo=True)``, input ``input_ids`` (batch, seq)
  -> ``logits``.

It needs the ``export`` extra (torch CPU, transformers, onnxscript, optimum-onnx)::

    pip install 'torch==2.13.0+cpu' --index-url https://download.pytorch.org/whl/cpu
    pip install -e '.[export]'
    python scripts/export_transformers.py [--out tests/data/transformers]

``torch.export`` specializes a dimension whose example size is 1, so the dynamo exports trace
with batch 2 and sequence 5.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile

import onnx
import torch
import transformers

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "transformers")
VOCAB = 256
WIDTH = 64
LAYERS = 2
HEADS = 4


def _gpt2_config() -> transformers.GPT2Config:
    return transformers.GPT2Config(
        vocab_size=VOCAB, n_positions=128, n_embd=WIDTH, n_layer=LAYERS, n_head=HEADS
    )


def _bert_config() -> transformers.BertConfig:
    return transformers.BertConfig(
        vocab_size=VOCAB,
        hidden_size=WIDTH,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        intermediate_size=2 * WIDTH,
        max_position_embeddings=128,
    )


def _llama_config() -> transformers.LlamaConfig:
    return transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=WIDTH,
        intermediate_size=2 * WIDTH,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS // 2,
        max_position_embeddings=128,
    )


def _model(model_class, config) -> torch.nn.Module:
    torch.manual_seed(0)
    config._attn_implementation = "eager"
    model = model_class(config).eval()
    return model


class _Logits(torch.nn.Module):
    """A decoder without a cache, returning its logits alone (a plain tensor output)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids, attention_mask=attention_mask, use_cache=False).logits


class _Encoder(torch.nn.Module):
    """An encoder returning its last hidden state and pooled output as plain tensors."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, token_type_ids):
        out = self.model(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        return out.last_hidden_state, out.pooler_output


def _dynamo_export(module, inputs, names, outputs, path) -> None:
    batch = torch.export.Dim("batch", min=1, max=64)
    seq = torch.export.Dim("seq", min=1, max=128)
    dynamic = {name: {0: batch, 1: seq} for name in names}
    program = torch.onnx.export(
        module,
        inputs,
        dynamo=True,
        input_names=list(names),
        output_names=list(outputs),
        dynamic_shapes=dynamic,
        optimize=True,
    )
    program.save(path)


def export_gpt2_dynamo(out: str) -> str:
    """GPT-2 without a cache through torch.onnx.export(dynamo=True)."""
    module = _Logits(_model(transformers.GPT2LMHeadModel, _gpt2_config()))
    ids = torch.randint(0, VOCAB, (2, 5))
    mask = torch.ones(2, 5, dtype=torch.int64)
    path = os.path.join(out, "gpt2_dynamo.onnx")
    _dynamo_export(module, (ids, mask), ("input_ids", "attention_mask"), ("logits",), path)
    return path


def export_bert_dynamo(out: str) -> str:
    """A BERT encoder through torch.onnx.export(dynamo=True)."""
    module = _Encoder(_model(transformers.BertModel, _bert_config()))
    ids = torch.randint(0, VOCAB, (2, 5))
    mask = torch.ones(2, 5, dtype=torch.int64)
    types = torch.zeros(2, 5, dtype=torch.int64)
    names = ("input_ids", "attention_mask", "token_type_ids")
    outputs = ("last_hidden_state", "pooler_output")
    path = os.path.join(out, "bert_dynamo.onnx")
    _dynamo_export(module, (ids, mask, types), names, outputs, path)
    return path


def _optimum_export(model_class, config, name: str, out: str) -> str:
    from optimum.exporters.onnx import main_export

    model = _model(model_class, config)
    with tempfile.TemporaryDirectory() as tmp:
        source = os.path.join(tmp, "model")
        model.save_pretrained(source)
        _tokenizer_files(source)
        target = os.path.join(tmp, "onnx")
        main_export(source, target, task="text-generation-with-past", device="cpu")
        path = os.path.join(out, name)
        _save_inline(os.path.join(target, "model.onnx"), path)
    return path


def _tokenizer_files(directory: str) -> None:
    """A byte-level tokenizer (no download): optimum copies it beside the model."""
    from tokenizers import Tokenizer, models

    tokenizer = Tokenizer(models.WordLevel({chr(i): i for i in range(VOCAB)}, unk_token="\0"))
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="\0")
    fast.save_pretrained(directory)


def _save_inline(source: str, target: str) -> None:
    """Save a model with its weights inside the file (optimum may write them beside it)."""
    model = onnx.load(source, load_external_data=True)
    onnx.save_model(model, target, save_as_external_data=False)


def export_gpt2_with_past(out: str) -> str:
    """GPT-2 in optimum's text-generation-with-past layout."""
    config = _gpt2_config()
    return _optimum_export(transformers.GPT2LMHeadModel, config, "gpt2_with_past.onnx", out)


def export_llama_with_past(out: str) -> str:
    """A Llama-style decoder (RoPE, RMSNorm, SiLU MLP, GQA) in the with-past layout."""
    config = _llama_config()
    return _optimum_export(transformers.LlamaForCausalLM, config, "llama_with_past.onnx", out)


def export_llama_dynamo(out: str) -> str:
    """The Llama-style decoder of `rvm.testing.torch_models` (benchmarks/torch_models.py)
    through torch.onnx.export(dynamo=True), batch and sequence symbolic: its attention
    reshaped to ``(-1, seq, 8)`` with ``seq`` read from a Range's length."""
    from rvm.testing.torch_models import CASES

    case = CASES["llama"]
    program = torch.onnx.export(
        case.build(),
        case.inputs(2, case.seqs[0]),
        dynamo=True,
        dynamic_shapes=case.dynamic_shapes(),
        verbose=False,
    )
    path = os.path.join(out, "llama_dynamo.onnx")
    with open(path, "wb") as f:
        f.write(program.model_proto.SerializeToString())
    return path


EXPORTS = {
    "gpt2_dynamo": export_gpt2_dynamo,
    "bert_dynamo": export_bert_dynamo,
    "gpt2_with_past": export_gpt2_with_past,
    "llama_with_past": export_llama_with_past,
    "llama_dynamo": export_llama_dynamo,
}


def main(argv: list[str] | None = None) -> None:
    """Export the models named on the command line (all of them by default)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", choices=[*EXPORTS, []], help="default: all")
    parser.add_argument("--out", default=OUT, help="output directory")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    for name in args.models or EXPORTS:
        path = EXPORTS[name](args.out)
        print(f"{name}: {os.path.relpath(path)} ({os.path.getsize(path) / 1e6:.2f} MB)")
    shutil.rmtree(os.path.join(args.out, "__pycache__"), ignore_errors=True)


if __name__ == "__main__":
    main()
