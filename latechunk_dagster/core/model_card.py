"""What late chunking needs to know about a model, read from its directory (SPEC section 4).

Sources, in order: the sentence-transformers files (``modules.json``, the
``Pooling`` module's ``config.json``, ``Dense`` modules, ``Normalize``,
``sentence_bert_config.json``, ``config_sentence_transformers.json``), then the
Hugging Face ``config.json``. Nothing is downloaded.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from latechunk_dagster.core.errors import ModelNotSupportedError
from latechunk_dagster.core.head import DenseLayer, Head

#: Hugging Face ``model_type``s that are decoder-only (causal attention). Source:
#: transformers' causal-LM auto mapping, minus encoder families that merely *offer*
#: a causal LM head (bert, roberta, ...), which are bidirectional unless ``is_decoder``.
CAUSAL_MODEL_TYPES = frozenset(
    {
        "gpt2",
        "gptj",
        "gpt_neo",
        "gpt_neox",
        "gpt_bigcode",
        "llama",
        "mistral",
        "mixtral",
        "qwen2",
        "qwen2_moe",
        "qwen3",
        "qwen3_moe",
        "gemma",
        "gemma2",
        "gemma3",
        "gemma3_text",
        "phi",
        "phi3",
        "falcon",
        "opt",
        "bloom",
        "mpt",
        "starcoder2",
        "olmo",
        "olmo2",
        "stablelm",
        "cohere",
        "granite",
        "internlm2",
        "deepseek_v2",
        "deepseek_v3",
    }
)

_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
_CONFIG_FILES = (
    "config.json",
    "modules.json",
    "sentence_bert_config.json",
    "config_sentence_transformers.json",
    "tokenizer.json",
    "tokenizer_config.json",
)


@dataclass(frozen=True)
class ModelCard:
    """Facts about one model directory.

    Attributes:
        path: the model directory.
        name: a display name (the directory name, or ``_name_or_path`` of its config).
        causal: the encoder attends left-to-right only.
        pooling: the model's own sequence pooling: ``"mean"``, ``"cls"``, ``"lasttoken"``,
            ``"max"``, ... or ``"unknown"`` when the directory does not say.
        head: the embedding head after pooling.
        max_seq_length: the sentence-transformers cap on tokens, or ``None``.
        query_prefix, document_prefix: prompts from ``config_sentence_transformers.json``
            (``"query"``/``"document"``/``"passage"``), empty when the model has none.
        lowercases_text: sentence-transformers ``do_lower_case`` (text normalization
            outside the tokenizer: refused, SPEC section 6).
        fingerprint: sha256 over the weight and config files (hex), for lineage.
    """

    path: Path
    name: str
    causal: bool
    pooling: str
    head: Head
    max_seq_length: int | None
    query_prefix: str
    document_prefix: str
    lowercases_text: bool
    fingerprint: str


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.is_file() else {}


def _fingerprint(path: Path) -> str:
    h = hashlib.sha256()
    files = [p for p in sorted(path.rglob("*")) if p.is_file() and (p.name in _WEIGHT_FILES or p.name in _CONFIG_FILES)]
    for p in files:
        h.update(str(p.relative_to(path)).encode())
        with p.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def model_version(path: str | Path) -> str:
    """A cheap version of a model directory for Dagster code versions: sha256 (first 12 hex) over
    its config and tokenizer files and the names and sizes of its weight files.

    Unlike :attr:`ModelCard.fingerprint` it does not read the weights, so code locations load fast.
    """
    path = Path(path)
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")):
        if p.is_file() and p.name in _CONFIG_FILES:
            h.update(str(p.relative_to(path)).encode() + p.read_bytes())
        elif p.is_file() and p.name in _WEIGHT_FILES:
            h.update(f"{p.relative_to(path)}:{p.stat().st_size}".encode())
    return h.hexdigest()[:12]


def _pooling_mode(cfg: dict[str, Any]) -> str:
    modes = [
        k.removeprefix("pooling_mode_").removesuffix("_tokens").removesuffix("_token")
        for k, v in cfg.items()
        if k.startswith("pooling_mode_") and v is True
    ]
    if cfg.get("pooling_mode") and not modes:
        return str(cfg["pooling_mode"])
    return "+".join(sorted(modes)) if modes else "unknown"


def read_model_card(path: str | Path, dimensions: int | None = None) -> ModelCard:
    """Read a model directory.

    Args:
        path: directory with ``config.json`` and tokenizer files (and, for
            sentence-transformers models, ``modules.json``).
        dimensions: the caller's Matryoshka cut, checked against the model's
            ``matryoshka_dimensions`` when it lists them.

    Raises:
        FileNotFoundError: no ``config.json`` in ``path``.
        ValueError: ``dimensions`` is not one the model supports.
    """
    path = Path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path} is not a model directory (no config.json)")
    config = _read_json(path / "config.json")
    modules = _read_json(path / "modules.json") if (path / "modules.json").is_file() else []
    pooling, dense, normalize = "unknown", [], False
    for m in modules if isinstance(modules, list) else []:
        kind = str(m.get("type", "")).rsplit(".", 1)[-1]
        mdir = path / m.get("path", "")
        if kind == "Pooling":
            pooling = _pooling_mode(_read_json(mdir / "config.json"))
        elif kind == "Dense":
            c = _read_json(mdir / "config.json")
            dense.append(
                DenseLayer(
                    m.get("path", ""),
                    int(c["in_features"]),
                    int(c["out_features"]),
                    str(c.get("activation_function", "torch.nn.modules.linear.Identity")),
                )
            )
        elif kind == "Normalize":
            normalize = True
    if not modules:
        # Not a sentence-transformers directory: vLLM's default embedding head normalizes.
        normalize = True
        pooling = str(config.get("pooling", "unknown"))
    st_cfg = _read_json(path / "sentence_bert_config.json")
    prompts = _read_json(path / "config_sentence_transformers.json").get("prompts", {}) or {}
    arch = [str(a) for a in config.get("architectures", []) or []]
    causal = (
        bool(config.get("is_decoder"))
        or str(config.get("model_type")) in CAUSAL_MODEL_TYPES
        or any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in arch)
    )
    if config.get("is_causal") is False:
        causal = False
    supported = config.get("matryoshka_dimensions")
    if dimensions is not None:
        width = dense[-1].out_features if dense else int(config.get("hidden_size", 0))
        if dimensions < 1 or (width and dimensions > width):
            raise ValueError(f"dimensions={dimensions} outside 1..{width} for {path}")
        if supported and dimensions not in supported:
            raise ValueError(f"dimensions={dimensions} not in the model's matryoshka_dimensions {supported}")
    return ModelCard(
        path=path,
        name=str(config.get("_name_or_path") or path.name) if config.get("_name_or_path") else path.name,
        causal=causal,
        pooling=pooling,
        head=Head(dense=tuple(dense), dimensions=dimensions, normalize=normalize),
        max_seq_length=st_cfg.get("max_seq_length"),
        query_prefix=str(prompts.get("query", "")),
        document_prefix=str(prompts.get("document", prompts.get("passage", ""))),
        lowercases_text=bool(st_cfg.get("do_lower_case", False)),
        fingerprint=_fingerprint(path),
    )


def check_late_chunking_allowed(
    card: ModelCard, *, allow_causal: bool, allow_non_mean_pooling: bool
) -> tuple[str, ...]:
    """Refuse models that late chunking does not fit (SPEC section 4) unless opted in.

    Returns:
        The opt-ins that were *used* (``"causal"``, ``"pooling=cls"``...), for lineage.

    Raises:
        ModelNotSupportedError: causal attention or non-mean pooling without the opt-in,
            or sentence-transformers ``do_lower_case`` (a text normalization before tokenizing).
    """
    used: list[str] = []
    if card.lowercases_text:
        raise ModelNotSupportedError(
            f"{card.path}: sentence-transformers do_lower_case=true changes the text before "
            "tokenization, so offsets would not point into the source text"
        )
    if card.causal:
        if not allow_causal:
            raise ModelNotSupportedError(
                f"{card.path}: the model is causal (decoder attention): a chunk vector would carry "
                "left context only. Pass allow_causal=True to late-chunk it anyway."
            )
        used.append("causal")
    if card.pooling != "mean":
        if not allow_non_mean_pooling:
            raise ModelNotSupportedError(
                f"{card.path}: the model's sequence pooling is {card.pooling!r}, not mean: the mean "
                "of a span is not what it was trained to produce. Pass allow_non_mean_pooling=True "
                "to late-chunk it anyway."
            )
        used.append(f"pooling={card.pooling}")
    return tuple(used)
