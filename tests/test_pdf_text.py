"""PDF text as a reader sees it (issue 45 item 1, issue 47 kinds 1 and 10): page furniture out,
sentences read on across page breaks and line wraps, hyphenated words joined, headings from the
outline at the lines that carry them or from the fonts, body lines escaped, an outline title that is
not valid UTF-16 read leniently.

The PDFs are made here (tests/document_files.py); the expected texts are written by hand from the
words they were made with.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from latechunk_dagster.sources.converters import convert
from latechunk_dagster.sources.converters.pdf_furniture import normalised
from latechunk_dagster.sources.files import DocumentStore
from tests.document_files import book_pdf_bytes, pdf_bytes

HEAD = "A Field Guide to Pumps"
BOOK = [
    [("Contents", 16, True), "1 Pumps . . . . . . . . . . . . 2", "2 Valves . . . . . . . . . . . . 4"],
    [
        ("1 Pumps", 16, True),
        "Acme builds pumps in Rotter-",
        "dam for the harbour. Each pump is tested",
        "before it ships and the tests take",
    ],
    ["a whole day.", ("1.1 Testing", 13, True), "The test bench runs at full load.", "Pre-", "Season checks logged."],
    [("2 Valves", 16, True), "# valves are counted by hand.", "- not every valve is tested", "1. first the seal."],
    ["Valves last ten years.", "The end of the guide."],
]
PAGE_3 = "a whole day."
BODY_1 = "Acme builds pumps in Rotterdam for the harbour. Each pump is tested\nbefore it ships and the tests take\n"
BODY_3 = "The test bench runs at full load.\nPre-Season checks logged."  # PDFium joins a line-end hyphen
BODY_4 = "\\# valves are counted by hand.\n\\- not every valve is tested\n1\\. first the seal."
BODY_5 = "Valves last ten years.\nThe end of the guide."


def book(**kwargs: object) -> bytes:
    return book_pdf_bytes(BOOK, head=HEAD + "  {page}", foot="{page}", **kwargs)  # type: ignore[arg-type]


def test_furniture_out_sentences_read_on_and_headings_from_fonts() -> None:
    """No outline: the running head (with its page number), the bare page numbers and the TOC's dot
    leaders are gone; the sentence cut by the page break reads on (one line break); ``Rotter-dam`` is
    joined, ``Pre-`` / ``Season`` (upper case) keeps its hyphen (PDFium joins the lines, marking the
    hyphen U+FFFE: it is dropped only before lower case); 16 pt bold lines are ``#``, 13 pt
    ``##``; ``#``, ``-`` and ``1.`` starting body lines are escaped."""
    out = convert("guide.pdf", book())
    expected = (
        f"# Contents\n\n# 1 Pumps\n{BODY_1}{PAGE_3}\n\n## 1.1 Testing\n{BODY_3}\n\n# 2 Valves\n{BODY_4}\n\n{BODY_5}"
    )
    assert out.text == expected
    starts = (
        0,
        expected.index("# 1 Pumps"),
        expected.index(PAGE_3),  # page 3 starts mid-sentence: at its first character
        expected.index("# 2 Valves"),
        expected.index(BODY_5),
    )
    assert out.pages == starts
    assert HEAD not in out.text and ". . ." not in out.text


def test_outline_headings_at_the_lines_that_carry_them_never_inside_a_sentence() -> None:
    """Outline titles without their section numbers (``Pumps`` on the line ``1 Pumps``) and in
    another case mark those lines; a title no line of its page carries (``Overview`` on page 3, which
    starts mid-sentence) goes after the sentence that runs on into the page, not at the page's top."""
    outline = [(1, "Pumps", 1), (1, "overview", 2), (2, "Testing", 2), (1, "VALVES", 3)]
    out = convert("guide.pdf", book(outline=outline))
    expected = (
        "Contents\n\n"
        f"# 1 Pumps\n{BODY_1}{PAGE_3}\n\n"
        "# overview\n\n"
        f"## 1.1 Testing\n{BODY_3}\n\n"
        f"# 2 Valves\n{BODY_4}\n\n"
        f"{BODY_5}"
    )
    assert out.text == expected


def test_a_title_on_no_line_of_a_page_that_starts_a_sentence_goes_at_its_top() -> None:
    out = convert("r.pdf", pdf_bytes([["Alpha ends here."], ["Beta starts.", "Gamma too."]], outline=[(1, "Zeta", 1)]))
    assert out.text == "Alpha ends here.\n\n# Zeta\nBeta starts.\nGamma too."


def test_running_heads_are_found_by_repetition_with_digits_normalised() -> None:
    assert normalised("Chapter 4:  Function reference 12") == normalised("chapter 4: function reference 13")
    two_pages = convert("two.pdf", book_pdf_bytes([["One."], ["Two."]], head="Short Book", foot="{page}"))
    assert two_pages.text == "Short Book\nOne.\n\nShort Book\nTwo."  # 2 pages: not a repetition yet


def test_the_running_heads_words_elsewhere_on_a_page_stay() -> None:
    """The document's title on its title page is the running head's words, lower on the page than the
    heads: it stays (as the top heading), the heads go; a numbered section heading at that height
    on a later page is no head either (it carries no page number, only a section number)."""
    intro, second, third = (f"The {n} page of the guide, in the body's size." for n in ("first", "second", "third"))
    pages = [[(HEAD, 20, True), intro], [second], [("1.3. Third part", 20, True), third]]
    out = convert("titled.pdf", book_pdf_bytes(pages, head=HEAD + "  {page}"))
    assert out.text == f"# {HEAD}\n{intro}\n\n{second}\n\n# 1.3. Third part\n{third}"


def test_an_outline_title_that_is_not_utf16_is_read_and_its_shard_written(tmp_path: Path) -> None:
    """Issue 47 kind 1: ``/Title <FEFFD800>`` (a BOM, a lone high surrogate) makes pypdfium2's
    ``get_title()`` raise UnicodeDecodeError; the title is read with U+FFFD, the file converts, and
    the shard's other file is read beside it."""
    data = book_pdf_bytes(
        [["Intro words."], ["Second part."]], outline=[(1, "bad", 0), (1, "Second", 1)], raw_title=b"<FEFFD800>"
    )
    import pypdfium2 as pdfium

    with pytest.raises(UnicodeDecodeError):
        next(iter(pdfium.PdfDocument(data).get_toc())).get_title()  # the input still shows the fault
    shard = tmp_path / "store" / "docs"
    shard.mkdir(parents=True)
    (shard / "bad_title.pdf").write_bytes(data)
    (shard / "notes.md").write_text("# Notes\nFine.\n")
    store = DocumentStore.from_path(tmp_path / "store")
    read = {d.doc_id: d for d in store.read_shard("docs")}
    assert read["docs/bad_title.pdf"].text == "Intro words.\n\n# Second\nSecond part."  # "\ufffd": no heading
    assert read["docs/notes.md"].text == "# Notes\nFine.\n"
    assert len(store.fingerprints()) == 1


REAL = Path("/usr/share/doc/libtasn1-doc/libtasn1.pdf")


@pytest.mark.skipif(not REAL.exists(), reason="Debian's libtasn1-doc is not installed")
def test_a_texinfo_manual_reads_without_its_furniture() -> None:
    """A real manual (texinfo, TeX): its running heads (``Chapter 4: Function reference 12``), bare
    page numbers and TOC dot leaders are gone, its outline's numbered headings are at their lines."""
    text = convert(REAL.name, REAL.read_bytes()).text
    lines = text.split("\n")
    assert not [line for line in lines if line.startswith(("Chapter ", "Appendix A: "))]
    assert not [line for line in lines if line.strip().isdigit()]
    assert ". . . ." not in text
    assert "\n## 3.3 Invoking asn1Decoding\n" in text
