"""``latechunk``: command-line entry points of the embedded default.

    latechunk sync-partitions          # add/remove dynamic partitions to match the store's shards
    latechunk sync-partitions -f definitions.py   # the same for every late-chunked table of your definitions
    latechunk search "query" -k 5      # top-k chunks from the LanceDB table (--hybrid: full-text + vector);
                                       # on make demo's granularity tables: the finest matched, its parents printed
    latechunk search "query" --granularity small --parent   # match small chunks, print their parents
    latechunk migrate                  # add the columns of the current chunk schema to an older table
    latechunk eval QUERIES.jsonl       # retrieval late vs naive (and hybrid) on labeled queries (nDCG@10, R@k, MRR@10);
                                       # every granularity side by side, with small-to-big, where --table has several
    latechunk demo                     # what `make demo` runs
    latechunk generations | promote | rollback   # the table definition's generations (issue 36)

Locations come from ``LATECHUNK_HOME`` / ``LATECHUNK_DOCUMENT_STORE`` (:mod:`latechunk_dagster.app.settings`).
"""

from __future__ import annotations

import argparse
import atexit
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

from latechunk_dagster.app import generations_cli
from latechunk_dagster.app.query_process import ONE_LINE_ERRORS, QueryProcess
from latechunk_dagster.core.chunker import ENGINES
from latechunk_dagster.core.redact import redact_url

#: ``--uri``'s help: where the default comes from (:func:`latechunk_dagster.app.settings.lancedb_uri`).
URI_HELP = (
    "LanceDB directory (default: $LATECHUNK_HOME/lancedb; with LATECHUNK_DOCUMENT_STORE set, "
    "$LATECHUNK_HOME/stores/<store name>-<hash of its path>/lancedb, the store's own)"
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="latechunk", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    _sync_parser(sub)
    s = sub.add_parser("search", help="search the chunk table")
    s.add_argument("query")
    s.add_argument("-k", type=int, default=5, help="number of results (default 5)")
    s.add_argument("--where", default=None, help="LanceDB SQL filter, e.g. \"partition = 'a'\"")
    s.add_argument("--model", default="", help="model directory (default: the shipped model)")
    s.add_argument("--exact", action="store_true", help="scan every row instead of the vector index (exact top k)")
    s.add_argument(
        "--hybrid",
        action="store_true",
        help="full-text (BM25) + vector search fused by LanceDB's RRF reranker (needs the full-text index)",
    )
    s.add_argument("--uri", default=None, help=URI_HELP)
    s.add_argument(
        "--table",
        default=None,
        help="chunk table, or the table definition of granularity tables (default: chunks; make demo writes "
        "the definition chunks: without --granularity its finest granularity is matched and its parents printed)",
    )
    s.add_argument(
        "--granularity",
        default=None,
        metavar="NAME",
        help="the granularity to search: its table, <--table>_NAME (chunks_NAME by default)",
    )
    s.add_argument(
        "--parent",
        action="store_true",
        help="small-to-big: match the (fine) chunks of the table searched, print their parents in the next "
        "granularity, each once (matched: how many of its chunks matched)",
    )
    _model_options(s)
    e = sub.add_parser(
        "eval",
        help="retrieval late vs naive on labeled queries (JSONL), on the chunk table; "
        "and hybrid where the table has the full-text index; on a table of several granularities "
        "(tables TABLE_NAME), each granularity and small-to-big side by side",
    )
    e.add_argument("queries", help="query file: JSONL with query, doc_id[, char_start, char_end]")
    e.add_argument(
        "-k", "--k", type=int, default=10, help="cutoff of nDCG/MRR and the largest recall cutoff (default 10)"
    )
    e.add_argument("--where", default=None, help="LanceDB SQL filter on the chunk rows, e.g. \"partition = 'a'\"")
    e.add_argument("--model", default="", help="model directory (default: the shipped model)")
    e.add_argument("--uri", default=None, help=URI_HELP)
    e.add_argument(
        "--table", default=None, help="chunk table, or the table definition of granularity tables (default: chunks)"
    )
    e.add_argument("--plot", default=None, metavar="PNG", help="also draw the table's bars into this PNG file")
    _model_options(e)
    m = sub.add_parser("migrate", help="add the id/metadata columns (LangChain, LlamaIndex) to an older chunk table")
    m.add_argument("--uri", default=None, help=URI_HELP)
    m.add_argument("--table", default=None, help="chunk table (default: chunks)")
    sub.add_parser("demo", help="run the main job on the embedded default and search")
    generations_cli.add_parsers(sub)
    args = parser.parse_args(argv)
    args.said = ""  # search's header line where the command chose what to search (_finest_granularity)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from latechunk_dagster.app.settings import quiet_dagster_warnings, quiet_table_logs

    quiet_table_logs()
    from latechunk_dagster.core.engines.vllm_local import QUIET_ENGINE_LOG_LEVEL, quiet_engine_logs

    quiet_engine_logs(QUIET_ENGINE_LOG_LEVEL)  # errors only; VLLM_LOGGING_LEVEL=INFO shows the engine's full log
    quiet_dagster_warnings()
    try:
        code = _run(args)
    except ONE_LINE_ERRORS as exc:
        print(f"latechunk {args.command}: error: {redact_url(str(exc))}", file=sys.stderr)  # no URI's secret
        code = 2
    if argv is None and args.command in ("search", "eval"):  # the process's own command line, read only
        _exit_without_teardown(code)
    return code


def _sync_parser(sub: argparse._SubParsersAction) -> None:
    """``sync-partitions``: the embedded default's table, or every table of the user's definitions."""
    p = sub.add_parser(
        "sync-partitions",
        help="sync Dagster dynamic partitions with the store's shards (of the embedded default, or of every "
        "late-chunked table in your definitions: -m/-f as dagster takes them); uses DAGSTER_HOME",
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument("-m", "--module-name", default=None, help="your Definitions' module (as dagster -m)")
    where.add_argument("-f", "--python-file", default=None, help="your Definitions' Python file (as dagster -f)")
    p.add_argument(
        "--max-delete",
        default=None,
        metavar="SHARE",
        help="the share of the known partitions one sync may remove, e.g. 50%% or 100%% (default: "
        "$LATECHUNK_MAX_DELETE, else 50%%); more is refused, naming them, and nothing changes",
    )


def _sync_partitions(args: argparse.Namespace) -> int:
    """``latechunk sync-partitions``: :func:`~latechunk_dagster.integration.sensors.sync_partitions` of the
    embedded default (``DAGSTER_HOME`` of :mod:`~latechunk_dagster.app.settings`), or of each table of
    the user's definitions (their ``DAGSTER_HOME``, which Dagster requires to be set)."""
    import dagster as dg

    from latechunk_dagster.app import settings

    warn = lambda line: print(line, file=sys.stderr)  # noqa: E731
    flag = "-m " + args.module_name if args.module_name else "-f " + args.python_file if args.python_file else ""
    how = f"latechunk sync-partitions {flag + ' ' if flag else ''}--max-delete 100%"
    if not flag:
        settings.ensure_dagster_home()
        from latechunk_dagster.app.definitions import TABLE, defs
        from latechunk_dagster.integration.sensors import sync_partitions

        res = defs.resources
        added, removed = sync_partitions(
            dg.DagsterInstance.get(),
            res["store"].get_store(),
            TABLE.partitions_def,
            res["lancedb"],
            TABLE.wiring.table_names,
            warn=warn,
            max_delete=args.max_delete,
            how=how,
        )
        print(f"added {added or 'none'}; removed {removed or 'none'} (and their rows)")
        return 0
    if not os.environ.get("DAGSTER_HOME"):
        raise ValueError("set DAGSTER_HOME to the directory of your Dagster instance (the one your runs use)")
    from latechunk_dagster.integration.sync_definitions import load_definitions, sync_definitions

    defs = load_definitions(args.module_name, args.python_file)
    with dg.DagsterInstance.get() as instance:
        for t in sync_definitions(defs, instance, max_delete=args.max_delete, how=how, warn=warn):
            print(
                f"{', '.join(t.table_names[:-1])} (partitions {t.partitions}): added {t.added or 'none'}; "
                f"removed {t.removed or 'none'} (and their rows)"
            )
    return 0


def _exit_without_teardown(code: int) -> NoReturn:
    """End the process after its exit handlers, without the interpreter's teardown: its last garbage
    collections walk every object torch and transformers made at import (1.1 s of a 7 s
    `latechunk search` on 2 cores, bench/README.md), and the OS frees the memory anyway. The exit
    handlers (logging, LanceDB's runtime, file locks...) run first, as at a normal exit, and the
    output is flushed. (``gc.freeze`` at exit saved the same time but left triton's nanobind
    objects uncollected, and nanobind prints a leak report at teardown.)"""
    atexit._run_exitfuncs()  # what the interpreter runs at exit, before the teardown skipped here
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _model_options(p: argparse.ArgumentParser) -> None:
    """The query model's settings: the ones the table's chunk vectors were made with (``--model`` too),
    and the engine that embeds the queries."""
    p.add_argument(
        "--engine",
        choices=sorted(ENGINES, reverse=True),
        default="transformers",
        help="engine that embeds the queries: transformers (default: starts in about a second, the same "
        "vectors as vLLM's within 1e-6) or vllm",
    )
    p.add_argument("--dimensions", type=int, default=None, help="Matryoshka cut of the table's vectors")
    p.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="load a model whose configuration or code ships with it (auto_map, e.g. NomicBert)",
    )
    p.add_argument("--allow-non-mean-pooling", action="store_true", help="opt in to a CLS/last-token pooled model")
    p.add_argument("--allow-causal", action="store_true", help="opt in to a causal (decoder) model")


def _chunker(args: argparse.Namespace):  # noqa: ANN202 - LateChunker, imported lazily
    """The query embedder of ``search``/``eval``: the model and the opt-ins given on the command line,
    on ``--engine`` (the light transformers engine unless told ``vllm``). Says on stderr which engine
    embeds the queries and how long it took to start."""
    from latechunk_dagster.app.settings import shipped_model_path
    from latechunk_dagster.core.chunker import LateChunker

    chunker = LateChunker(args.model or shipped_model_path(), engine=args.engine, **_chunker_options(args))
    engine = chunker.engine.describe() if chunker.engine is not None else args.engine
    _say_engine(args, engine, chunker.startup_seconds)
    return chunker


def _chunker_options(args: argparse.Namespace) -> dict[str, object]:
    """The ``LateChunker`` options of :func:`_model_options`, but the engine."""
    return {
        "dimensions": args.dimensions,
        "trust_remote_code": args.trust_remote_code,
        "allow_non_mean_pooling": args.allow_non_mean_pooling,
        "allow_causal": args.allow_causal,
    }


def _say_engine(args: argparse.Namespace, engine: str, startup_seconds: float) -> None:
    print(
        f"latechunk {args.command}: queries embedded by {engine} (started in {startup_seconds:.1f} s)", file=sys.stderr
    )


@contextmanager
def _query_embedder(args: argparse.Namespace, query_process: QueryProcess | None) -> Iterator[object]:
    """What embeds ``search``'s query: the answer of the query process where one was started (the
    light engine), else a chunker on ``--engine`` in this process."""
    if query_process is None:
        with _chunker(args) as chunker:
            yield chunker
        return
    embedded = query_process.result()
    _say_engine(args, embedded.engine, embedded.startup_seconds)
    yield embedded


def _run(args: argparse.Namespace) -> int:
    query_process = _start_query_process(args)
    try:
        return _run_command(args, query_process)
    finally:
        if query_process is not None:
            query_process.close()


def _start_query_process(args: argparse.Namespace) -> QueryProcess | None:
    """``search`` on the light engine: its query's embedding, started first in a process of its own
    (:mod:`latechunk_dagster.app.query_process`) so that it runs while this one opens the table."""
    if args.command != "search" or args.engine != "transformers":
        return None
    from latechunk_dagster.app.settings import shipped_model_path

    return QueryProcess(args.query, args.model or shipped_model_path(), _chunker_options(args))


def _run_command(args: argparse.Namespace, query_process: QueryProcess | None) -> int:

    if args.command == "demo":
        from latechunk_dagster.app.demo import main as demo_main

        return demo_main()
    if args.command in generations_cli.COMMANDS:
        return generations_cli.run(args)
    from latechunk_dagster.app import settings

    if args.command == "sync-partitions":
        return _sync_partitions(args)
    from latechunk_dagster import sink
    from latechunk_dagster.sink.search import search

    uri = args.uri or settings.lancedb_uri()
    where = "--uri" if args.uri else "LATECHUNK_HOME"
    name = _current_generation(uri, where, args.table or sink.CHUNK_TABLE)
    if getattr(args, "granularity", None) is not None:  # search's option
        from latechunk_dagster.sink.schema import granularity_table

        name = granularity_table(name, args.granularity)
    if args.command == "eval":
        return _eval(args, uri, name, where)
    tables = _table_names(uri, where, name)
    if args.command == "search" and args.granularity is None and name not in tables:
        name = _finest_granularity(args, uri, name)  # a table definition of granularities: small-to-big
    if name not in tables:
        raise _no_table(name, args.table or sink.CHUNK_TABLE, uri, where, tables)
    if args.command == "migrate":
        return _migrate(sink.connect(uri), name)
    if getattr(args, "granularity", None) is not None:  # by its rows: not another definition's table
        from latechunk_dagster.sink.granularity_tables import granularity_table_of

        granularity_table_of(sink.connect(uri), args.table or sink.CHUNK_TABLE, args.granularity)
    table = sink.connect(uri).open_table(name)
    _check_chunk_table(table, name, args.dimensions)  # before the model loads, in one line
    _check_where(table, args.where)  # a bad filter fails before the model loads, in one line
    from latechunk_dagster.core.tokenization import check_query

    check_query(args.query)  # a byte that is not UTF-8 (surrogateescape): one line, before the model loads
    if args.k < 1:
        raise ValueError(f"-k must be >= 1, got {args.k}")
    if args.parent:
        from latechunk_dagster.sink.small_to_big import check_parent_links

        check_parent_links(table, name)  # a table without parents: one line, before the model loads
    with _query_embedder(args, query_process) as chunker:
        hits = search(
            args.query,
            chunker=chunker,
            uri=uri,
            table_name=name,
            return_parent=args.parent,
            k=args.k,
            where=args.where,
            exact=args.exact,
            mode="hybrid" if args.hybrid else "vector",
        )
    if args.said:
        print(args.said)
    columns = ["cosine_distance", "doc_id", "char_range", *(["matched"] if args.parent else []), "text"]
    print("\t".join((["rrf_score"] if args.hybrid else []) + columns))
    for h in hits:
        score = [f"{h.relevance:.4f}"] if args.hybrid else []
        matched = [str(len(h.matched))] if args.parent else []  # type: ignore[union-attr]
        text = " ".join((h.text or "").split())[:160]
        print("\t".join([*score, f"{h.distance:.4f}", h.doc_id, str(h.char_range), *matched, text]))
    return 0


def _finest_granularity(args: argparse.Namespace, uri: str, definition: str) -> str:
    """``search`` without ``--granularity`` on a table definition of granularities (what ``make demo``
    writes): the table of its finest granularity, searched small-to-big (``args.parent``) when the
    definition has a coarser one, as the demo shows; ``args.said`` is the header line that says so.
    The granularities are found by their rows (:func:`~latechunk_dagster.sink.granularity_tables.
    granularity_tables`, finest first). ``definition`` itself where it has none (the caller's error).

    Raises:
        ValueError: the definition's tables do not link as one chain (naming them).
    """
    from latechunk_dagster import sink
    from latechunk_dagster.sink.granularity_tables import granularity_tables
    from latechunk_dagster.sink.schema import granularity_table

    chain = list(granularity_tables(sink.connect(uri), definition))
    if not chain or chain == [""]:
        return definition
    fine = chain[0]
    if len(chain) > 1 and not args.parent:
        args.parent = True
        args.said = (
            f"# {definition}: matched on its finest granularity {fine!r}, printed: their parents in {chain[1]!r} "
            f"(small-to-big; --granularity {fine} prints the matches themselves)"
        )
    else:
        args.said = f"# {definition}: granularity {fine!r} (granularities, finest first: {', '.join(chain)})"
    return granularity_table(definition, fine)


def _current_generation(uri: str, where: str, definition: str) -> str:
    """The tables readers open for ``definition``: its current generation's where it is under
    generations (:func:`~latechunk_dagster.sink.generations.current_table`), resolved once per command."""
    from latechunk_dagster import sink
    from latechunk_dagster.sink.generations import current_table, log_table_name

    try:
        listed = _table_names(uri, where, definition)
    except ValueError:  # no such directory...: the command's own check says so, naming its table
        return definition
    return current_table(sink.connect(uri), definition, listed) if log_table_name(definition) in listed else definition


def _check_chunk_table(table: object, name: str, dimensions: int | None) -> None:
    """Refuse a table that is not a chunk table, or whose vectors are not ``dimensions`` wide."""
    schema = table.schema  # type: ignore[attr-defined]
    missing = [c for c in ("vector", "model_sha256", "doc_id", "text") if c not in schema.names]
    if missing:
        raise ValueError(f"table {name!r} is not a chunk table (no {', '.join(missing)} column): pass --table of one")
    width = schema.field("vector").type.list_size
    if dimensions is not None and dimensions != width:
        raise ValueError(f"table {name!r} holds {width}-dimensional vectors, not --dimensions {dimensions}")


def _migrate(db: object, name: str) -> int:
    """``latechunk migrate``: the chunk table gains the columns of the current schema it lacks."""
    from latechunk_dagster import sink

    table = db.open_table(name)  # type: ignore[attr-defined]
    _check_chunk_table(table, name, None)
    before = table.schema.names
    table = sink.open_or_create(db, name, sink.chunk_schema(table.schema.field("vector").type.list_size))
    added = [n for n in table.schema.names if n not in before]
    print(f"table {name!r}: added {', '.join(added) if added else 'nothing (already current)'}")
    return 0


def _check_where(table: object, where: str | None) -> None:
    """Run ``where`` once on the table so that a bad filter is a one-line error before the model loads."""
    if not where:
        return
    try:
        table.search().where(where).select(["chunk_id"]).limit(1).to_arrow()  # type: ignore[attr-defined]
    except Exception as exc:
        raise ValueError(f"bad --where filter {where!r}: {str(exc).splitlines()[0]}") from None


def _table_names(uri: str, where: str, name: str) -> list[str]:
    """The tables at ``uri``; one line (not a traceback) for a directory that is not there or a
    store that cannot be listed (an unknown bucket, no credentials)."""
    from latechunk_dagster import sink
    from latechunk_dagster.sink.catalog import table_names

    if "://" not in uri and not Path(uri).is_dir():
        raise ValueError(f"no table {name!r} at {uri} ({where}): no such directory (run the chunk job first)")
    try:
        return table_names(sink.connect(uri))
    except Exception as exc:  # the store's own error, first line: the user's to fix
        raise ValueError(f"cannot list the tables at {uri} ({where}): {str(exc).splitlines()[0]}") from None


def _no_table(name: str, definition: str, uri: str, where: str, tables: list[str]) -> ValueError:
    """The error for a chunk table ``name`` that is not at ``uri``: names the granularities of the
    table definition ``definition`` where it has some (tables ``definition_<g>``)."""
    from latechunk_dagster import sink
    from latechunk_dagster.sink.granularity_tables import definition_granularities

    known = sorted(definition_granularities(sink.connect(uri), definition, empty=True))  # by their rows, not names
    if known:
        hint = f"; {definition!r} is a table definition of granularities {', '.join(known)}: pass --granularity NAME"
    else:
        hint = ": materialize the chunk asset first"
    return ValueError(f"no table {name!r} at {uri} ({where}){hint}")


def _eval(args: argparse.Namespace, uri: str, name: str, where: str) -> int:
    """``latechunk eval``: the late vs naive (and hybrid) table on the chunk table ``name``; or, where
    ``name`` is a table definition of several granularities (tables ``name_<g>``), every granularity
    side by side with small-to-big, and the winner (nothing is written)."""
    from latechunk_dagster import sink
    from latechunk_dagster.evaluation import GranularityEvalReport, evaluate_table, granularity_tables, read_queries
    from latechunk_dagster.sink.schema import granularity_table

    names = _table_names(uri, where, name)
    tables = granularity_tables(sink.connect(uri), name)
    if not tables:
        raise _no_table(name, name, uri, where, names)
    for g, table in tables.items():  # before the model loads, in one line
        _check_chunk_table(table, granularity_table(name, g), args.dimensions)
        _check_where(table, args.where)
    queries = read_queries(args.queries)  # a bad file fails before the model loads
    if args.k < 1:
        raise ValueError(f"--k must be >= 1, got {args.k}")
    with _chunker(args) as chunker:
        report = evaluate_table(chunker, tables, queries, k=args.k, where=args.where)
    print(report.markdown())
    print(report.caption())
    if isinstance(report, GranularityEvalReport):
        print(report.verdict())
    print(report.best())  # the best configuration (blends included, issue 48) and its setting
    if args.plot:
        from latechunk_dagster.evaluation.plot import plot_report

        print(f"plot: {plot_report(report, args.plot)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
