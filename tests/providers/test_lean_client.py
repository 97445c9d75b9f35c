"""The lean HTTP/1.1 client every provider (the agent's, `mylm serve`'s pool) calls plain-HTTP servers with
(`providers/lean.py`), against a real loopback server that writes its answers in small, delayed pieces: every
framing, kept connections, the failures a server can cause, and what is left to requests (a proxy, TLS,
cookies, a URL or header requests would rewrite or reject) with the same outcome as before."""

from __future__ import annotations

import gzip
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from mylm import Agent, StopReason
from mylm.core.cancel import CancelToken
from mylm.core.errors import (
    CancelledError,
    ConnectionBroke,
    EndpointUnreachableError,
    LLMTimeoutError,
)
from mylm.core.types import ToolCall
from mylm.protocol.parser import format_tool_call
from mylm.providers import Endpoint, create_llm
from mylm.providers.failures import Place
from mylm.providers.lean import LeanResponse, LeanSession, _direct_target
from mylm.providers.transport import CallGuard, HTTPCall, iter_body, new_session, read_all, release, send
from tests.providers.helpers import collect, request
from tests.providers.servers import OpenAIServer
from tests.providers.test_provider_keepalive import counting
from tests.test_agent import add

PLACE = Place(provider="openai", url="http://127.0.0.1", model="m", key_hint="", has_key=False)

#: What a scripted server does with one request: write these pieces (bytes, or a float: sleep that long; None:
#: close the connection).
Script = list[bytes | float | None]


class ScriptedServer:
    """Answers each request with the next script; records the connections it accepted and the requests' heads."""

    def __init__(self, scripts: list[Script]) -> None:
        self.scripts = list(scripts)
        self.connections = 0
        self.heads: list[bytes] = []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/v1/chat/completions"
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            self._answer(conn)
        except OSError:
            pass  # the client went away (a cancel, a cut stream)
        finally:
            conn.close()

    def _answer(self, conn: socket.socket) -> None:
        buffer = b""
        while True:
            while b"\r\n\r\n" not in buffer:
                data = conn.recv(65536)
                if not data:
                    return
                buffer += data
            head, _, buffer = buffer.partition(b"\r\n\r\n")
            length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            while len(buffer) < length:
                buffer += conn.recv(65536)
            buffer = buffer[length:]
            with self._lock:
                self.heads.append(head)
                script = self.scripts.pop(0)
            for piece in script:
                if piece is None:
                    return
                if isinstance(piece, float):
                    time.sleep(piece)
                else:
                    conn.sendall(piece)

    def close(self) -> None:
        self.sock.close()


def chunked(*parts: bytes) -> list[bytes | float | None]:
    """A chunked answer written a chunk at a time, with a short pause between them."""
    out: list[bytes | float | None] = [(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
                                       b"Content-Type: text/event-stream\r\n\r\n")]
    for part in parts:
        out += [b"%x\r\n%s\r\n" % (len(part), part), 0.01]
    return [*out, b"0\r\n\r\n"]


def sized(body: bytes, status: str = "200 OK", extra: bytes = b"") -> Script:
    return [b"HTTP/1.1 %s\r\nContent-Length: %d\r\n%s\r\n" % (status.encode(), len(body), extra), body]


@pytest.fixture
def serving() -> Iterator[Callable[[list[Script]], ScriptedServer]]:
    servers: list[ScriptedServer] = []

    def start(scripts: list[Script]) -> ScriptedServer:
        servers.append(ScriptedServer(scripts))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def call(session: LeanSession, url: str, guard: CallGuard | None = None, *, read_timeout: float = 5.0,
         body: bytes = b"{}") -> tuple[LeanResponse, CallGuard]:
    guard = guard or CallGuard(None, None, PLACE)
    answer = send(session, HTTPCall("POST", url, {"Content-Type": "application/json"}, body), guard,
                  connect_timeout=2.0, read_timeout=read_timeout)
    assert isinstance(answer, LeanResponse)
    return answer, guard


def whole(session: LeanSession, url: str) -> tuple[int, bytes]:
    answer, guard = call(session, url)
    try:
        return answer.status_code, b"".join(iter_body(answer, guard, idle=5.0))
    finally:
        release(answer, guard)


def test_a_chunked_stream_arrives_whole_and_its_connection_is_kept(serving: Callable[..., ScriptedServer]
                                                                   ) -> None:
    server = serving([chunked(b"data: one\n\n", b"data: two\n\n", b"data: [DONE]\n\n"), sized(b"again")])
    session = LeanSession()
    assert whole(session, server.url) == (200, b"data: one\n\ndata: two\n\ndata: [DONE]\n\n")
    assert whole(session, server.url) == (200, b"again")
    assert server.connections == 1
    head = server.heads[0].decode()
    assert head.startswith("POST /v1/chat/completions HTTP/1.1\r\n")
    assert "Content-Length: 2" in head and "Accept-Encoding: identity" in head and "User-Agent: mylm/" in head


def test_pieces_split_anywhere_are_put_back_together(serving: Callable[..., ScriptedServer]) -> None:
    wire = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-T: 1\r\n\r\n"
    server = serving([[wire[i:i + 3] if j % 2 == 0 else 0.002 for i in range(0, len(wire), 3) for j in (0, 1)],
                      sized(b"next")])
    session = LeanSession()
    assert whole(session, server.url) == (200, b"hello world")
    assert whole(session, server.url) == (200, b"next")
    assert server.connections == 1


def test_a_body_up_to_the_close_is_read_and_its_connection_not_kept(serving: Callable[..., ScriptedServer]
                                                                    ) -> None:
    server = serving([[b"HTTP/1.1 200 OK\r\n\r\npart one, ", 0.01, b"part two", None], sized(b"x")])
    session = LeanSession()
    assert whole(session, server.url) == (200, b"part one, part two")
    assert whole(session, server.url) == (200, b"x")
    assert server.connections == 2


def test_connection_close_and_http_1_0_are_not_kept(serving: Callable[..., ScriptedServer]) -> None:
    server = serving([sized(b"a", extra=b"Connection: close\r\n"),
                      [b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nb", None], sized(b"c")])
    session = LeanSession()
    assert [whole(session, server.url)[1] for _ in range(3)] == [b"a", b"b", b"c"]
    assert server.connections == 3


def test_an_error_status_and_its_headers_are_read(serving: Callable[..., ScriptedServer]) -> None:
    server = serving([sized(b'{"error": "slow down"}', "429 Too Many Requests",
                            b"Retry-After: 3\r\nX-Many: a\r\nx-many: b\r\n"),
                      [b"HTTP/1.1 100 Continue\r\n\r\n", *sized(b"ok")]])
    session = LeanSession()
    answer, guard = call(session, server.url)
    assert answer.status_code == 429
    assert answer.headers.get("retry-after") == "3" and answer.headers["Retry-After"] == "3"
    assert answer.headers.get("X-MANY") == "a, b" and "x-many" in answer.headers
    assert read_all(answer, guard, idle=5.0, limit=1000) == b'{"error": "slow down"}'
    answer.close()
    assert whole(session, server.url) == (200, b"ok")
    assert server.connections == 1


def test_a_kept_connection_the_server_closed_is_replaced(serving: Callable[..., ScriptedServer]) -> None:
    server = serving([[*sized(b"first"), 0.05, None], sized(b"second")])
    session = LeanSession()
    assert whole(session, server.url) == (200, b"first")
    time.sleep(0.2)  # the server has closed the kept connection by now
    assert whole(session, server.url) == (200, b"second")
    assert server.connections == 2


def test_a_kept_connection_closed_as_the_request_goes_out_is_retried_once(
        serving: Callable[..., ScriptedServer]) -> None:
    # The server takes the second request and closes without a word: a kept connection gone stale in between.
    server = serving([sized(b"first"), [None], sized(b"third")])
    session = LeanSession()
    assert whole(session, server.url) == (200, b"first")
    assert whole(session, server.url) == (200, b"third")
    assert server.connections == 2


def test_a_stream_cut_mid_body_breaks_the_call(serving: Callable[..., ScriptedServer]) -> None:
    server = serving([[b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", 0.01, None],
                      [b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", None]])
    session = LeanSession()
    for _ in range(2):
        answer, guard = call(session, server.url)
        with pytest.raises(ConnectionBroke, match="broke"):
            list(iter_body(answer, guard, idle=5.0))
        release(answer, guard)


def test_a_new_connection_closed_before_any_answer_is_unreachable(serving: Callable[..., ScriptedServer]) -> None:
    server = serving([[None]])
    with pytest.raises(EndpointUnreachableError, match="the connection was reset"):
        call(LeanSession(), server.url)


def test_nothing_listening_is_refused_at_once() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    with pytest.raises(EndpointUnreachableError, match="connection refused") as caught:
        call(LeanSession(), f"http://127.0.0.1:{port}/v1")
    assert caught.value.retryable is False


def test_silence_before_the_answer_is_the_read_timeout(serving: Callable[..., ScriptedServer]) -> None:
    server = serving([[1.0, *sized(b"late")]])
    with pytest.raises(LLMTimeoutError, match="sent no response within 0.2 s"):
        call(LeanSession(), server.url, read_timeout=0.2)


def test_silence_mid_stream_is_the_idle_timeout(serving: Callable[..., ScriptedServer]) -> None:
    server = serving([[b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", 1.0, b"defghij"]])
    answer, guard = call(LeanSession(), server.url)
    with pytest.raises(LLMTimeoutError, match="went silent"):
        list(iter_body(answer, guard, idle=0.2))
    answer.close()


def test_a_cancel_stops_a_read_in_progress(serving: Callable[..., ScriptedServer]) -> None:
    server = serving([[b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", 5.0]])
    cancel = CancelToken()
    answer, guard = call(LeanSession(), server.url, CallGuard(None, cancel, PLACE))
    threading.Timer(0.1, cancel.cancel).start()
    started = time.monotonic()
    with pytest.raises(CancelledError):
        list(iter_body(answer, guard, idle=10.0))
    assert time.monotonic() - started < 3
    answer.close()


def test_a_cancel_that_comes_while_connecting_closes_the_new_connection(
        serving: Callable[..., ScriptedServer], monkeypatch: pytest.MonkeyPatch) -> None:
    # The deadline or a cancel can land between the connect and the request going out; the socket must be
    # closed there, not left to the garbage collector (a ResourceWarning, and a descriptor held till then).
    server = serving([sized(b"never sent")])
    cancel = CancelToken()
    made: list[socket.socket] = []
    connect = socket.create_connection

    def connect_then_cancel(*args: Any, **kwargs: Any) -> socket.socket:
        made.append(connect(*args, **kwargs))
        cancel.cancel()
        return made[-1]

    monkeypatch.setattr(socket, "create_connection", connect_then_cancel)
    with pytest.raises(CancelledError):
        call(LeanSession(), server.url, CallGuard(None, cancel, PLACE))
    assert len(made) == 1 and made[0].fileno() == -1


def test_a_compressed_body_is_decoded(serving: Callable[..., ScriptedServer]) -> None:
    server = serving([sized(gzip.compress(b"data: zipped\n\n"), extra=b"Content-Encoding: gzip\r\n")])
    assert whole(LeanSession(), server.url) == (200, b"data: zipped\n\n")


def test_https_and_proxied_hosts_go_through_requests(monkeypatch: pytest.MonkeyPatch,
                                                     serving: Callable[..., ScriptedServer]) -> None:
    server = serving([sized(b"direct")])
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "")
    session = LeanSession()
    guard = CallGuard(None, None, PLACE)
    # The proxy variable covers the host: requests sends it (to the proxy, which is not there).
    with pytest.raises(EndpointUnreachableError):
        send(session, HTTPCall("POST", server.url, {}, b"{}"), guard, connect_timeout=2.0, read_timeout=2.0)
    assert session._fallback is not None and server.connections == 0
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    assert whole(LeanSession(), server.url) == (200, b"direct")


def test_a_provider_on_the_servers_pool_streams_through_the_lean_client() -> None:
    with OpenAIServer(["one", "two"], delay=0.005) as server:
        llm = create_llm(Endpoint(provider="openai", base_url=server.base_url, model="m"))
        llm.pool(4)  # type: ignore[attr-defined]
        assert isinstance(llm._session, LeanSession)  # type: ignore[attr-defined]
        texts = [collect(llm.stream(request()))[0] for _ in range(2)]
    assert texts == ["one", "two"]


# ------------------------------------------------ the agent's calls (the default session of every provider)

@pytest.fixture
def exchanges(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The URLs the lean client sent calls to itself (not through requests)."""
    sent: list[str] = []
    real = LeanSession._exchange

    def counted(self: LeanSession, conn: Any, head: bytes, call: HTTPCall, *args: Any) -> Any:
        sent.append(call.url)
        return real(self, conn, head, call, *args)

    monkeypatch.setattr(LeanSession, "_exchange", counted)
    return sent


def test_an_agent_run_streams_through_the_lean_client(exchanges: list[str]) -> None:
    turn = "I will add.\n" + format_tool_call(ToolCall("add", {"a": 2, "b": 3}))
    runs = []
    for session in (None, new_session()):  # the default session, then requests' as before
        # Small events, a few milliseconds apart: each read brings a piece of the turn.
        with OpenAIServer([turn, "The sum is 5."], delay=0.003) as server:
            connections = counting(server)
            llm = create_llm(Endpoint(provider="openai", base_url=server.base_url, model="m"))
            if session is not None:
                llm._session = session  # type: ignore[attr-defined]
            else:
                assert isinstance(llm._session, LeanSession)  # type: ignore[attr-defined]
            result = Agent(llm, [add]).run("2+3?")
            bodies = [request.body for request in server.requests]
        runs.append((result.stop_reason, result.final_text, bodies, len(connections)))
        if session is None:
            assert len(exchanges) == 2 and llm._session._fallback is None  # type: ignore[attr-defined]
    assert runs[0][0] is StopReason.FINAL_ANSWER and runs[0][1] == "The sum is 5."
    assert "5" in runs[0][2][1]["messages"][-1]["content"]  # the observation went back
    assert runs[0] == runs[1]  # the same requests, answer and connections as through requests


def test_a_proxy_variable_keeps_the_agents_calls_on_requests(monkeypatch: pytest.MonkeyPatch, exchanges: list[str],
                                                             serving: Callable[..., ScriptedServer]) -> None:
    proxy = serving([chunked(b'data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}\n\n',
                             b"data: [DONE]\n\n")])
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
    monkeypatch.setenv("NO_PROXY", "")
    llm = create_llm(Endpoint(provider="openai", base_url="http://model.invalid:8080/v1", model="m"))
    result = Agent(llm, []).run("hi")
    assert result.final_text == "hi"
    assert proxy.heads[0].startswith(b"POST http://model.invalid:8080/v1/chat/completions HTTP/1.1")
    assert exchanges == []


def test_https_and_urls_requests_would_rewrite_are_left_to_it() -> None:
    assert _direct_target("http://127.0.0.1:8080/v1/chat/completions?x=1") == (
        "127.0.0.1", 8080, "127.0.0.1:8080", "/v1/chat/completions?x=1")
    assert _direct_target("http://localhost/v1") == ("localhost", 80, "localhost", "/v1")
    for url in ("https://127.0.0.1/v1", "http://user:pw@127.0.0.1/v1", "http://127.0.0.1/a b",
                "http://127.0.0.1/caf\u00e9", "http://127.0.0.1/a%20b", "http://127.0.0.1:x/v1", "http://127.0.0.1/v1#f"):
        assert _direct_target(url) is None, url


def test_a_cookie_an_answer_sets_is_sent_back_as_requests_did(exchanges: list[str],
                                                             serving: Callable[..., ScriptedServer]) -> None:
    server = serving([sized(b"one", extra=b"Set-Cookie: route=b2; Path=/\r\n"), sized(b"two"), sized(b"three")])
    session = LeanSession()
    bodies = []
    for _ in range(3):
        guard = CallGuard(None, None, PLACE)
        answer = send(session, HTTPCall("POST", server.url, {}, b"{}"), guard, connect_timeout=2.0, read_timeout=2.0)
        bodies.append(b"".join(iter_body(answer, guard, idle=2.0)))
        release(answer, guard)
    assert bodies == [b"one", b"two", b"three"]
    assert b"cookie:" not in server.heads[0].lower()
    assert b"Cookie: route=b2" in server.heads[1] and b"Cookie: route=b2" in server.heads[2]
    assert len(exchanges) == 1  # only the first call: then requests, which holds the cookie


def test_a_header_requests_rejects_fails_as_it_did(serving: Callable[..., ScriptedServer]) -> None:
    server = serving([sized(b"unused"), sized(b"unused")])
    for value in ("Bearer k\n", "Bearer k\r\nX-Injected: 1", " leading"):
        outcomes = []
        for session in (LeanSession(), new_session()):
            guard = CallGuard(None, None, PLACE)
            with pytest.raises(Exception) as caught:
                send(session, HTTPCall("POST", server.url, {"Authorization": value}, b"{}"), guard,
                     connect_timeout=2.0, read_timeout=2.0)
            guard.close()
            outcomes.append((type(caught.value), str(caught.value)))
        assert outcomes[0] == outcomes[1], value
    assert server.heads == []
