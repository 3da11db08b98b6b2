"""A real S3-compatible server on loopback for tests and the bench, and a proxy that breaks it on purpose.

`moto_server()` starts moto in server mode (`python -m moto.server`) in its own process on a free
127.0.0.1 port, once per test session, and stops it at exit; nothing outside this machine is touched.
`FaultProxy` sits between a client and moto and, for requests matching a rule, answers 500, answers
503 SlowDown, drops the connection halfway through the request body, or sends half a response body
and hangs up: the failures a real network and a busy S3 produce, in a way a test can count.

Tests use the `s3` fixture (import it: `from tests.s3_server import s3  # noqa: F401`).
"""

from __future__ import annotations

import atexit
import contextlib
import http.client
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Literal

import pytest

from harnessrl.serve.process import free_port

FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}
# Empty AWS config files, so nothing from ~/.aws leaks in (os.devnull is refused by s3fs's botocore).
_empty = os.path.join(tempfile.mkdtemp(prefix="harnessrl-aws-"), "empty")
open(_empty, "w").close()
FAKE_CREDENTIALS |= {"AWS_CONFIG_FILE": _empty, "AWS_SHARED_CREDENTIALS_FILE": _empty}


_server: dict[str, object] = {}


def moto_server() -> str:
    """The endpoint URL of the session's moto server, started on first use."""
    if "url" in _server:
        return str(_server["url"])
    port = free_port()
    env = os.environ | FAKE_CREDENTIALS
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 30
    while True:
        try:
            urllib.request.urlopen(f"{url}/moto-api/", timeout=1).close()
            break
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                proc.kill()
                raise RuntimeError(f"moto server did not start on {url}") from None
            time.sleep(0.1)
    atexit.register(lambda: (proc.terminate(), proc.wait(10)))
    _server.update(url=url, proc=proc)
    return url


def make_bucket(endpoint: str, name: str | None = None) -> str:
    import boto3

    name = name or f"b-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=name)
    return name


# ----------------------------------------------------------------------------- faults


@dataclass
class Fault:
    """Break the next `times` requests whose method is `method` (any if None) and whose path
    and query contain `path_contains`."""

    kind: Literal["500", "slowdown", "drop_request", "drop_response"]
    method: str | None = None
    path_contains: str = ""
    times: int = 1


@dataclass
class FaultProxy:
    upstream: str  # http://127.0.0.1:port
    faults: list[Fault] = field(default_factory=list)
    log: list[tuple[str, str, str]] = field(default_factory=list)  # (method, path, status or fault)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()

    def take(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for f in self.faults:
                if f.times > 0 and f.method in (None, method) and f.path_contains in path:
                    f.times -= 1
                    return f
        return None

    def record(self, method: str, path: str, what: str) -> None:
        with self._lock:
            self.log.append((method, path, what))

    def injected(self) -> list[tuple[str, str, str]]:
        return [e for e in self.log if not e[2].isdigit()]

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


HOP_BY_HOP = {"connection", "keep-alive", "expect", "transfer-encoding", "proxy-connection", "te", "upgrade"}
ERROR_XML = "<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code><Message>{msg}</Message></Error>"


def _handler(proxy: FaultProxy) -> type[BaseHTTPRequestHandler]:
    host, port = proxy.upstream.removeprefix("http://").split(":")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive and `Expect: 100-continue`, as botocore uses them

        def log_message(self, *args: object) -> None:
            pass

        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                out = b""
                while size := int(self.rfile.readline().split(b";")[0], 16):
                    out += self.rfile.read(size)
                    self.rfile.readline()
                self.rfile.readline()
                return out
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def _error(self, status: int, code: str) -> None:
            body = ERROR_XML.format(code=code, msg="injected by FaultProxy").encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _drop(self) -> None:
            self.close_connection = True
            with contextlib.suppress(OSError):  # the client may have hung up first
                self.connection.shutdown(socket.SHUT_RDWR)

        def _any(self) -> None:
            method, path = self.command, self.path
            fault = proxy.take(method, path)
            if fault and fault.kind == "drop_request":
                n = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(n // 2)  # half the body arrives, then the line goes dead
                proxy.record(method, path, "drop_request")
                return self._drop()
            body = self._body()
            if fault and fault.kind == "500":
                proxy.record(method, path, "500-injected")
                return self._error(500, "InternalError")
            if fault and fault.kind == "slowdown":
                proxy.record(method, path, "503-slowdown")
                return self._error(503, "SlowDown")
            up = http.client.HTTPConnection(host, int(port), timeout=60)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
            if body or method in ("PUT", "POST"):
                headers["Content-Length"] = str(len(body))
            up.request(method, path, body=body, headers=headers)
            resp = up.getresponse()
            data = resp.read()
            up.close()
            self.send_response(resp.status)
            for k, v in resp.getheaders():
                if k.lower() not in HOP_BY_HOP and k.lower() != "content-length":
                    self.send_header(k, v)
            length = int(resp.getheader("Content-Length") or len(data))
            self.send_header("Content-Length", str(length))
            self.end_headers()
            if fault and fault.kind == "drop_response" and data:
                self.wfile.write(data[: len(data) // 2])
                self.wfile.flush()
                proxy.record(method, path, "drop_response")
                return self._drop()
            if method != "HEAD":
                self.wfile.write(data)
            proxy.record(method, path, str(resp.status))

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any

    return Handler


# ----------------------------------------------------------------------------- fixture


@dataclass
class S3:
    endpoint: str  # moto itself
    proxy: FaultProxy  # in front of moto; point clients here to get faults
    bucket: str


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[S3]:
    """A fresh bucket on the session's moto server, a fault proxy in front, fake credentials in env."""
    for k, v in FAKE_CREDENTIALS.items():
        monkeypatch.setenv(k, v)
    endpoint = moto_server()
    proxy = FaultProxy(endpoint)
    yield S3(endpoint, proxy, make_bucket(endpoint))
    proxy.close()
