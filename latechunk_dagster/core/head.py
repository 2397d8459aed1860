"""Where the head happens: what the model applies after its pooling step (contract section 3).

The head is read from the model directory (sentence-transformers ``modules.json``:
``Dense`` projections, ``Normalize``), never hard-coded; see
:func:`latechunk_dagster.core.model_card.read_model_card`. Order of operations, as in
sentence-transformers and vLLM's ``TokenEmbeddingPoolerHead``: projection, then
the Matryoshka dimension cut, then L2 normalization.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class DenseLayer:
    """One sentence-transformers ``Dense`` module.

    Attributes:
        path: module directory, relative to the model directory.
        in_features, out_features: weight shape is ``[out_features, in_features]``.
        activation: the module's ``activation_function`` (e.g. ``torch.nn.modules.linear.Identity``).
    """

    path: str
    in_features: int
    out_features: int
    activation: str

    @property
    def linear(self) -> bool:
        """True when the layer is affine (identity activation), so it commutes with a mean."""
        return self.activation.rsplit(".", 1)[-1] in ("Identity", "")


@dataclass(frozen=True)
class Head:
    """The model's embedding head.

    Attributes:
        dense: projections applied to the pooled state, in order (may be empty).
        dimensions: Matryoshka cut (keep the first ``dimensions`` values), or ``None``.
        normalize: whether the head ends with L2 normalization.
    """

    dense: tuple[DenseLayer, ...] = ()
    dimensions: int | None = None
    normalize: bool = True

    @property
    def linear_projection(self) -> bool:
        """True when every projection is affine (it may then run per token before the mean)."""
        return all(d.linear for d in self.dense)

    def describe(self) -> str:
        parts = [f"dense({d.in_features}->{d.out_features},{d.activation.rsplit('.', 1)[-1]})" for d in self.dense]
        if self.dimensions is not None:
            parts.append(f"cut({self.dimensions})")
        if self.normalize:
            parts.append("l2")
        return "+".join(parts) or "identity"


def apply_head_after_projection(means: np.ndarray, head: Head) -> np.ndarray:
    """Apply the non-commuting rest of the head to span means: dimension cut, then L2 norm.

    Args:
        means: span means of (already projected) token rows, float32 ``[n_chunks, dim]``.
        head: the model's head; its projection has been applied per token by vLLM
            (legal only because it is affine, see :attr:`Head.linear_projection`).

    Returns:
        float32 ``[n_chunks, dimensions or dim]``; unit L2 norm per row when ``head.normalize``.
        The norm is computed in float64; a zero row stays zero (no division by zero).
    """
    out = means if head.dimensions is None else means[:, : head.dimensions]
    if head.normalize:
        wide = out.astype(np.float64)
        norms = np.linalg.norm(wide, axis=1, keepdims=True)
        out = wide / np.maximum(norms, 1e-12)
    return np.ascontiguousarray(out, dtype=np.float32)


def prompt_length(tokenizer: Any, prompt: str) -> int:
    """Tokens that a Pooling module with ``include_prompt=false`` leaves out of the mean.

    sentence-transformers (``Transformer._get_prompt_length``, v6.2) tokenizes the prompt alone
    with special tokens and drops a trailing special token: for BERT, ``[CLS]`` plus the prompt's
    own tokens. Those first positions of the input are masked out of the pooling. ``0`` for an
    empty prompt (sentence-transformers then passes no prompt length).
    """
    if not prompt:
        return 0
    ids = list(tokenizer(prompt, add_special_tokens=True)["input_ids"])
    if ids and ids[-1] in set(tokenizer.all_special_ids):
        ids = ids[:-1]
    return len(ids)
