"""Indexes over the chunk table, built with LanceDB's own APIs."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

#: Below this many rows a flat (brute-force) scan is exact and fast enough; an IVF index
#: needs enough rows to train its partitions (LanceDB's guidance: ~256 rows per partition).
ANN_MIN_ROWS = 50_000


def refresh_indexes(table: Any, *, ann_min_rows: int = ANN_MIN_ROWS) -> dict[str, Any]:
    """Build or refresh the chunk table's indexes, then compact and prune old versions.

    * vector: ``IVF_PQ`` with cosine distance once the table has ``ann_min_rows`` rows
      (``num_partitions = sqrt(rows)``, ``num_sub_vectors = dim / 8`` for 8 dims per code);
      below that searches scan every row exactly.
    * ``text``: LanceDB full-text index. ``doc_id``: BTREE; ``partition``: BITMAP.
    * ``optimize``: compacts fragments and removes versions older than one day.

    Returns a small report (what was built) for materialization metadata.
    """
    rows = table.count_rows()
    report: dict[str, Any] = {"rows": rows}
    if rows == 0:
        report["indexes"] = "none (empty table)"
        return report
    dim = table.schema.field("vector").type.list_size
    if rows >= ann_min_rows:
        parts = max(1, int(math.sqrt(rows)))
        table.create_index(
            metric="cosine",
            vector_column_name="vector",
            index_type="IVF_PQ",
            num_partitions=parts,
            num_sub_vectors=max(1, dim // 8),
            replace=True,
        )
        report["vector_index"] = f"IVF_PQ(partitions={parts}, sub_vectors={max(1, dim // 8)}, cosine)"
    else:
        report["vector_index"] = f"flat scan (rows < {ann_min_rows})"
    table.create_fts_index("text", replace=True)
    table.create_scalar_index("doc_id", index_type="BTREE", replace=True)
    table.create_scalar_index("partition", index_type="BITMAP", replace=True)
    report["fts_index"] = "text"
    report["scalar_indexes"] = "doc_id (BTREE), partition (BITMAP)"
    table.optimize(cleanup_older_than=timedelta(days=1))
    report["version"] = table.version
    return report
