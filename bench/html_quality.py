"""HTML main-content quality: the product's rule (``sources/converters/html.py``) against the
libraries that extract a page's main content, side by side on the same pages, in one run.

Pages:

* **generated** (known truth): ``tests/document_files.site_page`` imitates mdBook, texinfo, Sphinx and
  DocBook output, furniture around a body of headings, paragraphs, a code block, a table and a
  list. Measured: furniture strings kept (of :data:`tests.document_files.SITE_FURNITURE`), content
  items kept (paragraphs, table cells, list items, code lines), headings kept as Markdown headings
  (any level), the title as the first ``#`` line, the table as a pipe table, the code block's
  indentation kept.
* **real** (sites found on this machine, read as they are): the Rust book (mdBook), libffi's manual
  (texinfo 6.8), valgrind's manual (DocBook XSL), npm's command docs, libtasn1's (gtk-doc), libxslt's
  old table-framed pages, Node.js's API docs. Measured: lines on 90%+ of a
  site's pages (furniture found by repetition; lines with 3+ letters), headings kept (Markdown
  heading lines / the ``h1``-``h6`` of the page's content, by an XPath per generator), code lines
  indented in a ``<pre>`` that are kept with their indentation.

Extractors: ``ours`` (the product), ``before`` (html/1: markdownify of ``<body>`` minus nav, header,
footer, aside, form), ``trafilatura`` (Markdown output, tables and formatting on),
``readability`` (readability-lxml's summary, then the product's Markdown settings), ``resiliparse``
(``extract_plain_text(main_content=True)``), ``justext`` (its good paragraphs; headings as ``#``).
The libraries are not dependencies: install them to compare (``pip install trafilatura
readability-lxml resiliparse justext``); a missing one is named and left out.

Run: ``python bench/html_quality.py [--pages 40] [--quick]``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from latechunk_dagster.sources.converters import convert  # noqa: E402
from tests.document_files import SITE_FURNITURE, SITE_GENERATORS, site_page  # noqa: E402

_RUST = sorted(Path.home().glob(".rustup/toolchains/*/share/doc/rust/html/book"))
#: site -> (folder, file glob, XPath of the content's headings)
REAL_SITES = {
    "mdbook (Rust book)": (
        _RUST[0] if _RUST else None,
        "ch*.html",
        "//main//*[self::h1 or self::h2 or self::h3 or self::h4]",
    ),
    "texinfo (libffi)": (
        Path("/usr/share/doc/libffi8/html"),
        "*.html",
        "//*[self::h1 or self::h2 or self::h3 or self::h4]",
    ),
    "docbook (valgrind)": (
        Path("/usr/share/doc/valgrind/html"),
        "*.html",
        "//*[self::h1 or self::h2 or self::h3 or self::h4]",
    ),
    "npm docs": (
        Path("/usr/lib/node_modules/npm/docs/output/commands"),
        "*.html",
        "//*[@id='_content']//*[self::h2 or self::h3 or self::h4] | //header//h1",
    ),
    "gtk-doc (libtasn1)": (Path("/usr/share/gtk-doc/html/libtasn1"), "*.html", "//*[self::h1 or self::h2 or self::h3]"),
    "table layout (libxslt)": (
        Path("/usr/share/doc/libxslt1-dev/html"),
        "*.html",
        "//*[self::h1 or self::h2 or self::h3]",
    ),
    "node.js api": (
        Path("/usr/share/doc/nodejs/api"),
        "*.html",
        "//*[@id='apicontent']//*[self::h2 or self::h3 or self::h4]",
    ),
}


def generated_pages(count: int) -> list[tuple[str, str, dict[str, list[str]]]]:
    """``count`` pages per generator: (generator, html, truth)."""
    out = []
    for k in range(count):
        title = f"Chapter {k} on owls"
        body: list[tuple[str, object]] = [
            ("p", f"Owls of chapter {k} hunt at night over open fields."),
            ("h", f"Feathers {k}"),
            ("p", f"Soft edges make flight {k} almost silent."),
            ("code", f"def glide_{k}(owl):\n    if owl.wings:\n        return {k}\n"),
            ("h", f"Weights {k}"),
            ("table", [["owl", "weight"], [f"barn {k}", "500 g"], [f"tawny {k}", "450 g"]]),
            ("ul", [f"snowy {k}", f"eagle {k}"]),
        ]
        truth = {
            "headings": [title, f"Feathers {k}", f"Weights {k}"],
            "content": [
                f"Owls of chapter {k} hunt at night over open fields.",
                f"Soft edges make flight {k} almost silent.",
                f"barn {k}",
                "500 g",
                f"tawny {k}",
                f"snowy {k}",
                f"eagle {k}",
                f"def glide_{k}(owl):",
            ],
            "indented": [f"        return {k}"],
            "table_row": [f"| barn {k} | 500 g |"],
        }
        for generator in SITE_GENERATORS:
            out.append((generator, site_page(generator, title, body, sub_chapter=generator == "mdbook"), truth))
    return out


def extractors() -> tuple[dict[str, Callable[[bytes], str]], list[str]]:
    """name -> page bytes to text; and the libraries not installed."""
    found: dict[str, Callable[[bytes], str]] = {"ours": lambda data: convert("page.html", data).text, "before": _before}
    missing = []
    try:
        import trafilatura

        found["trafilatura"] = lambda data: (
            trafilatura.extract(
                data.decode("utf-8", "replace"), output_format="markdown", include_tables=True, include_formatting=True
            )
            or ""
        )
    except ImportError:
        missing.append("trafilatura")
    try:
        from readability import Document

        found["readability"] = lambda data: _markdown(
            Document(data.decode("utf-8", "replace")).summary(html_partial=True)
        )
    except ImportError:
        missing.append("readability-lxml")
    try:
        from resiliparse.extract.html2text import extract_plain_text
        from resiliparse.parse.html import HTMLTree

        found["resiliparse"] = lambda data: extract_plain_text(
            HTMLTree.parse(data.decode("utf-8", "replace")), main_content=True, preserve_formatting=True
        )
    except ImportError:
        missing.append("resiliparse")
    try:
        import justext

        stop = justext.get_stoplist("English")
        found["justext"] = lambda data: "\n\n".join(
            ("# " if p.is_heading else "") + p.text for p in justext.justext(data, stop) if not p.is_boilerplate
        )
    except ImportError:
        missing.append("justext")
    return found, missing


def _markdown(html: str) -> str:
    import markdownify

    return markdownify.markdownify(html, heading_style="ATX", bullets="-", strip=["a", "img"])


def _before(data: bytes) -> str:
    """html/1, the rule this replaced: ``<body>`` minus scripts, styles, nav, header, footer, aside, form."""
    import markdownify
    from bs4 import BeautifulSoup, XMLParsedAsHTMLWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", XMLParsedAsHTMLWarning)
        soup = BeautifulSoup(data, "lxml")
    left_out = ["script", "style", "noscript", "template", "nav", "header", "footer", "aside", "form", "iframe", "svg"]
    for element in soup(left_out):
        element.decompose()
    converter = markdownify.MarkdownConverter(heading_style="ATX", bullets="-", strip=["a", "img"])
    return converter.convert_soup(soup.body or soup)


_HEADING_LINE = re.compile(r"^#{1,6} +(.*?)\s*#*$")


def _heading_lines(text: str) -> list[str]:
    return [m.group(1).strip() for m in map(_HEADING_LINE.match, text.split("\n")) if m]


def score_generated(extract: Callable[[bytes], str], pages: list[tuple[str, str, dict[str, list[str]]]]) -> dict:
    totals: Counter[str] = Counter()
    seconds = 0.0
    extract(pages[0][1].encode())  # imports and caches outside the timing
    for _, html, truth in pages:
        data = html.encode()
        started = time.perf_counter()
        text = extract(data)
        seconds += time.perf_counter() - started
        lines = text.split("\n")
        headings = _heading_lines(text)
        totals["furniture"] += sum(1 for f in SITE_FURNITURE if f in text)
        totals["content"] += sum(1 for c in truth["content"] if c in text)
        totals["content_of"] += len(truth["content"])
        totals["headings"] += sum(1 for h in truth["headings"] if h in headings)
        totals["headings_of"] += len(truth["headings"])
        totals["title_top"] += bool(lines) and lines[0].strip() == f"# {truth['headings'][0]}"
        totals["tables"] += all(r in lines for r in truth["table_row"])
        totals["indent"] += all(i in lines for i in truth["indented"])
    totals["pages"] = len(pages)
    return {**totals, "pages_s": len(pages) / seconds}


def score_real(extract: Callable[[bytes], str], folder: Path, pattern: str, xpath: str, limit: int) -> dict | None:
    import lxml.html

    files = [f for f in sorted(folder.glob(pattern)) if f.name not in ("all.html", "print.html")][:limit]
    if len(files) < 3:
        return None
    repeated: Counter[str] = Counter()
    found = truth = kept_indent = indent_of = 0
    extract(files[0].read_bytes())  # imports and caches outside the timing
    seconds = 0.0
    for file in files:
        data = file.read_bytes()
        tree = lxml.html.fromstring(data)
        truth += len(tree.xpath(xpath))
        indented = {
            line.rstrip()
            for pre in tree.xpath("//pre")
            for line in pre.text_content().split("\n")
            if line.startswith("    ") and line.strip()
        }
        started = time.perf_counter()
        text = extract(data)
        seconds += time.perf_counter() - started
        found += len(_heading_lines(text))
        lines = {line.rstrip() for line in text.split("\n")}
        indent_of += len(indented)
        kept_indent += len(indented & lines)
        repeated.update({line.strip() for line in text.split("\n") if len(re.findall(r"[A-Za-z]", line)) >= 3})
    every = [line for line, n in repeated.items() if n >= 0.9 * len(files)]
    return {
        "pages": len(files),
        "furniture_lines": len(every),
        "example": every[:3],
        "headings": found,
        "headings_of": truth,
        "indent": kept_indent,
        "indent_of": indent_of,
        "pages_s": len(files) / seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=int, default=40, help="real pages per site, and generated pages per generator")
    parser.add_argument("--quick", action="store_true", help="3 pages each: a smoke run in seconds, no figures")
    args = parser.parse_args()
    count = 3 if args.quick else args.pages
    found, missing = extractors()
    if missing:
        print(f"not installed (left out): {', '.join(missing)}")
    pages = generated_pages(count)
    print(f"\ngenerated pages: {len(pages)} ({count} per generator: {', '.join(SITE_GENERATORS)})")
    print(
        "| extractor | furniture kept | content kept | headings kept | title is # | pipe table | code indent |", end=""
    )
    print(" pages/s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, extract in found.items():
        s = score_generated(extract, pages)
        print(
            f"| {name} | {s['furniture']} | {s['content']}/{s['content_of']} | {s['headings']}/{s['headings_of']} | "
            f"{s['title_top']}/{s['pages']} | {s['tables']}/{s['pages']} | {s['indent']}/{s['pages']} | "
            f"{s['pages_s']:.0f} |"
        )
    print(f"\nreal sites (up to {count} pages each): lines on 90%+ of a site's pages, headings, indented code lines")
    print("| site | extractor | furniture lines | headings kept | code indent kept | pages/s |")
    print("|---|---|---:|---:|---:|---:|")
    for site, (folder, pattern, xpath) in REAL_SITES.items():
        if folder is None or not folder.is_dir():
            print(f"| {site} | (not on this machine) | | | | |")
            continue
        for name, extract in found.items():
            s = score_real(extract, folder, pattern, xpath, count)
            if s is None:
                continue
            print(
                f"| {site} ({s['pages']}) | {name} | {s['furniture_lines']} {s['example']} | "
                f"{s['headings']}/{s['headings_of']} | {s['indent']}/{s['indent_of']} | {s['pages_s']:.0f} |"
            )


if __name__ == "__main__":
    main()
