"""What late chunking needs to know about a model, read from its directory (contract section 4).

Sources, in order: the sentence-transformers files (``modules.json``, the
``Pooling`` module's ``config.json``, ``Dense`` modules, ``Normalize``,
``sentence_bert_config.json``, ``config_sentence_transformers.json``), then the
Hugging Face ``config.json``. Nothing is downloaded.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from latechunk_dagster.core.errors import ModelNotSupportedError
from latechunk_dagster.core.head import DenseLayer, Head
from latechunk_dagster.core.model_files import check_model_files, read_json
from latechunk_dagster.core.positions import ABSOLUTE_POSITION_TYPES
from latechunk_dagster.core.positions import PositionLimits as PositionLimits  # re-exported
from latechunk_dagster.core.positions import position_limits as position_limits  # re-exported

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
        include_prompt: the Pooling module's ``include_prompt``; ``False`` means the prompt's tokens
            (and the leading special token) are left out of the means (sentence-transformers'
            ``prompt_length``), which :class:`LateChunker` honours.
        lowercases_text: sentence-transformers ``do_lower_case`` (text normalization
            outside the tokenizer: refused, contract section 6).
        fingerprint: sha256 over the weight and config files (hex), for lineage.
        model_type, architectures: ``config.json``'s ``model_type`` and ``architectures``.
        hidden_size: width of the encoder's states (``hidden_size``, NomicBert's ``n_embd``, ``d_model``).
        remote_code: the ``auto_map`` entries of ``config.json`` / ``tokenizer_config.json``
            (``"AutoConfig: configuration_hf_nomic_bert.NomicBertConfig"``...): code shipped with the
            model that loading it runs; empty when there is none (contract section 4).
        limits: the model's own input-length limits (:class:`PositionLimits`).
        config_fills: documented defaults for settings the engine needs and the config omits
            (``position_embedding_type="absolute"`` for BERT-family configs written by transformers 5),
            handed to vLLM as ``hf_overrides``; the model directory is never modified.
    """

    path: Path
    name: str
    causal: bool
    pooling: str
    head: Head
    max_seq_length: int | None
    include_prompt: bool
    query_prefix: str
    document_prefix: str
    lowercases_text: bool
    fingerprint: str
    model_type: str = ""
    architectures: tuple[str, ...] = ()
    hidden_size: int | None = None
    remote_code: tuple[str, ...] = ()
    limits: PositionLimits | None = None
    config_fills: tuple[tuple[str, Any], ...] = ()


def _remote_code(path: Path, config: dict[str, Any]) -> tuple[str, ...]:
    """``auto_map`` entries of the config and tokenizer config: code that loading the model runs."""
    out: list[str] = []
    for cfg in (config, read_json(path, path / "tokenizer_config.json")):
        amap = cfg.get("auto_map")
        if isinstance(amap, dict):
            out += [f"{k}: {v if isinstance(v, str) else ', '.join(str(x) for x in v if x)}" for k, v in amap.items()]
        elif isinstance(amap, list):
            out += [str(v) for v in amap]
    return tuple(out)


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


#: sentence-transformers' legacy boolean keys of the Pooling config and the mode each selects
#: (``sentence_transformers/sentence_transformer/modules/pooling.py``, v6.2).
_LEGACY_POOLING_KEYS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
_POOLING_MODES = ("cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")
#: Every key a sentence-transformers Pooling config may hold; any other is refused by name.
_POOLING_KEYS = {
    "word_embedding_dimension",
    "embedding_dimension",
    "pooling_mode",
    "include_prompt",
    *_LEGACY_POOLING_KEYS,
}
#: Dense config keys with the value we can honour (``None``: any value is read and used).
_DENSE_KEYS: dict[str, Any] = {
    "in_features": None,
    "out_features": None,
    "bias": None,
    "activation_function": None,
    "module_input_name": "sentence_embedding",
    "module_output_name": ("sentence_embedding", None),
    "use_residual": False,
}
_NORMALIZE_KEYS: dict[str, Any] = {
    "module_input_name": "sentence_embedding",
    "module_output_name": ("sentence_embedding", None),
}
#: Activations of a Dense module we know (``torch.nn`` classes): Identity is affine; the others are
#: non-linear and refused on the token-state path (:attr:`Head.linear_projection`).
_KNOWN_ACTIVATIONS = frozenset(
    {"Identity", "Tanh", "ReLU", "GELU", "Sigmoid", "SiLU", "LeakyReLU", "ELU", "Softplus", "Hardtanh", "Mish"}
)


def _pooling_modes(path: Path, cfg: dict[str, Any]) -> tuple[tuple[str, ...], bool]:
    """The Pooling module's modes and ``include_prompt``, read as sentence-transformers 6.2 reads them.

    ``pooling_mode`` (a name or a list) wins over the legacy ``pooling_mode_*`` booleans; no
    mode at all means ``mean`` (sentence-transformers' default).

    Raises:
        ModelNotSupportedError: a key sentence-transformers does not define, or an unknown mode
            (never ignored: an unread setting would change what a vector means).
    """
    unknown = sorted(set(cfg) - _POOLING_KEYS)
    if unknown:
        raise ModelNotSupportedError(f"{path}: Pooling config has settings this package does not know: {unknown}")
    mode = cfg.get("pooling_mode")
    if mode is not None:
        modes = (mode,) if isinstance(mode, str) else tuple(str(m) for m in mode)
    else:
        modes = tuple(m for k, m in _LEGACY_POOLING_KEYS.items() if cfg.get(k) is True) or ("mean",)
    bad = [m for m in modes if m not in _POOLING_MODES]
    if bad:
        raise ModelNotSupportedError(f"{path}: unknown pooling_mode {bad} (known: {list(_POOLING_MODES)})")
    include = cfg.get("include_prompt", True)
    if not isinstance(include, bool):
        raise ModelNotSupportedError(f"{path}: Pooling include_prompt must be true or false, got {include!r}")
    return modes, include


def _check_keys(path: Path, kind: str, cfg: dict[str, Any], allowed: dict[str, Any]) -> None:
    """Refuse (by name) a module setting we do not read, or one set to a value we cannot honour."""
    for key, value in cfg.items():
        if key not in allowed:
            raise ModelNotSupportedError(f"{path}: {kind} setting {key}={value!r} is not supported")
        want = allowed[key]
        if want is not None and value not in (want if isinstance(want, tuple) else (want,)):
            raise ModelNotSupportedError(f"{path}: {kind} setting {key}={value!r} is not supported (only {want!r} is)")


def _check_module_order(path: Path, order: list[str]) -> None:
    """Modules must run Transformer, Pooling, Dense..., Normalize (the order the head applies them)."""
    if not order:
        return
    rank = {"Transformer": 0, "Pooling": 1, "Dense": 2, "Normalize": 3}
    ranks = [rank[k] for k in order]
    ok = (
        ranks[:2] == [0, 1] and ranks == sorted(ranks) and order.count("Normalize") <= 1 and order.count("Pooling") == 1
    )
    if not ok:
        raise ModelNotSupportedError(
            f"{path}: module order {order} is not supported (expected Transformer, Pooling, Dense..., Normalize)"
        )


def read_model_card(path: str | Path, dimensions: int | None = None) -> ModelCard:
    """Read a model directory.

    Args:
        path: directory with ``config.json`` and tokenizer files (and, for
            sentence-transformers models, ``modules.json``).
        dimensions: the caller's Matryoshka cut, checked against the model's
            ``matryoshka_dimensions`` when it lists them.

    Raises:
        FileNotFoundError: no ``config.json`` in ``path``.
        ModelNotSupportedError: a file of the directory is a Git LFS pointer, or a configuration
            file is not JSON (:mod:`~latechunk_dagster.core.model_files`: naming the directory and the file).
        ValueError: ``dimensions`` is not one the model supports.
        ModelNotSupportedError: a sentence-transformers setting that would change the vectors and
            that this package does not honour, named in the message: an unknown Pooling key or
            mode, a Pooling width other than the hidden size, a Dense module with
            ``use_residual``, another input/output feature or an unknown activation, a Normalize
            on another feature, a module other than Transformer/Pooling/Dense/Normalize, or
            those modules in another order. (Pooling modes other than ``mean`` are refused
            later, by :func:`check_late_chunking_allowed`, unless opted in.)
    """
    path = Path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path} is not a model directory (no config.json)")
    check_model_files(path, weights=False)  # an LFS pointer for a file: one line naming it, before any load
    config = read_json(path, path / "config.json")
    modules = read_json(path, path / "modules.json", list)
    pooling, dense, normalize, include_prompt = "unknown", [], False, True
    order: list[str] = []
    for m in modules if isinstance(modules, list) else []:
        kind = str(m.get("type", "")).rsplit(".", 1)[-1]
        mdir = path / m.get("path", "")
        order.append(kind)
        if kind == "Transformer":
            continue
        if kind == "Pooling":
            pcfg = read_json(path, mdir / "config.json")
            modes, include_prompt = _pooling_modes(path, pcfg)
            width = pcfg.get("embedding_dimension", pcfg.get("word_embedding_dimension"))
            hidden = _hidden_size(config)
            if width is not None and hidden is not None and int(width) != int(hidden):
                raise ModelNotSupportedError(
                    f"{path}: Pooling embedding_dimension={width} differs from the encoder's hidden_size={hidden}"
                )
            pooling = "+".join(modes)
        elif kind == "Dense":
            c = read_json(path, mdir / "config.json")
            _check_keys(path, f"Dense module {m.get('path', '')!r}", c, _DENSE_KEYS)
            act = str(c.get("activation_function") or "torch.nn.modules.linear.Identity")
            if act.rsplit(".", 1)[-1] not in _KNOWN_ACTIVATIONS:
                raise ModelNotSupportedError(
                    f"{path}: Dense module {m.get('path', '')!r} activation_function={act!r} is not supported "
                    f"(known: {sorted(_KNOWN_ACTIVATIONS)})"
                )
            dense.append(DenseLayer(m.get("path", ""), int(c["in_features"]), int(c["out_features"]), act))
        elif kind == "Normalize":
            _check_keys(path, "Normalize module", read_json(path, mdir / "config.json"), _NORMALIZE_KEYS)
            normalize = True
        else:
            raise ModelNotSupportedError(
                f"{path}: sentence-transformers module {m.get('type')!r} ({m.get('path', '')!r}) is not supported: "
                "the head may hold Transformer, Pooling, Dense and Normalize modules only"
            )
    _check_module_order(path, order)
    st_cfg = read_json(path, path / "sentence_bert_config.json")
    prompts = read_json(path, path / "config_sentence_transformers.json").get("prompts", {}) or {}
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
        width = dense[-1].out_features if dense else int(_hidden_size(config) or 0)
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
        include_prompt=include_prompt,
        query_prefix=str(prompts.get("query", "")),
        document_prefix=str(prompts.get("document", prompts.get("passage", ""))),
        lowercases_text=bool(st_cfg.get("do_lower_case", False)),
        fingerprint=_fingerprint(path),
        model_type=str(config.get("model_type", "")),
        architectures=tuple(arch),
        hidden_size=_hidden_size(config),
        remote_code=_remote_code(path, config),
        limits=position_limits(config),
        config_fills=_config_fills(config),
    )


def _hidden_size(config: dict[str, Any]) -> int | None:
    """The encoder's state width: ``hidden_size``, else NomicBert's ``n_embd``, else ``d_model``."""
    for key in ("hidden_size", "n_embd", "d_model"):
        if config.get(key) is not None:
            return int(config[key])
    return None


def _config_fills(config: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    """Documented defaults for settings vLLM needs and the config omits (see :attr:`ModelCard.config_fills`)."""
    fills: list[tuple[str, Any]] = []
    if str(config.get("model_type", "")) in ABSOLUTE_POSITION_TYPES and "position_embedding_type" not in config:
        fills.append(("position_embedding_type", "absolute"))
    return tuple(fills)


def check_late_chunking_allowed(
    card: ModelCard, *, allow_causal: bool, allow_non_mean_pooling: bool, trust_remote_code: bool = False
) -> tuple[str, ...]:
    """Refuse models that late chunking does not fit (contract section 4) unless opted in.

    Returns:
        The opt-ins that were *used* (``"trust_remote_code"``, ``"causal"``, ``"pooling=cls"``...),
        for lineage. ``trust_remote_code`` is listed only when the model ships code (``auto_map``).

    Raises:
        ModelNotSupportedError: code shipped with the model without ``trust_remote_code``, causal
            attention or non-mean pooling without the opt-in, or sentence-transformers
            ``do_lower_case`` (a text normalization before tokenizing).
    """
    used: list[str] = []
    if card.remote_code:
        if not trust_remote_code:
            raise ModelNotSupportedError(
                f"{card.path}: the model's configuration or code ships with it ({'; '.join(card.remote_code)}), "
                "and loading it runs that code. Pass trust_remote_code=True to load it anyway "
                "(recorded in lineage)."
            )
        used.append("trust_remote_code")
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
    if "+" in card.pooling:
        raise ModelNotSupportedError(
            f"{card.path}: the model's Pooling concatenates pooling_mode {card.pooling.split('+')}: a span "
            "mean has another width and meaning; no opt-in can make it fit"
        )
    if card.pooling == "mean_sqrt_len_tokens" and card.head.normalize and not card.head.dense:
        # sum / sqrt(n) is the mean times sqrt(n): the same direction, so after the L2 norm (a
        # Matryoshka cut keeps the factor too) the vectors are the mean's: honoured, no opt-in.
        return tuple(used)
    if card.pooling != "mean":
        if not allow_non_mean_pooling:
            raise ModelNotSupportedError(
                f"{card.path}: the model's sequence pooling is {card.pooling!r} (Pooling pooling_mode), not "
                "mean: the mean "
                "of a span is not what it was trained to produce. Pass allow_non_mean_pooling=True "
                "to late-chunk it anyway."
            )
        used.append(f"pooling={card.pooling}")
    return tuple(used)
