"""Indexes over the chunk table, built and kept current with LanceDB's own APIs (the queries that search
them, with their settings, are :mod:`latechunk_dagster.sink.queries`).

The vector index and its search settings were chosen by measurement (``bench/ann_recall.py``):
on 12,000 clustered unit vectors (384 dims, 300 topics, neighbours close together, the hard
case for quantization) LanceDB's previous default, ``IVF_PQ`` with ``sqrt(rows)`` partitions
and 48 sub-vectors searched with LanceDB's defaults, found 0.25-0.28 of the exact top 10.
``IVF_HNSW_SQ`` (a graph per partition over 8-bit scalar-quantized vectors), searched with
``ef`` 800 and the candidates re-ranked on the full vectors (``refine_factor``), found
0.98-1.0 of them. :func:`refresh_indexes` measures the recall again on a sample of the real
table every time it builds the index and reports it, so a table where it is lower is seen.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from lancedb.index import FTS, Bitmap, BTree

from latechunk_dagster.sink.queries import RECALL_SAMPLE, measure_recall, search_settings
from latechunk_dagster.sink.retry import retry_commit

T = TypeVar("T")

log = logging.getLogger(__name__)
#: Below this many rows a flat (brute-force) scan is exact and fast enough; an index needs
#: enough rows to train its partitions and pays off only on large tables.
ANN_MIN_ROWS = 50_000
#: Rows per IVF partition of the HNSW index (one graph per partition); searches probe
#: ``SEARCH_NPROBES`` partitions, so up to ``SEARCH_NPROBES * ROWS_PER_PARTITION`` rows every graph is searched.
#: Measured at 153,010 rows (``bench/index_refresh.py --scale 10``'s table, hard synthetic vectors):
#: one graph of every row found 0.744 of the exact top 10 at ef 200 and 0.888 at ef 800; three
#: graphs of ~51k rows 0.815 and 0.980, and built in 125 s instead of 176 s. At 22k rows one graph
#: found 0.998-1.0 at ef 200: a graph's recall falls as it grows, so the graphs are kept small.
ROWS_PER_PARTITION = 50_000
#: HNSW graph degree and build beam: m=32 measured 1.0 recall@10 where m=20 gave 0.96-0.98.
HNSW_M = 32
HNSW_EF_CONSTRUCTION = 300
#: Recall below this is flagged in the report (``recall_ok: False``) and logged.
RECALL_TARGET = 0.95
#: A refresh that added rows builds the vector index again only when its recall fell below
#: ``RECALL_TARGET`` *and* more than this below the recall measured when the index was built (kept
#: in the table's config, :data:`BUILD_RECALL_KEY`): where a fresh build itself stays under the
#: target (hard data), building again would cost a full build every refresh and find no more.
#: Larger than the sampling error of ``RECALL_SAMPLE`` queries (about 0.02).
RETRAIN_MARGIN = 0.05
#: The LanceDB table config key (``LanceDataset.update_config``) holding the recall@10 measured
#: when the vector index was last built.
BUILD_RECALL_KEY = "latechunk.vector_index_build_recall"


#: Versions older than this are removed by a refresh (those a tag holds are kept: :func:`prune_versions`).
PRUNE_OLDER_THAN = timedelta(days=1)
#: LanceDB's ``optimize`` always prunes too, and refuses when a tagged version is older than its cutoff
#: ("Cleanup error: ... tagged version(s) have been marked for cleanup"): a cutoff no version reaches
#: leaves the pruning to :func:`prune_versions`.
NO_PRUNE = timedelta(days=36_500)


def prune_versions(table: Any, older_than: timedelta | None = None) -> None:
    """Remove the table's versions older than ``older_than`` (default ``PRUNE_OLDER_THAN``), keeping every
    version a tag holds (each run tags the version it committed:
    :func:`~latechunk_dagster.sink.generations.tag_commit`), which LanceDB's own ``optimize`` refuses to do once
    a tagged version is older than its cutoff. A table this process cannot open as a lance dataset (LanceDB
    Cloud) is pruned by its service."""
    to_lance = getattr(table, "to_lance", None)
    if to_lance is None:
        return
    cutoff = PRUNE_OLDER_THAN if older_than is None else older_than
    to_lance().cleanup_old_versions(older_than=cutoff, error_if_tagged_old_versions=False)
    table.checkout_latest()


def index_commit(table: Any, what: str, commit: Callable[[], T]) -> T:
    """Run one index or compaction commit of ``table``, retried while a concurrent writer's commit wins.

    A partition commit that lands while the table is compacted (or an index is built) makes
    LanceDB refuse ours with "Retryable commit conflict ... Please retry" (lance 13: a Rewrite
    preempted by a concurrent Update of the fragments it rewrote); the commit is made again on
    the latest version, with the bounded backoff of :func:`~latechunk_dagster.sink.retry.retry_commit`.

    Raises:
        CommitConflictError: still conflicting after ``COMMIT_ATTEMPTS`` attempts (nothing of this
            commit was written; the table is as the writers left it).
    """
    result, _ = retry_commit(commit, what=f"{what} of {table.name!r}", refresh=table.checkout_latest)
    return result


@dataclass(frozen=True)
class IndexPolicy:
    """When :func:`refresh_indexes` adds the new rows to an index and when it builds the index again,
    and what the index coverage check allows (:func:`index_coverage`).

    A refresh builds an index only when the table has none, or when the one it has no longer fits
    (another type or parameters, or graphs grown past twice ``ROWS_PER_PARTITION`` rows:
    :func:`_vector_index_fits`); otherwise it
    runs LanceDB's ``optimize``, which compacts small fragments, adds the rows committed since the
    last refresh to each index (a *delta* segment of the vector index; the full-text and scalar
    indexes are merged whole) and prunes versions. Measured in ``bench/index_refresh.py``.

    Attributes:
        max_vector_segments: the vector index's segments (its build and one delta per refresh that
            added rows) above which they are merged into one (``optimize_indices`` with
            ``num_indices_to_merge``; the IVF centroids are kept, not retrained). Every segment is
            searched on its own, so search time grows with them.
        max_unindexed_fraction: coverage check: the share of the rows an index may leave uncovered
            (rows committed since the last refresh; a search scans them exactly beside the index).
        max_small_fragments: coverage check: small fragments the table may hold before the next
            refresh should compact them (each partition commit adds fragments; LanceDB's guide
            suggests ``optimize`` after about 20 modifications).
    """

    max_vector_segments: int = 8
    max_unindexed_fraction: float = 0.1
    max_small_fragments: int = 64


#: The defaults, shared by the index asset, the Airflow index task and the coverage check's config.
DEFAULT_POLICY = IndexPolicy()


def _indexes(table: Any) -> dict[str, Any]:
    """The table's indexes by the one column each covers (LanceDB ``IndexConfig`` values)."""
    return {list(i.columns)[0]: i for i in table.list_indices() if len(list(i.columns)) == 1}


def _wanted_vector_index(rows: int) -> dict[str, Any]:
    """The ``IVF_HNSW_SQ`` parameters for a table of ``rows`` rows (about one IVF partition per
    ``ROWS_PER_PARTITION``: LanceDB picks the count itself from ``target_partition_size``, so the
    report uses this only where the built index's parameters cannot be read)."""
    return {
        "type": "IVF_HNSW_SQ",
        "metric": "cosine",
        "partitions": max(1, math.ceil(rows / ROWS_PER_PARTITION)),
        "m": HNSW_M,
        "ef_construction": HNSW_EF_CONSTRUCTION,
    }


#: lance's switch for vector index statistics with the IVF centroids (lance 14 includes them and warns at
#: every read that a later release will not; this module reads no centroid). Only lance's own
#: ``LanceDataset.stats.index_stats`` reads them; LanceDB's ``table.index_stats`` does not (no warning).
CENTROIDS_ENV = "LANCE_INCLUDE_VECTOR_CENTROIDS"


@contextlib.contextmanager
def _stats_without_centroids() -> Iterator[None]:
    """Index statistics read without the centroids (``CENTROIDS_ENV=false`` for the read), unless the
    process set ``CENTROIDS_ENV`` itself: no centroid copy and no warning line at every refresh."""
    if CENTROIDS_ENV in os.environ:
        yield
        return
    os.environ[CENTROIDS_ENV] = "false"
    try:
        yield
    finally:
        os.environ.pop(CENTROIDS_ENV, None)


def _vector_index_params(table: Any, name: str) -> dict[str, Any] | None:
    """The built vector index's parameters in :func:`_wanted_vector_index`'s form, from lance's index
    statistics (``None`` where the table is not a lance dataset this process can open, e.g. LanceDB Cloud)."""
    to_lance = getattr(table, "to_lance", None)
    if to_lance is None:
        return None
    with _stats_without_centroids():
        stats = to_lance().stats.index_stats(name)
    first = stats["indices"][0]
    params = first.get("sub_index", {}).get("params", {})
    return {
        "type": stats["index_type"],
        "metric": str(first.get("metric_type", "")).lower(),
        "partitions": first.get("num_partitions"),
        "m": params.get("m"),
        "ef_construction": params.get("ef_construction"),
    }


def _vector_index_fits(params: dict[str, Any] | None, rows: int) -> bool:
    """Whether a built vector index of ``params`` (:func:`_vector_index_params`) still fits a table of
    ``rows`` rows: the same type and graph parameters, and graphs of at most ``2 * ROWS_PER_PARTITION``
    and (with several) at least ``ROWS_PER_PARTITION / 4`` rows on average. The slack keeps a table
    that crosses a multiple of ``ROWS_PER_PARTITION`` on delta segments instead of a full build (a
    table growing 10% a run would otherwise build again every few runs); a build lets LanceDB size
    the partitions (:func:`build_vector_index`). ``None`` (the parameters cannot be read: LanceDB
    Cloud maintains its indexes itself) fits."""
    if params is None:
        return True
    graph = {k: v for k, v in params.items() if k != "partitions"}
    wanted = {k: v for k, v in _wanted_vector_index(rows).items() if k != "partitions"}
    parts = params.get("partitions") or 1
    per_graph = rows / parts
    return (
        graph == wanted and per_graph <= 2 * ROWS_PER_PARTITION and (parts == 1 or per_graph >= ROWS_PER_PARTITION / 4)
    )


def build_vector_index(table: Any, rows: int) -> dict[str, Any]:
    """Build (replace) the ``IVF_HNSW_SQ`` cosine index on ``vector``; returns its parameters.

    The IVF partitions are given as LanceDB's ``target_partition_size`` (``ROWS_PER_PARTITION``),
    not as a count: LanceDB's ``optimize`` splits and joins partitions toward that size, and with a
    count and its default target (1Mi rows) it joined three 2k-row graphs into one on the next
    ``optimize`` (lance 14.0.2), undoing the small graphs the recall needs."""
    from lancedb.index import HnswSq

    config = HnswSq(
        distance_type="cosine", target_partition_size=ROWS_PER_PARTITION, m=HNSW_M, ef_construction=HNSW_EF_CONSTRUCTION
    )
    index_commit(table, "vector index", lambda: table.create_index("vector", config=config, replace=True))
    built = [i for i in table.list_indices() if list(i.columns) == ["vector"]]
    params = _vector_index_params(table, built[0].name) if built else None
    return params or _wanted_vector_index(rows)


def _build_recall(table: Any) -> float | None:
    """The recall@10 recorded when the table's vector index was built (``None``: not recorded, or a
    table this process cannot open as a lance dataset)."""
    to_lance = getattr(table, "to_lance", None)
    if to_lance is None:
        return None
    value = to_lance().config().get(BUILD_RECALL_KEY)
    try:
        return None if value is None else float(value)
    except ValueError:
        return None


def _record_build_recall(table: Any, recall: float) -> None:
    """Keep the recall@10 of a fresh build in the table's config (one small commit; see :data:`RETRAIN_MARGIN`)."""
    to_lance = getattr(table, "to_lance", None)
    if to_lance is None:
        return

    def record() -> None:
        to_lance().update_config({BUILD_RECALL_KEY: f"{recall:.4f}"})
        table.checkout_latest()

    index_commit(table, "index recall record", record)


def _needs_retrain(recall: float, built_recall: float | None) -> bool:
    """Whether a refresh that added rows should build the vector index again (:data:`RETRAIN_MARGIN`)."""
    if recall >= RECALL_TARGET:
        return False
    return built_recall is None or recall < built_recall - RETRAIN_MARGIN


def _merge_vector_segments(table: Any, name: str, policy: IndexPolicy) -> bool:
    """Merge the vector index's segments into one when there are more than ``policy.max_vector_segments``;
    returns whether it merged."""
    stats = table.index_stats(name)
    segments = stats.num_indices if stats is not None else 1
    to_lance = getattr(table, "to_lance", None)
    if segments <= policy.max_vector_segments or to_lance is None:
        return False

    def merge() -> None:
        to_lance().optimize.optimize_indices(index_names=[name], num_indices_to_merge=segments)
        table.checkout_latest()  # the merge committed through lance: read the version it made

    index_commit(table, "vector index merge", merge)
    return True


def _ensure_indexes(table: Any, have: dict[str, Any]) -> list[str]:
    """Create the full-text index on ``text`` and the scalar indexes on ``doc_id`` (BTREE) and
    ``partition`` (BITMAP) where the table lacks them; returns what was created (the others are
    brought up to date by ``optimize``)."""
    wanted = {"text": ("FTS", FTS()), "doc_id": ("BTree", BTree()), "partition": ("Bitmap", Bitmap())}
    created = []
    for column, (kind, config) in wanted.items():
        if column in have:
            continue
        index_commit(
            table, f"{column} index", lambda c=column, cfg=config: table.create_index(c, config=cfg, replace=True)
        )
        created.append(f"{column} ({kind})")
    return created


def index_coverage(table: Any, policy: IndexPolicy = DEFAULT_POLICY) -> dict[str, Any]:
    """What the table's indexes do not cover now, against ``policy``'s thresholds.

    Returns:
        ``rows``; ``unindexed_rows`` (per indexed column: rows committed since that index last took
        new rows; a search scans them beside the index); ``fragments`` and ``small_fragments``
        (LanceDB's table statistics); ``vector_segments`` (``0`` without a vector index); and
        ``ok`` (every index leaves at most ``max_unindexed_fraction`` of the rows uncovered and there
        are at most ``max_small_fragments`` small fragments) with ``problems``, the reasons it is not.
    """
    rows = table.count_rows()
    unindexed: dict[str, int] = {}
    segments = 0
    for column, index in _indexes(table).items():
        stats = table.index_stats(index.name)
        if stats is None:
            continue
        unindexed[column] = int(stats.num_unindexed_rows)
        if column == "vector":
            segments = int(stats.num_indices)
    fragments = table.stats()["fragment_stats"]
    problems = [
        f"{column}: {n} of {rows} rows not indexed (more than {policy.max_unindexed_fraction:.0%})"
        for column, n in unindexed.items()
        if n > policy.max_unindexed_fraction * rows
    ]
    if fragments["num_small_fragments"] > policy.max_small_fragments:
        problems.append(
            f"{fragments['num_small_fragments']} small fragments (more than {policy.max_small_fragments}): "
            "refresh the indexes to compact them"
        )
    return {
        "rows": rows,
        "unindexed_rows": unindexed,
        "fragments": int(fragments["num_fragments"]),
        "small_fragments": int(fragments["num_small_fragments"]),
        "vector_segments": segments,
        "ok": not problems,
        "problems": problems,
    }


def refresh_indexes(
    table: Any, *, ann_min_rows: int = ANN_MIN_ROWS, policy: IndexPolicy = DEFAULT_POLICY, rebuild: bool = False
) -> dict[str, Any]:
    """Bring the chunk table's indexes up to date, incrementally where they fit (:class:`IndexPolicy`).

    * vector: ``IVF_HNSW_SQ`` with cosine distance once the table has ``ann_min_rows`` rows
      (one partition per ``ROWS_PER_PARTITION`` rows, ``m=HNSW_M``); below that searches scan every
      row exactly and an index the table had is dropped. Built when the table has none, when the one
      it has has other parameters (or the rows now want another partition count), or with
      ``rebuild``; otherwise the new rows go into a delta segment, and the segments are merged past
      ``policy.max_vector_segments``. Then recall@10 of the default search against an exact scan is
      measured on ``RECALL_SAMPLE`` stored vectors; an incremental refresh whose recall fell below
      ``RECALL_TARGET`` and more than ``RETRAIN_MARGIN`` below the recall the index had when built
      builds the index again (new centroids) and measures again; a build records its recall in the
      table's config (:data:`BUILD_RECALL_KEY`).
    * ``text``: LanceDB full-text index; ``doc_id``: BTREE; ``partition``: BITMAP; created when
      missing (or with ``rebuild``), else brought up to date.
    * LanceDB's ``optimize``: compacts small fragments and adds the rows committed since the last
      refresh to every index; then versions older than one day are removed, those a tag holds (a
      run's) kept (:func:`prune_versions`).

    Each commit is retried when a writer's commit lands during it (:func:`index_commit`), so the
    refresh runs beside partition writers.

    Raises:
        CommitConflictError: a commit still lost to concurrent writers after every retry.

    Returns:
        A report for materialization metadata: ``rows``, ``vector_index`` (type and parameters),
        ``vector_refresh`` (``built``, ``delta``, ``merged``, ``retrained`` or ``none``), ``search``
        (the query settings), ``recall_at_10`` (float, or ``1.0`` for an exact scan),
        ``recall_sample``, ``recall_ok`` (``recall_at_10 >= RECALL_TARGET``), ``recall_at_build``
        (the recall when the vector index was last built, ``None`` where unknown), the other indexes
        (``created`` names those built by this refresh), the :func:`index_coverage` after it
        (``unindexed_rows``, ``fragments``, ``small_fragments``, ``vector_segments``) and the
        table ``version``.
    """
    rows = table.count_rows()
    report: dict[str, Any] = {"rows": rows}
    if rows == 0:
        report["indexes"] = "none (empty table)"
        return report
    indexes = _indexes(table)
    have = {} if rebuild else indexes  # with rebuild every index is built again (replaced)
    vector = indexes.get("vector")
    if rows < ann_min_rows:
        if vector is not None:  # a table that shrank: an old index would still be searched
            index_commit(table, f"drop index {vector.name!r}", lambda: table.drop_index(vector.name))
        report["vector_index"] = f"none: flat scan (rows < {ann_min_rows})"
        report["vector_refresh"] = "none"
    else:
        built = None if rebuild or vector is None else _vector_index_params(table, vector.name)
        if rebuild or vector is None or not _vector_index_fits(built, rows):
            built = build_vector_index(table, rows)
            report["vector_refresh"] = "built"
        else:
            report["vector_refresh"] = "delta"
        report["vector_index"] = ", ".join(f"{k}={v}" for k, v in (built or _wanted_vector_index(rows)).items())
    created = _ensure_indexes(table, have)
    # Compaction, the new rows into every index (a delta segment of the vector index), old versions pruned.
    index_commit(table, "compaction", lambda: table.optimize(cleanup_older_than=NO_PRUNE))
    prune_versions(table)
    if report["vector_refresh"] == "delta" and _merge_vector_segments(table, vector.name, policy):
        report["vector_refresh"] = "merged"
    if rows >= ann_min_rows:
        report["search"] = search_settings()
        report["recall_at_10"] = round(measure_recall(table), 4)
        report["recall_sample"] = min(RECALL_SAMPLE, rows)
        built_recall = _build_recall(table)
        if report["vector_refresh"] in ("delta", "merged") and _needs_retrain(report["recall_at_10"], built_recall):
            log.warning(
                "recall@10 %.3f after adding rows to the vector index (%s when built): building it again",
                report["recall_at_10"],
                "unknown" if built_recall is None else f"{built_recall:.3f}",
            )
            build_vector_index(table, rows)
            report["vector_refresh"] = "retrained"
            report["recall_at_10"] = round(measure_recall(table), 4)
        if report["vector_refresh"] in ("built", "retrained"):
            _record_build_recall(table, report["recall_at_10"])
            built_recall = report["recall_at_10"]
        report["recall_at_build"] = built_recall
    else:
        report["search"] = "exact scan"
        report["recall_at_10"] = 1.0
        report["recall_sample"] = 0
    report["recall_ok"] = report["recall_at_10"] >= RECALL_TARGET
    if not report["recall_ok"]:
        log.warning(
            "approximate search found %.3f of the exact top 10 on %d sampled rows (target %.2f); "
            "search(..., exact=True) scans every row",
            report["recall_at_10"],
            report["recall_sample"],
            RECALL_TARGET,
        )
    report["fts_index"] = "text"
    report["scalar_indexes"] = "doc_id (BTREE), partition (BITMAP)"
    report["created"] = ", ".join(created) or "none"
    coverage = index_coverage(table, policy)
    for key in ("unindexed_rows", "fragments", "small_fragments", "vector_segments"):
        report[key] = coverage[key]
    report["version"] = table.version
    return report
