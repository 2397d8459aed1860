"""``parity_sample``'s read of a shard: the sampled documents only, against the whole shard converted.

The check re-embeds ``ParityConfig.docs_per_partition`` (default 2) documents per partition; it reads
them through the store (:func:`latechunk_dagster.sink.validation.iter_shard_documents` with ``keep``).
Before issue 51 that read converted every file of the shard (every PDF and HTML page) and dropped
all but the sampled ones: on a one-partition run of PDFs it was 35 s of the check. Now files are
read unconverted and only the kept ones converted. Measured here side by side, alternated, on one
shard of real files (``tests/document_files.py``: PDFs of a few pages with a text layer, HTML
pages): ``keep=None`` (every document converted: the old cost) against ``keep`` of 2 documents.

Run: ``python bench/parity_read.py [--files 24] [--repeat 3]``; ``--quick`` (8 files, 1 repeat) takes seconds.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from latechunk_dagster.sink.validation import iter_shard_documents  # noqa: E402
from latechunk_dagster.sources.files import DocumentStore  # noqa: E402
from tests.document_files import html_page, pdf_bytes  # noqa: E402

WORDS = "the pump's seal is checked by the maintenance team every month and replaced when it leaks".split()


def write_shard(root: Path, files: int) -> list[str]:
    """One shard ``manuals/`` of ``files`` documents, half PDFs of 3 pages, half HTML pages; their doc_ids."""
    shard = root / "manuals"
    shard.mkdir(parents=True)
    for i in range(files):
        lines = [" ".join(WORDS[(i + j) % len(WORDS) :] + WORDS[: (i + j) % len(WORDS)]) for j in range(30)]
        if i % 2:
            (shard / f"page{i:03d}.html").write_text(html_page(f"Page {i}", [(2, "Section", " ".join(lines))]))
        else:
            (shard / f"manual{i:03d}.pdf").write_bytes(pdf_bytes([lines[:10], lines[10:20], lines[20:]]))
    return sorted(f"manuals/{p.name}" for p in shard.iterdir())


def timed(store: DocumentStore, keep: dict[str, list[str]] | None) -> tuple[float, int]:
    t0 = time.perf_counter()
    [(_, docs)] = list(iter_shard_documents(store, ["manuals"], keep=keep))
    assert isinstance(docs, dict), docs
    return time.perf_counter() - t0, len(docs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=24)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="8 files, 1 repeat: seconds")
    args = parser.parse_args()
    if args.quick:
        args.files, args.repeat = 8, 1
    with tempfile.TemporaryDirectory() as tmp:
        ids = write_shard(Path(tmp), args.files)
        store = DocumentStore.from_path(tmp)
        keep = {"manuals": ids[:2]}
        whole, sampled = [], []
        for _ in range(args.repeat):  # alternated: the same machine load for both
            seconds, n = timed(store, None)
            assert n == args.files, n
            whole.append(seconds)
            seconds, n = timed(store, keep)
            assert n == 2, n
            sampled.append(seconds)
    best_whole, best_sampled = min(whole), min(sampled)
    pdfs, pages = (args.files + 1) // 2, args.files // 2
    print(f"one shard of {args.files} files ({pdfs} PDFs of 3 pages, {pages} HTML pages), best of {args.repeat}:")
    print(f"  whole shard converted (the old parity read): {best_whole:.2f} s")
    print(f"  2 sampled documents converted:               {best_sampled:.2f} s")
    print(f"  ratio whole/sampled: {best_whole / best_sampled:.1f}x")


if __name__ == "__main__":
    main()
