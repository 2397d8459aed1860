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

from latechunk_dagster.core.errors import EngineAnswerError
from latechunk_dagster.core.pooling import piece_sums


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
        supports_span_sums: True when :meth:`span_sums` is computed inside the engine (the span
            plugin, :mod:`latechunk_dagster.vllm_plugin`): only span sums leave it, not token states.
        startup_seconds: time the engine took to start.
    """

    name: str = "engine"
    version: str = "unknown"
    supports_native: bool = False
    supports_span_sums: bool = False
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

    def span_sums(self, prompts: Sequence[Sequence[int]], pieces: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Sums of row ranges of each prompt's states: the span path (contract section 3's mean,
        summed where the states are; the host divides and applies the head).

        Args:
            prompts: token ids per encoder input, as for :meth:`token_states`.
            pieces: per prompt, int ``[n_k, 2+]`` whose first two columns are half-open row
                ranges, sorted, non-overlapping, non-empty, inside the prompt
                (:func:`~latechunk_dagster.core.pooling.window_pieces`).

        Returns:
            float32 ``[n_k, 2 * dim]`` per prompt: :func:`~latechunk_dagster.core.pooling.sum_pairs`
            of the float64 sums of the same rows :meth:`token_states` returns. This default
            computes them here from :meth:`token_states` (an engine without the span plugin).

        Raises:
            ValueError: ``pieces`` break the rules above (:func:`check_pieces`), before the engine is asked.
            EngineAnswerError: the engine answered with another number or shape of sums.
        """
        check_pieces(prompts, pieces)
        return [piece_sums(states, p) for states, p in zip(self.token_states(prompts), pieces)]

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


def check_pieces(prompts: Sequence[Sequence[int]], pieces: Sequence[np.ndarray]) -> None:
    """Refuse, before an engine sums them, pieces that are not row ranges of their prompt.

    The rule of :meth:`Engine.span_sums`: per prompt an int ``[n, 2+]`` array whose first two columns
    are half-open row ranges, sorted, non-overlapping, non-empty and inside the prompt (``n`` may be
    0). The chunker only makes such pieces (:func:`~latechunk_dagster.core.pooling.window_pieces` of
    spans checked per document); without this check the in-process plugin answers a broken window
    with no rows (read as a wrong answer of the engine), a server the same, and the host's sums of
    rows past the end would silently be shorter.

    Raises:
        ValueError: naming the first bad prompt (its index and length) and its ranges.
    """
    if len(pieces) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but {len(pieces)} piece arrays")
    for k, (prompt, p) in enumerate(zip(prompts, pieces)):
        p = np.asarray(p)
        if p.ndim != 2 or p.shape[1] < 2 or (p.size and not np.issubdtype(p.dtype, np.integer)):
            raise ValueError(f"prompt {k}: pieces must be an int [n, 2+] array, got {p.dtype} {p.shape}")
        a, b = p[:, 0], p[:, 1]
        if (a < 0).any() or (b > len(prompt)).any() or (b <= a).any() or (a[1:] < b[:-1]).any():
            raise ValueError(
                f"prompt {k} ({len(prompt)} rows): pieces must be sorted, non-overlapping, non-empty row "
                f"ranges inside it, got {p[:, :2].tolist()[:8]}"
            )


def pair_rows(answer: np.ndarray, pieces: np.ndarray, engine: str) -> np.ndarray:
    """One window's span-sum answer checked against what was asked: float32 ``[n_pieces, 2 * dim]``.

    Args:
        answer: float32 ``[n, 2 * dim + 1]`` (hi, lo, count), :func:`~latechunk_dagster.vllm_plugin.span_sum_pairs`.
        pieces: the window's pieces (row ranges first). engine: names the engine in the error.

    Raises:
        EngineAnswerError: another number of sums, an odd width, or counts other than the pieces' lengths.
    """
    lengths = pieces[:, 1] - pieces[:, 0]
    if answer.ndim != 2 or answer.shape[0] != len(pieces) or answer.shape[1] % 2 != 1:
        raise EngineAnswerError(f"{engine} answered {len(pieces)} span sums with shape {tuple(answer.shape)}")
    if not np.array_equal(answer[:, -1], lengths):
        got, want = answer[:, -1].tolist()[:5], lengths.tolist()[:5]
        raise EngineAnswerError(f"{engine} answered span sums over {got} rows, not {want}")
    return np.ascontiguousarray(answer[:, :-1], dtype=np.float32)
