"""Real document files made at test time: PDF (matplotlib's PDF backend, outlines and encryption by
pypdf), DOCX (python-docx), PPTX (python-pptx), HTML pages; shared by the tests and ``bench/conversion.py``.

Each maker returns the file's bytes. The words written are the caller's, so a test knows the text a
converter must find (the right answers come from here, not from the converter under test).
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Sequence


def pdf_bytes(
    pages: Sequence[Sequence[str]],
    *,
    outline: Sequence[tuple[int, str, int]] = (),
    password: str | None = None,
    text_layer: bool = True,
) -> bytes:
    """A PDF with one page per item of ``pages``, each line of it drawn as text from the top.

    Args:
        pages: per page, its lines (plain words: each is one text object of the PDF's text layer).
        outline: ``(level, title, page index)`` bookmarks, level 1 = top (written with pypdf).
        password: encrypt with this user password (pypdf, AES-256).
        text_layer: ``False`` draws each line as paths (``pdf.fonttype`` 3 with ``text.usetex`` off
            cannot do that; ``matplotlib.textpath`` does): a page with no text layer, like a scan.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.backends.backend_pdf import PdfPages
    from matplotlib.patches import PathPatch
    from matplotlib.textpath import TextPath

    buffer = io.BytesIO()
    with matplotlib.rc_context({"pdf.fonttype": 42}), PdfPages(buffer) as pdf:
        for lines in pages:
            fig = plt.figure(figsize=(8.27, 11.69))
            for k, line in enumerate(lines):
                y = 0.95 - 0.04 * k
                if text_layer:
                    fig.text(0.08, y, line, fontsize=11, parse_math=False)  # "$" is text, not mathtext
                else:
                    ax = fig.add_axes((0, 0, 1, 1))
                    ax.set_axis_off()
                    ax.set_xlim(0, 827)
                    ax.set_ylim(0, 1169)
                    ax.add_patch(PathPatch(TextPath((66, 1169 * y), line, size=11), color="black"))
            pdf.savefig(fig)
            plt.close(fig)
    data = buffer.getvalue()
    if not outline and password is None:
        return data
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(data)))
    parents: dict[int, object] = {}
    for level, title, page in outline:
        parents[level] = writer.add_outline_item(title=title, page_number=page, parent=parents.get(level - 1))
    if password is not None:
        writer.encrypt(password, algorithm="AES-256")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def docx_bytes(blocks: Sequence[tuple[str, object]]) -> bytes:
    """A DOCX of ``blocks``: ``("h1".."h6", text)`` headings (Word's Heading N styles), ``("p", text)``
    paragraphs, ``("table", [[cell, ...], ...])`` tables (first row the header)."""
    from docx import Document

    doc = Document()
    for kind, value in blocks:
        if kind.startswith("h"):
            doc.add_heading(str(value), level=int(kind[1:]))
        elif kind == "p":
            doc.add_paragraph(str(value))
        elif kind == "table":
            rows = list(value)  # type: ignore[call-overload]
            table = doc.add_table(rows=len(rows), cols=len(rows[0]))
            for i, row in enumerate(rows):
                for j, cell in enumerate(row):
                    table.cell(i, j).text = str(cell)
        else:
            raise ValueError(kind)
    buffer = io.BytesIO()
    doc.save(buffer)
    return buffer.getvalue()


def pptx_bytes(slides: Sequence[tuple[str, Sequence[str]]]) -> bytes:
    """A PPTX with one slide per ``(title, bullet lines)`` (layout "Title and Content")."""
    from pptx import Presentation

    deck = Presentation()
    for title, bullets in slides:
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title
        body = slide.placeholders[1].text_frame
        body.text = bullets[0] if bullets else ""
        for line in bullets[1:]:
            body.add_paragraph().text = line
    buffer = io.BytesIO()
    deck.save(buffer)
    return buffer.getvalue()


def zip_bomb_docx(inflated_bytes: int) -> bytes:
    """A DOCX (a real one, made by python-docx) with one more part of ``inflated_bytes`` zeros,
    deflated to a few KB: what a decompression limit must refuse before reading it."""
    base = docx_bytes([("p", "a small document")])
    buffer = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(base)) as src, zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as dst:
        for item in src.infolist():
            dst.writestr(item, src.read(item.filename))
        with dst.open("word/media/padding.bin", "w", force_zip64=True) as part:
            block = b"\0" * (1 << 20)
            for _ in range(inflated_bytes // len(block)):
                part.write(block)
    return buffer.getvalue()


def html_page(title: str, sections: Sequence[tuple[int, str, str]], *, table: Sequence[Sequence[str]] = ()) -> str:
    """A whole HTML page as a site serves it: head with a style and a script, a nav bar and a footer
    around an ``<article>`` of ``(level, heading, paragraph)`` sections and an optional table."""
    body = "".join(f"<h{lv}>{h}</h{lv}>\n<p>{p}</p>\n" for lv, h, p in sections)
    if table:
        head, *rows = table
        cells = "".join(f"<th>{c}</th>" for c in head)
        body += "<table><thead><tr>" + cells + "</tr></thead><tbody>"
        body += "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
        body += "</tbody></table>\n"
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>{title}</title><style>body {{ color: red; }} .menu {{ display: flex; }}</style>"
        "<script>var tracking = 'SCRIPTTEXT'; console.log(tracking);</script></head><body>"
        "<nav class='menu'><a href='/'>NAVHOME</a> | <a href='/about'>NAVABOUT</a></nav>"
        f"<main><article>\n{body}</article></main>"
        "<footer>FOOTERTEXT copyright</footer></body></html>"
    )


def scanned_pdf_bytes(pages: Sequence[Sequence[str]], *, dpi: int = 200) -> bytes:
    """An image-only PDF, as a scanner makes it: each page of ``pages`` is an A4 greyscale picture of
    its lines (Pillow draws them in matplotlib's DejaVu Sans at 11 pt), with no text layer at all.

    Args:
        pages: per page, its lines; dpi: the pictures' resolution (a scanner's usual 200-300 dpi).
    """
    from matplotlib import font_manager
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.truetype(font_manager.findfont("DejaVu Sans"), size=round(11 * dpi / 72))
    width, height = round(8.27 * dpi), round(11.69 * dpi)
    images = []
    for lines in pages:
        image = Image.new("L", (width, height), color=255)
        draw = ImageDraw.Draw(image)
        for k, line in enumerate(lines):
            draw.text((round(0.08 * width), round((0.05 + 0.04 * k) * height)), line, fill=0, font=font)
        images.append(image)
    buffer = io.BytesIO()
    images[0].save(buffer, format="PDF", save_all=True, append_images=images[1:], resolution=dpi)
    return buffer.getvalue()
