"""Load: many requests at once, and a client that goes away cancels its upstream call at once."""

from __future__ import annotations

import http.client
import json
import socket
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import openai
import pytest

from tests.providers.servers import Completion, Hang, OpenAIServer
from tests.serve.support import WEATHER, call, tracked


def test_a_client_leaving_a_stream_cancels_the_upstream_stream(upstream: OpenAIServer, served: str) -> None:
    upstream.script([Completion("Counting forever: ", endless=True)])
    stream = openai.OpenAI(base_url=served + "/v1", api_key="x", max_retries=0).chat.completions.create(
        model="m", messages=[{"role": "user", "content": "count"}], stream=True)
    seen = ""
    for chunk in stream:
        seen += chunk.choices[0].delta.content or "" if chunk.choices else ""
        if len(seen) > 200:
            break
    stream.close()
    assert upstream.disconnected.wait(10), "the upstream stream was still being read after the client left"


def test_a_client_leaving_before_the_answer_cancels_the_upstream_call(upstream: OpenAIServer, served: str) -> None:
    upstream.script([Hang()])
    parts = urlsplit(served)
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": [WEATHER]}).encode()
    with socket.create_connection((parts.hostname, parts.port)) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        assert upstream.wait_for_requests(1)
    assert upstream.disconnected.wait(10), "the upstream call went on after the client left"
    upstream.script(["next"])
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    connection.request("GET", "/health")
    health = json.loads(connection.getresponse().read())
    connection.close()
    assert health["status"] == "ok" and health["active_requests"] == 0


def test_many_streaming_clients_at_once_each_get_their_own_answer(
    upstream: OpenAIServer, served: str, caplog: pytest.LogCaptureFixture
) -> None:
    clients = 24
    upstream.script([call("get_weather", json.dumps({"city": f"city{i}"})) for i in range(clients)])
    api = tracked(openai.OpenAI(base_url=served + "/v1", api_key="x", max_retries=0, timeout=60))

    def ask(i: int) -> str:
        arguments = ""
        for chunk in api.chat.completions.create(model="m", stream=True, tools=[WEATHER],
                                                 messages=[{"role": "user", "content": f"weather {i}"}]):
            for piece in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
                arguments += piece.function.arguments or "" if piece.function else ""
        return str(json.loads(arguments)["city"])

    with ThreadPoolExecutor(clients) as pool:
        cities = list(pool.map(ask, range(clients)))
    # The scripted replies are handed out in arrival order, so which client got which city is not fixed; every
    # reply reached exactly one client, whole.
    assert sorted(cities) == sorted(f"city{i}" for i in range(clients))
    # One upstream pool sized for the requests served at once: no connection was opened only to be thrown away.
    assert not [r for r in caplog.records if "pool is full" in r.getMessage()]
