"""Issue 40: a shard with nothing to encode starts no engine (``engine_start="first_encode"``).

Real parts: the in-process vLLM engine on the shipped model, real LanceDB tables, the pipeline's
``materialize_partition``. The right answer comes from the engine's own start counter and from the
rows the first, eager run wrote.
"""

from __future__ import annotations

from pathlib import Path

from conftest import TEST_ENGINE_ARGS

from latechunk_dagster import LateChunker, Sentences, sink
from latechunk_dagster.core.deferred_engine import DeferredEngine
from latechunk_dagster.pipeline import materialize_partition
from latechunk_dagster.sources.files import Document


def docs(tag: str = "") -> list[Document]:
    return [Document.from_text(f"d{i}", f"Pump {i} is checked every {i + 2} days{tag}. It is old.") for i in range(5)]


def run(chunker: LateChunker, documents: list[Document], tables: tuple, run_id: str, partition: str = "p"):  # noqa: ANN201
    chunks, rejected = tables
    strategy = Sentences(max_tokens=32)
    return materialize_partition(
        chunker, documents, partition, strategy, chunk_table=chunks, rejected_table=rejected, run_id=run_id
    )


def test_a_shard_with_nothing_to_encode_starts_no_engine(minilm_dir: Path, tmp_path: Path) -> None:
    db = sink.connect(str(tmp_path / "db"))
    with LateChunker(minilm_dir, **TEST_ENGINE_ARGS) as eager:
        tables = (
            sink.open_or_create(db, sink.CHUNK_TABLE, sink.chunk_schema(eager.embedding_dim)),
            sink.open_or_create(db, sink.REJECTED_TABLE, sink.REJECTED_SCHEMA),
        )
        run(eager, docs(), tables, "r1")
        eager_settings = eager.settings
    before = tables[0].search().limit(None).to_arrow().sort_by("chunk_id")

    with LateChunker(minilm_dir, engine_start="first_encode", **TEST_ENGINE_ARGS) as chunker:
        engine = chunker.engine
        assert isinstance(engine, DeferredEngine)
        assert chunker.settings == eager_settings  # the same lineage, known before the engine starts
        empty = run(chunker, [], tables, "r2", partition="empty")  # an empty shard
        unchanged = run(chunker, docs(), tables, "r3")
        assert (empty.documents, unchanged.documents_skipped) == (0, 5)
        assert not chunker.engine_started and engine.starts == 0  # no model loaded for either shard
        after = tables[0].search().limit(None).to_arrow().sort_by("chunk_id")
        assert after.column("vector").equals(before.column("vector"))

        changed = run(chunker, [*docs()[:4], *docs("!")[4:]], tables, "r4")  # one document changed
        assert changed.documents_reencoded == 1 and chunker.engine_started and engine.starts == 1
        run(chunker, docs("?"), tables, "r5")  # the next shard reuses the started engine
        assert engine.starts == 1
