"""Document files read into Markdown: PDF, DOCX, PPTX and HTML made at test time, read through
``convert`` and through a document store; the refusals, each by its reason; compressed JSONL.

The expected texts are written here by hand from the words the files were made with.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import zstandard

from latechunk_dagster.sources.converters import ConversionLimits, Rejection, convert
from latechunk_dagster.sources.converters import pdf as pdf_rules
from latechunk_dagster.sources.files import Document, DocumentStore, RejectedRow
from tests.document_files import docx_bytes, html_page, pdf_bytes, pptx_bytes, zip_bomb_docx

PDF_PAGES = [["Pumps in Rotterdam", "Acme builds pumps."], ["Maintenance", "The team repairs pumps within a day."]]
PDF_TEXT = "# Pumps in Rotterdam\nAcme builds pumps.\n\n## Maintenance\nThe team repairs pumps within a day."


def test_pdf_text_layer_with_outline_headings_and_page_starts() -> None:
    data = pdf_bytes(PDF_PAGES, outline=[(1, "Pumps in Rotterdam", 0), (2, "Maintenance", 1)])
    out = convert("report.pdf", data)
    assert out.text == PDF_TEXT
    assert out.pages == (0, PDF_TEXT.index("## Maintenance"))
    assert out.converter.startswith(f"pdf/{pdf_rules.RULES} pypdfium2 ")
    # a bookmark whose title is on no line of its page goes before the page's first sentence start
    out = convert("r.PDF", pdf_bytes(PDF_PAGES, outline=[(1, "Overview", 1)]))
    assert (
        out.text
        == "Pumps in Rotterdam\nAcme builds pumps.\n\n# Overview\nMaintenance\nThe team repairs pumps within a day."
    )


def test_blank_pdf_pages_keep_the_converted_text_in_its_normal_form() -> None:
    """A blank page between two pages, or at the end, adds no blank lines: the text is in the one
    normal form of every converter (no run of 3+ line breaks, no trailing blank line), and the blank
    page starts where the text before it ends (before: 'Alpha page.\\n\\n\\n\\nGamma page.', 'Alpha page.\\n\\n')."""
    gap = convert("gap.pdf", pdf_bytes([["Alpha page."], [" "], ["Gamma page."]]))
    assert (gap.text, gap.pages) == ("Alpha page.\n\nGamma page.", (0, 11, 13))
    tail = convert("tail.pdf", pdf_bytes([["Alpha page."], [" "]]))
    assert (tail.text, tail.pages) == ("Alpha page.", (0, 11))
    doc = Document.from_converted("gap.pdf", gap.text, gap.converter, gap.pages)
    assert doc.page_range((13, 24)) == (3, 3)  # "Gamma page." is on page 3, not on the blank page 2


def test_docx_heading_styles_paragraphs_and_a_table() -> None:
    data = docx_bytes(
        [
            ("h1", "Pumps"),
            ("p", "Acme builds pumps in Rotterdam."),
            ("h2", "Prices"),
            ("table", [["model", "euro"], ["P-1", "900"], ["P|2", "1200"]]),
            ("p", ""),
            ("h3", "Notes"),
            ("p", "Delivery within a week."),
        ]
    )
    out = convert("pumps.docx", data)
    assert out.text == (
        "# Pumps\n\nAcme builds pumps in Rotterdam.\n\n## Prices\n\n"
        "| model | euro |\n| --- | --- |\n| P-1 | 900 |\n| P\\|2 | 1200 |\n\n### Notes\n\nDelivery within a week."
    )
    assert out.pages is None and out.converter.startswith("docx/2 python-docx ")


def test_html_keeps_headings_and_tables_and_leaves_out_scripts_styles_navigation() -> None:
    page = html_page(
        "Owls",
        [(1, "Owls", "Owls hunt at <b>night</b>."), (3, "Feathers", "Soft edges make flight almost silent.")],
        table=[["owl", "weight"], ["barn", "500 g"]],
    )
    out = convert("owls.html", page.encode("utf-8"))
    assert out.text == (
        "# Owls\n\nOwls hunt at **night**.\n\n### Feathers\n\nSoft edges make flight almost silent.\n\n"
        "| owl | weight |\n| --- | --- |\n| barn | 500 g |"
    )
    for left_out in ("SCRIPTTEXT", "color: red", "NAVHOME", "NAVABOUT", "FOOTERTEXT"):
        assert left_out not in out.text
    # the encoding a page declares is the one read
    latin = "<html><head><meta charset='iso-8859-1'></head><body><h2>Caf\xe9</h2></body></html>".encode("latin-1")
    assert convert("cafe.htm", latin).text == "# Café"  # its one heading is its top heading


def test_pptx_slide_titles_are_headings_and_slides_are_pages() -> None:
    out = convert(
        "deck.pptx", pptx_bytes([("Pumps", ["Acme builds pumps.", "In Rotterdam."]), ("Service", ["Same day."])])
    )
    assert out.text == "## Pumps\n\nAcme builds pumps.\nIn Rotterdam.\n\n## Service\n\nSame day."
    assert out.pages == (0, out.text.index("## Service"))


@pytest.mark.parametrize(
    ("name", "make", "reason", "says"),
    [
        ("locked.pdf", lambda: pdf_bytes([["secret words"]], password="pw"), "encrypted", "password"),
        ("scan.pdf", lambda: pdf_bytes([["scanned words"]], text_layer=False), "no_text_layer", "text layer"),
        ("cut.pdf", lambda: pdf_bytes(PDF_PAGES)[:3000], "unreadable_file", "not a readable PDF"),
        ("cut.docx", lambda: docx_bytes([("p", "words")])[:2000], "unreadable_file", "not a readable DOCX"),
        ("bomb.docx", lambda: zip_bomb_docx(300 << 20), "too_large", "zip bomb"),
        ("cut.pptx", lambda: b"PK\x03\x04" + b"\0" * 64, "unreadable_file", "not a readable PPTX"),
    ],
)
def test_each_refusal_has_its_reason(name: str, make, reason: str, says: str) -> None:
    with pytest.raises(Rejection) as caught:
        convert(name, make())
    assert caught.value.reason == reason and says in caught.value.detail


def test_a_file_over_the_size_limit_is_too_large_before_it_is_converted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = pdf_bytes(PDF_PAGES)
    with pytest.raises(Rejection, match="too_large"):
        convert("a.pdf", data, ConversionLimits(max_file_bytes=len(data) - 1))
    assert convert("a.pdf", data, ConversionLimits(max_file_bytes=len(data))).text.startswith("Pumps")
    (tmp_path / "big.txt").write_text("x" * 101)
    (tmp_path / "small.txt").write_text("x" * 100)
    monkeypatch.setenv("LATECHUNK_MAX_DOCUMENT_BYTES", "100")  # the setting, for every file of the tree
    items = list(DocumentStore.from_path(tmp_path).iter_shard("_root"))
    assert [(i.doc_id, i.reason) for i in items if isinstance(i, RejectedRow)] == [("big.txt", "too_large")]
    assert [i.doc_id for i in items if isinstance(i, Document)] == ["small.txt"]
    monkeypatch.setenv("LATECHUNK_MAX_DOCUMENT_BYTES", "lots")
    with pytest.raises(ValueError, match="LATECHUNK_MAX_DOCUMENT_BYTES='lots'"):
        DocumentStore.from_path(tmp_path)


def test_a_folder_of_pdfs_is_a_store_and_bad_files_are_rejected_alone_by_name(tmp_path: Path) -> None:
    """Issue 38: a folder of PDFs was refused ("found kinds: none"), PDFs beside Markdown skipped silently."""
    (tmp_path / "only_pdfs").mkdir()
    (tmp_path / "only_pdfs" / "a.pdf").write_bytes(pdf_bytes(PDF_PAGES))
    store = DocumentStore.from_path(tmp_path / "only_pdfs")
    assert store.kind == "text" and store.shards() == ["_root"]
    shard = tmp_path / "mixed" / "reports"
    shard.mkdir(parents=True)
    files = {
        "report.pdf": pdf_bytes(PDF_PAGES, outline=[(1, "Pumps in Rotterdam", 0), (2, "Maintenance", 1)]),
        "notes.md": b"# Notes\n\nPlain Markdown.",
        "pumps.docx": docx_bytes([("h1", "Pumps"), ("p", "Acme builds pumps.")]),
        "owls.html": html_page("Owls", [(2, "Owls", "Owls hunt at night.")]).encode(),
        "locked.pdf": pdf_bytes([["secret"]], password="pw"),
        "scan.pdf": pdf_bytes([["scanned"]], text_layer=False),
        "cut.pdf": pdf_bytes(PDF_PAGES)[:3000],
        "bomb.docx": zip_bomb_docx(300 << 20),
    }
    for name, data in files.items():
        (shard / name).write_bytes(data)
    store = DocumentStore.from_path(tmp_path / "mixed")
    assert store.kind == "text" and store.shards() == ["reports"] and store.bad_shards() == []
    docs, rejected = store.read_shard_with_rejections("reports")
    assert {d.doc_id: d.text for d in docs} == {
        "reports/notes.md": "# Notes\n\nPlain Markdown.",
        "reports/owls.html": "# Owls\n\nOwls hunt at night.",
        "reports/pumps.docx": "# Pumps\n\nAcme builds pumps.",
        "reports/report.pdf": PDF_TEXT,
    }
    by_id = {d.doc_id: d for d in docs}
    assert by_id["reports/notes.md"].converter is None
    assert by_id["reports/report.pdf"].pages == (0, PDF_TEXT.index("## Maintenance"))
    assert by_id["reports/report.pdf"].sha256 == Document.from_text("x", PDF_TEXT).sha256  # the text's hash
    assert {(r.doc_id, r.reason) for r in rejected} == {
        ("reports/locked.pdf", "encrypted"),
        ("reports/scan.pdf", "no_text_layer"),
        ("reports/cut.pdf", "unreadable_file"),
        ("reports/bomb.docx", "too_large"),
    }
    for row in rejected:
        assert row.where == str(shard / Path(row.doc_id).name) and row.detail.startswith(row.where + ": ")
        assert row.file_read  # read whole, refused for its content: rejected alone
    # the fingerprint sees a fixed file
    before = store.shard_fingerprint("reports")
    (shard / "scan.pdf").write_bytes(pdf_bytes([["now with text"]]))
    assert store.shard_fingerprint("reports") != before


def _jsonl(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def test_compressed_jsonl_gz_and_zst_and_a_cut_stream_keeps_old_rows(tmp_path: Path) -> None:
    store = tmp_path / "tables"
    store.mkdir()
    (store / "a.jsonl.gz").write_bytes(
        gzip.compress(_jsonl([{"id": "1", "text": "gzip one"}, {"id": 2, "text": "two"}]))
    )
    (store / "b.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(_jsonl([{"id": "1", "text": "zstd"}])))
    (store / "c.jsonl").write_bytes(_jsonl([{"id": "1", "text": "plain"}]))
    st = DocumentStore.from_path(store)
    assert st.kind == "jsonl" and st.shards() == ["a", "b", "c"]
    assert [(d.doc_id, d.text) for d in st.read_shard("a")] == [("1", "gzip one"), ("2", "two")]
    assert [d.text for d in st.read_shard("b")] == ["zstd"]
    assert st.count_shards(["a", "b", "c"]) == {"a": 2, "b": 1, "c": 1}
    # one compressed file is a store of its own; its shard is its name without the suffixes
    single = DocumentStore.from_path(store / "a.jsonl.gz")
    assert single.kind == "jsonl" and single.shards() == ["a"]
    # a gzip stream cut off: the unreadable_file row that holds the partition (pyarrow decompresses
    # ahead in blocks, so rows before the cut may or may not come first: none of the shard is written)
    whole = gzip.compress(_jsonl([{"id": str(i), "text": f"row {i} " * 50} for i in range(200)]))
    (store / "a.jsonl.gz").write_bytes(whole[: len(whole) // 2])
    items = list(st.iter_shard("a"))
    assert isinstance(items[-1], RejectedRow) and items[-1].reason == "unreadable_file" and not items[-1].file_read
    assert items[-1].doc_id == "*" and "a.jsonl.gz" in items[-1].where
    assert all(isinstance(i, Document) for i in items[:-1])
