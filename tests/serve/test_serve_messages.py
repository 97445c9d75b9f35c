"""`POST /v1/messages` driven by the official Anthropic SDK (streaming and not, multi-turn with tool results)."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

from tests.providers.servers import Completion, OpenAIServer
from tests.serve.support import call, tracked

WEATHER = {
    "name": "get_weather",
    "description": "The current weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]


def client(url: str, key: str = "unused") -> anthropic.Anthropic:
    return tracked(anthropic.Anthropic(base_url=url, api_key=key, max_retries=0, timeout=30))


def test_a_call_is_a_tool_use_block(upstream: OpenAIServer, served: str) -> None:
    upstream.script([call("get_weather", '{"city": "Paris"}', "I will check.")])
    message = client(served).messages.create(model="claude-x", max_tokens=256, messages=QUESTION, tools=[WEATHER],
                                             system="Be terse.")
    assert message.stop_reason == "tool_use" and message.model == "claude-x"
    text, tool_use = message.content
    assert text.type == "thinking" and text.thinking == "I will check."  # type: ignore[union-attr]
    assert tool_use.type == "tool_use" and tool_use.name == "get_weather" and tool_use.input == {"city": "Paris"}
    assert tool_use.id.startswith("toolu_")
    assert "Be terse." in upstream.requests[0].body["messages"][0]["content"]


def test_streamed_tool_use_and_the_final_message(upstream: OpenAIServer, served: str) -> None:
    upstream.script([Completion(call("get_weather", '{"city": "Paris"}', "Checking."), reasoning="Paris, so look.")])
    events: list[str] = []
    with client(served).messages.stream(model="m", max_tokens=256, messages=QUESTION, tools=[WEATHER]) as stream:
        for event in stream:
            events.append(event.type)
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    kinds = [block.type for block in final.content]
    assert kinds == ["thinking", "tool_use"]
    # The reasoning, then the prose before the call (reasoning too: as text it would come before the call).
    assert final.content[0].thinking.startswith("Paris, so look.\n\n")  # type: ignore[union-attr]
    assert final.content[1].input == {"city": "Paris"}  # type: ignore[union-attr]
    assert events[0] == "message_start" and events[-1] == "message_stop" and "content_block_start" in events


def test_multi_turn_with_a_tool_result(upstream: OpenAIServer, served: str) -> None:
    upstream.script([call("get_weather", '{"city": "Paris"}'), "Sunny, 21 C."])
    api = client(served)
    first = api.messages.create(model="m", max_tokens=256, messages=QUESTION, tools=[WEATHER])
    tool_use = first.content[-1]
    conversation: list[Any] = [
        *QUESTION,
        {"role": "assistant", "content": [block.model_dump() for block in first.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_use.id,  # type: ignore[union-attr]
                                      "content": [{"type": "text", "text": "sunny, 21 C"}]}]},
    ]
    with api.messages.stream(model="m", max_tokens=256, messages=conversation, tools=[WEATHER]) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "end_turn" and final.content[0].text == "Sunny, 21 C."  # type: ignore[union-attr]
    before, after = (r.body["messages"] for r in upstream.requests)
    assert after[: len(before)] == before
    assert "<observation>\nsunny, 21 C\n</observation>" in after[-1]["content"]


def test_error_results_and_tool_choice_any(upstream: OpenAIServer, served: str) -> None:
    upstream.script(["Just guessing: sunny.", call("get_weather", '{"city": "Paris"}')])
    messages: list[Any] = [*QUESTION, {"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Pariss"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "is_error": True,
                                      "content": "no such city"}]}]
    reply = client(served).messages.create(model="m", max_tokens=256, messages=messages, tools=[WEATHER],
                                           tool_choice={"type": "any"})
    assert reply.stop_reason == "tool_use"
    first = upstream.requests[0].body["messages"]
    assert "Error from get_weather: no such city" in first[-1]["content"]
    assert "tool call" in upstream.requests[1].body["messages"][-1]["content"]


def test_errors_come_in_anthropics_shape(upstream: OpenAIServer, served: str) -> None:
    with pytest.raises(anthropic.BadRequestError) as raised:
        client(served).messages.create(model="m", max_tokens=256, messages=[{"role": "robot", "content": "x"}])
    assert raised.value.body["type"] == "error"  # type: ignore[index]
    assert raised.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    with pytest.raises(anthropic.BadRequestError):
        client(served).messages.create(model="m", max_tokens=256, messages=[
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "never", "content": "x"}]}])


def test_system_messages_inside_messages_join_the_system_prompt(upstream: OpenAIServer, served: str) -> None:
    # Claude Code sends some of its system text as messages with the role "system".
    upstream.script(["Hello."])
    messages: list[Any] = [*QUESTION, {"role": "system", "content": [{"type": "text", "text": "Mind the cwd."}]}]
    reply = client(served).messages.create(model="m", max_tokens=64, messages=messages, tools=[WEATHER])
    assert reply.content[0].text == "Hello."  # type: ignore[union-attr]
    sent = upstream.requests[0].body["messages"]
    assert "Mind the cwd." in sent[0]["content"] and all(m["role"] != "system" for m in sent[1:])
