"""The request head's bound (`guard.MAX_HEAD_BYTES`) on both HTTP parsers `mylm serve` runs on. h11 bounds it
itself; httptools gathers a header of any length, so the guarded protocol bounds what it feeds it
(`guard._head_bound`): a client cannot make the server hold a head of more than the bound (beyond one read)."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from mylm.serve.guard import MAX_HEAD_BYTES, Guard, Guarding, guarded_protocol
from mylm.serve.server import Background, http_parser
from tests.providers.servers import OpenAIServer
from tests.serve.support import serving

PARSERS = ["httptools", "h11"]
BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()


@pytest.fixture(scope="module")
def upstream() -> Iterator[OpenAIServer]:
    with OpenAIServer() as server:
        yield server


def head(size: int, body: bytes = BODY, path: str = "/v1/chat/completions") -> bytes:
    """A request whose head (request line, headers and the blank line) is exactly `size` bytes."""
    start = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
             f"Content-Length: {len(body)}\r\nX-Pad: ").encode()
    pad = size - len(start) - len(b"\r\n\r\n")
    assert pad >= 0
    return start + b"a" * pad + b"\r\n\r\n"


def exchange(url: str, data: bytes, pieces: int = 1, answers: int = 1) -> bytes:
    """Send `data` in `pieces` writes and read until the server closes or `answers` answers have come whole."""
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=30)
    got = b""
    try:
        step = -(-len(data) // pieces)
        for at in range(0, len(data), step):
            try:
                sock.sendall(data[at:at + step])
            except OSError:
                break  # closed on us mid-send: what it answered is read below
        while got.count(b"HTTP/1.1 ") < answers or not _whole(got, answers):
            try:
                piece = sock.recv(65536)
            except OSError:
                break
            if not piece:
                break
            got += piece
    finally:
        sock.close()
    return got


def _whole(got: bytes, answers: int) -> bool:
    # Every answer here has a Content-Length body: whole when the last one's body has all its bytes.
    last = got.rsplit(b"HTTP/1.1 ", 1)[-1]
    head_end = last.find(b"\r\n\r\n")
    if head_end < 0:
        return False
    for line in last[:head_end].split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(last) - head_end - 4 >= int(line.split(b":")[1])
    return False


def test_mylm_serve_runs_on_httptools_when_it_is_installed() -> None:
    pytest.importorskip("httptools")
    assert http_parser() == "httptools"


@pytest.mark.parametrize("http", PARSERS)
def test_a_head_over_the_bound_is_refused_and_never_reaches_the_upstream(upstream: OpenAIServer,
                                                                         http: str) -> None:
    """Trickled in reads smaller than the bound, on both parsers (h11 judges only a head it has not seen the end
    of, so a longer head that comes whole in one read passes it; httptools' bound is exact: next test)."""
    pytest.importorskip(http)
    with serving(upstream.base_url, http=http) as url:
        before = len(upstream.requests)
        got = exchange(url, head(4 * MAX_HEAD_BYTES) + BODY, pieces=40)
        assert got.startswith((b"HTTP/1.1 431", b"HTTP/1.1 400")), got[:200]
        assert len(upstream.requests) == before


def test_on_httptools_a_head_over_the_bound_is_refused_even_in_one_read(upstream: OpenAIServer) -> None:
    pytest.importorskip("httptools")
    with serving(upstream.base_url, http="httptools") as url:
        before = len(upstream.requests)
        for pieces in (1, 3):
            got = exchange(url, head(MAX_HEAD_BYTES + 1) + BODY, pieces=pieces)
            assert got.startswith(b"HTTP/1.1 431"), got[:200]
            assert json.loads(got.split(b"\r\n\r\n", 1)[1])["error"]["type"] == "request_too_large"
        assert len(upstream.requests) == before


@pytest.mark.parametrize("http", PARSERS)
def test_a_head_near_the_bound_is_served(upstream: OpenAIServer, http: str) -> None:
    pytest.importorskip(http)
    with serving(upstream.base_url, http=http) as url:
        upstream.script(["fine"])
        got = exchange(url, head(MAX_HEAD_BYTES - 1024) + BODY, pieces=7)
        assert got.startswith(b"HTTP/1.1 200"), got[:200]


async def _echo(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """A small ASGI app answering every request with the length of its body."""
    size = 0
    while True:
        message = await receive()
        size += len(message.get("body", b""))
        if not message.get("more_body"):
            break
    body = str(size).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def _refused(path: str, status: int, message: str, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "status": status, "type": kind}}


class _Small:
    """A guarded echo server (on httptools unless `http` says) whose head bound is `bound` bytes (the default is
    64 KiB)."""

    def __init__(self, bound: int, guarding: Guarding | None = None, http: str = "httptools") -> None:
        self.app = Guard(_echo, guarding or Guarding(), _refused)
        self.bound, self.http = bound, http

    def __enter__(self) -> str:
        import uvicorn

        self.background = Background(self.app, http=self.http)
        # The same guarded protocol `server_for` makes, with a small bound.
        self.background.server.config = uvicorn.Config(
            self.app, log_level="warning", lifespan="off", http=guarded_protocol(
                self.app.guarding, self.app.refused, http=self.http, max_head=self.bound))
        return self.background.__enter__()

    def __exit__(self, *exc: object) -> None:
        self.background.__exit__(*exc)


@pytest.mark.parametrize("extra", [-1, 0, 1, 50])
def test_the_httptools_bound_is_exact_in_one_write_or_byte_by_byte(extra: int) -> None:
    """A head of exactly the bound is served, one byte more is refused, however the bytes arrive."""
    pytest.importorskip("httptools")
    with _Small(300) as url:
        for pieces in (1, 3, 300):
            got = exchange(url, head(300 + extra, b"{}", "/") + b"{}", pieces=pieces)
            if extra <= 0:
                assert got.startswith(b"HTTP/1.1 200") and got.endswith(b"\r\n\r\n2"), got[:200]
            else:
                assert got.startswith(b"HTTP/1.1 431") and b"longer than 300 bytes" in got, got[:200]


def test_the_bound_counts_each_head_of_a_kept_connection_alone() -> None:
    """Heads of requests one after another on one connection are each bounded, not their sum: three heads of 250
    bytes under a 300-byte bound are served (pipelined, in one write), with bodies larger than the bound; a head
    over it on the same kept connection is refused."""
    pytest.importorskip("httptools")
    body = json.dumps({"pad": "b" * 1000}).encode()
    with _Small(300) as url:
        one = head(250, body, "/") + body
        got = exchange(url, one * 3, answers=3)
        assert got.count(b"HTTP/1.1 200") == 3, got[:300]
        parts = urlsplit(url)
        with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
            sock.sendall(one)
            got = b""
            while not _whole(got, 1):
                got += sock.recv(65536)
            assert got.startswith(b"HTTP/1.1 200")
            sock.sendall(head(301, body, "/") + body)
            got = b""
            while piece := sock.recv(65536):
                got += piece
            assert got.startswith(b"HTTP/1.1 431"), got[:300]


@pytest.mark.parametrize("http", PARSERS)
def test_a_body_that_stops_coming_is_dropped_by_the_protocol(http: str) -> None:
    """The protocol's body deadline (the floor under an application that reads without one), on both parsers;
    a request whose body comes whole on the same kind of connection is answered."""
    pytest.importorskip(http)
    with _Small(MAX_HEAD_BYTES, Guarding(body_timeout=0.3, head_timeout=30), http) as url:
        body = b'{"a": 1}'
        assert exchange(url, head(200, body, "/") + body).endswith(b"\r\n\r\n8")
        parts = urlsplit(url)
        with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
            sock.sendall(head(200, b"x" * 100, "/") + b'{"a"')
            got = b""
            while piece := sock.recv(65536):  # returns b"" once the server closes the connection
                got += piece
            assert not got.startswith(b"HTTP/1.1 200")
