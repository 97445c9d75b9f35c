"""Ollama's native API (`/api/chat`, `/api/tags`, `/api/show`, `/api/version`) driven by the official `ollama`
Python library against `mylm serve` in front of a scripted model that streams in small delayed chunks: tool calls
come back with their arguments as objects, streamed and not, and a tool result goes round."""

from __future__ import annotations

import http.client
import json
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.providers.servers import Completion, OpenAIServer
from tests.serve.support import SEARCH, WEATHER, call, serving, tracked

ollama = pytest.importorskip("ollama")

QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]


def client(url: str, **headers: str) -> Any:
    return tracked(ollama.Client(host=url, timeout=30, headers=headers or None))  # closed after the test


def post(url: str, path: str, body: Any, method: str = "POST", kind: str = "application/json"
         ) -> tuple[int, str, bytes]:
    """(status, content type, body) of a raw request with the Content-Type `kind` ("": none)."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        connection.request(method, path, body=json.dumps(body) if body is not None else None,
                           headers={"Content-Type": kind} if kind else {})
        response = connection.getresponse()
        return response.status, response.getheader("Content-Type") or "", response.read()
    finally:
        connection.close()


def test_a_call_comes_back_with_its_arguments_as_an_object(upstream: OpenAIServer, served: str) -> None:
    upstream.script([call("get_weather", '{"city": "Paris", "days": 2}', "I will check the weather.")])
    reply = client(served).chat(model="qwen", messages=QUESTION, tools=[WEATHER], stream=False)
    assert reply.done and reply.done_reason == "stop" and reply.model == "qwen"
    (tool_call,) = reply.message.tool_calls or []
    assert tool_call.function.name == "get_weather" and tool_call.function.arguments == {"city": "Paris", "days": 2}
    # The prose before the call is thinking, never content (a client would take content for the answer).
    assert reply.message.content == "" and reply.message.thinking == "I will check the weather."
    # The upstream's own counts (the scripted one reports 17 prompt tokens), and a duration in nanoseconds.
    assert reply.prompt_eval_count == 17 and reply.eval_count and reply.total_duration > 0
    assert reply.eval_duration > 0 and reply.prompt_eval_duration > 0  # clients divide by them
    assert "get_weather" in upstream.requests[0].body["messages"][0]["content"]


def test_a_streamed_call_arrives_in_one_chunk_then_done(upstream: OpenAIServer, served: str) -> None:
    upstream.script([call("get_weather", '{"city": "Paris"}', "Checking.") + "\n" +
                     call("search_files", '{"pattern": "*.md"}')])
    parts = list(client(served).chat(model="m", messages=QUESTION, tools=[WEATHER, SEARCH], stream=True))
    assert [p.done for p in parts].count(True) == 1 and parts[-1].done and parts[-1].done_reason == "stop"
    with_calls = [p for p in parts if p.message.tool_calls]
    assert len(with_calls) == 1 and not with_calls[0].done  # both calls together, as Ollama sends them
    calls = [(c.function.name, c.function.arguments) for c in with_calls[0].message.tool_calls]
    assert calls == [("get_weather", {"city": "Paris"}), ("search_files", {"pattern": "*.md"})]
    assert "".join(p.message.thinking or "" for p in parts) == "Checking."
    assert "".join(p.message.content or "" for p in parts) == ""
    assert parts[-1].eval_count and parts[-1].prompt_eval_count == 17


def test_a_tool_result_goes_round_and_the_answer_streams(upstream: OpenAIServer, served: str) -> None:
    upstream.script([call("get_weather", '{"city": "Paris"}', "Let me look."), "It is sunny and 21 C in Paris."])
    api = client(served)
    first = api.chat(model="m", messages=QUESTION, tools=[WEATHER], stream=False)
    # As Ollama's examples do it: the reply's message appended as it came, then the result naming its tool.
    conversation = [*QUESTION, first.message, {"role": "tool", "content": "sunny, 21 C", "tool_name": "get_weather"}]
    parts = list(api.chat(model="m", messages=conversation, tools=[WEATHER], stream=True))
    assert "".join(p.message.content or "" for p in parts) == "It is sunny and 21 C in Paris."
    assert not any(p.message.tool_calls for p in parts) and parts[-1].done_reason == "stop"
    sent = upstream.requests[1].body["messages"]
    assert sent[2]["role"] == "assistant" and "<name>get_weather</name>" in sent[2]["content"]
    assert "<observation>\nsunny, 21 C\n</observation>" in sent[3]["content"]


def test_results_are_matched_to_the_calls_they_answer(upstream: OpenAIServer, served: str) -> None:
    upstream.script(["Done."])
    assistant = {"role": "assistant", "content": "", "tool_calls": [
        {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
        {"id": "call_x", "function": {"name": "search_files", "arguments": {"pattern": "*.md"}}}]}
    api = client(served)
    # By tool name, by the id a newer client sends, by order when neither is given.
    for results in ([{"role": "tool", "content": "README.md", "tool_name": "search_files"},
                     {"role": "tool", "content": "rain", "tool_name": "get_weather"}],
                    [{"role": "tool", "content": "README.md", "tool_call_id": "call_x"},
                     {"role": "tool", "content": "rain"}]):
        upstream.script(["Done."])
        reply = api.chat(model="m", messages=[*QUESTION, assistant, *results], tools=[WEATHER, SEARCH], stream=False)
        assert reply.message.content == "Done."
        told = upstream.requests[-1].body["messages"][3]["content"]
        assert told.index("README.md") < told.index("rain")  # in the order the client sent them
    # A result no call is waiting for is refused, naming why.
    for extra in ({"role": "tool", "content": "x", "tool_name": "get_time"},
                  {"role": "tool", "content": "x", "tool_name": "get_weather"}):
        with pytest.raises(ollama.ResponseError) as refused:
            api.chat(model="m", messages=[*QUESTION, assistant,
                                          {"role": "tool", "content": "rain", "tool_name": "get_weather"}, extra],
                     tools=[WEATHER, SEARCH], stream=False)
        assert refused.value.status_code == 400 and f"the tool {extra['tool_name']!r}" in refused.value.error


def test_options_are_forwarded(upstream: OpenAIServer, served: str) -> None:
    upstream.script(["Hello."])
    client(served).chat(model="m", messages=QUESTION, stream=False, keep_alive="5m",
                        options={"temperature": 0.2, "top_k": 7, "num_predict": 99, "seed": 3,
                                 "repeat_penalty": 1.1, "min_p": 0.05, "stop": ["\nUser:"], "num_ctx": 4096})
    sent = upstream.requests[0].body
    assert (sent["temperature"], sent["top_k"], sent["max_tokens"], sent["seed"]) == (0.2, 7, 99, 3)
    assert sent["repeat_penalty"] == 1.1 and sent["min_p"] == 0.05 and "\nUser:" in sent["stop"]


def test_format_json_mode_and_a_schema_are_served(upstream: OpenAIServer, served: str) -> None:
    # JSON mode takes the JSON out of the prose around it; a schema is checked, and a reply that breaks it is
    # sent back once with what was wrong.
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "celsius": {"type": "integer"}},
              "required": ["city", "celsius"]}
    upstream.script(['Here: {"ok": true}', '{"city": "Paris"}', '{"city": "Paris", "celsius": 21}'])
    api = client(served)
    assert json.loads(api.chat(model="m", messages=QUESTION, format="json", stream=False).message.content or "") \
        == {"ok": True}
    streamed = "".join(part.message.content or "" for part in api.chat(model="m", messages=QUESTION,
                                                                          format=schema, stream=True))
    assert json.loads(streamed) == {"city": "Paris", "celsius": 21}
    assert "celsius" in upstream.requests[-1].body["messages"][-1]["content"]


def test_errors_come_in_ollamas_shape(upstream: OpenAIServer, served: str) -> None:
    api = client(served)
    status, _, body = post(served, "/api/chat", {"model": "m", "messages": QUESTION, "format": "yaml"})
    assert status == 400 and "format must be" in json.loads(body)["error"]  # the library refuses it itself
    with pytest.raises(ollama.ResponseError) as bad:
        api.chat(model="m", messages=[{"role": "tool", "content": "x"}], stream=True).__next__()
    assert bad.value.status_code == 400 and "no unanswered tool call" in bad.value.error
    status, kind, body = post(served, "/api/pull", {"model": "x"})
    assert status == 404 and kind.startswith("application/json") and json.loads(body) == {
        "error": "no route POST /api/pull"}
    # Refused before routing (an untyped body, as `curl -d` sends): still Ollama's shape.
    status, _, body = post(served, "/api/chat", {"model": "m", "messages": QUESTION}, kind="")
    assert status == 415 and list(json.loads(body)) == ["error"] and "application/json" in json.loads(body)["error"]


def test_an_upstream_failure_mid_stream_is_an_error_line(upstream: OpenAIServer, served: str) -> None:
    upstream.script([Completion("Partial answer", error_after={"error": {"message": "engine crashed"}})])
    with pytest.raises(ollama.ResponseError) as failed:
        list(client(served).chat(model="m", messages=QUESTION, stream=True))
    assert "engine crashed" in failed.value.error


def test_the_client_key_is_asked_for(upstream: OpenAIServer) -> None:
    with serving(upstream.base_url, client_key="s3cret") as url:
        with pytest.raises(ollama.ResponseError) as refused:
            client(url).list()
        assert refused.value.status_code == 401 and "invalid client key" in refused.value.error
        assert [m.model for m in client(url, Authorization="Bearer s3cret").list().models] == ["test-model"]


def test_models_version_show_and_preload(upstream: OpenAIServer, served: str) -> None:
    api = client(served)
    assert [m.model for m in api.list().models] == ["test-model"]
    shown = api.show("test-model")
    assert "tools" in (shown.capabilities or []) and shown.modelinfo["general.architecture"] == "mylm"
    status, _, body = post(served, "/api/version", None, "GET")
    assert status == 200 and json.loads(body)["version"].count(".") == 2
    loaded = api.chat(model="test-model", messages=[], stream=False)
    assert loaded.done and loaded.done_reason == "load" and upstream.requests == []


def test_a_stream_is_ndjson_and_kept_alive_before_its_first_line(upstream: OpenAIServer) -> None:
    from tests.serve.test_serve_keepalive import GatedServer

    with GatedServer() as gated, serving(gated.base_url, status_wait=0.05, keepalive=0.05) as url:
        gated.script(["Hi there."])
        parts = urlsplit(url)
        connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
        try:
            connection.request("POST", "/api/chat", body=json.dumps({"model": "m", "messages": QUESTION}),
                               headers={"Content-Type": "application/json"})
            response = connection.getresponse()  # no `stream` field: Ollama streams unless told not to
            assert response.status == 200, response.read()
            assert response.getheader("Content-Type", "").startswith("application/x-ndjson")
            # Before the model has written a token, a chunk with no content keeps the stream open.
            first = json.loads(response.readline())
            assert first["message"] == {"role": "assistant", "content": ""} and first["done"] is False
            gated.gate.set()
            lines = [json.loads(line) for line in response.read().splitlines()]
        finally:
            gated.gate.set()
            connection.close()
    assert "".join(line["message"]["content"] for line in lines) == "Hi there." and lines[-1]["done"] is True
    assert len([line for line in lines if line["message"]["content"]]) > 1  # in pieces, as the model wrote them

