"""The blended rankings an evaluation scores beside late and naive (issue 48), from a table's stored vectors.

A chunk table stores one vector per chunk: the late vector (``blend = 1``) or a blend
``unit(a0 * late_unit + (1 - a0) * naive_unit)`` (:mod:`latechunk_dagster.core.blending`; its weight
``a0`` is in the rows' ``strategy_params``). The evaluation embeds each chunk's text alone anyway (the
naive vectors), so every other weight is computed from those two without encoding a document again:

* the late unit vector of a blended row is solved from ``stored`` and ``naive`` (:func:`late_from_stored`):
  with ``b = stored``, ``n = naive_unit`` and ``c = |a0 * late_unit + (1 - a0) * n|``,
  ``a0 * late_unit = c * b - (1 - a0) * n`` and ``|late_unit| = 1`` give
  ``c = (1 - a0)(b . n) + sqrt((1 - a0)^2 (b . n)^2 + 2 a0 - 1)``, the larger root, which is the one
  whenever ``cos(late, naive) >= -a0 / (1 - a0)`` (always for ``a0 >= 0.5``; for ``a0 = 0.25`` a cosine
  above -1/3, far below the 0.5-0.95 of a chunk's two vectors). ``a0 = 0`` stores no late vector: the
  late and blended rows are then left out, and the report says so.
* each weight of :data:`BLEND_WEIGHTS` (and ``a0``) is :func:`~latechunk_dagster.core.blending.blend_vectors`
  of the two.

The stored vectors were written by the table's engine, the naive ones by the evaluation's (the light
transformers engine for ``latechunk eval``): they agree to ~1e-6, which the solution scales by ``1/a0``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from latechunk_dagster.core.blending import blend_vectors, unit_rows

#: The weights every evaluation scores (issue 48): the late vector's share of each chunk vector.
BLEND_WEIGHTS: tuple[float, ...] = (0.25, 0.5, 0.75)


def blend_kind(weight: float) -> str:
    """The method kind of a weight: ``0.5`` -> ``"blend50"``, ``0.25`` -> ``"blend25"`` (percent, rounded)."""
    return f"blend{round(100 * weight)}"


def weight_of(kind: str) -> float | None:
    """The weight of a method kind (``"blend50"`` -> 0.5, ``"late"`` -> 1.0, ``"naive"`` -> 0.0), else ``None``."""
    if kind.startswith("blend") and kind[5:].isdigit():
        return int(kind[5:]) / 100
    return {"late": 1.0, "naive": 0.0}.get(kind)


def table_blend(rows: pa.Table) -> float:
    """The blend weight the rows' vectors were written with (``strategy_params``' ``blend``; 1.0 without it).

    Raises:
        ValueError: rows written with several weights (a table mixing generations: evaluate one).
    """
    if "strategy_params" not in rows.column_names or rows.num_rows == 0:
        return 1.0
    weights = {float(json.loads(p).get("blend", 1.0)) for p in set(rows.column("strategy_params").to_pylist())}
    if len(weights) > 1:
        raise ValueError(f"the chunk rows were written with several blend weights {sorted(weights)}: evaluate one")
    return weights.pop()


def late_from_stored(stored: np.ndarray, naive: np.ndarray, weight: float) -> np.ndarray:
    """The late unit vectors of rows stored as blends of ``weight`` (module docstring), float64 ``[n, dim]``.

    Args:
        stored: float ``[n, dim]`` the table's vectors; naive: float ``[n, dim]`` the chunks alone.
        weight: ``a0`` in ``(0, 1]``; at 1 the stored vectors are the late ones (unit rows returned).

    Raises:
        ValueError: ``weight`` 0 (nothing of the late vector is stored) or outside [0, 1].
    """
    if not 0.0 < weight <= 1.0:
        raise ValueError(f"late vectors cannot be solved from vectors stored with blend={weight}")
    b = unit_rows(stored)
    if weight == 1.0:
        return b
    n = unit_rows(naive)
    rest = 1.0 - weight
    bn = np.einsum("ij,ij->i", b, n)[:, None]
    c = rest * bn + np.sqrt(np.maximum(rest * rest * bn * bn + 2.0 * weight - 1.0, 0.0))
    return unit_rows((c * b - rest * n) / weight)


def ranked_vectors(
    stored: np.ndarray, naive: np.ndarray, weight: float, weights: Sequence[float] = BLEND_WEIGHTS
) -> dict[str, np.ndarray]:
    """The vectors each method ranks with: ``late``, ``naive`` and ``blend<NN>`` of every weight in
    ``weights`` and the table's own ``weight`` (float32 ``[n, dim]`` each). ``late`` and the blends are
    absent where ``weight`` is 0 (nothing of the late vector is stored)."""
    out: dict[str, np.ndarray] = {}
    if weight > 0.0:
        late = late_from_stored(stored, naive, weight)
        out["late"] = np.asarray(stored, dtype=np.float32) if weight == 1.0 else late.astype(np.float32)
        for a in sorted({*weights, weight} - {0.0, 1.0}):
            out[blend_kind(a)] = blend_vectors(late, naive, a)
    out["naive"] = np.asarray(naive, dtype=np.float32)
    return out
