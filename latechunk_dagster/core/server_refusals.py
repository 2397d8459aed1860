"""The server engine's refusals as per-document errors: the encode step of a chunker on a vLLM server.

A server answers 4xx for an input it will not encode (a window too long for it, a text its tokenizer
refuses...). :class:`ServerRefusals` wraps the chunker's :class:`~latechunk_dagster.core.encode_step.EncodeStep`
(composition, not a chunker subclass): the documents of rejected inputs come back as
:class:`ServerRejectedDocumentError` and the other documents' inputs are sent again, so a batch
keeps its good documents both in the chunker and in the host worker pool's engine thread.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from latechunk_dagster.core.batches import EncoderInputs
from latechunk_dagster.core.encode_step import EncodeStep, EngineAnswer
from latechunk_dagster.core.engines.base import Engine
from latechunk_dagster.core.engines.vllm_server import ServerRejectedDocumentError, ServerRejectedError
from latechunk_dagster.core.errors import DocumentError
from latechunk_dagster.core.head import Head


class ServerRefusals:
    """An encode step whose server-rejected documents are refused alone.

    Args:
        step: the plain encode step on the server engine.
    """

    def __init__(self, step: EncodeStep) -> None:
        self.step = step

    @property
    def engine(self) -> Engine:
        """The server engine."""
        return self.step.engine

    def encode_inputs(self, inputs: EncoderInputs, head: Head) -> EngineAnswer:
        """:meth:`EncodeStep.encode_inputs`, with documents the server rejects (4xx) refused alone.

        A document with a rejected input (a window or its native text) is refused with a
        :class:`ServerRejectedDocumentError` naming it, the server and its message; the other
        documents' inputs are sent again.

        Raises:
            ServerRejectedError: a rejection that names no input of this batch.
        """
        refused: dict[int, DocumentError] = {}
        while True:
            try:
                rows, native, _ = self.step.encode_inputs(inputs, head)
                return rows, native, refused
            except ServerRejectedError as exc:
                bad = rejected_documents(inputs, exc)
                if not bad:
                    raise
                for i, msg in bad.items():
                    refused[i] = ServerRejectedDocumentError(i, inputs.ids[i], f"{self.engine.describe()}: {msg}")
                inputs = inputs.without(bad)

    def token_states(self, prompts: Sequence[Sequence[int]]) -> list[np.ndarray]:
        """:meth:`EncodeStep.token_states` (queries: a rejection is the caller's error)."""
        return self.step.token_states(prompts)


def rejected_documents(inputs: EncoderInputs, exc: ServerRejectedError) -> dict[int, str]:
    """``{batch index: the server's message}`` of the documents whose inputs the server rejected."""
    bad: dict[int, str] = {}
    for msg, rejected in zip(exc.rejected.values(), exc.inputs):
        if isinstance(rejected, str):
            docs = [i for i, text in zip(inputs.native_docs, inputs.native_texts) if text == rejected]
        else:
            docs = [i for i, window in zip(inputs.window_docs, inputs.windows) if window == rejected]
        for i in docs:
            bad.setdefault(i, f"HTTP {exc.status}: {msg}")
    return bad
