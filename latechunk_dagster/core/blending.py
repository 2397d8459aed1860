"""Blended chunk vectors (issue 48): each chunk's late vector mixed with its chunk-alone ("naive") vector.

A chunk's blended vector, for the weight ``a`` in ``[0, 1]`` (:attr:`ChunkerHost.blend
<latechunk_dagster.core.chunker_host.ChunkerHost.blend>`, ``LateChunker(blend=a)``)::

    late_unit  = unit( head( mean_fp32( H_document[start:end] ) ) )       # contract section 3
    naive_unit = unit( head( mean_fp32( H_alone(prefix + chunk text) ) ) ) # the chunk encoded alone
    vector     = unit( a * late_unit + (1 - a) * naive_unit )              # float64, stored float32

``H_alone`` is the chunk's text encoded alone, with the model's document prompt and special tokens,
its mean over every token (the prompt left out where the model's Pooling has ``include_prompt=false``)
and the same head after the mean: the model's ordinary sequence embedding of the chunk text, which the
evaluation calls *naive* (:func:`~latechunk_dagster.evaluation.retrieval.naive_vectors` computes it
with the same rule: one span over the whole text, :data:`WHOLE`).

``a = 1`` is late chunking, bit for bit (no second pass is made); ``a = 0`` is plain chunking.

**One pass over the documents plus one batched pass over their chunks.** :func:`blend_pass` prepares
the chunks' texts (each granularity's chunks; a text repeated within a document once) as a batch of
their own with one whole-text span each; :func:`blend_inputs` appends their encoder inputs to the
documents' in the same engine call; :func:`blend_results` pools them (the same pooling step, on the
path of the documents: span sums where the engine has them, so one float32 sum pair per chunk text
crosses the engine boundary, not its token states) and mixes the vectors.

A chunk with no text (special tokens only), or whose text alone could not be encoded (a chunk text
that is refused as a document would be: e.g. no token of its own), keeps its late vector (unit norm);
the rule is the same in every engine path.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from latechunk_dagster.core.batches import EncodedBatch, EncoderInputs, PreparedBatch
from latechunk_dagster.core.chunk_ranges import chunks_from_spans
from latechunk_dagster.core.chunking import FixedTokens
from latechunk_dagster.core.errors import DocumentError
from latechunk_dagster.core.results import ChunkedDocument

#: A chunk size no chunk text reaches: one span over the whole text (the naive embedding).
WHOLE = 1 << 30

#: The weight of the late vector when none is given: pure late chunking (today's vectors).
LATE = 1.0

#: The weight the embedded default (``make demo``, :mod:`latechunk_dagster.app.definitions`) writes with,
#: searched small-to-big: measured by ``bench/blend_eval.py`` (bench/README.md, 2026-12-07) as the
#: configuration that is not below naive chunks on the demo's lookup queries and keeps at least 85% of
#: late chunking's gain on its context-dependent queries. A short-context model and lookup queries
#: favour the blend; long-context models and context-dependent queries favour late (docs/querying.md).
DEFAULT_BLEND = 0.5


def check_blend(value: Any) -> float:
    """``value`` as a blend weight: a real number in ``[0, 1]`` (``1``: late chunking, ``0``: naive).

    Raises:
        ValueError: a bool, a non-number, a NaN or a number outside ``[0, 1]`` (naming the setting).
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"blend must be a number in [0, 1] (1: late chunking, 0: chunks alone), got {value!r}")
    if not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"blend must be in [0, 1] (1: late chunking, 0: chunks alone), got {value!r}")
    return float(value)


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """Each row of ``vectors`` divided by its L2 norm, float64 ``[n, dim]`` (a zero row stays zero)."""
    wide = np.asarray(vectors, dtype=np.float64)
    return wide / np.maximum(np.linalg.norm(wide, axis=1, keepdims=True), 1e-300)


def blend_vectors(late: np.ndarray, naive: np.ndarray, weight: float) -> np.ndarray:
    """The one formula: ``unit(a * unit(late) + (1 - a) * unit(naive))`` per row, in float64.

    Args:
        late, naive: float ``[n, dim]``, the late and the chunk-alone vectors of the same chunks.
        weight: ``a`` in ``[0, 1]`` (:func:`check_blend`).

    Returns:
        float32 ``[n, dim]``, unit L2 norm per row. A row whose mix is zero (the two vectors
        opposite, ``a = 0.5``) is its late unit vector.
    """
    lu, nu = unit_rows(late), unit_rows(naive)
    mixed = weight * lu + (1.0 - weight) * nu
    norms = np.linalg.norm(mixed, axis=1, keepdims=True)
    out = np.where(norms > 1e-12, mixed / np.maximum(norms, 1e-300), lu)
    return np.ascontiguousarray(out, dtype=np.float32)


@dataclass
class BlendPass:
    """The chunks-alone pass of a prepared batch.

    Attributes:
        weight: ``a``, the late vector's weight.
        batch: the chunk texts as a prepared batch of their own (one whole-text span each).
        owners: per text of ``batch``, the batch index of the document it is a chunk of.
        slots: per document (batch index), per granularity, per chunk: the index of its text in
            ``batch`` (``None``: the chunk has no text and keeps its late vector).
    """

    weight: float
    batch: PreparedBatch
    owners: list[int]
    slots: dict[int, dict[str, list[int | None]]]

    def refuse(self, docs: Mapping[int, Any]) -> None:
        """Drop the chunk texts of documents the engine refused (their inputs were not encoded)."""
        self.batch.state_jobs = [j for j in self.batch.state_jobs if self.owners[j[0]] not in docs]

    @property
    def windows(self) -> int:
        """Encoder inputs of the chunk texts still in the pass."""
        return sum(len(j[3].windows) for j in self.batch.state_jobs)


def blend_pass(host: Any, prepared: PreparedBatch) -> BlendPass | None:
    """The chunks-alone pass of ``prepared`` for ``host.blend`` (``None`` at ``blend == 1``: late alone).

    Args:
        host: the chunker's host part (:class:`~latechunk_dagster.core.chunker_host.ChunkerHost`).
        prepared: the documents' batch (:func:`~latechunk_dagster.core.preparing.prepare_batch`).

    Returns:
        The pass, its texts prepared on the documents' path (span sums where the documents' windows
        are summed in the engine, else token states; never native).
    """
    weight = float(getattr(host, "blend", LATE))
    if weight == LATE:
        return None
    from latechunk_dagster.core.preparing import prepare_batch  # preparing imports this module's callers

    texts: list[str] = []
    owners: list[int] = []
    names: list[str] = []
    slots: dict[int, dict[str, list[int | None]]] = {}
    for i, tokens, doc, _plan in [*prepared.native_jobs, *prepared.state_jobs]:
        seen: dict[str, int] = {}
        slots[i] = {}
        for g, spans in doc.spans.items():
            row: list[int | None] = []
            for chunk in chunks_from_spans(prepared.texts[i], tokens, spans):
                if not chunk.text or not chunk.text.strip():
                    row.append(None)
                    continue
                if chunk.text not in seen:
                    seen[chunk.text] = len(texts)
                    texts.append(chunk.text)
                    owners.append(i)
                    names.append(f"{prepared.ids[i]} chunk {chunk.index}" + (f" of {g}" if g else ""))
                row.append(seen[chunk.text])
            slots[i][g] = row
    path = "token_states" if prepared.pieces is None else "spans"
    naive_host = replace(host, blend=LATE)
    batch = prepare_batch(naive_host, texts, FixedTokens(chunk_size=WHOLE), doc_ids=names, engine_path=path)
    return BlendPass(weight, batch, owners, slots)


def blend_inputs(inputs: EncoderInputs, prepared: PreparedBatch) -> EncoderInputs:
    """``inputs`` with the chunk texts' inputs of ``prepared.blend`` appended (one engine call for both).

    Each chunk text's window counts as a window of its document (``window_docs``), so an engine that
    refuses it refuses that document (:mod:`~latechunk_dagster.core.server_refusals`).
    """
    blend: BlendPass | None = getattr(prepared, "blend", None)
    if blend is None:
        return inputs
    jobs = blend.batch.state_jobs
    windows = [w for j in jobs for w in j[3].windows]
    docs = [blend.owners[j[0]] for j in jobs for _ in j[3].windows]
    pieces = None
    if inputs.pieces is not None:
        pieces = [*inputs.pieces, *(p for j in jobs for p in (blend.batch.pieces or {})[j[0]])]
    return replace(inputs, windows=[*inputs.windows, *windows], window_docs=[*inputs.window_docs, *docs], pieces=pieces)


def blend_results(host: Any, encoded: EncodedBatch, results: list[Any]) -> list[Any]:
    """The documents' late results with every chunk vector blended (:func:`blend_vectors`).

    Args:
        host: the host part that pooled ``results``; encoded: the batch (its rows hold the documents'
            windows first, then the chunk texts' of ``encoded.prepared.blend``); results: the pooled
            documents (``ChunkedDocument``, ``{name: ChunkedDocument}`` or a ``DocumentError``).

    Returns:
        ``results`` with their vectors replaced (unit norm, float32); errors as they were.
    """
    blend: BlendPass | None = getattr(encoded.prepared, "blend", None)
    if blend is None:
        return results
    from latechunk_dagster.core.finishing import pool_results

    first = len(encoded.prepared.windows)
    naive_batch = EncodedBatch(blend.batch, encoded.rows[first : first + blend.windows])
    naive = pool_results(replace(host, blend=LATE), naive_batch, errors="return")
    out = list(results)
    for i, per in blend.slots.items():
        result = out[i]
        if isinstance(result, DocumentError) or result is None:
            continue
        docs = {result.granularity: result} if isinstance(result, ChunkedDocument) else dict(result)
        mixed = {g: _blend_document(d, per[g], naive, blend.weight) for g, d in docs.items()}
        out[i] = mixed[result.granularity] if isinstance(result, ChunkedDocument) else mixed
    return out


def _blend_document(
    doc: ChunkedDocument, slots: Sequence[int | None], naive: Sequence[Any], weight: float
) -> ChunkedDocument:
    """One granularity of one document blended; a chunk without a chunk-alone vector keeps its late one."""
    late = doc.vectors
    alone = unit_rows(late)
    for k, s in enumerate(slots):
        if s is not None and isinstance(naive[s], ChunkedDocument):
            alone[k] = naive[s].vectors[0]
    return replace(doc, vectors=blend_vectors(late, alone, weight))
