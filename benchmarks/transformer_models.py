"""Random-weight ``transformers`` defaults exported to ONNX for `transformers.py`.

GPT-2 small (``GPT2Config()``: 12 layers, width 768, 12 heads, vocabulary 50257, 1024
positions) in optimum's ``text-generation-with-past`` layout, and BERT-base (``BertConfig()``:
12 layers, width 768) by optimum's ``feature-extraction`` task (inputs ``input_ids``,
``attention_mask``, ``token_type_ids``; output ``last_hidden_state``). Random weights (seeded):
no download. Needs torch (CPU), transformers and optimum-onnx (the ``export`` extra). Each
export is kept in ``workdir`` and reused when its file exists.
"""

from __future__ import annotations

import sys
from pathlib import Path


def export_gpt2(workdir: Path, **config: int) -> Path:
    """GPT-2 (defaults unless ``config`` overrides) with past, exported; its model.onnx."""
    return _export(workdir, "gpt2", "text-generation-with-past", config)


def export_bert(workdir: Path, **config: int) -> Path:
    """BERT (defaults unless ``config`` overrides) as a feature extractor; its model.onnx."""
    return _export(workdir, "bert", "feature-extraction", config)


EXPORT_MODULES = ("torch", "transformers", "optimum.exporters.onnx")
"""What an export imports (the ``export`` extra)."""


def missing_for_export(workdir: Path, arch: str, **config: int) -> list[str]:
    """The modules of `EXPORT_MODULES` that ``arch``'s export would need and cannot import;
    none when its export is already kept in ``workdir``."""
    import importlib.util

    if _model_path(workdir, arch, config).exists():
        return []
    _unshadow()
    return [m for m in EXPORT_MODULES if importlib.util.find_spec(m) is None]


def _unshadow() -> None:
    """Takes this folder off ``sys.path``: its ``transformers.py`` (a benchmark) would shadow
    the package an export imports (and `missing_for_export` looks for)."""
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]


def _model_path(workdir: Path, arch: str, config: dict[str, int]) -> Path:
    tag = arch + "".join(f"-{k}{v}" for k, v in sorted(config.items()))
    return workdir / tag / "model.onnx"


def _export(workdir: Path, arch: str, task: str, config: dict[str, int]) -> Path:
    model = _model_path(workdir, arch, config)
    if model.exists():
        return model
    out, tag = model.parent, model.parent.name
    _unshadow()
    import torch
    import transformers
    from optimum.exporters.onnx import main_export

    torch.manual_seed(0)
    src = workdir / f"{tag}-src"
    if arch == "gpt2":
        net = transformers.GPT2LMHeadModel(transformers.GPT2Config(**config))
    else:
        net = transformers.BertModel(transformers.BertConfig(**config))
    net.save_pretrained(src)
    main_export(str(src), output=str(out), task=task)
    return model
