"""The converters count in ``vector_config`` (issue 38): a converter upgrade re-encodes the documents
it read, and text read as it is keeps the run's own ``vector_config``, so a text or JSONL store's
rows are not re-encoded by a converter's upgrade. Real engine, real LanceDB, real files.

The right answers: :func:`latechunk_dagster.pipeline.vector_config` (the run's configuration, as a
store of text alone stores it), the run reports (documents skipped / re-encoded) and the generations
log. An upgrade of a converter library cannot happen in a test: the installed version string it is
read from is faked (``faked_upgrade``), which is what an upgrade changes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from latechunk_dagster import LateChunker, MarkdownSections, sink
from latechunk_dagster.pipeline import materialize_partition, vector_config
from latechunk_dagster.pipeline.run_tables import open_run_tables
from latechunk_dagster.sink.database import LanceDBSettings
from latechunk_dagster.sources.converters import base as converter_base
from latechunk_dagster.sources.files import DocumentStore
from tests.document_files import docx_bytes, html_page

STRATEGY = MarkdownSections(max_tokens=64)
FILES: dict[str, bytes] = {
    "docs/tea.html": html_page("Tea", [(1, "Tea", "Green tea is steamed."), (2, "Storage", "Keep dry.")]).encode(),
    "docs/owls.docx": docx_bytes([("h1", "Owls"), ("p", "Owls hunt at night.")]),
    "docs/notes.md": b"# Glaciers\n\nGlaciers carve valleys.",
    "docs/plain.txt": b"Rivers carry sand to the sea.",
}


def faked_upgrade(monkeypatch: pytest.MonkeyPatch, library: str) -> None:
    """Stands in for ``pip install -U <library>``: the version the converter's name is made of changes."""
    real = converter_base.version
    monkeypatch.setattr(converter_base, "version", lambda name: "999.0-faked" if name == library else real(name))


def _store(tmp_path: Path, files: dict[str, bytes] = FILES) -> DocumentStore:
    for doc_id, data in files.items():
        (tmp_path / "store" / doc_id).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "store" / doc_id).write_bytes(data)
    return DocumentStore.from_path(tmp_path / "store")


def _run(chunker: LateChunker, store: DocumentStore, db: Path, run_id: str, *, generations: bool = False):  # noqa: ANN202
    tables = open_run_tables(
        LanceDBSettings(uri=str(db)), "chunks", "rejected_documents", STRATEGY, chunker,
        run_id=run_id, generations=generations,
    )  # fmt: skip
    report = materialize_partition(
        chunker, store.iter_shard("docs"), "docs", STRATEGY,
        chunk_table=tables.chunk_table, rejected_table=tables.rejected_table, run_id=run_id,
    )  # fmt: skip
    return tables, report


def _configs(db: Path, table: str = "chunks") -> dict[str, str]:
    rows = sink.connect(str(db)).open_table(table).to_arrow().select(["doc_id", "vector_config"]).to_pylist()
    return {r["doc_id"]: r["vector_config"] for r in rows}


def test_a_faked_converter_upgrade_re_encodes_the_documents_it_read_only(
    chunker: LateChunker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, db = _store(tmp_path), tmp_path / "db"
    _, first = _run(chunker, store, db, "first")
    assert first.documents_new == len(FILES)
    before = _configs(db)
    run_config = vector_config(chunker.settings, STRATEGY)
    # text read as it is: the run's vector_config, as a store of text alone writes it
    assert before["docs/notes.md"] == before["docs/plain.txt"] == run_config
    assert len({before["docs/tea.html"], before["docs/owls.docx"], run_config}) == 3
    _, again = _run(chunker, store, db, "again")
    assert (again.documents_reencoded, again.documents_skipped) == (0, len(FILES))
    faked_upgrade(monkeypatch, "markdownify")  # the HTML converter's library
    _, upgraded = _run(chunker, store, db, "upgraded")
    assert (upgraded.documents_reencoded, upgraded.documents_skipped) == (1, len(FILES) - 1)
    after = _configs(db)
    assert {d for d in FILES if after[d] != before[d]} == {"docs/tea.html"}
    converters = sink.connect(str(db)).open_table("chunks").to_arrow().select(["doc_id", "converter"]).to_pylist()
    assert {r["converter"] for r in converters if r["doc_id"] == "docs/tea.html"} == {"html/2 markdownify 999.0-faked"}


@pytest.mark.parametrize(
    ("kinds", "enabled_by"), [("mixed", "run"), ("converted_only", "run"), ("mixed", "latechunk generations --enable")]
)
def test_generations_on_a_table_of_converted_documents_keep_its_generation(
    chunker: LateChunker, tmp_path: Path, kinds: str, enabled_by: str
) -> None:
    """A table written before generations, converted documents among its rows (or only those), is
    generation 1 of the run's own key, whether a run turns generations on or the CLI does (it knows
    no run configuration): no new generation is opened and nothing is re-encoded."""
    from latechunk_dagster.sink import generations as gens

    converted = {d: b for d, b in FILES.items() if d.endswith((".html", ".docx"))}
    # mixed: an HTML page named to come first, so the first stored row is a converted document's
    files = {"docs/a_tea.html": FILES["docs/tea.html"], **FILES} if kinds == "mixed" else converted
    store, db = _store(tmp_path, files), tmp_path / "db"
    _run(chunker, store, db, "before")
    first_row = sink.connect(str(db)).open_table("chunks").search().limit(1).to_arrow().to_pylist()[0]
    assert first_row["converter"] is not None  # the row a key is read from first is a converted one
    if enabled_by != "run":
        gens.enable_generations(sink.connect(str(db)), "chunks", "rejected_documents")  # what the CLI calls
    tables, report = _run(chunker, store, db, "with-generations", generations=True)
    assert tables.generation == 1 and tables.table_name == "chunks"
    assert (report.documents_reencoded, report.documents_skipped) == (0, len(files))
