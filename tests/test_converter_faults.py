"""Converter faults of issue 47, each with the issue's input and the other places of the same kind:
kind 8 (a page's encoding guessed), kind 9 (a suffix that lies about the content), kind 10 (body text
that Markdown reads as a block marker), kind 11 (HTML nested past the recursion limit), kind 15 (a
password-protected DOCX / PPTX). The expected text is written by hand; Markdown structure is checked
with markdown-it-py (CommonMark), not with the package's own heading finder.
"""

from __future__ import annotations

import gzip
import io
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from latechunk_dagster.sources.converters import Rejection, convert
from latechunk_dagster.sources.converters.base import escape_block
from latechunk_dagster.sources.files import DocumentStore
from tests.document_files import deep_html, docx_bytes, encrypted_office, pdf_bytes, pptx_bytes


def _headings(markdown: str) -> list[str]:
    """The headings CommonMark finds in ``markdown`` (markdown-it-py), as ``"## title"``."""
    tokens = MarkdownIt("commonmark").parse(markdown)
    return [f"{'#' * int(t.tag[1])} {tokens[i + 1].content}" for i, t in enumerate(tokens) if t.type == "heading_open"]


def _rejected(name: str, data: bytes) -> Rejection:
    with pytest.raises(Rejection) as caught:
        convert(name, data)
    return caught.value


# kind 8: an undeclared cp1252 page is read as windows-1252 (WHATWG), never as a guessed code page


@pytest.mark.parametrize(
    ("head", "encoding"),
    [
        ("", "cp1252"),  # the input: no charset anywhere
        ("<meta charset='windows-1252'>", "cp1252"),
        ("<meta charset='iso-8859-1'>", "cp1252"),  # WHATWG: the label latin1 is windows-1252
        ("<meta http-equiv='Content-Type' content='text/html; charset=ISO-8859-1'>", "latin-1"),
        ("", "utf-8"),
        ("<meta charset='utf-8'>", "utf-8"),
    ],
)
def test_a_latin_page_reads_as_written_without_a_declared_charset(head: str, encoding: str) -> None:
    words = "Cr\u00e8me br\u00fbl\u00e9e for the ni\u00f1o, \u201cna\u00efve\u201d"
    if encoding == "latin-1":
        words = words.replace("\u201c", '"').replace("\u201d", '"')
    page = f"<html><head>{head}</head><body><p>{words}</p></body></html>".encode(encoding)
    assert convert("dessert.html", page).text == words


def test_a_charset_declared_after_a_long_head_comment_is_the_one_read() -> None:
    # texinfo writes a license comment into the head; a <meta> past the 1024-byte prescan still counts
    page = "<html><head><!-- {} --><meta charset='koi8-r'></head><body><p>\u041f\u0440\u0438</p></body></html>"
    assert convert("ru.html", page.format("license " * 400).encode("koi8-r")).text == "\u041f\u0440\u0438"


def test_encodings_that_the_page_proves_or_declares_win_over_the_fallback() -> None:
    words = "\u00c9t\u00e9 \u00e0 Z\u00fcrich"
    bom16 = b"\xff\xfe" + f"<p>{words}</p>".encode("utf-16-le")
    assert convert("summer.html", bom16).text == words
    koi8 = "<meta charset='koi8-r'><p>\u041f\u0440\u0438\u0432\u0435\u0442</p>".encode("koi8-r")
    assert convert("hello.html", koi8).text == "\u041f\u0440\u0438\u0432\u0435\u0442"
    # a declared charset the bytes break: the broken bytes are U+FFFD, visible, not other letters
    lying = b"<meta charset='utf-8'><p>cr\xe8me</p>"
    assert convert("lying.html", lying).text == "cr\ufffdme"


# kind 9: the content decides, whatever the suffix


PDF = pdf_bytes([["Pumps are tested before they ship."]])


@pytest.mark.parametrize("name", ["pumps.html", "pumps.txt", "pumps.md", "pumps.docx"])
def test_a_pdf_under_another_suffix_is_read_as_a_pdf(name: str) -> None:
    out = convert(name, PDF)
    assert out.text == "Pumps are tested before they ship."
    assert out.converter.startswith("pdf/")


def test_a_pdf_after_junk_bytes_and_an_html_page_named_pdf_are_read_by_their_content() -> None:
    assert convert("crlf.md", b"\r\n" + PDF).text == "Pumps are tested before they ship."
    out = convert("page.pdf", b"\n<!DOCTYPE html><html><body><h2>Tea</h2><p>Green tea.</p></body></html>")
    assert (out.text, out.converter.split("/")[0]) == ("# Tea\n\nGreen tea.", "html")


def test_a_docx_named_pdf_is_read_as_a_docx_and_a_pptx_named_docx_as_a_pptx() -> None:
    out = convert("owls.pdf", docx_bytes([("h1", "Owls"), ("p", "Owls hunt at night.")]))
    assert (out.text, out.converter.split("/")[0]) == ("# Owls\n\nOwls hunt at night.", "docx")
    out = convert("deck.docx", pptx_bytes([("Pumps", ["Same day."])]))
    assert (out.text, out.converter.split("/")[0]) == ("## Pumps\n\nSame day.", "pptx")


def _png() -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("L", (4, 4)).save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("name", "make", "says"),
    [
        ("photo.md", _png, "a PNG image"),
        ("notes.html", lambda: gzip.compress(b"<p>zipped page</p>"), "a gzip archive"),
        ("report.docx", lambda: _OLE2_HEADER, "a legacy Office file"),
        ("bundle.pptx", lambda: _zip({"a.txt": b"not a deck"}), "a zip archive"),
        ("book.docx", lambda: _zip({"mimetype": b"application/epub+zip", "a.xhtml": b"<p/>"}), "an EPUB book"),
        # an old .doc whose text holds the word: not a directory entry, so not taken for encryption
        ("about.doc.docx", lambda: _OLE2_HEADER + b"x" + "EncryptedPackage".encode("utf-16-le"), "a legacy Office"),
        ("cut.docx", lambda: docx_bytes([("p", "cut short")])[:-200], "not a readable DOCX"),
    ],
)
def test_a_format_no_converter_reads_is_wrong_format_naming_it(name: str, make, says: str) -> None:  # type: ignore[no-untyped-def]
    rejected = _rejected(name, make())
    assert rejected.reason in ("wrong_format", "unreadable_file")
    assert says in rejected.detail


_OLE2_HEADER = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(504)


def _zip(parts: dict[str, bytes]) -> bytes:
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as package:
        for part, data in parts.items():
            package.writestr(part, data)
    return buffer.getvalue()


def test_a_store_reads_files_by_content_and_text_that_quotes_a_magic_number_stays_text(tmp_path: Path) -> None:
    shard = tmp_path / "docs" / "manuals"
    shard.mkdir(parents=True)
    (shard / "pumps.html").write_bytes(PDF)  # the input: a PDF named .html
    (shard / "photo.txt").write_bytes(_png())
    (shard / "about.md").write_bytes(b"# PDF files\n\nA PDF starts with %PDF-1.4 and ends with %%EOF.\n")
    (shard / "gif.txt").write_bytes(b"GIF89a was the second GIF version.\n")  # text that starts like a magic
    docs, rejected = DocumentStore.from_path(tmp_path / "docs").read_shard_with_rejections("manuals")
    assert {d.doc_id: d.text for d in docs} == {
        "manuals/pumps.html": "Pumps are tested before they ship.",
        "manuals/about.md": "# PDF files\n\nA PDF starts with %PDF-1.4 and ends with %%EOF.\n",
        "manuals/gif.txt": "GIF89a was the second GIF version.\n",
    }
    assert [(r.doc_id, r.reason) for r in rejected] == [("manuals/photo.txt", "wrong_format")]
    assert "photo.txt" in rejected[0].detail and "a PNG image" in rejected[0].detail


# kind 10: body text is never a heading, a list or a quote


def test_body_text_with_block_markers_is_escaped_in_docx_pptx_and_html() -> None:
    docx = convert(
        "howto.docx",
        docx_bytes([("h1", "Install"), ("p", "# install the package"), ("p", "1. not a step"), ("p", "> not a quote")]),
    )
    assert docx.text == "# Install\n\n\\# install the package\n\n1\\. not a step\n\n\\> not a quote"
    assert _headings(docx.text) == ["# Install"]
    pptx = convert("howto.pptx", pptx_bytes([("Install", ["# install the package", "- dash", "==="])]))
    assert pptx.text == "## Install\n\n\\# install the package\n\\- dash\n\\==="
    assert _headings(pptx.text) == ["## Install"]
    html = convert("howto.html", b"<h1>Install</h1><p># install the package</p><div>Title<br>---</div>")
    assert html.text == "# Install\n\n\\# install the package\n\nTitle\n\\---"
    assert _headings(html.text) == ["# Install"]
    # text loose beside blocks is a paragraph of its own, escaped like one
    loose = convert("loose.html", b"<body><h1>Install</h1># comment<p>Run it.</p>2. later <b>now</b></body>")
    assert loose.text == "# Install\n\n\\# comment\n\nRun it.\n\n2\\. later **now**"
    assert _headings(loose.text) == ["# Install"]


@pytest.mark.parametrize(
    "line",
    "# a|###### a|> a|>a|- a|+ a|* a|1. a|12) a|```sh|~~~|===|---|* * *|___".split("|"),
)
def test_escape_block_leaves_a_paragraph_whose_text_is_the_line(line: str) -> None:
    escaped = escape_block("Before\n" + line)
    tokens = MarkdownIt("commonmark").parse(escaped)
    assert [t.type for t in tokens] == ["paragraph_open", "inline", "paragraph_close"]
    assert tokens[1].content.replace("\\", "") == ("Before\n" + line).replace("\\", "")
    alone = MarkdownIt("commonmark").parse(escape_block(line))
    assert [t.type for t in alone] == ["paragraph_open", "inline", "paragraph_close"]


def test_escape_block_keeps_text_that_marks_no_block() -> None:
    for text in ("#hashtag", "-5 degrees", "1.5 million", "*emphasis*", "2024 was dry", "a # b"):
        assert escape_block(text) == text


# kind 11: deep HTML is read, not rejected


@pytest.mark.parametrize(("levels", "tag"), [(400, "div"), (1000, "blockquote"), (5000, "span")])
def test_html_nested_past_the_recursion_limit_keeps_its_text(levels: int, tag: str) -> None:
    out = convert("thread.html", deep_html(levels, "Re: the pump\nIt ships on Monday."))
    assert out.text.startswith("# Deep\n\n")
    assert "Re: the pump" in out.text and "It ships on Monday." in out.text


def test_a_main_wrapped_past_the_recursion_limit_keeps_its_headings() -> None:
    page = "<html><body>" + "<div>" * 400 + "<main><h2>Pumps</h2><p>Deep but main.</p></main>" + "</div>" * 400
    assert convert("wrapped.html", page.encode()).text == "# Pumps\n\nDeep but main."


def test_a_long_mail_thread_keeps_a_few_quote_marks_not_one_per_level() -> None:
    out = convert("thread.html", deep_html(1000, "Re: the pump\nIt ships on Monday.", "blockquote"))
    assert out.text == "# Deep\n\n> > > > > > > > Re: the pump\n> > > > > > > >\n> > > > > > > > It ships on Monday."


# kind 15: a password-protected DOCX / PPTX is encrypted, under any suffix


@pytest.mark.parametrize(
    ("name", "make"),
    [
        ("locked.docx", lambda: encrypted_office(docx_bytes([("p", "secret words")]))),
        ("locked.pptx", lambda: encrypted_office(pptx_bytes([("Secret", ["words"])]))),
        ("locked.txt", lambda: encrypted_office(docx_bytes([("p", "secret words")]))),
    ],
)
def test_a_password_protected_office_file_is_encrypted(name: str, make) -> None:  # type: ignore[no-untyped-def]
    rejected = _rejected(name, make())
    assert rejected.reason == "encrypted"
    assert "password" in rejected.detail and "EncryptedPackage" in rejected.detail
    assert "zip" not in rejected.detail.lower()


# kind 11, the other places nesting hides text: DOCX tables in tables, PPTX shapes in groups


def _nested_docx(levels: int) -> bytes:
    from docx import Document

    doc = Document()
    doc.add_paragraph("top words")
    cell = doc.add_table(rows=1, cols=1).cell(0, 0)
    for level in range(levels):
        cell.paragraphs[0].text = f"level {level}"
        cell = cell.add_table(rows=1, cols=1).cell(0, 0)
    cell.paragraphs[0].text = "deepest words"
    buffer = io.BytesIO()
    doc.save(buffer)
    return buffer.getvalue()


def test_a_docx_table_in_a_table_keeps_its_words_and_one_too_deep_says_so() -> None:
    assert convert("nested.docx", _nested_docx(2)).text == ("top words\n\n| level 0 level 1 deepest words |\n| --- |")
    rejected = _rejected("deep.docx", _nested_docx(150))  # 150 tables deep: past lxml's 256 XML levels
    assert rejected.reason == "unreadable_file" and "Excessive depth" in rejected.detail


def test_pptx_shapes_in_groups_are_read_and_escaped() -> None:
    from pptx import Presentation
    from pptx.util import Inches

    deck = Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[5])
    slide.shapes.title.text = "Pumps"
    group = slide.shapes.add_group_shape()
    group.shapes.add_textbox(Inches(1), Inches(1), Inches(2), Inches(1)).text_frame.text = "grouped words"
    inner = group.shapes.add_group_shape()
    inner.shapes.add_textbox(Inches(1), Inches(2), Inches(2), Inches(1)).text_frame.text = "# nested group"
    buffer = io.BytesIO()
    deck.save(buffer)
    assert convert("group.pptx", buffer.getvalue()).text == "## Pumps\n\ngrouped words\n\n\\# nested group"
