"""The engine boundary trusts nobody (issue 39 A and B), against a real vLLM server on loopback.

The module's server runs with the package's vLLM plugins (the span route), as
``deploy/vllm-server.yaml`` starts it. Hostile requests go to it over real HTTP; faults between a
client and it come from a loopback proxy (:class:`tests.servers.Proxy`): one that starts answering
401/403/404/407 (a key rotated, proxy auth expired, a restarted server no longer serving the model),
one that swaps two windows' span sums (a right-shaped wrong answer), one that demands basic auth.

Right answers: the in-process engine of the same model (``chunker`` fixture) for vectors; the
statuses and field names the route documents for refusals; rows read back from LanceDB.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import httpx
import numpy as np
import pytest

from latechunk_dagster import FixedTokens, LateChunker, RemoteLateChunker, late_chunk_assets, sink
from latechunk_dagster.core.engines.vllm_server import (
    ServerError,
    ServerRejectedDocumentError,
    ServerSettings,
    ServerUnavailableError,
)
from latechunk_dagster.core.errors import EngineAnswerError
from latechunk_dagster.core.redact import redact_url
from latechunk_dagster.integration.resources import DocumentStoreResource, LanceDBResource
from latechunk_dagster.integration.server_resource import VLLMServerEngineResource
from latechunk_dagster.vllm_plugin import span_sum_pairs
from latechunk_dagster.vllm_plugin.protocol import DIGEST_BYTES, ROUTE
from tests.servers import Proxy, ServerProcess, plugin_vllm_server

#: width of the shipped model's token states
DIM = 384
IDS = [101, 4068, 2003, 1996, 3007, 1997, 2762, 1012, 102]  # "berlin is the capital of germany."


@pytest.fixture(scope="module")
def server(minilm_dir: Path) -> Iterator[ServerProcess]:
    """The shipped model's plugin server for this module (:func:`tests.servers.plugin_vllm_server`)."""
    with plugin_vllm_server(minilm_dir) as srv:
        yield srv


def span_answer(url: str, ids: list[int], spans: list[int]) -> np.ndarray:
    """One window's float64 span sums from the route (``hi + lo``), ``[n_spans, 384]``; asserts 200."""
    resp = httpx.post(url + ROUTE, json={"windows": [{"ids": ids, "spans": spans}]}, timeout=60)
    assert resp.status_code == 200, resp.text
    data = np.frombuffer(resp.content, dtype="<f4", offset=4 + DIGEST_BYTES).reshape(-1, 2 * DIM + 1)
    return data[:, :DIM].astype(np.float64) + data[:, DIM : 2 * DIM]


#: (name, raw JSON body, the field the 400 answer names). The first is the issue's example: the
#: worker's torch.tensor raised "Overflow" and the engine core died; ``true`` among the ids stopped
#: the engine core's input thread (msgspec refuses a bool for an int): every later request hung.
PLACES = {
    "IDS": json.dumps(IDS),
    "LONG": json.dumps([101] * 257),
    "HUGE": json.dumps(list(range(200_000))),
    "OUT_OF_VOCABULARY": '{"ids": [101, 99999, 102], "spans": [0, 3]}',
}
HOSTILE = [
    ("span end 2**63", '{"windows": [{"ids": IDS, "spans": [0, 9223372036854775808]}]}', "windows[0].spans[1]"),
    ("span end 2**64", '{"windows": [{"ids": IDS, "spans": [0, 18446744073709551616]}]}', "windows[0].spans[1]"),
    ("negative span", '{"windows": [{"ids": IDS, "spans": [-1, 3]}]}', "windows[0].spans[0]"),
    ("span past the window", '{"windows": [{"ids": IDS, "spans": [0, 10]}]}', "windows[0].spans[1]"),
    ("fraction", '{"windows": [{"ids": IDS, "spans": [0, 2.5]}]}', "windows[0].spans[1]"),
    ("NaN", '{"windows": [{"ids": IDS, "spans": [0, NaN]}]}', "windows[0].spans[1]"),
    ("1e999", '{"windows": [{"ids": IDS, "spans": [0, 1e999]}]}', "windows[0].spans[1]"),
    ("true in spans", '{"windows": [{"ids": IDS, "spans": [true, 3]}]}', "windows[0].spans[0]"),
    ("true in ids", '{"windows": [{"ids": [101, true, 102], "spans": [0, 3]}]}', "windows[0].ids[1]"),
    ("id 2**63", '{"windows": [{"ids": [101, 9223372036854775808], "spans": [0, 2]}]}', "windows[0].ids[1]"),
    ("string id", '{"windows": [{"ids": [101, "7"], "spans": [0, 2]}]}', "windows[0].ids[1]"),
    ("nested spans", '{"windows": [{"ids": IDS, "spans": [[0, 3]]}]}', "windows[0].spans"),
    ("odd spans", '{"windows": [{"ids": IDS, "spans": [0, 3, 4]}]}', "windows[0].spans"),
    ("empty span", '{"windows": [{"ids": IDS, "spans": [2, 2]}]}', "windows[0].spans[1]"),
    ("overlapping spans", '{"windows": [{"ids": IDS, "spans": [0, 4, 3, 6]}]}', "windows[0].spans[2]"),
    ("no spans", '{"windows": [{"ids": IDS, "spans": []}]}', "windows[0].spans"),
    ("spans as a dict", '{"windows": [{"ids": IDS, "spans": {"0": 3}}]}', "windows[0].spans"),
    ("no ids", '{"windows": [{"ids": [], "spans": [0, 1]}]}', "windows[0].ids"),
    (
        "ids past max_model_len",
        '{"windows": [{"ids": LONG, "spans": [0, 1]}]}',
        "windows[0].ids",
    ),
    (
        "huge span list",
        '{"windows": [{"ids": IDS, "spans": HUGE}]}',
        "windows[0].spans",
    ),
    ("window not an object", '{"windows": [[1, 2]]}', "windows[0]"),
    ("extra field", '{"windows": [{"ids": IDS, "spans": [0, 3], "x": 1}]}', "windows[0]"),
    ("windows not a list", '{"windows": "x"}', "windows"),
    ("body a list", "[1, 2]", "body"),
    ("not JSON", "windows", "body"),
    ("nested 100,000 deep", "[" * 100_000 + "]" * 100_000, "body"),
    (
        "id out of the vocabulary",
        '{"windows": [{"ids": IDS, "spans": [0, 3]}, OUT_OF_VOCABULARY]}',
        "windows[1].ids",
    ),
]


def test_hostile_span_requests_get_400_naming_the_field_and_the_server_lives_on(
    server: ServerProcess, chunker: LateChunker
) -> None:
    """Every hostile request of :data:`HOSTILE` is answered HTTP 400 naming its field, and after each
    one the same server answers a right request with the right sums (the float64 sums of the
    in-process engine's token states): no request killed or wedged the engine."""
    [states] = chunker.engine.token_states([IDS])
    want = np.stack([states[0:4].sum(axis=0, dtype=np.float64), states[4:9].sum(axis=0, dtype=np.float64)])
    for name, body, field in HOSTILE:
        for name_, value in PLACES.items():
            body = body.replace(name_, value)
        resp = httpx.post(
            server.url + ROUTE, content=body.encode(), headers={"Content-Type": "application/json"}, timeout=60
        )
        assert resp.status_code == 400, (name, resp.status_code, resp.text[:300])
        err = resp.json()["error"]
        assert err["param"] == field and err["message"].startswith(field), (name, err)
        np.testing.assert_allclose(span_answer(server.url, IDS, [0, 4, 4, 9]), want, rtol=1e-6, atol=1e-6)
    assert "vocabulary" in err["message"]  # the last one: vLLM's own refusal, naming the window


def test_the_worker_answers_any_span_value_without_raising() -> None:
    """The pooler plugin's span sums (what runs inside the engine) on values the route would refuse:
    an empty ``[0, 2 * dim + 1]`` answer for each, never an exception; right ranges give the float64
    sums as (hi, lo, count) rows."""
    import torch

    rows = torch.arange(12, dtype=torch.float32).reshape(4, 3)  # [4 rows, dim 3]
    for spans in (
        [0, 2**63],
        [0, 2**64],
        [-1, 2],
        [0, 2.0],
        [0, float("nan")],
        [True, 2],
        [[0, 2]],
        [0, 2, 3],
        [2, 1],
        [0, 3, 2, 4],
        list(range(10**6)),
        "0,2",
        {"0": 2},
        None,
        [],
    ):
        out = span_sum_pairs(rows, spans)
        assert tuple(out.shape) == (0, 7), spans
    out = span_sum_pairs(rows, [0, 1, 1, 4]).numpy()
    np.testing.assert_array_equal(out[:, :3], [[0, 1, 2], [3 + 6 + 9, 4 + 7 + 10, 5 + 8 + 11]])
    np.testing.assert_array_equal(out[:, 3:6], 0)
    np.testing.assert_array_equal(out[:, 6], [1, 3])


DOCS = [
    "Berlin is the capital of Germany. It has 3.8M people. The Spree flows through it.",
    "Late chunking encodes the whole document once. Then it averages token states per chunk! Does it work?",
]


def _assert_same(a: list, b: list, atol: float = 1e-6) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.token_ids == y.token_ids and [c.token_range for c in x.chunks] == [c.token_range for c in y.chunks]
        np.testing.assert_allclose(x.vectors, y.vectors, atol=atol, rtol=0)


@pytest.mark.parametrize("path", ["spans", "token_states"])
@pytest.mark.parametrize("status", [401, 403, 404, 407])
def test_a_credential_or_availability_status_fails_the_call_and_blames_no_document(
    server: ServerProcess, minilm_dir: Path, status: int, path: str
) -> None:
    """A server (or the proxy in front of it) that starts answering 401/403/404/407 after a right
    start, on either path: the call fails naming the status, and no document comes back as
    ``server_rejected`` (before: bisection pinned it on each document). ``ServerUnavailableError``
    says what the status means; a 404 from the span route the server had at start is a wrong answer
    (``EngineAnswerError``: a server without the plugins now behind its address)."""
    proxy = Proxy(server.url)
    route_gone = status == 404 and path == "spans"
    try:
        with RemoteLateChunker(proxy.url, minilm_dir, retries=1, backoff_s=0.01) as c:
            proxy.refuse = lambda path, body: status
            with pytest.raises(
                EngineAnswerError if route_gone else ServerUnavailableError, match=f"HTTP {status}"
            ) as err:
                c.chunk(DOCS, FixedTokens(16), doc_ids=["a", "b"], errors="return", engine_path=path)
            assert route_gone or "no document is blamed, stored rows are kept" in str(err.value)
    finally:
        proxy.close()


@pytest.mark.parametrize("status", [413, 422])
def test_an_input_status_isolates_the_document(
    server: ServerProcess, minilm_dir: Path, chunker: LateChunker, status: int
) -> None:
    """413 and 422 describe the input, as 400 does: the document whose request the proxy refuses is
    ``server_rejected`` alone, the other one is encoded right."""
    proxy = Proxy(server.url)
    [marker] = chunker.tokenizer("berlin", add_special_tokens=False)["input_ids"]
    hit = re.compile(rb"[\[,]%d[,\]]" % marker)
    try:
        with RemoteLateChunker(proxy.url, minilm_dir, max_inputs_per_request=8) as c:
            proxy.refuse = lambda path, body: status if path == ROUTE and hit.search(body) else None
            out = c.chunk(DOCS, FixedTokens(16), doc_ids=["berlin-doc", "b"], errors="return")
    finally:
        proxy.close()
    assert isinstance(out[0], ServerRejectedDocumentError) and f"HTTP {status}" in str(out[0])
    _assert_same([out[1]], chunker.chunk(DOCS[1:], FixedTokens(16), engine_path="token_states"))


def _materialize(store: Path, db: Path, base_url: str, minilm_dir: Path, instance: dg.DagsterInstance):
    table = late_chunk_assets(index=False, job_name="chunk")
    instance.add_dynamic_partitions(table.partitions_def.name, ["p"])
    defs = dg.Definitions(
        assets=table.assets,
        jobs=table.jobs,
        resources={
            "engine": VLLMServerEngineResource(
                base_url=base_url, model=str(minilm_dir), retries=1, backoff_s=0.01, max_inputs_per_request=8
            ),
            "lancedb": LanceDBResource(uri=str(db)),
            "store": DocumentStoreResource(path=str(store)),
        },
    )
    return defs.resolve_job_def("chunk").execute_in_process(instance=instance, partition_key="p", raise_on_error=False)


def _rows(db: Path, doc_id: str) -> list[dict]:
    rows = sink.connect(str(db)).open_table("chunks").to_arrow().to_pylist()
    return sorted((r for r in rows if r["doc_id"] == doc_id), key=lambda r: r["chunk_index"])


def test_a_401_mid_run_fails_the_run_and_keeps_the_stored_rows(
    server: ServerProcess, minilm_dir: Path, tmp_path: Path
) -> None:
    """The issue's example through a real Dagster materialization: an edited document with 2 stored
    rows, and the server's proxy now answers 401 (a key rotated). The run fails with an error naming
    HTTP 401 and the credentials; the document keeps its 2 rows (the same vectors) and no
    ``server_rejected`` row is written."""
    store = tmp_path / "store" / "p"
    store.mkdir(parents=True)
    (tmp_path / "home").mkdir()
    (store / "edited.txt").write_text(" ".join(["Berlin is the capital of Germany."] * 25))
    proxy = Proxy(server.url)
    try:
        with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
            first = _materialize(store.parent, tmp_path / "db", proxy.url, minilm_dir, instance)
            assert first.success
            before = _rows(tmp_path / "db", "p/edited.txt")
            assert len(before) == 2
            (store / "edited.txt").write_text(" ".join(["Paris is the capital of France."] * 25))
            proxy.refuse = lambda path, body: 401
            second = _materialize(store.parent, tmp_path / "db", proxy.url, minilm_dir, instance)
            assert not second.success
            [failure] = [e for e in second.all_events if e.event_type_value == "STEP_FAILURE"]
            message = failure.event_specific_data.error.to_string()
            assert "HTTP 401" in message and "refuses our credentials" in message, message
    finally:
        proxy.close()
    after = _rows(tmp_path / "db", "p/edited.txt")
    assert [r["chunk_id"] for r in after] == [r["chunk_id"] for r in before]
    np.testing.assert_array_equal(np.stack([r["vector"] for r in after]), np.stack([r["vector"] for r in before]))
    db = sink.connect(str(tmp_path / "db"))
    if sink.REJECTED_TABLE in db.table_names():
        assert db.open_table(sink.REJECTED_TABLE).to_arrow().num_rows == 0


#: Two documents with the same number of tokens, so their windows' answers have the same shape and counts.
TWINS = [
    "Berlin is the capital of Germany and lies on a river.",
    "Paris is the capital of France and lies on a river.",
]


def swap_two_windows(path: str, request: bytes, answer: bytes) -> bytes:
    """``Proxy.rewrite_answer`` swapping the span sums of the first two windows of a span answer when
    their row counts are equal (from the route's documented layout: ``int32`` rows, digests, float32
    rows of ``2 * 384 + 1``); the rows and digests stay as sent: a right-shaped wrong answer."""
    if not (path.startswith(ROUTE) and request):
        return answer
    n = len(json.loads(request)["windows"])
    rows = np.frombuffer(answer, dtype="<i4", count=n)
    if n < 2 or rows[0] != rows[1]:
        return answer
    start = (4 + DIGEST_BYTES) * n
    data = np.frombuffer(answer, dtype="<f4", offset=start).reshape(-1, 2 * DIM + 1).copy()
    k = int(rows[0])
    data[:k], data[k : 2 * k] = data[k : 2 * k].copy(), data[:k].copy()
    return answer[:start] + data.tobytes()


def test_swapped_span_answers_are_refused_and_the_documents_come_from_another_server(
    server: ServerProcess, minilm_dir: Path, chunker: LateChunker
) -> None:
    """The issue's example: a proxy swaps the span sums of two windows with equal row counts (before,
    one document was stored with the other's vectors). The digests bind each answer to its request:
    the swapping server is left out for good, the documents come from the other server, right; alone,
    it makes the call fail with ``EngineAnswerError`` and none of its answers is used."""
    want = chunker.chunk(TWINS, FixedTokens(8), engine_path="token_states")
    assert len(want[0].token_ids) == len(want[1].token_ids)
    assert not np.allclose(want[0].vectors, want[1].vectors, atol=0.05)  # a swap would matter
    good, bad = Proxy(server.url), Proxy(server.url)
    try:
        with RemoteLateChunker([bad.url, good.url], minilm_dir, max_inputs_per_request=2) as c:
            bad.rewrite_answer = swap_two_windows
            for _ in range(2):  # the rotation sends the first request to either server
                _assert_same(c.chunk(TWINS, FixedTokens(8)), want)
            state = c.engine.server_states()[bad.url]
            assert state.startswith(f"excluded: {bad.url} answered POST {ROUTE} wrongly") and "digest" in state, state
        bad.rewrite_answer = None
        with RemoteLateChunker(bad.url, minilm_dir, max_inputs_per_request=2) as c:
            bad.rewrite_answer = swap_two_windows
            with pytest.raises(EngineAnswerError, match="does not match its digest"):
                c.chunk(TWINS, FixedTokens(8))
    finally:
        good.close()
        bad.close()


SECRET = "s3cr3t-Pa55"


def test_a_password_in_the_server_url_appears_in_no_row_log_or_message(
    server: ServerProcess, minilm_dir: Path, chunker: LateChunker, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A server behind basic auth, its URL ``http://latechunk:<password>@host``, through a real
    Dagster run with a document the server rejects (a token id out of its vocabulary on the wire):
    the credentials reach the proxy (it answers 401 without them), and the password is in no row of
    ``rejected_documents``, no Dagster event or step log, no Python log line (httpx's request lines
    at DEBUG included) and no exception message; where the URL is named it reads
    ``http://latechunk:[secure]@...``."""
    proxy = Proxy(server.url)
    proxy.basic_auth = ("latechunk", SECRET)
    [zid] = chunker.tokenizer("zeppelin", add_special_tokens=False)["input_ids"]
    proxy.rewrite = lambda b: re.sub(rb"(?<=[\[,])%d(?=[,\]])" % zid, b"99999", b)
    secret_url = proxy.url.replace("http://", f"http://latechunk:{SECRET}@")
    shown = redact_url(secret_url)
    assert shown == proxy.url.replace("http://", "http://latechunk:[secure]@")
    store = tmp_path / "store" / "p"
    store.mkdir(parents=True)
    (tmp_path / "home").mkdir()
    (store / "ok.txt").write_text(DOCS[0])
    (store / "zeppelin.txt").write_text("The zeppelin landed in Berlin yesterday. Nobody expected it.")
    texts: list[str] = []
    for name in ("", "httpx", "httpcore"):  # every line httpx and httpcore could write, whatever level is set
        caplog.set_level(logging.DEBUG, logger=name)
    try:
        with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
            result = _materialize(store.parent, tmp_path / "db", secret_url, minilm_dir, instance)
            assert result.success
            texts += [f"{r.user_message} {r.dagster_event}" for r in instance.all_logs(result.run_id)]
            texts += [str(e) for e in result.all_events]
        [row] = sink.connect(str(tmp_path / "db")).open_table(sink.REJECTED_TABLE).to_arrow().to_pylist()
        assert row["doc_id"] == "p/zeppelin.txt" and row["reason"] == "server_rejected" and "HTTP 400" in row["detail"]
        assert shown in row["detail"]
        texts.append(json.dumps(row, default=str))
        assert any(shown in t for t in texts)  # the engine's start-up line in the step log names it
        assert proxy.refused == 0  # every request carried the credentials
        with pytest.raises(ServerError, match="refuses our credentials") as err:  # a wrong password: 401
            RemoteLateChunker(secret_url.replace(SECRET, SECRET + "x"), minilm_dir, retries=0)
        texts.append(str(err.value))
        with pytest.raises(ValueError, match="takes no query string") as err:
            RemoteLateChunker(f"{proxy.url}?api_key={SECRET}", minilm_dir)
        texts.append(str(err.value))
        with RemoteLateChunker(secret_url, minilm_dir, retries=0) as c:
            proxy.refuse = lambda path, body: 401  # the password rotated mid-run
            with pytest.raises(ServerUnavailableError, match="HTTP 401") as err:
                c.chunk(DOCS, FixedTokens(16))
            texts.append(str(err.value))
    finally:
        proxy.close()
    texts += [r.getMessage() for r in caplog.records]
    texts.append(repr(ServerSettings(api_key=SECRET)))  # the other credential: not in the settings' repr
    assert any("HTTP Request:" in t for t in texts)  # httpx's own lines were captured
    leaks = [t[:300] for t in texts if SECRET in t]
    assert not leaks, leaks
