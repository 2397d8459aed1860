"""A real Dagster materialization of a folder of PDF, DOCX, PPTX, HTML, Markdown and text files, with
bad files among them: real vLLM engine, real LanceDB, temp DAGSTER_HOME.

Hand-checked: each document's converted text is written out below from the words its file was made
with; the chunk rows' headings are the document's own, their ranges index that text, the PDF chunks
know their pages, and each bad file is a rejected row naming it and its reason while its neighbours
are written.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from latechunk_dagster import LateChunker, MarkdownSections, late_chunk_assets, sink
from latechunk_dagster.integration.resources import DocumentStoreResource, LanceDBResource
from latechunk_dagster.integration.sensors import sync_partitions
from latechunk_dagster.sources.converters import pdf as pdf_converter
from latechunk_dagster.sources.files import DocumentStore
from tests.conftest import SHARED_ENGINE, session_engine_resource
from tests.document_files import docx_bytes, html_page, pdf_bytes, pptx_bytes, zip_bomb_docx

TABLE = late_chunk_assets(index=False, job_name="chunk", strategy=MarkdownSections(max_tokens=64), sensor=False)

PDF_PAGES = [
    ["Pumps in Rotterdam", "Acme builds pumps in Rotterdam.", "Each pump is tested before it ships."],
    ["Maintenance", "The team repairs pumps within a day."],
]

#: doc_id -> (file bytes, its converted text written by hand)
GOOD: dict[str, tuple[bytes, str]] = {
    "docs/report.pdf": (
        pdf_bytes(PDF_PAGES, outline=[(1, "Pumps in Rotterdam", 0), (2, "Maintenance", 1)]),
        "# Pumps in Rotterdam\nAcme builds pumps in Rotterdam.\nEach pump is tested before it ships.\n\n"
        "## Maintenance\nThe team repairs pumps within a day.",
    ),
    "docs/owls.docx": (
        docx_bytes(
            [("h1", "Owls"), ("p", "Owls hunt at night."), ("h2", "Feathers"), ("p", "Soft edges silence them.")]
        ),
        "# Owls\n\nOwls hunt at night.\n\n## Feathers\n\nSoft edges silence them.",
    ),
    "docs/tea.html": (
        html_page("Tea", [(1, "Tea", "Green tea is steamed."), (2, "Storage", "Keep it dry and dark.")]).encode(),
        "# Tea\n\nGreen tea is steamed.\n\n## Storage\n\nKeep it dry and dark.",
    ),
    "docs/deck.pptx": (
        pptx_bytes([("Lighthouses", ["Keepers log the weather."]), ("Lamps", ["Lenses focus the light."])]),
        "## Lighthouses\n\nKeepers log the weather.\n\n## Lamps\n\nLenses focus the light.",
    ),
    "docs/notes.md": (b"# Glaciers\n\nGlaciers carve valleys.", "# Glaciers\n\nGlaciers carve valleys."),
    "docs/plain.txt": (b"Rivers carry sand to the sea.", "Rivers carry sand to the sea."),
}

#: doc_id -> (file bytes, reason)
BAD: dict[str, tuple[bytes, str]] = {
    "docs/locked.pdf": (pdf_bytes([["secret words"]], password="pw"), "encrypted"),
    "docs/scan.pdf": (pdf_bytes([["scanned words"]], text_layer=False), "no_text_layer"),
    "docs/cut.pdf": (pdf_bytes(PDF_PAGES)[:3000], "unreadable_file"),
    "docs/bomb.docx": (zip_bomb_docx(300 << 20), "too_large"),
}

#: the headings of each good document's chunks, in chunk order (MarkdownSections: one chunk a section)
HEADINGS = {
    "docs/report.pdf": [["Pumps in Rotterdam"], ["Pumps in Rotterdam", "Maintenance"]],
    "docs/owls.docx": [["Owls"], ["Owls", "Feathers"]],
    "docs/tea.html": [["Tea"], ["Tea", "Storage"]],
    "docs/deck.pptx": [["Lighthouses"], ["Lamps"]],
    "docs/notes.md": [["Glaciers"]],
    "docs/plain.txt": [[]],
}


def make_defs(store: Path, db: Path) -> dg.Definitions:
    return dg.Definitions(
        assets=TABLE.assets,
        asset_checks=TABLE.asset_checks,
        jobs=TABLE.jobs,
        resources={
            "engine": session_engine_resource(SHARED_ENGINE["chunker"]),
            "lancedb": LanceDBResource(uri=str(db)),
            "store": DocumentStoreResource(path=str(store)),
        },
    )


def run(defs: dg.Definitions, instance: dg.DagsterInstance) -> dg.ExecuteInProcessResult:
    return defs.resolve_job_def("chunk").execute_in_process(
        instance=instance, partition_key="docs", raise_on_error=False
    )


@pytest.fixture(scope="module")
def env(tmp_path_factory, chunker: LateChunker) -> Iterator[dict[str, Any]]:
    SHARED_ENGINE["chunker"] = chunker
    root = tmp_path_factory.mktemp("converted")
    store, db = root / "store", root / "lancedb"
    (store / "docs").mkdir(parents=True)
    for doc_id, (data, _) in {**GOOD, **BAD}.items():
        (store / doc_id).write_bytes(data)
    (root / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(root / "home")) as instance:
        sync_partitions(instance, DocumentStore.from_path(store), TABLE.partitions_def)
        defs = make_defs(store, db)
        yield {"store": store, "db": db, "defs": defs, "instance": instance, "first": run(defs, instance)}


def chunk_rows(db: Path) -> list[dict]:
    return (
        sink.connect(str(db))
        .open_table("chunks")
        .to_arrow()
        .sort_by([("doc_id", "ascending"), ("chunk_index", "ascending")])
        .to_pylist()
    )


def test_a_mixed_folder_is_chunked_by_its_own_headings_with_ranges_into_the_converted_text(env) -> None:
    result = env["first"]
    assert result.success
    meta = result.get_asset_materialization_events()[0].event_specific_data.materialization.metadata
    assert meta["documents_in"].value == len(GOOD) + len(BAD) and meta["documents_rejected"].value == len(BAD)
    rows = chunk_rows(env["db"])
    by_doc: dict[str, list[dict]] = {}
    for row in rows:
        by_doc.setdefault(row["doc_id"], []).append(row)
    assert sorted(by_doc) == sorted(GOOD)
    for doc_id, (_, text) in GOOD.items():
        chunks = by_doc[doc_id]
        assert [c["headings"] for c in chunks] == HEADINGS[doc_id], doc_id
        for c in chunks:  # a hit is shown from the converted text: text[char_start:char_end]
            assert text[c["char_start"] : c["char_end"]] == c["text"], doc_id
        assert chunks[0]["char_start"] == 0 and chunks[-1]["char_end"] == len(text), doc_id
    assert [c["text"] for c in by_doc["docs/tea.html"]] == [
        "# Tea\n\nGreen tea is steamed.",
        "## Storage\n\nKeep it dry and dark.",
    ]
    # pages (PDF) and slides (PPTX), from 1; none for text read as it is
    assert [(c["page_start"], c["page_end"]) for c in by_doc["docs/report.pdf"]] == [(1, 1), (2, 2)]
    assert [(c["page_start"], c["page_end"]) for c in by_doc["docs/deck.pptx"]] == [(1, 1), (2, 2)]
    assert {(c["page_start"], c["page_end"]) for c in by_doc["docs/notes.md"] + by_doc["docs/owls.docx"]} == {
        (None, None)
    }
    # the converter and its version are the rows' lineage; they count in vector_config
    assert by_doc["docs/report.pdf"][0]["converter"].startswith(f"pdf/{pdf_converter.RULES} pypdfium2 ")
    assert by_doc["docs/owls.docx"][0]["converter"].startswith("docx/2 python-docx ")
    assert by_doc["docs/notes.md"][0]["converter"] is None
    configs = {d: by_doc[d][0]["vector_config"] for d in GOOD}
    assert configs["docs/notes.md"] == configs["docs/plain.txt"]
    assert len({configs[d] for d in ("docs/notes.md", "docs/report.pdf", "docs/owls.docx", "docs/tea.html")}) == 4
    rejected = sink.connect(str(env["db"])).open_table("rejected_documents").to_arrow().to_pylist()
    assert {(r["doc_id"], r["reason"]) for r in rejected} == {(d, reason) for d, (_, reason) in BAD.items()}
    for r in rejected:
        assert r["detail"].startswith(str(env["store"] / r["doc_id"]) + ": ")
    checks = result.get_asset_check_evaluations()
    assert checks and all(c.passed for c in checks), [(c.check_name, c.metadata) for c in checks if not c.passed]


def test_a_converter_upgrade_re_encodes_its_documents_only(env, monkeypatch: pytest.MonkeyPatch) -> None:
    # the upgrade is a monkeypatch of this process: conversion stays here (by default it runs in host
    # worker processes, which import the converter afresh, as an installed upgrade would be)
    from latechunk_dagster.pipeline.config import HOST_WORKERS_ENV

    monkeypatch.setenv(HOST_WORKERS_ENV, "0")
    again = run(env["defs"], env["instance"])
    meta = again.get_asset_materialization_events()[0].event_specific_data.materialization.metadata
    assert again.success and meta["documents_skipped"].value == len(GOOD)
    before = {r["chunk_id"]: r for r in chunk_rows(env["db"])}
    monkeypatch.setattr(pdf_converter, "RULES", pdf_converter.RULES + 1)  # a new PDF converter: same text
    upgraded = run(env["defs"], env["instance"])
    meta = upgraded.get_asset_materialization_events()[0].event_specific_data.materialization.metadata
    assert upgraded.success
    assert (meta["documents_skipped"].value, meta["documents_reencoded"].value) == (len(GOOD) - 1, 1)
    after = {r["chunk_id"]: r for r in chunk_rows(env["db"])}
    changed = {r["doc_id"] for k, r in after.items() if r["run_id"] != before[k]["run_id"]}
    assert changed == {"docs/report.pdf"}
    assert {r["converter"] for r in after.values() if r["doc_id"] == "docs/report.pdf"} == {
        before_row["converter"].replace(f"pdf/{pdf_converter.RULES - 1} ", f"pdf/{pdf_converter.RULES} ")
        for before_row in before.values()
        if before_row["doc_id"] == "docs/report.pdf"
    }


@pytest.mark.parametrize("workers", [1, 2])
def test_host_workers_convert_and_write_the_same_converter_and_pages(
    env, tmp_path: Path, chunker: LateChunker, workers: int
) -> None:
    """The store hands the files' bytes over unconverted; the host workers convert them
    (round robin) and rebuild each document from its fields: a converted one keeps its converter
    and pages, a bad file is rejected by its reason in the worker as in the calling thread."""
    from latechunk_dagster.pipeline import materialize_partition
    from latechunk_dagster.sources.text_files import UnconvertedFile

    db = sink.connect(str(tmp_path / "db"))
    table = sink.open_or_create(db, sink.CHUNK_TABLE, sink.chunk_schema(chunker.embedding_dim))
    rejected = sink.open_or_create(db, sink.REJECTED_TABLE, sink.REJECTED_SCHEMA)
    store = DocumentStore.from_path(env["store"])
    items = list(store.iter_shard("docs", defer_conversion=True))
    unconverted = {i.doc_id for i in items if isinstance(i, UnconvertedFile)}
    # every document file, the zip bomb too (its unpacked limits are checked converting it)
    assert unconverted == {d for d in {**GOOD, **BAD} if not d.endswith((".md", ".txt"))}
    report = materialize_partition(
        chunker, iter(items), "docs", MarkdownSections(max_tokens=64),
        chunk_table=table, rejected_table=rejected, run_id="pooled", host_workers=workers,
    )  # fmt: skip
    assert report.rejected == len(BAD) and report.rejected_reasons == {
        reason: sum(r == reason for _, r in BAD.values()) for _, reason in BAD.values()
    }
    # the converter column is compared by format: the upgrade test above left "pdf/2" rows in env's table
    columns = ["chunk_id", "text", "char_start", "char_end", "headings", "converter", "page_start", "page_end"]
    pooled = table.to_arrow().select(columns).sort_by("chunk_id").to_pylist()
    dagster_rows = sorted(({k: r[k] for k in columns} for r in chunk_rows(env["db"])), key=lambda r: r["chunk_id"])
    for rows in (pooled, dagster_rows):
        for r in rows:
            r["converter"] = r["converter"] and r["converter"].split("/")[0]
    assert pooled == dagster_rows and any(r["page_start"] == 2 for r in pooled)
    assert {r["converter"] for r in pooled} == {"pdf", "docx", "html", "pptx", None}


def test_a_file_that_crashes_its_converter_is_rejected_alone(
    env, tmp_path: Path, chunker: LateChunker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A converter that kills its process (a fault in a PDF library on a hostile file) converts in a child of
    the host worker: that file alone is rejected as ``unreadable_file`` naming it and the exit code, and
    every other document of the partition is written as without it (contract: one bad document does not
    sink its partition)."""
    from latechunk_dagster.pipeline import hostpool, materialize_partition
    from latechunk_dagster.sources.text_files import UnconvertedFile

    store = DocumentStore.from_path(env["store"])
    left_out = "docs/bomb.docx"  # so that the one worker's 2nd file (in store order) is a good one

    def items() -> Iterator[Any]:
        return (i for i in store.iter_shard("docs", defer_conversion=True) if i.doc_id != left_out)

    crashed = [f for f in items() if isinstance(f, UnconvertedFile)][1]
    assert crashed.doc_id in GOOD
    strategy = MarkdownSections(max_tokens=64)
    tables = {}
    for run_id, workers in (("reference", 0), ("crashing", 1)):
        db = sink.connect(str(tmp_path / run_id))
        tables[run_id] = chunks, rejected = (
            sink.open_or_create(db, sink.CHUNK_TABLE, sink.chunk_schema(chunker.embedding_dim)),
            sink.open_or_create(db, sink.REJECTED_TABLE, sink.REJECTED_SCHEMA),
        )
        hostpool.shutdown_host_pools()
        if workers:
            monkeypatch.setenv(hostpool.TEST_WORKER_KILL_ENV, "converter")
        # the reference: the same partition without the crashing file, converted in this process
        docs = items() if workers else (i for i in items() if i.doc_id != crashed.doc_id)
        materialize_partition(
            chunker, docs, "docs", strategy, chunk_table=chunks, rejected_table=rejected, run_id=run_id,
            host_workers=workers,
        )  # fmt: skip
    monkeypatch.delenv(hostpool.TEST_WORKER_KILL_ENV)
    hostpool.shutdown_host_pools()
    rejections = {r["doc_id"]: r for r in tables["crashing"][1].to_arrow().to_pylist()}
    want = {d: reason for d, (_, reason) in BAD.items() if d != left_out} | {crashed.doc_id: "unreadable_file"}
    assert {d: r["reason"] for d, r in rejections.items()} == want
    detail = f"{crashed.where}: converting it crashed the converter's process (exit code -9)"
    assert rejections[crashed.doc_id]["detail"] == detail
    columns = ["chunk_id", "doc_id", "text", "char_start", "char_end", "headings", "converter", "page_start"]
    want, got = (tables[r][0].to_arrow().select(columns).sort_by("chunk_id") for r in ("reference", "crashing"))
    assert got.num_rows > 0 and got.equals(want)


def test_a_worker_that_dies_converting_fails_the_partition_and_keeps_its_rows(
    env, tmp_path: Path, chunker: LateChunker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host worker that dies while it converts a file (killed, out of memory: its own death, not its
    converter's child's) fails the partition before its commit, the table keeps its rows, and the error
    names the file."""
    from latechunk_dagster.pipeline import hostpool, materialize_partition
    from latechunk_dagster.sources.text_files import UnconvertedFile

    db = sink.connect(str(tmp_path / "db"))
    table = sink.open_or_create(db, sink.CHUNK_TABLE, sink.chunk_schema(chunker.embedding_dim))
    rejected = sink.open_or_create(db, sink.REJECTED_TABLE, sink.REJECTED_SCHEMA)
    store = DocumentStore.from_path(env["store"])
    strategy = MarkdownSections(max_tokens=64)
    materialize_partition(
        chunker, store.iter_shard("docs"), "docs", strategy, chunk_table=table, rejected_table=rejected, run_id="a",
        host_workers=0,
    )  # fmt: skip
    before, version = table.to_arrow().sort_by("chunk_id"), table.version
    hostpool.shutdown_host_pools()
    monkeypatch.setenv(hostpool.TEST_WORKER_KILL_ENV, "convert")  # a worker SIGKILLs itself on its 2nd conversion
    files = [f for f in store.iter_shard("docs", defer_conversion=True) if isinstance(f, UnconvertedFile)]
    # the error names the file whose conversion killed the worker (the one worker's 2nd, in store order)
    killed = re.escape(f"died (exit code -9) while converting {files[1].where}")
    with pytest.raises(hostpool.HostWorkerError, match=killed):
        materialize_partition(
            chunker, store.iter_shard("docs", defer_conversion=True), "docs", strategy, chunk_table=table,
            rejected_table=rejected, run_id="b", host_workers=1, force=True,
        )  # fmt: skip
    hostpool.shutdown_host_pools()
    assert table.version == version and table.to_arrow().sort_by("chunk_id").equals(before)
