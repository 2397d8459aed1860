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


#: The generators whose page layout :func:`site_page` imitates (their real output's structure, read
#: from mdBook 0.4 (the Rust book), texinfo 6.8 (libffi's manual), Sphinx 7 and DocBook XSL 1.79).
SITE_GENERATORS = ("mdbook", "texinfo", "sphinx", "docbook")

#: Lines of site furniture :func:`site_page` writes around the content (none may reach the text).
SITE_FURNITURE = (
    "Keyboard shortcuts",
    "to show this help",
    "Toggle Table of Contents",
    "Coal",
    "Navy",
    "Search this book",
    "Next: ",
    "Previous: ",
    "Up: ",
    "Quick search",
    "Navigation header",
    "Table of Contents",
    "Prev",
    "Home",
    "Copyright 2026",
    "\u00b6",
    "SIDEBARCHAPTER",
    "BOOKTITLE",
)


def site_page(generator: str, title: str, body: Sequence[tuple[str, object]], *, sub_chapter: bool = False) -> str:
    """One page of a documentation site as ``generator`` (one of :data:`SITE_GENERATORS`) writes it:
    its furniture (:data:`SITE_FURNITURE`: navigation, menus, dialogs, theme pickers, prev/next bars,
    search boxes, footers, heading anchors) around the page's content.

    Args:
        title: the page's own title (its top heading; ``BOOKTITLE`` is the site's).
        body: ``("h", text)`` a section heading one level below the title, ``("p", text)`` a paragraph,
            ``("code", text)`` a code block (``language-python``, indentation kept), ``("table", rows)``
            a table (first row the header), ``("ul", items)`` a list.
        sub_chapter: mdBook writes a nested chapter's title as ``<h2>`` (its Markdown source's ``##``).
    """
    top = 2 if sub_chapter else 1
    anchor = {"sphinx": "<a class='headerlink' href='#x' title='Link to this heading'>\u00b6</a>"}.get(generator, "")
    parts = [f"<h{top}>{title}{anchor}</h{top}>"]
    for kind, value in body:
        if kind == "h":
            parts.append(f"<h{top + 1}>{value}{anchor}</h{top + 1}>")
        elif kind == "p":
            parts.append(f"<p>{value}</p>")
        elif kind == "code":
            parts.append(f"<pre><code class='language-python'>{value}</code></pre>")
        elif kind == "ul":
            parts.append("<ul>" + "".join(f"<li>{item}</li>" for item in value) + "</ul>")  # type: ignore[attr-defined]
        elif kind == "table":
            head, *rows = value  # type: ignore[misc]
            parts.append(
                "<table><thead><tr>"
                + "".join(f"<th>{c}</th>" for c in head)
                + "</tr></thead><tbody>"
                + "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
                + "</tbody></table>"
            )
        else:
            raise ValueError(kind)
    content = "\n".join(parts)
    return _SITE_LAYOUTS[generator](title, content)


def _mdbook(title: str, content: str) -> str:
    return (
        f"<!DOCTYPE HTML><html lang='en'><head><meta charset='UTF-8'><title>{title} - BOOKTITLE</title>"
        "<script>var path_to_root = '';</script></head><body>"
        "<div id='mdbook-help-container'><div id='mdbook-help-popup'>"
        "<h2 class='mdbook-help-title'>Keyboard shortcuts</h2><div><p>Press <kbd>?</kbd> to show this help</p>"
        "<p>Press <kbd>Esc</kbd> to hide this help</p></div></div></div>"
        "<div id='mdbook-body-container'><nav id='mdbook-sidebar' class='sidebar' aria-label='Table of contents'>"
        "<ol class='chapter'><li><a href='intro.html'>SIDEBARCHAPTER Intro</a></li></ol></nav>"
        "<div id='mdbook-page-wrapper' class='page-wrapper'><div class='page'>"
        "<div id='mdbook-menu-bar' class='menu-bar sticky'><div class='left-buttons'>"
        "<label id='mdbook-sidebar-toggle' class='icon-button'>Toggle Table of Contents</label>"
        "<ul id='mdbook-theme-list' class='theme-popup' role='menu'>"
        "<li role='none'><button role='menuitem'>Coal</button></li>"
        "<li role='none'><button role='menuitem'>Navy</button></li></ul></div>"
        "<h1 class='menu-title'>BOOKTITLE</h1></div>"
        "<div id='mdbook-search-wrapper' class='hidden'><form id='mdbook-searchbar-outer'>"
        "<input type='search' placeholder='Search this book ...'></form></div>"
        f"<div id='mdbook-content' class='content'><main>\n{content}\n</main>"
        "<nav class='nav-wrapper' aria-label='Page navigation'><a rel='prev' href='a.html'>Prev</a>"
        "<a rel='next prefetch' href='b.html'>Next: </a></nav></div></div></div></div></body></html>"
    )


def _texinfo(title: str, content: str) -> str:
    return (
        "<!DOCTYPE html><html><!-- Created by GNU Texinfo 6.8 --><head>"
        f"<meta http-equiv='Content-Type' content='text/html; charset=utf-8'><title>{title} (BOOKTITLE)</title>"
        "<style>a.copiable-anchor {visibility: hidden}</style></head><body lang='en'>"
        "<div class='chapter' id='x'><div class='header'><p>"
        "Next: <a href='n.html' accesskey='n' rel='next'>Memory</a>, "
        "Previous: <a href='p.html' accesskey='p' rel='prev'>Intro</a>, "
        "Up: <a href='index.html' accesskey='u' rel='up'>BOOKTITLE</a> &nbsp; "
        "[<a href='Index.html' title='Index' rel='index'>Index</a>]</p></div><hr>"
        f"{content}"
        "<ul class='section-toc'><li><a href='s1.html' accesskey='1'>SIDEBARCHAPTER One</a></li>"
        "<li><a href='s2.html' accesskey='2'>SIDEBARCHAPTER Two</a></li></ul>"
        "<hr><div class='header'><p>Next: <a href='n.html'>Memory</a>, Previous: <a href='p.html'>Intro</a>, "
        "Up: <a href='index.html'>BOOKTITLE</a></p></div></div></body></html>"
    )


def _sphinx(title: str, content: str) -> str:
    return (
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{title} &#8212; BOOKTITLE 1.0</title>"
        "<script src='_static/doctools.js'></script></head><body>"
        "<div class='related' role='navigation' aria-label='Related'><h3>Navigation</h3><ul>"
        "<li class='right'><a href='genindex.html' accesskey='I'>index</a></li>"
        "<li class='right'><a href='next.html' accesskey='N'>next</a> |</li>"
        "<li class='nav-item nav-item-0'><a href='index.html'>BOOKTITLE 1.0</a> &#187;</li></ul></div>"
        "<div class='document'><div class='documentwrapper'><div class='bodywrapper'>"
        f"<div class='body' role='main'><section id='x'>\n{content}\n</section></div></div></div>"
        "<div class='sphinxsidebar' role='navigation' aria-label='Main'><div class='sphinxsidebarwrapper'>"
        "<h3>SIDEBARCHAPTER Contents</h3><search id='searchbox' role='search'><h3>Quick search</h3>"
        "<form class='search' action='search.html'><input type='text' name='q'></form></search></div></div></div>"
        "<div class='footer'>&#169; Copyright 2026, Acme. Created using Sphinx 7.2.</div></body></html>"
    )


def _docbook(title: str, content: str) -> str:
    return (
        "<html><head><meta http-equiv='Content-Type' content='text/html; charset=UTF-8'>"
        f"<title>{title}</title><meta name='generator' content='DocBook XSL Stylesheets V1.79.2'></head><body>"
        "<div class='navheader'><table width='100%' summary='Navigation header'>"
        f"<tr><th colspan='3' align='center'>{title}</th></tr><tr><td width='20%' align='left'>"
        "<a accesskey='p' href='ch01.html'>Prev</a> </td><th width='60%' align='center'>BOOKTITLE</th>"
        "<td width='20%' align='right'> <a accesskey='n' href='ch03.html'>Next</a></td></tr></table><hr></div>"
        "<div class='chapter'><div class='titlepage'><div><div>"
        f"{content}"
        "<div class='toc'><p><b>Table of Contents</b></p><dl class='toc'><dt><span class='sect1'>"
        "<a href='#s'>SIDEBARCHAPTER 2.1</a></span></dt></dl></div></div></div></div></div>"
        "<div class='navfooter'><hr><table width='100%' summary='Navigation footer'><tr>"
        "<td width='40%' align='left'><a accesskey='p' href='ch01.html'>Prev</a> </td>"
        "<td width='20%' align='center'><a accesskey='u' href='index.html'>Up</a></td>"
        "<td width='40%' align='right'> <a accesskey='n' href='ch03.html'>Next</a></td></tr>"
        "<tr><td width='40%' align='left' valign='top'>Chapter 1. Intro </td>"
        "<td width='20%' align='center'><a accesskey='h' href='index.html'>Home</a></td>"
        "<td width='40%' align='right' valign='top'> Chapter 3. Memory</td></tr></table></div></body></html>"
    )


_SITE_LAYOUTS = {"mdbook": _mdbook, "texinfo": _texinfo, "sphinx": _sphinx, "docbook": _docbook}


def encrypted_office(data: bytes, password: str = "pw") -> bytes:
    """A password-protected DOCX / PPTX / XLSX of ``data`` (an unprotected one), as Office writes it:
    an OLE2 compound file with ``EncryptionInfo`` and ``EncryptedPackage`` streams (agile encryption,
    written by msoffcrypto-tool)."""
    from msoffcrypto.format.ooxml import OOXMLFile

    out = io.BytesIO()
    OOXMLFile(io.BytesIO(data)).encrypt(password, out)
    return out.getvalue()


def deep_html(levels: int, text: str, tag: str = "div") -> bytes:
    """An HTML page whose ``text`` paragraphs sit ``levels`` ``tag`` elements deep (a mail thread's
    quotes, a generated page's wrappers)."""
    inner = "".join(f"<p>{line}</p>" for line in text.split("\n"))
    return f"<html><body><h1>Deep</h1>{f'<{tag}>' * levels}{inner}{f'</{tag}>' * levels}</body></html>".encode()


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


#: A styled line of :func:`book_pdf_bytes`: its text, font size (points) and whether it is bold.
StyledLine = tuple[str, float, bool]


def book_pdf_bytes(
    pages: Sequence[Sequence[str | StyledLine]],
    *,
    head: str | None = None,
    foot: str | None = None,
    outline: Sequence[tuple[int, str, int]] = (),
    raw_title: bytes | None = None,
) -> bytes:
    """A PDF laid out like a book's pages: each page's lines stacked from the top margin (a plain
    string is 11 pt regular; ``(text, size, bold)`` a styled line), 1.4 times their size apart, with
    page furniture in the margins.

    Args:
        pages: per page, its body lines.
        head: a running head drawn in the top margin of every page (``{page}`` is the page number from 1).
        foot: a running foot drawn in the bottom margin (``{page}`` as above; ``"{page}"`` alone: a bare
            page number).
        outline: ``(level, title, page index)`` bookmarks, as :func:`pdf_bytes`.
        raw_title: the bytes of the first bookmark's ``/Title`` as the file spells them (e.g.
            ``b"<FEFFD800>"``: a BOM and a lone high surrogate), written over its title in place.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.backends.backend_pdf import PdfPages

    height_pt = 11.69 * 72
    buffer = io.BytesIO()
    with matplotlib.rc_context({"pdf.fonttype": 42, "pdf.compression": 0}), PdfPages(buffer) as pdf:
        for number, lines in enumerate(pages, start=1):
            fig = plt.figure(figsize=(8.27, 11.69))
            if head is not None:
                fig.text(0.08, 0.965, head.format(page=number), fontsize=9, parse_math=False)
            if foot is not None:
                fig.text(0.5, 0.03, foot.format(page=number), fontsize=9, parse_math=False)
            y = 0.93
            for line in lines:
                text, size, bold = (line, 11.0, False) if isinstance(line, str) else line
                fig.text(0.08, y, text, fontsize=size, fontweight="bold" if bold else "normal", parse_math=False)
                y -= 1.4 * size / height_pt
            pdf.savefig(fig)
            plt.close(fig)
    data = buffer.getvalue()
    if not outline:
        return data
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(data)))
    parents: dict[int, object] = {}
    placeholder = "TITLEPLACEHOLDER"
    for n, (level, title, page) in enumerate(outline):
        name = placeholder if raw_title is not None and n == 0 else title
        parents[level] = writer.add_outline_item(title=name, page_number=page, parent=parents.get(level - 1))
    out = io.BytesIO()
    writer.write(out)
    data = out.getvalue()
    if raw_title is not None:
        spelled = f"({placeholder})".encode()
        assert spelled in data and len(raw_title) <= len(spelled), "the placeholder title is not in the file"
        data = data.replace(spelled, raw_title.ljust(len(spelled)), 1)  # same length: offsets stay right
    return data
