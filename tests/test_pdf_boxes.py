"""Where each PDF chunk is on its page (issue 45 item 4): the boxes of a char range of the converted
text against PDFium's own character boxes (read here from the file, not from the converter), the
rows' ``boxes`` column through a real partition (real engine, real LanceDB), an older table gaining
the column, and a page drawn with a chunk's boxes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pypdfium2 as pdfium
import pytest

from latechunk_dagster import MarkdownSections, sink
from latechunk_dagster.pipeline import materialize_partition
from latechunk_dagster.sources.converters import convert
from latechunk_dagster.sources.converters.pdf_boxes import render_chunk
from latechunk_dagster.sources.files import DocumentStore
from tests.document_files import book_pdf_bytes

ROOTS: dict[str, Path] = {}
PAGES = [
    [("Pumps", 16, True), "Acme builds pumps in Rotterdam for the harbour.", "Each pump is tested before it"],
    ["ships to the customer.", "Valves are counted by hand."],
]


def pdfium_union(data: bytes, page: int, words: str) -> tuple[int, float, float, float, float]:
    """The union of PDFium's boxes of the characters of ``words`` (one line of the page), found in
    PDFium's own text of the page (page from 1)."""
    document = pdfium.PdfDocument(data)
    textpage = document[page - 1].get_textpage()
    text = textpage.get_text_range()
    at = text.index(words)
    boxes = np.array([textpage.get_charbox(i) for i in range(at, at + len(words))])  # left, bottom, right, top
    boxes = boxes[(boxes[:, 2] > boxes[:, 0]) | (boxes[:, 3] > boxes[:, 1])]  # generated spaces have none
    return page, boxes[:, 0].min(), boxes[:, 1].min(), boxes[:, 2].max(), boxes[:, 3].max()


def close(got: list, want: list) -> bool:
    return len(got) == len(want) and all(
        g[0] == w[0] and np.allclose(g[1:], w[1:], atol=0.01) for g, w in zip(got, want, strict=True)
    )


def test_chunk_boxes_are_the_union_of_pdfium_character_boxes_per_line() -> None:
    data = book_pdf_bytes(PAGES)
    out = convert("pumps.pdf", data)
    text = out.text
    assert text == (
        "# Pumps\nAcme builds pumps in Rotterdam for the harbour.\nEach pump is tested before it\n"
        "ships to the customer.\nValves are counted by hand."
    )
    one = text.index("pumps in Rotterdam")
    assert out.boxes.chunk_boxes((one, one + len("pumps in Rotterdam"))) == [
        pytest.approx(pdfium_union(data, 1, "pumps in Rotterdam"), abs=0.01)
    ]
    # a sentence across a line wrap and a page break: one box per line, on its page
    sentence = text.index("Each pump")
    end = text.index("customer.") + len("customer.")
    got = out.boxes.chunk_boxes((sentence, end))
    want = [pdfium_union(data, 1, "Each pump is tested before it"), pdfium_union(data, 2, "ships to the customer.")]
    assert close(got, want), (got, want)
    assert out.boxes.chunk_boxes((0, 2)) == []  # "# " is the converter's: no box
    heading = out.boxes.chunk_boxes((0, len("# Pumps")))
    assert close(heading, [pdfium_union(data, 1, "Pumps")])


def test_line_boxes_only_give_the_same_text_and_whole_lines() -> None:
    """``PdfConverter(char_boxes=False)``: the same text and lineage; a chunk's box is its whole line."""
    from latechunk_dagster.sources.converters import Converters
    from latechunk_dagster.sources.converters.registry import PdfConverter

    data = book_pdf_bytes(PAGES)
    full = convert("pumps.pdf", data)
    lines = Converters().with_overrides({".pdf": PdfConverter(char_boxes=False)}).convert("pumps.pdf", data)
    assert (lines.text, lines.pages, lines.converter) == (full.text, full.pages, full.converter)
    one = full.text.index("pumps in Rotterdam")
    whole = pdfium_union(data, 1, "Acme builds pumps in Rotterdam for the harbour.")
    [(page, x0, y0, x1, y1)] = lines.boxes.chunk_boxes((one, one + 5))  # "pumps": its line's box
    assert page == 1 and np.allclose((x0, x1), (whole[1], whole[3]), atol=0.01)
    assert whole[2] <= y0 < y1 <= whole[4]  # from the line's first and last characters: no descender


def test_a_page_drawn_with_a_chunks_boxes(tmp_path: Path) -> None:
    """The PNG is the page at 2 pixels a point, the chunk's box filled yellow, the rest of the page white."""
    from PIL import Image

    data = book_pdf_bytes(PAGES)
    out = convert("pumps.pdf", data)
    start = out.text.index("Acme")
    boxes = out.boxes.chunk_boxes((start, start + len("Acme builds pumps")))
    path = render_chunk(data, boxes, 1, tmp_path / "chunk.png")
    image = np.asarray(Image.open(path).convert("RGB")).astype(int)
    height = pdfium.PdfDocument(data)[0].get_height()
    assert abs(image.shape[0] - height * 2) <= 1 and abs(image.shape[1] - 8.27 * 72 * 2) <= 1
    _, x0, y0, x1, y1 = boxes[0]
    inside = image[round((height - y1) * 2) + 3 : round((height - y0) * 2) - 3, round(x0 * 2) + 3 : round(x1 * 2) - 3]
    paper = inside[(inside[:, :, 0] > 200) & (inside[:, :, 1] > 200)]  # not a glyph's ink
    assert len(paper) and (paper[:, 2] < 230).mean() > 0.9  # the paper inside the box is tinted yellow
    assert (image[5:40, 5:40] == 255).all()  # a margin away from it is not


@pytest.fixture(scope="module")
def written(chunker, tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict], dict]:
    root = tmp_path_factory.mktemp("boxes")
    ROOTS["db"] = root / "db"
    (root / "store" / "docs").mkdir(parents=True)
    (root / "store" / "docs" / "pumps.pdf").write_bytes(book_pdf_bytes(PAGES))
    (root / "store" / "docs" / "notes.md").write_text("# Notes\n\nValves are counted by hand.\n")
    store = DocumentStore.from_path(root / "store")
    db = sink.connect(str(root / "db"))
    chunks = sink.open_or_create(db, sink.CHUNK_TABLE, sink.chunk_schema(chunker.embedding_dim))
    rejected = sink.open_or_create(db, sink.REJECTED_TABLE, sink.REJECTED_SCHEMA)
    documents = list(store.iter_shard("docs"))
    materialize_partition(
        chunker,
        documents,
        "docs",
        MarkdownSections(max_tokens=16),
        chunk_table=chunks,
        rejected_table=rejected,
        run_id="boxes",
    )
    return chunks.to_arrow().to_pylist(), {d.doc_id: d for d in documents}


def test_pdf_rows_carry_the_boxes_of_their_char_range(written: tuple[list[dict], dict]) -> None:
    rows, docs = written
    pdf = sorted((r for r in rows if r["doc_id"] == "docs/pumps.pdf"), key=lambda r: r["chunk_index"])
    assert len(pdf) >= 2
    for row in pdf:
        doc = docs[row["doc_id"]]
        assert doc.text[row["char_start"] : row["char_end"]] == row["text"]
        want = doc.boxes.chunk_boxes((row["char_start"], row["char_end"]))
        got = [(b["page"], b["x0"], b["y0"], b["x1"], b["y1"]) for b in row["boxes"]]
        assert close(got, want)
        assert {b["page"] for b in row["boxes"]} <= set(range(row["page_start"], row["page_end"] + 1))
    lines = sum(len(r["boxes"]) for r in pdf)
    assert lines == 5  # the five lines of the two pages, each in one chunk's boxes once
    assert all(r["boxes"] is None for r in rows if r["doc_id"] == "docs/notes.md")


def test_search_hits_and_the_clients_metadata_carry_a_pdf_chunks_boxes(
    written: tuple[list[dict], dict], chunker
) -> None:
    """A search hit of a PDF chunk carries its row's boxes, and the LangChain / LlamaIndex retrievers'
    metadata (``hit_metadata``, their one home) passes them on; a Markdown chunk's hit has none."""
    from latechunk_dagster.clients.hit_metadata import hit_metadata
    from latechunk_dagster.sink.search import search

    rows, _ = written
    by_id = {r["chunk_id"]: r for r in rows}
    hits = search("pumps tested before shipping", chunker=chunker, uri=str(ROOTS["db"]), k=len(rows), exact=True)
    assert len(hits) == len(rows)
    for hit in hits:
        row = by_id[hit.chunk_id]
        meta = hit_metadata(hit)
        if row["boxes"] is None:
            assert hit.boxes is None and "boxes" not in meta
        else:
            want = [[b["page"], b["x0"], b["y0"], b["x1"], b["y1"]] for b in row["boxes"]]
            assert meta["boxes"] == want and [list(b) for b in hit.boxes] == want


def test_host_workers_write_the_same_boxes(written: tuple[list[dict], dict], chunker, tmp_path: Path) -> None:
    """Files handed to a host worker unconverted (``defer_conversion``, as Dagster and Airflow read a
    store) come back with their characters' boxes: the rows' boxes equal those made in this process."""
    rows, _ = written
    store = DocumentStore.from_path(ROOTS["db"].parent / "store")
    db = sink.connect(str(tmp_path / "db"))
    table = sink.open_or_create(db, sink.CHUNK_TABLE, sink.chunk_schema(chunker.embedding_dim))
    rejected = sink.open_or_create(db, sink.REJECTED_TABLE, sink.REJECTED_SCHEMA)
    items = list(store.iter_shard("docs", defer_conversion=True))
    materialize_partition(
        chunker,
        items,
        "docs",
        MarkdownSections(max_tokens=16),
        chunk_table=table,
        rejected_table=rejected,
        run_id="pooled",
        host_workers=1,
    )
    pooled = {r["chunk_id"]: r["boxes"] for r in table.to_arrow().to_pylist()}
    assert pooled == {r["chunk_id"]: r["boxes"] for r in rows}
    assert any(b is not None for b in pooled.values())


def test_an_older_table_gains_the_boxes_column_as_null(tmp_path: Path) -> None:
    schema = sink.chunk_schema(4)
    older = pa.schema(list(schema)[: schema.get_field_index("boxes")])  # a table written before the column
    db = sink.connect(str(tmp_path / "db"))
    db.create_table("chunks", schema=older)
    table = sink.open_or_create(db, "chunks", schema)
    assert table.schema.field("boxes").type == schema.field("boxes").type
