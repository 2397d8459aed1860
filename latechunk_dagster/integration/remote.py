"""Deprecated module path: the vLLM server's Dagster resource lives in
:mod:`latechunk_dagster.integration.server_resource` (this name also named the chunker's
``core/remote.py``, now ``core/server_chunker.py``). Importing from here still works, with a
DeprecationWarning."""

import warnings

from latechunk_dagster.integration.server_resource import VLLMServerEngineResource

warnings.warn(
    "latechunk_dagster.integration.remote is deprecated: import VLLMServerEngineResource from "
    "latechunk_dagster.integration.server_resource",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["VLLMServerEngineResource"]
