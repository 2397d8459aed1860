"""Tiny random-weight BERT models saved to disk, with the MiniLM tokenizer and sentence-transformers files.

They stand in for heads that cannot be downloaded here (projection, Matryoshka cut,
CLS pooling, causal attention). Weights are random but fixed by a seed.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import BertConfig, BertModel

TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def build_tiny_bert(
    out: Path,
    minilm_dir: Path,
    *,
    pooling: str = "mean",
    dense: list[tuple[int, int, str]] | None = None,
    normalize: bool = True,
    is_decoder: bool = False,
    matryoshka: list[int] | None = None,
    hidden: int = 64,
    seed: int = 0,
) -> Path:
    """Write a tiny BERT with the given sentence-transformers head to ``out`` and return it."""
    torch.manual_seed(seed)
    cfg = BertConfig(
        vocab_size=30522,
        hidden_size=hidden,
        num_hidden_layers=2,
        num_attention_heads=1,  # head_dim 64: vLLM CPU attention rejects 16
        intermediate_size=2 * hidden,
        max_position_embeddings=512,
        is_decoder=is_decoder,
    )
    model = BertModel(cfg, add_pooling_layer=False)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    if matryoshka:
        c = json.loads((out / "config.json").read_text())
        c["matryoshka_dimensions"] = matryoshka
        (out / "config.json").write_text(json.dumps(c))
    for f in TOKENIZER_FILES:
        shutil.copy(minilm_dir / f, out / f)
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}]
    (out / "1_Pooling").mkdir(exist_ok=True)
    (out / "1_Pooling" / "config.json").write_text(
        json.dumps(
            {
                "word_embedding_dimension": hidden,
                "pooling_mode_cls_token": pooling == "cls",
                "pooling_mode_mean_tokens": pooling == "mean",
                "pooling_mode_max_tokens": False,
                "pooling_mode_lasttoken": pooling == "lasttoken",
            }
        )
    )
    modules.append({"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"})
    for k, (fin, fout, act) in enumerate(dense or []):
        d = out / f"{2 + k}_Dense"
        d.mkdir(exist_ok=True)
        (d / "config.json").write_text(
            json.dumps(
                {
                    "in_features": fin,
                    "out_features": fout,
                    "bias": True,
                    "activation_function": act,
                }
            )
        )
        save_file(
            {"linear.weight": torch.randn(fout, fin) * 0.3, "linear.bias": torch.randn(fout) * 0.1},
            str(d / "model.safetensors"),
        )
        modules.append(
            {
                "idx": len(modules),
                "name": str(len(modules)),
                "path": d.name,
                "type": "sentence_transformers.models.Dense",
            }
        )
    if normalize:
        modules.append(
            {
                "idx": len(modules),
                "name": str(len(modules)),
                "path": "9_Normalize",
                "type": "sentence_transformers.models.Normalize",
            }
        )
    (out / "modules.json").write_text(json.dumps(modules))
    (out / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 128, "do_lower_case": False}))
    return out
