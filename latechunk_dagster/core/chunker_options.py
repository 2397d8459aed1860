"""The chunker's options and model checks: engine and window lengths, the engine path rule, window
settings, the settings its rows record (a part of :class:`~latechunk_dagster.core.chunker.LateChunker`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from latechunk_dagster.core.batches import _native_strategy
from latechunk_dagster.core.chunker_state import ChunkerState
from latechunk_dagster.core.chunking.base import ChunkingStrategy
from latechunk_dagster.core.engines.base import Engine
from latechunk_dagster.core.errors import (
    HeadNotSupportedError,
    ModelNotSupportedError,
)
from latechunk_dagster.core.model_card import (
    ModelCard,
    position_limits,
)
from latechunk_dagster.core.results import ChunkerSettings
from latechunk_dagster.core.windows import default_overlap

log = logging.getLogger("latechunk_dagster.core.chunker")


def engine_lengths(card: ModelCard, max_model_len: int | None, window_length: int | None) -> tuple[int, int]:
    """``(engine max_model_len, window length)`` in tokens for a model and the caller's settings.

    Default: the sentence-transformers ``max_seq_length`` capped at the model's exact limit
    (:attr:`PositionLimits.exact`); windows as long as the engine takes unless ``window_length`` is
    shorter. A NomicBert model with dynamic NTK scaling is always served at its
    ``max_trained_positions``: there vLLM's rotary base equals the model's own, whereas served
    below it vLLM's dynamic NTK formula goes negative and the states turn NaN (vLLM issue 52665),
    and served above it vLLM scales the base for every input (the model's own code only for inputs
    longer than that); a shorter ``max_model_len`` then becomes the window length.

    Raises:
        ModelNotSupportedError: ``max_model_len`` or ``window_length`` above the model's exact limit.
    """
    limits = card.limits or position_limits({})
    for name, value in (("max_model_len", max_model_len), ("window_length", window_length)):
        if value is not None and value > limits.exact:
            why = (
                f"with dynamic NTK scaling ({limits.dynamic_ntk}) the states of an input longer than "
                f"max_trained_positions={limits.trained} differ between vLLM and the model's own code"
                if limits.dynamic_ntk
                else "its position limit (config.json)"
            )
            raise ModelNotSupportedError(
                f"{card.path}: {name}={value} exceeds the model's {limits.exact} input tokens ({why}); "
                f"leave it unset: longer documents are encoded in windows of at most {limits.exact} tokens"
            )
    if max_model_len is not None and max_model_len < 1:
        raise ValueError(f"max_model_len must be positive, got {max_model_len}")
    engine_len = int(max_model_len or min(card.max_seq_length or limits.exact, limits.exact))
    window = min(window_length or engine_len, engine_len)
    if limits.dynamic_ntk and engine_len != limits.exact:
        log.warning(
            "%s: served at max_trained_positions=%d (dynamic NTK scaling %s), windows of %d tokens",
            card.path,
            limits.exact,
            limits.dynamic_ntk,
            window,
        )
        engine_len = limits.exact
    return engine_len, window


class OptionChecks(ChunkerState):
    """The options and model checks of :class:`~latechunk_dagster.core.chunker.LateChunker` (its first job)."""

    def _engine_path(
        self,
        requested: str,
        engine: Engine | type[Engine] | None,
        strategies: Mapping[str, ChunkingStrategy] | None = None,
    ) -> str:
        """The one rule of which engine path serves a call: ``"native"``, ``"spans"`` or ``"token_states"``.

        ``engine`` is the chunker's engine, its class before it starts (what the class supports), or
        ``None`` before the default in-process engine starts (then the installed vLLM decides; the
        in-process engine always sums spans: the package ships the plugin, :mod:`latechunk_dagster.vllm_plugin`).

        ``"auto"`` is native when the engine has native late chunking and the model's Pooling does
        not leave the prompt out of the means (``include_prompt=false``: vLLM's native chunks
        average it in), else ``"spans"`` when the engine sums spans where the states are, else
        ``"token_states"``. The native path serves single-window ``FixedTokens`` documents; every
        other document of a native or spans call is served by the span path where the engine has
        it (:meth:`prepare`). ``"token_states"`` (every token state crosses to the host, which
        sums there) stays the reference, selectable by name. A non-linear projection can only be
        applied after the mean by the native path, and only to the chunks of a single ``FixedTokens``
        granularity (``strategies``, when known: several granularities are never native).

        Raises:
            ModelNotSupportedError: ``"native"`` or ``"spans"`` requested and the engine or the
                model's Pooling cannot serve it.
            HeadNotSupportedError: a non-linear head on a path or strategy that cannot apply it after the mean.
        """
        if engine is None:
            from latechunk_dagster.core.engines.vllm_local import native_late_chunking_available

            supports_native, supports_spans = native_late_chunking_available(), True
        else:
            supports_native, supports_spans = engine.supports_native, engine.supports_span_sums
        if isinstance(engine, Engine):
            what = engine.describe()
        else:
            what = f"the {engine.name} engine" if engine is not None else "the installed vLLM"
        if requested == "native":
            if self.document_prompt_tokens:
                raise ModelNotSupportedError(
                    f"{self.card.path}: Pooling include_prompt=false leaves the document prompt {self.prefix!r} "
                    f"({self.document_prompt_tokens} tokens) out of the means; vLLM's native late chunking "
                    "averages them in, so only the token-state and span paths honour it"
                )
            if not supports_native:
                raise ModelNotSupportedError(
                    f"engine_path='native' but {what} has no native late chunking "
                    "(it needs vLLM >= 0.33, LateChunkingParams)"
                )
        if requested == "spans" and not supports_spans:
            raise ModelNotSupportedError(
                f"engine_path='spans' but {what} does not sum spans itself (a vLLM server needs the "
                "latechunk plugins: VLLM_PLUGINS=latechunk_span_sums,latechunk_spans)"
            )
        native = requested == "native" or (requested == "auto" and supports_native and not self.document_prompt_tokens)
        native_strategy = strategies is None or _native_strategy(strategies) is not None
        if not self.head.linear_projection and not (native and native_strategy):
            raise HeadNotSupportedError(
                f"{self.card.path}: the head's projection {self.head.describe()} is non-linear, so it does not "
                "commute with the mean; only vLLM >= 0.33's native path with FixedTokens applies it after the mean"
            )
        if native:
            return "native"
        return "spans" if requested in ("auto", "spans") and supports_spans else "token_states"

    @property
    def resolved_window_overlap(self) -> int:
        """Document tokens consecutive windows share, as the windows are planned and :attr:`settings`
        records it: :attr:`window_overlap`, or :func:`~latechunk_dagster.core.windows.default_overlap`
        of :attr:`window_length` when that is ``None``. Read when asked, so a window length changed
        after construction (a server's cap, :class:`~latechunk_dagster.core.remote.RemoteLateChunker`)
        changes the default with it. The one place the overlap is resolved."""
        return default_overlap(self.window_length) if self.window_overlap is None else self.window_overlap

    def check_windows(self) -> None:
        """Refuse window settings no long document could be planned with, naming the setting.

        A window holds ``window_length`` minus the model's special tokens and the prefix's tokens
        (counted on the prefix alone) of document tokens; :attr:`resolved_window_overlap` must be an
        int in ``[0, that)``. Nothing is checked for the range when ``allow_windows`` is off (no
        document is windowed). A document whose own special/prefix tokens leave less room than that
        is refused alone when planned (``DocumentTooLongError``).

        Raises:
            ValueError: ``window_overlap`` is not an int >= 0 (a bool, a float), or it (or the
                default) is not below the document tokens of a window, or ``window_length`` leaves
                none.
        """
        option = self.window_overlap
        if option is not None and (type(option) is not int or option < 0):
            raise ValueError(f"window_overlap must be an int >= 0 (or None for the default), got {option!r}")
        if not self.allow_windows:
            return
        frame = len(self.tokenizer(self.prefix, add_special_tokens=True)["input_ids"])
        width = self.window_length - frame
        if width < 1:
            raise ValueError(
                f"{self.card.path}: window_length={self.window_length} leaves no room for document tokens "
                f"beside the {frame} special and prefix tokens of each window"
            )
        overlap = self.resolved_window_overlap
        if overlap >= width:
            what = "window_overlap" if option is not None else "the default window_overlap (window_length // 8)"
            raise ValueError(
                f"{self.card.path}: {what}={overlap} must be below the {width} document tokens a window of "
                f"{self.window_length} holds beside {frame} special and prefix tokens"
            )

    @property
    def settings(self) -> ChunkerSettings:
        """This chunker's :class:`~latechunk_dagster.core.results.ChunkerSettings` (read when asked, so a
        changed window length shows); ``window_overlap`` is :attr:`resolved_window_overlap`, the number the
        windows are planned with, and ``dtype`` the one the engine resolved."""
        return ChunkerSettings(
            model_name=self.card.name,
            model_sha256=self.card.fingerprint,
            head=self.head.describe(),
            opt_ins=tuple(self.opt_ins),
            dtype=self.dtype,
            prefix=self.prefix,
            window_length=self.window_length,
            window_overlap=self.resolved_window_overlap,
            allow_windows=self.allow_windows,
            embedding_dim=self.embedding_dim,
            engine_version=self.vllm_version,
            engine=self.engine.name if self.engine is not None else "closed",
        )

    @property
    def embedding_dim(self) -> int:
        """Width of a chunk vector: the Matryoshka cut, else the last projection, else hidden size."""
        if self.head.dimensions is not None:
            return self.head.dimensions
        if self.head.dense:
            return self.head.dense[-1].out_features
        if self.card.hidden_size is None:
            raise ModelNotSupportedError(f"{self.card.path}: config.json names no hidden_size (or n_embd, d_model)")
        return self.card.hidden_size
