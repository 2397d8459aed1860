"""Hooks of the late-chunking Airflow provider: a LanceDB database and a vLLM server."""

from latechunk_dagster.airflow.hooks.lancedb import LanceDBHook
from latechunk_dagster.airflow.hooks.vllm import VLLMServerHook

__all__ = ["LanceDBHook", "VLLMServerHook"]
