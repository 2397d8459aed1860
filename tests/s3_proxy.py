"""A loopback HTTP proxy in front of moto's S3 server: counts requests by kind and fails listings on demand.

Real S3 traffic (pyarrow's client speaks to it as to S3, path-style); the proxy only forwards, counts
and, when told, answers a listing page itself: ``page_size`` makes moto paginate small listings
(``max-keys``), ``fail_page`` fails the listing request of that number (1: the first page) with
``fault``: ``"error"`` (500 InternalError), ``"throttle"`` (503 SlowDown, every retry too) or
``"cut"`` (the page's response cut off mid-body, then the connection closed).

Object reads (GET and HEAD of a key): ``delay`` seconds are added to each request (an object store's
latency); ``on_get(key, n)`` runs before the n-th GET of a key is forwarded (a writer replacing the
object between two ranged GETs); ``get_faults`` answers that many object requests with ``get_fault``:
``"error"`` (500), ``"throttle"`` (503 SlowDown) or ``"hang"`` (no answer for ``hang_s`` seconds, then
the connection closed). ``max_in_flight``: the most requests it held at once.
"""

from __future__ import annotations

import http.client
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlencode, urlsplit

_ERRORS = {
    "error": (500, "InternalError", "We encountered an internal error. Please try again."),
    "throttle": (503, "SlowDown", "Please reduce your request rate."),
}


class S3Proxy:
    """The proxy's state: ``counts`` by kind (``list``, ``get``, ``head``, ``other``) and ``gets`` by key."""

    def __init__(self, upstream: str) -> None:
        self.upstream = urlsplit(upstream).netloc
        self.counts: Counter[str] = Counter()
        self.gets: Counter[str] = Counter()
        self.page_size: int | None = None
        self.fail_page: int | None = None
        self.fault = "error"
        self.list_requests = 0
        self.lock = threading.Lock()
        self.url = ""
        self.delay = 0.0
        self.on_get: Callable[[str, int], None] | None = None
        self.get_faults = 0
        self.get_fault = "throttle"
        self.hang_s = 5.0
        self.faults_answered = 0
        self.in_flight = 0
        self.max_in_flight = 0

    def reset(self) -> None:
        with self.lock:
            self.counts.clear()
            self.gets.clear()
            self.list_requests = 0
            self.max_in_flight = 0


def _handler(proxy: S3Proxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:  # quiet
            pass

        def _forward(self) -> None:
            with proxy.lock:
                proxy.in_flight += 1
                proxy.max_in_flight = max(proxy.max_in_flight, proxy.in_flight)
            try:
                self._exchange()
            except (BrokenPipeError, ConnectionResetError):  # the client hung up (e.g. after reading enough)
                self.close_connection = True
            finally:
                with proxy.lock:
                    proxy.in_flight -= 1

        def _exchange(self) -> None:
            parts = urlsplit(self.path)
            query = parse_qsl(parts.query, keep_blank_values=True)
            keys = dict(query)
            segments = [s for s in parts.path.split("/") if s]
            listing = self.command == "GET" and (len(segments) <= 1 or "list-type" in keys)
            kind = "list" if listing else {"GET": "get", "HEAD": "head"}.get(self.command, "other")
            key = "/".join(segments[1:])
            fault = None
            with proxy.lock:
                proxy.counts[kind] += 1
                if kind == "get":
                    proxy.gets[key] += 1
                    nth = proxy.gets[key]
                if listing:
                    proxy.list_requests += 1
                    number = proxy.list_requests
                if kind in ("get", "head") and proxy.get_faults > 0:
                    proxy.get_faults -= 1
                    proxy.faults_answered += 1
                    fault = proxy.get_fault
            if proxy.delay:
                time.sleep(proxy.delay)
            if fault == "hang":
                time.sleep(proxy.hang_s)
                self.close_connection = True
                self.connection.shutdown(2)
                return
            if fault is not None:
                status, code, message = _ERRORS[fault]
                body = f"<?xml version='1.0'?><Error><Code>{code}</Code><Message>{message}</Message></Error>"
                self._answer(status, body.encode(), {"Content-Type": "application/xml"})
                return
            if kind == "get" and proxy.on_get is not None:
                proxy.on_get(key, nth)
            if listing and proxy.page_size is not None:
                size = min(proxy.page_size, int(keys.get("max-keys") or proxy.page_size))
                query = [(k, v) for k, v in query if k != "max-keys"] + [("max-keys", str(size))]
            if listing and proxy.fail_page is not None and number >= proxy.fail_page and proxy.fault in _ERRORS:
                status, code, message = _ERRORS[proxy.fault]
                body = f"<?xml version='1.0'?><Error><Code>{code}</Code><Message>{message}</Message></Error>"
                self._answer(status, body.encode(), {"Content-Type": "application/xml"})
                return
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            conn = http.client.HTTPConnection(proxy.upstream, timeout=60)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
            conn.request(self.command, parts.path + ("?" + urlencode(query) if query else ""), body, headers)
            resp = conn.getresponse()
            data = resp.read()
            conn.close()
            out = {k: v for k, v in resp.getheaders() if k.lower() not in ("transfer-encoding", "connection")}
            if listing and proxy.fail_page is not None and number >= proxy.fail_page and proxy.fault == "cut":
                out["Content-Length"] = str(len(data))
                self.send_response(resp.status)
                for k, v in out.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data[: len(data) // 2])
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(2)
                return
            self._answer(resp.status, data, out)

        def _answer(self, status: int, data: bytes, headers: dict[str, str]) -> None:
            self.send_response(status)
            for k, v in headers.items():
                if k.lower() != "content-length" or self.command == "HEAD":  # a HEAD's length is the object's
                    self.send_header(k, v)
            if self.command != "HEAD":
                self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _forward

    return Handler


@contextmanager
def s3_proxy(upstream: str) -> Iterator[S3Proxy]:
    """A proxy on 127.0.0.1 in front of ``upstream`` (moto's URL), stopped on exit; ``.url`` is its address."""
    proxy = S3Proxy(upstream)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(proxy))
    server.daemon_threads = True
    proxy.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def store_options(url: str, key_id: str, secret: str) -> dict[str, str]:
    """LanceDB-form storage options that reach the S3 endpoint ``url`` with these credentials."""
    keys = {"aws_access_key_id": key_id, "aws_secret_access_key": secret}
    return {**keys, "aws_endpoint": url, "aws_region": "us-east-1", "allow_http": "true"}


def s3_client(url: str):  # noqa: ANN201 - a boto3 client (boto3 is a test dependency)
    """A boto3 S3 client of the endpoint ``url`` (moto takes any credentials): uploads, bypassing the proxy."""
    import boto3

    return boto3.client(
        "s3", endpoint_url=url, aws_access_key_id="t", aws_secret_access_key="t", region_name="us-east-1"
    )
