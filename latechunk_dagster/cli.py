"""``latechunk``: command-line entry points of the embedded default.

    latechunk sync-partitions          # add/remove dynamic partitions to match the store's shards
    latechunk search "query" -k 5      # top-k chunks from the LanceDB table
    latechunk demo                     # what `make demo` runs

Locations come from ``LATECHUNK_HOME`` / ``LATECHUNK_DOCUMENT_STORE`` (:mod:`latechunk_dagster.settings`).
"""

from __future__ import annotations

import argparse
import os
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="latechunk", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("sync-partitions", help="sync Dagster dynamic partitions with the store's shards")
    s = sub.add_parser("search", help="search the chunk table")
    s.add_argument("query")
    s.add_argument("-k", type=int, default=5, help="number of results (default 5)")
    s.add_argument("--where", default=None, help="LanceDB SQL filter, e.g. \"partition = 'a'\"")
    s.add_argument("--model", default="", help="model directory (default: the shipped model)")
    sub.add_parser("demo", help="run the main job on the embedded default and search")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    if args.command == "demo":
        from latechunk_dagster.demo import main as demo_main

        return demo_main()
    from latechunk_dagster import settings

    settings.ensure_dagster_home()
    if args.command == "sync-partitions":
        import dagster as dg

        from latechunk_dagster.definitions import defs
        from latechunk_dagster.sensors import sync_partitions

        added, removed = sync_partitions(dg.DagsterInstance.get(), defs.resources["store"].get_store())
        print(f"added {added or 'none'}; removed {removed or 'none'}")
        return 0
    from latechunk_dagster.engine import LateChunker
    from latechunk_dagster.resources import shipped_model_path
    from latechunk_dagster.search import search

    with LateChunker(args.model or shipped_model_path()) as chunker:
        hits = search(args.query, chunker=chunker, uri=settings.lancedb_uri(), k=args.k, where=args.where)
    for h in hits:
        print(f"{h.distance:.4f}\t{h.doc_id}\t{h.char_range}\t{' '.join((h.text or '').split())[:160]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
