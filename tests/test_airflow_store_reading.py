"""Airflow's store settings of how documents are read (issue 45 items 3, 5): the store connection's
``ocr`` and ``converters`` extras (:mod:`latechunk_dagster.airflow.hooks.store`) become the store's
settings, are not storage options, and reach the listing task: a shard holding only files of a
converter of one's own is listed with them and not without them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import airflow_env  # noqa: F401 (sets AIRFLOW_HOME before Airflow is imported)
from tests.test_own_converter import NOTE, NoteConverter


def _conn(extra: dict[str, object]):  # noqa: ANN202 - an Airflow Connection
    from airflow.models.connection import Connection

    return Connection(conn_id="docs", conn_type="aws", login="AKIA", password="s3cret", extra=json.dumps(extra))


def test_the_store_connection_s_ocr_and_converters_extras_are_the_store_s_settings(tmp_path: Path) -> None:
    from latechunk_dagster.airflow.hooks.store import reading_from_connection, storage_options_from_connection
    from latechunk_dagster.airflow.tasks import list_shards

    path = f"{NoteConverter.__module__}:NoteConverter"
    conn = _conn({"region_name": "eu-west-1", "ocr": "false", "converters": json.dumps({".note": path})})
    settings = reading_from_connection(conn)
    assert settings == {"ocr": False, "converters": {".note": path}}
    assert storage_options_from_connection(conn) == {
        "aws_access_key_id": "AKIA",
        "aws_secret_access_key": "s3cret",
        "aws_region": "eu-west-1",
    }
    assert reading_from_connection(_conn({"ocr": True})) == {"ocr": True}
    with pytest.raises(ValueError, match=r"connection 'docs': ocr must be true or false, got 'yes'"):
        reading_from_connection(_conn({"ocr": "yes"}))
    with pytest.raises(ValueError, match=r"connection 'docs': converters must be a JSON object of suffix: import"):
        reading_from_connection(_conn({"converters": {".note": 3}}))

    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "owls.note").write_bytes(NOTE)
    (tmp_path / "texts").mkdir()
    (tmp_path / "texts" / "a.txt").write_text("Rivers carry sand.")
    assert list_shards(str(tmp_path)).shards == ("texts",)
    assert list_shards(str(tmp_path), store_settings=settings).shards == ("notes", "texts")


def test_the_store_connection_s_read_concurrency_extra_reaches_the_store(tmp_path: Path) -> None:
    """Issue 49 item 1: ``read_concurrency`` in the store connection's extras is the store's setting
    (files fetched at once), not a storage option; a value below 1 is refused naming the connection."""
    from latechunk_dagster.airflow.hooks.store import reading_from_connection, storage_options_from_connection
    from latechunk_dagster.sources.files import DocumentStore

    conn = _conn({"read_concurrency": "8"})
    settings = reading_from_connection(conn)
    assert settings == {"read_concurrency": 8} and "read_concurrency" not in storage_options_from_connection(conn)
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "a.txt").write_text("Rivers carry sand.")
    store = DocumentStore.from_path(tmp_path, **settings)
    assert store.read_concurrency == 8 and [d.text for d in store.read_shard("s")] == ["Rivers carry sand."]
    with pytest.raises(ValueError, match=r"connection 'docs': read_concurrency must be a whole number >= 1"):
        reading_from_connection(_conn({"read_concurrency": "0"}))
