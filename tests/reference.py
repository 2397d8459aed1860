"""Independent reference for chunk vectors: transformers ``AutoModel`` states pooled by hand in float64.

Nothing here imports latechunk_dagster: the head is read from the model directory's
sentence-transformers files with plain json + safetensors.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file
from transformers import AutoModel, AutoTokenizer

_MODELS: dict[tuple[str, str], torch.nn.Module] = {}


def reference_states(model_dir: str | Path, token_ids: list[int], dtype: torch.dtype = torch.float64) -> np.ndarray:
    """Final hidden states ``[n_tokens, hidden]`` as float64, model run in ``dtype``."""
    key = (str(model_dir), str(dtype))
    if key not in _MODELS:
        _MODELS[key] = AutoModel.from_pretrained(str(model_dir), torch_dtype=dtype, attn_implementation="eager").eval()
    with torch.no_grad():
        out = _MODELS[key](
            input_ids=torch.tensor([token_ids]), attention_mask=torch.ones(1, len(token_ids), dtype=torch.long)
        )
    return out.last_hidden_state[0].to(torch.float64).numpy()


def reference_head(model_dir: str | Path, pooled: np.ndarray, dimensions: int | None = None) -> np.ndarray:
    """Apply the sentence-transformers modules after Pooling (Dense..., Normalize) in float64."""
    model_dir = Path(model_dir)
    x = torch.tensor(pooled, dtype=torch.float64)
    modules = json.loads((model_dir / "modules.json").read_text())
    normalize = False
    for m in modules:
        kind = m["type"].rsplit(".", 1)[-1]
        if kind == "Dense":
            cfg = json.loads((model_dir / m["path"] / "config.json").read_text())
            w = load_file(str(model_dir / m["path"] / "model.safetensors"))
            x = x @ w["linear.weight"].double().T + (w["linear.bias"].double() if "linear.bias" in w else 0)
            if cfg["activation_function"].endswith("Tanh"):
                x = torch.tanh(x)
        elif kind == "Normalize":
            normalize = True
    if dimensions is not None:
        x = x[:, :dimensions]
    if normalize:
        x = x / x.norm(dim=1, keepdim=True)
    return x.numpy()


def reference_chunk_vectors(
    model_dir: str | Path, token_ids: list[int], spans: list[tuple[int, int]], dimensions: int | None = None
) -> np.ndarray:
    """``head(mean(H[start:end]))`` per span, all in float64."""
    h = reference_states(model_dir, token_ids)
    means = np.stack([h[s:e].mean(axis=0) for s, e in spans])
    return reference_head(model_dir, means, dimensions)


def reference_token_ids(model_dir: str | Path, text: str, prefix: str = "") -> list[int]:
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    return list(tok(prefix + text, add_special_tokens=True)["input_ids"])
