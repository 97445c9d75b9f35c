"""One connection for a run's calls, kept only when the answer is whole and the next cannot stall on ACKs."""

from __future__ import annotations

import socket
from typing import Any, Iterator

import pytest

from mylm.providers import Endpoint, create_llm, transport
from mylm.providers.failures import Place
from mylm.agent.turn import stream_turn
from tests.providers.helpers import TOOL_CALL, collect, request
from tests.providers.servers import Completion, OpenAIServer

QUICKACK = getattr(socket, "TCP_QUICKACK", None)
needs_quickack = pytest.mark.skipif(
    QUICKACK is None, reason="TCP_QUICKACK is Linux's; elsewhere no connection is kept"
)


def counting(server: OpenAIServer) -> list[Any]:
    """The addresses of the connections the server accepts, in order."""
    connections: list[Any] = []
    accept = server._httpd.process_request

    def process(req: Any, address: Any) -> None:
        connections.append(address)
        accept(req, address)

    server._httpd.process_request = process  # type: ignore[method-assign]
    return connections


def turn(llm: Any) -> None:
    steps = stream_turn(llm, request(), multiple_calls=False, shown=[])
    while True:
        try:
            next(steps)
        except StopIteration:
            return


@needs_quickack
def test_whole_answers_share_one_connection() -> None:
    with OpenAIServer(["one", "two", "three"], delay=0) as server:
        connections = counting(server)
        llm = create_llm(Endpoint(provider="openai", base_url=server.base_url, model="m"))
        texts = [collect(llm.stream(request()))[0] for _ in range(3)]
    assert texts == ["one", "two", "three"] and len(connections) == 1


@needs_quickack
def test_a_turn_closed_early_keeps_its_connection_when_the_rest_has_arrived() -> None:
    with OpenAIServer([Completion(TOOL_CALL + "\nand some more text after the call"), "Done."], delay=0,
                      stop_mode="ignore") as server:
        connections = counting(server)
        llm = create_llm(Endpoint(provider="openai", base_url=server.base_url, model="m"))
        for _ in range(2):
            turn(llm)
    assert len(server.requests) == 2 and len(connections) == 1


def test_a_turn_closed_while_the_server_still_streams_drops_its_connection() -> None:
    """A server ignoring the stops goes on sending after the call: nothing waits for it to end."""
    rest = " ".join(f"word{i}" for i in range(12))
    replies = [Completion(TOOL_CALL + "\n" + rest), "Done."]
    with OpenAIServer(replies, delay=0.02, stop_mode="ignore") as server:
        connections = counting(server)
        llm = create_llm(Endpoint(provider="openai", base_url=server.base_url, model="m"))
        for _ in range(2):
            turn(llm)
    assert len(connections) == 2


@needs_quickack
def test_a_connection_idle_too_long_is_not_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transport, "_KEEP_IDLE", -1.0)
    with OpenAIServer(["one", "two"], delay=0) as server:
        connections = counting(server)
        llm = create_llm(Endpoint(provider="openai", base_url=server.base_url, model="m"))
        texts = [collect(llm.stream(request()))[0] for _ in range(2)]
    assert texts == ["one", "two"] and len(connections) == 2


@needs_quickack
def test_a_kept_connection_acks_the_next_answer_at_once() -> None:
    """The test server leaves Nagle on, as llama.cpp's does: each small write of its answer waits for the ACK
    of the one before. On a connection that carried a request before, Linux delays ACKs (up to 40 ms) unless
    told otherwise; the socket must be in quick-ACK mode while the answer is read."""
    assert QUICKACK is not None
    with OpenAIServer(["one", "two"], delay=0) as server:
        session = transport.new_session()
        place = Place("openai", server.base_url, "m", "", False)
        states = []
        for _ in range(2):
            body = b'{"model":"m","stream":true,"messages":[{"role":"user","content":"q"}]}'
            call = transport.HTTPCall("POST", server.base_url + "/chat/completions",
                                      {"Content-Type": "application/json"}, body)
            guard = transport.CallGuard(None, None, place)
            response = transport.send(session, call, guard, connect_timeout=5, read_timeout=5)
            assert guard.sock is not None
            states.append(guard.sock.getsockopt(socket.IPPROTO_TCP, QUICKACK))
            answer: Iterator[bytes] = transport.iter_body(response, guard, idle=5)
            assert b"[DONE]" in b"".join(answer)
            transport.release(response, guard)
            guard.close()
    assert states == [1, 1]
