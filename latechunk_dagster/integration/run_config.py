"""Run config of a chunk asset (:func:`~latechunk_dagster.late_chunk_assets`): the strategy of each
granularity and the shard run's settings, checked before the engine loads.

The rule of one strategy's fields over a default is the one Airflow's operator applies too
(:func:`~latechunk_dagster.pipeline.shard.strategy_from_run_config`); a table of several
granularities takes one set of those fields per granularity, over that granularity's default.
"""

import dataclasses
from collections.abc import Mapping

import dagster as dg
from pydantic import Field

from latechunk_dagster.core.chunking import STRATEGIES, ChunkingStrategy
from latechunk_dagster.core.granularities import SINGLE
from latechunk_dagster.pipeline.shard import CHAR_SPANS_REFUSAL, ShardSettings, strategy_from_run_config

#: The strategy fields of run config, in the order an error lists them.
STRATEGY_FIELDS = ("chunk_size", "max_tokens", "language", "segmenter")


class StrategyConfig(dg.Config):
    """Run config of one strategy: a name and its parameters, over a default strategy.

    ``strategy`` is one of ``fixed_tokens`` (uses ``chunk_size``), ``sentences``, ``paragraphs``,
    ``markdown_sections`` (use ``max_tokens``, ``language`` and ``segmenter``) or ``given_chunks``
    (each document's own chunks, read from the store's ``chunks_column``; no parameter).
    ``char_spans`` needs spans per document and is not available from run config.
    """

    strategy: str | None = Field(
        default=None,
        description="fixed_tokens | sentences | paragraphs | markdown_sections | given_chunks (empty: the default).",
    )
    chunk_size: int | None = Field(
        default=None, description="Tokens per chunk for fixed_tokens (special tokens count)."
    )
    max_tokens: int | None = Field(default=None, description="Token budget per chunk for the boundary strategies.")
    segmenter: str | None = Field(default=None, description="Sentence segmenter: sentencex (default) or pysbd.")
    language: str | None = Field(
        default=None, description="Segmenter language; an unsupported one fails the run before the engine loads."
    )

    def is_set(self) -> bool:
        """True when any strategy field is set (else the default strategy is used as it is)."""
        return any(getattr(self, f) is not None for f in ("strategy", *STRATEGY_FIELDS))

    def build(self, default: ChunkingStrategy) -> ChunkingStrategy:
        """The strategy of this run: ``default`` with the fields that are set replaced.

        Raises:
            ValueError: unknown strategy, ``char_spans``, a missing parameter (``fixed_tokens``
                without ``chunk_size``, unless it is the default strategy), parameter values the
                strategy refuses, or a field that the chosen strategy does not take (``chunk_size``
                with ``sentences``, ``language`` with ``fixed_tokens``, any with ``given_chunks``...:
                set, it would be ignored). The rule is Airflow's too
                (:func:`~latechunk_dagster.pipeline.shard.strategy_from_run_config`).
        """
        name = self.strategy or default.name
        if name == "char_spans":
            raise ValueError(CHAR_SPANS_REFUSAL)
        if name in STRATEGIES:
            takes = {f.name for f in dataclasses.fields(STRATEGIES[name])}  # type: ignore[arg-type]
            ignored = [f for f in STRATEGY_FIELDS if getattr(self, f) is not None and f not in takes]
            if ignored:
                raise ValueError(
                    f"run config sets {', '.join(f'{f}={getattr(self, f)!r}' for f in ignored)}, which strategy "
                    f"{name!r} does not take; remove it or choose a strategy that uses it"
                )
        params = {f: getattr(self, f) for f in STRATEGY_FIELDS}
        return strategy_from_run_config(self.strategy, params, default)


class ChunkingConfig(StrategyConfig):
    """Run config of a chunk asset: which strategy cuts documents into chunks (recorded in lineage),
    and the shard run's settings.

    A table of one strategy takes the strategy fields of :class:`StrategyConfig` (every field left
    empty takes the factory's default strategy). A table of several granularities
    (``late_chunk_assets(strategies=...)``) takes ``strategies: {granularity: {strategy: ...,
    max_tokens: ...}}`` instead: each granularity named there gets that strategy over its default,
    the others keep their default.
    """

    strategies: dict[str, StrategyConfig] = Field(
        default_factory=dict,
        description="Per granularity of a table of several (its name: strategy fields); empty: the defaults.",
    )
    force: bool = Field(default=False, description="Re-encode every document, not only new or changed ones.")
    batch_tokens: int = Field(
        default=0, description="Document tokens per engine call; 0: the default (8,192 on CPU, 131,072 on GPU)."
    )
    max_rejected_share: float = Field(
        default=ShardSettings.max_rejected_share,
        description="A reason that rejects at least this share of a shard's documents fails the shard (old rows kept).",
    )
    systemic_min_documents: int = Field(
        default=ShardSettings.systemic_min_documents,
        description="...of at least this many documents (fewer: only all-rejected fails the shard).",
    )

    def shard_settings(self, host_workers: int | None, chunks_column: str | None = None) -> ShardSettings:
        """The shard run's settings (the same :class:`ShardSettings` Airflow's operator builds);
        ``chunks_column``: the documents' column of their own chunks (``given_chunks``), or ``None``.

        Raises:
            ValueError: a setting out of range, naming it.
        """
        return ShardSettings(
            batch_tokens=self.batch_tokens,
            force=self.force,
            max_rejected_share=self.max_rejected_share,
            systemic_min_documents=self.systemic_min_documents,
            host_workers=host_workers,
            chunks_column=chunks_column,
        )

    def build_granularities(self, defaults: Mapping[str, ChunkingStrategy]) -> dict[str, ChunkingStrategy]:
        """The strategy of each granularity of this run, ``{name: strategy}`` in the order of ``defaults``.

        Args:
            defaults: the table definition's granularities (``{"": strategy}`` for one strategy).

        Raises:
            ValueError: as :meth:`StrategyConfig.build` (naming the granularity); ``strategies`` on a
                table of one strategy; the strategy fields on a table of several granularities; a
                granularity name the table does not have (naming those it has).
        """
        if list(defaults) == [SINGLE]:
            if self.strategies:
                raise ValueError(
                    f"run config sets strategies for {sorted(self.strategies)}, but this table has one strategy: "
                    "set strategy and its parameters instead"
                )
            return {SINGLE: self.build(defaults[SINGLE])}
        if self.is_set():
            raise ValueError(
                f"this table has the granularities {list(defaults)}: choose a strategy per granularity under "
                "strategies: {name: {strategy: ..., max_tokens: ...}}, not with the top-level strategy fields"
            )
        unknown = sorted(set(self.strategies) - set(defaults))
        if unknown:
            raise ValueError(
                f"run config names granularities {unknown} this table does not have; it has {list(defaults)}"
            )
        out = {}
        for name, default in defaults.items():
            chosen = self.strategies.get(name)
            try:
                out[name] = chosen.build(default) if chosen is not None else default
            except ValueError as exc:
                raise ValueError(f"granularity {name!r}: {exc}") from None
        return out
