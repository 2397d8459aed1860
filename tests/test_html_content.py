"""HTML main content (issue 45 item 2): the page's own text, headings, tables, lists and code, without
the site around it. Pages imitate mdBook, texinfo, Sphinx and DocBook output (tests/document_files.py,
``site_page``); the expected Markdown is written by hand. Where the machine has the Rust toolchain's
docs (a real mdBook site), its pages are read too.
"""

from __future__ import annotations

import warnings
from collections import Counter
from pathlib import Path

import pytest

from latechunk_dagster.sources.converters import convert
from tests.document_files import SITE_FURNITURE, SITE_GENERATORS, site_page

BODY = [
    ("p", "Owls hunt at <b>night</b>."),
    ("h", "Feathers"),
    ("p", "Soft edges make flight almost silent."),
    ("code", "def glide(owl):\n    return owl.wings\n"),
    ("table", [["owl", "weight"], ["barn", "500 g"]]),
    ("ul", ["tawny", "snowy"]),
]

#: What a reader sees of BODY under the title "Owls", written by hand.
EXPECTED = (
    "# Owls\n\nOwls hunt at **night**.\n\n## Feathers\n\nSoft edges make flight almost silent.\n\n"
    "```python\ndef glide(owl):\n    return owl.wings\n```\n\n"
    "| owl | weight |\n| --- | --- |\n| barn | 500 g |\n\n- tawny\n- snowy"
)


@pytest.mark.parametrize("generator", SITE_GENERATORS)
def test_a_generated_site_page_is_its_content_without_furniture(generator: str) -> None:
    page = site_page(generator, "Owls", BODY, sub_chapter=generator == "mdbook")
    text = convert("owls.html", page.encode()).text
    assert text == EXPECTED
    assert [line for line in SITE_FURNITURE if line in text] == []


def test_an_article_keeps_its_header_title_and_the_page_title_heads_a_page_without_headings() -> None:
    page = (
        "<html><head><title>Tea notes</title></head><body><header><a href='/'>SITEHEADER</a></header>"
        "<article><header><h2>Tea</h2><p>by Ann</p></header><p>Green tea is steamed.</p>"
        "<h3>Storage</h3><p>Keep it dry.</p><footer>ARTICLEFOOTER</footer></article>"
        "<div role='dialog'>DIALOGTEXT</div><div hidden>HIDDENTEXT</div></body></html>"
    )
    assert convert("tea.html", page.encode()).text == (
        "# Tea\n\nby Ann\n\nGreen tea is steamed.\n\n## Storage\n\nKeep it dry."
    )
    bare = "<html><head><title>Tea notes</title></head><body><p>Green tea is steamed.</p></body></html>"
    assert convert("tea.html", bare.encode()).text == "# Tea notes\n\nGreen tea is steamed."


def test_an_empty_main_of_an_app_shell_is_passed_over() -> None:
    page = b"<body><nav>NAVTEXT</nav><main></main><div><h2>App</h2><p>Loaded text.</p></div></body>"
    assert convert("app.html", page).text == "# App\n\nLoaded text."


def test_a_texinfo_bar_without_link_marks_is_found_by_its_labels() -> None:
    page = (
        "<html><body><div class='nav'><p>Next: <a href='b.html'>Bees</a>, Previous: <a href='a.html'>Ants</a>, "
        "Up: <a href='index.html'>Top</a></p></div><h2>Wasps</h2><p>Next to the hive, wasps wait.</p></body></html>"
    )
    assert convert("wasps.html", page.encode()).text == "# Wasps\n\nNext to the hive, wasps wait."


RUST_DOCS = sorted(Path.home().glob(".rustup/toolchains/*/share/doc/rust/html/book"))


@pytest.mark.skipif(not RUST_DOCS, reason="no Rust toolchain docs (a real mdBook site) on this machine")
def test_the_rust_book_pages_read_as_their_chapters() -> None:
    pages = sorted(RUST_DOCS[0].glob("ch0[3-4]-*.html"))[:8]
    assert len(pages) >= 4
    lines: Counter[str] = Counter()
    for page in pages:
        data = page.read_bytes()
        text = convert(page.name, data).text
        # the page's own title (mdBook's <title> is "<chapter> - <book>", its case as the SUMMARY
        # writes it) is its top heading
        title = data.split(b"<title>")[1].split(b"</title>")[0].decode().rsplit(" - ", 1)[0]
        assert text.lower().startswith(f"# {title.lower()}\n"), (page.name, text[:80])
        assert "The Rust Programming Language" not in text.split("\n")[0]
        assert "to show this help" not in text and "Keyboard shortcuts" not in text
        lines.update({line for line in text.split("\n") if line.strip()})
    # no line of site furniture: nothing but code-fence marks is on every page
    assert {line for line, n in lines.items() if n == len(pages)} <= {"```", "```rust", "```console", "```text"}


def test_a_page_without_main_loses_its_frame_tables_menus_and_in_page_contents() -> None:
    page = (
        "<html><body><div id='banner'>SITENAME</div><header>BANNERHEADER</header>"
        "<table><tr><td><img src='logo.png'></td><td><h1>Pumps</h1></td></tr></table>"
        "<ul><li><a href='/a'>MENU1</a></li><li><a href='/b'>MENU2</a></li><li><a href='/c'>MENU3</a></li>"
        "<li><a href='/d'>MENU4</a></li><li><a href='/e'>MENU5</a></li></ul>"
        "<section><header><h2>Service<a class='mark' href='#service'>#</a></h2></header>"
        "<ul><li><a href='#a'>TOC1</a></li><li><a href='#b'>TOC2</a></li><li><a href='#c'>TOC3</a></li></ul>"
        "<table><tr><td>Same day repairs.</td></tr></table>"
        "<table><tr><th>model</th><th>euro</th></tr><tr><td>P-1</td><td>900</td></tr></table>"
        "<ul><li>valves</li><li>seals</li></ul></section></body></html>"
    )
    assert convert("pumps.html", page.encode()).text == (
        "# Pumps\n\n## Service\n\nSame day repairs.\n\n"
        "| model | euro |\n| --- | --- |\n| P-1 | 900 |\n\n- valves\n- seals"
    )


def test_an_xhtml_page_reads_without_a_warning() -> None:
    page = b"<?xml version='1.0' encoding='UTF-8'?><html xmlns='http://www.w3.org/1999/xhtml'>"
    page += b"<body><h2>Owls</h2></body></html>"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert convert("owls.xhtml.html", page).text == "# Owls"
