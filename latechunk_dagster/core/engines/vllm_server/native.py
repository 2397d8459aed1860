"""The native route of :class:`~latechunk_dagster.core.engines.vllm_server.VLLMServerEngine`
(vLLM >= 0.33): plain text with ``late_chunking_params`` to ``/v1/embeddings``
(``TokenEmbeddingRequest`` in ``vllm/entrypoints/pooling/token_embed/protocol.py``), its token ids
from ``/tokenize`` of the same text (the response carries token ranges, not ids). A part the engine
holds (:class:`NativeRoute`), sending through its transport."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from latechunk_dagster.core.engines.base import NativeChunks
from latechunk_dagster.core.engines.vllm_server.states import json_rows
from latechunk_dagster.core.engines.vllm_server.transport import ServerTransport
from latechunk_dagster.core.head import Head, apply_head_after_projection


class NativeRoute:
    """Fixed-size chunk means computed by the server from plain text (module docstring)."""

    def __init__(self, transport: ServerTransport) -> None:
        self.transport = transport

    def native_chunks(
        self, texts: Sequence[str], chunk_size: int, model: str, *, dimensions: int | None, normalize: bool
    ) -> list[NativeChunks]:
        """Fixed-size chunk means of ``texts`` from the servers of ``model``: float32 ``[n_chunks, dim]``
        per text, with its token ids and ranges.

        vLLM's ``/v1/embeddings`` of a token_embed server takes no ``dimensions``: with a
        Matryoshka cut the server returns un-normalized means and the cut and the L2 norm are
        applied here (the order of vLLM's own head: projection, cut, normalize).

        Raises:
            ServerRejectedError: the server answered 4xx for some texts (indices in ``rejected``).
            EngineAnswerError: another number of results than texts.
            ServerUnavailableError: retries exhausted.
        """
        call = self.transport.call
        server_norm = normalize and dimensions is None

        def send(idx: list[int]) -> list[NativeChunks]:
            batch = [texts[k] for k in idx]
            rows = call(
                "POST",
                "/v1/embeddings",
                {
                    "model": model,
                    "input": batch,
                    "late_chunking_params": {"chunk_size": chunk_size},
                    "use_activation": server_norm,
                },
                decode=lambda r: json_rows(r, len(batch)),
            )
            out = []
            for text, r in zip(batch, rows):
                ids = [int(t) for t in call("POST", "/tokenize", {"model": model, "prompt": text})["tokens"]]
                # shape: [n_chunks, dim]
                vec = np.asarray(r["embedding"], dtype=np.float32).reshape(len(r["late_chunking"]["chunks"]), -1)
                if dimensions is not None:  # the server normalized nothing: the rest of the head here
                    vec = apply_head_after_projection(vec, Head(dimensions=dimensions, normalize=normalize))
                ranges = [(int(c["token_range"][0]), int(c["token_range"][1])) for c in r["late_chunking"]["chunks"]]
                out.append(NativeChunks(ids, ranges, np.ascontiguousarray(vec, dtype=np.float32)))
            return out

        # a text's token count is unknown before the server tokenizes it: ~4 characters per token
        return self.transport.run(list(texts), [max(1, len(t) // 4) for t in texts], send) if texts else []
