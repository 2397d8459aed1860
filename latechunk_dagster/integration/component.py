"""A Dagster component (``dg`` YAML) over :func:`~latechunk_dagster.late_chunk_assets`.

``defs.yaml`` of a component instance::

    type: latechunk_dagster.integration.component.LateChunkComponent
    attributes:
      name: chunk_vectors
      key_prefix: minilm
      table_name: chunks_minilm
      strategy: {name: sentences, params: {max_tokens: 128}}
      engine: {model: "{{ env.MODEL_DIR }}", max_model_len: 256}
      lancedb: {uri: /data/lancedb}
      store: {path: /data/documents}

Several granularities of one encode (a table and a chunk asset per granularity, finest first;
:func:`~latechunk_dagster.late_chunk_assets`'s ``strategies``) take ``strategies:`` instead of
``strategy:``::

      strategies:
        sentence: {name: given_chunks}   # each row's own chunks: store: {chunks_column: ...}
        paragraph: {name: paragraphs, params: {max_tokens: 512}}

``engine``, ``lancedb`` and ``store`` are optional: when given, the component also binds those
resources under ``engine_resource_key`` / ``lancedb_resource_key`` / ``store_resource_key``;
otherwise the project provides them. ``engine: {kind: transformers, model: ...}`` chooses the light
transformers engine (:class:`~latechunk_dagster.integration.resources.TransformersEngineResource`);
``kind: vllm`` (the default) the in-process vLLM engine; the other keys are that resource's fields.
"""

import dataclasses
from typing import Any

import dagster as dg
from pydantic import Field

from latechunk_dagster.core.chunking import STRATEGIES, ChunkingStrategy, strategy_from_config
from latechunk_dagster.integration.factory import ENGINE_POOL, late_chunk_assets
from latechunk_dagster.integration.resources import (
    ENGINE_RESOURCES,
    ChunkerResource,
    DocumentStoreResource,
    LanceDBResource,
)
from latechunk_dagster.sink import CHUNK_TABLE, REJECTED_TABLE


def engine_resource(fields: dict[str, Any]) -> ChunkerResource:
    """The engine resource of a component's ``engine:`` block: ``kind`` (``vllm`` by default, or
    ``transformers``) picks the class of :data:`~latechunk_dagster.integration.resources.ENGINE_RESOURCES`,
    the other keys are its fields.

    Raises:
        ValueError: an unknown ``kind``, naming the known ones.
    """
    fields = dict(fields)
    kind = fields.pop("kind", "vllm")
    if kind not in ENGINE_RESOURCES:
        raise ValueError(f"engine kind {kind!r} is not one of {sorted(ENGINE_RESOURCES)}")
    return ENGINE_RESOURCES[kind](**fields)


class StrategyModel(dg.Model):
    """A chunking strategy by name and parameters (:func:`latechunk_dagster.core.chunking.strategy_from_config`).

    ``params`` left out: ``{max_tokens: 128}`` for the strategies that take ``max_tokens``, none for
    the others (``{name: given_chunks}``).
    """

    name: str = "sentences"
    params: dict[str, Any] = Field(default_factory=lambda: {"max_tokens": 128})

    def build(self) -> ChunkingStrategy:
        """The strategy.

        Raises:
            ValueError: as :func:`~latechunk_dagster.core.chunking.strategy_from_config`.
        """
        params = self.params
        cls = STRATEGIES.get(self.name)
        if "params" not in self.model_fields_set and cls is not None:
            params = {k: v for k, v in params.items() if k in {f.name for f in dataclasses.fields(cls)}}  # type: ignore[arg-type]
        return strategy_from_config(self.name, params)


class LateChunkComponent(dg.Component, dg.Model, dg.Resolvable):
    """One late-chunked LanceDB table (a table per granularity): documents, chunks, checks, sensor, indexes, jobs.

    ``strategy`` makes one table; ``strategies`` (finest first) one table and chunk asset per
    granularity, from one encode per document.
    """

    name: str = "chunk_vectors"
    key_prefix: str | None = None
    group_name: str = "latechunk"
    table_name: str = CHUNK_TABLE
    rejected_table_name: str = REJECTED_TABLE
    pool: str | None = ENGINE_POOL
    strategy: StrategyModel | None = Field(
        default=None, description="The chunking strategy (default: sentences, max_tokens 128); or strategies."
    )
    strategies: dict[str, StrategyModel] | None = Field(
        default=None,
        description="Several granularities {name: strategy}, finest first: one encode, a table per granularity "
        "(<table_name>_<name>), each chunk linked to its parent in the next; instead of strategy.",
    )
    documents_asset: str | None = Field(
        default=None, description="Key (a/b) of an upstream asset of documents; empty: the store resource."
    )
    engine_resource_key: str = "engine"
    lancedb_resource_key: str = "lancedb"
    store_resource_key: str = "store"
    engine: dict[str, Any] | None = Field(
        default=None,
        description="The engine resource: kind (vllm, the default, or transformers) and that resource's fields "
        "(VLLMEngineResource, TransformersEngineResource).",
    )
    lancedb: dict[str, Any] | None = Field(default=None, description="LanceDBResource fields.")
    store: dict[str, Any] | None = Field(default=None, description="DocumentStoreResource fields.")
    index: bool = True
    sensor: bool = True

    def strategy_arguments(self) -> dict[str, Any]:
        """``strategy=`` or ``strategies=`` of :func:`~latechunk_dagster.late_chunk_assets`.

        Raises:
            ValueError: both ``strategy`` and ``strategies``; a strategy that cannot be built
                (naming the granularity).
        """
        if self.strategy is not None and self.strategies is not None:
            raise ValueError("set strategy (one table) or strategies (a table per granularity), not both")
        if self.strategies is None:
            return {"strategy": (self.strategy or StrategyModel()).build()}
        built = {}
        for name, model in self.strategies.items():
            try:
                built[name] = model.build()
            except ValueError as exc:
                raise ValueError(f"strategies.{name}: {exc}") from None
        return {"strategies": built}

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        table = late_chunk_assets(
            name=self.name,
            key_prefix=self.key_prefix,
            group_name=self.group_name,
            pool=self.pool,
            engine_resource_key=self.engine_resource_key,
            lancedb_resource_key=self.lancedb_resource_key,
            store_resource_key=self.store_resource_key,
            documents=self.documents_asset.split("/") if self.documents_asset else None,
            table_name=self.table_name,
            rejected_table_name=self.rejected_table_name,
            **self.strategy_arguments(),
            model=(self.engine or {}).get("model"),
            index=self.index,
            sensor=self.sensor,
        )
        resources: dict[str, Any] = {}
        if self.engine is not None:
            resources[self.engine_resource_key] = engine_resource(self.engine)
        if self.lancedb is not None:
            resources[self.lancedb_resource_key] = LanceDBResource(**self.lancedb)
        if self.store is not None:
            resources[self.store_resource_key] = DocumentStoreResource(**self.store)
        return table.to_definitions(resources=resources or None)
