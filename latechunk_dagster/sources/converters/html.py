"""HTML: the page's main content as Markdown (markdownify on BeautifulSoup with lxml), without the
site around it: navigation, menus, dialogs, theme pickers, prev/next bars, search boxes, footers.

Chosen by measurement (``bench/html_quality.py``, bench/README.md "2026-12-07"): on pages that
imitate mdBook, texinfo, Sphinx and DocBook output and on real ones found on the machine (the Rust
book, an mdBook site; libffi's texinfo manual; valgrind's DocBook manual), trafilatura,
readability-lxml, resiliparse and jusText each lost headings, tables or code indentation, or kept
furniture, where the rule below keeps every heading, table and code line and no furniture line.

The rule, in order:

1. **Encoding** by the WHATWG rules (:func:`~latechunk_dagster.sources.converters.charset.decode_html`:
   a BOM, a declared charset, else UTF-8 if the bytes are UTF-8, else windows-1252), never a guess.
2. **Main content**: the first ``<main>`` (or ``role="main"``: Sphinx's ``div.body``), else a page's
   only ``<article>``, else ``<body>`` (one of them without any text, an app shell's, is passed
   over). What is outside it is left out (mdBook's help dialog, theme menu, search box and
   book-title bar are all outside its ``<main>``).
3. **Furniture** left out inside it, with everything inside: the elements of :data:`LEFT_OUT`
   (``nav``, ``aside``, ``footer``, ``dialog``, ``form``, buttons, inputs, scripts, styles); elements
   whose ARIA ``role`` is one of :data:`FURNITURE_ROLES`; hidden ones (``hidden``,
   ``aria-hidden="true"``, ``display: none``); those with a class or id of :data:`FURNITURE_NAMES`
   (``toc``, ``navheader``, ``nav-panel``, ``headerlink`` pilcrows, ...); and **prev/next bars**: a
   block holding two or more links marked as site navigation (``rel`` next / prev / up / index /
   home, or an ``accesskey``: texinfo's and DocBook's bars, texinfo's chapter menus) and little
   other text, or starting with ``Next:`` / ``Previous:`` / ``Up:`` labels; a page's own table of
   contents (a list of 3+ links, all to ``#`` places on the page, nothing else); a heading's anchor
   mark (``#``, ``¶``, ``§``). A ``<header>`` beside the main content (a child of ``<body>``) is left
   out; inside it (an article's or a section's title) it is kept. On a page without ``<main>`` or
   ``<article>``, lists of 5+ items that are only links (a site menu) are left out too. **Layout
   tables** (a table holding a table or a heading, or of one column: an old site's frame) are read
   as the blocks they hold.
4. **Headings**: the page's own title is its top heading: the levels are shifted so that the highest
   heading of the main content is ``#`` (an mdBook chapter written as ``## Data Types`` is ``#``);
   a page without any heading gets its ``<title>`` as ``#``.
5. **Markdown**: ``h1``-``h6`` as ATX headings, tables as pipe tables (a table without ``<th>``: its
   first row the header), lists, code blocks fenced with their language (``class="language-rust"``)
   and indentation kept; links keep their text, images are left out. Body text that Markdown would
   read as a block marker (``# install``, ``1. step``) is escaped
   (:func:`~latechunk_dagster.sources.converters.base.escape_block`): a paragraph's, a ``<div>``'s
   without blocks, and text loose beside blocks (read as the paragraph a browser makes of it).
6. **Depth**: markdownify recurses once per element level and fails past ~330 levels
   (``RecursionError``); an element deeper than :data:`MAX_DEPTH` is read as plain text, one
   paragraph per line of its text (mail threads and generated pages nest that deep), and block
   quotes stop adding ``>`` marks past :data:`MAX_QUOTE_DEPTH` levels.
"""

from __future__ import annotations

import re
import warnings
from typing import Any

from latechunk_dagster.sources.converters.base import (
    ConversionLimits,
    Converted,
    Rejection,
    converter_name,
    escape_block,
    tidy,
)
from latechunk_dagster.sources.converters.charset import decode_html

#: Version of this module's rules (main content, furniture, headings, escapes): part of the converter's name.
RULES = 2

#: Elements left out with everything inside them, wherever they are.
LEFT_OUT = (
    "script",
    "style",
    "noscript",
    "template",
    "nav",
    "aside",
    "footer",
    "form",
    "iframe",
    "svg",
    "dialog",
    "button",
    "input",
    "select",
    "textarea",
    "menu",
    "object",
    "embed",
    "canvas",
    "hr",
)

#: ARIA roles of site furniture (WAI-ARIA 1.2 landmark and widget roles).
FURNITURE_ROLES = frozenset(
    {"navigation", "menu", "menubar", "dialog", "alertdialog", "search", "banner", "contentinfo", "complementary"}
    | {"toolbar", "tablist", "tooltip", "doc-toc"}
)

#: Class or id names (whole names, lower case) of furniture in the generators' output: DocBook
#: (``navheader``, ``navfooter``, ``toc``), texinfo (``nav-panel``, ``section-toc``, ``menu``),
#: Sphinx (``related``, ``sphinxsidebar``, ``headerlink``), mdBook (``nav-wrapper``, ``menu-bar``;
#: ``boring``: the lines of a code block it hides), texinfo's ``¶`` anchors, and common site templates.
FURNITURE_NAMES = frozenset(
    {"navheader", "navfooter", "toc", "nav-panel", "section-toc", "menu", "related", "sphinxsidebar"}
    | {"headerlink", "nav-wrapper", "nav-wide-wrapper", "menu-bar", "navbar", "sidebar", "breadcrumb"}
    | {"breadcrumbs", "skip-link", "searchbox", "search-box", "theme-popup", "mdbook-help-container"}
    | {"copiable-anchor", "copiable-link", "boring", "footer", "navigation", "banner", "table_of_contents"}
    | {"table-of-contents"}
)

#: ``rel`` values of links that move through a site, not through the text.
NAV_RELS = frozenset({"next", "prev", "previous", "up", "index", "home", "start", "contents", "first", "last", "top"})

#: An element nested deeper than this (levels below the main content) is read as plain text.
MAX_DEPTH = 120

#: Block quotes nested deeper than this (a long mail thread) are read as the text they hold, without
#: more ``>`` marks.
MAX_QUOTE_DEPTH = 8

_ANCHOR_MARKS = frozenset({"", "#", "\u00b6", "\u00a7", "\U0001f517", "\u2693"})
_BLOCKS = ("p", "div", "table", "ul", "ol", "dl", "section", "center", "blockquote")
_NAV_LABELS = re.compile(r"\b(?:Next|Previous|Prev|Up)\s*:", re.IGNORECASE)
_NAV_LABEL_START = re.compile(r"^\s*(?:Next|Previous|Prev|Up)\s*:", re.IGNORECASE)
_BLOCK_CHILDREN = ("p", "div", "table", "ul", "ol", "dl", "pre", "blockquote", "h1", "h2", "h3", "h4", "h5", "h6")
_HEADINGS = ("h1", "h2", "h3", "h4", "h5", "h6")


def convert_html(data: bytes, limits: ConversionLimits | None = None) -> Converted:
    """Markdown text of an HTML page's main content (module docstring: the rule).

    ``limits``: the one converter signature's (:class:`~latechunk_dagster.sources.converters.base.ConversionLimits`);
    this format's reading is bounded by ``max_file_bytes`` (checked before) and ``max_text_chars`` (after).

    Raises:
        Rejection: ``unreadable_file`` when the parser fails on the bytes.
    """
    from bs4 import BeautifulSoup, XMLParsedAsHTMLWarning

    try:
        with warnings.catch_warnings():  # XHTML read as HTML (gtk-doc, DocBook): as a browser reads it
            warnings.simplefilter("ignore", XMLParsedAsHTMLWarning)
            soup = BeautifulSoup(decode_html(data).text, "lxml")
        root = main_content(soup)
        _flatten_deep(soup, root)
        _title_as_top_heading(soup, root)
        _wrap_loose_text(soup, root)
        text = _Markdown(
            heading_style="ATX",
            bullets="-",
            strip=["a", "img"],
            code_language_callback=_language,
            table_infer_header=True,
        )
        markdown = text.convert_soup(root)
    except Exception as exc:  # any parser failure on a hostile file is the file's fault
        raise Rejection("unreadable_file", f"not readable HTML ({type(exc).__name__}: {exc})") from None
    return Converted(tidy(markdown), converter_name("html", RULES, "markdownify"))


def main_content(soup: Any) -> Any:
    """The element of ``soup`` (a BeautifulSoup document) that holds the page's main content, its
    furniture removed (steps 2 and 3 of the module docstring); changes ``soup`` in place."""
    title = soup.title.get_text(" ", strip=True) if soup.title else ""
    articles = soup.find_all("article")
    candidates = [soup.find("main"), soup.find(attrs={"role": "main"}), articles[0] if len(articles) == 1 else None]
    # a <main> left empty for a script to fill (an app's shell) is no main content: the next choice
    root = next((c for c in candidates if c is not None and c.get_text(strip=True)), None) or soup.body or soup
    for element in root.find_all(list(LEFT_OUT)):
        element.extract()
    for element in [e for e in root.find_all(True) if _is_furniture(e)]:
        element.extract()  # one inside another taken out already: taken out of that, harmless
    for element in _nav_bars(root):
        element.extract()
    if root is soup.body or root is soup:  # a page's banner; a section's own <header> (its title) stays
        for element in root.find_all("header", recursive=False):
            element.extract()
    for element in _in_page_tocs(root):
        element.extract()
    for heading in root.find_all(list(_HEADINGS)):  # a heading's own anchor mark (Node.js's "#", "§")
        for link in heading.find_all("a", href=re.compile(r"^#")):
            if link.get_text(strip=True) in _ANCHOR_MARKS:
                link.extract()
    if root is soup.body or root is soup:
        for element in _link_menus(root):
            element.extract()
    _unwrap_layout_tables(root)
    root.attrs["data-page-title"] = title
    return root


def _is_furniture(element: Any) -> bool:
    attrs = element.attrs
    if str(attrs.get("role", "")).lower() in FURNITURE_ROLES:
        return True
    if "hidden" in attrs or str(attrs.get("aria-hidden", "")).lower() == "true":
        return True
    if re.search(r"display\s*:\s*none", str(attrs.get("style", "")), re.IGNORECASE):
        return True
    names = attrs.get("class") or []
    names = [*names, attrs.get("id") or ""] if isinstance(names, list) else [str(names), attrs.get("id") or ""]
    return any(str(name).lower() in FURNITURE_NAMES for name in names)


def _in_page_tocs(root: Any) -> list[Any]:
    """Lists of ``root`` that are a page's own table of contents: 3 or more links, every one to a
    place on the same page (``href="#..."``), and no other text."""
    tocs = []
    for listing in root.find_all(["ul", "ol"]):
        if listing.find_parent(["ul", "ol"]) is not None:
            continue
        links = listing.find_all("a")
        if len(links) < 3 or not all(str(link.get("href", "")).startswith("#") for link in links):
            continue
        if sum(len(s.strip()) for s in listing.find_all(string=True) if s.find_parent("a") is None) <= 10:
            tocs.append(listing)
    return tocs


def _link_menus(root: Any) -> list[Any]:
    """On a page without ``<main>`` or ``<article>``: lists of 5 or more items, 80% of them links and
    nothing else (a site's menu; a list in the text holds words of its own)."""
    menus = []
    for listing in root.find_all(["ul", "ol"]):
        items = listing.find_all("li", recursive=False)
        if len(items) >= 5 and sum(_only_links(item) for item in items) >= 0.8 * len(items):
            menus.append(listing)
    return menus


def _only_links(item: Any) -> bool:
    links = item.find_all("a")
    return bool(links) and not any(s.strip() for s in item.find_all(string=True) if s.find_parent("a") is None)


def _unwrap_layout_tables(root: Any) -> None:
    """A table used for layout (one holding another table or a heading, or of one column: an old
    site's page frame and boxes) is read as the blocks it holds, not as a pipe table: its table, row
    and cell elements become ``<div>`` s. A data table's cells hold text, lists and paragraphs, never
    a heading or a table, side by side."""
    for table in root.find_all("table"):
        rows = table.find_all("tr")
        one_column = all(len(row.find_all(["td", "th"], recursive=False)) <= 1 for row in rows)
        if table.find(["table", *_HEADINGS]) is None and not one_column:
            continue
        parts = [p for p in table.find_all(["thead", "tbody", "tfoot", "tr", "td", "th", "caption"])]
        for part in [p for p in parts if p.find_parent("table") is table] + [table]:
            part.name = "div"


def _nav_bars(root: Any) -> list[Any]:
    """Blocks of ``root`` that are prev/next bars: two or more site-navigation links (``rel`` in
    :data:`NAV_RELS` or an ``accesskey``) and at most 60 characters of other text, or text that
    starts with two of the ``Next:`` / ``Previous:`` / ``Up:`` labels."""
    counts: dict[int, tuple[Any, int]] = {}
    for link in root.find_all("a"):
        rels = {str(r).lower() for r in (link.get("rel") or [])}
        if not (rels & NAV_RELS or link.get("accesskey")):
            continue
        block = link.find_parent(_BLOCKS)
        if block is None:
            continue
        outer = block.find_parent("table") if block.name != "table" else None
        block = outer if outer is not None and outer is not root else block
        if block is root:
            continue
        held = counts.get(id(block), (block, 0))
        counts[id(block)] = (block, held[1] + 1)
    bars = []
    for block, links in counts.values():
        other = sum(len(s.strip()) for s in block.find_all(string=True) if s.find_parent("a") is None)
        if links >= 2 and other <= 60:
            bars.append(block)
    for label in root.find_all(string=_NAV_LABEL_START):
        block = label.find_parent(["p", "div"])
        if block is None or block is root or block.find(_BLOCK_CHILDREN) is not None:
            continue
        text = block.get_text(" ", strip=True)
        if len(_NAV_LABELS.findall(text[:200])) >= 2 and _NAV_LABELS.match(text):
            bars.append(block)
    return bars


def _title_as_top_heading(soup: Any, root: Any) -> None:
    """Shifts ``root``'s heading levels so that its highest is ``h1``; without any, its page title
    (kept by :func:`main_content`) becomes an ``h1`` at its start."""
    title = root.attrs.pop("data-page-title", "")
    headings = root.find_all(list(_HEADINGS))
    if not headings:
        if title:
            top = soup.new_tag("h1")
            top.string = title
            root.insert(0, top)
        return
    shift = min(int(h.name[1]) for h in headings) - 1
    if shift:
        for element in headings:
            element.name = f"h{int(element.name[1]) - shift}"


def _flatten_deep(soup: Any, root: Any) -> None:
    """Every element deeper than :data:`MAX_DEPTH` below ``root`` becomes plain-text paragraphs
    (one per line of its text), so that markdownify's recursion stays bounded. Iterative."""
    stack = [(root, 0)]  # markdownify recurses from the main content down: depth counts from there
    deep = []
    while stack:
        element, depth = stack.pop()
        if depth >= MAX_DEPTH:
            deep.append(element)
            continue
        stack.extend((child, depth + 1) for child in element.children if getattr(child, "name", None))
    for quote in root.find_all("blockquote"):  # a mail thread's quotes past a few levels: more '>' say nothing
        if len(quote.find_parents("blockquote", limit=MAX_QUOTE_DEPTH)) >= MAX_QUOTE_DEPTH:
            quote.name = "div"
    for element in deep:
        lines = [line.strip() for line in element.get_text("\n").split("\n") if line.strip()]
        replacement = soup.new_tag("div")
        for line in lines:
            paragraph = soup.new_tag("p")
            paragraph.string = line
            replacement.append(paragraph)
        element.replace_with(replacement)


_CONTAINERS = ("body", "main", "article", "section", "div", "header", "center", "figure")
_BLOCK_TAGS = frozenset({*_BLOCK_CHILDREN, *_CONTAINERS, "hr", "figcaption", "details", "address"})


def _wrap_loose_text(soup: Any, root: Any) -> None:
    """Text beside blocks in a container (``<div>text<p>...</p></div>``, text loose in ``<body>``) is
    a paragraph of its own, as a browser lays it out (an anonymous block box): wrapped in a ``<p>``
    so that its first line is escaped like any paragraph's (``<body># comment<p>...``)."""
    for container in [root, *root.find_all(list(_CONTAINERS))]:
        children = list(container.children)
        if not any(getattr(child, "name", None) in _BLOCK_TAGS for child in children):
            continue
        run: list[Any] = []
        for child in [*children, None]:
            if child is not None and getattr(child, "name", None) not in _BLOCK_TAGS:
                run.append(child)
                continue
            if any(str(part).strip() for part in run if getattr(part, "name", None) is None) or any(
                getattr(part, "name", None) and part.get_text().strip() for part in run
            ):
                paragraph = soup.new_tag("p")
                run[0].insert_before(paragraph)
                for part in run:
                    paragraph.append(part.extract())
            run = []


def _language(element: Any) -> str | None:
    """The language of a ``<pre>`` code block from its or its ``<code>``'s ``language-x`` / ``lang-x`` class."""
    for tag in (element, element.find("code")):
        for name in (tag.get("class") or []) if tag is not None else []:
            if name.startswith(("language-", "lang-")):
                return name.split("-", 1)[1]
    return None


def _markdown_base() -> type:
    import markdownify

    return markdownify.MarkdownConverter


class _Markdown(_markdown_base()):  # type: ignore[misc]
    """markdownify with body text escaped (:func:`escape_block`): a paragraph's text, and a ``<div>``'s
    that holds no block of its own, is body text, never a heading or a list."""

    def convert_p(self, el: Any, text: str, parent_tags: set[str]) -> str:
        return super().convert_p(el, text if "_inline" in parent_tags else escape_block(text.strip()), parent_tags)

    def convert_div(self, el: Any, text: str, parent_tags: set[str]) -> str:
        if "_inline" not in parent_tags and el.find(_BLOCK_CHILDREN) is None:
            text = escape_block(text.strip())
        return super().convert_div(el, text, parent_tags)
