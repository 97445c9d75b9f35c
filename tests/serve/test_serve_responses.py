"""`POST /v1/responses` driven by the official OpenAI SDK: function calls, their outputs, streaming events."""

from __future__ import annotations

import json
from typing import Any

import openai

from tests.providers.servers import Completion, OpenAIServer
from tests.serve.support import call, tracked

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def client(url: str) -> openai.OpenAI:
    return tracked(openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=30))


def test_a_call_is_a_function_call_item(upstream: OpenAIServer, served: str) -> None:
    upstream.script([call("get_weather", '{"city": "Paris"}', "Checking.")])
    response = client(served).responses.create(model="codex-x", input="Weather in Paris?", tools=[WEATHER],
                                               instructions="You are helpful.", store=False)
    assert response.status == "completed" and response.model == "codex-x"
    kinds = [item.type for item in response.output]
    assert kinds == ["reasoning", "function_call"]
    function_call = response.output[1]
    assert function_call.name == "get_weather" and json.loads(function_call.arguments) == {"city": "Paris"}  # type: ignore[union-attr]
    assert response.output_text == "" and response.output[0].content[0].text == "Checking."  # type: ignore[union-attr,index]
    assert "You are helpful." in upstream.requests[0].body["messages"][0]["content"]


def test_streamed_events_and_a_second_turn_with_the_output(upstream: OpenAIServer, served: str) -> None:
    upstream.script([Completion(call("get_weather", '{"city": "Paris"}'), reasoning="look it up"), "Sunny."])
    api = client(served)
    kinds: list[str] = []
    final = None
    for event in api.responses.create(model="m", input="Weather in Paris?", tools=[WEATHER], stream=True):
        kinds.append(event.type)
        if event.type == "response.completed":
            final = event.response
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert "response.function_call_arguments.delta" in kinds and "response.function_call_arguments.done" in kinds
    assert final is not None
    function_call = next(item for item in final.output if item.type == "function_call")
    second: list[Any] = [
        {"role": "user", "content": "Weather in Paris?"},
        {"type": "function_call", "call_id": function_call.call_id, "name": "get_weather",  # type: ignore[union-attr]
         "arguments": function_call.arguments},  # type: ignore[union-attr]
        {"type": "function_call_output", "call_id": function_call.call_id, "output": "sunny"},  # type: ignore[union-attr]
    ]
    answer = api.responses.create(model="m", input=second, tools=[WEATHER])
    assert answer.output_text == "Sunny."
    assert "<observation>\nsunny\n</observation>" in upstream.requests[1].body["messages"][-1]["content"]
