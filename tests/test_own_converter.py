"""A converter of the user's own (issue 45 item 5): plugged in through the store's setting
(``DocumentStore.from_path(..., converters=...)``) and through the ``latechunk_dagster.converters``
entry point group, for a made-up suffix (``.note``) and for ``.pdf`` (overriding the built-in one).
Real engine, real LanceDB, real host workers (the converters travel pickled with each file).

The right answers: the converters below write text a test states in full (a ``.note`` file's title as
a heading; a PDF's words upper-cased, the words coming from ``tests/document_files.py``), and the
rows' ``vector_config`` is the sha256 of ``[run_config, "<name>/<version>"]`` computed here with
hashlib (the lineage rule of docs/documents.md).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

from latechunk_dagster import LateChunker, MarkdownSections, sink
from latechunk_dagster.pipeline import materialize_partition, vector_config
from latechunk_dagster.sources.converters import ConversionLimits, Converted, default_converters
from latechunk_dagster.sources.files import DocumentStore
from tests.document_files import pdf_bytes

STRATEGY = MarkdownSections(max_tokens=64)
NOTE = b"Barn owls\nBarn owls hunt mice at night.\nThey nest in old barns."
NOTE_TEXT = "# Barn owls\n\nBarn owls hunt mice at night.\nThey nest in old barns."
PDF_LINES = [["Pumps are tested before they ship."], ["The team repairs pumps within a day."]]
PDF_TEXT = "PUMPS ARE TESTED BEFORE THEY SHIP.\n\nTHE TEAM REPAIRS PUMPS WITHIN A DAY."


@dataclass(frozen=True)
class NoteConverter:
    """``.note`` files: the first line is the title (a ``#`` heading), the rest the body."""

    suffixes: ClassVar[tuple[str, ...]] = (".note",)
    name: ClassVar[str] = "note"
    version: str = "1 test"

    def convert(self, name: str, data: bytes, limits: ConversionLimits) -> Converted:
        title, _, body = data.decode("utf-8").partition("\n")
        return Converted(f"# {title}\n\n{body}", converter="")


@dataclass(frozen=True)
class ShoutingPdf:
    """``.pdf`` files: each page's text layer (pypdfium2) upper-cased, pages apart by a blank line."""

    suffixes: ClassVar[tuple[str, ...]] = (".pdf",)
    name: ClassVar[str] = "shouting-pdf"
    version: ClassVar[str] = "1 test"

    def convert(self, name: str, data: bytes, limits: ConversionLimits) -> Converted:
        import pypdfium2 as pdfium

        document = pdfium.PdfDocument(data)
        pages = [page.get_textpage().get_text_bounded().strip().upper() for page in document]
        starts = [sum(len(p) + 2 for p in pages[:k]) for k in range(len(pages))]
        return Converted("\n\n".join(pages), converter="", pages=tuple(starts))


def _tree(root: Path) -> Path:
    files = {"docs/owls.note": NOTE, "docs/pumps.pdf": pdf_bytes(PDF_LINES), "docs/plain.txt": b"Rivers carry sand."}
    for doc_id, data in files.items():
        (root / doc_id).parent.mkdir(parents=True, exist_ok=True)
        (root / doc_id).write_bytes(data)
    return root


def _materialize(chunker: LateChunker, store: DocumentStore, db: Path, run_id: str, workers: int):  # noqa: ANN202
    conn = sink.connect(str(db))
    chunks = sink.open_or_create(conn, sink.CHUNK_TABLE, sink.chunk_schema(chunker.embedding_dim))
    rejected = sink.open_or_create(conn, sink.REJECTED_TABLE, sink.REJECTED_SCHEMA)
    report = materialize_partition(
        chunker, store.iter_shard("docs", defer_conversion=True), "docs", STRATEGY,
        chunk_table=chunks, rejected_table=rejected, run_id=run_id, host_workers=workers,
    )  # fmt: skip
    columns = ["doc_id", "chunk_index", "text", "converter", "vector_config", "page_start", "headings"]
    return report, chunks.to_arrow().select(columns).sort_by([("doc_id", "ascending"), ("chunk_index", "ascending")])


def _by_doc(rows: list[dict]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for r in rows:
        doc = out.setdefault(r["doc_id"], {"texts": [], **{k: r[k] for k in ("converter", "vector_config")}})
        doc["texts"].append(r["text"])
    return out


def _config(run_config: str, lineage: str) -> str:
    return hashlib.sha256(json.dumps([run_config, lineage]).encode("ascii")).hexdigest()[:32]


def test_a_store_s_own_converters_read_its_files_in_the_host_workers_and_are_its_rows_lineage(
    chunker: LateChunker, tmp_path: Path
) -> None:
    root = _tree(tmp_path / "store")
    # without them, a .note file is not a document of the tree, and the PDF is the built-in's
    plain = DocumentStore.from_path(root)
    assert {d.doc_id: d.converter.split("/")[0] for d in plain.read_shard("docs") if d.converter} == {
        "docs/pumps.pdf": "pdf"
    }
    store = DocumentStore.from_path(root, converters={".note": NoteConverter(), ".pdf": ShoutingPdf()})
    report, table = _materialize(chunker, store, tmp_path / "db", "first", workers=1)
    assert (report.documents_new, report.rejected) == (3, 0)
    docs = _by_doc(table.to_pylist())
    run_config = vector_config(chunker.settings, STRATEGY)
    assert {d: (v["converter"], v["vector_config"]) for d, v in docs.items()} == {
        "docs/owls.note": ("note/1 test", _config(run_config, "note/1 test")),
        "docs/pumps.pdf": ("shouting-pdf/1 test", _config(run_config, "shouting-pdf/1 test")),
        "docs/plain.txt": (None, run_config),
    }
    # the chunks tile the converters' text (one section each here: 64 tokens hold it)
    assert "".join(docs["docs/owls.note"]["texts"]) == NOTE_TEXT
    assert "".join(docs["docs/pumps.pdf"]["texts"]) == PDF_TEXT
    pdf_rows = [r for r in table.to_pylist() if r["doc_id"] == "docs/pumps.pdf"]
    assert [r["headings"] for r in table.to_pylist() if r["doc_id"] == "docs/owls.note"][0] == ["Barn owls"]
    assert pdf_rows[0]["page_start"] == 1
    # a new version of one's converter re-encodes the files it read, and only those
    bumped = DocumentStore.from_path(root, converters={".note": NoteConverter("2 test"), ".pdf": ShoutingPdf()})
    again, table = _materialize(chunker, bumped, tmp_path / "db", "bumped", workers=0)
    assert (again.documents_reencoded, again.documents_skipped) == (1, 2)
    assert _by_doc(table.to_pylist())["docs/owls.note"]["converter"] == "note/2 test"


@pytest.fixture
def entry_points_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A distribution that declares this module's two converters in the entry point group, as a
    user's package does in its ``pyproject.toml``: its ``.dist-info`` on ``sys.path``."""
    dist = tmp_path / "site" / "my_converters-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my-converters\nVersion: 0.1\n")
    module = NoteConverter.__module__
    (dist / "entry_points.txt").write_text(
        f"[latechunk_dagster.converters]\nnote = {module}:NoteConverter\nshouting = {module}:ShoutingPdf\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    default_converters.cache_clear()
    yield
    default_converters.cache_clear()


def test_converters_of_the_entry_point_group_are_used_and_recorded(
    chunker: LateChunker, tmp_path: Path, entry_points_installed: None
) -> None:
    assert default_converters().lineage("a.note") == "note/1 test"
    assert default_converters().lineage("a.PDF") == "shouting-pdf/1 test"  # replaces the built-in
    store = DocumentStore.from_path(_tree(tmp_path / "store"))
    report, table = _materialize(chunker, store, tmp_path / "db", "plugged", workers=0)
    assert (report.documents_new, report.rejected) == (3, 0)
    docs = _by_doc(table.to_pylist())
    assert {d: v["converter"] for d, v in docs.items()} == {
        "docs/owls.note": "note/1 test",
        "docs/pumps.pdf": "shouting-pdf/1 test",
        "docs/plain.txt": None,
    }
    assert "".join(docs["docs/owls.note"]["texts"]) == NOTE_TEXT


def test_a_value_that_is_not_a_converter_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"'.epub'.*is not a converter: it needs name, version and convert\(\)"):
        DocumentStore.from_path(_tree(tmp_path / "store"), converters={".epub": object()})


def test_a_converter_for_a_table_suffix_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"a converter for \['.jsonl'\]: those are table files"):
        DocumentStore.from_path(_tree(tmp_path / "store"), converters={".JSONL": NoteConverter()})
