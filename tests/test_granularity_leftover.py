"""Which tables are a table definition's (issue 39 C5, issue 40 item 3), through real shard runs.

Real engine (the shipped model), real LanceDB in a temp dir, the shard run both orchestrators call
(:func:`~latechunk_dagster.pipeline.shard.run_shard`, which opens the definition's tables). A table
is a granularity of a definition by what its rows say, not by a name prefix; a granularity removed
from the definition has its table dropped by the next run, named in a warning; until then the
chain error names the table that does not fit.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from latechunk_dagster import FixedTokens, LateChunker, Paragraphs, sink
from latechunk_dagster.pipeline.shard import ShardSettings, run_shard
from latechunk_dagster.sink.catalog import table_names
from latechunk_dagster.sink.database import LanceDBSettings
from latechunk_dagster.sink.granularity_tables import definition_granularities, granularity_tables
from latechunk_dagster.sink.search import search
from latechunk_dagster.sources.files import Document

TEXTS = {
    "owls": "Owls hunt at night. They fly almost silently.\n\nTheir ears sit at different heights.",
    "tea": "Green tea is steamed. Black tea is oxidised.\n\nBoth come from one plant.",
}
SMALL, BIG = FixedTokens(chunk_size=8), Paragraphs(max_tokens=16)


def shard_run(chunker: LateChunker, db: LanceDBSettings, strategy: object, table: str, log: logging.Logger) -> None:
    run_shard(
        chunker,
        [Document.from_text(d, t) for d, t in TEXTS.items()],
        "p",
        strategy,  # type: ignore[arg-type]
        rejected_table=db.rejected_table(sink.REJECTED_TABLE),
        run_id="r",
        settings=ShardSettings(),
        log=log,
        db=db,
        table_name=table,
    )


def test_another_definitions_table_is_not_a_granularity(chunker: LateChunker, tmp_path: Path) -> None:
    """The demo's ``chunks_sentences32``-like tables beside the README's ``chunks_minilm`` (one strategy)."""
    db, log = LanceDBSettings(uri=str(tmp_path)), logging.getLogger("test")
    shard_run(chunker, db, {"small": SMALL, "big": BIG}, "chunks", log)
    shard_run(chunker, db, SMALL, "chunks_minilm", log)
    conn = db.connect()
    assert sorted(definition_granularities(conn, "chunks")) == ["big", "small"]
    assert list(granularity_tables(conn, "chunks")) == ["small", "big"]
    with pytest.raises(ValueError, match=r"no table 'chunks' .*granularities of 'chunks': big, small\)$"):
        search("owls", chunker=chunker, uri=str(tmp_path), table_name="chunks")
    refused = r"table 'chunks_minilm' is not granularity 'minilm' of 'chunks': its rows say granularity ''"
    with pytest.raises(ValueError, match=refused):
        search("owls", chunker=chunker, uri=str(tmp_path), table_name="chunks", granularity="minilm")
    hits = search("owls", chunker=chunker, uri=str(tmp_path), table_name="chunks", granularity="small", k=1)
    assert hits[0].doc_id == "owls"


def test_a_removed_granularitys_table_is_named_then_dropped(
    chunker: LateChunker, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db, log = LanceDBSettings(uri=str(tmp_path)), logging.getLogger("test")
    shard_run(chunker, db, {"small": SMALL, "big": BIG}, "chunks", log)
    # a second definition of the same name written beside it (no run of the first one since):
    # two granularities link into 'big', the chain error names the one that does not fit
    shard_run(chunker, db, {"tiny": FixedTokens(chunk_size=4), "big": BIG}, "other", log)
    conn = db.connect()
    conn.create_table("chunks_tiny", data=conn.open_table("other_tiny").to_arrow())  # its rows say 'tiny'
    with pytest.raises(ValueError) as broken:
        granularity_tables(conn, "chunks")
    message = str(broken.value)
    assert "does not fit it" in message and ("'chunks_tiny'" in message or "'chunks_small'" in message)
    assert "drop_table" in message

    caplog.set_level(logging.WARNING)
    shard_run(chunker, db, {"small": SMALL, "big": BIG}, "chunks", log)  # the definition's next run
    assert "dropped LanceDB table 'chunks_tiny'" in caplog.text
    assert "chunks_tiny" not in table_names(conn) and list(granularity_tables(conn, "chunks")) == ["small", "big"]

    # a table whose rows say it is a granularity of 'chunks' but link with none of its tables (another
    # definition that shares the name, like the demo's tables beside a user's own 'chunks'): kept
    shard_run(chunker, db, {"alien": FixedTokens(chunk_size=4), "zeta": BIG}, "x", log)
    conn.create_table("chunks_alien", data=conn.open_table("x_alien").to_arrow())
    shard_run(chunker, db, {"small": SMALL}, "chunks", log)  # 'big' removed from the definition
    assert "dropped LanceDB table 'chunks_big'" in caplog.text and "'chunks_alien'" not in caplog.text
    tables = set(table_names(conn))
    assert {"chunks_small", "chunks_alien", "other_tiny", "other_big"} <= tables and "chunks_big" not in tables
