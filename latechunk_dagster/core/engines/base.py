"""The engine interface: what turns token ids into contextual token states.

:class:`~latechunk_dagster.core.chunker.LateChunker` owns the one tokenization pass, the
spans, the windows, the mean and the head; an :class:`Engine` only runs the encoder. The
in-process vLLM engine (:mod:`~latechunk_dagster.core.engines.vllm_local`) is the first
implementation; another engine (a vLLM server over HTTP, a test double) plugs in by
subclassing :class:`Engine` without touching strategies, windows, pooling or the sink.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class NativeChunks:
    """Chunk means computed by the engine itself (vLLM >= 0.33 ``LateChunkingParams``).

    Attributes:
        token_ids: the ids the engine tokenized the text into (checked against ours, contract section 1).
        token_ranges: half-open ``(start, end)`` token range of each chunk, in order.
        vectors: float32 ``[n_chunks, dim]``: the head already applied after the mean.
    """

    token_ids: list[int]
    token_ranges: list[tuple[int, int]]
    vectors: np.ndarray


class Engine(abc.ABC):
    """An encoder that returns per-token states (and, optionally, native chunk means).

    Attributes:
        name: short engine name recorded in lineage (``"vllm"``, ``"vllm-server"``).
        version: the engine's version string (vLLM's ``__version__``), recorded in lineage.
        supports_native: True when :meth:`native_chunks` is available (vLLM >= 0.33).
        startup_seconds: time the engine took to start.
    """

    name: str = "engine"
    version: str = "unknown"
    supports_native: bool = False
    startup_seconds: float = 0.0

    @abc.abstractmethod
    def token_states(self, prompts: Sequence[Sequence[int]]) -> list[np.ndarray]:
        """Final hidden states of each prompt.

        Args:
            prompts: token ids per encoder input (special tokens included; each no longer
                than the engine's ``max_model_len``).

        Returns:
            One float32 array per prompt, shape ``[len(prompt), dim]``: the model's token
            states with any *linear* projection of the head applied per token (it commutes
            with the mean, contract section 3) and no normalization. In input order.
        """

    def native_chunks(
        self, texts: Sequence[str], chunk_size: int, *, dimensions: int | None, normalize: bool
    ) -> list[NativeChunks]:
        """Fixed-size chunk means computed by the engine from plain text (prefix already prepended).

        Raises:
            NotImplementedError: the engine has no native late chunking (``supports_native`` False).
        """
        raise NotImplementedError(f"{type(self).__name__} has no native late chunking")

    def close(self) -> None:  # noqa: B027 - engines without resources need not override it
        """Release the engine (processes, memory, connections). Safe to call twice."""

    def describe(self) -> str:
        """``name version`` for logs and lineage."""
        return f"{self.name} {self.version}"
