"""The provider as Airflow sees it: discovery through the entry point, connection forms, hooks on real connections."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests import airflow_env  # sets AIRFLOW_HOME before airflow is imported

LANCEDB_CONN = {
    "conn_type": "lancedb",
    "host": "s3://bucket/vectors",
    "password": "cloud-key",
    "extra": {
        "storage_options": {"region": "eu-west-1", "endpoint": "http://127.0.0.1:9000", "allow_http": "true"},
        "region": "us-east-1",
        "read_consistency_interval_s": 0,
    },
}


def test_providers_manager_discovers_the_provider_and_its_connection_types() -> None:
    from airflow.providers_manager import ProvidersManager

    assert airflow_env.HOME.exists()
    pm = ProvidersManager()
    info = pm.providers["latechunk-dagster"]
    assert info.version == "0.1.0"
    hooks = pm.hooks  # imports the hook classes like `airflow providers hooks`
    assert hooks["lancedb"].hook_class_name == "latechunk_dagster.airflow.hooks.lancedb.LanceDBHook"
    assert hooks["lancedb"].connection_id_attribute_name == "lancedb_conn_id"
    assert hooks["vllm_server"].hook_class_name == "latechunk_dagster.airflow.hooks.vllm.VLLMServerHook"
    assert pm.field_behaviours["lancedb"]["relabeling"] == {"host": "URI", "password": "LanceDB Cloud API key"}
    assert "login" in pm.field_behaviours["vllm_server"]["hidden_fields"]
    widgets = pm.connection_form_widgets
    assert {"extra__lancedb__storage_options", "extra__vllm_server__max_in_flight"} <= set(widgets)


def test_lancedb_connection_maps_onto_the_dagster_resource_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    from latechunk_dagster.airflow.hooks.lancedb import LanceDBHook
    from latechunk_dagster.integration.resources import LanceDBResource

    monkeypatch.setenv("AIRFLOW_CONN_VECTORS", json.dumps(LANCEDB_CONN))
    ours = LanceDBHook("vectors").get_settings()
    extra = LANCEDB_CONN["extra"]
    theirs = LanceDBResource(
        uri="s3://bucket/vectors",
        storage_options=extra["storage_options"],
        api_key="cloud-key",
        region="us-east-1",
        read_consistency_interval_s=0,
    ).settings()
    assert ours.connect_kwargs() == theirs.connect_kwargs() and ours.uri == theirs.uri
    assert ours.owner == "LanceDBHook(conn_id='vectors')"


def test_lancedb_connection_refuses_an_unknown_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from latechunk_dagster.airflow.hooks.lancedb import LanceDBHook

    monkeypatch.setenv("AIRFLOW_CONN_TYPO", json.dumps({**LANCEDB_CONN, "extra": {"storage_option": {}}}))
    with pytest.raises(ValueError, match=r"unknown extra \['storage_option'\]"):
        LanceDBHook("typo").get_settings()


@pytest.mark.parametrize(
    ("options", "why"),
    [('{"region": "eu-west-1", "region": "us-east-1"}', r"repeated key\(s\) \['region'\]"), ("{region", "Expecting")],
)
def test_lancedb_connection_refuses_storage_options_it_cannot_read(
    monkeypatch: pytest.MonkeyPatch, options: str, why: str
) -> None:
    """storage_options typed into the UI's text field: a key given twice (json.loads would keep the
    last value silently) or text that is not JSON is refused naming the connection."""
    from latechunk_dagster.airflow.hooks.lancedb import LanceDBHook

    monkeypatch.setenv("AIRFLOW_CONN_TWICE", json.dumps({**LANCEDB_CONN, "extra": {"storage_options": options}}))
    with pytest.raises(ValueError, match=rf"connection 'twice': storage_options is not a JSON object: .*{why}"):
        LanceDBHook("twice").get_settings()


def test_lancedb_hook_on_a_local_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from latechunk_dagster.airflow.hooks.lancedb import LanceDBHook

    monkeypatch.setenv("AIRFLOW_CONN_LANCEDB_DEFAULT", json.dumps({"conn_type": "lancedb", "host": str(tmp_path)}))
    hook = LanceDBHook()
    assert hook.open_table("chunks") is None
    assert hook.chunk_table("chunks", 4).schema.field("vector").type.list_size == 4
    assert hook.test_connection() == (True, f"connected to {tmp_path}: 1 tables")
    (tmp_path / "afile").write_text("not a directory")
    monkeypatch.setenv("AIRFLOW_CONN_BROKEN", json.dumps({"conn_type": "lancedb", "host": str(tmp_path / "afile/db")}))
    with pytest.raises(ValueError, match=r"LanceDBHook\(conn_id='broken'\)\(uri=.*\) cannot open or create table"):
        LanceDBHook("broken").chunk_table("chunks", 4)


@pytest.mark.parametrize("value", [-1, "-1", "nan", "inf", "five", True], ids=repr)
def test_lancedb_connection_refuses_a_read_consistency_interval_out_of_range(
    monkeypatch: pytest.MonkeyPatch, value: object
) -> None:
    """Issue 27 item 15: -1 panicked inside LanceDB on the first table call ("rust future panicked");
    nan, inf and "five" failed with messages that named no setting. Refused when the connection is read."""
    from latechunk_dagster.airflow.hooks.lancedb import LanceDBHook

    extra = {**LANCEDB_CONN["extra"], "read_consistency_interval_s": value}
    monkeypatch.setenv("AIRFLOW_CONN_INTERVAL", json.dumps({**LANCEDB_CONN, "extra": extra}))
    why = "read_consistency_interval_s must be a finite number of seconds >= 0 (0: every read; unset: never)"
    with pytest.raises(ValueError, match=re.escape(f"LanceDBHook(conn_id='interval'): {why}, got {value!r}")):
        LanceDBHook("interval").get_settings()


def test_lancedb_connection_takes_an_interval_typed_as_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from latechunk_dagster.airflow.hooks.lancedb import LanceDBHook

    conn = {"conn_type": "lancedb", "host": str(tmp_path), "extra": {"read_consistency_interval_s": "2.5"}}
    monkeypatch.setenv("AIRFLOW_CONN_TEXT", json.dumps(conn))
    hook = LanceDBHook("text")
    assert hook.get_settings().read_consistency_interval_s == 2.5
    assert hook.get_settings().connect_kwargs()["read_consistency_interval"].total_seconds() == 2.5
    assert hook.chunk_table("chunks", 4).count_rows() == 0  # a real table call with the interval


def test_vllm_server_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    from latechunk_dagster.airflow.hooks.vllm import VLLMServerHook

    conn = {
        "conn_type": "vllm_server",
        "host": "vllm-0",
        "port": 8000,
        "password": "secret",
        "extra": {"model": "/models/minilm", "max_in_flight": "8", "timeout_s": 30},
    }
    monkeypatch.setenv("AIRFLOW_CONN_VLLM_DEFAULT", json.dumps(conn))
    assert VLLMServerHook().get_server_kwargs() == {
        "base_url": "http://vllm-0:8000",
        "other_base_urls": [],
        "model": "/models/minilm",
        "served_model": None,
        "api_key": "secret",
        "max_in_flight": 8,
        "timeout_s": 30.0,
    }
    for given in (["http://vllm-1:8000/", "http://vllm-2:8000"], "http://vllm-1:8000/, http://vllm-2:8000"):
        several = {**conn, "extra": {**conn["extra"], "other_base_urls": given}}
        monkeypatch.setenv("AIRFLOW_CONN_SEVERAL", json.dumps(several))
        kwargs = VLLMServerHook("several").get_server_kwargs()
        assert kwargs["other_base_urls"] == ["http://vllm-1:8000", "http://vllm-2:8000"]
    bad = {**conn, "extra": {**conn["extra"], "other_base_urls": ["vllm-1"]}}
    monkeypatch.setenv("AIRFLOW_CONN_BAD", json.dumps(bad))
    with pytest.raises(ValueError, match="other_base_urls"):
        VLLMServerHook("bad").get_server_kwargs()
    for name, value, rule in (
        ("timeout_s", "five", "a finite number of seconds > 0"),
        ("retries", -1, "an integer >= 0"),
    ):
        odd = {**conn, "extra": {**conn["extra"], name: value}}
        monkeypatch.setenv("AIRFLOW_CONN_ODD", json.dumps(odd))
        with pytest.raises(ValueError, match=re.escape(f"connection 'odd': {name} must be {rule}, got {value!r}")):
            VLLMServerHook("odd").get_server_kwargs()  # "five" was float()'s error, naming no setting
    monkeypatch.setenv("AIRFLOW_CONN_NOMODEL", json.dumps({"conn_type": "vllm_server", "host": "https://vllm.example"}))
    with pytest.raises(ValueError, match="no model directory"):
        VLLMServerHook("nomodel").get_chunker()


def test_vllm_connection_with_a_password_in_its_url_names_it_nowhere(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A ``vllm_server`` connection whose host is ``http://latechunk:<password>@host:port`` (basic auth
    in front of a server, here a loopback proxy that demands it): the connection test sends the
    credentials as basic auth (a wrong password is refused, the right one passes the proxy) and the
    password is in none of its messages nor in httpx's own request log lines (captured at DEBUG);
    the URL is named ``http://latechunk:[secure]@...``."""
    import logging

    from latechunk_dagster.airflow.hooks.vllm import VLLMServerHook
    from tests.servers import Proxy, free_port

    secret = "s3cr3t-Pa55"
    proxy = Proxy(f"http://127.0.0.1:{free_port()}")  # nothing behind it: only its basic auth answers
    proxy.basic_auth = ("latechunk", secret)
    for name in ("", "httpx", "httpcore"):
        caplog.set_level(logging.DEBUG, logger=name)
    httpx_log = logging.getLogger("httpx")  # Airflow's logging setup may keep it from the root's handlers
    httpx_log.addHandler(caplog.handler)
    messages = []
    try:
        for password, refused in ((secret + "x", 1), (secret, 1)):
            host = proxy.url.replace("http://", f"http://latechunk:{password}@")
            monkeypatch.setenv("AIRFLOW_CONN_GUARDED", json.dumps({"conn_type": "vllm_server", "host": host}))
            ok, message = VLLMServerHook("guarded").test_connection()
            assert not ok and proxy.refused == refused, message
            messages.append(message)
        assert "401" in messages[0] and proxy.url.replace("http://", "http://latechunk:[secure]@") in messages[0]
    finally:
        proxy.close()
        httpx_log.removeHandler(caplog.handler)
    logged = [r.getMessage() for r in caplog.records]
    assert any("HTTP Request:" in m for m in logged)
    assert not [m for m in messages + logged if secret in m]
