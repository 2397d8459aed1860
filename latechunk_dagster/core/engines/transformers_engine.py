"""The light engine: the model's own transformers class in float32, no vLLM.

It returns the token states the vLLM engine returns for the same token ids (contract section 3):
the encoder's final hidden states, in float32, with the model's *linear* sentence-transformers
``Dense`` projections applied per token as vLLM's ``token_embed`` pooler applies them, and no
normalization. Everything after the states (spans, windows, the float64 mean, the rest of the head)
is :class:`~latechunk_dagster.core.chunker.LateChunker`'s code, the same as for vLLM.

What it is for: embedding queries (``latechunk search``/``eval``, :func:`~latechunk_dagster.sink.
search.search` and the client embedders load it by default; it starts in a second or two where the
vLLM engine takes tens of seconds), machines vLLM does not run on (macOS, Windows), and models vLLM
does not serve. It needs ``torch`` and ``transformers`` only. ``bench/query_engine.py`` measures its
start-up, memory and documents per second against vLLM's (``bench/README.md``).

The model is loaded with ``AutoModel.from_pretrained`` (with ``trust_remote_code`` only when the
caller opted in: then the class the model's ``auto_map`` names, e.g. NomicBert's). Inputs are sorted
by length and sent in padded batches with an attention mask (padding is masked out of attention,
so a token's state does not depend on its batch).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from latechunk_dagster.core.engines.base import Engine
from latechunk_dagster.core.errors import HeadNotSupportedError, ModelNotSupportedError
from latechunk_dagster.core.head import DenseLayer
from latechunk_dagster.core.model_files import load_error

log = logging.getLogger(__name__)

#: Padded tokens (batch size x longest input) per forward pass: ~25 MB of float32 states for a
#: 384-wide model. 4,096 to 65,536 measured alike on 2 shared CPU cores (within their noise).
DEFAULT_BATCH_TOKENS = 16_384

#: Weight files of a sentence-transformers ``Dense`` module, and the state-dict keys of its weight,
#: in the order vLLM's ST projector loader tries them (``vllm.model_executor.models.adapters``).
_DENSE_FILES = ("model.safetensors", "pytorch_model.bin")
_DENSE_WEIGHT_KEYS = ("weight", "linear.weight", "dense.weight")


def load_dense(model: str | os.PathLike[str], layer: DenseLayer) -> tuple[Any, Any]:
    """One ``Dense`` module's float32 weight ``[out, in]`` and bias ``[out]`` (``None`` without one).

    Raises:
        HeadNotSupportedError: a non-linear activation (it does not commute with the mean, so it
            cannot be applied per token).
        ModelNotSupportedError: no weight file, no weight under a known key, or a weight of another
            shape than the module's config says (naming the module's directory).
    """
    import torch

    if not layer.linear:
        raise HeadNotSupportedError(
            f"{model}: Dense module {layer.path!r} has the non-linear activation {layer.activation}; "
            "per-token states can only carry a linear projection"
        )
    folder = Path(model) / layer.path
    for name in _DENSE_FILES:
        path = folder / name
        if not path.is_file():
            continue
        if name.endswith(".safetensors"):
            from safetensors.torch import load_file

            state = load_file(str(path))
        else:
            state = torch.load(str(path), map_location="cpu", weights_only=True)
        key = next((k for k in _DENSE_WEIGHT_KEYS if k in state), None)
        if key is None:
            keys = list(_DENSE_WEIGHT_KEYS)
            raise ModelNotSupportedError(f"{path}: no Dense weight under the keys {keys} (it has {sorted(state)})")
        weight = state[key].to(torch.float32)
        if tuple(weight.shape) != (layer.out_features, layer.in_features):
            raise ModelNotSupportedError(
                f"{path}: Dense weight of shape {tuple(weight.shape)}, its config says "
                f"({layer.out_features}, {layer.in_features})"
            )
        bias = state.get(key.replace("weight", "bias"))
        return weight, None if bias is None else bias.to(torch.float32)
    raise ModelNotSupportedError(f"{folder}: Dense module without weights (looked for {', '.join(_DENSE_FILES)})")


class TransformersEngine(Engine):
    """The model's transformers class in this process, in float32.

    Args:
        model: model directory (weights included).
        max_model_len: longest encoder input in tokens (a longer one is refused, as vLLM refuses it).
        dense: the model's sentence-transformers ``Dense`` modules (:attr:`ModelCard.head
            <latechunk_dagster.core.model_card.ModelCard.head>`), applied per token in order; each
            must be linear.
        trust_remote_code: load the class the model's ``auto_map`` names (the caller's explicit
            opt-in, see ``LateChunker``).
        device: torch device; default ``"cuda"`` where torch sees a GPU, else ``"cpu"`` (``"mps"``
            on an Apple GPU is the caller's choice).
        batch_tokens: padded tokens per forward pass (default :data:`DEFAULT_BATCH_TOKENS`).

    Attributes:
        dtype: ``"float32"``, the dtype the states are computed in.

    Raises:
        ImportError: torch is not installed (naming what to install).
        ModelNotSupportedError: no weights in the directory, or transformers cannot load the model
            (its reason, with the model named); a Dense module that cannot be read.
        HeadNotSupportedError: a non-linear Dense module.
        ValueError: ``batch_tokens`` or ``max_model_len`` is not an int >= 1.
    """

    name = "transformers"
    dtype = "float32"

    def __init__(
        self,
        model: str | os.PathLike[str],
        *,
        max_model_len: int,
        dense: Sequence[DenseLayer] = (),
        trust_remote_code: bool = False,
        device: str | None = None,
        batch_tokens: int = DEFAULT_BATCH_TOKENS,
    ) -> None:
        try:
            import torch

            from latechunk_dagster.core.hf_imports import transformers
        except ImportError as exc:
            raise ImportError(f"engine='transformers' needs torch and transformers: pip install torch ({exc})") from exc
        from latechunk_dagster.core.engines.vllm_local import check_weights

        for setting, value in (("max_model_len", max_model_len), ("batch_tokens", batch_tokens)):
            if type(value) is not int or value < 1:
                raise ValueError(f"{setting} must be an int >= 1, got {value!r}")
        t0 = time.perf_counter()
        self.version = transformers.__version__
        self.max_model_len = max_model_len
        self.batch_tokens = batch_tokens
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        check_weights(model)
        self.projections = [load_dense(model, layer) for layer in dense]
        # transformers 5 names the argument dtype; 4.x torch_dtype
        as_float32 = {"dtype" if int(self.version.split(".")[0]) >= 5 else "torch_dtype": torch.float32}
        # no "Loading weights" bar, and no load report of heads AutoModel adds unused (BERT's pooler)
        tlog = transformers.utils.logging
        bar, verbosity = tlog.is_progress_bar_enabled(), tlog.get_verbosity()
        tlog.disable_progress_bar()
        tlog.set_verbosity_error()
        try:
            self.model: Any = (
                transformers.AutoModel.from_pretrained(str(model), trust_remote_code=trust_remote_code, **as_float32)
                .to(self.device)
                .eval()
            )
        except Exception as exc:  # any library's failure (safetensors' SafetensorError too): the model's, one line
            raise load_error(model, f"transformers {self.version}", exc) from exc
        finally:
            tlog.set_verbosity(verbosity)
            if bar:
                tlog.enable_progress_bar()
        self.pad_id = int(getattr(self.model.config, "pad_token_id", None) or 0)
        self.projections = [(w.to(self.device), None if b is None else b.to(self.device)) for w, b in self.projections]
        self.torch_version = torch.__version__
        self.startup_seconds = time.perf_counter() - t0
        log.info("transformers %s engine for %s started in %.1f s", self.version, model, self.startup_seconds)

    def _live(self) -> Any:
        if self.model is None:
            raise RuntimeError("LateChunker is closed")
        return self.model

    def token_states(self, prompts: Sequence[Sequence[int]]) -> list[np.ndarray]:
        """:meth:`Engine.token_states`: float32 ``[len(prompt), dim]`` per prompt, in input order.

        Raises:
            ValueError: a prompt is empty or longer than ``max_model_len`` (naming its index and length).
        """
        import torch

        model = self._live()
        for i, p in enumerate(prompts):
            if not 0 < len(p) <= self.max_model_len:
                raise ValueError(f"encoder input {i} has {len(p)} tokens; the engine takes 1 to {self.max_model_len}")
        out: list[np.ndarray | None] = [None] * len(prompts)
        order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
        k = 0
        while k < len(order):
            longest = len(prompts[order[k]])  # the batch's first input is its longest (sorted)
            batch = order[k : k + max(1, self.batch_tokens // longest)]
            k += len(batch)
            ids = torch.full((len(batch), longest), self.pad_id, dtype=torch.long)
            mask = torch.zeros((len(batch), longest), dtype=torch.long)
            for row, i in enumerate(batch):
                ids[row, : len(prompts[i])] = torch.tensor(list(prompts[i]), dtype=torch.long)
                mask[row, : len(prompts[i])] = 1
            with torch.inference_mode():
                states = model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device))[0]
                for weight, bias in self.projections:  # shape: [batch, longest, out_features]
                    states = torch.nn.functional.linear(states, weight, bias)
                states = states.to(device="cpu", dtype=torch.float32)
            for row, i in enumerate(batch):
                out[i] = np.ascontiguousarray(states[row, : len(prompts[i])].numpy())
        return out  # type: ignore[return-value]  # every index filled above

    def close(self) -> None:
        self.model = None
        self.projections = []

    def describe(self) -> str:
        """``transformers <version>`` and the torch version and device the states are computed with."""
        return f"{self.name} {self.version} (torch {self.torch_version}, float32, {self.device.type})"
