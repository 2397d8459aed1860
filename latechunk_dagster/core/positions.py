"""How many input tokens a model takes, and how many its states are exact for, from its ``config.json``.

Read by :func:`latechunk_dagster.core.model_card.read_model_card` (contract section 5: the window
length of long documents).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PositionLimits:
    """How many input tokens a model takes, and how many its states are exact for, read from ``config.json``.

    Attributes:
        positions: the most input tokens the model has positions for: ``max_position_embeddings``;
            for RoBERTa-family models (XLM-R, E5, BGE-M3) minus ``pad_token_id + 1``, because their
            position ids start after the padding index (514 -> 512); for NomicBert ``n_positions``.
        exact: the most input tokens for which vLLM's states equal the model's own code:
            ``positions``, except for a NomicBert model with dynamic NTK scaling
            (``rotary_scaling_factor`` or a ``dynamic`` ``rope_scaling``), whose own code changes
            the rotary base for an input longer than ``max_trained_positions`` (by the input's
            length) while vLLM uses one base for the whole engine: there ``exact`` is
            ``max_trained_positions``, and longer documents are encoded in windows of that length.
        dynamic_ntk: the NomicBert dynamic NTK setting found (``"rotary_scaling_factor=2.0"``), or ``""``.
        trained: ``max_trained_positions`` (NomicBert), else ``positions``.
    """

    positions: int
    exact: int
    dynamic_ntk: str = ""
    trained: int = 0


#: model types whose position ids start after the padding index (``create_position_ids_from_input_ids``
#: in transformers' RoBERTa family): ``max_position_embeddings - (pad_token_id + 1)`` usable positions.
PADDED_POSITION_TYPES = frozenset({"roberta", "xlm-roberta", "camembert", "xlm-roberta-xl", "data2vec-text"})
#: BERT-family model types whose vLLM implementation reads ``position_embedding_type``; transformers 5
#: no longer writes it, and its documented default (transformers 4 ``BertConfig``) is ``"absolute"``.
ABSOLUTE_POSITION_TYPES = frozenset({"bert", "roberta", "xlm-roberta", "camembert", "xlm-roberta-xl"})


def position_limits(config: dict[str, Any]) -> PositionLimits:
    """The model's input-length limits from its ``config.json`` (see :class:`PositionLimits`)."""
    mtype = str(config.get("model_type", ""))
    if mtype == "nomic_bert":
        positions = int(config.get("n_positions") or config.get("max_position_embeddings") or 2048)
        trained = int(config.get("max_trained_positions") or positions)
        scaling = config.get("rope_scaling") or {}
        ntk = ""
        if config.get("rotary_scaling_factor"):
            ntk = f"rotary_scaling_factor={config['rotary_scaling_factor']}"
        elif isinstance(scaling, dict) and scaling.get("rope_type", scaling.get("type")) == "dynamic":
            ntk = f"rope_scaling={scaling}"
        return PositionLimits(positions, min(positions, trained) if ntk else positions, ntk, trained)
    positions = int(config.get("max_position_embeddings") or config.get("n_positions") or 512)
    if mtype in PADDED_POSITION_TYPES:
        positions -= int(config.get("pad_token_id", 1)) + 1
    return PositionLimits(positions, positions, "", positions)
