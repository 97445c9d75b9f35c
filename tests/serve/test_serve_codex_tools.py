"""Codex's namespace tools and usage nobody counted (issue 31, item 5): `multi_agent_v1`'s functions are offered
to the model and its calls go back to Codex in their namespace; tools that cannot be offered are logged with why;
a reply whose upstream counted no tokens reports its usage as unknown (OpenAI routes) or estimated (Anthropic's,
whose schema has no unknown), never as 0."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import anthropic
import pytest

from tests.providers.servers import OpenAIServer
from tests.serve.support import call, openai_client, serving

SPAWN = {"type": "function", "name": "spawn_agent", "description": "Spawn a sub-agent for a task.", "strict": False,
         "parameters": {"type": "object", "properties": {"message": {"type": "string"},
                                                         "agent_type": {"type": "string"}},
                        "required": ["message"], "additionalProperties": False}}
WAIT = {"type": "function", "name": "wait_agent", "description": "Wait for agents.", "strict": False,
        "parameters": {"type": "object", "properties": {"ids": {"type": "array", "items": {"type": "string"}}},
                       "required": ["ids"]}}
#: The tools as Codex 0.171 sends them: plain functions, the `multi_agent_v1` namespace, hosted web search.
TOOLS = [
    {"type": "function", "name": "exec_command", "description": "Run a command.", "strict": False,
     "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}},
    {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents working beside you.",
     "tools": [SPAWN, WAIT]},
    {"type": "web_search", "external_web_access": False},
]


def test_namespace_functions_are_offered_and_called_back_in_their_namespace(
    upstream: OpenAIServer, served: str, caplog: pytest.LogCaptureFixture
) -> None:
    upstream.script([call("multi_agent_v1.spawn_agent", '{"message": "Review the parser."}', "Delegating."),
                     "The sub-agent is on it."])
    api = openai_client(served)
    with caplog.at_level(logging.INFO, logger="mylm.serve"):
        first = api.responses.create(model="local", instructions="You are Codex.", input="Review the parser.",
                                     tools=TOOLS, store=False)  # type: ignore[arg-type]
    system = upstream.requests[0].body["messages"][0]["content"]
    assert "<name>multi_agent_v1.spawn_agent</name>" in system and "Sub-agents working beside you." in system
    assert "web_search" in caplog.text and "not offered" in caplog.text
    (item,) = [o for o in first.output if o.type == "function_call"]
    assert item.name == "spawn_agent" and item.namespace == "multi_agent_v1"  # type: ignore[union-attr]
    assert json.loads(item.arguments) == {"message": "Review the parser."}  # type: ignore[union-attr]
    # The next request, as Codex sends it: the call back with its namespace, and its output.
    events = list(api.responses.create(model="local", instructions="You are Codex.", stream=True, store=False,
                                       tools=TOOLS, input=[  # type: ignore[arg-type]
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Review the parser."}]},
        {"type": "function_call", "call_id": item.call_id, "namespace": "multi_agent_v1",  # type: ignore[union-attr]
         "name": "spawn_agent", "arguments": item.arguments},  # type: ignore[union-attr]
        {"type": "function_call_output", "call_id": item.call_id, "output": '{"agent_id": "a1"}'}]))  # type: ignore[union-attr]
    assert events[-1].response.output_text == "The sub-agent is on it."  # type: ignore[union-attr]
    history = upstream.requests[1].body["messages"]
    assert "<name>multi_agent_v1.spawn_agent</name>" in history[2]["content"]


def test_a_streamed_namespace_call_carries_its_namespace(upstream: OpenAIServer, served: str) -> None:
    upstream.script([call("multi_agent_v1.wait_agent", '{"ids": ["a1"]}')])
    events = list(openai_client(served).responses.create(model="local", input="Wait for a1.", tools=TOOLS,  # type: ignore[arg-type]
                                                         stream=True, store=False))
    done = [e.item for e in events if e.type == "response.output_item.done"]  # type: ignore[union-attr]
    assert [(d.type, d.name, getattr(d, "namespace", None)) for d in done] == [
        ("function_call", "wait_agent", "multi_agent_v1")]


@pytest.fixture
def uncounted() -> Iterator[tuple[OpenAIServer, str]]:
    """An upstream whose stream carries no usage (llama-cpp-python's server)."""
    with OpenAIServer(usage=False) as upstream, serving(upstream.base_url) as url:
        yield upstream, url


def test_openai_usage_nobody_counted_is_estimated_never_null_or_zero(uncounted: tuple[OpenAIServer, str]) -> None:
    # smolagents reads `usage.prompt_tokens` of every answer: a null usage failed its run ("'NoneType' object has
    # no attribute 'prompt_tokens'") when the 1.5B's stream was closed once its call was complete.
    upstream, url = uncounted
    answer = "It is sunny in Paris today, 21 degrees."  # 39 characters: 10 tokens at 4 a token
    upstream.script([answer] * 4)
    question = [{"role": "user", "content": "What is the weather like in Paris today, please?"}]  # 48: 12
    api = openai_client(url)
    whole = api.chat.completions.create(model="m", messages=question).usage  # type: ignore[arg-type]
    chunks = list(api.chat.completions.create(model="m", stream=True, stream_options={"include_usage": True},
                                              messages=question))  # type: ignore[arg-type]
    assert chunks[-1].choices == []
    for usage in (whole, chunks[-1].usage):
        assert usage is not None and (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (12, 10, 22)
    for response in (api.responses.create(model="m", input=question, store=False),  # type: ignore[arg-type]
                     [e for e in api.responses.create(model="m", input=question, store=False,  # type: ignore[arg-type]
                                                      stream=True) if e.type == "response.completed"][0].response):
        assert response.usage is not None and (response.usage.input_tokens, response.usage.output_tokens) == (12, 10)


def test_anthropic_usage_nobody_counted_is_estimated(uncounted: tuple[OpenAIServer, str]) -> None:
    upstream, url = uncounted
    upstream.script(["It is sunny in Paris today, 21 degrees."] * 2)
    question = [{"role": "user", "content": "What is the weather like in Paris today, please?"}]
    with anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=30) as api:
        message = api.messages.create(model="m", max_tokens=64, messages=question)  # type: ignore[arg-type]
        with api.messages.stream(model="m", max_tokens=64, messages=question) as stream:  # type: ignore[arg-type]
            streamed = stream.get_final_message()
    for usage in (message.usage, streamed.usage):
        assert usage.input_tokens == 12 and usage.output_tokens == 10  # 48 and 39 characters, 4 a token
