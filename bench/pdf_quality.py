"""PDF text as a reader sees it (issue 45): the PDF converter's rules 1 (pages as PDFium gives them,
kept here as they were) against rules 2 (furniture out, sentences read on, headings from fonts or the
outline), side by side in one run: quality on generated books with known furniture and on real PDFs,
and conversion pages/s.

The generated books (``tests/document_files.py``'s ``book_pdf_bytes``, no outline): a contents page
of dot leaders, chapters (16 pt bold) and sections (13 pt bold) of flowing paragraphs wrapped at 70
characters, 40 lines a page, so sentences cross page breaks; some long words hyphenated at a line
end; a running head with the page number in the top margin and a page number (or ``Page n of N``)
in the bottom margin. The truth comes from the generator: every furniture line, every sentence that
crosses a page break, every hyphenated word, every heading and its level.

Reported per rules version: furniture lines kept (of those drawn), sentences across page breaks that
read on (the sentence whole in the text, only a line break inside it), hyphenated words joined,
headings found (text and level) against the truth and headings that are not in it. The real PDFs
(Debian's documentation PDFs, where installed): lines of running heads, bare page numbers and dot
leaders kept, and page breaks inside a sentence that read on. Speed: pages/s of rules 1, of rules 2
and of rules 2 without per-character boxes (``char_boxes=False``), in CPU seconds of the process
(the machine is shared), alternated rounds, the best.

Run: ``python bench/pdf_quality.py [--books 6] [--reps 5]`` (``--quick``: 2 books, 2 rounds, seconds).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from latechunk_dagster.sources.converters.pdf import convert_pdf  # noqa: E402
from tests.document_files import book_pdf_bytes  # noqa: E402

#: Real PDFs of Debian's documentation packages (texinfo/TeX and DocBook), read where installed.
REAL = [
    Path("/usr/share/doc/libtasn1-doc/libtasn1.pdf"),
    Path("/usr/share/doc/shared-mime-info/shared-mime-info-spec.pdf"),
]
WORDS = (
    "pump valve seal pressure flow harbour engine gasket turbine impeller bearing coupling housing "
    "maintenance inspection calibration measurement tolerance replacement lubrication alignment "
    "the a of to and in is for with on by at from each every before after when while"
).split()
LINES_PER_PAGE, WIDTH = 40, 70


def rules_1(data: bytes) -> str:
    """The PDF converter's text as rules 1 made it (commit 7f523b1's ``convert_pdf``, OCR and
    refusals left out): each page's lines as PDFium gives them, pages separated by a blank line, an
    outline title equal to a line marked as a heading, else put at the top of its page."""
    import pypdfium2 as pdfium

    from latechunk_dagster.sources.converters.base import heading, tidy

    document = pdfium.PdfDocument(data)
    pages = []
    for page in document:
        textpage = page.get_textpage()
        pages.append(tidy(textpage.get_text_bounded()).split("\n"))
        textpage.close()
        page.close()
    outline = [(b.level + 1, b.get_title(), b.get_dest().get_index()) for b in document.get_toc()]
    document.close()
    for level, title, index in outline:
        lines = pages[index]
        match = next((k for k, line in enumerate(lines) if line.strip() == title.strip()), None)
        if match is None:
            lines.insert(0, heading(level, title))
        else:
            lines[match] = heading(level, title)
    text = ""
    for lines in pages:
        body = "\n".join(lines).strip("\n")
        body = body if body.strip() else ""
        text += "\n\n" if text and body else ""
        text += body
    return text


@dataclass
class Book:
    """A generated book and its truth."""

    data: bytes
    pages: int
    furniture: list[str] = field(default_factory=list)
    crossing: list[str] = field(default_factory=list)
    hyphenated: list[str] = field(default_factory=list)
    headings: list[tuple[int, str]] = field(default_factory=list)


def make_book(seed: int, chapters: int = 3) -> Book:
    """A book of ``chapters`` chapters of 2 sections of 5 paragraphs (module docstring)."""
    rng = random.Random(seed)
    blocks: list[tuple[str, str]] = []
    titles = []
    for c in range(1, chapters + 1):
        title = f"{c} {rng.choice(WORDS).title()} {rng.choice(WORDS).title()}"
        titles.append(title)
        blocks.append(("h1", title))
        for s in range(1, 3):
            blocks.append(("h2", f"{c}.{s} {rng.choice(WORDS).title()} checks"))
            for _ in range(5):
                blocks.append(("p", " ".join(_sentence(rng) for _ in range(rng.randint(3, 6)))))
    book = Book(b"", 0, headings=[(1, "Contents")])
    toc: list[str | tuple[str, float, bool]] = [("Contents", 16, True)]
    toc += [f"{t} {'. ' * 30}{3 + 4 * k}" for k, t in enumerate(titles)]
    book.furniture += [line for line in toc[1:] if isinstance(line, str)]
    pages: list[list[str | tuple[str, float, bool]]] = [toc, []]
    where: list[tuple[int, str]] = []  # (page, sentence) for each piece of a sentence laid out
    for kind, text in blocks:
        if kind != "p":
            size = 16 if kind == "h1" else 13
            if len(pages[-1]) > LINES_PER_PAGE - 4:
                pages.append([])
            pages[-1].append((text, size, True))
            book.headings.append((1 if kind == "h1" else 2, text))
            continue
        for line, sentences in _wrap(text, rng, book.hyphenated):
            if len(pages[-1]) >= LINES_PER_PAGE:
                pages.append([])
            pages[-1].append(line)
            where += [(len(pages) - 1, s) for s in sentences]
    seen: dict[str, set[int]] = {}
    for page, sentence in where:
        seen.setdefault(sentence, set()).add(page)
    book.crossing = [s for s, on in seen.items() if len(on) > 1]
    foot = "{page}" if seed % 2 else "Page {page} of " + str(len(pages))
    head = f"Pump Handbook {seed}   {{page}}"
    book.data = book_pdf_bytes(pages, head=head, foot=foot)
    book.pages = len(pages)
    book.furniture += [head.format(page=n) for n in range(1, len(pages) + 1)]
    book.furniture += [foot.format(page=n) for n in range(1, len(pages) + 1)]
    return book


def _sentence(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(8, 18))]
    return " ".join(words).capitalize() + "."


def _wrap(paragraph: str, rng: random.Random, hyphenated: list[str]) -> list[tuple[str, list[str]]]:
    """Lines of at most :data:`WIDTH` characters, a long word at a line end split with a hyphen now
    and then; each line with the sentences it holds a piece of."""
    sentences = re.findall(r"[^.]+\.", paragraph)
    tokens = [(w, s.strip()) for s in sentences for w in s.split()]
    lines: list[tuple[str, list[str]]] = []
    line, held = "", []
    for word, sentence in tokens:
        if line and len(line) + 1 + len(word) > WIDTH:
            room = WIDTH - len(line) - 2
            if len(word) >= 9 and room >= 4 and rng.random() < 0.5 and word.isalpha():
                lines.append((line + " " + word[:room] + "-", [*held, sentence]))
                hyphenated.append(word)
                line, held = word[room:], [sentence]
                continue
            lines.append((line, held))
            line, held = "", []
        line = f"{line} {word}" if line else word
        if sentence not in held:
            held.append(sentence)
    if line:
        lines.append((line, held))
    return lines


def quality(text: str, book: Book) -> dict[str, str]:
    lines = [" ".join(re.sub(r"^#+ |\\", "", line).split()) for line in text.split("\n")]
    furniture = {" ".join(line.split()) for line in book.furniture}
    kept = sum(1 for line in lines if line in furniture)
    flat = re.sub(r"[ \n]+", " ", text)
    joined = sum(1 for s in book.crossing if s in flat and "\n\n" not in _span(text, s))
    words = sum(1 for w in book.hyphenated if re.search(rf"\b{w}\b", text))
    found = [(len(m.group(1)), m.group(2)) for m in re.finditer(r"^(#+) (.*)$", text, re.M)]
    right = sum(1 for h in found if h in book.headings)
    return {
        "furniture kept": f"{kept}/{len(book.furniture)}",
        "sentences read on": f"{joined}/{len(book.crossing)}",
        "hyphenated joined": f"{words}/{len(book.hyphenated)}",
        "headings right": f"{right}/{len(book.headings)}",
        "headings not in truth": str(len(found) - right),
    }


def _span(text: str, sentence: str) -> str:
    """The piece of ``text`` the sentence spans (its words with what lies between them)."""
    words = sentence.split()
    found = re.search(r"[\s\n]+".join(map(re.escape, words)), text)
    return found.group(0) if found else ""


def real_quality(text: str) -> dict[str, str]:
    lines = text.split("\n")[1:]  # the first line: the document's title on its title page
    heads = sum(1 for line in lines if re.match(r"^(Chapter \d+:|Appendix [A-Z]:|Shared MIME-info Database$)", line))
    numbers = sum(1 for line in lines if re.fullmatch(r"\s*(\d{1,3}|[ivx]{1,5})\s*", line))
    leaders = sum(1 for line in lines if re.search(r"(\. ?){4,}", line))
    return {"running heads": str(heads), "bare page numbers": str(numbers), "dot leaders": str(leaders)}


def breaks_read_on(data: bytes) -> str:
    """Page breaks of rules 2's text inside a sentence (the page before ends without ``.!?:``) that
    read on (one line break, nothing between), of those."""
    out = convert_pdf(data)
    inside = on = 0
    for start in out.pages[1:]:
        before = out.text[:start].rstrip("\n")
        if not before or start >= len(out.text) or out.text[start] == "#":
            continue
        last = before.rsplit("\n", 1)[-1]
        if re.search(r"[.!?:][\"')\]]*$", last) or last.startswith("#"):
            continue
        inside += 1
        on += out.text[:start].endswith("\n") and not out.text[:start].endswith("\n\n")
    return f"{on}/{inside}"


def timed(runs: dict[str, object], files: list[bytes], reps: int) -> dict[str, float]:
    """Least CPU seconds of this process for each run over all ``files`` (best of ``reps`` alternated
    rounds: CPU time and the best round, as the machine is shared and contention only adds time)."""
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(reps):
        for name, fn in runs.items():
            t0 = time.process_time()
            for data in files:
                fn(data)  # type: ignore[operator]
            seconds[name].append(time.process_time() - t0)
    return {name: min(v) for name, v in seconds.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--books", type=int, default=6)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="2 books, 2 rounds: seconds")
    args = ap.parse_args()
    if args.quick:
        args.books, args.reps = 2, 2
    books = [make_book(seed) for seed in range(1, args.books + 1)]
    print(f"{args.books} generated books, {sum(b.pages for b in books)} pages (no outline)\n")
    rows: dict[str, dict[str, int]] = {}
    for version, read in (("rules 1", rules_1), ("rules 2", lambda d: convert_pdf(d).text)):
        totals: dict[str, list[int]] = {}
        for book in books:
            for key, value in quality(read(book.data), book).items():
                got, _, of = value.partition("/")
                acc = totals.setdefault(key, [0, 0])
                acc[0] += int(got)
                acc[1] += int(of or 0)
        rows[version] = {k: v for k, v in totals.items()}  # type: ignore[misc]
    keys = list(next(iter(rows.values())))
    print("| | " + " | ".join(keys) + " |")
    print("|---|" + "---:|" * len(keys))
    for version, totals in rows.items():
        cells = [f"{a}/{b}" if b else str(a) for a, b in (totals[k] for k in keys)]  # type: ignore[misc]
        print(f"| {version} | " + " | ".join(cells) + " |")
    real = [p for p in REAL if p.exists()]
    if real:
        print("\nreal PDFs: lines kept (rules 1 -> rules 2); page breaks inside a sentence that read on (rules 2)")
        for path in real:
            data = path.read_bytes()
            old, new = real_quality(rules_1(data)), real_quality(convert_pdf(data).text)
            kept = ", ".join(f"{k} {old[k]} -> {new[k]}" for k in old)
            print(f"- {path.name}: {kept}; read on {breaks_read_on(data)}")
    files = [b.data for b in books] + [p.read_bytes() for p in real]
    pages = sum(b.pages for b in books) + sum(_pages(p.read_bytes()) for p in real)
    runs = {
        "rules 1": rules_1,
        "rules 2": convert_pdf,
        "rules 2, line boxes only": lambda d: convert_pdf(d, char_boxes=False),
    }
    seconds = timed(runs, files, args.reps)
    load = os.getloadavg()[0]
    print(f"\nspeed: {pages} pages ({len(books)} generated + {len(real)} real PDFs), best of {args.reps} rounds")
    print(f"(CPU time of this process; load average {load:.1f} on {os.cpu_count()} cores)")
    base = seconds["rules 1"]
    for name, s in seconds.items():
        print(f"- {name}: {pages / s:,.0f} pages per CPU second ({s / base:.2f}x the time of rules 1)")


def _pages(data: bytes) -> int:
    import pypdfium2 as pdfium

    document = pdfium.PdfDocument(data)
    try:
        return len(document)
    finally:
        document.close()


if __name__ == "__main__":
    main()
