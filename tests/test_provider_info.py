"""The Airflow connection form of a vLLM server takes its fields and defaults from ``ServerSettings``
(issue 28, 3): the form and the hook that reads it cannot drift apart. No Airflow import needed."""

from dataclasses import fields

from latechunk_dagster.airflow.get_provider_info import VLLM_SERVER_CONNECTION, get_provider_info
from latechunk_dagster.core.engines.vllm_server import ServerSettings


def test_the_server_form_has_every_setting_with_its_default_and_type() -> None:
    form = VLLM_SERVER_CONNECTION["conn-fields"]
    settings = {f.name: f.default for f in fields(ServerSettings)}
    # served_model is the form's own text field; api_key is the connection's password
    numeric = {name: value for name, value in settings.items() if name not in ("served_model", "api_key")}
    assert set(numeric) <= set(form)
    for name, default in numeric.items():
        schema = form[name]["schema"]
        assert schema["default"] == default, name
        assert schema["type"][0] == ("integer" if isinstance(default, int) else "number"), name
    assert "served_model" in form
    assert VLLM_SERVER_CONNECTION["ui-field-behaviour"]["relabeling"]["password"] == "API key"
    assert VLLM_SERVER_CONNECTION in get_provider_info()["connection-types"]
