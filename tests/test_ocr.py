"""Scanned pages read by OCR (issue 45 item 3): a PDF made of page pictures alone (no text layer,
``tests/document_files.scanned_pdf_bytes``) is read with the store's ``ocr=True`` by Tesseract, its
chunks found by a search (real engine, real LanceDB, a real host worker), and the OCR engine's
version is in the rows' lineage; with OCR off the file is ``no_text_layer``, the message naming the
setting.

The right answers: the words drawn into the pictures (stated here), and Tesseract's version as its
own command prints it (``tesseract --version``). Where Tesseract is not installed and cannot be
(``scripts/ensure-ocr.sh`` installs it for ``make test`` and CI), the module skips with one line;
with ``LATECHUNK_REQUIRE_OCR=1`` (set by ``.ci/run``) it fails instead.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from latechunk_dagster import LateChunker, MarkdownSections, sink
from latechunk_dagster.sink.search import search
from latechunk_dagster.sources.converters.ocr import tesseract_version
from latechunk_dagster.sources.files import DocumentStore
from tests.document_files import scanned_pdf_bytes
from tests.test_own_converter import ShoutingPdf

try:
    tesseract_version()
except RuntimeError as exc:
    if os.environ.get("LATECHUNK_REQUIRE_OCR") == "1":
        raise
    pytest.skip(f"SKIPPED OCR tests: {exc}", allow_module_level=True)

OWLS = ["Barn owls hunt mice at night.", "They nest in old barns and church towers."]
GLACIERS = ["Glaciers carve deep valleys in the mountains.", "The ice moves slowly downhill."]
FILES = {
    "docs/scan.pdf": scanned_pdf_bytes([OWLS, GLACIERS]),
    "docs/tea.txt": b"Green tea is steamed and dried. Black tea is fermented before it is dried.",
}


def _store(root: Path, **settings: object) -> DocumentStore:
    for doc_id, data in FILES.items():
        (root / doc_id).parent.mkdir(parents=True, exist_ok=True)
        (root / doc_id).write_bytes(data)
    return DocumentStore.from_path(root, **settings)  # type: ignore[arg-type]


def test_without_ocr_a_scan_is_no_text_layer_naming_the_setting(tmp_path: Path) -> None:
    docs, rejected = _store(tmp_path / "store").read_shard_with_rejections("docs")
    assert [d.doc_id for d in docs] == ["docs/tea.txt"]
    assert [(r.doc_id, r.reason) for r in rejected] == [("docs/scan.pdf", "no_text_layer")]
    assert "none of its 2 page(s) has a text layer" in rejected[0].detail
    assert "DocumentStore(ocr=True)" in rejected[0].detail and "ocr: true" in rejected[0].detail


def test_ocr_is_a_setting_of_the_built_in_pdf_converter(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"ocr=True is a setting of the built-in PDF converter.*ShoutingPdf"):
        _store(tmp_path / "store", converters={".pdf": ShoutingPdf()}, ocr=True)


def test_with_ocr_only_the_pages_without_a_text_layer_are_read_by_ocr() -> None:
    """A PDF of a typed page and a scanned one: the typed page's text is its text layer's, the
    scanned page's Tesseract's, each page starting where ``pages`` says."""
    import io

    from pypdf import PdfReader, PdfWriter

    from latechunk_dagster.sources.converters.registry import store_converters
    from tests.document_files import pdf_bytes

    typed = ["Pumps are tested before they ship."]
    writer = PdfWriter()
    for data in (pdf_bytes([typed]), scanned_pdf_bytes([OWLS])):
        writer.append(PdfReader(io.BytesIO(data)))
    out = io.BytesIO()
    writer.write(out)
    converted = store_converters(ocr=True).convert("mixed.pdf", out.getvalue())
    assert converted.pages is not None and len(converted.pages) == 2
    first, second = converted.text[: converted.pages[1]], converted.text[converted.pages[1] :]
    assert first.strip() == typed[0] and all(line in second for line in OWLS), converted.text


def test_with_ocr_a_scanned_pdf_is_read_and_its_chunks_found(chunker: LateChunker, tmp_path: Path) -> None:
    store = _store(tmp_path / "store", ocr=True)
    scan = next(d for d in store.read_shard("docs") if d.doc_id == "docs/scan.pdf")
    assert all(line in scan.text for line in OWLS + GLACIERS), scan.text
    assert scan.pages is not None and scan.text.index(GLACIERS[0]) >= scan.pages[1] > scan.text.index(OWLS[-1])
    printed = subprocess.run(["tesseract", "--version"], capture_output=True, text=True, check=True).stdout
    engine = printed.split()[:2]  # "tesseract 5.3.0"
    assert scan.converter is not None and scan.converter.endswith(f" ocr/1 {' '.join(engine)} eng")

    db = tmp_path / "db"
    conn = sink.connect(str(db))
    chunks = sink.open_or_create(conn, sink.CHUNK_TABLE, sink.chunk_schema(chunker.embedding_dim))
    rejected = sink.open_or_create(conn, sink.REJECTED_TABLE, sink.REJECTED_SCHEMA)
    from latechunk_dagster.pipeline import materialize_partition

    report = materialize_partition(
        chunker, store.iter_shard("docs", defer_conversion=True), "docs", MarkdownSections(max_tokens=24),
        chunk_table=chunks, rejected_table=rejected, run_id="ocr", host_workers=1,
    )  # fmt: skip
    assert (report.documents, report.rejected) == (2, 0)
    rows = chunks.to_arrow().to_pylist()
    assert {r["converter"] for r in rows if r["doc_id"] == "docs/scan.pdf"} == {scan.converter}
    for query, word, page in (("Which birds hunt mice?", "owls", 1), ("What carves valleys?", "Glaciers", 2)):
        top = search(query, chunker=chunker, uri=str(db), k=1)[0]
        assert top.doc_id == "docs/scan.pdf" and top.text is not None and word in top.text, (query, top)
        assert next(r["page_start"] for r in rows if r["chunk_id"] == top.chunk_id) == page


def test_a_dagster_run_reads_with_the_store_resource_s_ocr_and_converters(chunker: LateChunker, tmp_path: Path) -> None:
    """The resource's settings: ``ocr`` and a converter of one's own by import path, in a real Dagster
    run (its asset checks read the store with the same settings: every document accounted for)."""
    import dagster as dg

    from latechunk_dagster import late_chunk_assets
    from latechunk_dagster.integration.resources import DocumentStoreResource, LanceDBResource
    from latechunk_dagster.integration.sensors import sync_partitions
    from tests.conftest import session_engine_resource
    from tests.test_own_converter import NOTE, NOTE_TEXT, NoteConverter

    store = _store(tmp_path / "store")
    (tmp_path / "store" / "docs" / "owls.note").write_bytes(NOTE)
    resource = DocumentStoreResource(
        path=str(tmp_path / "store"), ocr=True, converters={".note": f"{NoteConverter.__module__}:NoteConverter"}
    )
    table = late_chunk_assets(index=False, job_name="chunk", strategy=MarkdownSections(max_tokens=24), sensor=False)
    defs = dg.Definitions(
        assets=table.assets,
        asset_checks=table.asset_checks,
        jobs=table.jobs,
        resources={
            "engine": session_engine_resource(chunker),
            "lancedb": LanceDBResource(uri=str(tmp_path / "db")),
            "store": resource,
        },
    )
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
        sync_partitions(instance, store, table.partitions_def)
        result = defs.resolve_job_def("chunk").execute_in_process(instance=instance, partition_key="docs")
    assert result.success
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert checks and all(checks.values()), checks
    rows = sink.connect(str(tmp_path / "db")).open_table("chunks").to_arrow().to_pylist()
    lineage = {r["doc_id"]: r["converter"] for r in rows}
    assert (lineage["docs/owls.note"], lineage["docs/tea.txt"]) == ("note/1 test", None)
    assert lineage["docs/scan.pdf"].startswith("pdf/") and " ocr/1 tesseract " in lineage["docs/scan.pdf"]
    note = sorted((r for r in rows if r["doc_id"] == "docs/owls.note"), key=lambda r: r["chunk_index"])
    assert "".join(r["text"] for r in note) == NOTE_TEXT
