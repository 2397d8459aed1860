"""Airflow for the tests: a temporary AIRFLOW_HOME with a sqlite metadata database and a dags folder.

Import this module before anything imports ``airflow`` (Airflow reads its configuration at
import). The database is created once per process by :func:`init_db`.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

HOME = Path(tempfile.mkdtemp(prefix="latechunk-airflow-home-"))
DAGS = HOME / "dags"
DAGS.mkdir()
os.environ.update(
    {
        "AIRFLOW_HOME": str(HOME),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{HOME}/airflow.db",
        "AIRFLOW__CORE__ALLOWED_DESERIALIZATION_CLASSES": "airflow.* latechunk_dagster.*",
    }
)
_READY: list[bool] = []


def init_db() -> None:
    """Create the metadata database's tables (once per process)."""
    if not _READY:
        from airflow.utils.db import initdb

        initdb()
        _READY.append(True)
