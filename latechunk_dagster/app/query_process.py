"""``latechunk search``'s query, embedded in a process of its own while the table is opened.

A search from a fresh process spends most of its time importing: LanceDB (~1.2 s on 2 cores) for the
table, torch and transformers (~4 s) for the query's model (``bench/query_engine.py`` prints the
split). The two do not depend on each other until the vector is searched, so the command starts this
module as a child process first (:class:`QueryProcess`): the child imports torch and transformers,
loads the model on the light transformers engine
(:func:`~latechunk_dagster.core.chunker.query_chunker`, one torch thread) and embeds the query,
while the command's own process imports LanceDB, opens and checks the table. The child answers with
:class:`EmbeddedQuery`: the vector (float32, bit for bit the one an in-process chunker makes) and
the chunker's own :class:`~latechunk_dagster.core.chunker_host.QueryIdentity` (model fingerprint and
name, head, width), the lineage :func:`~latechunk_dagster.sink.search.check_table_lineage` compares.
The table's checks still come first: a failing one ends the child and is the error printed, as
before.

The protocol: one JSON object on the child's stdin (``query``, ``model``, ``options``: the
``LateChunker`` options), one JSON line on its stdout (``query``, ``identity``: the fields of the
query identity, the vector as base64 of its float32 bytes, ``engine``, ``startup_seconds``; or
``error``: the message of the error the command prints as one line). The child's stderr is the
command's (the "queries embedded by ..." line, warnings).
"""

from __future__ import annotations

import gc

if __name__ == "__main__":
    # The child: no cyclic garbage collection. Its imports (torch, transformers) make hundreds of
    # thousands of objects, over which each collection walks again: 0.8 s of a 4.5 s child here
    # (bench/README.md); it lives seconds, holds one model and ends with os._exit.
    gc.disable()

import base64
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from latechunk_dagster.core.chunker_host import QueryIdentity
from latechunk_dagster.core.errors import LateChunkError

#: The errors ``latechunk`` prints as one line (``latechunk_dagster.app.cli.main`` catches these), the
#: child's sent back as such.
ONE_LINE_ERRORS = (LateChunkError, OSError, ValueError, KeyError)


class QueryProcessError(LateChunkError, RuntimeError):
    """The query process ended without an answer (a crash): its stderr, the command's, says why (the
    command adds one line, no second traceback)."""


@dataclass(frozen=True)
class ModelIdentity:
    """``card`` of an :class:`EmbeddedQuery`: the model fields :class:`~latechunk_dagster.sink.search.QueryEmbedder`
    reads (``fingerprint``, ``name``), from its :class:`QueryIdentity`."""

    fingerprint: str
    name: str


@dataclass(frozen=True)
class HeadIdentity:
    """``head`` of an :class:`EmbeddedQuery`: ``describe()`` as the table's ``head`` column names it."""

    description: str

    def describe(self) -> str:
        return self.description


@dataclass(frozen=True)
class EmbeddedQuery:
    """One query embedded by another process, with the chunker's :class:`QueryIdentity`: what
    :func:`~latechunk_dagster.sink.search.search` reads of a chunker (``card``, ``head`` and
    ``embedding_dim`` are views of :attr:`identity`) and :meth:`embed_queries` of that one query.

    Attributes:
        query: the query text.
        identity: the embedding chunker's ``query_identity`` (model fingerprint and name, head, width).
        vector: float32 ``[embedding_dim]``, the chunker's ``embed_queries([query])[0]``.
        engine: the engine that embedded it (``Engine.describe()``); startup_seconds its start, seconds.
    """

    query: str
    identity: QueryIdentity
    vector: np.ndarray
    engine: str
    startup_seconds: float

    @property
    def query_identity(self) -> QueryIdentity:
        """:attr:`identity` (the name a chunker gives it)."""
        return self.identity

    @property
    def card(self) -> ModelIdentity:
        """The model's fingerprint and name."""
        return ModelIdentity(self.identity.model_sha256, self.identity.model_name)

    @property
    def head(self) -> HeadIdentity:
        """The head, as its description."""
        return HeadIdentity(self.identity.head)

    @property
    def embedding_dim(self) -> int:
        """Width of the vector."""
        return self.identity.embedding_dim

    def embed_queries(self, queries: Sequence[str]) -> np.ndarray:
        """float32 ``[1, embedding_dim]``: the vector, for the one query it was embedded for.

        Raises:
            ValueError: ``queries`` is not that one query.
        """
        if list(queries) != [self.query]:
            raise ValueError(f"this embedding is of the query {self.query!r} alone, asked for {list(queries)!r}")
        return self.vector[None, :]


class QueryProcess:
    """The child process embedding one query (module docstring); started at construction.

    Args:
        query: the query text.
        model: the model directory.
        options: ``LateChunker`` options (``dimensions``, the opt-ins), as for
            :func:`~latechunk_dagster.core.chunker.query_chunker`.
    """

    def __init__(self, query: str, model: str, options: dict[str, Any]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "latechunk_dagster.app.query_process"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"query": query, "model": model, "options": options}))
        self.proc.stdin.close()

    def result(self) -> EmbeddedQuery:
        """Wait for the child's answer.

        Raises:
            ValueError: the child's one-line error (a model refused without its opt-in, a query
                without a token, ...), its message unchanged.
            QueryProcessError: the child ended without an answer.
        """
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        self.proc.wait()
        if not line:
            raise QueryProcessError(
                f"the query process exited {self.proc.returncode} without a vector (its error is above)"
            )
        answer = json.loads(line)
        if "error" in answer:
            raise ValueError(answer["error"])
        vector = np.frombuffer(base64.b64decode(answer["vector"]), dtype=np.float32)
        return EmbeddedQuery(
            query=answer["query"],
            identity=QueryIdentity(**answer["identity"]),
            vector=vector,
            engine=answer["engine"],
            startup_seconds=answer["startup_seconds"],
        )

    def close(self) -> None:
        """End the child if it still runs (the table's check failed first)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def _answer(job: dict[str, Any]) -> dict[str, Any]:
    """The child's work: the chunker on the light engine, one torch thread (on 2 shared cores a
    second thread only waits: the forward measured 0.4-0.9 s with two against 0.06-0.12 s with one,
    the same vector to the bit), the query embedded."""
    import torch

    from latechunk_dagster.core.chunker import query_chunker

    torch.set_num_threads(1)
    with query_chunker(job["model"], **job["options"]) as chunker:
        [vector] = chunker.embed_queries([job["query"]])
        return {
            "query": job["query"],
            "identity": asdict(chunker.query_identity),
            "vector": base64.b64encode(np.ascontiguousarray(vector, dtype=np.float32).tobytes()).decode(),
            "engine": chunker.engine.describe() if chunker.engine is not None else "transformers",
            "startup_seconds": chunker.startup_seconds,
        }


def _serve() -> int:
    """The child: read the job, write the answer, leave without the interpreter's teardown (the
    command's :func:`~latechunk_dagster.app.cli._exit_without_teardown` says why)."""
    job = json.loads(sys.stdin.read())
    try:
        answer = _answer(job)
    except ONE_LINE_ERRORS as exc:
        answer = {"error": str(exc)}
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    _serve()
