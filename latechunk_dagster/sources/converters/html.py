"""HTML: the page's body as Markdown (markdownify on BeautifulSoup with lxml), without scripts,
styles, navigation, headers, footers, asides and forms.

Chosen by measurement (``bench/conversion.py``, bench/README.md): on the same 12 pages markdownify
converted 53k tokens/s, trafilatura and selectolax (+ markdownify) 1.2x faster; but on a short
page trafilatura kept the navigation bar's words and dropped the heading marks and the table (its
boilerplate detector falls back to all text), and selectolax alone makes no Markdown. markdownify
keeps ``h1``-``h6`` as ``#`` headings and tables as pipe tables on every page.

The encoding is found by BeautifulSoup (a BOM, ``<meta charset>``, else detection). Links keep
their text; images are left out.
"""

from __future__ import annotations

from latechunk_dagster.sources.converters.base import Converted, Rejection, converter_name, tidy

#: Version of this module's rules (what is left out, Markdown options): part of the converter's name.
RULES = 1

#: Elements left out with everything inside them.
LEFT_OUT = ("script", "style", "noscript", "template", "nav", "header", "footer", "aside", "form", "iframe", "svg")


def convert_html(data: bytes) -> Converted:
    """Markdown text of an HTML page's body.

    Raises:
        Rejection: ``unreadable_file`` when the parser fails on the bytes.
    """
    import markdownify
    from bs4 import BeautifulSoup

    try:
        soup = BeautifulSoup(data, "lxml")
        for element in soup(list(LEFT_OUT)):
            element.decompose()
        root = soup.body or soup
        text = markdownify.MarkdownConverter(heading_style="ATX", bullets="-", strip=["a", "img"]).convert_soup(root)
    except Exception as exc:  # any parser failure on a hostile file is the file's fault
        raise Rejection("unreadable_file", f"not readable HTML ({type(exc).__name__}: {exc})") from None
    return Converted(tidy(text), converter_name("html", RULES, "markdownify"))
