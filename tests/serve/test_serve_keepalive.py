"""Headers at once, and a stream kept alive while the model reads or thinks (issue 31, item 3). The upstream here
holds its reply until the test has seen what it is waiting for, so "before the first token" is an order of
events, not a time: without the headers (or the keep-alive) the test never opens the gate and fails."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import anthropic
import openai
import pytest

from tests.providers.servers import Completion, OpenAIServer, RecordedRequest
from tests.serve.support import WEATHER, call, serving


class GatedServer(OpenAIServer):
    """Streams its role chunk at once, then holds the rest of each reply until `gate` is set (a model reading a
    long prompt or thinking), in small delayed chunks as the other loopback servers."""

    def __init__(self, **kwargs: Any) -> None:
        self.gate = threading.Event()
        super().__init__(pings=False, **kwargs)

    def events(self, completion: Completion, request: RecordedRequest) -> Iterator[bytes]:
        events = super().events(completion, request)
        yield next(events)
        self.gate.wait(60)
        yield from events


@pytest.fixture
def gated() -> Iterator[tuple[GatedServer, str]]:
    with GatedServer() as upstream, serving(upstream.base_url, status_wait=0.05, keepalive=0.05) as url:
        try:
            yield upstream, url
        finally:
            upstream.gate.set()


REPLY = call("get_weather", '{"city": "Paris"}', "Checking.")
QUESTION = [{"role": "user", "content": "Weather in Paris?"}]


def test_openai_headers_arrive_before_the_first_token(gated: tuple[GatedServer, str]) -> None:
    upstream, url = gated
    upstream.script([REPLY])
    with openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=30) as api:
        # `create(stream=True)` returns once the response's headers are in; the upstream has sent no token yet.
        stream = api.chat.completions.create(model="m", stream=True, tools=[WEATHER], messages=QUESTION)
        assert not upstream.gate.is_set()
        upstream.gate.set()
        calls = [c.function.name for chunk in stream for choice in chunk.choices
                 for c in choice.delta.tool_calls or [] if c.function and c.function.name]
    assert calls == ["get_weather"]


def test_anthropic_headers_and_message_start_arrive_before_the_first_token(gated: tuple[GatedServer, str]) -> None:
    upstream, url = gated
    upstream.script([REPLY])
    api = anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=30)
    tool = {"name": "get_weather", "description": "Weather.", "input_schema": WEATHER["function"]["parameters"]}  # type: ignore[index]
    with api, api.messages.stream(model="m", max_tokens=512, tools=[tool], messages=QUESTION) as stream:  # type: ignore[list-item]
        events = iter(stream)
        assert next(events).type == "message_start" and not upstream.gate.is_set()
        upstream.gate.set()
        rest = [event.type for event in events]
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use" and rest[-1] == "message_stop"


def raw_stream(url: str, path: str, body: dict[str, Any]) -> tuple[http.client.HTTPConnection,
                                                                    http.client.HTTPResponse]:
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    connection.request("POST", path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    return connection, connection.getresponse()


@pytest.mark.parametrize("path, body, keepalive", [
    ("/v1/chat/completions", {"model": "m", "stream": True, "tools": [WEATHER], "messages": QUESTION},
     b": keep-alive\n\n"),
    # The Responses API's own `response.in_progress` again, not a comment: Codex times out on events, and its SSE
    # reader yields none for a comment (it reconnected after 300 s of comments while the 1.5B read its prompt).
    ("/v1/responses", {"model": "m", "stream": True, "input": "Weather in Paris?", "tools": [
        {"type": "function", **WEATHER["function"]}]}, b"event: response.in_progress\n"),  # type: ignore[dict-item]
    # An empty delta of a thinking block, not a `ping`: Anthropic's SDKs swallow pings, and Claude Code times out
    # on the events its SDK yields (it resends the request after 300 s without one).
    ("/v1/messages", {"model": "m", "stream": True, "max_tokens": 512, "messages": QUESTION, "tools": [
        {"name": "get_weather", "input_schema": WEATHER["function"]["parameters"]}]},  # type: ignore[index]
     b'"delta":{"type":"thinking_delta","thinking":""}'),
])
def test_a_silent_stream_is_kept_alive_in_the_apis_own_way(gated: tuple[GatedServer, str], path: str,
                                                           body: dict[str, Any], keepalive: bytes) -> None:
    upstream, url = gated
    upstream.script([REPLY])
    connection, response = raw_stream(url, path, body)
    try:
        assert response.status == 200 and not upstream.gate.is_set()
        seen = b""
        opening = 1 if path == "/v1/responses" else 0  # the opening `response.in_progress` is not a keep-alive
        while seen.count(keepalive) < 2 + opening:  # two: the stream keeps being kept alive, not once
            piece = response.read1(4096)
            assert piece, seen
            seen += piece
        # The API's opening event came first (Anthropic's SDK refuses a ping before `message_start`).
        assert seen.index(b"data: ") < seen.index(keepalive) or path != "/v1/messages"
        upstream.gate.set()
        seen += response.read()
    finally:
        connection.close()
    assert b"get_weather" in seen and seen.rstrip().endswith((b"[DONE]", b'{"type":"message_stop"}'))\
        or b"response.completed" in seen


def test_an_upstream_refusal_is_still_an_http_status(upstream: OpenAIServer) -> None:
    """Within the moment the headers wait, an upstream that refuses the request (at once, as they do) is an
    HTTP error status the client can act on, not a 200 with an error event."""
    from tests.providers.servers import HTTPError

    with serving(upstream.base_url, status_wait=30) as url:
        upstream.script([HTTPError(400, {"error": {"message": "max_tokens is too large for this model"}})])
        api = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=30)
        with api, pytest.raises(openai.BadRequestError):
            api.chat.completions.create(model="m", stream=True, tools=[WEATHER], messages=QUESTION)


def test_responses_keep_alives_are_numbered_events_the_sdk_reads(gated: tuple[GatedServer, str]) -> None:
    """Every event of the stream, keep-alives included, is numbered one above the last, and the official SDK reads
    the keep-alives as the status they repeat and still assembles the call."""
    upstream, url = gated
    upstream.script([REPLY])
    tools = [{"type": "function", **WEATHER["function"]}]  # type: ignore[dict-item]
    with openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=30) as api:
        with api.responses.stream(model="m", input="Weather in Paris?", tools=tools) as stream:  # type: ignore[arg-type]
            kinds: list[str] = []
            numbers: list[int] = []
            for event in stream:
                kinds.append(event.type)
                numbers.append(event.sequence_number)
                if kinds.count("response.in_progress") == 3:
                    upstream.gate.set()  # two keep-alives came while the model was silent
            final = stream.get_final_response()
    assert numbers == list(range(len(numbers)))
    assert kinds[:4] == ["response.created"] + ["response.in_progress"] * 3 and kinds[-1] == "response.completed"
    assert [item.name for item in final.output if item.type == "function_call"] == ["get_weather"]


def test_messages_keep_alives_are_a_thinking_block_the_sdk_yields_and_the_message_goes_on(
        gated: tuple[GatedServer, str]) -> None:
    """While the model is silent the SDK yields events (an empty thinking block growing by empty deltas); the
    model's own thinking goes on in that block, and the call follows it."""
    upstream, url = gated
    upstream.script([REPLY])
    api = anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=30)
    tool = {"name": "get_weather", "description": "Weather.", "input_schema": WEATHER["function"]["parameters"]}  # type: ignore[index]
    with api, api.messages.stream(model="m", max_tokens=512, tools=[tool], messages=QUESTION) as stream:  # type: ignore[list-item]
        kinds: list[str] = []
        for event in stream:
            kinds.append(event.type)
            if kinds.count("content_block_delta") == 2 and not upstream.gate.is_set():
                upstream.gate.set()  # two keep-alives came while the model was silent
        final = stream.get_final_message()
    # (The SDK yields a `thinking` event of its own after each thinking delta.)
    assert kinds[:3] == ["message_start", "content_block_start", "content_block_delta"]
    assert [block.type for block in final.content] == ["thinking", "tool_use"]
    assert final.content[0].thinking == "Checking." and final.stop_reason == "tool_use"  # type: ignore[union-attr]


def test_a_message_that_answers_at_once_has_no_keep_alive_block(upstream: OpenAIServer) -> None:
    upstream.script(["It is sunny."])
    with serving(upstream.base_url, keepalive=0.05) as url:
        api = anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=30)
        with api, api.messages.stream(model="m", max_tokens=512, messages=QUESTION) as stream:
            final = stream.get_final_message()
    assert [block.type for block in final.content] == ["text"]
