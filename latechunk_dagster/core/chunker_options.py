"""The chunker's option rules: engine and window lengths, the engine path rule, the window settings check.

Plain functions over the host part (:class:`~latechunk_dagster.core.chunker_host.ChunkerHost`), which
calls them when it is built and on each call that overrides the engine path.
"""

from __future__ import annotations

import logging
from typing import Any

from latechunk_dagster.core.engine_traits import EngineTraits
from latechunk_dagster.core.errors import (
    HeadNotSupportedError,
    ModelNotSupportedError,
)
from latechunk_dagster.core.granularities import Granularities
from latechunk_dagster.core.head import Head
from latechunk_dagster.core.model_card import (
    ModelCard,
    position_limits,
)

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


def engine_path_rule(
    card: ModelCard,
    head: Head,
    prefix: str,
    document_prompt_tokens: int,
    requested: str,
    engine: EngineTraits,
    granularities: Granularities | None = None,
) -> str:
    """The one rule of which engine path serves a call: ``"native"``, ``"spans"`` or ``"token_states"``.

    ``engine``: the traits of the chunker's engine (:meth:`EngineTraits.of`: a started engine, its
    class before it starts, or the in-process vLLM before it starts, which always sums spans: the
    package ships the plugin, :mod:`latechunk_dagster.vllm_plugin`).

    ``"auto"`` is native when the engine has native late chunking and the model's Pooling does
    not leave the prompt out of the means (``include_prompt=false``: vLLM's native chunks
    average it in), else ``"spans"`` when the engine sums spans where the states are, else
    ``"token_states"``. The native path serves single-window ``FixedTokens`` documents; every
    other document of a native or spans call is served by the span path where the engine has
    it (:func:`~latechunk_dagster.core.preparing.prepare_batch`). ``"token_states"`` (every token
    state crosses to the host, which sums there) stays the reference, selectable by name. A
    non-linear projection can only be applied after the mean by the native path, and only to the
    chunks of a single ``FixedTokens`` granularity (``granularities``, when known: several
    granularities are never native).

    Raises:
        ModelNotSupportedError: ``"native"`` or ``"spans"`` requested and the engine or the
            model's Pooling cannot serve it.
        HeadNotSupportedError: a non-linear head on a path or strategy that cannot apply it after the mean.
    """
    what = engine.description
    if requested == "native":
        if document_prompt_tokens:
            raise ModelNotSupportedError(
                f"{card.path}: Pooling include_prompt=false leaves the document prompt {prefix!r} "
                f"({document_prompt_tokens} tokens) out of the means; vLLM's native late chunking "
                "averages them in, so only the token-state and span paths honour it"
            )
        if not engine.supports_native:
            raise ModelNotSupportedError(
                f"engine_path='native' but {what} has no native late chunking "
                "(it needs vLLM >= 0.33, LateChunkingParams)"
            )
    if requested == "spans" and not engine.supports_span_sums:
        raise ModelNotSupportedError(
            f"engine_path='spans' but {what} does not sum spans itself (a vLLM server needs the "
            "latechunk plugins: VLLM_PLUGINS=latechunk_span_sums,latechunk_spans)"
        )
    native = requested == "native" or (requested == "auto" and engine.supports_native and not document_prompt_tokens)
    native_strategy = granularities is None or granularities.native_strategy is not None
    if not head.linear_projection and not (native and native_strategy):
        raise HeadNotSupportedError(
            f"{card.path}: the head's projection {head.describe()} is non-linear, so it does not "
            "commute with the mean; only vLLM >= 0.33's native path with FixedTokens applies it after the mean"
        )
    if native:
        return "native"
    return "spans" if requested in ("auto", "spans") and engine.supports_span_sums else "token_states"


def check_window_settings(
    card: ModelCard,
    tokenizer: Any,
    prefix: str,
    window_length: int,
    window_overlap: int | None,
    resolved_overlap: int,
    allow_windows: bool,
) -> None:
    """Refuse window settings no long document could be planned with, naming the setting.

    A window holds ``window_length`` minus the model's special tokens and the prefix's tokens
    (counted on the prefix alone) of document tokens; ``resolved_overlap`` (``window_overlap``, or
    its default) must be an int in ``[0, that)``. Nothing is checked for the range when
    ``allow_windows`` is off (no document is windowed). A document whose own special/prefix tokens
    leave less room than that is refused alone when planned (``DocumentTooLongError``).

    Raises:
        ValueError: ``window_overlap`` is not an int >= 0 (a bool, a float), or it (or the
            default) is not below the document tokens of a window, or ``window_length`` leaves
            none.
    """
    option = window_overlap
    if option is not None and (type(option) is not int or option < 0):
        raise ValueError(f"window_overlap must be an int >= 0 (or None for the default), got {option!r}")
    if not allow_windows:
        return
    frame = len(tokenizer(prefix, add_special_tokens=True)["input_ids"])
    width = window_length - frame
    if width < 1:
        raise ValueError(
            f"{card.path}: window_length={window_length} leaves no room for document tokens "
            f"beside the {frame} special and prefix tokens of each window"
        )
    if resolved_overlap >= width:
        what = "window_overlap" if option is not None else "the default window_overlap (window_length // 8)"
        raise ValueError(
            f"{card.path}: {what}={resolved_overlap} must be below the {width} document tokens a window of "
            f"{window_length} holds beside {frame} special and prefix tokens"
        )


def embedding_width(card: ModelCard, head: Head) -> int:
    """Width of a chunk vector: the Matryoshka cut, else the last projection, else hidden size.

    Raises:
        ModelNotSupportedError: none of them is known (``config.json`` names no hidden size).
    """
    if head.dimensions is not None:
        return head.dimensions
    if head.dense:
        return head.dense[-1].out_features
    if card.hidden_size is None:
        raise ModelNotSupportedError(f"{card.path}: config.json names no hidden_size (or n_embd, d_model)")
    return card.hidden_size
