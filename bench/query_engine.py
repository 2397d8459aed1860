"""Issue 30: the light transformers engine against the vLLM engine, in one run, with ratios.

Measured, each in fresh processes on the shipped all-MiniLM-L6-v2 (float32, CPU):

  search    ``latechunk search QUERY --uri DB -k 3`` wall time from a fresh process (interpreter
            start to exit; the median of ``--repeat`` runs, the fastest also printed) and its peak RSS,
            ``--engine transformers`` (the default) vs ``--engine vllm``; the top hits printed must be
            the same. On the light engine the command embeds its query in a child process while it
            opens the table (``app/query_process.py``); the same command with the query embedded in
            its own process, one after the other as before that change, is timed beside it
  imports   where the time of that one-process search goes: a fresh process imports, in the CLI's
            order and each timed, the package with the CLI, the sink (LanceDB), torch, and
            transformers' auto classes (``latechunk_dagster.core.hf_imports``), then runs the same
            search in one process; the seconds of each import, their sum as a share of the process's
            time to the printed hits, and which heavy packages the process ended up importing
            (scikit-learn, pandas, Dagster, vLLM, httpx)
  first     start-up to the first query vector: a fresh process imports the package, builds
            ``LateChunker(model, engine=...)`` and embeds one query; wall time from process start
            to that vector, and peak RSS; the query vectors of both engines are compared (max abs)
  docs/s    documents per second (and tokens per second) of ``chunk()`` on demo documents with
            ``Sentences(max_tokens=128)``, after a warm-up call, start-up excluded; the chunk vectors
            of both engines are compared (max abs)

The table is the demo docstrings of ``--modules`` standard-library modules, written once by the
pipeline on the vLLM engine; the same top hits and distances (within 1e-6) are checked with
``search(exact=True)`` on both engines. Peak RSS is each child's ``ru_maxrss`` (one child per
measurement). The machine's cores are shared, so absolute times are noisy: compare the ratios.

Run: ``python bench/query_engine.py [--modules 40] [--docs 40] [--repeat 3] [--json out.json] [--quick]``
(``--quick``: a smoke run, ``--modules 4 --docs 4 --repeat 1``; it still starts every child process, five of
them with a vLLM engine, so it takes the longest of the quick runs).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")  # the children's vLLM: no start-up log

ROOT = Path(__file__).resolve().parents[1]
QUERY = "compress data with gzip"
ENGINES = ("transformers", "vllm")


def child(code: str, *args: str) -> tuple[float, float, str]:
    """Run ``python -c code args`` in a fresh process through a wrapper that reports the child's
    peak RSS: (wall seconds from start to exit, peak RSS in MB, the child's stdout)."""
    wrapper = (
        "import resource, subprocess, sys, time\n"
        "t = time.perf_counter()\n"
        "r = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "wall = time.perf_counter() - t\n"
        "sys.stderr.write(r.stderr)\n"
        "if r.returncode: sys.exit(r.returncode)\n"
        "print(wall, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)\n"
        "print(r.stdout, end='')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", wrapper, sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    if out.returncode:
        raise RuntimeError(f"child failed ({out.returncode}):\n{out.stderr[-3000:]}")
    first, _, rest = out.stdout.partition("\n")
    wall, rss = (float(x) for x in first.split())
    return wall, rss, rest


def result(out: str) -> str:
    """The ``RESULT ...`` line a child printed (engines may log to stdout too)."""
    return next(line for line in reversed(out.splitlines()) if line.startswith("RESULT ")).removeprefix("RESULT ")


def cli(*args: str, one_process: bool = False) -> tuple[float, float, str]:
    """``latechunk ARGS`` in a fresh process (the console script's entry point); ``one_process``: with
    the query embedded in that process (:data:`ONE_PROCESS`)."""
    return child(
        (ONE_PROCESS if one_process else "")
        + "import sys; from latechunk_dagster.app.cli import main; sys.exit(main())",
        *args,
    )


PREPARE = """
import sys
from latechunk_dagster import LateChunker, Sentences
from latechunk_dagster.app.settings import shipped_model_path
from latechunk_dagster.app.demo_corpus import build_demo_store, candidate_modules
from latechunk_dagster.pipeline import materialize_partition
from latechunk_dagster.sink.database import LanceDBSettings
from latechunk_dagster.sources.files import DocumentStore

root, n = sys.argv[1], int(sys.argv[2])
store = DocumentStore.from_path(build_demo_store(root + "/documents", max_modules=n))
settings = LanceDBSettings(uri=root + "/lancedb")
with LateChunker(shipped_model_path(), dtype="float32") as c:
    chunks = settings.chunk_table("chunks", c.embedding_dim)
    rejected = settings.rejected_table("rejected_documents")
    for shard in store.shards():
        materialize_partition(c, store.iter_shard(shard), shard, Sentences(max_tokens=128),
                              chunk_table=chunks, rejected_table=rejected, run_id="bench")
print("RESULT", chunks.count_rows())
"""

FIRST_VECTOR = """
import time
t0 = time.perf_counter()
import json, sys
from latechunk_dagster import LateChunker
from latechunk_dagster.app.settings import shipped_model_path
from latechunk_dagster.sink.search import search
engine, query, uri = sys.argv[1:4]
with LateChunker(shipped_model_path(), engine=engine) as c:
    vec = c.embed_queries([query])[0]
    first = time.perf_counter() - t0
    started = c.startup_seconds
    hits = search(query, chunker=c, uri=uri, k=5, exact=True)
print("RESULT", json.dumps({"first": first, "startup": started, "vector": vec.tolist(),
                            "hits": [[h.chunk_id, h.distance] for h in hits]}))
"""

#: The command with its query embedded in its own process (no query process), on one torch thread
#: (``app/query_process.py`` says why): the path before the query process, for the side-by-side.
ONE_PROCESS = """
import sys
import latechunk_dagster.app.cli as cli
cli._start_query_process = lambda args: None
if "vllm" not in sys.argv:
    import torch
    torch.set_num_threads(1)
"""

IMPORTS = """
import time
t0 = time.perf_counter()
import importlib, json, sys
seconds = {}
for label, module in [("package and CLI", "latechunk_dagster.app.cli"),
                      ("sink (LanceDB)", "latechunk_dagster.sink.search"),
                      ("torch", "torch"), ("transformers", "latechunk_dagster.core.hf_imports")]:
    t = time.perf_counter()
    importlib.import_module(module)
    seconds[label] = time.perf_counter() - t
from latechunk_dagster.app.cli import main
{one_process}
rc = main(sys.argv[1:])
total = time.perf_counter() - t0
heavy = ["sklearn", "pandas", "dagster", "vllm", "httpx"]
loaded = [m for m in heavy if m in sys.modules]
print("RESULT", json.dumps({"imports": seconds, "total": total, "rc": rc, "loaded": loaded}))
""".replace("{one_process}", ONE_PROCESS)

THROUGHPUT = """
import json, sys, time
import numpy as np
from latechunk_dagster import LateChunker, Sentences
from latechunk_dagster.app.settings import shipped_model_path
from latechunk_dagster.sources.files import DocumentStore
engine, store, n, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
docs = [d for s in DocumentStore.from_path(store).shards() for d in DocumentStore.from_path(store).read_shard(s)][:n]
texts = [d.text for d in docs]
with LateChunker(shipped_model_path(), engine=engine) as c:
    c.chunk(texts[:2], Sentences(max_tokens=128))  # warm-up
    t = time.perf_counter()
    res = c.chunk(texts, Sentences(max_tokens=128))
    seconds = time.perf_counter() - t
np.save(out, np.concatenate([r.vectors for r in res]))
print("RESULT", json.dumps({"docs": len(texts), "tokens": sum(len(r.token_ids) for r in res), "seconds": seconds}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modules", type=int, default=40, help="demo modules in the table (default 40)")
    ap.add_argument("--docs", type=int, default=40, help="documents for documents per second (default 40)")
    ap.add_argument("--json", default=None, help="write the figures to this JSON file")
    ap.add_argument("--root", default=None, help="reuse the store and table an earlier run wrote under this directory")
    ap.add_argument(
        "--repeat", type=int, default=3, help="fresh-process searches per engine, median reported (default 3)"
    )
    ap.add_argument("--quick", action="store_true", help="a smoke run: --modules 4 --docs 4 --repeat 1")
    args = ap.parse_args()
    if args.quick:
        args.modules, args.docs, args.repeat = 4, 4, 1
    tmp = Path(args.root or tempfile.mkdtemp(prefix="query-engine-"))
    uri = str(tmp / "lancedb")
    if not (tmp / "lancedb").is_dir():
        t = time.perf_counter()
        result(child(PREPARE, str(tmp), str(args.modules))[2])
        print(f"table written on vLLM in {time.perf_counter() - t:.0f} s under {tmp}")
    import lancedb

    print(f"table: {lancedb.connect(uri).open_table('chunks').count_rows()} chunks of {args.modules} demo modules")
    fig: dict[str, dict[str, float]] = {e: {} for e in ENGINES}
    first: dict[str, dict] = {}
    loaded: dict[str, list[str]] = {}
    printed: dict[str, list[str]] = {}
    for engine in ENGINES:
        search = ("search", QUERY, "--uri", uri, "-k", "3", "--engine", engine)
        runs, one = [], []
        for _ in range(args.repeat):  # on the light engine, alternating with the one-process command
            runs.append(cli(*search))
            if engine == "transformers":
                one.append(cli(*search, one_process=True)[0])
        walls = sorted(r[0] for r in runs)
        wall, rss, out = runs[0]
        fig[engine] |= {
            "search_wall_s": statistics.median(walls),
            "search_wall_min_s": walls[0],
            "search_peak_rss_mb": rss,
        }
        if one:
            fig[engine] |= {"one_process_wall_s": statistics.median(one), "one_process_wall_min_s": min(one)}
        imports = json.loads(result(child(IMPORTS, "search", QUERY, "--uri", uri, "-k", "3", "--engine", engine)[2]))
        fig[engine] |= {"import_s": sum(imports["imports"].values()), "to_hits_s": imports["total"]}
        fig[engine] |= {f"import_{k}_s": v for k, v in imports["imports"].items()}
        loaded[engine] = imports["loaded"]
        printed[engine] = [line.split("\t")[1:3] for line in out.splitlines() if line.count("\t") >= 3][1:]
        wall, rss, out = child(FIRST_VECTOR, engine, QUERY, uri)
        first[engine] = json.loads(result(out))
        fig[engine] |= {
            "first_vector_s": first[engine]["first"],
            "engine_startup_s": first[engine]["startup"],
            "first_vector_process_wall_s": wall,
            "first_vector_peak_rss_mb": rss,
        }
        _, _, out = child(THROUGHPUT, engine, str(tmp / "documents"), str(args.docs), str(tmp / f"{engine}.npy"))
        tp = json.loads(result(out))
        fig[engine] |= {"docs_per_s": tp["docs"] / tp["seconds"], "tokens_per_s": tp["tokens"] / tp["seconds"]}
        fig[engine] |= {"docs": tp["docs"], "tokens": tp["tokens"]}
    import numpy as np

    light, vllm = first["transformers"], first["vllm"]
    same_hits = [h[0] for h in light["hits"]] == [h[0] for h in vllm["hits"]]
    hit_diff = max(abs(a[1] - b[1]) for a, b in zip(light["hits"], vllm["hits"]))
    query_diff = float(np.abs(np.asarray(light["vector"]) - np.asarray(vllm["vector"])).max())
    doc_diff = float(np.abs(np.load(tmp / "transformers.npy") - np.load(tmp / "vllm.npy")).max())
    rows_out = [
        ("`latechunk search` wall, fresh process (s)", "search_wall_s", "{:.1f}"),
        ("`latechunk search` peak RSS (MB)", "search_peak_rss_mb", "{:.0f}"),
        ("one-process search's imports (s)", "import_s", "{:.1f}"),
        ("one-process search, process start to the printed hits (s)", "to_hits_s", "{:.1f}"),
        ("start-up to first query vector (s)", "first_vector_s", "{:.1f}"),
        ("of which the engine's start (s)", "engine_startup_s", "{:.1f}"),
        ("peak RSS, first vector (MB)", "first_vector_peak_rss_mb", "{:.0f}"),
        (f"documents per second ({fig['vllm']['docs']} demo documents)", "docs_per_s", "{:.2f}"),
        ("tokens per second", "tokens_per_s", "{:.0f}"),
    ]
    print("\n| | transformers | vLLM | transformers / vLLM |\n|---|---:|---:|---:|")
    for label, key, fmt in rows_out:
        a, b = fig["transformers"][key], fig["vllm"][key]
        print(f"| {label} | {fmt.format(a)} | {fmt.format(b)} | {a / b:.2f} |")
    f = fig["transformers"]
    print(
        f"transformers: search with the query process median {f['search_wall_s']:.2f} s (fastest "
        f"{f['search_wall_min_s']:.2f}), the query in the same process {f['one_process_wall_s']:.2f} s (fastest "
        f"{f['one_process_wall_min_s']:.2f}): {f['search_wall_s'] / f['one_process_wall_s']:.2f}x"
    )
    for engine in ENGINES:
        f = fig[engine]
        parts = ", ".join(
            f"{k.removeprefix('import_').removesuffix('_s')} {v:.2f}"
            for k, v in f.items()
            if k.startswith("import_") and k != "import_s"
        )
        print(
            f"{engine}: search median {f['search_wall_s']:.2f} s, fastest {f['search_wall_min_s']:.2f} s of "
            f"{args.repeat}; imports {f['import_s']:.2f} s = {f['import_s'] / f['to_hits_s']:.0%} of "
            f"{f['to_hits_s']:.2f} s to the hits ({parts}); heavy packages imported: "
            f"{', '.join(loaded[engine]) or 'none'}"
        )
    print(
        f"\nsame top 5 (search, exact): {same_hits}; max distance difference {hit_diff:.1e}; CLI top 3 "
        f"same: {printed['transformers'] == printed['vllm']}; query vector max abs difference {query_diff:.1e}; "
        f"chunk vectors of {fig['vllm']['docs']} documents max abs difference {doc_diff:.1e}"
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {"figures": fig, "loaded": loaded, "same_hits": same_hits, "distance_diff": hit_diff,
                 "query_diff": query_diff, "doc_diff": doc_diff,
                 "cli_same": printed["transformers"] == printed["vllm"]},
                indent=2,
            )
        )  # fmt: skip


if __name__ == "__main__":
    main()
